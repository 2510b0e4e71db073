//! A fake CRI runtime behind [`Runtime`]: sandboxes and containers kept in
//! memory, every call recorded, and knobs for tests (a container exits
//! with a code, a call fails). Also the runtime of hollow nodes later.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use crate::cri::v1 as cri;
use crate::cri::{
    Container, ContainerState, Error, ExecResult, Image, POD_UID_LABEL, PodSandboxState, Result,
    Runtime, Sandbox, Version,
};

#[derive(Debug, Clone)]
struct FakeContainer {
    listed: Container,
    config: cri::ContainerConfig,
    /// The sandbox's log directory joined with the container's log path,
    /// as containerd reports it.
    log_path: String,
    started_at: i64,
    finished_at: i64,
    exit_code: i32,
    reason: String,
}

#[derive(Debug, Clone)]
struct FakeSandbox {
    listed: Sandbox,
    ip: String,
}

#[derive(Debug, Default)]
struct State {
    sandboxes: HashMap<String, FakeSandbox>,
    containers: HashMap<String, FakeContainer>,
    images: HashMap<String, String>,
    calls: Vec<String>,
    next_id: u64,
    next_ip: u8,
    /// Exit codes `exec_sync` answers with, by the command's first word
    /// (0 when not set).
    exec_codes: HashMap<String, i32>,
    /// What `status` answers instead of both conditions true: conditions,
    /// or `None` for a runtime that does not answer.
    status: Option<Option<Vec<cri::RuntimeCondition>>>,
    /// Where the streaming URLs point (`http://host:port`); nothing by
    /// default.
    streaming: Option<String>,
}

/// An in-memory CRI runtime.
#[derive(Debug, Default)]
pub struct FakeRuntime {
    state: Mutex<State>,
}

fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

fn not_found(call: &'static str, id: &str) -> Error {
    Error::Call {
        call,
        status: Box::new(tonic::Status::not_found(format!("{id} not found"))),
    }
}

impl FakeRuntime {
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes an image present.
    pub fn add_image(&self, image: &str) {
        let id = format!("sha256:{:064x}", self.state().images.len() + 1);
        self.state().images.insert(image.to_string(), id);
    }

    /// Every call so far, as `Name arg`.
    pub fn calls(&self) -> Vec<String> {
        self.state().calls.clone()
    }

    /// Makes a running container exit with `code`.
    pub fn exit(&self, container_id: &str, code: i32) {
        let mut state = self.state();
        if let Some(c) = state.containers.get_mut(container_id)
            && c.listed.state == ContainerState::ContainerRunning
        {
            c.listed.state = ContainerState::ContainerExited;
            c.exit_code = code;
            c.finished_at = now_nanos();
            c.reason = if code == 0 { "Completed" } else { "Error" }.into();
        }
    }

    /// Makes every later `exec_sync` of `command` exit with `code`.
    pub fn set_exec_exit_code(&self, command: &str, code: i32) {
        self.state().exec_codes.insert(command.to_string(), code);
    }

    /// The running containers named `name` (of any pod).
    pub fn running(&self, name: &str) -> Vec<Container> {
        self.state()
            .containers
            .values()
            .filter(|c| c.listed.name == name && c.listed.state == ContainerState::ContainerRunning)
            .map(|c| c.listed.clone())
            .collect()
    }

    /// The config a container was created with.
    pub fn config_of(&self, container_id: &str) -> Option<cri::ContainerConfig> {
        self.state()
            .containers
            .get(container_id)
            .map(|c| c.config.clone())
    }

    /// Makes `status` answer `conditions`, or fail when `None` (a runtime
    /// that is down).
    pub fn set_status(&self, conditions: Option<Vec<cri::RuntimeCondition>>) {
        self.state().status = Some(conditions);
    }

    fn record(&self, call: String) {
        self.state().calls.push(call);
    }

    /// A streaming URL for a running container, as a runtime hands one
    /// out (nothing serves it: the fake has no streaming server).
    fn streaming_url(&self, call: &'static str, id: &str, kind: &str) -> Result<String> {
        let state = self.state();
        let base = state.streaming.as_deref().unwrap_or("http://127.0.0.1:0");
        match state.containers.get(id) {
            Some(c) if c.listed.state == ContainerState::ContainerRunning => {
                Ok(format!("{base}/{kind}/{id}"))
            }
            _ => Err(not_found(call, id)),
        }
    }

    /// Makes the streaming URLs point at `base` (`http://127.0.0.1:port`),
    /// a test's stand-in for the runtime's streaming server.
    pub fn serve_streams_at(&self, base: &str) {
        self.state().streaming = Some(base.to_string());
    }
}

