//! The `controllers` scenario: the workload controllers of `rudder server`
//! at scale (its control plane in the bench's process, [`crate::plane`]),
//! beside the floor they cannot beat — the same pods created by plain API
//! requests on the same server, by the same in-process path and with as
//! many in flight as the ReplicaSet controller ever has, in the same run.
//!
//! - `api_create_10k_s`: 10,000 Pods created by plain requests (the
//!   floor), until a watch has seen them all.
//! - `deploy_10k_pods_created_s`: a 10,000-replica Deployment, from its
//!   create until the same watch has seen all 10,000 pods.
//! - `controllers_rss_mb`, `controllers_idle_cpu_pct`: the process's RSS
//!   with those 10,000 pods, and its CPU over 10 idle seconds after.
//! - `rollout_1k_s`: a new image for a 1,000-replica Deployment (maxSurge
//!   and maxUnavailable 25 %), until the rollout is complete; the bench
//!   plays the nodes over HTTPS, marking each new pod Running and Ready.
//! - `job_1k_s`: a Job of 1,000 completions, parallelism 100, until
//!   Complete; each pod succeeds as soon as the bench sees it.
//!
//! `--quick` runs the same shapes with a tenth of the pods.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use rudder_apiserver::Identity;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Options;
use crate::api::{cpu_seconds, memory_mb};
use crate::plane::{Plane, Scheduler};
use crate::report::{Metric, Report};

/// The most pod creates the ReplicaSet controller has in flight: its
/// slow-start batches (1, 2, 4, … each sent at once, the next after the
/// last returned) of one burst of at most `BURST_REPLICAS` creates.
fn replicaset_creates_in_flight() -> usize {
    use rudder_controllers::replicaset::{BURST_REPLICAS, SLOW_START_INITIAL};
    let (mut batch, mut remaining, mut most) = (SLOW_START_INITIAL, BURST_REPLICAS, 0);
    while batch > 0 {
        most = most.max(batch);
        remaining -= batch;
        batch = (batch * 2).min(remaining);
    }
    most
}

/// Creates namespace `name` and waits for its `default` ServiceAccount,
/// which admission reads into every pod (the pods of a namespace without
/// it would be smaller: no API credentials volume).
async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    namespaces.create(&PostParams::default(), &ns).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    until(
        "the namespace's default ServiceAccount",
        Duration::from_secs(60),
        || async { Ok(accounts.get_opt("default").await?.is_some()) },
    )
    .await
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

/// Counts the distinct pods of `namespace` a watch sees, from its
/// initial list on; established when this returns.
async fn watch_pods(
    client: &kube::Client,
    namespace: &str,
) -> (
    tokio::sync::watch::Receiver<usize>,
    tokio::task::JoinHandle<()>,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let (seen_tx, seen_rx) = tokio::sync::watch::channel(0usize);
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
    (seen_rx, counter)
}

/// Waits until `seen` reaches `count`.
async fn seen_all(
    seen: &mut tokio::sync::watch::Receiver<usize>,
    count: usize,
) -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(600), seen.wait_for(|n| *n >= count))
        .await
        .context("gave up waiting for the pods")?
        .context("the pod watch ended")?;
    Ok(())
}

