//! A stand-in for the node agent, until there is one: it plays every node
//! by writing the status a kubelet would once a pod's containers run —
//! `Running`, `Ready` — and by finishing the graceful deletion of pods:
//! at once, or, for pods it [holds](Hold), only once the test says their
//! containers stopped (the pod then Failed, as a kubelet reports it).
//! Controllers that wait for ready pods, or for terminating pods to end,
//! are tested with it; it runs no containers.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use rudder_runtime::Timer;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// What the stand-in does to a pod.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Running and Ready.
    Ready,
    /// Running, not Ready (its readiness probe fails).
    NotReady,
    /// Its containers exited 0 (a Job's pod).
    Succeeded,
    /// Its containers exited with this (non-zero) code.
    Failed(i32),
    /// Running and Ready; once deleted, held terminating — its
    /// `deletionTimestamp` set, its phase unchanged, its containers
    /// stopping — until the test fails it through the [`Hold`].
    Held(Hold),
}

/// The pods of [`Outcome::Held`] the stand-in keeps terminating once
/// deleted, and the test's cue to end them: a kubelet stops a deleted
/// pod's containers, reports the pod Failed, and only then finishes its
/// deletion.
#[derive(Debug, Clone, Default)]
pub struct Hold {
    /// "namespace/name" of each pod cued, with its containers' exit code.
    cues: Arc<Mutex<HashMap<String, i32>>>,
    /// Bumped at each cue.
    cued: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Hold {
    pub fn new() -> Self {
        Hold::default()
    }

    /// Ends pod `namespace/name` once it is deleted (at once if it is held
    /// already): its containers exit with `exit_code`, its phase becomes
    /// Failed, then its deletion is finished (with grace 0; finalizers
    /// still keep it).
    pub fn fail(&self, namespace: &str, name: &str, exit_code: i32) {
        self.cues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(format!("{namespace}/{name}"), exit_code);
        self.cued.send_modify(|n| *n += 1);
    }

    /// The exit code pod `key` is to fail with, once cued.
    async fn cue(&self, key: &str) -> i32 {
        let mut cued = self.cued.subscribe();
        loop {
            if let Some(code) = self.cues.lock().unwrap_or_else(|e| e.into_inner()).get(key) {
                return *code;
            }
            if cued.changed().await.is_err() {
                futures::future::pending::<()>().await;
            }
        }
    }
}

/// Which outcome each new pod gets.
pub type Decide = Arc<dyn Fn(&Pod) -> Option<Outcome> + Send + Sync>;

/// Plays the nodes until `stop` fires: every Pending pod gets the
/// status `decide` picks for it (`None`: left Pending), written through
/// `pods/status` as a kubelet writes it, with times from `clock`.
pub async fn play_nodes(
    client: Client,
    clock: Arc<dyn Timer>,
    decide: Decide,
    stop: CancellationToken,
) {
    play_nodes_in(client, None, clock, decide, stop).await
}

/// The same for the pods of one namespace only (`None`: all).
pub async fn play_nodes_in(
    client: Client,
    namespace: Option<&str>,
    clock: Arc<dyn Timer>,
    decide: Decide,
    stop: CancellationToken,
) {
    let pods: Api<Pod> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    // Each pod given an outcome, by uid; the held pods already deleted.
    let mut decided: HashMap<String, Outcome> = HashMap::new();
    let mut held: HashSet<String> = HashSet::new();
    // Each pod an address of its own, as a node's pod CIDR gives out.
    let mut next_ip: u32 = 1;
    let stream = watcher::watcher(pods.clone(), watcher::Config::default());
    futures::pin_mut!(stream);
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            event = stream.next() => event,
        };
        let pod = match event {
            None => return,
            Some(Ok(Event::Apply(pod) | Event::InitApply(pod))) => pod,
            Some(_) => continue,
        };
        let namespace = pod.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let uid = pod.uid().unwrap_or_default();
        if pod.metadata.deletion_timestamp.is_some() {
            if let Some(Outcome::Held(hold)) = decided.get(&uid) {
                // Held until the test's cue: then Failed, then gone.
                if held.insert(uid) {
                    let (hold, clock, stop) = (hold.clone(), clock.clone(), stop.clone());
                    let (key, name) = (format!("{namespace}/{}", pod.name_any()), pod.name_any());
                    tokio::spawn(async move {
                        let code = tokio::select! {
                            _ = stop.cancelled() => return,
                            code = hold.cue(&key) => code,
                        };
                        let now = rfc3339(&*clock);
                        let patch = json!({ "status": failed_status(&pod, code, &now) });
                        if let Err(error) = api
                            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                            .await
                        {
                            eprintln!("stand-in kubelet: failing {name}: {error}");
                        }
                        let _ = api
                            .delete(&name, &DeleteParams::default().grace_period(0))
                            .await;
                    });
                }
                continue;
            }
            // The kubelet has stopped its containers: the pod may go.
            let api = api.clone();
            let name = pod.name_any();
            tokio::spawn(async move {
                let _ = api
                    .delete(&name, &DeleteParams::default().grace_period(0))
                    .await;
            });
            continue;
        }
        // The API server makes every new pod Pending.
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase.is_some_and(|p| p != "Pending") || decided.contains_key(&uid) {
            continue;
        }
        let Some(outcome) = decide(&pod) else {
            continue;
        };
        decided.insert(uid, outcome.clone());
        let now = rfc3339(&*clock);
        let ip = format!("10.42.{}.{}", next_ip / 250, next_ip % 250 + 1);
        next_ip += 1;
        let status = status_for(&pod, outcome, &now, &ip);
        let name = pod.name_any();
        tokio::spawn(async move {
            let patch = json!({ "status": status });
            if let Err(error) = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                eprintln!("stand-in kubelet: status of {name}: {error}");
            }
        });
    }
}

