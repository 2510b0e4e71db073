//! The single writer of the embedded store, with group commit.
//!
//! Every write goes through one thread. It takes the first waiting command,
//! then every other one already queued (up to a batch limit) — under load
//! sleeping up to a millisecond while more keep arriving — applies them in
//! one redb write transaction — each successful write takes the next revision —
//! appends the batch to the write-ahead log with one fsync, commits the
//! transaction (without a sync of its own), publishes the batch's events to
//! the watchers, and only then acknowledges each writer. Concurrent writers
//! therefore share one fsync, and watchers see revisions in order without
//! gaps. Every so often a commit is a durable checkpoint, after which the log
//! starts over.
//!
//! A failure after a batch may have reached the log (a failed sync or
//! commit) leaves the writer refusing every later write: going on could
//! reuse revisions the log already holds. A restart recovers from the log.
//!
//! Compaction runs on the same thread in bounded chunks between write
//! batches, so it never holds writers up for long.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use redb::{Durability, ReadableTable, Table, WriteTransaction};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::Shared;
use super::codec::{
    COMPACT_REVISION, COMPACTED_UPTO, INDEX, LATEST, LOG, META, REVISION, decode_latest,
    decode_log, encode_delete, encode_latest, encode_put, is_delete,
};
use super::context::Context;
use super::read::deleted_kv;
use super::wal::{Mutation, Wal};
use crate::{Deleted, Error, Event, EventKind, KeyValue, Result};

/// Log records removed per compaction transaction.
const COMPACTION_CHUNK: u64 = 4096;

/// When the write-ahead log holds this much, the next commit is a checkpoint.
const CHECKPOINT_BYTES: u64 = 32 << 20;
/// A store with writes not yet checkpointed gets one this often.
pub(crate) const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(5);

/// How long a small batch under load waits for more writes, at most…
const LINGER: Duration = Duration::from_millis(1);
/// …until it has this many…
const LINGER_UNTIL: usize = 32;
/// …looking this often, while each look finds more.
const LINGER_STEP: Duration = Duration::from_micros(100);

/// One write asked of the store.
#[derive(Debug)]
pub(crate) enum WriteOp {
    Create {
        key: Bytes,
        value: Bytes,
    },
    Update {
        key: Bytes,
        value: Bytes,
        expected: u64,
    },
    Delete {
        key: Bytes,
        expected: Option<u64>,
    },
}

/// What a successful write returns.
#[derive(Debug)]
pub(crate) enum Written {
    Put(KeyValue),
    Deleted(Deleted),
}

#[derive(Debug)]
pub(crate) enum Command {
    Write {
        op: WriteOp,
        reply: oneshot::Sender<Result<Written>>,
    },
    Compact {
        revision: u64,
        reply: oneshot::Sender<Result<()>>,
    },
    /// Make everything committed durable in redb and start the log over.
    Checkpoint,
    /// Answer whether writes are accepted (the health check).
    Check { reply: oneshot::Sender<Result<()>> },
}

/// The events of one committed batch, shared by every watcher.
#[derive(Debug)]
pub(crate) struct Batch {
    /// The batch's last revision.
    pub last: u64,
    pub events: Vec<Event>,
}

type Reply = oneshot::Sender<Result<Written>>;

pub(crate) struct Writer {
    shared: Arc<Shared>,
    commands: mpsc::Receiver<Command>,
    events: broadcast::Sender<Arc<Batch>>,
    max_batch: usize,
    revision: u64,
    /// Log records below this revision have been compacted on disk.
    compacted_upto: u64,
    compaction: Option<PendingCompaction>,
    wal: Wal,
    /// Commits since the last checkpoint that only the log makes durable.
    dirty: bool,
    last_checkpoint: Instant,
    /// Set when a failure made further writes unsafe.
    failed: Option<String>,
    /// Health checks waiting for the batch they arrived in.
    checks: Vec<oneshot::Sender<Result<()>>>,
}

struct PendingCompaction {
    target: u64,
    replies: Vec<oneshot::Sender<Result<()>>>,
}

