//! What a Service's endpoints are, as pure functions: which pods count
//! (upstream's `ShouldPodBeInEndpoints`), how a named target port
//! resolves (`podutil.FindPort`), the Endpoints subsets (`RepackSubsets`)
//! and the EndpointSlices (at most 100 endpoints each, one per port set
//! and address type).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
    ServicePort,
};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointPort as SlicePort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rudder_runtime::meta::pod;

/// The label naming a slice's Service.
pub const SERVICE_NAME: &str = "kubernetes.io/service-name";
/// The label naming who manages a slice.
pub const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
pub const SLICE_MANAGER: &str = "endpointslice-controller.k8s.io";
pub const MIRROR_MANAGER: &str = "endpointslicemirroring-controller.k8s.io";
/// The label marking a headless Service's endpoints.
pub const HEADLESS: &str = "service.kubernetes.io/headless";
/// Endpoints per slice (upstream's `--max-endpoints-per-slice` default).
pub const PER_SLICE: usize = 100;

/// One pod as an endpoint of a Service.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub ip: String,
    pub pod: Arc<Pod>,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// The Service's ports this pod serves, resolved.
    pub ports: Vec<EndpointPort>,
}

fn publish_not_ready(service: &Service) -> bool {
    service
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false)
}

fn headless(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

/// The number `port` of the Service targets on `pod`: a number as it is,
/// a name by the container port of that name and protocol.
pub fn find_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            let protocol = port.protocol.as_deref().unwrap_or("TCP");
            pod.spec
                .as_ref()?
                .containers
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| {
                    p.name.as_deref() == Some(name.as_str())
                        && p.protocol.as_deref().unwrap_or("TCP") == protocol
                })
                .map(|p| p.container_port)
        }
    }
}

/// The endpoints the Service's selected `pods` make.
pub fn endpoints_of(service: &Service, pods: &[Arc<Pod>]) -> Vec<Found> {
    let tolerate = publish_not_ready(service);
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    let mut found = Vec::new();
    for p in pods {
        let Some(ip) = p
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| !ip.is_empty())
        else {
            continue;
        };
        if matches!(pod::phase(p), "Succeeded" | "Failed") {
            continue;
        }
        let terminating = p.metadata.deletion_timestamp.is_some();
        let ready = pod::is_ready(p);
        let resolved: Vec<EndpointPort> = ports
            .iter()
            .filter_map(|sp| {
                Some(EndpointPort {
                    name: sp.name.clone().filter(|n| !n.is_empty()),
                    port: find_port(p, sp)?,
                    protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                    app_protocol: sp.app_protocol.clone(),
                })
            })
            .collect();
        if !ports.is_empty() && resolved.is_empty() {
            continue;
        }
        found.push(Found {
            ip,
            pod: p.clone(),
            ready: (ready || tolerate) && !terminating,
            serving: ready || tolerate,
            terminating,
            ports: resolved,
        });
    }
    found.sort_by(|a, b| {
        a.ip.cmp(&b.ip)
            .then_with(|| a.pod.metadata.name.cmp(&b.pod.metadata.name))
    });
    found
}

fn target_ref(p: &Pod) -> ObjectReference {
    ObjectReference {
        kind: Some("Pod".into()),
        namespace: p.metadata.namespace.clone(),
        name: p.metadata.name.clone(),
        uid: p.metadata.uid.clone(),
        ..Default::default()
    }
}

/// The pod's hostname in the Service's DNS, if it asked for one there
/// (`hostname` set and `subdomain` naming the Service).
fn hostname(service: &Service, p: &Pod) -> Option<String> {
    let spec = p.spec.as_ref()?;
    (spec.subdomain.as_deref() == service.metadata.name.as_deref())
        .then(|| spec.hostname.clone())
        .flatten()
        .filter(|h| !h.is_empty())
}

/// The labels an Endpoints or slice of the Service carries: the Service's,
/// and the headless mark.
fn labels_for(service: &Service) -> BTreeMap<String, String> {
    let mut labels = service.metadata.labels.clone().unwrap_or_default();
    labels.remove(SERVICE_NAME);
    labels.remove(MANAGED_BY);
    if headless(service) {
        labels.insert(HEADLESS.into(), String::new());
    } else {
        labels.remove(HEADLESS);
    }
    labels
}

/// Whether two label maps say the same (none and empty alike).
pub fn labels_match(
    a: Option<&BTreeMap<String, String>>,
    b: Option<&BTreeMap<String, String>>,
) -> bool {
    a.cloned().unwrap_or_default() == b.cloned().unwrap_or_default()
}

