//! The scheduling framework (upstream's `pkg/scheduler/framework`): one
//! trait per extension point, the status a plugin answers with, the
//! per-cycle state plugins share between their extension points, and the
//! snapshot of nodes one cycle sees.
//!
//! A plugin is a small struct implementing the traits of the extension
//! points it serves; a [`Profile`](crate::profile::Profile) lists the
//! plugins of each point, in order, with score weights. Plugins are pure:
//! given the pod and the snapshot they decide; the scheduler does the IO
//! (binding, preemption's deletions, status and events).

pub mod affinity;
pub mod changes;
pub mod listers;
pub mod status;
pub mod types;
pub mod volumes;

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

pub use listers::Listers;
pub use status::{Code, Reason, Reasons, Status};
pub use types::{NodeInfo, PodInfo, Resource};
pub use volumes::VolumeListers;

/// The highest score a plugin gives a node (`MaxNodeScore`).
pub const MAX_NODE_SCORE: i64 = 100;

/// State one scheduling cycle's plugins keep between their extension
/// points (upstream's `CycleState`): written at PreFilter or PreScore, read
/// at Filter or Score, keyed by the plugin's name.
#[derive(Default)]
pub struct CycleState {
    entries: HashMap<&'static str, Arc<dyn Any + Send + Sync>>,
    /// Whether the pod's PreFilter asked for no later work by a plugin.
    skip_filter: Vec<&'static str>,
    skip_score: Vec<&'static str>,
}

impl std::fmt::Debug for CycleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CycleState")
            .field("entries", &self.entries.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl CycleState {
    pub fn write<T: Any + Send + Sync>(&mut self, key: &'static str, value: T) {
        self.entries.insert(key, Arc::new(value));
    }

    pub fn read<T: Any + Send + Sync>(&self, key: &'static str) -> Option<&T> {
        self.entries.get(key)?.downcast_ref()
    }

    /// Changes the entry `key`, if there is one (a copy: clones of this
    /// state keep theirs).
    pub fn modify<T: Any + Send + Sync + Clone>(
        &mut self,
        key: &'static str,
        f: impl FnOnce(&mut T),
    ) {
        if let Some(mut value) = self.read::<T>(key).cloned() {
            f(&mut value);
            self.write(key, value);
        }
    }

    pub(crate) fn skip_filter(&mut self, plugin: &'static str) {
        self.skip_filter.push(plugin);
    }

    pub(crate) fn skips_filter(&self, plugin: &'static str) -> bool {
        self.skip_filter.contains(&plugin)
    }

    pub(crate) fn skip_score(&mut self, plugin: &'static str) {
        self.skip_score.push(plugin);
    }

    pub(crate) fn skips_score(&self, plugin: &'static str) -> bool {
        self.skip_score.contains(&plugin)
    }

    /// A copy for trying a node with changed pods (preemption): the
    /// entries are shared until one is written.
    pub fn clone_state(&self) -> CycleState {
        CycleState {
            entries: self.entries.clone(),
            skip_filter: self.skip_filter.clone(),
            skip_score: self.skip_score.clone(),
        }
    }
}

/// The nodes one cycle sees, in the cache's order (upstream's `Snapshot`).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub nodes: Arc<Vec<Arc<NodeInfo>>>,
    index: Arc<HashMap<String, usize>>,
    /// The nodes with a pod that has pod affinity or anti-affinity terms.
    pub with_affinity_pods: Arc<Vec<usize>>,
    /// How many nodes have each image (for ImageLocality's spread).
    pub image_nodes: Arc<HashMap<String, usize>>,
    /// Claims, volumes, classes and CSINodes (the volume plugins' listers).
    pub volumes: Arc<VolumeListers>,
    /// Namespaces, Services and controllers (upstream's listers).
    pub listers: Arc<Listers>,
    /// The pods nominated to each node (preemptors waiting for their
    /// victims to go), by node name.
    pub nominated: Arc<HashMap<String, Vec<Arc<PodInfo>>>>,
    /// The PodDisruptionBudgets preemption respects.
    pub pdbs: Arc<Vec<Arc<PodDisruptionBudget>>>,
    /// The cache's log of pods counted in and out of nodes, how far it
    /// went when this snapshot was taken, and the node epoch (see
    /// [`changes`]): what lets a PreFilter carry its counts forward.
    pub changes: Arc<changes::PodLog>,
    pub changes_end: u64,
    pub node_epoch: u64,
}

