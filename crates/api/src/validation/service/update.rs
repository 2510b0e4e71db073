//! What an update of a Service adds to its validation: upstream's
//! `PrepareForUpdate` — `clusterIPs` kept in step with `clusterIP`
//! (`NormalizeClusterIPs`), and the fields a new type no longer uses
//! dropped when the update left them as they were
//! (`dropTypeDependentFields`), so that a NodePort made a ClusterIP loses
//! its node ports rather than being refused for them — then the rules of
//! `ValidateServiceUpdate`: cluster IPs and IP families may grow or shrink
//! but not change, nor a LoadBalancer's class or health check port.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::{Spec, go_list, invalid_shown};
use crate::Cause;

const UNCHANGEABLE: &str = "may not change once set";

/// Adjusts `new`, the update of the stored `old`, as upstream's
/// `PrepareForUpdate` does before validating it.
pub fn prepare(new: &mut Value, old: &Value) {
    normalize_cluster_ips(new, old);
    drop_type_dependent_fields(new, old);
}

/// The causes refusing the update of `old` to `new` beyond what `new`
/// alone shows.
pub fn causes(new: &Value, old: &Value) -> Vec<Cause> {
    let (after, before) = (Spec::of(new), Spec::of(old));
    let mut causes = Vec::new();
    cluster_ips(after, before, &mut causes);
    ip_families(after, before, &mut causes);
    if after.kind() == "LoadBalancer"
        && before.kind() == "LoadBalancer"
        && after.value("loadBalancerClass") != before.value("loadBalancerClass")
    {
        causes.push(match after.value("loadBalancerClass") {
            Some(class) => Cause::invalid("spec.loadBalancerClass", class, UNCHANGEABLE),
            None => invalid_shown("spec.loadBalancerClass", "null", UNCHANGEABLE),
        });
    }
    if after.needs_health_check()
        && before.needs_health_check()
        && after.health_check_node_port() != before.health_check_node_port()
    {
        causes.push(Cause::forbidden(
            "spec.healthCheckNodePort",
            "field is immutable",
        ));
    }
    causes
}

fn spec_mut(service: &mut Value) -> Option<&mut Map<String, Value>> {
    service.get_mut("spec").and_then(Value::as_object_mut)
}

/// Upstream's `NormalizeClusterIPs` for an update: a client that sends
/// only `clusterIP` keeps the stored `clusterIPs` (or gets `[clusterIP]`
/// for a new one).
fn normalize_cluster_ips(new: &mut Value, old: &Value) {
    let (before, after) = (Spec::of(old), Spec::of(new));
    let (old_ip, new_ip) = (
        before.text("clusterIP"),
        after.text("clusterIP").to_string(),
    );
    let old_ips = before.strings("clusterIPs");
    let mut new_ips: Vec<String> = after
        .strings("clusterIPs")
        .into_iter()
        .map(str::to_string)
        .collect();
    let Some(spec) = spec_mut(new) else {
        return;
    };
    if !old_ips.is_empty() && new_ips.is_empty() && old_ip == new_ip {
        spec.insert("clusterIPs".into(), json!(old_ips));
        new_ips = old_ips.iter().map(|ip| ip.to_string()).collect();
    }
    if old_ip != new_ip && old_ips == new_ips {
        if !old_ip.is_empty() && new_ip.is_empty() {
            spec.remove("clusterIPs");
        } else {
            spec.insert("clusterIPs".into(), json!([new_ip]));
        }
    }
}

/// Upstream's `dropTypeDependentFields`. One addition: an ExternalName
/// Service stored with a cluster IP (as rudder kept it on a type change
/// before) loses it too, or no update could ever clear it.
fn drop_type_dependent_fields(new: &mut Value, old: &Value) {
    let before = Spec::of(old);
    let after = Spec::of(&*new);
    let uses_node_ports = |s: Spec<'_>| matches!(s.kind(), "NodePort" | "LoadBalancer");
    let node_ports = |s: Spec<'_>| -> BTreeSet<i64> {
        s.ports()
            .iter()
            .filter_map(|p| p.get("nodePort").and_then(Value::as_i64))
            .filter(|p| *p != 0)
            .collect()
    };
    let load_balancer = |s: Spec<'_>| s.kind() == "LoadBalancer";
    let same = |key: &str| after.value(key) == before.value(key);

    let mut dropped: Vec<&str> = Vec::new();
    if after.kind() == "ExternalName" {
        if same("clusterIP") && same("clusterIPs") {
            dropped.extend(["clusterIP", "clusterIPs"]);
        }
        dropped.extend(
            ["ipFamilies", "ipFamilyPolicy"]
                .into_iter()
                .filter(|k| same(k)),
        );
    }
    let drop_node_ports = uses_node_ports(before)
        && !uses_node_ports(after)
        && node_ports(before).is_superset(&node_ports(after));
    if before.needs_health_check() && !after.needs_health_check() && same("healthCheckNodePort") {
        dropped.push("healthCheckNodePort");
    }
    if load_balancer(before) && !load_balancer(after) {
        let flag = "allocateLoadBalancerNodePorts";
        if before.value(flag).is_some() && same(flag) {
            dropped.push(flag);
        }
        if same("loadBalancerClass") {
            dropped.push("loadBalancerClass");
        }
    }
    let policy = "externalTrafficPolicy";
    if before.externally_accessible()
        && !after.externally_accessible()
        && before.text(policy) == after.text(policy)
    {
        dropped.push(policy);
    }
    let clear_status = !load_balancer(after)
        && new
            .pointer("/status/loadBalancer")
            .is_some_and(|lb| lb != &json!({}));

    if let Some(spec) = spec_mut(new) {
        for key in dropped {
            spec.remove(key);
        }
        if drop_node_ports && let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut)
        {
            for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                port.remove("nodePort");
            }
        }
    }
    // A load balancer's status goes with the type.
    if clear_status {
        new["status"]["loadBalancer"] = json!({});
    }
}

