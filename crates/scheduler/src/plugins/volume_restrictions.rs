//! VolumeRestrictions: a claim with the `ReadWriteOncePod` access mode is
//! used by one pod in the whole cluster, and in-tree disks that attach to
//! one node at a time (GCE PD, AWS EBS, iSCSI, RBD) are not mounted twice
//! on a node, unless both read-only. Pods with none of these volumes are
//! skipped at PreFilter.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Pod, Volume};

use crate::framework::volumes::{VolumeListers, pod_claim_names};
use crate::framework::{
    CycleState, Filter, NodeInfo, Plugin, PodInfo, PreFilter, PreFilterResult, Snapshot, Status,
};

pub const NAME: &str = "VolumeRestrictions";
/// Upstream's `ErrReasonDiskConflict`.
pub const DISK_CONFLICT: &str = "node(s) had no available disk";
/// Upstream's `ErrReasonReadWriteOncePodConflict`.
pub const READ_WRITE_ONCE_POD_CONFLICT: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";

#[derive(Debug, Default)]
pub struct VolumeRestrictions;

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }
}

/// What PreFilter found: the pod's ReadWriteOncePod claims
/// (`namespace/name`) and how many pods already use one of them.
#[derive(Debug, Clone, Default)]
struct State {
    read_write_once_pod: HashSet<String>,
    conflicts: usize,
}

fn is_disk(v: &Volume) -> bool {
    v.gce_persistent_disk.is_some()
        || v.aws_elastic_block_store.is_some()
        || v.iscsi.is_some()
        || v.rbd.is_some()
}

/// Whether `volume` conflicts with one of `existing`'s (upstream's
/// `isVolumeConflict`).
pub fn disk_conflict(volume: &Volume, existing: &Pod) -> bool {
    let volumes = existing
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten());
    for other in volumes {
        if let (Some(a), Some(b)) = (&volume.gce_persistent_disk, &other.gce_persistent_disk)
            && a.pd_name == b.pd_name
            && !(a.read_only == Some(true) && b.read_only == Some(true))
        {
            return true;
        }
        if let (Some(a), Some(b)) = (
            &volume.aws_elastic_block_store,
            &other.aws_elastic_block_store,
        ) && a.volume_id == b.volume_id
        {
            return true;
        }
        if let (Some(a), Some(b)) = (&volume.iscsi, &other.iscsi)
            && a.iqn == b.iqn
            && !(a.read_only == Some(true) && b.read_only == Some(true))
        {
            return true;
        }
        if let (Some(a), Some(b)) = (&volume.rbd, &other.rbd)
            && a.monitors.iter().any(|m| b.monitors.contains(m))
            && a.pool == b.pool
            && a.image == b.image
            && !(a.read_only == Some(true) && b.read_only == Some(true))
        {
            return true;
        }
    }
    false
}

/// How many of `pod`'s claims are among `keys`.
fn uses(pod: &PodInfo, keys: &HashSet<String>) -> usize {
    let namespace = pod.namespace();
    pod_claim_names(&pod.pod)
        .iter()
        .filter(|c| keys.contains(&format!("{namespace}/{c}")))
        .count()
}

/// The pod's claims with the ReadWriteOncePod mode; an absent claim is
/// upstream's unresolvable `persistentvolumeclaim "x" not found`.
fn read_write_once_pod(pod: &PodInfo, listers: &VolumeListers) -> Result<HashSet<String>, Status> {
    let namespace = pod.namespace();
    let mut keys = HashSet::new();
    for name in pod_claim_names(&pod.pod) {
        let Some(claim) = listers.claim(namespace, &name) else {
            return Err(Status::unresolvable(format!(
                "persistentvolumeclaim {name:?} not found"
            )));
        };
        let modes = claim.spec.as_ref().and_then(|s| s.access_modes.as_ref());
        if modes.is_some_and(|m| m.iter().any(|m| m == "ReadWriteOncePod")) {
            keys.insert(format!("{namespace}/{name}"));
        }
    }
    Ok(keys)
}

impl PreFilter for VolumeRestrictions {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let volumes = pod.spec().volumes.as_deref().unwrap_or_default();
        let has_claims = volumes
            .iter()
            .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some());
        if !has_claims && !volumes.iter().any(is_disk) {
            return (PreFilterResult::default(), Status::skip());
        }
        let keys = match read_write_once_pod(pod, &snapshot.volumes) {
            Ok(keys) => keys,
            Err(status) => return (PreFilterResult::default(), status),
        };
        let conflicts = if keys.is_empty() {
            0
        } else {
            snapshot
                .nodes
                .iter()
                .flat_map(|n| n.pods.iter())
                .filter(|p| p.key != pod.key)
                .map(|p| uses(p, &keys))
                .sum()
        };
        state.write(
            NAME,
            State {
                read_write_once_pod: keys,
                conflicts,
            },
        );
        (PreFilterResult::default(), Status::success())
    }

    fn add_pod(&self, state: &mut CycleState, _: &PodInfo, added: &PodInfo, _: &NodeInfo) {
        if let Some(mut s) = state.read::<State>(NAME).cloned() {
            s.conflicts += uses(added, &s.read_write_once_pod);
            state.write(NAME, s);
        }
    }

    fn remove_pod(&self, state: &mut CycleState, _: &PodInfo, removed: &PodInfo, _: &NodeInfo) {
        if let Some(mut s) = state.read::<State>(NAME).cloned() {
            s.conflicts = s
                .conflicts
                .saturating_sub(uses(removed, &s.read_write_once_pod));
            state.write(NAME, s);
        }
    }
}

