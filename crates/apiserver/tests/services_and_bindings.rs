//! What the Service and Pod storages add: leaked ClusterIPs and NodePorts
//! found and freed by the repair loop, missing IPAddresses restored; the
//! legacy `bindings` resource binding a pod exactly as `pods/binding`; and
//! discovery listing only subresources that are served.

use bytes::Bytes;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use rudder_apiserver::storage::services::Repair;
use rudder_apiserver::{Identity, Server, ServerOptions};
use serde_json::json;

async fn plane() -> (Server, rudder_store::testing::TestStore, tempfile::TempDir) {
    let store = rudder_store::testing::embedded().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(ServerOptions::new(dir.path(), store.store.clone(), None))
        .await
        .expect("start");
    (server, store, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaked_addresses_and_ports_are_repaired() {
    let (server, store, _dir) = plane().await;
    let client = server.client(&Identity::admin());
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"type": "NodePort", "ports": [{"port": 80}]}
    }))
    .expect("service");
    let web = services
        .create(&PostParams::default(), &service)
        .await
        .expect("create");
    let web_ip = web
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .expect("an IP");
    let web_port = web
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p[0].node_port)
        .expect("a node port");

    // What a release that failed (or a server that died mid-way) leaves.
    let addresses: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("networking.k8s.io", "v1", "IPAddress"),
            "ipaddresses",
        ),
    );
    let leaked: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "IPAddress",
        "metadata": {"name": "10.43.200.200", "labels": {"ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"}},
        "spec": {"parentRef": {"group": "", "resource": "services", "namespace": "default", "name": "gone"}}
    }))
    .expect("ip");
    addresses
        .create(&PostParams::default(), &leaked)
        .await
        .expect("leak an address");
    store
        .store
        .create(
            b"/registry/ranges/servicenodeports/31999",
            Bytes::from("default/gone"),
        )
        .await
        .expect("leak a port");
    // And a Service whose address object went missing.
    addresses
        .delete(&web_ip, &DeleteParams::default())
        .await
        .expect("lose web's address");

    let storage = server.state().storage();
    let mut repair = Repair::default();
    let first = repair.pass(&storage).await.expect("a pass");
    assert!(
        first.released.is_empty(),
        "a first sighting frees nothing: {first:?}"
    );
    assert_eq!(first.restored, std::slice::from_ref(&web_ip));
    let second = repair.pass(&storage).await.expect("a pass");
    let mut released = second.released.clone();
    released.sort();
    assert_eq!(released, ["10.43.200.200", "nodePort 31999"]);
    assert!(
        addresses
            .get_opt("10.43.200.200")
            .await
            .expect("get")
            .is_none()
    );
    assert!(
        addresses.get_opt(&web_ip).await.expect("get").is_some(),
        "web keeps its address"
    );
    let port_key = format!("/registry/ranges/servicenodeports/{web_port}");
    assert!(
        store.store.get(port_key.as_bytes(), None).await.is_ok(),
        "web keeps its port"
    );
    // Freed, the address can be taken again.
    let again: Service = serde_json::from_value(json!({
        "metadata": {"name": "again"}, "spec": {"clusterIP": "10.43.200.200", "ports": [{"port": 80}]}
    }))
    .expect("service");
    services
        .create(&PostParams::default(), &again)
        .await
        .expect("the freed address");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_bindings_resource_binds_the_pod() {
    let (server, _store, _dir) = plane().await;
    let client = server.client(&Identity::scheduler());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    // Unschedulable once, and a readiness gate's condition besides.
    let conditions = json!({"status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
        {"type": "example.com/gate", "status": "False"},
    ]}});
    pods.patch_status("p", &PatchParams::default(), &Patch::Merge(&conditions))
        .await
        .expect("status");
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}});
    let request = http::Request::post("/api/v1/namespaces/default/bindings")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&binding).expect("json"))
        .expect("request");
    let answer = client.request_text(request).await.expect("bound");
    assert!(answer.contains("\"Success\""), "{answer}");
    let bound = pods.get("p").await.expect("get");
    assert_eq!(bound.spec.and_then(|s| s.node_name).as_deref(), Some("n1"));
    // PodScheduled is True; the other condition is kept.
    let conditions: Vec<(String, String)> = bound
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(
        conditions,
        [
            ("PodScheduled".to_string(), "True".to_string()),
            ("example.com/gate".to_string(), "False".to_string())
        ]
    );
    // A second binding is refused as pods/binding refuses it.
    let request = http::Request::post("/api/v1/namespaces/default/bindings")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&binding).expect("json"))
        .expect("request");
    match client.request_text(request).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 409),
        other => panic!("a rebinding: {other:?}"),
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_only_served_subresources() {
    let (server, _store, _dir) = plane().await;
    let client = server.client(&Identity::admin());
    let served = [
        "status",
        "scale",
        "binding",
        "ephemeralcontainers",
        "eviction",
        "finalize",
        "log",
        "exec",
        "attach",
        "portforward",
        "proxy",
        "approval",
        "token",
    ];
    let mut paths = vec!["/api/v1".to_string()];
    let groups: serde_json::Value = serde_json::from_str(
        &client
            .request_text(
                http::Request::get("/apis")
                    .body(Vec::new())
                    .expect("request"),
            )
            .await
            .expect("groups"),
    )
    .expect("json");
    for group in groups["groups"].as_array().expect("groups") {
        for version in group["versions"].as_array().expect("versions") {
            paths.push(format!(
                "/apis/{}",
                version["groupVersion"].as_str().expect("gv")
            ));
        }
    }
    let mut listed = 0;
    for path in paths {
        let list: serde_json::Value = serde_json::from_str(
            &client
                .request_text(http::Request::get(&path).body(Vec::new()).expect("request"))
                .await
                .expect("resources"),
        )
        .expect("json");
        for resource in list["resources"].as_array().expect("resources") {
            let name = resource["name"].as_str().expect("name");
            if let Some((parent, sub)) = name.split_once('/') {
                listed += 1;
                assert!(
                    served.contains(&sub),
                    "{path}: {name} is listed but not served"
                );
                assert!(
                    sub != "proxy" || ["pods", "services", "nodes"].contains(&parent),
                    "{path}: {name} is listed but not served"
                );
            }
        }
    }
    assert!(listed > 20, "subresources were listed");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_load_balancer_gets_a_health_check_port_and_gives_it_back() {
    let (server, store, _dir) = plane().await;
    let client = server.client(&Identity::admin());
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "lb"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}
    }))
    .expect("service");
    let lb = services
        .create(&PostParams::default(), &service)
        .await
        .expect("create");
    let spec = lb.spec.expect("spec");
    assert_eq!(spec.external_traffic_policy.as_deref(), Some("Cluster"));
    assert_eq!(
        spec.health_check_node_port, None,
        "the Cluster policy needs none"
    );

    let local = services
        .patch(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"externalTrafficPolicy": "Local"}})),
        )
        .await
        .expect("to Local");
    let port = local
        .spec
        .and_then(|s| s.health_check_node_port)
        .expect("a health check port");
    assert!((30000..=32767).contains(&port), "{port}");
    let key = format!("/registry/ranges/servicenodeports/{port}");
    assert!(
        store.store.get(key.as_bytes(), None).await.is_ok(),
        "the port is claimed"
    );

    let back = services
        .patch(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"externalTrafficPolicy": "Cluster"}})),
        )
        .await
        .expect("back to Cluster");
    assert_eq!(back.spec.and_then(|s| s.health_check_node_port), None);
    assert!(
        matches!(
            store.store.get(key.as_bytes(), None).await,
            Err(rudder_store::Error::NotFound)
        ),
        "the port is released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_ips_come_from_the_configured_service_cidr() {
    let store = rudder_store::testing::embedded().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut options = ServerOptions::new(dir.path(), store.store.clone(), None);
    options.service_cidr = "10.96.0.0/16".parse().expect("cidr");
    let server = Server::start(options).await.expect("start");
    let services: Api<Service> = Api::namespaced(server.client(&Identity::admin()), "default");
    let kubernetes = services
        .get("kubernetes")
        .await
        .expect("the kubernetes Service");
    assert_eq!(
        kubernetes.spec.and_then(|s| s.cluster_ip).as_deref(),
        Some("10.96.0.1")
    );
    let web: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}
    }))
    .expect("service");
    let ip = services
        .create(&PostParams::default(), &web)
        .await
        .expect("create")
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("an IP");
    assert!(ip.starts_with("10.96."), "{ip}");
    let outside: Service = serde_json::from_value(json!({
        "metadata": {"name": "outside"}, "spec": {"clusterIP": "10.43.0.20", "ports": [{"port": 80}]}
    }))
    .expect("service");
    let refused = services
        .create(&PostParams::default(), &outside)
        .await
        .expect_err("outside the range");
    assert!(
        refused
            .to_string()
            .contains("The range of valid IPs is 10.96.0.0/16"),
        "{refused}"
    );
}
