//! The embedded store and what it finds at its data path: its own store
//! (reopened with nothing lost), or anything else (refused, left untouched).

use bytes::Bytes;
use rudder_store::embedded::{EmbeddedConfig, EmbeddedStore};
use rudder_store::{Error, ListOptions, Store};

fn open(path: &std::path::Path) -> Result<EmbeddedStore, Error> {
    EmbeddedStore::open(EmbeddedConfig::new(path))
}

#[tokio::test]
async fn reopens_with_everything_and_continues_the_revision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("nested/data/db");
    let store = open(&path).expect("create");
    let a = store.create(b"/a", Bytes::from("1")).await.expect("create");
    let a = store
        .update(b"/a", Bytes::from("2"), a.mod_revision)
        .await
        .expect("update");
    store.create(b"/b", Bytes::from("x")).await.expect("create");
    store.delete(b"/b", None).await.expect("delete");
    store.compact(a.mod_revision).await.expect("compact");
    let revision = store.current_revision().await.expect("revision");
    store.close();

    let store = open(&path).expect("reopen");
    assert_eq!(store.current_revision().await.expect("revision"), revision);
    assert_eq!(
        store.compacted_revision().await.expect("compacted"),
        a.mod_revision
    );
    assert_eq!(store.get(b"/a", None).await.expect("get"), a);
    assert!(matches!(store.get(b"/b", None).await, Err(Error::NotFound)));
    let next = store.create(b"/c", Bytes::from("y")).await.expect("create");
    assert_eq!(next.mod_revision, revision + 1);
    assert_eq!(
        store
            .list(b"/", ListOptions::default())
            .await
            .expect("list")
            .kvs
            .len(),
        2
    );
}

fn assert_refused_untouched(path: &std::path::Path, contents: &[u8]) {
    match open(path) {
        Err(Error::Foreign { reason, .. }) => eprintln!("refused as expected: {reason}"),
        Err(other) => panic!("expected a clear refusal, got {other}"),
        Ok(_) => panic!("opened a file that is not a rudder store"),
    }
    assert_eq!(
        std::fs::read(path).expect("file still there"),
        contents,
        "the file was modified"
    );
}

#[test]
fn refuses_a_foreign_file_and_leaves_it_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    std::fs::write(&path, b"important text that is not a database\n").expect("write");
    assert_refused_untouched(&path, b"important text that is not a database\n");
    let noise: Vec<u8> = (0..100_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&path, &noise).expect("write");
    assert_refused_untouched(&path, &noise);
}

#[test]
fn refuses_a_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(matches!(open(dir.path()), Err(Error::Foreign { .. })));
}

#[test]
fn refuses_another_programs_redb_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    {
        let db = redb::Database::create(&path).expect("create");
        let txn = db.begin_write().expect("write");
        {
            let def: redb::TableDefinition<'_, &str, u64> = redb::TableDefinition::new("theirs");
            txn.open_table(def)
                .expect("table")
                .insert("k", 1)
                .expect("insert");
        }
        txn.commit().expect("commit");
    }
    let before = std::fs::read(&path).expect("read");
    match open(&path) {
        Err(Error::Foreign { reason, .. }) => {
            assert!(reason.contains("not a rudder store"), "{reason}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // redb itself only flips its header's open flag; the data is as it was.
    assert_eq!(std::fs::read(&path).expect("read").len(), before.len());
}

async fn filled_store(path: &std::path::Path) -> Vec<u8> {
    let store = open(path).expect("create");
    for i in 0..2000 {
        store
            .create(format!("/k/{i}").as_bytes(), Bytes::from(vec![1u8; 512]))
            .await
            .expect("create");
    }
    store.close();
    std::fs::read(path).expect("read")
}

#[tokio::test]
async fn refuses_a_store_with_a_damaged_header_without_rewriting_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let mut damaged = filled_store(&path).await;
    for byte in &mut damaged[16..512] {
        *byte ^= 0x5a;
    }
    std::fs::write(&path, &damaged).expect("write");
    match open(&path) {
        Err(Error::Foreign { reason, .. }) => eprintln!("refused: {reason}"),
        Err(other) => panic!("expected a clear refusal, got {other}"),
        Ok(_) => panic!("opened a damaged store"),
    }
    assert_eq!(
        std::fs::read(&path).expect("read"),
        damaged,
        "a refused file was modified"
    );
}

#[tokio::test]
async fn damaged_pages_fail_reads_cleanly_and_the_store_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let mut damaged = filled_store(&path).await;
    let half = damaged.len() / 2;
    for byte in &mut damaged[half..half + 64 * 1024] {
        *byte ^= 0x5a;
    }
    std::fs::write(&path, &damaged).expect("write");
    // The damage is in data pages, not in what opening reads.
    let store = open(&path).expect("a store whose data pages are damaged opens");
    // A read that reaches the damage is an error, not a crash ...
    let listed = store.list(b"/k/", ListOptions::default()).await;
    assert!(listed.is_err(), "a list over damaged pages succeeded");
    // ... and the store goes on serving what the damage did not touch:
    // keys read back, new writes taken and read, the health check passes.
    let first = store.get(b"/k/0", None).await.expect("an undamaged key");
    assert_eq!(first.value, Bytes::from(vec![1u8; 512]));
    let written = store
        .create(b"/after", Bytes::from("still serving"))
        .await
        .expect("a write after the damaged read");
    assert_eq!(
        store.get(b"/after", None).await.expect("read back"),
        written
    );
    store.check().await.expect("healthy");
}

#[tokio::test]
async fn its_files_are_readable_by_their_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("data/db");
    let wal = dir.path().join("data/db.wal");
    let store = open(&path).expect("create");
    store
        .create(b"/registry/core/secrets/default/s", Bytes::from("secret"))
        .await
        .expect("create");
    store.close();
    assert_eq!(mode(&dir.path().join("data")), 0o700);
    assert_eq!((mode(&path), mode(&wal)), (0o600, 0o600));
    // Files an older version left readable are tightened at the next start.
    for file in [&path, &wal] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    let store = open(&path).expect("reopen");
    assert_eq!((mode(&path), mode(&wal)), (0o600, 0o600));
    store.close();
}
