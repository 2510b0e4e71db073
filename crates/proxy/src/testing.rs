//! What the proxy's unit tests share: a configuration, a node, Services
//! and endpoints in a line each.

use crate::model::{Endpoint, Protocol, Service, ServiceName, ServicePort};
use crate::rules::Config;
use crate::topology::Locality;

pub fn config() -> Config {
    Config {
        cluster_cidr: "10.42.0.0/16".parse().expect("cidr"),
        service_cidr: "10.43.0.0/16".parse().expect("cidr"),
    }
}

/// The node `n1`, in no zone.
pub fn here() -> Locality {
    Locality {
        node_name: "n1".into(),
        zone: None,
    }
}

pub fn port(name: &str, protocol: Protocol, port: u16, node_port: Option<u16>) -> ServicePort {
    ServicePort {
        name: name.into(),
        protocol,
        port,
        node_port,
    }
}

/// A ClusterIP Service `ns/name` with the Cluster policies and no
/// affinity.
pub fn service(name: &str, ip: [u8; 4], ports: Vec<ServicePort>) -> Service {
    Service {
        name: ServiceName::new("ns", name),
        cluster_ip: ip.into(),
        ports,
        external_ips: vec![],
        load_balancer_ips: vec![],
        source_ranges: vec![],
        affinity_timeout: None,
        internal_local: false,
        external_local: false,
        health_check_node_port: None,
    }
}

/// A ready endpoint on `node`.
pub fn endpoint(ip: [u8; 4], port: u16, node: &str) -> Endpoint {
    Endpoint {
        ip: ip.into(),
        port,
        ready: true,
        serving: true,
        terminating: false,
        node_name: Some(node.into()),
        zone_hints: None,
        node_hints: None,
    }
}