/// The Endpoints object: pods grouped by the ports they serve, ready ones
/// in `addresses`, the others in `notReadyAddresses`; terminating pods
/// are left out.
pub fn endpoints_object(service: &Service, found: &[Found]) -> Endpoints {
    let mut groups: BTreeMap<String, EndpointSubset> = BTreeMap::new();
    for f in found.iter().filter(|f| !f.terminating) {
        let mut ports = f.ports.clone();
        ports.sort_by(|a, b| a.name.cmp(&b.name).then(a.port.cmp(&b.port)));
        let group = serde_json::to_string(&ports).unwrap_or_default();
        let subset = groups.entry(group).or_insert_with(|| EndpointSubset {
            ports: (!ports.is_empty()).then_some(ports),
            ..Default::default()
        });
        let address = EndpointAddress {
            ip: f.ip.clone(),
            hostname: hostname(service, &f.pod),
            node_name: pod::node(&f.pod).map(String::from),
            target_ref: Some(target_ref(&f.pod)),
        };
        if f.ready {
            subset.addresses.get_or_insert_default().push(address);
        } else {
            subset
                .not_ready_addresses
                .get_or_insert_default()
                .push(address);
        }
    }
    let subsets: Vec<EndpointSubset> = groups.into_values().collect();
    let mut endpoints = Endpoints::default();
    endpoints.metadata.name = service.metadata.name.clone();
    endpoints.metadata.namespace = service.metadata.namespace.clone();
    endpoints.metadata.labels = Some(labels_for(service)).filter(|l| !l.is_empty());
    endpoints.subsets = (!subsets.is_empty()).then_some(subsets);
    endpoints
}

fn address_type(ip: &str) -> &'static str {
    if ip.contains(':') { "IPv6" } else { "IPv4" }
}

fn slice_for(
    service_name: &str,
    namespace: Option<String>,
    address_type: &str,
    labels: BTreeMap<String, String>,
    manager: &str,
) -> EndpointSlice {
    let mut labels = labels;
    labels.insert(SERVICE_NAME.into(), service_name.into());
    labels.insert(MANAGED_BY.into(), manager.into());
    let mut slice = EndpointSlice {
        address_type: address_type.into(),
        ..Default::default()
    };
    slice.metadata.generate_name = Some(format!("{service_name}-"));
    slice.metadata.namespace = namespace;
    slice.metadata.labels = Some(labels);
    slice
}

fn slice_ports(ports: &[EndpointPort]) -> Vec<SlicePort> {
    ports
        .iter()
        .map(|p| SlicePort {
            name: Some(p.name.clone().unwrap_or_default()),
            port: Some(p.port),
            protocol: p.protocol.clone(),
            app_protocol: p.app_protocol.clone(),
        })
        .collect()
}

/// Packs endpoints grouped by (address type, ports) into slices of at
/// most [`PER_SLICE`].
fn pack(
    service_name: &str,
    namespace: Option<String>,
    labels: BTreeMap<String, String>,
    manager: &str,
    groups: BTreeMap<(String, String), (Vec<EndpointPort>, Vec<Endpoint>)>,
) -> Vec<EndpointSlice> {
    let mut slices = Vec::new();
    for ((address_type, _), (ports, endpoints)) in groups {
        for chunk in endpoints.chunks(PER_SLICE) {
            let mut slice = slice_for(
                service_name,
                namespace.clone(),
                &address_type,
                labels.clone(),
                manager,
            );
            slice.endpoints = chunk.to_vec();
            slice.ports = Some(slice_ports(&ports));
            slices.push(slice);
        }
    }
    slices
}

/// A node's zone: its `topology.kubernetes.io/zone` label.
pub fn zone_of(node: &k8s_openapi::api::core::v1::Node) -> Option<String> {
    node.metadata
        .labels
        .as_ref()?
        .get("topology.kubernetes.io/zone")
        .cloned()
}

/// The hints `spec.trafficDistribution` asks for (upstream's
/// `pkg/controller/endpointslice/trafficdist`): `PreferClose` and
/// `PreferSameZone` hint each endpoint for its own zone, `PreferSameNode`
/// for its own node (and zone, for proxies that know only zones). An
/// endpoint without a zone gets none, and the proxy then keeps to the
/// whole cluster.
fn hints(
    service: &Service,
    zone: Option<&str>,
    node: Option<&str>,
) -> Option<k8s_openapi::api::discovery::v1::EndpointHints> {
    use k8s_openapi::api::discovery::v1::{EndpointHints, ForNode, ForZone};
    let distribution = service.spec.as_ref()?.traffic_distribution.as_deref()?;
    let for_zones = zone.map(|z| {
        vec![ForZone {
            name: z.to_string(),
        }]
    });
    match distribution {
        "PreferClose" | "PreferSameZone" => Some(EndpointHints {
            for_zones: Some(for_zones?),
            for_nodes: None,
        }),
        "PreferSameNode" => Some(EndpointHints {
            for_nodes: Some(vec![ForNode {
                name: node?.to_string(),
            }]),
            for_zones,
        }),
        _ => None,
    }
}

