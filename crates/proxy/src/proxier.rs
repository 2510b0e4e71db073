//! The proxy's loop: Services, EndpointSlices and its own Node from the
//! shared informers into [`Proxier`] (a sans-IO core: changes in,
//! transactions out), and its transactions into the kernel through the
//! host seam.
//!
//! Every change marks its Service dirty; a sync rewrites the dirty
//! Services only. Changes that arrive while a transaction is applied are
//! batched into the next one, so a burst costs a few transactions, not one
//! per change. A new table is filled in chunks of [`CHUNK`] Services (the
//! first ones reachable at once, no giant transaction); an existing table
//! (a restarted agent) is replaced whole in one, so that traffic is never
//! served by half a table.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service as ApiService};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rudder_api::network::Cidr;
use rudder_host::Host;
use rudder_runtime::{Change, Informers};
use tokio_util::sync::CancellationToken;

use crate::model::{self, Service, ServiceName};
use crate::rules::{self, Config, TABLE};
use crate::table::Table;
use crate::topology::Locality;

/// Services per transaction while a new table is filled (and in any
/// burst).
pub const CHUNK: usize = 1000;

/// The proxy's configuration.
#[derive(Debug, Clone)]
pub struct Options {
    pub node_name: String,
    pub cluster_cidr: Cidr,
    pub service_cidr: Cidr,
}

/// What the proxy knows and what it has programmed.
#[derive(Debug)]
pub struct Proxier {
    here: Locality,
    services: BTreeMap<ServiceName, Service>,
    slices: BTreeMap<ServiceName, BTreeMap<String, Arc<EndpointSlice>>>,
    dirty: BTreeSet<ServiceName>,
    table: Table,
    /// The next transaction replaces the table whole, with every Service.
    replace: bool,
    /// The health checks of LoadBalancer Services with the Local external
    /// policy, as of their last computation.
    checks: BTreeMap<ServiceName, (u16, crate::health::Check)>,
    /// What each Service's UDP ports reached at their last computation,
    /// and the conntrack deletions owed once the next transaction is in.
    udp: BTreeMap<ServiceName, crate::conntrack::UdpFlows>,
    cleanups: Vec<rudder_host::Command>,
}

impl Proxier {
    pub fn new(config: Config, here: Locality) -> Proxier {
        Proxier {
            here,
            services: BTreeMap::new(),
            slices: BTreeMap::new(),
            dirty: BTreeSet::new(),
            table: Table::new(config),
            replace: false,
            checks: BTreeMap::new(),
            udp: BTreeMap::new(),
            cleanups: Vec::new(),
        }
    }

    /// A Service added, changed (`new`) or deleted (`None`).
    pub fn service(&mut self, name: ServiceName, new: Option<&ApiService>) {
        match new.and_then(Service::from_api) {
            Some(service) => {
                if self.services.get(&name) != Some(&service) {
                    self.services.insert(name.clone(), service);
                    self.dirty.insert(name);
                }
            }
            None => {
                if self.services.remove(&name).is_some() {
                    self.dirty.insert(name);
                }
            }
        }
    }

    /// An EndpointSlice added or changed (`old` is what it was, for a
    /// slice that moved to another Service) or deleted.
    pub fn slice(&mut self, old: Option<&EndpointSlice>, new: Option<&EndpointSlice>) {
        let slice_name = |s: &EndpointSlice| s.metadata.name.clone().unwrap_or_default();
        if let Some(old) = old
            && let Some(service) = model::slice_service(old)
            && new.and_then(model::slice_service).as_ref() != Some(&service)
        {
            if let Some(slices) = self.slices.get_mut(&service) {
                slices.remove(&slice_name(old));
                if slices.is_empty() {
                    self.slices.remove(&service);
                }
            }
            self.mark(service);
        }
        if let Some(new) = new
            && let Some(service) = model::slice_service(new)
        {
            self.slices
                .entry(service.clone())
                .or_default()
                .insert(slice_name(new), Arc::new(new.clone()));
            self.mark(service);
        }
    }

