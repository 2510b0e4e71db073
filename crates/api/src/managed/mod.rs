//! Managed fields and server-side apply, with the semantics of upstream's
//! structured-merge-diff and field manager.
//!
//! Every write records who set which fields in `metadata.managedFields`:
//! one entry per manager, operation (`Apply` or `Update`), API version of
//! an update, and subresource, holding a [`FieldSet`] in `FieldsV1` form.
//! - An update (create, update, patch) takes the fields it added or changed
//!   from everyone else and gives up the fields it removed ([`update`]).
//! - An apply ([`apply`]) merges the applied configuration into the live
//!   object; changing a field another manager owns is a conflict (409)
//!   unless forced; fields the manager applied before and applies no more
//!   are removed when no one else owns them.

use serde_json::{Map, Value, json};

use crate::Status;
use crate::structure::{Shape, Types};

pub mod fieldset;
mod walk;

pub use fieldset::{FieldSet, path_string};
pub use walk::Comparison;
use walk::Walker;

/// `kubectl`'s client-side apply annotation.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub subresource: String,
    pub time: Option<String>,
    pub fields: FieldSet,
}

impl Entry {
    /// Whether this entry is the one of `manager`'s `operation` (an apply
    /// is one entry whatever its API version; updates are one per version).
    fn is(
        &self,
        manager: &str,
        operation: Operation,
        api_version: &str,
        subresource: &str,
    ) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource == subresource
            && (operation == Operation::Apply || self.api_version == api_version)
    }

    fn to_json(&self) -> Value {
        let mut entry = Map::new();
        entry.insert("manager".into(), json!(self.manager));
        entry.insert("operation".into(), json!(self.operation.as_str()));
        entry.insert("apiVersion".into(), json!(self.api_version));
        if let Some(time) = &self.time {
            entry.insert("time".into(), json!(time));
        }
        entry.insert("fieldsType".into(), json!("FieldsV1"));
        entry.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if !self.subresource.is_empty() {
            entry.insert("subresource".into(), json!(self.subresource));
        }
        Value::Object(entry)
    }

    fn from_json(value: &Value) -> Result<Entry, String> {
        let text = |k: &str| value.get(k).and_then(Value::as_str).unwrap_or_default();
        let operation = match text("operation") {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            other => return Err(format!("unknown managedFields operation {other:?}")),
        };
        match text("fieldsType") {
            "FieldsV1" => {}
            other => return Err(format!("unknown managedFields fieldsType {other:?}")),
        }
        Ok(Entry {
            manager: text("manager").to_string(),
            operation,
            api_version: text("apiVersion").to_string(),
            subresource: text("subresource").to_string(),
            time: value
                .get("time")
                .and_then(Value::as_str)
                .map(str::to_string),
            fields: FieldSet::from_fields_v1(value.get("fieldsV1").unwrap_or(&json!({})))?,
        })
    }

    /// How a conflict message names the manager.
    fn describe(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            out.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            out.push_str(&format!(" using {}", self.api_version));
            if let Some(time) = &self.time {
                out.push_str(&format!(" at {time}"));
            }
        }
        out
    }
}

/// The `managedFields` of an object; `None` when it has none or they cannot
/// be read (the caller then falls back to the live object's, as upstream).
pub fn decode(object: &Value) -> Option<Result<Vec<Entry>, String>> {
    let entries = object.pointer("/metadata/managedFields")?;
    let Value::Array(entries) = entries else {
        return Some(Err("metadata.managedFields must be a list".into()));
    };
    Some(entries.iter().map(Entry::from_json).collect())
}

/// Writes `entries` into `object`'s metadata, in upstream's order
/// (operation, time, manager, version, subresource); none removes the field.
pub fn encode(object: &mut Value, entries: &mut [Entry]) {
    entries.sort_by(|a, b| {
        (
            a.operation,
            &a.time,
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(Entry::to_json).collect()),
        );
    }
}

fn without_managed_fields(object: &Value) -> Value {
    let mut out = object.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    out
}

/// Which fields no manager owns: identity and server-set metadata, and
/// the part of the object the endpoint does not write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignore {
    /// The main resource of a kind without a status subresource.
    Nothing,
    /// The main resource of a kind with a status subresource: its status.
    Status,
    /// The status subresource: all but status and metadata.
    AllButStatus,
}