/// The Service's EndpointSlices: every endpoint (terminating ones too,
/// with their conditions), grouped by address type and ports, each with
/// its node's zone (`zone`) and the hints its traffic distribution asks
/// for.
pub fn slices(
    service: &Service,
    found: &[Found],
    zone: &dyn Fn(&str) -> Option<String>,
) -> Vec<EndpointSlice> {
    let name = service.metadata.name.clone().unwrap_or_default();
    let mut groups: BTreeMap<(String, String), (Vec<EndpointPort>, Vec<Endpoint>)> =
        BTreeMap::new();
    for f in found {
        let mut ports = f.ports.clone();
        ports.sort_by(|a, b| a.name.cmp(&b.name).then(a.port.cmp(&b.port)));
        let group = (
            address_type(&f.ip).to_string(),
            serde_json::to_string(&ports).unwrap_or_default(),
        );
        let entry = groups
            .entry(group)
            .or_insert_with(|| (ports.clone(), Vec::new()));
        let node = pod::node(&f.pod);
        let endpoint_zone = node.and_then(zone);
        entry.1.push(Endpoint {
            addresses: vec![f.ip.clone()],
            conditions: Some(EndpointConditions {
                ready: Some(f.ready),
                serving: Some(f.serving),
                terminating: Some(f.terminating),
            }),
            hostname: hostname(service, &f.pod),
            hints: hints(service, endpoint_zone.as_deref(), node),
            node_name: node.map(String::from),
            zone: endpoint_zone,
            target_ref: Some(target_ref(&f.pod)),
            ..Default::default()
        });
    }
    pack(
        &name,
        service.metadata.namespace.clone(),
        labels_for(service),
        SLICE_MANAGER,
        groups,
    )
}

/// A selector-less Service's manual Endpoints as EndpointSlices.
pub fn mirrored_slices(service: &Service, endpoints: &Endpoints) -> Vec<EndpointSlice> {
    let name = service.metadata.name.clone().unwrap_or_default();
    let mut labels = endpoints.metadata.labels.clone().unwrap_or_default();
    labels.remove(SERVICE_NAME);
    labels.remove(MANAGED_BY);
    let mut groups: BTreeMap<(String, String), (Vec<EndpointPort>, Vec<Endpoint>)> =
        BTreeMap::new();
    for subset in endpoints.subsets.iter().flatten() {
        let ports = subset.ports.clone().unwrap_or_default();
        let key_ports = serde_json::to_string(&ports).unwrap_or_default();
        let addresses = subset.addresses.iter().flatten().map(|a| (a, true)).chain(
            subset
                .not_ready_addresses
                .iter()
                .flatten()
                .map(|a| (a, false)),
        );
        for (address, ready) in addresses {
            let group = (address_type(&address.ip).to_string(), key_ports.clone());
            let entry = groups
                .entry(group)
                .or_insert_with(|| (ports.clone(), Vec::new()));
            entry.1.push(Endpoint {
                addresses: vec![address.ip.clone()],
                conditions: Some(EndpointConditions {
                    ready: Some(ready),
                    serving: Some(ready),
                    terminating: Some(false),
                }),
                hostname: address.hostname.clone(),
                node_name: address.node_name.clone(),
                target_ref: address.target_ref.clone(),
                ..Default::default()
            });
        }
    }
    pack(
        &name,
        service.metadata.namespace.clone(),
        labels,
        MIRROR_MANAGER,
        groups,
    )
}

