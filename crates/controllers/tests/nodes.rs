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
