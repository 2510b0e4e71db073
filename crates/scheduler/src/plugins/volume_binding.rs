//! VolumeBinding: a pod's claims must be bound, or bindable, on the node.
//!
//! - PreFilter sorts the pod's claims: bound ones; unbound ones of a
//!   `WaitForFirstConsumer` class, which the scheduler binds; and other
//!   unbound ones, which the PV controller should have bound already
//!   (the pod is unresolvable until it has).
//! - Filter: a bound claim's volume must allow the node by its node
//!   affinity; each late claim, smallest first, gets the smallest Available
//!   volume of its class that fits and allows the node
//!   ([`find_matching_volume`]), else one to be provisioned there if its
//!   class has a provisioner and allows the node's topology.
//! - Reserve assumes the chosen volumes taken, so the next pods' cycles do
//!   not pick them; Unreserve forgets that.
//! - PreBind writes the bindings — the volume's `claimRef`, or for
//!   provisioning the claim's `volume.kubernetes.io/selected-node` — and
//!   waits (1 s polls, `bindTimeoutSeconds`) for the PV controller to bind
//!   the claims.
//!
//! Pods without claims are skipped at PreFilter.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use rudder_api::quantity::Quantity;

use super::helpers::terms_match;
use crate::config::args::VolumeBindingArgs;
use crate::framework::volumes::{claim_class, claim_volume_name, is_delayed, pod_claim_names};
use crate::framework::{
    CycleState, Filter, NodeInfo, Plugin, PodInfo, PreFilter, PreFilterResult, Reserve, Snapshot,
    Status,
};

mod prebind;

pub use prebind::bind_volume;

pub const NAME: &str = "VolumeBinding";
/// Upstream's `ErrReasonBindConflict`.
pub const BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// Upstream's `ErrReasonNodeConflict`.
pub const NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
/// Upstream's `ErrReasonPVNotExist`.
pub const PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// PreFilter's rejection of a pod whose immediate claims are unbound.
pub const UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
/// On a claim: the node chosen for its first consumer.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";
const RESERVED: &str = "VolumeBinding/reserved";

/// Bindings assumed at Reserve and not yet seen in the informers
/// (upstream's assume cache): volume → claim key, claim key → node.
#[derive(Debug, Default)]
struct Assumed {
    volumes: HashMap<String, String>,
    claims: HashMap<String, String>,
}

pub struct VolumeBinding {
    client: Option<Client>,
    bind_timeout: Duration,
    assumed: Mutex<Assumed>,
}

impl std::fmt::Debug for VolumeBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeBinding")
            .field("bind_timeout", &self.bind_timeout)
            .finish_non_exhaustive()
    }
}

impl VolumeBinding {
    /// Writes bindings through `client` (none: PreBind fails, for tests).
    pub fn new(client: Option<Client>, args: &VolumeBindingArgs) -> Self {
        VolumeBinding {
            client,
            bind_timeout: Duration::from_secs(args.bind_timeout_seconds.max(0) as u64),
            assumed: Mutex::default(),
        }
    }

    fn assumed(&self) -> std::sync::MutexGuard<'_, Assumed> {
        self.assumed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }
}

/// What a node needs done for the pod: volumes to bind to claims, claims
/// to provision.
#[derive(Debug, Clone, Default)]
pub struct PodVolumes {
    pub bindings: Vec<(Arc<PersistentVolume>, Arc<PersistentVolumeClaim>)>,
    pub provisions: Vec<Arc<PersistentVolumeClaim>>,
}

/// What PreFilter found, and Filter's choice per node.
#[derive(Debug, Default)]
struct State {
    /// Bound claims' volumes (`None`: the volume does not exist).
    bound: Vec<Option<Arc<PersistentVolume>>>,
    /// Late-binding claims, smallest request first.
    delayed: Vec<Arc<PersistentVolumeClaim>>,
    /// The volumes offered to them, by class.
    candidates: HashMap<String, Vec<Arc<PersistentVolume>>>,
    classes: HashMap<String, Arc<StorageClass>>,
    /// Claims assumed provisioned on a node, not yet seen annotated.
    selected: HashMap<String, String>,
    by_node: Mutex<HashMap<String, PodVolumes>>,
}