const SERVER_METADATA: &[&str] = &[
    "f:name",
    "f:namespace",
    "f:uid",
    "f:creationTimestamp",
    "f:resourceVersion",
    "f:generation",
    "f:managedFields",
    "f:selfLink",
    "f:deletionTimestamp",
    "f:deletionGracePeriodSeconds",
];

/// What a write needs to keep managed fields: the structure of the kind,
/// the endpoint, and the time.
#[derive(Debug, Clone)]
pub struct Scope<'a> {
    pub types: &'a Types,
    pub root: Shape,
    pub api_version: &'a str,
    pub subresource: &'a str,
    pub ignore: Ignore,
    pub now: &'a str,
}

impl Scope<'_> {
    fn strip(&self, set: &mut FieldSet) {
        set.remove_tree(&["f:apiVersion"]);
        set.remove_tree(&["f:kind"]);
        for field in SERVER_METADATA {
            set.remove_tree(&["f:metadata", field]);
        }
        match self.ignore {
            Ignore::Nothing => {}
            Ignore::Status => set.remove_tree(&["f:status"]),
            Ignore::AllButStatus => {
                let others: Vec<String> = set
                    .children()
                    .map(|(k, _)| k.clone())
                    .filter(|k| k != "f:status" && k != "f:metadata")
                    .collect();
                for other in others {
                    set.remove_tree(&[other]);
                }
            }
        }
    }

    /// What `new` changed of `old` in the fields managers own (managed
    /// fields themselves included in none).
    fn compare(&self, old: Option<&Value>, new: &Value) -> Comparison {
        let empty = json!({});
        let mut out =
            Walker::new(self.types).compare(&self.root, Some(old.unwrap_or(&empty)), Some(new));
        self.strip(&mut out.added);
        self.strip(&mut out.modified);
        self.strip(&mut out.removed);
        out
    }
}

/// The managers an update starts from: the request's own `managedFields`
/// when it sets any (an empty list resets them), else the live object's.
fn base_entries(old: Option<&Value>, new: &Value) -> Vec<Entry> {
    let live = || {
        old.and_then(decode)
            .and_then(Result::ok)
            .unwrap_or_default()
    };
    match new.pointer("/metadata/managedFields") {
        Some(Value::Array(list)) if list.is_empty() => Vec::new(),
        Some(Value::Array(list)) if list.len() == 1 && list[0] == json!({}) => Vec::new(),
        Some(_) => match decode(new) {
            Some(Ok(entries)) if !entries.is_empty() => entries,
            _ => live(),
        },
        None => live(),
    }
}

/// Records a create, update or patch of `old` (absent for a create) into
/// `new` by `manager`: it owns what it added or changed, taken from anyone
/// who owned it, and no one owns what it removed.
pub fn update(scope: &Scope<'_>, old: Option<&Value>, new: &mut Value, manager: &str) {
    let mut entries = base_entries(old, new);
    let cmp = scope.compare(old, new);
    let mut changed = cmp.added.clone();
    changed.union(&cmp.modified);
    for entry in entries.iter_mut() {
        entry.fields = entry.fields.difference(&changed).difference(&cmp.removed);
    }
    let mine = Operation::Update;
    let index = match entries
        .iter()
        .position(|e| e.is(manager, mine, scope.api_version, scope.subresource))
    {
        Some(i) => i,
        None => {
            entries.push(Entry {
                manager: manager.to_string(),
                operation: mine,
                api_version: scope.api_version.to_string(),
                subresource: scope.subresource.to_string(),
                time: None,
                fields: FieldSet::new(),
            });
            entries.len() - 1
        }
    };
    if !changed.is_empty() {
        entries[index].fields.union(&changed);
        entries[index].time = Some(scope.now.to_string());
    }
    entries.retain(|e| !e.fields.is_empty());
    encode(new, &mut entries);
}

/// A conflict of an apply with another manager's fields.
#[derive(Debug, Clone)]
pub struct Conflict {
    pub manager: String,
    pub path: Vec<String>,
}

