//! Per-kind defaulting (upstream's `pkg/apis/*/v1/defaults.go`): one
//! function per kind, which the kind's [`Strategy`](crate::strategy::Strategy)
//! names, and the entry points that run a kind's defaults, what only a
//! create sets, and its validation.

use serde_json::{Value, json};

use crate::Cause;
use crate::registry::ResourceDef;
pub use crate::selector::label_selector_matches;

/// Fills in what upstream defaults for the kind.
pub fn apply(def: &ResourceDef, object: &mut Value) {
    if let Some(custom) = &def.custom {
        // A custom resource: its schema prunes what it does not know (after
        // fieldValidation has had its say) and fills in its defaults.
        crate::crd::schema::prune(object, &custom.schema);
        crate::crd::schema::default(object, &custom.schema);
        return;
    }
    (def.strategy.defaults)(object);
}

/// Validates what the kind requires beyond its metadata.
pub fn validate(def: &ResourceDef, object: &Value) -> Vec<Cause> {
    if let Some(custom) = &def.custom {
        return crate::crd::schema::validate(object, &custom.schema);
    }
    let mut causes = Vec::new();
    (def.strategy.validate)(object, &mut causes);
    causes
}

/// What only a create sets (a Job's generated selector).
pub fn on_create(def: &ResourceDef, object: &mut Value) {
    (def.strategy.on_create)(object);
}

/// A Namespace's phase, and its name as the `kubernetes.io/metadata.name`
/// label, always (upstream's `SetDefaults_Namespace`: selectors such as a
/// NetworkPolicy's or an affinity term's `namespaceSelector` rely on it).
pub(crate) fn namespace(object: &mut Value) {
    set_default(object, "/status/phase", json!("Active"));
    let Some(name) = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
    else {
        return;
    };
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = metadata.entry("labels").or_insert_with(|| json!({}));
        if !labels.is_object() {
            *labels = json!({});
        }
        labels["kubernetes.io/metadata.name"] = Value::String(name);
    }
}

/// A new Namespace always gets the `kubernetes` finalizer, which the
/// namespace controller removes once it has emptied it (upstream's
/// `PrepareForCreate`, not a default: a create cannot leave it out).
pub(crate) fn namespace_finalizer(object: &mut Value) {
    if !object.get("spec").is_some_and(Value::is_object) {
        object["spec"] = json!({});
    }
    let list = object["spec"]
        .as_object_mut()
        .map(|spec| spec.entry("finalizers").or_insert_with(|| json!([])));
    match list {
        Some(Value::Array(list)) if !list.iter().any(|f| f == "kubernetes") => {
            list.push(json!("kubernetes"));
        }
        Some(Value::Array(_)) | None => {}
        Some(other) => *other = json!(["kubernetes"]),
    }
}

pub(crate) fn pod(object: &mut Value) {
    if let Some(spec) = object.get_mut("spec") {
        pod_spec(spec);
    }
    set_default(object, "/status/phase", json!("Pending"));
}

pub(crate) fn pod_template(object: &mut Value) {
    template(object, "/template");
}

pub(crate) fn replication_controller(object: &mut Value) {
    set_default(object, "/spec/replicas", json!(1));
    template(object, "/spec/template");
}

/// A Container limit's defaults (`SetDefaults_LimitRangeItem`): the default
/// limit is the max where unset, the default request the default limit,
/// else the min.
pub(crate) fn limit_range(object: &mut Value) {
    let Some(limits) = object
        .pointer_mut("/spec/limits")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for limit in limits {
        if limit.get("type").and_then(Value::as_str) != Some("Container") {
            continue;
        }
        let fill = |limit: &mut Value, into: &str, from: &str| {
            let Some(source) = limit
                .get(from)
                .and_then(Value::as_object)
                .filter(|s| !s.is_empty())
                .cloned()
            else {
                return;
            };
            let target = &mut limit[into];
            if !target.is_object() {
                *target = json!({});
            }
            for (name, value) in source {
                target
                    .as_object_mut()
                    .expect("object")
                    .entry(name)
                    .or_insert(value);
            }
        };
        fill(limit, "default", "max");
        fill(limit, "defaultRequest", "default");
        fill(limit, "defaultRequest", "min");
    }
}

