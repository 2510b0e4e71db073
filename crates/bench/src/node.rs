//! The `node` scenario: `rudder server` and a `rudder agent` on one real node —
//! containerd, runc and the CNI plugins of this machine — beside the floor
//! the agent cannot beat: the same sandboxes and containers started by
//! direct CRI calls to the same containerd, with the same concurrency, in
//! the same run. Needs root (the agent's network and containerd).
//!
//! - `cri_floor_p50_ms`, `cri_floor_p99_ms`: a batch of 30 pods, each a
//!   RunPodSandbox (with its CNI network), CreateContainer and
//!   StartContainer, all 30 at once; per pod, from its first call to its
//!   container started.
//! - `pod_startup_p50_ms`, `pod_startup_p99_ms`: upstream's pod startup
//!   SLI for a batch of 30 pods created at once through the API (scheduled
//!   by the scheduler, started by the agent; images present): per pod, from
//!   its create request to a watch showing all its containers running.
//! - `pods_100_running_s` beside `cri_floor_100_s`: 100 pods, from the
//!   first create until all run; the floor starts 100 at once.
//! - `agent_rss_mb`, `agent_cpu_pct_idle`: the `rudder agent` process (joined
//!   to a `rudder server --disable-agent` with its token, so that its memory
//!   is its own) with those 100 pods, and its CPU over 30 idle seconds; the
//!   server's and containerd's beside.
//!
//! `--quick` runs batches of 10 and 30 pods.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

use rudder_kubelet::cri::{self, Runtime, remote::RemoteRuntime};

use crate::Options;
use crate::api::{cpu_seconds, free_port, memory_mb, rudder_binary};
use crate::controllers::until;
use crate::report::{Metric, Report};
use crate::store::percentile;

const NODE: &str = "bench-node";
const BRIDGE: &str = "rudbench0";
const CLUSTER_CIDR: &str = "10.42.208.0/20";
const IMAGE: &str = "rudder.local/busybox:1";
const NAMESPACE: &str = "bench";

/// `rudder server` (no agent of its own) and a `rudder agent` joined to it
/// with the server's join token, each a process of its own so that each
/// one's memory and CPU are its own; torn down on drop (SIGTERM, then
/// `rudder killall` of everything the agent made).
struct Cluster {
    binary: PathBuf,
    server: Option<Child>,
    agent: Option<Child>,
    /// The agent's data dir.
    node_data: PathBuf,
    kubeconfig: PathBuf,
}

impl Cluster {
    fn start(binary: &Path, dir: &Path) -> anyhow::Result<Cluster> {
        let data = dir.join("server");
        let node_data = dir.join("node");
        let images = node_data.join("agent/images");
        std::fs::create_dir_all(&images)?;
        let packed = Command::new(binary)
            .args(["images", "pack-busybox"])
            .arg(images.join("busybox.tar"))
            .output()
            .context("rudder images pack-busybox")?;
        anyhow::ensure!(
            packed.status.success(),
            "pack busybox (Debian's busybox-static; scripts/setup installs it): {}",
            String::from_utf8_lossy(&packed.stderr)
        );
        let port = free_port()?;
        let server = Command::new(binary)
            .args([
                "server",
                "--disable-agent",
                "--bind-address",
                "127.0.0.1",
                "--port",
            ])
            .arg(port.to_string())
            .arg("--data-dir")
            .arg(&data)
            .args(["--cluster-cidr", CLUSTER_CIDR])
            .env("RUDDER_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("server.log"))?)
            .spawn()
            .context("start rudder server")?;
        let mut cluster = Cluster {
            binary: binary.to_path_buf(),
            server: Some(server),
            agent: None,
            kubeconfig: data.join("kubeconfig.yaml"),
            node_data,
        };
        let token = data.join("token");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !token.exists() {
            anyhow::ensure!(Instant::now() < deadline, "the server wrote no join token");
            std::thread::sleep(Duration::from_millis(100));
        }
        let agent = Command::new(binary)
            .arg("agent")
            .arg("--server")
            .arg(format!("https://127.0.0.1:{port}"))
            .arg("--token-file")
            .arg(&token)
            .arg("--data-dir")
            .arg(&cluster.node_data)
            .args(["--node-name", NODE, "--node-ip", "127.0.0.1"])
            .args(["--cluster-cidr", CLUSTER_CIDR, "--cni-bridge", BRIDGE])
            // A shared machine's disk may be past upstream's 10 %: the
            // DiskPressure taint would keep every pod off the node.
            .args([
                "--eviction-hard",
                "memory.available<1Mi,nodefs.available<1%",
            ])
            .env("RUDDER_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("agent.log"))?)
            .spawn()
            .context("start rudder agent")?;
        cluster.agent = Some(agent);
        Ok(cluster)
    }

    fn server_pid(&self) -> u32 {
        self.server.as_ref().map_or(0, Child::id)
    }

    fn agent_pid(&self) -> u32 {
        self.agent.as_ref().map_or(0, Child::id)
    }

    fn layout(&self) -> rudder_kubelet::containerd::Layout {
        rudder_kubelet::agent::Options::new(NODE, self.node_data.clone()).layout()
    }

    /// The agent's containerd (its pid file under the agent's data dir).
    fn containerd_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.layout().pid_path())
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

/// SIGTERM, then SIGKILL after 30 s.
fn stop(child: Option<Child>) {
    if let Some(mut child) = child {
        rudder_harness::terminate(&mut child);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        stop(self.agent.take());
        stop(self.server.take());
        let _ = Command::new(&self.binary)
            .args(["killall", "--cni-bridge", BRIDGE, "--data-dir"])
            .arg(&self.node_data)
            .env("RUDDER_LOG", "warn")
            .status();
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false)
}

fn pod(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {
            "containers": [{"name": "sleep", "image": IMAGE, "command": ["sleep", "3600"]}],
            "terminationGracePeriodSeconds": 1
        }
    }))?)
}