/// Upstream's 409 for apply conflicts: the message names every manager and
/// field, and each is a `FieldManagerConflict` cause.
pub fn conflict_status(conflicts: &[Conflict]) -> Status {
    let message = if let [one] = conflicts {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            one.manager,
            path_string(&one.path)
        )
    } else {
        let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
        managers.sort_unstable();
        managers.dedup();
        let mut lines = Vec::new();
        for manager in managers {
            lines.push(format!("conflicts with {manager}:"));
            for c in conflicts.iter().filter(|c| c.manager == manager) {
                lines.push(format!("- {}", path_string(&c.path)));
            }
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    let mut status = Status::new(409, "Conflict", message);
    status.causes = conflicts
        .iter()
        .map(|c| {
            crate::Cause::new(
                "FieldManagerConflict",
                path_string(&c.path),
                format!("conflict with {}", c.manager),
            )
        })
        .collect();
    status
}

/// Server-side apply of `config` by `manager` to `live` (absent when the
/// object does not exist yet). Returns the new object with its managed
/// fields, or the conflicts.
pub fn apply(
    scope: &Scope<'_>,
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
) -> Result<Value, Vec<Conflict>> {
    let walker = Walker::new(scope.types);
    let empty = json!({});
    let live_clean = live.map_or_else(|| empty.clone(), without_managed_fields);
    let mut entries = live
        .and_then(decode)
        .and_then(Result::ok)
        .unwrap_or_default();

    let mut merged = walker.merge(&scope.root, Some(&live_clean), config);
    let mut applied = walker.field_set(&scope.root, config);
    scope.strip(&mut applied);
    let position = entries.iter().position(|e| {
        e.is(
            manager,
            Operation::Apply,
            scope.api_version,
            scope.subresource,
        )
    });
    let last = position.map(|i| entries[i].fields.clone());
    let index = match position {
        Some(i) => i,
        None => {
            entries.push(Entry {
                manager: manager.to_string(),
                operation: Operation::Apply,
                api_version: scope.api_version.to_string(),
                subresource: scope.subresource.to_string(),
                time: None,
                fields: FieldSet::new(),
            });
            entries.len() - 1
        }
    };
    entries[index].fields = applied;
    entries[index].api_version = scope.api_version.to_string();

    // Fields applied before and no more, owned by no one now, go.
    if let Some(last) = &last {
        let mut owned = FieldSet::new();
        for e in &entries {
            owned.union(&e.fields);
        }
        let mut gone = FieldSet::new();
        unowned(last, &owned, &mut Vec::new(), &mut gone);
        if !gone.is_empty() {
            merged = walker.remove(&scope.root, &merged, &gone);
        }
    }

    let cmp = scope.compare(Some(&live_clean), &merged);
    let mut changed = cmp.added.clone();
    changed.union(&cmp.modified);
    let mut conflicts = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        if i == index {
            continue;
        }
        for path in entry.fields.intersection(&changed).paths() {
            conflicts.push(Conflict {
                manager: entry.describe(),
                path,
            });
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    for (i, entry) in entries.iter_mut().enumerate() {
        if i != index {
            entry.fields = entry.fields.difference(&changed).difference(&cmp.removed);
        }
    }
    if merged != live_clean || last.as_ref() != Some(&entries[index].fields) {
        entries[index].time = Some(scope.now.to_string());
    }
    entries.retain(|e| !e.fields.is_empty());
    encode(&mut merged, &mut entries);
    Ok(merged)
}

/// The paths of `last` (at or below `path`) under which `owned` has
/// nothing: what an applier gave up and no one else holds.
fn unowned(last: &FieldSet, owned: &FieldSet, path: &mut Vec<String>, out: &mut FieldSet) {
    for (element, child) in last.children() {
        path.push(element.clone());
        match owned.child(element) {
            None => out.insert(path),
            Some(owned_child) => unowned(child, owned_child, path, out),
        }
        path.pop();
    }
}

/// The fields a client-side apply configuration (the last-applied
/// annotation) sets: conflicts on these with the client-side apply
/// managers are expected when `kubectl` moves to server-side apply.
pub fn last_applied_fields(scope: &Scope<'_>, live: &Value) -> Option<FieldSet> {
    let text = live
        .pointer("/metadata/annotations")?
        .get(LAST_APPLIED)?
        .as_str()?;
    let config: Value = serde_json::from_str(text).ok()?;
    let mut set = Walker::new(scope.types).field_set(&scope.root, &config);
    scope.strip(&mut set);
    Some(set)
}

#[cfg(test)]
mod tests;