pub(crate) fn secret(object: &mut Value) {
    set_default(object, "/type", json!("Opaque"));
    merge_string_data(object);
}

pub(crate) fn deployment(object: &mut Value) {
    set_default(object, "/spec/replicas", json!(1));
    set_default(object, "/spec/revisionHistoryLimit", json!(10));
    set_default(object, "/spec/progressDeadlineSeconds", json!(600));
    set_default(object, "/spec/strategy/type", json!("RollingUpdate"));
    if object
        .pointer("/spec/strategy/type")
        .and_then(Value::as_str)
        == Some("RollingUpdate")
    {
        set_default(
            object,
            "/spec/strategy/rollingUpdate/maxUnavailable",
            json!("25%"),
        );
        set_default(
            object,
            "/spec/strategy/rollingUpdate/maxSurge",
            json!("25%"),
        );
    }
    template(object, "/spec/template");
}

pub(crate) fn replica_set(object: &mut Value) {
    set_default(object, "/spec/replicas", json!(1));
    template(object, "/spec/template");
}

pub(crate) fn stateful_set(object: &mut Value) {
    set_default(object, "/spec/replicas", json!(1));
    set_default(object, "/spec/podManagementPolicy", json!("OrderedReady"));
    set_default(object, "/spec/revisionHistoryLimit", json!(10));
    set_default(object, "/spec/updateStrategy/type", json!("RollingUpdate"));
    if rolling(object) {
        set_default(
            object,
            "/spec/updateStrategy/rollingUpdate/partition",
            json!(0),
        );
    }
    for field in ["whenDeleted", "whenScaled"] {
        let pointer = format!("/spec/persistentVolumeClaimRetentionPolicy/{field}");
        set_default(object, &pointer, json!("Retain"));
    }
    template(object, "/spec/template");
    if let Some(claims) = object
        .pointer_mut("/spec/volumeClaimTemplates")
        .and_then(Value::as_array_mut)
    {
        claims.iter_mut().for_each(persistent_volume_claim);
    }
}

/// `SetDefaults_PersistentVolumeClaim`: a filesystem volume, Pending.
pub(crate) fn persistent_volume_claim(object: &mut Value) {
    if object.get("spec").is_some() {
        set_default(object, "/spec/volumeMode", json!("Filesystem"));
    }
    set_default(object, "/status/phase", json!("Pending"));
}

/// `SetDefaults_PersistentVolume`: retained, a filesystem, Pending.
pub(crate) fn persistent_volume(object: &mut Value) {
    if object.get("spec").is_some() {
        set_default(
            object,
            "/spec/persistentVolumeReclaimPolicy",
            json!("Retain"),
        );
        set_default(object, "/spec/volumeMode", json!("Filesystem"));
    }
    set_default(object, "/status/phase", json!("Pending"));
}

/// `SetDefaults_StorageClass`: volumes deleted with their claims, bound
/// at once.
pub(crate) fn storage_class(object: &mut Value) {
    set_default(object, "/reclaimPolicy", json!("Delete"));
    set_default(object, "/volumeBindingMode", json!("Immediate"));
}

pub(crate) fn daemon_set(object: &mut Value) {
    set_default(object, "/spec/revisionHistoryLimit", json!(10));
    set_default(object, "/spec/updateStrategy/type", json!("RollingUpdate"));
    if rolling(object) {
        let pointer = "/spec/updateStrategy/rollingUpdate";
        set_default(object, &format!("{pointer}/maxUnavailable"), json!(1));
        set_default(object, &format!("{pointer}/maxSurge"), json!(0));
    }
    template(object, "/spec/template");
}

