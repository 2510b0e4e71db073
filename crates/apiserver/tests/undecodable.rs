//! A stored value that cannot be decoded (written by something else, or
//! damaged) is reported and counted, and never served as if the object
//! were still what it was — nor as if it were gone: watchers get an error
//! and lists and GETs fail, as upstream's do, until it is repaired.

use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchParams};
use rudder_apiserver::{Identity, Server, ServerOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_value_is_an_error_until_it_is_repaired() {
    let store = rudder_store::testing::embedded().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(ServerOptions::new(dir.path(), store.store.clone(), None))
        .await
        .expect("start");
    let client = server.client(&Identity::admin());
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut object = ConfigMap::default();
    object.metadata.name = Some("victim".into());
    let created = api
        .create(&PostParams::default(), &object)
        .await
        .expect("create");
    assert_eq!(
        api.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        1
    );
    let rv = created.metadata.resource_version.clone().expect("rv");
    let watch = api
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch");
    futures::pin_mut!(watch);

    // Something writes garbage over it, behind the API server's back.
    let key = b"/registry/core/configmaps/default/victim";
    let current = store.store.get(key, None).await.expect("stored");
    store
        .store
        .update(
            key,
            Bytes::from_static(b"\x00not json"),
            current.mod_revision,
        )
        .await
        .expect("damage");

    // Watchers get an error (not a made-up delete), lists and GETs fail.
    let event = tokio::time::timeout(Duration::from_secs(5), watch.try_next())
        .await
        .expect("an event");
    match event {
        Ok(Some(kube::api::WatchEvent::Error(status))) => {
            assert_eq!(status.code, 500);
            assert!(
                status.message.contains("cannot be decoded"),
                "{}",
                status.message
            );
        }
        other => panic!("expected an error event, got {other:?}"),
    }
    match api.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 500, "{status:?}"),
        other => panic!("a list with an undecodable object: {other:?}"),
    }
    match api.get("victim").await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 500, "{status:?}"),
        other => panic!("a GET of an undecodable object: {other:?}"),
    }
    let elsewhere: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    elsewhere
        .list(&ListParams::default())
        .await
        .expect("other namespaces still list");
    let metrics = client
        .request_text(
            http::Request::get("/metrics")
                .body(Vec::new())
                .expect("request"),
        )
        .await
        .expect("metrics");
    assert!(
        metrics.contains("apiserver_storage_decode_errors_total{resource=\"configmaps\"} 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("decode"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // Repaired (here: deleted), the resource serves again.
    store.store.delete(key, None).await.expect("repair");
    let mut listed = None;
    for _ in 0..100 {
        if let Ok(list) = api.list(&ListParams::default()).await {
            listed = Some(list);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(listed.expect("lists again once repaired").items.is_empty());
    server.stop().await;
}
