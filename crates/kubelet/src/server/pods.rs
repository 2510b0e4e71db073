//! `GET /pods` (upstream's kubelet `getPods`): the pods bound to this
//! node, as the agent knows them, encoded as a `v1` `PodList` — what
//! `kubectl get --raw /api/v1/nodes/<node>/proxy/pods` shows.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use super::{Body, Node, text};

/// The node's pods as a `PodList`, in namespace and name order.
pub fn list(node: &Node) -> Response<Body> {
    let mut pods = node.pods.list();
    pods.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    let mut items = Vec::with_capacity(pods.len());
    for pod in pods {
        match serde_json::to_value(pod.as_ref()) {
            Ok(Value::Object(mut item)) => {
                // Items of a list carry no type of their own, as upstream
                // encodes them.
                item.remove("apiVersion");
                item.remove("kind");
                items.push(Value::Object(item));
            }
            Ok(_) => {}
            Err(error) => return text(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
        }
    }
    let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items});
    let mut response = Response::new(Full::new(Bytes::from(list.to_string())).boxed());
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Pod;
    use rudder_runtime::informer::Store;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::server::{DEFAULT_IDLE_TIMEOUT, Streaming};
    use crate::testing::FakeRuntime;

    #[tokio::test]
    async fn the_nodes_pods_are_a_v1_pod_list() {
        let pods: Store<Pod> = Store::new();
        for (namespace, name) in [("web", "b"), ("default", "z"), ("web", "a")] {
            let pod: Pod = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}
            }))
            .expect("pod");
            pods.apply(pod);
        }
        let node = Node {
            pods,
            runtime: Arc::new(FakeRuntime::new()),
            streaming: Streaming {
                idle_timeout: DEFAULT_IDLE_TIMEOUT,
                stop: CancellationToken::new(),
            },
        };
        let response = list(&node);
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()[hyper::header::CONTENT_TYPE],
            "application/json"
        );
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let list: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(
            (&list["kind"], &list["apiVersion"]),
            (&json!("PodList"), &json!("v1"))
        );
        let names: Vec<String> = list["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|p| {
                format!("{}/{}", p["metadata"]["namespace"], p["metadata"]["name"]).replace('"', "")
            })
            .collect();
        assert_eq!(names, ["default/z", "web/a", "web/b"]);
        assert_eq!(list["items"][0].get("kind"), None);
        assert_eq!(list["items"][0]["spec"]["nodeName"], "n1");
    }
}
