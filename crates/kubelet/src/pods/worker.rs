//! One pod's worker (upstream's pod workers): syncs the pod whenever it
//! changes in the API, the relist saw its containers change, or a wait
//! (back-off, retry, resync) ends — observe the runtime, plan, act, report
//! the status — and once the pod is gone, removes what is left of it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Client, ResourceExt};
use rudder_runtime::events::reference_to;
use rudder_runtime::{EventType, Recorder, Timer};
use serde_json::json;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use super::config::{as_container, container_config, join_target_pid_namespace, sandbox_config};
use super::env;
use super::observed::{Observed, observe};
use super::plan::{Kind, Plan, Start, plan, target_id};
use super::probe::{self, Prober};
use super::status::{Extra, generate};
use super::volumes;
use crate::cri::Runtime;
use crate::node::FIELD_MANAGER;

/// How often a worker syncs its pod when nothing happens (upstream: 1 min;
/// the relist wakes it at once when its containers change).
const RESYNC: Duration = Duration::from_secs(30);
/// How soon a failed step is tried again.
const RETRY: Duration = Duration::from_secs(2);

/// What every worker shares.
pub struct Shared {
    pub runtime: Arc<dyn Runtime>,
    pub client: Client,
    pub recorder: Recorder,
    pub clock: Arc<dyn Timer>,
    pub backoff: Mutex<Backoff>,
    /// Where containers' logs go: `<log_root>/<namespace>_<name>_<uid>/`.
    pub log_root: std::path::PathBuf,
    /// Where pods' volumes live: `<pods_dir>/<uid>/volumes/`.
    pub pods_dir: std::path::PathBuf,
    /// Whether Secret, projected and `medium: Memory` volumes are tmpfs
    /// mounts (needs root; tests without root keep them on disk).
    pub memory_volumes: bool,
    pub host_ip: String,
    pub runtime_name: String,
    /// The hostPorts of the running pods, for the agent's nftables rules.
    pub host_ports: tokio::sync::watch::Sender<Vec<crate::network::HostPort>>,
    /// The node's allocatable CPU (millicores) and memory (bytes).
    pub allocatable_cpu_millis: i128,
    pub allocatable_memory: i128,
    /// The projected ServiceAccount tokens of the pods.
    pub tokens: super::tokens::Tokens,
    /// What pods resolve names with.
    pub dns: super::dns::Settings,
    /// The machine: volumes' mounts go through it.
    pub host: Arc<dyn rudder_host::Host>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("runtime", &self.runtime)
            .field("host_ip", &self.host_ip)
            .finish_non_exhaustive()
    }
}

/// A failed step of a sync.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Runtime(#[from] crate::cri::Error),
    #[error("write the pod's status: {0}")]
    Status(#[source] kube::Error),
}

/// The worker's memory between syncs.
#[derive(Debug, Default)]
struct Memory {
    waiting: HashMap<String, (String, String)>,
    start_time: Option<SystemTime>,
    deleted: bool,
    prober: Prober,
    /// When activeDeadlineSeconds runs out.
    deadline: Option<SystemTime>,
    /// Set when the agent failed the pod (DeadlineExceeded).
    failed: Option<(String, String)>,
    /// The pod's volumes' host paths, and when they were last set up.
    volumes: Option<(
        std::collections::BTreeMap<String, std::path::PathBuf>,
        SystemTime,
    )>,
}

/// How often ConfigMap, Secret and downward API volumes are refreshed.
const VOLUME_REFRESH: Duration = Duration::from_secs(20);

