//! The pods nominated to nodes (upstream's `nominator` in the scheduling
//! queue): pending pods whose preemption freed room on a node, known from
//! their `status.nominatedNodeName` or, before that is written, from the
//! scheduler's own decision. Filters count them on their node so no pod
//! of lower priority takes the room ([`crate::cycle`]).
//!
//! A cycle reads them by node from a shared map rebuilt only after a
//! change, so cycles with nothing nominated pay one pointer copy.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::framework::PodInfo;

/// The pods nominated to each node.
#[derive(Debug, Default)]
pub struct Nominator {
    /// Pod key to its node and info.
    pods: HashMap<String, (String, Arc<PodInfo>)>,
    /// `pods` by node, built when asked for after a change.
    by_node: Option<Arc<HashMap<String, Vec<Arc<PodInfo>>>>>,
}

/// `status.nominatedNodeName`, if set.
pub fn nominated_node_name(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
}

impl Nominator {
    pub fn new() -> Self {
        Nominator::default()
    }

    /// Nominates the pod to `node` (a preemption decision).
    pub fn add(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.pods.insert(pod.key.clone(), (node.to_string(), pod));
        self.by_node = None;
    }

    /// The pod is bound, assumed, deleted or no longer nominated.
    pub fn remove(&mut self, key: &str) {
        if self.pods.remove(key).is_some() {
            self.by_node = None;
        }
    }

    /// A pending pod as the informer shows it (upstream's
    /// `updateNominatedPod`): nominated where its status says; when
    /// neither this version nor the last says anything, a nomination the
    /// scheduler made and has not seen written yet is kept.
    pub fn update(&mut self, old: Option<&Pod>, new: &Pod, key: &str) {
        let node = match nominated_node_name(new) {
            Some(node) => Some(node.to_string()),
            None if old.and_then(nominated_node_name).is_none() => {
                self.pods.get(key).map(|(node, _)| node.clone())
            }
            None => None,
        };
        match node {
            Some(node) => self.add(Arc::new(PodInfo::new(Arc::new(new.clone()))), &node),
            None => self.remove(key),
        }
    }

    /// The node `key` is nominated to.
    pub fn node_of(&self, key: &str) -> Option<&str> {
        self.pods.get(key).map(|(node, _)| node.as_str())
    }

    /// The pods nominated to `node`.
    pub fn for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        self.pods
            .values()
            .filter(|(n, _)| n == node)
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// Every nominated pod by node, for a cycle's snapshot.
    pub fn by_node(&mut self) -> Arc<HashMap<String, Vec<Arc<PodInfo>>>> {
        if let Some(map) = &self.by_node {
            return map.clone();
        }
        let mut map: HashMap<String, Vec<Arc<PodInfo>>> = HashMap::new();
        for (node, pod) in self.pods.values() {
            map.entry(node.clone()).or_default().push(pod.clone());
        }
        let map = Arc::new(map);
        self.by_node = Some(map.clone());
        map
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, nominated: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": []},
            "status": {"nominatedNodeName": nominated},
        }))
        .expect("pod")
    }

    #[test]
    fn nominations_follow_the_status_and_the_schedulers_own_decisions() {
        let mut n = Nominator::new();
        let empty = n.by_node();
        assert!(empty.is_empty());
        assert!(
            Arc::ptr_eq(&empty, &n.by_node()),
            "no rebuild without a change"
        );
        // The scheduler nominates; an update that says nothing keeps it.
        n.add(Arc::new(PodInfo::new(Arc::new(pod("a", None)))), "n1");
        n.update(Some(&pod("a", None)), &pod("a", None), "default/a");
        assert_eq!(n.node_of("default/a"), Some("n1"));
        assert_eq!(n.by_node().get("n1").map(Vec::len), Some(1));
        // The status says another node; then the nomination is cleared.
        n.update(Some(&pod("a", None)), &pod("a", Some("n2")), "default/a");
        assert_eq!(n.node_of("default/a"), Some("n2"));
        assert!(n.for_node("n1").is_empty());
        n.update(Some(&pod("a", Some("n2"))), &pod("a", None), "default/a");
        assert_eq!(n.node_of("default/a"), None);
        assert!(n.is_empty());
        // A pod seen with a nomination, then removed once bound.
        n.update(None, &pod("b", Some("n1")), "default/b");
        assert_eq!(n.for_node("n1").len(), 1);
        n.remove("default/b");
        assert!(n.by_node().is_empty());
    }
}
