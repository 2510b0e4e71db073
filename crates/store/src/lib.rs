//! The revisioned key-value store that the API server stands on.
//!
//! Semantics are etcd's (ARCHITECTURE.md §3): one global, strictly increasing
//! revision; every key carries `create_revision`, `mod_revision` and `version`;
//! create fails if the key exists; update and delete are compare-and-swap on
//! `mod_revision`; reads at the latest or at a past revision; prefix lists with
//! limit and continue; watches of a key or prefix from any revision that is not
//! compacted; compaction of history beyond a window.
//!
//! Two backends implement [`Store`]:
//! - [`embedded::EmbeddedStore`], the default: pure Rust on redb, group commit,
//!   in-process watch fan-out;
//! - [`etcd::EtcdStore`]: the same contract over a real etcd v3 cluster.
//!
//! Both pass one conformance suite, [`testing::suite`] (feature `testing`).

mod compactor;
pub mod embedded;
mod error;
pub mod etcd;
mod store;
mod types;
mod watch;

#[cfg(feature = "testing")]
pub mod testing;

pub use compactor::{CompactionPolicy, Compactor};
pub use error::{Error, Result};
pub use store::Store;
pub use types::{
    Deleted, Event, EventKind, KeyValue, ListOptions, ListPage, MAX_REQUEST_BYTES, WatchRequest,
    WatchResponse, prefix_end,
};
pub use watch::WatchStream;
