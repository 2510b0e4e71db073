//! The cluster zone: Services and their EndpointSlices as one pure data
//! structure that answers questions as the Kubernetes DNS specification
//! (schema 1.1.0) and CoreDNS's `kubernetes` plugin do — see
//! [`lookup`] for the names and what each answers, [`reverse`] for PTR.
//!
//! Only what decides an answer is kept, parsed once: per namespace, its
//! Services (kind, ClusterIPs, ports) and the ready endpoints of their
//! slices; namespace names are shared by every Service in them, and an
//! IP → Service index answers reverse lookups. Each update touches one
//! Service's entries only.
//!
//! Pod records (`1-2-3-4.<ns>.pod.<zone>`) are answered from the name alone,
//! as CoreDNS's `pods insecure` (k3s's and kubeadm's default): no Pod
//! watch is needed.

pub mod lookup;
pub mod reverse;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rudder_api::network::Cidr;

use crate::wire::{Name, WireError};

pub use lookup::{Answer, Lookup};

/// The label that names an EndpointSlice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The schema version of the Kubernetes DNS specification served.
pub const SCHEMA_VERSION: &str = "1.1.0";
/// CoreDNS's default record TTL (its `kubernetes` plugin's `ttl`).
pub const DEFAULT_TTL: u32 = 5;

/// A transport protocol of a port (the node's one type, shared with the
/// service proxy).
pub use rudder_host::tables::Protocol;

/// A port of a Service or a slice, as the zone keeps it; `None` for an
/// unknown protocol or a number out of range.
fn port(name: Option<&str>, protocol: Option<&str>, number: i32) -> Option<Port> {
    Some(Port {
        name: name.unwrap_or_default().to_ascii_lowercase().into(),
        protocol: Protocol::parse(protocol)?,
        port: u16::try_from(number).ok()?,
    })
}

/// A named (or unnamed: "") port, name in lowercase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Port {
    pub name: Box<str>,
    pub protocol: Protocol,
    pub port: u16,
}

/// What a Service's own name answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Its ClusterIPs (none while unallocated).
    ClusterIp(Box<[IpAddr]>),
    /// `clusterIP: None`: its ready endpoints.
    Headless,
    /// A CNAME to this name.
    ExternalName(Name),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Service {
    pub kind: Kind,
    pub ports: Box<[Port]>,
}

/// A ready endpoint: its addresses and the label that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub addresses: Box<[IpAddr]>,
    /// `hostname` (lowercase), if the EndpointSlice gives one.
    pub hostname: Option<Box<str>>,
}

impl Endpoint {
    /// The label of `address` of this endpoint: its hostname, else the
    /// address with dashes (CoreDNS's `endpointHostname`).
    pub fn label(&self, address: IpAddr) -> String {
        match &self.hostname {
            Some(hostname) => hostname.to_string(),
            None => dashed(address),
        }
    }
}

/// `10.42.0.5` → `10-42-0-5`; IPv6 `:` → `-`, with a `0` after a
/// trailing dash (`fd00::` → `fd00--0`), as CoreDNS names them.
pub fn dashed(address: IpAddr) -> String {
    match address {
        IpAddr::V4(ip) => ip.to_string().replace('.', "-"),
        IpAddr::V6(ip) => {
            let mut label = ip.to_string().replace(':', "-");
            if label.ends_with('-') {
                label.push('0');
            }
            label
        }
    }
}

/// One EndpointSlice's share of a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slice {
    pub name: Box<str>,
    pub ports: Box<[Port]>,
    pub endpoints: Box<[Endpoint]>,
}

#[derive(Debug, Default)]
pub(crate) struct Namespace {
    pub services: HashMap<Arc<str>, Service>,
    /// Slices by their Service's name (a slice may come before its Service).
    pub slices: HashMap<Arc<str>, Vec<Slice>>,
    /// Slice name → the Service it is filed under.
    pub slice_owners: HashMap<Box<str>, Arc<str>>,
}

impl Namespace {
    /// The ready endpoints of a Service, across its slices, with the ports
    /// of the slice each is in.
    pub fn endpoints<'a>(
        &'a self,
        service: &str,
    ) -> impl Iterator<Item = (&'a Endpoint, &'a [Port])> + 'a {
        self.slices
            .get(service)
            .into_iter()
            .flatten()
            .flat_map(|slice| slice.endpoints.iter().map(|e| (e, &slice.ports[..])))
    }
}

