//! The `node` scenario: `rudder server` and a `rudder agent` on one real node —
//! containerd, runc and the CNI plugins of this machine — beside the floor
//! the agent cannot beat: the same pods started by the same work done
//! directly — their volumes set up by the agent's own code, then direct
//! CRI calls to the same containerd — with the same concurrency, in the
//! same run. Needs root (the agent's network, tmpfs volumes, containerd).
//!
//! - `cri_floor_p50_ms`, `cri_floor_p99_ms`: batches of 30 pods started
//!   all at once, repeated until there are at least 100 pods (so that a
//!   99th percentile rests on 100 samples; `cri_floor_samples` says how
//!   many): per pod, from its first step to its container started. Each
//!   pod is a real API object (admitted, so its volumes are the ones the
//!   workload's pods get: the projected `kube-api-access-…` volume, with a
//!   ServiceAccount token bound to the pod) that no scheduler binds; the
//!   floor sets its volumes up as the agent does (the namespace's root CA
//!   read, a TokenRequest, a tmpfs written), runs its sandbox, reads its
//!   IP, checks its image, and creates and starts its container with the
//!   volume mounted.
//! - `pod_startup_p50_ms`, `pod_startup_p99_ms`: upstream's pod startup
//!   SLI for batches of 30 pods created at once through the API (scheduled
//!   by the scheduler, started by the agent; images present), repeated as
//!   the floor's (`pod_startup_samples`): per pod, from its create request
//!   to a watch showing all its containers running.
//! - `pods_100_running_s` beside `cri_floor_100_s`: 100 pods, from the
//!   first create until all run; the floor starts 100 at once.
//! - `agent_rss_mb`, `agent_cpu_pct_idle`: the `rudder agent` process (joined
//!   to a `rudder server --disable-agent` with its token, so that its memory
//!   is its own) with those 100 pods, and its CPU over 30 idle seconds; the
//!   server's and containerd's beside.
//!
//! `--quick` runs batches of 10 (still to 100 samples) and 30 pods.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

use rudder_kubelet::cri::{self, Runtime, remote::RemoteRuntime};
use rudder_kubelet::pods::{env, tokens::Tokens, volumes};

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
/// The namespace of the floor's pods, which no scheduler binds.
const FLOOR_NAMESPACE: &str = "bench-floor";
/// A scheduler name nobody serves: the floor's pods stay unbound, so no
/// agent runs them.
const NO_SCHEDULER: &str = "bench-floor-none";
/// The fewest samples a 99th percentile is taken from.
const P99_SAMPLES: usize = 100;

/// `rudder server` (no agent of its own) and a `rudder agent` joined to it
/// with the server's join token, each a process of its own so that each
/// one's memory and CPU are its own; torn down on drop (SIGTERM, then
/// `rudder killall` of everything the agent made).
pub(crate) struct Cluster {
    binary: PathBuf,
    server: Option<Child>,
    agent: Option<Child>,
    /// The agent's data dir.
    node_data: PathBuf,
    pub(crate) kubeconfig: PathBuf,
}

