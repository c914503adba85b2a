use super::*;
use crate::plan::DesiredUpdates;
use crate::{Constraint, Resources, Task, TaskGroup};

fn job() -> Job {
    let mut config = BTreeMap::new();
    config.insert("command".to_string(), Value::from("/bin/sleep"));
    config.insert("args".to_string(), serde_json::json!(["10"]));
    let mut job = Job {
        id: "example".into(),
        name: "example".into(),
        datacenters: vec!["dc1".into()],
        task_groups: vec![TaskGroup {
            name: "web".into(),
            count: Some(1),
            tasks: vec![Task {
                name: "server".into(),
                driver: "raw_exec".into(),
                config,
                resources: Some(Resources {
                    cpu: Some(100),
                    memory_mb: Some(64),
                    ..Resources::default()
                }),
                ..Task::default()
            }],
            ..TaskGroup::default()
        }],
        ..Job::default()
    };
    job.canonicalize();
    job
}

fn field<'a>(fields: &'a [FieldDiff], name: &str) -> &'a FieldDiff {
    fields
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no field {name:?} in {fields:#?}"))
}

#[test]
fn a_new_job_is_added_with_every_field() {
    let new = job();
    let d = job_diff(None, Some(&new), true).unwrap();
    assert_eq!(d.diff_type, DiffType::Added);
    assert_eq!(d.id, "example");
    let ty = field(&d.fields, "Type");
    assert_eq!(
        (ty.diff_type, ty.old.as_str(), ty.new.as_str()),
        (DiffType::Added, "", "service")
    );
    assert!(d
        .fields
        .iter()
        .all(|f| f.name != "ID" && f.name != "Version"));
    let dcs = d.objects.iter().find(|o| o.name == "Datacenters").unwrap();
    assert_eq!(dcs.diff_type, DiffType::Added);
    assert_eq!(dcs.fields[0].new, "dc1");
    let tg = &d.task_groups[0];
    assert_eq!((tg.diff_type, tg.name.as_str()), (DiffType::Added, "web"));
    assert_eq!(field(&tg.fields, "Count").new, "1");
    assert_eq!(tg.tasks[0].diff_type, DiffType::Added);
    let config = tg.tasks[0]
        .objects
        .iter()
        .find(|o| o.name == "Config")
        .unwrap();
    assert_eq!(field(&config.fields, "args[0]").new, "10");
}

#[test]
fn the_same_job_has_no_changes_even_with_other_server_fields() {
    let old = job();
    let mut new = job();
    new.version = Some(3);
    new.job_modify_index = Some(99);
    new.submit_time = Some(12345);
    new.status = Some("running".into());
    let d = job_diff(Some(&old), Some(&new), true).unwrap();
    assert_eq!(d.diff_type, DiffType::None, "{d:#?}");
    assert!(d.fields.is_empty() && d.objects.is_empty(), "{d:#?}");
    assert_eq!(d.task_groups.len(), 1);
    assert_eq!(d.task_groups[0].diff_type, DiffType::None);
    assert_eq!(d.task_groups[0].tasks[0].diff_type, DiffType::None);
}

#[test]
fn a_count_change_is_an_edited_field_annotated_create_or_destroy() {
    let old = job();
    let mut new = job();
    new.task_groups[0].count = Some(3);
    let mut d = job_diff(Some(&old), Some(&new), true).unwrap();
    assert_eq!(d.diff_type, DiffType::Edited);
    let tg = &d.task_groups[0];
    assert_eq!(tg.diff_type, DiffType::Edited);
    assert_eq!(tg.fields.len(), 1, "only Count changed: {:#?}", tg.fields);
    let c = field(&tg.fields, "Count");
    assert_eq!(
        (c.diff_type, c.old.as_str(), c.new.as_str()),
        (DiffType::Edited, "1", "3")
    );
    let mut ann = PlanAnnotations::default();
    ann.desired_tg_updates.insert(
        "web".into(),
        DesiredUpdates {
            place: 2,
            ignore: 1,
            ..DesiredUpdates::default()
        },
    );
    annotate(&mut d, Some(&ann));
    let tg = &d.task_groups[0];
    assert_eq!(field(&tg.fields, "Count").annotations, vec![FORCES_CREATE]);
    assert_eq!(tg.updates.get("create"), Some(&2));
    assert_eq!(tg.updates.get("ignore"), Some(&1));
    assert!(
        tg.tasks[0].annotations.is_empty(),
        "an unchanged task gets none"
    );

    let mut d = job_diff(Some(&new), Some(&old), false).unwrap();
    annotate(&mut d, None);
    assert_eq!(
        field(&d.task_groups[0].fields, "Count").annotations,
        vec![FORCES_DESTROY]
    );
}