/// Runs the worker of the pod with `uid` until the pod is gone and its
/// containers removed, or `stop`.
pub async fn run(
    shared: Arc<Shared>,
    uid: String,
    mut pods: watch::Receiver<Option<Arc<Pod>>>,
    kick: Arc<Notify>,
    stop: CancellationToken,
) -> String {
    let mut memory = Memory::default();
    loop {
        let pod = pods.borrow_and_update().clone();
        let wait = match pod {
            None => match remove_all(&shared, &uid).await {
                Ok(()) => {
                    shared
                        .backoff
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .forget_prefix(&format!("{uid}/"));
                    return uid;
                }
                Err(error) => {
                    tracing::warn!(%uid, %error, "could not remove a deleted pod's containers");
                    RETRY
                }
            },
            Some(pod) => {
                let span = tracing::debug_span!("sync", pod = %format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()));
                let _entered = span.enter();
                match sync(&shared, &pod, &mut memory, &kick).await {
                    Ok(wait) => wait,
                    Err(error) => {
                        tracing::warn!(pod = %pod.name_any(), %error, "pod sync failed");
                        RETRY
                    }
                }
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return uid,
            changed = pods.changed() => {
                if changed.is_err() {
                    // The manager is gone.
                    return uid;
                }
            }
            _ = kick.notified() => {}
            _ = shared.clock.sleep(wait) => {}
        }
    }
}

fn grace_period(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30)
        .max(0)
}

/// Stops every container (with the pod's grace period, in parallel), then
/// every sandbox.
async fn kill(shared: &Shared, pod: &Pod, observed: &Observed) -> Result<(), SyncError> {
    let grace = grace_period(pod);
    let pod_ip = observed.ready_sandbox().and_then(|s| s.ip.clone());
    // The containers first, together; then the sidecars, one by one in
    // the reverse of their order, so they serve the containers to the end.
    let sidecars: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| super::plan::is_sidecar(c))
        .map(|c| c.name.clone())
        .collect();
    let running = observed.instances.iter().filter(|i| i.running());
    let (last, first): (Vec<_>, Vec<_>) = running.partition(|i| sidecars.contains(&i.name));
    let stops = first
        .into_iter()
        .map(|i| stop_container(shared, pod, i, pod_ip.as_deref(), grace, None));
    for result in join_all(stops).await {
        match result {
            Err(e) if !e.is_not_found() => return Err(e.into()),
            _ => {}
        }
    }
    for name in sidecars.iter().rev() {
        for i in last.iter().filter(|i| &i.name == name) {
            match stop_container(shared, pod, i, pod_ip.as_deref(), grace, None).await {
                Err(e) if !e.is_not_found() => return Err(e.into()),
                _ => {}
            }
        }
    }
    for sandbox in observed.sandboxes.iter().filter(|s| s.ready) {
        match shared.runtime.stop_pod_sandbox(&sandbox.id).await {
            Err(e) if !e.is_not_found() => return Err(e.into()),
            _ => {}
        }
    }
    Ok(())
}

/// The spec of a container of the pod (regular or init) by name.
fn spec_of(pod: &Pod, name: &str) -> Option<k8s_openapi::api::core::v1::Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .cloned()
}

/// Stops one container as upstream's `killContainer` does: a Killing
/// event (`message`, or "Stopping container"), its preStop hook within the
/// grace period, then CRI StopContainer with what is left of it (at least
/// 2 s).
async fn stop_container(
    shared: &Shared,
    pod: &Pod,
    instance: &super::observed::Instance,
    pod_ip: Option<&str>,
    grace: i64,
    message: Option<String>,
) -> crate::cri::Result<()> {
    let message = message.unwrap_or_else(|| format!("Stopping container {}", instance.name));
    shared.recorder.event(
        &reference_to(pod),
        EventType::Normal,
        "Killing",
        "Killing",
        &message,
    );
    let mut left = grace;
    let hook = spec_of(pod, &instance.name).and_then(|c| {
        let handler = c.lifecycle.as_ref()?.pre_stop.clone()?;
        Some((c, handler))
    });
    if let Some((container, handler)) = hook
        && grace > 0
    {
        let started = std::time::Instant::now();
        let action = probe::Action::of_hook(&handler);
        let budget = Duration::from_secs(grace as u64);
        if let probe::Outcome::Failure(output) =
            probe::run_action(shared, &container, &instance.id, pod_ip, &action, budget).await
        {
            shared.recorder.event(
                &reference_to(pod),
                EventType::Warning,
                "FailedPreStopHook",
                "FailedPreStopHook",
                &format!("PreStopHook failed: {output}"),
            );
        }
        left = (grace - started.elapsed().as_secs() as i64).max(2);
    }
    shared.runtime.stop_container(&instance.id, left).await
}

