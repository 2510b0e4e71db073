//! A stored value that cannot be decoded (written by something else, or
//! damaged) is reported and counted, and never served as if the object
//! were still what it was: lists and watches drop it, a GET fails loudly.

use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use rudder_apiserver::{Identity, Server, ServerOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_value_is_counted_and_not_served() {
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

    // Watchers see it go, lists no longer show it, a GET says what is wrong.
    let event = tokio::time::timeout(Duration::from_secs(5), watch.try_next())
        .await
        .expect("an event")
        .expect("no error")
        .expect("not ended");
    assert!(matches!(event, WatchEvent::Deleted(_)), "{event:?}");
    let listed = api.list(&ListParams::default()).await.expect("list");
    assert!(
        listed.items.is_empty(),
        "a stale object was served as current"
    );
    match api.get("victim").await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 500, "{status:?}"),
        other => panic!("a GET of an undecodable object: {other:?}"),
    }
    let metrics = client
        .request_text(
            http::Request::get("/metrics")
                .body(Vec::new())
                .expect("request"),
        )
        .await
        .expect("metrics");
    assert!(
        metrics.contains(
            "apiserver_storage_decode_errors_total{prefix=\"/registry/core/configmaps/\"} 1"
        ),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("decode"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    server.stop().await;
}