/// Whether a stored slice already says what `wanted` does.
pub fn slice_matches(current: &EndpointSlice, wanted: &EndpointSlice) -> bool {
    current.address_type == wanted.address_type
        && current.endpoints == wanted.endpoints
        && current.ports.clone().unwrap_or_default() == wanted.ports.clone().unwrap_or_default()
        && labels_match(
            current.metadata.labels.as_ref(),
            wanted.metadata.labels.as_ref(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(spec: serde_json::Value) -> Service {
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "ns", "labels": {"app": "web"}}, "spec": spec}))
            .expect("service")
    }

    fn pod(name: &str, ip: &str, ready: bool, extra: serde_json::Value) -> Arc<Pod> {
        let mut p = json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}")},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip,
                "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        });
        if let (Some(target), Some(extra)) = (p.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                if let (Some(into), Some(add)) = (
                    target.get_mut(k).and_then(|t| t.as_object_mut()),
                    v.as_object(),
                ) {
                    into.extend(add.clone());
                }
            }
        }
        Arc::new(serde_json::from_value(p).expect("pod"))
    }

    #[test]
    fn ready_not_ready_and_terminating_pods_are_placed_as_upstream() {
        let svc = service(
            json!({"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}),
        );
        let pods = vec![
            pod("a", "10.0.0.2", true, json!({})),
            pod("b", "10.0.0.1", false, json!({})),
            pod(
                "c",
                "10.0.0.3",
                true,
                json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
            ),
            pod("d", "", true, json!({})),
        ];
        let found = endpoints_of(&svc, &pods);
        assert_eq!(
            found.iter().map(|f| f.ip.as_str()).collect::<Vec<_>>(),
            ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
        );
        let e = endpoints_object(&svc, &found);
        let subsets = e.subsets.expect("subsets");
        assert_eq!(subsets.len(), 1);
        assert_eq!(
            subsets[0].addresses.as_ref().map(|a| a[0].ip.as_str()),
            Some("10.0.0.2")
        );
        assert_eq!(
            subsets[0]
                .not_ready_addresses
                .as_ref()
                .map(|a| a[0].ip.as_str()),
            Some("10.0.0.1")
        );
        assert_eq!(
            subsets[0].ports.as_ref().map(|p| p[0].port),
            Some(8080),
            "the named port resolved"
        );

        let slices = slices(&svc, &found, &|_| None);
        assert_eq!(slices.len(), 1);
        let terminating = slices[0]
            .endpoints
            .iter()
            .find(|e| e.addresses[0] == "10.0.0.3")
            .expect("kept");
        let c = terminating.conditions.clone().expect("conditions");
        assert_eq!(
            (c.ready, c.serving, c.terminating),
            (Some(false), Some(true), Some(true))
        );
        let labels = slices[0].metadata.labels.clone().expect("labels");
        assert_eq!(labels.get(SERVICE_NAME).map(String::as_str), Some("web"));
        assert_eq!(
            labels.get(MANAGED_BY).map(String::as_str),
            Some(SLICE_MANAGER)
        );
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
    }

    #[test]
    fn slices_hold_at_most_a_hundred_endpoints() {
        let svc = service(json!({"selector": {"app": "web"}, "ports": [{"port": 80}]}));
        let pods: Vec<Arc<Pod>> = (0..250)
            .map(|i| {
                pod(
                    &format!("p{i}"),
                    &format!("10.1.{}.{}", i / 200, i % 200),
                    true,
                    json!({}),
                )
            })
            .collect();
        let slices = slices(&svc, &endpoints_of(&svc, &pods), &|_| None);
        assert_eq!(
            slices.iter().map(|s| s.endpoints.len()).collect::<Vec<_>>(),
            [100, 100, 50]
        );
    }

    #[test]
    fn endpoints_carry_their_zone_and_the_hints_their_traffic_distribution_asks_for() {
        let zone = |node: &str| (node == "n1").then(|| "z1".to_string());
        let pods = vec![
            pod("a", "10.1.0.1", true, json!({"spec": {"nodeName": "n1"}})),
            pod("b", "10.1.0.2", true, json!({"spec": {"nodeName": "n2"}})),
        ];
        let hints_of = |svc: &Service| -> Vec<(Option<String>, Option<serde_json::Value>)> {
            slices(svc, &endpoints_of(svc, &pods), &zone)[0]
                .endpoints
                .iter()
                .map(|e| {
                    (
                        e.zone.clone(),
                        e.hints
                            .as_ref()
                            .map(|h| serde_json::to_value(h).expect("json")),
                    )
                })
                .collect()
        };
        let plain = service(json!({"selector": {"app": "web"}, "ports": [{"port": 80}]}));
        assert_eq!(hints_of(&plain), [(Some("z1".into()), None), (None, None)]);
        let close = service(json!({"selector": {"app": "web"}, "ports": [{"port": 80}],
                                   "trafficDistribution": "PreferClose"}));
        assert_eq!(
            hints_of(&close),
            [
                (
                    Some("z1".into()),
                    Some(json!({"forZones": [{"name": "z1"}]}))
                ),
                (None, None)
            ]
        );
        let node = service(json!({"selector": {"app": "web"}, "ports": [{"port": 80}],
                                  "trafficDistribution": "PreferSameNode"}));
        assert_eq!(
            hints_of(&node)[0].1,
            Some(json!({"forNodes": [{"name": "n1"}], "forZones": [{"name": "z1"}]}))
        );
    }

    #[test]
    fn publish_not_ready_addresses_makes_every_pod_ready() {
        let svc = service(
            json!({"selector": {"app": "web"}, "publishNotReadyAddresses": true, "ports": [{"port": 80}]}),
        );
        let found = endpoints_of(&svc, &[pod("b", "10.0.0.1", false, json!({}))]);
        assert!(found[0].ready);
    }

    #[test]
    fn a_pod_without_the_named_port_is_left_out() {
        let svc = service(
            json!({"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "grpc"}]}),
        );
        assert!(endpoints_of(&svc, &[pod("a", "10.0.0.1", true, json!({}))]).is_empty());
    }
}
