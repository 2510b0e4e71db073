//! The pod garbage collector (upstream's `pkg/controller/podgc`), every
//! 20 seconds:
//!
//! - finished pods (Succeeded or Failed) beyond the threshold
//!   (`--terminated-pod-gc-threshold`, 12,500) are deleted, oldest first;
//! - pods bound to a node that no longer exists (missing for a 40-second
//!   quarantine, then checked live) are marked Failed with a
//!   `DisruptionTarget` condition and deleted at once; a node back within
//!   the quarantine keeps its pods;
//! - pods being deleted that never reached a node are deleted at once:
//!   no kubelet will finish them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use rudder_runtime::meta::pod;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Context;
use crate::is_status;

/// How often the collector looks (upstream's `gcCheckPeriod`).
pub const PERIOD: Duration = Duration::from_secs(20);
/// How long a node must stay missing before its pods go
/// (upstream's `quarantineTime`).
pub const QUARANTINE: Duration = Duration::from_secs(40);

/// Runs the pod garbage collector until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let pods = ctx.informers.typed::<Pod>();
    let nodes = ctx.informers.typed::<Node>();
    pods.wait_synced().await;
    nodes.wait_synced().await;
    // When each missing node was first found missing.
    let mut missing_since: HashMap<String, SystemTime> = HashMap::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            () = ctx.clock.sleep(PERIOD) => {}
        }
        let all = pods.store().list();
        if let Err(error) = collect(&ctx, &all, &nodes.store(), &mut missing_since).await {
            tracing::info!(%error, "pod garbage collection failed; trying again next period");
        }
    }
}

/// The finished pods to delete so that at most `threshold` remain, oldest
/// first (`gcTerminated`).
pub fn beyond_threshold(pods: &[Arc<Pod>], threshold: usize) -> Vec<Arc<Pod>> {
    let mut finished: Vec<Arc<Pod>> = pods
        .iter()
        .filter(|p| matches!(pod::phase(p), "Succeeded" | "Failed"))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .cloned()
        .collect();
    let excess = finished.len().saturating_sub(threshold);
    finished.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
    finished.truncate(excess);
    finished
}

async fn force_delete(client: &kube::Client, p: &Pod) -> Result<(), kube::Error> {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: p.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match Api::<Pod>::namespaced(
        client.clone(),
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

async fn collect(
    ctx: &Context,
    pods: &[Arc<Pod>],
    nodes: &rudder_runtime::Store<Node>,
    missing_since: &mut HashMap<String, SystemTime>,
) -> Result<(), kube::Error> {
    let client = &ctx.client;
    let now = ctx.clock.now();
    for p in beyond_threshold(pods, ctx.options.terminated_pod_gc_threshold) {
        force_delete(client, &p).await?;
    }
    // Pods on nodes that are gone.
    let mut seen_missing = std::collections::HashSet::new();
    for p in pods {
        let Some(node) = pod::node(p) else {
            // Unscheduled and being deleted: nothing will finish it.
            if p.metadata.deletion_timestamp.is_some() {
                force_delete(client, p).await?;
            }
            continue;
        };
        if nodes.get(node).is_some() {
            continue;
        }
        seen_missing.insert(node.to_string());
        let since = *missing_since.entry(node.to_string()).or_insert(now);
        if now.duration_since(since).unwrap_or_default() < QUARANTINE {
            continue;
        }
        // The cache may be behind: ask once more.
        if Api::<Node>::all(client.clone())
            .get_opt(node)
            .await?
            .is_some()
        {
            continue;
        }
        if !matches!(pod::phase(p), "Succeeded" | "Failed") {
            let patch = json!({"status": {
                "phase": "Failed",
                "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                    "message": "PodGC: node no longer exists",
                    "lastTransitionTime": crate::deployment::util::time(now)}],
            }});
            match Api::<Pod>::namespaced(
                client.clone(),
                p.metadata.namespace.as_deref().unwrap_or_default(),
            )
            .patch_status(
                &p.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
            {
                Ok(_) => {}
                Err(e) if is_status(&e, 404) => continue,
                Err(e) => return Err(e),
            }
        }
        force_delete(client, p).await?;
    }
    missing_since.retain(|node, _| seen_missing.contains(node));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn finished(name: &str, created: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "creationTimestamp": created}, "status": {"phase": "Succeeded"}}))
                .expect("pod"),
        )
    }

    #[test]
    fn the_oldest_finished_pods_beyond_the_threshold_go() {
        let pods = vec![
            finished("new", "2026-01-03T00:00:00Z"),
            finished("old", "2026-01-01T00:00:00Z"),
            finished("mid", "2026-01-02T00:00:00Z"),
            Arc::new(
                serde_json::from_value(
                    json!({"metadata": {"name": "running"}, "status": {"phase": "Running"}}),
                )
                .expect("pod"),
            ),
        ];
        let doomed: Vec<String> = beyond_threshold(&pods, 1)
            .iter()
            .map(|p| p.name_any())
            .collect();
        assert_eq!(doomed, ["old", "mid"]);
        assert!(beyond_threshold(&pods, 5).is_empty());
    }
}
