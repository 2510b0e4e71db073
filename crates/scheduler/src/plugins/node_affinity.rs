//! NodeAffinity: a pod's `nodeSelector` and required node affinity must
//! match the node; its preferred terms' weights add up to the node's score.
//! A required affinity naming nodes by `metadata.name` narrows the nodes
//! looked at before filtering.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelectorTerm, PreferredSchedulingTerm};

use super::helpers::{default_normalize, term_matches, terms_match};
use crate::framework::{
    CycleState, Filter, NodeInfo, Plugin, PodInfo, PreFilter, PreFilterResult, PreScore, Score,
    Snapshot, Status,
};

pub const NAME: &str = "NodeAffinity";
/// Upstream's `ErrReasonPod`.
pub const REASON: &str = "node(s) didn't match Pod's node affinity/selector";

/// The plugin, with the affinity its arguments add to every pod's
/// (`addedAffinity`).
#[derive(Debug, Default)]
pub struct NodeAffinity {
    added: Option<k8s_openapi::api::core::v1::NodeAffinity>,
}

impl NodeAffinity {
    pub fn new(added: Option<k8s_openapi::api::core::v1::NodeAffinity>) -> Self {
        NodeAffinity { added }
    }

    fn added_required(&self) -> Option<&[NodeSelectorTerm]> {
        self.added
            .as_ref()?
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .map(|r| r.node_selector_terms.as_slice())
    }

    fn added_preferred(&self) -> &[PreferredSchedulingTerm] {
        self.added
            .as_ref()
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_deref()
            })
            .unwrap_or_default()
    }
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
}

fn required(pod: &PodInfo) -> Option<&[NodeSelectorTerm]> {
    pod.spec()
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .map(|r| r.node_selector_terms.as_slice())
}

fn preferred(pod: &PodInfo) -> &[PreferredSchedulingTerm] {
    pod.spec()
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or_default()
}

/// Whether the pod's node selector and required affinity match the node.
pub fn matches(pod: &PodInfo, node: &NodeInfo) -> bool {
    let labels = node.labels();
    let selector_ok = pod
        .spec()
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    selector_ok && required(pod).is_none_or(|terms| terms_match(terms, labels, &node.name))
}

impl PreFilter for NodeAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let has_selector = pod
            .spec()
            .node_selector
            .as_ref()
            .is_some_and(|s| !s.is_empty());
        let Some(terms) = required(pod) else {
            if !has_selector && self.added_required().is_none() {
                state.skip_filter(NAME);
            }
            return (PreFilterResult::default(), Status::success());
        };
        // Every term naming nodes by metadata.name In: only those nodes.
        let mut names: Vec<String> = Vec::new();
        for term in terms {
            let named = term
                .match_fields
                .iter()
                .flatten()
                .find(|f| f.key == "metadata.name" && f.operator == "In");
            match named {
                Some(f) => names.extend(f.values.iter().flatten().cloned()),
                None => return (PreFilterResult::default(), Status::success()),
            }
        }
        names.sort();
        names.dedup();
        if names.is_empty() {
            return (
                PreFilterResult::default(),
                Status::unresolvable(REASON).by(NAME),
            );
        }
        (
            PreFilterResult {
                node_names: Some(names),
            },
            Status::success(),
        )
    }
}

impl Filter for NodeAffinity {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let added_ok = self
            .added_required()
            .is_none_or(|terms| terms_match(terms, node.labels(), &node.name));
        if added_ok && matches(pod, node) {
            Status::success()
        } else {
            Status::unresolvable(REASON)
        }
    }
}

impl PreScore for NodeAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
        _: &Snapshot,
    ) -> Status {
        if preferred(pod).is_empty() && self.added_preferred().is_empty() {
            state.skip_score(NAME);
        }
        Status::success()
    }
}

impl Score for NodeAffinity {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        preferred(pod)
            .iter()
            .chain(self.added_preferred())
            .filter(|t| t.weight != 0 && term_matches(&t.preference, node.labels(), &node.name))
            .map(|t| i64::from(t.weight))
            .sum()
    }

    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [i64]) {
        default_normalize(scores, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: serde_json::Value) -> NodeInfo {
        let n = serde_json::from_value(
            serde_json::json!({"metadata": {"name": name, "labels": labels}}),
        )
        .expect("node");
        NodeInfo::new(Arc::new(n))
    }

    fn pod(spec: serde_json::Value) -> PodInfo {
        let mut spec = spec;
        spec["containers"] = serde_json::json!([]);
        let p = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "p", "namespace": "n"}, "spec": spec}),
        )
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    #[test]
    fn selector_and_required_terms_filter() {
        let ssd = node("a", serde_json::json!({"disk": "ssd", "zone": "z1"}));
        let hdd = node("b", serde_json::json!({"disk": "hdd"}));
        let selected = pod(serde_json::json!({"nodeSelector": {"disk": "ssd"}}));
        let state = CycleState::default();
        assert!(
            NodeAffinity::default()
                .filter(&state, &selected, &ssd)
                .is_success()
        );
        let status = NodeAffinity::default().filter(&state, &selected, &hdd);
        assert_eq!(status.reasons, [REASON]);
        let affine = pod(
            serde_json::json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1", "z2"]}]}
            ]}}}}),
        );
        assert!(
            NodeAffinity::default()
                .filter(&state, &affine, &ssd)
                .is_success()
        );
        assert!(
            !NodeAffinity::default()
                .filter(&state, &affine, &hdd)
                .is_success()
        );
    }

    #[test]
    fn named_nodes_narrow_the_search() {
        let by_name = pod(
            serde_json::json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
            ]}}}}),
        );
        let (result, status) = NodeAffinity::default().pre_filter(
            &mut CycleState::default(),
            &by_name,
            &Snapshot::default(),
        );
        assert!(status.is_success());
        assert_eq!(result.node_names, Some(vec!["n2".to_string()]));
    }

    #[test]
    fn preferred_terms_score_by_weight() {
        let p = pod(
            serde_json::json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}},
                {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}},
            ]}}}),
        );
        let state = CycleState::default();
        let scores = [
            NodeAffinity::default().score(
                &state,
                &p,
                &node("a", serde_json::json!({"disk": "ssd", "zone": "z"})),
            ),
            NodeAffinity::default().score(&state, &p, &node("b", serde_json::json!({"zone": "z"}))),
            NodeAffinity::default().score(&state, &p, &node("c", serde_json::json!({}))),
        ];
        assert_eq!(scores, [15, 5, 0]);
        let mut normalized = scores;
        NodeAffinity::default().normalize(&state, &p, &mut normalized);
        assert_eq!(normalized, [100, 33, 0]);
    }
}
