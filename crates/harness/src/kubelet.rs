//! A stand-in for the node agent, until there is one: it plays every node
//! by writing the status a kubelet would once a pod's containers run —
//! `Running`, `Ready` — and by finishing the graceful deletion of pods
//! bound to a node. Controllers that wait for ready pods are tested with
//! it; it runs no containers.

use std::collections::HashSet;
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Running and Ready.
    Ready,
    /// Running, not Ready (its readiness probe fails).
    NotReady,
    /// Its containers exited 0 (a Job's pod).
    Succeeded,
    /// Its containers exited with this (non-zero) code.
    Failed(i32),
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
    let done: Arc<Mutex<HashSet<String>>> = Arc::default();
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
        if pod.metadata.deletion_timestamp.is_some() {
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
        let uid = pod.uid().unwrap_or_default();
        if phase.is_some_and(|p| p != "Pending")
            || done
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&uid)
        {
            continue;
        }
        let Some(outcome) = decide(&pod) else {
            continue;
        };
        done.lock().unwrap_or_else(|e| e.into_inner()).insert(uid);
        let seconds = clock
            .now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let now = rudder_api::time::format_rfc3339(seconds);
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

fn status_for(pod: &Pod, outcome: Outcome, now: &str, ip: &str) -> serde_json::Value {
    let containers: Vec<String> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    let (phase, ready, state) = match outcome {
        Outcome::Ready => ("Running", true, json!({"running": {"startedAt": now}})),
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