/// A Service by namespace and name, as reverse lookups name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServiceRef {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

/// An endpoint address's name: its Service and its label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EndpointRef {
    pub service: ServiceRef,
    pub label: Box<str>,
}

/// The cluster zone.
#[derive(Debug)]
pub struct Zone {
    /// The cluster domain, lowercase (`cluster.local.`).
    domain: Name,
    domain_labels: usize,
    ttl: u32,
    serial: u32,
    synced: bool,
    namespaces: HashMap<Arc<str>, Namespace>,
    /// ClusterIP → the Services that have it (one, but for a race).
    cluster_ips: HashMap<IpAddr, Vec<ServiceRef>>,
    /// Endpoint address → the names it has (one per selecting Service).
    endpoint_ips: HashMap<IpAddr, Vec<EndpointRef>>,
    /// IPv4 ranges whose reverse names this zone answers for, found or not.
    reverse_cidrs: Vec<Cidr>,
}

impl Zone {
    /// An empty zone for `domain` (`cluster.local`; not the root), its
    /// records living `ttl` seconds. It counts as synced (complete) until
    /// [`set_synced`](Zone::set_synced) says otherwise.
    pub fn new(domain: &str, ttl: u32) -> Result<Zone, WireError> {
        let domain = Name::from_text(domain)?.to_lowercase();
        // The root as the cluster domain would make every name the zone's.
        if domain.is_root() {
            return Err(WireError::EmptyLabel);
        }
        Ok(Zone {
            domain_labels: domain.label_count(),
            domain,
            ttl,
            serial: now_serial(),
            synced: true,
            namespaces: HashMap::new(),
            cluster_ips: HashMap::new(),
            endpoint_ips: HashMap::new(),
            reverse_cidrs: Vec::new(),
        })
    }

    /// An empty zone with this one's domain, TTL, reverse ranges and sync
    /// state (to be filled and swapped in whole).
    pub fn empty_like(&self) -> Zone {
        Zone {
            domain: self.domain.clone(),
            domain_labels: self.domain_labels,
            ttl: self.ttl,
            serial: now_serial().max(self.serial.wrapping_add(1)),
            synced: self.synced,
            namespaces: HashMap::new(),
            cluster_ips: HashMap::new(),
            endpoint_ips: HashMap::new(),
            reverse_cidrs: self.reverse_cidrs.clone(),
        }
    }

    /// The IPv4 ranges (the service and cluster CIDRs) whose reverse names
    /// are answered here, NXDOMAIN for an unknown address, instead of
    /// being forwarded.
    pub fn set_reverse_cidrs(&mut self, cidrs: Vec<Cidr>) {
        self.reverse_cidrs = cidrs;
    }

    /// Whether the zone holds everything: until it does, a name it does
    /// not know is SERVFAIL (try again), not NXDOMAIN (cached as absent).
    pub fn set_synced(&mut self, synced: bool) {
        self.synced = synced;
    }

    pub fn domain(&self) -> &Name {
        &self.domain
    }

    pub fn ttl(&self) -> u32 {
        self.ttl
    }

    pub fn set_ttl(&mut self, ttl: u32) {
        self.ttl = ttl;
    }

    /// How many Services the zone holds.
    pub fn services(&self) -> usize {
        self.namespaces.values().map(|ns| ns.services.len()).sum()
    }

    /// A Service added or changed.
    pub fn apply_service(&mut self, service: &core::Service) {
        let (Some(namespace), Some(name)) = (
            service.metadata.namespace.as_deref(),
            service.metadata.name.as_deref(),
        ) else {
            return;
        };
        let parsed = parse_service(service);
        self.update(namespace, name, |ns, name| match parsed {
            Some(parsed) if ns.services.get(&name) == Some(&parsed) => false,
            Some(parsed) => {
                ns.services.insert(name, parsed);
                true
            }
            None => ns.services.remove(&name).is_some(),
        });
    }

    /// A Service deleted.
    pub fn delete_service(&mut self, service: &core::Service) {
        let (Some(namespace), Some(name)) = (
            service.metadata.namespace.as_deref(),
            service.metadata.name.as_deref(),
        ) else {
            return;
        };
        self.update(namespace, name, |ns, name| {
            ns.services.remove(&name).is_some()
        });
    }

