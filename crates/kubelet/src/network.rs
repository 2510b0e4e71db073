//! The node's pod network: blackhole routes for the cluster and service
//! CIDRs (installed before anything else, so that no packet to a cluster
//! address that is not a pod on this machine ever leaves it), the CNI
//! conflist containerd's CRI plugin runs (bridge + host-local on the
//! node's podCIDR; containerd adds loopback itself), and masquerade for
//! traffic leaving the pod network by the agent's own nftables table.
//!
//! Why nftables and not the plugins' `ipMasq`/`portmap`: those exec
//! `iptables`, which a fresh machine does not have; the service proxy
//! writes nftables too, so one table family, one tool, atomic replacement
//! of the whole table, and no per-sandbox chains to leak. See
//! docs/kubelet.md.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde_json::json;

/// A failed network step, naming it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{command}: {message}")]
    Command { command: String, message: String },
    #[error("write the CNI config {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid CIDR {0:?}")]
    Cidr(String),
    #[error(
        "a route for {cidr} exists that the agent did not make ({route}): the agent keeps the \
         cluster and service CIDRs blackholed and will not replace a route of yours; remove it \
         (ip route del {cidr}) or choose other CIDRs (--cluster-cidr, --service-cidr)"
    )]
    RouteTaken { cidr: Cidr, route: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// An IPv4 CIDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Error> {
        let bad = || Error::Cidr(text.to_string());
        let (addr, prefix) = text.split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        if prefix > 32 {
            return Err(bad());
        }
        Ok(Cidr { addr, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Cidr {
    /// The first host address: the bridge's (the pods' gateway).
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr) + 1)
    }
}

/// The system directories the node's tools live in on Debian (`nft`, and
/// `runc`, which containerd runs).
const SYSTEM_PATH: [&str; 3] = ["/usr/local/sbin", "/usr/sbin", "/sbin"];

/// `path` with the system directories it lacks appended: a shell that is
/// not a login shell (`env -i`, cron, some service managers) leaves
/// `/usr/sbin` out, and the agent's nftables rules then failed with "No
/// such file or directory" and containerd could start no pod.
fn with_system_path(path: Option<std::ffi::OsString>) -> std::ffi::OsString {
    let mut dirs: Vec<std::path::PathBuf> = path
        .as_deref()
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    for dir in SYSTEM_PATH {
        if !dirs.iter().any(|d| d.as_os_str() == dir) {
            dirs.push(dir.into());
        }
    }
    std::env::join_paths(dirs).unwrap_or_else(|_| path.unwrap_or_default())
}

/// A command for one of the node's system tools (or containerd, whose
/// children inherit the same `PATH`), found and run with the system
/// directories on its `PATH`.
pub fn system_command(program: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command.env("PATH", with_system_path(std::env::var_os("PATH")));
    command
}

async fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<(), Error> {
    use tokio::io::AsyncWriteExt;
    let command = format!("{program} {}", args.join(" "));
    let mut child = system_command(program)
        .args(args)
        .stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| Error::Command {
            command: command.clone(),
            message: e.to_string(),
        })?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .await
            .map_err(|e| Error::Command {
                command: command.clone(),
                message: e.to_string(),
            })?;
    }
    let output = child.wait_with_output().await.map_err(|e| Error::Command {
        command: command.clone(),
        message: e.to_string(),
    })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(Error::Command {
            command,
            message: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

/// What `program args` prints on stdout.
async fn read(program: &str, args: &[&str]) -> Result<String, Error> {
    let command = format!("{program} {}", args.join(" "));
    let output = system_command(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| Error::Command {
            command: command.clone(),
            message: e.to_string(),
        })?;
    if !output.status.success() {
        return Err(Error::Command {
            command,
            message: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A CIDR's route in the main table, as `ip -o route show exact` lists it.
#[derive(Debug, PartialEq, Eq)]
enum ExistingRoute {
    None,
    /// A blackhole: the agent's own, from an earlier start (they stay when
    /// it stops), or one with the same effect.
    Blackhole,
    /// Anything else: someone else's route.
    Other(String),
}

fn existing_route(listed: &str) -> ExistingRoute {
    let mut routes = listed.lines().map(str::trim).filter(|l| !l.is_empty());
    match (routes.next(), routes.next()) {
        (None, _) => ExistingRoute::None,
        (Some(route), None) if route.split_whitespace().next() == Some("blackhole") => {
            ExistingRoute::Blackhole
        }
        (Some(route), _) => ExistingRoute::Other(route.to_string()),
    }
}

/// Installs (or keeps) a blackhole route for each CIDR, refusing to
/// replace a route for the same CIDR that is not a blackhole (a user's).
/// More specific routes — the node's bridge, other nodes' podCIDRs — win
/// over them.
pub async fn install_blackhole_routes(cidrs: &[Cidr]) -> Result<(), Error> {
    for cidr in cidrs {
        let text = cidr.to_string();
        match existing_route(&read("ip", &["-o", "route", "show", "exact", &text]).await?) {
            ExistingRoute::Blackhole => tracing::info!(%cidr, "blackhole route kept"),
            ExistingRoute::None => {
                run("ip", &["route", "add", "blackhole", &text], None).await?;
                tracing::info!(%cidr, "blackhole route installed");
            }
            ExistingRoute::Other(route) => {
                return Err(Error::RouteTaken { cidr: *cidr, route });
            }
        }
    }
    Ok(())
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

/// Lets DNAT from loopback to pods through `bridge` be routed (what the
/// portmap plugin sets for the same reason).
pub fn allow_localnet(bridge: &str) -> std::io::Result<()> {
    std::fs::write(
        format!("/proc/sys/net/ipv4/conf/{bridge}/route_localnet"),
        "1",
    )
}

/// Applies [`nftables_rules`] with `nft`.
pub async fn apply_nftables(rules: &str) -> Result<(), Error> {
    run("nft", &["-f", "-"], Some(rules)).await
}

/// Removes the agent's nftables table (tests clean up with this).
pub async fn delete_nftables(table: &str) -> Result<(), Error> {
    run("nft", &["delete", "table", "ip", table], None).await
}

/// The sysctl pods need to reach beyond their bridge.
const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// The file under the agent's directory that says the agent turned IPv4
/// forwarding on (it was off), so that cleaning up turns it off again.
fn forwarding_marker(agent_dir: &Path) -> PathBuf {
    agent_dir.join("ip_forward-was-off")
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// Turns on IPv4 forwarding (pods reach beyond their bridge only with it),
/// noting under `agent_dir` when it was off, for [`restore_forwarding`].
pub fn enable_forwarding(agent_dir: &Path) -> Result<(), Error> {
    let before = std::fs::read_to_string(IP_FORWARD).map_err(io(format!("read {IP_FORWARD}")))?;
    if before.trim() == "1" {
        return Ok(());
    }
    let marker = forwarding_marker(agent_dir);
    std::fs::create_dir_all(agent_dir).map_err(io(format!("create {}", agent_dir.display())))?;
    std::fs::write(&marker, before).map_err(io(format!("write {}", marker.display())))?;
    std::fs::write(IP_FORWARD, "1").map_err(io(format!("write {IP_FORWARD}")))
}

/// Turns IPv4 forwarding off again if [`enable_forwarding`] turned it on.
pub fn restore_forwarding(agent_dir: &Path) -> Result<(), Error> {
    let marker = forwarding_marker(agent_dir);
    let Ok(before) = std::fs::read_to_string(&marker) else {
        return Ok(());
    };
    std::fs::write(IP_FORWARD, before.trim()).map_err(io(format!("write {IP_FORWARD}")))?;
    std::fs::remove_file(&marker).map_err(io(format!("remove {}", marker.display())))
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
        let mut child = std::process::Command::new("nft")
            .args(["-f", "-"])
            .env("PATH", with_system_path(std::env::var_os("PATH")))
            .stdin(std::process::Stdio::piped())
            .spawn()
            .map_err(io("run nft"))?;
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write;
            stdin
                .write_all(rules.as_bytes())
                .map_err(io("write to nft"))?;
        }
        let status = child.wait().map_err(io("wait for nft"))?;
        if !status.success() {
            return Err(Error::Command {
                command: "nft -f -".into(),
                message: format!("the egress guard was refused: {status}\n{rules}"),
            });
        }
        Ok(EgressGuard {
            table: table.to_string(),
        })
    }
}

impl Drop for EgressGuard {
    fn drop(&mut self) {
        let _ = std::process::Command::new("nft")
            .args(["delete", "table", "ip", &self.table])
            .env("PATH", with_system_path(std::env::var_os("PATH")))
            .status();
    }
}

/// The MTU of the interface the default route leaves by (1500 when there
/// is none).
pub async fn default_mtu() -> u32 {
    let output = system_command("ip")
        .args(["-o", "route", "show", "default"])
        .output()
        .await;
    let device = output.ok().and_then(|o| {
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        let mut words = text.split_whitespace();
        while let Some(word) = words.next() {
            if word == "dev" {
                return words.next().map(str::to_string);
            }
        }
        None
    });
    device
        .and_then(|d| std::fs::read_to_string(format!("/sys/class/net/{d}/mtu")).ok())
        .and_then(|m| m.trim().parse().ok())
        .unwrap_or(1500)
}

/// The node's IPv4 address: the source address of its default route, or
/// loopback on a machine with none.
pub async fn node_ip() -> Ipv4Addr {
    let output = system_command("ip")
        .args(["-o", "-4", "route", "get", "1.1.1.1"])
        .output()
        .await;
    output
        .ok()
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout).to_string();
            let mut words = text.split_whitespace();
            while let Some(word) = words.next() {
                if word == "src" {
                    return words.next().and_then(|a| a.parse().ok());
                }
            }
            None
        })
        .unwrap_or(Ipv4Addr::LOCALHOST)
}

#[cfg(test)]
mod tests {

    #[test]
    fn system_directories_are_appended_once() {
        let path = with_system_path(Some("/root/.cargo/bin:/usr/bin:/sbin".into()));
        assert_eq!(
            path,
            "/root/.cargo/bin:/usr/bin:/sbin:/usr/local/sbin:/usr/sbin"
        );
        assert_eq!(with_system_path(None), "/usr/local/sbin:/usr/sbin:/sbin");
    }

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
    fn only_a_blackhole_or_nothing_is_the_agents_to_keep_or_add() {
        assert_eq!(existing_route(""), ExistingRoute::None);
        assert_eq!(
            existing_route("blackhole 10.42.0.0/16 \n"),
            ExistingRoute::Blackhole
        );
        assert_eq!(
            existing_route("10.42.0.0/16 via 192.168.1.1 dev eth0 \n"),
            ExistingRoute::Other("10.42.0.0/16 via 192.168.1.1 dev eth0".into())
        );
        assert!(matches!(
            existing_route("blackhole 10.42.0.0/16\n10.42.0.0/16 dev wg0 metric 5\n"),
            ExistingRoute::Other(_)
        ));
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

    #[test]
    fn cidrs_parse_and_refuse_nonsense() {
        assert_eq!(
            "10.42.0.0/16".parse::<Cidr>().expect("cidr").to_string(),
            "10.42.0.0/16"
        );
        for bad in ["10.42.0.0", "10.42.0.0/33", "x/8"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}
