//! NodePorts: a pod's host ports must be free on the node — the same
//! protocol and port conflict when either binds every address
//! (`0.0.0.0`) or both bind the same one.

use crate::framework::types::HostPort;
use crate::framework::{CycleState, Filter, NodeInfo, Plugin, PodInfo, Status};

pub const NAME: &str = "NodePorts";
/// Upstream's `ErrReason`.
pub const REASON: &str = "node(s) didn't have free ports for the requested pod ports";

#[derive(Debug, Default)]
pub struct NodePorts;

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }
}

/// Whether `wanted` conflicts with a port in use.
pub fn conflicts(wanted: &HostPort, used: &HostPort) -> bool {
    wanted.protocol == used.protocol
        && wanted.port == used.port
        && (wanted.ip == used.ip || wanted.ip == "0.0.0.0" || used.ip == "0.0.0.0")
}

impl Filter for NodePorts {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let taken = pod
            .ports
            .iter()
            .any(|want| node.used_ports.iter().any(|used| conflicts(want, used)));
        if taken {
            Status::unschedulable(REASON)
        } else {
            Status::success()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(ip: &str, port: i32) -> HostPort {
        HostPort {
            protocol: "TCP".into(),
            ip: ip.into(),
            port,
        }
    }

    #[test]
    fn ports_conflict_on_the_same_address_or_any() {
        assert!(conflicts(&port("0.0.0.0", 80), &port("10.0.0.1", 80)));
        assert!(conflicts(&port("10.0.0.1", 80), &port("10.0.0.1", 80)));
        assert!(!conflicts(&port("10.0.0.1", 80), &port("10.0.0.2", 80)));
        assert!(!conflicts(&port("0.0.0.0", 80), &port("0.0.0.0", 81)));
        let udp = HostPort {
            protocol: "UDP".into(),
            ..port("0.0.0.0", 80)
        };
        assert!(!conflicts(&udp, &port("0.0.0.0", 80)));
    }
}
