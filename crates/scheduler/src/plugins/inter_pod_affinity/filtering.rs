//! Filtering: PreFilter's counts per topology pair, kept up to date as
//! preemption adds and removes pods, and Filter's three checks.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Pod;

use super::{
    EMPTY_LABELS, InterPodAffinity, NAME, REASON_AFFINITY, REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY, resolved,
};
use crate::framework::affinity::AffinityTerm;
use crate::framework::{
    CycleState, Filter, NodeInfo, PodInfo, PreFilter, PreFilterResult, Snapshot, Status,
};

/// Counts per topology key, then value.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Counts(HashMap<String, HashMap<String, i64>>);

impl Counts {
    /// Adds `delta` to the node's domain of `key`, if it has that label.
    fn update(&mut self, node: &NodeInfo, key: &str, delta: i64) {
        let Some(value) = node.labels().get(key) else {
            return;
        };
        // Looked up before inserting: a cycle counts thousands of pods
        // into a few domains, and allocates a key only for a new one.
        let values = match self.0.get_mut(key) {
            Some(values) => values,
            None => self.0.entry(key.to_string()).or_default(),
        };
        let count = match values.get_mut(value) {
            Some(count) => count,
            None => values.entry(value.clone()).or_default(),
        };
        *count += delta;
        if *count == 0 {
            values.remove(value);
            if values.is_empty() {
                self.0.remove(key);
            }
        }
    }

    fn get(&self, key: &str, value: &str) -> i64 {
        self.0
            .get(key)
            .and_then(|v| v.get(value))
            .copied()
            .unwrap_or(0)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each term `pod` matches counts on the node's domain.
    fn update_with_anti_affinity(
        &mut self,
        terms: &[AffinityTerm],
        pod: &Pod,
        namespace_labels: &BTreeMap<String, String>,
        node: &NodeInfo,
        delta: i64,
    ) {
        for term in terms {
            if term.matches(pod, namespace_labels) {
                self.update(node, &term.topology_key, delta);
            }
        }
    }

    /// When `pod` matches every term, each counts on the node's domain.
    fn update_with_affinity(
        &mut self,
        terms: &[AffinityTerm],
        pod: &Pod,
        node: &NodeInfo,
        delta: i64,
    ) {
        if matches_all(terms, pod) {
            for term in terms {
                self.update(node, &term.topology_key, delta);
            }
        }
    }
}

/// Whether `pod` matches every one of `terms` (none: false). The terms
/// are the scheduled pod's, their namespace selectors resolved.
fn matches_all(terms: &[AffinityTerm], pod: &Pod) -> bool {
    let none = BTreeMap::new();
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod, &none))
}

/// What PreFilter computed for Filter.
#[derive(Debug, Clone)]
struct PreFilterState {
    /// Existing pods' required anti-affinity terms the pod matches.
    existing_anti_affinity: Counts,
    /// Existing pods matching all the pod's required affinity terms.
    affinity: Counts,
    /// Existing pods matching each of its required anti-affinity terms.
    anti_affinity: Counts,
    /// The pod's required terms, namespace selectors resolved.
    required_affinity: Vec<AffinityTerm>,
    required_anti_affinity: Vec<AffinityTerm>,
    /// The labels of the pod's namespace.
    namespace_labels: BTreeMap<String, String>,
}

impl PreFilterState {
    /// Counts `other` (on `node`) in or out, as preemption tries a node
    /// without its victims.
    fn update_with_pod(&mut self, pod: &PodInfo, other: &PodInfo, node: &NodeInfo, delta: i64) {
        self.existing_anti_affinity.update_with_anti_affinity(
            &other.affinity.required_anti_affinity,
            &pod.pod,
            &self.namespace_labels,
            node,
            delta,
        );
        self.affinity
            .update_with_affinity(&self.required_affinity, &other.pod, node, delta);
        self.anti_affinity.update_with_anti_affinity(
            &self.required_anti_affinity,
            &other.pod,
            &BTreeMap::new(),
            node,
            delta,
        );
    }

