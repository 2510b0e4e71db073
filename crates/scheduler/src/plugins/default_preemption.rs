//! DefaultPreemption: when no node fits, find one where evicting pods of
//! lower priority would make room, and the fewest, least important such
//! pods (upstream's `defaultpreemption`). Per node, every lower-priority
//! pod is taken away; if the pod then fits, victims are given back, the
//! most important first (those a PodDisruptionBudget protects before the
//! others), as long as it still fits. The node is chosen by
//! [`crate::preemption`]; the scheduler evicts the victims and nominates
//! the node.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use rudder_runtime::meta::{selector_is_empty, selector_matches};

use crate::cycle::FitError;
use crate::framework::{
    Code, CycleState, Handle, NodeInfo, Plugin, PodInfo, PostFilter, PostFilterResult, Reasons,
    Snapshot, Status,
};
use crate::nominator::nominated_node_name;
use crate::preemption::{self, NOT_HELPFUL};

pub const NAME: &str = "DefaultPreemption";
/// Upstream's reason for a node with no pod of lower priority.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// The plugin and its arguments (`DefaultPreemptionArgs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultPreemption {
    /// `minCandidateNodesPercentage`.
    pub min_candidate_nodes_percentage: usize,
    /// `minCandidateNodesAbsolute`.
    pub min_candidate_nodes_absolute: usize,
}

impl Default for DefaultPreemption {
    fn default() -> Self {
        DefaultPreemption {
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
        }
    }
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl PostFilter for DefaultPreemption {
    fn post_filter(
        &self,
        handle: &dyn Handle,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &HashMap<String, Status>,
    ) -> (PostFilterResult, Status) {
        let offset = rand::random_range(0..snapshot.len().max(1));
        let (result, mut status) = self.preempt(handle, state, pod, snapshot, statuses, offset);
        if !status.reasons.is_empty() {
            status.reasons = Reasons::one(format!("preemption: {}", status.message()));
        }
        (result, status)
    }
}

impl DefaultPreemption {
    /// Upstream's `Evaluator.Preempt`, with the dry run starting at
    /// `offset` (random in production) among the nodes worth trying.
    pub fn preempt(
        &self,
        handle: &dyn Handle,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &HashMap<String, Status>,
        offset: usize,
    ) -> (PostFilterResult, Status) {
        if let Err(why) = eligible(pod, snapshot, statuses) {
            return (PostFilterResult::default(), Status::unschedulable(why));
        }
        let nodes = preemption::potential_nodes(snapshot, statuses);
        let run = if nodes.is_empty() {
            preemption::DryRun::default()
        } else {
            let wanted = preemption::candidates_to_find(
                nodes.len(),
                self.min_candidate_nodes_percentage,
                self.min_candidate_nodes_absolute,
            );
            preemption::dry_run(&nodes, offset % nodes.len(), wanted, |node| {
                select_victims(
                    handle,
                    state,
                    pod,
                    node,
                    snapshot.nominated_to(&node.name),
                    &snapshot.pdbs,
                )
            })
        };
        let mut candidates = run.candidates;
        let Some(best) = preemption::pick_one(&candidates) else {
            let errors: Vec<String> = run
                .statuses
                .values()
                .filter(|s| s.code == Code::Error)
                .map(Status::message)
                .collect();
            if !errors.is_empty() {
                let message = match errors.as_slice() {
                    [one] => one.clone(),
                    many => format!("[{}]", many.join(", ")),
                };
                return (PostFilterResult::default(), Status::error(message));
            }
            let absent = snapshot.len().saturating_sub(run.statuses.len());
            let error = FitError {
                all_nodes: snapshot.len(),
                absent: (absent > 0).then(|| (absent, Status::unresolvable(NOT_HELPFUL))),
                statuses: run.statuses,
                ..Default::default()
            };
            let clear = PostFilterResult {
                nominated_node: Some(String::new()),
                victims: Vec::new(),
            };
            return (clear, Status::unschedulable(error.message()));
        };
        let chosen = candidates.swap_remove(best);
        let result = PostFilterResult {
            nominated_node: Some(chosen.node),
            victims: chosen.victims,
        };
        (result, Status::success())
    }
}

/// Whether the pod may preempt (upstream's `PodEligibleToPreemptOthers`):
/// not with `preemptionPolicy: Never`, and not again while pods it
/// preempted on its nominated node are still terminating — unless that
/// node can no longer take it at all.
pub fn eligible(
    pod: &PodInfo,
    snapshot: &Snapshot,
    statuses: &HashMap<String, Status>,
) -> Result<(), &'static str> {
    if pod.spec().preemption_policy.as_deref() == Some("Never") {
        return Err("not eligible due to preemptionPolicy=Never.");
    }
    let Some(nominated) = nominated_node_name(&pod.pod) else {
        return Ok(());
    };
    let code = statuses
        .get(nominated)
        .map_or(Code::UnschedulableAndUnresolvable, |s| s.code);
    if code == Code::UnschedulableAndUnresolvable {
        return Ok(());
    }
    let terminating = snapshot.get(nominated).is_some_and(|node| {
        node.pods
            .iter()
            .any(|p| p.priority() < pod.priority() && terminating_by_preemption(&p.pod))
    });
    if terminating {
        return Err("not eligible due to a terminating pod on the nominated node.");
    }
    Ok(())
}

