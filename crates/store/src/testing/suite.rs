//! The conformance suite every [`Store`] backend must pass.
//!
//! Each case takes a fresh, empty store. Cases assert behaviour the API
//! server relies on; revisions are compared relative to each other, never to
//! fixed numbers, so a backend may start anywhere.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use futures::future::join_all;

use crate::{
    Error, Event, EventKind, ListOptions, MAX_REQUEST_BYTES, Store, WatchRequest, WatchResponse,
    WatchStream,
};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// How long a case waits for a watch event before it fails.
const WAIT: Duration = Duration::from_secs(20);

/// Receives events from `watch` until `count` have arrived, skipping progress
/// notifications. Fails on an error, a silent stream, or more events.
pub async fn collect_events(watch: &mut WatchStream, count: usize) -> Vec<Event> {
    let events = collect_at_least(watch, count).await;
    assert_eq!(events.len(), count, "more events than expected: {events:?}");
    events
}

/// Receives whole batches of events from `watch` until at least `count`
/// have arrived (a batch may bring more), skipping progress notifications.
pub async fn collect_at_least(watch: &mut WatchStream, count: usize) -> Vec<Event> {
    let mut events = Vec::new();
    while events.len() < count {
        let next = tokio::time::timeout(WAIT, watch.recv()).await;
        match next
            .expect("watch delivered nothing in time")
            .expect("watch ended")
        {
            Ok(WatchResponse::Events(batch)) => events.extend(batch),
            Ok(WatchResponse::Progress { .. }) => {}
            Err(e) => panic!("watch failed: {e}"),
        }
    }
    events
}

/// Waits for the next progress notification: an event before it fails the
/// case.
async fn next_progress(watch: &mut WatchStream) -> u64 {
    let next = tokio::time::timeout(WAIT, watch.recv()).await;
    match next
        .expect("no progress notification in time")
        .expect("watch ended")
    {
        Ok(WatchResponse::Progress { revision }) => revision,
        Ok(WatchResponse::Events(events)) => panic!("unexpected events: {events:?}"),
        Err(e) => panic!("watch failed: {e}"),
    }
}

fn assert_no_gaps_or_reordering(events: &[Event]) {
    for pair in events.windows(2) {
        assert!(
            pair[0].revision() < pair[1].revision(),
            "events out of order: {} then {}",
            pair[0].revision(),
            pair[1].revision()
        );
    }
}

pub async fn create_and_get(store: &dyn Store) {
    let before = store.current_revision().await.expect("revision");
    let created = store.create(b"/a/one", b("v1")).await.expect("create");
    assert!(created.mod_revision > before);
    assert_eq!(created.create_revision, created.mod_revision);
    assert_eq!(created.version, 1);
    assert_eq!(created.key, b("/a/one"));
    assert_eq!(
        store.current_revision().await.expect("revision"),
        created.mod_revision
    );

    let got = store.get(b"/a/one", None).await.expect("get");
    assert_eq!(got, created);
    assert!(matches!(
        store.create(b"/a/one", b("v2")).await,
        Err(Error::AlreadyExists)
    ));
    assert_eq!(
        store.get(b"/a/one", None).await.expect("get").value,
        b("v1")
    );
    assert!(matches!(
        store.get(b"/a/missing", None).await,
        Err(Error::NotFound)
    ));
    // A key that only shares a prefix is another key.
    assert!(matches!(
        store.get(b"/a/on", None).await,
        Err(Error::NotFound)
    ));
}

pub async fn update_is_compare_and_swap(store: &dyn Store) {
    let created = store.create(b"/k", b("v1")).await.expect("create");
    let updated = store
        .update(b"/k", b("v2"), created.mod_revision)
        .await
        .expect("update");
    assert!(updated.mod_revision > created.mod_revision);
    assert_eq!(updated.create_revision, created.create_revision);
    assert_eq!(updated.version, 2);
    assert_eq!(updated.value, b("v2"));

    match store.update(b"/k", b("stale"), created.mod_revision).await {
        Err(Error::Conflict {
            current: Some(current),
        }) => assert_eq!(*current, updated),
        other => panic!("expected a conflict with the current value, got {other:?}"),
    }
    assert_eq!(store.get(b"/k", None).await.expect("get").value, b("v2"));
    assert!(matches!(
        store.update(b"/missing", b("v"), 1).await,
        Err(Error::NotFound)
    ));
    assert!(matches!(
        store.update(b"/missing", b("v"), 0).await,
        Err(Error::NotFound)
    ));
}