impl Filter for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let disks = pod.spec().volumes.iter().flatten().filter(|v| is_disk(v));
        for volume in disks {
            if node.pods.iter().any(|p| disk_conflict(volume, &p.pod)) {
                return Status::unschedulable(DISK_CONFLICT);
            }
        }
        if state.read::<State>(NAME).is_some_and(|s| s.conflicts > 0) {
            return Status::unschedulable(READ_WRITE_ONCE_POD_CONFLICT);
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use serde_json::json;

    use super::*;

    fn pod(name: &str, volumes: serde_json::Value) -> PodInfo {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"containers": [], "volumes": volumes},
        }))
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    fn snapshot_with(user: PodInfo, claims: &[(&str, &str)]) -> Snapshot {
        let node: k8s_openapi::api::core::v1::Node =
            serde_json::from_value(json!({"metadata": {"name": "n1"}})).expect("node");
        let mut info = NodeInfo::new(Arc::new(node));
        info.add_pod(Arc::new(user));
        let listers = VolumeListers::default();
        for (name, mode) in claims {
            let claim: PersistentVolumeClaim = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"accessModes": [mode]},
            }))
            .expect("claim");
            listers.claims.apply(claim);
        }
        Snapshot::new(vec![Arc::new(info)]).with_volumes(Arc::new(listers))
    }

    #[test]
    fn a_read_write_once_pod_claim_has_one_user() {
        let uses_claim = |name| {
            pod(
                name,
                json!([{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]),
            )
        };
        let snapshot = snapshot_with(uses_claim("first"), &[("data", "ReadWriteOncePod")]);
        let second = uses_claim("second");
        let mut state = CycleState::default();
        let (_, status) = VolumeRestrictions.pre_filter(&mut state, &second, &snapshot);
        assert!(status.is_success());
        let status = VolumeRestrictions.filter(&state, &second, &snapshot.nodes[0]);
        assert_eq!(status.reasons, [READ_WRITE_ONCE_POD_CONFLICT]);
        assert_eq!(status.code, crate::framework::Code::Unschedulable);
        // Preemption takes the user away: the claim is free.
        let first = snapshot.nodes[0].pods[0].clone();
        VolumeRestrictions.remove_pod(&mut state, &second, &first, &snapshot.nodes[0]);
        assert!(
            VolumeRestrictions
                .filter(&state, &second, &snapshot.nodes[0])
                .is_success()
        );
        // ReadWriteOnce claims may be shared.
        let snapshot = snapshot_with(uses_claim("first"), &[("data", "ReadWriteOnce")]);
        let mut state = CycleState::default();
        VolumeRestrictions.pre_filter(&mut state, &second, &snapshot);
        assert!(
            VolumeRestrictions
                .filter(&state, &second, &snapshot.nodes[0])
                .is_success()
        );
    }

    #[test]
    fn pods_without_volumes_are_skipped_and_missing_claims_unresolvable() {
        let snapshot = snapshot_with(pod("a", json!([])), &[]);
        let (_, status) = VolumeRestrictions.pre_filter(
            &mut CycleState::default(),
            &pod("b", json!([])),
            &snapshot,
        );
        assert_eq!(status.code, crate::framework::Code::Skip);
        let missing = pod(
            "c",
            json!([{"name": "v", "persistentVolumeClaim": {"claimName": "nope"}}]),
        );
        let (_, status) =
            VolumeRestrictions.pre_filter(&mut CycleState::default(), &missing, &snapshot);
        assert_eq!(
            status.code,
            crate::framework::Code::UnschedulableAndUnresolvable
        );
        assert_eq!(status.reasons, ["persistentvolumeclaim \"nope\" not found"]);
    }

    #[test]
    fn the_same_disk_read_write_conflicts() {
        let disk = |ro: bool| json!([{"name": "d", "gcePersistentDisk": {"pdName": "pd1", "readOnly": ro}}]);
        let snapshot = snapshot_with(pod("a", disk(false)), &[]);
        let status = VolumeRestrictions.filter(
            &CycleState::default(),
            &pod("b", disk(true)),
            &snapshot.nodes[0],
        );
        assert_eq!(status.reasons, [DISK_CONFLICT]);
        let snapshot = snapshot_with(pod("a", disk(true)), &[]);
        assert!(
            VolumeRestrictions
                .filter(
                    &CycleState::default(),
                    &pod("b", disk(true)),
                    &snapshot.nodes[0]
                )
                .is_success()
        );
    }
}
