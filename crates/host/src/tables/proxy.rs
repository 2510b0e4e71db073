//! The service proxy's table (`ip rudder-proxy`): its name, its sets and
//! maps, the dispatch chains that DNAT to endpoints, the masquerade mark,
//! and the fixed part every such table has. What each Service adds to it
//! is the proxy's (`rudder_proxy::rules`); see docs/proxy.md.

use rudder_api::network::Cidr;

use super::Protocol;

/// The proxy's table, in family `ip`.
pub const TABLE: &str = "rudder-proxy";

/// The packet mark that asks for masquerading (upstream's bit 14).
pub const MASQUERADE_MARK: u32 = 0x4000;

/// What the table's fixed part depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Pods' addresses: traffic from elsewhere to a ClusterIP is
    /// masqueraded, pods' traffic to an external address of a Local
    /// Service short-circuits to its cluster endpoints.
    pub cluster_cidr: Cidr,
    /// ClusterIPs: traffic to an unallocated one is dropped.
    pub service_cidr: Cidr,
}

/// The table's sets and maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Map {
    ClusterIps,
    ServiceIps,
    ServiceNodePorts,
    NoEndpointServices,
    NoEndpointNodePorts,
    FirewallIps,
    /// The endpoints of one kind of traffic, for one protocol.
    Endpoints(Endpoints, Protocol),
    Hairpin,
}

/// The endpoint maps: which endpoints, found by what.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoints {
    /// Cluster endpoints by destination address and port.
    Cluster,
    /// This node's endpoints by destination address and port.
    Local,
    /// Cluster endpoints by NodePort.
    NodePort,
    /// This node's endpoints by NodePort.
    NodePortLocal,
}

impl Endpoints {
    const ALL: [Endpoints; 4] = [
        Endpoints::Cluster,
        Endpoints::Local,
        Endpoints::NodePort,
        Endpoints::NodePortLocal,
    ];

    fn name(self) -> &'static str {
        match self {
            Endpoints::Cluster => "cluster-endpoints",
            Endpoints::Local => "local-endpoints",
            Endpoints::NodePort => "nodeport-endpoints",
            Endpoints::NodePortLocal => "nodeport-local-endpoints",
        }
    }

    fn by_address(self) -> bool {
        matches!(self, Endpoints::Cluster | Endpoints::Local)
    }
}

const PROTOCOLS: [Protocol; 3] = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp];

impl Map {
    /// Every set and map of the table.
    pub fn all() -> Vec<Map> {
        let mut all = vec![
            Map::ClusterIps,
            Map::ServiceIps,
            Map::ServiceNodePorts,
            Map::NoEndpointServices,
            Map::NoEndpointNodePorts,
            Map::FirewallIps,
        ];
        for endpoints in Endpoints::ALL {
            for protocol in PROTOCOLS {
                all.push(Map::Endpoints(endpoints, protocol));
            }
        }
        all.push(Map::Hairpin);
        all
    }

    pub fn name(self) -> String {
        match self {
            Map::ClusterIps => "cluster-ips".into(),
            Map::ServiceIps => "service-ips".into(),
            Map::ServiceNodePorts => "service-nodeports".into(),
            Map::NoEndpointServices => "no-endpoint-services".into(),
            Map::NoEndpointNodePorts => "no-endpoint-nodeports".into(),
            Map::FirewallIps => "firewall-ips".into(),
            Map::Endpoints(endpoints, protocol) => {
                format!("{}-{}", endpoints.name(), protocol.as_str())
            }
            Map::Hairpin => "hairpin-connections".into(),
        }
    }

    /// A set holds keys only; a map, keys and values.
    pub fn is_set(self) -> bool {
        matches!(self, Map::ClusterIps | Map::Hairpin)
    }

    /// Its declaration (after `add set|map ip rudder-proxy <name>`).
    ///
    /// The endpoint maps are one per protocol and declared by the
    /// protocol's own header field (`tcp dport`, not `th dport`): nft
    /// 1.0.6 cannot read back a map whose value is typed `th dport` (a
    /// later transaction adding a rule that uses it fails with
    /// "conflicting protocols specified: ip vs. th"), and a value typed
    /// by one protocol makes the DNAT rule match that protocol only.
    fn declaration(self) -> String {
        const VIP_VERDICT: &str = "{ type ipv4_addr . inet_proto . inet_service : verdict ; }";
        const PORT_VERDICT: &str = "{ type inet_proto . inet_service : verdict ; }";
        match self {
            Map::ClusterIps => "{ type ipv4_addr ; comment \"allocated ClusterIPs\" ; }".into(),
            Map::ServiceIps | Map::NoEndpointServices | Map::FirewallIps => VIP_VERDICT.into(),
            Map::ServiceNodePorts | Map::NoEndpointNodePorts => PORT_VERDICT.into(),
            Map::Endpoints(endpoints, protocol) => {
                let p = protocol.as_str();
                let address = if endpoints.by_address() {
                    "ip daddr . "
                } else {
                    ""
                };
                format!(
                    "{{ typeof {address}{p} dport . numgen random mod 1 : ip daddr . {p} dport ; }}"
                )
            }
            Map::Hairpin => "{ type ipv4_addr . ipv4_addr . inet_proto . inet_service ; }".into(),
        }
    }
}

/// A shared chain that DNATs to the `n` endpoints an endpoint map holds
/// for the packet's address (or NodePort), choosing one at random.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dispatch {
    pub endpoints: Endpoints,
    pub protocol: Protocol,
    pub n: u32,
    /// Marked for masquerading first (external traffic under the Cluster
    /// policy).
    pub masquerade: bool,
}