/// Removes every container and sandbox of the pod with `uid`.
async fn remove_all(shared: &Shared, uid: &str) -> Result<(), crate::cri::Error> {
    let observed = observe(shared.runtime.as_ref(), uid).await?;
    for i in observed.instances.iter().filter(|i| i.running()) {
        shared
            .runtime
            .stop_container(&i.id, 0)
            .await
            .or_else(ignore_missing)?;
    }
    for i in &observed.instances {
        shared
            .runtime
            .remove_container(&i.id)
            .await
            .or_else(ignore_missing)?;
    }
    for s in &observed.sandboxes {
        shared
            .runtime
            .stop_pod_sandbox(&s.id)
            .await
            .or_else(ignore_missing)?;
        shared
            .runtime
            .remove_pod_sandbox(&s.id)
            .await
            .or_else(ignore_missing)?;
    }
    volumes::teardown(&*shared.host, &shared.pods_dir, uid).await;
    shared.tokens.forget(uid);
    Ok(())
}

fn ignore_missing(e: crate::cri::Error) -> Result<(), crate::cri::Error> {
    if e.is_not_found() { Ok(()) } else { Err(e) }
}

/// Pulls the image when the pull policy says so.
async fn ensure_image(
    shared: &Shared,
    pod: &Pod,
    image: &str,
    policy: &str,
    sandbox: &crate::cri::PodSandboxConfig,
) -> Result<(), (String, String)> {
    let reference = reference_to(pod);
    let present = shared
        .runtime
        .image_status(image)
        .await
        .map_err(|e| ("ErrImagePull".to_string(), e.to_string()))?
        .is_some();
    let pull = match policy {
        "Always" => true,
        "Never" => {
            if present {
                return Ok(());
            }
            return Err((
                "ErrImageNeverPull".into(),
                format!("Container image \"{image}\" is not present with pull policy of Never"),
            ));
        }
        _ => !present,
    };
    if !pull {
        shared.recorder.event(
            &reference,
            EventType::Normal,
            "Pulled",
            "Pulled",
            &format!("Container image \"{image}\" already present on machine"),
        );
        return Ok(());
    }
    shared.recorder.event(
        &reference,
        EventType::Normal,
        "Pulling",
        "Pulling",
        &format!("Pulling image \"{image}\""),
    );
    // ImagePullBackOff: after a failed pull, the next waits 10 s doubling
    // to 5 min (upstream's image back-off, per pod and image).
    let now = shared.clock.now();
    let key = format!("{}/pull/{image}", pod.uid().unwrap_or_default());
    let waiting = shared
        .backoff
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .waiting_since_last(&key, now);
    if waiting.is_some() {
        return Err((
            "ImagePullBackOff".into(),
            format!("Back-off pulling image \"{image}\""),
        ));
    }
    let credentials = pull_credentials(shared, pod, image).await;
    // Each matching credential in turn, then none (upstream's order).
    let mut outcome = Err(crate::cri::Error::Call {
        call: "PullImage",
        status: Box::new(tonic::Status::unknown("no attempt")),
    });
    for auth in credentials.into_iter().map(Some).chain([None]) {
        outcome = shared
            .runtime
            .pull_image(image, auth, sandbox.clone())
            .await;
        if outcome.is_ok() {
            break;
        }
    }
    match outcome {
        Ok(_) => {
            shared.recorder.event(
                &reference,
                EventType::Normal,
                "Pulled",
                "Pulled",
                &format!("Successfully pulled image \"{image}\""),
            );
            Ok(())
        }
        Err(e) => {
            shared
                .backoff
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .next(&key, now);
            let message = format!("Failed to pull image \"{image}\": {e}");
            shared.recorder.event(
                &reference,
                EventType::Warning,
                "Failed",
                "Pulling",
                &message,
            );
            Err(("ErrImagePull".into(), message))
        }
    }
}

