//! A node joining a cluster, with real parts: `rudder server
//! --disable-agent` runs the control plane alone, and a separate `rudder
//! agent --server https://127.0.0.1:PORT --token $(rudder token)` process
//! checks the server's CA against the token, gets its node certificate
//! through a CertificateSigningRequest the server approves and signs,
//! becomes Ready on its own containerd, runs a pod — whose projected
//! ServiceAccount token, read by the pod and handed out through a
//! hostPath, then authenticates from the host as the pod's account —,
//! started again, reuses its certificate, and outlives a restart of the
//! server. A token naming another CA is refused before anything is sent. Needs root: fails
//! otherwise, unless `RUDDER_SKIP_ROOT_TESTS=1` skips it knowingly.
//!
//! The agent has a bridge, cluster CIDR and data directory of its own;
//! `rudder killall` removes everything it made at the end, even when the
//! test fails.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Kubectl, token_kubeconfig};

const BRIDGE: &str = "rudjoin0";
const CLUSTER_CIDR: &str = "10.42.224.0/20";
const NODE: &str = "join-node";
const IMAGE: &str = "rudder.local/busybox:1";

fn rudder() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rudder"))
}

/// A server without an agent, and the agent that joins it.
struct Cluster {
    server: Option<Child>,
    agent: Option<Child>,
    dir: tempfile::TempDir,
    port: u16,
    /// No pod of the test's sends a packet off the machine.
    _guard: rudder_kubelet::network::EgressGuard,
}

impl Cluster {
    fn server_dir(&self) -> PathBuf {
        self.dir.path().join("server")
    }

    fn agent_dir(&self) -> PathBuf {
        self.dir.path().join("agent")
    }

    fn log(&self, name: &str) -> std::fs::File {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(name))
            .expect("log")
    }

    fn start() -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = rudder_apiserver::testing::free_port().expect("a free port");
        let mut cluster = Cluster {
            server: None,
            agent: None,
            dir,
            port,
            _guard: common::egress_guard("rudder-guard-join-e2e", CLUSTER_CIDR),
        };
        cluster.start_server();
        common::pack_busybox(&cluster.agent_dir().join("agent/images"));
        cluster
    }

    /// Starts `rudder server --disable-agent` (again) on its data dir and port.
    fn start_server(&mut self) {
        let server = rudder()
            .args(["server", "--disable-agent", "--bind-address", "127.0.0.1"])
            .args([
                "--port",
                &self.port.to_string(),
                "--cluster-cidr",
                CLUSTER_CIDR,
            ])
            .arg("--data-dir")
            .arg(self.server_dir())
            .env("RUDDER_LOG", "info")
            .stdout(Stdio::null())
            .stderr(self.log("server.log"))
            .spawn()
            .expect("start rudder server");
        self.server = Some(server);
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    fn agent_command(&self, token: &str) -> Command {
        let mut command = rudder();
        command
            .args(["agent", "--server", &self.url(), "--token", token])
            .arg("--data-dir")
            .arg(self.agent_dir())
            .args(["--node-name", NODE, "--node-ip", "127.0.0.1"])
            .args(["--cluster-cidr", CLUSTER_CIDR, "--cni-bridge", BRIDGE])
            .args([
                "--eviction-hard",
                "memory.available<1Mi,nodefs.available<1%",
            ])
            .env("RUDDER_LOG", "info")
            .stdout(Stdio::null());
        command
    }

    fn start_agent(&mut self, token: &str) {
        let agent = self
            .agent_command(token)
            .stderr(self.log("agent.log"))
            .spawn()
            .expect("start rudder agent");
        self.agent = Some(agent);
    }

    /// Stops the agent with SIGTERM (SIGKILL after 30 s).
    fn stop_agent(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            stop(&mut agent);
        }
    }

    fn logs(&self) -> String {
        let tail = |name: &str| {
            let text = std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(30)..].join("\n")
        };
        format!(
            "server:\n{}\nagent:\n{}",
            tail("server.log"),
            tail("agent.log")
        )
    }
}

