//! What the crash tests cannot see (SIGKILL keeps the page cache, so they
//! would pass without any fsync): through a sync the test steers, no write
//! is acknowledged before the log holding it is synced, and a failed sync
//! fails the write and leaves the store refusing writes and unhealthy —
//! never acknowledging what may be lost.

use std::time::Duration;

use bytes::Bytes;
use rudder_store::Error;
use rudder_store::testing::{ControlledSync, embedded_with_sync};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_write_is_acknowledged_before_its_log_is_synced() {
    let sync = ControlledSync::new();
    let test = embedded_with_sync(sync.clone()).await;
    let store = test.store.clone();
    let before = sync.syncs();
    store.create(b"/a", Bytes::from("1")).await.expect("create");
    assert!(
        sync.syncs() > before,
        "a write was acknowledged without a sync"
    );

    sync.hold();
    // Released however this test ends, so the writer never stays blocked.
    struct Release(std::sync::Arc<ControlledSync>);
    impl Drop for Release {
        fn drop(&mut self) {
            self.0.release();
        }
    }
    let _release = Release(sync.clone());
    let writer = {
        let store = store.clone();
        tokio::spawn(async move { store.create(b"/b", Bytes::from("2")).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !writer.is_finished(),
        "acknowledged while its sync was held"
    );
    let held = sync.syncs();
    sync.release();
    let written = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("acknowledged once synced")
        .expect("joined")
        .expect("created");
    assert!(held > before + 1, "the held write was being synced");
    assert_eq!(store.get(b"/b", None).await.expect("get"), written);
    store.check().await.expect("healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sync_fails_the_write_and_the_store_stays_unwritable() {
    let sync = ControlledSync::new();
    let test = embedded_with_sync(sync.clone()).await;
    let store = test.store.clone();
    store.create(b"/a", Bytes::from("1")).await.expect("create");
    sync.fail();
    match store.create(b"/b", Bytes::from("2")).await {
        Err(Error::Unavailable { .. }) => {}
        other => panic!("a write whose sync failed was not refused: {other:?}"),
    }
    assert!(
        matches!(store.get(b"/b", None).await, Err(Error::NotFound)),
        "not visible"
    );
    // The disk coming back does not make the store trust its log again.
    sync.release();
    assert!(store.create(b"/c", Bytes::from("3")).await.is_err());
    assert!(
        store.check().await.is_err(),
        "the store says it cannot write"
    );
    assert_eq!(
        store.get(b"/a", None).await.expect("reads go on").value,
        Bytes::from("1")
    );
}
