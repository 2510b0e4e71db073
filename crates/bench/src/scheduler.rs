//! The `scheduler` scenario: upstream's scheduler_perf workloads
//! (`test/integration/scheduler_perf/config/performance-config.yaml`) on
//! the in-process control plane with fake Node objects (nothing runs the
//! pods), the scheduler in the same process with upstream's default
//! profile, beside the floor it cannot beat — the same pods bound by plain
//! `pods/binding` POSTs, no scheduling, in the same run.
//!
//! Per workload: `<workload>_pods_per_s` (measured pods bound per second,
//! from the first measured create to the last binding seen — upstream's
//! SchedulingThroughput average), `<workload>_p50_ms` / `_p99_ms`
//! (per pod, from its create returning to its binding seen by a watch),
//! and `bind_floor_pods_per_s` (64 concurrent binding POSTs).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, PostParams};
use kube::runtime::watcher::{self, Event};
use rudder_harness::{ControlPlane, Identity};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::Options;
use crate::api::cpu_seconds;
use crate::report::{Metric, Report};

/// Requests in flight at once, for creates and bindings.
const CLIENTS: usize = 64;

/// The namespaces of the initial and the measured pods (upstream's
/// `sched-0` and `sched-1`, which its anti-affinity template names).
const INIT: &str = "sched-0";
const MEASURE: &str = "sched-1";

/// One scheduler_perf workload.
struct Workload {
    name: &'static str,
    nodes: usize,
    init_pods: usize,
    measure_pods: usize,
    /// Labels of node `i`.
    node_labels: fn(usize) -> Value,
    /// An initial pod and a measured one: `{"labels": …, "spec": …}`.
    init: fn() -> Value,
    measure: fn() -> Value,
    /// Upstream's CI floor for the workload (pods/s) and the workload it
    /// was published for.
    upstream: (f64, &'static str),
    /// Whether the measured pods only fit by preempting (no "cycles
    /// alone" figure: a cycle there ends in PostFilter).
    preempts: bool,
}

fn plain_labels(i: usize) -> Value {
    json!({"kubernetes.io/hostname": format!("node-{i}")})
}

/// `labelNodePrepareStrategy` with one zone: every node in `zone1`.
fn zone1_labels(i: usize) -> Value {
    json!({"kubernetes.io/hostname": format!("node-{i}"), "topology.kubernetes.io/zone": "zone1"})
}

/// The same with `moon-1`, `moon-2`, `moon-3` in turn.
fn moon_labels(i: usize) -> Value {
    json!({"kubernetes.io/hostname": format!("node-{i}"), "topology.kubernetes.io/zone": format!("moon-{}", i % 3 + 1)})
}

/// A pause container asking for `cpu` (limits = requests), as upstream's
/// templates.
fn pause(cpu: &str) -> Value {
    json!({"name": "pause", "image": "registry.k8s.io/pause:3.10", "ports": [{"containerPort": 80}],
        "resources": {"requests": {"cpu": cpu, "memory": "500Mi"}, "limits": {"cpu": cpu, "memory": "500Mi"}}})
}

/// upstream's `pod-default.yaml`: one pause container, 100m cpu, 500Mi.
fn default_pod() -> Value {
    json!({"labels": {}, "spec": {"containers": [pause("100m")]}})
}

/// `pod-with-node-affinity.yaml`: required to zone1 or zone2.
fn node_affinity_pod() -> Value {
    let mut pod = default_pod();
    pod["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone1", "zone2"]}]}
    ]}}});
    pod
}

/// `pod-with-pod-anti-affinity.yaml`: `color: green`, at most one per node
/// among the green pods of both namespaces.
fn anti_affinity_pod() -> Value {
    let mut pod = default_pod();
    pod["labels"] = json!({"color": "green"});
    pod["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"color": "green"}},
        "topologyKey": "kubernetes.io/hostname",
        "namespaces": ["sched-1", "sched-0"],
    }]}});
    pod
}

