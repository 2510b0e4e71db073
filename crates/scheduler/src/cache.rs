//! The scheduler's cache (upstream's `internal/cache`): every node with
//! the pods bound to it, and the pods the scheduler *assumed* onto a node
//! at Reserve, so the next cycle counts them before their binding is
//! observed. An assumption is confirmed when the informer shows the pod
//! bound, forgotten when binding fails, and expires if, its binding done,
//! the pod never shows up bound (deleted meanwhile).
//!
//! A cycle works on a [`Snapshot`]: the nodes' infos as shared pointers,
//! copied only when the cache changes one while a snapshot holds it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::framework::changes::{PodChange, PodLog, next_epoch};
use crate::framework::{Listers, NodeInfo, PodInfo, Snapshot};

/// How long an assumed pod whose binding finished waits to be seen bound.
pub const ASSUMED_POD_TTL: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct PodState {
    node: String,
    assumed: bool,
    /// For an assumed pod whose binding finished: when it expires.
    deadline: Option<Instant>,
}

#[derive(Debug)]
struct Entry {
    info: Arc<NodeInfo>,
    /// Whether the Node object exists (pods may be bound to one that
    /// does not, yet or any more).
    present: bool,
}

#[derive(Debug, Default)]
pub struct Cache {
    nodes: HashMap<String, Entry>,
    /// Node names in the order they were added: the order cycles walk.
    order: Vec<String>,
    pods: HashMap<String, PodState>,
    image_nodes: Arc<HashMap<String, usize>>,
    listers: Arc<Listers>,
    /// The present nodes' infos in `order`, and each one's position: what
    /// a snapshot shares, kept up to date on every change so a cycle pays
    /// nothing per node to start. A change copies the list only while a
    /// snapshot still holds it (the scheduling loop drops its snapshot
    /// before it assumes).
    list: Arc<Vec<Arc<NodeInfo>>>,
    index: Arc<HashMap<String, usize>>,
    /// The positions in `list` of nodes with pods that have pod affinity
    /// terms; `None` after a change that may have altered them.
    with_affinity: Option<Arc<Vec<usize>>>,
    /// When assumptions were last checked for expiry (once a second: the
    /// check walks every pod).
    expired_at: Option<Instant>,
    /// Every pod counted in or out of a present node, and the node epoch:
    /// changed whenever the list's positions, or a node's labels or
    /// taints, do (see [`crate::framework::changes`]).
    log: Arc<PodLog>,
    epoch: u64,
}

fn taints(info: &NodeInfo) -> Option<&Vec<k8s_openapi::api::core::v1::Taint>> {
    info.node.spec.as_ref().and_then(|s| s.taints.as_ref())
}

fn has_affinity_pods(info: &NodeInfo) -> bool {
    info.pods_with_affinity > 0
}