pub(crate) fn job(object: &mut Value) {
    // A work queue (parallelism without completions) keeps its
    // completions unset.
    let set = |p: &str| object.pointer(p).is_some_and(|v| !v.is_null());
    if !set("/spec/parallelism") && !set("/spec/completions") {
        set_default(object, "/spec/completions", json!(1));
    }
    set_default(object, "/spec/parallelism", json!(1));
    // With a limit per index, the Job-wide limit is out of the way.
    let backoff_limit = match object.pointer("/spec/backoffLimitPerIndex") {
        Some(v) if !v.is_null() => i32::MAX,
        _ => 6,
    };
    set_default(object, "/spec/backoffLimit", json!(backoff_limit));
    let replacement = match object.pointer("/spec/podFailurePolicy") {
        Some(p) if !p.is_null() => "Failed",
        _ => "TerminatingOrFailed",
    };
    set_default(object, "/spec/podReplacementPolicy", json!(replacement));
    set_default(object, "/spec/completionMode", json!("NonIndexed"));
    set_default(object, "/spec/suspend", json!(false));
    template(object, "/spec/jobTemplate/spec/template");
    template(object, "/spec/template");
}

pub(crate) fn cron_job(object: &mut Value) {
    set_default(object, "/spec/concurrencyPolicy", json!("Allow"));
    set_default(object, "/spec/suspend", json!(false));
    set_default(object, "/spec/successfulJobsHistoryLimit", json!(3));
    set_default(object, "/spec/failedJobsHistoryLimit", json!(1));
    template(object, "/spec/jobTemplate/spec/template");
}

