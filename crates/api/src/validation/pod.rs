//! What upstream's `ValidatePodSpec` requires of a pod spec — a Pod's or a
//! controller's template's: containers with names and images, one source
//! per volume, mounts of volumes that exist, ports, environment variables,
//! probes, pull, DNS and restart policies, and requests within limits —
//! with upstream's field paths and words.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::Cause;
use crate::quantity::Quantity;

/// The fields of a `Volume` that are not its source.
const NOT_SOURCES: &[&str] = &["name"];

const PROBE_HANDLERS: &[&str] = &["exec", "httpGet", "tcpSocket", "grpc"];

/// A pod spec (at `path`), absent (`None`) or not.
pub fn spec(spec: Option<&Value>, path: &str, causes: &mut Vec<Cause>) {
    let Some(spec) = spec else {
        causes.push(Cause::required(path));
        return;
    };
    match spec.get("containers").and_then(Value::as_array) {
        None => causes.push(Cause::required(format!("{path}.containers"))),
        Some(containers) if containers.is_empty() => {
            causes.push(Cause::required(format!("{path}.containers")))
        }
        Some(containers) => {
            let volumes = volumes(spec, path, causes);
            let mut names = HashSet::new();
            let init = spec.get("initContainers").and_then(Value::as_array);
            for (i, c) in init.into_iter().flatten().enumerate() {
                let at = format!("{path}.initContainers[{i}]");
                container(c, &at, &volumes, causes);
            }
            for (i, c) in containers.iter().enumerate() {
                let at = format!("{path}.containers[{i}]");
                unique_name(c, &at, &mut names, causes);
                if c.get("image")
                    .and_then(Value::as_str)
                    .is_none_or(|i| i.trim().is_empty())
                {
                    causes.push(Cause::required(format!("{at}.image")));
                }
                container(c, &at, &volumes, causes);
            }
        }
    }
    super::one_of(
        spec.get("restartPolicy"),
        format!("{path}.restartPolicy"),
        &["Always", "OnFailure", "Never"],
        causes,
    );
}

/// The spec's volumes (at `path`.volumes); the names of those declared.
fn volumes(spec: &Value, path: &str, causes: &mut Vec<Cause>) -> HashSet<String> {
    let mut names = HashSet::new();
    let list = spec.get("volumes").and_then(Value::as_array);
    for (i, volume) in list.into_iter().flatten().enumerate() {
        let at = format!("{path}.volumes[{i}]");
        unique_name(volume, &at, &mut names, causes);
        let sources: Vec<&str> = volume
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, v)| !v.is_null() && !NOT_SOURCES.contains(&k.as_str()))
            .map(|(k, _)| k.as_str())
            .collect();
        exactly_one(&sources, &at, "volume type", causes);
    }
    super::one_of(
        spec.get("dnsPolicy"),
        format!("{path}.dnsPolicy"),
        &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"],
        causes,
    );
    names
}

/// The `name` of a volume or container (at `at`): present, a DNS label,
/// not among `names` seen before.
fn unique_name(object: &Value, at: &str, names: &mut HashSet<String>, causes: &mut Vec<Cause>) {
    match object.get("name").and_then(Value::as_str) {
        None | Some("") => causes.push(Cause::required(format!("{at}.name"))),
        Some(name) => {
            if let Err(why) = super::dns1123_label(name) {
                causes.push(Cause::invalid(format!("{at}.name"), &json!(name), &why));
            } else if !names.insert(name.to_string()) {
                causes.push(Cause::duplicate(format!("{at}.name"), &json!(name)));
            }
        }
    }
}

/// Exactly one of the alternatives `set` (the fields of the object at `at`
/// that are set: a volume's sources, a probe's handlers) — upstream's
/// "must specify a <what>" and "may not specify more than 1 <what>".
fn exactly_one(set: &[&str], at: &str, what: &str, causes: &mut Vec<Cause>) {
    match set {
        [] => causes.push(Cause::new(
            "FieldValueRequired",
            at,
            format!("Required value: must specify a {what}"),
        )),
        [_] => {}
        [_, second, ..] => causes.push(Cause::forbidden(
            format!("{at}.{second}"),
            &format!("may not specify more than 1 {what}"),
        )),
    }
}

