//! The embedded backend: the default store, pure Rust on redb under
//! `<data-dir>/db`. Design and on-disk layout: docs/store.md.

mod codec;
mod context;
pub mod private;
mod read;
mod wal;

pub use wal::{Fdatasync, Syncer};
mod watcher;
mod writer;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use redb::{Database, ReadTransaction, ReadableDatabase, TableHandle};
use tokio::sync::{broadcast, mpsc, oneshot};

use self::codec::{COMPACT_REVISION, COMPACTED_UPTO, FORMAT, FORMAT_VERSION, META, REVISION};
use self::context::Context;
use self::writer::{Batch, Command, WriteOp, Writer, Written};
use crate::types::check_size;
use crate::watch::watch_channel;
use crate::{
    Deleted, Error, KeyValue, ListOptions, ListPage, Result, Store, WatchRequest, WatchStream,
};

/// The first bytes of every redb file.
const REDB_MAGIC: &[u8] = b"redb\x1a\x0a\xa9\x0d\x0a";

/// Settings of an embedded store.
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// The database file (`<data-dir>/db`); created with its parent if absent.
    pub path: PathBuf,
    /// Most writes committed together under one fsync.
    pub max_batch: usize,
    /// redb's page cache.
    pub cache_bytes: usize,
    /// A watch that has delivered nothing for this long gets a progress
    /// notification (`None`: only when asked for).
    pub progress_interval: Option<Duration>,
    /// Committed batches buffered for live watchers before a slow one has to
    /// catch up from disk.
    pub watch_buffer: usize,
    /// How log appends are made durable (`fdatasync`; tests inject others).
    pub syncer: std::sync::Arc<dyn wal::Syncer>,
}

impl EmbeddedConfig {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        EmbeddedConfig {
            path: path.into(),
            max_batch: 1024,
            cache_bytes: 64 << 20,
            progress_interval: Some(Duration::from_secs(10)),
            watch_buffer: 4096,
            syncer: std::sync::Arc::new(wal::Fdatasync),
        }
    }
}

/// State shared by the store handle, its writer thread and its watchers.
pub(crate) struct Shared {
    db: Database,
    /// The last committed revision.
    revision: AtomicU64,
    /// Reads and watches below this revision fail with `Compacted`.
    compacted: AtomicU64,
}

impl Shared {
    fn begin_read(&self) -> Result<ReadTransaction> {
        self.db.begin_read().ctx("begin read")
    }
}

/// The embedded store. Cheap to share behind an `Arc`; dropping the last
/// handle stops the writer after it has committed what was queued.
pub struct EmbeddedStore {
    shared: Arc<Shared>,
    commands: mpsc::Sender<Command>,
    events: broadcast::Sender<Arc<Batch>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    progress_interval: Option<Duration>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("revision", &self.shared.revision.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl EmbeddedStore {
    /// Opens (or creates) the store at `config.path`. Blocking: call it at
    /// start-up or from `spawn_blocking`.
    ///
    /// A file that is not a rudder store is refused and left untouched.
    pub fn open(config: EmbeddedConfig) -> Result<Self> {
        let path = config.path.as_path();
        refuse_foreign_file(path)?;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            private::create_dir(parent)?;
        }
        // Every Secret is in the store's files: readable by their owner only.
        private::create_file(path)?;
        // Every commit records the allocator state (quick repair), so a store
        // that crashed reopens as it is. A file that would need redb's repair
        // walk is damaged: refuse it rather than rewrite it.
        let mut builder = Database::builder();
        builder.set_cache_size(config.cache_bytes);
        builder.set_repair_callback(|session| session.abort());
        let db = builder.create(path).map_err(|e| match e {
            redb::DatabaseError::RepairAborted => foreign(
                path,
                "the file is damaged (it would need a repair); back it up and restore",
            ),
            redb::DatabaseError::DatabaseAlreadyOpen => Error::Unavailable {
                context: format!("{}: already open in another process", path.display()),
                source: None,
            },
            redb::DatabaseError::UpgradeRequired(_) => {
                foreign(path, "a redb file of another format version")
            }
            redb::DatabaseError::Storage(redb::StorageError::Corrupted(reason)) => {
                foreign(path, &format!("the file is damaged ({reason})"))
            }
            other => Error::unavailable(format!("open {}", path.display()), other),
        })?;
        let mut meta = initialize(&db, path)?;
        // Writes acknowledged since the last checkpoint are in the log only.
        let wal_path = wal_path(path);
        private::create_file(&wal_path)?;
        let (wal, pending) = wal::Wal::open(&wal_path, meta.revision, config.syncer.clone())?;
        // Both files are the store's own: tighten what an older version
        // left readable.
        private::restrict(path)?;
        private::restrict(&wal_path)?;
        if let Some(revision) = writer::replay(&db, &pending)? {
            tracing::info!(
                writes = pending.len(),
                revision,
                "embedded store: recovered writes from the write-ahead log"
            );
            meta.revision = revision;
        }

        let shared = Arc::new(Shared {
            db,
            revision: AtomicU64::new(meta.revision),
            compacted: AtomicU64::new(meta.compact_revision),
        });
        let (commands, receiver) = mpsc::channel(config.max_batch * 4);
        let (events, _) = broadcast::channel(config.watch_buffer);
        let writer = Writer::new(
            shared.clone(),
            receiver,
            events.clone(),
            config.max_batch,
            meta.compacted_upto,
            wal,
        );
        spawn_checkpoint_ticker(commands.downgrade())?;
        let handle = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| Error::unavailable("start the writer thread", e))?;
        tracing::info!(path = %path.display(), revision = meta.revision, "embedded store open");
        Ok(EmbeddedStore {
            shared,
            commands,
            events,
            writer: Mutex::new(Some(handle)),
            progress_interval: config.progress_interval,
        })
    }