fn key(claim: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    )
}

fn quantity(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> Quantity {
    q.and_then(|q| Quantity::parse(&q.0).ok())
        .unwrap_or_else(Quantity::zero)
}

fn requested(claim: &PersistentVolumeClaim) -> Quantity {
    let spec = claim.spec.as_ref();
    let requests = spec
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref());
    quantity(requests.and_then(|r| r.get("storage")))
}

fn capacity(pv: &PersistentVolume) -> Quantity {
    let capacity = pv.spec.as_ref().and_then(|s| s.capacity.as_ref());
    quantity(capacity.and_then(|c| c.get("storage")))
}

fn volume_class(pv: &PersistentVolume) -> &str {
    match pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BETA_STORAGE_CLASS))
    {
        Some(class) => class,
        None => pv
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref())
            .unwrap_or_default(),
    }
}

/// Whether the volume's node affinity allows the node (upstream's
/// `CheckNodeAffinity`; no affinity allows every node).
pub fn volume_allows(pv: &PersistentVolume, node: &Node) -> bool {
    let required = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref());
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let name = node.metadata.name.as_deref().unwrap_or_default();
    required.is_none_or(|r| terms_match(&r.node_selector_terms, &labels, name))
}

fn is_bound_to(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    let uid = r.uid.as_deref().unwrap_or_default();
    r.name == claim.metadata.name
        && r.namespace.as_deref().unwrap_or_default()
            == claim.metadata.namespace.as_deref().unwrap_or_default()
        && (uid.is_empty() || claim.metadata.uid.as_deref() == Some(uid))
}

/// The smallest volume among `volumes` that can be bound to `claim` on
/// `node` (upstream's `FindMatchingVolume` on its scheduler path). The PV
/// binder in rudder-controllers has the same rules for its own path; they
/// are copied here, small, because that crate is not a dependency of the
/// scheduler (as upstream's scheduler and controller share
/// component-helpers, which rudder has no equivalent of).
pub fn find_matching_volume(
    claim: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
    node: &Node,
    excluded: &HashSet<String>,
) -> Option<Arc<PersistentVolume>> {
    let spec = claim.spec.as_ref();
    let request = requested(claim);
    let class = claim_class(claim);
    let selector = spec.and_then(|s| s.selector.as_ref());
    let claim_mode = spec.and_then(|s| s.volume_mode.as_deref());
    let wanted_modes = spec
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default();
    let mut smallest: Option<(&Arc<PersistentVolume>, Quantity)> = None;
    for pv in volumes {
        let name = pv.metadata.name.as_deref().unwrap_or_default();
        let pv_spec = pv.spec.as_ref();
        if excluded.contains(name)
            || (pv_spec.is_some_and(|s| s.claim_ref.is_some()) && !is_bound_to(pv, claim))
        {
            continue;
        }
        let size = capacity(pv);
        let volume_mode = pv_spec.and_then(|s| s.volume_mode.as_deref());
        if size.cmp_value(&request) == Ordering::Less
            || claim_mode.unwrap_or("Filesystem") != volume_mode.unwrap_or("Filesystem")
            || pv.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let allows = volume_allows(pv, node);
        if is_bound_to(pv, claim) {
            // Pre-bound: this one or none.
            return allows.then(|| pv.clone());
        }
        let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
        let labels = pv.metadata.labels.clone().unwrap_or_default();
        let offered = pv_spec
            .and_then(|s| s.access_modes.as_deref())
            .unwrap_or_default();
        if phase != Some("Available")
            || selector.is_some_and(|s| !rudder_runtime::meta::selector_matches(s, &labels))
            || volume_class(pv) != class
            || !allows
            || !wanted_modes.iter().all(|m| offered.contains(m))
        {
            continue;
        }
        if smallest
            .as_ref()
            .is_none_or(|(_, best)| best.cmp_value(&size) == Ordering::Greater)
        {
            smallest = Some((pv, size));
        }
    }
    smallest.map(|(pv, _)| pv.clone())
}