/// Being deleted because the scheduler preempted it.
fn terminating_by_preemption(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget"))
            .is_some_and(|c| {
                c.status == "True" && c.reason.as_deref() == Some("PreemptionByScheduler")
            })
}

/// The fewest pods on `node` whose eviction lets the pod fit, most
/// important first, and how many of them a budget protects (upstream's
/// `SelectVictimsOnNode`); or why it cannot fit there even with every
/// lower-priority pod gone. Works on copies of the node and the state.
pub fn select_victims(
    handle: &dyn Handle,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    nominated: &[Arc<PodInfo>],
    pdbs: &[Arc<PodDisruptionBudget>],
) -> Result<(Vec<Arc<PodInfo>>, usize), Status> {
    let mut potential: Vec<Arc<PodInfo>> = node
        .pods
        .iter()
        .filter(|p| p.priority() < pod.priority())
        .cloned()
        .collect();
    if potential.is_empty() {
        return Err(Status::unresolvable(NO_VICTIMS));
    }
    let (mut state, mut node) = (state.clone_state(), node.clone());
    for victim in &potential {
        node.remove_pod(&victim.key);
        handle.remove_pod(&mut state, pod, victim, &node);
    }
    let status = handle.filter_with_nominated(&state, pod, &node, nominated);
    if !status.is_success() {
        return Err(status);
    }
    potential.sort_by(|a, b| preemption::importance(a, b));
    let (violating, other) = split_by_pdb_violation(potential, pdbs);
    let mut victims = Vec::new();
    let mut reprieve = |candidate: Arc<PodInfo>, victims: &mut Vec<Arc<PodInfo>>| -> bool {
        node.add_pod(candidate.clone());
        handle.add_pod(&mut state, pod, &candidate, &node);
        if handle
            .filter_with_nominated(&state, pod, &node, nominated)
            .is_success()
        {
            return true;
        }
        node.remove_pod(&candidate.key);
        handle.remove_pod(&mut state, pod, &candidate, &node);
        victims.push(candidate);
        false
    };
    let mut violations = 0;
    let both = !violating.is_empty() && !other.is_empty();
    for candidate in violating {
        if !reprieve(candidate, &mut victims) {
            violations += 1;
        }
    }
    for candidate in other {
        reprieve(candidate, &mut victims);
    }
    if both {
        victims.sort_by(|a, b| preemption::importance(a, b));
    }
    Ok((victims, violations))
}

/// The pods whose eviction a budget does not allow, and the others, each
/// in the order given (upstream's `filterPodsWithPDBViolation`): each
/// matching budget's `disruptionsAllowed` is spent pod by pod, pods
/// already counted as disrupted aside.
pub fn split_by_pdb_violation(
    pods: Vec<Arc<PodInfo>>,
    pdbs: &[Arc<PodDisruptionBudget>],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i32> = pdbs
        .iter()
        .map(|p| p.status.as_ref().map_or(0, |s| s.disruptions_allowed))
        .collect();
    let (mut violating, mut other) = (Vec::new(), Vec::new());
    for info in pods {
        let mut violated = false;
        let name = info.pod.metadata.name.as_deref().unwrap_or_default();
        if let Some(labels) = info.pod.metadata.labels.as_ref().filter(|l| !l.is_empty()) {
            for (i, pdb) in pdbs.iter().enumerate() {
                if pdb.metadata.namespace.as_deref() != Some(info.namespace()) {
                    continue;
                }
                // A budget without a selector, or an empty one, matches
                // nothing.
                let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
                    continue;
                };
                if selector_is_empty(selector) || !selector_matches(selector, labels) {
                    continue;
                }
                let disrupted = pdb
                    .status
                    .as_ref()
                    .and_then(|s| s.disrupted_pods.as_ref())
                    .is_some_and(|d| d.contains_key(name));
                if disrupted {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated {
            violating.push(info);
        } else {
            other.push(info);
        }
    }
    (violating, other)
}

#[cfg(test)]
mod tests;
