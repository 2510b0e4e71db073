//! Preemption's evaluator (upstream's `framework/preemption`), pure: which
//! nodes are worth a dry run (those a filter rejected as `Unschedulable`,
//! not unresolvable), how many candidates to find, the dry run from a
//! random offset, and the choice of one candidate (`pickOneNodeForPreemption`).
//! Which pods on a node are victims is the plugin's to say
//! ([`crate::plugins::default_preemption`]); evicting them is the shell's.

use std::cmp::{Ordering, Reverse};
use std::collections::HashMap;
use std::sync::Arc;

use crate::framework::{Code, NodeInfo, PodInfo, Snapshot, Status};

/// The reason for every node not tried (upstream's absent-nodes status).
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";

/// A node the pod would fit on once its victims are gone.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub node: String,
    /// The pods to evict, most important first.
    pub victims: Vec<Arc<PodInfo>>,
    /// How many of them a PodDisruptionBudget does not allow to go.
    pub pdb_violations: usize,
}

/// What the dry run found: candidates (those violating no budget first)
/// and, for each node it tried without success, why.
#[derive(Debug, Default)]
pub struct DryRun {
    pub candidates: Vec<Candidate>,
    pub statuses: HashMap<String, Status>,
}

/// The nodes filters rejected as `Unschedulable`, in the snapshot's order
/// (upstream's `NodesForStatusCode`; nodes without a status count as
/// unresolvable).
pub fn potential_nodes<'s>(
    snapshot: &'s Snapshot,
    statuses: &HashMap<String, Status>,
) -> Vec<&'s Arc<NodeInfo>> {
    snapshot
        .nodes
        .iter()
        .filter(|n| statuses.get(&n.name).map(|s| s.code) == Some(Code::Unschedulable))
        .collect()
}

/// How many candidates the dry run looks for (`calculateNumCandidates`):
/// `percentage` of the nodes, at least `absolute`, at most all.
pub fn candidates_to_find(nodes: usize, percentage: usize, absolute: usize) -> usize {
    (nodes * percentage / 100).max(absolute).min(nodes)
}

/// Tries the nodes from `offset` on, round, until `wanted` candidates are
/// found with at least one violating no budget, or all were tried
/// (upstream's `DryRunPreemption`, one node after the other). `select`
/// gives a node's victims and how many violate a budget, or why the pod
/// cannot fit there.
pub fn dry_run(
    nodes: &[&Arc<NodeInfo>],
    offset: usize,
    wanted: usize,
    mut select: impl FnMut(&NodeInfo) -> Result<(Vec<Arc<PodInfo>>, usize), Status>,
) -> DryRun {
    let (mut clean, mut violating) = (Vec::new(), Vec::new());
    let mut statuses = HashMap::new();
    for i in 0..nodes.len() {
        if !clean.is_empty() && clean.len() + violating.len() >= wanted {
            break;
        }
        let node = nodes[(offset + i) % nodes.len()];
        match select(node) {
            Ok((victims, _)) if victims.is_empty() => {
                statuses.insert(
                    node.name.clone(),
                    Status::error(format!(
                        "expected at least one victim pod on node {:?}",
                        node.name
                    )),
                );
            }
            Ok((victims, pdb_violations)) => {
                let list = if pdb_violations == 0 {
                    &mut clean
                } else {
                    &mut violating
                };
                if list.len() < wanted {
                    list.push(Candidate {
                        node: node.name.clone(),
                        victims,
                        pdb_violations,
                    });
                }
            }
            Err(status) => {
                statuses.insert(node.name.clone(), status);
            }
        }
    }
    clean.extend(violating);
    DryRun {
        candidates: clean,
        statuses,
    }
}

/// When a pod started; one not started yet counts as starting now, after
/// every one that did (upstream's `GetPodStartTime`).
fn start_time(pod: &PodInfo) -> (bool, Option<k8s_openapi::jiff::Timestamp>) {
    match pod.pod.status.as_ref().and_then(|s| s.start_time.as_ref()) {
        Some(t) => (false, Some(t.0)),
        None => (true, None),
    }
}

/// Upstream's `MoreImportantPod` as an order: higher priority first, then
/// the one that started earlier.
pub fn importance(a: &PodInfo, b: &PodInfo) -> Ordering {
    (Reverse(a.priority()), start_time(a)).cmp(&(Reverse(b.priority()), start_time(b)))
}

/// The earliest start among the victims of the highest priority
/// (`GetEarliestPodStartTime`).
fn earliest_start_of_highest(
    victims: &[Arc<PodInfo>],
) -> Option<(bool, Option<k8s_openapi::jiff::Timestamp>)> {
    let highest = victims.iter().map(|v| v.priority()).max()?;
    victims
        .iter()
        .filter(|v| v.priority() == highest)
        .map(|v| start_time(v))
        .min()
}

/// The index of the candidate to preempt on (`pickOneNodeForPreemption`):
/// fewest budget violations, then the lowest highest-priority victim, the
/// smallest sum of priorities, the fewest victims, the latest start of
/// the highest-priority victims; then the first.
pub fn pick_one(candidates: &[Candidate]) -> Option<usize> {
    let highest = |c: &Candidate| c.victims.first().map_or(0, |v| v.priority());
    let sum = |c: &Candidate| -> i64 {
        c.victims
            .iter()
            .map(|v| i64::from(v.priority()) + i64::from(i32::MAX) + 1)
            .sum()
    };
    let mut left: Vec<usize> = (0..candidates.len()).collect();
    // Each rule keeps the candidates that do best by it; the next breaks
    // their tie.
    let mut narrow = |key: &dyn Fn(&Candidate) -> Reverse<i64>| {
        let best = left.iter().map(|i| key(&candidates[*i])).max();
        left.retain(|i| Some(key(&candidates[*i])) == best);
    };
    narrow(&|c| Reverse(c.pdb_violations as i64));
    narrow(&|c| Reverse(i64::from(highest(c))));
    narrow(&|c| Reverse(sum(c)));
    narrow(&|c| Reverse(c.victims.len() as i64));
    let start = |i: usize| earliest_start_of_highest(&candidates[i].victims);
    let mut latest = *left.first()?;
    for &i in &left[1..] {
        if start(i) > start(latest) {
            latest = i;
        }
    }
    Some(latest)
}

