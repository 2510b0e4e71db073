//! The `api` scenario: `rudder server` (the release binary, in a process of
//! its own so that its memory is its own) driven over HTTPS by kube-rs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use rudder_apiserver::testing;

use crate::Options;
use crate::report::{Metric, Report};
use crate::store::percentile;

/// The release `rudder` binary beside this one, built first if needed.
pub(crate) fn rudder_binary() -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "-q", "-p", "rudder"])
        .status()
        .context("build rudder")?;
    anyhow::ensure!(status.success(), "cargo build --release -p rudder failed");
    let exe = std::env::current_exe()?;
    let binary = exe.parent().context("no directory")?.join("rudder");
    anyhow::ensure!(binary.exists(), "{} not found", binary.display());
    Ok(binary)
}

pub(crate) struct Server {
    child: Child,
    pub(crate) kubeconfig: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// `rudder server` as users run it (with its controllers).
    pub(crate) fn start(binary: &Path, dir: &Path, port: u16) -> anyhow::Result<Server> {
        Server::start_with(binary, dir, port, &[])
    }

    pub(crate) fn start_with(
        binary: &Path,
        dir: &Path,
        port: u16,
        extra: &[&str],
    ) -> anyhow::Result<Server> {
        let child =
            testing::spawn_server_with(binary, dir, port, extra).context("start rudder server")?;
        Ok(Server {
            child,
            kubeconfig: dir.join("kubeconfig.yaml"),
        })
    }

    /// Stops the server as an operator would (SIGTERM: it finishes
    /// requests, releases its controllers' Lease) and waits for it.
    pub(crate) fn stop(mut self) -> anyhow::Result<()> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .context("kill")?;
        anyhow::ensure!(status.success(), "kill -TERM failed");
        self.child.wait().context("wait for rudder server")?;
        Ok(())
    }

    /// A client, once /readyz answers; and how long that took from `since`.
    pub(crate) async fn ready(&self, since: Instant) -> anyhow::Result<(kube::Client, Duration)> {
        let client = testing::connect(&self.kubeconfig, Duration::from_secs(30)).await?;
        Ok((client, since.elapsed()))
    }

    /// Resident and peak resident memory, MiB.
    pub(crate) fn memory_mb(&self) -> (f64, f64) {
        memory_mb(self.child.id())
    }
}

/// CPU time process `pid` has used so far (user and system), seconds.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command (which may hold spaces): state is the
    // first; utime and stime are the 12th and 13th.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // The kernel's USER_HZ is 100 on every Linux rudder runs on.
    (ticks(11) + ticks(12)) / 100.0
}

/// Resident and peak resident memory of process `pid`, MiB.
pub(crate) fn memory_mb(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(testing::free_port()?)
}

/// A realistic Pod: one container with ports, env, resources and probes.
fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench", "tier": "web", "pod-template-hash": "5d8f9c7b6"},
                     "annotations": {"bench.rudder.dev/run": "api"}},
        "spec": {
            "containers": [{
                "name": "web",
                "image": "registry.local/bench/web:1.25.3",
                "ports": [{"name": "http", "containerPort": 8080}, {"name": "metrics", "containerPort": 9090}],
                "env": [{"name": "MODE", "value": "production"}, {"name": "LOG_LEVEL", "value": "info"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "initialDelaySeconds": 10},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/web"}]
            }],
            "volumes": [{"name": "config", "configMap": {"name": "web-config"}}],
            "nodeSelector": {"kubernetes.io/os": "linux"}
        }
    }))
    .expect("a valid pod")
}

