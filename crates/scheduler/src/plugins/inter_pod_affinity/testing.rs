//! Pods, nodes and snapshots for the plugins' tests, from JSON.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::framework::{Code, CycleState, NodeInfo, PodInfo, PreScore, Score, Snapshot};

/// A pod in `namespace` with `labels` and extra `spec` fields.
pub(crate) fn pod(name: &str, namespace: &str, labels: Value, spec: Value) -> PodInfo {
    let mut full = json!({"containers": [{"name": "c"}]});
    if let (Some(full), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
        full.extend(extra.clone());
    }
    let p = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": full,
    }))
    .expect("pod");
    PodInfo::new(Arc::new(p))
}

/// A node with `labels` (and its hostname label) holding `pods`.
pub(crate) fn node(name: &str, labels: Value, pods: Vec<PodInfo>) -> NodeInfo {
    let mut labels = labels;
    labels["kubernetes.io/hostname"] = json!(name);
    node_exactly(name, labels, pods)
}

/// The same without the hostname label.
pub(crate) fn node_exactly(name: &str, labels: Value, pods: Vec<PodInfo>) -> NodeInfo {
    let n = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
        .expect("node");
    let mut info = NodeInfo::new(Arc::new(n));
    for p in pods {
        info.add_pod(Arc::new(p));
    }
    info
}

pub(crate) fn snapshot(nodes: Vec<NodeInfo>) -> Snapshot {
    // Listers of its own: tests add namespaces and Services to them.
    Snapshot::new(nodes.into_iter().map(Arc::new).collect()).with_listers(Arc::default())
}

/// `{"podAffinity"|"podAntiAffinity": {"required…": [term]}}` with one
/// term selecting `app in values` over `key`.
pub(crate) fn required(kind: &str, key: &str, app: &[&str]) -> Value {
    json!({"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": app}]},
         "topologyKey": key}
    ]}}})
}

/// PreScore, Score and normalization over every node of `snapshot`;
/// `None` when PreScore skips.
pub(crate) fn scores<P: PreScore + Score>(
    plugin: &P,
    p: &PodInfo,
    snapshot: &Snapshot,
) -> Option<Vec<i64>> {
    let mut state = CycleState::default();
    if plugin
        .pre_score(&mut state, p, &snapshot.nodes, snapshot)
        .code
        == Code::Skip
    {
        return None;
    }
    let mut scores: Vec<i64> = snapshot
        .nodes
        .iter()
        .map(|n| plugin.score(&state, p, n))
        .collect();
    plugin.normalize(&state, p, &mut scores);
    Some(scores)
}
