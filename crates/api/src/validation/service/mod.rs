//! What upstream's `ValidateService` requires of a Service, with its field
//! paths and words: a supported type; ports (`ports.rs`); cluster IPs and
//! IP families (`cluster_ips.rs`); an external name for `ExternalName`;
//! the selector's labels; session affinity; external IPs; the fields only
//! a LoadBalancer (or an externally reachable Service) may set; the
//! traffic policies; and `status.loadBalancer` (`status.rs`). What an
//! update adds is in `update.rs`.
//!
//! Upstream validates the object its defaults and its allocators have
//! filled in; rudder validates before allocating, and its defaults leave a
//! few empty fields empty. So what upstream would have filled in is never
//! asked for here: the health check port, a ClientIP affinity's timeout,
//! an external traffic policy, a load balancer's `ipMode`, and the empty
//! strings Go's defaults replace (`type`, `protocol`, `sessionAffinity`,
//! `targetPort`) count as their defaults.

mod cluster_ips;
mod ports;
mod status;
pub mod update;

#[cfg(test)]
mod tests;

use serde_json::{Value, json};

use super::{dns1123_subdomain, label_value, one_of, qualified_name};
use crate::Cause;

const TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
const LB_ONLY: &str = "may only be used when `type` is 'LoadBalancer'";
const SOURCE_RANGES_ANNOTATION: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";
const TOPOLOGY_MODE: &str = "service.kubernetes.io/topology-mode";
const TOPOLOGY_HINTS: &str = "service.kubernetes.io/topology-aware-hints";

/// Appends the causes a Service has.
pub fn service(object: &Value, causes: &mut Vec<Cause>) {
    let spec = Spec::of(object);
    topology_annotations(object, causes);
    if spec.ports().is_empty() && !spec.headless() && spec.kind() != "ExternalName" {
        causes.push(Cause::required("spec.ports"));
    }
    match spec.kind() {
        kind @ ("LoadBalancer" | "NodePort") if spec.headless() => causes.push(Cause::invalid(
            "spec.clusterIPs[0]",
            &json!("None"),
            &format!("may not be set to 'None' for {kind} services"),
        )),
        "ExternalName" => external_name(spec, causes),
        _ => {}
    }
    ports::each(spec, causes);
    selector(spec, causes);
    session_affinity(spec, causes);
    cluster_ips::related_fields(spec, causes);
    external_ips(spec, causes);
    if let Some(kind) = spec.value("type")
        && !TYPES.iter().any(|t| kind.as_str() == Some(t))
        && kind.as_str() != Some("")
    {
        causes.push(Cause::not_supported("spec.type", kind, TYPES));
    }
    ports::node_ports_and_duplicates(spec, causes);
    source_ranges(object, spec, causes);
    load_balancer_fields(spec, causes);
    traffic_policies(spec, causes);
    status::load_balancer(object, spec, causes);
}

/// A Service's spec as upstream's validation sees it: Go's zero value for
/// what is absent, the defaults Go gives empty strings.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spec<'a>(&'a Value);

impl<'a> Spec<'a> {
    pub(super) fn of(service: &'a Value) -> Self {
        Spec(service.get("spec").unwrap_or(&Value::Null))
    }

    /// A field that is set (not absent, not null).
    pub(super) fn value(self, key: &str) -> Option<&'a Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    /// A string field, `""` when unset.
    pub(super) fn text(self, key: &str) -> &'a str {
        self.value(key).and_then(Value::as_str).unwrap_or_default()
    }

    /// A list of strings, empty when unset.
    pub(super) fn strings(self, key: &str) -> Vec<&'a str> {
        self.value(key)
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .map(|v| v.as_str().unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub(super) fn kind(self) -> &'a str {
        match self.text("type") {
            "" => "ClusterIP",
            kind => kind,
        }
    }

    pub(super) fn ports(self) -> &'a [Value] {
        self.value("ports")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// `clusterIPs`, or `[clusterIP]` when only that is given (upstream's
    /// `NormalizeClusterIPs` on create, which rudder leaves to allocation).
    pub(super) fn cluster_ips(self) -> Vec<&'a str> {
        let ips = self.strings("clusterIPs");
        match self.text("clusterIP") {
            ip if ips.is_empty() && !ip.is_empty() => vec![ip],
            _ => ips,
        }
    }

    pub(super) fn headless(self) -> bool {
        self.cluster_ips() == ["None"]
    }

    /// Upstream's `ExternallyAccessible`.
    pub(super) fn externally_accessible(self) -> bool {
        match self.kind() {
            "LoadBalancer" | "NodePort" => true,
            "ClusterIP" => !self.strings("externalIPs").is_empty(),
            _ => false,
        }
    }

    /// Upstream's `NeedsHealthCheck`.
    pub(super) fn needs_health_check(self) -> bool {
        self.kind() == "LoadBalancer" && self.text("externalTrafficPolicy") == "Local"
    }

    pub(super) fn health_check_node_port(self) -> i64 {
        self.value("healthCheckNodePort")
            .and_then(Value::as_i64)
            .unwrap_or(0)
    }
}