impl Dispatch {
    pub fn chain(self) -> String {
        let kind = match self.endpoints {
            Endpoints::Cluster => "cluster",
            Endpoints::Local => "local",
            Endpoints::NodePort => "nodeport",
            Endpoints::NodePortLocal => "nodeport-local",
        };
        let masquerade = if self.masquerade { "-masquerade" } else { "" };
        format!("{kind}{masquerade}-{}-{}", self.protocol.as_str(), self.n)
    }

    pub fn rule(self) -> String {
        let p = self.protocol.as_str();
        format!(
            "{mark}dnat ip to {address}{p} dport . numgen random mod {n} map @{map}",
            mark = if self.masquerade {
                format!("meta mark set meta mark or {MASQUERADE_MARK:#x} ")
            } else {
                String::new()
            },
            address = if self.endpoints.by_address() {
                "ip daddr . "
            } else {
                ""
            },
            n = self.n,
            map = Map::Endpoints(self.endpoints, self.protocol).name(),
        )
    }
}

/// The table's fixed part: its sets and maps, the base chains and the
/// chains they jump to. Applied once per table (a new table, or a full
/// rebuild after a failure), in the same transaction as what fills it.
pub fn base(config: &Config) -> String {
    let t = TABLE;
    let mut out = format!("add table ip {t} {{ comment \"rudder service proxy\" ; }}\n");
    for map in Map::all() {
        let kind = if map.is_set() { "set" } else { "map" };
        out.push_str(&format!(
            "add {kind} ip {t} {} {}\n",
            map.name(),
            map.declaration()
        ));
    }
    let base_chains = [
        ("filter-prerouting-pre-dnat", "filter", "prerouting", -110),
        ("filter-output-pre-dnat", "filter", "output", -110),
        ("nat-prerouting", "nat", "prerouting", -100),
        ("nat-output", "nat", "output", -100),
        ("filter-prerouting", "filter", "prerouting", -90),
        ("filter-input", "filter", "input", 0),
        ("filter-output", "filter", "output", 0),
        ("nat-postrouting", "nat", "postrouting", 100),
    ];
    for (name, kind, hook, priority) in base_chains {
        out.push_str(&format!(
            "add chain ip {t} {name} {{ type {kind} hook {hook} priority {priority} ; }}\n"
        ));
    }
    let cluster = config.cluster_cidr;
    let services = config.service_cidr;
    let rules: [(&str, &[String]); 13] = [
        ("filter-prerouting-pre-dnat", &["ct state new jump firewall-check".into()]),
        ("filter-output-pre-dnat", &["ct state new jump firewall-check".into()]),
        ("nat-prerouting", &["jump services".into()]),
        ("nat-output", &["jump services".into()]),
        (
            "filter-input",
            &[
                "ct state new jump nodeport-endpoints-check".into(),
                "ct state new jump service-endpoints-check".into(),
            ],
        ),
        // Upstream checks forwarded traffic at the forward hook; here the
        // service CIDR's blackhole route would drop it before that (a
        // time-out, not a refusal), so it is checked right after DNAT.
        (
            "filter-prerouting",
            &[
                "ct state new jump service-endpoints-check".into(),
                "ct state new jump cluster-ips-check".into(),
            ],
        ),
        (
            "filter-output",
            &[
                "ct state new jump service-endpoints-check".into(),
                "ct state new jump cluster-ips-check".into(),
            ],
        ),
        ("nat-postrouting", &["jump masquerading".into()]),
        (
            "services",
            &[
                format!(
                    "ip daddr @cluster-ips ip saddr != {cluster} meta mark set meta mark or {MASQUERADE_MARK:#x} comment \"masquerade ClusterIP traffic from outside the cluster\""
                ),
                "ip daddr . meta l4proto . th dport vmap @service-ips".into(),
                "fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports".into(),
            ],
        ),
        (
            "masquerading",
            &[
                format!(
                    "meta mark and {MASQUERADE_MARK:#x} == {MASQUERADE_MARK:#x} meta mark set meta mark xor {MASQUERADE_MARK:#x} masquerade fully-random"
                ),
                "ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random".into(),
            ],
        ),
        (
            "firewall-check",
            &["ip daddr . meta l4proto . th dport vmap @firewall-ips".into()],
        ),
        (
            "service-endpoints-check",
            &["ip daddr . meta l4proto . th dport vmap @no-endpoint-services".into()],
        ),
        (
            "cluster-ips-check",
            &[
                "ip daddr @cluster-ips meta l4proto tcp reject with tcp reset comment \"undefined port of a ClusterIP\"".into(),
                "ip daddr @cluster-ips reject comment \"undefined port of a ClusterIP\"".into(),
                format!("ip daddr {services} drop comment \"unallocated ClusterIP\""),
            ],
        ),
    ];
    let helpers = [
        "services",
        "masquerading",
        "firewall-check",
        "service-endpoints-check",
        "nodeport-endpoints-check",
        "cluster-ips-check",
        "reject-chain",
    ];
    for name in helpers {
        out.push_str(&format!("add chain ip {t} {name}\n"));
    }
    for (chain, lines) in rules {
        for line in lines {
            out.push_str(&format!("add rule ip {t} {chain} {line}\n"));
        }
    }
    out.push_str(&format!(
        "add rule ip {t} nodeport-endpoints-check ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports\n"
    ));
    // A reset for TCP: an ICMP error does not reach a client on the node
    // itself, whose connection to a Service address leaves from
    // 127.0.0.1 (the service route goes through loopback).
    out.push_str(&format!(
        "add rule ip {t} reject-chain meta l4proto tcp reject with tcp reset\n"
    ));
    out.push_str(&format!("add rule ip {t} reject-chain reject\n"));
    out
}
