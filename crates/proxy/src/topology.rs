//! Which endpoints serve which traffic: upstream's `CategorizeEndpoints`
//! (`pkg/proxy/topology.go`). Cluster traffic goes to ready endpoints —
//! only those hinted for this node or zone when every ready endpoint
//! carries such a hint and one matches — and, when none is ready, to those
//! still serving while they terminate. Local traffic (a `Local` traffic
//! policy) goes to this node's endpoints by the same ready-then-serving
//! rule and never falls back to another node's.

use crate::model::{Endpoint, Service, ServicePort};

/// Where the proxy is: the node's name and its zone label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Locality {
    pub node_name: String,
    /// `topology.kubernetes.io/zone`.
    pub zone: Option<String>,
}

/// The endpoints of one Service port, sorted out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Categorized {
    /// For traffic under the Cluster policy.
    pub cluster: Vec<Endpoint>,
    /// For traffic under the Local policy.
    pub local: Vec<Endpoint>,
    /// Whether any endpoint anywhere can take traffic (no endpoints at
    /// all rejects; endpoints elsewhere but none here drops).
    pub any: bool,
}

/// Whether traffic of `service` uses cluster-wide endpoints: unless its
/// internal policy is Local and nothing reaches it from outside.
pub fn uses_cluster(service: &Service, port: &ServicePort) -> bool {
    !service.internal_local || service.externally_accessible(port)
}

/// Whether it uses this node's endpoints: an internal policy of Local, or
/// an external one for a Service reached from outside.
pub fn uses_local(service: &Service, port: &ServicePort) -> bool {
    service.internal_local || (service.external_local && service.externally_accessible(port))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    None,
    SameNode,
    SameZone,
}

fn mode(endpoints: &[Endpoint], here: &Locality) -> Mode {
    let ready: Vec<&Endpoint> = endpoints.iter().filter(|e| e.ready).collect();
    if ready.is_empty() {
        return Mode::None;
    }
    let hinted_here = |hints: &Option<Vec<String>>, name: &str| {
        hints.as_ref().is_some_and(|h| h.iter().any(|n| n == name))
    };
    if ready
        .iter()
        .all(|e| e.node_hints.as_ref().is_some_and(|h| !h.is_empty()))
        && ready
            .iter()
            .any(|e| hinted_here(&e.node_hints, &here.node_name))
    {
        return Mode::SameNode;
    }
    if let Some(zone) = &here.zone
        && ready
            .iter()
            .all(|e| e.zone_hints.as_ref().is_some_and(|h| !h.is_empty()))
        && ready.iter().any(|e| hinted_here(&e.zone_hints, zone))
    {
        return Mode::SameZone;
    }
    Mode::None
}

