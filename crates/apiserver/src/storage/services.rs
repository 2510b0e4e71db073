//! Service ClusterIP and NodePort allocation, the Service storage's part of
//! every write (upstream's `pkg/registry/core/service/storage`).
//!
//! Each allocated ClusterIP is an `IPAddress` object (networking.k8s.io/v1)
//! named by the address, created through the storage layer as upstream 1.33
//! allocates them; each NodePort a key under
//! `/registry/ranges/servicenodeports/`. Both are created if absent, so two
//! Services can never get the same address or port, however many servers
//! share the store. Releasing deletes them; a release that fails (or a
//! server that dies between allocating and writing the Service) leaves a
//! leak that the [`Repair`] loop finds and frees, as upstream's allocator
//! repair controllers do.

use std::net::{IpAddr, Ipv4Addr};

use bytes::Bytes;
use rand::Rng;
use rudder_api::network::NODE_PORTS;
use rudder_api::{Cause, ResourceDef, Status};
use serde_json::{Value, json};

use super::{Keep, Storage, WriteOptions};

const NODE_PORT_KEYS: &str = "/registry/ranges/servicenodeports/";

/// What a Service holds, to release when it goes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub ip: Option<Ipv4Addr>,
    pub node_ports: Vec<u16>,
}

fn needs_ip(service: &Value) -> bool {
    service.pointer("/spec/type").and_then(Value::as_str) != Some("ExternalName")
        && service.pointer("/spec/clusterIP").and_then(Value::as_str) != Some("None")
}

fn needs_node_ports(service: &Value) -> bool {
    matches!(
        service.pointer("/spec/type").and_then(Value::as_str),
        Some("NodePort" | "LoadBalancer")
    )
}

/// Whether `def`'s writes allocate (Services).
pub fn allocates(def: &ResourceDef) -> bool {
    def.strategy.rest == rudder_api::strategy::Rest::Service
}

fn ipaddresses(storage: &Storage<'_>) -> Result<std::sync::Arc<ResourceDef>, Status> {
    storage
        .state
        .registry()
        .get("networking.k8s.io", "v1", "ipaddresses")
        .cloned()
        .ok_or_else(|| Status::internal("no ipaddresses resource"))
}

/// The label upstream's allocator marks its `IPAddress` objects with.
const MANAGED_BY: &str = "ipaddress.kubernetes.io/managed-by";
const IP_ALLOCATOR: &str = "ipallocator.k8s.io";

/// Claims `ip` for the Service `namespace/name`; `false` if it is taken.
async fn claim_ip(
    storage: &Storage<'_>,
    ip: Ipv4Addr,
    namespace: &str,
    name: &str,
) -> Result<bool, Status> {
    let def = ipaddresses(storage)?;
    let object = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {
            "name": ip.to_string(),
            "labels": {"ipaddress.kubernetes.io/ip-family": "IPv4", MANAGED_BY: IP_ALLOCATOR},
        },
        "spec": {"parentRef": {"group": "", "resource": "services", "namespace": namespace, "name": name}},
    });
    // Boxed: creating a Service creates its IPAddress through the same
    // storage layer.
    match Box::pin(storage.create(&def, None, object, &WriteOptions::server())).await {
        Ok(_) => Ok(true),
        Err(status) if status.reason == "AlreadyExists" => Ok(false),
        Err(status) => Err(status),
    }
}

async fn claim_port(storage: &Storage<'_>, port: u16, owner: &str) -> Result<bool, Status> {
    let key = format!("{NODE_PORT_KEYS}{port}");
    match storage
        .state
        .store
        .create(key.as_bytes(), Bytes::from(owner.to_string()))
        .await
    {
        Ok(_) => Ok(true),
        Err(rudder_store::Error::AlreadyExists) => Ok(false),
        Err(e) => Err(Status::unavailable(format!(
            "allocating node port {port}: {e}"
        ))),
    }
}

