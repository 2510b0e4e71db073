//! Cluster DNS: the names of Services and their endpoints, answered as the
//! Kubernetes DNS specification (schema 1.1.0) says and CoreDNS's
//! `kubernetes` plugin does, from the shared informers' Services and
//! EndpointSlices; every other name forwarded to the node's own resolvers
//! (or the configured ones) through a cache. See docs/dns.md.
//!
//! - [`wire`]: the DNS message format, parsed and written by hand;
//! - [`zone`]: the cluster zone, a pure data structure that answers;
//! - [`cache`], [`forward`]: names outside the cluster;
//! - [`config`], [`resolv`]: what the user and the node configure;
//! - [`handler`]: one query, bytes to bytes; [`server`]: the UDP and TCP
//!   listeners; [`metrics`]: what they count;
//! - [`run`]: all of it, kept in step with the cluster.

pub mod cache;
pub mod config;
pub mod forward;
pub mod handler;
pub mod metrics;
pub mod resolv;
pub mod server;
mod watch;
pub mod wire;
pub mod zone;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rudder_api::network::{self, Cidr};
use rudder_runtime::{Change, Informers, Subscription};
use tokio_util::sync::CancellationToken;

pub use config::{Config, ConfigError};
pub use forward::ForwardOptions;
pub use handler::Handler;
pub use metrics::{Metrics, Snapshot};
pub use server::{BindError, Server, ServerOptions};
pub use zone::Zone;

/// The ConfigMap users edit by default: `kube-system/rudder-dns`.
pub const CONFIG_MAP: (&str, &str) = ("kube-system", "rudder-dns");

/// The DNS server's configuration from the binary.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to listen, UDP and TCP each.
    pub listen: Vec<SocketAddr>,
    /// The cluster domain (`cluster.local`).
    pub cluster_domain: String,
    /// The node's resolv.conf: the default upstreams (re-read as it changes).
    pub resolv_conf: PathBuf,
    /// A configuration file (see [`config`]); re-read as it changes. An
    /// invalid one at start is an error.
    pub config_file: Option<PathBuf>,
    /// The ConfigMap (namespace, name) that overrides the file while it
    /// exists; `None` watches none.
    pub config_map: Option<(String, String)>,
    /// Reverse names answered here (NXDOMAIN when unknown) rather than
    /// forwarded: the service and cluster CIDRs.
    pub reverse_cidrs: Vec<Cidr>,
    /// How often the file and resolv.conf are re-read.
    pub reread_interval: Duration,
    pub server: ServerOptions,
    pub forward: ForwardOptions,
    /// The counters, shared with whoever prints them.
    pub metrics: Arc<Metrics>,
}

impl Options {
    /// Defaults (k3s's): `cluster.local`, `/etc/resolv.conf`, the
    /// `kube-system/rudder-dns` ConfigMap, the default service and cluster
    /// CIDRs.
    pub fn new(listen: Vec<SocketAddr>) -> Options {
        Options {
            listen,
            cluster_domain: network::CLUSTER_DOMAIN.to_string(),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            config_file: None,
            config_map: Some((CONFIG_MAP.0.to_string(), CONFIG_MAP.1.to_string())),
            reverse_cidrs: vec![
                network::default_service_cidr(),
                network::default_cluster_cidr(),
            ],
            reread_interval: Duration::from_secs(10),
            server: ServerOptions::default(),
            forward: ForwardOptions::default(),
            metrics: Arc::new(Metrics::default()),
        }
    }
}

/// Why the DNS server could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the cluster domain {domain:?} is not a domain name: {source}")]
    Domain {
        domain: String,
        source: wire::WireError,
    },
    #[error("no address to listen on for DNS")]
    NoListener,
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Bind(#[from] BindError),
}

