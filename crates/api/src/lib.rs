//! The Kubernetes API machinery, pure (no I/O, no async runtime): the
//! resource registry, the object model, defaulting and validation, label and
//! field selectors, patches, `Status` errors, quantities and Table rows.
//!
//! Empty until the API server issue builds it (ARCHITECTURE.md §2).
