//! Reads of the embedded store, each inside one redb read transaction so that
//! what it returns is one consistent revision.

use std::ops::Bound;

use bytes::Bytes;
use redb::{ReadOnlyTable, ReadTransaction};

use super::codec::{
    COMPACT_REVISION, INDEX, LATEST, LOG, LogRecord, META, REVISION, decode_latest, decode_log,
};
use super::context::Context;
use crate::{Error, Event, EventKind, KeyValue, ListOptions, ListPage, Result, WatchRequest};

/// The revisions a read transaction sees.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Revisions {
    pub current: u64,
    pub compacted: u64,
}

pub(crate) fn revisions(txn: &ReadTransaction) -> Result<Revisions> {
    let meta = txn.open_table(META).ctx("open meta table")?;
    let read = |name| -> Result<u64> {
        Ok(meta
            .get(name)
            .ctx("read meta")?
            .map(|v| v.value())
            .unwrap_or(0))
    };
    Ok(Revisions {
        current: read(REVISION)?,
        compacted: read(COMPACT_REVISION)?,
    })
}

/// Checks that `revision` can be read: not compacted, not in the future.
fn check_revision(revision: u64, revs: Revisions) -> Result<()> {
    if revision < revs.compacted {
        return Err(Error::Compacted {
            compact_revision: revs.compacted,
        });
    }
    if revision > revs.current {
        return Err(Error::FutureRevision {
            requested: revision,
            current: revs.current,
        });
    }
    Ok(())
}

pub(crate) fn get(txn: &ReadTransaction, key: &[u8], revision: Option<u64>) -> Result<KeyValue> {
    let revs = revisions(txn)?;
    match revision {
        Some(rev) if rev != revs.current => {
            check_revision(rev, revs)?;
            let index = txn.open_table(INDEX).ctx("open index table")?;
            let log = txn.open_table(LOG).ctx("open log table")?;
            version_at(&index, &log, key, rev)?.ok_or(Error::NotFound)
        }
        _ => {
            let latest = txn.open_table(LATEST).ctx("open latest table")?;
            let record = latest.get(key).ctx("read latest")?.ok_or(Error::NotFound)?;
            decode_latest(key, record.value()).ok_or_else(|| corrupt("latest", key))
        }
    }
}

/// The key as it was at `revision` (its newest version at or below it), if
/// it existed then.
fn version_at(
    index: &ReadOnlyTable<(&[u8], u64), ()>,
    log: &ReadOnlyTable<u64, &[u8]>,
    key: &[u8],
    revision: u64,
) -> Result<Option<KeyValue>> {
    let newest = index
        .range((key, 0)..=(key, revision))
        .ctx("read index")?
        .next_back();
    let Some(entry) = newest else { return Ok(None) };
    let (_, rev) = entry.ctx("read index")?.0.value();
    read_log(log, rev).map(|record| match record {
        LogRecord::Put(kv) => Some(kv),
        LogRecord::Delete { .. } => None,
    })
}

fn read_log(log: &ReadOnlyTable<u64, &[u8]>, revision: u64) -> Result<LogRecord> {
    let record = log.get(revision).ctx("read log")?;
    let record = record.ok_or_else(|| corrupt("log", &revision.to_le_bytes()))?;
    decode_log(revision, record.value()).ok_or_else(|| corrupt("log", &revision.to_le_bytes()))
}