/// Serves cluster DNS until `stop`: binds the listeners (an error if it
/// cannot), answers at once (names outside the cluster; cluster names
/// SERVFAIL rather than NXDOMAIN until the informers have listed), and
/// keeps the zone and the configuration in step.
pub async fn run(
    informers: &Informers,
    options: Options,
    stop: CancellationToken,
) -> Result<(), Error> {
    if options.listen.is_empty() {
        return Err(Error::NoListener);
    }
    let domain_error = |source| Error::Domain {
        domain: options.cluster_domain.clone(),
        source,
    };
    let mut zone = Zone::new(&options.cluster_domain, zone::DEFAULT_TTL).map_err(domain_error)?;
    let server = Server::bind(&options.listen, options.server)?;
    let mut settings = watch::Settings::load(
        options.config_file.clone(),
        options.resolv_conf.clone(),
        server.local_addrs().to_vec(),
    )?;
    let config = settings.config();
    zone.set_ttl(config.ttl);
    zone.set_reverse_cidrs(options.reverse_cidrs.clone());
    zone.set_synced(false);
    let zone = Arc::new(RwLock::new(zone));
    let upstreams = settings.upstreams();
    let default_servers = upstreams.default_servers().to_vec();
    let forwarder = Arc::new(forward::Forwarder::new(
        upstreams,
        config.cache,
        options.forward,
    ));
    let handler = Arc::new(Handler::new(
        zone.clone(),
        forwarder.clone(),
        options.metrics.clone(),
    ));
    tracing::info!(
        listen = ?server.local_addrs(),
        domain = %options.cluster_domain,
        upstreams = ?default_servers,
        "cluster DNS serving"
    );
    // The listeners stop with `stop`, and with this function however it
    // ends (returned or dropped).
    let serving_stop = stop.child_token();
    let _stop_serving = serving_stop.clone().drop_guard();
    let serving = tokio::spawn(server.serve(handler, serving_stop.clone()));

    let services = informers.typed::<Service>();
    let slices = informers.typed::<EndpointSlice>();
    let mut service_changes = services.subscribe();
    let mut slice_changes = slices.subscribe();
    let config_maps = options.config_map.as_ref().map(|(_, name)| {
        informers.typed_with_fields::<ConfigMap>(&format!("metadata.name={name}"))
    });
    let mut map_changes = config_maps.as_ref().map(|i| i.subscribe());
    let all = || (services.store().list(), slices.store().list());
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = async { services.wait_synced().await; slices.wait_synced().await } => {
            let mut zone = zone.write().unwrap_or_else(|e| e.into_inner());
            watch::reload(&mut zone, all());
            zone.set_synced(true);
            tracing::info!(services = zone.services(), "cluster DNS zone synced");
        }
    }
    let mut reread = tokio::time::interval(options.reread_interval);
    reread.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.is_cancelled() {
        tokio::select! {
            _ = stop.cancelled() => break,
            change = service_changes.next() => {
                let Some(change) = change else { break };
                let mut zone = zone.write().unwrap_or_else(|e| e.into_inner());
                watch::service_change(&mut zone, change, all);
                // Take whatever else is waiting under the same lock.
                while let Some(change) = waiting(&mut service_changes) {
                    watch::service_change(&mut zone, change, all);
                }
            }
            change = slice_changes.next() => {
                let Some(change) = change else { break };
                let mut zone = zone.write().unwrap_or_else(|e| e.into_inner());
                watch::slice_change(&mut zone, change, all);
                while let Some(change) = waiting(&mut slice_changes) {
                    watch::slice_change(&mut zone, change, all);
                }
            }
            change = next_map(&mut map_changes) => {
                let Some(change) = change else { map_changes = None; continue };
                let Some((namespace, name)) = &options.config_map else { continue };
                let store = config_maps.as_ref().map(|i| i.store());
                let current = match change {
                    Change::Applied { new, .. } if watch::is_config_map(&new, namespace, name) => Some(new),
                    Change::Deleted(old) if watch::is_config_map(&old, namespace, name) => None,
                    Change::Resync => store.and_then(|s| s.get_in(Some(namespace), name)),
                    _ => continue,
                };
                let empty = Default::default();
                let data = current.as_ref().map(|m| m.data.as_ref().unwrap_or(&empty));
                if settings.config_map(data) {
                    tracing::info!(config_map = %format!("{namespace}/{name}"), "DNS configuration changed");
                    settings.apply(&forwarder, &zone);
                }
            }
            _ = reread.tick() => {
                if settings.reread() {
                    settings.apply(&forwarder, &zone);
                }
            }
        }
    }
    serving_stop.cancel();
    let _ = serving.await;
    Ok(())
}

/// A change already waiting, without waiting for one.
fn waiting<K: Send + Sync + 'static>(subscription: &mut Subscription<K>) -> Option<Change<K>> {
    subscription.next().now_or_never().flatten()
}

/// The next ConfigMap change, or never without a subscription.
async fn next_map(subscription: &mut Option<Subscription<ConfigMap>>) -> Option<Change<ConfigMap>> {
    match subscription {
        Some(subscription) => subscription.next().await,
        None => std::future::pending().await,
    }
}

/// `run`'s future can be spawned: checked when the crate compiles.
#[allow(dead_code)]
fn run_is_send(
    informers: &'static Informers,
) -> impl std::future::Future<Output = Result<(), Error>> + Send + 'static {
    run(
        informers,
        Options::new(Vec::new()),
        CancellationToken::new(),
    )
}