    /// Forgets the Services not in `names`, and every slice (the caller
    /// gives them all again): what a relist after missed changes needs.
    pub fn forget_all_but(&mut self, names: &BTreeSet<ServiceName>) {
        let gone: Vec<ServiceName> = self
            .services
            .keys()
            .filter(|n| !names.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            self.service(name, None);
        }
        let services: Vec<ServiceName> = self.slices.keys().cloned().collect();
        self.slices.clear();
        for service in services {
            self.mark(service);
        }
    }

    /// An EndpointSlice deleted.
    pub fn slice_deleted(&mut self, slice: &EndpointSlice) {
        let Some(service) = model::slice_service(slice) else {
            return;
        };
        if let Some(slices) = self.slices.get_mut(&service) {
            slices.remove(slice.metadata.name.as_deref().unwrap_or_default());
            if slices.is_empty() {
                self.slices.remove(&service);
            }
        }
        self.mark(service);
    }

    /// The node's zone changed: every Service's endpoints may.
    pub fn locality(&mut self, here: Locality) {
        if here != self.here {
            self.here = here;
            self.dirty.extend(self.services.keys().cloned());
        }
    }

    fn mark(&mut self, service: ServiceName) {
        // A slice of a Service the proxy does not program changes nothing.
        if self.services.contains_key(&service) {
            self.dirty.insert(service);
        }
    }

    /// Whether Services wait for a transaction.
    pub fn pending(&self) -> usize {
        self.dirty.len()
    }

    /// The next transaction: the dirty Services, at most `limit` of them
    /// (all of them when the table must be rebuilt whole), or `None` when
    /// nothing changes.
    pub fn next_transaction(&mut self, limit: usize) -> Option<String> {
        let limit = if self.replace {
            usize::MAX
        } else {
            limit.max(1)
        };
        self.replace = false;
        let mut changes = Vec::new();
        while changes.len() < limit {
            let Some(name) = self.dirty.pop_first() else {
                break;
            };
            let rules = self.services.get(&name).map(|service| {
                let slices = self.slices.get(&name);
                let endpoints: Vec<Vec<model::Endpoint>> = service
                    .ports
                    .iter()
                    .map(|port| {
                        model::endpoints(
                            slices.into_iter().flat_map(|s| s.values().map(|s| &**s)),
                            port,
                        )
                    })
                    .collect();
                (
                    rules::service_rules(service, &endpoints, &self.here, self.table.config()),
                    health_check(service, &endpoints, &self.here),
                    crate::conntrack::udp_flows(service, &endpoints),
                )
            });
            let flows = rules
                .as_ref()
                .map(|(_, _, flows)| flows.clone())
                .unwrap_or_default();
            let old = self.udp.remove(&name).unwrap_or_default();
            self.cleanups
                .extend(crate::conntrack::cleanup(&old, &flows));
            if flows != crate::conntrack::UdpFlows::default() {
                self.udp.insert(name.clone(), flows);
            }
            let rules = match rules {
                Some((rules, check, _)) => {
                    match check {
                        Some(check) => self.checks.insert(name.clone(), check),
                        None => self.checks.remove(&name),
                    };
                    Some(rules)
                }
                None => {
                    self.checks.remove(&name);
                    None
                }
            };
            changes.push((name, rules));
        }
        if self.table.needs_rebuild() {
            return Some(self.table.rebuild(changes));
        }
        self.table.transaction(changes)
    }

    /// The last transaction was refused (or the table is someone else's
    /// from an earlier run): the next one rebuilds it whole, from
    /// everything known, in one commit.
    pub fn failed(&mut self) {
        self.table.forget();
        self.replace = true;
    }

    /// Services programmed.
    pub fn programmed(&self) -> usize {
        self.table.len()
    }

    /// The conntrack deletions owed now that the transactions so far are
    /// in.
    pub fn take_cleanups(&mut self) -> Vec<rudder_host::Command> {
        std::mem::take(&mut self.cleanups)
    }

    /// The health check node ports to serve, by port.
    pub fn health_checks(&self) -> BTreeMap<u16, crate::health::Check> {
        self.checks.values().cloned().collect()
    }
}

