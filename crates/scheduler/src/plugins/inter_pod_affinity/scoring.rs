//! Scoring: each topology domain gets the weights of the preferred terms
//! (the pod's and existing pods') that hold there, and existing pods'
//! required affinity the pod matches at `hardPodAffinityWeight`; the
//! sums are normalized min-max.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::{EMPTY_LABELS, InterPodAffinity, resolved};
use crate::framework::affinity::{AffinityTerm, WeightedAffinityTerm};
use crate::framework::{
    CycleState, MAX_NODE_SCORE, NodeInfo, PodInfo, PreScore, Score, Snapshot, Status,
};

const PRE_SCORE_KEY: &str = "PreScoreInterPodAffinity";

/// What PreScore computed: a score per topology key and value.
#[derive(Debug, Default)]
struct PreScoreState(HashMap<String, HashMap<String, i64>>);

impl PreScoreState {
    /// When `pod` matches the term, the domain of the node gets
    /// `weight * sign`.
    fn term(
        &mut self,
        term: &AffinityTerm,
        weight: i32,
        pod: &Pod,
        namespace_labels: &BTreeMap<String, String>,
        node: &NodeInfo,
        sign: i64,
    ) {
        if !term.matches(pod, namespace_labels) {
            return;
        }
        if let Some(value) = node.labels().get(&term.topology_key) {
            *self
                .0
                .entry(term.topology_key.clone())
                .or_default()
                .entry(value.clone())
                .or_default() += i64::from(weight) * sign;
        }
    }

    fn terms(
        &mut self,
        terms: &[WeightedAffinityTerm],
        pod: &Pod,
        namespace_labels: &BTreeMap<String, String>,
        node: &NodeInfo,
        sign: i64,
    ) {
        for t in terms {
            self.term(&t.term, t.weight, pod, namespace_labels, node, sign);
        }
    }
}

impl PreScore for InterPodAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        if nodes.is_empty() {
            return Status::skip();
        }
        let has_constraints = !pod.affinity.preferred_affinity.is_empty()
            || !pod.affinity.preferred_anti_affinity.is_empty();
        if (self.ignore_preferred_terms_of_existing_pods || snapshot.with_affinity_pods.is_empty())
            && !has_constraints
        {
            return Status::skip();
        }
        let resolve = |terms: &[WeightedAffinityTerm]| -> Vec<WeightedAffinityTerm> {
            resolved(snapshot, terms.iter().map(|t| &t.term))
                .into_iter()
                .zip(terms)
                .map(|(term, t)| WeightedAffinityTerm {
                    term,
                    weight: t.weight,
                })
                .collect()
        };
        let preferred_affinity = resolve(&pod.affinity.preferred_affinity);
        let preferred_anti_affinity = resolve(&pod.affinity.preferred_anti_affinity);
        let namespace_labels = snapshot.listers.namespace_labels(pod.namespace());
        let mut scores = PreScoreState::default();
        // Without preferred terms of its own, only pods with affinity
        // terms can score the pod.
        let all: Box<dyn Iterator<Item = &Arc<NodeInfo>>> = if has_constraints {
            Box::new(snapshot.nodes.iter())
        } else {
            Box::new(
                snapshot
                    .with_affinity_pods
                    .iter()
                    .map(|i| &snapshot.nodes[*i]),
            )
        };
        for node in all {
            if node.labels().is_empty() {
                continue;
            }
            for other in node
                .pods
                .iter()
                .filter(|p| has_constraints || !p.affinity.is_empty())
            {
                scores.terms(&preferred_affinity, &other.pod, &EMPTY_LABELS, node, 1);
                scores.terms(
                    &preferred_anti_affinity,
                    &other.pod,
                    &EMPTY_LABELS,
                    node,
                    -1,
                );
                let theirs = &other.affinity;
                if self.hard_pod_affinity_weight > 0 {
                    for term in &theirs.required_affinity {
                        scores.term(
                            term,
                            self.hard_pod_affinity_weight,
                            &pod.pod,
                            &namespace_labels,
                            node,
                            1,
                        );
                    }
                }
                scores.terms(
                    &theirs.preferred_affinity,
                    &pod.pod,
                    &namespace_labels,
                    node,
                    1,
                );
                scores.terms(
                    &theirs.preferred_anti_affinity,
                    &pod.pod,
                    &namespace_labels,
                    node,
                    -1,
                );
            }
        }
        if scores.0.is_empty() {
            return Status::skip();
        }
        state.write(PRE_SCORE_KEY, scores);
        Status::success()
    }
}

