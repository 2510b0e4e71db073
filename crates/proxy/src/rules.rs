//! A Service's share of the ruleset, as a pure function of the Service,
//! its endpoints and where the proxy runs — and the fixed part every
//! table has.
//!
//! The layout is upstream's nftables mode (verdict maps dispatch on
//! `daddr . proto . port`; `no-endpoint-*` maps reject or drop; a
//! masquerade mark; a hairpin set), with one difference that decides its
//! cost: endpoints are not chains. A Service port's addresses map, with
//! `numgen random mod N`, to its endpoints in a few shared data maps
//! (`cluster-endpoints`, …), reached through one small "dispatch" chain
//! per endpoint count N. So ten thousand Services make ten thousand map
//! elements per address and a handful of chains — not tens of thousands
//! of chains and anonymous maps, which the kernel validates against each
//! other at every commit (measured in docs/proxy.md). Services with
//! ClientIP affinity keep upstream's per-endpoint chains: the affinity
//! sets need them.
//!
//! The table's layout (maps, dispatch chains, marks, fixed chains) is
//! declared in `rudder_host::tables::proxy`, beside the agent's own table;
//! this module computes what each Service adds to it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use rudder_api::network::Cidr;

use crate::model::{Endpoint, Service, ServicePort};
use crate::topology::{self, Locality};

pub use rudder_host::tables::proxy::{
    Config, Dispatch, Endpoints, MASQUERADE_MARK, Map, TABLE, base,
};

/// One element of a set or map (`value` is empty in a set).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Element {
    pub map: Map,
    pub key: String,
    pub value: String,
}

/// A Service's share of the ruleset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceRules {
    pub elements: Vec<Element>,
    /// Chains of this Service alone (its name is in theirs), with their
    /// rules.
    pub chains: BTreeMap<String, Vec<String>>,
    /// Its ClientIP affinity sets, with their timeouts in seconds.
    pub affinity_sets: BTreeMap<String, u32>,
    /// The shared chains its elements send packets to.
    pub dispatch: BTreeSet<Dispatch>,
}

impl ServiceRules {
    fn element(&mut self, map: Map, key: String, value: String) {
        self.elements.push(Element { map, key, value });
    }

    fn endpoints(&mut self, map: Map, key: &str, endpoints: &[Endpoint]) {
        for (index, endpoint) in endpoints.iter().enumerate() {
            self.element(
                map,
                format!("{key} . {index}"),
                format!("{} . {}", endpoint.ip, endpoint.port),
            );
        }
    }
}

/// Upstream's chain-name base: the first 8 characters of the base32 of
/// the name's SHA-256, a dash, the name — cut to 240 characters.
pub fn hashed(name: &str) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let digest = ring::digest::digest(&ring::digest::SHA256, name.as_bytes());
    let bits = digest.as_ref()[..5]
        .iter()
        .fold(0u64, |acc, byte| (acc << 8) | u64::from(*byte));
    let mut out = String::with_capacity(9 + name.len());
    for shift in (0..8).rev() {
        out.push(char::from(ALPHABET[((bits >> (shift * 5)) & 31) as usize]));
    }
    out.push('-');
    out.push_str(name);
    const MAX: usize = 240;
    if out.len() > MAX {
        let mut cut = MAX - 3;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("...");
    }
    out
}

/// Whether `name` is safe inside a chain name and an nft statement:
/// what validation lets into namespaces, names and port names.
fn plain(name: &str) -> bool {
    name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// The key of an address's port in the verdict maps.
fn address_key(ip: Ipv4Addr, port: &ServicePort) -> String {
    format!("{ip} . {} . {}", port.protocol.as_str(), port.port)
}

/// The key of an entry's endpoints in an endpoint map (whose protocol is
/// the map's): `address . port`, or the NodePort.
fn endpoints_key(entry: Entry, key: &str) -> String {
    // The verdict maps' keys carry the protocol; the endpoint maps',
    // one per protocol, do not.
    let mut parts: Vec<&str> = key.split(" . ").collect();
    match entry {
        Entry::Address if parts.len() == 3 => {
            parts.remove(1);
        }
        Entry::NodePort if parts.len() == 2 => {
            parts.remove(0);
        }
        _ => {}
    }
    parts.join(" . ")
}

/// Where packets of one kind of traffic go: a shared dispatch chain (its
/// endpoints then elements of `map` under the packet's key), or a chain
/// of this Service (ClientIP affinity).
enum Target {
    Dispatch(Dispatch),
    Chain(String),
}

impl Target {
    fn chain(&self) -> String {
        match self {
            Target::Dispatch(d) => d.chain(),
            Target::Chain(c) => c.clone(),
        }
    }
}

/// How traffic reaches a Service port from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// An external IP or a load balancer's address.
    Address,
    NodePort,
}

