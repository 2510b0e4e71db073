//! Helpers on typed objects' metadata that controllers share: owner
//! references (who controls an object, and how to say "I do"), deletion
//! state, finalizers, label selectors, and pods' readiness; status
//! conditions come from `rudder_api::meta`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
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

/// Whether `labels` satisfy `selector` (upstream's
/// `LabelSelectorAsSelector(selector).Matches(labels)`): every
/// `matchLabels` pair and every `matchExpressions` requirement holds; an
/// empty selector matches everything. An operator upstream would refuse
/// matches nothing.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let pairs = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    pairs
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            match (e.operator.as_str(), labels.get(&e.key)) {
                ("In", Some(v)) => values.contains(v),
                ("In", None) => false,
                ("NotIn", Some(v)) => !values.contains(v),
                ("NotIn", None) => true,
                ("Exists", found) => found.is_some(),
                ("DoesNotExist", found) => found.is_none(),
                _ => false,
            }
        })
}

/// Whether a selector selects nothing in particular (no labels, no
/// expressions): upstream's controllers refuse to act on one.
pub fn selector_is_empty(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty())
}

/// The labels of `object` (an empty map when it has none).
pub fn labels_of<K: Resource>(object: &K) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    object.meta().labels.as_ref().unwrap_or(&EMPTY)
}

/// Pods as controllers see them (upstream's `pkg/api/v1/pod` and
/// `controller_utils` helpers).
pub mod pod {
    use std::time::{Duration, SystemTime};

    use k8s_openapi::api::core::v1::Pod;

    /// The pod's phase (`Pending` when unset).
    pub fn phase(pod: &Pod) -> &str {
        pod.status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("Pending")
    }

    /// Neither finished nor being deleted (upstream's `IsPodActive`).
    pub fn is_active(pod: &Pod) -> bool {
        !matches!(phase(pod), "Succeeded" | "Failed") && pod.metadata.deletion_timestamp.is_none()
    }

    /// The time its `Ready` condition became `True`, if it is ready.
    pub fn ready_since(pod: &Pod) -> Option<SystemTime> {
        pod.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "Ready" && c.status == "True")
            .map(|c| {
                c.last_transition_time
                    .as_ref()
                    .map(|t| SystemTime::from(t.0))
                    .unwrap_or(SystemTime::UNIX_EPOCH)
            })
    }

    /// Whether its `Ready` condition is `True` (upstream's `IsPodReady`).
    pub fn is_ready(pod: &Pod) -> bool {
        ready_since(pod).is_some()
    }

    /// Ready for at least `min_ready` at `now` (upstream's
    /// `IsPodAvailable`).
    pub fn is_available(pod: &Pod, min_ready: Duration, now: SystemTime) -> bool {
        match ready_since(pod) {
            None => false,
            Some(_) if min_ready.is_zero() => true,
            Some(since) => since + min_ready <= now,
        }
    }

    /// The sum of its containers' restart counts.
    pub fn restarts(pod: &Pod) -> i32 {
        pod.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .map(|c| c.iter().map(|c| c.restart_count).sum())
            .unwrap_or(0)
    }

    /// The node it is bound to, if any.
    pub fn node(pod: &Pod) -> Option<&str> {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn selectors_match_as_upstream() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())]
            .into_iter()
            .collect();
        let requirement = |operator: &str, values: &[&str]| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: operator.into(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            }]),
            ..Default::default()
        };
        assert!(selector_matches(&LabelSelector::default(), &labels));
        assert!(selector_is_empty(&LabelSelector::default()));
        assert!(selector_matches(
            &requirement("In", &["web", "db"]),
            &labels
        ));
        assert!(!selector_matches(&requirement("NotIn", &["web"]), &labels));
        assert!(selector_matches(&requirement("Exists", &[]), &labels));
        assert!(!selector_matches(
            &requirement("DoesNotExist", &[]),
            &labels
        ));
        assert!(!selector_matches(&requirement("Gt", &["1"]), &labels));
        let by_label = LabelSelector {
            match_labels: Some(
                [("app".to_string(), "db".to_string())]
                    .into_iter()
                    .collect(),
            ),
            ..Default::default()
        };
        assert!(!selector_matches(&by_label, &labels));
        assert!(!selector_is_empty(&by_label));
    }

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
