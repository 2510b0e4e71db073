use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::*;
use crate::framework::{Code, VolumeListers};

fn node(name: &str) -> Arc<NodeInfo> {
    let n: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }))
    .expect("node");
    Arc::new(NodeInfo::new(Arc::new(n)))
}

/// A local volume pinned to `host`.
fn local_pv(name: &str, host: &str, size: &str, class: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "local": {"path": "/mnt/disk"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}
            ]}]}},
        },
        "status": {"phase": "Available"},
    }))
    .expect("pv")
}

fn claim(name: &str, class: &str, size: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
            "resources": {"requests": {"storage": size}}},
    }))
    .expect("claim")
}

fn class(name: &str, mode: &str, provisioner: &str) -> StorageClass {
    serde_json::from_value(json!({
        "metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode,
    }))
    .expect("class")
}

fn pod(name: &str, claims: &[&str]) -> PodInfo {
    let volumes: Vec<serde_json::Value> = claims
        .iter()
        .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"containers": [], "volumes": volumes},
    }))
    .expect("pod");
    PodInfo::new(Arc::new(p))
}

fn snapshot(listers: VolumeListers) -> Snapshot {
    Snapshot::new(vec![node("a"), node("b")]).with_volumes(Arc::new(listers))
}

fn plugin() -> VolumeBinding {
    VolumeBinding::new(None, &VolumeBindingArgs::default())
}

fn late_listers() -> VolumeListers {
    let listers = VolumeListers::default();
    listers
        .classes
        .apply(class("local", "WaitForFirstConsumer", NO_PROVISIONER));
    listers
        .volumes
        .apply(local_pv("big-on-a", "a", "10Gi", "local"));
    listers
        .volumes
        .apply(local_pv("small-on-a", "a", "2Gi", "local"));
    listers.claims.apply(claim("data", "local", "1Gi"));
    listers
}

#[test]
fn the_smallest_available_volume_that_allows_the_node_matches() {
    let volumes: Vec<Arc<PersistentVolume>> = vec![
        Arc::new(local_pv("big-on-a", "a", "10Gi", "local")),
        Arc::new(local_pv("small-on-a", "a", "2Gi", "local")),
        Arc::new(local_pv("tiny-on-a", "a", "500Mi", "local")),
        Arc::new(local_pv("small-on-b", "b", "2Gi", "local")),
    ];
    let c = claim("data", "local", "1Gi");
    let on = |n: &str, excluded: &HashSet<String>| {
        find_matching_volume(&c, &volumes, &node(n).node, excluded)
            .and_then(|pv| pv.metadata.name.clone())
    };
    assert_eq!(on("a", &HashSet::new()).as_deref(), Some("small-on-a"));
    assert_eq!(on("b", &HashSet::new()).as_deref(), Some("small-on-b"));
    let taken: HashSet<String> = ["small-on-a".to_string()].into();
    assert_eq!(on("a", &taken).as_deref(), Some("big-on-a"));
    // Another class, or a volume bound elsewhere, is not offered.
    let other = claim("data", "fast", "1Gi");
    assert!(find_matching_volume(&other, &volumes, &node("a").node, &HashSet::new()).is_none());
}

#[test]
fn a_late_claim_goes_where_a_volume_can_be_bound() {
    let binding = plugin();
    let snapshot = snapshot(late_listers());
    let p = pod("p", &["data"]);
    let mut state = CycleState::default();
    let (_, status) = binding.pre_filter(&mut state, &p, &snapshot);
    assert!(status.is_success(), "{status:?}");
    assert!(binding.filter(&state, &p, &snapshot.nodes[0]).is_success());
    let status = binding.filter(&state, &p, &snapshot.nodes[1]);
    assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
    assert_eq!(status.reasons, [BIND_CONFLICT]);
    // Reserve assumes small-on-a taken: another pod's claim gets big-on-a.
    assert!(binding.reserve(&mut state, &p, "a").is_success());
    let chosen = state.read::<PodVolumes>(RESERVED).expect("reserved");
    assert_eq!(
        chosen.bindings[0].0.metadata.name.as_deref(),
        Some("small-on-a")
    );
    let listers = late_listers();
    listers.claims.apply(claim("other", "local", "1Gi"));
    let snapshot = snapshot_with(listers);
    let q = pod("q", &["other"]);
    let mut other_state = CycleState::default();
    binding.pre_filter(&mut other_state, &q, &snapshot);
    assert!(
        binding
            .filter(&other_state, &q, &snapshot.nodes[0])
            .is_success()
    );
    binding.reserve(&mut other_state, &q, "a");
    let chosen = other_state.read::<PodVolumes>(RESERVED).expect("reserved");
    assert_eq!(
        chosen.bindings[0].0.metadata.name.as_deref(),
        Some("big-on-a")
    );
    // Unreserved, small-on-a is offered again.
    binding.unreserve(&mut state, &p, "a");
    binding.unreserve(&mut other_state, &q, "a");
    let mut again = CycleState::default();
    binding.pre_filter(&mut again, &q, &snapshot);
    binding.filter(&again, &q, &snapshot.nodes[0]);
    binding.reserve(&mut again, &q, "a");
    let chosen = again.read::<PodVolumes>(RESERVED).expect("reserved");
    assert_eq!(
        chosen.bindings[0].0.metadata.name.as_deref(),
        Some("small-on-a")
    );
}