/// `pod-with-topology-spreading.yaml`: `color: blue`, zones skewed by at
/// most 5.
fn spreading_pod() -> Value {
    let mut pod = default_pod();
    pod["labels"] = json!({"color": "blue"});
    pod["spec"]["topologySpreadConstraints"] = json!([{
        "maxSkew": 5, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"color": "blue"}},
    }]);
    pod
}

/// `pod-low-priority.yaml`: 900m, no grace period (four fill a node).
fn low_priority_pod() -> Value {
    json!({"labels": {}, "spec": {"terminationGracePeriodSeconds": 0, "containers": [pause("900m")]}})
}

/// `pod-high-priority.yaml`: 3000m at priority 10 — through a
/// PriorityClass, as Priority admission requires (upstream's template sets
/// `spec.priority`, which its test server admits without that plugin).
fn high_priority_pod() -> Value {
    json!({"labels": {}, "spec": {"priorityClassName": HIGH_PRIORITY, "containers": [pause("3000m")]}})
}

const HIGH_PRIORITY: &str = "bench-high";

/// Upstream's scheduler_perf workloads at their CI sizes
/// (`test/integration/scheduler_perf/*/performance-config.yaml`), a tenth
/// of them when quick.
fn workloads(quick: bool) -> Vec<Workload> {
    let scale = |n: usize| if quick { n / 10 } else { n };
    vec![
        Workload {
            name: "scheduling_basic",
            nodes: scale(5_000),
            init_pods: scale(1_000),
            measure_pods: scale(10_000),
            node_labels: plain_labels,
            init: default_pod,
            measure: default_pod,
            upstream: (270.0, "SchedulingBasic 5000Nodes_10000Pods, 1.31"),
            preempts: false,
        },
        Workload {
            name: "node_affinity",
            nodes: scale(5_000),
            init_pods: scale(5_000),
            measure_pods: scale(10_000),
            node_labels: zone1_labels,
            init: default_pod,
            measure: node_affinity_pod,
            upstream: (220.0, "SchedulingNodeAffinity 5000Nodes_10000Pods"),
            preempts: false,
        },
        Workload {
            name: "pod_anti_affinity",
            nodes: scale(5_000),
            init_pods: scale(1_000),
            measure_pods: scale(2_000),
            node_labels: plain_labels,
            init: anti_affinity_pod,
            measure: anti_affinity_pod,
            upstream: (60.0, "SchedulingPodAntiAffinity 5000Nodes_2000Pods"),
            preempts: false,
        },
        Workload {
            name: "topology_spreading",
            nodes: scale(5_000),
            init_pods: scale(5_000),
            measure_pods: scale(2_000),
            node_labels: moon_labels,
            init: default_pod,
            measure: spreading_pod,
            upstream: (85.0, "TopologySpreading 5000Nodes"),
            preempts: false,
        },
        Workload {
            name: "preemption_basic",
            nodes: scale(500),
            init_pods: scale(2_000),
            measure_pods: scale(500),
            node_labels: plain_labels,
            init: low_priority_pod,
            measure: high_priority_pod,
            upstream: (18.0, "PreemptionBasic 500Nodes"),
            preempts: true,
        },
    ]
}

fn node(i: usize, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("node-{i}"), "labels": labels},
        "status": {
            "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

async fn create_all<K>(api: &Api<K>, objects: Vec<Value>) -> anyhow::Result<Vec<Instant>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let results: Vec<anyhow::Result<Instant>> =
        futures::stream::iter(objects.into_iter().map(|o| {
            let api = api.clone();
            async move {
                let object: K = serde_json::from_value(o)?;
                api.create(&PostParams::default(), &object).await?;
                Ok(Instant::now())
            }
        }))
        .buffered(CLIENTS)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Records when each pod of `namespace` is first seen bound.
fn watch_bound(
    pods: Api<Pod>,
) -> (
    Arc<Mutex<HashMap<String, Instant>>>,
    tokio::task::JoinHandle<()>,
) {
    let bound: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let task = tokio::spawn({
        let bound = bound.clone();
        async move {
            let stream = watcher::watcher(pods, watcher::Config::default());
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(Event::Apply(p) | Event::InitApply(p)) = event
                    && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                    && let Some(name) = p.metadata.name
                {
                    bound
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(name)
                        .or_insert_with(Instant::now);
                }
            }
        }
    });
    (bound, task)
}