/// One container (at `at`) of a spec whose volumes are `volumes`.
fn container(container: &Value, at: &str, volumes: &HashSet<String>, causes: &mut Vec<Cause>) {
    mounts(container, at, volumes, causes);
    ports(container, at, causes);
    env(container, at, causes);
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = container.get(probe).filter(|p| p.is_object()) {
            let handlers: Vec<&str> = PROBE_HANDLERS
                .iter()
                .copied()
                .filter(|h| p.get(*h).is_some_and(|v| !v.is_null()))
                .collect();
            exactly_one(&handlers, &format!("{at}.{probe}"), "handler type", causes);
        }
    }
    super::one_of(
        container.get("imagePullPolicy"),
        format!("{at}.imagePullPolicy"),
        &["Always", "IfNotPresent", "Never"],
        causes,
    );
    resources(container, at, causes);
}

fn mounts(container: &Value, at: &str, volumes: &HashSet<String>, causes: &mut Vec<Cause>) {
    let mut paths = HashSet::new();
    let list = container.get("volumeMounts").and_then(Value::as_array);
    for (i, mount) in list.into_iter().flatten().enumerate() {
        let at = format!("{at}.volumeMounts[{i}]");
        match mount.get("name").and_then(Value::as_str) {
            None | Some("") => causes.push(Cause::required(format!("{at}.name"))),
            Some(name) if !volumes.contains(name) => causes.push(Cause::new(
                "FieldValueNotFound",
                format!("{at}.name"),
                format!("Not found: {name:?}"),
            )),
            Some(_) => {}
        }
        match mount.get("mountPath").and_then(Value::as_str) {
            None | Some("") => causes.push(Cause::required(format!("{at}.mountPath"))),
            Some(path) if !paths.insert(path.to_string()) => causes.push(Cause::invalid(
                format!("{at}.mountPath"),
                &json!(path),
                "must be unique",
            )),
            Some(_) => {}
        }
    }
}

fn ports(container: &Value, at: &str, causes: &mut Vec<Cause>) {
    let mut names = HashSet::new();
    let list = container.get("ports").and_then(Value::as_array);
    for (i, port) in list.into_iter().flatten().enumerate() {
        let at = format!("{at}.ports[{i}]");
        match port.get("containerPort").and_then(Value::as_i64) {
            None | Some(0) => causes.push(Cause::required(format!("{at}.containerPort"))),
            Some(p) if !(1..=65535).contains(&p) => causes.push(Cause::invalid(
                format!("{at}.containerPort"),
                &json!(p),
                "must be between 1 and 65535, inclusive",
            )),
            Some(_) => {}
        }
        super::one_of(
            port.get("protocol"),
            format!("{at}.protocol"),
            &["SCTP", "TCP", "UDP"],
            causes,
        );
        if let Some(name) = port
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            if let Err(why) = service_port_name(name) {
                causes.push(Cause::invalid(format!("{at}.name"), &json!(name), &why));
            } else if !names.insert(name.to_string()) {
                causes.push(Cause::duplicate(format!("{at}.name"), &json!(name)));
            }
        }
    }
}

/// Upstream's `IsValidPortName` (an IANA service name).
fn service_port_name(name: &str) -> Result<(), String> {
    let problems = super::port_name_errors(name);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join(", "))
    }
}

fn env(container: &Value, at: &str, causes: &mut Vec<Cause>) {
    let list = container.get("env").and_then(Value::as_array);
    for (i, var) in list.into_iter().flatten().enumerate() {
        let at = format!("{at}.env[{i}]");
        if var
            .get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push(Cause::required(format!("{at}.name")));
        }
        let has_value = var
            .get("value")
            .and_then(Value::as_str)
            .is_some_and(|v| !v.is_empty());
        if has_value && var.get("valueFrom").is_some_and(|v| !v.is_null()) {
            causes.push(Cause::invalid(
                format!("{at}.valueFrom"),
                &json!(""),
                "may not be specified when `value` is not empty",
            ));
        }
    }
}