impl Snapshot {
    pub fn new(nodes: Vec<Arc<NodeInfo>>) -> Self {
        let index = Arc::new(
            nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.clone(), i))
                .collect(),
        );
        Snapshot::indexed(nodes, index)
    }

    /// The same, with the positions of the nodes by name already known
    /// (the cache keeps them between cycles).
    pub fn indexed(nodes: Vec<Arc<NodeInfo>>, index: Arc<HashMap<String, usize>>) -> Self {
        let with_affinity = Arc::new(Snapshot::with_affinity(&nodes));
        Snapshot::shared(Arc::new(nodes), index, with_affinity)
    }

    /// The positions of the nodes with pods that have pod affinity terms.
    pub fn with_affinity(nodes: &[Arc<NodeInfo>]) -> Vec<usize> {
        nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.pods_with_affinity > 0)
            .map(|(i, _)| i)
            .collect()
    }

    /// The same, from lists the cache shares.
    pub fn shared(
        nodes: Arc<Vec<Arc<NodeInfo>>>,
        index: Arc<HashMap<String, usize>>,
        with_affinity_pods: Arc<Vec<usize>>,
    ) -> Self {
        Snapshot {
            nodes,
            index,
            with_affinity_pods,
            image_nodes: Arc::default(),
            volumes: VolumeListers::empty(),
            listers: Listers::empty(),
            nominated: Arc::default(),
            pdbs: Arc::default(),
            changes: Arc::default(),
            changes_end: 0,
            node_epoch: changes::next_epoch(),
        }
    }

    /// The same, its nodes' pods changed as `log` says up to `end` since
    /// they last changed themselves (`epoch`).
    pub fn with_changes(mut self, log: Arc<changes::PodLog>, end: u64, epoch: u64) -> Self {
        self.changes = log;
        self.changes_end = end;
        self.node_epoch = epoch;
        self
    }

    /// The same, knowing the pods nominated to each node.
    pub fn with_nominated(mut self, nominated: Arc<HashMap<String, Vec<Arc<PodInfo>>>>) -> Self {
        self.nominated = nominated;
        self
    }

    /// The same, with the PodDisruptionBudgets.
    pub fn with_pdbs(mut self, pdbs: Arc<Vec<Arc<PodDisruptionBudget>>>) -> Self {
        self.pdbs = pdbs;
        self
    }

    /// The pods nominated to `node`.
    pub fn nominated_to(&self, node: &str) -> &[Arc<PodInfo>] {
        self.nominated.get(node).map_or(&[], Vec::as_slice)
    }

    /// The same, reading namespaces, Services and controllers from
    /// `listers`.
    pub fn with_listers(mut self, listers: Arc<Listers>) -> Self {
        self.listers = listers;
        self
    }

    /// The same, reading volumes from `volumes`.
    pub fn with_volumes(mut self, volumes: Arc<VolumeListers>) -> Self {
        self.volumes = volumes;
        self
    }

    /// The same, knowing how many nodes have each image.
    pub fn with_images(mut self, image_nodes: Arc<HashMap<String, usize>>) -> Self {
        self.image_nodes = image_nodes;
        self
    }

    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|i| &self.nodes[*i])
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// A plugin: its upstream name.
pub trait Plugin: Send + Sync {
    fn name(&self) -> &'static str;
}

/// Whether a pod may enter the active queue at all (scheduling gates).
pub trait PreEnqueue: Plugin {
    fn pre_enqueue(&self, pod: &Pod) -> Status;
}

/// What PreFilter may narrow the nodes to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreFilterResult {
    /// Only these nodes can fit; `None`: all may.
    pub node_names: Option<Vec<String>>,
}

/// Once per cycle, before the nodes are filtered: checks the pod and
/// computes what Filter needs.
pub trait PreFilter: Plugin {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status);

    /// Adds or removes a pod in what PreFilter computed (preemption tries
    /// nodes without their victims); `None` when the plugin keeps nothing
    /// that depends on other pods.
    fn add_pod(&self, _state: &mut CycleState, _pod: &PodInfo, _added: &PodInfo, _node: &NodeInfo) {
    }
    fn remove_pod(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _removed: &PodInfo,
        _node: &NodeInfo,
    ) {
    }
}

/// Per node: can the pod run there?
pub trait Filter: Plugin {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;
}

/// What preemption (or any PostFilter) decided.
#[derive(Debug, Clone, Default)]
pub struct PostFilterResult {
    /// The node the pod is nominated to, once victims are gone;
    /// `Some("")` clears its nomination (upstream's `ModeOverride` with
    /// no node), `None` leaves it as it is.
    pub nominated_node: Option<String>,
    /// The pods to evict for it.
    pub victims: Vec<Arc<PodInfo>>,
}

/// What a plugin may run of its profile's other plugins (upstream's
/// `framework.Handle`): preemption tries nodes with pods taken away.
pub trait Handle {
    /// Each PreFilter plugin's `add_pod` (those not skipped this cycle).
    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, added: &PodInfo, node: &NodeInfo);
    /// Each PreFilter plugin's `remove_pod`.
    fn remove_pod(&self, state: &mut CycleState, pod: &PodInfo, removed: &PodInfo, node: &NodeInfo);
    /// The Filter plugins on `node`, counting the pods `nominated` to it
    /// (upstream's `RunFilterPluginsWithNominatedPods`).
    fn filter_with_nominated(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &[Arc<PodInfo>],
    ) -> Status;
}

/// When no node fits: may make room (preemption).
pub trait PostFilter: Plugin {
    fn post_filter(
        &self,
        handle: &dyn Handle,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &HashMap<String, Status>,
    ) -> (PostFilterResult, Status);
}

/// Once per cycle, before the feasible nodes are scored.
pub trait PreScore: Plugin {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status;
}

/// Per feasible node, a score; then all of them normalized to 0..=100.
pub trait Score: Plugin {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64;

    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, _scores: &mut [i64]) {}
}

/// Holds (or frees) what the pod needs on the chosen node before binding.
pub trait Reserve: Plugin {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str);
}

/// The IO a pod needs before its binding, done off the scheduling cycle
/// (VolumeBinding writes its claims' bindings and waits for them).
pub trait PreBind: Plugin {
    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a PodInfo,
        node: &'a str,
    ) -> BoxFuture<'a, Status>;
}

/// The IO before and at binding, done off the scheduling cycle.
pub trait Bind: Plugin {
    /// Binds the pod to `node`; `Skip` passes to the next binder.
    fn bind<'a>(&'a self, pod: &'a PodInfo, node: &'a str) -> BoxFuture<'a, Status>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycle_state_is_typed_per_plugin() {
        let mut state = CycleState::default();
        state.write("A", 7usize);
        assert_eq!(state.read::<usize>("A"), Some(&7));
        assert_eq!(state.read::<String>("A"), None);
        let copy = state.clone_state();
        assert_eq!(copy.read::<usize>("A"), Some(&7));
    }
}