/// What the entry of a present node holds while the list's copy changes.
fn placeholder() -> Arc<NodeInfo> {
    static EMPTY: std::sync::OnceLock<Arc<NodeInfo>> = std::sync::OnceLock::new();
    EMPTY
        .get_or_init(|| Arc::new(NodeInfo::new(Arc::new(Node::default()))))
        .clone()
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

impl Cache {
    pub fn new() -> Self {
        Cache::default()
    }

    /// Snapshots read namespaces, Services and controllers from `listers`.
    pub fn set_listers(&mut self, listers: Arc<Listers>) {
        self.listers = listers;
    }

    pub fn listers(&self) -> &Arc<Listers> {
        &self.listers
    }

    fn entry(&mut self, name: &str) -> &mut Entry {
        if !self.nodes.contains_key(name) {
            let placeholder = Node {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            };
            self.nodes.insert(
                name.to_string(),
                Entry {
                    info: Arc::new(NodeInfo::new(Arc::new(placeholder))),
                    present: false,
                },
            );
            self.order.push(name.to_string());
        }
        self.nodes.get_mut(name).expect("inserted")
    }

    fn count_images(&mut self, info: &NodeInfo, delta: isize) {
        if info.images.is_empty() {
            return;
        }
        let counts = Arc::make_mut(&mut self.image_nodes);
        for image in info.images.keys() {
            let count = counts.entry(image.clone()).or_default();
            *count = count.saturating_add_signed(delta);
            if *count == 0 {
                counts.remove(image);
            }
        }
    }

    /// A Node added or changed.
    pub fn set_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let was_present = self.nodes.get(&name).is_some_and(|e| e.present);
        let old = self.entry(&name).info.clone();
        if was_present {
            self.count_images(&old, -1);
        }
        let fresh = Arc::new(old.with_node(node));
        if !was_present || old.labels() != fresh.labels() || taints(&old) != taints(&fresh) {
            self.epoch = next_epoch();
        }
        self.count_images(&fresh, 1);
        let entry = self.entry(&name);
        entry.info = fresh;
        entry.present = true;
        if was_present {
            self.refresh(&name);
        } else if let Some(entry) = self.nodes.get(&name)
            && self.order.last() == Some(&name)
        {
            // A new node, last in the order: appended, no rebuild.
            let info = entry.info.clone();
            Arc::make_mut(&mut self.index).insert(name, self.list.len());
            Arc::make_mut(&mut self.list).push(info);
            self.with_affinity = None;
        } else {
            self.rebuild();
        }
    }

    /// Puts a node's changed info in the list snapshots share.
    fn refresh(&mut self, name: &str) {
        if let (Some(&at), Some(entry)) = (self.index.get(name), self.nodes.get(name)) {
            let had = has_affinity_pods(&self.list[at]);
            Arc::make_mut(&mut self.list)[at] = entry.info.clone();
            self.affinity_may_change(had, at);
        }
    }

    /// Forgets the positions of nodes with affinity pods only if the node
    /// at `at` joined or left them: a cycle would otherwise walk every
    /// node to find them again after each assumption.
    fn affinity_may_change(&mut self, had: bool, at: usize) {
        if had != has_affinity_pods(&self.list[at]) {
            self.with_affinity = None;
        }
    }

    /// Changes a node's info in place. The entry and the list share it;
    /// the entry lets go first, so it is copied only if a snapshot holds it.
    fn change_node(&mut self, name: &str, change: impl FnOnce(&mut NodeInfo)) {
        let at = self.index.get(name).copied();
        let entry = self.entry(name);
        match at {
            Some(at) if entry.present => {
                entry.info = placeholder();
                let had = has_affinity_pods(&self.list[at]);
                let list = Arc::make_mut(&mut self.list);
                change(Arc::make_mut(&mut list[at]));
                let info = list[at].clone();
                if let Some(entry) = self.nodes.get_mut(name) {
                    entry.info = info;
                }
                self.affinity_may_change(had, at);
            }
            _ => change(Arc::make_mut(&mut entry.info)),
        }
    }

    /// Rebuilds the list and positions after nodes came or went.
    fn rebuild(&mut self) {
        self.with_affinity = None;
        self.epoch = next_epoch();
        self.list = Arc::new(
            self.order
                .iter()
                .filter_map(|name| self.nodes.get(name))
                .filter(|e| e.present)
                .map(|e| e.info.clone())
                .collect(),
        );
        self.index = Arc::new(
            self.list
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.clone(), i))
                .collect(),
        );
    }

    /// A Node deleted: its pods stay counted until they go.
    pub fn remove_node(&mut self, name: &str) {
        let Some(entry) = self.nodes.get(name) else {
            return;
        };
        let (info, present, empty) = (
            entry.info.clone(),
            entry.present,
            entry.info.pods.is_empty(),
        );
        if present {
            self.count_images(&info, -1);
        }
        if empty {
            self.nodes.remove(name);
            self.order.retain(|n| n != name);
        } else if let Some(entry) = self.nodes.get_mut(name) {
            entry.present = false;
        }
        self.rebuild();
    }

    /// Logs `pod` counted in or out of `node`, if present (what cycles
    /// see: the positions hold present nodes only).
    fn log(&self, node: &str, pod: Arc<PodInfo>, delta: i64) {
        if let Some(&at) = self.index.get(node) {
            self.log.push(PodChange {
                node: at,
                pod,
                delta,
            });
        }
    }

    fn add_to_node(&mut self, node: &str, pod: Arc<PodInfo>) {
        self.change_node(node, |info| info.add_pod(pod.clone()));
        self.log(node, pod, 1);
    }

    fn remove_from_node(&mut self, node: &str, key: &str) {
        if !self.nodes.contains_key(node) {
            return;
        }
        let mut removed = None;
        self.change_node(node, |info| removed = info.remove_pod(key));
        if let Some(pod) = removed {
            self.log(node, pod, -1);
        }
        if self
            .nodes
            .get(node)
            .is_some_and(|e| !e.present && e.info.pods.is_empty())
        {
            self.nodes.remove(node);
            self.order.retain(|n| n != node);
        }
    }

    /// Counts `pod` on `node` before it is bound (Reserve).
    pub fn assume(&mut self, pod: Arc<PodInfo>, node: &str) {
        let key = pod.key.clone();
        if let Some(old) = self.pods.remove(&key) {
            self.remove_from_node(&old.node, &key);
        }
        self.add_to_node(node, pod);
        self.pods.insert(
            key,
            PodState {
                node: node.to_string(),
                assumed: true,
                deadline: None,
            },
        );
    }

    /// The assumed pod's binding was sent: it expires if never seen bound.
    pub fn finish_binding(&mut self, key: &str, now: Instant) {
        if let Some(state) = self.pods.get_mut(key)
            && state.assumed
        {
            state.deadline = Some(now + ASSUMED_POD_TTL);
        }
    }

    /// The binding failed: the assumption is dropped.
    pub fn forget(&mut self, key: &str) {
        if let Some(state) = self.pods.get(key)
            && state.assumed
        {
            let node = state.node.clone();
            self.pods.remove(key);
            self.remove_from_node(&node, key);
        }
    }

    /// A pod bound to a node, as the informer shows it (confirming an
    /// assumption, or moving the pod where it really is).
    pub fn set_pod(&mut self, pod: Arc<Pod>) {
        let Some(node) = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty())
        else {
            return;
        };
        let key = pod_key(&pod);
        if let Some(old) = self.pods.remove(&key) {
            self.remove_from_node(&old.node, &key);
        }
        self.add_to_node(&node, Arc::new(PodInfo::new(pod)));
        self.pods.insert(
            key,
            PodState {
                node,
                assumed: false,
                deadline: None,
            },
        );
    }

    /// A pod deleted (or finished: it holds nothing any more).
    pub fn remove_pod(&mut self, pod: &Pod) {
        let key = pod_key(pod);
        if let Some(old) = self.pods.remove(&key) {
            self.remove_from_node(&old.node, &key);
        }
    }

    pub fn is_assumed(&self, key: &str) -> bool {
        self.pods.get(key).is_some_and(|s| s.assumed)
    }

    /// Drops assumptions whose binding finished long ago and that were
    /// never confirmed; returns their keys.
    pub fn expire(&mut self, now: Instant) -> Vec<String> {
        if self
            .expired_at
            .is_some_and(|t| now.saturating_duration_since(t) < Duration::from_secs(1))
        {
            return Vec::new();
        }
        self.expired_at = Some(now);
        let expired: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, s)| s.assumed && s.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &expired {
            self.forget(key);
        }
        expired
    }

    /// The nodes that exist, with their pods, for one cycle: shared with
    /// the cache, nothing copied.
    pub fn snapshot(&mut self) -> Snapshot {
        let list = &self.list;
        let with_affinity = self
            .with_affinity
            .get_or_insert_with(|| Arc::new(Snapshot::with_affinity(list)))
            .clone();
        Snapshot::shared(self.list.clone(), self.index.clone(), with_affinity)
            .with_images(self.image_nodes.clone())
            .with_listers(self.listers.clone())
            .with_changes(self.log.clone(), self.log.end(), self.epoch)
    }

    pub fn node_count(&self) -> usize {
        self.nodes.values().filter(|e| e.present).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "status": {"allocatable": {"cpu": "4", "pods": "10"}, "images": [{"names": ["busybox:1"], "sizeBytes": 1000}]},
            }))
            .expect("node"),
        )
    }

    fn pod(name: &str, node: Option<&str>) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            }))
            .expect("pod"),
        )
    }

    #[test]
    fn assumed_pods_count_until_confirmed_or_forgotten() {
        let mut cache = Cache::new();
        cache.set_node(node("n1"));
        let p = Arc::new(PodInfo::new(pod("a", None)));
        cache.assume(p.clone(), "n1");
        assert!(cache.is_assumed("default/a"));
        assert_eq!(
            cache.snapshot().get("n1").expect("n1").requested.milli_cpu,
            1000
        );
        // Seen bound: confirmed, still counted once.
        cache.set_pod(pod("a", Some("n1")));
        assert!(!cache.is_assumed("default/a"));
        assert_eq!(cache.snapshot().get("n1").expect("n1").pods.len(), 1);
        // Another assumed then forgotten.
        cache.assume(Arc::new(PodInfo::new(pod("b", None))), "n1");
        cache.forget("default/b");
        assert_eq!(cache.snapshot().get("n1").expect("n1").pods.len(), 1);
    }

    #[test]
    fn a_snapshot_keeps_what_it_saw_while_the_cache_changes() {
        let mut cache = Cache::new();
        cache.set_node(node("n1"));
        cache.set_node(node("n2"));
        let before = cache.snapshot();
        cache.assume(Arc::new(PodInfo::new(pod("a", None))), "n1");
        cache.set_pod(pod("b", Some("n2")));
        // The snapshot taken before is unchanged; a new one sees both.
        assert!(before.get("n1").expect("n1").pods.is_empty());
        assert!(before.get("n2").expect("n2").pods.is_empty());
        let after = cache.snapshot();
        assert_eq!(after.get("n1").expect("n1").pods.len(), 1);
        assert_eq!(after.get("n2").expect("n2").pods.len(), 1);
        // With no snapshot held, changes are made in place, and the
        // list's info and the entry's agree.
        drop((before, after));
        cache.forget("default/a");
        assert!(cache.snapshot().get("n1").expect("n1").pods.is_empty());
        cache.assume(Arc::new(PodInfo::new(pod("c", None))), "n1");
        assert_eq!(cache.snapshot().get("n1").expect("n1").pods.len(), 1);
    }

    #[test]
    fn nodes_with_affinity_pods_follow_the_pods() {
        let mut cache = Cache::new();
        cache.set_node(node("n1"));
        cache.set_node(node("n2"));
        let anti: Arc<Pod> = Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "anti", "namespace": "default"},
                "spec": {"containers": [{"name": "c"}], "affinity": {"podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": {"matchLabels": {"a": "b"}},
                        "topologyKey": "kubernetes.io/hostname"}]}}},
            }))
            .expect("pod"),
        );
        assert!(cache.snapshot().with_affinity_pods.is_empty());
        cache.assume(Arc::new(PodInfo::new(anti)), "n2");
        assert_eq!(*cache.snapshot().with_affinity_pods, [1]);
        // A plain pod beside it changes nothing; its going empties the list.
        cache.assume(Arc::new(PodInfo::new(pod("plain", None))), "n2");
        assert_eq!(*cache.snapshot().with_affinity_pods, [1]);
        cache.forget("default/anti");
        assert!(cache.snapshot().with_affinity_pods.is_empty());
    }

    #[test]
    fn assumptions_expire_after_their_binding() {
        let mut cache = Cache::new();
        cache.set_node(node("n1"));
        cache.assume(Arc::new(PodInfo::new(pod("a", None))), "n1");
        let now = Instant::now();
        cache.finish_binding("default/a", now);
        assert!(cache.expire(now).is_empty());
        assert_eq!(cache.expire(now + ASSUMED_POD_TTL), ["default/a"]);
        assert!(cache.snapshot().get("n1").expect("n1").pods.is_empty());
    }

    #[test]
    fn nodes_and_their_images() {
        let mut cache = Cache::new();
        cache.set_node(node("n1"));
        cache.set_node(node("n2"));
        assert_eq!(cache.snapshot().image_nodes.get("busybox:1"), Some(&2));
        cache.set_pod(pod("a", Some("n2")));
        cache.remove_node("n2");
        assert_eq!(cache.snapshot().len(), 1);
        assert_eq!(cache.snapshot().image_nodes.get("busybox:1"), Some(&1));
        // The node comes back: its pod is still there.
        cache.set_node(node("n2"));
        assert_eq!(cache.snapshot().get("n2").expect("n2").pods.len(), 1);
    }
}