/// The namespace and name of an object.
fn identity(object: &Value) -> (String, String) {
    let field = |f: &str| {
        object
            .pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (field("namespace"), field("name"))
}

fn invalid(def: &ResourceDef, name: &str, field: &str, value: Value, detail: &str) -> Status {
    Status::invalid(
        def.target(),
        name,
        vec![Cause::invalid(field, &value, detail)],
    )
}

/// Gives a new Service its ClusterIP and NodePorts (those it asks for, or
/// free ones), filling in `clusterIPs`, `ipFamilies` and `ipFamilyPolicy`.
pub async fn allocate(
    storage: &Storage<'_>,
    def: &ResourceDef,
    service: &mut Value,
) -> Result<Allocation, Status> {
    let (namespace, name) = identity(service);
    let mut allocation = Allocation::default();
    let result = allocate_into(storage, def, service, &namespace, &name, &mut allocation).await;
    if result.is_err() {
        release(storage, &allocation).await;
    }
    result.map(|()| allocation)
}

async fn allocate_into(
    storage: &Storage<'_>,
    def: &ResourceDef,
    service: &mut Value,
    namespace: &str,
    name: &str,
    allocation: &mut Allocation,
) -> Result<(), Status> {
    let range = storage.state.service_cidr();
    if needs_ip(service) {
        let requested = service
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let ip = match requested {
            Some(text) => {
                let ip: Ipv4Addr = text.parse().map_err(|_| {
                    invalid(
                        def,
                        name,
                        "spec.clusterIPs[0]",
                        json!(text),
                        "must be a valid IP address",
                    )
                })?;
                if !range.contains(ip)
                    || !range
                        .usable()
                        .contains(&(u64::from(u32::from(ip) - u32::from(range.base))))
                {
                    return Err(invalid(
                        def,
                        name,
                        "spec.clusterIPs",
                        json!([text]),
                        &format!(
                            "failed to allocate IP {ip}: provided IP is not in the valid range. The range of valid IPs is {range}"
                        ),
                    ));
                }
                if !claim_ip(storage, ip, namespace, name).await? {
                    return Err(invalid(
                        def,
                        name,
                        "spec.clusterIPs",
                        json!([text]),
                        &format!("failed to allocate IP {ip}: provided IP is already allocated"),
                    ));
                }
                ip
            }
            None => {
                let usable = range.usable();
                let span = usable.end - usable.start;
                let start = rand::rng().random_range(0..span);
                let mut found = None;
                for step in 0..span.min(4096) {
                    let Some(ip) = range.nth(usable.start + (start + step) % span) else {
                        continue;
                    };
                    if claim_ip(storage, ip, namespace, name).await? {
                        found = Some(ip);
                        break;
                    }
                }
                found.ok_or_else(|| {
                    Status::internal(format!(
                        "failed to allocate a serviceIP: range {range} is full"
                    ))
                })?
            }
        };
        allocation.ip = Some(ip);
        let spec = &mut service["spec"];
        spec["clusterIP"] = json!(ip.to_string());
        spec["clusterIPs"] = json!([ip.to_string()]);
    } else if service.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None") {
        service["spec"]["clusterIPs"] = json!(["None"]);
    }
    if service.pointer("/spec/type").and_then(Value::as_str) != Some("ExternalName") {
        let spec = &mut service["spec"];
        if spec.get("ipFamilies").is_none() {
            spec["ipFamilies"] = json!(["IPv4"]);
        }
        if spec.get("ipFamilyPolicy").is_none() {
            spec["ipFamilyPolicy"] = json!("SingleStack");
        }
        if spec.get("internalTrafficPolicy").is_none() {
            spec["internalTrafficPolicy"] = json!("Cluster");
        }
    }
    allocate_node_ports(storage, def, service, &[], allocation).await
}