    /// Stops the writer after the queued writes and waits for it, so the file
    /// can be reopened at once. Blocking.
    pub fn close(self) {
        let EmbeddedStore {
            shared,
            commands,
            events,
            writer,
            ..
        } = self;
        drop(commands);
        drop(events);
        let handle = writer.lock().ok().and_then(|mut w| w.take());
        if let Some(handle) = handle {
            let _ = handle.join();
        }
        drop(shared);
    }

    async fn write(&self, op: WriteOp) -> Result<Written> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Write { op, reply })
            .await
            .map_err(|_| Error::closed())?;
        answer.await.map_err(|_| Error::closed())?
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&ReadTransaction) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || f(&shared.begin_read()?))
            .await
            .map_err(|e| Error::unavailable("embedded store read task", e))?
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn get(&self, key: &[u8], revision: Option<u64>) -> Result<KeyValue> {
        let key = key.to_vec();
        self.read(move |txn| read::get(txn, &key, revision)).await
    }

    async fn list(&self, prefix: &[u8], options: ListOptions) -> Result<ListPage> {
        let prefix = prefix.to_vec();
        self.read(move |txn| read::list(txn, &prefix, &options))
            .await
    }

    async fn create(&self, key: &[u8], value: Bytes) -> Result<KeyValue> {
        check_size(key, &value)?;
        let op = WriteOp::Create {
            key: Bytes::copy_from_slice(key),
            value,
        };
        match self.write(op).await? {
            Written::Put(kv) => Ok(kv),
            Written::Deleted(_) => Err(unexpected()),
        }
    }

    async fn update(&self, key: &[u8], value: Bytes, expected: u64) -> Result<KeyValue> {
        check_size(key, &value)?;
        let op = WriteOp::Update {
            key: Bytes::copy_from_slice(key),
            value,
            expected,
        };
        match self.write(op).await? {
            Written::Put(kv) => Ok(kv),
            Written::Deleted(_) => Err(unexpected()),
        }
    }

    async fn delete(&self, key: &[u8], expected: Option<u64>) -> Result<Deleted> {
        check_size(key, &[])?;
        match self
            .write(WriteOp::Delete {
                key: Bytes::copy_from_slice(key),
                expected,
            })
            .await?
        {
            Written::Deleted(deleted) => Ok(deleted),
            Written::Put(_) => Err(unexpected()),
        }
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        // Subscribe before reading the revision: whatever commits after this
        // point reaches the watcher live, whatever committed before it, the
        // watcher replays from the log.
        let live = self.events.subscribe();
        let next = match request.start_revision {
            0 => self.shared.revision.load(Ordering::SeqCst) + 1,
            start => start,
        };
        let (sink, stream) = watch_channel();
        let watcher = watcher::Watcher {
            shared: self.shared.clone(),
            live,
            request,
            next,
            sink,
            progress_interval: self.progress_interval,
        };
        tokio::spawn(watcher.run());
        Ok(stream)
    }

    async fn compact(&self, revision: u64) -> Result<()> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Compact { revision, reply })
            .await
            .map_err(|_| Error::closed())?;
        answer.await.map_err(|_| Error::closed())?
    }

    async fn compacted_revision(&self) -> Result<u64> {
        Ok(self.shared.compacted.load(Ordering::SeqCst))
    }

    async fn current_revision(&self) -> Result<u64> {
        Ok(self.shared.revision.load(Ordering::SeqCst))
    }

    async fn check(&self) -> Result<()> {
        // Reads: a read transaction opens.
        self.shared
            .db
            .begin_read()
            .map_err(|e| Error::unavailable("begin a read", e))?;
        // Writes: the writer answers, behind every queued write, unless a
        // failure made it refuse writes.
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Check { reply })
            .await
            .map_err(|_| Error::Unavailable {
                context: "the embedded store's writer has stopped".into(),
                source: None,
            })?;
        answer.await.map_err(|_| Error::Unavailable {
            context: "the embedded store's writer has stopped".into(),
            source: None,
        })?
    }
}