/// The ruleset's share of `service`, whose ports' endpoints are
/// `endpoints` (one list per port, in `service.ports`' order), on the node
/// `here`. A Service whose names could not be written safely into a rule
/// (nothing validation lets through) gets no rules.
pub fn service_rules(
    service: &Service,
    endpoints: &[Vec<Endpoint>],
    here: &Locality,
    config: &Config,
) -> ServiceRules {
    let mut rules = ServiceRules::default();
    if !plain(&service.name.namespace)
        || !plain(&service.name.name)
        || !service.ports.iter().all(|p| plain(&p.name))
    {
        tracing::warn!(service = %service.name, "a Service whose names cannot be in a rule is not programmed");
        return rules;
    }
    rules.element(
        Map::ClusterIps,
        service.cluster_ip.to_string(),
        String::new(),
    );
    let none = Vec::new();
    for (index, port) in service.ports.iter().enumerate() {
        let endpoints = endpoints.get(index).unwrap_or(&none);
        PortRules {
            service,
            port,
            sorted: topology::categorize(service, port, endpoints, here),
            base: format!(
                "{}/{}/{}/{}",
                service.name.namespace,
                service.name.name,
                port.protocol.as_str(),
                port.name
            ),
            config,
        }
        .add_to(&mut rules);
    }
    rules
}

/// One port's rules being built.
struct PortRules<'a> {
    service: &'a Service,
    port: &'a ServicePort,
    sorted: topology::Categorized,
    /// `ns/name/proto/port-name`, the chains' name before hashing.
    base: String,
    config: &'a Config,
}

