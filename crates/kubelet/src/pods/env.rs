//! A container's environment as upstream's kubelet makes it
//! (`makeEnvironmentVariables`): `envFrom` sources first, then `env` in
//! order — plain values with `$(VAR)` expanded against what came before,
//! ConfigMap and Secret keys, the pod's fields (`fieldRef`) and the
//! container's resources (`resourceFieldRef`). ConfigMaps and Secrets are
//! read from the API by the caller ([`Sources::fetch`]); the rest is pure.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, ResourceFieldSelector, Secret};
use kube::api::Api;
use kube::{Client, ResourceExt};
use rudder_api::quantity::Quantity;

use super::config::expand;
use crate::cri::v1::KeyValue;

/// The ConfigMaps and Secrets a pod's environment reads, by name (`None`:
/// not found).
#[derive(Debug, Default, Clone)]
pub struct Sources {
    pub config_maps: HashMap<String, Option<BTreeMap<String, String>>>,
    pub secrets: HashMap<String, Option<BTreeMap<String, String>>>,
    /// Projected ServiceAccount tokens, by audience and lifetime.
    pub tokens: BTreeMap<String, String>,
}

/// What the environment needs to know of the node and the pod's sandbox.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub pod_ip: String,
    pub host_ip: String,
    /// The node's allocatable CPU (millicores) and memory (bytes): the
    /// default limits `resourceFieldRef` reports.
    pub allocatable_cpu_millis: i128,
    pub allocatable_memory: i128,
}

fn secret_data(secret: Secret) -> BTreeMap<String, String> {
    let mut data: BTreeMap<String, String> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
        .collect();
    data.extend(secret.string_data.unwrap_or_default());
    data
}

fn config_map_data(config_map: ConfigMap) -> BTreeMap<String, String> {
    let mut data = config_map.data.unwrap_or_default();
    for (k, v) in config_map.binary_data.unwrap_or_default() {
        data.insert(k, String::from_utf8_lossy(&v.0).into_owned());
    }
    data
}

impl Sources {
    /// Reads every ConfigMap and Secret `containers` refer to in their
    /// environment or that `volumes` name.
    pub async fn fetch(
        client: &Client,
        pod: &Pod,
        config_maps: Vec<String>,
        secrets: Vec<String>,
    ) -> Result<Sources, kube::Error> {
        let namespace = pod.namespace().unwrap_or_default();
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
        let ss: Api<Secret> = Api::namespaced(client.clone(), &namespace);
        let mut sources = Sources::default();
        for name in config_maps {
            if let Entry::Vacant(slot) = sources.config_maps.entry(name) {
                let found = cms.get_opt(slot.key()).await?.map(config_map_data);
                slot.insert(found);
            }
        }
        for name in secrets {
            if let Entry::Vacant(slot) = sources.secrets.entry(name) {
                let found = ss.get_opt(slot.key()).await?.map(secret_data);
                slot.insert(found);
            }
        }
        Ok(sources)
    }
}

/// The ConfigMaps and Secrets a container's environment names.
pub fn referenced(container: &Container) -> (Vec<String>, Vec<String>) {
    let (mut config_maps, mut secrets) = (Vec::new(), Vec::new());
    for from in container.env_from.iter().flatten() {
        if let Some(r) = &from.config_map_ref {
            config_maps.push(r.name.clone());
        }
        if let Some(r) = &from.secret_ref {
            secrets.push(r.name.clone());
        }
    }
    for var in container.env.iter().flatten() {
        let Some(from) = &var.value_from else {
            continue;
        };
        if let Some(r) = &from.config_map_key_ref {
            config_maps.push(r.name.clone());
        }
        if let Some(r) = &from.secret_key_ref {
            secrets.push(r.name.clone());
        }
    }
    (config_maps, secrets)
}