/// A list as Go's `%#v` prints it in an Invalid value: `[]string{"a"}`,
/// `[]core.IPFamily(nil)` for none.
pub(super) fn go_list(type_name: &str, items: &[&str]) -> String {
    if items.is_empty() {
        return format!("[]{type_name}(nil)");
    }
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[]{type_name}{{{}}}", quoted.join(", "))
}

/// An Invalid cause whose value is shown as `shown` (a Go list, a nil
/// pointer).
pub(super) fn invalid_shown(field: impl Into<String>, shown: &str, detail: &str) -> Cause {
    Cause::new(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {shown}: {detail}"),
    )
}

fn topology_annotations(object: &Value, causes: &mut Vec<Cause>) {
    let annotation = |key: &str| {
        object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
    };
    if let (Some(mode), Some(hints)) = (annotation(TOPOLOGY_MODE), annotation(TOPOLOGY_HINTS))
        && mode != hints
    {
        causes.push(Cause::invalid(
            format!("metadata.annotations[{TOPOLOGY_MODE}]"),
            &json!(mode),
            &format!("must match annotations[{TOPOLOGY_HINTS}] when both are specified"),
        ));
    }
}

fn external_name(spec: Spec<'_>, causes: &mut Vec<Cause>) {
    let forbidden = "may not be set for ExternalName services";
    if !spec.cluster_ips().is_empty() {
        causes.push(Cause::forbidden("spec.clusterIPs", forbidden));
    }
    if !spec.strings("ipFamilies").is_empty() {
        causes.push(Cause::forbidden("spec.ipFamilies", forbidden));
    }
    if spec.value("ipFamilyPolicy").is_some() {
        causes.push(Cause::forbidden("spec.ipFamilyPolicy", forbidden));
    }
    // A CNAME may end in a dot, as a fully qualified name does.
    let name = spec.text("externalName");
    let cname = name.strip_suffix('.').unwrap_or(name);
    if cname.is_empty() {
        causes.push(Cause::required("spec.externalName"));
    } else if let Err(why) = dns1123_subdomain(cname) {
        causes.push(Cause::invalid("spec.externalName", &json!(cname), &why));
    }
}

/// The selector's keys and values, as labels' (upstream's `ValidateLabels`,
/// which reports both at `spec.selector`).
fn selector(spec: Spec<'_>, causes: &mut Vec<Cause>) {
    let Some(selector) = spec.value("selector").and_then(Value::as_object) else {
        return;
    };
    for (key, value) in selector {
        if let Err(why) = qualified_name(key) {
            causes.push(Cause::invalid("spec.selector", &json!(key), &why));
        }
        match value.as_str() {
            Some(text) => {
                if let Err(why) = label_value(text) {
                    causes.push(Cause::invalid("spec.selector", value, &why));
                }
            }
            None => causes.push(Cause::invalid("spec.selector", value, "must be a string")),
        }
    }
}

/// `sessionAffinity` and, for ClientIP, its timeout. (Upstream's defaults
/// give a ClientIP affinity its 10800 s timeout and drop the config of a
/// None one, so neither is asked for nor refused here.)
fn session_affinity(spec: Spec<'_>, causes: &mut Vec<Cause>) {
    match spec.text("sessionAffinity") {
        "" | "None" => {}
        "ClientIP" => {
            let timeout = spec
                .0
                .pointer("/sessionAffinityConfig/clientIP/timeoutSeconds")
                .filter(|t| !t.is_null());
            if let Some(timeout) = timeout
                && !timeout.as_i64().is_some_and(|t| (1..=86400).contains(&t))
            {
                causes.push(Cause::invalid(
                    "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                    timeout,
                    "must be greater than 0 and less than 86400",
                ));
            }
        }
        _ => one_of(
            spec.value("sessionAffinity"),
            "spec.sessionAffinity",
            &["ClientIP", "None"],
            causes,
        ),
    }
}