impl PortRules<'_> {
    fn add_to(&self, rules: &mut ServiceRules) {
        let (service, port, sorted) = (self.service, self.port, &self.sorted);
        // No endpoint anywhere: reject at once; some elsewhere but none
        // this traffic may use: drop (upstream's verdicts).
        let none_usable = if sorted.any {
            "drop".to_string()
        } else {
            "goto reject-chain".to_string()
        };

        let cluster_ip = address_key(service.cluster_ip, port);
        let internal = if service.internal_local {
            &sorted.local
        } else {
            &sorted.cluster
        };
        match self.target(
            rules,
            Entry::Address,
            &cluster_ip,
            service.internal_local,
            false,
        ) {
            Some(target) if !internal.is_empty() => rules.element(
                Map::ServiceIps,
                cluster_ip,
                format!("goto {}", target.chain()),
            ),
            _ => rules.element(Map::NoEndpointServices, cluster_ip, none_usable.clone()),
        }

        if service.externally_accessible(port) {
            let external = if service.external_local {
                &sorted.local
            } else {
                &sorted.cluster
            };
            let addresses: BTreeSet<Ipv4Addr> = service
                .external_ips
                .iter()
                .chain(&service.load_balancer_ips)
                .copied()
                .collect();
            for address in addresses {
                let key = address_key(address, port);
                if sorted.any
                    && let Some(chain) = self.external(rules, Entry::Address, &key)
                {
                    rules.element(Map::ServiceIps, key.clone(), format!("goto {chain}"));
                }
                if external.is_empty() {
                    rules.element(Map::NoEndpointServices, key, none_usable.clone());
                }
            }
            if let Some(node_port) = port.node_port {
                let key = format!("{} . {node_port}", port.protocol.as_str());
                if sorted.any
                    && let Some(chain) = self.external(rules, Entry::NodePort, &key)
                {
                    rules.element(Map::ServiceNodePorts, key.clone(), format!("goto {chain}"));
                }
                if external.is_empty() {
                    rules.element(Map::NoEndpointNodePorts, key, none_usable);
                }
            }
            self.firewall(rules);
        }

        let mut hairpin = BTreeSet::new();
        for endpoint in sorted.cluster.iter().chain(&sorted.local) {
            hairpin.insert(format!(
                "{ip} . {ip} . {proto} . {port}",
                ip = endpoint.ip,
                proto = port.protocol.as_str(),
                port = endpoint.port
            ));
        }
        for key in hairpin {
            rules.element(Map::Hairpin, key, String::new());
        }
    }

    /// Where traffic arriving by `entry` under `key` goes, to the cluster
    /// endpoints or (`local`) this node's, masqueraded or not; `None` when
    /// there are no such endpoints.
    fn target(
        &self,
        rules: &mut ServiceRules,
        entry: Entry,
        key: &str,
        local: bool,
        masquerade: bool,
    ) -> Option<Target> {
        let endpoints = if local {
            &self.sorted.local
        } else {
            &self.sorted.cluster
        };
        if endpoints.is_empty() {
            return None;
        }
        if let Some(timeout) = self.service.affinity_timeout {
            let chain = self.affinity_chains(rules, local, timeout);
            if !masquerade {
                return Some(Target::Chain(chain));
            }
            let masquerading = format!("{}-masquerade", chain);
            rules.chains.insert(
                masquerading.clone(),
                vec![
                    format!("meta mark set meta mark or {MASQUERADE_MARK:#x}"),
                    format!("goto {chain}"),
                ],
            );
            return Some(Target::Chain(masquerading));
        }
        let kind = match (entry, local) {
            (Entry::Address, false) => Endpoints::Cluster,
            (Entry::Address, true) => Endpoints::Local,
            (Entry::NodePort, false) => Endpoints::NodePort,
            (Entry::NodePort, true) => Endpoints::NodePortLocal,
        };
        let dispatch = Dispatch {
            endpoints: kind,
            protocol: self.port.protocol,
            n: u32::try_from(endpoints.len()).unwrap_or(u32::MAX),
            masquerade: masquerade && !local,
        };
        rules.endpoints(
            Map::Endpoints(kind, self.port.protocol),
            &endpoints_key(entry, key),
            endpoints,
        );
        rules.dispatch.insert(dispatch);
        Some(Target::Dispatch(dispatch))
    }

    /// The chain external traffic (by `entry`, under `key`) goes to.
    fn external(&self, rules: &mut ServiceRules, entry: Entry, key: &str) -> Option<String> {
        if !self.service.external_local {
            return self
                .target(rules, entry, key, false, true)
                .map(|t| t.chain());
        }
        // The Local policy: traffic from pods and from the node itself
        // short-circuits to the cluster endpoints (the node's own,
        // masqueraded so that replies come back through it); the rest
        // goes to this node's endpoints, keeping the client's address.
        let prefix = match entry {
            Entry::Address => "external",
            Entry::NodePort => "nodeport",
        };
        let chain = format!("{prefix}-{}", hashed(&self.base));
        let mut body = Vec::new();
        if let Some(cluster) = self.target(rules, entry, key, false, false) {
            let cluster = cluster.chain();
            body.push(format!(
                "ip saddr {} goto {cluster} comment \"short-circuit pod traffic\"",
                self.config.cluster_cidr
            ));
            body.push(format!(
                "fib saddr type local meta mark set meta mark or {MASQUERADE_MARK:#x} goto {cluster} comment \"short-circuit local traffic\""
            ));
        }
        if let Some(local) = self.target(rules, entry, key, true, false) {
            body.push(format!("goto {}", local.chain()));
        }
        rules.chains.insert(chain.clone(), body);
        Some(chain)
    }

    /// The chains of a Service with ClientIP affinity (upstream's): one
    /// per endpoint, which remembers the client in the endpoint's set and
    /// DNATs, and one that sends a remembered client back to its endpoint
    /// and anyone else to a random one.
    fn affinity_chains(&self, rules: &mut ServiceRules, local: bool, timeout: u32) -> String {
        let endpoints = if local {
            &self.sorted.local
        } else {
            &self.sorted.cluster
        };
        let prefix = if local { "local" } else { "service" };
        let chain = format!("{prefix}-{}", hashed(&self.base));
        let mut body = Vec::new();
        let mut choices = Vec::new();
        for (index, endpoint) in endpoints.iter().enumerate() {
            let name = hashed(&format!("{}__{}/{}", self.base, endpoint.ip, endpoint.port));
            let endpoint_chain = format!("endpoint-{name}");
            let set = format!("affinity-{name}");
            body.push(format!("ip saddr @{set} goto {endpoint_chain}"));
            choices.push(format!("{index} : goto {endpoint_chain}"));
            rules.affinity_sets.insert(set.clone(), timeout);
            rules.chains.insert(
                endpoint_chain,
                vec![
                    format!("update @{set} {{ ip saddr }}"),
                    format!(
                        "meta l4proto {} dnat to {}:{}",
                        self.port.protocol.as_str(),
                        endpoint.ip,
                        endpoint.port
                    ),
                ],
            );
        }
        body.push(format!(
            "numgen random mod {} vmap {{ {} }}",
            endpoints.len(),
            choices.join(", ")
        ));
        rules.chains.insert(chain.clone(), body);
        chain
    }

    /// `loadBalancerSourceRanges`: traffic to a load balancer's address
    /// from anywhere else is dropped before DNAT.
    fn firewall(&self, rules: &mut ServiceRules) {
        let service = self.service;
        if service.load_balancer_ips.is_empty() || service.source_ranges.is_empty() {
            return;
        }
        let chain = format!("firewall-{}", hashed(&self.base));
        let ranges: Vec<String> = service.source_ranges.iter().map(Cidr::to_string).collect();
        rules.chains.insert(
            chain.clone(),
            vec![format!("ip saddr != {{ {} }} drop", ranges.join(", "))],
        );
        for address in &service.load_balancer_ips {
            rules.element(
                Map::FirewallIps,
                address_key(*address, self.port),
                format!("goto {chain}"),
            );
        }
    }
}

#[cfg(test)]
mod tests;
