//! The controllers Services need beyond their endpoints, against a real
//! API server with Node objects: the service load balancer giving
//! LoadBalancer Services the Ready nodes' addresses (and only the chosen
//! nodes', and none once a Service stops being a LoadBalancer), and the
//! DNS endpoints controller listing the nodes whose DNS serves.

mod support;

use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{cluster, until};

/// A Node at `ip`, Ready or not, with a podCIDR.
async fn node(client: &Client, name: &str, ip: &str, cidr: &str, ready: bool) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]}
    }))
    .expect("node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
    let status = json!({"status": {
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                        "reason": "KubeletReady", "message": "ready",
                        "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("node status");
}

async fn ingress(services: &Api<Service>, name: &str) -> Vec<String> {
    services
        .get(name)
        .await
        .expect("get")
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|lb| lb.ingress)
        .map(|i| i.into_iter().filter_map(|i| i.ip).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancers_get_the_ready_nodes_addresses() {
    let c = cluster().await;
    node(&c.admin, "a", "192.168.50.2", "10.42.10.0/24", true).await;
    node(&c.admin, "b", "192.168.50.3", "10.42.11.0/24", true).await;
    node(&c.admin, "c", "192.168.50.4", "10.42.12.0/24", false).await;
    let services: Api<Service> = Api::namespaced(c.admin.clone(), "default");
    for (name, class) in [("lb", None), ("theirs", Some("example.com/lb"))] {
        let mut spec = json!({"type": "LoadBalancer", "ports": [{"port": 80}]});
        if let Some(class) = class {
            spec["loadBalancerClass"] = json!(class);
        }
        let service: Service =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("svc");
        services
            .create(&PostParams::default(), &service)
            .await
            .expect("create");
    }
    until("the Ready nodes' addresses", || async {
        ingress(&services, "lb").await == ["192.168.50.2", "192.168.50.3"]
    })
    .await;

    // Choosing nodes by k3s's label.
    Api::<Node>::all(c.admin.clone())
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"svccontroller.k3s.cattle.io/enablelb": "true"}}}),
            ),
        )
        .await
        .expect("label");
    until("the chosen node's address", || async {
        ingress(&services, "lb").await == ["192.168.50.3"]
    })
    .await;
    assert!(
        ingress(&services, "theirs").await.is_empty(),
        "another class's Service is left alone"
    );

    // No longer a LoadBalancer: no address.
    services
        .patch(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"type": "ClusterIP"}})),
        )
        .await
        .expect("to ClusterIP");
    until("the addresses withdrawn", || async {
        ingress(&services, "lb").await.is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dns_endpoints_are_the_serving_nodes_gateways() {
    let c = cluster().await;
    node(&c.admin, "a", "192.168.50.2", "10.42.10.0/24", true).await;
    node(&c.admin, "b", "192.168.50.3", "10.42.11.0/24", true).await;
    Api::<Node>::all(c.admin.clone())
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"dns.rudder.io/serving": "true"}}})),
        )
        .await
        .expect("annotate");
    let slices: Api<EndpointSlice> = Api::namespaced(c.admin.clone(), "kube-system");
    until("node a's gateway as kube-dns's endpoint", || async {
        slices
            .get_opt("kube-dns-rudder")
            .await
            .expect("get")
            .is_some_and(|s| {
                s.endpoints.len() == 1
                    && s.endpoints[0].addresses == ["10.42.10.1"]
                    && s.endpoints[0].node_name.as_deref() == Some("a")
                    && s.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("kubernetes.io/service-name"))
                        == Some(&"kube-dns".to_string())
            })
    })
    .await;
    // And in the Endpoints object older clients read.
    let endpoints: Api<Endpoints> = Api::namespaced(c.admin.clone(), "kube-system");
    until("node a's gateway in kube-dns's Endpoints", || async {
        endpoints
            .get_opt("kube-dns")
            .await
            .expect("get")
            .is_some_and(|e| {
                e.subsets
                    .as_ref()
                    .and_then(|s| s.first())
                    .and_then(|s| s.addresses.as_ref())
                    .is_some_and(|a| a.len() == 1 && a[0].ip == "10.42.10.1")
            })
    })
    .await;
}