pub async fn delete_is_compare_and_swap(store: &dyn Store) {
    let created = store.create(b"/d", b("v1")).await.expect("create");
    let updated = store
        .update(b"/d", b("v2"), created.mod_revision)
        .await
        .expect("update");
    match store.delete(b"/d", Some(created.mod_revision)).await {
        Err(Error::Conflict {
            current: Some(current),
        }) => assert_eq!(*current, updated),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let deleted = store
        .delete(b"/d", Some(updated.mod_revision))
        .await
        .expect("delete");
    assert_eq!(deleted.prev, updated);
    assert!(deleted.revision > updated.mod_revision);
    assert_eq!(
        store.current_revision().await.expect("revision"),
        deleted.revision
    );
    assert!(matches!(store.get(b"/d", None).await, Err(Error::NotFound)));
    assert!(matches!(
        store.delete(b"/d", None).await,
        Err(Error::NotFound)
    ));

    // Unconditional delete, and a re-create starts a new life.
    let again = store.create(b"/d", b("v3")).await.expect("re-create");
    assert_eq!(again.version, 1);
    assert_eq!(again.create_revision, again.mod_revision);
    let gone = store.delete(b"/d", None).await.expect("delete");
    assert_eq!(gone.prev, again);
}

pub async fn failed_writes_take_no_revision(store: &dyn Store) {
    let kv = store.create(b"/f", b("v")).await.expect("create");
    let at = store.current_revision().await.expect("revision");
    assert!(store.create(b"/f", b("x")).await.is_err());
    assert!(
        store
            .update(b"/f", b("x"), kv.mod_revision + 100)
            .await
            .is_err()
    );
    assert!(
        store
            .update(b"/none", b("x"), kv.mod_revision)
            .await
            .is_err()
    );
    assert!(store.delete(b"/none", None).await.is_err());
    assert!(
        store
            .delete(b"/f", Some(kv.mod_revision + 100))
            .await
            .is_err()
    );
    assert_eq!(store.current_revision().await.expect("revision"), at);
    let next = store.create(b"/g", b("v")).await.expect("create");
    assert!(next.mod_revision > at);
}

pub async fn get_at_past_revision(store: &dyn Store) {
    let v1 = store.create(b"/h", b("v1")).await.expect("create");
    let v2 = store
        .update(b"/h", b("v2"), v1.mod_revision)
        .await
        .expect("update");
    let deleted = store.delete(b"/h", None).await.expect("delete");
    let v3 = store.create(b"/h", b("v3")).await.expect("create");

    assert_eq!(
        store
            .get(b"/h", Some(v1.mod_revision))
            .await
            .expect("get at v1"),
        v1
    );
    assert_eq!(
        store
            .get(b"/h", Some(v2.mod_revision))
            .await
            .expect("get at v2"),
        v2
    );
    assert!(matches!(
        store.get(b"/h", Some(deleted.revision)).await,
        Err(Error::NotFound)
    ));
    assert!(matches!(
        store.get(b"/h", Some(v1.mod_revision - 1)).await,
        Err(Error::NotFound)
    ));
    assert_eq!(
        store
            .get(b"/h", Some(v3.mod_revision))
            .await
            .expect("get at v3"),
        v3
    );
    let future = v3.mod_revision + 1000;
    assert!(matches!(
        store.get(b"/h", Some(future)).await,
        Err(Error::FutureRevision { .. })
    ));
}

pub async fn list_by_prefix(store: &dyn Store) {
    for key in [
        "/r/pods/ns1/b",
        "/r/pods/ns1/a",
        "/r/pods/ns2/a",
        "/r/podsx/a",
        "/r/pod",
        "/q",
    ] {
        store.create(key.as_bytes(), b(key)).await.expect("create");
    }
    let page = store
        .list(b"/r/pods/", ListOptions::default())
        .await
        .expect("list");
    let keys: Vec<_> = page.kvs.iter().map(|kv| kv.key.clone()).collect();
    assert_eq!(
        keys,
        vec![b("/r/pods/ns1/a"), b("/r/pods/ns1/b"), b("/r/pods/ns2/a")]
    );
    assert_eq!(page.count, 3);
    assert!(!page.more);
    assert_eq!(
        page.revision,
        store.current_revision().await.expect("revision")
    );
    for kv in &page.kvs {
        assert_eq!(kv.value, kv.key);
    }
    let ns1 = store
        .list(b"/r/pods/ns1/", ListOptions::default())
        .await
        .expect("list");
    assert_eq!(ns1.kvs.len(), 2);
    let none = store
        .list(b"/nothing/", ListOptions::default())
        .await
        .expect("list");
    assert!(none.kvs.is_empty());
    assert_eq!(none.count, 0);
    let all = store
        .list(b"", ListOptions::default())
        .await
        .expect("list everything");
    assert_eq!(all.kvs.len(), 6);
}

pub async fn list_pages_at_one_revision(store: &dyn Store) {
    for i in 0..10 {
        store
            .create(format!("/p/{i:02}").as_bytes(), b("v"))
            .await
            .expect("create");
    }
    let first = store
        .list(
            b"/p/",
            ListOptions {
                limit: 4,
                ..Default::default()
            },
        )
        .await
        .expect("page 1");
    assert_eq!(first.kvs.len(), 4);
    assert_eq!(first.count, 10);
    assert!(first.more);

    // Writes between pages do not show in a list continued at the first
    // page's revision.
    store.create(b"/p/05a", b("late")).await.expect("create");
    store.delete(b"/p/09", None).await.expect("delete");

    let mut keys: Vec<Bytes> = first.kvs.iter().map(|kv| kv.key.clone()).collect();
    let mut last = first.kvs.last().map(|kv| kv.key.clone());
    let mut pages = 1;
    while let Some(after) = last.take() {
        let options = ListOptions {
            limit: 4,
            revision: Some(first.revision),
            continue_after: Some(after),
        };
        let page = store.list(b"/p/", options).await.expect("next page");
        assert_eq!(page.revision, first.revision);
        assert_eq!(page.count, 10 - keys.len() as u64);
        keys.extend(page.kvs.iter().map(|kv| kv.key.clone()));
        pages += 1;
        if page.more {
            last = page.kvs.last().map(|kv| kv.key.clone());
        }
    }
    assert_eq!(pages, 3);
    let expected: Vec<Bytes> = (0..10).map(|i| b(&format!("/p/{i:02}"))).collect();
    assert_eq!(keys, expected);

    // The same list at the latest revision sees the writes.
    let latest = store
        .list(b"/p/", ListOptions::default())
        .await
        .expect("list");
    assert_eq!(latest.kvs.len(), 10);
    assert!(latest.kvs.iter().any(|kv| kv.key == b("/p/05a")));
    assert!(!latest.kvs.iter().any(|kv| kv.key == b("/p/09")));
}

pub async fn list_at_past_revision(store: &dyn Store) {
    let a = store.create(b"/l/a", b("a1")).await.expect("create");
    let bkv = store.create(b"/l/b", b("b1")).await.expect("create");
    let at = store.current_revision().await.expect("revision");
    store
        .update(b"/l/a", b("a2"), a.mod_revision)
        .await
        .expect("update");
    store
        .delete(b"/l/b", Some(bkv.mod_revision))
        .await
        .expect("delete");
    store.create(b"/l/c", b("c1")).await.expect("create");

    let then = store
        .list(
            b"/l/",
            ListOptions {
                revision: Some(at),
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(then.revision, at);
    assert_eq!(then.kvs, vec![a.clone(), bkv]);
    assert_eq!(then.count, 2);
    let before_b = store
        .list(
            b"/l/",
            ListOptions {
                revision: Some(a.mod_revision),
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(before_b.kvs, vec![a]);
    let now = store
        .list(b"/l/", ListOptions::default())
        .await
        .expect("list");
    let values: Vec<_> = now.kvs.iter().map(|kv| kv.value.clone()).collect();
    assert_eq!(values, vec![b("a2"), b("c1")]);
    let future = ListOptions {
        revision: Some(now.revision + 1000),
        ..Default::default()
    };
    assert!(matches!(
        store.list(b"/l/", future).await,
        Err(Error::FutureRevision { .. })
    ));
}

pub async fn watch_prefix_from_revision(store: &dyn Store) {
    let created = store.create(b"/w/a", b("1")).await.expect("create");
    let updated = store
        .update(b"/w/a", b("2"), created.mod_revision)
        .await
        .expect("update");
    store
        .create(b"/other/x", b("x"))
        .await
        .expect("create outside the prefix");
    let deleted = store.delete(b"/w/a", None).await.expect("delete");

    let mut watch = store
        .watch(WatchRequest::prefix(b("/w/"), created.mod_revision))
        .await
        .expect("watch");
    // History first, then a live event.
    let live = store.create(b"/w/b", b("3")).await.expect("create");
    let events = collect_events(&mut watch, 4).await;
    assert_no_gaps_or_reordering(&events);

    assert_eq!(events[0].kind, EventKind::Created);
    assert_eq!(events[0].kv, created);
    assert_eq!(events[0].prev, None);
    assert_eq!(events[1].kind, EventKind::Updated);
    assert_eq!(events[1].kv, updated);
    assert_eq!(events[1].prev.as_ref(), Some(&created));
    assert_eq!(events[2].kind, EventKind::Deleted);
    assert_eq!(events[2].kv.key, b("/w/a"));
    assert_eq!(events[2].revision(), deleted.revision);
    assert_eq!(events[2].prev.as_ref(), Some(&updated));
    assert_eq!(events[3].kind, EventKind::Created);
    assert_eq!(events[3].kv, live);

    // Starting in the middle of history replays from there.
    let mut later = store
        .watch(WatchRequest::prefix(b("/w/"), updated.mod_revision))
        .await
        .expect("watch");
    let events = collect_events(&mut later, 3).await;
    assert_eq!(events[0].kv, updated);
    assert_eq!(events[2].kv, live);
}

pub async fn watch_one_key(store: &dyn Store) {
    let start = store.current_revision().await.expect("revision") + 1;
    let mut watch = store
        .watch(WatchRequest::key(b("/one"), start))
        .await
        .expect("watch");
    store.create(b"/one2", b("no")).await.expect("create");
    store.create(b"/on", b("no")).await.expect("create");
    let kv = store.create(b"/one", b("yes")).await.expect("create");
    store
        .update(b"/one", b("yes2"), kv.mod_revision)
        .await
        .expect("update");
    let events = collect_events(&mut watch, 2).await;
    assert!(events.iter().all(|e| e.kv.key == b("/one")));
    assert_eq!(events[1].kind, EventKind::Updated);
}

pub async fn watch_from_now(store: &dyn Store) {
    store.create(b"/n/old", b("old")).await.expect("create");
    let mut watch = store
        .watch(WatchRequest::prefix(b("/n/"), 0))
        .await
        .expect("watch");
    let new = store.create(b"/n/new", b("new")).await.expect("create");
    let events = collect_events(&mut watch, 1).await;
    assert_eq!(events[0].kv, new);
}

pub async fn watch_progress(store: &dyn Store) {
    let mut watch = store
        .watch(WatchRequest::prefix(b("/quiet/"), 0))
        .await
        .expect("watch");
    // Writes elsewhere: the watcher sees no event but learns the revision.
    let mut last = 0;
    for i in 0..5 {
        last = store
            .create(format!("/loud/{i}").as_bytes(), b("v"))
            .await
            .expect("create")
            .mod_revision;
    }
    let mut progressed = 0;
    for _ in 0..50 {
        watch.request_progress();
        progressed = next_progress(&mut watch).await;
        if progressed >= last {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        progressed >= last,
        "progress {progressed} never reached revision {last}"
    );

    // An event after the progress notification is still delivered.
    let kv = store.create(b"/quiet/a", b("v")).await.expect("create");
    let events = collect_events(&mut watch, 1).await;
    assert_eq!(events[0].kv, kv);
}

pub async fn compaction(store: &dyn Store) {
    let v1 = store.create(b"/c/a", b("1")).await.expect("create");
    let v2 = store
        .update(b"/c/a", b("2"), v1.mod_revision)
        .await
        .expect("update");
    let gone = store.create(b"/c/gone", b("x")).await.expect("create");
    let deleted = store.delete(b"/c/gone", None).await.expect("delete");
    let keep = store.create(b"/c/b", b("b")).await.expect("create");
    let v3 = store
        .update(b"/c/a", b("3"), v2.mod_revision)
        .await
        .expect("update");
    let target = keep.mod_revision;

    store.compact(target).await.expect("compact");
    assert!(
        store
            .compacted_revision()
            .await
            .expect("compacted revision")
            >= target
    );

    // Below the compaction: refused with the compaction point.
    match store.get(b"/c/a", Some(v2.mod_revision)).await {
        Err(Error::Compacted { .. }) => {}
        other => panic!("expected Compacted, got {other:?}"),
    }
    let below = ListOptions {
        revision: Some(target - 1),
        ..Default::default()
    };
    assert!(matches!(
        store.list(b"/c/", below).await,
        Err(Error::Compacted { .. })
    ));
    let mut watch = store
        .watch(WatchRequest::prefix(b("/c/"), v1.mod_revision))
        .await
        .expect("watch");
    let first = tokio::time::timeout(WAIT, watch.recv())
        .await
        .expect("watch answered")
        .expect("an item");
    assert!(
        matches!(first, Err(Error::Compacted { .. })),
        "expected Compacted, got {first:?}"
    );

    // At the compaction point and after: the state is intact.
    assert_eq!(
        store
            .get(b"/c/a", Some(target))
            .await
            .expect("get at target"),
        v2
    );
    assert!(matches!(
        store.get(b"/c/gone", Some(target)).await,
        Err(Error::NotFound)
    ));
    let at = store
        .list(
            b"/c/",
            ListOptions {
                revision: Some(target),
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(at.kvs, vec![v2.clone(), keep.clone()]);
    assert_eq!(store.get(b"/c/a", None).await.expect("get"), v3);
    let mut watch = store
        .watch(WatchRequest::prefix(b("/c/"), target))
        .await
        .expect("watch");
    let events = collect_events(&mut watch, 2).await;
    assert_eq!(events[0].kv, keep);
    assert_eq!(events[1].kv, v3);
    assert_eq!(events[1].prev.as_ref(), Some(&v2));
    assert!(deleted.revision < target);
    assert!(gone.mod_revision < deleted.revision);

    // Compacting again at or below the point, or in the future, is refused.
    assert!(matches!(
        store.compact(target).await,
        Err(Error::Compacted { .. })
    ));
    let future = store.current_revision().await.expect("revision") + 100;
    assert!(matches!(
        store.compact(future).await,
        Err(Error::FutureRevision { .. })
    ));
}

pub async fn arbitrary_bytes_round_trip(store: &dyn Store) {
    let keys: Vec<Vec<u8>> = vec![
        b"/bin/\x00".to_vec(),
        b"/bin/\x00\x00".to_vec(),
        b"/bin/\xff\xfe\x80".to_vec(),
        b"/bin/\xff".to_vec(),
        "/bin/ünïcødé/☸".as_bytes().to_vec(),
    ];
    let values: Vec<Bytes> = vec![
        Bytes::new(),
        Bytes::from_static(b"\x00"),
        Bytes::from((0..=255u8).collect::<Vec<_>>()),
    ];
    let mut expected = BTreeMap::new();
    for (i, key) in keys.iter().enumerate() {
        let value = values[i % values.len()].clone();
        store.create(key, value.clone()).await.expect("create");
        expected.insert(Bytes::from(key.clone()), value);
    }
    for (key, value) in &expected {
        assert_eq!(&store.get(key, None).await.expect("get").value, value);
    }
    let listed = store
        .list(b"/bin/", ListOptions::default())
        .await
        .expect("list");
    let listed: BTreeMap<Bytes, Bytes> = listed
        .kvs
        .into_iter()
        .map(|kv| (kv.key, kv.value))
        .collect();
    assert_eq!(listed, expected);
    let all_ff = store
        .list(b"/bin/\xff", ListOptions::default())
        .await
        .expect("list");
    assert_eq!(all_ff.kvs.len(), 2);
}

pub async fn size_limits(store: &dyn Store) {
    let big = Bytes::from(vec![7u8; MAX_REQUEST_BYTES - 4096]);
    let kv = store
        .create(b"/big", big.clone())
        .await
        .expect("a value under the limit");
    assert_eq!(store.get(b"/big", None).await.expect("get").value, big);
    let at = store.current_revision().await.expect("revision");
    let too_big = Bytes::from(vec![7u8; MAX_REQUEST_BYTES + 1]);
    assert!(matches!(
        store.create(b"/too-big", too_big.clone()).await,
        Err(Error::TooLarge { .. })
    ));
    assert!(matches!(
        store.update(b"/big", too_big, kv.mod_revision).await,
        Err(Error::TooLarge { .. })
    ));
    assert!(matches!(
        store.create(b"", b("v")).await,
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(store.current_revision().await.expect("revision"), at);
    assert!(matches!(
        store.get(b"/too-big", None).await,
        Err(Error::NotFound)
    ));
}

pub async fn concurrent_writers_watched_without_gaps(store: &dyn Store) {
    let start = store.current_revision().await.expect("revision") + 1;
    let mut watch = store
        .watch(WatchRequest::prefix(b("/cw/"), start))
        .await
        .expect("watch");
    let writers = 16;
    let per_writer = 25;
    let results = join_all((0..writers).map(|w| async move {
        let mut kvs = Vec::new();
        for i in 0..per_writer {
            kvs.push(
                store
                    .create(format!("/cw/{w}/{i}").as_bytes(), b("v"))
                    .await
                    .expect("create"),
            );
        }
        kvs
    }))
    .await;
    let mut revisions: Vec<u64> = results.iter().flatten().map(|kv| kv.mod_revision).collect();
    revisions.sort_unstable();
    revisions.dedup();
    assert_eq!(
        revisions.len(),
        writers * per_writer,
        "two writes shared a revision"
    );

    let events = collect_events(&mut watch, writers * per_writer).await;
    assert_no_gaps_or_reordering(&events);
    let seen: Vec<u64> = events.iter().map(Event::revision).collect();
    assert_eq!(
        seen, revisions,
        "the watcher saw other revisions than were acknowledged"
    );
}

pub async fn concurrent_compare_and_swap_is_linearizable(store: &dyn Store) {
    store.create(b"/counter", b("0")).await.expect("create");
    let tasks = 8;
    let increments = 10;
    join_all((0..tasks).map(|_| async move {
        for _ in 0..increments {
            loop {
                let kv = store.get(b"/counter", None).await.expect("get");
                let n: u64 = std::str::from_utf8(&kv.value)
                    .expect("utf8")
                    .parse()
                    .expect("number");
                match store
                    .update(b"/counter", b(&(n + 1).to_string()), kv.mod_revision)
                    .await
                {
                    Ok(_) => break,
                    Err(Error::Conflict { .. }) => continue,
                    Err(e) => panic!("update failed: {e}"),
                }
            }
        }
    }))
    .await;
    let kv = store.get(b"/counter", None).await.expect("get");
    assert_eq!(kv.value, b(&(tasks * increments).to_string()));
    assert_eq!(kv.version, (tasks * increments + 1) as u64);
}

pub async fn slow_watcher_catches_up(store: &dyn Store) {
    let start = store.current_revision().await.expect("revision") + 1;
    let mut slow = store
        .watch(WatchRequest::prefix(b("/slow/"), start))
        .await
        .expect("watch");
    let store_writes = 1600;
    // Many small batches while the watcher reads nothing: it falls behind
    // every buffer and has to catch up without losing anything.
    join_all((0..4).map(|w| async move {
        for i in 0..store_writes / 4 {
            store
                .create(format!("/slow/{w}/{i:04}").as_bytes(), b("v"))
                .await
                .expect("create");
        }
    }))
    .await;
    let events = collect_events(&mut slow, store_writes).await;
    assert_no_gaps_or_reordering(&events);
    let keys: std::collections::HashSet<_> = events.iter().map(|e| e.kv.key.clone()).collect();
    assert_eq!(keys.len(), store_writes);
}
