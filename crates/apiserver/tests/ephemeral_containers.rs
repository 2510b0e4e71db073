//! `pods/<name>/ephemeralcontainers`, as kube-rs and kubectl debug use it:
//! GET answers the Pod; PUT and every kind of patch change its ephemeral
//! containers and nothing else; what upstream refuses is refused with its
//! words (an existing ephemeral container changed or removed, fields an
//! ephemeral container may not set, a name taken, a target that is no
//! container, a static pod); the main resource adds none, neither at
//! create nor at update.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rudder_apiserver::{Identity, Server, ServerOptions};
use serde_json::{Value, json};

async fn plane() -> (Server, rudder_store::testing::TestStore, tempfile::TempDir) {
    let store = rudder_store::testing::embedded().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(ServerOptions::new(dir.path(), store.store.clone(), None))
        .await
        .expect("start");
    (server, store, dir)
}

async fn create(pods: &Api<Pod>, pod: Value) -> Pod {
    let pod: Pod = serde_json::from_value(pod).expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create")
}

fn web() -> Value {
    json!({
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx:1"}],
                 "initContainers": [{"name": "setup", "image": "busybox:1"}]}
    })
}

/// What kubectl debug -it --image=busybox --target=app sends: a strategic
/// merge patch of the Pod computed against the one it read.
fn kubectl_debug_patch(name: &str) -> Value {
    json!({"spec": {
        "$setElementOrder/ephemeralContainers": [{"name": name}],
        "ephemeralContainers": [{
            "name": name, "image": "busybox", "targetContainerName": "app",
            "stdin": true, "tty": true, "terminationMessagePolicy": "File",
            "resources": {}, "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}}
        }]
    }})
}

fn json_patch(ops: Value) -> Patch<()> {
    Patch::Json(serde_json::from_value(ops).expect("json patch"))
}

fn names(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.ephemeral_containers.iter().flatten())
        .map(|c| c.name.clone())
        .collect()
}

