//! The Kubernetes API server over the store: REST handlers generic over the
//! registry, the watch cache, discovery, OpenAPI, authentication and
//! authorization.
//!
//! Empty until the API server issue builds it (ARCHITECTURE.md §2).
