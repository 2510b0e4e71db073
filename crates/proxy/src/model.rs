//! Services and EndpointSlices as the proxy sees them: only what decides
//! a rule, parsed once, with everything the proxy cannot program (no IPv4
//! ClusterIP, headless, ExternalName, an address that does not parse) left
//! out here rather than checked at every sync. A Service that made it
//! past validation can still carry odd values (an old object, a CRD-era
//! bug); nothing here panics on them — they are skipped.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rudder_api::network::Cidr;

pub use rudder_host::tables::Protocol;

/// A Service, by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceName {
    pub namespace: String,
    pub name: String,
}

impl ServiceName {
    pub fn new(namespace: &str, name: &str) -> ServiceName {
        ServiceName {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for ServiceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One port of a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// The port's name: "" when the Service has a single unnamed port.
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    pub node_port: Option<u16>,
}

/// A Service the proxy programs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub name: ServiceName,
    pub cluster_ip: Ipv4Addr,
    pub ports: Vec<ServicePort>,
    pub external_ips: Vec<Ipv4Addr>,
    /// `status.loadBalancer.ingress[].ip`, except those with `ipMode:
    /// Proxy` (a load balancer that proxies does not send the VIP here).
    pub load_balancer_ips: Vec<Ipv4Addr>,
    /// `spec.loadBalancerSourceRanges`.
    pub source_ranges: Vec<Cidr>,
    /// `sessionAffinity: ClientIP`'s timeout in seconds.
    pub affinity_timeout: Option<u32>,
    /// `internalTrafficPolicy: Local`.
    pub internal_local: bool,
    /// `externalTrafficPolicy: Local` (meaningful only when the Service is
    /// reachable from outside).
    pub external_local: bool,
    pub health_check_node_port: Option<u16>,
}

/// Upstream's default ClientIP affinity timeout: three hours.
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10800;

impl Service {
    /// The Service as the proxy sees it; `None` for one it has nothing to
    /// program: ExternalName, headless, or without an IPv4 ClusterIP.
    pub fn from_api(service: &core::Service) -> Option<Service> {
        let meta = &service.metadata;
        let spec = service.spec.as_ref()?;
        if spec.type_.as_deref() == Some("ExternalName") {
            return None;
        }
        let cluster_ip: Ipv4Addr = spec.cluster_ip.as_deref()?.parse().ok()?;
        let ports = spec
            .ports
            .iter()
            .flatten()
            .filter_map(|p| {
                Some(ServicePort {
                    name: p.name.clone().unwrap_or_default(),
                    protocol: Protocol::parse(p.protocol.as_deref())?,
                    port: u16::try_from(p.port).ok().filter(|p| *p != 0)?,
                    node_port: p
                        .node_port
                        .and_then(|n| u16::try_from(n).ok())
                        .filter(|n| *n != 0),
                })
            })
            .collect();
        let addresses = |list: Option<&Vec<String>>| -> Vec<Ipv4Addr> {
            list.into_iter()
                .flatten()
                .filter_map(|ip| ip.trim().parse().ok())
                .collect()
        };
        let load_balancer_ips = service
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .into_iter()
            .flatten()
            .filter(|i| i.ip_mode.as_deref() != Some("Proxy"))
            .filter_map(|i| i.ip.as_deref()?.parse().ok())
            .collect();
        let affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
            spec.session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds)
                .and_then(|t| u32::try_from(t).ok())
                .filter(|t| *t > 0)
                .unwrap_or(DEFAULT_AFFINITY_TIMEOUT)
        });
        Some(Service {
            name: ServiceName::new(
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default(),
            ),
            cluster_ip,
            ports,
            external_ips: addresses(spec.external_ips.as_ref()),
            load_balancer_ips,
            source_ranges: spec
                .load_balancer_source_ranges
                .iter()
                .flatten()
                .filter_map(|r| r.trim().parse().ok())
                .collect(),
            affinity_timeout,
            internal_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
            external_local: spec.external_traffic_policy.as_deref() == Some("Local"),
            health_check_node_port: spec
                .health_check_node_port
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p != 0),
        })
    }

    /// Whether traffic from outside reaches it: a NodePort, an external IP
    /// or a load balancer's address.
    pub fn externally_accessible(&self, port: &ServicePort) -> bool {
        port.node_port.is_some()
            || !self.external_ips.is_empty()
            || !self.load_balancer_ips.is_empty()
    }
}

