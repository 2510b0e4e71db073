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

/// Drives a cache through `steps` random changes over 9 nodes in 3 zones
/// — pods assumed, confirmed (some moved, some terminating), forgotten and
/// deleted; now and then a node relabelled or tainted — handing each
/// change's snapshot to `each`. `make` gives the pod of a step its labels
/// and spec from a random number.
pub(crate) fn churn(
    steps: usize,
    make: impl Fn(u64) -> (Value, Value),
    mut each: impl FnMut(&Snapshot),
) {
    use crate::cache::Cache;
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 33
    };
    let zone = "topology.kubernetes.io/zone";
    let mut cache = Cache::new();
    let node_of = |i: u64, zone_of: u64, tainted: bool| {
        let mut n = node(
            &format!("n{i}"),
            json!({zone: format!("z{zone_of}")}),
            vec![],
        );
        if tainted {
            let mut node = (*n.node).clone();
            node.spec = Some(
                serde_json::from_value(json!({"taints": [{"key": "k", "effect": "NoSchedule"}]}))
                    .expect("taints"),
            );
            n = NodeInfo::new(Arc::new(node));
        }
        n.node.clone()
    };
    for i in 0..9 {
        cache.set_node(node_of(i, i % 3, false));
    }
    let mut pods: Vec<Arc<PodInfo>> = Vec::new();
    for step in 0..steps {
        let r = next();
        match r % 8 {
            0..=2 => {
                let (labels, spec) = make(next());
                let namespace = if next() % 4 == 0 { "other" } else { "default" };
                let p = Arc::new(pod(&format!("p{step}"), namespace, labels, spec));
                cache.assume(p.clone(), &format!("n{}", next() % 9));
                pods.push(p);
            }
            3 | 4 if !pods.is_empty() => {
                // Seen bound: where assumed, or elsewhere; some terminating.
                let p = &pods[(next() as usize) % pods.len()];
                let mut bound = (*p.pod).clone();
                bound.spec.get_or_insert_with(Default::default).node_name =
                    Some(format!("n{}", next() % 9));
                if next() % 3 == 0 {
                    bound.metadata.deletion_timestamp = Some(
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
                    );
                }
                cache.set_pod(Arc::new(bound));
            }
            5 if !pods.is_empty() => {
                let p = pods.swap_remove((next() as usize) % pods.len());
                cache.remove_pod(&p.pod);
            }
            6 if !pods.is_empty() => {
                let p = pods.swap_remove((next() as usize) % pods.len());
                cache.forget(&p.key);
            }
            7 if next() % 4 == 0 => {
                cache.set_node(node_of(next() % 9, next() % 3, next() % 2 == 0));
            }
            _ => {}
        }
        each(&cache.snapshot().with_listers(Arc::default()));
    }
}