/// A new pod's QoS class in `status.qosClass` (upstream's pod strategy
/// sets it at create, after admission has filled in requests and limits;
/// `GetPodQOS`): Guaranteed when every container limits cpu and memory and
/// the pod's summed requests equal its summed limits, BestEffort when no
/// container asks for either, Burstable otherwise.
pub(crate) fn pod_qos_class(object: &mut Value) {
    use crate::quantity::Quantity;
    use std::collections::BTreeMap;
    let mut sums: [BTreeMap<&str, Quantity>; 2] = [BTreeMap::new(), BTreeMap::new()];
    let mut guaranteed = true;
    let containers = ["initContainers", "containers"]
        .into_iter()
        .flat_map(|list| {
            object
                .pointer(&format!("/spec/{list}"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        });
    for container in containers {
        for (i, kind) in ["requests", "limits"].into_iter().enumerate() {
            let mut found = 0;
            for resource in ["cpu", "memory"] {
                let quantity = container
                    .pointer(&format!("/resources/{kind}/{resource}"))
                    .and_then(Value::as_str)
                    .and_then(|q| Quantity::parse(q).ok())
                    .filter(|q| !q.is_zero());
                if let Some(quantity) = quantity {
                    found += 1;
                    let sum = sums[i].entry(resource).or_insert_with(Quantity::zero);
                    *sum = sum.add(&quantity);
                }
            }
            if kind == "limits" && found < 2 {
                guaranteed = false;
            }
        }
    }
    let [requests, limits] = &sums;
    let class = if requests.is_empty() && limits.is_empty() {
        "BestEffort"
    } else if guaranteed
        && requests.len() == limits.len()
        && requests.iter().all(|(resource, request)| {
            limits
                .get(resource)
                .is_some_and(|limit| limit.cmp_value(request).is_eq())
        })
    {
        "Guaranteed"
    } else {
        "Burstable"
    };
    if !object.get("status").is_some_and(Value::is_object) {
        object["status"] = json!({});
    }
    object["status"]["qosClass"] = json!(class);
}

/// A Job's generated selector (unless it asks for `manualSelector`): its
/// pods labelled with the Job's uid and name, and the selector matching the
/// uid, as upstream's Job strategy sets on create.
pub(crate) fn job_selector(object: &mut Value) {
    if object.pointer("/spec/manualSelector") == Some(&json!(true)) {
        return;
    }
    let uid = object.pointer("/metadata/uid").cloned().unwrap_or_default();
    let name = object
        .pointer("/metadata/name")
        .cloned()
        .unwrap_or_default();
    if object
        .pointer("/spec/template")
        .is_none_or(|t| !t.is_object())
    {
        return;
    }
    for (label, value) in [
        ("job-name", &name),
        ("batch.kubernetes.io/job-name", &name),
        ("controller-uid", &uid),
        ("batch.kubernetes.io/controller-uid", &uid),
    ] {
        set_default(
            object,
            &format!(
                "/spec/template/metadata/labels/{}",
                label.replace('/', "~1")
            ),
            value.clone(),
        );
    }
    let key = "/spec/selector/matchLabels/batch.kubernetes.io~1controller-uid";
    set_default(object, key, uid);
}

/// A Secret's `stringData` is write-only: each entry goes into `data`
/// (base64, over an entry of the same key) and the field is dropped, as
/// upstream's conversion does.
fn merge_string_data(object: &mut Value) {
    let Some(root) = object.as_object_mut() else {
        return;
    };
    let Some(Value::Object(strings)) = root.remove("stringData") else {
        return;
    };
    let data = root.entry("data").or_insert_with(|| json!({}));
    if data.is_null() {
        *data = json!({});
    }
    if let Some(data) = data.as_object_mut() {
        for (key, value) in strings {
            let bytes = value.as_str().unwrap_or_default().as_bytes().to_vec();
            let encoded = serde_json::to_value(k8s_openapi::ByteString(bytes));
            data.insert(key, encoded.unwrap_or(Value::Null));
        }
    }
}

fn set_default(object: &mut Value, pointer: &str, value: Value) {
    if object.pointer(pointer).is_some_and(|v| !v.is_null()) {
        return;
    }
    let mut at = object;
    // JSON pointer tokens, unescaped (`~1` is `/`, `~0` is `~`).
    let parts: Vec<String> = pointer
        .trim_start_matches('/')
        .split('/')
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    for (i, part) in parts.iter().enumerate() {
        let Some(map) = at.as_object_mut() else {
            return;
        };
        if i == parts.len() - 1 {
            map.insert(part.clone(), value);
            return;
        }
        at = map.entry(part.clone()).or_insert_with(|| json!({}));
        if at.is_null() {
            *at = json!({});
        }
    }
}

/// Whether a StatefulSet's or DaemonSet's update strategy is RollingUpdate.
fn rolling(object: &Value) -> bool {
    object
        .pointer("/spec/updateStrategy/type")
        .and_then(Value::as_str)
        == Some("RollingUpdate")
}

fn template(object: &mut Value, pointer: &str) {
    if let Some(spec) = object.pointer_mut(&format!("{pointer}/spec")) {
        pod_spec(spec);
    }
}

fn pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set_default(spec, "/restartPolicy", json!("Always"));
    set_default(spec, "/dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "/schedulerName", json!("default-scheduler"));
    set_default(spec, "/terminationGracePeriodSeconds", json!(30));
    set_default(spec, "/securityContext", json!({}));
    set_default(spec, "/enableServiceLinks", json!(true));
    if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        for volume in volumes {
            // Files of configMap, secret, projected and downwardAPI volumes
            // default to mode 0644.
            for source in ["configMap", "secret", "projected", "downwardAPI"] {
                if volume.get(source).is_some_and(Value::is_object) {
                    set_default(volume, &format!("/{source}/defaultMode"), json!(420));
                }
            }
        }
    }
    // Ephemeral containers too (`SetDefaults_EphemeralContainer`).
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for container in containers {
                container_defaults(container);
            }
        }
    }
}