/// Whether a class may provision a volume for the node: it has a real
/// provisioner and its `allowedTopologies` (if any) include the node.
fn can_provision(class: &StorageClass, node: &Node) -> bool {
    if class.provisioner == NO_PROVISIONER {
        return false;
    }
    let Some(topologies) = class.allowed_topologies.as_ref().filter(|t| !t.is_empty()) else {
        return true;
    };
    let labels = node.metadata.labels.clone().unwrap_or_default();
    topologies.iter().any(|term| {
        term.match_label_expressions
            .iter()
            .flatten()
            .all(|e| labels.get(&e.key).is_some_and(|v| e.values.contains(v)))
    })
}

impl PreFilter for VolumeBinding {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let names = pod_claim_names(&pod.pod);
        if names.is_empty() {
            return (PreFilterResult::default(), Status::skip());
        }
        let listers = &snapshot.volumes;
        let ephemeral: HashSet<String> = pod
            .spec()
            .volumes
            .iter()
            .flatten()
            .filter(|v| v.ephemeral.is_some())
            .map(|v| {
                format!(
                    "{}-{}",
                    pod.pod.metadata.name.as_deref().unwrap_or(""),
                    v.name
                )
            })
            .collect();
        let mut found = State::default();
        let mut immediate = false;
        for name in names {
            let Some(claim) = listers.claim(pod.namespace(), &name) else {
                let message = if ephemeral.contains(&name) {
                    format!(
                        "waiting for ephemeral volume controller to create the persistentvolumeclaim {name:?}"
                    )
                } else {
                    format!("persistentvolumeclaim {name:?} not found")
                };
                return (PreFilterResult::default(), Status::unresolvable(message));
            };
            if claim.metadata.deletion_timestamp.is_some() {
                return (
                    PreFilterResult::default(),
                    Status::unresolvable(format!(
                        "persistentvolumeclaim {name:?} is being deleted"
                    )),
                );
            }
            let volume_name = claim_volume_name(&claim);
            let fully_bound = !volume_name.is_empty()
                && claim
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(BIND_COMPLETED));
            if fully_bound {
                found.bound.push(listers.volume(volume_name));
            } else if volume_name.is_empty() && is_delayed(&claim, listers) {
                found.delayed.push(claim);
            } else {
                immediate = true;
            }
        }
        if immediate {
            return (
                PreFilterResult::default(),
                Status::unresolvable(UNBOUND_IMMEDIATE),
            );
        }
        if !found.delayed.is_empty() {
            found
                .delayed
                .sort_by(|a, b| requested(a).cmp_value(&requested(b)));
            let classes: HashSet<&str> = found.delayed.iter().map(|c| claim_class(c)).collect();
            // What Reserve assumed and the informers now show is forgotten.
            let mut assumed = self.assumed();
            assumed.volumes.retain(|pv, _| {
                listers
                    .volume(pv)
                    .is_some_and(|v| v.spec.as_ref().is_none_or(|s| s.claim_ref.is_none()))
            });
            assumed.claims.retain(|claim, _| {
                listers.claims.get(claim).is_some_and(|c| {
                    c.metadata
                        .annotations
                        .as_ref()
                        .is_none_or(|a| !a.contains_key(SELECTED_NODE))
                })
            });
            let mine: HashSet<String> = found.delayed.iter().map(|c| key(c)).collect();
            for claim in &mine {
                if let Some(node) = assumed.claims.get(claim) {
                    found.selected.insert(claim.clone(), node.clone());
                }
            }
            for pv in listers.volumes.list() {
                let class = volume_class(&pv);
                let taken = pv
                    .metadata
                    .name
                    .as_ref()
                    .and_then(|n| assumed.volumes.get(n))
                    .is_some_and(|claim| !mine.contains(claim));
                if classes.contains(class) && !taken {
                    found
                        .candidates
                        .entry(class.to_string())
                        .or_default()
                        .push(pv);
                }
            }
            drop(assumed);
            for class in classes {
                if let Some(c) = listers.class(class) {
                    found.classes.insert(class.to_string(), c);
                }
            }
        }
        state.write(NAME, found);
        (PreFilterResult::default(), Status::success())
    }
}

