//! LimitRanges and ResourceQuotas as upstream's `ValidateLimitRange` and
//! `ValidateResourceQuota` check them: resource names, non-negative
//! (and, for counts, whole) quantities, the order of a limit's min,
//! default request, default and max, and the scopes a quota may name.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::Cause;
use crate::quantity::Quantity;

/// Quota resources upstream names without a domain
/// (`IsStandardQuotaResourceName`).
const STANDARD_QUOTA_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.storage",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "persistentvolumeclaims",
    "configmaps",
    "services.nodeports",
    "services.loadbalancers",
];

/// Quota resources counted in whole objects (`IsIntegerResourceName`).
const INTEGER_RESOURCES: &[&str] = &[
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "persistentvolumeclaims",
    "configmaps",
    "services.nodeports",
    "services.loadbalancers",
];

const SCOPES: &[&str] = &[
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
];

/// Container resources upstream names without a domain.
const STANDARD_CONTAINER_RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage"];

fn quantities(object: &Value, pointer: &str) -> Vec<(String, Value, Option<Quantity>)> {
    object
        .pointer(pointer)
        .and_then(Value::as_object)
        .map(|map| {
            map.iter()
                .map(|(name, value)| {
                    let parsed = value.as_str().and_then(|s| Quantity::parse(s).ok());
                    (name.clone(), value.clone(), parsed)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A resource name: qualified, and standard when it names no domain
/// (upstream's `validateResourceName`, with the standard set given).
fn resource_name(name: &str, field: &str, standard: &[&str], what: &str, out: &mut Vec<Cause>) {
    if let Err(why) = super::qualified_name(name) {
        out.push(Cause::invalid(field, &json!(name), &why));
        return;
    }
    if !name.contains('/') && !standard.contains(&name) && !name.starts_with("hugepages-") {
        out.push(Cause::invalid(field, &json!(name), what));
    }
}

fn non_negative(field: &str, value: &Value, quantity: Option<&Quantity>, out: &mut Vec<Cause>) {
    if quantity.is_some_and(Quantity::is_negative) {
        out.push(Cause::invalid(
            field,
            value,
            "must be greater than or equal to 0",
        ));
    }
}

fn is_standard_quota_resource(name: &str) -> bool {
    STANDARD_QUOTA_RESOURCES.contains(&name)
        || name.starts_with("hugepages-")
        || name.starts_with("requests.hugepages-")
}

/// A ResourceList of a quota (`spec.hard`, `status.hard`, `status.used`).
fn quota_list(object: &Value, pointer: &str, field: &str, out: &mut Vec<Cause>) {
    for (name, value, quantity) in quantities(object, pointer) {
        let at = format!("{field}[{name}]");
        if let Err(why) = super::qualified_name(&name) {
            out.push(Cause::invalid(&at, &json!(name), &why));
        } else if !name.contains('/') && !is_standard_quota_resource(&name) {
            out.push(Cause::invalid(
                &at,
                &json!(name),
                "must be a standard resource for quota",
            ));
        }
        non_negative(&at, &value, quantity.as_ref(), out);
        let whole = name.starts_with("count/") || INTEGER_RESOURCES.contains(&name.as_str());
        if whole && quantity.is_some_and(|q| q.milli_value() % 1000 != 0) {
            out.push(Cause::invalid(&at, &value, "must be an integer"));
        }
    }
}

/// Whether `scope` may limit the standard resource `resource`
/// (`IsResourceQuotaScopeValidForResource`).
fn scope_fits(scope: &str, resource: &str) -> bool {
    const COMPUTE: &[&str] = &[
        "pods",
        "cpu",
        "memory",
        "limits.cpu",
        "limits.memory",
        "requests.cpu",
        "requests.memory",
    ];
    match scope {
        "BestEffort" => resource == "pods",
        "Terminating"
        | "NotTerminating"
        | "NotBestEffort"
        | "PriorityClass"
        | "CrossNamespacePodAffinity" => COMPUTE.contains(&resource),
        _ => true,
    }
}

fn conflicting(scopes: &BTreeSet<&str>) -> bool {
    [
        ("BestEffort", "NotBestEffort"),
        ("Terminating", "NotTerminating"),
    ]
    .iter()
    .any(|(a, b)| scopes.contains(a) && scopes.contains(b))
}

pub(crate) fn resource_quota(object: &Value, out: &mut Vec<Cause>) {
    quota_list(object, "/spec/hard", "spec.hard", out);
    quota_list(object, "/status/hard", "status.hard", out);
    quota_list(object, "/status/used", "status.used", out);
    let hard: Vec<String> = quantities(object, "/spec/hard")
        .into_iter()
        .map(|(name, ..)| name)
        .collect();
    let unfit = |scope: &str| {
        hard.iter()
            .any(|r| is_standard_quota_resource(r) && !scope_fits(scope, r))
    };
    if let Some(scopes) = object.pointer("/spec/scopes").and_then(Value::as_array) {
        let value = Value::Array(scopes.clone());
        let names: BTreeSet<&str> = scopes.iter().filter_map(Value::as_str).collect();
        for scope in &names {
            if !SCOPES.contains(scope) {
                out.push(Cause::invalid("spec.scopes", &value, "unsupported scope"));
            }
            if unfit(scope) {
                out.push(Cause::invalid(
                    "spec.scopes",
                    &value,
                    "unsupported scope applied to resource",
                ));
            }
        }
        if conflicting(&names) {
            out.push(Cause::invalid("spec.scopes", &value, "conflicting scopes"));
        }
    }
    let Some(expressions) = object
        .pointer("/spec/scopeSelector/matchExpressions")
        .and_then(Value::as_array)
    else {
        return;
    };
    let field = "spec.scopeSelector.matchExpressions";
    let mut names = BTreeSet::new();
    for e in expressions {
        let scope = e.get("scopeName").and_then(Value::as_str).unwrap_or("");
        let operator = e.get("operator").and_then(Value::as_str).unwrap_or("");
        let values = e
            .get("values")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        if !SCOPES.contains(&scope) {
            out.push(Cause::invalid(
                format!("{field}.scopeName"),
                &json!(scope),
                "unsupported scope",
            ));
        }
        if unfit(scope) {
            let selector = object
                .pointer("/spec/scopeSelector")
                .cloned()
                .unwrap_or_default();
            out.push(Cause::invalid(
                field,
                &selector,
                "unsupported scope applied to resource",
            ));
        }
        if scope != "PriorityClass" && SCOPES.contains(&scope) && operator != "Exists" {
            out.push(Cause::invalid(format!("{field}.operator"), &json!(operator), "must be 'Exist' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity"));
        }
        match operator {
            "In" | "NotIn" if values == 0 => out.push(Cause::new(
                "FieldValueRequired",
                format!("{field}.values"),
                "Required value: must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
            )),
            "Exists" | "DoesNotExist" if values != 0 => out.push(Cause::invalid(
                format!("{field}.values"),
                e.get("values").unwrap_or(&Value::Null),
                "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            _ => out.push(Cause::invalid(
                format!("{field}.operator"),
                &json!(operator),
                "not a valid selector operator",
            )),
        }
        names.insert(scope);
    }
    if conflicting(&names) {
        let scopes = object
            .pointer("/spec/scopes")
            .cloned()
            .unwrap_or(Value::Null);
        out.push(Cause::invalid(field, &scopes, "conflicting scopes"));
    }
}

pub(crate) fn limit_range(object: &Value, out: &mut Vec<Cause>) {
    let Some(limits) = object.pointer("/spec/limits").and_then(Value::as_array) else {
        return;
    };
    let mut types = BTreeSet::new();
    for (i, limit) in limits.iter().enumerate() {
        let at = format!("spec.limits[{i}]");
        let kind = limit.get("type").and_then(Value::as_str).unwrap_or("");
        match super::qualified_name(kind) {
            Err(why) => out.push(Cause::invalid(format!("{at}.type"), &json!(kind), &why)),
            Ok(())
                if !kind.contains('/')
                    && !matches!(kind, "Pod" | "Container" | "PersistentVolumeClaim") =>
            {
                out.push(Cause::invalid(
                    format!("{at}.type"),
                    &json!(kind),
                    "must be a standard limit type or fully qualified",
                ));
            }
            Ok(()) => {}
        }
        if !types.insert(kind) {
            out.push(Cause::duplicate(format!("{at}.type"), &json!(kind)));
        }
        let compute = matches!(kind, "Pod" | "Container");
        let mut parts = vec!["max", "min", "maxLimitRequestRatio"];
        if kind == "Pod" {
            for part in ["default", "defaultRequest"] {
                if limit
                    .get(part)
                    .and_then(Value::as_object)
                    .is_some_and(|m| !m.is_empty())
                {
                    out.push(Cause::forbidden(
                        format!("{at}.{part}"),
                        "may not be specified when `type` is 'Pod'",
                    ));
                }
            }
        } else {
            parts.extend(["default", "defaultRequest"]);
        }
        let mut keys = BTreeSet::new();
        for part in &parts {
            for (name, _, _) in quantities(limit, &format!("/{part}")) {
                let field = format!("{at}.{part}[{name}]");
                if compute {
                    resource_name(
                        &name,
                        &field,
                        STANDARD_CONTAINER_RESOURCES,
                        "must be a standard resource for containers",
                        out,
                    );
                } else {
                    resource_name(
                        &name,
                        &field,
                        &["storage", "cpu", "memory", "ephemeral-storage"],
                        "must be a standard resource type or fully qualified",
                        out,
                    );
                }
                keys.insert(name);
            }
        }
        if kind == "PersistentVolumeClaim"
            && limit.pointer("/min/storage").is_none()
            && limit.pointer("/max/storage").is_none()
        {
            out.push(Cause::new(
                "FieldValueRequired",
                format!("{at}.limits"),
                "Required value: either minimum or maximum storage value is required, but neither was provided",
            ));
        }
        for key in &keys {
            let get = |part: &str| {
                limit
                    .get(part)
                    .and_then(|m| m.get(key))
                    .and_then(Value::as_str)
                    .and_then(|s| Quantity::parse(s).ok())
            };
            let (min, max, default) = (get("min"), get("max"), get("default"));
            let (request, ratio) = (get("defaultRequest"), get("maxLimitRequestRatio"));
            let mut bad = |part: &str, shown: Quantity, why: String| {
                out.push(Cause::invalid(
                    format!("{at}.{part}[{key}]"),
                    &json!(shown.canonical()),
                    &why,
                ));
            };
            // Each pair that must be ordered: the field the cause names,
            // which side it shows (as upstream), and the words for each.
            let pairs = [
                (min, max, "min", true, "min", "max"),
                (
                    min,
                    request,
                    "defaultRequest",
                    false,
                    "min",
                    "default request",
                ),
                (
                    request,
                    max,
                    "defaultRequest",
                    true,
                    "default request",
                    "max",
                ),
                (
                    request,
                    default,
                    "defaultRequest",
                    true,
                    "default request",
                    "default limit",
                ),
                (min, default, "default", true, "min", "default"),
                (default, max, "default", false, "default", "max"),
            ];
            for (low, high, part, show_low, low_name, high_name) in pairs {
                if let (Some(a), Some(b)) = (low, high)
                    && a.cmp_value(&b).is_gt()
                {
                    let shown = if show_low { a } else { b };
                    bad(
                        part,
                        shown,
                        format!("{low_name} value {a} is greater than {high_name} value {b}"),
                    );
                }
            }
            if let Some(r) = ratio
                && r.cmp_value(&Quantity::from_int(1)).is_lt()
            {
                bad(
                    "maxLimitRequestRatio",
                    r,
                    format!("ratio {r} is less than 1"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn causes(f: fn(&Value, &mut Vec<Cause>), object: Value) -> Vec<String> {
        let mut out = Vec::new();
        f(&object, &mut out);
        out.into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn limit_ranges_keep_their_bounds_in_order() {
        let lr = json!({"spec": {"limits": [{
            "type": "Container",
            "min": {"cpu": "500m"},
            "max": {"cpu": "200m"},
            "defaultRequest": {"cpu": "100m"},
            "maxLimitRequestRatio": {"cpu": "500m"},
        }]}});
        assert_eq!(
            causes(limit_range, lr),
            [
                "spec.limits[0].min[cpu]: Invalid value: \"500m\": min value 500m is greater than max value 200m",
                "spec.limits[0].defaultRequest[cpu]: Invalid value: \"100m\": min value 500m is greater than default request value 100m",
                "spec.limits[0].maxLimitRequestRatio[cpu]: Invalid value: \"500m\": ratio 500m is less than 1",
            ]
        );
        let pod_defaults = json!({"spec": {"limits": [
            {"type": "Pod", "default": {"cpu": "1"}},
            {"type": "Pod", "max": {"cpu": "1"}},
            {"type": "Thing"},
            {"type": "PersistentVolumeClaim"},
        ]}});
        let found = causes(limit_range, pod_defaults);
        assert!(
            found.contains(
                &"spec.limits[0].default: Forbidden: may not be specified when `type` is 'Pod'"
                    .to_string()
            ),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|c| c.starts_with("spec.limits[1].type: Duplicate value"))
        );
        assert!(
            found
                .iter()
                .any(|c| c.contains("must be a standard limit type"))
        );
        assert!(
            found
                .iter()
                .any(|c| c.contains("either minimum or maximum storage"))
        );
    }

    #[test]
    fn quotas_name_standard_resources_in_fitting_scopes() {
        let good = json!({"spec": {"hard": {"pods": "2", "requests.cpu": "1", "count/deployments.apps": "3"}}});
        assert!(causes(resource_quota, good).is_empty());
        let bad = json!({"spec": {
            "hard": {"pods": "1500m", "widgets": "1", "cpu": "-1"},
            "scopes": ["BestEffort", "NotBestEffort"],
        }});
        let found = causes(resource_quota, bad);
        assert!(
            found.contains(
                &"spec.hard[pods]: Invalid value: \"1500m\": must be an integer".to_string()
            ),
            "{found:?}"
        );
        assert!(found.iter().any(|c| c.contains("spec.hard[widgets]")
            && c.contains("must be a standard resource for quota")));
        assert!(
            found
                .iter()
                .any(|c| c.contains("spec.hard[cpu]") && c.contains("greater than or equal to 0"))
        );
        assert!(
            found
                .iter()
                .any(|c| c.contains("unsupported scope applied to resource"))
        );
        assert!(found.iter().any(|c| c.contains("conflicting scopes")));
        let selector = json!({"spec": {"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In"},
        ]}}});
        assert_eq!(causes(resource_quota, selector).len(), 1);
    }
}
