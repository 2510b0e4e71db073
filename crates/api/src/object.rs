//! What the API server does to an object on its way into the store, as
//! upstream's generic registry does (`apiserver/pkg/registry/rest`
//! `BeforeCreate`/`BeforeUpdate` and the per-kind strategies): server-set
//! metadata, status and spec separation, generation, and strict field
//! validation. Pure: time and identifiers are passed in.

use serde_json::{Map, Value, json};

use crate::registry::ResourceDef;
use crate::update::Via;
use crate::validation;
use crate::{Cause, Status};

/// What the server supplies to a create: the time and fresh identifiers.
#[derive(Debug, Clone)]
pub struct Stamp<'a> {
    /// RFC 3339, seconds precision: `2026-11-30T09:00:00Z`.
    pub now: &'a str,
    pub uid: &'a str,
    /// Five characters for `generateName`.
    pub suffix: &'a str,
}

/// How strictly unknown and duplicate fields are treated (`fieldValidation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(value: Option<&str>) -> Result<Self, Status> {
        match value {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(other) => Err(Status::bad_request(format!(
                "fieldValidation must be one of Ignore, Warn or Strict, got {other:?}"
            ))),
        }
    }
}

fn meta_mut(object: &mut Value) -> Result<&mut Map<String, Value>, Status> {
    let root = object
        .as_object_mut()
        .ok_or_else(|| Status::bad_request("the request body must be a JSON object"))?;
    let meta = root.entry("metadata").or_insert_with(|| json!({}));
    if meta.is_null() {
        *meta = json!({});
    }
    meta.as_object_mut()
        .ok_or_else(|| Status::bad_request("metadata must be an object"))
}

/// Checks the body's `apiVersion` and `kind` against the resource, filling
/// them in when absent.
pub fn check_type(def: &ResourceDef, object: &mut Value) -> Result<(), Status> {
    let root = object
        .as_object_mut()
        .ok_or_else(|| Status::bad_request("the request body must be a JSON object"))?;
    let expected_version = def.api_version();
    match root.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            root.insert("apiVersion".into(), json!(expected_version));
        }
        Some(v) if v != expected_version => {
            return Err(Status::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({expected_version})"
            )));
        }
        _ => {}
    }
    match root.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            root.insert("kind".into(), json!(def.kind));
        }
        Some(k) if k != def.kind => {
            return Err(Status::bad_request(format!(
                "{k} in version {:?} cannot be handled as a {}: the kind in the data does not match the resource",
                def.version, def.kind
            )));
        }
        _ => {}
    }
    Ok(())
}

/// Fields the typed form of the kind does not know, as field paths
/// (`spec.template.spec.containers[0].bogusField`), and the typed form's
/// own decoding error if the object does not fit the type at all.
pub fn unknown_fields(def: &ResourceDef, object: &Value) -> Result<Vec<String>, Status> {
    if let Some(custom) = &def.custom {
        // What pruning would remove is what the schema does not know.
        let mut copy = object.clone();
        return Ok(crate::crd::schema::prune(&mut copy, &custom.schema));
    }
    let Some(round_trip) = def.typed_round_trip else {
        return Ok(Vec::new());
    };
    let mut canonical = object.clone();
    crate::protobuf::go_json::canonical_bytes(&def.schema_name, &mut canonical);
    let object = &canonical;
    let typed = round_trip(object).map_err(|e| {
        Status::bad_request(format!(
            "{} in version {:?} cannot be handled as a {}: {e}",
            def.kind, def.version, def.kind
        ))
    })?;
    let mut unknown = Vec::new();
    diff_unknown(object, &typed, String::new(), &mut unknown);
    Ok(unknown)
}