/// The write-ahead log beside the database file: `<path>.wal`.
fn wal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".wal");
    PathBuf::from(name)
}

/// Asks the writer for a checkpoint now and then, so that a store that
/// stopped writing does not keep its recent writes only in the log. Ends with
/// the store.
fn spawn_checkpoint_ticker(commands: mpsc::WeakSender<Command>) -> Result<()> {
    std::thread::Builder::new()
        .name("store-checkpoint".into())
        .spawn(move || {
            loop {
                std::thread::sleep(writer::CHECKPOINT_INTERVAL / 5);
                let Some(commands) = commands.upgrade() else {
                    return;
                };
                // A full queue means a busy writer; it checkpoints as it goes.
                let _ = commands.try_send(Command::Checkpoint);
            }
        })
        .map_err(|e| Error::unavailable("start the checkpoint thread", e))?;
    Ok(())
}

fn unexpected() -> Error {
    Error::Unavailable {
        context: "embedded store: writer answered another operation".into(),
        source: None,
    }
}

fn foreign(path: &Path, reason: &str) -> Error {
    Error::Foreign {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// Refuses, before redb touches it, a path that holds anything but an empty
/// file or a redb file.
fn refuse_foreign_file(path: &Path) -> Result<()> {
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::unavailable(format!("inspect {}", path.display()), e)),
    };
    if !metadata.is_file() {
        return Err(foreign(path, "not a regular file"));
    }
    if metadata.len() == 0 {
        return Ok(());
    }
    let mut head = [0u8; REDB_MAGIC.len()];
    let mut file = std::fs::File::open(path)
        .map_err(|e| Error::unavailable(format!("open {}", path.display()), e))?;
    let read = file
        .read(&mut head)
        .map_err(|e| Error::unavailable(format!("read {}", path.display()), e))?;
    if read < head.len() || head != REDB_MAGIC {
        return Err(foreign(path, "not a rudder store (unknown file format)"));
    }
    Ok(())
}

#[derive(Debug)]
struct Meta {
    revision: u64,
    compact_revision: u64,
    compacted_upto: u64,
}

/// Reads the store's metadata, creating the tables of a new store; refuses a
/// redb file that some other program wrote.
fn initialize(db: &Database, path: &Path) -> Result<Meta> {
    let txn = db.begin_read().ctx("begin read")?;
    let tables: Vec<String> = txn
        .list_tables()
        .ctx("list tables")?
        .map(|t| t.name().to_string())
        .collect();
    if !tables.is_empty() {
        if !tables.iter().any(|t| t == META.name()) {
            return Err(foreign(path, "a redb database that is not a rudder store"));
        }
        let meta = txn.open_table(META).ctx("open meta table")?;
        let read = |name| -> Result<u64> {
            Ok(meta
                .get(name)
                .ctx("read meta")?
                .map(|v| v.value())
                .unwrap_or(0))
        };
        let format = read(FORMAT)?;
        if format != FORMAT_VERSION {
            return Err(foreign(
                path,
                &format!("a rudder store of format {format}, this build reads {FORMAT_VERSION}"),
            ));
        }
        return Ok(Meta {
            revision: read(REVISION)?,
            compact_revision: read(COMPACT_REVISION)?,
            compacted_upto: read(COMPACTED_UPTO)?,
        });
    }
    drop(txn);
    let mut txn = db.begin_write().ctx("begin write")?;
    txn.set_quick_repair(true);
    {
        let mut meta = txn.open_table(META).ctx("create meta table")?;
        meta.insert(FORMAT, FORMAT_VERSION).ctx("write format")?;
        meta.insert(REVISION, 0).ctx("write revision")?;
        txn.open_table(codec::LATEST).ctx("create latest table")?;
        txn.open_table(codec::LOG).ctx("create log table")?;
        txn.open_table(codec::INDEX).ctx("create index table")?;
    }
    txn.commit().ctx("commit new store")?;
    Ok(Meta {
        revision: 0,
        compact_revision: 0,
        compacted_upto: 0,
    })
}
