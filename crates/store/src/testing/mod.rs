//! Test support: the backend conformance suite and ready-made stores to run
//! it against (feature `testing`).
//!
//! Every backend runs the same suite, in the spirit of upstream's
//! `storage/testing/store_tests.go`:
//!
//! ```ignore
//! rudder_store::conformance_tests!(rudder_store::testing::embedded);
//! ```

mod etcd_server;
pub mod suite;

use std::sync::Arc;

pub use etcd_server::EtcdServer;

use crate::Store;
use crate::embedded::{EmbeddedConfig, EmbeddedStore};
use crate::etcd::{EtcdConfig, EtcdStore};

/// A [`Syncer`](crate::embedded::Syncer) a test steers: it counts the
/// log's syncs, can hold them (the writer waits until released) and can
/// fail them — to prove a write is acknowledged only after its sync, and
/// that a failed sync is a failed write and an unhealthy store.
#[derive(Debug, Default)]
pub struct ControlledSync {
    syncs: std::sync::atomic::AtomicU64,
    mode: std::sync::Mutex<SyncMode>,
    changed: std::sync::Condvar,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum SyncMode {
    #[default]
    Pass,
    Hold,
    Fail,
}

impl ControlledSync {
    pub fn new() -> Arc<Self> {
        Arc::new(ControlledSync::default())
    }

    /// Syncs started so far.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn set(&self, mode: SyncMode) {
        *self.mode.lock().unwrap_or_else(|e| e.into_inner()) = mode;
        self.changed.notify_all();
    }

    /// Syncs wait from now on until [`release`](ControlledSync::release).
    pub fn hold(&self) {
        self.set(SyncMode::Hold);
    }

    pub fn release(&self) {
        self.set(SyncMode::Pass);
    }

    /// Every sync fails from now on, as a failing disk's would.
    pub fn fail(&self) {
        self.set(SyncMode::Fail);
    }
}

impl crate::embedded::Syncer for ControlledSync {
    fn sync(&self, file: &std::fs::File) -> std::io::Result<()> {
        self.syncs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut mode = self.mode.lock().unwrap_or_else(|e| e.into_inner());
        while *mode == SyncMode::Hold {
            mode = self.changed.wait(mode).unwrap_or_else(|e| e.into_inner());
        }
        match *mode {
            SyncMode::Fail => Err(std::io::Error::other("injected sync failure")),
            _ => file.sync_data(),
        }
    }
}

/// An embedded store in a fresh temporary directory whose log syncs
/// `sync` steers.
pub async fn embedded_with_sync(sync: Arc<ControlledSync>) -> TestStore {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut config = EmbeddedConfig::new(dir.path().join("db"));
    config.syncer = sync;
    let store = EmbeddedStore::open(config).expect("open embedded store");
    TestStore {
        store: Arc::new(store),
        _guard: Box::new(dir),
    }
}

/// A store for one test, with whatever must live as long as it.
pub struct TestStore {
    pub store: Arc<dyn Store>,
    _guard: Box<dyn std::any::Any + Send>,
}

impl std::fmt::Debug for TestStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestStore")
            .field("store", &self.store)
            .finish()
    }
}

/// An embedded store in a fresh temporary directory, configured as
/// `rudder server` configures its own (page cache, watch buffer): for
/// benchmarks, whose figures should be the server's.
pub async fn embedded_as_served() -> TestStore {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = EmbeddedConfig::new(dir.path().join("db"));
    let store = EmbeddedStore::open(config).expect("open embedded store");
    TestStore {
        store: Arc::new(store),
        _guard: Box::new(dir),
    }
}

/// An embedded store in a fresh temporary directory, with a small watch
/// buffer so that slow watchers really fall behind and catch up from disk.
pub async fn embedded() -> TestStore {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut config = EmbeddedConfig::new(dir.path().join("db"));
    config.watch_buffer = 16;
    config.cache_bytes = 16 << 20;
    let store = EmbeddedStore::open(config).expect("open embedded store");
    TestStore {
        store: Arc::new(store),
        _guard: Box::new(dir),
    }
}

/// A store over a real etcd of its own, started on loopback on random ports
/// and removed with the store.
pub async fn etcd() -> TestStore {
    let server = EtcdServer::start()
        .await
        .expect("start etcd (is etcd-server installed?)");
    let config = EtcdConfig::from_url(&server.url())
        .expect("url")
        .with_prefix("/rudder-test");
    let store = EtcdStore::connect(config).await.expect("connect to etcd");
    TestStore {
        store: Arc::new(store),
        _guard: Box::new(server),
    }
}

/// Generates one `#[tokio::test]` per conformance case, each against a fresh
/// store from `$factory` (an `async fn() -> TestStore`).
#[macro_export]
macro_rules! conformance_tests {
    ($factory:path) => {
        $crate::conformance_tests!(@cases $factory;
            create_and_get, update_is_compare_and_swap, delete_is_compare_and_swap,
            failed_writes_take_no_revision, get_at_past_revision, list_by_prefix,
            list_pages_at_one_revision, list_at_past_revision, watch_prefix_from_revision,
            watch_one_key, watch_from_now, watch_progress, compaction,
            arbitrary_bytes_round_trip, size_limits, concurrent_writers_watched_without_gaps,
            concurrent_compare_and_swap_is_linearizable, slow_watcher_catches_up);
    };
    (@cases $factory:path; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let test_store = $factory().await;
                $crate::testing::suite::$case(&*test_store.store).await;
            }
        )+
    };
}