    /// Every topology domain of the node holds no pod matching its
    /// required affinity terms... or this is the first pod of a group
    /// affine to itself.
    fn satisfies_affinity(&self, pod: &PodInfo, node: &NodeInfo) -> bool {
        let labels = node.labels();
        let mut pods_exist = true;
        for term in &self.required_affinity {
            let Some(value) = labels.get(&term.topology_key) else {
                // The node must have every topology label.
                return false;
            };
            if self.affinity.get(&term.topology_key, value) <= 0 {
                pods_exist = false;
            }
        }
        // No pod anywhere matches the terms but the pod itself does: it
        // is the first of its group, and must not wait for itself.
        pods_exist || (self.affinity.is_empty() && matches_all(&self.required_affinity, &pod.pod))
    }

    fn satisfies_anti_affinity(&self, node: &NodeInfo) -> bool {
        if self.anti_affinity.is_empty() {
            return true;
        }
        let labels = node.labels();
        !self.required_anti_affinity.iter().any(|term| {
            labels
                .get(&term.topology_key)
                .is_some_and(|value| self.anti_affinity.get(&term.topology_key, value) > 0)
        })
    }

    fn satisfies_existing_anti_affinity(&self, node: &NodeInfo) -> bool {
        if self.existing_anti_affinity.is_empty() {
            return true;
        }
        !node
            .labels()
            .iter()
            .any(|(key, value)| self.existing_anti_affinity.get(key, value) > 0)
    }
}

/// What the existing pods' anti-affinity counts depend on besides the
/// cluster: the incoming pod's namespace, labels and namespace labels.
#[derive(Debug, PartialEq)]
pub(super) struct ExistingQuestion {
    namespace: String,
    labels: Option<BTreeMap<String, String>>,
    namespace_labels: BTreeMap<String, String>,
}

/// The pod's required affinity and anti-affinity terms, namespaces
/// resolved: what the counts of the pods they select depend on.
pub(super) type TermsQuestion = (Vec<AffinityTerm>, Vec<AffinityTerm>);

/// Existing pods' required anti-affinity terms `pod` matches, per domain:
/// only nodes with pods with affinity terms can hold such pods.
fn count_existing(
    pod: &PodInfo,
    namespace_labels: &BTreeMap<String, String>,
    snapshot: &Snapshot,
) -> Counts {
    let mut counts = Counts::default();
    for node in snapshot
        .with_affinity_pods
        .iter()
        .map(|i| &snapshot.nodes[*i])
    {
        for other in node
            .pods
            .iter()
            .filter(|p| !p.affinity.required_anti_affinity.is_empty())
        {
            counts.update_with_anti_affinity(
                &other.affinity.required_anti_affinity,
                &pod.pod,
                namespace_labels,
                node,
                1,
            );
        }
    }
    counts
}