fn external_ips(spec: Spec<'_>, causes: &mut Vec<Cause>) {
    for (i, ip) in spec.strings("externalIPs").into_iter().enumerate() {
        let field = format!("spec.externalIPs[{i}]");
        match super::net::valid_ip(field.as_str(), ip) {
            Some(cause) => causes.push(cause),
            None => super::net::non_special_ip(&field, ip, causes),
        }
    }
}

/// `loadBalancerSourceRanges`, or else the older annotation: CIDRs (space
/// padding tolerated), for LoadBalancers only. The field path is
/// upstream's, capital L and all.
fn source_ranges(object: &Value, spec: Spec<'_>, causes: &mut Vec<Cause>) {
    let ranges = spec.strings("loadBalancerSourceRanges");
    let load_balancer = spec.kind() == "LoadBalancer";
    if !ranges.is_empty() {
        let path = "spec.LoadBalancerSourceRanges";
        if !load_balancer {
            causes.push(Cause::forbidden(path, LB_ONLY));
        }
        for (i, range) in ranges.into_iter().enumerate() {
            causes.extend(super::net::valid_cidr(format!("{path}[{i}]"), range.trim()));
        }
    } else if let Some(ranges) = object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(SOURCE_RANGES_ANNOTATION))
        .and_then(Value::as_str)
    {
        let path = format!("metadata.annotations[{SOURCE_RANGES_ANNOTATION}]");
        if !load_balancer {
            causes.push(Cause::forbidden(path.as_str(), LB_ONLY));
        }
        let ranges = ranges.trim();
        if !ranges.is_empty() {
            for range in ranges.split(',') {
                causes.extend(super::net::valid_cidr(path.as_str(), range.trim()));
            }
        }
    }
}

/// `allocateLoadBalancerNodePorts` and `loadBalancerClass`: LoadBalancers
/// only. (Upstream's path for the missing flag has no `spec.`.)
fn load_balancer_fields(spec: Spec<'_>, causes: &mut Vec<Cause>) {
    let load_balancer = spec.kind() == "LoadBalancer";
    match (load_balancer, spec.value("allocateLoadBalancerNodePorts")) {
        (false, Some(_)) => causes.push(Cause::forbidden(
            "spec.allocateLoadBalancerNodePorts",
            LB_ONLY,
        )),
        (true, None) => causes.push(Cause::required("allocateLoadBalancerNodePorts")),
        _ => {}
    }
    match (load_balancer, spec.value("loadBalancerClass")) {
        (true, Some(class)) => {
            if let Err(why) = qualified_name(class.as_str().unwrap_or_default()) {
                causes.push(Cause::invalid("spec.loadBalancerClass", class, &why));
            }
        }
        (false, Some(_)) => causes.push(Cause::forbidden("spec.loadBalancerClass", LB_ONLY)),
        _ => {}
    }
}

/// `externalTrafficPolicy` (externally reachable Services only) with the
/// health check port it may need, `internalTrafficPolicy`,
/// `trafficDistribution`.
fn traffic_policies(spec: Spec<'_>, causes: &mut Vec<Cause>) {
    let external = spec.text("externalTrafficPolicy");
    if !spec.externally_accessible() {
        if !external.is_empty() {
            causes.push(Cause::invalid(
                "spec.externalTrafficPolicy",
                &json!(external),
                "may only be set for externally-accessible services",
            ));
        }
    } else if !external.is_empty() {
        one_of(
            spec.value("externalTrafficPolicy"),
            "spec.externalTrafficPolicy",
            &["Cluster", "Local"],
            causes,
        );
    }
    // The port itself is the allocator's, after validation.
    let port = spec.health_check_node_port();
    if !spec.needs_health_check() {
        if port != 0 {
            causes.push(Cause::invalid(
                "spec.healthCheckNodePort",
                &json!(port),
                "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
            ));
        }
    } else if port != 0 && !(1..=65535).contains(&port) {
        causes.push(Cause::invalid(
            "spec.healthCheckNodePort",
            &json!(port),
            "must be between 1 and 65535, inclusive",
        ));
    }
    let internal = spec.value("internalTrafficPolicy");
    if internal.is_none() && matches!(spec.kind(), "ClusterIP" | "NodePort" | "LoadBalancer") {
        causes.push(Cause::required("spec.internalTrafficPolicy"));
    }
    one_of(
        internal,
        "spec.internalTrafficPolicy",
        &["Cluster", "Local"],
        causes,
    );
    one_of(
        spec.value("trafficDistribution"),
        "spec.trafficDistribution",
        &["PreferClose", "PreferSameZone", "PreferSameNode"],
        causes,
    );
}
