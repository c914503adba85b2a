//! Job diffs as Nomad's CLI prints them (`job history -p`, later `job plan`): `+`, `-` and `+/-`
//! markers, nested objects in braces, names and values aligned. No colors.

use api::types::{DiffType, FieldDiff, JobDiff, ObjectDiff, TaskDiff, TaskGroupDiff};

/// The marker of a diff type and its width.
fn marker(diff_type: DiffType) -> (&'static str, usize) {
    match diff_type {
        DiffType::Added => ("+ ", 2),
        DiffType::Deleted => ("- ", 2),
        DiffType::Edited => ("+/- ", 4),
        DiffType::None => ("", 0),
    }
}

fn spaces(n: usize) -> String {
    " ".repeat(n)
}

/// The whole job; with `verbose`, added and deleted groups and tasks are expanded too.
pub fn format_job_diff(job: &JobDiff, verbose: bool) -> String {
    let mut out = format!("{}Job: {:?}\n", marker(job.diff_type).0, job.id);
    let (longest_field, mut longest_marker) = longest(&job.fields, &job.objects);
    for tg in &job.task_groups {
        longest_marker = longest_marker.max(marker(tg.diff_type).1);
    }
    if job.diff_type == DiffType::Edited || verbose {
        let fo = aligned(&job.fields, &job.objects, 0, longest_field, longest_marker);
        if !fo.is_empty() {
            out += &fo;
            out.push('\n');
        }
    }
    for tg in &job.task_groups {
        let prefix = longest_marker - marker(tg.diff_type).1;
        out += &format_group(tg, prefix, verbose);
        out.push('\n');
    }
    out
}

fn format_group(tg: &TaskGroupDiff, tg_prefix: usize, verbose: bool) -> String {
    let mut out = format!(
        "{}{}Task Group: {:?}",
        marker(tg.diff_type).0,
        spaces(tg_prefix),
        tg.name
    );
    if tg.updates.is_empty() {
        out.push('\n');
    } else {
        let updates: Vec<String> = tg
            .updates
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect();
        out += &format!(" ({})\n", updates.join(", "));
    }
    let (longest_field, mut longest_marker) = longest(&tg.fields, &tg.objects);
    for task in &tg.tasks {
        longest_marker = longest_marker.max(marker(task.diff_type).1);
    }
    let sub = tg_prefix + 2;
    if tg.diff_type == DiffType::Edited || verbose {
        let fo = aligned(&tg.fields, &tg.objects, sub, longest_field, longest_marker);
        if !fo.is_empty() {
            out += &fo;
            out.push('\n');
        }
    }
    for task in &tg.tasks {
        let prefix = longest_marker - marker(task.diff_type).1;
        out += &format_task(task, sub, prefix, verbose);
        out.push('\n');
    }
    out
}

fn format_task(task: &TaskDiff, start: usize, task_prefix: usize, verbose: bool) -> String {
    let mut out = format!(
        "{}{}{}Task: {:?}",
        spaces(start),
        marker(task.diff_type).0,
        spaces(task_prefix),
        task.name
    );
    if !task.annotations.is_empty() {
        out += &format!(" ({})", task.annotations.join(", "));
    }
    let collapsed = matches!(task.diff_type, DiffType::Added | DiffType::Deleted) && !verbose;
    if task.diff_type == DiffType::None || collapsed {
        return out;
    }
    out.push('\n');
    let (longest_field, longest_marker) = longest(&task.fields, &task.objects);
    out + &aligned(
        &task.fields,
        &task.objects,
        start + 2,
        longest_field,
        longest_marker,
    )
}

fn format_object(diff: &ObjectDiff, start: usize, key_prefix: usize) -> String {
    let (m, m_len) = marker(diff.diff_type);
    let mut out = format!(
        "{}{m}{}{} {{\n",
        spaces(start),
        spaces(key_prefix),
        diff.name
    );
    let (longest_field, longest_marker) = longest(&diff.fields, &diff.objects);
    out += &aligned(
        &diff.fields,
        &diff.objects,
        start + key_prefix + 2,
        longest_field,
        longest_marker,
    );
    format!("{out}\n{}}}", spaces(start + m_len + key_prefix))
}