fn stop(child: &mut Child) {
    rudder_harness::terminate(child);
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_agent();
        let _ = rudder()
            .args(["killall", "--cni-bridge", BRIDGE, "--data-dir"])
            .arg(self.agent_dir())
            .env("RUDDER_LOG", "warn")
            .status();
        if let Some(mut server) = self.server.take() {
            stop(&mut server);
        }
    }
}

fn wait_for<T>(
    what: &str,
    within: Duration,
    cluster: &Cluster,
    check: impl FnMut() -> Option<T>,
) -> T {
    common::wait_until(what, within, || cluster.logs(), check)
}

#[test]
fn an_agent_joins_with_the_servers_token_and_runs_a_pod() {
    if !common::require_root("join_e2e") {
        return;
    }
    let mut cluster = Cluster::start();
    let kubectl = common::versions().pop().expect("a kubectl").1;
    let k = Kubectl {
        binary: &kubectl,
        kubeconfig: cluster.server_dir().join("kubeconfig.yaml"),
        cache: cluster.dir.path().join("kubectl-cache"),
        namespace: "default".into(),
    };
    let token = wait_for(
        "the server's join token",
        Duration::from_secs(60),
        &cluster,
        || {
            let out = rudder()
                .args(["token", "--data-dir"])
                .arg(cluster.server_dir())
                .output()
                .ok()?;
            let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (out.status.success() && text.starts_with("K10")).then_some(text)
        },
    );
    let ca = std::fs::read(cluster.server_dir().join("tls/ca.crt")).expect("the CA");
    assert!(
        token.starts_with(&format!("K10{}::", rudder_kubelet::bootstrap::ca_hash(&ca))),
        "{token}"
    );
    wait_for(
        "the server to answer",
        Duration::from_secs(30),
        &cluster,
        || {
            let (ok, out) = k.run(&["get", "--raw", "/readyz"], None);
            (ok && out.trim() == "ok").then_some(())
        },
    );

    // A token that names another CA: refused, nothing asked.
    let forged = format!("K10{}::{}", "0".repeat(64), &token[3 + 64 + 2..]);
    let refused = cluster
        .agent_command(&forged)
        .stderr(Stdio::piped())
        .output()
        .expect("run rudder agent");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("refusing to trust it"),
        "{said}"
    );

    let began = Instant::now();
    cluster.start_agent(&token);
    wait_for(
        "the joined node to be Ready",
        Duration::from_secs(120),
        &cluster,
        || {
            let (ok, out) = k.run(&["get", "nodes", "--no-headers"], None);
            (ok && out.contains(NODE) && out.contains(" Ready ")).then_some(())
        },
    );
    eprintln!("join → Ready in {:?}", began.elapsed());
    let (ok, csrs) = k.run(
        &[
            "get",
            "csr",
            "-o",
            "jsonpath={range .items[*]}{.spec.username} {.spec.signerName} {.status.conditions[0].type}{\"\\n\"}{end}",
        ],
        None,
    );
    assert!(ok, "{csrs}");
    let id = &token[3 + 64 + 2..3 + 64 + 2 + 6];
    let mut lines: Vec<&str> = csrs.trim().lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            format!("system:bootstrap:{id} kubernetes.io/kube-apiserver-client-kubelet Approved"),
            format!("system:node:{NODE} kubernetes.io/kubelet-serving Approved"),
        ],
        "the node's client certificate asked by the bootstrap user, its serving one by the node"
    );
    let kubeconfig = cluster.agent_dir().join("agent/kubelet.kubeconfig");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&kubeconfig)
        .expect("the agent's kubeconfig")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let (_, nodes) = k.run(&["get", "nodes", "-o", "wide"], None);
    assert!(!nodes.contains("control-plane"), "{nodes}");

    // A pod on the joined node reads its ServiceAccount token and hands
    // it out; from the host, the token is the pod's account.
    let out_dir = cluster.dir.path().join("out");
    std::fs::create_dir_all(&out_dir).expect("out dir");
    let pod = format!(
        r#"{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "reader"}},
          "spec": {{"terminationGracePeriodSeconds": 1, "containers": [{{"name": "c", "image": "{IMAGE}",
            "command": ["sh", "-c", "echo hello from the joined node; cat /var/run/secrets/kubernetes.io/serviceaccount/token > /out/token; cat /var/run/secrets/kubernetes.io/serviceaccount/namespace > /out/namespace; exec sleep 3600"],
            "volumeMounts": [{{"name": "out", "mountPath": "/out"}}]}}],
            "volumes": [{{"name": "out", "hostPath": {{"path": "{}"}}}}]}}}}"#,
        out_dir.display()
    );
    let (ok, out) = k.run(&["apply", "-f", "-"], Some(&pod));
    assert!(ok, "{out}");
    wait_for("reader Running", Duration::from_secs(90), &cluster, || {
        let (ok, out) = k.run(
            &[
                "get",
                "pod",
                "reader",
                "-o",
                "jsonpath={.status.phase} {.spec.nodeName}",
            ],
            None,
        );
        (ok && out.trim() == format!("Running {NODE}")).then_some(())
    });
    let pod_token = wait_for(
        "the pod's token on the host",
        Duration::from_secs(30),
        &cluster,
        || {
            std::fs::read_to_string(out_dir.join("token"))
                .ok()
                .filter(|t| t.split('.').count() == 3)
        },
    );
    assert_eq!(
        std::fs::read_to_string(out_dir.join("namespace")).expect("namespace"),
        "default"
    );
    // Its log, through the API server from the joined agent's HTTPS server
    // (its serving certificate from the cluster CA, through a CSR).
    let (ok, out) = k.run(&["logs", "reader"], None);
    assert!(ok && out.contains("hello from the joined node"), "{out}");
    let robot = Kubectl {
        binary: &kubectl,
        kubeconfig: token_kubeconfig(
            &k.kubeconfig,
            pod_token.trim(),
            &cluster.dir.path().join("pod-token.yaml"),
        ),
        cache: cluster.dir.path().join("kubectl-cache-pod"),
        namespace: "default".into(),
    };
    let (ok, out) = robot.run(&["get", "pods"], None);
    assert!(
        !ok && out.contains(
            "pods is forbidden: User \"system:serviceaccount:default:default\" cannot list resource \"pods\""
        ),
        "the pod's token answers as its account: {out}"
    );
    let (ok, out) = robot.run(&["get", "--raw", "/api"], None);
    assert!(ok && out.contains("\"versions\""), "{out}");

    // Started again, the agent uses the certificate it has.
    cluster.stop_agent();
    cluster.start_agent(&token);
    wait_for(
        "the agent to reuse its certificate",
        Duration::from_secs(30),
        &cluster,
        || {
            let log = std::fs::read_to_string(cluster.dir.path().join("agent.log")).ok()?;
            log.contains("using the node certificate issued before")
                .then_some(())
        },
    );
    wait_for(
        "reader still Running",
        Duration::from_secs(60),
        &cluster,
        || {
            let (ok, out) = k.run(
                &["get", "pod", "reader", "-o", "jsonpath={.status.phase}"],
                None,
            );
            (ok && out.trim() == "Running").then_some(())
        },
    );
    let (_, csrs) = k.run(&["get", "csr", "--no-headers"], None);
    assert_eq!(csrs.trim().lines().count(), 2, "no new CSR: {csrs}");

    // Twenty pods survive the agent's SIGKILL: the agent started again
    // adopts every container, restarting and duplicating none.
    let (ok, out) = k.run(
        &[
            "create",
            "deployment",
            "survivor",
            &format!("--image={IMAGE}"),
            "--replicas=20",
            "--",
            "sleep",
            "3600",
        ],
        None,
    );
    assert!(ok, "{out}");
    let survivors = |k: &Kubectl<'_>| {
        let (ok, out) = k.run(
            &[
                "get",
                "pods",
                "-l",
                "app=survivor",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].ready}{\"\\n\"}{end}",
            ],
            None,
        );
        assert!(ok, "{out}");
        let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
        lines.sort();
        lines
    };
    let all_running = |lines: &[String]| {
        lines.len() == 20
            && lines.iter().all(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                fields.len() == 5
                    && fields[1] == "Running"
                    && fields[3] == "0"
                    && fields[4] == "true"
            })
    };
    let running = wait_for(
        "20 survivors Running",
        Duration::from_secs(180),
        &cluster,
        || Some(survivors(&k)).filter(|l| all_running(l)),
    );
    let socket = cluster.agent_dir().join("agent/containerd/containerd.sock");
    let runtime_containers = || {
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&socket)
            .args(["--namespace", "k8s.io", "containers", "list", "--quiet"])
            .output()
            .expect("ctr");
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    // 21 pods (reader and the survivors): a sandbox and a container each.
    assert_eq!(runtime_containers(), 42);
    if let Some(mut agent) = cluster.agent.take() {
        let _ = agent.kill();
        let _ = agent.wait();
    }
    cluster.start_agent(&token);
    std::thread::sleep(Duration::from_secs(10));
    assert_eq!(
        survivors(&k),
        running,
        "the same containers, none restarted, after the agent's SIGKILL"
    );
    assert_eq!(runtime_containers(), 42, "no container duplicated");

    // The control plane stops for a minute and comes back: the agent keeps
    // every pod running and reports to the new server (its Lease renewed),
    // and the pods' statuses are what they were.
    let container = |k: &Kubectl<'_>| {
        let (ok, out) = k.run(
            &[
                "get",
                "pod",
                "reader",
                "-o",
                "jsonpath={.status.containerStatuses[0].containerID}",
            ],
            None,
        );
        (ok && !out.trim().is_empty()).then(|| out.trim().to_string())
    };
    let before = container(&k).expect("reader's container");
    if let Some(mut server) = cluster.server.take() {
        stop(&mut server);
    }
    std::thread::sleep(Duration::from_secs(60));
    assert_eq!(
        runtime_containers(),
        42,
        "every pod ran on without the server"
    );
    cluster.start_server();
    let renewed = |k: &Kubectl<'_>| {
        let (ok, out) = k.run(
            &[
                "get",
                "lease",
                "-n",
                "kube-node-lease",
                NODE,
                "-o",
                "jsonpath={.spec.renewTime}",
            ],
            None,
        );
        ok.then(|| out.trim().to_string())
    };
    let first = wait_for("the server back", Duration::from_secs(60), &cluster, || {
        renewed(&k)
    });
    wait_for(
        "the agent to renew its Lease with the new server",
        Duration::from_secs(40),
        &cluster,
        || renewed(&k).filter(|now| now != &first),
    );
    assert!(
        cluster
            .agent
            .as_mut()
            .is_some_and(|agent| agent.try_wait().ok().flatten().is_none()),
        "the agent kept running while the server was away"
    );
    assert_eq!(
        container(&k).as_deref(),
        Some(before.as_str()),
        "the same container"
    );
    wait_for(
        "the survivors' statuses as before the server stopped",
        Duration::from_secs(60),
        &cluster,
        || (survivors(&k) == running).then_some(()),
    );
    assert_eq!(runtime_containers(), 42, "no pod lost or duplicated");

    // The pod's deletion makes its token worthless.
    let (ok, out) = k.run(&["delete", "pod", "reader", "--wait=true"], None);
    assert!(ok, "{out}");
    let (ok, out) = robot.run(&["get", "--raw", "/api"], None);
    assert!(!ok && out.contains("Unauthorized"), "{out}");
}
