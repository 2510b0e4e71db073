//! TaintToleration: a node's NoSchedule and NoExecute taints must all be
//! tolerated; nodes with fewer untolerated PreferNoSchedule taints score
//! higher.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Taint, Toleration};

use super::helpers::{default_normalize, tolerates, untolerated};
use crate::framework::{
    CycleState, Filter, NodeInfo, Plugin, PodInfo, PreScore, Score, Snapshot, Status,
};

pub const NAME: &str = "TaintToleration";

#[derive(Debug, Default)]
pub struct TaintToleration;

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }
}

fn taints(node: &NodeInfo) -> &[Taint] {
    &node.taints
}

fn tolerations(pod: &PodInfo) -> &[Toleration] {
    pod.spec().tolerations.as_deref().unwrap_or_default()
}

impl Filter for TaintToleration {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match untolerated(taints(node), tolerations(pod), &["NoSchedule", "NoExecute"]) {
            None => Status::success(),
            Some(taint) => Status::unresolvable(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint.key,
                taint.value.as_deref().unwrap_or_default()
            )),
        }
    }
}

/// The tolerations that count against PreferNoSchedule taints: those with
/// that effect or none.
struct Preferring(Vec<Toleration>);

impl PreScore for TaintToleration {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
        _: &Snapshot,
    ) -> Status {
        let preferring = tolerations(pod)
            .iter()
            .filter(|t| {
                t.effect
                    .as_deref()
                    .is_none_or(|e| e.is_empty() || e == "PreferNoSchedule")
            })
            .cloned()
            .collect();
        state.write(NAME, Preferring(preferring));
        Status::success()
    }
}

impl Score for TaintToleration {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let computed;
        let preferring = match state.read::<Preferring>(NAME) {
            Some(p) => &p.0,
            None => {
                computed = tolerations(pod).to_vec();
                &computed
            }
        };
        taints(node)
            .iter()
            .filter(|t| t.effect == "PreferNoSchedule")
            .filter(|t| !preferring.iter().any(|tol| tolerates(tol, t)))
            .count() as i64
    }

    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [i64]) {
        default_normalize(scores, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(taints: serde_json::Value) -> NodeInfo {
        let n = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "n"}, "spec": {"taints": taints}}),
        )
        .expect("node");
        NodeInfo::new(Arc::new(n))
    }

    fn pod(tolerations: serde_json::Value) -> PodInfo {
        let p = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "p", "namespace": "n"},
            "spec": {"containers": [], "tolerations": tolerations}}),
        )
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    #[test]
    fn untolerated_taints_are_named() {
        let tainted =
            node(serde_json::json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]));
        let state = CycleState::default();
        let status = TaintToleration.filter(&state, &pod(serde_json::json!([])), &tainted);
        assert_eq!(
            status.reasons,
            ["node(s) had untolerated taint {dedicated: db}"]
        );
        let tolerant = pod(serde_json::json!([{"key": "dedicated", "operator": "Exists"}]));
        assert!(
            TaintToleration
                .filter(&state, &tolerant, &tainted)
                .is_success()
        );
        let soft = node(serde_json::json!([{"key": "k", "effect": "PreferNoSchedule"}]));
        assert!(
            TaintToleration
                .filter(&state, &pod(serde_json::json!([])), &soft)
                .is_success()
        );
    }

    #[test]
    fn fewer_soft_taints_score_higher() {
        let p = pod(serde_json::json!([]));
        let mut state = CycleState::default();
        TaintToleration.pre_score(&mut state, &p, &[], &Snapshot::default());
        let mut scores = [
            TaintToleration.score(&state, &p, &node(serde_json::json!([]))),
            TaintToleration.score(&state, &p, &node(serde_json::json!([
                {"key": "a", "effect": "PreferNoSchedule"}, {"key": "b", "effect": "PreferNoSchedule"}]))),
        ];
        TaintToleration.normalize(&state, &p, &mut scores);
        assert_eq!(scores, [100, 0]);
    }
}