/// Sorts `endpoints` (as [`crate::model::endpoints`] lists them) for a port of
/// `service` on the node `here`.
pub fn categorize(
    service: &Service,
    port: &ServicePort,
    endpoints: &[Endpoint],
    here: &Locality,
) -> Categorized {
    let mut sorted = Categorized::default();
    if uses_cluster(service, port) {
        let mode = mode(endpoints, here);
        let available = |e: &Endpoint| match mode {
            Mode::None => true,
            Mode::SameNode => e
                .node_hints
                .as_ref()
                .is_some_and(|h| h.contains(&here.node_name)),
            Mode::SameZone => match (&e.zone_hints, &here.zone) {
                (Some(hints), Some(zone)) => hints.contains(zone),
                _ => false,
            },
        };
        sorted.cluster = endpoints
            .iter()
            .filter(|e| e.ready && available(e))
            .cloned()
            .collect();
        if sorted.cluster.is_empty() {
            sorted.cluster = endpoints
                .iter()
                .filter(|e| e.serving && e.terminating)
                .cloned()
                .collect();
        }
        sorted.any = !sorted.cluster.is_empty();
    }
    if uses_local(service, port) {
        let here_ = |e: &&Endpoint| e.node_name.as_deref() == Some(here.node_name.as_str());
        sorted.local = endpoints
            .iter()
            .filter(here_)
            .filter(|e| e.ready)
            .cloned()
            .collect();
        if sorted.local.is_empty() {
            sorted.local = endpoints
                .iter()
                .filter(here_)
                .filter(|e| e.serving && e.terminating)
                .cloned()
                .collect();
        }
        sorted.any = sorted.any
            || endpoints
                .iter()
                .any(|e| e.ready || (e.serving && e.terminating));
    }
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Protocol, ServiceName};

    fn service(
        internal_local: bool,
        external_local: bool,
        node_port: Option<u16>,
    ) -> (Service, ServicePort) {
        let port = ServicePort {
            name: String::new(),
            protocol: Protocol::Tcp,
            port: 80,
            node_port,
        };
        let service = Service {
            name: ServiceName::new("ns", "s"),
            cluster_ip: [10, 43, 0, 5].into(),
            ports: vec![port.clone()],
            external_ips: vec![],
            load_balancer_ips: vec![],
            source_ranges: vec![],
            affinity_timeout: None,
            internal_local,
            external_local,
            health_check_node_port: None,
        };
        (service, port)
    }

    fn endpoint(last: u8, node: &str, ready: bool, terminating: bool) -> Endpoint {
        Endpoint {
            ip: [10, 42, 0, last].into(),
            port: 80,
            ready,
            serving: ready || terminating,
            terminating,
            node_name: Some(node.into()),
            zone_hints: None,
            node_hints: None,
        }
    }

    fn here() -> Locality {
        Locality {
            node_name: "n1".into(),
            zone: Some("z1".into()),
        }
    }

    fn ips(endpoints: &[Endpoint]) -> Vec<u8> {
        endpoints.iter().map(|e| e.ip.octets()[3]).collect()
    }

    #[test]
    fn ready_endpoints_serve_and_terminating_ones_only_when_none_is_ready() {
        let (s, p) = service(false, false, None);
        let both = [
            endpoint(1, "n1", true, false),
            endpoint(2, "n2", false, true),
        ];
        let sorted = categorize(&s, &p, &both, &here());
        assert_eq!(ips(&sorted.cluster), [1]);
        assert!(sorted.local.is_empty() && sorted.any);
        let terminating = [
            endpoint(2, "n2", false, true),
            endpoint(3, "n2", false, false),
        ];
        let sorted = categorize(&s, &p, &terminating, &here());
        assert_eq!(
            ips(&sorted.cluster),
            [2],
            "serving-terminating as the fallback; not serving never"
        );
        let sorted = categorize(&s, &p, &[endpoint(3, "n2", false, false)], &here());
        assert!(sorted.cluster.is_empty() && !sorted.any);
    }

    #[test]
    fn local_policies_use_this_nodes_endpoints_and_never_fall_back_to_others() {
        let (s, p) = service(true, false, None);
        let eps = [
            endpoint(1, "n2", true, false),
            endpoint(2, "n1", false, true),
        ];
        let sorted = categorize(&s, &p, &eps, &here());
        assert!(
            sorted.cluster.is_empty(),
            "internal Local, not reachable from outside: no cluster endpoints"
        );
        assert_eq!(ips(&sorted.local), [2]);
        let sorted = categorize(&s, &p, &eps[..1], &here());
        assert!(
            sorted.local.is_empty() && sorted.any,
            "endpoints elsewhere: drop, not reject"
        );
        let (s, p) = service(false, true, Some(30080));
        let sorted = categorize(&s, &p, &eps, &here());
        assert_eq!(ips(&sorted.cluster), [1]);
        assert_eq!(ips(&sorted.local), [2]);
        let (s, p) = service(false, true, None);
        assert!(
            categorize(&s, &p, &eps, &here()).local.is_empty(),
            "not reachable from outside: external policy unused"
        );
    }

    #[test]
    fn hints_are_followed_only_when_every_ready_endpoint_has_one_and_one_matches() {
        let (s, p) = service(false, false, None);
        let mut a = endpoint(1, "n1", true, false);
        let mut b = endpoint(2, "n2", true, false);
        a.zone_hints = Some(vec!["z1".into()]);
        b.zone_hints = Some(vec!["z2".into()]);
        assert_eq!(
            ips(&categorize(&s, &p, &[a.clone(), b.clone()], &here()).cluster),
            [1]
        );
        b.zone_hints = None;
        assert_eq!(
            ips(&categorize(&s, &p, &[a.clone(), b.clone()], &here()).cluster),
            [1, 2]
        );
        b.zone_hints = Some(vec!["z2".into()]);
        a.zone_hints = Some(vec!["z3".into()]);
        assert_eq!(
            ips(&categorize(&s, &p, &[a.clone(), b.clone()], &here()).cluster),
            [1, 2],
            "none for this zone"
        );
        a.node_hints = Some(vec!["n1".into()]);
        b.node_hints = Some(vec!["n2".into()]);
        assert_eq!(
            ips(&categorize(&s, &p, &[a, b], &here()).cluster),
            [1],
            "node hints first"
        );
    }
}