/// The open tables of one write transaction.
struct Tables<'t> {
    latest: Table<'t, &'static [u8], &'static [u8]>,
    log: Table<'t, u64, &'static [u8]>,
    index: Table<'t, (&'static [u8], u64), ()>,
}

impl Writer {
    pub(crate) fn new(
        shared: Arc<Shared>,
        commands: mpsc::Receiver<Command>,
        events: broadcast::Sender<Arc<Batch>>,
        max_batch: usize,
        compacted_upto: u64,
        wal: Wal,
    ) -> Self {
        let revision = shared.revision.load(Ordering::SeqCst);
        let compacted = shared.compacted.load(Ordering::SeqCst);
        // A compaction that a crash interrupted resumes where it stopped.
        let compaction = (compacted_upto < compacted).then(|| PendingCompaction {
            target: compacted,
            replies: Vec::new(),
        });
        Writer {
            shared,
            commands,
            events,
            max_batch,
            revision,
            compacted_upto,
            compaction,
            wal,
            dirty: false,
            last_checkpoint: Instant::now(),
            failed: None,
            checks: Vec::new(),
        }
    }

    /// Runs until every sender of commands is gone.
    pub(crate) fn run(mut self) {
        loop {
            let first = if self.compaction.is_some() {
                match self.commands.try_recv() {
                    Ok(command) => Some(command),
                    Err(mpsc::error::TryRecvError::Empty) => None,
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                }
            } else {
                match self.commands.blocking_recv() {
                    Some(command) => Some(command),
                    None => break,
                }
            };
            let mut writes = Vec::new();
            if let Some(command) = first {
                self.accept(command, &mut writes);
                let backlog = !self.commands.is_empty();
                while writes.len() < self.max_batch {
                    match self.commands.try_recv() {
                        Ok(command) => self.accept(command, &mut writes),
                        Err(_) => break,
                    }
                }
                if backlog {
                    self.linger(&mut writes);
                }
            }
            if !writes.is_empty() {
                self.commit(writes);
            }
            for reply in self.checks.drain(..) {
                let answer = match &self.failed {
                    Some(failed) => Err(Error::Unavailable {
                        context: failed.clone(),
                        source: None,
                    }),
                    None => Ok(()),
                };
                let _ = reply.send(answer);
            }
            if self.compaction.is_some() {
                self.compaction_step();
            }
        }
        // Shutting down: leave nothing for the log to replay.
        self.checkpoint();
    }

    /// Under load (writes were queued behind the batch's first), waits a
    /// little for more to join a small batch: each batch costs a log sync
    /// and a redb commit however few writes it carries. It sleeps in
    /// [`LINGER_STEP`]s while writes keep coming, up to [`LINGER`] in all;
    /// a step that brings none ends it (writers that all wait on this batch
    /// send nothing more). Sleeping, not spinning: the CPU goes to whoever
    /// is making the writes.
    fn linger(&mut self, writes: &mut Vec<(WriteOp, Reply)>) {
        let start = Instant::now();
        while writes.len() < LINGER_UNTIL.min(self.max_batch) && start.elapsed() < LINGER {
            std::thread::sleep(LINGER_STEP);
            let before = writes.len();
            loop {
                match self.commands.try_recv() {
                    Ok(command) => self.accept(command, writes),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => return,
                }
                if writes.len() >= self.max_batch {
                    return;
                }
            }
            if writes.len() == before {
                return;
            }
        }
    }

    /// A durable redb commit of everything committed so far; the log's
    /// records are then redundant and it starts over.
    fn checkpoint(&mut self) {
        if !self.dirty || self.failed.is_some() {
            return;
        }
        let result = self
            .begin(true)
            .and_then(|txn| txn.commit().ctx("commit checkpoint"));
        match result {
            Ok(()) => self.checkpointed(),
            Err(error) => self.fail(&error),
        }
    }

    fn checkpointed(&mut self) {
        self.wal.reset();
        self.dirty = false;
        self.last_checkpoint = Instant::now();
    }

    fn fail(&mut self, error: &Error) {
        tracing::error!(%error, wal = %self.wal.path().display(), "embedded store: refusing further writes; restart to recover from the write-ahead log");
        self.failed = Some(format!(
            "embedded store failed ({error}); restart the server to recover"
        ));
    }