/// The value of a pod field (`fieldRef.fieldPath`), as upstream's
/// downward API gives it.
pub fn pod_field(pod: &Pod, path: &str, context: &Context) -> Result<String, String> {
    let spec = pod.spec.clone().unwrap_or_default();
    let keyed = |prefix: &str, map: &BTreeMap<String, String>| {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix("']"))
            .map(|key| map.get(key).cloned().unwrap_or_default())
    };
    if let Some(value) = keyed("metadata.labels['", pod.labels()) {
        return Ok(value);
    }
    if let Some(value) = keyed("metadata.annotations['", pod.annotations()) {
        return Ok(value);
    }
    let join = |map: &BTreeMap<String, String>| {
        map.iter()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok(match path {
        "metadata.name" => pod.name_any(),
        "metadata.namespace" => pod.namespace().unwrap_or_default(),
        "metadata.uid" => pod.uid().unwrap_or_default(),
        "metadata.labels" => join(pod.labels()),
        "metadata.annotations" => join(pod.annotations()),
        "spec.nodeName" => spec.node_name.unwrap_or_default(),
        "spec.serviceAccountName" => spec.service_account_name.unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => context.host_ip.clone(),
        "status.podIP" | "status.podIPs" => context.pod_ip.clone(),
        other => return Err(format!("unsupported fieldPath: {other}")),
    })
}

/// A container resource (`resourceFieldRef`), divided by its divisor and
/// rounded up, limits defaulting to the node's allocatable.
pub fn resource_field(
    pod: &Pod,
    own: &Container,
    field: &ResourceFieldSelector,
    context: &Context,
) -> Result<String, String> {
    let spec = pod.spec.clone().unwrap_or_default();
    let container = match field.container_name.as_deref().filter(|n| !n.is_empty()) {
        Some(name) => spec
            .containers
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| format!("container {name} not found"))?,
        None => own,
    };
    let (kind, resource) = field
        .resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported resource: {}", field.resource))?;
    let resources = container.resources.clone().unwrap_or_default();
    let map = if kind == "limits" {
        resources.limits
    } else {
        resources.requests
    };
    let given = map
        .and_then(|m| m.get(resource).cloned())
        .and_then(|q| Quantity::parse(&q.0).ok());
    let cpu = resource == "cpu";
    let value = match (given, kind, cpu) {
        (Some(q), _, true) => q.milli_value(),
        (Some(q), _, false) => q.value(),
        (None, "limits", true) => context.allocatable_cpu_millis,
        (None, "limits", false) if resource == "memory" => context.allocatable_memory,
        (None, _, _) => 0,
    };
    let divisor = field
        .divisor
        .as_ref()
        .and_then(|d| Quantity::parse(&d.0).ok())
        .map(|d| if cpu { d.milli_value() } else { d.value() })
        .filter(|d| *d > 0)
        .unwrap_or(if cpu { 1000 } else { 1 });
    let rounded = (value + divisor - 1) / divisor;
    // Upstream reports at least 1 core for a CPU in cores.
    Ok(if cpu && rounded == 0 && value > 0 {
        1
    } else {
        rounded
    }
    .to_string())
}

/// `key` of the ConfigMap or Secret `name`; `None` when it or the key is
/// missing and `optional`.
fn key_of(
    sources: &HashMap<String, Option<BTreeMap<String, String>>>,
    kind: &str,
    namespace: &str,
    name: &str,
    key: &str,
    optional: Option<bool>,
) -> Result<Option<String>, String> {
    let optional = optional.unwrap_or(false);
    match sources.get(name).cloned().flatten() {
        Some(data) => match data.get(key) {
            Some(value) => Ok(Some(value.clone())),
            None if optional => Ok(None),
            None => Err(format!(
                "couldn't find key {key} in {kind} {namespace}/{name}"
            )),
        },
        None if optional => Ok(None),
        None => Err(format!("{} \"{name}\" not found", kind.to_lowercase())),
    }
}

