//! The scheduler and the PV binder together, as upstream's
//! WaitForFirstConsumer flow: a claim of a late-binding class waits
//! unbound until a pod uses it; the scheduler puts the pod on the node its
//! one local volume is pinned to, writes the volume's claimRef at PreBind,
//! the PV controller binds the claim, and only then is the pod bound.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::api::{Api, PostParams};
use rudder_harness::{ControlPlane, Identity, eventually};
use rudder_scheduler::{Options, Scheduler};
use serde_json::json;
use tokio_util::sync::CancellationToken;

async fn create<K>(client: &Client, namespace: Option<&str>, object: serde_json::Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Clone
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace.unwrap_or("default"));
    let object: K = serde_json::from_value(object).expect("object");
    api.create(&PostParams::default(), &object)
        .await
        .expect("create");
}

async fn create_cluster<K>(client: &Client, object: serde_json::Value)
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Clone
        + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    let object: K = serde_json::from_value(object).expect("object");
    api.create(&PostParams::default(), &object)
        .await
        .expect("create");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_claim_binds_to_the_local_volume_of_the_node_the_pod_lands_on() {
    let plane = ControlPlane::start().await;
    let admin = plane.admin();
    let stop = CancellationToken::new();
    let _stop_on_drop = stop.clone().drop_guard();
    let manager = rudder_controllers::ControllerManager::new(
        plane.client(&Identity::controller_manager()),
        rudder_controllers::Options {
            lease: None,
            ..rudder_controllers::Options::default()
        },
    );
    tokio::spawn(manager.run(stop.clone()));
    let scheduler = Scheduler::new(
        plane.client(&Identity::scheduler()),
        Options {
            lease: None,
            ..Options::default()
        },
    );
    tokio::spawn(scheduler.run(stop.clone()));
    for name in ["n1", "n2", "n3"] {
        create_cluster::<Node>(
            &admin,
            json!({
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "status": {
                    "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }),
        )
        .await;
    }
    create_cluster::<StorageClass>(
        &admin,
        json!({
            "metadata": {"name": "local"},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
        }),
    )
    .await;
    create_cluster::<PersistentVolume>(
        &admin,
        json!({
            "metadata": {"name": "disk-on-n2"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "local",
                "local": {"path": "/mnt/disks/1"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}
                ]}]}},
            },
        }),
    )
    .await;
    create::<PersistentVolumeClaim>(
        &admin,
        None,
        json!({
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                "resources": {"requests": {"storage": "1Gi"}}},
        }),
    )
    .await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), "default");
    // Late binding: the claim waits for its pod, as the PV controller says
    // once it has looked at the claim.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(admin.clone(), "default");
    eventually(
        "the claim waits for its first consumer",
        Duration::from_secs(20),
        || async {
            events
                .list(&kube::api::ListParams::default())
                .await
                .expect("events")
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("WaitForFirstConsumer")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("data")
                })
        },
    )
    .await;
    let waiting = claims.get("data").await.expect("claim");
    assert_eq!(
        waiting.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );
    create::<Pod>(
        &admin,
        None,
        json!({
            "metadata": {"name": "db"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox:1"}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            },
        }),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let node = eventually("db bound", Duration::from_secs(30), || async {
        pods.get("db")
            .await
            .expect("get")
            .spec
            .and_then(|s| s.node_name)
    })
    .await;
    assert_eq!(node, "n2");
    // The pod is bound only after its claim is.
    let claim = claims.get("data").await.expect("claim");
    assert_eq!(
        claim.spec.and_then(|s| s.volume_name).as_deref(),
        Some("disk-on-n2")
    );
    assert_eq!(claim.status.and_then(|s| s.phase).as_deref(), Some("Bound"));

    // A second pod's claim finds no volume left on any node: unresolvable.
    create::<PersistentVolumeClaim>(
        &admin,
        None,
        json!({
            "metadata": {"name": "more"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                "resources": {"requests": {"storage": "1Gi"}}},
        }),
    )
    .await;
    create::<Pod>(
        &admin,
        None,
        json!({
            "metadata": {"name": "db2"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox:1"}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "more"}}],
            },
        }),
    )
    .await;
    let message = eventually("db2 unschedulable", Duration::from_secs(20), || async {
        pods.get("db2")
            .await
            .expect("get")
            .status
            .and_then(|s| s.conditions)
            .and_then(|c| c.into_iter().find(|c| c.type_ == "PodScheduled"))
            .filter(|c| c.status == "False")
            .and_then(|c| c.message)
    })
    .await;
    assert!(
        message.contains("3 node(s) didn't find available persistent volumes to bind"),
        "{message}"
    );
}
