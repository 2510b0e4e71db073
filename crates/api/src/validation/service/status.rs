//! Upstream's `ValidateLoadBalancerStatus`: ingress only for LoadBalancer
//! Services, each with a valid address or DNS name and a supported
//! `ipMode` beside an address. It is checked on every write: a create
//! drops the status, a spec update keeps the stored one (or clears it with
//! the type, `update.rs`), so in effect it judges what `services/status`
//! writes. An ingress address without `ipMode` is what upstream's
//! defaults make VIP, so it is not asked for.

use serde_json::{Value, json};

use super::Spec;
use crate::Cause;
use crate::validation::{dns1123_subdomain, net, one_of};

pub(super) fn load_balancer(object: &Value, spec: Spec<'_>, causes: &mut Vec<Cause>) {
    let ingress = object
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let path = "status.loadBalancer.ingress";
    if spec.kind() != "LoadBalancer" && !ingress.is_empty() {
        causes.push(Cause::forbidden(
            path,
            "may only be used when `spec.type` is 'LoadBalancer'",
        ));
        return;
    }
    for (i, entry) in ingress.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let text = |key: &str| entry.get(key).and_then(Value::as_str).unwrap_or_default();
        let ip = text("ip");
        if !ip.is_empty() {
            causes.extend(net::valid_ip(format!("{at}.ip"), ip));
        }
        let mode = entry.get("ipMode").filter(|m| !m.is_null());
        if mode.is_some() && ip.is_empty() {
            causes.push(Cause::forbidden(
                format!("{at}.ipMode"),
                "may not be specified when `ip` is not set",
            ));
        } else {
            one_of(mode, format!("{at}.ipMode"), &["Proxy", "VIP"], causes);
        }
        let hostname = text("hostname");
        if !hostname.is_empty() {
            if let Err(why) = dns1123_subdomain(hostname) {
                causes.push(Cause::invalid(
                    format!("{at}.hostname"),
                    &json!(hostname),
                    &why,
                ));
            }
            if net::parse_ip(hostname).is_some() {
                causes.push(Cause::invalid(
                    format!("{at}.hostname"),
                    &json!(hostname),
                    "must be a DNS name, not an IP address",
                ));
            }
        }
    }
}
