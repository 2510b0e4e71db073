//! Endpoints and EndpointSlices against a real API server: a Service's
//! selected pods (made Ready, with addresses, by the stand-in kubelet)
//! listed with their resolved ports, kept up to date as pods come and go,
//! removed with the Service; a selector-less Service's manual Endpoints
//! mirrored.

mod support;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use support::{cluster_with_nodes, until};

async fn create_pod(client: &Client, name: &str) {
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "ports": [{"name": "http", "containerPort": 8080}]}]}
    }))
    .expect("pod");
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &p)
        .await
        .expect("create pod");
}

fn ready_ips(e: &Endpoints) -> Vec<String> {
    let mut ips: Vec<String> = e
        .subsets
        .iter()
        .flatten()
        .flat_map(|s| s.addresses.iter().flatten())
        .map(|a| a.ip.clone())
        .collect();
    ips.sort();
    ips
}

async fn slices_of(client: &Client, service: &str) -> Vec<EndpointSlice> {
    Api::<EndpointSlice>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await
        .expect("list slices")
        .items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_lists_its_ready_pods_in_endpoints_and_slices() {
    let c = cluster_with_nodes().await;
    let services: Api<Service> = Api::namespaced(c.admin.clone(), "default");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
    }))
    .expect("service");
    let svc = services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create");
    create_pod(&c.admin, "a").await;
    create_pod(&c.admin, "b").await;
    let endpoints: Api<Endpoints> = Api::namespaced(c.admin.clone(), "default");
    until("two ready addresses", || async {
        endpoints
            .get_opt("web")
            .await
            .expect("get")
            .is_some_and(|e| ready_ips(&e).len() == 2)
    })
    .await;
    let e = endpoints.get("web").await.expect("get");
    let port = e
        .subsets
        .as_ref()
        .and_then(|s| s[0].ports.as_ref())
        .map(|p| (p[0].name.clone(), p[0].port));
    assert_eq!(
        port,
        Some((Some("http".into()), 8080)),
        "the named target port resolved"
    );
    until("a slice with both", || async {
        let slices = slices_of(&c.admin, "web").await;
        slices.len() == 1 && slices[0].endpoints.len() == 2
    })
    .await;
    let slice = slices_of(&c.admin, "web").await.remove(0);
    assert_eq!(
        slice
            .labels()
            .get("endpointslice.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("endpointslice-controller.k8s.io")
    );
    assert_eq!(
        slice.owner_references().first().map(|r| r.uid.clone()),
        svc.uid()
    );
    assert_eq!(slice.address_type, "IPv4");

    Api::<Pod>::namespaced(c.admin.clone(), "default")
        .delete("a", &DeleteParams::default())
        .await
        .expect("delete a pod");
    until("one address left", || async {
        ready_ips(&endpoints.get("web").await.expect("get")).len() == 1
    })
    .await;
    services
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete the service");
    until("its endpoints and slices go", || async {
        endpoints.get_opt("web").await.expect("get").is_none()
            && slices_of(&c.admin, "web").await.is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_endpoints_of_a_selectorless_service_are_mirrored() {
    let c = cluster_with_nodes().await;
    let services: Api<Service> = Api::namespaced(c.admin.clone(), "default");
    let svc: Service = serde_json::from_value(
        json!({"metadata": {"name": "external"}, "spec": {"ports": [{"port": 5432}]}}),
    )
    .expect("service");
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create");
    let manual: Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "external"},
        "subsets": [{"addresses": [{"ip": "192.0.2.10"}], "ports": [{"port": 5432}]}]
    }))
    .expect("endpoints");
    Api::<Endpoints>::namespaced(c.admin.clone(), "default")
        .create(&PostParams::default(), &manual)
        .await
        .expect("create");
    until("a mirrored slice", || async {
        let slices = slices_of(&c.admin, "external").await;
        slices.len() == 1
            && slices[0].endpoints[0].addresses == ["192.0.2.10"]
            && slices[0]
                .labels()
                .get("endpointslice.kubernetes.io/managed-by")
                .map(String::as_str)
                == Some("endpointslicemirroring-controller.k8s.io")
    })
    .await;
    // The endpoints controller leaves a selector-less Service's Endpoints be.
    let e = Api::<Endpoints>::namespaced(c.admin.clone(), "default")
        .get("external")
        .await
        .expect("get");
    assert_eq!(ready_ips(&e), ["192.0.2.10"]);
}
