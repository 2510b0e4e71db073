//! The scheduler's shell (upstream's `scheduler.go` and
//! `schedule_one.go`): informers feed the cache (nodes, bound pods) and
//! the queue (pending pods of its profiles); one loop pops a pod, runs a
//! [cycle](crate::cycle) on a snapshot, assumes the pod on the chosen node
//! and hands the binding to a task of its own, so the next cycle starts at
//! once. What users see is written here: the `PodScheduled` condition,
//! `nominatedNodeName`, and the `Scheduled` / `FailedScheduling` events.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::{Client, ResourceExt};
use rudder_runtime::events::reference_to;
use rudder_runtime::informer::{Store, key_of};
use rudder_runtime::{Change, EventType, Informers, Recorder};
use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cache::Cache;
use crate::cycle::{self, Decision, FitError};
use crate::framework::VolumeListers;
use crate::framework::{Code, CycleState, Listers, PodInfo, Status};
use crate::framework::{PostFilterResult, Snapshot};
use crate::nominator::{Nominator, nominated_node_name};
use crate::profile::Profile;
use crate::queue::{Backoff, Queue};

mod preempt;

/// Bindings in flight at once.
const MAX_BINDINGS: usize = 64;

/// The cache and the queue, behind one lock never held across an await.
struct Shared {
    cache: Cache,
    queue: Queue,
    nominator: Nominator,
}

pub(crate) struct Loop {
    client: Client,
    profiles: HashMap<String, Arc<Profile>>,
    shared: Mutex<Shared>,
    wake: Notify,
    recorder: Recorder,
    pods: Store<Pod>,
    pdbs: Store<PodDisruptionBudget>,
    volumes: Arc<VolumeListers>,
}

fn is_assigned(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn scheduler_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or(crate::profile::DEFAULT_SCHEDULER_NAME)
}

/// Runs the scheduler with `profiles` until `stop` fires.
pub async fn run(
    client: Client,
    profiles: Vec<Profile>,
    identity: &str,
    backoff: Backoff,
    stop: CancellationToken,
) {
    let informers = Informers::new(client.clone(), stop.clone());
    let pods = informers.typed::<Pod>();
    let nodes = informers.typed::<Node>();
    let pdbs = informers.typed::<PodDisruptionBudget>();
    let volumes = Arc::new(VolumeListers::start(&informers).await);
    let (mut pod_changes, mut node_changes) = (pods.subscribe(), nodes.subscribe());
    let clock = rudder_runtime::clock::system();
    let this = Arc::new(Loop {
        recorder: Recorder::new(client.clone(), "default-scheduler", identity, clock),
        client,
        profiles: profiles
            .into_iter()
            .map(|p| (p.scheduler_name.clone(), Arc::new(p)))
            .collect(),
        shared: Mutex::new(Shared {
            cache: Cache::new(),
            queue: Queue::with_backoff(backoff),
            nominator: Nominator::new(),
        }),
        wake: Notify::new(),
        pods: pods.store(),
        pdbs: pdbs.store(),
        volumes,
    });
    pods.wait_synced().await;
    nodes.wait_synced().await;
    pdbs.wait_synced().await;
    let listers = Listers::start(&informers).await;
    this.lock().cache.set_listers(Arc::new(listers));
    this.resync(&nodes.store());
    let watch = {
        let (this, stop, nodes_store) = (this.clone(), stop.clone(), nodes.store());
        async move {
            loop {
                tokio::select! {
                    change = node_changes.next_until(&stop) => match change {
                        None => return,
                        Some(change) => this.node_changed(change, &nodes_store),
                    },
                    change = pod_changes.next_until(&stop) => match change {
                        None => return,
                        Some(change) => this.pod_changed(change, &nodes_store),
                    },
                }
            }
        }
    };
    let events = {
        let (recorder, stop) = (this.recorder.clone(), stop.clone());
        async move { recorder.run(stop).await }
    };
    let schedule = {
        let (this, stop) = (this.clone(), stop.clone());
        async move { this.schedule_loop(stop).await }
    };
    // A claim, volume, class or CSINode changed: waiting pods may fit.
    let volume_events = {
        let (this, stop) = (this.clone(), stop.clone());
        let informers = &informers;
        async move {
            VolumeListers::watch(informers, &stop, || {
                this.lock().queue.move_all(Instant::now());
                this.wake.notify_one();
            })
            .await
        }
    };
    tokio::join!(watch, events, schedule, volume_events);
}

