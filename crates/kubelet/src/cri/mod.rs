//! The container runtime seam: [`Runtime`] is the part of CRI v1 the agent
//! uses, in CRI's own message types (the kubelet's vocabulary upstream
//! too), implemented over gRPC by [`remote::RemoteRuntime`] and, for tests,
//! by a fake (`crate::testing::FakeRuntime`).

pub mod remote;

/// CRI v1's messages and clients, generated at build time from
/// `proto/api.proto` (cri-api v0.33.0).
#[allow(clippy::all, missing_debug_implementations, rust_2018_idioms)]
pub mod v1 {
    tonic::include_proto!("runtime.v1");
}

use async_trait::async_trait;
pub use v1::{
    ContainerConfig, ContainerFilter, ContainerState, ContainerStatus, ImageSpec, PodSandboxConfig,
    PodSandboxFilter, PodSandboxState, PodSandboxStatus,
};

/// A failed call to the runtime, naming the call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connect to the container runtime at {endpoint}: {source}")]
    Connect {
        endpoint: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("CRI {call}: {status}")]
    Call {
        call: &'static str,
        status: Box<tonic::Status>,
    },
}

impl Error {
    /// Whether the runtime said the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Call { status, .. } if status.code() == tonic::Code::NotFound)
    }
}

/// The label every sandbox and container carries with its pod's uid.
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// The label of a pod's name.
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
/// The label of a pod's namespace.
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
/// The label of a container's name.
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

pub type Result<T> = std::result::Result<T, Error>;

/// A container as the runtime lists it (CRI `Container`, the fields the
/// agent reads).
#[derive(Debug, Clone, PartialEq)]
pub struct Container {
    pub id: String,
    pub pod_sandbox_id: String,
    pub name: String,
    pub attempt: u32,
    pub image_ref: String,
    pub state: ContainerState,
    pub created_at: i64,
    pub labels: std::collections::HashMap<String, String>,
    pub annotations: std::collections::HashMap<String, String>,
}

/// A pod sandbox as the runtime lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sandbox {
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub attempt: u32,
    pub state: PodSandboxState,
    pub created_at: i64,
    pub labels: std::collections::HashMap<String, String>,
}

/// An image the runtime holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Image {
    pub id: String,
    pub names: Vec<String>,
    pub size: u64,
}

/// What an `ExecSync` ran to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecResult {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// The runtime's name and version (CRI `Version`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub runtime_name: String,
    pub runtime_version: String,
    pub runtime_api_version: String,
}

/// What the agent asks of a CRI runtime.
#[async_trait]
pub trait Runtime: Send + Sync + std::fmt::Debug {
    async fn version(&self) -> Result<Version>;

    /// The runtime's conditions (CRI `Status`): upstream's kubelet reads
    /// `RuntimeReady` and `NetworkReady` of them.
    async fn status(&self) -> Result<Vec<v1::RuntimeCondition>>;

    async fn run_pod_sandbox(&self, config: PodSandboxConfig) -> Result<String>;
    async fn stop_pod_sandbox(&self, id: &str) -> Result<()>;
    async fn remove_pod_sandbox(&self, id: &str) -> Result<()>;
    async fn pod_sandbox_status(&self, id: &str) -> Result<PodSandboxStatus>;
    /// Every sandbox, or those of the pod with uid `pod_uid`.
    async fn list_pod_sandboxes(&self, pod_uid: Option<&str>) -> Result<Vec<Sandbox>>;

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> Result<String>;
    async fn start_container(&self, id: &str) -> Result<()>;
    /// Stops a container: SIGTERM (or the image's stop signal), SIGKILL
    /// after `timeout_seconds`.
    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()>;
    async fn remove_container(&self, id: &str) -> Result<()>;
    /// Every container, or those of the pod with uid `pod_uid`.
    async fn list_containers(&self, pod_uid: Option<&str>) -> Result<Vec<Container>>;
    async fn container_status(&self, id: &str) -> Result<ContainerStatus>;
    /// Runs `cmd` in the container and waits for it (at most
    /// `timeout_seconds`): its exit code and output.
    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_seconds: i64,
    ) -> Result<ExecResult>;

    /// Where the runtime serves an interactive exec in a container (CRI
    /// `Exec`): a one-time URL on its streaming server, which speaks the
    /// remote-command protocols itself.
    async fn exec(&self, request: v1::ExecRequest) -> Result<String>;
    /// Where the runtime serves an attach to a container's process (CRI
    /// `Attach`).
    async fn attach(&self, request: v1::AttachRequest) -> Result<String>;
    /// Where the runtime forwards ports into a sandbox's network (CRI
    /// `PortForward`).
    async fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String>;

    /// Makes the runtime reopen a container's log file (after rotation).
    async fn reopen_container_log(&self, id: &str) -> Result<()>;
    /// Every image the runtime has: names (tags and digests) and size.
    async fn list_images(&self) -> Result<Vec<Image>>;
    /// The image's id when the runtime has it.
    async fn image_status(&self, image: &str) -> Result<Option<String>>;
    /// Removes an image (by id or name).
    async fn remove_image(&self, image: &str) -> Result<()>;
    /// The mount point of the file system that holds the runtime's images
    /// (CRI `ImageFsInfo`), when the runtime says.
    async fn image_fs_mountpoint(&self) -> Result<Option<std::path::PathBuf>>;
    /// Pulls an image, with credentials when given; returns its
    /// reference (id).
    async fn pull_image(
        &self,
        image: &str,
        auth: Option<v1::AuthConfig>,
        sandbox_config: PodSandboxConfig,
    ) -> Result<String>;
}