/// The environment of `container`: `Err` is the message of a
/// CreateContainerConfigError.
pub fn build(
    pod: &Pod,
    container: &Container,
    sources: &Sources,
    context: &Context,
) -> Result<Vec<KeyValue>, String> {
    let mut env: Vec<KeyValue> = Vec::new();
    let set = |env: &mut Vec<KeyValue>, key: String, value: String| match env
        .iter_mut()
        .find(|kv| kv.key == key)
    {
        Some(kv) => kv.value = value,
        None => env.push(KeyValue { key, value }),
    };
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (data, optional, what, name) = if let Some(r) = &from.config_map_ref {
            (
                sources.config_maps.get(&r.name).cloned().flatten(),
                r.optional.unwrap_or(false),
                "configmap",
                r.name.clone(),
            )
        } else if let Some(r) = &from.secret_ref {
            (
                sources.secrets.get(&r.name).cloned().flatten(),
                r.optional.unwrap_or(false),
                "secret",
                r.name.clone(),
            )
        } else {
            continue;
        };
        match data {
            Some(data) => {
                for (k, v) in data {
                    set(&mut env, format!("{prefix}{k}"), v);
                }
            }
            None if optional => {}
            None => return Err(format!("{what} \"{name}\" not found")),
        }
    }
    for var in container.env.iter().flatten() {
        let value = match &var.value_from {
            None => expand(var.value.as_deref().unwrap_or_default(), &env),
            Some(from) => {
                let namespace = pod.namespace().unwrap_or_default();
                let found = if let Some(r) = &from.config_map_key_ref {
                    let data = &sources.config_maps;
                    key_of(data, "ConfigMap", &namespace, &r.name, &r.key, r.optional)?
                } else if let Some(r) = &from.secret_key_ref {
                    let data = &sources.secrets;
                    key_of(data, "Secret", &namespace, &r.name, &r.key, r.optional)?
                } else if let Some(field) = &from.field_ref {
                    Some(pod_field(pod, &field.field_path, context)?)
                } else if let Some(field) = &from.resource_field_ref {
                    Some(resource_field(pod, container, field, context)?)
                } else {
                    None
                };
                match found {
                    Some(value) => value,
                    None => continue,
                }
            }
        };
        set(&mut env, var.name.clone(), value);
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{
                "name": "c", "image": "i",
                "resources": {"limits": {"memory": "64Mi"}, "requests": {"cpu": "250m"}},
                "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
                "env": [
                    {"name": "A", "value": "1"},
                    {"name": "B", "value": "$(A)-$(CM_x)"},
                    {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "password"}}},
                    {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "x"}}},
                    {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                    {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                    {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
                    {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                    {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": true}}}
                ]
            }]}
        }))
        .expect("pod")
    }

    fn sources() -> Sources {
        Sources {
            config_maps: [(
                "cm".to_string(),
                Some([("x".to_string(), "ex".to_string())].into()),
            )]
            .into(),
            secrets: [
                (
                    "s".to_string(),
                    Some([("password".to_string(), "hunter2".to_string())].into()),
                ),
                ("gone".to_string(), None),
            ]
            .into(),
            tokens: Default::default(),
        }
    }

    #[test]
    fn every_source_fills_the_environment_in_order() {
        let pod = pod();
        let context = Context {
            pod_ip: "10.42.0.9".into(),
            host_ip: "192.0.2.1".into(),
            allocatable_cpu_millis: 2000,
            allocatable_memory: 1 << 30,
        };
        let env = build(
            &pod,
            &pod.spec.as_ref().expect("spec").containers[0],
            &sources(),
            &context,
        )
        .expect("env");
        let got: Vec<(String, String)> = env.into_iter().map(|kv| (kv.key, kv.value)).collect();
        let want: Vec<(String, String)> = [
            ("CM_x", "ex"),
            ("A", "1"),
            ("B", "1-ex"),
            ("S", "hunter2"),
            ("K", "ex"),
            ("NAME", "p"),
            ("APP", "web"),
            ("IP", "10.42.0.9"),
            ("MEM", "64"),
            ("CPU", "250"),
            ("CPU_LIMIT", "2"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_missing_source_is_a_config_error() {
        let pod = pod();
        let mut sources = sources();
        sources.secrets.insert("s".into(), None);
        let error = build(
            &pod,
            &pod.spec.as_ref().expect("spec").containers[0],
            &sources,
            &Context::default(),
        )
        .expect_err("missing");
        assert_eq!(error, "secret \"s\" not found");
    }
}