impl PreFilter for InterPodAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let terms = &pod.affinity;
        // No pod with affinity terms anywhere, none of its own: nothing
        // to count (the common case, at no cost).
        if snapshot.with_affinity_pods.is_empty()
            && terms.required_affinity.is_empty()
            && terms.required_anti_affinity.is_empty()
        {
            return (PreFilterResult::default(), Status::skip());
        }
        let namespace_labels = snapshot.listers.namespace_labels(pod.namespace());
        let question = ExistingQuestion {
            namespace: pod.namespace().to_string(),
            labels: pod.pod.metadata.labels.clone(),
            namespace_labels: namespace_labels.clone(),
        };
        let existing_anti_affinity = self.existing_counted.get(
            question,
            snapshot,
            |counts, change| {
                // Within a node epoch every logged position is in the list.
                let Some(node) = snapshot.nodes.get(change.node) else {
                    return;
                };
                counts.update_with_anti_affinity(
                    &change.pod.affinity.required_anti_affinity,
                    &pod.pod,
                    &namespace_labels,
                    node,
                    change.delta,
                );
            },
            || count_existing(pod, &namespace_labels, snapshot),
        );
        if existing_anti_affinity.is_empty()
            && terms.required_affinity.is_empty()
            && terms.required_anti_affinity.is_empty()
        {
            return (PreFilterResult::default(), Status::skip());
        }
        let required_affinity = resolved(snapshot, terms.required_affinity.iter());
        let required_anti_affinity = resolved(snapshot, terms.required_anti_affinity.iter());
        let (affinity, anti_affinity) =
            if required_affinity.is_empty() && required_anti_affinity.is_empty() {
                (Counts::default(), Counts::default())
            } else {
                let question = (required_affinity.clone(), required_anti_affinity.clone());
                let count = |counts: &mut (Counts, Counts), node: &NodeInfo, other: &Pod, delta| {
                    counts
                        .0
                        .update_with_affinity(&required_affinity, other, node, delta);
                    counts.1.update_with_anti_affinity(
                        &required_anti_affinity,
                        other,
                        &EMPTY_LABELS,
                        node,
                        delta,
                    );
                };
                self.counted.get(
                    question,
                    snapshot,
                    |counts, change| {
                        if let Some(node) = snapshot.nodes.get(change.node) {
                            count(counts, node, &change.pod.pod, change.delta);
                        }
                    },
                    || {
                        let mut counts = (Counts::default(), Counts::default());
                        for node in snapshot.nodes.iter() {
                            for other in &node.pods {
                                count(&mut counts, node, &other.pod, 1);
                            }
                        }
                        counts
                    },
                )
            };
        state.write(
            NAME,
            PreFilterState {
                existing_anti_affinity,
                affinity,
                anti_affinity,
                required_affinity,
                required_anti_affinity,
                namespace_labels,
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

impl Filter for InterPodAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        // No state: PreFilter found nothing to check (upstream skips the
        // plugin then).
        let Some(s) = state.read::<PreFilterState>(NAME) else {
            return Status::success();
        };
        if !s.satisfies_affinity(pod, node) {
            return Status::unresolvable(REASON_AFFINITY);
        }
        if !s.satisfies_anti_affinity(node) {
            return Status::unschedulable(REASON_ANTI_AFFINITY);
        }
        if !s.satisfies_existing_anti_affinity(node) {
            return Status::unschedulable(REASON_EXISTING_ANTI_AFFINITY);
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{node, node_exactly, pod, required, snapshot};
    use super::*;
    use crate::framework::Code;

    const ZONE: &str = "topology.kubernetes.io/zone";
    const HOST: &str = "kubernetes.io/hostname";

    /// Runs PreFilter and Filter on every node: `None` when PreFilter
    /// skips, else each node's code and reasons.
    fn run(p: &PodInfo, nodes: Vec<NodeInfo>) -> Option<Vec<(Code, Vec<String>)>> {
        let snapshot = snapshot(nodes);
        let mut state = CycleState::default();
        let (_, status) = InterPodAffinity::default().pre_filter(&mut state, p, &snapshot);
        if status.code == Code::Skip {
            return None;
        }
        assert!(status.is_success(), "{status:?}");
        Some(
            snapshot
                .nodes
                .iter()
                .map(|n| {
                    let s = InterPodAffinity::default().filter(&state, p, n);
                    (s.code, s.reasons.iter().map(String::from).collect())
                })
                .collect(),
        )
    }

    fn ok() -> (Code, Vec<String>) {
        (Code::Success, vec![])
    }

    fn no(code: Code, reason: &str) -> (Code, Vec<String>) {
        (code, vec![reason.to_string()])
    }

    /// A case: its name, the pod, the nodes, what is expected.
    type Case = (
        &'static str,
        PodInfo,
        Vec<NodeInfo>,
        Option<Vec<(Code, Vec<String>)>>,
    );

    #[test]
    fn upstreams_filter_cases() {
        let web = |name: &str, ns: &str| pod(name, ns, json!({"app": "web"}), json!({}));
        let a = json!({ZONE: "a"});
        let b = json!({ZONE: "b"});
        let cases: Vec<Case> = vec![
            (
                "no affinity anywhere: skipped",
                pod("p", "default", json!({}), json!({})),
                vec![node("n1", a.clone(), vec![web("w", "default")])],
                None,
            ),
            (
                "affinity to a pod in the zone: only that zone's nodes",
                pod(
                    "p",
                    "default",
                    json!({}),
                    required("podAffinity", ZONE, &["web"]),
                ),
                vec![
                    node("n1", a.clone(), vec![web("w", "default")]),
                    node("n2", a.clone(), vec![]),
                    node("n3", b.clone(), vec![]),
                    node_exactly("n4", json!({}), vec![]),
                ],
                Some(vec![
                    ok(),
                    ok(),
                    no(Code::UnschedulableAndUnresolvable, REASON_AFFINITY),
                    no(Code::UnschedulableAndUnresolvable, REASON_AFFINITY),
                ]),
            ),
            (
                "affinity to a pod of another namespace matches nothing",
                pod(
                    "p",
                    "default",
                    json!({"app": "web"}),
                    required("podAffinity", ZONE, &["web"]),
                ),
                vec![
                    node("n1", a.clone(), vec![web("w", "other")]),
                    node("n2", b.clone(), vec![web("x", "default")]),
                ],
                Some(vec![
                    no(Code::UnschedulableAndUnresolvable, REASON_AFFINITY),
                    ok(),
                ]),
            ),
            (
                "the first pod of a self-affine group goes anywhere with the label",
                pod(
                    "p",
                    "default",
                    json!({"app": "web"}),
                    required("podAffinity", ZONE, &["web"]),
                ),
                vec![
                    node("n1", a.clone(), vec![]),
                    node("n2", b.clone(), vec![]),
                    node_exactly("n3", json!({}), vec![]),
                ],
                Some(vec![
                    ok(),
                    ok(),
                    no(Code::UnschedulableAndUnresolvable, REASON_AFFINITY),
                ]),
            ),
            (
                "a pod not matching its own affinity waits for one that does",
                pod(
                    "p",
                    "default",
                    json!({"app": "db"}),
                    required("podAffinity", ZONE, &["web"]),
                ),
                vec![node("n1", a.clone(), vec![])],
                Some(vec![no(
                    Code::UnschedulableAndUnresolvable,
                    REASON_AFFINITY,
                )]),
            ),
            (
                "anti-affinity by hostname: one per node",
                pod(
                    "p",
                    "default",
                    json!({"app": "web"}),
                    required("podAntiAffinity", HOST, &["web"]),
                ),
                vec![
                    node("n1", a.clone(), vec![web("w", "default")]),
                    node("n2", a.clone(), vec![]),
                ],
                Some(vec![no(Code::Unschedulable, REASON_ANTI_AFFINITY), ok()]),
            ),
            (
                "an existing pod's anti-affinity keeps the pod out of its zone",
                pod("p", "default", json!({"app": "web"}), json!({})),
                vec![
                    node(
                        "n1",
                        a.clone(),
                        vec![pod(
                            "x",
                            "default",
                            json!({}),
                            required("podAntiAffinity", ZONE, &["web"]),
                        )],
                    ),
                    node("n2", a.clone(), vec![]),
                    node("n3", b.clone(), vec![]),
                ],
                Some(vec![
                    no(Code::Unschedulable, REASON_EXISTING_ANTI_AFFINITY),
                    no(Code::Unschedulable, REASON_EXISTING_ANTI_AFFINITY),
                    ok(),
                ]),
            ),
            (
                "an existing pod's anti-affinity not matching: skipped",
                pod("p", "default", json!({"app": "db"}), json!({})),
                vec![node(
                    "n1",
                    a.clone(),
                    vec![pod(
                        "x",
                        "default",
                        json!({}),
                        required("podAntiAffinity", ZONE, &["web"]),
                    )],
                )],
                None,
            ),
        ];
        for (name, p, nodes, want) in cases {
            assert_eq!(run(&p, nodes), want, "{name}");
        }
    }

    #[test]
    fn namespace_selectors_read_namespace_labels() {
        let snapshot_with = |nodes| {
            let s = snapshot(nodes);
            for (name, team) in [("blue", "a"), ("green", "b")] {
                s.listers.namespaces.apply(
                    serde_json::from_value(
                        json!({"metadata": {"name": name, "labels": {"team": team}}}),
                    )
                    .expect("namespace"),
                );
            }
            s
        };
        let mut affine = required("podAffinity", ZONE, &["web"]);
        affine["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["namespaceSelector"] =
            json!({"matchLabels": {"team": "a"}});
        let p = pod("p", "green", json!({}), affine);
        let nodes = vec![
            node(
                "n1",
                json!({ZONE: "a"}),
                vec![pod("w", "blue", json!({"app": "web"}), json!({}))],
            ),
            node(
                "n2",
                json!({ZONE: "b"}),
                vec![pod("x", "green", json!({"app": "web"}), json!({}))],
            ),
        ];
        // The listers are shared: a snapshot of new nodes reads them too.
        let s = snapshot_with(nodes);
        let mut state = CycleState::default();
        let plugin = InterPodAffinity::default();
        assert!(plugin.pre_filter(&mut state, &p, &s).1.is_success());
        assert!(plugin.filter(&state, &p, &s.nodes[0]).is_success());
        assert_eq!(
            plugin.filter(&state, &p, &s.nodes[1]).reasons,
            [REASON_AFFINITY]
        );
    }

    #[test]
    fn preemption_adds_and_removes_pods() {
        let guard = pod(
            "x",
            "default",
            json!({}),
            required("podAntiAffinity", HOST, &["web"]),
        );
        let p = pod(
            "p",
            "default",
            json!({"app": "web"}),
            required("podAntiAffinity", HOST, &["web"]),
        );
        let w = pod("w", "default", json!({"app": "web"}), json!({}));
        let s = snapshot(vec![
            node("n1", json!({}), vec![guard.clone()]),
            node("n2", json!({}), vec![w.clone()]),
        ]);
        let plugin = InterPodAffinity::default();
        let mut state = CycleState::default();
        assert!(plugin.pre_filter(&mut state, &p, &s).1.is_success());
        assert_eq!(
            plugin.filter(&state, &p, &s.nodes[0]).reasons,
            [REASON_EXISTING_ANTI_AFFINITY]
        );
        assert_eq!(
            plugin.filter(&state, &p, &s.nodes[1]).reasons,
            [REASON_ANTI_AFFINITY]
        );
        // Without its victims, each node fits.
        plugin.remove_pod(&mut state, &p, &guard, &s.nodes[0]);
        plugin.remove_pod(&mut state, &p, &w, &s.nodes[1]);
        assert!(plugin.filter(&state, &p, &s.nodes[0]).is_success());
        assert!(plugin.filter(&state, &p, &s.nodes[1]).is_success());
        plugin.add_pod(&mut state, &p, &w, &s.nodes[0]);
        assert_eq!(
            plugin.filter(&state, &p, &s.nodes[0]).reasons,
            [REASON_ANTI_AFFINITY]
        );
    }

    #[test]
    fn counts_carried_between_cycles_equal_counts_made_anew() {
        use super::super::testing::churn;
        let plugin = InterPodAffinity::default();
        let mut spec = required("podAntiAffinity", HOST, &["foo"]);
        spec["affinity"]["podAffinity"] =
            required("podAffinity", ZONE, &["bar"])["affinity"]["podAffinity"].clone();
        let p = pod("m", "default", json!({"app": "foo"}), spec);
        let mut cycles = 0;
        churn(
            600,
            |r| {
                let labels = json!({"app": if r % 2 == 0 { "foo" } else { "bar" }});
                let spec = match r % 5 {
                    0 => required("podAntiAffinity", HOST, &["foo"]),
                    1 => {
                        let mut s = required("podAntiAffinity", ZONE, &["foo", "bar"]);
                        s["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                            [0]["namespaces"] = json!(["default", "other"]);
                        s
                    }
                    _ => json!({}),
                };
                (labels, spec)
            },
            |s| {
                let read = |plugin: &InterPodAffinity| {
                    let mut state = CycleState::default();
                    plugin.pre_filter(&mut state, &p, s);
                    state.read::<PreFilterState>(NAME).expect("state").clone()
                };
                let (carried, fresh) = (read(&plugin), read(&InterPodAffinity::default()));
                assert_eq!(
                    carried.existing_anti_affinity, fresh.existing_anti_affinity,
                    "after {cycles}"
                );
                assert_eq!(carried.affinity, fresh.affinity, "after {cycles}");
                assert_eq!(carried.anti_affinity, fresh.anti_affinity, "after {cycles}");
                cycles += 1;
            },
        );
        for anew in [
            plugin.existing_counted.counted_anew(),
            plugin.counted.counted_anew(),
        ] {
            assert!(
                anew > 1 && anew < 120,
                "counted anew {anew} times of {cycles}"
            );
        }
    }
}
