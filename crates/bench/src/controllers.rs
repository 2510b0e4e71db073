//! The `controllers` scenario: the workload controllers of `rudder server`
//! (release binary, its own process, embedded store) at scale, beside the
//! floor they cannot beat — the same pods created by plain API requests in
//! the same run.
//!
//! - `api_create_10k_s`: 10,000 Pods created by 64 concurrent clients over
//!   HTTPS (the floor).
//! - `deploy_10k_pods_created_s`: a 10,000-replica Deployment, from its
//!   create until all 10,000 pods exist (counted from a watch).
//! - `controllers_rss_mb`, `controllers_idle_cpu_pct`: the server's RSS
//!   with those 10,000 pods, and its CPU over 10 idle seconds after.
//! - `rollout_1k_s`: a new image for a 1,000-replica Deployment (maxSurge
//!   and maxUnavailable 25 %), until the rollout is complete; the bench
//!   plays the nodes, marking each new pod Running and Ready.
//! - `job_1k_s`: a Job of 1,000 completions, parallelism 100, until
//!   Complete; each pod succeeds as soon as the bench sees it.
//!
//! `--quick` runs the same shapes with a tenth of the pods.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Options;
use crate::api::{Server, free_port, rudder_binary};
use crate::report::{Metric, Report};

/// Concurrent clients of the floor.
const CLIENTS: usize = 64;

async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    namespaces.create(&PostParams::default(), &ns).await?;
    Ok(())
}

async fn delete_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.delete(name, &DeleteParams::default()).await?;
    until("a namespace to go", Duration::from_secs(600), || async {
        Ok(namespaces.get_opt(name).await?.is_none())
    })
    .await
}

/// Polls until `done`, every 20 ms, for at most `within`.
pub(crate) async fn until<F, Fut>(what: &str, within: Duration, mut done: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + within;
    while !done().await? {
        anyhow::ensure!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

fn pod_spec() -> serde_json::Value {
    json!({"containers": [{"name": "app", "image": "registry.local/app:1",
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]})
}

/// `count` Pods created by [`CLIENTS`] concurrent requests.
async fn plain_creates(client: &kube::Client, count: usize) -> anyhow::Result<f64> {
    create_namespace(client, "floor").await?;
    let api: Api<Pod> = Api::namespaced(client.clone(), "floor");
    let pods: Vec<Pod> = (0..count)
        .map(|i| {
            serde_json::from_value(json!({"metadata": {"name": format!("pod-{i}"), "labels": {"app": "floor"}}, "spec": pod_spec()}))
        })
        .collect::<Result<_, _>>()?;
    let began = Instant::now();
    let results: Vec<kube::Result<Pod>> = futures::stream::iter(pods.iter().map(|p| {
        let api = api.clone();
        async move { api.create(&PostParams::default(), p).await }
    }))
    .buffer_unordered(CLIENTS)
    .collect()
    .await;
    for result in results {
        result.context("create a pod")?;
    }
    let elapsed = began.elapsed().as_secs_f64();
    eprintln!("floor: {elapsed:.2} s");
    Ok(elapsed)
}

fn deployment(name: &str, replicas: usize, image: &str) -> anyhow::Result<Deployment> {
    let mut spec = pod_spec();
    spec["containers"][0]["image"] = json!(image);
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}
    }))?)
}

