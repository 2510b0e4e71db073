//! What an update may change, per kind, as upstream's `ValidateXUpdate`
//! functions say: immutable fields (a workload's selector, a Pod's spec but
//! its few mutable fields, an immutable ConfigMap's data, a binding's
//! roleRef, …) are compared between the stored object and the defaulted
//! update, and each change is an Invalid or Forbidden cause with upstream's
//! field path and wording. One function of [`Rules`] per kind, which the
//! kind's strategy names. A kind's rules may also first drop from the
//! update what upstream's `PrepareForUpdate` drops (a Service's fields its
//! new type no longer uses), so that the object validated after them is
//! the one upstream validates.

use serde_json::{Value, json};

use crate::registry::ResourceDef;
use crate::status::Cause;

const IMMUTABLE: &str = "field is immutable";

/// Where an update comes from: the main resource, `pods/binding`, which
/// alone may set a Pod's `spec.nodeName`, or `pods/ephemeralcontainers`,
/// which alone may add to a Pod's `spec.ephemeralContainers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Main,
    Binding,
    EphemeralContainers,
}

/// One kind's update rules: they push to the causes what `new` may not
/// change of `old` (and may adjust `new` as upstream's `PrepareForUpdate`).
pub type Rules = fn(&mut Causes<'_>);

/// The causes that refuse the update of the stored `old` to `new`
/// (defaulted), by the rules of `def`'s strategy, which may first drop from
/// `new` what upstream's `PrepareForUpdate` drops. `old` is compared as this
/// version would write it (its defaults and canonical quantities), so that
/// what an older version wrote does not count as a change — worked out only
/// for kinds with rules. `pods/binding` is not an update of the object
/// (upstream's `BindingREST` sets `spec.nodeName` without `ValidatePodUpdate`),
/// so no rules apply through it; `pods/ephemeralcontainers` has its own
/// ([`pod_ephemeral_containers`]).
pub fn validate(def: &ResourceDef, new: &mut Value, old: &Value, via: Via) -> Vec<Cause> {
    let rules = match via {
        Via::Main => def.strategy.update_rules,
        Via::Binding => None,
        Via::EphemeralContainers => Some(pod_ephemeral_containers as Rules),
    };
    let Some(rules) = rules else {
        return Vec::new();
    };
    let mut stored = old.clone();
    let _ = crate::quantity::canonicalize(def, &mut stored);
    crate::defaults::apply(def, &mut stored);
    let mut c = Causes(Vec::new(), new, &stored);
    rules(&mut c);
    c.0
}

pub(crate) fn config_map(c: &mut Causes<'_>) {
    sealed_data(c, &["data", "binaryData"]);
}

pub(crate) fn secret(c: &mut Causes<'_>) {
    sealed_data(c, &["data"]);
    c.immutable("/type", "type");
}

/// A Deployment's, ReplicaSet's or DaemonSet's selector.
pub(crate) fn workload_selector(c: &mut Causes<'_>) {
    c.immutable("/spec/selector", "spec.selector");
}

/// A ControllerRevision's data (its `revision` number may change: a
/// rollback renumbers an old revision to be the newest).
pub(crate) fn controller_revision(c: &mut Causes<'_>) {
    c.immutable("/data", "data");
}

/// A RoleBinding's or ClusterRoleBinding's roleRef.
pub(crate) fn role_binding(c: &mut Causes<'_>) {
    if c.changed("/roleRef") {
        c.invalid("/roleRef", "roleRef", "cannot change roleRef");
    }
}

pub(crate) fn storage_class(c: &mut Causes<'_>) {
    for field in ["parameters", "provisioner", "reclaimPolicy"] {
        if c.changed(&format!("/{field}")) {
            let why = format!("updates to {field} are forbidden.");
            c.0.push(Cause::forbidden(field, &why));
        }
    }
    c.immutable("/volumeBindingMode", "volumeBindingMode");
}

pub(crate) fn volume_attachment(c: &mut Causes<'_>) {
    c.immutable("/spec", "spec");
}

pub(crate) fn csi_driver(c: &mut Causes<'_>) {
    for field in ["attachRequired", "volumeLifecycleModes", "fsGroupPolicy"] {
        c.immutable(&format!("/spec/{field}"), &format!("spec.{field}"));
    }
}

pub(crate) fn priority_class(c: &mut Causes<'_>) {
    if c.changed("/value") {
        c.0.push(Cause::forbidden(
            "value",
            "may not be changed in an update.",
        ));
    }
    c.immutable("/preemptionPolicy", "preemptionPolicy");
}

/// A ResourceQuota's scopes (its hard limits may change).
pub(crate) fn resource_quota(c: &mut Causes<'_>) {
    let scopes = |v: &Value| -> std::collections::BTreeSet<String> {
        v.pointer("/spec/scopes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    if scopes(c.1) != scopes(c.2) {
        let value = c.1.pointer("/spec/scopes").cloned().unwrap_or(Value::Null);
        c.0.push(Cause::invalid("spec.scopes", &value, IMMUTABLE));
    }
}

pub(crate) fn endpoint_slice(c: &mut Causes<'_>) {
    c.immutable("/addressType", "addressType");
}

pub(crate) fn ingress_class(c: &mut Causes<'_>) {
    c.immutable("/spec/controller", "spec.controller");
}

pub(crate) fn ip_address(c: &mut Causes<'_>) {
    c.immutable("/spec/parentRef", "spec.parentRef");
}

/// A Service: the fields its new type no longer uses dropped, then what
/// `ValidateServiceUpdate` adds (cluster IPs, IP families, a
/// LoadBalancer's class and health check port). Its ClusterIP is the
/// storage's (`keep_on_update`).
pub(crate) fn service(c: &mut Causes<'_>) {
    crate::validation::service::update::prepare(c.1, c.2);
    let causes = crate::validation::service::update::causes(c.1, c.2);
    c.0.extend(causes);
}

/// The causes found so far, and the two objects compared: the update
/// (which a kind's rules may adjust) and the stored object.
#[derive(Debug)]
pub struct Causes<'a>(Vec<Cause>, &'a mut Value, &'a Value);

impl Causes<'_> {
    fn at<'v>(v: &'v Value, pointer: &str) -> &'v Value {
        v.pointer(pointer).unwrap_or(&Value::Null)
    }

    fn changed(&self, pointer: &str) -> bool {
        Self::at(self.1, pointer) != Self::at(self.2, pointer)
    }

    fn invalid(&mut self, pointer: &str, field: &str, why: &str) {
        let value = Self::at(self.1, pointer).clone();
        self.0.push(Cause::invalid(field, &value, why));
    }

    /// `field` may not change.
    fn immutable(&mut self, pointer: &str, field: &str) {
        if self.changed(pointer) {
            self.invalid(pointer, field, IMMUTABLE);
        }
    }

    fn new_value(&self, pointer: &str) -> &Value {
        Self::at(self.1, pointer)
    }

    fn old_value(&self, pointer: &str) -> &Value {
        Self::at(self.2, pointer)
    }
}