    fn accept(&mut self, command: Command, writes: &mut Vec<(WriteOp, Reply)>) {
        match command {
            Command::Write { op, reply } => writes.push((op, reply)),
            Command::Checkpoint => {
                if self.last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL {
                    self.checkpoint();
                }
            }
            // Answered once the writes taken before it are committed.
            Command::Check { reply } => self.checks.push(reply),
            Command::Compact { revision, reply } => {
                let result = self.start_compaction(revision);
                match (result, &mut self.compaction) {
                    (Ok(()), Some(pending)) => pending.replies.push(reply),
                    (result, _) => {
                        let _ = reply.send(result);
                    }
                }
            }
        }
    }

    /// Records the new compacted revision, after which reads below it fail;
    /// the history below it is removed by later compaction steps.
    fn start_compaction(&mut self, revision: u64) -> Result<()> {
        let compacted = self.shared.compacted.load(Ordering::SeqCst);
        if revision <= compacted {
            return Err(Error::Compacted {
                compact_revision: compacted,
            });
        }
        if revision > self.revision {
            return Err(Error::FutureRevision {
                requested: revision,
                current: self.revision,
            });
        }
        if let Some(failed) = &self.failed {
            return Err(Error::Unavailable {
                context: failed.clone(),
                source: None,
            });
        }
        // Durable at once: a compaction that has been acknowledged stays.
        let txn = self.begin(true)?;
        txn.open_table(META)
            .ctx("open meta table")?
            .insert(COMPACT_REVISION, revision)
            .ctx("write compact revision")?;
        txn.commit().ctx("commit compact revision")?;
        self.checkpointed();
        self.shared.compacted.store(revision, Ordering::SeqCst);
        let replies = self
            .compaction
            .take()
            .map(|p| p.replies)
            .unwrap_or_default();
        self.compaction = Some(PendingCompaction {
            target: revision,
            replies,
        });
        Ok(())
    }

    /// A write transaction; `durable` makes its commit a checkpoint.
    fn begin(&self, durable: bool) -> Result<WriteTransaction> {
        let mut txn = self.shared.db.begin_write().ctx("begin write")?;
        if durable {
            // Recording the allocator state with the commit lets the store
            // reopen after a crash without redb's full repair walk.
            txn.set_quick_repair(true);
        } else {
            txn.set_durability(Durability::None).ctx("set durability")?;
        }
        Ok(txn)
    }

    fn commit(&mut self, writes: Vec<(WriteOp, Reply)>) {
        if let Some(failed) = &self.failed {
            for (_, reply) in writes {
                let _ = reply.send(Err(Error::Unavailable {
                    context: failed.clone(),
                    source: None,
                }));
            }
            return;
        }
        let start_revision = self.revision;
        let durable = self.wal.len() >= CHECKPOINT_BYTES;
        let mut events = Vec::with_capacity(writes.len());
        let mut results = Vec::with_capacity(writes.len());
        // Past this point a failure may leave the batch in the log.
        let mut logged = false;
        let outcome = self.begin(durable).and_then(|txn| {
            {
                let mut tables = Tables {
                    latest: txn.open_table(LATEST).ctx("open latest table")?,
                    log: txn.open_table(LOG).ctx("open log table")?,
                    index: txn.open_table(INDEX).ctx("open index table")?,
                };
                for (op, _) in &writes {
                    results.push(self.apply(op, &mut tables, &mut events)?);
                }
                if self.revision != start_revision {
                    txn.open_table(META)
                        .ctx("open meta table")?
                        .insert(REVISION, self.revision)
                        .ctx("write revision")?;
                }
            }
            if !events.is_empty() {
                let mutations: Vec<Mutation> = events.iter().map(mutation).collect();
                logged = true;
                self.wal
                    .append(&mutations)
                    .ctx("append to the write-ahead log")?;
            }
            txn.commit().ctx("commit")
        });
        if let Err(error) = outcome {
            tracing::error!(%error, "embedded store: write batch failed");
            if logged {
                self.fail(&error);
            }
            self.revision = start_revision;
            let message = error.to_string();
            for (_, reply) in writes {
                let _ = reply.send(Err(Error::Unavailable {
                    context: message.clone(),
                    source: None,
                }));
            }
            return;
        }
        if durable {
            self.checkpointed();
        } else if !events.is_empty() {
            self.dirty = true;
        }
        self.shared.revision.store(self.revision, Ordering::SeqCst);
        if !events.is_empty() {
            // No receiver is not an error: nobody watches.
            let _ = self.events.send(Arc::new(Batch {
                last: self.revision,
                events,
            }));
        }
        for ((_, reply), result) in writes.into_iter().zip(results) {
            let _ = reply.send(result);
        }
    }

