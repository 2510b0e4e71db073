//! The write-ahead log of the embedded store.
//!
//! A write is durable once its batch's record is in the log and the log is
//! `fdatasync`ed: one sequential append and one sync per batch, however many
//! writes share it. redb then commits the batch without syncing, and a
//! periodic durable redb commit (a checkpoint) makes the log's records
//! redundant, after which the log starts over. This is etcd's own shape: WAL
//! first, the B-tree behind it.
//!
//! Layout: an 8-byte magic, then records, each
//! `[payload_len u32][crc32 u32][payload]`, payload
//! `[first_revision u64][count u32]` and `count` mutations
//! `[kind u8][key_len u32][key]`, a put followed by
//! `[create_revision u64][version u64][value_len u32][value]`; the i-th
//! mutation has revision `first_revision + i`. Little-endian throughout.
//!
//! The file is preallocated, so a sync of an append need not journal a new
//! file size. Starting over does not clear it: records left from before have
//! revisions at or below the checkpoint, so recovery, which applies only
//! records that continue the checkpoint's revision without a gap, skips them.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::{Error, KeyValue, Result};

const MAGIC: &[u8; 8] = b"RUDWAL01";
const HEADER: u64 = MAGIC.len() as u64;
const RECORD_HEADER: usize = 8;
/// Space reserved up front, so most appends overwrite allocated blocks.
pub(crate) const PREALLOCATE: u64 = 64 << 20;

const PUT: u8 = 0;
const DELETE: u8 = 1;

/// One change a log record carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mutation {
    Put(KeyValue),
    Delete { key: Bytes, revision: u64 },
}

impl Mutation {
    pub(crate) fn revision(&self) -> u64 {
        match self {
            Mutation::Put(kv) => kv.mod_revision,
            Mutation::Delete { revision, .. } => *revision,
        }
    }
}

/// How a log append is made durable: `fdatasync` ([`Fdatasync`]), or in
/// tests one that counts, holds or fails the syncs, to prove that no write
/// is acknowledged before its sync and that a failed sync is a failed write.
pub trait Syncer: Send + Sync + std::fmt::Debug {
    fn sync(&self, file: &File) -> std::io::Result<()>;
}

/// `fdatasync(2)`: the data, and the metadata needed to read it back.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fdatasync;

impl Syncer for Fdatasync {
    fn sync(&self, file: &File) -> std::io::Result<()> {
        file.sync_data()
    }
}

/// The open log, positioned after its last live record.
#[derive(Debug)]
pub(crate) struct Wal {
    file: File,
    syncer: std::sync::Arc<dyn Syncer>,
    path: PathBuf,
    /// Where the next record goes.
    offset: u64,
    buffer: Vec<u8>,
}

