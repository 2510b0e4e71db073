//! Helpers on typed objects' metadata that controllers share: owner
//! references (who controls an object, and how to say "I do"), deletion
//! state, finalizers; status conditions come from `rudder_api::meta`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
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

pub use rudder_api::meta::{Condition, set_condition};

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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
}
