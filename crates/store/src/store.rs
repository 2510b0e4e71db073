//! The store contract every backend implements.

use async_trait::async_trait;
use bytes::Bytes;

use crate::{Deleted, KeyValue, ListOptions, ListPage, Result, WatchRequest, WatchStream};

/// A revisioned key-value store with etcd's semantics.
///
/// Keys and values are arbitrary bytes. Every successful write takes the next
/// revision; failed writes take none.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// The key at the latest revision, or at `revision` (which must not be
    /// compacted nor in the future).
    async fn get(&self, key: &[u8], revision: Option<u64>) -> Result<KeyValue>;

    /// The keys under `prefix`, in key order.
    async fn list(&self, prefix: &[u8], options: ListOptions) -> Result<ListPage>;

    /// Creates `key`; fails with `AlreadyExists` when it is present.
    async fn create(&self, key: &[u8], value: Bytes) -> Result<KeyValue>;

    /// Replaces `key` if its `mod_revision` is `expected_mod_revision`;
    /// `Conflict` (with the current key) otherwise, `NotFound` if absent.
    async fn update(
        &self,
        key: &[u8],
        value: Bytes,
        expected_mod_revision: u64,
    ) -> Result<KeyValue>;

    /// Deletes `key`, only if its `mod_revision` is `expected_mod_revision`
    /// when that is given.
    async fn delete(&self, key: &[u8], expected_mod_revision: Option<u64>) -> Result<Deleted>;

    /// Streams the changes to a key or prefix from `request.start_revision`.
    async fn watch(&self, request: WatchRequest) -> Result<WatchStream>;

    /// Discards history before `revision`: reads below it and watches that
    /// start below it fail with `Compacted` from then on.
    async fn compact(&self, revision: u64) -> Result<()>;

    /// The revision history is compacted at (0: never compacted).
    async fn compacted_revision(&self) -> Result<u64>;

    /// The store's current revision: that of the last successful write.
    async fn current_revision(&self) -> Result<u64>;

    /// Whether the store can serve reads and take writes now (the API
    /// server's `etcd` health check): `Ok`, or why not.
    async fn check(&self) -> Result<()>;
}
