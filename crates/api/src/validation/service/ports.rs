//! A Service's ports, as upstream's `validateServicePort` and the port
//! checks of `ValidateService`: names (DNS-1123 labels, required when there
//! are several, each once), numbers, protocols, target ports (a number or
//! an IANA service name), app protocols; node ports only where a type uses
//! them, and no two ports alike.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::Spec;
use crate::Cause;
use crate::validation::{dns1123_label_errors, one_of, port_name_errors, qualified_name};

const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";

/// What each port must be.
pub(super) fn each(spec: Spec<'_>, causes: &mut Vec<Cause>) {
    let ports = spec.ports();
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        let name = text(port, "name");
        if ports.len() > 1 && name.is_empty() {
            causes.push(Cause::required(format!("{at}.name")));
        } else if !name.is_empty() {
            for why in dns1123_label_errors(name) {
                causes.push(Cause::invalid(format!("{at}.name"), &json!(name), &why));
            }
            if !names.insert(name) {
                causes.push(Cause::duplicate(format!("{at}.name"), &json!(name)));
            }
        }
        let number = number(port, "port");
        if !(1..=65535).contains(&number) {
            let shown = match port.get("port") {
                Some(value) if !value.is_null() => value.clone(),
                _ => json!(0),
            };
            causes.push(Cause::invalid(format!("{at}.port"), &shown, PORT_RANGE));
        }
        one_of(
            port.get("protocol").filter(|p| p.as_str() != Some("")),
            format!("{at}.protocol"),
            &["SCTP", "TCP", "UDP"],
            causes,
        );
        target_port(port, number, &format!("{at}.targetPort"), causes);
        if let Some(app) = port.get("appProtocol").filter(|v| !v.is_null())
            && let Err(why) = qualified_name(app.as_str().unwrap_or_default())
        {
            causes.push(Cause::invalid(format!("{at}.appProtocol"), app, &why));
        }
    }
}

/// A number in range or an IANA service name; unset, 0 or `""` is the
/// port's own number (upstream's default).
fn target_port(port: &Value, number: i64, at: &str, causes: &mut Vec<Cause>) {
    match port.get("targetPort") {
        Some(Value::String(name)) if !name.is_empty() => {
            for why in port_name_errors(name) {
                causes.push(Cause::invalid(at, &json!(name), why));
            }
        }
        Some(Value::Number(n)) if n.as_i64() != Some(0) => {
            if !n.as_i64().is_some_and(|n| (1..=65535).contains(&n)) {
                causes.push(Cause::invalid(at, &json!(n), PORT_RANGE));
            }
        }
        _ => {
            if !(1..=65535).contains(&number) {
                causes.push(Cause::invalid(at, &json!(number), PORT_RANGE));
            }
        }
    }
}

/// Node ports only for the types that use them, each (with its protocol)
/// once; and each port number (with its protocol) once, reported as Go
/// prints the `ServicePort` upstream keys them by.
pub(super) fn node_ports_and_duplicates(spec: Spec<'_>, causes: &mut Vec<Cause>) {
    let ports = spec.ports();
    if spec.kind() == "ClusterIP" {
        for (i, port) in ports.iter().enumerate() {
            if number(port, "nodePort") != 0 {
                causes.push(Cause::forbidden(
                    format!("spec.ports[{i}].nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }
    let mut node_ports = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let node_port = number(port, "nodePort");
        if node_port != 0 && !node_ports.insert((protocol(port), node_port)) {
            causes.push(Cause::duplicate(
                format!("spec.ports[{i}].nodePort"),
                &json!(node_port),
            ));
        }
    }
    let mut seen = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let key = (protocol(port), number(port, "port"));
        if !seen.insert(key) {
            let (protocol, number) = key;
            causes.push(Cause::new(
                "FieldValueDuplicate",
                format!("spec.ports[{i}]"),
                format!(
                    "Duplicate value: core.ServicePort{{Name:\"\", Protocol:{protocol:?}, AppProtocol:(*string)(nil), Port:{number}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, NodePort:0}}"
                ),
            ));
        }
    }
}

fn text<'a>(port: &'a Value, key: &str) -> &'a str {
    port.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// A port's protocol, TCP when unset or empty (upstream's default).
fn protocol(port: &Value) -> &str {
    match port.get("protocol") {
        None | Some(Value::Null) => "TCP",
        Some(Value::String(p)) if p.is_empty() => "TCP",
        Some(other) => other.as_str().unwrap_or_default(),
    }
}

fn number(port: &Value, key: &str) -> i64 {
    port.get(key).and_then(Value::as_i64).unwrap_or(0)
}
