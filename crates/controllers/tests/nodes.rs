//! The controllers that look after Nodes, against a real API server: node
//! IPAM (each Node its own /24 of the cluster CIDR, a deleted Node's range
//! to the next one), DaemonSets, node lifecycle (a silent node Unknown,
//! tainted, its pods evicted; on a fake clock) and the pod collector's
//! quarantine of pods whose node is missing.

mod support;

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::{cluster, until};

async fn add_node(client: &Client, name: &str) {
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).expect("node");
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
}

async fn pod_cidr(client: &Client, name: &str) -> Option<String> {
    Api::<Node>::all(client.clone())
        .get(name)
        .await
        .expect("get")
        .spec
        .and_then(|s| s.pod_cidr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_gets_a_range_of_its_own() {
    let c = cluster().await;
    add_node(&c.admin, "a").await;
    add_node(&c.admin, "b").await;
    until("both have ranges", || async {
        pod_cidr(&c.admin, "a").await.is_some() && pod_cidr(&c.admin, "b").await.is_some()
    })
    .await;
    let (a, b) = (
        pod_cidr(&c.admin, "a").await.expect("a"),
        pod_cidr(&c.admin, "b").await.expect("b"),
    );
    assert_ne!(a, b);
    for cidr in [&a, &b] {
        assert!(
            cidr.starts_with("10.42.") && cidr.ends_with(".0/24"),
            "{cidr}"
        );
    }
    let node = Api::<Node>::all(c.admin.clone())
        .get("a")
        .await
        .expect("get");
    assert_eq!(node.spec.and_then(|s| s.pod_cidrs), Some(vec![a.clone()]));
    Api::<Node>::all(c.admin.clone())
        .delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    until("a is gone", || async {
        Api::<Node>::all(c.admin.clone())
            .get_opt("a")
            .await
            .expect("get")
            .is_none()
    })
    .await;
    // c is made after a's deletion, so IPAM's one watch of Nodes brings
    // it after a's Deleted event, which frees a's range first.
    add_node(&c.admin, "c").await;
    until("c gets the freed range", || async {
        pod_cidr(&c.admin, "c").await.as_ref() == Some(&a)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonset_runs_one_pod_per_fitting_node_and_rolls_out() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::core::v1::Pod;
    use kube::ResourceExt;
    use kube::api::{ListParams, Patch, PatchParams};
    let c = support::cluster_with_nodes().await;
    add_node(&c.admin, "n1").await;
    add_node(&c.admin, "n2").await;
    let tainted: Node = serde_json::from_value(json!({"metadata": {"name": "n3"},
        "spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}}))
    .expect("node");
    Api::<Node>::all(c.admin.clone())
        .create(&PostParams::default(), &tainted)
        .await
        .expect("create");
    let api: Api<DaemonSet> = Api::namespaced(c.admin.clone(), "default");
    let set: DaemonSet = serde_json::from_value(json!({"metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}}})).expect("set");
    api.create(&PostParams::default(), &set)
        .await
        .expect("create");
    let pods: Api<Pod> = Api::namespaced(c.admin.clone(), "default");
    let live = || async {
        let mut all = pods
            .list(&ListParams::default().labels("app=agent"))
            .await
            .expect("list")
            .items;
        all.retain(|p| p.metadata.deletion_timestamp.is_none());
        all
    };
    let done = |s: &DaemonSet| {
        let st = s.status.clone().unwrap_or_default();
        st.observed_generation >= s.metadata.generation
            && st.desired_number_scheduled == 2
            && st.number_ready == 2
            && st.updated_number_scheduled == Some(2)
            && st.number_available == Some(2)
    };
    until("ready on the two untainted nodes", || async {
        done(&api.get("agent").await.expect("get"))
    })
    .await;
    let mut nodes: Vec<String> = live()
        .await
        .iter()
        .map(|p| {
            let terms = p
                .spec
                .as_ref()
                .and_then(|s| s.affinity.as_ref())
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .expect("affinity")
                .node_selector_terms
                .clone();
            terms[0].match_fields.as_ref().expect("fields")[0]
                .values
                .as_ref()
                .expect("values")[0]
                .clone()
        })
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2"]);
    api.patch("agent", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}}})))
        .await
        .expect("new image");
    until("the new image on both", || async {
        let all = live().await;
        done(&api.get("agent").await.expect("get"))
            && all.len() == 2
            && all.iter().all(|p| {
                p.spec
                    .as_ref()
                    .is_some_and(|s| s.containers[0].image.as_deref() == Some("busybox:2"))
            })
    })
    .await;
    // Back to the first image: its ControllerRevision is renumbered to be
    // the newest (3), as upstream's rollback does, and no new one is made.
    api.patch("agent", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}}})))
        .await
        .expect("old image");
    let revisions: Api<k8s_openapi::api::apps::v1::ControllerRevision> =
        Api::namespaced(c.admin.clone(), "default");
    until("the first revision renumbered", || async {
        let mut numbers: Vec<i64> = revisions
            .list(&ListParams::default().labels("app=agent"))
            .await
            .expect("list")
            .items
            .iter()
            .map(|r| r.revision)
            .collect();
        numbers.sort();
        numbers == [2, 3]
    })
    .await;
    // A third node that fits gets one too.
    add_node(&c.admin, "n4").await;
    until("three pods", || async { live().await.len() == 3 }).await;
    assert!(
        live()
            .await
            .iter()
            .all(|p| p.name_any().starts_with("agent-"))
    );
}