async fn wait_bound(
    bound: &Mutex<HashMap<String, Instant>>,
    count: usize,
    what: &str,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(900);
    while bound.lock().unwrap_or_else(|e| e.into_inner()).len() < count {
        anyhow::ensure!(
            Instant::now() < deadline,
            "gave up waiting for {what} to be bound"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(())
}

fn pods(
    prefix: &str,
    count: usize,
    template: fn() -> Value,
    scheduler: Option<&str>,
) -> Vec<Value> {
    (0..count)
        .map(|i| {
            let mut pod = template();
            if let Some(name) = scheduler {
                pod["spec"]["schedulerName"] = json!(name);
            }
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{prefix}-{i}"), "labels": pod["labels"]},
                "spec": pod["spec"]})
        })
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// What one workload measured.
struct Measured {
    pods_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// CPU time of the whole process (API server, scheduler, clients)
    /// per measured pod, and the cores it kept busy on average.
    cpu: Cpu,
}

/// CPU time of this process over a timed stretch.
#[derive(Clone, Copy)]
struct Cpu {
    ms_per_pod: f64,
    cores_busy: f64,
}

/// Where a timed stretch began: the wall clock and the process's CPU time.
#[derive(Clone, Copy)]
struct Mark {
    at: Instant,
    cpu_seconds: f64,
}

impl Mark {
    fn now() -> Mark {
        Mark {
            at: Instant::now(),
            cpu_seconds: cpu_seconds(std::process::id()),
        }
    }
}

impl Cpu {
    /// The CPU time used since `began`, spread over `pods`.
    fn since(began: Mark, pods: usize) -> Cpu {
        let seconds = cpu_seconds(std::process::id()) - began.cpu_seconds;
        Cpu {
            ms_per_pod: seconds * 1000.0 / pods as f64,
            cores_busy: seconds / began.at.elapsed().as_secs_f64(),
        }
    }

    /// `<prefix>_cpu_ms_per_pod` and `<prefix>_cores_busy`.
    fn metrics(&self, prefix: &str) -> [Metric; 2] {
        [
            Metric::new(&format!("{prefix}_cpu_ms_per_pod"), "ms", self.ms_per_pod),
            Metric::new(&format!("{prefix}_cores_busy"), "cores", self.cores_busy),
        ]
    }
}

impl std::fmt::Display for Cpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.3} ms CPU a pod, {:.2} cores busy",
            self.ms_per_pod, self.cores_busy
        )
    }
}