/// Claims the node port of a Service port: `requested`, or a free one.
async fn claim_node_port(
    storage: &Storage<'_>,
    def: &ResourceDef,
    name: &str,
    owner: &str,
    field: &str,
    requested: Option<&Value>,
) -> Result<u16, Status> {
    match requested.filter(|v| !v.is_null()) {
        Some(value) => {
            let port = value.as_u64().and_then(|p| u16::try_from(p).ok()).filter(|p| NODE_PORTS.contains(p)).ok_or_else(|| {
                invalid(def, name, field, value.clone(), &format!("provided port is not in the valid range. The range of valid ports is {}-{}", NODE_PORTS.start(), NODE_PORTS.end()))
            })?;
            if !claim_port(storage, port, owner).await? {
                return Err(invalid(
                    def,
                    name,
                    field,
                    value.clone(),
                    "provided port is already allocated",
                ));
            }
            Ok(port)
        }
        None => {
            let span = u32::from(*NODE_PORTS.end() - *NODE_PORTS.start()) + 1;
            let start = rand::rng().random_range(0..span);
            for step in 0..span {
                let port = *NODE_PORTS.start() + ((start + step) % span) as u16;
                if claim_port(storage, port, owner).await? {
                    return Ok(port);
                }
            }
            Err(Status::internal(
                "failed to allocate a nodePort: range is full",
            ))
        }
    }
}

/// Gives every port of a NodePort or LoadBalancer Service a node port,
/// except those in `held` (ports an update keeps); what it claims goes into
/// `allocation`.
async fn allocate_node_ports(
    storage: &Storage<'_>,
    def: &ResourceDef,
    service: &mut Value,
    held: &[u16],
    allocation: &mut Allocation,
) -> Result<(), Status> {
    if !needs_node_ports(service) {
        return Ok(());
    }
    if service.pointer("/spec/externalTrafficPolicy").is_none() {
        service["spec"]["externalTrafficPolicy"] = json!("Cluster");
    }
    let (namespace, name) = identity(service);
    let owner = format!("{namespace}/{name}");
    let count = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    for i in 0..count {
        let requested = service
            .pointer(&format!("/spec/ports/{i}/nodePort"))
            .cloned();
        if requested
            .as_ref()
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok())
            .is_some_and(|p| held.contains(&p))
        {
            continue;
        }
        let port = claim_node_port(
            storage,
            def,
            &name,
            &owner,
            &format!("spec.ports[{i}].nodePort"),
            requested.as_ref(),
        )
        .await?;
        service["spec"]["ports"][i]["nodePort"] = json!(port);
        allocation.node_ports.push(port);
    }
    if needs_health_check(service) {
        let requested = service
            .pointer("/spec/healthCheckNodePort")
            .filter(|v| v.as_u64().is_some_and(|p| p != 0))
            .cloned();
        let held_already = requested
            .as_ref()
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok())
            .is_some_and(|p| held.contains(&p));
        if !held_already {
            let port = claim_node_port(
                storage,
                def,
                &name,
                &owner,
                "spec.healthCheckNodePort",
                requested.as_ref(),
            )
            .await?;
            service["spec"]["healthCheckNodePort"] = json!(port);
            allocation.node_ports.push(port);
        }
    }
    Ok(())
}

/// Whether a Service has a health check node port: a LoadBalancer with the
/// Local external traffic policy (upstream's `NeedsHealthCheck`).
fn needs_health_check(service: &Value) -> bool {
    service.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer")
        && service
            .pointer("/spec/externalTrafficPolicy")
            .and_then(Value::as_str)
            == Some("Local")
}

/// What a stored Service holds.
pub fn held_by(service: &Value) -> Allocation {
    let ip = if needs_ip(service) {
        service
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
    } else {
        None
    };
    let mut node_ports: Vec<u16> = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|ports| {
            ports
                .iter()
                .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
                .filter_map(|p| u16::try_from(p).ok())
                .collect()
        })
        .unwrap_or_default();
    node_ports.extend(
        service
            .pointer("/spec/healthCheckNodePort")
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0),
    );
    Allocation { ip, node_ports }
}