impl Score for InterPodAffinity {
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> i64 {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return 0;
        };
        let labels = node.labels();
        s.0.iter()
            .filter_map(|(key, values)| values.get(labels.get(key)?))
            .sum()
    }

    /// Min-max: the lowest sum becomes 0, the highest 100.
    fn normalize(&self, state: &CycleState, _: &PodInfo, scores: &mut [i64]) {
        if state
            .read::<PreScoreState>(PRE_SCORE_KEY)
            .is_none_or(|s| s.0.is_empty())
        {
            return;
        }
        let min = scores.iter().copied().min().unwrap_or(0);
        let max = scores.iter().copied().max().unwrap_or(0);
        let spread = max - min;
        for s in scores.iter_mut() {
            *s = if spread > 0 {
                (MAX_NODE_SCORE as f64 * ((*s - min) as f64 / spread as f64)) as i64
            } else {
                0
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::testing::{node, pod, required, scores, snapshot};
    use super::*;

    const ZONE: &str = "topology.kubernetes.io/zone";

    fn preferred(kind: &str, weight: i32, key: &str, app: &str) -> Value {
        json!({"affinity": {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": weight, "podAffinityTerm": {
                "labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}}
        ]}}})
    }

    fn run(plugin: &InterPodAffinity, p: &PodInfo, nodes: Vec<NodeInfo>) -> Option<Vec<i64>> {
        scores(plugin, p, &snapshot(nodes))
    }

    /// A case: its name, the pod, the nodes, what is expected.
    type Case = (&'static str, PodInfo, Vec<NodeInfo>, Option<Vec<i64>>);

    #[test]
    fn upstreams_score_cases() {
        let web = || pod("w", "default", json!({"app": "web"}), json!({}));
        let (a, b, c) = (json!({ZONE: "a"}), json!({ZONE: "b"}), json!({ZONE: "c"}));
        let cases: Vec<Case> = vec![
            (
                "no affinity anywhere: skipped",
                pod("p", "default", json!({"app": "web"}), json!({})),
                vec![
                    node("n1", a.clone(), vec![web()]),
                    node("n2", b.clone(), vec![]),
                ],
                None,
            ),
            (
                "preferred affinity: the zone of a matching pod",
                pod(
                    "p",
                    "default",
                    json!({}),
                    preferred("podAffinity", 5, ZONE, "web"),
                ),
                vec![
                    node("n1", a.clone(), vec![web()]),
                    node("n2", a.clone(), vec![]),
                    node("n3", b.clone(), vec![]),
                ],
                Some(vec![100, 100, 0]),
            ),
            (
                "preferred anti-affinity: away from the zone of a matching pod",
                pod(
                    "p",
                    "default",
                    json!({}),
                    preferred("podAntiAffinity", 5, ZONE, "web"),
                ),
                vec![
                    node("n1", a.clone(), vec![web()]),
                    node("n2", b.clone(), vec![]),
                ],
                Some(vec![0, 100]),
            ),
            (
                "weights add up: affinity 8 to web, anti-affinity 4 to db",
                pod(
                    "p",
                    "default",
                    json!({}),
                    json!({"affinity": {
                        "podAffinity": preferred("podAffinity", 8, ZONE, "web")["affinity"]["podAffinity"],
                        "podAntiAffinity": preferred("podAntiAffinity", 4, ZONE, "db")["affinity"]["podAntiAffinity"],
                    }}),
                ),
                vec![
                    node(
                        "n1",
                        a.clone(),
                        vec![web(), pod("d", "default", json!({"app": "db"}), json!({}))],
                    ),
                    node("n2", b.clone(), vec![web()]),
                    node(
                        "n3",
                        c.clone(),
                        vec![pod("d2", "default", json!({"app": "db"}), json!({}))],
                    ),
                ],
                // 8-4=4, 8, -4: min-max over [-4, 8].
                Some(vec![66, 100, 0]),
            ),
            (
                "an existing pod's required affinity the pod matches (hardPodAffinityWeight)",
                pod("p", "default", json!({"app": "web"}), json!({})),
                vec![
                    node(
                        "n1",
                        a.clone(),
                        vec![pod(
                            "x",
                            "default",
                            json!({}),
                            required("podAffinity", ZONE, &["web"]),
                        )],
                    ),
                    node("n2", b.clone(), vec![]),
                ],
                Some(vec![100, 0]),
            ),
            (
                "an existing pod's preferred anti-affinity the pod matches",
                pod("p", "default", json!({"app": "web"}), json!({})),
                vec![
                    node(
                        "n1",
                        a.clone(),
                        vec![pod(
                            "x",
                            "default",
                            json!({}),
                            preferred("podAntiAffinity", 3, ZONE, "web"),
                        )],
                    ),
                    node("n2", b.clone(), vec![]),
                ],
                Some(vec![0, 100]),
            ),
        ];
        for (name, p, nodes, want) in cases {
            assert_eq!(run(&InterPodAffinity::default(), &p, nodes), want, "{name}");
        }
    }

    #[test]
    fn arguments_change_what_existing_pods_count() {
        let p = pod("p", "default", json!({"app": "web"}), json!({}));
        let nodes = || {
            vec![
                node(
                    "n1",
                    json!({ZONE: "a"}),
                    vec![pod(
                        "x",
                        "default",
                        json!({}),
                        required("podAffinity", ZONE, &["web"]),
                    )],
                ),
                node("n2", json!({ZONE: "b"}), vec![]),
            ]
        };
        let no_hard = InterPodAffinity {
            hard_pod_affinity_weight: 0,
            ..Default::default()
        };
        assert_eq!(run(&no_hard, &p, nodes()), None);
        let own_only = InterPodAffinity {
            ignore_preferred_terms_of_existing_pods: true,
            ..Default::default()
        };
        assert_eq!(run(&own_only, &p, nodes()), None);
    }
}