    /// An EndpointSlice added or changed. A slice that moved to another
    /// Service (its label changed) leaves the one it was in.
    pub fn apply_slice(&mut self, slice: &EndpointSlice) {
        let Some(namespace) = slice.metadata.namespace.as_deref() else {
            return;
        };
        let Some(slice_name) = slice.metadata.name.as_deref() else {
            return;
        };
        let owner = slice_service(slice);
        // Out of the Service it was filed under, if another.
        let previous = self
            .namespaces
            .get(namespace)
            .and_then(|ns| ns.slice_owners.get(slice_name))
            .filter(|service| Some(&***service) != owner)
            .cloned();
        if let Some(service) = previous {
            self.update(namespace, &service, |ns, service| {
                remove_slice(ns, &service, slice_name)
            });
        }
        let Some(owner) = owner else {
            return;
        };
        let parsed = parse_slice(slice, slice_name);
        self.update(namespace, owner, |ns, service| {
            ns.slice_owners.insert(parsed.name.clone(), service.clone());
            let slices = ns.slices.entry(service).or_default();
            match slices.iter_mut().find(|s| s.name == parsed.name) {
                Some(existing) if *existing == parsed => false,
                Some(existing) => {
                    *existing = parsed;
                    true
                }
                None => {
                    slices.push(parsed);
                    true
                }
            }
        });
    }

    /// An EndpointSlice deleted.
    pub fn delete_slice(&mut self, slice: &EndpointSlice) {
        let (Some(namespace), Some(slice_name), Some(owner)) = (
            slice.metadata.namespace.as_deref(),
            slice.metadata.name.as_deref(),
            slice_service(slice),
        ) else {
            return;
        };
        self.update(namespace, owner, |ns, service| {
            remove_slice(ns, &service, slice_name)
        });
    }

    /// Changes one Service's entries (`change` returns whether anything
    /// changed), keeping the reverse index and the serial in step and
    /// dropping a namespace left empty.
    fn update(
        &mut self,
        namespace: &str,
        service: &str,
        change: impl FnOnce(&mut Namespace, Arc<str>) -> bool,
    ) {
        let ns_key = match self.namespaces.get_key_value(namespace) {
            Some((key, _)) => key.clone(),
            None => Arc::from(namespace),
        };
        let svc_key = self
            .namespaces
            .get(namespace)
            .and_then(|ns| {
                ns.services
                    .get_key_value(service)
                    .map(|(k, _)| k.clone())
                    .or_else(|| ns.slices.get_key_value(service).map(|(k, _)| k.clone()))
            })
            .unwrap_or_else(|| Arc::from(service));
        let reference = ServiceRef {
            namespace: ns_key.clone(),
            name: svc_key.clone(),
        };
        self.unindex(&reference);
        let ns = self.namespaces.entry(ns_key.clone()).or_default();
        let changed = change(ns, svc_key);
        if ns.services.is_empty() && ns.slices.is_empty() {
            self.namespaces.remove(&ns_key);
        }
        self.index(&reference);
        if changed {
            self.serial = now_serial().max(self.serial.wrapping_add(1));
        }
    }

    /// The reverse-index entries of one Service.
    fn reverse_entries(&self, reference: &ServiceRef) -> (Vec<IpAddr>, Vec<(IpAddr, Box<str>)>) {
        let Some(ns) = self.namespaces.get(&reference.namespace) else {
            return Default::default();
        };
        let Some(service) = ns.services.get(&reference.name) else {
            return Default::default();
        };
        let cluster_ips = match &service.kind {
            Kind::ClusterIp(ips) => ips.to_vec(),
            Kind::Headless => Vec::new(),
            Kind::ExternalName(_) => return Default::default(),
        };
        let endpoints = ns
            .endpoints(&reference.name)
            .flat_map(|(endpoint, _)| {
                endpoint
                    .addresses
                    .iter()
                    .map(move |&ip| (ip, endpoint.label(ip).into_boxed_str()))
            })
            .collect();
        (cluster_ips, endpoints)
    }

