//! Deletion as upstream's registry store does it, through an in-process
//! client: finalizers and graceful deletion, the garbage collector's
//! finalizers from propagation policies, what a delete answers, namespace
//! termination, and a terminating CustomResourceDefinition's objects.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use rudder_apiserver::{Identity, Server, ServerOptions};
use serde_json::json;

struct Plane {
    _server: Server,
    _dir: tempfile::TempDir,
    _store: rudder_store::testing::TestStore,
}

async fn plane() -> (Plane, kube::Client) {
    let store = rudder_store::testing::embedded().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(ServerOptions::new(dir.path(), store.store.clone(), None))
        .await
        .expect("start");
    let client = server.client(&Identity::admin());
    (
        Plane {
            _server: server,
            _dir: dir,
            _store: store,
        },
        client,
    )
}

fn api_error<T: std::fmt::Debug>(result: kube::Result<T>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn config_map(api: &Api<ConfigMap>, name: &str, finalizers: &[&str]) -> ConfigMap {
    let object: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "finalizers": finalizers}
    }))
    .expect("config map");
    api.create(&PostParams::default(), &object)
        .await
        .expect("create")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_hold_an_object_and_a_repeated_delete_writes_nothing() {
    let (_plane, client) = plane().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    config_map(&api, "held", &["example.com/hold"]).await;
    let first = api
        .delete("held", &DeleteParams::default())
        .await
        .expect("delete");
    let pending = first
        .left()
        .expect("the object comes back while it is held");
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert_eq!(pending.metadata.deletion_grace_period_seconds, Some(0));
    let again = api
        .delete("held", &DeleteParams::default())
        .await
        .expect("again");
    let again = again.left().expect("still held");
    assert_eq!(
        again.resource_version(),
        pending.resource_version(),
        "a repeated delete changes nothing"
    );
    // No new finalizer on an object being deleted.
    let mut more = again.clone();
    more.metadata.finalizers = Some(vec!["example.com/hold".into(), "example.com/more".into()]);
    let refused = api_error(api.replace("held", &PostParams::default(), &more).await);
    assert_eq!(refused.code, 422);
    assert!(
        refused.message.contains(
            "no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/more\"}"
        ),
        "{}",
        refused.message
    );
    // Removing the last finalizer deletes it.
    let mut released = again;
    released.metadata.finalizers = None;
    api.replace("held", &PostParams::default(), &released)
        .await
        .expect("release");
    assert!(api.get_opt("held").await.expect("get").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagation_policies_become_finalizers_and_answers_are_upstreams() {
    let (_plane, client) = plane().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let both: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "both", "finalizers": ["orphan", "foregroundDeletion"]}
    }))
    .expect("config map");
    let refused = api_error(api.create(&PostParams::default(), &both).await);
    assert!(
        refused
            .message
            .contains("finalizer orphan and foregroundDeletion cannot be both set"),
        "{}",
        refused.message
    );

    config_map(&api, "fg", &[]).await;
    let params = |policy| DeleteParams {
        propagation_policy: Some(policy),
        ..DeleteParams::default()
    };
    let fg = api
        .delete("fg", &params(PropagationPolicy::Foreground))
        .await
        .expect("delete");
    let fg = fg
        .left()
        .expect("held by the garbage collector's finalizer");
    assert_eq!(fg.finalizers(), ["foregroundDeletion"]);
    // A later delete may change its mind.
    let orphan = api
        .delete("fg", &params(PropagationPolicy::Orphan))
        .await
        .expect("again");
    assert_eq!(orphan.left().expect("held").finalizers(), ["orphan"]);

    // Gone at once: a Status naming the resource (not the kind), for kinds
    // that do not return the deleted object…
    config_map(&api, "plain", &[]).await;
    let gone = api
        .delete("plain", &DeleteParams::default())
        .await
        .expect("delete");
    let status = gone.right().expect("a Status");
    assert_eq!(
        status.details.as_ref().map(|d| d.kind.as_str()),
        Some("configmaps")
    );
    // …and the object for those that do (pods, services, namespaces, …).
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    let gone = pods
        .delete("p", &DeleteParams::default())
        .await
        .expect("delete");
    assert_eq!(gone.left().expect("the pod").name_any(), "p");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_on_a_node_waits_out_its_grace_period_unless_it_is_cut_to_zero() {
    let (_plane, client) = plane().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30, "containers": [{"name": "c", "image": "i"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    let graceful = pods
        .delete("p", &DeleteParams::default())
        .await
        .expect("delete");
    let graceful = graceful.left().expect("kept for its grace period");
    assert_eq!(graceful.metadata.deletion_grace_period_seconds, Some(30));
    // A longer grace period changes nothing; a grace period of 0 deletes.
    let longer = DeleteParams {
        grace_period_seconds: Some(60),
        ..DeleteParams::default()
    };
    pods.delete("p", &longer).await.expect("delete");
    assert_eq!(
        pods.get("p")
            .await
            .expect("get")
            .metadata
            .deletion_grace_period_seconds,
        Some(30)
    );
    pods.delete("p", &DeleteParams::default().grace_period(0))
        .await
        .expect("force");
    assert!(
        pods.get_opt("p").await.expect("get").is_none(),
        "deleted at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_keeps_its_finalizer_until_it_is_finalized() {
    let (_plane, client) = plane().await;
    let namespaces: Api<Namespace> = Api::all(client);
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": "n"}, "spec": {"finalizers": []}
    }))
    .expect("namespace");
    let created = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("create");
    let finalizers = |ns: &Namespace| {
        ns.spec
            .as_ref()
            .and_then(|s| s.finalizers.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        finalizers(&created),
        ["kubernetes"],
        "a create cannot leave it out"
    );
    let mut stripped = created.clone();
    stripped.spec = Some(Default::default());
    let updated = namespaces
        .replace("n", &PostParams::default(), &stripped)
        .await
        .expect("update");
    assert_eq!(
        finalizers(&updated),
        ["kubernetes"],
        "only finalize removes it"
    );
    let terminating = namespaces
        .delete("n", &DeleteParams::default())
        .await
        .expect("delete");
    let terminating = terminating.left().expect("the namespace, terminating");
    assert_eq!(
        terminating.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    let mut finalized = namespaces.get("n").await.expect("get");
    finalized.spec = Some(Default::default());
    namespaces
        .replace_subresource("finalize", "n", &PostParams::default(), &finalized)
        .await
        .expect("finalize");
    assert!(
        namespaces.get_opt("n").await.expect("get").is_none(),
        "gone once finalized"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminating_definition_serves_its_objects_until_they_go() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{DynamicObject, Patch, PatchParams};
    use kube::core::{ApiResource, GroupVersionKind};
    let (_plane, client) = plane().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
          "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
          "versions": [{"name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .expect("crd");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("crd");
    let thing = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Thing"),
        "things",
    );
    let things: Api<DynamicObject> = Api::namespaced_with(client, "default", &thing);
    let held: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "held", "finalizers": ["example.com/hold"]}
    }))
    .expect("thing");
    let mut created = None;
    for _ in 0..500 {
        match things.create(&PostParams::default(), &held).await {
            Ok(object) => {
                created = Some(object);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
        }
    }
    let created = created.expect("the custom resource was served within 5 s");
    crds.delete("things.example.com", &DeleteParams::default())
        .await
        .expect("delete the definition");
    // Its objects stay reachable, their finalizers hold them, creates are refused.
    let mut marked = None;
    for _ in 0..500 {
        let now = things.get("held").await.expect("still served");
        if now.metadata.deletion_timestamp.is_some() {
            marked = Some(now);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(marked.is_some(), "the object was marked deleted");
    let mut new = held.clone();
    new.metadata.name = Some("new".into());
    let refused = api_error(things.create(&PostParams::default(), &new).await);
    assert_eq!(refused.code, 405);
    assert!(
        crds.get_opt("things.example.com")
            .await
            .expect("get")
            .is_some(),
        "held by its object"
    );
    let release = json!({"metadata": {"finalizers": null}});
    things
        .patch("held", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .expect("release");
    for _ in 0..1000 {
        if crds
            .get_opt("things.example.com")
            .await
            .expect("get")
            .is_none()
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!(
        "the definition stayed after its last object ({}) went",
        created.name_any()
    );
}
