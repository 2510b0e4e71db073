//! Node lifecycle (upstream's `node-lifecycle-controller` and
//! `taint-eviction-controller`), every 5 seconds:
//!
//! - a node whose kubelet stopped reporting — neither its `Ready`
//!   condition's heartbeat nor its `kube-node-lease` Lease renewed within
//!   the grace period (50 s; 60 s for a node that never reported) — gets
//!   its conditions set `Unknown` ("Kubelet stopped posting node status.");
//! - taints follow conditions: `not-ready` / `unreachable` (NoSchedule and
//!   NoExecute), `memory-pressure`, `disk-pressure`, `pid-pressure`,
//!   `network-unavailable`, `unschedulable` (NoSchedule);
//! - pods on a node that is not Ready are marked not Ready;
//! - pods on a node with NoExecute taints they do not tolerate are deleted,
//!   at once or after their `tolerationSeconds` (300 s by default, which
//!   the API server adds to every pod, as upstream's DefaultTolerationSeconds
//!   admission does).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, Taint, Toleration};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use rudder_runtime::events::reference_to;
use rudder_runtime::informer::{NODE_INDEX, index_pods_by_node};
use rudder_runtime::meta::pod;
use rudder_runtime::{EventType, Recorder};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Context;
use crate::deployment::util::time;
use crate::is_status;

/// How often nodes are looked at: the default of `--node-monitor-period`.
pub const MONITOR_PERIOD: Duration = Duration::from_secs(5);
/// How long a node may go without a heartbeat: the default of
/// `--node-monitor-grace-period` (50 s since 1.32).
pub const GRACE_PERIOD: Duration = Duration::from_secs(50);
/// The same for a node that never reported: the default of
/// `--node-startup-grace-period`.
pub const STARTUP_GRACE_PERIOD: Duration = Duration::from_secs(60);

const NOT_READY: &str = "node.kubernetes.io/not-ready";
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// Every taint this controller manages.
const MANAGED: &[&str] = &[
    NOT_READY,
    UNREACHABLE,
    "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/pid-pressure",
    "node.kubernetes.io/network-unavailable",
    "node.kubernetes.io/unschedulable",
];

fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The taints a node's conditions and spec call for (upstream's
/// `nodeConditionToTaintKeyStatusMap` and the NoExecute pass).
pub fn wanted_taints(node: &Node) -> Vec<(&'static str, &'static str)> {
    let mut taints = Vec::new();
    match condition(node, "Ready").map(|c| c.status.as_str()) {
        Some("False") => taints.extend([(NOT_READY, "NoSchedule"), (NOT_READY, "NoExecute")]),
        Some("Unknown") => taints.extend([(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")]),
        _ => {}
    }
    for (type_, key) in [
        ("MemoryPressure", "node.kubernetes.io/memory-pressure"),
        ("DiskPressure", "node.kubernetes.io/disk-pressure"),
        ("PIDPressure", "node.kubernetes.io/pid-pressure"),
        (
            "NetworkUnavailable",
            "node.kubernetes.io/network-unavailable",
        ),
    ] {
        if condition(node, type_).is_some_and(|c| c.status == "True") {
            taints.push((key, "NoSchedule"));
        }
    }
    if node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
    {
        taints.push(("node.kubernetes.io/unschedulable", "NoSchedule"));
    }
    taints
}

/// When a pod on a node with `taints` must go: `None` never (every
/// NoExecute taint tolerated for ever), else the time (taint added +
/// the shortest matching `tolerationSeconds`; an untolerated taint: now).
pub fn eviction_time(
    tolerations: &[Toleration],
    taints: &[Taint],
    now: SystemTime,
) -> Option<SystemTime> {
    let mut due: Option<SystemTime> = None;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        let matching: Vec<&Toleration> = tolerations
            .iter()
            .filter(|t| {
                let effect = t
                    .effect
                    .as_deref()
                    .is_none_or(|e| e.is_empty() || e == "NoExecute");
                let exists = t.operator.as_deref() == Some("Exists");
                let key = match t.key.as_deref() {
                    None | Some("") => exists,
                    Some(k) => k == taint.key,
                };
                effect && key && (exists || t.value == taint.value)
            })
            .collect();
        // Upstream's `getMinTolerationTime`: the shortest of the
        // tolerations that have seconds; for ever only if none has.
        let seconds = matching.iter().filter_map(|t| t.toleration_seconds).min();
        let at = match (matching.is_empty(), seconds) {
            (true, _) => Some(now),
            (false, None) => None,
            (false, Some(seconds)) => {
                let added = taint
                    .time_added
                    .as_ref()
                    .map(|t| SystemTime::from(t.0))
                    .unwrap_or(now);
                Some(added + Duration::from_secs(seconds.max(0) as u64))
            }
        };
        if let Some(at) = at {
            due = Some(due.map_or(at, |d| d.min(at)));
        }
    }
    due
}

/// Runs node lifecycle until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let nodes = ctx.informers.typed::<Node>();
    let pods = ctx.informers.typed::<Pod>();
    let leases = ctx.informers.typed::<Lease>();
    nodes.wait_synced().await;
    pods.wait_synced().await;
    leases.wait_synced().await;
    index_pods_by_node(&pods.store());
    let recorder = Recorder::new(
        ctx.client.clone(),
        "node-controller",
        &ctx.identity,
        ctx.clock.clone(),
    );
    // Per node: the heartbeat last seen, and when (this controller's clock).
    let mut heard: HashMap<String, (Option<SystemTime>, SystemTime)> = HashMap::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            () = ctx.clock.sleep(ctx.options.node_monitor_period) => {}
        }
        let now = ctx.clock.now();
        for node in nodes.store().list() {
            let name = node.name_any();
            let lease = leases.store().get_in(Some("kube-node-lease"), &name);
            let heartbeat = [
                condition(&node, "Ready")
                    .and_then(|c| c.last_heartbeat_time.as_ref())
                    .map(|t| SystemTime::from(t.0)),
                lease.and_then(|l| {
                    l.spec
                        .as_ref()?
                        .renew_time
                        .as_ref()
                        .map(|t| SystemTime::from(t.0))
                }),
            ]
            .into_iter()
            .flatten()
            .max();
            let entry = heard.entry(name.clone()).or_insert((heartbeat, now));
            if entry.0 != heartbeat {
                *entry = (heartbeat, now);
            }
            let grace = if condition(&node, "Ready").is_some() {
                ctx.options.node_monitor_grace_period
            } else {
                ctx.options.node_startup_grace_period
            };
            let silent = now.duration_since(entry.1).unwrap_or_default() > grace;
            let outcome = async {
                if silent && condition(&node, "Ready").is_none_or(|c| c.status != "Unknown") {
                    mark_unknown(&ctx, &node, now).await?;
                }
                retaint(&ctx, &node, now).await?;
                let on_node = pods.store().by_index(NODE_INDEX, &name);
                if condition(&node, "Ready").is_none_or(|c| c.status != "True")
                    && condition(&node, "Ready").is_some()
                {
                    for p in on_node.iter().filter(|p| pod::is_ready(p)) {
                        mark_pod_not_ready(&ctx, p, now).await?;
                    }
                }
                let taints = node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.clone())
                    .unwrap_or_default();
                for p in on_node
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                {
                    let tolerations = p
                        .spec
                        .as_ref()
                        .and_then(|s| s.tolerations.clone())
                        .unwrap_or_default();
                    if eviction_time(&tolerations, &taints, now).is_some_and(|at| at <= now) {
                        recorder.event(
                            &reference_to(&**p),
                            EventType::Normal,
                            "TaintManagerEviction",
                            "Delete",
                            &format!(
                                "Marking for deletion Pod {}/{}",
                                p.namespace().unwrap_or_default(),
                                p.name_any()
                            ),
                        );
                        evict(&ctx, p, now).await?;
                    }
                }
                Ok::<(), kube::Error>(())
            };
            if let Err(error) = outcome.await {
                tracing::info!(node = %name, %error, "node lifecycle pass failed; next period retries");
            }
        }
        heard.retain(|name, _| nodes.store().get(name).is_some());
        tokio::select! {
            _ = stop.cancelled() => return,
            () = recorder.tend() => {}
        }
    }
}

/// Sets the kubelet's conditions Unknown (upstream's
/// `tryUpdateNodeHealth`).
async fn mark_unknown(ctx: &Context, node: &Node, now: SystemTime) -> Result<(), kube::Error> {
    let mut conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    for type_ in ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"] {
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) => {
                if c.status != "Unknown" {
                    c.last_transition_time = Some(time(now));
                }
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some("Kubelet stopped posting node status.".into());
            }
            None => conditions.push(NodeCondition {
                type_: type_.into(),
                status: "Unknown".into(),
                reason: Some("NodeStatusNeverUpdated".into()),
                message: Some("Kubelet never posted node status.".into()),
                last_transition_time: Some(time(now)),
                last_heartbeat_time: None,
            }),
        }
    }
    let patch = json!({"status": {"conditions": conditions}});
    Api::<Node>::all(ctx.client.clone())
        .patch_status(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(|_| ())
}

