//! NodeVolumeLimits (upstream's CSILimits): a node attaches at most as
//! many volumes of a CSI driver as its CSINode's `allocatable.count` for
//! that driver; a volume the node already has attached (used by another
//! pod there) does not count twice. A claim not bound yet counts for its
//! class's provisioner. Pods with no claims are skipped at PreFilter.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::CSINode;

use crate::framework::volumes::{VolumeListers, claim_class, claim_volume_name};
use crate::framework::{
    CycleState, Filter, NodeInfo, Plugin, PodInfo, PreFilter, PreFilterResult, Snapshot, Status,
};

pub const NAME: &str = "NodeVolumeLimits";
/// Upstream's `ErrReasonMaxVolumeCountExceeded`.
pub const REASON: &str = "node(s) exceed max volume count";

#[derive(Debug, Default)]
pub struct NodeVolumeLimits;

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        NAME
    }
}

/// The listers, kept for Filter (which sees no snapshot).
struct State(std::sync::Arc<VolumeListers>);

/// The CSI volumes a pod uses: `driver/handle` → driver. A claim missing
/// is an error for the incoming pod only.
fn attachable(
    pod: &Pod,
    listers: &VolumeListers,
    incoming: bool,
    into: &mut HashMap<String, String>,
) -> Result<(), Status> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    for name in crate::framework::volumes::pod_claim_names(pod) {
        let Some(claim) = listers.claim(namespace, &name) else {
            if incoming {
                return Err(Status::unresolvable(format!(
                    "persistentvolumeclaim {name:?} not found"
                )));
            }
            continue;
        };
        let volume_name = claim_volume_name(&claim);
        let bound = (!volume_name.is_empty())
            .then(|| listers.volume(volume_name))
            .flatten();
        let (driver, handle) = match bound {
            Some(pv) => {
                let Some(csi) = pv.spec.as_ref().and_then(|s| s.csi.as_ref()) else {
                    continue;
                };
                (csi.driver.clone(), csi.volume_handle.clone())
            }
            // Unbound (or its volume not seen yet): its class's driver.
            None => {
                let Some(class) = listers.class(claim_class(&claim)) else {
                    continue;
                };
                let driver = class.provisioner.clone();
                let handle = format!("{driver}-{namespace}/{name}");
                (driver, handle)
            }
        };
        if driver.is_empty() || handle.is_empty() {
            continue;
        }
        into.insert(format!("{driver}/{handle}"), driver);
    }
    Ok(())
}

/// The node's limit per driver, from its CSINode.
fn limits(csi_node: Option<&CSINode>) -> HashMap<&str, i32> {
    csi_node
        .into_iter()
        .flat_map(|c| c.spec.drivers.iter())
        .filter_map(|d| Some((d.name.as_str(), d.allocatable.as_ref()?.count?)))
        .collect()
}

impl PreFilter for NodeVolumeLimits {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let claims = pod
            .spec()
            .volumes
            .iter()
            .flatten()
            .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some());
        if !claims {
            return (PreFilterResult::default(), Status::skip());
        }
        state.write(NAME, State(snapshot.volumes.clone()));
        (PreFilterResult::default(), Status::success())
    }
}

impl Filter for NodeVolumeLimits {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(State(listers)) = state.read::<State>(NAME) else {
            return Status::success();
        };
        let mut new = HashMap::new();
        if let Err(status) = attachable(&pod.pod, listers, true, &mut new) {
            return status;
        }
        if new.is_empty() {
            return Status::success();
        }
        let mut attached = HashMap::new();
        for existing in &node.pods {
            let _ = attachable(&existing.pod, listers, false, &mut attached);
        }
        let mut attached_count: HashMap<&str, i32> = HashMap::new();
        for (unique, driver) in &attached {
            new.remove(unique);
            *attached_count.entry(driver).or_default() += 1;
        }
        let mut new_count: HashMap<&str, i32> = HashMap::new();
        for driver in new.values() {
            *new_count.entry(driver).or_default() += 1;
        }
        let csi_node = listers.csi_node(&node.name);
        let limits = limits(csi_node.as_deref());
        for (driver, count) in new_count {
            if let Some(limit) = limits.get(driver)
                && attached_count.get(driver).copied().unwrap_or(0) + count > *limit
            {
                return Status::unschedulable(REASON);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
    use serde_json::json;

    use super::*;

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

    fn listers(limit: i32) -> VolumeListers {
        let listers = VolumeListers::default();
        for i in 0..3 {
            let claim: PersistentVolumeClaim = serde_json::from_value(json!({
                "metadata": {"name": format!("c{i}"), "namespace": "ns"},
                "spec": {"volumeName": format!("pv{i}")},
            }))
            .expect("claim");
            listers.claims.apply(claim);
            let pv: PersistentVolume = serde_json::from_value(json!({
                "metadata": {"name": format!("pv{i}")},
                "spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": format!("vol-{i}")}},
            }))
            .expect("pv");
            listers.volumes.apply(pv);
        }
        let csi_node: CSINode = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": limit}}]},
        }))
        .expect("csinode");
        listers.csi_nodes.apply(csi_node);
        listers
    }

    #[test]
    fn attach_limits_count_distinct_volumes_per_driver() {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}})).expect("node");
        let mut info = NodeInfo::new(Arc::new(node));
        info.add_pod(Arc::new(pod("old", &["c0"])));
        let snapshot = Snapshot::new(Vec::new()).with_volumes(Arc::new(listers(2)));
        let filter = |p: &PodInfo, info: &NodeInfo| {
            let mut state = CycleState::default();
            let (_, status) = NodeVolumeLimits.pre_filter(&mut state, p, &snapshot);
            assert!(status.is_success());
            NodeVolumeLimits.filter(&state, p, info)
        };
        // c0 is attached already: c0 + c1 make two.
        assert!(filter(&pod("new", &["c0", "c1"]), &info).is_success());
        let status = filter(&pod("new", &["c1", "c2"]), &info);
        assert_eq!(status.reasons, [REASON]);
        let (_, skipped) =
            NodeVolumeLimits.pre_filter(&mut CycleState::default(), &pod("none", &[]), &snapshot);
        assert_eq!(skipped.code, crate::framework::Code::Skip);
    }
}
