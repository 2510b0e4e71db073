//! What the scheduler's integration tests share: a control plane with a
//! scheduler running on it (stopped when dropped), and Nodes and Pods to
//! create.

// Each test crate uses some of these.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, PostParams};
use rudder_harness::ControlPlane;
use rudder_scheduler::{Options, Scheduler};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A Node of `cpu` cpus (8Gi of memory, 110 pods), Ready.
pub async fn add_node(
    client: &Client,
    name: &str,
    cpu: &str,
    labels: serde_json::Value,
    taints: serde_json::Value,
) {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }))
    .expect("node");
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
}

/// A pod asking for `cpu`, its spec extended by `extra`.
pub fn pod(name: &str, cpu: &str, extra: serde_json::Value) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox:1",
        "resources": {"requests": {"cpu": cpu}}}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("pod")
}

pub fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

/// The message of the `PodScheduled=False` condition the scheduler writes
/// (reason `Unschedulable`) once it tried the pod and no node fit.
pub fn unschedulable_message(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })?
        .message
        .clone()
}

/// The control plane and the scheduler on it.
pub struct Running {
    pub plane: ControlPlane,
    stop: CancellationToken,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A control plane with an unelected scheduler of the default profile.
pub async fn start() -> Running {
    let plane = ControlPlane::start().await;
    let stop = CancellationToken::new();
    let scheduler = Scheduler::new(
        plane.client(&rudder_harness::Identity::scheduler()),
        Options {
            lease: None,
            ..Options::default()
        },
    );
    tokio::spawn(scheduler.run(stop.clone()));
    Running { plane, stop }
}
