//! NodeName: a pod naming its node (`spec.nodeName`) fits only there.

use crate::framework::{CycleState, Filter, NodeInfo, Plugin, PodInfo, Status};

pub const NAME: &str = "NodeName";
/// Upstream's `ErrReason`.
pub const REASON: &str = "node(s) didn't match the requested node name";

#[derive(Debug, Default)]
pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl Filter for NodeName {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match pod.spec().node_name.as_deref() {
            Some(wanted) if !wanted.is_empty() && wanted != node.name => {
                Status::unresolvable(REASON)
            }
            _ => Status::success(),
        }
    }
}