/// The credentials the pod's imagePullSecrets hold for `image`, best
/// match first. Missing or unreadable secrets are skipped, as upstream's.
async fn pull_credentials(
    shared: &Shared,
    pod: &Pod,
    image: &str,
) -> Vec<crate::cri::v1::AuthConfig> {
    use k8s_openapi::api::core::v1::Secret;
    let names: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.image_pull_secrets.iter().flatten())
        .map(|r| r.name.clone())
        .collect();
    if names.is_empty() {
        return Vec::new();
    }
    let api: Api<Secret> =
        Api::namespaced(shared.client.clone(), &pod.namespace().unwrap_or_default());
    let mut entries = Vec::new();
    for name in names {
        let Ok(Some(secret)) = api.get_opt(&name).await else {
            tracing::warn!(secret = %name, "an imagePullSecret could not be read");
            continue;
        };
        let data = secret.data.unwrap_or_default();
        for key in [".dockerconfigjson", ".dockercfg"] {
            if let Some(bytes) = data.get(key) {
                entries.extend(crate::images::credentials::entries(&bytes.0));
            }
        }
    }
    crate::images::credentials::for_image(image, &entries)
}

/// Creates and starts one container; on failure, the reason it waits. An
/// ephemeral container joins the process namespace of its target's
/// instance in `observed`.
#[allow(clippy::too_many_arguments)]
async fn start(
    shared: &Shared,
    pod: &Pod,
    observed: &Observed,
    sandbox_id: &str,
    sandbox: &crate::cri::PodSandboxConfig,
    pod_ip: &str,
    volume_paths: &std::collections::BTreeMap<String, std::path::PathBuf>,
    what: &Start,
) -> Result<(), (String, String)> {
    let spec = pod.spec.clone().unwrap_or_default();
    let (container, ephemeral) = match what.kind {
        Kind::Init => (
            spec.init_containers
                .unwrap_or_default()
                .get(what.index)
                .cloned(),
            None,
        ),
        Kind::Regular => (spec.containers.get(what.index).cloned(), None),
        Kind::Ephemeral => {
            let ephemeral = spec
                .ephemeral_containers
                .unwrap_or_default()
                .get(what.index)
                .cloned();
            (ephemeral.as_ref().map(as_container), ephemeral)
        }
    };
    let Some(container) = container.as_ref() else {
        return Ok(());
    };
    let image = container.image.clone().unwrap_or_default();
    let policy = container.image_pull_policy.clone().unwrap_or_else(|| {
        if image.ends_with(":latest") || !image.rsplit('/').next().unwrap_or("").contains(':') {
            "Always".into()
        } else {
            "IfNotPresent".into()
        }
    });
    ensure_image(shared, pod, &image, &policy, sandbox).await?;
    let reference = reference_to(pod);
    // A failed step: a Failed event and the reason the container waits.
    let failed = |reason: &str, action: &str, message: String| {
        shared.recorder.event(
            &reference,
            EventType::Warning,
            "Failed",
            action,
            &format!("Error: {message}"),
        );
        (reason.to_string(), message)
    };
    let config_error =
        |message: String| failed("CreateContainerConfigError", "CreateContainer", message);
    let target = match &ephemeral {
        Some(ephemeral) => target_id(ephemeral, observed).map_err(config_error)?,
        None => None,
    };
    let (config_maps, secrets) = env::referenced(container);
    let sources = env::Sources::fetch(&shared.client, pod, config_maps, secrets)
        .await
        .map_err(|e| config_error(e.to_string()))?;
    let context = env::Context {
        pod_ip: pod_ip.to_string(),
        host_ip: shared.host_ip.clone(),
        allocatable_cpu_millis: shared.allocatable_cpu_millis,
        allocatable_memory: shared.allocatable_memory,
    };
    let envs = env::build(pod, container, &sources, &context).map_err(config_error)?;
    let mut mounts = volumes::mounts(container, volume_paths).map_err(config_error)?;
    if let Some(hosts) = etc_hosts(shared, pod, pod_ip).map_err(config_error)?
        && !mounts.iter().any(|m| m.container_path == "/etc/hosts")
    {
        mounts.push(hosts);
    }
    let init = what.kind == Kind::Init;
    let mut config = container_config(pod, container, what.attempt, init, envs, mounts);
    if let Some(target) = &target {
        join_target_pid_namespace(&mut config, target);
    }
    let id = shared
        .runtime
        .create_container(sandbox_id, config, sandbox.clone())
        .await
        .map_err(|e| failed("CreateContainerError", "CreateContainer", e.to_string()))?;
    shared.recorder.event(
        &reference,
        EventType::Normal,
        "Created",
        "Created",
        &format!("Created container: {}", container.name),
    );
    shared
        .runtime
        .start_container(&id)
        .await
        .map_err(|e| failed("RunContainerError", "StartContainer", e.to_string()))?;
    shared.recorder.event(
        &reference,
        EventType::Normal,
        "Started",
        "Started",
        &format!("Started container {}", container.name),
    );
    if let Some(handler) = container
        .lifecycle
        .as_ref()
        .and_then(|l| l.post_start.as_ref())
    {
        let action = probe::Action::of_hook(handler);
        let outcome = probe::run_action(
            shared,
            container,
            &id,
            Some(pod_ip),
            &action,
            Duration::from_secs(120),
        )
        .await;
        if let probe::Outcome::Failure(output) = outcome {
            let message = format!("PostStartHook failed: {output}");
            shared.recorder.event(
                &reference,
                EventType::Warning,
                "FailedPostStartHook",
                "FailedPostStartHook",
                &message,
            );
            let _ = shared.runtime.stop_container(&id, grace_period(pod)).await;
            return Err(("PostStartHookError".into(), message));
        }
    }
    Ok(())
}