/// The time on `clock`, as the API writes it.
fn rfc3339(clock: &dyn Timer) -> String {
    let seconds = clock
        .now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    rudder_api::time::format_rfc3339(seconds)
}

fn container_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

/// What a kubelet reports of a deleted pod once its containers stopped,
/// exiting with `code`: Failed, not Ready. A strategic merge patch: the
/// pod's other conditions (a `DisruptionTarget`) stay.
fn failed_status(pod: &Pod, code: i32, now: &str) -> serde_json::Value {
    let statuses: Vec<serde_json::Value> = container_names(pod)
        .iter()
        .map(|name| {
            json!({"name": name, "ready": false, "restartCount": 0, "image": "stand-in",
                "imageID": "", "started": false,
                "state": {"terminated": {"exitCode": code, "reason": "Error", "finishedAt": now}}})
        })
        .collect();
    json!({
        "phase": "Failed",
        "conditions": [
            {"type": "ContainersReady", "status": "False", "lastTransitionTime": now},
            {"type": "Ready", "status": "False", "lastTransitionTime": now},
        ],
        "containerStatuses": statuses,
    })
}

fn status_for(pod: &Pod, outcome: Outcome, now: &str, ip: &str) -> serde_json::Value {
    let containers = container_names(pod);
    let (phase, ready, state) = match outcome {
        Outcome::Ready | Outcome::Held(_) => {
            ("Running", true, json!({"running": {"startedAt": now}}))
        }
        Outcome::NotReady => ("Running", false, json!({"running": {"startedAt": now}})),
        Outcome::Succeeded => (
            "Succeeded",
            false,
            json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}),
        ),
        Outcome::Failed(code) => (
            "Failed",
            false,
            json!({"terminated": {"exitCode": code, "reason": "Error", "startedAt": now, "finishedAt": now}}),
        ),
    };
    let flag = |b: bool| if b { "True" } else { "False" };
    let statuses: Vec<serde_json::Value> = containers
        .iter()
        .map(|name| {
            json!({"name": name, "ready": ready, "restartCount": 0, "state": state,
                   "image": "stand-in", "imageID": "", "started": phase == "Running"})
        })
        .collect();
    json!({
        "phase": phase,
        "startTime": now,
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": flag(ready), "lastTransitionTime": now},
            {"type": "Ready", "status": flag(ready), "lastTransitionTime": now},
        ],
        "containerStatuses": statuses,
    })
}

/// Every pod Ready.
pub fn all_ready() -> Decide {
    Arc::new(|_| Some(Outcome::Ready))
}

/// A Job's pods succeed; every other pod becomes Ready.
pub fn jobs_succeed() -> Decide {
    Arc::new(|p| {
        let of_job = p
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("batch.kubernetes.io/job-name"));
        Some(if of_job {
            Outcome::Succeeded
        } else {
            Outcome::Ready
        })
    })
}
