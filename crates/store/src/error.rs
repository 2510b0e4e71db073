//! Typed store errors. The API server maps each to a Kubernetes `Status` in
//! one place; nothing here knows about HTTP.

use crate::types::KeyValue;

/// What a store operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The key does not exist (at the revision asked for).
    #[error("key not found")]
    NotFound,
    /// A create found the key already present.
    #[error("key already exists")]
    AlreadyExists,
    /// A compare-and-swap found another `mod_revision`; `current` is the key
    /// as it is now (`None` when it was deleted meanwhile).
    #[error("compare-and-swap failed: key is at mod_revision {}", current.as_ref().map_or(0, |kv| kv.mod_revision))]
    Conflict { current: Option<Box<KeyValue>> },
    /// The revision asked for is older than the compacted history.
    #[error("required revision has been compacted (compacted at {compact_revision})")]
    Compacted { compact_revision: u64 },
    /// The revision asked for is newer than the store's current revision.
    #[error("required revision {requested} is a future revision (current {current})")]
    FutureRevision { requested: u64, current: u64 },
    /// A request is over the size the store accepts (etcd's 1.5 MiB).
    #[error("request of {size} bytes is larger than the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    /// The request itself is malformed (for example an empty key).
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    /// The data path holds something that is not a rudder store, or a store
    /// that is damaged; it was left untouched.
    #[error("{path}: {reason}; refusing to open it (the file was not modified)")]
    Foreign { path: String, reason: String },
    /// The backend could not serve the request (I/O failure, etcd unreachable,
    /// store shut down). Retrying later may succeed.
    #[error("store unavailable: {context}")]
    Unavailable {
        context: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl Error {
    pub(crate) fn unavailable(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Error::Unavailable {
            context: context.into(),
            source: Some(source.into()),
        }
    }

    pub(crate) fn closed() -> Self {
        Error::Unavailable {
            context: "store is shut down".into(),
            source: None,
        }
    }

    pub(crate) fn conflict(current: Option<KeyValue>) -> Self {
        Error::Conflict {
            current: current.map(Box::new),
        }
    }
}

/// Result of a store operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;
