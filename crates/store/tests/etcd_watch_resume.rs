//! An etcd watch survives etcd going away: when the stream breaks it
//! reconnects and resumes after the last revision it delivered, so the
//! consumer sees every event exactly once, in order.

use std::time::Duration;

use bytes::Bytes;
use rudder_store::etcd::{EtcdConfig, EtcdStore};
use rudder_store::testing::EtcdServer;
use rudder_store::testing::suite::{collect_at_least, collect_events};
use rudder_store::{Error, Store, WatchRequest};

async fn create_retrying(store: &EtcdStore, key: &str) -> u64 {
    for _ in 0..200 {
        match store.create(key.as_bytes(), Bytes::from_static(b"v")).await {
            Ok(kv) => return kv.mod_revision,
            Err(Error::Unavailable { .. }) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("create {key}: {e}"),
        }
    }
    panic!("etcd did not come back for {key}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_across_an_etcd_restart_without_loss_or_repeats() {
    let mut server = EtcdServer::start().await.expect("start etcd");
    let config = EtcdConfig::from_url(&server.url())
        .expect("url")
        .with_prefix("/resume");
    let store = EtcdStore::connect(config).await.expect("connect");
    let mut watch = store
        .watch(WatchRequest::prefix(Bytes::from_static(b"/w/"), 0))
        .await
        .expect("watch");

    let mut written = Vec::new();
    for i in 0..30 {
        written.push(create_retrying(&store, &format!("/w/before/{i:02}")).await);
    }
    // Take some of the events now (etcd may deliver them in one batch), so
    // the watcher has a position to resume from.
    let first = collect_at_least(&mut watch, 10).await;

    server.restart().await.expect("restart etcd");
    for i in 0..30 {
        written.push(create_retrying(&store, &format!("/w/after/{i:02}")).await);
    }

    let remaining = written.len() - first.len();
    let mut events = first;
    events.extend(collect_events(&mut watch, remaining).await);
    let seen: Vec<u64> = events.iter().map(|e| e.revision()).collect();
    assert_eq!(
        seen, written,
        "the watcher lost, repeated or reordered events across the restart"
    );
    // And nothing more is pending: a progress notification comes next.
    watch.request_progress();
    let next = tokio::time::timeout(Duration::from_secs(20), watch.recv())
        .await
        .expect("answer");
    match next {
        Some(Ok(rudder_store::WatchResponse::Progress { revision })) => {
            assert!(revision >= *written.last().expect("writes"))
        }
        other => panic!("expected a progress notification, got {other:?}"),
    }
}
