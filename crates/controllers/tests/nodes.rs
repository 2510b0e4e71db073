//! Node IPAM against a real API server: each Node gets its own /24 of the
//! cluster CIDR, and a deleted Node's range goes to the next one.

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
    until("a's range is free", || async {
        Api::<Node>::all(c.admin.clone())
            .get_opt("a")
            .await
            .expect("get")
            .is_none()
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_becomes_unknown_tainted_and_its_pods_go_after_five_minutes() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Patch, PatchParams};
    use std::time::Duration;
    let c = support::cluster_with_fake_clock(std::sync::Arc::new(|_: &Pod| None)).await;
    let clock = c.plane.fake_clock().expect("fake");
    let nodes: Api<Node> = Api::all(c.admin.clone());
    add_node(&c.admin, "lost").await;
    let now = {
        use rudder_api::time::Clock as _;
        jiff::Timestamp::try_from(clock.now()).expect("time")
    };
    nodes
        .patch_status("lost", &PatchParams::default(), &Patch::Merge(json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now, "lastTransitionTime": now}]}})))
        .await
        .expect("ready");
    let pods: Api<Pod> = Api::namespaced(c.admin.clone(), "default");
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

    let step = |by: u64| {
        let clock = clock.clone();
        async move {
            clock.advance(Duration::from_secs(by));
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    };
    let unknown = || async {
        nodes
            .get("lost")
            .await
            .expect("get")
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| {
                c.type_ == "Ready"
                    && c.status == "Unknown"
                    && c.reason.as_deref() == Some("NodeStatusUnknown")
            })
    };
    for _ in 0..30 {
        if unknown().await {
            break;
        }
        step(5).await;
    }
    assert!(unknown().await, "no heartbeat for 50 s: Unknown");
    until("unreachable taints", || async {
        step(5).await;
        let taints = nodes
            .get("lost")
            .await
            .expect("get")
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default();
        ["NoSchedule", "NoExecute"].iter().all(|e| {
            taints
                .iter()
                .any(|t| t.key == "node.kubernetes.io/unreachable" && t.effect == *e)
        })
    })
    .await;
    assert!(
        pods.get_opt("stranded").await.expect("get").is_some(),
        "tolerated for now"
    );
    step(200).await;
    assert!(
        pods.get_opt("stranded").await.expect("get").is_some(),
        "still within its 300 s"
    );
    until("evicted after its toleration", || async {
        step(30).await;
        pods.get_opt("stranded")
            .await
            .expect("get")
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
    })
    .await;
}