async fn creates(
    client: &kube::Client,
    clients: usize,
    run_for: Duration,
    tag: &str,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    let deadline = start + run_for;
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let api: Api<Pod> = Api::namespaced(client.clone(), "default");
        let tag = tag.to_string();
        tasks.spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                api.create(&PostParams::default(), &pod(&format!("{tag}-{c}-{n}")))
                    .await?;
                n += 1;
            }
            anyhow::Ok(n)
        });
    }
    let mut total = 0;
    while let Some(done) = tasks.join_next().await {
        total += done??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

async fn get_p99(client: &kube::Client, run_for: Duration) -> anyhow::Result<f64> {
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &pod("get-target"))
        .await?;
    let deadline = Instant::now() + run_for;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let api = api.clone();
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let began = Instant::now();
                api.get("get-target").await?;
                latencies.push(began.elapsed());
            }
            anyhow::Ok(latencies)
        });
    }
    let mut all = Vec::new();
    while let Some(done) = tasks.join_next().await {
        all.extend(done??);
    }
    all.sort_unstable();
    Ok(percentile(&all, 0.99).as_secs_f64() * 1000.0)
}

/// Median ms of LISTs of every pod in `default`, which holds `count`.
async fn list_all(client: &kube::Client, count: usize, repeats: usize) -> anyhow::Result<f64> {
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut times = Vec::new();
    for _ in 0..repeats {
        let began = Instant::now();
        let list = api.list(&ListParams::default()).await?;
        times.push(began.elapsed());
        anyhow::ensure!(
            list.items.len() >= count,
            "listed {} pods, expected {count}",
            list.items.len()
        );
    }
    times.sort_unstable();
    Ok(times[times.len() / 2].as_secs_f64() * 1000.0)
}

/// The same LIST read as bytes, not decoded: the server's part (reading
/// the cache, serializing, TLS) without the client's JSON decoding.
async fn list_raw(client: &kube::Client, count: usize, repeats: usize) -> anyhow::Result<f64> {
    let mut times = Vec::new();
    for _ in 0..repeats {
        let request = http::Request::get("/api/v1/namespaces/default/pods")
            .body(Vec::new())
            .context("request")?;
        let began = Instant::now();
        let body = client.request_text(request).await?;
        times.push(began.elapsed());
        let items = body.matches("\"uid\":").count();
        anyhow::ensure!(items >= count, "listed {items} pods, expected {count}");
    }
    times.sort_unstable();
    Ok(times[times.len() / 2].as_secs_f64() * 1000.0)
}

/// The server's own view of watch delivery: `rudder_watch_delivery_seconds`
/// on /metrics (from the watch cache receiving a change to the watcher's
/// response taking it), a histogram counted since the server started.
#[derive(Debug, Clone, PartialEq)]
struct Deliveries {
    /// Cumulative counts by upper bound (seconds), `+Inf` left out.
    buckets: Vec<(f64, f64)>,
    count: f64,
}

impl Deliveries {
    /// The histogram as the server reports it now.
    async fn read(client: &kube::Client) -> anyhow::Result<Deliveries> {
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .context("request")?;
        Deliveries::parse(&client.request_text(request).await?)
    }

    fn parse(text: &str) -> anyhow::Result<Deliveries> {
        let mut buckets = Vec::new();
        let mut count = 0.0;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("rudder_watch_delivery_seconds_bucket{le=\"") {
                let (bound, value) = rest.split_once("\"} ").context("bucket line")?;
                if bound != "+Inf" {
                    buckets.push((bound.parse::<f64>()?, value.parse::<f64>()?));
                }
            } else if let Some(value) = line.strip_prefix("rudder_watch_delivery_seconds_count ") {
                count = value.parse()?;
            }
        }
        Ok(Deliveries { buckets, count })
    }

    /// The deliveries observed after `earlier` was read: the difference of
    /// every bucket (the server's buckets never change bounds).
    fn since(&self, earlier: &Deliveries) -> anyhow::Result<Deliveries> {
        let before: Vec<f64> = earlier.buckets.iter().map(|(bound, _)| *bound).collect();
        let after: Vec<f64> = self.buckets.iter().map(|(bound, _)| *bound).collect();
        anyhow::ensure!(
            earlier.buckets.is_empty() || before == after,
            "the delivery histogram's buckets changed between two reads"
        );
        Ok(Deliveries {
            buckets: self
                .buckets
                .iter()
                .enumerate()
                .map(|(i, (bound, n))| (*bound, n - earlier.buckets.get(i).map_or(0.0, |b| b.1)))
                .collect(),
            count: self.count - earlier.count,
        })
    }

    /// The upper bound of the bucket the 99th percentile falls in, ms
    /// (infinite when it falls past the last bound; NaN with no deliveries).
    fn p99_ms(&self) -> f64 {
        if self.count <= 0.0 {
            return f64::NAN;
        }
        let wanted = self.count * 0.99;
        self.buckets
            .iter()
            .find(|(_, n)| *n >= wanted)
            .map_or(f64::INFINITY, |(bound, _)| bound * 1000.0)
    }
}