/// An endpoint of a Service port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: Ipv4Addr,
    pub port: u16,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub node_name: Option<String>,
    /// `hints.forZones`, when present.
    pub zone_hints: Option<Vec<String>>,
    /// `hints.forNodes`, when present.
    pub node_hints: Option<Vec<String>>,
}

impl Endpoint {
    /// `ip:port`, the key upstream sorts and deduplicates endpoints by.
    pub fn key(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }
}

/// The name of the Service an EndpointSlice belongs to (its
/// `kubernetes.io/service-name` label).
pub fn slice_service(slice: &EndpointSlice) -> Option<ServiceName> {
    let name = slice
        .metadata
        .labels
        .as_ref()?
        .get("kubernetes.io/service-name")?;
    Some(ServiceName::new(slice.metadata.namespace.as_deref()?, name))
}

/// The endpoints of `port` over a Service's slices: IPv4 slices only,
/// the first address of each endpoint, deduplicated by `ip:port` (a
/// non-terminating entry wins) and sorted by that string, as upstream's
/// EndpointSliceCache does — so that every node orders them alike.
pub fn endpoints<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    port: &ServicePort,
) -> Vec<Endpoint> {
    let mut found: BTreeMap<String, Endpoint> = BTreeMap::new();
    for slice in slices {
        if slice.address_type != "IPv4" {
            continue;
        }
        let Some(number) = slice
            .ports
            .iter()
            .flatten()
            .find(|p| {
                p.name.as_deref().unwrap_or_default() == port.name
                    && Protocol::parse(p.protocol.as_deref()) == Some(port.protocol)
            })
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
        else {
            continue;
        };
        for endpoint in &slice.endpoints {
            let Some(ip) = endpoint.addresses.first().and_then(|a| a.parse().ok()) else {
                continue;
            };
            let conditions = endpoint.conditions.as_ref();
            let hints = endpoint.hints.as_ref();
            let candidate = Endpoint {
                ip,
                port: number,
                ready: conditions.and_then(|c| c.ready).unwrap_or(true),
                serving: conditions.and_then(|c| c.serving).unwrap_or(true),
                terminating: conditions.and_then(|c| c.terminating).unwrap_or(false),
                node_name: endpoint.node_name.clone(),
                zone_hints: hints
                    .and_then(|h| h.for_zones.as_ref())
                    .map(|z| z.iter().map(|z| z.name.clone()).collect()),
                node_hints: hints
                    .and_then(|h| h.for_nodes.as_ref())
                    .map(|n| n.iter().map(|n| n.name.clone()).collect()),
            };
            match found.get(&candidate.key()) {
                Some(kept) if !kept.terminating || candidate.terminating => {}
                _ => {
                    found.insert(candidate.key(), candidate);
                }
            }
        }
    }
    found.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(value: serde_json::Value) -> core::Service {
        serde_json::from_value(value).expect("a Service")
    }

    #[test]
    fn a_service_is_read_with_its_defaults() {
        let parsed = Service::from_api(&service(json!({
            "metadata": {"namespace": "ns", "name": "web"},
            "spec": {
                "type": "LoadBalancer", "clusterIP": "10.43.0.20",
                "ports": [{"name": "http", "port": 80, "nodePort": 30080},
                          {"name": "dns", "port": 53, "protocol": "UDP"},
                          {"name": "odd", "port": 70000}],
                "externalIPs": ["192.0.2.7", "not-an-ip"],
                "sessionAffinity": "ClientIP",
                "externalTrafficPolicy": "Local", "healthCheckNodePort": 31000,
                "loadBalancerSourceRanges": [" 203.0.113.0/25"]
            },
            "status": {"loadBalancer": {"ingress": [
                {"ip": "192.168.1.5"}, {"ip": "192.168.1.6", "ipMode": "Proxy"}, {"hostname": "lb"}
            ]}}
        })))
        .expect("programmed");
        assert_eq!(parsed.name.to_string(), "ns/web");
        assert_eq!(parsed.cluster_ip, Ipv4Addr::new(10, 43, 0, 20));
        assert_eq!(parsed.ports.len(), 2, "a port out of range is left out");
        assert_eq!(parsed.ports[1].protocol, Protocol::Udp);
        assert_eq!(parsed.ports[0].node_port, Some(30080));
        assert_eq!(parsed.external_ips, [Ipv4Addr::new(192, 0, 2, 7)]);
        assert_eq!(parsed.load_balancer_ips, [Ipv4Addr::new(192, 168, 1, 5)]);
        assert_eq!(parsed.source_ranges.len(), 1);
        assert_eq!(parsed.affinity_timeout, Some(DEFAULT_AFFINITY_TIMEOUT));
        assert!(parsed.external_local && !parsed.internal_local);
        assert_eq!(parsed.health_check_node_port, Some(31000));
    }

    #[test]
    fn headless_external_name_and_unallocated_services_are_not_programmed() {
        for spec in [
            json!({"clusterIP": "None", "ports": [{"port": 80}]}),
            json!({"type": "ExternalName", "externalName": "example.org"}),
            json!({"ports": [{"port": 80}]}),
            json!({"clusterIP": "fd00::1", "ports": [{"port": 80}]}),
        ] {
            let s = service(json!({"metadata": {"namespace": "n", "name": "s"}, "spec": spec}));
            assert_eq!(Service::from_api(&s), None, "{spec}");
        }
    }

    fn slice(value: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(value).expect("an EndpointSlice")
    }

    #[test]
    fn endpoints_merge_slices_by_port_name_and_sort_as_upstream() {
        let port = ServicePort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 80,
            node_port: None,
        };
        let a = slice(json!({
            "metadata": {"namespace": "ns", "name": "web-a",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "other", "port": 9}],
            "endpoints": [
                {"addresses": ["10.1.1.1"], "conditions": {"ready": true}, "nodeName": "n1"},
                {"addresses": ["10.1.1.11"], "conditions": {"ready": false, "serving": true, "terminating": true}},
                {"addresses": []},
            ]
        }));
        let b = slice(json!({
            "metadata": {"namespace": "ns", "name": "web-b"},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": [
                {"addresses": ["10.1.1.11"], "conditions": {"ready": true}},
                {"addresses": ["10.1.1.2"], "hints": {"forZones": [{"name": "z1"}]}},
            ]
        }));
        let v6 = slice(json!({
            "metadata": {"namespace": "ns", "name": "web-c"},
            "addressType": "IPv6",
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": [{"addresses": ["fd00::5"]}]
        }));
        assert_eq!(slice_service(&a), Some(ServiceName::new("ns", "web")));
        assert_eq!(slice_service(&b), None);
        let found = endpoints([&a, &b, &v6], &port);
        let keys: Vec<String> = found.iter().map(Endpoint::key).collect();
        // Sorted as strings, as upstream's: ':' sorts after the digits, so
        // 10.1.1.11 comes before 10.1.1.1.
        assert_eq!(keys, ["10.1.1.11:8080", "10.1.1.1:8080", "10.1.1.2:8080"]);
        assert!(
            found[0].ready && !found[0].terminating,
            "the non-terminating entry wins"
        );
        assert_eq!(found[1].node_name.as_deref(), Some("n1"));
        assert_eq!(found[2].zone_hints, Some(vec!["z1".to_string()]));
        assert!(found[2].ready, "no conditions: ready");
    }
}
