//! The pods bound to this node: one worker per pod (upstream's pod
//! workers), woken by the pod's changes in the API and by the relist of
//! the runtime every second (upstream's generic PLEG — containerd 1.6 has
//! no container events), and a cleanup of whatever the runtime runs for a
//! pod the API no longer has.

pub mod backoff;
pub mod config;
pub mod dns;
pub mod env;
pub mod logs;
pub mod observed;
pub mod plan;
pub mod probe;
pub mod status;
pub mod tokens;
pub mod volumes;
pub mod worker;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use rudder_runtime::{Change, Informers};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cri::POD_UID_LABEL;
pub use worker::Shared;

/// How often the runtime is relisted.
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Handle {
    pod: watch::Sender<Option<Arc<Pod>>>,
    kick: Arc<Notify>,
}

/// What the relist compares: each pod's sandboxes and containers with
/// their states.
type Fingerprints = HashMap<String, BTreeMap<String, i32>>;

async fn relist(shared: &Shared) -> Option<Fingerprints> {
    let (sandboxes, containers) = tokio::join!(
        shared.runtime.list_pod_sandboxes(None),
        shared.runtime.list_containers(None)
    );
    let (sandboxes, containers) = match (sandboxes, containers) {
        (Ok(s), Ok(c)) => (s, c),
        (Err(error), _) | (_, Err(error)) => {
            tracing::debug!(%error, "relist failed");
            return None;
        }
    };
    let mut prints: Fingerprints = HashMap::new();
    for s in sandboxes {
        if let Some(uid) = s.labels.get(POD_UID_LABEL) {
            prints
                .entry(uid.clone())
                .or_default()
                .insert(s.id, s.state as i32);
        }
    }
    for c in containers {
        if let Some(uid) = c.labels.get(POD_UID_LABEL) {
            prints
                .entry(uid.clone())
                .or_default()
                .insert(c.id, c.state as i32);
        }
    }
    Some(prints)
}

/// The hostPorts of the pods that have an IP and are not done.
pub fn host_ports(pods: &[Arc<Pod>]) -> Vec<crate::network::HostPort> {
    let mut ports = Vec::new();
    for pod in pods {
        let spec = pod.spec.clone().unwrap_or_default();
        let status = pod.status.clone().unwrap_or_default();
        let done = matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"));
        let Some(pod_ip) = status.pod_ip.as_deref().and_then(|ip| ip.parse().ok()) else {
            continue;
        };
        if done || spec.host_network.unwrap_or(false) {
            continue;
        }
        for port in spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
        {
            let Some(host_port) = port.host_port.filter(|p| *p > 0) else {
                continue;
            };
            ports.push(crate::network::HostPort {
                protocol: port.protocol.as_deref().unwrap_or("TCP").to_lowercase(),
                host_ip: port
                    .host_ip
                    .as_deref()
                    .and_then(|ip| ip.parse().ok())
                    .filter(|ip: &std::net::Ipv4Addr| !ip.is_unspecified()),
                host_port: host_port as u16,
                pod_ip,
                container_port: port.container_port as u16,
            });
        }
    }
    ports.sort();
    ports
}

/// The field selector of the pods bound to `node`.
pub fn node_fields(node: &str) -> String {
    format!("spec.nodeName={node}")
}

/// Runs the pods of `node` until `stop`.
pub async fn run(shared: Arc<Shared>, informers: &Informers, node: &str, stop: CancellationToken) {
    let informer = informers.typed_with_fields::<Pod>(&node_fields(node));
    let mut changes = informer.subscribe();
    informer.wait_synced().await;
    let store = informer.store();
    let mut workers: HashMap<String, Handle> = HashMap::new();
    let mut tasks: JoinSet<String> = JoinSet::new();

    let dispatch = |pod: Option<Arc<Pod>>,
                    uid: String,
                    workers: &mut HashMap<String, Handle>,
                    tasks: &mut JoinSet<String>| {
        if let Some(handle) = workers.get(&uid) {
            let _ = handle.pod.send(pod);
            return;
        }
        let (tx, rx) = watch::channel(pod);
        let kick = Arc::new(Notify::new());
        tasks.spawn(worker::run(
            shared.clone(),
            uid.clone(),
            rx,
            kick.clone(),
            stop.child_token(),
        ));
        workers.insert(uid, Handle { pod: tx, kick });
    };
    for pod in store.list() {
        let uid = pod.uid().unwrap_or_default();
        dispatch(Some(pod), uid, &mut workers, &mut tasks);
    }

    let mut previous: Fingerprints = HashMap::new();
    let mut tick = tokio::time::interval(RELIST_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            change = changes.next_until(&stop) => match change {
                None => break,
                Some(Change::Applied { new, .. }) => {
                    let uid = new.uid().unwrap_or_default();
                    dispatch(Some(new), uid, &mut workers, &mut tasks);
                }
                Some(Change::Deleted(old)) => {
                    let uid = old.uid().unwrap_or_default();
                    dispatch(None, uid, &mut workers, &mut tasks);
                }
                Some(Change::Resync) => {
                    let pods: HashMap<String, Arc<Pod>> = store.list().into_iter().map(|p| (p.uid().unwrap_or_default(), p)).collect();
                    let gone: Vec<String> = workers.keys().filter(|uid| !pods.contains_key(*uid)).cloned().collect();
                    for uid in gone {
                        dispatch(None, uid, &mut workers, &mut tasks);
                    }
                    for (uid, pod) in pods {
                        dispatch(Some(pod), uid, &mut workers, &mut tasks);
                    }
                }
            },
            _ = tick.tick() => {
                let ports = host_ports(&store.list());
                shared.host_ports.send_if_modified(|current| {
                    let changed = *current != ports;
                    *current = ports;
                    changed
                });
                let Some(prints) = relist(&shared).await else { continue };
                for (uid, print) in &prints {
                    if previous.get(uid) == Some(print) {
                        continue;
                    }
                    match workers.get(uid) {
                        Some(handle) => handle.kick.notify_one(),
                        None => {
                            let known = store.list().iter().any(|p| p.uid().as_deref() == Some(uid.as_str()));
                            if !known {
                                // An orphan: its pod is gone from the API.
                                tracing::info!(%uid, "removing the containers of a pod that no longer exists");
                                dispatch(None, uid.clone(), &mut workers, &mut tasks);
                            }
                        }
                    }
                }
                previous = prints;
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if let Ok(uid) = done {
                    // A pod that came back (same uid) while its worker
                    // ended gets a new worker at its next change.
                    workers.remove(&uid);
                    if let Some(pod) = store.list().into_iter().find(|p| p.uid().as_deref() == Some(uid.as_str())) {
                        dispatch(Some(pod), uid, &mut workers, &mut tasks);
                    }
                }
            }
        }
    }
    drop(workers);
    while tasks.join_next().await.is_some() {}
}