/// The 422 a call was refused with.
fn invalid(result: kube::Result<Pod>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
            *status
        }
        other => panic!("expected a 422, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_containers_are_added_through_their_subresource_alone() {
    let (server, _store, _dir) = plane().await;
    let client = server.client(&Identity::admin());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let created = create(&pods, web()).await;

    // GET: the Pod.
    let got = pods.get_ephemeral_containers("web").await.expect("get");
    assert_eq!(got.metadata.uid, created.metadata.uid);
    assert!(names(&got).is_empty());

    // Strategic merge, as kubectl debug: the container is added and
    // defaulted; what else the patch says is dropped.
    let mut patch = kubectl_debug_patch("debugger-abcde");
    patch["metadata"] = json!({"labels": {"app": "other"}});
    patch["spec"]["containers"] = json!([{"name": "app", "image": "nginx:2"}]);
    let pod = pods
        .patch_ephemeral_containers("web", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .expect("strategic merge patch");
    assert_eq!(names(&pod), ["debugger-abcde"]);
    let spec = pod.spec.clone().expect("spec");
    let debug = &spec.ephemeral_containers.as_ref().expect("ephemeral")[0];
    assert_eq!(debug.target_container_name.as_deref(), Some("app"));
    assert_eq!(debug.image_pull_policy.as_deref(), Some("Always"));
    assert_eq!(
        debug.termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );
    assert_eq!(spec.containers[0].image.as_deref(), Some("nginx:1"));
    assert_eq!(pod.metadata.labels, created.metadata.labels);
    let generation = pod.metadata.generation.expect("generation");
    assert_eq!(generation, created.metadata.generation.expect("gen") + 1);
    let managed = pod.metadata.managed_fields.clone().unwrap_or_default();
    assert!(
        managed
            .iter()
            .any(|m| m.subresource.as_deref() == Some("ephemeralcontainers")),
        "{managed:?}"
    );

    // JSON merge patch: the whole list, the existing one as it is.
    let mut list = serde_json::to_value(&spec.ephemeral_containers).expect("json");
    list.as_array_mut()
        .expect("list")
        .push(json!({"name": "merge", "image": "busybox:1"}));
    let pod = pods
        .patch_ephemeral_containers(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ephemeralContainers": list}})),
        )
        .await
        .expect("merge patch");
    assert_eq!(names(&pod), ["debugger-abcde", "merge"]);

    // JSON patch.
    let add = json_patch(json!([{
        "op": "add", "path": "/spec/ephemeralContainers/-",
        "value": {"name": "json", "image": "busybox:1", "targetContainerName": "setup"}
    }]));
    let pod = pods
        .patch_ephemeral_containers("web", &PatchParams::default(), &add)
        .await
        .expect("json patch");
    assert_eq!(names(&pod), ["debugger-abcde", "merge", "json"]);

    // PUT of the Pod read from the subresource, one more container added.
    let mut put = pods.get_ephemeral_containers("web").await.expect("get");
    let spec = put.spec.as_mut().expect("spec");
    spec.ephemeral_containers
        .get_or_insert_with(Vec::new)
        .push(serde_json::from_value(json!({"name": "put", "image": "busybox:1"})).expect("ec"));
    spec.containers[0].image = Some("nginx:3".into());
    let pod = pods
        .replace_ephemeral_containers("web", &PostParams::default(), &put)
        .await
        .expect("put");
    assert_eq!(names(&pod), ["debugger-abcde", "merge", "json", "put"]);
    let spec = pod.spec.clone().expect("spec");
    assert_eq!(spec.containers[0].image.as_deref(), Some("nginx:1"));
    let read = pods.get("web").await.expect("get");
    assert_eq!(names(&read), names(&pod));

    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_upstream_refuses_is_refused_with_its_words() {
    let (server, _store, _dir) = plane().await;
    let client = server.client(&Identity::admin());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create(&pods, web()).await;
    let params = PatchParams::default();
    pods.patch_ephemeral_containers(
        "web",
        &params,
        &Patch::Strategic(kubectl_debug_patch("dbg")),
    )
    .await
    .expect("add");

    // Changed, removed.
    let changed = invalid(
        pods.patch_ephemeral_containers(
            "web",
            &params,
            &json_patch(json!([{"op": "replace", "path": "/spec/ephemeralContainers/0/image", "value": "busybox:2"}])),
        )
        .await,
    );
    assert_eq!(
        changed.message,
        "Pod \"web\" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers \"dbg\" may not be changed\n"
    );
    let removed = invalid(
        pods.patch_ephemeral_containers(
            "web",
            &params,
            &json_patch(json!([{"op": "remove", "path": "/spec/ephemeralContainers/0"}])),
        )
        .await,
    );
    assert_eq!(
        removed.message,
        "Pod \"web\" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers \"dbg\" may not be removed\n"
    );

    // Fields an ephemeral container may not set; a name taken; a target
    // that is not a container. (A strategic merge patch without
    // `$setElementOrder` puts what it adds first, as upstream's.)
    let add = |container: Value| {
        let pods = pods.clone();
        async move {
            let patch = json!({"spec": {"ephemeralContainers": [container]}});
            pods.patch_ephemeral_containers(
                "web",
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
        }
    };
    let fields = invalid(
        add(json!({"name": "bad", "image": "busybox",
                   "ports": [{"containerPort": 80}],
                   "resources": {"limits": {"cpu": "1"}},
                   "readinessProbe": {"exec": {"command": ["true"]}},
                   "lifecycle": {"postStart": {"exec": {"command": ["true"]}}}}))
        .await,
    );
    let causes: Vec<(String, String)> = fields
        .details
        .expect("details")
        .causes
        .into_iter()
        .map(|c| (c.field, c.message))
        .collect();
    let forbidden = "Forbidden: cannot be set for an Ephemeral Container".to_string();
    let at = |field: &str| format!("spec.ephemeralContainers[0].{field}");
    assert_eq!(
        causes,
        [
            (at("ports"), forbidden.clone()),
            (at("resources"), forbidden.clone()),
            (at("readinessProbe"), forbidden.clone()),
            (at("lifecycle"), forbidden.clone()),
        ]
    );
    let taken = invalid(add(json!({"name": "setup", "image": "busybox"})).await);
    assert_eq!(
        taken.message,
        "Pod \"web\" is invalid: spec.ephemeralContainers[0].name: Duplicate value: \"setup\""
    );
    let stray = invalid(
        add(json!({"name": "stray", "image": "busybox", "targetContainerName": "dbg"})).await,
    );
    assert_eq!(
        stray.message,
        "Pod \"web\" is invalid: spec.ephemeralContainers[0].targetContainerName: Not found: \"dbg\""
    );

    // A static pod's mirror.
    let mut mirror = web();
    mirror["metadata"]["name"] = json!("mirror");
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "abc"});
    mirror["spec"]["nodeName"] = json!("n1");
    create(&pods, mirror).await;
    let refused = invalid(
        pods.patch_ephemeral_containers(
            "mirror",
            &params,
            &Patch::Strategic(kubectl_debug_patch("dbg")),
        )
        .await,
    );
    assert_eq!(
        refused.message,
        "Pod \"mirror\" is invalid: []: Forbidden: static pods do not support ephemeral containers"
    );

    // Nothing was written by any of these.
    let pod = pods.get("web").await.expect("get");
    assert_eq!(names(&pod), ["dbg"]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_main_resource_neither_creates_nor_changes_them() {
    let (server, _store, _dir) = plane().await;
    let client = server.client(&Identity::admin());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    let mut with = web();
    with["spec"]["ephemeralContainers"] = json!([{"name": "dbg", "image": "busybox"}]);
    let pod: Pod = serde_json::from_value(with).expect("pod");
    let refused = invalid(pods.create(&PostParams::default(), &pod).await);
    assert_eq!(
        refused.message,
        "Pod \"web\" is invalid: spec.ephemeralContainers: Forbidden: cannot be set on create"
    );

    create(&pods, web()).await;
    let patch = json!({"spec": {"ephemeralContainers": [{"name": "dbg", "image": "busybox"}]}});
    let refused = invalid(
        pods.patch("web", &PatchParams::default(), &Patch::Strategic(&patch))
            .await,
    );
    let expected = "Pod \"web\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`";
    assert!(refused.message.starts_with(expected), "{}", refused.message);

    // Added through the subresource, then dropped by a PUT of the main
    // resource: refused too.
    let pod = pods
        .patch_ephemeral_containers("web", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .expect("add");
    let mut dropped = pod.clone();
    dropped.spec.as_mut().expect("spec").ephemeral_containers = None;
    let refused = invalid(pods.replace("web", &PostParams::default(), &dropped).await);
    assert!(refused.message.starts_with(expected), "{}", refused.message);
    // While an update that leaves them be goes through.
    let mut relabeled = pod;
    relabeled
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("tier".into(), "front".into());
    let pod = pods
        .replace("web", &PostParams::default(), &relabeled)
        .await
        .expect("relabel");
    assert_eq!(names(&pod), ["dbg"]);
    server.stop().await;
}
