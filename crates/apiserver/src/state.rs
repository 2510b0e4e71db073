//! What every handler shares.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};

use crate::cache::Cache;

use bytes::Bytes;
use rudder_api::Registry;
use rudder_api::time::Clock;
use rudder_store::Store;
use tokio_util::sync::CancellationToken;

/// A generated OpenAPI document and its content hash.
#[derive(Debug, Clone)]
pub struct Document {
    pub hash: String,
    pub body: Bytes,
}

/// The OpenAPI documents of one registry, made when first asked for.
#[derive(Debug, Default)]
pub struct OpenApiDocs {
    /// The registry generation these documents describe.
    pub generation: u64,
    pub v2: Option<Document>,
    /// The same document in gnostic's protobuf form.
    pub v2_protobuf: Option<Document>,
    /// `/openapi/v3/<path>` documents by path.
    pub v3: HashMap<String, Document>,
}

/// Shared server state.
#[derive(Debug)]
pub struct State {
    /// What is served: the built-in resources and those of established
    /// CustomResourceDefinitions, with a generation counting changes.
    registry: RwLock<(u64, Arc<Registry>)>,
    pub store: Arc<dyn Store>,
    /// `/readyz` answers ok once bootstrap is done.
    pub ready: AtomicBool,
    pub openapi: Mutex<OpenApiDocs>,
    /// Fires when the server shuts down: long-running requests (watches) end.
    pub shutdown: CancellationToken,
    /// The watch cache of each resource, started on first use.
    pub caches: crate::cache::Caches,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Where the time comes from: creation and deletion timestamps, managed
    /// fields, Table ages (a fake clock in tests).
    pub clock: Arc<dyn Clock>,
    /// Requests (watches excepted) served at once; more get 429.
    pub inflight: Arc<tokio::sync::Semaphore>,
    inflight_limit: usize,
    /// Quota admission's per-namespace serialization.
    pub quota_locks: crate::storage::QuotaLocks,
    /// The ServiceAccount token issuer (a server with a data directory
    /// has one; TokenRequest and bearer tokens need it).
    issuer: std::sync::OnceLock<Arc<crate::authn::serviceaccount::Issuer>>,
    /// The cluster CA certificate (PEM) of a listening server, served
    /// anonymously at `/cacerts` for agents joining (k3s's endpoint).
    pub ca_bundle: std::sync::OnceLock<Bytes>,
    /// The client node agents are reached with (`pods/log`); set by a
    /// server that has the cluster's TLS material.
    pub kubelet: std::sync::OnceLock<crate::kubelet::KubeletClient>,
    /// The service CIDR, set once at start (see [`State::service_cidr`]).
    pub service_cidr: std::sync::OnceLock<rudder_api::network::Cidr>,
}

/// Requests served at once before 429 (upstream's max-requests-inflight
/// plus max-mutating-requests-inflight).
pub const MAX_INFLIGHT: usize = 600;

impl State {
    /// The state of a server on `store`, whose operations are metered.
    pub fn new(registry: Arc<Registry>, store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Arc<Self> {
        State::with_inflight_limit(registry, store, clock, MAX_INFLIGHT)
    }

    /// The same, serving at most `limit` requests at once.
    pub fn with_inflight_limit(
        registry: Arc<Registry>,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        limit: usize,
    ) -> Arc<Self> {
        let metrics = Arc::new(crate::metrics::Metrics::default());
        let store: Arc<dyn Store> =
            Arc::new(crate::metrics::MeteredStore::new(store, metrics.clone()));
        Arc::new(State {
            registry: RwLock::new((0, registry)),
            store,
            ready: AtomicBool::new(false),
            openapi: Mutex::new(OpenApiDocs::default()),
            shutdown: CancellationToken::new(),
            caches: Default::default(),
            metrics,
            clock,
            inflight: Arc::new(tokio::sync::Semaphore::new(limit)),
            inflight_limit: limit,
            quota_locks: Default::default(),
            issuer: Default::default(),
            ca_bundle: Default::default(),
            kubelet: std::sync::OnceLock::new(),
            service_cidr: std::sync::OnceLock::new(),
        })
    }

    /// The range ClusterIPs are allocated from (`--service-cidr`; the
    /// default until a server sets it).
    pub fn service_cidr(&self) -> rudder_api::network::Cidr {
        self.service_cidr
            .get()
            .copied()
            .unwrap_or_else(rudder_api::network::default_service_cidr)
    }
}

impl State {
    /// What is served now.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }

    /// What is served now, and its generation.
    pub fn registry_generation(&self) -> (u64, Arc<Registry>) {
        self.registry
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Serves `registry` from now on (discovery, routing and OpenAPI
    /// follow at once).
    pub fn set_registry(&self, registry: Arc<Registry>) {
        let mut current = self.registry.write().unwrap_or_else(|e| e.into_inner());
        *current = (current.0 + 1, registry);
    }

    /// The ServiceAccount token issuer, if the server has one.
    pub fn issuer(&self) -> Option<Arc<crate::authn::serviceaccount::Issuer>> {
        self.issuer.get().cloned()
    }

    /// Sets the token issuer (once; later calls are ignored).
    pub fn set_issuer(&self, issuer: crate::authn::serviceaccount::Issuer) {
        let _ = self.issuer.set(Arc::new(issuer));
    }

    /// Requests being served now (watches excepted).
    pub fn inflight_now(&self) -> usize {
        self.inflight_limit
            .saturating_sub(self.inflight.available_permits())
    }

    /// The watch cache of `def`'s resource, if one has been started.
    pub fn running_cache(&self, def: &rudder_api::ResourceDef) -> Option<Arc<Cache>> {
        self.caches.running(&def.key_prefix())
    }

    /// The watch cache of a resource.
    pub fn cache(&self, def: &rudder_api::ResourceDef) -> Arc<Cache> {
        let fields = rudder_api::selector::fields_of(def);
        // Built-in kinds are stored in their storage version's Go field
        // order; custom resources sorted.
        let schema = match (&def.custom, def.conversion) {
            (Some(_), _) => "",
            (None, Some(conversion)) => conversion.storage_schema,
            (None, None) => def.schema_name.as_str(),
        };
        self.caches.get(
            &def.key_prefix(),
            fields,
            schema,
            &self.store,
            &self.shutdown,
            &self.metrics,
        )
    }
}

/// A stable content hash (FNV-1a 64), upper-case hex, for OpenAPI URLs and
/// ETags.
pub fn content_hash(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016X}")
}
