//! Job diffs (Nomad's `nomad/structs/diff.go`): what changed between two versions of a job, in
//! Nomad's JSON shape (`JobDiff` → `TaskGroupDiff` → `TaskDiff`, each with `FieldDiff`s and nested
//! `ObjectDiff`s), and the plan annotations `job plan` adds to it.
//!
//! The diff is computed over each job's Nomad JSON, so every block is covered without one function
//! per block: a primitive is a field with Go's value text (`"true"`, `"10"`), a map of primitives
//! (`Meta`, `Env`) gives `Meta[key]` fields, a nested block is an object named by its key
//! (`RestartPolicy`, `Resources`), a list of primitives (`Datacenters`) is a set whose elements are
//! fields named after the list, and a list of blocks (`Constraints`) gives one object per element
//! named in the singular (`Constraint`), matched by `Name`/`Label` where elements have one and by
//! equality otherwise. Task groups and tasks are matched by name. The fields Nomad ignores (IDs,
//! versions, indexes, status, submit time) are left out.
//!
//! As Nomad's, the primitive fields of the job, its groups and its tasks list only what changed; with
//! `contextual`, a nested object that changed also lists its unchanged fields (`Type` `None`).

use crate::job::Job;
use crate::plan::PlanAnnotations;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// `None`, `Added`, `Deleted` or `Edited`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum DiffType {
    #[default]
    None,
    Added,
    Deleted,
    Edited,
}

impl DiffType {
    pub fn as_str(self) -> &'static str {
        match self {
            DiffType::None => "None",
            DiffType::Added => "Added",
            DiffType::Deleted => "Deleted",
            DiffType::Edited => "Edited",
        }
    }

    /// Nomad's order for sorting objects of one name: Edited, Added, Deleted, None.
    fn rank(self) -> u8 {
        match self {
            DiffType::Edited => 0,
            DiffType::Added => 1,
            DiffType::Deleted => 2,
            DiffType::None => 3,
        }
    }
}

impl From<&str> for DiffType {
    /// Anything but the four names is `None`.
    fn from(s: &str) -> DiffType {
        match s {
            "Added" => DiffType::Added,
            "Deleted" => DiffType::Deleted,
            "Edited" => DiffType::Edited,
            _ => DiffType::None,
        }
    }
}

