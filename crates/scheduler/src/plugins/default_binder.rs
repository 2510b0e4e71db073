//! DefaultBinder: binds a pod by creating its `binding` subresource
//! (`POST pods/<name>/binding` with the chosen node as target).

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::framework::{Bind, Plugin, PodInfo, Status};

pub const NAME: &str = "DefaultBinder";

pub struct DefaultBinder {
    client: Client,
}

impl std::fmt::Debug for DefaultBinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefaultBinder").finish_non_exhaustive()
    }
}

impl DefaultBinder {
    pub fn new(client: Client) -> Self {
        DefaultBinder { client }
    }
}

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl Bind for DefaultBinder {
    fn bind<'a>(&'a self, pod: &'a PodInfo, node: &'a str) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            let name = pod.pod.metadata.name.as_deref().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.client.clone(), pod.namespace());
            let binding = json!({
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": pod.namespace(), "uid": pod.pod.metadata.uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            });
            match api
                .create_subresource::<serde_json::Value, serde_json::Value>(
                    "binding",
                    name,
                    &PostParams::default(),
                    &binding,
                )
                .await
            {
                Ok(_) => Status::success(),
                Err(e) => Status::error(format!("binding rejected: {e}")),
            }
        })
    }
}