/// Frees what a Service held. A failure is logged and left to [`Repair`].
pub async fn release(storage: &Storage<'_>, allocation: &Allocation) {
    if let Some(ip) = allocation.ip {
        let freed = match ipaddresses(storage) {
            // Boxed: deleting a Service deletes its IPAddress through the
            // same storage layer.
            Ok(def) => Box::pin(storage.delete(
                &def,
                None,
                &ip.to_string(),
                &super::DeleteOptions::default(),
                &WriteOptions::server(),
            ))
            .await
            .map(|_| ()),
            Err(status) => Err(status),
        };
        match freed {
            Ok(()) => {}
            Err(status) if status.code == 404 => {}
            Err(status) => {
                tracing::warn!(%ip, error = %status.message, "could not release a ClusterIP; the repair loop will");
            }
        }
    }
    for port in &allocation.node_ports {
        match storage
            .state
            .store
            .delete(format!("{NODE_PORT_KEYS}{port}").as_bytes(), None)
            .await
        {
            Ok(_) | Err(rudder_store::Error::NotFound) => {}
            Err(error) => {
                tracing::warn!(port, %error, "could not release a node port; the repair loop will");
            }
        }
    }
}

impl Allocation {
    /// What this holds that `other` does not.
    pub fn without(&self, other: &Allocation) -> Allocation {
        Allocation {
            ip: self.ip.filter(|ip| other.ip != Some(*ip)),
            node_ports: self
                .node_ports
                .iter()
                .copied()
                .filter(|p| !other.node_ports.contains(p))
                .collect(),
        }
    }
}

/// Carries what an update may not change or drop: the ClusterIP, and
/// node ports the new object leaves out (matched by port). A changed
/// ClusterIP is refused.
pub fn keep_on_update(def: &ResourceDef, new: &mut Value, old: &Value) -> Result<(), Status> {
    let name = old
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let old_ip = old.pointer("/spec/clusterIP").cloned();
    match (
        new.pointer("/spec/clusterIP")
            .filter(|v| v.as_str().is_some_and(|s| !s.is_empty())),
        &old_ip,
    ) {
        (None, Some(ip)) => {
            if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("clusterIP".into(), ip.clone());
                if let Some(ips) = old.pointer("/spec/clusterIPs") {
                    spec.insert("clusterIPs".into(), ips.clone());
                }
            }
        }
        (Some(ip), Some(old_ip))
            if ip != old_ip
                && new.pointer("/spec/type").and_then(Value::as_str) != Some("ExternalName") =>
        {
            return Err(invalid(
                def,
                &name,
                "spec.clusterIPs[0]",
                ip.clone(),
                "may not change once set",
            ));
        }
        _ => {}
    }
    for field in ["ipFamilies", "ipFamilyPolicy", "internalTrafficPolicy"] {
        if new.pointer(&format!("/spec/{field}")).is_none()
            && let (Some(value), Some(spec)) = (
                old.pointer(&format!("/spec/{field}")).cloned(),
                new.get_mut("spec").and_then(Value::as_object_mut),
            )
        {
            spec.insert(field.into(), value);
        }
    }
    // The health check port: kept while the Service needs one and the
    // update left it out; dropped (and so released) when the Service no
    // longer needs one and the update did not change it — upstream's
    // `dropTypeDependentFields`.
    let old_health = old.pointer("/spec/healthCheckNodePort").cloned();
    let new_health = new.pointer("/spec/healthCheckNodePort").cloned();
    if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
        let needs = spec.get("type").and_then(Value::as_str) == Some("LoadBalancer")
            && spec.get("externalTrafficPolicy").and_then(Value::as_str) == Some("Local");
        match (needs, &new_health, &old_health) {
            (true, None, Some(port)) => {
                spec.insert("healthCheckNodePort".into(), port.clone());
            }
            (false, Some(new_port), Some(old_port)) if new_port == old_port => {
                spec.remove("healthCheckNodePort");
            }
            _ => {}
        }
    }
    let old_ports = old
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(ports) = new.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
        for port in ports {
            if port.get("nodePort").is_none()
                && let Some(previous) = old_ports.iter().find(|p| {
                    p.get("port") == port.get("port") && p.get("protocol") == port.get("protocol")
                })
                && let Some(node_port) = previous.get("nodePort")
            {
                port["nodePort"] = node_port.clone();
            }
        }
    }
    Ok(())
}