impl Cluster {
    pub(crate) fn start(binary: &Path, dir: &Path) -> anyhow::Result<Cluster> {
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

    pub(crate) fn layout(&self) -> rudder_kubelet::containerd::Layout {
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

pub(crate) fn is_root() -> bool {
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

/// The floor's API objects: `count` pods like the workload's, admitted
/// as the workload's are (their API credentials volume and all), which
/// no scheduler binds; read back as admission made them.
async fn floor_pods(client: &kube::Client, prefix: &str, count: usize) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), FLOOR_NAMESPACE);
    let mut pods = Vec::with_capacity(count);
    for i in 0..count {
        let mut pod = pod(&format!("{prefix}-{i}"))?;
        if let Some(spec) = pod.spec.as_mut() {
            spec.scheduler_name = Some(NO_SCHEDULER.into());
        }
        pods.push(api.create(&PostParams::default(), &pod).await?);
    }
    Ok(pods)
}

/// Where the floor keeps its pods' volumes and logs.
struct FloorDirs {
    pods: PathBuf,
    logs: PathBuf,
}

/// One pod of the floor, as the agent's pod worker starts it: its
/// volumes set up (`volumes::setup`: the ConfigMaps it reads, a
/// TokenRequest for each projected token, tmpfs), its sandbox run (the
/// agent's own config, less the pod uid label: the agent would remove a
/// labelled sandbox of a pod not bound to it), its IP read, its image
/// checked, its container created with the agent's environment and mounts,
/// and started. Returns the sandbox's id (if it ran) and the outcome.
async fn floor_pod(
    client: &kube::Client,
    runtime: &RemoteRuntime,
    tokens: &Tokens,
    dirs: &FloorDirs,
    pod: &Pod,
) -> (Option<String>, anyhow::Result<()>) {
    let mut sandbox_id = None;
    let outcome = async {
        let container = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.first().cloned())
            .context("a container")?;
        let mut context = env::Context {
            host_ip: "127.0.0.1".into(),
            ..env::Context::default()
        };
        let root = volumes::Root {
            dir: &dirs.pods,
            tmpfs: true,
            tokens,
            host: &rudder_host::System,
        };
        let paths = volumes::setup(client, root, pod, &context)
            .await
            .map_err(|e| anyhow::anyhow!("the floor's volumes: {e}"))?;
        // The agent's DNS settings: the runtime writes the same resolv.conf.
        let dns = rudder_kubelet::pods::dns::Settings {
            cluster_dns: vec![rudder_api::network::CLUSTER_DNS],
            cluster_domain: rudder_api::network::CLUSTER_DOMAIN.into(),
            host: Default::default(),
        };
        let mut sandbox = rudder_kubelet::pods::config::sandbox_config(pod, 0, &dirs.logs, &dns);
        sandbox.labels.remove(cri::POD_UID_LABEL);
        std::fs::create_dir_all(&sandbox.log_directory)?;
        let id = runtime.run_pod_sandbox(sandbox.clone()).await?;
        sandbox_id = Some(id.clone());
        let status = runtime.pod_sandbox_status(&id).await?;
        context.pod_ip = status.network.map(|n| n.ip).unwrap_or_default();
        let image = container.image.clone().unwrap_or_default();
        runtime
            .image_status(&image)
            .await?
            .with_context(|| format!("{image} is not present"))?;
        let (config_maps, secrets) = env::referenced(&container);
        let sources = env::Sources::fetch(client, pod, config_maps, secrets).await?;
        let envs = env::build(pod, &container, &sources, &context).map_err(anyhow::Error::msg)?;
        let mounts = volumes::mounts(&container, &paths).map_err(anyhow::Error::msg)?;
        anyhow::ensure!(!mounts.is_empty(), "the floor's pod mounts no volume");
        let mut config =
            rudder_kubelet::pods::config::container_config(pod, &container, 0, false, envs, mounts);
        config.labels.remove(cri::POD_UID_LABEL);
        let created = runtime.create_container(&id, config, sandbox).await?;
        runtime.start_container(&created).await?;
        anyhow::Ok(())
    }
    .await;
    (sandbox_id, outcome)
}

/// `count` pods of the floor started at once; per pod, the time from its
/// first step to its StartContainer done, and the whole batch. Their API
/// objects are made before and deleted after, untimed.
async fn cri_floor(
    client: &kube::Client,
    runtime: &RemoteRuntime,
    dirs: &FloorDirs,
    prefix: &str,
    count: usize,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let pods = floor_pods(client, prefix, count).await?;
    let tokens = Tokens::default();
    let began = Instant::now();
    let results = futures::future::join_all(pods.iter().map(|pod| {
        let tokens = &tokens;
        async move {
            let at = Instant::now();
            let (id, outcome) = floor_pod(client, runtime, tokens, dirs, pod).await;
            (at.elapsed(), id, outcome)
        }
    }))
    .await;
    let all = began.elapsed();
    let mut latencies = Vec::new();
    let mut failure = None;
    for (latency, _, outcome) in &results {
        match outcome {
            Ok(()) => latencies.push(*latency),
            Err(error) => failure = Some(anyhow::anyhow!("{error:#}")),
        }
    }
    // Always clean up what did start.
    let ids = results.into_iter().filter_map(|(_, id, _)| id);
    futures::stream::iter(ids)
        .for_each_concurrent(16, |id| async move {
            let _ = runtime.stop_pod_sandbox(&id).await;
            let _ = runtime.remove_pod_sandbox(&id).await;
        })
        .await;
    for pod in &pods {
        volumes::teardown(
            &rudder_host::System,
            &dirs.pods,
            &pod.metadata.uid.clone().unwrap_or_default(),
        )
        .await;
    }
    Api::<Pod>::namespaced(client.clone(), FLOOR_NAMESPACE)
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await?;
    if let Some(error) = failure {
        return Err(error.context("the CRI floor"));
    }
    latencies.sort();
    Ok((latencies, all))
}