/// The floor: `count` pods as the ReplicaSet controller makes them (the
/// Deployment's pod, a generated name, a controller reference to an owner
/// that exists) created by plain requests from an in-process client as
/// the controller manager, `in_flight` at once, after as many untimed
/// ones to warm the path; timed from the first create until the watch
/// has seen them all, as the Deployment is.
async fn plain_creates(
    plane: &Plane,
    admin: &kube::Client,
    count: usize,
    in_flight: usize,
) -> anyhow::Result<f64> {
    let namespace = "floor";
    create_namespace(admin, namespace).await?;
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "floor-owner"}}))?;
    let owner = Api::<ConfigMap>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &owner)
        .await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "generateName": "floor-5d8f9c7b6-",
            "labels": {"app": "floor", "pod-template-hash": "5d8f9c7b6"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "floor-owner",
                "uid": owner.metadata.uid.context("the owner's uid")?,
                "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": pod_spec(),
    }))?;
    let api: Api<Pod> = Api::namespaced(plane.client(&Identity::controller_manager()), namespace);
    // The server does not retry a generated name that is taken (upstream's
    // does, up to seven times): with 10,000 names of five characters a few
    // collide, and the ReplicaSet controller creates those pods again on a
    // later sync. The floor creates them again at once.
    let collisions = std::sync::atomic::AtomicUsize::new(0);
    let create = |n: usize| {
        futures::stream::iter((0..n).map(|_| {
            let (api, pod, collisions) = (api.clone(), &pod, &collisions);
            async move {
                loop {
                    match api.create(&PostParams::default(), pod).await {
                        Err(kube::Error::Api(status)) if status.code == 409 => {
                            collisions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        done => return done,
                    }
                }
            }
        }))
        .buffer_unordered(in_flight)
        .collect::<Vec<kube::Result<Pod>>>()
    };
    for result in create(in_flight).await {
        result.context("create a warm-up pod")?;
    }
    let (mut seen, counter) = watch_pods(admin, namespace).await;
    let began = Instant::now();
    for result in create(count).await {
        result.context("create a pod")?;
    }
    seen_all(&mut seen, in_flight + count).await?;
    let elapsed = began.elapsed().as_secs_f64();
    counter.abort();
    eprintln!(
        "floor: {elapsed:.2} s ({} generated names taken, created again)",
        collisions.into_inner()
    );
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
    // Watch first, so no pod is missed.
    let (mut seen, counter) = watch_pods(client, namespace).await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let began = Instant::now();
    api.create(
        &PostParams::default(),
        &deployment("big", count, "registry.local/app:1")?,
    )
    .await?;
    seen_all(&mut seen, count).await?;
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
    std::fs::create_dir_all(&options.work_dir)?;
    let (count, rollout_count) = if options.quick {
        (1_000, 100)
    } else {
        (10_000, 1_000)
    };
    let in_flight = replicaset_creates_in_flight();
    let dir = tempfile::tempdir_in(&options.work_dir)?;
    // No nodes here, and the scheduler would answer each of the pods with
    // a FailedScheduling event and status write: it is measured on its own
    // (`rudder-bench scheduler`).
    let plane = Plane::start(dir.path(), Scheduler::Disabled).await?;
    let admin = plane.admin();
    let https = plane.https().await?;
    let process = std::process::id();

    let started = Instant::now();
    let phase = |what: &str| eprintln!("[{:6.1} s] {what}", started.elapsed().as_secs_f64());
    let floor = plain_creates(&plane, &admin, count, in_flight).await?;
    phase("floor done");
    delete_namespace(&admin, "floor").await?;
    phase("floor namespace deleted");
    let deployed = deploy(&admin, count).await?;
    // Settled: the ReplicaSet's status written, the informers quiet.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (rss, _) = memory_mb(process);
    let idle_for = Duration::from_secs(10);
    let cpu_before = cpu_seconds(process);
    tokio::time::sleep(idle_for).await;
    let idle_cpu = (cpu_seconds(process) - cpu_before) / idle_for.as_secs_f64() * 100.0;
    phase("idle measured");
    delete_namespace(&admin, "deploy").await?;
    phase("deploy namespace deleted");
    let rolled = rollout(&https, rollout_count).await?;
    phase("rollout done");
    let job_s = job(&https, rollout_count, rollout_count / 10).await?;
    phase("job done");
    plane.stop().await;

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
                "what `rudder server --disable-agent --disable-scheduler` runs (release build): the API server (embedded store on {}, its compactor, HTTPS on loopback) and the controller manager on an in-process client, here in the bench's own process, on the same 2 cores as the bench",
                options.work_dir.display()
            ),
            format!(
                "floor: {count} Pods as the ReplicaSet controller makes them (the Deployment's pod, one container with requests; a generated name; a controller reference to an owner that exists) created by plain requests on an in-process client as `system:kube-controller-manager` — the path the controllers' own client takes — {in_flight} in flight at once (the most the ReplicaSet controller has: its slow-start batches of a burst of 500), after {in_flight} untimed ones; a generated name already taken (the server does not retry one, upstream's does; the ReplicaSet controller makes that pod again on a later sync) is created again at once; timed from the first create until a watch of the namespace (in-process) has seen them all"
            ),
            format!(
                "deploy: a {count}-replica Deployment of the same pod, timed from its create until the same watch has seen all {count} pods (no scheduler or node: they stay Pending); both namespaces have their `default` ServiceAccount before the clock starts, so every pod gets its API credentials volume"
            ),
            format!(
                "`controllers_rss_mb`: the process's RSS 5 s after, with those {count} pods — the API server, the controllers and the bench's idle clients; `controllers_idle_cpu_pct`: its CPU (user + system) over the next 10 s, as a share of one core"
            ),
            format!(
                "rollout: a {rollout_count}-replica Deployment (maxSurge and maxUnavailable 25 %) rolled out, then a new image, timed until `observedGeneration`, `updatedReplicas`, `replicas` and `availableReplicas` say complete (what `kubectl rollout status` waits for); the bench plays the nodes, writing each new pod's status Running and Ready as a kubelet would (a watch and a status PATCH per pod, over HTTPS)"
            ),
            format!(
                "job: {rollout_count} completions, parallelism {}, timed from the Job's create until its Complete condition; the bench plays the nodes over HTTPS, each pod Succeeded as soon as it is seen",
                rollout_count / 10
            ),
        ],
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_floor_has_as_many_creates_in_flight_as_the_replicaset_controller_at_most() {
        // A burst of 500: batches 1, 2, 4, … 128 (255 pods), then the 245 left.
        assert_eq!(super::replicaset_creates_in_flight(), 245);
    }
}