/// Allocates node ports an updated NodePort Service newly needs; returns
/// them, to release if the write fails.
pub async fn allocate_on_update(
    storage: &Storage<'_>,
    def: &ResourceDef,
    new: &mut Value,
    old: &Value,
) -> Result<Allocation, Status> {
    let mut allocation = Allocation::default();
    let result =
        allocate_node_ports(storage, def, new, &held_by(old).node_ports, &mut allocation).await;
    if result.is_err() {
        release(storage, &allocation).await;
    }
    result.map(|()| allocation)
}

/// Creates the `kubernetes` Service in `default` at the range's first
/// address, if absent, and points its Endpoints and EndpointSlice at this
/// server (`advertise`:`port`), as upstream's endpoint reconciler does.
pub async fn bootstrap(storage: &Storage<'_>, advertise: IpAddr, port: u16) -> anyhow::Result<()> {
    create_kubernetes_service(storage, port).await?;
    let ip = advertise.to_string();
    let endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{"addresses": [{"ip": ip}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}],
    });
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": if advertise.is_ipv4() { "IPv4" } else { "IPv6" },
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    });
    // Endpoints that cannot be written (say, a slice whose address type the
    // new address would change, which is immutable) are reported, not
    // fatal: the API server serves without them.
    let default = Some("default");
    for (resource, object) in [
        (("", "v1", "endpoints"), endpoints),
        (("discovery.k8s.io", "v1", "endpointslices"), slice),
    ] {
        if let Err(error) = storage
            .ensure(resource, default, object, Keep::Content)
            .await
        {
            tracing::warn!(%error, "could not point the kubernetes service at this server");
        }
    }
    Ok(())
}

async fn create_kubernetes_service(storage: &Storage<'_>, port: u16) -> anyhow::Result<()> {
    let ip = rudder_api::network::kubernetes_service_ip(&storage.state.service_cidr());
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"type": "ClusterIP", "clusterIP": ip.to_string(), "sessionAffinity": "None",
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]},
    });
    storage
        .ensure(
            ("", "v1", "services"),
            Some("default"),
            service,
            Keep::Existing,
        )
        .await
        .map(|_| ())
}

/// How many passes in a row must find an address or port leaked before it
/// is freed: a Service being created holds its allocation a moment before
/// it is written (upstream waits three passes).
const PASSES_BEFORE_RELEASE: u32 = 2;

/// How often the repair loop runs (upstream's allocator repair interval).
pub const REPAIR_EVERY: std::time::Duration = std::time::Duration::from_secs(180);

/// The allocator repair loop's memory: what looked leaked, and how often.
#[derive(Debug, Default)]
pub struct Repair {
    suspects: std::collections::HashMap<String, u32>,
}

/// What one repair pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Repaired {
    /// Addresses and ports freed (`10.43.0.7`, `nodePort 30080`).
    pub released: Vec<String>,
    /// Addresses a Service holds whose `IPAddress` was missing, re-created.
    pub restored: Vec<String>,
}