/// A `count`-replica Deployment, until all its pods exist.
async fn deploy(client: &kube::Client, count: usize) -> anyhow::Result<f64> {
    let namespace = "deploy";
    create_namespace(client, namespace).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    // Watch first, so no pod is missed.
    let (seen_tx, mut seen_rx) = tokio::sync::watch::channel(0usize);
    let counter = tokio::spawn(async move {
        let mut names = HashSet::new();
        let stream = watcher::watcher(pods, watcher::Config::default());
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            if let Ok(Event::Apply(p) | Event::InitApply(p)) = event
                && let Some(name) = p.metadata.name
            {
                names.insert(name);
                let _ = seen_tx.send(names.len());
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let began = Instant::now();
    api.create(
        &PostParams::default(),
        &deployment("big", count, "registry.local/app:1")?,
    )
    .await?;
    let wait = seen_rx.wait_for(|n| *n >= count);
    tokio::time::timeout(Duration::from_secs(600), wait)
        .await
        .context("gave up waiting for the pods")?
        .context("the pod watch ended")?;
    let elapsed = began.elapsed().as_secs_f64();
    counter.abort();
    eprintln!("deploy: {elapsed:.2} s");
    Ok(elapsed)
}

/// Whether `d` finished rolling out its current spec (what `kubectl
/// rollout status` waits for).
fn rolled_out(d: &Deployment, replicas: i32) -> bool {
    let s = d.status.clone().unwrap_or_default();
    s.observed_generation >= d.metadata.generation
        && s.replicas == Some(replicas)
        && s.updated_replicas == Some(replicas)
        && s.available_replicas == Some(replicas)
}

/// A new image for a `count`-replica Deployment, until complete.
async fn rollout(client: &kube::Client, count: usize) -> anyhow::Result<f64> {
    let namespace = "rollout";
    create_namespace(client, namespace).await?;
    let stop = CancellationToken::new();
    let nodes = tokio::spawn({
        let (client, stop) = (client.clone(), stop.clone());
        async move {
            rudder_harness::kubelet::play_nodes_in(
                client,
                Some("rollout"),
                rudder_runtime::clock::system(),
                rudder_harness::kubelet::all_ready(),
                stop,
            )
            .await
        }
    });
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    api.create(
        &PostParams::default(),
        &deployment("web", count, "registry.local/app:1")?,
    )
    .await?;
    let replicas = count as i32;
    until("the first rollout", Duration::from_secs(600), || async {
        Ok(rolled_out(&api.get("web").await?, replicas))
    })
    .await?;
    let began = Instant::now();
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "registry.local/app:2"}]}}}});
    api.patch("web", &PatchParams::default(), &Patch::Strategic(&patch))
        .await?;
    until("the rollout", Duration::from_secs(600), || async {
        Ok(rolled_out(&api.get("web").await?, replicas))
    })
    .await?;
    let elapsed = began.elapsed().as_secs_f64();
    stop.cancel();
    let _ = nodes.await;
    eprintln!("rollout: {elapsed:.2} s");
    Ok(elapsed)
}