/// Requests and limits: none below zero, no request above its limit.
fn resources(container: &Value, at: &str, causes: &mut Vec<Cause>) {
    let parsed = |field: &str| -> Vec<(String, Quantity)> {
        let map = container.pointer(&format!("/resources/{field}"));
        map.and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(name, q)| Some((name.clone(), Quantity::parse(q.as_str()?).ok()?)))
            .collect()
    };
    let (requests, limits) = (parsed("requests"), parsed("limits"));
    for (field, list) in [("requests", &requests), ("limits", &limits)] {
        for (name, q) in list.iter().filter(|(_, q)| q.is_negative()) {
            let path = format!("{at}.resources.{field}[{name}]");
            let value = json!(q.canonical());
            causes.push(Cause::invalid(
                path,
                &value,
                "must be greater than or equal to 0",
            ));
        }
    }
    for (name, request) in &requests {
        if let Some((_, limit)) = limits.iter().find(|(n, _)| n == name)
            && request.cmp_value(limit).is_gt()
        {
            let path = format!("{at}.resources.requests[{name}]");
            let why = format!(
                "must be less than or equal to {name} limit of {}",
                limit.canonical()
            );
            causes.push(Cause::invalid(path, &json!(request.canonical()), &why));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_causes(spec: Value) -> Vec<(String, String)> {
        let mut causes = Vec::new();
        let volumes = volumes(&spec, "spec", &mut causes);
        for (i, c) in spec["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            container(c, &format!("spec.containers[{i}]"), &volumes, &mut causes);
        }
        causes.into_iter().map(|c| (c.field, c.message)).collect()
    }

    #[test]
    fn volumes_mounts_ports_env_and_probes() {
        let found = spec_causes(json!({
            "volumes": [{"name": "data", "emptyDir": {}}, {"name": "both", "emptyDir": {}, "hostPath": {"path": "/x"}}, {"name": "none"}],
            "dnsPolicy": "Sometimes",
            "containers": [{
                "name": "c", "image": "i",
                "volumeMounts": [{"name": "data", "mountPath": "/d"}, {"name": "logs", "mountPath": "/d"}],
                "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 70000, "protocol": "ICMP", "name": "http"}],
                "env": [{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, {"value": "y"}],
                "livenessProbe": {"periodSeconds": 5},
                "imagePullPolicy": "Sometimes"
            }]
        }));
        let expected = [
            (
                "spec.volumes[1].hostPath",
                "Forbidden: may not specify more than 1 volume type",
            ),
            (
                "spec.volumes[2]",
                "Required value: must specify a volume type",
            ),
            (
                "spec.dnsPolicy",
                r#"Unsupported value: "Sometimes": supported values: "ClusterFirst", "ClusterFirstWithHostNet", "Default", "None""#,
            ),
            (
                "spec.containers[0].volumeMounts[1].name",
                r#"Not found: "logs""#,
            ),
            (
                "spec.containers[0].volumeMounts[1].mountPath",
                r#"Invalid value: "/d": must be unique"#,
            ),
            (
                "spec.containers[0].ports[1].containerPort",
                "Invalid value: 70000: must be between 1 and 65535, inclusive",
            ),
            (
                "spec.containers[0].ports[1].protocol",
                r#"Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP""#,
            ),
            (
                "spec.containers[0].ports[1].name",
                r#"Duplicate value: "http""#,
            ),
            (
                "spec.containers[0].env[0].valueFrom",
                r#"Invalid value: "": may not be specified when `value` is not empty"#,
            ),
            ("spec.containers[0].env[1].name", "Required value"),
            (
                "spec.containers[0].livenessProbe",
                "Required value: must specify a handler type",
            ),
            (
                "spec.containers[0].imagePullPolicy",
                r#"Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never""#,
            ),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(f, m)| (f.to_string(), m.to_string()))
            .collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn port_names_are_iana_service_names() {
        assert!(service_port_name("http-alt").is_ok());
        assert!(service_port_name("8080").is_err());
        assert!(service_port_name("a-very-long-port-name").is_err());
        assert!(service_port_name("Http").is_err());
    }
}