fn snapshot_with(listers: VolumeListers) -> Snapshot {
    snapshot(listers)
}

#[test]
fn unbound_immediate_claims_and_bound_volumes_elsewhere() {
    let binding = plugin();
    let listers = VolumeListers::default();
    listers
        .classes
        .apply(class("standard", "Immediate", "example.com/csi"));
    listers.claims.apply(claim("pending", "standard", "1Gi"));
    let mut bound = claim("bound", "local", "1Gi");
    bound.spec.get_or_insert_default().volume_name = Some("pv-b".into());
    bound
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(BIND_COMPLETED.into(), "yes".into());
    listers.claims.apply(bound);
    listers.volumes.apply(local_pv("pv-b", "b", "1Gi", "local"));
    let snapshot = snapshot(listers);
    let (_, status) = binding.pre_filter(
        &mut CycleState::default(),
        &pod("p", &["pending"]),
        &snapshot,
    );
    assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
    assert_eq!(status.reasons, [UNBOUND_IMMEDIATE]);
    let p = pod("p", &["bound"]);
    let mut state = CycleState::default();
    binding.pre_filter(&mut state, &p, &snapshot);
    assert_eq!(
        binding.filter(&state, &p, &snapshot.nodes[0]).reasons,
        [NODE_CONFLICT]
    );
    assert!(binding.filter(&state, &p, &snapshot.nodes[1]).is_success());
    let (_, status) = binding.pre_filter(&mut state, &pod("p", &[]), &snapshot);
    assert_eq!(status.code, Code::Skip);
}

#[test]
fn a_claim_to_provision_needs_a_provisioner_allowing_the_node() {
    let binding = plugin();
    let listers = VolumeListers::default();
    let mut zoned = class("csi", "WaitForFirstConsumer", "example.com/csi");
    zoned.allowed_topologies = Some(vec![
        serde_json::from_value(json!({"matchLabelExpressions": [
            {"key": "kubernetes.io/hostname", "values": ["b"]}
        ]}))
        .expect("term"),
    ]);
    listers.classes.apply(zoned);
    listers.claims.apply(claim("fresh", "csi", "1Gi"));
    let snapshot = snapshot(listers);
    let p = pod("p", &["fresh"]);
    let mut state = CycleState::default();
    binding.pre_filter(&mut state, &p, &snapshot);
    assert_eq!(
        binding.filter(&state, &p, &snapshot.nodes[0]).reasons,
        [BIND_CONFLICT]
    );
    assert!(binding.filter(&state, &p, &snapshot.nodes[1]).is_success());
    binding.reserve(&mut state, &p, "b");
    let chosen = state.read::<PodVolumes>(RESERVED).expect("reserved");
    assert_eq!(chosen.provisions.len(), 1);
}

#[test]
fn binding_writes_the_claim_ref_as_upstream() {
    let pv = local_pv("pv", "a", "1Gi", "local");
    let c = claim("data", "local", "1Gi");
    let bound = bind_volume(&pv, &c);
    let reference = bound
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .expect("ref");
    assert_eq!(reference.name.as_deref(), Some("data"));
    assert_eq!(reference.uid.as_deref(), Some("uid-data"));
    assert_eq!(
        bound
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(BOUND_BY_CONTROLLER))
            .map(String::as_str),
        Some("yes")
    );
}