/// A Job of `count` completions, `parallelism` at once, until Complete;
/// the bench plays the nodes, each pod succeeding as soon as it exists.
async fn job(client: &kube::Client, count: usize, parallelism: usize) -> anyhow::Result<f64> {
    let namespace = "jobs";
    create_namespace(client, namespace).await?;
    let stop = CancellationToken::new();
    let nodes = tokio::spawn({
        let (client, stop) = (client.clone(), stop.clone());
        async move {
            rudder_harness::kubelet::play_nodes_in(
                client,
                Some("jobs"),
                rudder_runtime::clock::system(),
                rudder_harness::kubelet::jobs_succeed(),
                stop,
            )
            .await
        }
    });
    let mut spec = pod_spec();
    spec["restartPolicy"] = json!("Never");
    let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
        "metadata": {"name": "batch"},
        "spec": {"completions": count, "parallelism": parallelism, "template": {"spec": spec}}
    }))?;
    let api: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), namespace);
    let began = Instant::now();
    api.create(&PostParams::default(), &job).await?;
    until("the job to complete", Duration::from_secs(600), || async {
        let job = api.get("batch").await?;
        let conditions = job.status.and_then(|s| s.conditions).unwrap_or_default();
        anyhow::ensure!(
            !conditions
                .iter()
                .any(|c| c.type_ == "Failed" && c.status == "True"),
            "the job failed"
        );
        Ok(conditions
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True"))
    })
    .await?;
    let elapsed = began.elapsed().as_secs_f64();
    stop.cancel();
    let _ = nodes.await;
    let succeeded = api.get("batch").await?.status.and_then(|s| s.succeeded);
    anyhow::ensure!(
        succeeded == Some(count as i32),
        "succeeded {succeeded:?}, not {count}"
    );
    eprintln!("job: {elapsed:.2} s");
    Ok(elapsed)
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let binary = rudder_binary()?;
    std::fs::create_dir_all(&options.work_dir)?;
    let (count, rollout_count) = if options.quick {
        (1_000, 100)
    } else {
        (10_000, 1_000)
    };
    let dir = tempfile::tempdir_in(&options.work_dir)?;
    // No nodes here, and the scheduler would answer each of the pods with
    // a FailedScheduling event and status write: it is measured on its own
    // (`rudder-bench scheduler`).
    let server = Server::start_with(&binary, dir.path(), free_port()?, &["--disable-scheduler"])?;
    let (client, _) = server.ready(Instant::now()).await?;

    let started = Instant::now();
    let phase = |what: &str| eprintln!("[{:6.1} s] {what}", started.elapsed().as_secs_f64());
    let floor = plain_creates(&client, count).await?;
    phase("floor done");
    delete_namespace(&client, "floor").await?;
    phase("floor namespace deleted");
    let deployed = deploy(&client, count).await?;
    // Settled: the ReplicaSet's status written, the informers quiet.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (rss, _) = server.memory_mb();
    let idle_for = Duration::from_secs(10);
    let cpu_before = server.cpu_seconds();
    tokio::time::sleep(idle_for).await;
    let idle_cpu = (server.cpu_seconds() - cpu_before) / idle_for.as_secs_f64() * 100.0;
    phase("idle measured");
    delete_namespace(&client, "deploy").await?;
    phase("deploy namespace deleted");
    let rolled = rollout(&client, rollout_count).await?;
    phase("rollout done");
    let job_s = job(&client, rollout_count, rollout_count / 10).await?;
    phase("job done");

    Ok(Report {
        scenario: "controllers".into(),
        quick: options.quick,
        partial: None,
        metrics: vec![
            Metric::new("api_create_10k_s", "s", floor),
            Metric::new("deploy_10k_pods_created_s", "s", deployed)
                .peer("plain API creates (api_create_10k_s)", floor)
                .target("≤ 1.5× the floor"),
            Metric::new("rollout_1k_s", "s", rolled).target("< 10 s"),
            Metric::new("job_1k_s", "s", job_s),
            Metric::new("controllers_rss_mb", "MB", rss),
            Metric::new("controllers_idle_cpu_pct", "%", idle_cpu).target("< 1 %"),
        ],
        conditions: vec![
            format!(
                "`rudder server` (release build, embedded store on {}), its controllers in-process; the bench is a kube-rs client over HTTPS on the same 2 cores",
                options.work_dir.display()
            ),
            format!(
                "floor: {count} Pods (one container, requests set) created by {CLIENTS} concurrent requests"
            ),
            format!(
                "deploy: a {count}-replica Deployment of the same pod, timed from its create until a watch of the namespace has seen all {count} pods (no scheduler or node yet: they stay Pending)"
            ),
            format!(
                "`controllers_rss_mb`: the server's RSS 5 s after, with those {count} pods; `controllers_idle_cpu_pct`: its CPU (user + system) over the next 10 s, as a share of one core"
            ),
            format!(
                "rollout: a {rollout_count}-replica Deployment (maxSurge and maxUnavailable 25 %) rolled out, then a new image, timed until `observedGeneration`, `updatedReplicas`, `replicas` and `availableReplicas` say complete (what `kubectl rollout status` waits for); the bench plays the nodes, writing each new pod's status Running and Ready as a kubelet would (a watch and a status PATCH per pod, over HTTPS)"
            ),
            format!(
                "job: {rollout_count} completions, parallelism {}, timed from the Job's create until its Complete condition; the bench plays the nodes, each pod Succeeded as soon as it is seen",
                rollout_count / 10
            ),
        ],
    })
}
