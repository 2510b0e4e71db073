//! Upstream's mutating admission for a new object, as one ordered list of
//! steps ([`CHAIN`]), in the order of upstream's default plugin list:
//! LimitRanger, ServiceAccount, Priority, DefaultTolerationSeconds,
//! DefaultStorageClass. Each step is a pure function of what the API server
//! read for it ([`Inputs`]) and the object; each is tested alone.
//!
//! What needs the store (the namespace's LimitRanges, the ServiceAccount,
//! the PriorityClass, the default StorageClass) is read by the storage
//! layer into [`Inputs`]; the refusals (403s) are the storage layer's too.

use serde_json::{Value, json};

use crate::limitrange;
use crate::registry::ResourceDef;

/// Where the ServiceAccount admission mounts the API credentials.
pub const API_ACCESS_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The prefix of the projected volume holding them.
pub const API_ACCESS_VOLUME_PREFIX: &str = "kube-api-access-";
/// The lifetime the projected token asks for (upstream's
/// `WarnOnlyBoundTokenExpirationSeconds`: one hour and seven seconds).
const TOKEN_EXPIRATION_SECONDS: i64 = 3607;
/// How long a new pod tolerates its node being not ready or unreachable.
const DEFAULT_TOLERATION_SECONDS: i64 = 300;

/// What the steps read from the cluster for one create.
#[derive(Debug, Default, Clone)]
pub struct Inputs {
    /// The namespace's LimitRanges (LimitRanger).
    pub limit_ranges: Vec<Value>,
    /// The pod's ServiceAccount, when it exists (ServiceAccount).
    pub service_account: Option<Value>,
    /// Five characters that make the API access volume's name unique.
    pub volume_suffix: String,
    /// The pod's priority class: name, value, preemption policy (Priority;
    /// `None`: the step does not apply).
    pub priority: Option<(Option<String>, i64, String)>,
    /// The default StorageClass for a claim naming none.
    pub default_class: Option<String>,
}

/// One admission step: upstream's plugin name, and what it does.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    pub name: &'static str,
    pub admit: fn(&Inputs, &ResourceDef, &mut Value),
}

/// The steps, in upstream's order.
pub const CHAIN: &[Step] = &[
    Step {
        name: "LimitRanger",
        admit: limit_ranger,
    },
    Step {
        name: "ServiceAccount",
        admit: service_account,
    },
    Step {
        name: "Priority",
        admit: priority,
    },
    Step {
        name: "DefaultTolerationSeconds",
        admit: default_toleration_seconds,
    },
    Step {
        name: "DefaultStorageClass",
        admit: default_storage_class,
    },
];

/// Runs every step of [`CHAIN`] on a new object.
pub fn admit(inputs: &Inputs, def: &ResourceDef, object: &mut Value) {
    for step in CHAIN {
        (step.admit)(inputs, def, object);
    }
}

fn is_core(def: &ResourceDef, plural: &str) -> bool {
    def.group.is_empty() && def.custom.is_none() && def.plural == plural
}

/// The pod's spec, when it has one to change.
fn pod_spec<'a>(
    def: &ResourceDef,
    object: &'a mut Value,
) -> Option<&'a mut serde_json::Map<String, Value>> {
    if !is_core(def, "pods") {
        return None;
    }
    object.get_mut("spec").and_then(Value::as_object_mut)
}

/// LimitRanger: containers get their namespace's default requests and
/// limits.
fn limit_ranger(inputs: &Inputs, def: &ResourceDef, object: &mut Value) {
    if is_core(def, "pods") && !inputs.limit_ranges.is_empty() {
        limitrange::default_pod(&inputs.limit_ranges, object);
    }
}