pub(crate) fn list(
    txn: &ReadTransaction,
    prefix: &[u8],
    options: &ListOptions,
) -> Result<ListPage> {
    let revs = revisions(txn)?;
    let revision = options.revision.unwrap_or(revs.current);
    if revision != revs.current {
        check_revision(revision, revs)?;
    }
    let start: Bound<&[u8]> = match &options.continue_after {
        Some(after) if after.as_ref() >= prefix => Bound::Excluded(after.as_ref()),
        _ => Bound::Included(prefix),
    };
    let end = crate::prefix_end(prefix);
    let end: Bound<&[u8]> = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
    let limit = if options.limit == 0 {
        usize::MAX
    } else {
        options.limit
    };

    let mut kvs = Vec::new();
    let mut count = 0u64;
    if revision == revs.current {
        let latest = txn.open_table(LATEST).ctx("open latest table")?;
        for entry in latest.range::<&[u8]>((start, end)).ctx("range latest")? {
            let (key, record) = entry.ctx("range latest")?;
            count += 1;
            if kvs.len() < limit {
                let kv = decode_latest(key.value(), record.value())
                    .ok_or_else(|| corrupt("latest", key.value()))?;
                kvs.push(kv);
            }
        }
    } else {
        let index = txn.open_table(INDEX).ctx("open index table")?;
        let log = txn.open_table(LOG).ctx("open log table")?;
        // Every retained version of every key in range, in (key, revision)
        // order: the last one at or below `revision` per key decides.
        let start = match start {
            Bound::Excluded(key) => Bound::Excluded((key, u64::MAX)),
            Bound::Included(key) => Bound::Included((key, 0)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let end = match end {
            Bound::Excluded(key) => Bound::Excluded((key, 0)),
            _ => Bound::Unbounded,
        };
        let mut current: Option<(Vec<u8>, Option<u64>)> = None;
        let mut finish = |entry: Option<(Vec<u8>, Option<u64>)>| -> Result<()> {
            if let Some((_, Some(rev))) = entry
                && let LogRecord::Put(kv) = read_log(&log, rev)?
            {
                count += 1;
                if kvs.len() < limit {
                    kvs.push(kv);
                }
            }
            Ok(())
        };
        for entry in index
            .range::<(&[u8], u64)>((start, end))
            .ctx("range index")?
        {
            let entry = entry.ctx("range index")?;
            let (key, rev) = entry.0.value();
            match &mut current {
                Some((k, newest)) if k.as_slice() == key => {
                    if rev <= revision {
                        *newest = Some(rev);
                    }
                }
                _ => {
                    finish(current.take())?;
                    current = Some((key.to_vec(), (rev <= revision).then_some(rev)));
                }
            }
        }
        finish(current.take())?;
    }
    let more = count > kvs.len() as u64;
    Ok(ListPage {
        kvs,
        revision,
        count,
        more,
    })
}

/// Up to `max` events matching `request` with revisions from `from` up to the
/// transaction's current revision, and the revision to read from next.
pub(crate) fn events(
    txn: &ReadTransaction,
    request: &WatchRequest,
    from: u64,
    max: usize,
) -> Result<(Vec<Event>, u64)> {
    let revs = revisions(txn)?;
    if from < revs.compacted {
        return Err(Error::Compacted {
            compact_revision: revs.compacted,
        });
    }
    let log = txn.open_table(LOG).ctx("open log table")?;
    let index = txn.open_table(INDEX).ctx("open index table")?;
    let mut out = Vec::new();
    if from > revs.current {
        return Ok((out, from));
    }
    for entry in log.range(from..=revs.current).ctx("range log")? {
        let (rev, record) = entry.ctx("range log")?;
        let rev = rev.value();
        let record =
            decode_log(rev, record.value()).ok_or_else(|| corrupt("log", &rev.to_le_bytes()))?;
        if !request.matches(record.key()) {
            continue;
        }
        let prev = match rev.checked_sub(1) {
            Some(before) => version_at(&index, &log, record.key(), before)?,
            None => None,
        };
        out.push(match record {
            LogRecord::Put(kv) => {
                let created = kv.create_revision == rev;
                let kind = if created {
                    EventKind::Created
                } else {
                    EventKind::Updated
                };
                Event { kind, kv, prev }
            }
            LogRecord::Delete { key } => Event {
                kind: EventKind::Deleted,
                kv: deleted_kv(key, rev),
                prev,
            },
        });
        if out.len() >= max {
            return Ok((out, rev + 1));
        }
    }
    Ok((out, revs.current + 1))
}

/// The `kv` of a delete event: the key and the delete's revision.
pub(crate) fn deleted_kv(key: Bytes, revision: u64) -> KeyValue {
    KeyValue {
        key,
        value: Bytes::new(),
        create_revision: 0,
        mod_revision: revision,
        version: 0,
    }
}

fn corrupt(table: &str, key: &[u8]) -> Error {
    Error::Unavailable {
        context: format!(
            "corrupt record in table {table} at key {:?}",
            Bytes::copy_from_slice(key)
        ),
        source: None,
    }
}