    /// Applies one write inside the batch's transaction. The outer error is a
    /// storage failure that fails the whole batch; the inner one is this
    /// write's own (not found, conflict, ...), which takes no revision.
    fn apply(
        &mut self,
        op: &WriteOp,
        tables: &mut Tables<'_>,
        events: &mut Vec<Event>,
    ) -> Result<Result<Written>> {
        let key = match op {
            WriteOp::Create { key, .. }
            | WriteOp::Update { key, .. }
            | WriteOp::Delete { key, .. } => key,
        };
        let current = match tables.latest.get(key.as_ref()).ctx("read latest")? {
            Some(record) => {
                Some(
                    decode_latest(key, record.value()).ok_or_else(|| Error::Unavailable {
                        context: format!("corrupt record in table latest at key {key:?}"),
                        source: None,
                    })?,
                )
            }
            None => None,
        };
        let check = |expected: Option<u64>| match &current {
            None => Err(Error::NotFound),
            Some(cur) if expected.is_some_and(|e| e != cur.mod_revision) => {
                Err(Error::conflict(current.clone()))
            }
            Some(cur) => Ok(cur.clone()),
        };
        let revision = self.revision + 1;
        let (event, written) = match op {
            WriteOp::Create { key, value } => {
                if current.is_some() {
                    return Ok(Err(Error::AlreadyExists));
                }
                let kv = KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                    create_revision: revision,
                    mod_revision: revision,
                    version: 1,
                };
                put(tables, &kv)?;
                (
                    Event {
                        kind: EventKind::Created,
                        kv: kv.clone(),
                        prev: None,
                    },
                    Written::Put(kv),
                )
            }
            WriteOp::Update {
                key,
                value,
                expected,
            } => {
                let prev = match check(Some(*expected)) {
                    Ok(prev) => prev,
                    Err(e) => return Ok(Err(e)),
                };
                let kv = KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                    create_revision: prev.create_revision,
                    mod_revision: revision,
                    version: prev.version + 1,
                };
                put(tables, &kv)?;
                (
                    Event {
                        kind: EventKind::Updated,
                        kv: kv.clone(),
                        prev: Some(prev),
                    },
                    Written::Put(kv),
                )
            }
            WriteOp::Delete { key, expected } => {
                let prev = match check(*expected) {
                    Ok(prev) => prev,
                    Err(e) => return Ok(Err(e)),
                };
                delete(tables, key, revision)?;
                let event = Event {
                    kind: EventKind::Deleted,
                    kv: deleted_kv(key.clone(), revision),
                    prev: Some(prev.clone()),
                };
                (event, Written::Deleted(Deleted { prev, revision }))
            }
        };
        self.revision = revision;
        events.push(event);
        Ok(Ok(written))
    }

    /// Removes one chunk of history below the compaction target: every
    /// version of a key that a newer version at or below the target
    /// supersedes, and every delete record below it.
    fn compaction_step(&mut self) {
        let Some(target) = self.compaction.as_ref().map(|p| p.target) else {
            return;
        };
        let from = self.compacted_upto;
        let to = target.min(from.saturating_add(COMPACTION_CHUNK));
        let result = (|| -> Result<()> {
            let txn = self.begin(false)?;
            {
                let mut log = txn.open_table(LOG).ctx("open log table")?;
                let mut index = txn.open_table(INDEX).ctx("open index table")?;
                let mut records = Vec::new();
                for entry in log.range(from..to).ctx("range log")? {
                    let (rev, record) = entry.ctx("range log")?;
                    let rev = rev.value();
                    let record_bytes = record.value();
                    let key = decode_log(rev, record_bytes).map(|r| r.key().clone());
                    if let Some(key) = key {
                        records.push((rev, key, is_delete(record_bytes)));
                    }
                }
                for (rev, key, deleted) in records {
                    let older: Vec<u64> = index
                        .range((key.as_ref(), 0)..(key.as_ref(), rev))
                        .ctx("range index")?
                        .map(|entry| entry.map(|(k, _)| k.value().1))
                        .collect::<Result<_, _>>()
                        .ctx("range index")?;
                    for old in older {
                        index.remove((key.as_ref(), old)).ctx("compact index")?;
                        log.remove(old).ctx("compact log")?;
                    }
                    if deleted {
                        index.remove((key.as_ref(), rev)).ctx("compact index")?;
                        log.remove(rev).ctx("compact log")?;
                    }
                }
            }
            txn.open_table(META)
                .ctx("open meta table")?
                .insert(COMPACTED_UPTO, to)
                .ctx("write compaction progress")?;
            txn.commit().ctx("commit compaction")
        })();
        match result {
            Ok(()) => {
                self.dirty = true;
                self.compacted_upto = to;
                if to >= target {
                    for reply in self
                        .compaction
                        .take()
                        .map(|p| p.replies)
                        .unwrap_or_default()
                    {
                        let _ = reply.send(Ok(()));
                    }
                }
            }
            Err(error) => {
                // The logical compaction stands; the history below it stays on
                // disk until the next compaction retries the removal.
                tracing::error!(%error, "embedded store: compaction step failed");
                for reply in self
                    .compaction
                    .take()
                    .map(|p| p.replies)
                    .unwrap_or_default()
                {
                    let _ = reply.send(Err(Error::Unavailable {
                        context: error.to_string(),
                        source: None,
                    }));
                }
            }
        }
    }
}