/// The node.kubernetes.io taints the node lifecycle controller sets on
/// `name`, as (key, effect, timeAdded).
async fn managed_taints(
    nodes: &Api<Node>,
    name: &str,
) -> Vec<(String, String, Option<std::time::SystemTime>)> {
    nodes
        .get(name)
        .await
        .expect("get")
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key.starts_with("node.kubernetes.io/"))
        .map(|t| (t.key, t.effect, t.time_added.map(|at| at.0.into())))
        .collect()
}

/// The status and reason of `name`'s Ready condition.
async fn readiness(nodes: &Api<Node>, name: &str) -> (String, Option<String>) {
    nodes
        .get(name)
        .await
        .expect("get")
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status, c.reason))
        .expect("a Ready condition")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_silent_past_fifty_seconds_becomes_unknown_then_tainted_and_its_pods_go_after_five_minutes()
 {
    use k8s_openapi::api::core::v1::Pod;
    use rudder_api::time::Clock as _;
    use rudder_controllers::nodelifecycle::{GRACE_PERIOD, MONITOR_PERIOD};
    use std::time::{Duration, SystemTime};

    let plane = rudder_harness::ControlPlane::with_fake_clock().await;
    let clock = plane.fake_clock().expect("fake");
    let admin = plane.admin();
    let start = clock.now();
    // The node, with its kubelet's one heartbeat, and a pod bound to it
    // exist before the controllers start: the node monitor's first pass
    // (one period after the start) hears that heartbeat.
    let stamp = jiff::Timestamp::try_from(start).expect("time");
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "lost"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}]}}))
    .expect("node");
    Api::<Node>::all(admin.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "stranded"},
        "spec": {"nodeName": "lost", "containers": [{"name": "c", "image": "busybox"}]}}))
    .expect("pod");
    let p = pods
        .create(&PostParams::default(), &p)
        .await
        .expect("create");
    let defaults: Vec<_> = p
        .spec
        .and_then(|s| s.tolerations)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.toleration_seconds == Some(300))
        .collect();
    assert_eq!(
        defaults.len(),
        2,
        "not-ready and unreachable tolerated for 300 s by default"
    );
    let c = support::start_on(plane, std::sync::Arc::new(|_: &Pod| None));
    let nodes: Api<Node> = Api::all(c.admin.clone());

    // A pass of the node monitor at `at`, when its sleep ends: over once
    // the monitor sleeps again until its next period.
    let pass = |at: SystemTime| rudder_harness::pass(&clock, at, MONITOR_PERIOD);
    rudder_harness::asleep_until(&clock, start + MONITOR_PERIOD, 0).await;
    // Silence counts from the pass that heard the heartbeat last
    // (upstream's probeTimestamp), not from the heartbeat's own time.
    let heard = start + MONITOR_PERIOD;
    pass(heard).await;
    // 50 s of silence is not yet past the grace period: still Ready.
    pass(heard + GRACE_PERIOD).await;
    assert_eq!(GRACE_PERIOD, Duration::from_secs(50), "upstream's default");
    assert_eq!(
        readiness(&nodes, "lost").await,
        ("True".to_string(), Some("KubeletReady".to_string())),
        "Ready at 50 s of silence"
    );
    assert_eq!(
        managed_taints(&nodes, "lost").await,
        [],
        "untainted at 50 s"
    );
    // The next pass, 55 s: Unknown.
    pass(heard + GRACE_PERIOD + MONITOR_PERIOD).await;
    assert_eq!(
        readiness(&nodes, "lost").await,
        ("Unknown".to_string(), Some("NodeStatusUnknown".to_string())),
        "Unknown once silent past 50 s"
    );

    // The taints follow from the Unknown condition at a later pass (the
    // one whose cache shows it).
    let mut at = heard + GRACE_PERIOD + MONITOR_PERIOD;
    let tainted = loop {
        assert!(
            at < heard + GRACE_PERIOD + Duration::from_secs(60),
            "no unreachable taints a minute after Unknown"
        );
        at += MONITOR_PERIOD;
        pass(at).await;
        let taints = managed_taints(&nodes, "lost").await;
        let unreachable = |effect: &str| {
            taints
                .iter()
                .find(|(key, e, _)| key == "node.kubernetes.io/unreachable" && e == effect)
                .cloned()
        };
        if let (Some(_), Some((_, _, added))) =
            (unreachable("NoSchedule"), unreachable("NoExecute"))
        {
            assert_eq!(taints.len(), 2, "{taints:?}");
            assert_eq!(added, Some(at), "added at the pass");
            break at;
        }
    };
    // The pod tolerates the NoExecute taint for its 300 s, no longer.
    pass(tainted + Duration::from_secs(295)).await;
    let p = pods.get("stranded").await.expect("get");
    assert!(
        p.metadata.deletion_timestamp.is_none(),
        "still within its 300 s"
    );
    pass(tainted + Duration::from_secs(300)).await;
    assert!(
        pods.get_opt("stranded")
            .await
            .expect("get")
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "evicted once its toleration is over"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_on_a_missing_node_goes_after_forty_seconds_unless_the_node_comes_back() {
    use k8s_openapi::api::core::v1::Pod;
    use rudder_api::time::Clock as _;
    use rudder_controllers::podgc::{PERIOD, QUARANTINE};
    use std::time::{Duration, SystemTime};

    assert_eq!(QUARANTINE, Duration::from_secs(40), "upstream's quarantine");
    let plane = rudder_harness::ControlPlane::with_fake_clock().await;
    let clock = plane.fake_clock().expect("fake");
    let start = clock.now();
    // Two pods bound to nodes that do not exist, made before the
    // controllers start: the pod collector's first pass (one period after
    // the start) finds both nodes missing.
    let pods: Api<Pod> = Api::namespaced(plane.admin(), "default");
    for (name, node) in [("stray", "ghost"), ("saved", "back")] {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}}))
        .expect("pod");
        pods.create(&PostParams::default(), &p)
            .await
            .expect("create");
    }
    let c = support::start_on(plane, std::sync::Arc::new(|_: &Pod| None));
    // A pass of the collector at `at`, when its sleep ends; over once it
    // sleeps again until its next period.
    let pass = |at: SystemTime| rudder_harness::pass(&clock, at, PERIOD);
    let alive = |name: &'static str| {
        let pods = pods.clone();
        async move {
            pods.get_opt(name)
                .await
                .expect("get")
                .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
        }
    };
    rudder_harness::asleep_until(&clock, start + PERIOD, 0).await;
    let missing = start + PERIOD;
    pass(missing).await;
    assert!(alive("stray").await && alive("saved").await, "quarantined");
    // back comes back within the quarantine.
    add_node(&c.admin, "back").await;
    pass(missing + PERIOD).await;
    assert!(
        alive("stray").await && alive("saved").await,
        "20 s missing: still quarantined"
    );
    pass(missing + QUARANTINE).await;
    assert!(
        pods.get_opt("stray").await.expect("get").is_none(),
        "ghost missing for the whole quarantine: its pod is gone"
    );
    assert!(alive("saved").await, "back came back: its pod stays");
}