impl Wal {
    /// Opens the log at `path` (creating and preallocating it if absent) and
    /// returns the mutations of its records that continue `durable_revision`
    /// without a gap, in order. A torn record at the end (a crash during an
    /// append that was never acknowledged) ends the log.
    pub(crate) fn open(
        path: &Path,
        durable_revision: u64,
        syncer: std::sync::Arc<dyn Syncer>,
    ) -> Result<(Wal, Vec<Mutation>)> {
        let io = |what: &str, e: std::io::Error| {
            Error::unavailable(format!("{what} {}", path.display()), e)
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io("open", e))?;
        // Read record by record, never the whole (preallocated) file: a
        // 64 MiB buffer would stay in the allocator's hands after start-up.
        let size = file.metadata().map_err(|e| io("stat", e))?.len();
        let mut magic = [0u8; MAGIC.len()];
        if size == 0 {
            preallocate(&mut file).map_err(|e| io("create", e))?;
            if let Some(dir) = path.parent() {
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| io("sync the directory of", e))?;
            }
        } else if file.read_exact_at(&mut magic, 0).is_err() || &magic != MAGIC {
            return Err(Error::Foreign {
                path: path.display().to_string(),
                reason: "not a rudder write-ahead log".into(),
            });
        }
        let mutations = recover(&file, durable_revision).map_err(|e| io("read", e))?;
        let wal = Wal {
            file,
            syncer,
            path: path.to_path_buf(),
            offset: HEADER,
            buffer: Vec::new(),
        };
        Ok((wal, mutations))
    }

    /// Appends one record and syncs it: when this returns, the mutations
    /// survive a crash.
    pub(crate) fn append(&mut self, mutations: &[Mutation]) -> std::io::Result<()> {
        let Some(first) = mutations.first() else {
            return Ok(());
        };
        self.buffer.clear();
        self.buffer.extend_from_slice(&[0; RECORD_HEADER]);
        self.buffer
            .extend_from_slice(&first.revision().to_le_bytes());
        self.buffer
            .extend_from_slice(&(mutations.len() as u32).to_le_bytes());
        for mutation in mutations {
            encode(&mut self.buffer, mutation);
        }
        let payload_len = (self.buffer.len() - RECORD_HEADER) as u32;
        let crc = crc32fast::hash(&self.buffer[RECORD_HEADER..]);
        self.buffer[..4].copy_from_slice(&payload_len.to_le_bytes());
        self.buffer[4..8].copy_from_slice(&crc.to_le_bytes());
        self.file.write_all_at(&self.buffer, self.offset)?;
        self.syncer.sync(&self.file)?;
        self.offset += self.buffer.len() as u64;
        Ok(())
    }

    /// Starts the log over after a durable checkpoint of every record in it.
    pub(crate) fn reset(&mut self) {
        self.offset = HEADER;
    }

    /// Bytes of live records.
    pub(crate) fn len(&self) -> u64 {
        self.offset - HEADER
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

fn preallocate(file: &mut File) -> std::io::Result<()> {
    file.write_all(MAGIC)?;
    let zeros = vec![0u8; 1 << 20];
    let mut written = HEADER;
    while written < PREALLOCATE {
        let n = zeros.len().min((PREALLOCATE - written) as usize);
        file.write_all(&zeros[..n])?;
        written += n as u64;
    }
    file.sync_all()
}

fn encode(out: &mut Vec<u8>, mutation: &Mutation) {
    let (kind, key) = match mutation {
        Mutation::Put(kv) => (PUT, &kv.key),
        Mutation::Delete { key, .. } => (DELETE, key),
    };
    out.push(kind);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    if let Mutation::Put(kv) = mutation {
        out.extend_from_slice(&kv.create_revision.to_le_bytes());
        out.extend_from_slice(&kv.version.to_le_bytes());
        out.extend_from_slice(&(kv.value.len() as u32).to_le_bytes());
        out.extend_from_slice(&kv.value);
    }
}

/// A cursor over a record's payload.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<Bytes> {
        let len = self.u32()? as usize;
        Some(Bytes::copy_from_slice(self.take(len)?))
    }
}

fn decode(payload: &[u8]) -> Option<Vec<Mutation>> {
    let mut r = Reader { bytes: payload };
    let first = r.u64()?;
    let count = r.u32()? as u64;
    let mut mutations = Vec::with_capacity(count.min(1 << 16) as usize);
    for revision in first..first.checked_add(count)? {
        let kind = r.take(1)?[0];
        let key = r.bytes()?;
        mutations.push(match kind {
            PUT => {
                let create_revision = r.u64()?;
                let version = r.u64()?;
                let value = r.bytes()?;
                Mutation::Put(KeyValue {
                    key,
                    value,
                    create_revision,
                    mod_revision: revision,
                    version,
                })
            }
            DELETE => Mutation::Delete { key, revision },
            _ => return None,
        });
    }
    r.bytes.is_empty().then_some(mutations)
}