fn container_defaults(container: &mut Value) {
    if !container.is_object() {
        return;
    }
    let image = container
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let after_slash = image.rsplit('/').next().unwrap_or(image);
    let tag = after_slash.split_once(':').map(|(_, t)| t);
    let always = !image.contains('@') && matches!(tag, None | Some("latest"));
    set_default(
        container,
        "/imagePullPolicy",
        json!(if always { "Always" } else { "IfNotPresent" }),
    );
    set_default(
        container,
        "/terminationMessagePath",
        json!("/dev/termination-log"),
    );
    set_default(container, "/terminationMessagePolicy", json!("File"));
    set_default(container, "/resources", json!({}));
    if let Some(ports) = container.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports {
            set_default(port, "/protocol", json!("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(p) = container.get_mut(probe).filter(|p| p.is_object()) else {
            continue;
        };
        set_default(p, "/timeoutSeconds", json!(1));
        set_default(p, "/periodSeconds", json!(10));
        set_default(p, "/successThreshold", json!(1));
        set_default(p, "/failureThreshold", json!(3));
        if p.get("httpGet").is_some_and(Value::is_object) {
            set_default(p, "/httpGet/path", json!("/"));
            set_default(p, "/httpGet/scheme", json!("HTTP"));
        }
    }
    if let Some(env) = container.get_mut("env").and_then(Value::as_array_mut) {
        for var in env {
            if var
                .pointer("/valueFrom/fieldRef")
                .is_some_and(Value::is_object)
            {
                set_default(var, "/valueFrom/fieldRef/apiVersion", json!("v1"));
            }
        }
    }
}

pub(crate) fn service(object: &mut Value) {
    set_default(object, "/spec/type", json!("ClusterIP"));
    set_default(object, "/spec/sessionAffinity", json!("None"));
    let kind = object
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if kind != "ExternalName" {
        set_default(object, "/spec/internalTrafficPolicy", json!("Cluster"));
    }
    if kind == "NodePort" || kind == "LoadBalancer" {
        set_default(object, "/spec/externalTrafficPolicy", json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        set_default(object, "/spec/allocateLoadBalancerNodePorts", json!(true));
    }
    if let Some(ports) = object
        .pointer_mut("/spec/ports")
        .and_then(Value::as_array_mut)
    {
        for port in ports {
            set_default(port, "/protocol", json!("TCP"));
            if port.get("targetPort").is_none()
                && let Some(p) = port.get("port").cloned()
            {
                port["targetPort"] = p;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Registry;

    #[test]
    fn a_namespace_is_labelled_with_its_name_whatever_it_said() {
        let mut ns = json!({"metadata": {"name": "web", "labels": {"kubernetes.io/metadata.name": "other", "team": "a"}}});
        namespace(&mut ns);
        assert_eq!(
            ns["metadata"]["labels"],
            json!({"kubernetes.io/metadata.name": "web", "team": "a"})
        );
        assert_eq!(ns["status"]["phase"], "Active");
        // No name yet (generateName): nothing to label.
        let mut unnamed = json!({"metadata": {"generateName": "web-"}});
        namespace(&mut unnamed);
        assert!(unnamed["metadata"].get("labels").is_none());
    }

    #[test]
    fn a_pods_qos_class_follows_its_requests_and_limits() {
        let class = |resources: Vec<Value>| {
            let containers: Vec<Value> = resources
                .into_iter()
                .map(|r| json!({"name": "c", "resources": r}))
                .collect();
            let mut pod = json!({"spec": {"containers": containers}});
            pod_qos_class(&mut pod);
            pod["status"]["qosClass"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(class(vec![json!({})]), "BestEffort");
        let both = json!({"cpu": "1", "memory": "1Gi"});
        assert_eq!(
            class(vec![json!({"requests": both, "limits": both})]),
            "Guaranteed"
        );
        assert_eq!(
            class(vec![
                json!({"requests": {"cpu": "1000m", "memory": "1024Mi"}, "limits": both})
            ]),
            "Guaranteed",
            "equal quantities in other units"
        );
        assert_eq!(
            class(vec![json!({"requests": {"cpu": "500m"}, "limits": both})]),
            "Burstable"
        );
        assert_eq!(
            class(vec![json!({"requests": both, "limits": both}), json!({})]),
            "Burstable",
            "a container without limits"
        );
        assert_eq!(class(vec![json!({"requests": {"cpu": "0"}})]), "BestEffort");
    }

    #[test]
    fn deployments_get_upstreams_defaults() {
        let registry = Registry::builtin();
        let def = registry.get("apps", "v1", "deployments").expect("def");
        let mut d = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx"}, {"name": "d", "image": "r/x:1.2", "ports": [{"containerPort": 80}]}]}}}});
        apply(def, &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Always");
        assert_eq!(pod["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(pod["containers"][1]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(pod["containers"][1]["ports"][0]["protocol"], "TCP");
    }

    #[test]
    fn workloads_need_a_selector_that_matches_the_template() {
        let registry = Registry::builtin();
        let def = registry.get("apps", "v1", "deployments").expect("def");
        let d = json!({"spec": {"selector": {"matchLabels": {"app": "a"}}, "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let causes = validate(def, &d);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.template.metadata.labels");
        let d =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "Bad", "image": ""}]}}}});
        let fields: Vec<String> = validate(def, &d).into_iter().map(|c| c.field).collect();
        assert_eq!(
            fields,
            vec![
                "spec.selector",
                "spec.template.spec.containers[0].name",
                "spec.template.spec.containers[0].image"
            ]
        );
    }

    #[test]
    fn requests_fit_their_limits_and_jobs_do_not_restart_always() {
        let registry = Registry::builtin();
        let def = registry.get("", "v1", "pods").expect("def");
        let pod = json!({"spec": {"containers": [{"name": "c", "image": "i", "resources": {
            "requests": {"cpu": "2", "memory": "-1"}, "limits": {"cpu": "1"}}}]}});
        let causes: Vec<(String, String)> = validate(def, &pod)
            .into_iter()
            .map(|c| (c.field, c.message))
            .collect();
        assert_eq!(
            causes,
            vec![
                (
                    "spec.containers[0].resources.requests[memory]".to_string(),
                    r#"Invalid value: "-1": must be greater than or equal to 0"#.to_string()
                ),
                (
                    "spec.containers[0].resources.requests[cpu]".to_string(),
                    r#"Invalid value: "2": must be less than or equal to cpu limit of 1"#
                        .to_string()
                ),
            ]
        );
        let def = registry.get("batch", "v1", "jobs").expect("def");
        let mut job = json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        apply(def, &mut job);
        let causes = validate(def, &job);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].field, "spec.template.spec.restartPolicy");
        assert_eq!(
            causes[0].message,
            r#"Unsupported value: "Always": supported values: "OnFailure", "Never""#
        );
    }

    #[test]
    fn a_job_with_a_backoff_limit_per_index_gets_the_largest_backoff_limit() {
        let registry = Registry::builtin();
        let def = registry.get("batch", "v1", "jobs").expect("def");
        let mut job = json!({"spec": {"completionMode": "Indexed", "completions": 2,
            "backoffLimitPerIndex": 1, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        apply(def, &mut job);
        assert_eq!(job["spec"]["backoffLimit"], 2147483647);
        let mut given =
            json!({"spec": {"backoffLimitPerIndex": 1, "backoffLimit": 3, "template": {}}});
        apply(def, &mut given);
        assert_eq!(given["spec"]["backoffLimit"], 3);
        let mut plain = json!({"spec": {"template": {}}});
        apply(def, &mut plain);
        assert_eq!(plain["spec"]["backoffLimit"], 6);
    }

    #[test]
    fn a_job_gets_a_generated_selector_and_upstreams_defaults() {
        let registry = Registry::builtin();
        let def = registry.get("batch", "v1", "jobs").expect("def");
        let mut job = json!({"metadata": {"name": "pi", "uid": "u-1"}, "spec": {"parallelism": 3,
            "template": {"metadata": {"labels": {"app": "pi"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}});
        on_create(def, &mut job);
        apply(def, &mut job);
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"],
            json!({"app": "pi", "job-name": "pi", "batch.kubernetes.io/job-name": "pi", "controller-uid": "u-1", "batch.kubernetes.io/controller-uid": "u-1"})
        );
        assert_eq!(
            job["spec"]["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
        );
        // A work queue keeps its completions unset.
        assert_eq!(job["spec"]["completions"], Value::Null);
        assert_eq!(
            job["spec"]["podReplacementPolicy"],
            json!("TerminatingOrFailed")
        );
        assert!(validate(def, &job).is_empty(), "{:?}", validate(def, &job));
        // manualSelector: the selector is the user's.
        let mut manual = json!({"metadata": {"name": "m", "uid": "u-2"}, "spec": {"manualSelector": true, "template": {"spec": {}}}});
        on_create(def, &mut manual);
        assert_eq!(manual["spec"].get("selector"), None);
    }

    #[test]
    fn probes_volumes_services_and_rollouts_get_upstreams_defaults() {
        let registry = Registry::builtin();
        let def = registry.get("", "v1", "pods").expect("def");
        let mut pod = json!({"spec": {
            "volumes": [{"name": "c", "configMap": {"name": "x"}}, {"name": "e", "emptyDir": {}}],
            "containers": [{"name": "c", "image": "i:1",
                "livenessProbe": {"httpGet": {"port": 80}},
                "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]}});
        apply(def, &mut pod);
        assert_eq!(
            pod["spec"]["volumes"][0]["configMap"]["defaultMode"],
            json!(420)
        );
        assert_eq!(
            pod["spec"]["volumes"][1],
            json!({"name": "e", "emptyDir": {}})
        );
        let c = &pod["spec"]["containers"][0];
        assert_eq!(
            c["livenessProbe"],
            json!({"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(
            c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"],
            json!("v1")
        );

        let def = registry.get("", "v1", "services").expect("def");
        let mut lb = json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}});
        apply(def, &mut lb);
        assert_eq!(
            (
                &lb["spec"]["internalTrafficPolicy"],
                &lb["spec"]["externalTrafficPolicy"],
                &lb["spec"]["allocateLoadBalancerNodePorts"]
            ),
            (&json!("Cluster"), &json!("Cluster"), &json!(true))
        );

        let def = registry.get("apps", "v1", "statefulsets").expect("def");
        let mut sts = json!({"spec": {"template": {"spec": {}}}});
        apply(def, &mut sts);
        assert_eq!(
            sts["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        );
        assert_eq!(
            sts["spec"]["persistentVolumeClaimRetentionPolicy"],
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
        );
        let def = registry.get("apps", "v1", "daemonsets").expect("def");
        let mut ds = json!({"spec": {"template": {"spec": {}}}});
        apply(def, &mut ds);
        assert_eq!(
            ds["spec"]["updateStrategy"]["rollingUpdate"],
            json!({"maxUnavailable": 1, "maxSurge": 0})
        );
    }

    #[test]
    fn a_secrets_string_data_goes_into_its_data() {
        let registry = Registry::builtin();
        let def = registry.get("", "v1", "secrets").expect("def");
        let mut secret =
            json!({"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "new", "c": "q"}});
        apply(def, &mut secret);
        assert_eq!(
            secret,
            json!({"type": "Opaque", "data": {"a": "eA==", "b": "bmV3", "c": "cQ=="}})
        );
    }

    #[test]
    fn selector_objects_select() {
        let s = json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]});
        assert!(label_selector_matches(
            &s,
            Some(&json!({"app": "web", "tier": "a"}))
        ));
        assert!(!label_selector_matches(&s, Some(&json!({"app": "web"}))));
    }
}
