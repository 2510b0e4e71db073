//! The node agent's own table (`ip <bridge>`): masquerade for pod traffic
//! leaving the cluster, and the pods' hostPorts; and the egress guard the
//! tests and benchmarks install. Replaced whole, one transaction at a time
//! (`super::super::nft`); see docs/kubelet.md.

use std::net::Ipv4Addr;

use rudder_api::network::Cidr;

use crate::command::{Error, system_command_blocking};

/// A pod's `hostPort`: traffic to this node's `host_port` (on `host_ip`,
/// or any of its addresses) goes to `pod_ip:container_port`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HostPort {
    /// `tcp` or `udp`.
    pub protocol: String,
    pub host_ip: Option<Ipv4Addr>,
    pub host_port: u16,
    pub pod_ip: Ipv4Addr,
    pub container_port: u16,
}

/// The agent's nftables table, replaced whole on every call: masquerade
/// for pod traffic to anything outside the cluster CIDR, and the pods'
/// hostPorts as DNAT for traffic to this node's addresses (from outside,
/// from the node itself, loopback included — masqueraded so that replies
/// come back through the node).
pub fn nftables_rules(
    table: &str,
    cluster_cidr: Cidr,
    pod_cidr: Cidr,
    host_ports: &[HostPort],
) -> String {
    let mut dnat = String::new();
    for port in host_ports {
        let daddr = port
            .host_ip
            .map(|ip| format!("ip daddr {ip} "))
            .unwrap_or_default();
        dnat.push_str(&format!(
            "\t\t{daddr}{proto} dport {host} dnat to {pod}:{container}\n",
            proto = port.protocol,
            host = port.host_port,
            pod = port.pod_ip,
            container = port.container_port,
        ));
    }
    format!(
        "table ip {table}\n\
         delete table ip {table}\n\
         table ip {table} {{\n\
         \tchain hostports {{\n\
         {dnat}\
         \t}}\n\
         \tchain prerouting {{\n\
         \t\ttype nat hook prerouting priority -100; policy accept;\n\
         \t\tfib daddr type local jump hostports\n\
         \t}}\n\
         \tchain output {{\n\
         \t\ttype nat hook output priority -100; policy accept;\n\
         \t\tfib daddr type local jump hostports\n\
         \t}}\n\
         \tchain postrouting {{\n\
         \t\ttype nat hook postrouting priority srcnat; policy accept;\n\
         \t\tip saddr {pod_cidr} ip daddr != {cluster_cidr} masquerade\n\
         \t\tip saddr 127.0.0.0/8 ip daddr {pod_cidr} ct status dnat masquerade\n\
         \t}}\n\
         }}\n"
    )
}

/// An nftables table that drops whatever the pod network sends to an
/// address outside `allowed` (and loopback): what tests and benchmarks
/// that run pods install, so that no pod of theirs can send a packet off
/// the machine, even by mistake. Pods' traffic to this machine's own
/// addresses never reaches the forward hook; what is forwarded must stay
/// in `allowed` (the cluster and service CIDRs, the tests' own network
/// namespaces).
pub fn egress_guard_rules(table: &str, pod_network: Cidr, allowed: &[Cidr]) -> String {
    let mut kept = vec!["127.0.0.0/8".to_string()];
    kept.extend(allowed.iter().map(Cidr::to_string));
    format!(
        "table ip {table}\n\
         delete table ip {table}\n\
         table ip {table} {{\n\
         \tchain forward {{\n\
         \t\ttype filter hook forward priority filter - 10; policy accept;\n\
         \t\tip saddr {pod_network} ip daddr != {{ {kept} }} counter drop\n\
         \t}}\n\
         }}\n",
        kept = kept.join(", ")
    )
}

/// [`egress_guard_rules`] installed for as long as the guard lives.
#[derive(Debug)]
pub struct EgressGuard {
    table: String,
}

impl EgressGuard {
    pub fn install(table: &str, pod_network: Cidr, allowed: &[Cidr]) -> Result<Self, Error> {
        let rules = egress_guard_rules(table, pod_network, allowed);
        let failed = |message: String| Error::Command {
            command: "nft -f -".into(),
            message,
        };
        let mut child = system_command_blocking("nft")
            .args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| failed(e.to_string()))?;
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write;
            stdin
                .write_all(rules.as_bytes())
                .map_err(|e| failed(e.to_string()))?;
        }
        let status = child.wait().map_err(|e| failed(e.to_string()))?;
        if !status.success() {
            return Err(failed(format!(
                "the egress guard was refused: {status}\n{rules}"
            )));
        }
        Ok(EgressGuard {
            table: table.to_string(),
        })
    }
}

impl Drop for EgressGuard {
    fn drop(&mut self) {
        let _ = system_command_blocking("nft")
            .args(["delete", "table", "ip", &self.table])
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masquerade_covers_pod_traffic_leaving_the_cluster_and_host_ports_are_dnat() {
        let ports = [HostPort {
            protocol: "tcp".into(),
            host_ip: None,
            host_port: 8080,
            pod_ip: "10.42.3.7".parse().expect("ip"),
            container_port: 80,
        }];
        let rules = nftables_rules(
            "rudder",
            "10.42.0.0/16".parse().expect("cidr"),
            "10.42.3.0/24".parse().expect("cidr"),
            &ports,
        );
        assert!(rules.contains("delete table ip rudder"));
        assert!(rules.contains("ip saddr 10.42.3.0/24 ip daddr != 10.42.0.0/16 masquerade"));
        assert!(
            rules.contains("\t\ttcp dport 8080 dnat to 10.42.3.7:80\n"),
            "{rules}"
        );
        assert!(rules.contains("fib daddr type local jump hostports"));
    }

    #[test]
    fn the_egress_guard_drops_pod_traffic_leaving_the_allowed_networks() {
        let cidr = |t: &str| t.parse::<Cidr>().expect("cidr");
        let rules = egress_guard_rules(
            "guard",
            cidr("10.42.0.0/16"),
            &[cidr("10.42.0.0/16"), cidr("10.43.0.0/16")],
        );
        assert!(rules.contains("type filter hook forward"), "{rules}");
        assert!(
            rules.contains(
                "ip saddr 10.42.0.0/16 ip daddr != { 127.0.0.0/8, 10.42.0.0/16, 10.43.0.0/16 } counter drop"
            ),
            "{rules}"
        );
        assert!(rules.starts_with("table ip guard\ndelete table ip guard\n"));
    }
}
