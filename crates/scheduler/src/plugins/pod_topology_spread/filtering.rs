//! Filtering: PreFilter counts the matching pods of each eligible domain
//! and keeps the two emptiest (the critical paths), so Filter knows the
//! global minimum without a walk; preemption adds and removes pods.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{NodeAffinity, Toleration};

use super::{
    Constraint, NAME, PodTopologySpread, REASON_CONSTRAINTS_NOT_MATCH, REASON_NODE_LABEL_NOT_MATCH,
    has_all_keys, labels,
};
use crate::framework::changes::PodChange;
use crate::framework::{
    CycleState, Filter, NodeInfo, PodInfo, PreFilter, PreFilterResult, Snapshot, Status,
};

/// The two domains with the fewest matching pods, fewest first
/// (upstream's `criticalPaths`).
#[derive(Debug, Clone, PartialEq)]
struct CriticalPaths([(String, i64); 2]);

impl Default for CriticalPaths {
    fn default() -> Self {
        let none = (String::new(), i64::from(i32::MAX));
        CriticalPaths([none.clone(), none])
    }
}

impl CriticalPaths {
    /// Domain `value` now holds `count` matching pods.
    fn update(&mut self, value: &str, count: i64) {
        let paths = &mut self.0;
        let at = paths.iter().position(|(v, _)| v == value);
        match at {
            Some(i) => {
                paths[i].1 = count;
                if paths[0].1 > paths[1].1 {
                    paths.swap(0, 1);
                }
            }
            None if count < paths[0].1 => {
                paths[1] = std::mem::replace(&mut paths[0], (value.to_string(), count));
            }
            None if count < paths[1].1 => paths[1] = (value.to_string(), count),
            None => {}
        }
    }
}

/// What PreFilter computed for Filter.
#[derive(Debug, Clone)]
struct PreFilterState {
    constraints: Vec<Constraint>,
    paths: Vec<CriticalPaths>,
    /// Per constraint, matching pods per domain.
    counts: Vec<HashMap<String, i64>>,
}

impl PreFilterState {
    /// The global minimum: the emptiest domain's count, or 0 while fewer
    /// domains than `minDomains` are eligible.
    fn min_match(&self, i: usize) -> i64 {
        if self.counts[i].len() < self.constraints[i].min_domains.max(0) as usize {
            0
        } else {
            self.paths[i].0[0].1
        }
    }

    fn update_with_pod(&mut self, pod: &PodInfo, other: &PodInfo, node: &NodeInfo, delta: i64) {
        if other.namespace() != pod.namespace() || !has_all_keys(node, &self.constraints) {
            return;
        }
        for (i, c) in self.constraints.iter().enumerate() {
            if !c.selects(labels(other)) || !c.includes(pod, node) {
                continue;
            }
            let value = &node.labels()[&c.topology_key];
            let count = self.counts[i].entry(value.clone()).or_default();
            *count += delta;
            let count = *count;
            self.paths[i].update(value, count);
        }
    }
}

/// What PreFilter's counts depend on besides the cluster: the pod's
/// namespace, its constraints, and what their inclusion policies read of
/// the pod.
#[derive(Debug, PartialEq)]
pub(super) struct Question {
    namespace: String,
    constraints: Vec<Constraint>,
    node_selector: Option<BTreeMap<String, String>>,
    node_affinity: Option<NodeAffinity>,
    tolerations: Option<Vec<Toleration>>,
}

/// Per constraint, the pods it selects in each eligible domain.
pub(super) type Counts = Vec<HashMap<String, i64>>;

/// Counts over every node.
fn count_all(constraints: &[Constraint], pod: &PodInfo, snapshot: &Snapshot) -> Counts {
    let mut counts = vec![HashMap::new(); constraints.len()];
    for node in snapshot.nodes.iter() {
        if !has_all_keys(node, constraints) {
            continue;
        }
        for (i, c) in constraints.iter().enumerate() {
            if !c.includes(pod, node) {
                continue;
            }
            let value = &node.labels()[&c.topology_key];
            let found = c.count(&node.pods, pod.namespace());
            // A key allocated only for a new domain (a few), not per node.
            match counts[i].get_mut(value) {
                Some(count) => *count += found,
                None => {
                    counts[i].insert(value.clone(), found);
                }
            }
        }
    }
    counts
}

