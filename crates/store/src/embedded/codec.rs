//! On-disk layout of the embedded store: its redb tables and the encoding of
//! their records. See docs/store.md for the picture.
//!
//! - `latest`: key → [create_revision][mod_revision][version][value], the live
//!   keys only; serves gets and lists at the current revision.
//! - `log`: revision → [kind][create_revision][version][key_len][key][value],
//!   one record per write, in revision order; serves watches.
//! - `index`: (key, revision) → (), every retained version of every key;
//!   serves reads at a past revision and the previous value of an event.
//! - `meta`: name → u64 (format version, current and compacted revisions).
//!
//! Integers are little-endian u64; `key_len` is a little-endian u32.

use bytes::Bytes;
use redb::TableDefinition;

use crate::KeyValue;

pub(crate) const LATEST: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("latest");
pub(crate) const LOG: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("log");
pub(crate) const INDEX: TableDefinition<'_, (&[u8], u64), ()> = TableDefinition::new("index");
pub(crate) const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");

/// `meta` names.
pub(crate) const FORMAT: &str = "format";
pub(crate) const REVISION: &str = "revision";
pub(crate) const COMPACT_REVISION: &str = "compact_revision";
/// Log records below this revision have been physically compacted.
pub(crate) const COMPACTED_UPTO: &str = "compacted_upto";

/// The layout version this code writes and reads.
pub(crate) const FORMAT_VERSION: u64 = 1;

const PUT: u8 = 0;
const DELETE: u8 = 1;

pub(crate) fn encode_latest(kv: &KeyValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + kv.value.len());
    out.extend_from_slice(&kv.create_revision.to_le_bytes());
    out.extend_from_slice(&kv.mod_revision.to_le_bytes());
    out.extend_from_slice(&kv.version.to_le_bytes());
    out.extend_from_slice(&kv.value);
    out
}

pub(crate) fn decode_latest(key: &[u8], record: &[u8]) -> Option<KeyValue> {
    if record.len() < 24 {
        return None;
    }
    Some(KeyValue {
        key: Bytes::copy_from_slice(key),
        create_revision: u64_at(record, 0),
        mod_revision: u64_at(record, 8),
        version: u64_at(record, 16),
        value: Bytes::copy_from_slice(&record[24..]),
    })
}

/// One `log` record, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LogRecord {
    /// The key as written at this revision.
    Put(KeyValue),
    /// The key was deleted at this revision.
    Delete { key: Bytes },
}

impl LogRecord {
    pub(crate) fn key(&self) -> &Bytes {
        match self {
            LogRecord::Put(kv) => &kv.key,
            LogRecord::Delete { key } => key,
        }
    }
}

pub(crate) fn encode_put(kv: &KeyValue) -> Vec<u8> {
    encode_log(PUT, kv.create_revision, kv.version, &kv.key, &kv.value)
}

pub(crate) fn encode_delete(key: &[u8]) -> Vec<u8> {
    encode_log(DELETE, 0, 0, key, &[])
}

fn encode_log(kind: u8, create_revision: u64, version: u64, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(21 + key.len() + value.len());
    out.push(kind);
    out.extend_from_slice(&create_revision.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    // Keys are bounded by MAX_REQUEST_BYTES, far below u32::MAX.
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

pub(crate) fn decode_log(revision: u64, record: &[u8]) -> Option<LogRecord> {
    if record.len() < 21 {
        return None;
    }
    let key_len = u32::from_le_bytes(record[17..21].try_into().ok()?) as usize;
    let key = Bytes::copy_from_slice(record.get(21..21 + key_len)?);
    match record[0] {
        PUT => Some(LogRecord::Put(KeyValue {
            key,
            value: Bytes::copy_from_slice(&record[21 + key_len..]),
            create_revision: u64_at(record, 1),
            mod_revision: revision,
            version: u64_at(record, 9),
        })),
        DELETE => Some(LogRecord::Delete { key }),
        _ => None,
    }
}

/// Whether a `log` record is a delete, without decoding it.
pub(crate) fn is_delete(record: &[u8]) -> bool {
    record.first() == Some(&DELETE)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &'static [u8], value: &'static [u8]) -> KeyValue {
        KeyValue {
            key: Bytes::from_static(key),
            value: Bytes::from_static(value),
            create_revision: 3,
            mod_revision: 7,
            version: 2,
        }
    }

    #[test]
    fn latest_round_trips() {
        let kv = kv(b"/a", b"\x00\xffvalue");
        let record = encode_latest(&kv);
        assert_eq!(decode_latest(b"/a", &record), Some(kv));
    }

    #[test]
    fn log_round_trips_puts_and_deletes() {
        let kv = kv(b"/k\x00", b"");
        assert_eq!(decode_log(7, &encode_put(&kv)), Some(LogRecord::Put(kv)));
        let del = encode_delete(b"/gone");
        assert!(is_delete(&del));
        assert_eq!(
            decode_log(9, &del),
            Some(LogRecord::Delete {
                key: Bytes::from_static(b"/gone")
            })
        );
    }

    #[test]
    fn truncated_records_do_not_decode() {
        assert_eq!(decode_latest(b"k", &[0; 23]), None);
        assert_eq!(decode_log(1, &[0; 20]), None);
        let mut record = encode_put(&kv(b"/long-key", b"v"));
        record.truncate(24);
        assert_eq!(decode_log(7, &record), None);
        assert_eq!(decode_log(7, &[9; 30]), None);
    }
}
