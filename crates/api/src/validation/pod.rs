//! What upstream's `ValidatePodSpec` requires of a pod spec — a Pod's or a
//! controller's template's: containers with names and images, one source
//! per volume, mounts of volumes that exist, ports, environment variables,
//! probes, pull, DNS and restart policies, requests within limits, and
//! ephemeral containers that are debugging tools rather than workload —
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
            ephemeral_containers(spec, path, &volumes, causes);
        }
    }
    super::one_of(
        spec.get("restartPolicy"),
        format!("{path}.restartPolicy"),
        &["Always", "OnFailure", "Never"],
        causes,
    );
}

/// What an ephemeral container may not set (upstream's
/// `allowedEphemeralContainerFields` is the list of those it may), in the
/// order of the fields of `EphemeralContainerCommon`.
const NOT_FOR_EPHEMERAL: &[&str] = &[
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
];

const EPHEMERAL_ONLY: &str = "cannot be set for an Ephemeral Container";

/// The spec's ephemeral containers (upstream's `validateEphemeralContainers`
/// with `validateContainerOnlyForPod`): each a container with a name unique
/// among all the pod's containers, a `targetContainerName` that names a
/// container or init container, none of the fields that would make it part
/// of the workload, and no subPath mounts.
fn ephemeral_containers(
    spec: &Value,
    path: &str,
    volumes: &HashSet<String>,
    causes: &mut Vec<Cause>,
) {
    let list = spec.get("ephemeralContainers").and_then(Value::as_array);
    let Some(list) = list.filter(|l| !l.is_empty()) else {
        return;
    };
    let others: HashSet<String> = ["containers", "initContainers"]
        .into_iter()
        .filter_map(|l| spec.get(l).and_then(Value::as_array))
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .map(str::to_string)
        .collect();
    let mut names = others.clone();
    for (i, c) in list.iter().enumerate() {
        let at = format!("{path}.ephemeralContainers[{i}]");
        unique_name(c, &at, &mut names, causes);
        match c.get("image").and_then(Value::as_str) {
            None | Some("") => causes.push(Cause::required(format!("{at}.image"))),
            Some(image) if image.trim() != image => causes.push(Cause::invalid(
                format!("{at}.image"),
                &json!(image),
                "must not have leading or trailing whitespace",
            )),
            Some(_) => {}
        }
        container(c, &at, volumes, causes);
        if let Some(target) = c
            .get("targetContainerName")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty() && !others.contains(*t))
        {
            causes.push(Cause::new(
                "FieldValueNotFound",
                format!("{at}.targetContainerName"),
                format!("Not found: {target:?}"),
            ));
        }
        for field in NOT_FOR_EPHEMERAL {
            if is_set(c, field) {
                causes.push(Cause::forbidden(format!("{at}.{field}"), EPHEMERAL_ONLY));
            }
        }
        let mounts = c.get("volumeMounts").and_then(Value::as_array);
        for (j, mount) in mounts.into_iter().flatten().enumerate() {
            for field in ["subPath", "subPathExpr"] {
                if mount
                    .get(field)
                    .and_then(Value::as_str)
                    .is_some_and(|p| !p.is_empty())
                {
                    let field = format!("{at}.volumeMounts[{j}].{field}");
                    causes.push(Cause::forbidden(field, EPHEMERAL_ONLY));
                }
            }
        }
    }
}

/// Whether `field` of a container holds what Go would not see as its zero
/// value: anything but null, and for `resources` (a struct, not a pointer)
/// a member that is set.
fn is_set(container: &Value, field: &str) -> bool {
    match container.get(field) {
        None | Some(Value::Null) => false,
        Some(Value::Object(members)) if field == "resources" => {
            members.values().any(|v| !v.is_null())
        }
        Some(_) => true,
    }
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

    fn causes_of(spec_value: Value) -> Vec<(String, String)> {
        let mut causes = Vec::new();
        spec(Some(&spec_value), "spec", &mut causes);
        causes.into_iter().map(|c| (c.field, c.message)).collect()
    }

    #[test]
    fn an_ephemeral_container_is_a_tool_not_workload() {
        let base = json!({
            "volumes": [{"name": "data", "emptyDir": {}}],
            "initContainers": [{"name": "setup", "image": "i"}],
            "containers": [{"name": "app", "image": "i"}]
        });
        // What kubectl debug sends, defaulted: a struct's empty resources
        // are no resources.
        let mut good = base.clone();
        good["ephemeralContainers"] = json!([{
            "name": "debugger-x1", "image": "busybox", "targetContainerName": "app",
            "stdin": true, "tty": true, "terminationMessagePolicy": "File",
            "resources": {}, "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}}
        }]);
        assert_eq!(causes_of(good), vec![]);

        let mut bad = base;
        bad["ephemeralContainers"] = json!([
            {"name": "app", "image": " busybox", "targetContainerName": "setup",
             "ports": [{"containerPort": 80}], "resources": {"limits": {"cpu": "1"}},
             "restartPolicy": "Always", "readinessProbe": {"exec": {"command": ["true"]}},
             "lifecycle": {"preStop": {"exec": {"command": ["true"]}}},
             "volumeMounts": [{"name": "data", "mountPath": "/d", "subPath": "x"}]},
            {"name": "debug", "targetContainerName": "debug"},
            {"name": "debug", "image": "busybox", "ports": []}
        ]);
        let forbidden = "Forbidden: cannot be set for an Ephemeral Container";
        let at = |i: usize, field: &str| format!("spec.ephemeralContainers[{i}].{field}");
        let expected = vec![
            (at(0, "name"), r#"Duplicate value: "app""#.to_string()),
            (
                at(0, "image"),
                r#"Invalid value: " busybox": must not have leading or trailing whitespace"#
                    .to_string(),
            ),
            (at(0, "ports"), forbidden.to_string()),
            (at(0, "resources"), forbidden.to_string()),
            (at(0, "restartPolicy"), forbidden.to_string()),
            (at(0, "readinessProbe"), forbidden.to_string()),
            (at(0, "lifecycle"), forbidden.to_string()),
            (at(0, "volumeMounts[0].subPath"), forbidden.to_string()),
            (at(1, "image"), "Required value".to_string()),
            (
                at(1, "targetContainerName"),
                r#"Not found: "debug""#.to_string(),
            ),
            (at(2, "name"), r#"Duplicate value: "debug""#.to_string()),
            (at(2, "ports"), forbidden.to_string()),
        ];
        assert_eq!(causes_of(bad), expected);
    }

    #[test]
    fn only_set_fields_count_for_an_ephemeral_container() {
        let c = json!({"resources": {"limits": null}, "ports": null, "lifecycle": {}});
        assert!(!is_set(&c, "resources"));
        assert!(!is_set(&c, "ports"));
        assert!(!is_set(&c, "startupProbe"));
        assert!(
            is_set(&c, "lifecycle"),
            "a pointer to an empty struct is set"
        );
        assert!(is_set(&json!({"resources": {"claims": []}}), "resources"));
    }

    #[test]
    fn port_names_are_iana_service_names() {
        assert!(service_port_name("http-alt").is_ok());
        assert!(service_port_name("8080").is_err());
        assert!(service_port_name("a-very-long-port-name").is_err());
        assert!(service_port_name("Http").is_err());
    }
}