/// Brings counts forward by one pod counted in or out of a node, as
/// [`count_all`] would have counted it.
fn count_change(
    counts: &mut Counts,
    constraints: &[Constraint],
    pod: &PodInfo,
    snapshot: &Snapshot,
    change: &PodChange,
) {
    let (Some(node), other) = (snapshot.nodes.get(change.node), &change.pod) else {
        return;
    };
    if !has_all_keys(node, constraints) {
        return;
    }
    for (i, c) in constraints.iter().enumerate() {
        if c.count(std::slice::from_ref(other), pod.namespace()) == 0 || !c.includes(pod, node) {
            continue;
        }
        if let Some(count) = counts[i].get_mut(&node.labels()[&c.topology_key]) {
            *count += change.delta;
        }
    }
}

impl PreFilter for PodTopologySpread {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let constraints = self.constraints(pod, snapshot, "DoNotSchedule");
        if constraints.is_empty() {
            return (PreFilterResult::default(), Status::skip());
        }
        let spec = pod.spec();
        let question = Question {
            namespace: pod.namespace().to_string(),
            constraints: constraints.clone(),
            node_selector: spec.node_selector.clone(),
            node_affinity: spec.affinity.as_ref().and_then(|a| a.node_affinity.clone()),
            tolerations: spec.tolerations.clone(),
        };
        let counts = self.counted.get(
            question,
            snapshot,
            |counts, change| count_change(counts, &constraints, pod, snapshot, change),
            || count_all(&constraints, pod, snapshot),
        );
        let paths = counts
            .iter()
            .map(|domains: &HashMap<String, i64>| {
                let mut paths = CriticalPaths::default();
                for (value, count) in domains {
                    paths.update(value, *count);
                }
                paths
            })
            .collect();
        state.write(
            NAME,
            PreFilterState {
                constraints,
                paths,
                counts,
            },
        );
        (PreFilterResult::default(), Status::success())
    }

    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, added: &PodInfo, node: &NodeInfo) {
        state.modify(NAME, |s: &mut PreFilterState| {
            s.update_with_pod(pod, added, node, 1)
        });
    }

    fn remove_pod(&self, state: &mut CycleState, pod: &PodInfo, gone: &PodInfo, node: &NodeInfo) {
        state.modify(NAME, |s: &mut PreFilterState| {
            s.update_with_pod(pod, gone, node, -1)
        });
    }
}