/// Brings the managed taints in line with the node's conditions; keeps
/// everyone else's.
async fn retaint(ctx: &Context, node: &Node, now: SystemTime) -> Result<(), kube::Error> {
    let current = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let wanted = wanted_taints(node);
    let mut next: Vec<Taint> = current
        .iter()
        .filter(|t| {
            !MANAGED.contains(&t.key.as_str())
                || wanted.contains(&(t.key.as_str(), t.effect.as_str()))
        })
        .cloned()
        .collect();
    for (key, effect) in &wanted {
        if !next.iter().any(|t| t.key == *key && t.effect == *effect) {
            next.push(Taint {
                key: (*key).into(),
                effect: (*effect).into(),
                value: None,
                time_added: (*effect == "NoExecute").then(|| time(now)),
            });
        }
    }
    if next == current {
        return Ok(());
    }
    let patch = json!({"spec": {"taints": next}});
    match Api::<Node>::all(ctx.client.clone())
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) => Err(e),
    }
}

async fn mark_pod_not_ready(ctx: &Context, p: &Pod, now: SystemTime) -> Result<(), kube::Error> {
    let mut conditions = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    for c in conditions.iter_mut().filter(|c| c.type_ == "Ready") {
        c.status = "False".into();
        c.last_transition_time = Some(time(now));
    }
    let patch = json!({"status": {"conditions": conditions}});
    match Api::<Pod>::namespaced(
        ctx.client.clone(),
        p.metadata.namespace.as_deref().unwrap_or_default(),
    )
    .patch_status(
        &p.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Marks `p` as disrupted (so a Job's podFailurePolicy can tell) and
/// deletes it (upstream's `addConditionAndDeletePod`).
async fn evict(ctx: &Context, p: &Pod, now: SystemTime) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(
        ctx.client.clone(),
        p.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let mut conditions = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    conditions.retain(|c| c.type_ != "DisruptionTarget");
    conditions.push(k8s_openapi::api::core::v1::PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        reason: Some("DeletionByTaintManager".into()),
        message: Some("Taint manager: deleting due to NoExecute taint".into()),
        last_transition_time: Some(time(now)),
        ..Default::default()
    });
    let patch = json!({"status": {"conditions": conditions}});
    match api
        .patch_status(
            &p.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {}
        Err(e) if is_status(&e, 404) => return Ok(()),
        Err(e) => return Err(e),
    }
    delete_pod(ctx, p).await
}

async fn delete_pod(ctx: &Context, p: &Pod) -> Result<(), kube::Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: p.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match Api::<Pod>::namespaced(
        ctx.client.clone(),
        p.metadata.namespace.as_deref().unwrap_or_default(),
    )
    .delete(&p.name_any(), &params)
    .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_become_taints() {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}, {"type": "DiskPressure", "status": "True"}]}}))
        .expect("node");
        assert_eq!(
            wanted_taints(&node),
            [
                (UNREACHABLE, "NoSchedule"),
                (UNREACHABLE, "NoExecute"),
                ("node.kubernetes.io/disk-pressure", "NoSchedule"),
                ("node.kubernetes.io/unschedulable", "NoSchedule")
            ]
        );
    }

    #[test]
    fn eviction_waits_for_the_shortest_toleration() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let taint = Taint {
            key: UNREACHABLE.into(),
            effect: "NoExecute".into(),
            value: None,
            time_added: Some(time(t0)),
        };
        let toleration = |seconds: Option<i64>| Toleration {
            key: Some(UNREACHABLE.into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: seconds,
            value: None,
        };
        assert_eq!(
            eviction_time(&[], std::slice::from_ref(&taint), t0),
            Some(t0),
            "not tolerated: now"
        );
        assert_eq!(
            eviction_time(&[toleration(Some(300))], std::slice::from_ref(&taint), t0),
            Some(t0 + Duration::from_secs(300))
        );
        assert_eq!(
            eviction_time(&[toleration(None)], std::slice::from_ref(&taint), t0),
            None,
            "for ever"
        );
        assert_eq!(
            eviction_time(
                &[toleration(None), toleration(Some(300))],
                std::slice::from_ref(&taint),
                t0
            ),
            Some(t0 + Duration::from_secs(300)),
            "the shortest that has seconds wins"
        );
        let no_schedule = Taint {
            effect: "NoSchedule".into(),
            ..taint
        };
        assert_eq!(
            eviction_time(&[], &[no_schedule], t0),
            None,
            "NoSchedule evicts nothing"
        );
    }
}