fn all_running(pod: &Pod) -> bool {
    let wanted = pod.spec.as_ref().map_or(0, |s| s.containers.len());
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    statuses.is_some_and(|cs| {
        cs.len() == wanted
            && cs
                .iter()
                .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
    })
}

/// Creates `count` pods named `<prefix>-<i>` at once; per pod, the time
/// from its create request to a watch showing all its containers running.
async fn start_pods(
    client: &kube::Client,
    prefix: &str,
    count: usize,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let (running_tx, mut running_rx) = tokio::sync::mpsc::unbounded_channel();
    let watch = tokio::spawn({
        let api = api.clone();
        async move {
            let stream = watcher::watcher(api, watcher::Config::default());
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(Event::Apply(p) | Event::InitApply(p)) = event
                    && all_running(&p)
                    && let Some(name) = p.metadata.name
                {
                    let _ = running_tx.send((name, Instant::now()));
                }
            }
        }
    });
    // The watch is established before the first create.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let began = Instant::now();
    let creates = futures::future::join_all((0..count).map(|i| {
        let api = api.clone();
        let name = format!("{prefix}-{i}");
        async move {
            let sent = Instant::now();
            api.create(&PostParams::default(), &pod(&name)?).await?;
            anyhow::Ok((name, sent))
        }
    }))
    .await;
    let mut sent: HashMap<String, Instant> = HashMap::new();
    for result in creates {
        let (name, at) = result.context("create a pod")?;
        sent.insert(name, at);
    }
    let mut latencies = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    while latencies.len() < count {
        let (name, at) = tokio::time::timeout_at(deadline, running_rx.recv())
            .await
            .with_context(|| format!("{} of {count} pods running", latencies.len()))?
            .context("the pod watch ended")?;
        if let Some(created) = sent.get(&name) {
            latencies
                .entry(name)
                .or_insert_with(|| at.saturating_duration_since(*created));
        }
    }
    let all = began.elapsed();
    watch.abort();
    let mut latencies: Vec<Duration> = latencies.into_values().collect();
    latencies.sort();
    Ok((latencies, all))
}

/// Deletes every pod of the bench's namespace at once (grace 0) and waits
/// until the runtime runs none of them.
async fn delete_pods(client: &kube::Client, runtime: &RemoteRuntime) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    api.delete_collection(
        &DeleteParams::default().grace_period(0),
        &Default::default(),
    )
    .await?;
    until(
        "the pods' sandboxes to go",
        Duration::from_secs(300),
        || async {
            let sandboxes = runtime.list_pod_sandboxes(None).await?;
            Ok(!sandboxes.iter().any(|s| {
                s.labels.get(cri::POD_NAMESPACE_LABEL).map(String::as_str) == Some(NAMESPACE)
            }))
        },
    )
    .await
}