/// Reserve at each plugin in order; on a failure, Unreserve at every one
/// in reverse (upstream's `RunReservePluginsReserve`).
fn reserve(profile: &Profile, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
    for plugin in &profile.reserve {
        let status = plugin.reserve(state, pod, node);
        if !status.is_success() {
            unreserve(profile, state, pod, node);
            return status.by(plugin.name());
        }
    }
    Status::success()
}

fn unreserve(profile: &Profile, state: &mut CycleState, pod: &PodInfo, node: &str) {
    for plugin in profile.reserve.iter().rev() {
        plugin.unreserve(state, pod, node);
    }
}

impl Loop {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn gated(&self, pod: &Pod) -> bool {
        self.profiles.get(scheduler_name(pod)).is_some_and(|p| {
            p.pre_enqueue
                .iter()
                .any(|g| !g.pre_enqueue(pod).is_success())
        })
    }

    fn wants(&self, pod: &Pod) -> bool {
        !is_assigned(pod)
            && !is_terminal(pod)
            && pod.metadata.deletion_timestamp.is_none()
            && self.profiles.contains_key(scheduler_name(pod))
    }

    /// Rebuilds the cache and queue from the informers' stores.
    fn resync(&self, nodes: &Store<Node>) {
        let now = Instant::now();
        let mut shared = self.lock();
        let mut cache = Cache::new();
        let mut nominator = Nominator::new();
        cache.set_listers(shared.cache.listers().clone());
        for node in nodes.list() {
            cache.set_node(node);
        }
        for pod in self.pods.list() {
            if is_assigned(&pod) && !is_terminal(&pod) {
                cache.set_pod(pod);
            } else if self.wants(&pod) {
                let gated = self.gated(&pod);
                let key = key_of(&*pod);
                let node = nominated_node_name(&pod).or(shared.nominator.node_of(&key));
                if let Some(node) = node.map(str::to_string) {
                    nominator.add(Arc::new(PodInfo::new(pod.clone())), &node);
                }
                shared.queue.add(pod.clone(), key, now, gated);
            }
        }
        shared.nominator = nominator;
        shared.cache = cache;
        shared.queue.move_all(now);
        drop(shared);
        self.wake.notify_one();
    }

    fn node_changed(&self, change: Change<Node>, nodes: &Store<Node>) {
        let now = Instant::now();
        match change {
            Change::Applied { new, .. } => {
                let mut shared = self.lock();
                shared.cache.set_node(new);
                shared.queue.move_all(now);
            }
            Change::Deleted(gone) => {
                self.lock().cache.remove_node(&gone.name_any());
            }
            Change::Resync => return self.resync(nodes),
        }
        self.wake.notify_one();
    }

    fn pod_changed(&self, change: Change<Pod>, nodes: &Store<Node>) {
        let now = Instant::now();
        match change {
            Change::Applied { old, new } => {
                let key = key_of(&*new);
                let mut shared = self.lock();
                if !self.wants(&new) || shared.cache.is_assumed(&key) {
                    shared.nominator.remove(&key);
                } else {
                    shared.nominator.update(old.as_deref(), &new, &key);
                }
                if is_assigned(&new) {
                    shared.queue.remove(&key);
                    if is_terminal(&new) {
                        shared.cache.remove_pod(&new);
                        shared.queue.move_all(now);
                    } else {
                        shared.cache.set_pod(new);
                    }
                } else if self.wants(&new) {
                    let gated = self.gated(&new);
                    shared.queue.update(new, &key, now, gated);
                } else {
                    shared.queue.remove(&key);
                }
            }
            Change::Deleted(gone) => {
                let mut shared = self.lock();
                shared.queue.remove(&key_of(&*gone));
                shared.nominator.remove(&key_of(&*gone));
                if is_assigned(&gone) {
                    shared.cache.remove_pod(&gone);
                    shared.queue.move_all(now);
                }
            }
            Change::Resync => return self.resync(nodes),
        }
        self.wake.notify_one();
    }