/// The log's form of an event.
fn mutation(event: &Event) -> Mutation {
    match event.kind {
        EventKind::Deleted => Mutation::Delete {
            key: event.kv.key.clone(),
            revision: event.revision(),
        },
        EventKind::Created | EventKind::Updated => Mutation::Put(event.kv.clone()),
    }
}

fn put(tables: &mut Tables<'_>, kv: &KeyValue) -> Result<()> {
    let key = kv.key.as_ref();
    tables
        .latest
        .insert(key, encode_latest(kv).as_slice())
        .ctx("write latest")?;
    tables
        .log
        .insert(kv.mod_revision, encode_put(kv).as_slice())
        .ctx("append log")?;
    tables
        .index
        .insert((key, kv.mod_revision), ())
        .ctx("write index")?;
    Ok(())
}

fn delete(tables: &mut Tables<'_>, key: &[u8], revision: u64) -> Result<()> {
    tables.latest.remove(key).ctx("remove latest")?;
    tables
        .log
        .insert(revision, encode_delete(key).as_slice())
        .ctx("append log")?;
    tables
        .index
        .insert((key, revision), ())
        .ctx("write index")?;
    Ok(())
}

/// Applies what the write-ahead log holds beyond redb's durable state, in
/// one durable commit. Returns the revision reached.
pub(crate) fn replay(db: &redb::Database, mutations: &[Mutation]) -> Result<Option<u64>> {
    let Some(last) = mutations.last().map(Mutation::revision) else {
        return Ok(None);
    };
    let mut txn = db.begin_write().ctx("begin replay")?;
    txn.set_quick_repair(true);
    {
        let mut tables = Tables {
            latest: txn.open_table(LATEST).ctx("open latest table")?,
            log: txn.open_table(LOG).ctx("open log table")?,
            index: txn.open_table(INDEX).ctx("open index table")?,
        };
        for mutation in mutations {
            match mutation {
                Mutation::Put(kv) => put(&mut tables, kv)?,
                Mutation::Delete { key, revision } => delete(&mut tables, key, *revision)?,
            }
        }
        txn.open_table(META)
            .ctx("open meta table")?
            .insert(REVISION, last)
            .ctx("write revision")?;
    }
    txn.commit().ctx("commit replay")?;
    Ok(Some(last))
}