/// Sets `field` of an object to `value`, or removes it for null, so that a
/// masked copy compares equal to one that never had the field.
fn set(object: &mut Value, field: &str, value: Value) {
    if let Some(map) = object.as_object_mut() {
        if value.is_null() {
            map.remove(field);
        } else {
            map.insert(field.to_string(), value);
        }
    }
}

/// Copies of the old and the new spec with what an update may change
/// made equal, so that what is left to differ is what may not.
fn masked(c: &Causes<'_>, pointer: &str) -> (Value, Value) {
    (c.old_value(pointer).clone(), c.new_value(pointer).clone())
}

pub(crate) fn pod(c: &mut Causes<'_>) {
    let (mut old, mut new) = masked(c, "/spec");
    for list in ["containers", "initContainers"] {
        for spec in [&mut old, &mut new] {
            if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
                for container in containers.iter_mut() {
                    set(container, "image", Value::Null);
                }
            }
        }
    }
    // activeDeadlineSeconds may be set, or lowered; never raised or unset.
    match (
        old.get("activeDeadlineSeconds").and_then(Value::as_i64),
        new.get("activeDeadlineSeconds").and_then(Value::as_i64),
    ) {
        (Some(_), None) => c.0.push(Cause::invalid(
            "spec.activeDeadlineSeconds",
            &Value::Null,
            "must not update from a positive integer to nil value",
        )),
        (Some(before), Some(after)) if after > before => c.0.push(Cause::invalid(
            "spec.activeDeadlineSeconds",
            &json!(after),
            "must be less than or equal to previous value",
        )),
        _ => {}
    }
    for spec in [&mut old, &mut new] {
        if let Some(spec) = spec.as_object_mut() {
            spec.remove("activeDeadlineSeconds");
        }
    }
    // Tolerations may be added to; scheduling gates may be removed.
    let contains = |whole: &Value, part: &Value| {
        let whole = whole.as_array().map(Vec::as_slice).unwrap_or_default();
        let part = part.as_array().map(Vec::as_slice).unwrap_or_default();
        part.iter().all(|p| whole.contains(p))
    };
    for (field, grows) in [("tolerations", true), ("schedulingGates", false)] {
        let (before, after) = (old[field].clone(), new[field].clone());
        let allowed = if grows {
            contains(&after, &before)
        } else {
            contains(&before, &after)
        };
        if allowed {
            set(&mut new, field, before);
        }
    }
    // A negative grace period may become 1.
    let grace = "terminationGracePeriodSeconds";
    if old[grace].as_i64().is_some_and(|g| g < 0) && new[grace] == json!(1) {
        set(&mut new, grace, old[grace].clone());
    }
    if old != new {
        c.0.push(Cause::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
}

/// The annotation of a static pod's mirror in the API.
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// An update through `pods/ephemeralcontainers` (upstream's
/// `ValidatePodEphemeralContainersUpdate`): a static pod's mirror takes
/// none, and the ephemeral containers it has may be neither removed nor
/// changed — matched by name, since a patch keeps no order. Upstream
/// follows "may not be changed" with a diff of the two; the line ends
/// here.
pub(crate) fn pod_ephemeral_containers(c: &mut Causes<'_>) {
    if c.old_value("/metadata/annotations")
        .get(MIRROR_POD_ANNOTATION)
        .is_some()
    {
        c.0.push(Cause::forbidden(
            "[]",
            "static pods do not support ephemeral containers",
        ));
        return;
    }
    let list = |v: &Value| -> Vec<Value> { v.as_array().cloned().unwrap_or_default() };
    let (old, new) = (
        list(c.old_value("/spec/ephemeralContainers")),
        list(c.new_value("/spec/ephemeralContainers")),
    );
    let field = "spec.ephemeralContainers";
    for before in &old {
        let name = before["name"].as_str().unwrap_or_default();
        match new.iter().find(|after| after["name"] == before["name"]) {
            None => c.0.push(Cause::forbidden(
                field,
                &format!("existing ephemeral containers {name:?} may not be removed\n"),
            )),
            Some(after) if after != before => c.0.push(Cause::forbidden(
                field,
                &format!("existing ephemeral containers {name:?} may not be changed\n"),
            )),
            Some(_) => {}
        }
    }
}

/// A ConfigMap's or Secret's data, once `immutable` is set.
fn sealed_data(c: &mut Causes<'_>, fields: &[&str]) {
    if c.old_value("/immutable") != &json!(true) {
        return;
    }
    let why = "field is immutable when `immutable` is set";
    for field in fields {
        if c.changed(&format!("/{field}")) {
            c.0.push(Cause::forbidden(*field, why));
        }
    }
    if c.changed("/immutable") {
        c.0.push(Cause::forbidden("immutable", why));
    }
}

pub(crate) fn persistent_volume_claim(c: &mut Causes<'_>) {
    let (mut old, mut new) = masked(c, "/spec");
    for spec in [&mut old, &mut new] {
        if let Some(resources) = spec.get_mut("resources") {
            set(resources, "requests", Value::Null);
        }
        if let Some(spec) = spec.as_object_mut() {
            spec.remove("volumeAttributesClassName");
        }
    }
    // The volume controller binds a claim once.
    if old["volumeName"].as_str().unwrap_or_default().is_empty() {
        set(&mut old, "volumeName", new["volumeName"].clone());
    }
    if old != new {
        c.0.push(Cause::forbidden(
            "spec",
            "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
        ));
    }
}

/// A PersistentVolume's fields that are not its volume source.
pub(crate) const VOLUME_FIELDS: &[&str] = &[
    "accessModes",
    "capacity",
    "claimRef",
    "mountOptions",
    "nodeAffinity",
    "persistentVolumeReclaimPolicy",
    "storageClassName",
    "volumeAttributesClassName",
    "volumeMode",
];

pub(crate) fn persistent_volume(c: &mut Causes<'_>) {
    let source = |spec: &Value| -> Value {
        let mut spec = spec.clone();
        if let Some(map) = spec.as_object_mut() {
            map.retain(|k, _| !VOLUME_FIELDS.contains(&k.as_str()));
        }
        spec
    };
    if source(c.old_value("/spec")) != source(c.new_value("/spec")) {
        c.0.push(Cause::forbidden(
            "spec.persistentvolumesource",
            "spec.persistentvolumesource is immutable after creation",
        ));
    }
    c.immutable("/spec/volumeMode", "spec.volumeMode");
}

pub(crate) fn node(c: &mut Causes<'_>) {
    for (pointer, field, what) in [
        ("/spec/podCIDR", "spec.podCIDRs", "podCIDR"),
        ("/spec/providerID", "spec.providerID", "providerID"),
    ] {
        let before = c.old_value(pointer).as_str().unwrap_or_default();
        if !before.is_empty() && c.changed(pointer) {
            let why = format!("node updates may not change {what} except from \"\" to valid");
            c.0.push(Cause::forbidden(field, &why));
        }
    }
}

/// The StatefulSet spec fields an update may change.
const STATEFUL_SET_MUTABLE: &[&str] = &[
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

pub(crate) fn stateful_set(c: &mut Causes<'_>) {
    let (mut old, mut new) = masked(c, "/spec");
    for spec in [&mut old, &mut new] {
        if let Some(map) = spec.as_object_mut() {
            map.retain(|k, _| !STATEFUL_SET_MUTABLE.contains(&k.as_str()));
        }
    }
    if old != new {
        c.0.push(Cause::forbidden(
            "spec",
            "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
        ));
    }
}

pub(crate) fn job(c: &mut Causes<'_>) {
    c.immutable("/spec/selector", "spec.selector");
    c.immutable("/spec/completionMode", "spec.completionMode");
    // An indexed job may scale completions with parallelism (elastic jobs).
    let elastic = c.new_value("/spec/completionMode") == &json!("Indexed")
        && c.new_value("/spec/completions") == c.new_value("/spec/parallelism");
    if !elastic {
        c.immutable("/spec/completions", "spec.completions");
    }
    // A suspended job that never started may change its pods' scheduling.
    let (mut old, mut new) = masked(c, "/spec/template");
    let never_started = c.old_value("/status/startTime").is_null();
    if c.old_value("/spec/suspend") == &json!(true) && never_started {
        for template in [&mut old, &mut new] {
            if let Some(meta) = template.get_mut("metadata") {
                set(meta, "labels", Value::Null);
                set(meta, "annotations", Value::Null);
            }
            if let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) {
                for field in ["nodeSelector", "tolerations", "affinity", "schedulingGates"] {
                    spec.remove(field);
                }
            }
        }
    }
    if old != new {
        c.invalid("/spec/template", "spec.template", IMMUTABLE);
    }
}

#[cfg(test)]
mod tests;