#[async_trait]
impl Runtime for FakeRuntime {
    async fn status(&self) -> Result<Vec<cri::RuntimeCondition>> {
        let ready = |kind: &str| cri::RuntimeCondition {
            r#type: kind.into(),
            status: true,
            ..Default::default()
        };
        match self.state().status.clone() {
            None => Ok(vec![ready("RuntimeReady"), ready("NetworkReady")]),
            Some(Some(conditions)) => Ok(conditions),
            Some(None) => Err(Error::Call {
                call: "Status",
                status: Box::new(tonic::Status::unavailable("the fake runtime is down")),
            }),
        }
    }

    async fn version(&self) -> Result<Version> {
        Ok(Version {
            runtime_name: "fake".into(),
            runtime_version: "0.0.1".into(),
            runtime_api_version: "v1".into(),
        })
    }

    async fn run_pod_sandbox(&self, config: cri::PodSandboxConfig) -> Result<String> {
        let metadata = config.metadata.clone().unwrap_or_default();
        self.record(format!("RunPodSandbox {}", metadata.name));
        let mut state = self.state();
        state.next_id += 1;
        state.next_ip = state.next_ip.wrapping_add(1);
        let id = format!("sandbox-{}", state.next_id);
        let ip = format!("10.42.0.{}", state.next_ip);
        state.sandboxes.insert(
            id.clone(),
            FakeSandbox {
                listed: Sandbox {
                    id: id.clone(),
                    name: metadata.name,
                    namespace: metadata.namespace,
                    uid: metadata.uid,
                    attempt: metadata.attempt,
                    state: PodSandboxState::SandboxReady,
                    created_at: now_nanos(),
                    labels: config.labels,
                },
                ip,
            },
        );
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        self.record(format!("StopPodSandbox {id}"));
        let mut state = self.state();
        let Some(sandbox) = state.sandboxes.get_mut(id) else {
            return Ok(());
        };
        sandbox.listed.state = PodSandboxState::SandboxNotready;
        for c in state.containers.values_mut() {
            if c.listed.pod_sandbox_id == id && c.listed.state == ContainerState::ContainerRunning {
                c.listed.state = ContainerState::ContainerExited;
                c.exit_code = 137;
                c.finished_at = now_nanos();
                c.reason = "Error".into();
            }
        }
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        self.record(format!("RemovePodSandbox {id}"));
        let mut state = self.state();
        state.sandboxes.remove(id);
        state
            .containers
            .retain(|_, c| c.listed.pod_sandbox_id != id);
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus> {
        let state = self.state();
        let sandbox = state
            .sandboxes
            .get(id)
            .ok_or_else(|| not_found("PodSandboxStatus", id))?;
        Ok(cri::PodSandboxStatus {
            id: id.into(),
            state: sandbox.listed.state as i32,
            created_at: sandbox.listed.created_at,
            network: Some(cri::PodSandboxNetworkStatus {
                ip: sandbox.ip.clone(),
                additional_ips: Vec::new(),
            }),
            labels: sandbox.listed.labels.clone(),
            ..Default::default()
        })
    }

    async fn list_pod_sandboxes(&self, pod_uid: Option<&str>) -> Result<Vec<Sandbox>> {
        Ok(self
            .state()
            .sandboxes
            .values()
            .filter(|s| {
                pod_uid.is_none_or(|uid| {
                    s.listed.labels.get(POD_UID_LABEL).map(String::as_str) == Some(uid)
                })
            })
            .map(|s| s.listed.clone())
            .collect())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> Result<String> {
        let log_path = if config.log_path.is_empty() {
            String::new()
        } else {
            format!("{}/{}", sandbox_config.log_directory, config.log_path)
        };
        let metadata = config.metadata.clone().unwrap_or_default();
        self.record(format!("CreateContainer {}", metadata.name));
        let mut state = self.state();
        let image = config.image.clone().unwrap_or_default().image;
        let image_ref = state.images.get(&image).cloned().unwrap_or_default();
        state.next_id += 1;
        let id = format!("container-{}", state.next_id);
        state.containers.insert(
            id.clone(),
            FakeContainer {
                listed: Container {
                    id: id.clone(),
                    pod_sandbox_id: sandbox_id.into(),
                    name: metadata.name,
                    attempt: metadata.attempt,
                    image_ref,
                    state: ContainerState::ContainerCreated,
                    created_at: now_nanos(),
                    labels: config.labels.clone(),
                    annotations: config.annotations.clone(),
                },
                config,
                log_path,
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
                reason: String::new(),
            },
        );
        Ok(id)
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        self.record(format!("StartContainer {id}"));
        let mut state = self.state();
        let c = state
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("StartContainer", id))?;
        c.listed.state = ContainerState::ContainerRunning;
        c.started_at = now_nanos();
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()> {
        self.record(format!("StopContainer {id} {timeout_seconds}"));
        let mut state = self.state();
        if let Some(c) = state.containers.get_mut(id)
            && c.listed.state == ContainerState::ContainerRunning
        {
            c.listed.state = ContainerState::ContainerExited;
            c.exit_code = 143;
            c.finished_at = now_nanos();
            c.reason = "Error".into();
        }
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        self.record(format!("RemoveContainer {id}"));
        self.state().containers.remove(id);
        Ok(())
    }

    async fn list_containers(&self, pod_uid: Option<&str>) -> Result<Vec<Container>> {
        Ok(self
            .state()
            .containers
            .values()
            .filter(|c| {
                pod_uid.is_none_or(|uid| {
                    c.listed.labels.get(POD_UID_LABEL).map(String::as_str) == Some(uid)
                })
            })
            .map(|c| c.listed.clone())
            .collect())
    }

    async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus> {
        let state = self.state();
        let c = state
            .containers
            .get(id)
            .ok_or_else(|| not_found("ContainerStatus", id))?;
        Ok(cri::ContainerStatus {
            id: id.into(),
            metadata: c.config.metadata.clone(),
            state: c.listed.state as i32,
            created_at: c.listed.created_at,
            started_at: c.started_at,
            finished_at: c.finished_at,
            exit_code: c.exit_code,
            image: c.config.image.clone(),
            image_ref: c.listed.image_ref.clone(),
            reason: c.reason.clone(),
            labels: c.listed.labels.clone(),
            annotations: c.listed.annotations.clone(),
            log_path: c.log_path.clone(),
            ..Default::default()
        })
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        _timeout_seconds: i64,
    ) -> Result<ExecResult> {
        let first = cmd.first().cloned().unwrap_or_default();
        self.record(format!("ExecSync {id} {}", cmd.join(" ")));
        let state = self.state();
        match state.containers.get(id) {
            Some(c) if c.listed.state == ContainerState::ContainerRunning => Ok(ExecResult {
                exit_code: state.exec_codes.get(&first).copied().unwrap_or(0),
                ..ExecResult::default()
            }),
            _ => Err(not_found("ExecSync", id)),
        }
    }

    async fn exec(&self, request: crate::cri::v1::ExecRequest) -> Result<String> {
        self.record(format!(
            "Exec {} {}",
            request.container_id,
            request.cmd.join(" ")
        ));
        self.streaming_url("Exec", &request.container_id, "exec")
    }

    async fn attach(&self, request: crate::cri::v1::AttachRequest) -> Result<String> {
        self.record(format!("Attach {}", request.container_id));
        self.streaming_url("Attach", &request.container_id, "attach")
    }

    async fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String> {
        self.record(format!("PortForward {sandbox_id} {ports:?}"));
        if !self.state().sandboxes.contains_key(sandbox_id) {
            return Err(not_found("PortForward", sandbox_id));
        }
        let base = self.state().streaming.clone();
        let base = base.as_deref().unwrap_or("http://127.0.0.1:0");
        Ok(format!("{base}/portforward/{sandbox_id}"))
    }

    async fn reopen_container_log(&self, id: &str) -> Result<()> {
        self.record(format!("ReopenContainerLog {id}"));
        Ok(())
    }

    async fn list_images(&self) -> Result<Vec<Image>> {
        Ok(self
            .state()
            .images
            .iter()
            .map(|(name, id)| Image {
                id: id.clone(),
                names: vec![name.clone()],
                size: 1 << 20,
            })
            .collect())
    }

    async fn image_status(&self, image: &str) -> Result<Option<String>> {
        Ok(self.state().images.get(image).cloned())
    }

    async fn remove_image(&self, image: &str) -> Result<()> {
        self.record(format!("RemoveImage {image}"));
        self.state()
            .images
            .retain(|name, id| name != image && id != image);
        Ok(())
    }

    async fn image_fs_mountpoint(&self) -> Result<Option<std::path::PathBuf>> {
        Ok(None)
    }

    async fn pull_image(
        &self,
        image: &str,
        auth: Option<cri::AuthConfig>,
        _sandbox_config: cri::PodSandboxConfig,
    ) -> Result<String> {
        match auth {
            Some(auth) => self.record(format!("PullImage {image} as {}", auth.username)),
            None => self.record(format!("PullImage {image}")),
        }
        let known = self.state().images.get(image).cloned();
        match known {
            Some(id) => Ok(id),
            None => Err(Error::Call {
                call: "PullImage",
                status: Box::new(tonic::Status::not_found(format!(
                    "pull access denied for {image}"
                ))),
            }),
        }
    }
}