fn format_field(diff: &FieldDiff, start: usize, key_prefix: usize, value_prefix: usize) -> String {
    let mut out = format!(
        "{}{}{}{}: {}",
        spaces(start),
        marker(diff.diff_type).0,
        spaces(key_prefix),
        diff.name,
        spaces(value_prefix)
    );
    out += &match diff.diff_type {
        DiffType::Deleted => format!("{:?}", diff.old),
        DiffType::Edited => format!("{:?} => {:?}", diff.old, diff.new),
        _ => format!("{:?}", diff.new),
    };
    if !diff.annotations.is_empty() {
        out += &format!(" ({})", diff.annotations.join(", "));
    }
    out
}

fn aligned(
    fields: &[FieldDiff],
    objects: &[ObjectDiff],
    start: usize,
    longest_field: usize,
    longest_marker: usize,
) -> String {
    let mut out = String::new();
    for (i, f) in fields.iter().enumerate() {
        let key_prefix = longest_marker - marker(f.diff_type).1;
        let value_prefix = longest_field - f.name.len();
        out += &format_field(f, start, key_prefix, value_prefix);
        if i + 1 != fields.len() || !objects.is_empty() {
            out.push('\n');
        }
    }
    for (i, o) in objects.iter().enumerate() {
        let key_prefix = longest_marker - marker(o.diff_type).1;
        out += &format_object(o, start, key_prefix);
        if i + 1 != objects.len() {
            out.push('\n');
        }
    }
    out
}

/// The longest field name and the widest marker among fields and objects.
fn longest(fields: &[FieldDiff], objects: &[ObjectDiff]) -> (usize, usize) {
    let field = fields.iter().map(|f| f.name.len()).max().unwrap_or(0);
    let markers = fields
        .iter()
        .map(|f| marker(f.diff_type).1)
        .chain(objects.iter().map(|o| marker(o.diff_type).1));
    (field, markers.max().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(t: &str, name: &str, old: &str, new: &str) -> FieldDiff {
        FieldDiff {
            diff_type: t.into(),
            name: name.into(),
            old: old.into(),
            new: new.into(),
            annotations: Vec::new(),
        }
    }

    #[test]
    fn an_edited_task_shows_its_changed_fields_and_objects() {
        let diff = JobDiff {
            diff_type: "Edited".into(),
            id: "example".into(),
            fields: vec![field("Edited", "Priority", "50", "60")],
            task_groups: vec![TaskGroupDiff {
                diff_type: "Edited".into(),
                name: "cache".into(),
                tasks: vec![TaskDiff {
                    diff_type: "Edited".into(),
                    name: "redis".into(),
                    annotations: vec!["forces create/destroy update".into()],
                    objects: vec![ObjectDiff {
                        diff_type: "Edited".into(),
                        name: "Config".into(),
                        fields: vec![
                            field("Edited", "image", "redis:6", "redis:7"),
                            field("Added", "args", "", "--x"),
                        ],
                        objects: Vec::new(),
                    }],
                    ..TaskDiff::default()
                }],
                ..TaskGroupDiff::default()
            }],
            ..JobDiff::default()
        };
        assert_eq!(
            format_job_diff(&diff, false),
            "+/- Job: \"example\"\n\
             +/- Priority: \"50\" => \"60\"\n\
             +/- Task Group: \"cache\"\n  \
             +/- Task: \"redis\" (forces create/destroy update)\n    \
             +/- Config {\n      \
             +/- image: \"redis:6\" => \"redis:7\"\n      \
             +   args:  \"--x\"\n        \
             }\n\n"
        );
    }

    #[test]
    fn added_tasks_collapse_unless_verbose() {
        let tg = TaskGroupDiff {
            diff_type: "Edited".into(),
            name: "g".into(),
            tasks: vec![TaskDiff {
                diff_type: "Added".into(),
                name: "t".into(),
                fields: vec![field("Added", "Driver", "", "docker")],
                ..TaskDiff::default()
            }],
            ..TaskGroupDiff::default()
        };
        assert_eq!(
            format_group(&tg, 0, false),
            "+/- Task Group: \"g\"\n  + Task: \"t\"\n"
        );
        assert_eq!(
            format_group(&tg, 0, true),
            "+/- Task Group: \"g\"\n  + Task: \"t\"\n    + Driver: \"docker\"\n"
        );
    }
}
