//! kube-rs, unmodified, against the API server: create, get, list with
//! selectors and pages, watch from a resourceVersion, patch, delete — on the
//! embedded store and on a real etcd.

mod support;

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::Status;
use serde_json::json;
use support::Backend;

fn configmap(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()},
        "data": {"key": name},
    }))
    .expect("configmap")
}

/// The resourceVersion of a list of `api`'s objects: where a watch that
/// wants every later change starts.
async fn current_rv<K>(api: &Api<K>) -> String
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv")
}

fn api_error(error: kube::Error) -> Status {
    match error {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error, got {other}"),
    }
}

async fn crud_list_watch(backend: Backend) {
    let server = support::start(backend).await;
    let client = server.client.clone();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let system: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(
            system.contains(&ns.to_string()),
            "{ns} missing from {system:?}"
        );
    }

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = cms
        .create(&PostParams::default(), &configmap("one", &[("app", "web")]))
        .await
        .expect("create");
    let uid = created.metadata.uid.clone().expect("uid");
    assert!(created.metadata.resource_version.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    let err = api_error(
        cms.create(&PostParams::default(), &configmap("one", &[]))
            .await
            .expect_err("exists"),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));
    let got = cms.get("one").await.expect("get");
    assert_eq!(got.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(
        api_error(cms.get("missing").await.expect_err("missing")).code,
        404
    );

    for i in 0..7 {
        let tier = if i % 2 == 0 { "even" } else { "odd" };
        cms.create(
            &PostParams::default(),
            &configmap(&format!("page-{i}"), &[("tier", tier)]),
        )
        .await
        .expect("create");
    }
    let even = cms
        .list(&ListParams::default().labels("tier=even"))
        .await
        .expect("list");
    assert_eq!(even.items.len(), 4);
    let first = cms
        .list(&ListParams::default().labels("tier").limit(3))
        .await
        .expect("page");
    assert_eq!(first.items.len(), 3);
    let token = first.metadata.continue_.clone().expect("a continue token");
    assert_eq!(
        first.metadata.remaining_item_count, None,
        "no count with a selector"
    );
    let rest = cms
        .list(
            &ListParams::default()
                .labels("tier")
                .limit(10)
                .continue_token(&token),
        )
        .await
        .expect("next page");
    assert_eq!(rest.items.len(), 4);
    let by_name = cms
        .list(&ListParams::default().fields("metadata.name=one"))
        .await
        .expect("field selector");
    assert_eq!(by_name.items.len(), 1);

    // Watch from a resourceVersion: exactly the changes after it, in order.
    let from = current_rv(&cms).await;
    let mut watch = cms
        .watch(&WatchParams::default().labels("app=web"), &from)
        .await
        .expect("watch")
        .boxed();
    let patched = cms
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"key": "patched"}})),
        )
        .await
        .expect("merge patch");
    assert_eq!(
        patched
            .data
            .as_ref()
            .and_then(|d| d.get("key"))
            .map(String::as_str),
        Some("patched")
    );
    cms.patch(
        "one",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(
                json!([{"op": "add", "path": "/metadata/labels/extra", "value": "x"}]),
            )
            .expect("json patch"),
        ),
    )
    .await
    .expect("json patch");
    cms.delete("one", &DeleteParams::default())
        .await
        .expect("delete");
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match watch.try_next().await.expect("watch stream") {
            Some(WatchEvent::Modified(cm)) => seen.push(("MODIFIED", cm.metadata.name)),
            Some(WatchEvent::Deleted(cm)) => seen.push(("DELETED", cm.metadata.name)),
            Some(WatchEvent::Added(cm)) => seen.push(("ADDED", cm.metadata.name)),
            Some(WatchEvent::Bookmark(_)) => {}
            Some(WatchEvent::Error(e)) => panic!("watch error {e:?}"),
            None => panic!("watch ended"),
        }
    }
    let one = Some("one".to_string());
    assert_eq!(
        seen,
        vec![
            ("MODIFIED", one.clone()),
            ("MODIFIED", one.clone()),
            ("DELETED", one)
        ]
    );
    assert_eq!(
        api_error(cms.get("one").await.expect_err("deleted")).code,
        404
    );

    // A workload with a status and a scale subresource.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "main", "image": "registry.local/web:1"}]}}}
    }))
    .expect("deployment");
    let created = deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("create");
    assert_eq!(
        created.spec.as_ref().and_then(|s| s.replicas),
        Some(1),
        "defaulted"
    );
    assert_eq!(created.metadata.generation, Some(1));
    let scale = deployments
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    let scaled = deployments.get("web").await.expect("get");
    assert_eq!(scaled.metadata.generation, Some(2));
    let invalid = api_error(
        deployments
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "Bad_Name"}, "spec": {"selector": {}, "template": {}}})).expect("d"))
            .await
            .expect_err("invalid"),
    );
    assert_eq!((invalid.code, invalid.reason.as_str()), (422, "Invalid"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_works_against_the_embedded_store() {
    crud_list_watch(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_works_against_etcd() {
    crud_list_watch(Backend::Etcd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_compacted_revision_is_gone() {
    let server = support::start(Backend::Embedded).await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client.clone(), "default");
    let first = cms
        .create(&PostParams::default(), &configmap("a", &[]))
        .await
        .expect("create");
    let old = first.metadata.resource_version.expect("rv");
    for i in 0..3 {
        cms.create(&PostParams::default(), &configmap(&format!("b{i}"), &[]))
            .await
            .expect("create");
    }
    let current: u64 = current_rv(&cms).await.parse().expect("number");
    server_store_compact(&server, current).await;
    let mut watch = cms
        .watch(&WatchParams::default(), &old)
        .await
        .expect("watch")
        .boxed();
    match watch.try_next().await {
        Ok(Some(WatchEvent::Error(status))) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 410),
        other => panic!("expected 410 Expired, got {other:?}"),
    }
}

async fn server_store_compact(server: &support::Server, revision: u64) {
    server.store().compact(revision).await.expect("compact");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_before_the_cache_window_come_from_the_store_and_many_watchers_agree() {
    let server = support::start(Backend::Embedded).await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client.clone(), "default");
    // Revisions from before the cache for configmaps existed.
    let early = cms
        .create(&PostParams::default(), &configmap("early", &[]))
        .await
        .expect("create");
    let early_rv = early.metadata.resource_version.expect("rv");
    cms.create(&PostParams::default(), &configmap("second", &[]))
        .await
        .expect("create");
    // The first list starts the cache at the current revision.
    cms.list(&ListParams::default()).await.expect("list");
    let mut from_store = cms
        .watch(&WatchParams::default(), &early_rv)
        .await
        .expect("watch")
        .boxed();
    match from_store.try_next().await.expect("stream") {
        Some(WatchEvent::Added(cm)) => assert_eq!(cm.metadata.name.as_deref(), Some("second")),
        other => panic!("expected the create after the resourceVersion, got {other:?}"),
    }

    // Many watchers of the cache see the same events in the same order.
    let rv = current_rv(&cms).await;
    let mut watchers = Vec::new();
    for _ in 0..20 {
        watchers.push(
            cms.watch(&WatchParams::default(), &rv)
                .await
                .expect("watch")
                .boxed(),
        );
    }
    for i in 0..5 {
        cms.create(&PostParams::default(), &configmap(&format!("fan-{i}"), &[]))
            .await
            .expect("create");
    }
    for watcher in &mut watchers {
        let mut names = Vec::new();
        while names.len() < 5 {
            match watcher.try_next().await.expect("stream") {
                Some(WatchEvent::Added(cm)) => names.push(cm.metadata.name.expect("name")),
                Some(WatchEvent::Bookmark(_)) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(
            names,
            (0..5).map(|i| format!("fan-{i}")).collect::<Vec<_>>()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_get_unique_cluster_ips_and_node_ports() {
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::networking::v1::IPAddress;
    let server = support::start(Backend::Embedded).await;
    let services: Api<Service> = Api::namespaced(server.client.clone(), "default");
    let svc = |name: &str, extra: serde_json::Value| -> Service {
        let mut spec =
            json!({"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("service")
    };
    let kubernetes = services
        .get("kubernetes")
        .await
        .expect("the kubernetes service exists");
    assert_eq!(
        kubernetes
            .spec
            .as_ref()
            .and_then(|s| s.cluster_ip.as_deref()),
        Some("10.43.0.1")
    );
    // Its endpoints are this server, as upstream's endpoint reconciler
    // keeps them: the bound address (127.0.0.1 here) and the HTTPS port.
    use k8s_openapi::api::core::v1::Endpoints;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let kubeconfig = kube::config::Kubeconfig::read_from(&server.kubeconfig).expect("kubeconfig");
    let url = kubeconfig.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .expect("server url");
    let port: i32 = url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let endpoints: Api<Endpoints> = Api::namespaced(server.client.clone(), "default");
    let endpoints =
        serde_json::to_value(endpoints.get("kubernetes").await.expect("endpoints")).expect("json");
    assert_eq!(
        endpoints["subsets"][0]["addresses"][0]["ip"],
        json!("127.0.0.1")
    );
    assert_eq!(
        endpoints["subsets"][0]["ports"][0],
        json!({"name": "https", "port": port, "protocol": "TCP"})
    );
    let slices: Api<EndpointSlice> = Api::namespaced(server.client.clone(), "default");
    let slice = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
        .await
        .expect("slices");
    let slice = serde_json::to_value(&slice.items[0]).expect("json");
    assert_eq!(slice["addressType"], json!("IPv4"));
    assert_eq!(slice["endpoints"][0]["addresses"], json!(["127.0.0.1"]));
    assert_eq!(slice["ports"][0]["port"], json!(port));

    let a = services
        .create(&PostParams::default(), &svc("a", json!({})))
        .await
        .expect("create a");
    let b = services
        .create(&PostParams::default(), &svc("b", json!({})))
        .await
        .expect("create b");
    let ip = |s: &Service| {
        s.spec
            .as_ref()
            .and_then(|s| s.cluster_ip.clone())
            .expect("clusterIP")
    };
    let (ip_a, ip_b) = (ip(&a), ip(&b));
    assert_ne!(ip_a, ip_b);
    for address in [&ip_a, &ip_b] {
        assert!(address.starts_with("10.43."), "{address}");
    }
    assert_eq!(
        a.spec.as_ref().and_then(|s| s.cluster_ips.clone()),
        Some(vec![ip_a.clone()])
    );
    let ipaddresses: Api<IPAddress> = Api::all(server.client.clone());
    let record = ipaddresses
        .get(&ip_a)
        .await
        .expect("an IPAddress for the allocation");
    assert_eq!(
        record.spec.map(|s| s.parent_ref.name),
        Some("a".to_string())
    );

    // A requested address: granted once, refused while taken, reusable after delete.
    let fixed = services
        .create(
            &PostParams::default(),
            &svc("fixed", json!({"clusterIP": "10.43.200.7"})),
        )
        .await
        .expect("fixed");
    assert_eq!(ip(&fixed), "10.43.200.7");
    let taken = api_error(
        services
            .create(
                &PostParams::default(),
                &svc("again", json!({"clusterIP": "10.43.200.7"})),
            )
            .await
            .expect_err("taken"),
    );
    assert_eq!((taken.code, taken.reason.as_str()), (422, "Invalid"));
    assert!(
        taken.message.contains("already allocated"),
        "{}",
        taken.message
    );
    let outside = api_error(
        services
            .create(
                &PostParams::default(),
                &svc("outside", json!({"clusterIP": "192.168.1.1"})),
            )
            .await
            .expect_err("outside"),
    );
    assert_eq!(outside.code, 422);
    services
        .delete("fixed", &DeleteParams::default())
        .await
        .expect("delete");
    services
        .create(
            &PostParams::default(),
            &svc("reuse", json!({"clusterIP": "10.43.200.7"})),
        )
        .await
        .expect("the address is free again");

    // An update that leaves out the address keeps it; changing it is refused.
    let mut replace = svc("a", json!({}));
    replace.metadata.resource_version = None;
    let kept = services
        .replace("a", &PostParams::default(), &replace)
        .await
        .expect("replace");
    assert_eq!(ip(&kept), ip_a);
    let mut moved = svc("a", json!({"clusterIP": "10.43.9.9"}));
    moved.metadata.resource_version = None;
    assert_eq!(
        api_error(
            services
                .replace("a", &PostParams::default(), &moved)
                .await
                .expect_err("immutable")
        )
        .code,
        422
    );

    // NodePorts: in range, unique, released on delete.
    let np = services
        .create(
            &PostParams::default(),
            &svc("np", json!({"type": "NodePort"})),
        )
        .await
        .expect("nodeport");
    let port = np
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p[0].node_port)
        .expect("a node port");
    assert!((30000..=32767).contains(&port), "{port}");
    let clash = api_error(
        services
            .create(
                &PostParams::default(),
                &svc(
                    "np2",
                    json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": port}]}),
                ),
            )
            .await
            .expect_err("port taken"),
    );
    assert_eq!(clash.code, 422);
    services
        .delete("np", &DeleteParams::default())
        .await
        .expect("delete");
    services
        .create(
            &PostParams::default(),
            &svc(
                "np3",
                json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": port}]}),
            ),
        )
        .await
        .expect("the port is free again");
    assert!(
        ipaddresses.get(&ip(&np)).await.is_err(),
        "the deleted service's address was released"
    );

    let no_ports: Service = serde_json::from_value(
        json!({"metadata": {"name": "empty"}, "spec": {"selector": {"a": "b"}}}),
    )
    .expect("svc");
    assert_eq!(
        api_error(
            services
                .create(&PostParams::default(), &no_ports)
                .await
                .expect_err("ports required")
        )
        .code,
        422
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_respect_pod_disruption_budgets() {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use kube::api::EvictParams;
    let server = support::start(Backend::Embedded).await;
    let pods: Api<Pod> = Api::namespaced(server.client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(server.client.clone(), "default");
    for name in ["p1", "p2", "free"] {
        let app = if name == "free" { "other" } else { "guarded" };
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}))
            .expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
    // Not covered by a budget: evicted at once.
    pods.evict("free", &EvictParams::default())
        .await
        .expect("evict an uncovered pod");
    assert_eq!(
        api_error(pods.get("free").await.expect_err("gone")).code,
        404
    );

    let pdb: PodDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": "guard"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}}))
    .expect("pdb");
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("create pdb");
    // The budget has not been processed yet (no status): refused.
    let early = api_error(
        pods.evict("p1", &EvictParams::default())
            .await
            .expect_err("unprocessed budget"),
    );
    assert_eq!(
        (early.code, early.reason.as_str()),
        (429, "TooManyRequests")
    );
    // As the disruption controller would: one disruption allowed.
    pdbs.patch_status("guard", &PatchParams::default(), &Patch::Merge(json!({"status": {
        "observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2}})))
        .await
        .expect("status");
    pods.evict("p1", &EvictParams::default())
        .await
        .expect("the first eviction fits the budget");
    assert_eq!(api_error(pods.get("p1").await.expect_err("gone")).code, 404);
    let spent = pdbs
        .get_status("guard")
        .await
        .expect("pdb")
        .status
        .expect("status");
    assert_eq!(spent.disruptions_allowed, 0);
    assert!(spent.disrupted_pods.expect("recorded").contains_key("p1"));
    let refused = api_error(
        pods.evict("p2", &EvictParams::default())
            .await
            .expect_err("budget spent"),
    );
    assert_eq!(
        (refused.code, refused.reason.as_str()),
        (429, "TooManyRequests")
    );
    assert!(
        refused.message.contains("disruption budget"),
        "{}",
        refused.message
    );
    pods.get("p2").await.expect("p2 is still there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_and_newer_versions_serve_the_same_objects() {
    use k8s_openapi::api::autoscaling::{v1 as hpa1, v2 as hpa2};
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event as NewEvent;
    let server = support::start(Backend::Embedded).await;
    let client = server.client.clone();
    let v1: Api<hpa1::HorizontalPodAutoscaler> = Api::namespaced(client.clone(), "default");
    let v2: Api<hpa2::HorizontalPodAutoscaler> = Api::namespaced(client.clone(), "default");
    let hpa: hpa1::HorizontalPodAutoscaler = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "minReplicas": 1, "maxReplicas": 5, "targetCPUUtilizationPercentage": 70}}))
    .expect("hpa");
    let rv = current_rv(&v1).await;
    let mut watch = v1
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch v1")
        .boxed();
    v1.create(&PostParams::default(), &hpa)
        .await
        .expect("create through v1");
    let as_v2 = v2.get("web").await.expect("read through v2");
    let metric = &as_v2
        .spec
        .as_ref()
        .and_then(|s| s.metrics.clone())
        .expect("metrics")[0];
    assert_eq!(
        metric
            .resource
            .as_ref()
            .and_then(|r| r.target.average_utilization),
        Some(70)
    );
    v2.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"maxReplicas": 9}})),
    )
    .await
    .expect("patch through v2");
    let back = v1
        .get("web")
        .await
        .expect("read through v1")
        .spec
        .expect("spec");
    assert_eq!(
        (back.max_replicas, back.target_cpu_utilization_percentage),
        (9, Some(70))
    );
    let mut kinds = Vec::new();
    while kinds.len() < 2 {
        match watch.try_next().await.expect("stream") {
            Some(WatchEvent::Added(h)) | Some(WatchEvent::Modified(h)) => {
                assert_eq!(
                    h.spec
                        .as_ref()
                        .and_then(|s| s.target_cpu_utilization_percentage),
                    Some(70),
                    "v1 events carry the v1 form"
                );
                kinds.push(h.spec.map(|s| s.max_replicas));
            }
            Some(WatchEvent::Bookmark(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(kinds, vec![Some(5), Some(9)]);

    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let newer: Api<NewEvent> = Api::namespaced(client.clone(), "default");
    let event: CoreEvent = serde_json::from_value(
        json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p"},
        "reason": "Pulled", "message": "pulled the image", "type": "Normal", "count": 1}),
    )
    .expect("event");
    core.create(&PostParams::default(), &event)
        .await
        .expect("create core event");
    let seen = newer.get("e1").await.expect("read as events.k8s.io/v1");
    assert_eq!(seen.note.as_deref(), Some("pulled the image"));
    assert_eq!(seen.regarding.and_then(|r| r.name).as_deref(), Some("p"));
    let created: NewEvent = serde_json::from_value(json!({"metadata": {"name": "e2"}, "eventTime": "2026-11-30T10:00:00.000000Z",
        "reportingController": "rudder/test", "reportingInstance": "t", "action": "Test", "reason": "Tested", "type": "Normal",
        "regarding": {"kind": "Node", "name": "n"}, "note": "from the new API"})).expect("event");
    newer
        .create(&PostParams::default(), &created)
        .await
        .expect("create through events.k8s.io/v1");
    let old = core.get("e2").await.expect("read as core/v1");
    assert_eq!(old.message.as_deref(), Some("from the new API"));
    assert_eq!(old.involved_object.name.as_deref(), Some("n"));
    assert_eq!(
        newer
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        2
    );
}

/// Kubelets watch the pods of their node and the scheduler the pods of no
/// node: the watch cache routes each pod's events by `spec.nodeName`, and
/// a binding moves a pod from one watcher's view to the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_name_watches_see_only_their_pods() {
    use k8s_openapi::api::core::v1::{Binding, Pod};
    let server = support::start(Backend::Embedded).await;
    let pods: Api<Pod> = Api::namespaced(server.client.clone(), "default");
    let rv = current_rv(&pods).await;
    let mut node_a = pods
        .watch(&WatchParams::default().fields("spec.nodeName=node-a"), &rv)
        .await
        .expect("watch node-a")
        .boxed();
    let mut unscheduled = pods
        .watch(&WatchParams::default().fields("spec.nodeName="), &rv)
        .await
        .expect("watch unscheduled")
        .boxed();
    let pod = |name: &str, node: Option<&str>| -> Pod {
        let mut spec = json!({"containers": [{"name": "c", "image": "i"}]});
        if let Some(node) = node {
            spec["nodeName"] = json!(node);
        }
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("pod")
    };
    pods.create(&PostParams::default(), &pod("elsewhere", Some("node-b")))
        .await
        .expect("create on node-b");
    pods.create(&PostParams::default(), &pod("waiting", None))
        .await
        .expect("create unscheduled");
    let binding: Binding = serde_json::from_value(json!({
        "metadata": {"name": "waiting"},
        "target": {"kind": "Node", "name": "node-a"}
    }))
    .expect("binding");
    pods.create_subresource::<Binding, serde_json::Value>(
        "binding",
        "waiting",
        &PostParams::default(),
        &binding,
    )
    .await
    .expect("bind");
    pods.create(&PostParams::default(), &pod("direct", Some("node-a")))
        .await
        .expect("create on node-a");

    assert_eq!(
        next_events(&mut node_a, 2).await,
        vec!["ADDED waiting", "ADDED direct"]
    );
    assert_eq!(
        next_events(&mut unscheduled, 2).await,
        vec!["ADDED waiting", "DELETED waiting"]
    );
}

/// The next `n` events of a pod watch, as `ADDED <name>`.
async fn next_events<S>(watch: &mut S, n: usize) -> Vec<String>
where
    S: futures::Stream<Item = Result<WatchEvent<k8s_openapi::api::core::v1::Pod>, kube::Error>>
        + Unpin,
{
    let mut seen = Vec::new();
    while seen.len() < n {
        let event = tokio::time::timeout(std::time::Duration::from_secs(10), watch.try_next())
            .await
            .expect("an event in time")
            .expect("event")
            .expect("not ended");
        seen.push(match event {
            WatchEvent::Added(p) => format!("ADDED {}", p.metadata.name.unwrap_or_default()),
            WatchEvent::Deleted(p) => format!("DELETED {}", p.metadata.name.unwrap_or_default()),
            WatchEvent::Modified(p) => format!("MODIFIED {}", p.metadata.name.unwrap_or_default()),
            other => format!("{other:?}"),
        });
    }
    seen
}

/// A namespace's watch sees only that namespace's objects — from a
/// resourceVersion (the cache's history) and from now (its snapshot, then
/// live) — though the watch cache holds the whole resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespaced_watch_sees_only_its_namespace() {
    let server = support::start(Backend::Embedded).await;
    let namespaces: Api<Namespace> = Api::all(server.client.clone());
    for name in ["one", "two"] {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
    }
    let (one, two): (Api<ConfigMap>, Api<ConfigMap>) = (
        Api::namespaced(server.client.clone(), "one"),
        Api::namespaced(server.client.clone(), "two"),
    );
    one.create(&PostParams::default(), &configmap("elsewhere", &[]))
        .await
        .expect("create");
    let from = current_rv(&two).await;
    let mut since = two
        .watch(&WatchParams::default(), &from)
        .await
        .expect("watch")
        .boxed();
    let mut now = two
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch")
        .boxed();
    // Changes in the other namespace, then one here.
    let patch = json!({"metadata": {"labels": {"changed": "yes"}}});
    one.patch("elsewhere", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    one.delete("elsewhere", &DeleteParams::default())
        .await
        .expect("delete");
    two.create(&PostParams::default(), &configmap("here", &[]))
        .await
        .expect("create");
    for watch in [&mut since, &mut now] {
        match watch.try_next().await.expect("stream") {
            Some(WatchEvent::Added(cm)) => {
                assert_eq!(
                    (
                        cm.metadata.namespace.as_deref(),
                        cm.metadata.name.as_deref()
                    ),
                    (Some("two"), Some("here"))
                )
            }
            other => panic!("expected only namespace two's create, got {other:?}"),
        }
    }
}

/// A watch list (kubectl and client-go from 1.34 on list this way): every
/// object as ADDED, then the bookmark annotated
/// `k8s.io/initial-events-end` at the state's resourceVersion, then
/// changes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_list_sends_the_state_then_its_end_then_changes() {
    let server = support::start(Backend::Embedded).await;
    let api: Api<ConfigMap> = Api::namespaced(server.client.clone(), "default");
    for name in ["one", "two"] {
        api.create(&PostParams::default(), &configmap(name, &[]))
            .await
            .expect("create");
    }
    let mut stream = api
        .watch(&WatchParams::streaming_lists(), "")
        .await
        .expect("watch list")
        .boxed();
    let mut added = Vec::new();
    let end = loop {
        let event = tokio::time::timeout(std::time::Duration::from_secs(10), stream.try_next())
            .await
            .expect("an event within 10 s")
            .expect("the stream")
            .expect("an event");
        match event {
            WatchEvent::Added(cm) => added.push(cm.metadata.name.expect("name")),
            WatchEvent::Bookmark(bookmark) => break bookmark,
            other => panic!("unexpected {other:?}"),
        }
    };
    added.sort();
    assert_eq!(added, ["one", "two"]);
    assert_eq!(
        end.metadata
            .annotations
            .get("k8s.io/initial-events-end")
            .map(String::as_str),
        Some("true")
    );
    let state = current_rv(&api).await;
    assert!(
        end.metadata.resource_version.parse::<u64>().expect("rv")
            <= state.parse::<u64>().expect("rv")
    );
    api.create(&PostParams::default(), &configmap("three", &[]))
        .await
        .expect("create");
    let next = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            match stream.try_next().await.expect("stream").expect("event") {
                WatchEvent::Bookmark(_) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the change within 10 s");
    match next {
        WatchEvent::Added(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("three")),
        other => panic!("expected three ADDED, got {other:?}"),
    }
}