/// ServiceAccount: a pod runs as `default` unless it names an account, takes
/// the account's image pull secrets if it has none, and — unless the pod
/// or the account opts out of automounting — every container mounts the
/// projected `kube-api-access-*` volume (a bound token, the cluster CA, the
/// namespace) at [`API_ACCESS_MOUNT_PATH`].
fn service_account(inputs: &Inputs, def: &ResourceDef, object: &mut Value) {
    let mirror = object
        .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
        .is_some();
    let Some(spec) = pod_spec(def, object) else {
        return;
    };
    if mirror {
        return;
    }
    let named = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .or_else(|| {
            spec.get("serviceAccount")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
        })
        .unwrap_or("default")
        .to_string();
    spec.insert("serviceAccountName".into(), json!(named));
    // The deprecated alias, as upstream's conversion writes it.
    spec.insert("serviceAccount".into(), json!(named));
    let account = inputs.service_account.as_ref();
    let no_pull_secrets = spec
        .get("imagePullSecrets")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if no_pull_secrets
        && let Some(secrets) = account
            .and_then(|a| a.get("imagePullSecrets"))
            .and_then(Value::as_array)
            .filter(|s| !s.is_empty())
    {
        let refs: Vec<Value> = secrets
            .iter()
            .filter_map(|s| s.get("name"))
            .map(|name| json!({"name": name}))
            .collect();
        spec.insert("imagePullSecrets".into(), Value::Array(refs));
    }
    let automount = spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| {
            account
                .and_then(|a| a.get("automountServiceAccountToken"))
                .and_then(Value::as_bool)
        })
        .unwrap_or(true);
    if automount {
        mount_api_access(spec, &inputs.volume_suffix);
    }
}

fn mount_api_access(spec: &mut serde_json::Map<String, Value>, suffix: &str) {
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("name").and_then(Value::as_str))
        .find(|name| name.starts_with(API_ACCESS_VOLUME_PREFIX))
        .map(str::to_string);
    let volume_name = existing
        .clone()
        .unwrap_or_else(|| format!("{API_ACCESS_VOLUME_PREFIX}{suffix}"));
    let mount = json!({"name": volume_name, "readOnly": true, "mountPath": API_ACCESS_MOUNT_PATH});
    let mut mounted = false;
    for list in ["initContainers", "containers"] {
        for container in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let Some(container) = container.as_object_mut() else {
                continue;
            };
            let mounts = container.entry("volumeMounts").or_insert_with(|| json!([]));
            let Some(mounts) = mounts.as_array_mut() else {
                continue;
            };
            if !mounts
                .iter()
                .any(|m| m["mountPath"] == API_ACCESS_MOUNT_PATH)
            {
                mounts.push(mount.clone());
                mounted = true;
            }
        }
    }
    if existing.is_none() && mounted {
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Some(volumes) = volumes.as_array_mut() {
            volumes.push(json!({
                "name": volume_name,
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                    ]
                }
            }));
        }
    }
}

/// Priority: a pod's `priority` and `preemptionPolicy` from its
/// PriorityClass (or the global default), and the class's name when the
/// pod named none.
fn priority(inputs: &Inputs, def: &ResourceDef, object: &mut Value) {
    let (Some((class, value, policy)), Some(spec)) = (&inputs.priority, pod_spec(def, object))
    else {
        return;
    };
    if let Some(class) = class {
        spec.insert("priorityClassName".into(), json!(class));
    }
    spec.insert("priority".into(), json!(value));
    spec.insert("preemptionPolicy".into(), json!(policy));
}

/// DefaultTolerationSeconds: a pod that does not tolerate the `not-ready`
/// and `unreachable` NoExecute taints tolerates them for five minutes, so
/// a lost node's pods are evicted after that rather than at once.
fn default_toleration_seconds(_: &Inputs, def: &ResourceDef, object: &mut Value) {
    let Some(spec) = pod_spec(def, object) else {
        return;
    };
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    let Some(list) = tolerations.as_array_mut() else {
        return;
    };
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let covered = list.iter().any(|t| {
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            let operator = t.get("operator").and_then(Value::as_str).unwrap_or("Equal");
            let tkey = t.get("key").and_then(Value::as_str).unwrap_or("");
            (effect.is_empty() || effect == "NoExecute")
                && (tkey == key || (tkey.is_empty() && operator == "Exists"))
        });
        if !covered {
            list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": DEFAULT_TOLERATION_SECONDS}));
        }
    }
}

/// DefaultStorageClass: a claim naming no class gets the default one.
fn default_storage_class(inputs: &Inputs, def: &ResourceDef, object: &mut Value) {
    if !is_core(def, "persistentvolumeclaims") {
        return;
    }
    if let (Some(class), Some(spec)) = (
        &inputs.default_class,
        object.get_mut("spec").and_then(Value::as_object_mut),
    ) {
        spec.insert("storageClassName".into(), json!(class));
    }
}

#[cfg(test)]
mod tests;