    async fn schedule_loop(self: Arc<Self>, stop: CancellationToken) {
        let bindings = Arc::new(Semaphore::new(MAX_BINDINGS));
        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut start = 0usize;
        loop {
            while tasks.try_join_next().is_some() {}
            let (next, wait) = {
                let mut shared = self.lock();
                let now = Instant::now();
                shared.cache.expire(now);
                let until = shared.queue.flush(now);
                (shared.queue.pop(), until)
            };
            let Some(queued) = next else {
                let sleep = wait
                    .map(|u| u.saturating_duration_since(Instant::now()))
                    .unwrap_or(Duration::from_secs(1))
                    .min(Duration::from_secs(1));
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = self.wake.notified() => {}
                    () = tokio::time::sleep(sleep) => {}
                }
                continue;
            };
            // The newest version of the pod, if it still wants a node.
            let Some(pod) = self.pods.get(&queued.key).filter(|p| self.wants(p)) else {
                self.lock().queue.done(&queued.key);
                continue;
            };
            let Some(profile) = self.profiles.get(scheduler_name(&pod)).cloned() else {
                self.lock().queue.done(&queued.key);
                continue;
            };
            let info = Arc::new(PodInfo::new(pod.clone()));
            let snapshot = {
                let mut shared = self.lock();
                let nominated = shared.nominator.by_node();
                shared
                    .cache
                    .snapshot()
                    .with_nominated(nominated)
                    .with_volumes(self.volumes.clone())
            };
            let mut state = CycleState::default();
            match cycle::schedule(&profile, &mut state, &info, &snapshot, &mut start) {
                Decision::Fit(chosen) => {
                    // The cache's node list is shared with the snapshot:
                    // let go of it so assuming changes it in place.
                    drop(snapshot);
                    let permit = tokio::select! {
                        () = stop.cancelled() => break,
                        permit = bindings.clone().acquire_owned() => permit,
                    };
                    let Ok(permit) = permit else { break };
                    let reserved = reserve(&profile, &mut state, &info, &chosen.node);
                    if !reserved.is_success() {
                        self.back_off(&queued.key, &pod, &reserved.message());
                        continue;
                    }
                    {
                        let mut shared = self.lock();
                        shared.cache.assume(info.clone(), &chosen.node);
                        shared.nominator.remove(&info.key);
                    }
                    let (this, profile) = (self.clone(), profile.clone());
                    tasks.spawn(async move {
                        this.bind(&profile, state, &info, &chosen.node).await;
                        drop(permit);
                    });
                }
                Decision::NoFit(mut error) => {
                    let preemption = self.post_filter(&profile, &state, &info, snapshot, &error);
                    self.unschedulable(&info, &mut error, preemption).await;
                }
                Decision::Error(message) => {
                    tracing::warn!(pod = %queued.key, %message, "scheduling failed");
                    self.back_off(&queued.key, &pod, &message);
                }
            }
        }
        tasks.shutdown().await;
    }

    /// The binding cycle: PreBind (volumes), Bind (the first binder not
    /// skipping), then the `Scheduled` event; on failure what Reserve held
    /// is freed, the assumption forgotten and the pod backs off.
    async fn bind(&self, profile: &Profile, mut state: CycleState, pod: &PodInfo, node: &str) {
        let mut status = Status::success();
        for plugin in &profile.pre_bind {
            let answer = plugin.pre_bind(&state, pod, node).await;
            if !answer.is_success() && answer.code != Code::Skip {
                status = answer.by(plugin.name());
                break;
            }
        }
        if status.is_success() {
            status = Status::error("no binder");
            for binder in &profile.bind {
                status = binder.bind(pod, node).await;
                if status.code != Code::Skip {
                    break;
                }
            }
        }
        let now = Instant::now();
        let regarding = reference_to(&*pod.pod);
        if status.is_success() {
            {
                let mut shared = self.lock();
                shared.cache.finish_binding(&pod.key, now);
                shared.queue.done(&pod.key);
            }
            self.recorder.event(
                &regarding,
                EventType::Normal,
                "Scheduled",
                "Binding",
                &format!("Successfully assigned {} to {node}", pod.key),
            );
        } else {
            unreserve(profile, &mut state, pod, node);
            {
                let mut shared = self.lock();
                shared.cache.forget(&pod.key);
                shared.queue.backoff(&pod.key, now);
                shared.queue.move_all(now);
            }
            self.wake.notify_one();
            self.recorder.event(
                &regarding,
                EventType::Warning,
                "FailedScheduling",
                "Binding",
                &status.message(),
            );
        }
    }

    /// No node fit: PostFilter (preemption), on the cycle's snapshot with
    /// the PodDisruptionBudgets. A PreFilter's rejection stands for every
    /// node, as upstream.
    fn post_filter(
        &self,
        profile: &Profile,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: Snapshot,
        error: &FitError,
    ) -> Option<(PostFilterResult, Status)> {
        if profile.post_filter.is_empty() {
            return None;
        }
        let pdbs: Vec<Arc<PodDisruptionBudget>> = self.pdbs.list();
        let snapshot = snapshot.with_pdbs(Arc::new(pdbs));
        let every_node;
        let statuses = match &error.pre_filter {
            Some(status) => {
                every_node = snapshot
                    .nodes
                    .iter()
                    .map(|n| (n.name.clone(), status.clone()))
                    .collect();
                &every_node
            }
            None => &error.statuses,
        };
        Some(cycle::run_post_filter(
            profile, state, pod, &snapshot, statuses,
        ))
    }

    /// Then: the victims are evicted and the pod nominated (or its
    /// nomination cleared), and it waits, with its condition and an event
    /// saying why.
    /// An attempt that failed for a reason other than no node fitting:
    /// the pod backs off, with a `FailedScheduling` event saying why.
    fn back_off(&self, key: &str, pod: &Pod, message: &str) {
        self.lock().queue.backoff(key, Instant::now());
        self.recorder.event(
            &reference_to(pod),
            EventType::Warning,
            "FailedScheduling",
            "Scheduling",
            message,
        );
    }

    async fn unschedulable(
        &self,
        pod: &PodInfo,
        error: &mut FitError,
        preemption: Option<(PostFilterResult, Status)>,
    ) {
        let mut nomination = None;
        if let Some((result, status)) = preemption {
            if !status.reasons.is_empty() {
                error.post_filter = Some(status.message());
            }
            nomination = result.nominated_node;
            if status.is_success()
                && let Some(node) = nomination.as_deref().filter(|n| !n.is_empty())
                && let Err(failed) = self.prepare_candidate(pod, node, &result.victims).await
            {
                error.post_filter = Some(format!("preemption: {failed}"));
                nomination = None;
            }
        }
        let message = error.message();
        {
            let mut shared = self.lock();
            match nomination.as_deref() {
                Some("") => shared.nominator.remove(&pod.key),
                Some(node) => shared.nominator.add(Arc::new(pod.clone()), node),
                None => {}
            }
            shared.queue.unschedulable(&pod.key, Instant::now());
        }
        self.recorder.event(
            &reference_to(&*pod.pod),
            EventType::Warning,
            "FailedScheduling",
            "Scheduling",
            &message,
        );
        self.set_condition(pod, &message, nomination.as_deref())
            .await;
    }

    /// Writes `PodScheduled=False` (reason `Unschedulable`) and the
    /// nominated node (`Some("")`: none), unless the pod already says so.
    async fn set_condition(&self, pod: &PodInfo, message: &str, nominated: Option<&str>) {
        let status = pod.pod.status.as_ref();
        let current = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
        let same_condition = current.is_some_and(|c| {
            c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
                && c.message.as_deref() == Some(message)
        });
        let same_nomination = nominated.is_none_or(|n| {
            status
                .and_then(|s| s.nominated_node_name.as_deref())
                .unwrap_or_default()
                == n
        });
        if same_condition && same_nomination {
            return;
        }
        let now = rudder_api::time::format_rfc3339(rudder_api::time::unix_seconds(
            std::time::SystemTime::now(),
        ));
        let transition = match current {
            Some(c) if c.status == "False" => c
                .last_transition_time
                .as_ref()
                .map(|t| serde_json::to_value(t).unwrap_or_default())
                .unwrap_or(json!(now)),
            _ => json!(now),
        };
        let mut patch = json!({"status": {"conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": null,
            "lastTransitionTime": transition,
        }]}});
        match nominated {
            Some("") if !same_nomination => patch["status"]["nominatedNodeName"] = json!(null),
            Some(node) if !node.is_empty() => patch["status"]["nominatedNodeName"] = json!(node),
            _ => {}
        }
        if let Err(error) = self.patch_status(pod, patch).await {
            tracing::debug!(pod = %pod.key, %error, "could not write PodScheduled");
        }
    }
}