/// How many batches of `batch` give a 99th percentile its samples.
fn rounds_for_p99(batch: usize) -> usize {
    P99_SAMPLES.div_ceil(batch)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub(crate) async fn node_ready(client: &kube::Client) -> anyhow::Result<()> {
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

    let rounds = rounds_for_p99(batch);

    let cluster = Cluster::start(&binary, dir.path())?;
    let client =
        rudder_apiserver::testing::connect(&cluster.kubeconfig, Duration::from_secs(60)).await?;
    node_ready(&client).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for namespace in [NAMESPACE, FLOOR_NAMESPACE] {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": namespace}}))?,
            )
            .await?;
        // Admission gives pods the API credentials volume once the
        // namespace's ServiceAccount exists; the volume mounts the
        // namespace's root CA ConfigMap.
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        until(
            "the default ServiceAccount and kube-root-ca.crt",
            Duration::from_secs(60),
            || async {
                Ok(accounts.get_opt("default").await?.is_some()
                    && config_maps.get_opt("kube-root-ca.crt").await?.is_some())
            },
        )
        .await?;
    }
    let runtime = Arc::new(RemoteRuntime::connect(
        &cluster.layout().socket().to_string_lossy(),
    )?);
    let dirs = FloorDirs {
        pods: cluster.node_data.join("bench-floor/pods"),
        logs: cluster.node_data.join("bench-floor/logs"),
    };

    // A first pod: the images are unpacked and the network is up.
    start_pods(&client, "warm", 1).await?;
    delete_pods(&client, &runtime).await?;
    cri_floor(&client, &runtime, &dirs, "warm", 1).await?;

    // Batches of the floor and of the agent in turn, so that the machine's
    // swings fall on both alike, until each percentile has its samples.
    let (mut floor, mut startup) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let (latencies, _) =
            cri_floor(&client, &runtime, &dirs, &format!("floor{round}"), batch).await?;
        floor.extend(latencies);
        let (latencies, _) = start_pods(&client, &format!("batch{round}"), batch).await?;
        startup.extend(latencies);
        delete_pods(&client, &runtime).await?;
    }
    floor.sort();
    startup.sort();
    let floor_p50 = percentile(&floor, 0.5);
    let floor_p99 = percentile(&floor, 0.99);
    eprintln!(
        "CRI floor, {rounds} batches of {batch} at once: p50 {:.0} ms, p99 {:.0} ms of {} pods",
        ms(floor_p50),
        ms(floor_p99),
        floor.len()
    );
    let (p50, p99) = (percentile(&startup, 0.5), percentile(&startup, 0.99));
    eprintln!(
        "pod startup, {rounds} batches of {batch} at once: p50 {:.0} ms, p99 {:.0} ms of {} pods",
        ms(p50),
        ms(p99),
        startup.len()
    );
    let (_, floor_many) = cri_floor(&client, &runtime, &dirs, "many", many).await?;
    eprintln!(
        "CRI floor, {many} at once: {:.2} s",
        floor_many.as_secs_f64()
    );

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
        format!("the floor: pods made through the API as the workload's are (admitted: the projected `kube-api-access-…` volume — a ServiceAccount token, the namespace's root CA, the namespace — mounted in the container), with a scheduler name nobody serves so that no agent runs them, started by the bench with the agent's own code and configs: their volumes set up as the agent's pod worker does (the root CA ConfigMap read and a TokenRequest bound to the pod, over HTTPS; a tmpfs written), then direct CRI calls to the same containerd (RunPodSandbox, PodSandboxStatus, ImageStatus, CreateContainer with the volume's mount, StartContainer), {batch} at once (then {many}); per pod, from its first step to its container started"),
        format!("pod startup: {batch} pods created at once through the API, from each create request until a watch shows its containers running (upstream's pod startup SLI)"),
        format!("p50 and p99 of both over {rounds} batches of {batch}, the floor's and the agent's in turn ({} pods each: a 99th percentile of at least {P99_SAMPLES} samples, nearest rank; `…_samples` says how many)", floor.len()),
        "`rudder server --disable-agent` and `rudder agent` joined to it with the server's join token, each a process of its own: the agent's memory and idle CPU (30 s) are its own, beside the control plane's".into(),
        ],
        metrics: vec![
        Metric::new("cri_floor_p50_ms", "ms", ms(floor_p50)),
        Metric::new("cri_floor_p99_ms", "ms", ms(floor_p99)),
        Metric::new("cri_floor_samples", "pods", floor.len() as f64),
        Metric::new("pod_startup_p50_ms", "ms", ms(p50)).peer("CRI floor", ms(floor_p50)),
        Metric::new("pod_startup_p99_ms", "ms", ms(p99))
            .peer("CRI floor", ms(floor_p99))
            .target("≤ 1.3× the floor, ≤ 5,000 ms"),
        Metric::new("pod_startup_samples", "pods", startup.len() as f64),
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
