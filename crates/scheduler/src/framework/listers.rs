//! The objects besides nodes and pods that plugins read (upstream's
//! listers, reached through the framework handle): Namespaces, for
//! InterPodAffinity's namespace selectors, and the Services and
//! controllers that select a pod, for PodTopologySpread's default
//! constraints. They are the informers' stores, read as the cycle runs,
//! as upstream's listers are.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Pod, ReplicationController, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use rudder_runtime::Informers;
use rudder_runtime::informer::{NAMESPACE_INDEX, Store};

#[derive(Debug, Clone, Default)]
pub struct Listers {
    pub namespaces: Store<Namespace>,
    pub services: Store<Service>,
    pub replication_controllers: Store<ReplicationController>,
    pub replica_sets: Store<ReplicaSet>,
    pub stateful_sets: Store<StatefulSet>,
}

impl Listers {
    /// No objects at all, shared (what a snapshot reads until the
    /// scheduler gives it its informers' stores).
    pub fn empty() -> Arc<Listers> {
        static EMPTY: OnceLock<Arc<Listers>> = OnceLock::new();
        EMPTY.get_or_init(Arc::default).clone()
    }

    /// The listers of `informers`, once they have synced.
    pub async fn start(informers: &Informers) -> Self {
        let namespaces = informers.typed::<Namespace>();
        let services = informers.typed::<Service>();
        let replication_controllers = informers.typed::<ReplicationController>();
        let replica_sets = informers.typed::<ReplicaSet>();
        let stateful_sets = informers.typed::<StatefulSet>();
        namespaces.wait_synced().await;
        services.wait_synced().await;
        replication_controllers.wait_synced().await;
        replica_sets.wait_synced().await;
        stateful_sets.wait_synced().await;
        Listers {
            namespaces: namespaces.store(),
            services: services.store(),
            replication_controllers: replication_controllers.store(),
            replica_sets: replica_sets.store(),
            stateful_sets: stateful_sets.store(),
        }
    }

    /// The labels of namespace `name` (none when it is unknown).
    pub fn namespace_labels(&self, name: &str) -> BTreeMap<String, String> {
        self.namespaces
            .get(name)
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default()
    }

    /// What selects the pods `pod` is one of (upstream's
    /// `helper.DefaultSelector`): the selectors of the Services selecting
    /// it, merged, and of the ReplicationController, ReplicaSet or
    /// StatefulSet controlling it. Empty when nothing selects it.
    pub fn default_selector(&self, pod: &Pod) -> LabelSelector {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let empty = BTreeMap::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        let mut set: BTreeMap<String, String> = BTreeMap::new();
        for service in self.services.by_index(NAMESPACE_INDEX, namespace) {
            // A Service without a selector selects nothing.
            let Some(selector) = service.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
                continue;
            };
            if selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                set.extend(selector.clone());
            }
        }
        let owner = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true));
        let mut expressions: Vec<LabelSelectorRequirement> = Vec::new();
        if let Some(owner) = owner {
            let key = rudder_runtime::informer::key(Some(namespace), &owner.name);
            match (owner.api_version.as_str(), owner.kind.as_str()) {
                ("v1", "ReplicationController") => {
                    if let Some(rc) = self.replication_controllers.get(&key)
                        && let Some(selector) = rc.spec.as_ref().and_then(|s| s.selector.clone())
                    {
                        set.extend(selector);
                    }
                }
                ("apps/v1", "ReplicaSet") => {
                    if let Some(rs) = self.replica_sets.get(&key) {
                        expressions.extend(requirements(rs.spec.as_ref().map(|s| &s.selector)));
                    }
                }
                ("apps/v1", "StatefulSet") => {
                    if let Some(ss) = self.stateful_sets.get(&key) {
                        expressions.extend(requirements(ss.spec.as_ref().map(|s| &s.selector)));
                    }
                }
                _ => {}
            }
        }
        LabelSelector {
            match_labels: (!set.is_empty()).then_some(set),
            match_expressions: (!expressions.is_empty()).then_some(expressions),
        }
    }
}

/// A label selector as requirements alone (its `matchLabels` as `In`).
fn requirements(selector: Option<&LabelSelector>) -> Vec<LabelSelectorRequirement> {
    let Some(selector) = selector else {
        return Vec::new();
    };
    selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| LabelSelectorRequirement {
            key: k.clone(),
            operator: "In".into(),
            values: Some(vec![v.clone()]),
        })
        .chain(selector.match_expressions.iter().flatten().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_selector_merges_services_and_the_controller() {
        let listers = Listers::default();
        let service = |name: &str, selector: serde_json::Value| -> Service {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"selector": selector},
            }))
            .expect("service")
        };
        listers
            .services
            .apply(service("web", serde_json::json!({"app": "web"})));
        listers
            .services
            .apply(service("db", serde_json::json!({"app": "db"})));
        listers.replica_sets.apply(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web-1", "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"hash": "1"}}, "template": {}},
            }))
            .expect("rs"),
        );
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web", "hash": "1"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                    "uid": "u", "controller": true}]},
        }))
        .expect("pod");
        let selector = listers.default_selector(&pod);
        assert_eq!(
            selector.match_labels,
            Some([("app".to_string(), "web".to_string())].into())
        );
        assert_eq!(selector.match_expressions.as_ref().map(Vec::len), Some(1));
        let bare: Pod = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "q", "namespace": "default", "labels": {"x": "y"}}}),
        )
        .expect("pod");
        assert!(rudder_runtime::meta::selector_is_empty(
            &listers.default_selector(&bare)
        ));
    }
}