fn diff_unknown(original: &Value, typed: &Value, path: String, out: &mut Vec<String>) {
    match (original, typed) {
        (Value::Object(o), Value::Object(t)) => {
            for (key, value) in o {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match t.get(key) {
                    Some(typed_value) => diff_unknown(value, typed_value, child, out),
                    None if value.is_null() => {}
                    // Free-form maps (labels, data, ...) keep every key, so a
                    // missing key is one the type does not have.
                    None => out.push(child),
                }
            }
        }
        (Value::Array(o), Value::Array(t)) => {
            for (i, (value, typed_value)) in o.iter().zip(t).enumerate() {
                diff_unknown(value, typed_value, format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The error Strict field validation reports, for problems such as
/// `unknown field "spec.x"` or `duplicate field "metadata.name"`.
pub fn strict_error(def: &ResourceDef, problems: &[String]) -> Status {
    Status::bad_request(format!(
        "{} in version {:?} cannot be handled as a {}: strict decoding error: {}",
        def.kind,
        def.version,
        def.kind,
        problems.join(", ")
    ))
}

/// Whether a kind's `status` is written only through its status subresource.
pub fn has_status_subresource(def: &ResourceDef) -> bool {
    def.subresource("status").is_some()
}

/// Whether a kind counts `metadata.generation` (kinds with a spec).
fn tracks_generation(object: &Value) -> bool {
    object.get("spec").is_some()
}

/// Prepares a new object for the store: the request's namespace, a name
/// from `generateName`, server-set metadata, a cleared status where the
/// status subresource owns it; then validates its metadata.
pub fn prepare_create(
    def: &ResourceDef,
    object: &mut Value,
    namespace: Option<&str>,
    stamp: &Stamp<'_>,
) -> Result<(), Status> {
    prepare_create_admitted(def, object, namespace, stamp, |_| {})
}

/// [`prepare_create`], with `admit` changing the defaulted object before it
/// is validated (mutating admission: LimitRanger's defaults).
pub fn prepare_create_admitted(
    def: &ResourceDef,
    object: &mut Value,
    namespace: Option<&str>,
    stamp: &Stamp<'_>,
    admit: impl FnOnce(&mut Value),
) -> Result<(), Status> {
    check_type(def, object)?;
    let has_spec = tracks_generation(object);
    let meta = meta_mut(object)?;
    match (def.namespaced, namespace) {
        (true, Some(ns)) => {
            match meta.get("namespace").and_then(Value::as_str) {
                Some(given) if !given.is_empty() && given != ns => {
                    return Err(Status::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {}
            }
            meta.insert("namespace".into(), json!(ns));
        }
        (false, _) => {
            meta.remove("namespace");
        }
        (true, None) => {}
    }
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if name.is_empty()
        && let Some(generate) = meta
            .get("generateName")
            .and_then(Value::as_str)
            .filter(|g| !g.is_empty())
    {
        let generated = format!("{generate}{}", stamp.suffix);
        meta.insert("name".into(), json!(generated));
    }
    meta.insert("uid".into(), json!(stamp.uid));
    meta.insert("creationTimestamp".into(), json!(stamp.now));
    for server_set in [
        "resourceVersion",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        meta.remove(server_set);
    }
    if has_spec {
        meta.insert("generation".into(), json!(1));
    } else {
        meta.remove("generation");
    }
    if has_status_subresource(def)
        && !def.strategy.keeps_status_on_create
        && let Some(root) = object.as_object_mut()
    {
        root.remove("status");
    }
    omit_empty_metadata(object);
    crate::quantity::canonicalize(def, object)?;
    crate::defaults::apply(def, object);
    admit(object);
    // What only a create sets comes after admission, as upstream's
    // `PrepareForCreate` (a pod's QoS class counts LimitRanger's defaults).
    crate::defaults::on_create(def, object);
    go_shape(def, object);
    let mut causes = Vec::new();
    if def.custom.is_none() {
        (def.strategy.validate_create)(object, &mut causes);
    }
    validate_change(def, object, None, causes)
}

/// What decoding into upstream's Go types does to a built-in object: base64
/// fields unwrapped, and the fields Go always writes filled in
/// ([`crate::protobuf::go_json`]).
fn go_shape(def: &ResourceDef, object: &mut Value) {
    if def.custom.is_none() {
        crate::protobuf::go_json::canonical_bytes(&def.schema_name, object);
        crate::protobuf::go_json::fill(&def.schema_name, object);
    }
}

/// Validates a new object or an update of `old`: what the update may not
/// change (`changes`, found by the caller) with [`validate`]'s causes, then a
/// custom resource's CEL rules (transition rules on updates only).
fn validate_change(
    def: &ResourceDef,
    object: &Value,
    old: Option<&Value>,
    changes: Vec<Cause>,
) -> Result<(), Status> {
    let mut causes = changes;
    causes.extend(causes_of(def, object));
    if !causes.is_empty() {
        return Err(Status::invalid(def.target(), name_of(object), causes));
    }
    if let Some(custom) = &def.custom {
        let causes = crate::crd::cel::validate(&custom.schema, object, old);
        if !causes.is_empty() {
            return Err(Status::invalid(def.target(), name_of(object), causes));
        }
    }
    Ok(())
}

/// Validates an object: its metadata, and what its kind requires.
pub fn validate(def: &ResourceDef, object: &Value) -> Result<(), Status> {
    let causes = causes_of(def, object);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(Status::invalid(def.target(), name_of(object), causes))
    }
}

fn causes_of(def: &ResourceDef, object: &Value) -> Vec<Cause> {
    let meta = object.get("metadata").unwrap_or(&Value::Null);
    let mut causes = validation::object_meta(meta, def.strategy.name_rule, def.namespaced);
    causes.extend(crate::defaults::validate(def, object));
    causes
}

fn name_of(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Which part of an object an update writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The object through its main endpoint: everything but a status the
    /// status subresource owns.
    Main,
    /// The status subresource: the status only.
    Status,
    /// `pods/binding`: the main resource, where a Pod's `spec.nodeName`
    /// alone may be set.
    Binding,
    /// `namespaces/<name>/finalize`: the main resource with what the
    /// main endpoint keeps (a Namespace's `spec.finalizers`) writable.
    Finalize,
    /// `pods/<name>/ephemeralcontainers`: a Pod's
    /// `spec.ephemeralContainers` alone (upstream's
    /// `podEphemeralContainersStrategy`).
    EphemeralContainers,
}

/// Prepares an update of `old` to `new`: identity and server-set metadata
/// stay, the part not written keeps its old value, and `generation` counts
/// changes to everything but metadata and status.
pub fn prepare_update(
    def: &ResourceDef,
    new: &mut Value,
    old: &Value,
    part: Part,
) -> Result<(), Status> {
    check_type(def, new)?;
    let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let name = old_meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    {
        let meta = meta_mut(new)?;
        match meta.get("name").and_then(Value::as_str) {
            Some(n) if n != name => {
                return Err(Status::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            _ => {}
        }
        if let Some(uid) = meta
            .get("uid")
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
        {
            let old_uid = old_meta
                .get("uid")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if uid != old_uid {
                return Err(Status::conflict(
                    def.target(),
                    &name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {old_uid}"
                    ),
                ));
            }
        }
        for kept in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match old_meta.get(kept) {
                Some(v) => {
                    meta.insert(kept.into(), v.clone());
                }
                None => {
                    meta.remove(kept);
                }
            }
        }
        meta.remove("selfLink");
    }
    if part == Part::Main {
        // What only a subresource may change (upstream's PrepareForUpdate).
        for pointer in def.strategy.kept_on_update {
            copy_pointer(new, old, pointer);
        }
    }
    match part {
        // A binding also sets the pod's PodScheduled condition (upstream's
        // `setPodNodeNameAndAnnotations`): that one condition is taken.
        Part::Binding if has_status_subresource(def) => {
            let scheduled = new
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == "PodScheduled"))
                .cloned();
            copy_field(new, old, "status");
            if let Some(scheduled) = scheduled {
                let status = &mut new["status"];
                if !status.is_object() {
                    *status = json!({});
                }
                let conditions = &mut status["conditions"];
                if !conditions.is_array() {
                    *conditions = json!([]);
                }
                let list = conditions.as_array_mut().expect("array");
                match list.iter_mut().find(|c| c["type"] == "PodScheduled") {
                    Some(existing) => *existing = scheduled,
                    None => list.push(scheduled),
                }
            }
        }
        Part::Main | Part::Binding | Part::Finalize if has_status_subresource(def) => {
            copy_field(new, old, "status")
        }
        Part::Main | Part::Binding | Part::Finalize => {}
        Part::Status => {
            let status = new.get("status").cloned();
            let mut kept = old.clone();
            match status {
                Some(status) => kept["status"] = status,
                None => {
                    if let Some(root) = kept.as_object_mut() {
                        root.remove("status");
                    }
                }
            }
            // Labels and annotations may change with status; nothing else.
            for field in ["labels", "annotations", "managedFields"] {
                match new.pointer(&format!("/metadata/{field}")) {
                    Some(v) => kept["metadata"][field] = v.clone(),
                    None => {
                        if let Some(meta) = kept.get_mut("metadata").and_then(Value::as_object_mut)
                        {
                            meta.remove(field);
                        }
                    }
                }
            }
            *new = kept;
        }
        Part::EphemeralContainers => keep_all_but_ephemeral_containers(new, old),
    }
    // "Changed?" is decided on the defaulted object, as upstream decodes and
    // defaults a request before its strategy compares specs: a field the
    // request leaves for defaulting (a `fieldRef` without `apiVersion`,
    // replaced whole as an atomic struct) is no change.
    omit_empty_metadata(new);
    crate::quantity::canonicalize(def, new)?;
    crate::defaults::apply(def, new);
    go_shape(def, new);
    // A Deployment counts annotation changes too: they are copied to its
    // ReplicaSets (upstream's deployment strategy).
    let annotations_count = part == Part::Main && def.group == "apps" && def.kind == "Deployment";
    let annotations_changed =
        || new.pointer("/metadata/annotations") != old.pointer("/metadata/annotations");
    if tracks_generation(new)
        && (spec_changed(new, old) || (annotations_count && annotations_changed()))
    {
        let generation = old_meta
            .get("generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        new["metadata"]["generation"] = json!(generation + 1);
    }
    let via = match part {
        Part::Main | Part::Finalize => Some(Via::Main),
        Part::Binding => Some(Via::Binding),
        Part::EphemeralContainers => Some(Via::EphemeralContainers),
        Part::Status => None,
    };
    let mut changes = via.map_or_else(Vec::new, |via| crate::update::validate(def, new, old, via));
    changes.extend(new_finalizers_of_a_deleted_object(new, old));
    validate_change(def, new, Some(old), changes)
}

/// What `pods/<name>/ephemeralcontainers` writes (upstream's
/// `dropNonEphemeralContainerUpdates`): the stored pod with the update's
/// `spec.ephemeralContainers`; its metadata the stored one's
/// (`ResetObjectMetaForStatus`) but for the request's managed fields.
fn keep_all_but_ephemeral_containers(new: &mut Value, old: &Value) {
    let mut kept = old.clone();
    copy_pointer(&mut kept, new, "/spec/ephemeralContainers");
    copy_pointer(&mut kept, new, "/metadata/managedFields");
    *new = kept;
}

/// Upstream's rule that an object being deleted takes no new finalizers
/// (its own deletion path, which adds the garbage collector's, is exempt).
fn new_finalizers_of_a_deleted_object(new: &Value, old: &Value) -> Option<Cause> {
    if !crate::meta::is_deleting(old) {
        return None;
    }
    let before = crate::meta::finalizers(old);
    let mut added: Vec<String> = crate::meta::finalizers(new)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    if added.is_empty() {
        return None;
    }
    added.sort();
    added.dedup();
    let quoted: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
    Some(Cause::forbidden(
        "metadata.finalizers",
        &format!(
            "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
            quoted.join(", ")
        ),
    ))
}

/// Sets `pointer` in `to` to its value in `from` (removing it when `from`
/// has none).
fn copy_pointer(to: &mut Value, from: &Value, pointer: &str) {
    let Some((parent, field)) = pointer.rsplit_once('/') else {
        return;
    };
    match from.pointer(pointer) {
        Some(value) => {
            // Make the parents objects (`"spec": null` included).
            let mut at = &mut *to;
            for segment in parent.split('/').filter(|s| !s.is_empty()) {
                if !at.is_object() {
                    *at = json!({});
                }
                let Some(object) = at.as_object_mut() else {
                    return;
                };
                at = object
                    .entry(segment.to_string())
                    .or_insert_with(|| json!({}));
            }
            if !at.is_object() {
                *at = json!({});
            }
            if let Some(object) = at.as_object_mut() {
                object.insert(field.to_string(), value.clone());
            }
        }
        None => {
            if let Some(object) = to.pointer_mut(parent).and_then(Value::as_object_mut) {
                object.remove(field);
            }
        }
    }
}

/// Drops the metadata fields Go's `omitempty` leaves out when empty (an
/// owner reference list a patch emptied, say), so objects read back as
/// upstream writes them.
fn omit_empty_metadata(object: &mut Value) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    for field in [
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
        "generateName",
    ] {
        let empty = match meta.get(field) {
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Null) => true,
            _ => false,
        };
        if empty {
            meta.remove(field);
        }
    }
}

fn copy_field(to: &mut Value, from: &Value, field: &str) {
    let Some(root) = to.as_object_mut() else {
        return;
    };
    match from.get(field) {
        Some(v) => {
            root.insert(field.into(), v.clone());
        }
        None => {
            root.remove(field);
        }
    }
}

/// Whether anything but metadata and status differs.
fn spec_changed(new: &Value, old: &Value) -> bool {
    let (Some(new), Some(old)) = (new.as_object(), old.as_object()) else {
        return new != old;
    };
    let counted = |k: &String| !matches!(k.as_str(), "metadata" | "status");
    new.keys().filter(|k| counted(k)).count() != old.keys().filter(|k| counted(k)).count()
        || new
            .iter()
            .filter(|(k, _)| counted(k))
            .any(|(k, v)| old.get(k) != Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Registry;

    fn stamp() -> Stamp<'static> {
        Stamp {
            now: "2026-11-30T09:00:00Z",
            uid: "0b6f2f0e-1c1a-4c43-9a55-4c0f3c3b1a11",
            suffix: "x7k2q",
        }
    }

    fn deploy() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "resourceVersion": "99"},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": {"replicas": 7}
        })
    }

    #[test]
    fn create_sets_server_fields_and_clears_owned_status() {
        let registry = Registry::builtin();
        let def = registry.get("apps", "v1", "deployments").expect("def");
        let mut object = deploy();
        prepare_create(def, &mut object, Some("default"), &stamp()).expect("valid");
        assert_eq!(object["metadata"]["namespace"], "default");
        assert_eq!(object["metadata"]["uid"], stamp().uid);
        assert_eq!(object["metadata"]["generation"], 1);
        assert!(object["metadata"].get("resourceVersion").is_none());
        // Cleared, and written back as Go writes an empty status.
        assert_eq!(object["status"], json!({}));
    }

    #[test]
    fn create_checks_namespace_name_and_type() {
        let registry = Registry::builtin();
        let def = registry.get("", "v1", "configmaps").expect("def");
        let mut wrong_ns = json!({"metadata": {"name": "a", "namespace": "other"}});
        assert_eq!(
            prepare_create(def, &mut wrong_ns, Some("default"), &stamp())
                .expect_err("mismatch")
                .code,
            400
        );
        let mut bad = json!({"metadata": {"name": "Bad_Name"}});
        let err = prepare_create(def, &mut bad, Some("default"), &stamp()).expect_err("invalid");
        assert_eq!(err.code, 422);
        assert!(
            err.message
                .contains("metadata.name: Invalid value: \"Bad_Name\""),
            "{}",
            err.message
        );
        let mut generated = json!({"metadata": {"generateName": "cm-"}});
        prepare_create(def, &mut generated, Some("default"), &stamp()).expect("valid");
        assert_eq!(generated["metadata"]["name"], "cm-x7k2q");
        let mut wrong_kind = json!({"kind": "Secret", "metadata": {"name": "a"}});
        assert_eq!(
            prepare_create(def, &mut wrong_kind, Some("default"), &stamp())
                .expect_err("kind")
                .code,
            400
        );
    }

    #[test]
    fn strict_validation_finds_unknown_fields_by_path() {
        let registry = Registry::builtin();
        let def = registry.get("apps", "v1", "deployments").expect("def");
        let mut object = deploy();
        object["spec"]["template"]["spec"]["containers"][0]["bogusField"] = json!(1);
        object["spec"]["nope"] = json!(null);
        let unknown = unknown_fields(def, &object).expect("decodes");
        assert_eq!(unknown, vec!["spec.template.spec.containers[0].bogusField"]);
        let problems: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field {f:?}"))
            .collect();
        assert!(
            strict_error(def, &problems)
                .message
                .contains("unknown field \"spec.template.spec.containers[0].bogusField\"")
        );
        object["spec"]["replicas"] = json!("three");
        assert_eq!(
            unknown_fields(def, &object).expect_err("type error").code,
            400
        );
    }

    #[test]
    fn the_main_endpoint_keeps_a_namespaces_finalizers_even_from_a_null_spec() {
        let registry = Registry::builtin();
        let def = registry.get("", "v1", "namespaces").expect("def");
        let old = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "n", "uid": "u", "creationTimestamp": "2026-11-30T00:00:00Z"},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        for spec in [json!(null), json!({}), json!({"finalizers": []})] {
            let mut new = old.clone();
            new["spec"] = spec.clone();
            prepare_update(def, &mut new, &old, Part::Main).expect("valid");
            assert_eq!(new["spec"]["finalizers"], json!(["kubernetes"]), "{spec}");
        }
        let mut finalized = old.clone();
        finalized["spec"] = json!({"finalizers": []});
        prepare_update(def, &mut finalized, &old, Part::Finalize).expect("valid");
        assert_eq!(finalized["spec"]["finalizers"], json!([]));
    }

    #[test]
    fn a_pod_written_by_an_older_version_takes_a_label() {
        let registry = Registry::builtin();
        let def = registry.get("", "v1", "pods").expect("def");
        // Stored without today's defaults and with a quantity not in
        // canonical form, as an older server could have written it.
        let old = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "uid": "u", "creationTimestamp": "2026-11-30T00:00:00Z"},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1000m"}}}]}});
        let mut relabeled = old.clone();
        relabeled["metadata"]["labels"] = json!({"a": "b"});
        prepare_update(def, &mut relabeled, &old, Part::Main).expect("a label is no spec change");
        let mut changed = old.clone();
        changed["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("2");
        let refused = prepare_update(def, &mut changed, &old, Part::Main).expect_err("spec change");
        assert_eq!(refused.code, 422);
    }

    #[test]
    fn the_ephemeral_containers_subresource_writes_those_alone() {
        let registry = Registry::builtin();
        let def = registry.get("", "v1", "pods").expect("def");
        let mut old = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "i:1"}]},
            "status": {"phase": "Running"}});
        prepare_create(def, &mut old, Some("default"), &stamp()).expect("valid");
        old["status"] = json!({"phase": "Running"});
        let debug = json!({"name": "debug", "image": "busybox:1", "targetContainerName": "app"});

        // What comes with them is the stored pod's: image, labels, status.
        let mut new = old.clone();
        new["spec"]["ephemeralContainers"] = json!([debug]);
        new["spec"]["containers"][0]["image"] = json!("i:2");
        new["metadata"]["labels"] = json!({"app": "other"});
        new["status"] = json!({"phase": "Failed"});
        prepare_update(def, &mut new, &old, Part::EphemeralContainers).expect("valid");
        assert_eq!(new["spec"]["ephemeralContainers"][0]["name"], "debug");
        assert_eq!(
            new["spec"]["ephemeralContainers"][0]["terminationMessagePolicy"], "File",
            "defaulted as a container"
        );
        assert_eq!(new["spec"]["containers"][0]["image"], "i:1");
        assert_eq!(new["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(new["status"]["phase"], "Running");
        assert_eq!(new["metadata"]["generation"], 2);

        // Validated as upstream: the target must be a container.
        let mut stray = old.clone();
        stray["spec"]["ephemeralContainers"] =
            json!([{"name": "debug", "image": "busybox:1", "targetContainerName": "nope"}]);
        let refused = prepare_update(def, &mut stray, &old, Part::EphemeralContainers)
            .expect_err("no such target");
        assert_eq!(refused.code, 422);
        assert_eq!(
            refused.causes[0].field,
            "spec.ephemeralContainers[0].targetContainerName"
        );

        // And never on create.
        let mut created = json!({"metadata": {"name": "q"},
            "spec": {"containers": [{"name": "app", "image": "i"}],
                     "ephemeralContainers": [{"name": "debug", "image": "busybox:1"}]}});
        let refused =
            prepare_create(def, &mut created, Some("default"), &stamp()).expect_err("create");
        assert_eq!(refused.causes[0].field, "spec.ephemeralContainers");
        assert_eq!(
            refused.causes[0].message,
            "Forbidden: cannot be set on create"
        );
    }

    #[test]
    fn update_keeps_identity_bumps_generation_and_separates_status() {
        let registry = Registry::builtin();
        let def = registry.get("apps", "v1", "deployments").expect("def");
        let mut old = deploy();
        prepare_create(def, &mut old, Some("default"), &stamp()).expect("valid");
        old["status"] = json!({"replicas": 2});

        let mut relabel = old.clone();
        relabel["metadata"]["labels"] = json!({"a": "b"});
        relabel["metadata"]["uid"] = json!(null);
        relabel["status"] = json!({"replicas": 100});
        prepare_update(def, &mut relabel, &old, Part::Main).expect("valid");
        assert_eq!(relabel["metadata"]["generation"], 1);
        assert_eq!(
            relabel["status"]["replicas"], 2,
            "status is not written through the main resource"
        );
        assert_eq!(relabel["metadata"]["uid"], stamp().uid);

        let mut scaled = old.clone();
        scaled["spec"]["replicas"] = json!(5);
        prepare_update(def, &mut scaled, &old, Part::Main).expect("valid");
        assert_eq!(scaled["metadata"]["generation"], 2);

        // A Deployment's annotations count, as upstream's strategy says.
        let mut annotated = old.clone();
        annotated["metadata"]["annotations"] = json!({"note": "copied to replica sets"});
        prepare_update(def, &mut annotated, &old, Part::Main).expect("valid");
        assert_eq!(annotated["metadata"]["generation"], 2);

        let mut status = old.clone();
        status["spec"]["replicas"] = json!(9);
        status["status"] = json!({"replicas": 3});
        prepare_update(def, &mut status, &old, Part::Status).expect("valid");
        assert_eq!(status["status"]["replicas"], 3);
        assert_eq!(
            status["spec"]["replicas"], 1,
            "spec is not written through status"
        );

        let mut renamed = old.clone();
        renamed["metadata"]["name"] = json!("other");
        assert_eq!(
            prepare_update(def, &mut renamed, &old, Part::Main)
                .expect_err("rename")
                .code,
            400
        );
    }
}
