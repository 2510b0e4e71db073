//! The values that go in and out of a [`Store`](crate::Store).

use bytes::Bytes;

/// The largest request a store accepts: key plus value, etcd's default
/// `--max-request-bytes` (1.5 MiB).
pub const MAX_REQUEST_BYTES: usize = 1536 * 1024;

/// A key at one revision, as etcd's `mvccpb.KeyValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: Bytes,
    pub value: Bytes,
    /// Revision of the write that created the key (0 on a delete event).
    pub create_revision: u64,
    /// Revision of the last write to the key; an object's `resourceVersion`.
    pub mod_revision: u64,
    /// Writes since creation, 1 on create (0 on a delete event).
    pub version: u64,
}

/// What a successful delete returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deleted {
    /// The key as it was just before the delete.
    pub prev: KeyValue,
    /// The revision of the delete itself.
    pub revision: u64,
}

/// Options of a prefix list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Read at this revision (`None`: the latest).
    pub revision: Option<u64>,
    /// At most this many keys (`0`: no limit).
    pub limit: usize,
    /// Continue a paged list: start strictly after this key.
    pub continue_after: Option<Bytes>,
}

/// One page of a prefix list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    pub kvs: Vec<KeyValue>,
    /// The revision the page was read at; pass it back with `continue_after`
    /// for a consistent paged list.
    pub revision: u64,
    /// How many keys the range holds from its start (this page included),
    /// as etcd's `count`; `count - kvs.len()` keys remain.
    pub count: u64,
    /// Whether keys remain after this page.
    pub more: bool,
}

/// What a watch asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchRequest {
    /// The key, or the prefix when `prefix` is set.
    pub key: Bytes,
    pub prefix: bool,
    /// Deliver events with revision ≥ this (`0`: only events after now).
    pub start_revision: u64,
}

impl WatchRequest {
    /// Watch every key under `prefix`.
    pub fn prefix(prefix: impl Into<Bytes>, start_revision: u64) -> Self {
        WatchRequest {
            key: prefix.into(),
            prefix: true,
            start_revision,
        }
    }

    /// Watch one key.
    pub fn key(key: impl Into<Bytes>, start_revision: u64) -> Self {
        WatchRequest {
            key: key.into(),
            prefix: false,
            start_revision,
        }
    }

    pub(crate) fn matches(&self, key: &[u8]) -> bool {
        if self.prefix {
            key.starts_with(&self.key)
        } else {
            key == &self.key[..]
        }
    }
}

/// What kind of change an [`Event`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    Created,
    Updated,
    Deleted,
}

/// One change to one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// The key after the change. On a delete: the key, the delete's revision
    /// as `mod_revision`, an empty value and zero create revision and version.
    pub kv: KeyValue,
    /// The key before the change (on update and delete).
    pub prev: Option<KeyValue>,
}

impl Event {
    /// The revision of the write this event reports.
    pub fn revision(&self) -> u64 {
        self.kv.mod_revision
    }
}

/// What a watch stream yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchResponse {
    /// Events in revision order, never repeated, never skipped.
    Events(Vec<Event>),
    /// Every event up to `revision` that matches the watch has been delivered.
    Progress { revision: u64 },
}

/// The smallest key greater than every key that starts with `prefix`
/// (`None`: no upper bound, the prefix is empty or all 0xff).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

pub(crate) fn check_size(key: &[u8], value: &[u8]) -> crate::Result<()> {
    if key.is_empty() {
        return Err(crate::Error::InvalidArgument("key is empty".into()));
    }
    let size = key.len() + value.len();
    if size > MAX_REQUEST_BYTES {
        return Err(crate::Error::TooLarge {
            size,
            limit: MAX_REQUEST_BYTES,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_last_byte_below_0xff() {
        assert_eq!(
            prefix_end(b"/registry/pods/"),
            Some(b"/registry/pods0".to_vec())
        );
        assert_eq!(prefix_end(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn size_limit_is_etcds() {
        assert!(check_size(b"k", &vec![0; MAX_REQUEST_BYTES - 1]).is_ok());
        assert!(matches!(
            check_size(b"k", &vec![0; MAX_REQUEST_BYTES]),
            Err(crate::Error::TooLarge { .. })
        ));
        assert!(matches!(
            check_size(b"", b"v"),
            Err(crate::Error::InvalidArgument(_))
        ));
    }
}