    fn unindex(&mut self, reference: &ServiceRef) {
        let (cluster_ips, endpoints) = self.reverse_entries(reference);
        for ip in cluster_ips {
            if let Some(refs) = self.cluster_ips.get_mut(&ip) {
                refs.retain(|r| r != reference);
                if refs.is_empty() {
                    self.cluster_ips.remove(&ip);
                }
            }
        }
        for (ip, _) in endpoints {
            if let Some(refs) = self.endpoint_ips.get_mut(&ip) {
                refs.retain(|r| r.service != *reference);
                if refs.is_empty() {
                    self.endpoint_ips.remove(&ip);
                }
            }
        }
    }

    fn index(&mut self, reference: &ServiceRef) {
        let (cluster_ips, endpoints) = self.reverse_entries(reference);
        for ip in cluster_ips {
            self.cluster_ips
                .entry(ip)
                .or_default()
                .push(reference.clone());
        }
        for (ip, label) in endpoints {
            let refs = self.endpoint_ips.entry(ip).or_default();
            // One name per address and Service (dual slices may repeat it).
            if !refs.iter().any(|r| r.service == *reference) {
                refs.push(EndpointRef {
                    service: reference.clone(),
                    label,
                });
            }
        }
    }
}

fn remove_slice(ns: &mut Namespace, service: &str, slice_name: &str) -> bool {
    let Some(slices) = ns.slices.get_mut(service) else {
        return false;
    };
    let before = slices.len();
    slices.retain(|s| &*s.name != slice_name);
    let changed = slices.len() != before;
    if slices.is_empty() {
        ns.slices.remove(service);
    }
    if changed {
        ns.slice_owners.remove(slice_name);
    }
    changed
}

/// The Service an EndpointSlice belongs to.
fn slice_service(slice: &EndpointSlice) -> Option<&str> {
    slice
        .metadata
        .labels
        .as_ref()?
        .get(SERVICE_NAME_LABEL)
        .map(String::as_str)
        .filter(|s| !s.is_empty())
}

/// A Service as the zone keeps it; `None` for one without a name here (an
/// ExternalName that is an IP address or not a name, as CoreDNS ignores).
fn parse_service(service: &core::Service) -> Option<Service> {
    let spec = service.spec.as_ref()?;
    let kind = if spec.type_.as_deref() == Some("ExternalName") {
        let target = spec.external_name.as_deref()?;
        if target.parse::<IpAddr>().is_ok() {
            return None;
        }
        Kind::ExternalName(Name::from_text(target).ok()?)
    } else if spec.cluster_ip.as_deref() == Some("None") {
        Kind::Headless
    } else {
        let mut ips: Vec<IpAddr> = spec
            .cluster_ips
            .iter()
            .flatten()
            .chain(spec.cluster_ip.iter())
            .filter_map(|ip| ip.parse().ok())
            .collect();
        let mut seen = Vec::with_capacity(ips.len());
        ips.retain(|ip| {
            let new = !seen.contains(ip);
            seen.push(*ip);
            new
        });
        Kind::ClusterIp(ips.into())
    };
    let ports = spec
        .ports
        .iter()
        .flatten()
        .filter_map(|p| port(p.name.as_deref(), p.protocol.as_deref(), p.port))
        .collect();
    Some(Service { kind, ports })
}

/// A slice's ready endpoints (`conditions.ready` unset or true: the
/// EndpointSlice controller marks `publishNotReadyAddresses` Services'
/// endpoints ready) with IPv4 or IPv6 addresses.
fn parse_slice(slice: &EndpointSlice, name: &str) -> Slice {
    let family_ok = |ip: &IpAddr| match slice.address_type.as_str() {
        "IPv4" => ip.is_ipv4(),
        "IPv6" => ip.is_ipv6(),
        _ => false,
    };
    let endpoints = slice
        .endpoints
        .iter()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .filter_map(|e| {
            let addresses: Box<[IpAddr]> = e
                .addresses
                .iter()
                .filter_map(|a| a.parse().ok())
                .filter(family_ok)
                .collect();
            (!addresses.is_empty()).then(|| Endpoint {
                addresses,
                hostname: e
                    .hostname
                    .as_deref()
                    .filter(|h| !h.is_empty())
                    .map(|h| h.to_ascii_lowercase().into()),
            })
        })
        .collect();
    let ports = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|p| port(p.name.as_deref(), p.protocol.as_deref(), p.port?))
        .collect();
    Slice {
        name: name.into(),
        ports,
        endpoints,
    }
}

/// The SOA serial: the Unix time of the last change (as CoreDNS's).
fn now_serial() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(1)
}