impl Filter for PodTopologySpread {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        // No state: PreFilter found nothing to check (upstream skips the
        // plugin then).
        let Some(s) = state.read::<PreFilterState>(NAME) else {
            return Status::success();
        };
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = node.labels().get(&c.topology_key) else {
                return Status::unresolvable(REASON_NODE_LABEL_NOT_MATCH);
            };
            // existing matching + the pod itself - the global minimum
            let itself = i64::from(c.selects(labels(pod)));
            let matching = s.counts[i].get(value).copied().unwrap_or(0);
            if matching + itself - s.min_match(i) > i64::from(c.max_skew) {
                return Status::unschedulable(REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::framework::Code;
    use crate::plugins::inter_pod_affinity::testing::{node, node_exactly, pod, snapshot};

    const ZONE: &str = "topology.kubernetes.io/zone";
    const HOST: &str = "kubernetes.io/hostname";

    /// A constraint selecting `app: foo`, with `extra` fields.
    fn spread(max_skew: i32, key: &str, extra: Value) -> Value {
        let mut c = json!({"maxSkew": max_skew, "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "foo"}}});
        if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(extra.clone());
        }
        c
    }

    fn foo(name: &str) -> PodInfo {
        pod(name, "default", json!({"app": "foo"}), json!({}))
    }

    fn foos(n: usize) -> Vec<PodInfo> {
        (0..n).map(|i| foo(&format!("f{i}"))).collect()
    }

    fn run(p: &PodInfo, nodes: Vec<NodeInfo>) -> Option<Vec<Code>> {
        let snapshot = snapshot(nodes);
        let plugin = PodTopologySpread::default();
        let mut state = CycleState::default();
        let (_, status) = plugin.pre_filter(&mut state, p, &snapshot);
        if status.code == Code::Skip {
            return None;
        }
        Some(
            snapshot
                .nodes
                .iter()
                .map(|n| plugin.filter(&state, p, n).code)
                .collect(),
        )
    }

    use Code::{Success as Ok_, Unschedulable as No, UnschedulableAndUnresolvable as Never};

    fn tainted(name: &str, labels: Value) -> NodeInfo {
        let plain = node(name, labels, vec![]);
        let mut with = (*plain.node).clone();
        with.spec = Some(
            serde_json::from_value(json!({"taints": [{"key": "k", "effect": "NoSchedule"}]}))
                .expect("spec"),
        );
        plain.with_node(std::sync::Arc::new(with))
    }

    /// A case: its name, the pod, the nodes, what is expected.
    type Case = (&'static str, PodInfo, Vec<NodeInfo>, Option<Vec<Code>>);

    #[test]
    fn upstreams_filter_cases() {
        let z = |zone: &str| json!({ZONE: zone});
        let incoming = |constraints: Vec<Value>, extra: Value| {
            let mut spec = json!({"topologySpreadConstraints": constraints});
            if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
                s.extend(extra.clone());
            }
            pod("p", "default", json!({"app": "foo", "version": "v2"}), spec)
        };
        let cases: Vec<Case> = vec![
            (
                "no constraints: skipped",
                foo("p"),
                vec![node("n1", z("a"), foos(3))],
                None,
            ),
            (
                "zones 3 and 0 matching pods, maxSkew 1: only the empty zone",
                incoming(vec![spread(1, ZONE, json!({}))], json!({})),
                vec![
                    node("a1", z("a"), foos(2)),
                    node("a2", z("a"), foos(1)),
                    node("b1", z("b"), vec![]),
                    node("b2", z("b"), vec![]),
                ],
                Some(vec![No, No, Ok_, Ok_]),
            ),
            (
                "a node without the topology label can never fit",
                incoming(vec![spread(1, ZONE, json!({}))], json!({})),
                vec![
                    node("a1", z("a"), vec![]),
                    node_exactly("x", json!({}), vec![]),
                ],
                Some(vec![Ok_, Never]),
            ),
            (
                "zone and hostname both hold",
                incoming(
                    vec![spread(1, ZONE, json!({})), spread(1, HOST, json!({}))],
                    json!({}),
                ),
                vec![
                    node("a1", z("a"), foos(1)),
                    node("a2", z("a"), vec![]),
                    node("b1", z("b"), vec![]),
                ],
                // a2: zone a has 1, 1+1-0 > 1.
                Some(vec![No, No, Ok_]),
            ),
            (
                "fewer domains than minDomains: the global minimum is 0",
                incoming(vec![spread(1, ZONE, json!({"minDomains": 3}))], json!({})),
                vec![node("a1", z("a"), foos(1)), node("b1", z("b"), foos(1))],
                Some(vec![No, No]),
            ),
            (
                "enough domains for minDomains",
                incoming(vec![spread(1, ZONE, json!({"minDomains": 2}))], json!({})),
                vec![node("a1", z("a"), foos(1)), node("b1", z("b"), foos(1))],
                Some(vec![Ok_, Ok_]),
            ),
            (
                "nodeAffinityPolicy Honor (default): unselected nodes' domains do not count",
                incoming(
                    vec![spread(1, ZONE, json!({}))],
                    json!({"nodeSelector": {"env": "prod"}}),
                ),
                vec![
                    node("a1", json!({ZONE: "a", "env": "prod"}), foos(1)),
                    node("b1", json!({ZONE: "b"}), vec![]),
                ],
                // The minimum is zone a's 1 (b1 is NodeAffinity's to reject).
                Some(vec![Ok_, Ok_]),
            ),
            (
                "nodeAffinityPolicy Ignore: they do",
                incoming(
                    vec![spread(1, ZONE, json!({"nodeAffinityPolicy": "Ignore"}))],
                    json!({"nodeSelector": {"env": "prod"}}),
                ),
                vec![
                    node("a1", json!({ZONE: "a", "env": "prod"}), foos(1)),
                    node("b1", json!({ZONE: "b"}), vec![]),
                ],
                Some(vec![No, Ok_]),
            ),
            (
                "nodeTaintsPolicy Honor: tainted nodes' domains do not count",
                incoming(
                    vec![spread(1, ZONE, json!({"nodeTaintsPolicy": "Honor"}))],
                    json!({}),
                ),
                vec![node("a1", z("a"), foos(1)), tainted("b1", z("b"))],
                Some(vec![Ok_, Ok_]),
            ),
            (
                "nodeTaintsPolicy Ignore (default): they do",
                incoming(vec![spread(1, ZONE, json!({}))], json!({})),
                vec![node("a1", z("a"), foos(1)), tainted("b1", z("b"))],
                Some(vec![No, Ok_]),
            ),
            (
                "matchLabelKeys: only the pod's version counts",
                incoming(
                    vec![spread(1, ZONE, json!({"matchLabelKeys": ["version"]}))],
                    json!({}),
                ),
                vec![
                    node("a1", z("a"), foos(3)),
                    node(
                        "b1",
                        z("b"),
                        vec![pod(
                            "v",
                            "default",
                            json!({"app": "foo", "version": "v2"}),
                            json!({}),
                        )],
                    ),
                ],
                // Zone a's three unversioned pods do not count: 0 and 1.
                Some(vec![Ok_, No]),
            ),
            (
                "a pod its constraint does not select adds no skew",
                pod(
                    "p",
                    "default",
                    json!({"app": "bar"}),
                    json!({"topologySpreadConstraints": [spread(1, ZONE, json!({}))]}),
                ),
                vec![node("a1", z("a"), foos(1)), node("b1", z("b"), vec![])],
                Some(vec![Ok_, Ok_]),
            ),
            (
                "pods of other namespaces do not count",
                incoming(vec![spread(1, ZONE, json!({}))], json!({})),
                vec![
                    node(
                        "a1",
                        z("a"),
                        vec![pod("o", "other", json!({"app": "foo"}), json!({}))],
                    ),
                    node("b1", z("b"), vec![]),
                ],
                Some(vec![Ok_, Ok_]),
            ),
        ];
        for (name, p, nodes, want) in cases {
            assert_eq!(run(&p, nodes), want, "{name}");
        }
    }

    #[test]
    fn reasons_are_upstreams() {
        let p = pod(
            "p",
            "default",
            json!({"app": "foo"}),
            json!({"topologySpreadConstraints": [spread(1, ZONE, json!({}))]}),
        );
        let s = snapshot(vec![
            node("a1", json!({ZONE: "a"}), foos(1)),
            node_exactly("x", json!({}), vec![]),
            node("b1", json!({ZONE: "b"}), vec![]),
        ]);
        let plugin = PodTopologySpread::default();
        let mut state = CycleState::default();
        plugin.pre_filter(&mut state, &p, &s);
        assert_eq!(
            plugin.filter(&state, &p, &s.nodes[0]).reasons,
            [REASON_CONSTRAINTS_NOT_MATCH]
        );
        assert_eq!(
            plugin.filter(&state, &p, &s.nodes[1]).reasons,
            [REASON_NODE_LABEL_NOT_MATCH]
        );
    }

    #[test]
    fn preemption_adds_and_removes_pods() {
        let p = pod(
            "p",
            "default",
            json!({"app": "foo"}),
            json!({"topologySpreadConstraints": [spread(1, ZONE, json!({}))]}),
        );
        let victim = foo("v");
        let s = snapshot(vec![
            node("a1", json!({ZONE: "a"}), vec![victim.clone()]),
            node("b1", json!({ZONE: "b"}), vec![]),
        ]);
        let plugin = PodTopologySpread::default();
        let mut state = CycleState::default();
        plugin.pre_filter(&mut state, &p, &s);
        assert_eq!(plugin.filter(&state, &p, &s.nodes[0]).code, No);
        plugin.remove_pod(&mut state, &p, &victim, &s.nodes[0]);
        assert!(plugin.filter(&state, &p, &s.nodes[0]).is_success());
        plugin.add_pod(&mut state, &p, &foo("w"), &s.nodes[1]);
        plugin.add_pod(&mut state, &p, &foo("x"), &s.nodes[1]);
        assert!(plugin.filter(&state, &p, &s.nodes[0]).is_success());
        assert_eq!(plugin.filter(&state, &p, &s.nodes[1]).code, No);
    }

    #[test]
    fn critical_paths_keep_the_two_emptiest() {
        let mut paths = CriticalPaths::default();
        for (v, n) in [("a", 3), ("b", 1), ("c", 2)] {
            paths.update(v, n);
        }
        assert_eq!(paths.0, [("b".to_string(), 1), ("c".to_string(), 2)]);
        paths.update("b", 4);
        assert_eq!(paths.0, [("c".to_string(), 2), ("b".to_string(), 4)]);
    }

    #[test]
    fn counts_carried_between_cycles_equal_counts_made_anew() {
        use crate::plugins::inter_pod_affinity::testing::churn;
        let plugin = PodTopologySpread::default();
        let constraints = json!({"topologySpreadConstraints": [
            spread(1, ZONE, json!({"nodeTaintsPolicy": "Honor"})),
            spread(2, HOST, json!({})),
        ]});
        let p = pod("m", "default", json!({"app": "foo"}), constraints);
        let mut cycles = 0;
        churn(
            600,
            |r| {
                (
                    json!({"app": if r % 2 == 0 { "foo" } else { "bar" }}),
                    json!({}),
                )
            },
            |s| {
                let mut state = CycleState::default();
                plugin.pre_filter(&mut state, &p, s);
                let carried = state.read::<PreFilterState>(NAME).expect("state");
                let fresh = count_all(&carried.constraints, &p, s);
                assert_eq!(carried.counts, fresh, "after {cycles} cycles");
                cycles += 1;
            },
        );
        // Mostly carried: counted anew only after the nodes changed.
        let anew = plugin.counted.counted_anew();
        assert!(
            anew > 1 && anew < 120,
            "counted anew {anew} times of {cycles}"
        );
    }
}