/// The pod's managed `/etc/hosts`, written under its directory afresh
/// for each container start (upstream's `k8s-managed-etc-hosts`), as a
/// mount; none while the pod has no address.
fn etc_hosts(
    shared: &Shared,
    pod: &Pod,
    pod_ip: &str,
) -> Result<Option<crate::cri::v1::Mount>, String> {
    if pod_ip.is_empty() {
        return Ok(None);
    }
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    let node_hosts =
        host_network.then(|| std::fs::read_to_string("/etc/hosts").unwrap_or_default());
    let text = super::dns::hosts_file(
        pod,
        &[pod_ip.to_string()],
        &shared.dns.cluster_domain,
        node_hosts.as_deref(),
    );
    let dir = shared.pods_dir.join(pod.uid().unwrap_or_default());
    let path = dir.join("etc-hosts");
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&path, text))
        .map_err(|e| format!("write {}: {e}", path.display()))?;
    Ok(Some(crate::cri::v1::Mount {
        container_path: "/etc/hosts".into(),
        host_path: path.display().to_string(),
        readonly: false,
        ..Default::default()
    }))
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The pod's IP in sandbox `sandbox_id` (the node's for `hostNetwork`).
async fn pod_ip(
    shared: &Shared,
    pod: &Pod,
    observed: &Observed,
    sandbox_id: &str,
) -> Result<String, SyncError> {
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
    {
        return Ok(shared.host_ip.clone());
    }
    if let Some(s) = observed.ready_sandbox().filter(|s| s.id == sandbox_id) {
        return Ok(s.ip.clone().unwrap_or_default());
    }
    let status = shared.runtime.pod_sandbox_status(sandbox_id).await?;
    Ok(status.network.map(|n| n.ip).unwrap_or_default())
}

/// activeDeadlineSeconds: once the pod has been active that long since
/// its start, it is killed and failed with `DeadlineExceeded` (then this
/// sync is over); before, the time left bounds the next sync's wait.
async fn deadline(
    shared: &Arc<Shared>,
    pod: &Pod,
    observed: &Observed,
    memory: &mut Memory,
    now: SystemTime,
) -> Result<Option<Duration>, SyncError> {
    let Some(seconds) = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds) else {
        return Ok(None);
    };
    if is_terminal(pod) {
        return Ok(None);
    }
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| SystemTime::from(t.0))
        .or(memory.start_time)
        .unwrap_or(now);
    let end = started + Duration::from_secs(seconds.max(0) as u64);
    if now < end {
        memory.deadline = Some(end);
        return Ok(None);
    }
    let message = "Pod was active on the node longer than the specified deadline";
    shared.recorder.event(
        &reference_to(pod),
        EventType::Normal,
        "DeadlineExceeded",
        "DeadlineExceeded",
        message,
    );
    kill(shared, pod, observed).await?;
    memory.failed = Some(("DeadlineExceeded".into(), message.into()));
    let observed = observe(shared.runtime.as_ref(), &pod.uid().unwrap_or_default()).await?;
    report(shared, pod, &observed, memory).await?;
    Ok(Some(RESYNC))
}