/// A Service's health check: LoadBalancer Services with the Local external
/// policy have a `healthCheckNodePort`, answered from the distinct
/// addresses of this node's ready endpoints over all its ports.
fn health_check(
    service: &Service,
    endpoints: &[Vec<model::Endpoint>],
    here: &Locality,
) -> Option<(u16, crate::health::Check)> {
    let port = service
        .health_check_node_port
        .filter(|_| service.external_local)?;
    let local: std::collections::BTreeSet<std::net::Ipv4Addr> = endpoints
        .iter()
        .flatten()
        .filter(|e| e.ready && e.node_name.as_deref() == Some(here.node_name.as_str()))
        .map(|e| e.ip)
        .collect();
    Some((
        port,
        crate::health::Check {
            service: service.name.clone(),
            local_endpoints: local.len(),
        },
    ))
}

/// Runs the proxy until `stop`: its table is left in place when it stops
/// (connections keep flowing while an agent restarts; the next start
/// replaces it whole).
pub async fn run(
    informers: &Informers,
    host: Arc<dyn Host>,
    options: Options,
    stop: CancellationToken,
) {
    let config = Config {
        cluster_cidr: options.cluster_cidr,
        service_cidr: options.service_cidr,
    };
    let services = informers.typed::<ApiService>();
    let slices = informers.typed::<EndpointSlice>();
    let nodes =
        informers.typed_with_fields::<Node>(&format!("metadata.name={}", options.node_name));
    let mut service_changes = services.subscribe();
    let mut slice_changes = slices.subscribe();
    let mut node_changes = nodes.subscribe();
    tokio::select! {
        _ = stop.cancelled() => return,
        _ = async { services.wait_synced().await; slices.wait_synced().await } => {}
    }
    if let Err(error) =
        rudder_host::routes::install_service_route(&*host, options.service_cidr).await
    {
        tracing::warn!(%error, "the node's own processes cannot reach Service addresses");
    }
    // A table from an earlier run is replaced whole; a new one is filled
    // in chunks.
    let fresh = match rudder_host::nft::create_table(&*host, "ip", TABLE).await {
        Ok(created) => created,
        Err(error) => {
            tracing::warn!(%error, "could not create the proxy's nftables table");
            false
        }
    };
    let here = |nodes: &rudder_runtime::informer::Store<Node>| Locality {
        node_name: options.node_name.clone(),
        zone: nodes.list().first().and_then(|n| {
            n.metadata
                .labels
                .as_ref()?
                .get("topology.kubernetes.io/zone")
                .cloned()
        }),
    };
    let mut proxier = Proxier::new(config, here(&nodes.store()));
    // Everything the informers hold, and nothing they no longer do (after
    // missed changes, a deletion may be among them).
    let load_all = |proxier: &mut Proxier| {
        let listed = services.store().list();
        let names: BTreeSet<ServiceName> = listed.iter().map(|s| name_of(s)).collect();
        proxier.forget_all_but(&names);
        for service in listed {
            proxier.service(name_of(&service), Some(&service));
        }
        for slice in slices.store().list() {
            proxier.slice(None, Some(&slice));
        }
    };
    let take_service = |proxier: &mut Proxier, change: Change<ApiService>| match change {
        Change::Applied { new, .. } => proxier.service(name_of(&new), Some(&new)),
        Change::Deleted(old) => proxier.service(name_of(&old), None),
        Change::Resync => load_all(proxier),
    };
    let take_slice = |proxier: &mut Proxier, change: Change<EndpointSlice>| match change {
        Change::Applied { old, new } => proxier.slice(old.as_deref(), Some(&new)),
        Change::Deleted(old) => proxier.slice_deleted(&old),
        Change::Resync => load_all(proxier),
    };
    load_all(&mut proxier);
    if !fresh {
        // Everything at once: the old table serves until this commits.
        proxier.failed();
    }
    tracing::info!(
        services = proxier.pending(),
        fresh,
        "service proxy starting"
    );
    let mut health = crate::health::Servers::new(stop.child_token());
    let mut retry = Duration::from_millis(100);
    loop {
        // Take in every change already waiting, so that a burst is one
        // transaction.
        loop {
            let mut took = false;
            while let Some(change) = try_next(&mut service_changes) {
                took = true;
                take_service(&mut proxier, change);
            }
            while let Some(change) = try_next(&mut slice_changes) {
                took = true;
                take_slice(&mut proxier, change);
            }
            while try_next(&mut node_changes).is_some() {
                took = true;
                proxier.locality(here(&nodes.store()));
            }
            if !took {
                break;
            }
        }
        if let Some(transaction) = proxier.next_transaction(CHUNK) {
            let started = std::time::Instant::now();
            match rudder_host::nft::apply(&*host, &transaction).await {
                Ok(()) => {
                    retry = Duration::from_millis(100);
                    health
                        .proxy_healthy
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    health.sync(&proxier.health_checks()).await;
                    for command in proxier.take_cleanups() {
                        match host.run(&command).await {
                            Ok(_) => {}
                            Err(rudder_host::Error::Command { message, .. })
                                if crate::conntrack::nothing_to_delete(&message) => {}
                            Err(error) => {
                                tracing::debug!(%error, "could not forget stale UDP flows")
                            }
                        }
                    }
                    tracing::debug!(
                        elapsed = ?started.elapsed(),
                        programmed = proxier.programmed(),
                        pending = proxier.pending(),
                        "service rules synced"
                    );
                }
                Err(error) => {
                    tracing::warn!(%error, "the service rules were refused; rebuilding the table");
                    health
                        .proxy_healthy
                        .store(false, std::sync::atomic::Ordering::Relaxed);
                    proxier.failed();
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(retry) => {}
                    }
                    retry = (retry * 2).min(Duration::from_secs(10));
                }
            }
            continue;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            change = service_changes.next() => match change {
                Some(change) => take_service(&mut proxier, change),
                None => return,
            },
            change = slice_changes.next() => match change {
                Some(change) => take_slice(&mut proxier, change),
                None => return,
            },
            change = node_changes.next() => match change {
                Some(_) => proxier.locality(here(&nodes.store())),
                None => return,
            },
        }
    }
}

