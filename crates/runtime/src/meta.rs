//! Helpers on object metadata that controllers share: owner references
//! (who controls an object, and how to say "I do") and status conditions
//! (set with upstream's transition-time rule).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::{Resource, ResourceExt};

/// The owner reference of the object that controls `object`
/// (`controller: true`), if any.
pub fn controller_of<K: Resource>(object: &K) -> Option<&OwnerReference> {
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// An owner reference to `owner`, as a controller sets it on what it
/// creates: `controller` and `blockOwnerDeletion` true.
pub fn controller_reference<K>(owner: &K) -> Option<OwnerReference>
where
    K: Resource<DynamicType = ()>,
{
    Some(OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.meta().name.clone()?,
        uid: owner.meta().uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// Whether `object` is being deleted.
pub fn is_terminating<K: Resource>(object: &K) -> bool {
    object.meta().deletion_timestamp.is_some()
}

/// Whether `object` carries `finalizer`.
pub fn has_finalizer<K: Resource>(object: &K, finalizer: &str) -> bool {
    object.finalizers().iter().any(|f| f == finalizer)
}

/// A status condition, as the API's `metav1.Condition` and the older
/// per-kind conditions (`NamespaceCondition`, …) share its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// Sets `wanted` in a JSON list of conditions: replaced in place, its
/// `lastTransitionTime` kept unless its status changed (then `now`).
/// Returns whether the list changed.
pub fn set_condition(
    conditions: &mut Vec<serde_json::Value>,
    wanted: &Condition,
    now: &Time,
) -> bool {
    let now = serde_json::to_value(now).unwrap_or_default();
    let mut fresh = serde_json::json!({
        "type": wanted.type_,
        "status": wanted.status,
        "reason": wanted.reason,
        "message": wanted.message,
        "lastTransitionTime": now,
    });
    match conditions
        .iter_mut()
        .find(|c| c["type"] == wanted.type_.as_str())
    {
        Some(existing) => {
            if existing["status"] == wanted.status.as_str() {
                fresh["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            }
            if *existing == fresh {
                return false;
            }
            *existing = fresh;
            true
        }
        None => {
            conditions.push(fresh);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    #[test]
    fn controller_references_are_set_and_found() {
        let owner = ConfigMap {
            metadata: ObjectMeta {
                name: Some("o".into()),
                uid: Some("u".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let reference = controller_reference(&owner).expect("named");
        assert_eq!(
            (reference.kind.as_str(), reference.api_version.as_str()),
            ("ConfigMap", "v1")
        );
        let mut dependent = ConfigMap::default();
        assert!(controller_of(&dependent).is_none());
        dependent.metadata.owner_references = Some(vec![reference]);
        assert_eq!(controller_of(&dependent).map(|r| r.uid.as_str()), Some("u"));
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).expect("time"));
        let t2 = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).expect("time"));
        let mut list = Vec::new();
        let wanted = Condition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: "Waiting".into(),
            message: "a".into(),
        };
        assert!(set_condition(&mut list, &wanted, &t1));
        assert!(!set_condition(&mut list, &wanted, &t2), "unchanged");
        let reworded = Condition {
            message: "b".into(),
            ..wanted.clone()
        };
        assert!(set_condition(&mut list, &reworded, &t2));
        assert_eq!(list[0]["lastTransitionTime"], json!("1970-01-01T00:16:40Z"));
        let flipped = Condition {
            status: "True".into(),
            ..wanted
        };
        assert!(set_condition(&mut list, &flipped, &t2));
        assert_eq!(list[0]["lastTransitionTime"], json!("1970-01-01T00:33:20Z"));
        assert_eq!(list.len(), 1);
    }
}