/// One sync of the pod; returns how long until the next one at the latest.
async fn sync(
    shared: &Arc<Shared>,
    pod: &Pod,
    memory: &mut Memory,
    kick: &Arc<Notify>,
) -> Result<Duration, SyncError> {
    let uid = pod.uid().unwrap_or_default();
    let now = shared.clock.now();
    memory.start_time.get_or_insert(now);
    let observed = observe(shared.runtime.as_ref(), &uid).await?;
    if let Some(wait) = deadline(shared, pod, &observed, memory, now).await? {
        return Ok(wait);
    }
    let plan: Plan = {
        let mut backoff = shared.backoff.lock().unwrap_or_else(|e| e.into_inner());
        let results = memory.prober.results.clone();
        let unhealthy = |id: &str| probe::unhealthy(id, &results);
        plan(pod, &observed, &unhealthy, &mut backoff, now)
    };
    let mut wait = RESYNC;
    memory.waiting.clear();
    if plan.kill_pod {
        kill(shared, pod, &observed).await?;
    }
    for id in &plan.kill_containers {
        let Some(instance) = observed.instances.iter().find(|i| &i.id == id) else {
            continue;
        };
        let message = format!(
            "Container {} failed liveness probe, will be restarted",
            instance.name
        );
        let pod_ip = observed.ready_sandbox().and_then(|s| s.ip.clone());
        stop_container(
            shared,
            pod,
            instance,
            pod_ip.as_deref(),
            grace_period(pod),
            Some(message),
        )
        .await
        .or_else(ignore_missing)?;
    }
    // Volumes before anything starts, and refreshed now and then so that
    // ConfigMaps and Secrets change in place.
    let starting = plan.create_sandbox.is_some() || !plan.start.is_empty();
    let refresh = memory
        .volumes
        .as_ref()
        .is_none_or(|(_, at)| now.duration_since(*at).unwrap_or_default() >= VOLUME_REFRESH);
    let mut plan = plan;
    if (starting || (refresh && observed.any_running()))
        && pod.metadata.deletion_timestamp.is_none()
    {
        let context = env::Context {
            pod_ip: observed
                .ready_sandbox()
                .and_then(|s| s.ip.clone())
                .unwrap_or_default(),
            host_ip: shared.host_ip.clone(),
            allocatable_cpu_millis: shared.allocatable_cpu_millis,
            allocatable_memory: shared.allocatable_memory,
        };
        let root = volumes::Root {
            dir: &shared.pods_dir,
            tmpfs: shared.memory_volumes,
            tokens: &shared.tokens,
            host: &*shared.host,
        };
        match volumes::setup(&shared.client, root, pod, &context).await {
            Ok(paths) => memory.volumes = Some((paths, now)),
            Err(message) => {
                shared.recorder.event(
                    &reference_to(pod),
                    EventType::Warning,
                    "FailedMount",
                    "FailedMount",
                    &format!("MountVolume.SetUp failed: {message}"),
                );
                // Nothing starts without its volumes.
                plan.create_sandbox = None;
                plan.start.clear();
                wait = RETRY.max(Duration::from_secs(5));
            }
        }
    }
    let volume_paths = memory
        .volumes
        .as_ref()
        .map(|(p, _)| p.clone())
        .unwrap_or_default();
    let mut sandbox_id = observed.ready_sandbox().map(|s| s.id.clone());
    let attempt = plan
        .create_sandbox
        .or(observed.sandboxes.first().map(|s| s.attempt))
        .unwrap_or(0);
    let sandbox = sandbox_config(pod, attempt, &shared.log_root, &shared.dns);
    if plan.create_sandbox.is_some() {
        for warning in super::dns::dns_config(pod, &shared.dns).1 {
            shared.recorder.event(
                &reference_to(pod),
                EventType::Warning,
                "DNSConfigForming",
                "DNSConfigForming",
                &warning,
            );
        }
        match shared.runtime.run_pod_sandbox(sandbox.clone()).await {
            Ok(id) => sandbox_id = Some(id),
            Err(e) => {
                // In the agent's log too, as upstream's kubelet logs it: the
                // event alone is invisible to whoever reads only the log.
                tracing::warn!(pod = %pod.name_any(), error = %e, "could not create the pod sandbox");
                let message = format!("Failed to create pod sandbox: {e}");
                shared.recorder.event(
                    &reference_to(pod),
                    EventType::Warning,
                    "FailedCreatePodSandBox",
                    "FailedCreatePodSandBox",
                    &message,
                );
                sandbox_id = None;
                wait = RETRY;
            }
        }
    }
    if let Some(sandbox_id) = sandbox_id.as_ref().filter(|_| !plan.start.is_empty()) {
        let pod_ip = pod_ip(shared, pod, &observed, sandbox_id).await?;
        let starts = plan.start.iter().map(|s| {
            start(
                shared,
                pod,
                &observed,
                sandbox_id,
                &sandbox,
                &pod_ip,
                &volume_paths,
                s,
            )
        });
        for (what, result) in plan.start.iter().zip(join_all(starts).await) {
            if let Err((reason, message)) = result {
                memory.waiting.insert(what.name.clone(), (reason, message));
                wait = RETRY.max(Duration::from_secs(5));
            }
        }
    }
    for waiting in &plan.waiting {
        memory.waiting.insert(
            waiting.name.clone(),
            (waiting.reason.clone(), waiting.message.clone()),
        );
        shared.recorder.event(
            &reference_to(pod),
            EventType::Warning,
            "BackOff",
            "BackOff",
            &format!(
                "Back-off restarting failed container {} in pod {}_{}({uid})",
                waiting.name,
                pod.name_any(),
                pod.namespace().unwrap_or_default()
            ),
        );
        if let Some(until) = waiting.until {
            wait =
                wait.min(until.duration_since(now).unwrap_or_default() + Duration::from_millis(50));
        }
    }
    for id in &plan.remove {
        shared
            .runtime
            .remove_container(id)
            .await
            .or_else(ignore_missing)?;
    }

    let changed = plan.kill_pod
        || plan.create_sandbox.is_some()
        || !plan.start.is_empty()
        || !plan.remove.is_empty();
    let observed = if changed {
        observe(shared.runtime.as_ref(), &uid).await?
    } else {
        observed
    };
    memory.prober.sync(shared, pod, &observed, kick);
    if !is_terminal(pod) || !observed.is_empty() {
        report(shared, pod, &observed, memory).await?;
    }
    if pod.metadata.deletion_timestamp.is_some() && !observed.any_running() && !memory.deleted {
        // Everything stopped: the final delete, as upstream's status
        // manager does it (grace 0, on this pod's uid only).
        let api: Api<Pod> =
            Api::namespaced(shared.client.clone(), &pod.namespace().unwrap_or_default());
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&pod.name_any(), &params).await {
            Ok(_) => memory.deleted = true,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => memory.deleted = true,
            Err(e) => return Err(SyncError::Status(e)),
        }
    }
    if let Some(end) = memory.deadline {
        wait = wait.min(end.duration_since(now).unwrap_or_default() + Duration::from_millis(50));
    }
    Ok(wait)
}

/// Writes the pod's status when it differs from what the API has.
async fn report(
    shared: &Shared,
    pod: &Pod,
    observed: &Observed,
    memory: &Memory,
) -> Result<(), SyncError> {
    let results = &memory.prober.results;
    let probed = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter_map(|c| {
            let id = &observed.latest(&c.name).filter(|i| i.running())?.id;
            Some((c.name.clone(), probe::started_and_ready(c, id, results)))
        })
        .collect();
    let extra = Extra {
        failed: memory.failed.clone(),
        probed,
        waiting: memory.waiting.clone(),
        host_ip: shared.host_ip.clone(),
        runtime_name: shared.runtime_name.clone(),
        start_time: memory.start_time,
    };
    let status = generate(pod, observed, &extra, shared.clock.now());
    if pod.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<Pod> =
        Api::namespaced(shared.client.clone(), &pod.namespace().unwrap_or_default());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let patch = json!({"metadata": {"uid": pod.uid()}, "status": status});
    match api
        .patch_status(&pod.name_any(), &params, &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        // Gone, or replaced by a pod of the same name.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(SyncError::Status(e)),
    }
}