impl Repair {
    /// One pass: every ClusterIP and NodePort no Service holds is freed
    /// once it has looked leaked for [`PASSES_BEFORE_RELEASE`] passes, and a
    /// Service's address with no `IPAddress` object gets one back.
    pub async fn pass(&mut self, storage: &Storage<'_>) -> Result<Repaired, Status> {
        let registry = storage.state.registry();
        let services_def = registry
            .get("", "v1", "services")
            .cloned()
            .ok_or_else(|| Status::internal("no services resource"))?;
        let ip_def = ipaddresses(storage)?;
        let everything = super::Selectors::default();
        let request = super::ListRequest::default();
        let services = storage
            .list(&services_def, None, &everything, &request)
            .await?;
        let mut held_ips = std::collections::HashMap::new();
        let mut held_ports = std::collections::HashSet::new();
        for service in &services.items {
            let held = held_by(service);
            if let Some(ip) = held.ip {
                held_ips.insert(ip.to_string(), identity(service));
            }
            held_ports.extend(held.node_ports);
        }
        let mut done = Repaired::default();
        let mut seen = std::collections::HashSet::new();
        let addresses = storage.list(&ip_def, None, &everything, &request).await?;
        let mut recorded = std::collections::HashSet::new();
        for address in &addresses.items {
            let managed = address
                .pointer(&format!(
                    "/metadata/labels/{}",
                    MANAGED_BY.replace('/', "~1")
                ))
                .and_then(Value::as_str)
                == Some(IP_ALLOCATOR);
            let name = address
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            recorded.insert(name.clone());
            if !managed || held_ips.contains_key(&name) {
                continue;
            }
            // The same object both passes (by uid): an address freed and
            // taken again meanwhile is a new suspect.
            let uid = address
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let suspect = format!("ip {name} {uid}");
            seen.insert(suspect.clone());
            if self.suspected(&suspect) {
                // Deleted only as it was listed (uid precondition).
                let options = super::DeleteOptions {
                    uid: Some(uid.to_string()),
                    ..super::DeleteOptions::default()
                };
                match Box::pin(storage.delete(
                    &ip_def,
                    None,
                    &name,
                    &options,
                    &WriteOptions::server(),
                ))
                .await
                {
                    Ok(_) => done.released.push(name),
                    Err(status) if matches!(status.code, 404 | 409) => {}
                    Err(status) => return Err(status),
                }
            }
        }
        for (ip, (namespace, name)) in &held_ips {
            if recorded.contains(ip) {
                continue;
            }
            // Only for a Service that still holds it now (not one deleted
            // since it was listed).
            let still_held = match storage.get(&services_def, Some(namespace), name).await {
                Ok(current) => {
                    held_by(&current.object)
                        .ip
                        .map(|i| i.to_string())
                        .as_deref()
                        == Some(ip.as_str())
                }
                Err(status) if status.code == 404 => false,
                Err(status) => return Err(status),
            };
            if still_held
                && let Ok(parsed) = ip.parse()
                && claim_ip(storage, parsed, namespace, name).await?
            {
                done.restored.push(ip.clone());
            }
        }
        let ports = storage
            .state
            .store
            .list(
                NODE_PORT_KEYS.as_bytes(),
                rudder_store::ListOptions::default(),
            )
            .await
            .map_err(|e| Status::unavailable(format!("listing node ports: {e}")))?;
        for kv in &ports.kvs {
            let Some(port) = std::str::from_utf8(&kv.key[NODE_PORT_KEYS.len()..])
                .ok()
                .and_then(|p| p.parse::<u16>().ok())
            else {
                continue;
            };
            if held_ports.contains(&port) {
                continue;
            }
            let suspect = format!("nodePort {port}");
            seen.insert(suspect.clone());
            if self.suspected(&suspect) {
                release(
                    storage,
                    &Allocation {
                        ip: None,
                        node_ports: vec![port],
                    },
                )
                .await;
                done.released.push(suspect);
            }
        }
        self.suspects.retain(|s, _| seen.contains(s));
        Ok(done)
    }

    /// Counts one more sighting of a suspect; true when it is time to free it.
    fn suspected(&mut self, suspect: &str) -> bool {
        let count = self.suspects.entry(suspect.to_string()).or_insert(0);
        *count += 1;
        if *count >= PASSES_BEFORE_RELEASE {
            self.suspects.remove(suspect);
            return true;
        }
        false
    }
}
