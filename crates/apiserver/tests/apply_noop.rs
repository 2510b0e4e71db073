//! A server-side apply of an unchanged manifest writes nothing, as
//! upstream's: "changed?" is decided on the defaulted object, so fields a
//! manifest leaves for defaulting inside atomic structs and lists (a
//! `fieldRef` without `apiVersion`, a `resourceFieldRef` without `divisor`,
//! probes, ports without `protocol`) are no change — no new
//! resourceVersion, no new generation, no watch event.

mod support;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use kube::core::NamespaceResourceScope;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use support::Backend;

/// A pod template whose containers leave defaulted fields inside atomic
/// structs (`fieldRef`, `resourceFieldRef`, probe handlers) and inside
/// lists with merge keys (ports without `protocol`).
fn template() -> Value {
    json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {
            "containers": [{
                "name": "web",
                "image": "nginx:1.27",
                "ports": [{"containerPort": 80, "name": "http"}],
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}},
                ],
                "resources": {"limits": {"memory": "128Mi", "cpu": "500m"}},
                "readinessProbe": {"httpGet": {"path": "/", "port": 80}},
                "livenessProbe": {"tcpSocket": {"port": "http"}, "initialDelaySeconds": 3},
                "startupProbe": {"exec": {"command": ["true"]}},
            }],
            "initContainers": [{
                "name": "init",
                "image": "busybox:1",
                "env": [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            }],
            "volumes": [{
                "name": "info",
                "downwardAPI": {"items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "cpu", "resourceFieldRef": {"containerName": "web", "resource": "limits.cpu"}},
                ]},
            }],
        },
    })
}

fn manifests() -> Vec<(&'static str, Value)> {
    let selector = json!({"matchLabels": {"app": "web"}});
    vec![
        (
            "Deployment",
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web"},
                "spec": {"replicas": 2, "selector": selector, "template": template()},
            }),
        ),
        (
            "StatefulSet",
            json!({
                "apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "web"},
                "spec": {
                    "serviceName": "web", "selector": selector, "template": template(),
                    "volumeClaimTemplates": [{
                        "metadata": {"name": "data"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                    }],
                },
            }),
        ),
        (
            "DaemonSet",
            json!({
                "apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "web"},
                "spec": {"selector": selector, "template": template()},
            }),
        ),
        (
            "CronJob",
            json!({
                "apiVersion": "batch/v1", "kind": "CronJob",
                "metadata": {"name": "web"},
                "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {
                    "spec": {"restartPolicy": "OnFailure", "containers": template()["spec"]["containers"]},
                }}}},
            }),
        ),
        (
            "Pod",
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "labels": {"app": "web"}},
                "spec": template()["spec"],
            }),
        ),
        (
            "Service",
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [
                    {"name": "http", "port": 80, "targetPort": "http"},
                    {"name": "dns", "port": 53, "protocol": "UDP"},
                ]},
            }),
        ),
    ]
}

/// Applies `manifest` twice as the same manager and checks the second
/// apply changed nothing: same resourceVersion and generation, and a watch
/// from the first apply's resourceVersion sees no event.
async fn reapply_writes_nothing<K>(client: &kube::Client, kind: &str, manifest: &Value)
where
    K: Resource<Scope = NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), "default");
    let params = PatchParams::apply("gitops").force();
    let first = api
        .patch("web", &params, &Patch::Apply(manifest))
        .await
        .unwrap_or_else(|e| panic!("first apply of the {kind}: {e}"));
    let rv = first.resource_version().expect("resourceVersion");
    let mut watch = api
        .watch(&WatchParams::default().fields("metadata.name=web"), &rv)
        .await
        .expect("watch")
        .boxed();
    // Across a second: a managedFields time re-stamped would make a write.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    for round in 1..=2 {
        let again = api
            .patch("web", &params, &Patch::Apply(manifest))
            .await
            .unwrap_or_else(|e| panic!("apply {round} of the unchanged {kind}: {e}"));
        assert_eq!(
            again.resource_version(),
            Some(rv.clone()),
            "re-applying the unchanged {kind} wrote it"
        );
        assert_eq!(
            again.meta().generation,
            first.meta().generation,
            "re-applying the unchanged {kind} bumped its generation"
        );
    }
    // A change that is one (a label) is written and seen: the watch works,
    // and the only event it carries is that change.
    let mut changed = manifest.clone();
    changed["metadata"]["labels"] = json!({"changed": "yes"});
    let written = api
        .patch("web", &params, &Patch::Apply(&changed))
        .await
        .expect("apply with a new label");
    assert_ne!(written.resource_version(), Some(rv.clone()));
    let event = tokio::time::timeout(Duration::from_secs(10), watch.try_next())
        .await
        .expect("an event within 10 s")
        .expect("watch stream")
        .expect("an event");
    match event {
        WatchEvent::Modified(object) => assert_eq!(
            object.resource_version(),
            written.resource_version(),
            "the first event after the no-op applies is the label change ({kind})"
        ),
        other => panic!("expected the label change, got {other:?} ({kind})"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reapplying_an_unchanged_manifest_writes_nothing() {
    let server = support::start(Backend::Embedded).await;
    let client = &server.client;
    for (kind, manifest) in manifests() {
        match kind {
            "Deployment" => reapply_writes_nothing::<Deployment>(client, kind, &manifest).await,
            "StatefulSet" => reapply_writes_nothing::<StatefulSet>(client, kind, &manifest).await,
            "DaemonSet" => reapply_writes_nothing::<DaemonSet>(client, kind, &manifest).await,
            "CronJob" => reapply_writes_nothing::<CronJob>(client, kind, &manifest).await,
            "Pod" => reapply_writes_nothing::<Pod>(client, kind, &manifest).await,
            "Service" => reapply_writes_nothing::<Service>(client, kind, &manifest).await,
            other => unreachable!("no manifest of kind {other}"),
        }
    }
}
