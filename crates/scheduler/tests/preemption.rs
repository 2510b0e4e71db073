//! Preemption on the in-process control plane (no node agent; the test
//! plays the kubelet's part of finishing a graceful delete): a pod of
//! higher priority that fits nowhere evicts a lower-priority pod, is
//! nominated to its node and bound there once the victim is gone; the
//! room its victims free is kept for it from pods of lower priority; a
//! pod a PodDisruptionBudget protects is spared when another will do;
//! what cannot help is said as upstream says it.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use rudder_harness::eventually;
use serde_json::json;

mod support;
use support::{node_of, pod, start};

/// A node of 1 cpu.
async fn add_node(client: &Client, name: &str) {
    support::add_node(client, name, "1", json!({}), json!([])).await;
}

async fn add_priority_class(client: &Client, name: &str, value: i32) {
    let class: PriorityClass =
        serde_json::from_value(json!({"metadata": {"name": name}, "value": value}))
            .expect("priority class");
    Api::<PriorityClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("create priority class");
}

/// A pod asking for 800m of a node's 1 cpu, of a priority class.
async fn add_pod(pods: &Api<Pod>, name: &str, class: &str, labels: serde_json::Value) {
    let mut pod = pod(name, "800m", json!({"priorityClassName": class}));
    pod.metadata.labels = serde_json::from_value(labels).expect("labels");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

/// A pod asking for `cpu`, of a priority class.
async fn add_pod_of(pods: &Api<Pod>, name: &str, class: &str, cpu: &str) {
    pods.create(
        &PostParams::default(),
        &pod(name, cpu, json!({"priorityClassName": class})),
    )
    .await
    .expect("create pod");
}

fn nominated(p: &Pod) -> Option<String> {
    p.status
        .as_ref()
        .and_then(|s| s.nominated_node_name.clone())
}

async fn bound(pods: &Api<Pod>, name: &str) -> String {
    eventually(
        &format!("{name} bound"),
        Duration::from_secs(20),
        || async { node_of(&pods.get(name).await.expect("get")) },
    )
    .await
}

fn scheduled_message(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?
        .message
        .clone()
}

/// What a kubelet does once a pod's containers stopped: the graceful
/// delete is finished with grace 0.
async fn finish_deletion(pods: &Api<Pod>, name: &str) {
    eventually(
        &format!("{name} being deleted"),
        Duration::from_secs(20),
        || async {
            pods.get(name)
                .await
                .expect("get")
                .metadata
                .deletion_timestamp
        },
    )
    .await;
    pods.delete(
        name,
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_pod_preempts_and_binds_once_its_victim_is_gone() {
    let r = start().await;
    let admin = r.plane.admin();
    add_priority_class(&admin, "low", 10).await;
    add_priority_class(&admin, "high", 1000).await;
    add_node(&admin, "n1").await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    add_pod(&pods, "victim", "low", json!({})).await;
    assert_eq!(bound(&pods, "victim").await, "n1");
    // A pod of the same priority cannot preempt.
    add_pod(&pods, "peer", "low", json!({})).await;
    let message = eventually("peer unschedulable", Duration::from_secs(20), || async {
        scheduled_message(&pods.get("peer").await.expect("get"))
    })
    .await;
    assert_eq!(
        message,
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    );

    add_pod(&pods, "preemptor", "high", json!({})).await;
    let preemptor = eventually("preemptor nominated", Duration::from_secs(20), || async {
        let p = pods.get("preemptor").await.expect("get");
        nominated(&p).map(|n| (n, p))
    })
    .await;
    assert_eq!(preemptor.0, "n1");
    assert_eq!(
        node_of(&preemptor.1),
        None,
        "not bound while its victim runs"
    );
    let victim = pods.get("victim").await.expect("get");
    assert!(
        victim.metadata.deletion_timestamp.is_some(),
        "deleted gracefully"
    );
    let condition = victim
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == "DisruptionTarget"))
        .expect("DisruptionTarget");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_deref()),
        ("True", Some("PreemptionByScheduler"))
    );
    assert_eq!(
        condition.message.as_deref(),
        Some("default-scheduler: preempting to accommodate a higher priority pod")
    );
    // A node joining makes the scheduler try the pending pods again; too
    // small for the preemptor, it is tried there in vain, and on n1 it
    // still waits for its victim (nor does it preempt again).
    support::add_node(&admin, "small", "500m", json!({}), json!([])).await;
    let message = eventually(
        "preemptor tried on both nodes",
        Duration::from_secs(20),
        || async {
            scheduled_message(&pods.get("preemptor").await.expect("get"))
                .filter(|m| m.starts_with("0/2 nodes are available"))
        },
    )
    .await;
    assert_eq!(
        message,
        "0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to a terminating pod on the nominated node."
    );
    let waiting = pods.get("preemptor").await.expect("get");
    assert_eq!(node_of(&waiting), None, "not bound while its victim runs");
    assert_eq!(nominated(&waiting).as_deref(), Some("n1"));

    finish_deletion(&pods, "victim").await;
    assert_eq!(bound(&pods, "preemptor").await, "n1");
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(admin.clone(), "default");
    let preempted = eventually("a Preempted event", Duration::from_secs(10), || async {
        events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("Preempted"))
    })
    .await;
    let uid = preemptor.1.metadata.uid.clone().unwrap_or_default();
    assert_eq!(
        preempted.note,
        Some(format!("Preempted by pod {uid} on node n1"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_room_preemption_frees_is_kept_for_the_preemptor_from_lower_priority_pods() {
    let r = start().await;
    let admin = r.plane.admin();
    add_priority_class(&admin, "low", 10).await;
    add_priority_class(&admin, "high", 1000).await;
    add_node(&admin, "n1").await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    // Two pods of 400m fill 800m of n1's 1 cpu.
    for name in ["v1", "v2"] {
        add_pod_of(&pods, name, "low", "400m").await;
        assert_eq!(bound(&pods, name).await, "n1");
    }
    // 800m of a higher priority: both must go.
    add_pod_of(&pods, "preemptor", "high", "800m").await;
    let node = eventually("preemptor nominated", Duration::from_secs(20), || async {
        nominated(&pods.get("preemptor").await.expect("get"))
    })
    .await;
    assert_eq!(node, "n1");
    finish_deletion(&pods, "v1").await;
    // 600m is free: not enough for the preemptor while v2 terminates, but
    // room for a pod of 300m of lower priority — were it not reserved by
    // the nomination (upstream's addNominatedPods: pods nominated to a
    // node, of the same or a higher priority, count there when pods of
    // lower priority are filtered).
    add_pod_of(&pods, "peer", "low", "300m").await;
    let peer = eventually("the peer tried", Duration::from_secs(20), || async {
        let p = pods.get("peer").await.expect("get");
        (node_of(&p).is_some() || scheduled_message(&p).is_some()).then_some(p)
    })
    .await;
    assert_eq!(node_of(&peer), None, "the peer did not take the room");
    assert_eq!(
        scheduled_message(&peer).as_deref(),
        Some(
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        )
    );
    let preemptor = pods.get("preemptor").await.expect("get");
    assert_eq!(node_of(&preemptor), None, "v2 still terminating");
    assert_eq!(nominated(&preemptor).as_deref(), Some("n1"));
    finish_deletion(&pods, "v2").await;
    assert_eq!(bound(&pods, "preemptor").await, "n1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_a_budget_protects_is_spared_when_another_will_do() {
    let r = start().await;
    let admin = r.plane.admin();
    add_priority_class(&admin, "lowest", 5).await;
    add_priority_class(&admin, "low", 10).await;
    add_priority_class(&admin, "high", 1000).await;
    // No disruption controller runs: the budget allows no disruption.
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
    }))
    .expect("pdb");
    Api::<PodDisruptionBudget>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &pdb)
        .await
        .expect("create pdb");
    add_node(&admin, "n1").await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    // By priority alone, db (the lowest) would be the victim.
    add_pod(&pods, "db", "lowest", json!({"app": "db"})).await;
    assert_eq!(bound(&pods, "db").await, "n1");
    add_node(&admin, "n2").await;
    add_pod(&pods, "web", "low", json!({"app": "web"})).await;
    assert_eq!(bound(&pods, "web").await, "n2");

    add_pod(&pods, "preemptor", "high", json!({})).await;
    let node = eventually("preemptor nominated", Duration::from_secs(20), || async {
        nominated(&pods.get("preemptor").await.expect("get"))
    })
    .await;
    assert_eq!(node, "n2");
    finish_deletion(&pods, "web").await;
    assert_eq!(bound(&pods, "preemptor").await, "n2");
    let db = pods.get("db").await.expect("get");
    assert!(db.metadata.deletion_timestamp.is_none(), "db spared");
}
