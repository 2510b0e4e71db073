//! [`Runtime`] over CRI v1 gRPC on a unix socket (tonic), for any CRI v1
//! runtime: containerd, CRI-O.

use std::time::Duration;

use async_trait::async_trait;
use tonic::transport::{Channel, Endpoint};

use super::v1::image_service_client::ImageServiceClient;
use super::v1::runtime_service_client::RuntimeServiceClient;
use super::v1::{self as cri};
use super::{Container, Error, ExecResult, Image, Result, Runtime, Sandbox, Version};

/// How long one CRI call may take (upstream's `--runtime-request-timeout`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// A CRI runtime reached over gRPC.
#[derive(Debug, Clone)]
pub struct RemoteRuntime {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
}

fn call(call: &'static str) -> impl FnOnce(tonic::Status) -> Error {
    move |status| Error::Call {
        call,
        status: Box::new(status),
    }
}

impl RemoteRuntime {
    /// A client of the runtime at `endpoint` (`unix:///path/to.sock` or a
    /// plain socket path). The connection is made lazily and remade after
    /// the runtime restarts.
    pub fn connect(endpoint: &str) -> Result<Self> {
        let uri = if endpoint.starts_with('/') {
            format!("unix://{endpoint}")
        } else {
            endpoint.to_string()
        };
        let channel = Endpoint::from_shared(uri)
            .map_err(|source| Error::Connect {
                endpoint: endpoint.to_string(),
                source,
            })?
            .connect_timeout(Duration::from_secs(5))
            .timeout(REQUEST_TIMEOUT)
            .connect_lazy();
        Ok(RemoteRuntime {
            runtime: RuntimeServiceClient::new(channel.clone()).max_decoding_message_size(16 << 20),
            images: ImageServiceClient::new(channel).max_decoding_message_size(16 << 20),
        })
    }
}

fn by_uid(uid: &str) -> std::collections::HashMap<String, String> {
    [(super::POD_UID_LABEL.to_string(), uid.to_string())].into()
}

#[async_trait]
impl Runtime for RemoteRuntime {
    async fn status(&self) -> Result<Vec<cri::RuntimeCondition>> {
        let reply = self
            .runtime
            .clone()
            .status(cri::StatusRequest { verbose: false })
            .await
            .map_err(call("Status"))?
            .into_inner();
        Ok(reply.status.map(|s| s.conditions).unwrap_or_default())
    }

    async fn version(&self) -> Result<Version> {
        let reply = self
            .runtime
            .clone()
            .version(cri::VersionRequest {
                version: "v1".into(),
            })
            .await
            .map_err(call("Version"))?
            .into_inner();
        Ok(Version {
            runtime_name: reply.runtime_name,
            runtime_version: reply.runtime_version,
            runtime_api_version: reply.runtime_api_version,
        })
    }