#[test]
fn nested_objects_are_named_by_block_and_contextual_keeps_unchanged_fields() {
    let old = job();
    let mut new = job();
    new.task_groups[0].tasks[0].resources.as_mut().unwrap().cpu = Some(200);
    let d = job_diff(Some(&old), Some(&new), true).unwrap();
    let task = &d.task_groups[0].tasks[0];
    assert_eq!(task.diff_type, DiffType::Edited);
    let res = task.objects.iter().find(|o| o.name == "Resources").unwrap();
    assert_eq!(res.diff_type, DiffType::Edited);
    let cpu = field(&res.fields, "CPU");
    assert_eq!((cpu.old.as_str(), cpu.new.as_str()), ("100", "200"));
    let mem = field(&res.fields, "MemoryMB");
    assert_eq!((mem.diff_type, mem.old.as_str()), (DiffType::None, "64"));

    let d = job_diff(Some(&old), Some(&new), false).unwrap();
    let res = &d.task_groups[0].tasks[0].objects[0];
    assert!(res.fields.iter().all(|f| f.diff_type != DiffType::None));
    let mut d = d;
    annotate(&mut d, None);
    assert_eq!(
        d.task_groups[0].tasks[0].annotations,
        vec![FORCES_DESTRUCTIVE]
    );
}

#[test]
fn datacenters_meta_and_constraints_diff_as_nomad_does() {
    let old = job();
    let mut new = job();
    new.datacenters = vec!["dc2".into()];
    new.meta.insert("owner".into(), "ops".into());
    new.constraints.push(Constraint {
        l_target: "${attr.kernel.name}".into(),
        r_target: "linux".into(),
        operand: "=".into(),
    });
    let d = job_diff(Some(&old), Some(&new), false).unwrap();
    assert_eq!(d.diff_type, DiffType::Edited);
    let meta = field(&d.fields, "Meta[owner]");
    assert_eq!(
        (meta.diff_type, meta.new.as_str()),
        (DiffType::Added, "ops")
    );
    let dcs = d.objects.iter().find(|o| o.name == "Datacenters").unwrap();
    assert_eq!(dcs.diff_type, DiffType::Edited);
    let kinds: Vec<_> = dcs
        .fields
        .iter()
        .map(|f| (f.diff_type, f.old.as_str(), f.new.as_str()))
        .collect();
    assert!(kinds.contains(&(DiffType::Deleted, "dc1", "")));
    assert!(kinds.contains(&(DiffType::Added, "", "dc2")));
    let c = d.objects.iter().find(|o| o.name == "Constraint").unwrap();
    assert_eq!(c.diff_type, DiffType::Added);
    assert_eq!(field(&c.fields, "RTarget").new, "linux");
}

#[test]
fn a_changed_service_only_forces_an_in_place_update_and_groups_match_by_name() {
    let old = job();
    let mut new = job();
    new.task_groups[0].tasks[0].services.push(crate::Service {
        name: "web".into(),
        ..crate::Service::default()
    });
    let mut extra = new.task_groups[0].clone();
    extra.name = "api".into();
    new.task_groups.push(extra);
    let mut d = job_diff(Some(&old), Some(&new), false).unwrap();
    annotate(&mut d, None);
    let names: Vec<_> = d
        .task_groups
        .iter()
        .map(|g| (g.name.as_str(), g.diff_type))
        .collect();
    assert_eq!(
        names,
        vec![("api", DiffType::Added), ("web", DiffType::Edited)]
    );
    assert_eq!(d.task_groups[0].tasks[0].annotations, vec![FORCES_CREATE]);
    let web_task = &d.task_groups[1].tasks[0];
    assert_eq!(web_task.objects[0].name, "Service");
    assert_eq!(web_task.annotations, vec![FORCES_IN_PLACE]);
}

#[test]
fn jobs_with_different_ids_are_refused() {
    let old = job();
    let mut new = job();
    new.id = "other".into();
    let err = job_diff(Some(&old), Some(&new), false).unwrap_err();
    assert!(
        err.to_string().contains("\"example\" and \"other\""),
        "{err}"
    );
}

#[test]
fn the_json_is_nomads() {
    let d = JobDiff {
        diff_type: DiffType::Edited,
        id: "x".into(),
        ..JobDiff::default()
    };
    let v = serde_json::to_value(&d).unwrap();
    assert_eq!(v["Type"], "Edited");
    assert_eq!(v["ID"], "x");
    assert!(v["TaskGroups"].is_array() && v["Fields"].is_array() && v["Objects"].is_array());
    let back: JobDiff = crate::json::from_value(&v).unwrap();
    assert_eq!(back, d);
}
