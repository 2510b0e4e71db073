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
    let from = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
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
    let current: u64 = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv")
        .parse()
        .expect("number");
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
    let rv = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
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