/// A pod of the floor: the agent's own sandbox and container configs for
/// it, less the pod uid label (the agent would remove a labelled sandbox
/// whose pod the API does not have).
fn floor_configs(
    i: usize,
    log_root: &Path,
) -> anyhow::Result<(cri::PodSandboxConfig, cri::ContainerConfig)> {
    let mut pod = pod(&format!("floor-{i}"))?;
    pod.metadata.namespace = Some("floor".into());
    pod.metadata.uid = Some(format!("00000000-0000-4000-8000-{i:012}"));
    let container = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first().cloned())
        .context("a container")?;
    let mut sandbox = rudder_kubelet::pods::config::sandbox_config(&pod, 0, log_root);
    let mut config =
        rudder_kubelet::pods::config::container_config(&pod, &container, 0, false, vec![], vec![]);
    sandbox.labels.remove(cri::POD_UID_LABEL);
    config.labels.remove(cri::POD_UID_LABEL);
    Ok((sandbox, config))
}

/// `count` pods started at once by direct CRI calls; per pod, the time
/// from its RunPodSandbox to its StartContainer done, and the whole batch.
async fn cri_floor(
    runtime: &RemoteRuntime,
    log_root: &Path,
    count: usize,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let configs = (0..count)
        .map(|i| floor_configs(i, log_root))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for (sandbox, _) in &configs {
        std::fs::create_dir_all(&sandbox.log_directory)?;
    }
    let began = Instant::now();
    let results =
        futures::future::join_all(configs.into_iter().map(|(sandbox, container)| async move {
            let at = Instant::now();
            let id = runtime.run_pod_sandbox(sandbox.clone()).await?;
            let container = runtime.create_container(&id, container, sandbox).await?;
            runtime.start_container(&container).await?;
            anyhow::Ok((at.elapsed(), id))
        }))
        .await;
    let all = began.elapsed();
    let mut latencies = Vec::new();
    let mut ids = Vec::new();
    let mut failure = None;
    for result in results {
        match result {
            Ok((latency, id)) => {
                latencies.push(latency);
                ids.push(id);
            }
            Err(error) => failure = Some(error),
        }
    }
    // Always clean up what did start.
    let runtime = &runtime;
    futures::stream::iter(ids)
        .for_each_concurrent(16, |id| async move {
            let _ = runtime.stop_pod_sandbox(&id).await;
            let _ = runtime.remove_pod_sandbox(&id).await;
        })
        .await;
    if let Some(error) = failure {
        return Err(error.context("the CRI floor"));
    }
    latencies.sort();
    Ok((latencies, all))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn node_ready(client: &kube::Client) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    until("the node to be Ready", Duration::from_secs(180), || async {
        let Some(node) = nodes.get_opt(NODE).await? else {
            return Ok(false);
        };
        Ok(node
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"))
    })
    .await
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    anyhow::ensure!(
        is_root(),
        "the node scenario runs a real node (containerd, the pod network): run it as root"
    );
    let binary = rudder_binary()?;
    std::fs::create_dir_all(&options.work_dir)?;
    let dir = tempfile::Builder::new()
        .prefix("rudder-bench-node")
        .tempdir_in(&options.work_dir)?;
    let (batch, many) = if options.quick { (10, 30) } else { (30, 100) };

    let cluster = Cluster::start(&binary, dir.path())?;
    let client =
        rudder_apiserver::testing::connect(&cluster.kubeconfig, Duration::from_secs(60)).await?;
    node_ready(&client).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?,
        )
        .await?;
    // Pods mount the namespace's root CA ConfigMap (kube-api-access).
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    until("kube-root-ca.crt", Duration::from_secs(60), || async {
        Ok(config_maps.get_opt("kube-root-ca.crt").await?.is_some())
    })
    .await?;
    let runtime = Arc::new(RemoteRuntime::connect(
        &cluster.layout().socket().to_string_lossy(),
    )?);
    let log_root = cluster.node_data.join("bench-floor-logs");

    // A first pod: the images are unpacked and the network is up.
    start_pods(&client, "warm", 1).await?;
    delete_pods(&client, &runtime).await?;
    cri_floor(&runtime, &log_root, 1).await?;

    let (floor, _) = cri_floor(&runtime, &log_root, batch).await?;
    let floor_p50 = percentile(&floor, 0.5);
    let floor_p99 = percentile(&floor, 0.99);
    eprintln!(
        "CRI floor, {batch} at once: p50 {:.0} ms, p99 {:.0} ms",
        ms(floor_p50),
        ms(floor_p99)
    );
    let (_, floor_many) = cri_floor(&runtime, &log_root, many).await?;
    eprintln!(
        "CRI floor, {many} at once: {:.2} s",
        floor_many.as_secs_f64()
    );

    let (startup, _) = start_pods(&client, "batch", batch).await?;
    let (p50, p99) = (percentile(&startup, 0.5), percentile(&startup, 0.99));
    eprintln!(
        "pod startup, {batch} at once: p50 {:.0} ms, p99 {:.0} ms",
        ms(p50),
        ms(p99)
    );
    delete_pods(&client, &runtime).await?;

    let (_, all) = start_pods(&client, "pod", many).await?;
    eprintln!("{many} pods running: {:.2} s", all.as_secs_f64());
    // Settle, then memory and idle CPU with the pods running.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let agent_rss = memory_mb(cluster.agent_pid()).0;
    let server_rss = memory_mb(cluster.server_pid()).0;
    let containerd_rss = cluster.containerd_pid().map_or(0.0, |pid| memory_mb(pid).0);
    let idle = Duration::from_secs(30);
    let before = (
        cpu_seconds(cluster.agent_pid()),
        cpu_seconds(cluster.server_pid()),
    );
    tokio::time::sleep(idle).await;
    let pct = |now: f64, then: f64| (now - then) / idle.as_secs_f64() * 100.0;
    let agent_cpu = pct(cpu_seconds(cluster.agent_pid()), before.0);
    let server_cpu = pct(cpu_seconds(cluster.server_pid()), before.1);
    eprintln!(
        "with {many} pods: agent {agent_rss:.0} MiB, {agent_cpu:.1} % idle; server {server_rss:.0} MiB, {server_cpu:.1} %; containerd {containerd_rss:.0} MiB"
    );
    delete_pods(&client, &runtime).await?;
    drop(cluster);

    Ok(Report {
        scenario: "node".into(),
        quick: options.quick,
        partial: None,
        conditions: vec![
        "`rudder server` (release build) with its agent on this machine: containerd (Debian's), runc and the CNI bridge plugin, busybox `sleep` pods, images present".into(),
        format!("the floor: the agent's own sandbox and container configs started by direct CRI calls to the same containerd, {batch} (then {many}) at once"),
        format!("pod startup: {batch} pods created at once through the API, from each create request until a watch shows its containers running (upstream's pod startup SLI)"),
        "`rudder server --disable-agent` and `rudder agent` joined to it with the server's join token, each a process of its own: the agent's memory and idle CPU (30 s) are its own, beside the control plane's".into(),
        ],
        metrics: vec![
        Metric::new("cri_floor_p50_ms", "ms", ms(floor_p50)),
        Metric::new("cri_floor_p99_ms", "ms", ms(floor_p99)),
        Metric::new("pod_startup_p50_ms", "ms", ms(p50)).peer("CRI floor", ms(floor_p50)),
        Metric::new("pod_startup_p99_ms", "ms", ms(p99))
            .peer("CRI floor", ms(floor_p99))
            .target("≤ 1.3× the floor, ≤ 5,000 ms"),
        Metric::new(&format!("pods_{many}_running_s"), "s", all.as_secs_f64())
            .peer("CRI floor", floor_many.as_secs_f64()),
        Metric::new("agent_rss_mb", "MiB", agent_rss)
            .target("< 40 MiB (upstream's kubelet: 50 MiB)"),
        Metric::new("agent_cpu_pct_idle", "%", agent_cpu),
        Metric::new("server_rss_mb", "MiB", server_rss),
        Metric::new("server_cpu_pct_idle", "%", server_cpu),
        Metric::new("containerd_rss_mb", "MiB", containerd_rss),
        ],
    })
}
