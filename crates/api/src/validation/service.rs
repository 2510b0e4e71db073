//! What upstream's `ValidateService` requires of a Service: a supported
//! type, an external name for `ExternalName`, and ports (unless headless) in
//! range, named when there are several, each name once.

use serde_json::{Value, json};

use crate::Cause;

/// Appends the causes a Service has.
pub fn service(object: &Value, causes: &mut Vec<Cause>) {
    let kind = object
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    if !matches!(
        kind,
        "ClusterIP" | "NodePort" | "LoadBalancer" | "ExternalName"
    ) {
        let value = object.pointer("/spec/type").cloned().unwrap_or(Value::Null);
        causes.push(Cause::not_supported(
            "spec.type",
            &value,
            &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
        ));
        return;
    }
    if kind == "ExternalName" {
        if object
            .pointer("/spec/externalName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push(Cause::required("spec.externalName"));
        }
        return;
    }
    let headless = object.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None");
    let ports = object
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if ports.is_empty() && !headless {
        causes.push(Cause::required("spec.ports"));
    }
    let mut names = std::collections::HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        match port.get("port").and_then(Value::as_i64) {
            Some(p) if (1..=65535).contains(&p) => {}
            Some(p) => causes.push(Cause::invalid(
                format!("spec.ports[{i}].port"),
                &json!(p),
                "must be between 1 and 65535, inclusive",
            )),
            None => causes.push(Cause::required(format!("spec.ports[{i}].port"))),
        }
        let name = port.get("name").and_then(Value::as_str).unwrap_or_default();
        if ports.len() > 1 && name.is_empty() {
            causes.push(Cause::required(format!("spec.ports[{i}].name")));
        } else if !name.is_empty() && !names.insert(name.to_string()) {
            causes.push(Cause::duplicate(
                format!("spec.ports[{i}].name"),
                &json!(name),
            ));
        }
    }
}
