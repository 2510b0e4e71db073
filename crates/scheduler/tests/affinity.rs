//! Inter-pod affinity and topology spread on the in-process control plane
//! (Node objects only, no node agent): a Deployment-like set of pods with
//! anti-affinity by hostname lands one per node, and the pod too many is
//! told why; pods with a required zone spread of maxSkew 1 are balanced
//! over the zones; a pod affine to another's zone follows it there.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use rudder_harness::{ControlPlane, Identity, eventually};
use rudder_scheduler::{Options, Scheduler};
use serde_json::{Value, json};
use tokio_util::sync::{CancellationToken, DropGuard};

const ZONE: &str = "topology.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";

/// A control plane with a scheduler running until the guard drops.
async fn cluster() -> (ControlPlane, DropGuard) {
    let plane = ControlPlane::start().await;
    let stop = CancellationToken::new();
    let options = Options {
        lease: None,
        ..Options::default()
    };
    let scheduler = Scheduler::new(plane.client(&Identity::scheduler()), options);
    tokio::spawn(scheduler.run(stop.clone()));
    (plane, stop.drop_guard())
}

/// Ready nodes `name: zone`, each labelled with its hostname and zone.
async fn nodes(client: &Client, zones: &[(&str, &str)]) {
    let api = Api::<Node>::all(client.clone());
    for (name, zone) in zones {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {HOSTNAME: name, ZONE: zone}},
            "status": {
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }))
        .expect("node");
        api.create(&PostParams::default(), &node)
            .await
            .expect("create node");
    }
}

/// Creates pod `name` labelled `app` with `spec` fields added.
async fn create(pods: &Api<Pod>, name: &str, app: &str, spec: Value) {
    let mut full = json!({"containers": [{"name": "c", "image": "busybox:1",
        "resources": {"requests": {"cpu": "100m"}}}]});
    if let (Some(full), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
        full.extend(extra.clone());
    }
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": full,
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

/// Once `want` pods labelled `app` are bound: their nodes by pod name.
async fn bound(pods: &Api<Pod>, app: &str, want: usize) -> BTreeMap<String, String> {
    let selector = ListParams::default().labels(&format!("app={app}"));
    eventually("pods bound", Duration::from_secs(30), || async {
        let placed: BTreeMap<String, String> = pods
            .list(&selector)
            .await
            .expect("list")
            .items
            .into_iter()
            .filter_map(|p| {
                let node = p.spec.as_ref()?.node_name.clone()?;
                Some((p.metadata.name?, node))
            })
            .collect();
        (placed.len() >= want).then_some(placed)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anti_affinity_by_hostname_puts_one_replica_per_node() {
    let (plane, _scheduler) = cluster().await;
    let admin = plane.admin();
    nodes(&admin, &[("n1", "a"), ("n2", "a"), ("n3", "b")]).await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOSTNAME}
    ]}}});
    for i in 0..3 {
        create(&pods, &format!("web-{i}"), "web", anti.clone()).await;
    }
    let placed = bound(&pods, "web", 3).await;
    let mut on: Vec<&String> = placed.values().collect();
    on.sort();
    on.dedup();
    assert_eq!(on.len(), 3, "one per node: {placed:?}");
    // A fourth has nowhere to go, and says why.
    create(&pods, "web-3", "web", anti).await;
    let message = eventually("PodScheduled False", Duration::from_secs(20), || async {
        let p = pods.get("web-3").await.expect("get");
        p.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")?
            .message
    })
    .await;
    assert!(
        message.starts_with(
            "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
        ),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_zone_spread_balances_the_zones() {
    let (plane, _scheduler) = cluster().await;
    let admin = plane.admin();
    // Zone a has three nodes, zone b one: resources alone would fill a.
    nodes(
        &admin,
        &[("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b")],
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "spread"}}}]});
    for i in 0..6 {
        create(&pods, &format!("spread-{i}"), "spread", spread.clone()).await;
    }
    let placed = bound(&pods, "spread", 6).await;
    let in_b = placed.values().filter(|n| *n == "b1").count();
    assert_eq!(in_b, 3, "three per zone: {placed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_follows_an_existing_pod_to_its_zone() {
    let (plane, _scheduler) = cluster().await;
    let admin = plane.admin();
    nodes(
        &admin,
        &[("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b")],
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    create(&pods, "db", "db", json!({"nodeSelector": {HOSTNAME: "b2"}})).await;
    bound(&pods, "db", 1).await;
    let affine = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE}
    ]}}});
    for i in 0..4 {
        create(&pods, &format!("cache-{i}"), "cache", affine.clone()).await;
    }
    let placed = bound(&pods, "cache", 4).await;
    assert!(
        placed.values().all(|n| n.starts_with('b')),
        "all in zone b: {placed:?}"
    );
}
