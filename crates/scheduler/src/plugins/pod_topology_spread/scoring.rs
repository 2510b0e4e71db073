//! Scoring: per `ScheduleAnyway` constraint, the matching pods of the
//! node's domain, weighted by the log of the number of domains (so small
//! topologies are not drowned by large ones) plus `maxSkew - 1`; the
//! fewest score highest after normalization.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{Constraint, HOSTNAME, PodTopologySpread, has_all_keys};
use crate::framework::{
    CycleState, MAX_NODE_SCORE, NodeInfo, PodInfo, PreScore, Score, Snapshot, Status,
};

const PRE_SCORE_KEY: &str = "PreScorePodTopologySpread";

/// What PreScore computed for Score.
#[derive(Debug)]
struct PreScoreState {
    constraints: Vec<Constraint>,
    /// The nodes lacking a constraint's label: they score 0.
    ignored: HashSet<String>,
    /// The same by position among the scored nodes (normalization sees
    /// only the scores, in the nodes' order).
    ignored_at: Vec<bool>,
    /// Matching pods per topology key and value, for the domains of the
    /// scored nodes; hostname domains are counted at Score.
    counts: HashMap<String, HashMap<String, i64>>,
    /// Per constraint, `ln(domains + 2)`.
    weights: Vec<f64>,
}

impl PreScore for PodTopologySpread {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        if snapshot.is_empty() {
            return Status::skip();
        }
        let constraints = self.constraints(pod, snapshot, "ScheduleAnyway");
        if constraints.is_empty() {
            return Status::skip();
        }
        // Only the system defaults let nodes without a zone be spread by
        // hostname.
        let require_all = pod
            .spec()
            .topology_spread_constraints
            .as_ref()
            .is_some_and(|c| !c.is_empty())
            || !self.system_defaulted;
        let mut s = PreScoreState {
            ignored: HashSet::new(),
            ignored_at: vec![false; nodes.len()],
            counts: HashMap::new(),
            weights: Vec::new(),
            constraints,
        };
        let mut domains = vec![0usize; s.constraints.len()];
        for (at, node) in nodes.iter().enumerate() {
            if require_all && !has_all_keys(node, &s.constraints) {
                s.ignored.insert(node.name.clone());
                s.ignored_at[at] = true;
                continue;
            }
            for (i, c) in s.constraints.iter().enumerate() {
                if c.topology_key == HOSTNAME {
                    continue;
                }
                let value = node
                    .labels()
                    .get(&c.topology_key)
                    .cloned()
                    .unwrap_or_default();
                let values = s.counts.entry(c.topology_key.clone()).or_default();
                if let std::collections::hash_map::Entry::Vacant(v) = values.entry(value) {
                    v.insert(0);
                    domains[i] += 1;
                }
            }
        }
        s.weights = s
            .constraints
            .iter()
            .zip(&domains)
            .map(|(c, size)| {
                let size = if c.topology_key == HOSTNAME {
                    nodes.len() - s.ignored.len()
                } else {
                    *size
                };
                ((size + 2) as f64).ln()
            })
            .collect();
        for node in snapshot.nodes.iter() {
            if require_all && !has_all_keys(node, &s.constraints) {
                continue;
            }
            for c in &s.constraints {
                if !c.includes(pod, node) {
                    continue;
                }
                let value = node
                    .labels()
                    .get(&c.topology_key)
                    .map_or("", String::as_str);
                let Some(count) = s
                    .counts
                    .get_mut(&c.topology_key)
                    .and_then(|v| v.get_mut(value))
                else {
                    continue;
                };
                *count += c.count(&node.pods, pod.namespace());
            }
        }
        state.write(PRE_SCORE_KEY, s);
        Status::success()
    }
}