/// The mutations of the records of `log` that continue `durable` without
/// a gap; a record cut short, zeroed or corrupt ends the log.
fn recover(log: &File, durable: u64) -> std::io::Result<Vec<Mutation>> {
    let size = log.metadata()?.len();
    let mut out = Vec::new();
    let mut expected = durable + 1;
    let mut at = HEADER;
    let mut header = [0u8; RECORD_HEADER];
    let mut payload = Vec::new();
    while at + RECORD_HEADER as u64 <= size {
        log.read_exact_at(&mut header, at)?;
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as u64;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let end = at + RECORD_HEADER as u64 + len;
        if len == 0 || end > size {
            break;
        }
        payload.resize(len as usize, 0);
        log.read_exact_at(&mut payload, at + RECORD_HEADER as u64)?;
        if crc32fast::hash(&payload) != crc {
            break;
        }
        let Some(mutations) = decode(&payload) else {
            break;
        };
        let (Some(first), Some(last)) = (mutations.first(), mutations.last()) else {
            break;
        };
        if last.revision() < expected {
            // Already in the checkpoint (or left from before it): skip.
        } else if first.revision() == expected {
            expected = last.revision() + 1;
            out.extend(mutations);
        } else {
            break;
        }
        at = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, revision: u64) -> Mutation {
        Mutation::Put(KeyValue {
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: Bytes::from(vec![revision as u8; 10]),
            create_revision: revision,
            mod_revision: revision,
            version: 1,
        })
    }

    fn del(key: &str, revision: u64) -> Mutation {
        Mutation::Delete {
            key: Bytes::copy_from_slice(key.as_bytes()),
            revision,
        }
    }

    #[test]
    fn records_round_trip_and_recover_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("wal");
        let (mut wal, found) = Wal::open(&path, 0, std::sync::Arc::new(Fdatasync)).expect("open");
        assert!(found.is_empty());
        assert_eq!(std::fs::metadata(&path).expect("meta").len(), PREALLOCATE);
        wal.append(&[put("/a", 1), put("/b", 2)]).expect("append");
        wal.append(&[del("/a", 3)]).expect("append");
        drop(wal);
        let (_, found) = Wal::open(&path, 0, std::sync::Arc::new(Fdatasync)).expect("reopen");
        assert_eq!(found, vec![put("/a", 1), put("/b", 2), del("/a", 3)]);
        // What a checkpoint covers is not replayed.
        let (_, found) = Wal::open(&path, 2, std::sync::Arc::new(Fdatasync)).expect("reopen");
        assert_eq!(found, vec![del("/a", 3)]);
    }

    #[test]
    fn records_left_from_before_a_reset_are_never_replayed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("wal");
        let (mut wal, _) = Wal::open(&path, 0, std::sync::Arc::new(Fdatasync)).expect("open");
        for r in 1..=20 {
            wal.append(&[put("/old", r)]).expect("append");
        }
        // Checkpoint at 20, start over, write a shorter record.
        wal.reset();
        wal.append(&[put("/new", 21)]).expect("append");
        drop(wal);
        let (_, found) = Wal::open(&path, 20, std::sync::Arc::new(Fdatasync)).expect("reopen");
        assert_eq!(found, vec![put("/new", 21)]);
        // A crash right after a reset, before any new record: nothing to do.
        let (mut wal, _) = Wal::open(&path, 21, std::sync::Arc::new(Fdatasync)).expect("reopen");
        wal.reset();
        drop(wal);
        let (_, found) = Wal::open(&path, 21, std::sync::Arc::new(Fdatasync)).expect("reopen");
        assert!(found.is_empty());
    }

    #[test]
    fn a_torn_or_corrupt_record_ends_the_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("wal");
        let (mut wal, _) = Wal::open(&path, 0, std::sync::Arc::new(Fdatasync)).expect("open");
        wal.append(&[put("/a", 1)]).expect("append");
        let second_at = HEADER + wal.len();
        wal.append(&[put("/b", 2)]).expect("append");
        wal.append(&[put("/c", 3)]).expect("append");
        drop(wal);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[second_at as usize + RECORD_HEADER + 3] ^= 0xff;
        std::fs::write(&path, &bytes).expect("write");
        let (_, found) = Wal::open(&path, 0, std::sync::Arc::new(Fdatasync)).expect("reopen");
        assert_eq!(found, vec![put("/a", 1)]);
    }

    #[test]
    fn a_gap_ends_the_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("wal");
        let (mut wal, _) = Wal::open(&path, 0, std::sync::Arc::new(Fdatasync)).expect("open");
        wal.append(&[put("/a", 1)]).expect("append");
        wal.append(&[put("/c", 3)]).expect("append");
        drop(wal);
        let (_, found) = Wal::open(&path, 0, std::sync::Arc::new(Fdatasync)).expect("reopen");
        assert_eq!(found, vec![put("/a", 1)]);
    }

    #[test]
    fn a_foreign_file_is_refused_untouched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("wal");
        std::fs::write(&path, b"something else entirely").expect("write");
        assert!(matches!(
            Wal::open(&path, 0, std::sync::Arc::new(Fdatasync)),
            Err(Error::Foreign { .. })
        ));
        assert_eq!(
            std::fs::read(&path).expect("read"),
            b"something else entirely"
        );
    }
}