/// Upstream's `validateUpgradeDowngradeClusterIPs`: a secondary address
/// may come and go (going, with policy SingleStack), the primary stays.
fn cluster_ips(after: Spec<'_>, before: Spec<'_>, causes: &mut Vec<Cause>) {
    if after.kind() == "ExternalName" || before.kind() == "ExternalName" {
        return;
    }
    if after.headless() && before.headless() {
        return;
    }
    let (old, new) = (before.cluster_ips(), after.cluster_ips());
    let shown = go_list("string", &new);
    let changed = |causes: &mut Vec<Cause>, i: usize| {
        causes.push(invalid_shown(
            format!("spec.clusterIPs[{i}]"),
            &shown,
            UNCHANGEABLE,
        ));
    };
    match old.len().cmp(&new.len()) {
        std::cmp::Ordering::Equal => {
            for i in (0..old.len()).filter(|i| old[*i] != new[*i]) {
                changed(causes, i);
            }
        }
        std::cmp::Ordering::Greater => {
            if new.is_empty() {
                causes.push(invalid_shown(
                    "spec.clusterIPs[0]",
                    &shown,
                    "primary clusterIP can not be unset",
                ));
            } else if new[0] != old[0] {
                changed(causes, 0);
            }
            if new.len() == 1 {
                single_stack(after, "clusterIP", causes);
            }
        }
        std::cmp::Ordering::Less => {
            if !old.is_empty() && new[0] != old[0] {
                changed(causes, 0);
            }
        }
    }
}

/// Upstream's `validateUpgradeDowngradeIPFamilies` (which reports at
/// `ipFamilies[0]` whatever changed, and shows the cluster IPs for some).
fn ip_families(after: Spec<'_>, before: Spec<'_>, causes: &mut Vec<Cause>) {
    if after.kind() == "ExternalName" || before.kind() == "ExternalName" {
        return;
    }
    if after.headless() || before.headless() {
        return;
    }
    let (old, new) = (before.strings("ipFamilies"), after.strings("ipFamilies"));
    let families = go_list("core.IPFamily", &new);
    let ips = go_list("string", &after.cluster_ips());
    let field = "spec.ipFamilies[0]";
    match old.len().cmp(&new.len()) {
        std::cmp::Ordering::Equal => {
            for _ in (0..old.len()).filter(|i| old[*i] != new[*i]) {
                causes.push(invalid_shown(field, &families, UNCHANGEABLE));
            }
        }
        std::cmp::Ordering::Greater => {
            if after.cluster_ips().is_empty() {
                causes.push(invalid_shown(
                    field,
                    &families,
                    "primary ipFamily can not be unset",
                ));
            }
            if !new.is_empty() && new[0] != old[0] {
                causes.push(invalid_shown(field, &ips, UNCHANGEABLE));
            }
            if new.len() == 1 {
                single_stack(after, "ipFamily", causes);
            }
        }
        std::cmp::Ordering::Less => {
            if !old.is_empty() && !new.is_empty() && new[0] != old[0] {
                causes.push(invalid_shown(field, &ips, UNCHANGEABLE));
            }
        }
    }
}

/// Releasing a secondary address or family asks for policy SingleStack.
fn single_stack(after: Spec<'_>, what: &str, causes: &mut Vec<Cause>) {
    let policy = after.value("ipFamilyPolicy");
    if policy.and_then(Value::as_str) != Some("SingleStack") {
        let why = format!("must be set to 'SingleStack' when releasing the secondary {what}");
        causes.push(match policy {
            Some(policy) => Cause::invalid("spec.ipFamilyPolicy", policy, &why),
            None => invalid_shown("spec.ipFamilyPolicy", "null", &why),
        });
    }
}
