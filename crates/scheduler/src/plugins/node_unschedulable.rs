//! NodeUnschedulable: a cordoned node (`spec.unschedulable`) takes only
//! pods tolerating its `node.kubernetes.io/unschedulable` taint.

use k8s_openapi::api::core::v1::Taint;

use super::helpers::tolerates;
use crate::framework::{CycleState, Filter, NodeInfo, Plugin, PodInfo, Status};

pub const NAME: &str = "NodeUnschedulable";
/// Upstream's `ErrReasonUnschedulable`.
pub const REASON: &str = "node(s) were unschedulable";

#[derive(Debug, Default)]
pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl Filter for NodeUnschedulable {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !node.unschedulable {
            return Status::success();
        }
        let taint = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let tolerated = pod
            .spec()
            .tolerations
            .iter()
            .flatten()
            .any(|t| tolerates(t, &taint));
        if tolerated {
            Status::success()
        } else {
            Status::unresolvable(REASON)
        }
    }
}
