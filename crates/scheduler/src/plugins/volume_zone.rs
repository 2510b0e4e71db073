//! VolumeZone: a pod whose bound volumes are labelled with a zone or
//! region goes only to nodes in one of them (a PV's label may list several
//! zones joined by `__`). Nodes with no zone or region label at all pass;
//! unbound WaitForFirstConsumer claims are VolumeBinding's concern.

use std::collections::BTreeSet;

use crate::framework::volumes::{claim_class, claim_volume_name};
use crate::framework::{
    CycleState, Filter, NodeInfo, Plugin, PodInfo, PreFilter, PreFilterResult, Snapshot, Status,
};

pub const NAME: &str = "VolumeZone";
/// Upstream's `ErrReasonConflict`.
pub const REASON: &str = "node(s) had no available volume zone";

/// The labels compared, beta and GA.
const TOPOLOGY_LABELS: [&str; 4] = [
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

#[derive(Debug, Default)]
pub struct VolumeZone;

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        NAME
    }
}

/// A volume's topology label and the values it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Topology {
    key: &'static str,
    values: BTreeSet<String>,
}

/// The GA label a beta one became.
fn ga(key: &str) -> &str {
    match key {
        "failure-domain.beta.kubernetes.io/zone" => "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region" => "topology.kubernetes.io/region",
        other => other,
    }
}

/// The topologies of the pod's bound volumes (upstream's `getPVbyPod`).
fn topologies(pod: &PodInfo, snapshot: &Snapshot) -> Result<Vec<Topology>, Status> {
    let listers = &snapshot.volumes;
    let mut found = Vec::new();
    for volume in pod.spec().volumes.iter().flatten() {
        let Some(source) = &volume.persistent_volume_claim else {
            continue;
        };
        let name = &source.claim_name;
        if name.is_empty() {
            return Err(Status::unresolvable("PersistentVolumeClaim had no name"));
        }
        let Some(claim) = listers.claim(pod.namespace(), name) else {
            return Err(Status::unresolvable(format!(
                "persistentvolumeclaim {name:?} not found"
            )));
        };
        let volume_name = claim_volume_name(&claim);
        if volume_name.is_empty() {
            let class = claim_class(&claim);
            if class.is_empty() {
                return Err(Status::unresolvable(
                    "PersistentVolumeClaim had no pv name and storageClass name",
                ));
            }
            let Some(class) = listers.class(class) else {
                return Err(Status::unresolvable(format!(
                    "storageclass.storage.k8s.io {class:?} not found"
                )));
            };
            if class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer") {
                continue;
            }
            return Err(Status::unresolvable("PersistentVolume had no name"));
        }
        let Some(pv) = listers.volume(volume_name) else {
            return Err(Status::unresolvable(format!(
                "persistentvolume {volume_name:?} not found"
            )));
        };
        let labels = pv.metadata.labels.as_ref();
        for key in TOPOLOGY_LABELS {
            if let Some(value) = labels.and_then(|l| l.get(key)) {
                let values = value
                    .split("__")
                    .map(|z| z.trim().to_string())
                    .filter(|z| !z.is_empty())
                    .collect();
                found.push(Topology { key, values });
            }
        }
    }
    Ok(found)
}

impl PreFilter for VolumeZone {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let no_claims = pod
            .spec()
            .volumes
            .iter()
            .flatten()
            .all(|v| v.persistent_volume_claim.is_none());
        if no_claims {
            return (PreFilterResult::default(), Status::skip());
        }
        match topologies(pod, snapshot) {
            Ok(found) if found.is_empty() => (PreFilterResult::default(), Status::skip()),
            Ok(found) => {
                state.write(NAME, found);
                (PreFilterResult::default(), Status::success())
            }
            Err(status) => (PreFilterResult::default(), status),
        }
    }
}

impl Filter for VolumeZone {
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(found) = state.read::<Vec<Topology>>(NAME) else {
            return Status::success();
        };
        let labels = node.labels();
        if !TOPOLOGY_LABELS.iter().any(|l| labels.contains_key(*l)) {
            return Status::success();
        }
        for topology in found {
            let value = labels
                .get(topology.key)
                .or_else(|| labels.get(ga(topology.key)));
            if value.is_none_or(|v| !topology.values.contains(v)) {
                return Status::unresolvable(REASON);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
    use k8s_openapi::api::storage::v1::StorageClass;
    use serde_json::json;

    use super::*;
    use crate::framework::VolumeListers;
    use crate::framework::types::NodeInfo;

    fn node(labels: serde_json::Value) -> NodeInfo {
        let n: Node = serde_json::from_value(json!({"metadata": {"name": "n", "labels": labels}}))
            .expect("node");
        NodeInfo::new(Arc::new(n))
    }

    fn snapshot() -> Snapshot {
        let listers = VolumeListers::default();
        let claim = |name: &str, volume: Option<&str>, class: &str| -> PersistentVolumeClaim {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"volumeName": volume, "storageClassName": class},
            }))
            .expect("claim")
        };
        listers.claims.apply(claim("zoned", Some("pv-a"), "slow"));
        listers.claims.apply(claim("late", None, "local"));
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv-a", "labels": {"failure-domain.beta.kubernetes.io/zone": "z1__z2"}},
        }))
        .expect("pv");
        listers.volumes.apply(pv);
        let class: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": "local"}, "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
        }))
        .expect("class");
        listers.classes.apply(class);
        Snapshot::new(Vec::new()).with_volumes(Arc::new(listers))
    }

    fn pod(claim: &str) -> PodInfo {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]},
        }))
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    #[test]
    fn bound_volumes_keep_pods_in_their_zones() {
        let snapshot = snapshot();
        let mut state = CycleState::default();
        let p = pod("zoned");
        let (_, status) = VolumeZone.pre_filter(&mut state, &p, &snapshot);
        assert!(status.is_success());
        // The PV's beta label matches a node's GA label.
        let in_zone = node(json!({"topology.kubernetes.io/zone": "z2"}));
        assert!(VolumeZone.filter(&state, &p, &in_zone).is_success());
        let elsewhere = node(json!({"topology.kubernetes.io/zone": "z3"}));
        let status = VolumeZone.filter(&state, &p, &elsewhere);
        assert_eq!(status.reasons, [REASON]);
        assert!(VolumeZone.filter(&state, &p, &node(json!({}))).is_success());
    }

    #[test]
    fn unbound_late_claims_are_skipped() {
        let snapshot = snapshot();
        let (_, status) =
            VolumeZone.pre_filter(&mut CycleState::default(), &pod("late"), &snapshot);
        assert_eq!(status.code, crate::framework::Code::Skip);
        let (_, status) =
            VolumeZone.pre_filter(&mut CycleState::default(), &pod("gone"), &snapshot);
        assert_eq!(status.reasons, ["persistentvolumeclaim \"gone\" not found"]);
    }
}
