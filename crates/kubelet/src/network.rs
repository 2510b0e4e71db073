//! The node's pod network: the CNI conflist containerd's CRI plugin runs
//! (bridge + host-local on the node's podCIDR; containerd adds loopback
//! itself), and the agent's own nftables table — masquerade for traffic
//! leaving the pod network, the pods' hostPorts. The routes and sysctls
//! under it are `rudder_host`'s, run through the agent's host seam.
//!
//! Why nftables and not the plugins' `ipMasq`/`portmap`: those exec
//! `iptables`, which a fresh machine does not have; the service proxy
//! writes nftables too, so one table family, one tool, atomic replacement
//! of the whole table, and no per-sandbox chains to leak. See
//! docs/kubelet.md.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use rudder_host::{Command, Host};
use serde_json::json;

pub use rudder_host::Cidr;

/// A failed network step, naming it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Host(#[from] rudder_host::Error),
    #[error(transparent)]
    Routes(#[from] rudder_host::routes::Error),
    #[error("write the CNI config {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The conflist the agent writes for containerd's CRI plugin.
pub fn conflist(pod_cidr: Cidr, bridge: &str, mtu: u32, ipam_dir: &Path) -> serde_json::Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "rudder",
        "plugins": [{
            "type": "bridge",
            "bridge": bridge,
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": true,
            "mtu": mtu,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": pod_cidr.to_string(), "gateway": pod_cidr.gateway().to_string()}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": ipam_dir,
            },
        }],
    })
}

/// Writes the conflist into `conf_dir` (atomically: containerd watches the
/// directory and must never read half a file).
pub fn write_conflist(conf_dir: &Path, config: &serde_json::Value) -> Result<PathBuf, Error> {
    let path = conf_dir.join("10-rudder.conflist");
    let temporary = conf_dir.join(".10-rudder.conflist.tmp");
    let write = |path: &Path| Error::Write {
        path: path.to_path_buf(),
        source: std::io::Error::other("write"),
    };
    let text = serde_json::to_string_pretty(config).map_err(|_| write(&path))?;
    std::fs::create_dir_all(conf_dir).map_err(|source| Error::Write {
        path: conf_dir.to_path_buf(),
        source,
    })?;
    std::fs::write(&temporary, text).map_err(|source| Error::Write {
        path: temporary.clone(),
        source,
    })?;
    std::fs::rename(&temporary, &path).map_err(|source| Error::Write {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

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

/// Applies [`nftables_rules`] (one transaction).
pub async fn apply_nftables(host: &dyn Host, rules: &str) -> Result<(), Error> {
    Ok(rudder_host::nft::apply(host, rules).await?)
}

/// Removes the agent's nftables table (a node taken down, tests).
pub async fn delete_nftables(host: &dyn Host, table: &str) -> Result<(), Error> {
    Ok(rudder_host::nft::delete_table(host, "ip", table).await?)
}

/// Removes the bridge pods were attached to.
pub async fn delete_bridge(host: &dyn Host, bridge: &str) -> Result<(), Error> {
    host.run(&Command::new("ip", ["link", "delete", bridge]))
        .await?;
    Ok(())
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
        let failed = |message: String| {
            Error::Host(rudder_host::Error::Command {
                command: "nft -f -".into(),
                message,
            })
        };
        let mut child = rudder_host::command::system_command_blocking("nft")
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
        let _ = rudder_host::command::system_command_blocking("nft")
            .args(["delete", "table", "ip", &self.table])
            .status();
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn the_conflist_is_a_bridge_on_the_pod_cidr() {
        let cidr: Cidr = "10.42.3.0/24".parse().expect("cidr");
        let list = conflist(cidr, "rudder0", 1400, Path::new("/d/ipam"));
        let bridge = &list["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["isGateway"], true);
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["mtu"], 1400);
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], "10.42.3.0/24");
        assert_eq!(bridge["ipam"]["ranges"][0][0]["gateway"], "10.42.3.1");
        assert_eq!(bridge["ipam"]["dataDir"], "/d/ipam");
    }

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