async fn run_workload(w: &Workload) -> anyhow::Result<(Measured, ControlPlane)> {
    let plane = ControlPlane::start_with(rudder_harness::Options {
        backend: rudder_harness::Backend::EmbeddedAsServed,
        ..rudder_harness::Options::default()
    })
    .await;
    let admin = plane.admin();
    let nodes: Vec<Value> = (0..w.nodes).map(|i| node(i, (w.node_labels)(i))).collect();
    create_all(&Api::<Node>::all(admin.clone()), nodes)
        .await
        .context("nodes")?;
    let stop = CancellationToken::new();
    let scheduler = rudder_scheduler::Scheduler::new(
        plane.client(&Identity::scheduler()),
        rudder_scheduler::Options {
            lease: None,
            ..rudder_scheduler::Options::default()
        },
    );
    let running = tokio::spawn(scheduler.run(stop.clone()));
    if w.preempts {
        let class: PriorityClass =
            serde_json::from_value(json!({"metadata": {"name": HIGH_PRIORITY}, "value": 10}))?;
        Api::<PriorityClass>::all(admin.clone())
            .create(&PostParams::default(), &class)
            .await?;
    }
    namespace(&admin, INIT).await?;
    let (init_bound, init_watch) = watch_bound(Api::namespaced(admin.clone(), INIT));
    create_all(
        &Api::<Pod>::namespaced(admin.clone(), INIT),
        pods("init", w.init_pods, w.init, None),
    )
    .await?;
    wait_bound(&init_bound, w.init_pods, "the initial pods").await?;
    init_watch.abort();
    namespace(&admin, MEASURE).await?;
    let (bound, watch) = watch_bound(Api::namespaced(admin.clone(), MEASURE));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let api: Api<Pod> = Api::namespaced(admin.clone(), MEASURE);
    let measured = pods("measure", w.measure_pods, w.measure, None);
    let names: Vec<String> = measured
        .iter()
        .map(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let mark = Mark::now();
    let began = mark.at;
    let created = create_all(&api, measured).await?;
    let creates_took = began.elapsed();
    wait_bound(&bound, w.measure_pods, "the measured pods").await?;
    let cpu = Cpu::since(mark, w.measure_pods);
    watch.abort();
    stop.cancel();
    let _ = running.await;
    let bound = bound.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let last = bound.values().max().copied().unwrap_or(began);
    let mut latencies: Vec<f64> = names
        .iter()
        .zip(&created)
        .filter_map(|(name, at)| {
            Some(
                bound
                    .get(name)?
                    .saturating_duration_since(*at)
                    .as_secs_f64()
                    * 1000.0,
            )
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let elapsed = last.duration_since(began).as_secs_f64();
    let result = Measured {
        pods_per_s: w.measure_pods as f64 / elapsed,
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
        cpu,
    };
    eprintln!(
        "{}: {} nodes, {} + {} pods: {:.0} pods/s, p50 {:.1} ms, p99 {:.1} ms (creates took {:.2} s; {})",
        w.name,
        w.nodes,
        w.init_pods,
        w.measure_pods,
        result.pods_per_s,
        result.p50_ms,
        result.p99_ms,
        creates_took.as_secs_f64(),
        cpu
    );
    Ok((result, plane))
}

/// The scheduler's own cost, no API: the workload's nodes and initial
/// pods in a cache, then each measured pod through a whole cycle
/// (PreFilter … Score) and assumed on the node chosen, one after another
/// on one thread — the rate the scheduling loop could reach if the API
/// server cost nothing.
fn cycle_rate(w: &Workload) -> anyhow::Result<f64> {
    use rudder_scheduler::cache::Cache;
    use rudder_scheduler::framework::{CycleState, PodInfo};
    let mut cache = Cache::new();
    for i in 0..w.nodes {
        cache.set_node(Arc::new(serde_json::from_value(node(
            i,
            (w.node_labels)(i),
        ))?));
    }
    let as_pod = |v: Value, ns: &str| -> anyhow::Result<Arc<Pod>> {
        let mut pod: Pod = serde_json::from_value(v)?;
        pod.metadata.namespace = Some(ns.into());
        pod.metadata.uid = Some(format!(
            "{ns}-{}",
            pod.metadata.name.clone().unwrap_or_default()
        ));
        Ok(Arc::new(pod))
    };
    let profile = rudder_scheduler::Profile::default_profile(None);
    let mut start = 0;
    let mut place = |cache: &mut Cache, pod: Arc<Pod>| -> anyhow::Result<()> {
        let info = Arc::new(PodInfo::new(pod));
        let snapshot = cache.snapshot();
        let mut state = CycleState::default();
        match rudder_scheduler::cycle::schedule(&profile, &mut state, &info, &snapshot, &mut start)
        {
            rudder_scheduler::cycle::Decision::Fit(chosen) => {
                drop(snapshot);
                cache.assume(info, &chosen.node);
                Ok(())
            }
            other => anyhow::bail!("{} did not fit: {other:?}", info.key),
        }
    };
    for p in pods("init", w.init_pods, w.init, None) {
        place(&mut cache, as_pod(p, INIT)?)?;
    }
    let measured = pods("measure", w.measure_pods, w.measure, None)
        .into_iter()
        .map(|p| as_pod(p, MEASURE))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let began = Instant::now();
    for pod in measured {
        place(&mut cache, pod)?;
    }
    let rate = w.measure_pods as f64 / began.elapsed().as_secs_f64();
    eprintln!("{}: cycles alone (no API): {rate:.0} pods/s", w.name);
    Ok(rate)
}

/// The floors: the same number of pods, for no scheduler, created by 64
/// concurrent clients (every measured pod must be, so no workload can beat
/// that rate), then bound round-robin by 64 concurrent binding POSTs.
/// Returns both rates and the CPU time each took, creates first.
async fn floors(
    plane: &ControlPlane,
    count: usize,
    nodes: usize,
) -> anyhow::Result<[(f64, Cpu); 2]> {
    let admin = plane.admin();
    namespace(&admin, "floor").await?;
    let api: Api<Pod> = Api::namespaced(admin.clone(), "floor");
    let mark = Mark::now();
    create_all(&api, pods("floor", count, default_pod, Some("none"))).await?;
    let creates = count as f64 / mark.at.elapsed().as_secs_f64();
    let create_cpu = Cpu::since(mark, count);
    eprintln!("create floor: {creates:.0} pods/s ({create_cpu})");
    let mark = Mark::now();
    let results: Vec<kube::Result<Value>> = futures::stream::iter((0..count).map(|i| {
        let api = api.clone();
        async move {
            let name = format!("floor-{i}");
            let binding = json!({"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name}, "target": {"kind": "Node", "name": format!("node-{}", i % nodes)}});
            api.create_subresource::<Value, Value>("binding", &name, &PostParams::default(), &binding)
                .await
        }
    }))
    .buffer_unordered(CLIENTS)
    .collect()
    .await;
    for r in results {
        r.context("a binding")?;
    }
    let rate = count as f64 / mark.at.elapsed().as_secs_f64();
    let bind_cpu = Cpu::since(mark, count);
    eprintln!("bind floor: {rate:.0} pods/s ({bind_cpu})");
    Ok([(creates, create_cpu), (rate, bind_cpu)])
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let mut metrics = Vec::new();
    let mut floor = None;
    // Development switches, which make a partial run (its JSON printed, the
    // doc left alone): RUDDER_BENCH_ONLY=<workload> runs one workload;
    // RUDDER_BENCH_CYCLES_ONLY only the cycles alone, no API server.
    let only = std::env::var("RUDDER_BENCH_ONLY").ok();
    let cycles_only = std::env::var_os("RUDDER_BENCH_CYCLES_ONLY").is_some();
    let partial = [
        only.as_ref().map(|o| format!("RUDDER_BENCH_ONLY={o}")),
        cycles_only.then(|| "RUDDER_BENCH_CYCLES_ONLY".to_string()),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>();
    for w in workloads(options.quick) {
        if only.as_deref().is_some_and(|o| o != w.name) {
            continue;
        }
        let cycles = if w.preempts {
            None
        } else {
            Some(cycle_rate(&w)?)
        };
        let cycles_metric = cycles.map(|cycles| {
            Metric::new(
                &format!("{}_cycles_alone_pods_per_s", w.name),
                "pods/s",
                cycles,
            )
        });
        if cycles_only {
            metrics.extend(cycles_metric);
            continue;
        }
        let (m, plane) = run_workload(&w).await?;
        if floor.is_none() {
            floor = Some(floors(&plane, w.measure_pods, w.nodes).await?);
        }
        plane.stop().await;
        let (upstream, upstream_name) = w.upstream;
        let mut rate = Metric::new(&format!("{}_pods_per_s", w.name), "pods/s", m.pods_per_s)
            .peer(&format!("upstream CI floor ({upstream_name})"), upstream);
        if w.name == "scheduling_basic" {
            rate = rate.target("≥ 2,000 pods/s and ≥ 60 % of the bind floor");
        } else {
            rate = rate.target(&format!("≥ 3× upstream's floor ({:.0})", 3.0 * upstream));
        }
        metrics.push(rate);
        metrics.push(Metric::new(&format!("{}_p50_ms", w.name), "ms", m.p50_ms));
        metrics.push(Metric::new(&format!("{}_p99_ms", w.name), "ms", m.p99_ms));
        metrics.extend(m.cpu.metrics(w.name));
        metrics.extend(cycles_metric);
    }
    anyhow::ensure!(
        !metrics.is_empty(),
        "{} left nothing to measure",
        partial.join(", ")
    );
    if let Some([(creates, create_cpu), (binds, bind_cpu)]) = floor {
        metrics.push(Metric::new("bind_floor_pods_per_s", "pods/s", binds));
        metrics.extend(bind_cpu.metrics("bind_floor"));
        metrics.push(Metric::new("create_floor_pods_per_s", "pods/s", creates));
        metrics.extend(create_cpu.metrics("create_floor"));
    }
    Ok(Report {
        scenario: "scheduler".into(),
        quick: options.quick,
        partial: (!partial.is_empty()).then(|| partial.join(", ")),
        metrics,
        conditions: vec![
            "in-process control plane (embedded store) and scheduler in one process (release build), upstream's default profile, 2 cores shared by the API server, the scheduler and the clients; nodes are Node objects (4 cpu, 32Gi, 110 pods) that nothing runs".into(),
            "upstream's workloads at their CI sizes and with their pod templates (`test/integration/scheduler_perf`): `scheduling_basic` SchedulingBasic 5000Nodes_10000Pods (1,000 initial pods, 10,000 measured, 100m cpu, 500Mi); `node_affinity` SchedulingNodeAffinity 5000Nodes_10000Pods (every node in zone1; 5,000 initial, 10,000 measured requiring zone1 or zone2); `pod_anti_affinity` SchedulingPodAntiAffinity 5000Nodes_2000Pods (1,000 initial, 2,000 measured, all `color: green`, at most one per node); `topology_spreading` TopologySpreading 5000Nodes (3 zones, 5,000 plain initial pods, 2,000 measured spread over zones with maxSkew 5); `preemption_basic` PreemptionBasic 500Nodes (2,000 initial pods of 900m fill every node, 500 measured of 3000m at priority 10 each preempt three)".into(),
            "`cycles_alone_pods_per_s`: the same nodes and pods in the scheduler's cache, each measured pod through a whole cycle and assumed, one after another with no API server — what the scheduling loop costs by itself (not for preemption, whose cycles end in deletions through the API)".into(),
            "`pods_per_s`: measured pods over the time from the first measured create to the last binding seen by a watch, the creates (64 concurrent) overlapping the scheduling; `p50_ms`/`p99_ms`: per pod, create returned → bound seen; `bind_floor_pods_per_s`: as many pods bound by 64 concurrent `pods/binding` POSTs, no scheduler, in the same process; `create_floor_pods_per_s`: those pods created beforehand by 64 concurrent clients, no scheduler — every measured pod is created, so no workload can pass this rate".into(),
            "`cpu_ms_per_pod`: CPU time (user + system) of the whole process — API server, scheduler, clients, the watch timing them — over the measured stretch, per pod; `cores_busy`: that CPU time over the stretch's wall time (2 cores: 2.0 is saturation)".into(),
        ],
    })
}
