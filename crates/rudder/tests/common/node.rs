//! A one-node cluster for the end-to-end tests that run real containers:
//! `rudder server` with its in-process agent on this machine's containerd,
//! a pod network of the test's own, an egress guard so that no pod can
//! send a packet off the machine, and everything torn down on drop (by
//! `rudder killall`). Needs root.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::Kubectl;

fn rudder() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rudder"))
}

/// The server and everything its agent made; torn down on drop.
pub struct Cluster {
    server: Option<Child>,
    pub data: PathBuf,
    pub port: u16,
    /// The agent's bridge, and the cluster CIDR its pods take addresses from.
    pub bridge: &'static str,
    pub cluster_cidr: &'static str,
    /// The agent's HTTPS port (`kubectl logs` goes through it).
    pub kubelet_port: u16,
    /// The node's address (`--node-ip`).
    pub node_ip: &'static str,
    _dir: tempfile::TempDir,
    /// No pod of the test's sends a packet off the machine.
    _guard: rudder_kubelet::network::EgressGuard,
}

impl Cluster {
    /// Starts `rudder server` with its agent (node `e2e-node`) on a pod
    /// network of its own (`bridge`, `cluster_cidr`), the busybox image
    /// packed into the agent's images, and an egress guard named after the
    /// bridge.
    pub fn start(bridge: &'static str, cluster_cidr: &'static str) -> Cluster {
        Cluster::start_with_node_ip(bridge, cluster_cidr, "127.0.0.1")
    }

    /// The same with the node at `node_ip` (an address of this machine).
    pub fn start_with_node_ip(
        bridge: &'static str,
        cluster_cidr: &'static str,
        node_ip: &'static str,
    ) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        super::pack_busybox(&data.join("agent/images"));
        let port = rudder_apiserver::testing::free_port().expect("a free port");
        let kubelet_port = rudder_apiserver::testing::free_port().expect("a free port");
        let mut cluster = Cluster {
            server: None,
            data,
            port,
            bridge,
            cluster_cidr,
            kubelet_port,
            node_ip,
            _dir: dir,
            _guard: super::egress_guard(&format!("{bridge}-guard"), cluster_cidr),
        };
        cluster.spawn();
        cluster
    }

    /// Starts `rudder server` (again) on the cluster's data dir and port.
    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data.parent().expect("dir").join("server.log"))
            .expect("log");
        let server = rudder()
            .args(["server", "--bind-address", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .arg("--data-dir")
            .arg(&self.data)
            .args(["--node-name", "e2e-node", "--node-ip", self.node_ip])
            .args([
                "--cluster-cidr",
                self.cluster_cidr,
                "--cni-bridge",
                self.bridge,
            ])
            .arg("--kubelet-port")
            .arg(self.kubelet_port.to_string())
            // A shared build machine's disk may well be past upstream's 10%:
            // DiskPressure would taint the node and nothing would schedule.
            .args([
                "--eviction-hard",
                "memory.available<1Mi,nodefs.available<1%",
            ])
            .env("RUDDER_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start rudder server");
        self.server = Some(server);
    }

    /// Kills the server (and so its agent) with SIGKILL.
    pub fn kill_hard(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
    }

    /// kubectl `binary` as the cluster's admin, in `namespace`.
    pub fn kubectl<'a>(&self, binary: &'a Path, namespace: &str) -> Kubectl<'a> {
        Kubectl {
            binary,
            kubeconfig: self.data.join("kubeconfig.yaml"),
            cache: self.data.parent().expect("dir").join("kubectl-cache"),
            namespace: namespace.into(),
        }
    }

    pub fn wait_node_ready(&self, k: &Kubectl<'_>) {
        wait_for(
            "the node to be Ready",
            Duration::from_secs(60),
            self,
            || {
                let (ok, out) = k.run(&["get", "nodes", "--no-headers"], None);
                (ok && out.contains("e2e-node") && out.contains(" Ready ")).then_some(())
            },
        );
    }

    /// The end of the server's log and the node's network, for failures.
    pub fn log(&self) -> String {
        let path = self.data.parent().expect("dir").join("server.log");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let mut out = lines[lines.len().saturating_sub(40)..].join("\n");
        for args in [
            &["ip", "route"][..],
            &["ip", "-br", "addr"],
            &["ip", "neigh", "show", "dev", self.bridge],
            &["nft", "list", "table", "ip", self.bridge],
        ] {
            if let Ok(o) = Command::new(args[0]).args(&args[1..]).output() {
                out.push_str(&format!(
                    "\n$ {}\n{}",
                    args.join(" "),
                    String::from_utf8_lossy(&o.stdout)
                ));
            }
        }
        out
    }

    pub fn mounts_left(&self) -> Vec<String> {
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter(|m| Path::new(m).starts_with(&self.data))
            .map(str::to_string)
            .collect()
    }
}

impl Cluster {
    /// Stops the server (SIGTERM) and removes every pod, the network and
    /// the mounts the agent made; idempotent.
    pub fn teardown(&mut self) -> Option<std::process::ExitStatus> {
        let mut stopped = None;
        if let Some(mut server) = self.server.take() {
            stopped = rudder_harness::terminate(&mut server);
        }
        let _ = rudder()
            .args(["killall", "--cni-bridge", self.bridge, "--data-dir"])
            .arg(&self.data)
            .env("RUDDER_LOG", "warn")
            .status();
        stopped
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// Polls `check` every 200 ms until it gives a value, failing with the
/// server's log after `within`.
pub fn wait_for<T>(
    what: &str,
    within: Duration,
    cluster: &Cluster,
    check: impl FnMut() -> Option<T>,
) -> T {
    super::wait_until(what, within, || cluster.log(), check)
}

/// An address of the node's own on `lo` while it lives (a node at
/// 127.0.0.1 can carry no load balancer, nor NodePorts, and the API
/// server proxies to no loopback address).
pub struct NodeAddress(&'static str);

impl NodeAddress {
    pub fn add(ip: &'static str) -> NodeAddress {
        let _ = Command::new("ip")
            .args(["addr", "del", &format!("{ip}/32"), "dev", "lo"])
            .stderr(Stdio::null())
            .status();
        let status = Command::new("ip")
            .args(["addr", "add", &format!("{ip}/32"), "dev", "lo"])
            .status()
            .expect("ip runs");
        assert!(status.success(), "add {ip} to lo");
        NodeAddress(ip)
    }
}

impl Drop for NodeAddress {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["addr", "del", &format!("{}/32", self.0), "dev", "lo"])
            .status();
    }
}
