//! PodTopologySpread: a pod's `topologySpreadConstraints` keep the pods
//! they select spread over topology domains. `DoNotSchedule` constraints
//! filter: a node passes when the pods matching in its domain, plus the
//! pod itself, exceed the emptiest eligible domain by at most `maxSkew`.
//! `ScheduleAnyway` constraints score: fewer matching pods, higher score.
//! A pod with no constraints of its own gets the default ones (upstream's
//! system defaults: spread by hostname and zone, scoring only), selecting
//! the pods of the Services and controller that select it. Upstream's
//! `plugins/podtopologyspread`.

mod filtering;
mod scoring;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use rudder_runtime::meta::{selector_is_empty, selector_matches};

use super::helpers::untolerated;
use super::node_affinity;
use crate::framework::changes::Memo;
use crate::framework::{NodeInfo, Plugin, PodInfo, Snapshot};

pub const NAME: &str = "PodTopologySpread";
/// Upstream's `ErrReasonConstraintsNotMatch`.
pub const REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
/// Upstream's `ErrReasonNodeLabelNotMatch`.
pub const REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

const HOSTNAME: &str = "kubernetes.io/hostname";

/// The plugin and its arguments (`PodTopologySpreadArgs`).
#[derive(Debug, Clone)]
pub struct PodTopologySpread {
    /// `defaultConstraints`: those of pods without constraints of their
    /// own (their label selectors unset).
    pub default_constraints: Vec<TopologySpreadConstraint>,
    /// Whether the defaults are the system's (`defaultingType: System`):
    /// then nodes lacking one of their labels still count for the others.
    pub system_defaulted: bool,
    /// PreFilter's counts, carried from cycle to cycle.
    counted: Arc<Memo<filtering::Question, filtering::Counts>>,
}

impl PodTopologySpread {
    pub fn new(default_constraints: Vec<TopologySpreadConstraint>, system_defaulted: bool) -> Self {
        PodTopologySpread {
            default_constraints,
            system_defaulted,
            counted: Arc::default(),
        }
    }
}

impl Default for PodTopologySpread {
    fn default() -> Self {
        PodTopologySpread::new(system_default_constraints(), true)
    }
}

/// Upstream's `systemDefaultConstraints`: spread by hostname (maxSkew 3)
/// and zone (maxSkew 5), scoring only.
pub fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    [(HOSTNAME, 3), ("topology.kubernetes.io/zone", 5)]
        .into_iter()
        .map(|(key, max_skew)| TopologySpreadConstraint {
            topology_key: key.into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            max_skew,
            ..Default::default()
        })
        .collect()
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }
}

/// A constraint as the plugin uses it (upstream's
/// `topologySpreadConstraint`).
#[derive(Debug, Clone, PartialEq)]
struct Constraint {
    max_skew: i32,
    topology_key: String,
    /// `None` selects no pod.
    selector: Option<LabelSelector>,
    min_domains: i32,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes matching the
    /// pod's node selector and required node affinity count.
    honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor`: only nodes whose taints the pod
    /// tolerates count (the default, `Ignore`, counts all).
    honor_node_taints: bool,
}

impl Constraint {
    fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector
            .as_ref()
            .is_some_and(|s| selector_matches(s, labels))
    }

    /// The pods of `pods` in `namespace` it selects, terminating ones left
    /// out; none for an empty selector (upstream's
    /// `countPodsMatchSelector`).
    fn count(&self, pods: &[Arc<PodInfo>], namespace: &str) -> i64 {
        if self.selector.as_ref().is_some_and(selector_is_empty) {
            return 0;
        }
        pods.iter()
            .filter(|p| p.pod.metadata.deletion_timestamp.is_none() && p.namespace() == namespace)
            .filter(|p| self.selects(labels(p)))
            .count() as i64
    }

    /// Whether `node` counts for the pod under the inclusion policies.
    fn includes(&self, pod: &PodInfo, node: &NodeInfo) -> bool {
        if self.honor_node_affinity && !node_affinity::matches(pod, node) {
            return false;
        }
        let taints = node
            .node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default();
        let tolerations = pod.spec().tolerations.as_deref().unwrap_or_default();
        !(self.honor_node_taints
            && untolerated(taints, tolerations, &["NoSchedule", "NoExecute"]).is_some())
    }
}

fn labels(pod: &PodInfo) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    pod.pod.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// Whether the node has every constraint's topology label.
fn has_all_keys(node: &NodeInfo, constraints: &[Constraint]) -> bool {
    let labels = node.labels();
    constraints
        .iter()
        .all(|c| labels.contains_key(&c.topology_key))
}

/// The constraints of `action` (`whenUnsatisfiable`), with the pod's
/// values of `matchLabelKeys` required by their selectors.
fn of_action(
    constraints: &[TopologySpreadConstraint],
    pod_labels: &BTreeMap<String, String>,
    action: &str,
) -> Vec<Constraint> {
    constraints
        .iter()
        .filter(|c| c.when_unsatisfiable == action)
        .map(|c| {
            let mut selector = c.label_selector.clone();
            let keys: Vec<LabelSelectorRequirement> = c
                .match_label_keys
                .iter()
                .flatten()
                .filter_map(|k| {
                    Some(LabelSelectorRequirement {
                        key: k.clone(),
                        operator: "In".into(),
                        values: Some(vec![pod_labels.get(k)?.clone()]),
                    })
                })
                .collect();
            if let Some(selector) = selector.as_mut().filter(|_| !keys.is_empty()) {
                selector
                    .match_expressions
                    .get_or_insert_with(Vec::new)
                    .extend(keys);
            }
            Constraint {
                max_skew: c.max_skew,
                topology_key: c.topology_key.clone(),
                selector,
                min_domains: c.min_domains.unwrap_or(1),
                honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
            }
        })
        .collect()
}

impl PodTopologySpread {
    /// The pod's constraints of `action`, or the defaults' selecting the
    /// pods of its Services and controller (none when nothing selects
    /// it).
    fn constraints(&self, pod: &PodInfo, snapshot: &Snapshot, action: &str) -> Vec<Constraint> {
        let own = pod
            .spec()
            .topology_spread_constraints
            .as_deref()
            .unwrap_or_default();
        if !own.is_empty() {
            return of_action(own, labels(pod), action);
        }
        let mut defaults = of_action(&self.default_constraints, labels(pod), action);
        if defaults.is_empty() {
            return defaults;
        }
        let selector = snapshot.listers.default_selector(&pod.pod);
        if selector_is_empty(&selector) {
            return Vec::new();
        }
        for c in &mut defaults {
            c.selector = Some(selector.clone());
        }
        defaults
    }
}