/// Removes what the proxy put on the node: its table and the route that
/// lets the node reach Service addresses (a node taken down).
pub async fn cleanup(host: &dyn Host) -> Result<(), rudder_host::Error> {
    rudder_host::nft::delete_table(host, "ip", TABLE).await?;
    if let Err(error) = rudder_host::routes::remove_service_route(host).await {
        tracing::warn!(%error, "could not remove the service route");
    }
    Ok(())
}

fn name_of(service: &ApiService) -> ServiceName {
    ServiceName::new(
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// A change already waiting, without waiting for one.
fn try_next<K: Send + Sync + 'static>(
    subscription: &mut rudder_runtime::informer::Subscription<K>,
) -> Option<Change<K>> {
    use futures::FutureExt;
    subscription.next().now_or_never().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(name: &str, ip: &str) -> ApiService {
        serde_json::from_value(json!({
            "metadata": {"namespace": "ns", "name": name},
            "spec": {"clusterIP": ip, "ports": [{"port": 80}]}
        }))
        .expect("a Service")
    }

    #[test]
    fn a_relist_forgets_what_was_deleted_while_changes_were_missed() {
        let mut proxier = Proxier::new(crate::testing::config(), crate::testing::here());
        proxier.service(
            ServiceName::new("ns", "a"),
            Some(&service("a", "10.43.0.1")),
        );
        proxier.service(
            ServiceName::new("ns", "b"),
            Some(&service("b", "10.43.0.2")),
        );
        let first = proxier.next_transaction(CHUNK).expect("a transaction");
        assert!(first.contains("10.43.0.2"), "{first}");
        // "b" was deleted while changes were missed: the relist lacks it.
        proxier.forget_all_but(&[ServiceName::new("ns", "a")].into());
        proxier.service(
            ServiceName::new("ns", "a"),
            Some(&service("a", "10.43.0.1")),
        );
        let next = proxier.next_transaction(CHUNK).expect("b goes");
        assert!(
            next.contains("delete element ip rudder-proxy cluster-ips { 10.43.0.2 }"),
            "{next}"
        );
        assert_eq!(proxier.programmed(), 1);
    }
}