impl Filter for VolumeBinding {
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(found) = state.read::<State>(NAME) else {
            return Status::success();
        };
        let mut reasons: Vec<&str> = Vec::new();
        for pv in &found.bound {
            match pv {
                None => reasons.push(PV_NOT_EXIST),
                Some(pv) if !volume_allows(pv, &node.node) => reasons.push(NODE_CONFLICT),
                Some(_) => {}
            }
        }
        let mut chosen = PodVolumes::default();
        let mut excluded = HashSet::new();
        let mut satisfied = true;
        for claim in &found.delayed {
            let selected = claim
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SELECTED_NODE))
                .or_else(|| found.selected.get(&key(claim)));
            if let Some(selected) = selected {
                if *selected != node.name {
                    satisfied = false;
                    break;
                }
            } else {
                let class = claim_class(claim);
                let volumes = found.candidates.get(class).map_or(&[][..], Vec::as_slice);
                if let Some(pv) = find_matching_volume(claim, volumes, &node.node, &excluded) {
                    excluded.insert(pv.metadata.name.clone().unwrap_or_default());
                    chosen.bindings.push((pv, claim.clone()));
                    continue;
                }
            }
            let provisionable = found
                .classes
                .get(claim_class(claim))
                .is_some_and(|c| can_provision(c, &node.node));
            if !provisionable {
                satisfied = false;
                break;
            }
            chosen.provisions.push(claim.clone());
        }
        if !satisfied {
            reasons.push(BIND_CONFLICT);
        }
        if !reasons.is_empty() {
            return Status {
                code: crate::framework::Code::UnschedulableAndUnresolvable,
                reasons: reasons.into_iter().map(String::from).collect(),
                plugin: NAME,
            };
        }
        if !found.delayed.is_empty() {
            let mut by_node = found.by_node.lock().unwrap_or_else(|e| e.into_inner());
            by_node.insert(node.name.clone(), chosen);
        }
        Status::success()
    }
}

impl Reserve for VolumeBinding {
    fn reserve(&self, state: &mut CycleState, _: &PodInfo, node: &str) -> Status {
        let Some(found) = state.read::<State>(NAME) else {
            return Status::success();
        };
        let chosen = {
            let by_node = found.by_node.lock().unwrap_or_else(|e| e.into_inner());
            by_node.get(node).cloned()
        };
        let Some(chosen) = chosen else {
            return Status::success();
        };
        let mut assumed = self.assumed();
        for (pv, claim) in &chosen.bindings {
            let name = pv.metadata.name.clone().unwrap_or_default();
            assumed.volumes.insert(name, key(claim));
        }
        for claim in &chosen.provisions {
            assumed.claims.insert(key(claim), node.to_string());
        }
        drop(assumed);
        state.write(RESERVED, chosen);
        Status::success()
    }

    fn unreserve(&self, state: &mut CycleState, _: &PodInfo, _: &str) {
        let Some(chosen) = state.read::<PodVolumes>(RESERVED) else {
            return;
        };
        let mut assumed = self.assumed();
        for (pv, _) in &chosen.bindings {
            assumed
                .volumes
                .remove(pv.metadata.name.as_deref().unwrap_or_default());
        }
        for claim in &chosen.provisions {
            assumed.claims.remove(&key(claim));
        }
    }
}

#[cfg(test)]
mod tests;
