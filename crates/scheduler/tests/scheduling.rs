//! The scheduler on the in-process control plane with Node objects only
//! (no node agent): pods are bound to nodes that fit them, spread by
//! score; a pod that fits nowhere gets `PodScheduled=False` with
//! upstream's message and a `FailedScheduling` event, and is bound once a
//! node that fits appears.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use rudder_harness::eventually;
use serde_json::json;

mod support;
use support::{add_node, node_of, pod, start, unschedulable_message};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_bound_where_they_fit_and_spread_by_score() {
    let r = start().await;
    let admin = r.plane.admin();
    add_node(&admin, "small", "1", json!({"size": "small"}), json!([])).await;
    add_node(&admin, "big", "8", json!({"size": "big"}), json!([])).await;
    add_node(
        &admin,
        "tainted",
        "8",
        json!({}),
        json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    for i in 0..4 {
        pods.create(
            &PostParams::default(),
            &pod(&format!("web-{i}"), "500m", json!({})),
        )
        .await
        .expect("pod");
    }
    pods.create(
        &PostParams::default(),
        &pod("picky", "100m", json!({"nodeSelector": {"size": "small"}})),
    )
    .await
    .expect("pod");
    let bound = eventually("every pod bound", Duration::from_secs(20), || async {
        let all = pods.list(&ListParams::default()).await.expect("list").items;
        all.iter().all(|p| node_of(p).is_some()).then_some(all)
    })
    .await;
    for p in &bound {
        let node = node_of(p).expect("bound");
        assert_ne!(node, "tainted", "the taint keeps pods off");
        let scheduled = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .map(|c| c.status.clone());
        assert_eq!(scheduled.as_deref(), Some("True"), "{p:?}");
    }
    let picky = bound
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("picky"))
        .expect("picky");
    assert_eq!(node_of(picky).as_deref(), Some("small"));
    // LeastAllocated: the 500m pods go to the big node, which stays emptier.
    let on_big = bound
        .iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("web-"))
        })
        .filter(|p| node_of(p).as_deref() == Some("big"))
        .count();
    assert!(on_big >= 3, "most web pods on the big node: {on_big}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_fits_nowhere_says_why_and_is_bound_when_a_node_fits() {
    let r = start().await;
    let admin = r.plane.admin();
    add_node(&admin, "n1", "1", json!({}), json!([])).await;
    add_node(
        &admin,
        "n2",
        "2",
        json!({}),
        json!([{"key": "k", "value": "v", "effect": "NoSchedule"}]),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    pods.create(&PostParams::default(), &pod("huge", "4", json!({})))
        .await
        .expect("pod");
    let message = eventually("PodScheduled False", Duration::from_secs(20), || async {
        let p = pods.get("huge").await.expect("get");
        p.status
            .and_then(|s| s.conditions)
            .and_then(|c| c.into_iter().find(|c| c.type_ == "PodScheduled"))
            .filter(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
            .and_then(|c| c.message)
    })
    .await;
    assert_eq!(
        message,
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {k: v}. \
         preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, \
         1 Preemption is not helpful for scheduling."
    );
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(admin.clone(), "default");
    eventually(
        "a FailedScheduling event",
        Duration::from_secs(10),
        || async {
            events
                .list(&ListParams::default())
                .await
                .expect("events")
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("FailedScheduling"))
        },
    )
    .await;
    add_node(&admin, "n3", "8", json!({}), json!([])).await;
    let node = eventually("bound to the new node", Duration::from_secs(20), || async {
        node_of(&pods.get("huge").await.expect("get"))
    })
    .await;
    assert_eq!(node, "n3");
    let scheduled = eventually("a Scheduled event", Duration::from_secs(10), || async {
        events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("Scheduled"))
    })
    .await;
    assert_eq!(
        scheduled.note.as_deref(),
        Some("Successfully assigned default/huge to n3")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gated_pods_and_other_schedulers_pods_are_left_alone() {
    let r = start().await;
    let admin = r.plane.admin();
    add_node(&admin, "n1", "4", json!({}), json!([])).await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    // Each asks for more than n1 has: a pod the scheduler tries is told so
    // (PodScheduled=False, Unschedulable) in its one scheduling loop,
    // before it tries any pod queued after it — the probe, made last.
    for (name, extra) in [
        ("gated", json!({"schedulingGates": [{"name": "wait"}]})),
        ("other", json!({"schedulerName": "someone-else"})),
        ("probe", json!({})),
    ] {
        pods.create(&PostParams::default(), &pod(name, "8", extra))
            .await
            .expect("pod");
    }
    let message = eventually("the probe tried", Duration::from_secs(20), || async {
        unschedulable_message(&pods.get("probe").await.expect("get"))
    })
    .await;
    assert!(
        message.starts_with("0/1 nodes are available: 1 Insufficient cpu."),
        "{message}"
    );
    for name in ["gated", "other"] {
        let p = pods.get(name).await.expect("get");
        assert_eq!(unschedulable_message(&p), None, "{name} was not tried");
        assert_eq!(node_of(&p), None, "{name}");
    }
    // A node that fits them joins: the probe is bound; the gate removed,
    // so is the gated pod.
    add_node(&admin, "n2", "16", json!({}), json!([])).await;
    eventually("probe bound", Duration::from_secs(20), || async {
        node_of(&pods.get("probe").await.expect("get"))
    })
    .await;
    pods.patch(
        "gated",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"schedulingGates": null}})),
    )
    .await
    .expect("ungate");
    let node = eventually(
        "gated bound once ungated",
        Duration::from_secs(20),
        || async { node_of(&pods.get("gated").await.expect("get")) },
    )
    .await;
    assert_eq!(node, "n2");
}
