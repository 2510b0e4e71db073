//! `pods/log` before any node agent is asked: upstream's `PodLogOptions`
//! validation, the container defaulted or refused with upstream's
//! messages (init and ephemeral containers listed too), an unscheduled
//! pod's empty log, the instance the agent would read (waiting to start,
//! no previous instance) and a node that does not exist — every error a
//! `Status` with upstream's code, reason and message.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rudder_apiserver::{Identity, Server, ServerOptions};
use serde_json::json;

/// GET `pods/<pod>/log?<query>`: the body, or the error's (code, reason,
/// message).
async fn log(
    client: &kube::Client,
    pod: &str,
    query: &str,
) -> Result<String, (u16, String, String)> {
    let request = http::Request::get(format!("/api/v1/namespaces/default/pods/{pod}/log?{query}"))
        .body(Vec::new())
        .expect("request");
    client.request_text(request).await.map_err(|e| match e {
        kube::Error::Api(status) => (status.code, status.reason.clone(), status.message.clone()),
        other => panic!("not a Status: {other}"),
    })
}

fn bad(message: &str) -> Result<String, (u16, String, String)> {
    Err((400, "BadRequest".into(), message.into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_log_requests_are_checked_as_upstream_checks_them() {
    let store = rudder_store::testing::embedded().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(ServerOptions::new(dir.path(), store.store.clone(), None))
        .await
        .expect("start");
    let client = server.client(&Identity::admin());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for pod in [
        json!({"metadata": {"name": "two"}, "spec": {
            "initContainers": [{"name": "init", "image": "i"}],
            "containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]}}),
        json!({"metadata": {"name": "one"}, "spec": {"containers": [{"name": "a", "image": "i"}]}}),
    ] {
        let pod: Pod = serde_json::from_value(pod).expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create");
    }

    assert_eq!(
        log(&client, "two", "").await,
        bad("a container name must be specified for pod two, choose one of: [init a b]")
    );
    assert_eq!(
        log(&client, "two", "container=x").await,
        bad("container x is not valid for pod two")
    );
    assert_eq!(
        log(&client, "one", "tailLines=-1").await,
        Err((
            422,
            "Invalid".into(),
            "PodLogOptions \"one\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"
                .into()
        ))
    );
    assert_eq!(
        log(
            &client,
            "one",
            "sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z"
        )
        .await
        .map_err(|e| e.0),
        Err(422)
    );
    assert_eq!(
        log(&client, "missing", "").await.map_err(|e| (e.0, e.2)),
        Err((404, "pods \"missing\" not found".into()))
    );
    // Not scheduled: an empty log, as upstream.
    assert_eq!(
        log(&client, "two", "container=init").await,
        Ok(String::new())
    );

    // Scheduled, its container not started yet: the agent's own words.
    let binding = json!({"apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "one"}, "target": {"kind": "Node", "name": "n1"}});
    let request = http::Request::post("/api/v1/namespaces/default/pods/one/binding")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&binding).expect("json"))
        .expect("request");
    client.request_text(request).await.expect("bind");
    let set_status = |state: serde_json::Value| {
        let pods = pods.clone();
        async move {
            let status = json!({"status": {"containerStatuses": [{"name": "a", "image": "i", "imageID": "",
                "ready": false, "restartCount": 0, "containerID": "containerd://c1", "state": state}]}});
            pods.patch_status("one", &PatchParams::default(), &Patch::Merge(status))
                .await
                .expect("status");
        }
    };
    set_status(json!({"waiting": {"reason": "ContainerCreating"}})).await;
    assert_eq!(
        log(&client, "one", "").await,
        bad("container \"a\" in pod \"one\" is waiting to start: ContainerCreating")
    );
    set_status(json!({"running": {}})).await;
    assert_eq!(
        log(&client, "one", "previous=true").await,
        bad("previous terminated container \"a\" in pod \"one\" not found")
    );
    // Running, on a node that does not exist.
    assert_eq!(
        log(&client, "one", "follow=true")
            .await
            .map_err(|e| (e.0, e.2)),
        Err((404, "nodes \"n1\" not found".into()))
    );
    server.stop().await;
}
