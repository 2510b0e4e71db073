//! UDP flows the kernel remembers past their endpoint. A UDP "connection"
//! is a conntrack entry that keeps its NAT for as long as packets flow, so
//! a client that keeps sending to a Service would keep reaching an
//! endpoint that is gone, or — when the Service had no endpoint — keep
//! being refused after it gained one. Upstream's proxy deletes those
//! entries after each sync (`pkg/proxy/conntrack/cleanup.go`); so does this
//! one, by the `conntrack` tool through the host seam.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use rudder_host::Command;

use crate::model::{Endpoint, Protocol, Service};

/// What a Service's UDP ports reach: `(address, port, endpoint)` for every
/// address it is reached by, and `(node port, endpoint)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UdpFlows {
    pub addresses: BTreeSet<(Ipv4Addr, u16, Option<Ipv4Addr>)>,
    pub node_ports: BTreeSet<(u16, Ipv4Addr)>,
}

/// The flows `service`'s UDP ports allow, given each port's endpoints
/// (those the rules use; `None` in `addresses` marks an address that had
/// none).
pub fn udp_flows(service: &Service, endpoints: &[Vec<Endpoint>]) -> UdpFlows {
    let mut flows = UdpFlows::default();
    for (port, eps) in service.ports.iter().zip(endpoints) {
        if port.protocol != Protocol::Udp {
            continue;
        }
        let serving: Vec<Ipv4Addr> = eps
            .iter()
            .filter(|e| e.ready || (e.serving && e.terminating))
            .map(|e| e.ip)
            .collect();
        let addresses = std::iter::once(service.cluster_ip)
            .chain(service.external_ips.iter().copied())
            .chain(service.load_balancer_ips.iter().copied());
        for address in addresses {
            if serving.is_empty() {
                flows.addresses.insert((address, port.port, None));
            }
            for ip in &serving {
                flows.addresses.insert((address, port.port, Some(*ip)));
            }
        }
        if let Some(node_port) = port.node_port {
            for ip in &serving {
                flows.node_ports.insert((node_port, *ip));
            }
        }
    }
    flows
}

/// The `conntrack` deletions that take the kernel from `old` to `new`:
/// entries to an endpoint no longer served, and entries an address made
/// while it had no endpoint, once it has one.
pub fn cleanup(old: &UdpFlows, new: &UdpFlows) -> Vec<Command> {
    let mut commands = Vec::new();
    for (address, port, endpoint) in old.addresses.difference(&new.addresses) {
        let mut args = vec![
            "-D".to_string(),
            "-p".into(),
            "udp".into(),
            "--orig-dst".into(),
            address.to_string(),
            "--orig-port-dst".into(),
            port.to_string(),
        ];
        match endpoint {
            Some(endpoint) => args.extend(["--reply-src".into(), endpoint.to_string()]),
            // It had no endpoint and now has: what was refused meanwhile.
            None if new
                .addresses
                .iter()
                .any(|(a, p, _)| a == address && p == port) => {}
            None => continue,
        }
        commands.push(Command::new("conntrack", args));
    }
    for (node_port, endpoint) in old.node_ports.difference(&new.node_ports) {
        commands.push(Command::new(
            "conntrack",
            [
                "-D".to_string(),
                "-p".into(),
                "udp".into(),
                "--orig-port-dst".into(),
                node_port.to_string(),
                "--reply-src".into(),
                endpoint.to_string(),
            ],
        ));
    }
    commands
}

/// Whether `conntrack -D`'s failure only says nothing matched (it exits 1
/// then).
pub fn nothing_to_delete(message: &str) -> bool {
    message.contains("0 flow entries have been deleted")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{endpoint, port, service};

    #[test]
    fn a_gone_endpoint_and_an_address_that_gains_one_are_forgotten() {
        let svc = service(
            "dns",
            [10, 43, 0, 10],
            vec![port("dns", Protocol::Udp, 53, Some(30053))],
        );
        let none = udp_flows(&svc, &[vec![]]);
        let one = udp_flows(&svc, &[vec![endpoint([10, 42, 0, 5], 53, "n1")]]);
        let other = udp_flows(&svc, &[vec![endpoint([10, 42, 0, 6], 53, "n1")]]);
        let text = |commands: Vec<Command>| -> Vec<String> {
            commands.iter().map(ToString::to_string).collect()
        };
        assert_eq!(
            text(cleanup(&none, &one)),
            ["conntrack -D -p udp --orig-dst 10.43.0.10 --orig-port-dst 53"]
        );
        assert_eq!(
            text(cleanup(&one, &other)),
            [
                "conntrack -D -p udp --orig-dst 10.43.0.10 --orig-port-dst 53 --reply-src 10.42.0.5",
                "conntrack -D -p udp --orig-port-dst 30053 --reply-src 10.42.0.5",
            ]
        );
        assert!(cleanup(&one, &one).is_empty());
        assert!(
            cleanup(&one, &none)
                .iter()
                .all(|c| c.args.contains(&"--reply-src".to_string()))
        );
        let tcp = service(
            "web",
            [10, 43, 0, 11],
            vec![port("http", Protocol::Tcp, 80, None)],
        );
        assert_eq!(
            udp_flows(&tcp, &[vec![endpoint([10, 42, 0, 5], 80, "n1")]]),
            UdpFlows::default()
        );
    }
}