impl std::fmt::Display for DiffType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What changed between two versions of a job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobDiff {
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Fields")]
    pub fields: Vec<FieldDiff>,
    #[serde(rename = "Objects")]
    pub objects: Vec<ObjectDiff>,
    #[serde(rename = "TaskGroups")]
    pub task_groups: Vec<TaskGroupDiff>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskGroupDiff {
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Fields")]
    pub fields: Vec<FieldDiff>,
    #[serde(rename = "Objects")]
    pub objects: Vec<ObjectDiff>,
    #[serde(rename = "Tasks")]
    pub tasks: Vec<TaskDiff>,
    /// Update kind (`create`, `destroy`, `in-place update`, …) → count; filled by plans.
    #[serde(rename = "Updates")]
    pub updates: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskDiff {
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Fields")]
    pub fields: Vec<FieldDiff>,
    #[serde(rename = "Objects")]
    pub objects: Vec<ObjectDiff>,
    #[serde(rename = "Annotations")]
    pub annotations: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ObjectDiff {
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Fields")]
    pub fields: Vec<FieldDiff>,
    #[serde(rename = "Objects")]
    pub objects: Vec<ObjectDiff>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FieldDiff {
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Old")]
    pub old: String,
    #[serde(rename = "New")]
    pub new: String,
    #[serde(rename = "Annotations")]
    pub annotations: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiffError {
    #[error("can not diff jobs with different IDs: {old:?} and {new:?}")]
    DifferentIds { old: String, new: String },
    #[error("can not encode job {id:?} for diffing: {message}")]
    Encode { id: String, message: String },
}

/// Job fields Nomad leaves out of diffs: set by the servers, or (`Update`) copied into every group.
const JOB_IGNORED: &[&str] = &[
    "ID",
    "Status",
    "StatusDescription",
    "Version",
    "Stable",
    "CreateIndex",
    "ModifyIndex",
    "JobModifyIndex",
    "Update",
    "SubmitTime",
    "NomadTokenID",
    "VaultToken",
    "TaskGroups",
];
const GROUP_IGNORED: &[&str] = &["Name", "Tasks"];
/// A task's `Config` is its own object, flattened whole (nested values as `key[sub]`, `args[0]`).
const TASK_IGNORED: &[&str] = &["Name", "Config"];

/// Maps whose entries are values (not blocks): flattened into their parent's fields as `Key[entry]`.
const VALUE_MAPS: &[&str] = &[
    "Meta",
    "Env",
    "GetterOptions",
    "GetterHeaders",
    "CanaryMeta",
    "TaggedAddresses",
    "Header",
];

/// The object name of one element of a list (or map) of blocks, as Nomad names them.
fn element_name(key: &str) -> String {
    match key {
        "Constraints" => "Constraint".into(),
        "Affinities" => "Affinity".into(),
        "ReservedPorts" => "Static Port".into(),
        "DynamicPorts" => "Dynamic Port".into(),
        "Volumes" => "Volume".into(),
        "Identities" => "Identity".into(),
        k => k.strip_suffix('s').unwrap_or(k).to_string(),
    }
}

/// The diff of `old` to `new` (`None`: the job does not exist on that side). Both should be
/// canonicalized. Errors when the two are different jobs.
pub fn job_diff(
    old: Option<&Job>,
    new: Option<&Job>,
    contextual: bool,
) -> Result<JobDiff, DiffError> {
    if let (Some(o), Some(n)) = (old, new) {
        if o.id != n.id {
            return Err(DiffError::DifferentIds {
                old: o.id.clone(),
                new: n.id.clone(),
            });
        }
    }
    let encode = |job: Option<&Job>| -> Result<Option<Map<String, Value>>, DiffError> {
        let Some(job) = job else { return Ok(None) };
        match serde_json::to_value(job) {
            Ok(Value::Object(m)) => Ok(Some(m)),
            Ok(_) => Ok(Some(Map::new())),
            Err(e) => Err(DiffError::Encode {
                id: job.id.clone(),
                message: e.to_string(),
            }),
        }
    };
    let (o, n) = (encode(old)?, encode(new)?);
    let mut diff = JobDiff {
        // Both sides: Edited only once something that counts is found to differ.
        diff_type: match side_type(o.is_some(), n.is_some()) {
            DiffType::Edited => DiffType::None,
            t => t,
        },
        id: new.or(old).map(|j| j.id.clone()).unwrap_or_default(),
        ..JobDiff::default()
    };
    if o.is_none() && n.is_none() {
        return Ok(diff);
    }
    let (fields, objects) = members(o.as_ref(), n.as_ref(), JOB_IGNORED, false, contextual);
    diff.fields = fields;
    diff.objects = objects;
    diff.task_groups = named_list(
        list(o.as_ref(), "TaskGroups"),
        list(n.as_ref(), "TaskGroups"),
        |a, b| group_diff(a, b, contextual),
    );
    let changed = diff.fields.iter().any(|f| f.diff_type != DiffType::None)
        || diff.objects.iter().any(|f| f.diff_type != DiffType::None)
        || diff
            .task_groups
            .iter()
            .any(|f| f.diff_type != DiffType::None);
    if diff.diff_type == DiffType::None && changed {
        diff.diff_type = DiffType::Edited;
    }
    Ok(diff)
}

fn group_diff(
    old: Option<&Map<String, Value>>,
    new: Option<&Map<String, Value>>,
    contextual: bool,
) -> TaskGroupDiff {
    let (fields, objects) = members(old, new, GROUP_IGNORED, false, contextual);
    TaskGroupDiff {
        diff_type: block_type(old, new),
        name: name_of(old, new),
        fields,
        objects,
        tasks: named_list(list(old, "Tasks"), list(new, "Tasks"), |a, b| {
            task_diff(a, b, contextual)
        }),
        updates: BTreeMap::new(),
    }
}

fn task_diff(
    old: Option<&Map<String, Value>>,
    new: Option<&Map<String, Value>>,
    contextual: bool,
) -> TaskDiff {
    let (fields, mut objects) = members(old, new, TASK_IGNORED, false, contextual);
    if let Some(config) = config_diff(old, new, contextual) {
        objects.push(config);
        sort_objects(&mut objects);
    }
    TaskDiff {
        diff_type: block_type(old, new),
        name: name_of(old, new),
        fields,
        objects,
        annotations: Vec::new(),
    }
}

/// The task's driver `Config`, flattened whole.
fn config_diff(
    old: Option<&Map<String, Value>>,
    new: Option<&Map<String, Value>>,
    contextual: bool,
) -> Option<ObjectDiff> {
    let (o, n) = (config_of(old), config_of(new));
    if o == n {
        return None;
    }
    let mut flat_o = BTreeMap::new();
    let mut flat_n = BTreeMap::new();
    if let Some(v) = o {
        flatten_all("", v, &mut flat_o);
    }
    if let Some(v) = n {
        flatten_all("", v, &mut flat_n);
    }
    Some(ObjectDiff {
        diff_type: side_type(o.is_some(), n.is_some()),
        name: "Config".into(),
        fields: field_diffs(&flat_o, &flat_n, contextual),
        objects: Vec::new(),
    })
}

/// `Added` / `Deleted` by which side exists, else `Edited` when the two differ.
fn block_type(old: Option<&Map<String, Value>>, new: Option<&Map<String, Value>>) -> DiffType {
    match (old, new) {
        (Some(o), Some(n)) if o == n => DiffType::None,
        (o, n) => side_type(o.is_some(), n.is_some()),
    }
}

fn side_type(old: bool, new: bool) -> DiffType {
    match (old, new) {
        (false, true) => DiffType::Added,
        (true, false) => DiffType::Deleted,
        (true, true) => DiffType::Edited,
        (false, false) => DiffType::None,
    }
}

fn name_of(old: Option<&Map<String, Value>>, new: Option<&Map<String, Value>>) -> String {
    new.or(old)
        .and_then(|m| m.get("Name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn list<'a>(m: Option<&'a Map<String, Value>>, key: &str) -> &'a [Value] {
    m.and_then(|m| m.get(key))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// Pairs the elements of two lists by `Name` (groups, tasks) and diffs each pair, sorted by name.
fn named_list<D>(
    old: &[Value],
    new: &[Value],
    diff: impl Fn(Option<&Map<String, Value>>, Option<&Map<String, Value>>) -> D,
) -> Vec<D> {
    let index = |l: &[Value]| -> BTreeMap<String, Map<String, Value>> {
        l.iter()
            .filter_map(Value::as_object)
            .map(|m| (name_of(Some(m), None), m.clone()))
            .collect()
    };
    let (o, n) = (index(old), index(new));
    let mut names: Vec<&String> = o.keys().chain(n.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|k| diff(o.get(k), n.get(k)))
        .collect()
}

/// The fields and objects of one struct (`skip`: keys handled elsewhere or ignored).
/// `fields_contextual` keeps unchanged primitive fields; `contextual` applies to nested objects.
fn members(
    old: Option<&Map<String, Value>>,
    new: Option<&Map<String, Value>>,
    skip: &[&str],
    fields_contextual: bool,
    contextual: bool,
) -> (Vec<FieldDiff>, Vec<ObjectDiff>) {
    let mut flat_o = BTreeMap::new();
    let mut flat_n = BTreeMap::new();
    let mut keys: Vec<&String> = old
        .iter()
        .chain(new.iter())
        .flat_map(|m| m.keys())
        .collect();
    keys.sort();
    keys.dedup();
    let mut objects = Vec::new();
    for key in keys {
        if skip.contains(&key.as_str()) {
            continue;
        }
        let o = old.and_then(|m| m.get(key)).filter(|v| !v.is_null());
        let n = new.and_then(|m| m.get(key)).filter(|v| !v.is_null());
        let sample = match n.or(o) {
            Some(v) => v,
            None => continue,
        };
        match sample {
            Value::Object(_) if VALUE_MAPS.contains(&key.as_str()) => {
                if let Some(v) = o {
                    flatten_all(key, v, &mut flat_o);
                }
                if let Some(v) = n {
                    flatten_all(key, v, &mut flat_n);
                }
            }
            Value::Object(_) if key == "Volumes" => {
                objects.extend(keyed_objects(key, o, n, contextual));
            }
            Value::Object(_) => {
                objects.extend(object_diff(
                    key,
                    non_empty_map(o),
                    non_empty_map(n),
                    contextual,
                ));
            }
            Value::Array(items) if items.iter().any(|i| i.is_object()) => {
                objects.extend(block_set_diff(key, o, n, contextual));
            }
            Value::Array(_) => {
                objects.extend(value_set_diff(key, o, n, contextual));
            }
            _ => {
                if let Some(v) = o {
                    flat_o.insert(key.clone(), go_text(v));
                }
                if let Some(v) = n {
                    flat_n.insert(key.clone(), go_text(v));
                }
            }
        }
    }
    sort_objects(&mut objects);
    (field_diffs(&flat_o, &flat_n, fields_contextual), objects)
}

/// One nested block; `None` when nothing in it changed.
fn object_diff(
    name: &str,
    old: Option<&Map<String, Value>>,
    new: Option<&Map<String, Value>>,
    contextual: bool,
) -> Option<ObjectDiff> {
    if old == new {
        return None;
    }
    let (fields, objects) = members(old, new, &[], contextual, contextual);
    let changed = fields.iter().any(|f| f.diff_type != DiffType::None)
        || objects.iter().any(|o| o.diff_type != DiffType::None);
    if !changed {
        return None;
    }
    Some(ObjectDiff {
        diff_type: side_type(old.is_some(), new.is_some()),
        name: name.to_string(),
        fields,
        objects,
    })
}

/// A map of blocks (`Volumes`): entries matched by key.
fn keyed_objects(
    key: &str,
    old: Option<&Value>,
    new: Option<&Value>,
    contextual: bool,
) -> Vec<ObjectDiff> {
    let empty = Map::new();
    let o = old.and_then(Value::as_object).unwrap_or(&empty);
    let n = new.and_then(Value::as_object).unwrap_or(&empty);
    let mut names: Vec<&String> = o.keys().chain(n.keys()).collect();
    names.sort();
    names.dedup();
    let name = element_name(key);
    names
        .into_iter()
        .filter_map(|k| {
            let get = |m: &Map<String, Value>| m.get(k).and_then(Value::as_object).cloned();
            object_diff(&name, get(o).as_ref(), get(n).as_ref(), contextual)
        })
        .collect()
}

/// A list of blocks: elements with a `Name` or `Label` are matched by it (an edit), others by
/// equality (a change is a deletion and an addition). Unchanged elements are left out.
fn block_set_diff(
    key: &str,
    old: Option<&Value>,
    new: Option<&Value>,
    contextual: bool,
) -> Vec<ObjectDiff> {
    let id = |v: &Value| -> String {
        for k in ["Name", "Label"] {
            if let Some(s) = v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty()) {
                return format!("{k}:{s}");
            }
        }
        v.to_string()
    };
    let set = |v: Option<&Value>| -> BTreeMap<String, Map<String, Value>> {
        v.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| e.as_object().map(|m| (id(e), m.clone())))
            .collect()
    };
    let (o, n) = (set(old), set(new));
    let name = element_name(key);
    let mut ids: Vec<&String> = o.keys().chain(n.keys()).collect();
    ids.sort();
    ids.dedup();
    ids.into_iter()
        .filter_map(|k| object_diff(&name, o.get(k), n.get(k), contextual))
        .collect()
}

/// A list of values (`Datacenters`) as a set: one object named after the list, one field per
/// element added or removed (and with `contextual`, per element kept).
fn value_set_diff(
    key: &str,
    old: Option<&Value>,
    new: Option<&Value>,
    contextual: bool,
) -> Option<ObjectDiff> {
    let set = |v: Option<&Value>| -> std::collections::BTreeSet<String> {
        v.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(go_text)
            .collect()
    };
    let (o, n) = (set(old), set(new));
    if o == n {
        return None;
    }
    let mut fields = Vec::new();
    let field = |t: DiffType, old: &str, new: &str| FieldDiff {
        diff_type: t,
        name: key.to_string(),
        old: old.into(),
        new: new.into(),
        annotations: Vec::new(),
    };
    for v in o.difference(&n) {
        fields.push(field(DiffType::Deleted, v, ""));
    }
    for v in n.difference(&o) {
        fields.push(field(DiffType::Added, "", v));
    }
    let (removed, added) = (
        o.difference(&n).next().is_some(),
        n.difference(&o).next().is_some(),
    );
    if contextual {
        for v in o.intersection(&n) {
            fields.push(field(DiffType::None, v, v));
        }
    }
    if fields.is_empty() {
        return None;
    }
    sort_fields(&mut fields);
    let diff_type = match (added, removed) {
        (true, true) => DiffType::Edited,
        (true, false) => DiffType::Added,
        (false, true) => DiffType::Deleted,
        // An unchanged set is left out, as Nomad leaves out its `Datacenters`.
        (false, false) => return None,
    };
    Some(ObjectDiff {
        diff_type,
        name: key.to_string(),
        fields,
        objects: Vec::new(),
    })
}

/// Go's `flatmap.Flatten` of a whole value: `prefix[key]` for map entries, `prefix[i]` for list
/// elements; a value at the top level (empty prefix) uses the key alone.
fn flatten_all(prefix: &str, v: &Value, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}[{k}]")
                };
                flatten_all(&p, v, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                flatten_all(&format!("{prefix}[{i}]"), v, out);
            }
        }
        Value::Null => {}
        v => {
            out.insert(prefix.to_string(), go_text(v));
        }
    }
}

/// A value as Go's `fmt` prints it: strings bare, whole floats without a fraction.
fn go_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => f.to_string(),
            _ => n.to_string(),
        },
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn config_of(m: Option<&Map<String, Value>>) -> Option<&Value> {
    m.and_then(|m| m.get("Config")).filter(|v| !is_empty(v))
}

fn non_empty_map(v: Option<&Value>) -> Option<&Map<String, Value>> {
    v.and_then(Value::as_object).filter(|m| !m.is_empty())
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// Nomad's `fieldDiffs`: a field present on one side only is Added or Deleted; an empty value counts
/// as absent.
fn field_diffs(
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
    contextual: bool,
) -> Vec<FieldDiff> {
    let mut names: Vec<&String> = old.keys().chain(new.keys()).collect();
    names.sort();
    names.dedup();
    let mut out: Vec<FieldDiff> = names
        .into_iter()
        .filter_map(|k| {
            let o = old.get(k).map(String::as_str).unwrap_or("");
            let n = new.get(k).map(String::as_str).unwrap_or("");
            field_diff(k, o, n, contextual)
        })
        .collect();
    sort_fields(&mut out);
    out
}

fn field_diff(name: &str, old: &str, new: &str, contextual: bool) -> Option<FieldDiff> {
    let diff_type = if old == new {
        if !contextual {
            return None;
        }
        DiffType::None
    } else if old.is_empty() {
        DiffType::Added
    } else if new.is_empty() {
        DiffType::Deleted
    } else {
        DiffType::Edited
    };
    let keep_old = matches!(
        diff_type,
        DiffType::None | DiffType::Deleted | DiffType::Edited
    );
    let keep_new = matches!(
        diff_type,
        DiffType::None | DiffType::Added | DiffType::Edited
    );
    Some(FieldDiff {
        diff_type,
        name: name.to_string(),
        old: if keep_old { old.into() } else { String::new() },
        new: if keep_new { new.into() } else { String::new() },
        annotations: Vec::new(),
    })
}

fn sort_fields(fields: &mut [FieldDiff]) {
    fields.sort_by(|a, b| (&a.name, &a.old, &a.new).cmp(&(&b.name, &b.old, &b.new)));
}

fn sort_objects(objects: &mut [ObjectDiff]) {
    objects.sort_by(|a, b| (&a.name, a.diff_type.rank()).cmp(&(&b.name, b.diff_type.rank())));
}

/// Update kinds in a group diff's `Updates`, as Nomad names them.
pub const UPDATE_IGNORE: &str = "ignore";
pub const UPDATE_CREATE: &str = "create";
pub const UPDATE_DESTROY: &str = "destroy";
pub const UPDATE_MIGRATE: &str = "migrate";
pub const UPDATE_CANARY: &str = "canary";
pub const UPDATE_IN_PLACE: &str = "in-place update";
pub const UPDATE_DESTRUCTIVE: &str = "create/destroy update";
/// Task annotations.
pub const FORCES_CREATE: &str = "forces create";
pub const FORCES_DESTROY: &str = "forces destroy";
pub const FORCES_IN_PLACE: &str = "forces in-place update";
pub const FORCES_DESTRUCTIVE: &str = "forces create/destroy update";

/// Nomad's `scheduler.Annotate`: each group's planned updates, `forces create`/`forces destroy` on a changed
/// `Count`, and on each changed task whether it forces an in-place or a destructive update.
pub fn annotate(diff: &mut JobDiff, annotations: Option<&PlanAnnotations>) {
    for tg in &mut diff.task_groups {
        if let Some(u) = annotations.and_then(|a| a.desired_tg_updates.get(&tg.name)) {
            for (kind, n) in [
                (UPDATE_IGNORE, u.ignore),
                (UPDATE_CREATE, u.place),
                (UPDATE_MIGRATE, u.migrate),
                (UPDATE_DESTROY, u.stop),
                (UPDATE_CANARY, u.canary),
                (UPDATE_IN_PLACE, u.in_place_update),
                (UPDATE_DESTRUCTIVE, u.destructive_update),
            ] {
                if n != 0 {
                    tg.updates.insert(kind.into(), n);
                }
            }
        }
        if let Some(count) = tg.fields.iter_mut().find(|f| f.name == "Count") {
            let num = |s: &str| s.parse::<i64>().unwrap_or(0);
            match num(&count.old).cmp(&num(&count.new)) {
                std::cmp::Ordering::Less => count.annotations.push(FORCES_CREATE.into()),
                std::cmp::Ordering::Greater => count.annotations.push(FORCES_DESTROY.into()),
                std::cmp::Ordering::Equal => {}
            }
        }
        let group_type = tg.diff_type;
        for task in &mut tg.tasks {
            annotate_task(task, group_type);
        }
    }
}

fn annotate_task(task: &mut TaskDiff, group_type: DiffType) {
    if task.diff_type == DiffType::None {
        return;
    }
    if matches!(group_type, DiffType::Added | DiffType::Deleted) {
        match task.diff_type {
            DiffType::Added => return task.annotations.push(FORCES_CREATE.into()),
            DiffType::Deleted => return task.annotations.push(FORCES_DESTROY.into()),
            _ => {}
        }
    }
    // Every change but KillTimeout, services and constraints needs a new allocation.
    let destructive = task
        .fields
        .iter()
        .any(|f| f.diff_type != DiffType::None && f.name != "KillTimeout")
        || task
            .objects
            .iter()
            .any(|o| !matches!(o.name.as_str(), "Service" | "Constraint"));
    task.annotations.push(
        if destructive {
            FORCES_DESTRUCTIVE
        } else {
            FORCES_IN_PLACE
        }
        .into(),
    );
}

#[cfg(test)]
#[path = "diff_tests.rs"]
mod tests;