async fn fill(client: &kube::Client, count: usize, prefix: &str) -> anyhow::Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..32 {
        let api: Api<Pod> = Api::namespaced(client.clone(), "default");
        let prefix = prefix.to_string();
        tasks.spawn(async move {
            for i in (w..count).step_by(32) {
                api.create(&PostParams::default(), &pod(&format!("{prefix}-{i:05}")))
                    .await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

/// Who the fan-out watchers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watchers {
    /// Each watches the pods of one node (`spec.nodeName`), as kubelets do:
    /// every event reaches one of them, after the server has matched it
    /// against all of them.
    PerNode,
    /// Each watches every pod: every event reaches all of them.
    All,
}

/// What a fan-out run measured.
struct Fanout {
    /// From issuing a write to its event reaching each watcher it is for,
    /// 99th percentile, ms; a delivery that never arrives counts as
    /// infinitely late.
    p99_ms: f64,
    /// Deliveries that never arrived.
    missed: usize,
    /// From the first watch request to the last watch stream being open, ms.
    established_ms: f64,
    /// Deliveries per second, from the first write to the last arrival.
    deliveries_per_s: f64,
}

/// Opens `watchers` watch streams, waits until all are open (as a cluster's
/// kubelets would be), then writes at `rate` per second and measures each
/// event's delivery.
async fn watch_fanout(
    kubeconfig: &Path,
    watchers: usize,
    rate: usize,
    run_for: Duration,
    mode: Watchers,
) -> anyhow::Result<Fanout> {
    // Watchers spread over several connections, as many clients would be.
    let mut clients = Vec::new();
    for _ in 0..watchers.div_ceil(100) {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        clients.push(kube::Client::try_from(config)?);
    }
    let writer: Api<Pod> = Api::namespaced(clients[0].clone(), "default");
    let rv = writer
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .context("rv")?;
    let writes = (rate as f64 * run_for.as_secs_f64()) as usize;
    let run = format!("{mode:?}").to_lowercase();
    let mut tasks = tokio::task::JoinSet::new();
    let (opened, mut open) = tokio::sync::mpsc::channel::<()>(watchers);
    let began = Instant::now();
    for w in 0..watchers {
        let opened = opened.clone();
        let client = clients[w % clients.len()].clone();
        let selector = match mode {
            Watchers::PerNode => format!("fieldSelector=spec.nodeName%3Dnode-{w}"),
            Watchers::All => format!("labelSelector=fanout%3D{run}"),
        };
        let expected = match mode {
            Watchers::PerNode => (w..writes).step_by(watchers).count(),
            Watchers::All => writes,
        };
        let path =
            format!("/api/v1/namespaces/default/pods?watch=true&resourceVersion={rv}&{selector}");
        tasks.spawn(async move {
            let mut lines = client
                .request_stream(http::Request::get(path).body(Vec::new())?)
                .await?
                .lines();
            // The server answers a watch's headers once it is registered:
            // from here on, the stream gets every event.
            let _ = opened.send(()).await;
            drop(opened);
            // Arrivals are kept locally and matched after the run, so the
            // measuring itself takes no lock.
            let mut arrivals = Vec::with_capacity(expected);
            while arrivals.len() < expected {
                // A delivery that does not come within a minute is a miss,
                // counted below; the watcher gives up waiting.
                let Ok(Some(line)) =
                    tokio::time::timeout(Duration::from_secs(60), lines.next()).await
                else {
                    break;
                };
                let line = line?;
                let arrived = Instant::now();
                let Some(at) = line.find("\"name\":\"") else {
                    continue;
                };
                let rest = &line[at + 8..];
                arrivals.push((rest[..rest.find('"').unwrap_or(0)].to_string(), arrived));
            }
            anyhow::Ok(arrivals)
        });
    }
    drop(opened);
    for _ in 0..watchers {
        tokio::time::timeout(Duration::from_secs(60), open.recv())
            .await
            .context("watch streams not open within 60 s")?
            .context("a watcher failed before its stream opened")?;
    }
    let established_ms = began.elapsed().as_secs_f64() * 1000.0;
    let first_write = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    let mut creates = tokio::task::JoinSet::new();
    for i in 0..writes {
        tick.tick().await;
        let writer = writer.clone();
        let (name, node, run) = (
            format!("fan-{run}-{i:06}"),
            format!("node-{}", i % watchers),
            run.clone(),
        );
        creates.spawn(async move {
            // From issuing the write, so an event that arrives before the
            // acknowledgement is not counted as instant.
            let issued = Instant::now();
            let mut p = pod(&name);
            p.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert("fanout".into(), run);
            if let Some(spec) = p.spec.as_mut() {
                spec.node_name = Some(node);
            }
            writer.create(&PostParams::default(), &p).await?;
            anyhow::Ok((name, issued))
        });
    }
    let mut acked = HashMap::with_capacity(writes);
    while let Some(done) = creates.join_next().await {
        let (name, at) = done??;
        acked.insert(name, at);
    }
    let mut delays = Vec::new();
    let mut expected_total = 0;
    let mut last_arrival = first_write;
    while let Some(done) = tasks.join_next().await {
        let arrivals = done??;
        expected_total += arrivals.len();
        if let Some(&(_, at)) = arrivals.iter().max_by_key(|(_, at)| *at) {
            last_arrival = last_arrival.max(at);
        }
        delays.extend(arrivals.iter().filter_map(|(name, at)| {
            acked
                .get(name)
                .map(|ack| at.saturating_duration_since(*ack))
        }));
    }
    let wanted = match mode {
        Watchers::PerNode => writes,
        Watchers::All => writes * watchers,
    };
    // Every delivery that never came is a miss, infinitely late.
    let missed = wanted.saturating_sub(delays.len());
    if missed > 0 {
        eprintln!(
            "  {mode:?}: {missed} of {wanted} deliveries never arrived ({expected_total} lines)"
        );
    }
    delays.extend(std::iter::repeat_n(Duration::MAX, missed));
    delays.sort_unstable();
    let ms = |p: f64| match percentile(&delays, p) {
        Duration::MAX => f64::INFINITY,
        d => d.as_secs_f64() * 1000.0,
    };
    eprintln!(
        "  {mode:?}: {watchers} watch streams open in {established_ms:.0} ms; delivery: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms, {} of {} over 50 ms",
        ms(0.5),
        ms(0.9),
        ms(0.99),
        ms(1.0),
        delays.iter().filter(|d| d.as_millis() > 50).count(),
        delays.len()
    );
    Ok(Fanout {
        p99_ms: ms(0.99),
        missed,
        established_ms,
        deliveries_per_s: (delays.len() - missed) as f64
            / last_arrival.duration_since(first_write).as_secs_f64(),
    })
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let binary = rudder_binary()?;
    std::fs::create_dir_all(&options.work_dir)?;
    let run_for = if options.quick {
        Duration::from_secs(3)
    } else {
        Duration::from_secs(10)
    };
    // A quick run has the full run's shape (as many watchers, as fast),
    // only shorter: its figures are the same measurements, less settled.
    let (watchers, rate) = (1000, 1000);
    let watch_for = if options.quick {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(5)
    };
    let (all_watchers, all_rate) = (1000, 1000);
    let list_count = 10_000;

    // Startup and idle memory of `rudder server` as users run it (its
    // controllers too), then of the API server alone, which the load below
    // measures: the figures of the API server, not of the controllers
    // reacting to 70,000 Pods.
    let whole_dir = tempfile::tempdir_in(&options.work_dir)?;
    let whole_port = free_port()?;
    let first = Server::start(&binary, whole_dir.path(), whole_port)?;
    let (_, first_start) = first.ready(Instant::now()).await?;
    // Stopped cleanly, it hands its Lease back: the restart leads at once.
    first.stop()?;
    let began = Instant::now();
    let whole = Server::start(&binary, whole_dir.path(), whole_port)?;
    let (_, startup) = whole.ready(began).await?;
    // Its controllers start their informers after it is ready: idle is
    // once they all run (10 s is ample on this machine).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (idle_rss, _) = whole.memory_mb();
    drop(whole);
    let dir = tempfile::tempdir_in(&options.work_dir)?;
    let port = free_port()?;
    let api_only = ["--disable-controllers", "--disable-scheduler"];
    let began = Instant::now();
    let server = Server::start_with(&binary, dir.path(), port, &api_only)?;
    let (client, api_startup) = server.ready(began).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (api_idle_rss, _) = server.memory_mb();
    eprintln!(
        "startup {:.0} ms (first start {:.0} ms), idle RSS {idle_rss:.1} MB; the API server alone: {:.0} ms, {api_idle_rss:.1} MB",
        startup.as_secs_f64() * 1000.0,
        first_start.as_secs_f64() * 1000.0,
        api_startup.as_secs_f64() * 1000.0,
    );

    // The store's own write rate under the same 64 writers, for comparison.
    let store_dir = tempfile::tempdir_in(&options.work_dir)?;
    let store: Arc<dyn rudder_store::Store> =
        Arc::new(rudder_store::embedded::EmbeddedStore::open(
            rudder_store::embedded::EmbeddedConfig::new(store_dir.path().join("db")),
        )?);
    let store_rate = crate::store::write_load(&store, 64, run_for)
        .await?
        .per_second;
    drop(store);

    let create_rate = creates(&client, 64, run_for, "c64").await?;
    eprintln!("pod creates c64: {create_rate:.0}/s (store alone {store_rate:.0}/s)");
    let get = get_p99(&client, run_for).await?;
    eprintln!("get p99 {get:.2} ms");

    // A fresh server for the list and the fan-out: 10,000 pods and nothing
    // else — the API server alone, as above: no controllers or scheduler
    // reacting to those Pending pods while the LISTs and watches are timed.
    drop(server);
    let list_dir = tempfile::tempdir_in(&options.work_dir)?;
    let list_port = free_port()?;
    let server = Server::start_with(&binary, list_dir.path(), list_port, &api_only)?;
    let (client, _) = server.ready(Instant::now()).await?;
    fill(&client, list_count, "list").await?;
    let list_decoded_ms = list_all(&client, list_count, if options.quick { 3 } else { 7 }).await?;
    let list_ms = list_raw(&client, list_count, if options.quick { 3 } else { 7 }).await?;
    let (_, peak) = server.memory_mb();
    eprintln!(
        "list 10k pods {list_ms:.1} ms to the last byte ({list_decoded_ms:.1} ms decoded by kube-rs), peak RSS {peak:.1} MB"
    );

    // The server's histogram counts every delivery since it started: the
    // per-node run's own are the difference across it.
    let before = Deliveries::read(&client).await?;
    let fanout = watch_fanout(
        &server.kubeconfig,
        watchers,
        rate,
        watch_for,
        Watchers::PerNode,
    )
    .await?;
    let server_deliveries = Deliveries::read(&client).await?.since(&before)?;
    let server_side = server_deliveries.p99_ms();
    eprintln!(
        "watch fan-out p99 {:.1} ms ({watchers} per-node watchers, {rate} writes/s); server side p99 ≤ {server_side} ms over its {} deliveries ({} counted before the run)",
        fanout.p99_ms, server_deliveries.count, before.count
    );
    let fanout_all = watch_fanout(
        &server.kubeconfig,
        all_watchers,
        all_rate,
        watch_for,
        Watchers::All,
    )
    .await?;
    eprintln!(
        "watch fan-out to all p99 {:.1} ms ({all_watchers} all-pods watchers, {all_rate} writes/s), {:.0} deliveries/s",
        fanout_all.p99_ms, fanout_all.deliveries_per_s
    );

    Ok(Report {
        scenario: "api".into(),
        quick: options.quick,
        partial: None,
        metrics: vec![
            Metric::new("pod_creates_per_s_c64", "creates/s", create_rate).peer("rudder embedded store, raw writes", store_rate).target("≥ 5,000/s"),
            Metric::new("get_p99_ms", "ms", get).target("< 5 ms"),
            Metric::new("list_10k_pods_ms", "ms", list_ms).target("< 150 ms"),
            Metric::new("list_10k_pods_decoded_ms", "ms", list_decoded_ms),
            Metric::new("list_10k_peak_rss_mb", "MB", peak),
            Metric::new("watch_fanout_p99_ms", "ms", fanout.p99_ms).target("< 100 ms"),
            Metric::new("watch_fanout_missed", "deliveries", fanout.missed as f64).target("0"),
            Metric::new("watch_fanout_server_p99_ms", "ms", server_side),
            Metric::new("watch_fanout_all_p99_ms", "ms", fanout_all.p99_ms).target("< 100 ms"),
            Metric::new("watch_fanout_all_deliveries_per_s", "deliveries/s", fanout_all.deliveries_per_s),
            Metric::new("watch_fanout_all_missed", "deliveries", fanout_all.missed as f64).target("0"),
            Metric::new("watch_establish_ms", "ms", fanout.established_ms),
            Metric::new("idle_rss_mb", "MB", idle_rss).target("< 50 MB"),
            Metric::new("startup_to_ready_ms", "ms", startup.as_secs_f64() * 1000.0).target("< 1 s"),
            Metric::new("idle_rss_api_only_mb", "MB", api_idle_rss),
            Metric::new("startup_to_ready_api_only_ms", "ms", api_startup.as_secs_f64() * 1000.0),
        ],
        conditions: vec![
            "the load figures: `rudder server --disable-agent --disable-controllers --disable-scheduler` (release build) in its own process (one for the creates and GETs, a fresh one holding only the listed Pods for the LISTs and the watch fan-out) — the API server alone, so they measure it and not the controllers reacting to tens of thousands of Pods — embedded store, HTTPS with client certificates, driven by kube-rs over HTTP/2 from the same machine (2 cores shared by server and clients)".into(),
            format!("`pod_creates_per_s_c64`: 64 concurrent clients creating ~1.4 KiB Pods (one container with ports, env, resources, probes, a volume) for {} s; `peer_value` is the embedded store's raw 1 KiB write rate at 64 writers, measured in the same run", run_for.as_secs()),
            "`get_p99_ms`: 4 concurrent clients reading one Pod".into(),
            format!("`list_10k_pods_ms`: median of unpaginated LISTs of {list_count} Pods (served from the watch cache), from the request to the last byte at the client — upstream's latency definition (request received → last byte sent); `list_10k_pods_decoded_ms`: the same LIST decoded into kube-rs `Pod`s, the client's decoding included (each Pod carries its managedFields, as upstream's do); `list_10k_peak_rss_mb`: the server's peak RSS (VmHWM) after them"),
            format!("`watch_fanout_p99_ms`: {watchers} watchers (100 per HTTP/2 connection), each watching the Pods of one node (`fieldSelector=spec.nodeName=…`, as kubelets do); once all their streams are open, Pods spread over those nodes are created at {rate}/s for {} s: the watch cache routes each event by its `spec.nodeName` to the one watcher of that node (an index on the trigger field, as upstream's cacher does — not a match against every watcher); delay from issuing each create to the event's arrival, a delivery that never arrives counted as infinitely late (`watch_fanout_missed` counts them)", watch_for.as_secs()),
            format!("`watch_establish_ms`: from the first of those {watchers} watch requests (over 10 fresh HTTP/2 connections, from a resourceVersion) to the last stream being open"),
            "`watch_fanout_server_p99_ms`: the server's own histogram of the same deliveries (`rudder_watch_delivery_seconds`: from the watch cache receiving the change to the watcher's response taking the event), read before and after that run and the difference of its buckets taken, so it counts that run's deliveries only; the upper bound of the bucket holding their 99th percentile — what the server adds, without the client's side".into(),
            format!("`watch_fanout_all_p99_ms`: {all_watchers} watchers of all those Pods (label selector) at {all_rate} creates/s: every event to every watcher, {} deliveries of ~1.5 KiB per second asked for through TLS, server and clients on the same 2 cores; `watch_fanout_all_deliveries_per_s`: the deliveries that run achieved per second, from the first write to the last arrival", all_watchers * all_rate),
            format!("`startup_to_ready_ms`: `rudder server --disable-agent` as users run it (with its controllers and scheduler), a restart on existing data, process start to the first 200 from /readyz (the first start, which makes certificates and preallocates the write-ahead log, took {:.0} ms); `idle_rss_mb`: its RSS 10 s after that, once every controller's and the scheduler's informers run (they hold every object's metadata); `…_api_only_…`: the same with `--disable-controllers --disable-scheduler`, RSS 2 s after ready", first_start.as_secs_f64() * 1000.0),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(counts: [u64; 3], count: u64) -> String {
        format!(
            "rudder_watch_delivery_seconds_bucket{{le=\"0.001\"}} {}\n\
             rudder_watch_delivery_seconds_bucket{{le=\"0.005\"}} {}\n\
             rudder_watch_delivery_seconds_bucket{{le=\"0.05\"}} {}\n\
             rudder_watch_delivery_seconds_bucket{{le=\"+Inf\"}} {count}\n\
             rudder_watch_delivery_seconds_count {count}\n",
            counts[0], counts[1], counts[2]
        )
    }

    #[test]
    fn the_p99_of_a_stretch_counts_only_its_own_deliveries() -> anyhow::Result<()> {
        // 1,000 slow deliveries before the stretch, 1,000 fast ones in it.
        let before = Deliveries::parse(&histogram([0, 0, 1000], 1000))?;
        let after = Deliveries::parse(&histogram([1000, 1000, 2000], 2000))?;
        assert_eq!(after.p99_ms(), 50.0, "cumulative: the slow ones count");
        let stretch = after.since(&before)?;
        assert_eq!(stretch.count, 1000.0);
        assert_eq!(stretch.p99_ms(), 1.0);
        Ok(())
    }

    #[test]
    fn a_p99_past_the_last_bound_is_infinite() -> anyhow::Result<()> {
        let all_late = Deliveries::parse(&histogram([0, 0, 0], 10))?;
        assert_eq!(all_late.p99_ms(), f64::INFINITY);
        assert!(Deliveries::parse("")?.p99_ms().is_nan());
        Ok(())
    }
}
