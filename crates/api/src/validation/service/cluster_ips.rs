//! Upstream's `ValidateServiceClusterIPsRelatedFields`: `clusterIP` and
//! `clusterIPs` agree, each is an address (or the one `None`), at most one
//! per family and two in all, each of the family `ipFamilies` names; the
//! families and the family policy are supported values. ExternalName
//! Services have none of these (`mod.rs` refuses them).

use std::collections::HashSet;
use std::net::IpAddr;

use serde_json::json;

use super::{Spec, go_list, invalid_shown};
use crate::Cause;
use crate::validation::{net, one_of};

const FAMILIES: &[&str] = &["IPv4", "IPv6"];
const POLICIES: &[&str] = &["PreferDualStack", "RequireDualStack", "SingleStack"];

pub(super) fn related_fields(spec: Spec<'_>, causes: &mut Vec<Cause>) {
    if spec.kind() == "ExternalName" {
        return;
    }
    let ips = spec.cluster_ips();
    let shown = go_list("string", &ips);
    let cluster_ip = spec.text("clusterIP");
    if !cluster_ip.is_empty() {
        if ips.first() != Some(&cluster_ip) {
            causes.push(invalid_shown(
                "spec.clusterIPs",
                &shown,
                "first value must match `clusterIP`",
            ));
        }
    } else if !ips.is_empty() {
        causes.push(invalid_shown(
            "spec.clusterIPs",
            &shown,
            "must be empty when `clusterIP` is not specified",
        ));
    }
    let families = spec.strings("ipFamilies");
    let mut seen = HashSet::new();
    for (i, family) in families.iter().enumerate() {
        let field = format!("spec.ipFamilies[{i}]");
        if !FAMILIES.contains(family) {
            causes.push(Cause::not_supported(
                field.as_str(),
                &json!(family),
                FAMILIES,
            ));
        }
        if !seen.insert(family) {
            causes.push(Cause::duplicate(field, &json!(family)));
        }
    }
    one_of(
        spec.value("ipFamilyPolicy"),
        "spec.ipFamilyPolicy",
        POLICIES,
        causes,
    );
    let mut invalid = false;
    for (i, ip) in ips.iter().enumerate() {
        if i == 0 && *ip == "None" {
            if ips.len() > 1 {
                invalid = true;
                causes.push(invalid_shown(
                    "spec.clusterIPs",
                    &shown,
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        if let Some(cause) = net::valid_ip(format!("spec.clusterIPs[{i}]"), ip) {
            invalid = true;
            causes.push(cause);
        }
    }
    if ips.len() > 2 {
        causes.push(invalid_shown(
            "spec.clusterIPs",
            &shown,
            "may only hold up to 2 values",
        ));
    }
    // A bad address would skew what follows.
    if invalid {
        return;
    }
    // IPv6 as Go counts it: an IPv4-mapped address is IPv4.
    let v6: Vec<bool> = ips
        .iter()
        .map(|ip| match net::parse_ip(ip) {
            Some(IpAddr::V6(v6)) => v6.to_ipv4_mapped().is_none(),
            _ => false,
        })
        .collect();
    if ips.len() > 1 {
        let has = |family: bool| v6.contains(&family);
        if !(has(false) && has(true)) {
            causes.push(invalid_shown(
                "spec.clusterIPs",
                &shown,
                "may specify no more than one IP for each IP family",
            ));
        }
    }
    if spec.headless() {
        return;
    }
    for (i, (ip, family)) in ips.iter().zip(&families).enumerate() {
        let wanted = match *family {
            "IPv4" if v6[i] => "IPv4",
            "IPv6" if !v6[i] => "IPv6",
            _ => continue,
        };
        causes.push(Cause::invalid(
            format!("spec.clusterIPs[{i}]"),
            &json!(ip),
            &format!("expected an {wanted} value as indicated by `ipFamilies[{i}]`"),
        ));
    }
}