    async fn run_pod_sandbox(&self, config: cri::PodSandboxConfig) -> Result<String> {
        let reply = self
            .runtime
            .clone()
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: String::new(),
            })
            .await
            .map_err(call("RunPodSandbox"))?;
        Ok(reply.into_inner().pod_sandbox_id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await
            .map_err(call("StopPodSandbox"))?;
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await
            .map_err(call("RemovePodSandbox"))?;
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus> {
        let reply = self
            .runtime
            .clone()
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: id.into(),
                verbose: false,
            })
            .await
            .map_err(call("PodSandboxStatus"))?;
        Ok(reply.into_inner().status.unwrap_or_default())
    }

    async fn list_pod_sandboxes(&self, pod_uid: Option<&str>) -> Result<Vec<Sandbox>> {
        let reply = self
            .runtime
            .clone()
            .list_pod_sandbox(cri::ListPodSandboxRequest {
                filter: pod_uid.map(|uid| cri::PodSandboxFilter {
                    label_selector: by_uid(uid),
                    ..Default::default()
                }),
            })
            .await
            .map_err(call("ListPodSandbox"))?;
        Ok(reply
            .into_inner()
            .items
            .into_iter()
            .map(|s| {
                let state = s.state();
                let metadata = s.metadata.unwrap_or_default();
                Sandbox {
                    state,
                    id: s.id,
                    name: metadata.name,
                    namespace: metadata.namespace,
                    uid: metadata.uid,
                    attempt: metadata.attempt,
                    created_at: s.created_at,
                    labels: s.labels,
                }
            })
            .collect())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> Result<String> {
        let reply = self
            .runtime
            .clone()
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.into(),
                config: Some(config),
                sandbox_config: Some(sandbox_config),
            })
            .await
            .map_err(call("CreateContainer"))?;
        Ok(reply.into_inner().container_id)
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .start_container(cri::StartContainerRequest {
                container_id: id.into(),
            })
            .await
            .map_err(call("StartContainer"))?;
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()> {
        let mut request = tonic::Request::new(cri::StopContainerRequest {
            container_id: id.into(),
            timeout: timeout_seconds,
        });
        // The runtime waits out the grace period: give the call that long
        // and the usual timeout on top, as upstream does.
        request.set_timeout(REQUEST_TIMEOUT + Duration::from_secs(timeout_seconds.max(0) as u64));
        self.runtime
            .clone()
            .stop_container(request)
            .await
            .map_err(call("StopContainer"))?;
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .remove_container(cri::RemoveContainerRequest {
                container_id: id.into(),
            })
            .await
            .map_err(call("RemoveContainer"))?;
        Ok(())
    }

    async fn list_containers(&self, pod_uid: Option<&str>) -> Result<Vec<Container>> {
        let reply = self
            .runtime
            .clone()
            .list_containers(cri::ListContainersRequest {
                filter: pod_uid.map(|uid| cri::ContainerFilter {
                    label_selector: by_uid(uid),
                    ..Default::default()
                }),
            })
            .await
            .map_err(call("ListContainers"))?;
        Ok(reply
            .into_inner()
            .containers
            .into_iter()
            .map(|c| {
                let state = c.state();
                let metadata = c.metadata.unwrap_or_default();
                Container {
                    state,
                    id: c.id,
                    pod_sandbox_id: c.pod_sandbox_id,
                    name: metadata.name,
                    attempt: metadata.attempt,
                    image_ref: c.image_ref,
                    created_at: c.created_at,
                    labels: c.labels,
                    annotations: c.annotations,
                }
            })
            .collect())
    }

    async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus> {
        let reply = self
            .runtime
            .clone()
            .container_status(cri::ContainerStatusRequest {
                container_id: id.into(),
                verbose: false,
            })
            .await
            .map_err(call("ContainerStatus"))?;
        Ok(reply.into_inner().status.unwrap_or_default())
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_seconds: i64,
    ) -> Result<ExecResult> {
        let mut request = tonic::Request::new(cri::ExecSyncRequest {
            container_id: id.into(),
            cmd,
            timeout: timeout_seconds,
        });
        request.set_timeout(
            Duration::from_secs(timeout_seconds.max(0) as u64) + Duration::from_secs(10),
        );
        let reply = self
            .runtime
            .clone()
            .exec_sync(request)
            .await
            .map_err(call("ExecSync"))?
            .into_inner();
        Ok(ExecResult {
            exit_code: reply.exit_code,
            stdout: reply.stdout,
            stderr: reply.stderr,
        })
    }

    async fn exec(&self, request: cri::ExecRequest) -> Result<String> {
        let reply = self
            .runtime
            .clone()
            .exec(request)
            .await
            .map_err(call("Exec"))?;
        Ok(reply.into_inner().url)
    }

    async fn attach(&self, request: cri::AttachRequest) -> Result<String> {
        let reply = self
            .runtime
            .clone()
            .attach(request)
            .await
            .map_err(call("Attach"))?;
        Ok(reply.into_inner().url)
    }

    async fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String> {
        let reply = self
            .runtime
            .clone()
            .port_forward(cri::PortForwardRequest {
                pod_sandbox_id: sandbox_id.into(),
                port: ports,
            })
            .await
            .map_err(call("PortForward"))?;
        Ok(reply.into_inner().url)
    }

    async fn reopen_container_log(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .reopen_container_log(cri::ReopenContainerLogRequest {
                container_id: id.into(),
            })
            .await
            .map_err(call("ReopenContainerLog"))?;
        Ok(())
    }

    async fn list_images(&self) -> Result<Vec<Image>> {
        let reply = self
            .images
            .clone()
            .list_images(cri::ListImagesRequest { filter: None })
            .await
            .map_err(call("ListImages"))?;
        Ok(reply
            .into_inner()
            .images
            .into_iter()
            .map(|i| Image {
                id: i.id,
                names: i.repo_digests.into_iter().chain(i.repo_tags).collect(),
                size: i.size,
            })
            .collect())
    }

    async fn image_status(&self, image: &str) -> Result<Option<String>> {
        let reply = self
            .images
            .clone()
            .image_status(cri::ImageStatusRequest {
                image: Some(cri::ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await
            .map_err(call("ImageStatus"))?;
        Ok(reply.into_inner().image.map(|i| i.id))
    }

    async fn remove_image(&self, image: &str) -> Result<()> {
        self.images
            .clone()
            .remove_image(cri::RemoveImageRequest {
                image: Some(cri::ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
            })
            .await
            .map_err(call("RemoveImage"))?;
        Ok(())
    }

    async fn image_fs_mountpoint(&self) -> Result<Option<std::path::PathBuf>> {
        let reply = self
            .images
            .clone()
            .image_fs_info(cri::ImageFsInfoRequest {})
            .await
            .map_err(call("ImageFsInfo"))?
            .into_inner();
        Ok(reply
            .image_filesystems
            .into_iter()
            .filter_map(|fs| fs.fs_id)
            .map(|id| id.mountpoint)
            .find(|mountpoint| !mountpoint.is_empty())
            .map(Into::into))
    }

    async fn pull_image(
        &self,
        image: &str,
        auth: Option<cri::AuthConfig>,
        sandbox_config: cri::PodSandboxConfig,
    ) -> Result<String> {
        let reply = self
            .images
            .clone()
            .pull_image(cri::PullImageRequest {
                image: Some(cri::ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                auth,
                sandbox_config: Some(sandbox_config),
            })
            .await
            .map_err(call("PullImage"))?;
        Ok(reply.into_inner().image_ref)
    }
}
