//! Which pods a shrinking ReplicaSet deletes first (upstream's
//! `ActivePodsWithRanks`): the ones that matter least to availability.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use rudder_runtime::meta::pod;

/// The annotation by which users rank pods for deletion (lower first).
pub const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

fn phase_rank(pod: &Pod) -> u8 {
    match pod::phase(pod) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    }
}

fn deletion_cost(pod: &Pod) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DELETION_COST))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Orders `a` before `b` if `a` should be deleted first:
/// 1. not yet on a node, before on one;
/// 2. Pending, before Unknown, before Running;
/// 3. not ready, before ready;
/// 4. lower `pod-deletion-cost`, before higher;
/// 5. more of its related pods on its node (doubled up), before fewer;
/// 6. ready for less time, before longer;
/// 7. more container restarts, before fewer;
/// 8. newer, before older.
///
/// Upstream compares 6 and 8 on a logarithmic scale with a random tie
/// break (`LogarithmicScaleDown`); rudder compares the times themselves.
fn delete_first(a: &Pod, b: &Pod, colocated_a: usize, colocated_b: usize) -> Ordering {
    let assigned = |p: &Pod| pod::node(p).is_some();
    assigned(a)
        .cmp(&assigned(b))
        .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
        .then_with(|| pod::is_ready(a).cmp(&pod::is_ready(b)))
        .then_with(|| deletion_cost(a).cmp(&deletion_cost(b)))
        .then_with(|| colocated_b.cmp(&colocated_a))
        .then_with(|| match (pod::ready_since(a), pod::ready_since(b)) {
            (Some(x), Some(y)) => y.cmp(&x),
            _ => Ordering::Equal,
        })
        .then_with(|| pod::restarts(b).cmp(&pod::restarts(a)))
        .then_with(|| {
            let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(b).cmp(&created(a))
        })
}

/// The `count` pods of `pods` to delete first; `related` are the active
/// pods of the same workload (its sibling ReplicaSets' too), whose
/// crowding on a node ranks a pod there earlier.
pub fn pods_to_delete(
    mut pods: Vec<Arc<Pod>>,
    related: &[Arc<Pod>],
    count: usize,
) -> Vec<Arc<Pod>> {
    if count >= pods.len() {
        return pods;
    }
    let mut on_node: HashMap<&str, usize> = HashMap::new();
    for p in related {
        if let Some(node) = pod::node(p) {
            *on_node.entry(node).or_default() += 1;
        }
    }
    let colocated = |p: &Pod| {
        pod::node(p)
            .and_then(|n| on_node.get(n))
            .copied()
            .unwrap_or(0)
    };
    pods.sort_by(|a, b| delete_first(a, b, colocated(a), colocated(b)));
    pods.truncate(count);
    pods
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn pod(
        name: &str,
        node: Option<&str>,
        phase: &str,
        ready_at: Option<i64>,
        created: i64,
    ) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.creation_timestamp =
            Some(Time(Timestamp::from_second(created).expect("test data")));
        p.spec = Some(PodSpec {
            node_name: node.map(Into::into),
            ..Default::default()
        });
        p.status = Some(PodStatus {
            phase: Some(phase.into()),
            conditions: ready_at.map(|at| {
                vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(Time(
                        Timestamp::from_second(at).expect("test data"),
                    )),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        });
        Arc::new(p)
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.name.as_deref().expect("test data"))
            .collect()
    }

    #[test]
    fn the_least_useful_pods_go_first() {
        let pods = vec![
            pod("running-ready-old", Some("n1"), "Running", Some(100), 10),
            pod("unscheduled", None, "Pending", None, 50),
            pod("pending", Some("n2"), "Pending", None, 40),
            pod("running-not-ready", Some("n2"), "Running", None, 30),
            pod("running-ready-new", Some("n2"), "Running", Some(200), 20),
        ];
        let chosen = pods_to_delete(pods.clone(), &pods, 4);
        assert_eq!(
            names(&chosen),
            [
                "unscheduled",
                "pending",
                "running-not-ready",
                "running-ready-new"
            ]
        );
    }

    #[test]
    fn crowded_nodes_and_deletion_costs_rank_pods() {
        let a = pod("alone", Some("n1"), "Running", Some(100), 10);
        let b = pod("crowded", Some("n2"), "Running", Some(100), 10);
        let related = vec![
            a.clone(),
            b.clone(),
            pod("x", Some("n2"), "Running", Some(1), 1),
        ];
        assert_eq!(
            names(&pods_to_delete(vec![a.clone(), b.clone()], &related, 1)),
            ["crowded"]
        );

        let mut cheap = (*a).clone();
        cheap
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(DELETION_COST.into(), "-5".into());
        let cheap = Arc::new(cheap);
        assert_eq!(
            names(&pods_to_delete(vec![b, cheap], &related, 1)),
            ["alone"]
        );
    }

    #[test]
    fn asking_for_all_returns_all() {
        let pods = vec![pod("a", None, "Pending", None, 1)];
        assert_eq!(pods_to_delete(pods, &[], 3).len(), 1);
    }
}
