//! What the runtime holds of one pod: its sandboxes and every instance of
//! its containers, with the details status needs (upstream's
//! `kubecontainer.PodStatus`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cri::{self, ContainerState, PodSandboxState, Runtime};

use super::config::CONTAINER_KIND_ANNOTATION;

/// One instance (attempt) of a container.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    pub id: String,
    pub sandbox_id: String,
    pub name: String,
    pub attempt: u32,
    pub init: bool,
    pub state: ContainerState,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    pub created_at: Option<SystemTime>,
    pub started_at: Option<SystemTime>,
    pub finished_at: Option<SystemTime>,
    pub image: String,
    pub image_ref: String,
}

impl Instance {
    pub fn running(&self) -> bool {
        self.state == ContainerState::ContainerRunning
    }

    pub fn exited(&self) -> bool {
        self.state == ContainerState::ContainerExited
    }
}

/// One sandbox of the pod.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxInfo {
    pub id: String,
    pub attempt: u32,
    pub ready: bool,
    pub ip: Option<String>,
    pub created_at: i64,
}

/// Everything the runtime has of a pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// Newest first.
    pub sandboxes: Vec<SandboxInfo>,
    /// Newest attempt first for each container name.
    pub instances: Vec<Instance>,
}

impl Observed {
    /// The newest sandbox, when it is ready.
    pub fn ready_sandbox(&self) -> Option<&SandboxInfo> {
        self.sandboxes.first().filter(|s| s.ready)
    }

    /// The instances of container `name`, newest first.
    pub fn of(&self, name: &str) -> impl Iterator<Item = &Instance> {
        self.instances.iter().filter(move |i| i.name == name)
    }

    pub fn latest(&self, name: &str) -> Option<&Instance> {
        self.of(name).next()
    }

    pub fn any_running(&self) -> bool {
        self.instances.iter().any(Instance::running)
    }

    pub fn is_empty(&self) -> bool {
        self.sandboxes.is_empty() && self.instances.is_empty()
    }
}

fn time(nanos: i64) -> Option<SystemTime> {
    (nanos > 0).then(|| UNIX_EPOCH + Duration::from_nanos(nanos as u64))
}

/// Reads the pod's sandboxes and containers from the runtime.
pub async fn observe(runtime: &dyn Runtime, uid: &str) -> cri::Result<Observed> {
    let mut sandboxes = Vec::new();
    for sandbox in runtime.list_pod_sandboxes(Some(uid)).await? {
        let ready = sandbox.state == PodSandboxState::SandboxReady;
        let ip = if ready {
            match runtime.pod_sandbox_status(&sandbox.id).await {
                Ok(status) => status.network.map(|n| n.ip).filter(|ip| !ip.is_empty()),
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        sandboxes.push(SandboxInfo {
            id: sandbox.id,
            attempt: sandbox.attempt,
            ready,
            ip,
            created_at: sandbox.created_at,
        });
    }
    sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));
    let mut instances = Vec::new();
    for container in runtime.list_containers(Some(uid)).await? {
        let status = match runtime.container_status(&container.id).await {
            Ok(status) => status,
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        instances.push(Instance {
            init: container
                .annotations
                .get(CONTAINER_KIND_ANNOTATION)
                .is_some_and(|k| k == "init"),
            id: container.id,
            sandbox_id: container.pod_sandbox_id,
            name: container.name,
            attempt: container.attempt,
            state: container.state,
            exit_code: status.exit_code,
            reason: status.reason,
            message: status.message,
            created_at: time(status.created_at),
            started_at: time(status.started_at),
            finished_at: time(status.finished_at),
            image: status.image.map(|i| i.image).unwrap_or_default(),
            image_ref: container.image_ref,
        });
    }
    instances.sort_by(|a, b| {
        a.name
            .cmp(&b.name)
            .then(b.attempt.cmp(&a.attempt))
            .then(b.created_at.cmp(&a.created_at))
    });
    Ok(Observed {
        sandboxes,
        instances,
    })
}