/// The pods nominated to `node` with a lower priority than `pod`, whose
/// nomination preemption clears (`getLowerPriorityNominatedPods`).
pub fn lower_priority_nominated<'a>(
    pod: &PodInfo,
    nominated: &'a [Arc<PodInfo>],
) -> impl Iterator<Item = &'a Arc<PodInfo>> {
    let priority = pod.priority();
    nominated.iter().filter(move |p| p.priority() < priority)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, priority: i32, started: Option<&str>) -> Arc<PodInfo> {
        let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"priority": priority, "containers": []},
            "status": {"startTime": started},
        }))
        .expect("pod");
        Arc::new(PodInfo::new(Arc::new(p)))
    }

    fn candidate(node: &str, violations: usize, victims: Vec<Arc<PodInfo>>) -> Candidate {
        Candidate {
            node: node.into(),
            victims,
            pdb_violations: violations,
        }
    }

    const EARLY: Option<&str> = Some("2024-01-01T00:00:00Z");
    const LATE: Option<&str> = Some("2024-06-01T00:00:00Z");

    #[test]
    fn upstreams_candidate_counts() {
        assert_eq!(candidates_to_find(50, 10, 100), 50);
        assert_eq!(candidates_to_find(500, 10, 100), 100);
        assert_eq!(candidates_to_find(5000, 10, 100), 500);
        assert_eq!(candidates_to_find(5000, 10, 1), 500);
    }

    #[test]
    fn victims_are_ordered_by_priority_then_start() {
        let mut victims = [
            pod("late", 5, LATE),
            pod("low", 1, EARLY),
            pod("unstarted", 5, None),
            pod("early", 5, EARLY),
        ];
        victims.sort_by(|a, b| importance(a, b));
        let names: Vec<&str> = victims.iter().map(|v| v.key.as_str()).collect();
        assert_eq!(
            names,
            [
                "default/early",
                "default/late",
                "default/unstarted",
                "default/low"
            ]
        );
    }

    #[test]
    fn the_node_is_picked_by_upstreams_rules_in_order() {
        let pick = |cs: &[Candidate]| cs[pick_one(cs).expect("one")].node.clone();
        // 1. Fewest budget violations, whatever the priorities.
        let cs = [
            candidate("a", 1, vec![pod("x", 1, EARLY)]),
            candidate("b", 0, vec![pod("y", 100, EARLY)]),
        ];
        assert_eq!(pick(&cs), "b");
        // 2. The lowest highest-priority victim.
        let cs = [
            candidate("a", 0, vec![pod("x", 10, EARLY)]),
            candidate("b", 0, vec![pod("y", 5, EARLY), pod("z", 5, EARLY)]),
        ];
        assert_eq!(pick(&cs), "b");
        // 3. The smallest sum of priorities (negative ones too).
        let cs = [
            candidate("a", 0, vec![pod("x", -5, EARLY), pod("y", -5, EARLY)]),
            candidate("b", 0, vec![pod("z", -5, EARLY)]),
        ];
        assert_eq!(pick(&cs), "b");
        let cs = [
            candidate("a", 0, vec![pod("x", 5, EARLY), pod("y", 3, EARLY)]),
            candidate("b", 0, vec![pod("z", 5, EARLY), pod("w", 1, EARLY)]),
        ];
        assert_eq!(pick(&cs), "b");
        // 5. The latest start of the highest-priority victims.
        let cs = [
            candidate("a", 0, vec![pod("x", 5, EARLY)]),
            candidate("b", 0, vec![pod("y", 5, LATE)]),
            candidate("c", 0, vec![pod("z", 5, EARLY)]),
        ];
        assert_eq!(pick(&cs), "b");
        // 6. Then the first.
        let cs = [
            candidate("a", 0, vec![pod("x", 5, EARLY)]),
            candidate("b", 0, vec![pod("y", 5, EARLY)]),
        ];
        assert_eq!(pick(&cs), "a");
        assert_eq!(pick_one(&[]), None);
    }

    #[test]
    fn the_dry_run_stops_once_enough_candidates_are_found() {
        let node = |name: &str| {
            let n: k8s_openapi::api::core::v1::Node =
                serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
                    .expect("node");
            Arc::new(NodeInfo::new(Arc::new(n)))
        };
        let nodes = [node("a"), node("b"), node("c"), node("d")];
        let refs: Vec<&Arc<NodeInfo>> = nodes.iter().collect();
        let mut tried = Vec::new();
        let run = dry_run(&refs, 1, 2, |n| {
            tried.push(n.name.clone());
            match n.name.as_str() {
                // Violates a budget: does not end the search alone.
                "b" => Ok((vec![pod("v", 1, None)], 1)),
                "c" => Err(Status::unresolvable(
                    "No preemption victims found for incoming pod",
                )),
                _ => Ok((vec![pod("v", 1, None)], 0)),
            }
        });
        assert_eq!(tried, ["b", "c", "d"]);
        let found: Vec<&str> = run.candidates.iter().map(|c| c.node.as_str()).collect();
        assert_eq!(found, ["d", "b"], "those violating no budget first");
        assert_eq!(run.statuses.len(), 1);
    }
}