impl Score for PodTopologySpread {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return 0;
        };
        if s.ignored.contains(&node.name) {
            return 0;
        }
        let mut score = 0.0;
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = node.labels().get(&c.topology_key) else {
                continue;
            };
            let count = if c.topology_key == HOSTNAME {
                c.count(&node.pods, pod.namespace())
            } else {
                s.counts
                    .get(&c.topology_key)
                    .and_then(|v| v.get(value))
                    .copied()
                    .unwrap_or(0)
            };
            score += count as f64 * s.weights[i] + f64::from(c.max_skew - 1);
        }
        score.round() as i64
    }

    /// Reversed and scaled: the node with the fewest matching pods gets
    /// 100; ignored nodes get 0.
    fn normalize(&self, state: &CycleState, _: &PodInfo, scores: &mut [i64]) {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return;
        };
        let ignored = |i: usize| s.ignored_at.get(i).copied().unwrap_or(false);
        let (mut min, mut max) = (i64::MAX, 0);
        for (i, score) in scores.iter().enumerate() {
            if !ignored(i) {
                min = min.min(*score);
                max = max.max(*score);
            }
        }
        for (i, score) in scores.iter_mut().enumerate() {
            *score = if ignored(i) {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - *score) / max
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::plugins::inter_pod_affinity::testing::{node, node_exactly, pod, scores, snapshot};

    const ZONE: &str = "topology.kubernetes.io/zone";

    fn soft(max_skew: i32, key: &str) -> Value {
        json!({"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "foo"}}})
    }

    fn foos(n: usize) -> Vec<PodInfo> {
        (0..n)
            .map(|i| {
                pod(
                    &format!("f{i}"),
                    "default",
                    json!({"app": "foo"}),
                    json!({}),
                )
            })
            .collect()
    }

    fn run(p: &PodInfo, nodes: Vec<NodeInfo>, s: Snapshot) -> Option<Vec<i64>> {
        let snapshot = if s.is_empty() { snapshot(nodes) } else { s };
        scores(&PodTopologySpread::default(), p, &snapshot)
    }

    /// A case: its name, the pod, the nodes, what is expected.
    type Case = (&'static str, PodInfo, Vec<NodeInfo>, Option<Vec<i64>>);

    #[test]
    fn upstreams_score_cases() {
        let with = |constraints: Vec<Value>| {
            pod(
                "p",
                "default",
                json!({"app": "foo"}),
                json!({"topologySpreadConstraints": constraints}),
            )
        };
        let host = "kubernetes.io/hostname";
        let cases: Vec<Case> = vec![
            (
                "no constraints and nothing selecting the pod: skipped",
                pod("p", "default", json!({"app": "foo"}), json!({})),
                vec![node("n1", json!({}), foos(1))],
                None,
            ),
            (
                "DoNotSchedule constraints only: skipped",
                pod(
                    "p",
                    "default",
                    json!({"app": "foo"}),
                    json!({"topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}]}),
                ),
                vec![node("n1", json!({}), foos(1))],
                None,
            ),
            (
                // ln(3 + 2) per pod: 3.2 -> 3, 1.6 -> 2, 0.
                "by hostname: fewer matching pods score higher",
                with(vec![soft(1, host)]),
                vec![
                    node("n1", json!({}), foos(2)),
                    node("n2", json!({}), foos(1)),
                    node("n3", json!({}), vec![]),
                ],
                Some(vec![0, 33, 100]),
            ),
            (
                "by zone: the domain counts, a node without the label scores 0",
                with(vec![soft(1, ZONE)]),
                vec![
                    node("a1", json!({ZONE: "a"}), foos(2)),
                    node("a2", json!({ZONE: "a"}), vec![]),
                    node("b1", json!({ZONE: "b"}), foos(1)),
                    node_exactly("x", json!({}), vec![]),
                ],
                // ln(4) * [2, 2, 1] = [2.77 -> 3, 3, 1.39 -> 1].
                Some(vec![33, 33, 100, 0]),
            ),
            (
                "maxSkew adds a constant: the spread of scores narrows",
                with(vec![soft(3, host)]),
                vec![
                    node("n1", json!({}), foos(2)),
                    node("n2", json!({}), vec![]),
                ],
                // ln(4) * 2 + 2 = 4.77 -> 5, and 2: 100 * (5 + 2 - s) / 5.
                Some(vec![40, 100]),
            ),
        ];
        for (name, p, nodes, want) in cases {
            assert_eq!(run(&p, nodes, Snapshot::default()), want, "{name}");
        }
    }

    #[test]
    fn system_defaults_spread_the_pods_of_a_service() {
        let s = snapshot(vec![
            node("n1", json!({ZONE: "a"}), foos(2)),
            node("n2", json!({ZONE: "a"}), vec![]),
            // No zone: still spread by hostname under the system defaults.
            node_exactly("n3", json!({"kubernetes.io/hostname": "n3"}), vec![]),
        ]);
        s.listers.services.apply(
            serde_json::from_value(json!({"metadata": {"name": "foo", "namespace": "default"},
                "spec": {"selector": {"app": "foo"}}}))
            .expect("service"),
        );
        let p = pod("p", "default", json!({"app": "foo"}), json!({}));
        let scores = run(&p, vec![], s).expect("scored");
        assert!(scores[0] < scores[1], "{scores:?}");
        assert!(scores[2] > 0, "{scores:?}");
    }
}
