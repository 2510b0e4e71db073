//! Printers of core/v1 kinds (and of events.k8s.io Events, which are core
//! Events under other field names).

use serde_json::{Value, json};

use super::read::{
    age, arr, bool_at, condition, condition_true, containers, deleting, int_at, labels,
    load_balancer, map_len, name, or, pair_at, present, since, text_at,
};
use super::{Cell, Column, NAME, col, wide};
use crate::json::str_at;
use crate::time::{human_duration, parse_rfc3339};

pub(crate) fn pod(o: &Value, now: i64) -> Vec<Cell> {
    let init_specs = arr(o, "/spec/initContainers");
    let sidecar = |c: &Value| str_at(c, "/restartPolicy") == "Always";
    let is_sidecar = |name: &str| {
        init_specs
            .iter()
            .any(|c| str_at(c, "/name") == name && sidecar(c))
    };
    let total = arr(o, "/spec/containers").len() + init_specs.iter().filter(|c| sidecar(c)).count();
    let phase = str_at(o, "/status/phase");
    let mut reason = or(str_at(o, "/status/reason"), phase);
    if condition(o, "/status/conditions", "PodScheduled")
        .is_some_and(|c| str_at(c, "/reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let finished = |c: &Value| parse_rfc3339(str_at(c, "/lastState/terminated/finishedAt"));
    let (mut restarts, mut last_restart) = (0, None::<i64>);
    let (mut sidecar_restarts, mut sidecar_last_restart) = (0, None::<i64>);
    let mut ready = 0;
    let mut initializing = false;
    for (i, c) in arr(o, "/status/initContainerStatuses").iter().enumerate() {
        restarts += int_at(c, "/restartCount");
        last_restart = last_restart.max(finished(c));
        let is_sidecar = is_sidecar(str_at(c, "/name"));
        if is_sidecar {
            sidecar_restarts += int_at(c, "/restartCount");
            sidecar_last_restart = sidecar_last_restart.max(finished(c));
        }
        let terminated = c.pointer("/state/terminated").filter(|t| !t.is_null());
        let waiting = str_at(c, "/state/waiting/reason");
        if terminated.is_some_and(|t| int_at(t, "/exitCode") == 0) {
            continue;
        }
        if is_sidecar && bool_at(c, "/started", false) {
            if bool_at(c, "/ready", false) {
                ready += 1;
            }
            continue;
        }
        reason = match terminated {
            Some(t) => format!("Init:{}", exit_reason(t)),
            None if !waiting.is_empty() && waiting != "PodInitializing" => {
                format!("Init:{waiting}")
            }
            None => format!("Init:{i}/{}", init_specs.len()),
        };
        initializing = true;
        break;
    }
    if !initializing || condition_true(o, "/status/conditions", "Initialized") {
        restarts = sidecar_restarts;
        last_restart = sidecar_last_restart;
        let mut running = false;
        for c in arr(o, "/status/containerStatuses").iter().rev() {
            restarts += int_at(c, "/restartCount");
            last_restart = last_restart.max(finished(c));
            let waiting = str_at(c, "/state/waiting/reason");
            if !waiting.is_empty() {
                reason = waiting.to_string();
            } else if let Some(t) = c.pointer("/state/terminated").filter(|t| !t.is_null()) {
                reason = exit_reason(t);
            } else if bool_at(c, "/ready", false) && present(c, "/state/running") {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            reason = if condition_true(o, "/status/conditions", "Ready") {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }
    if deleting(o) && str_at(o, "/status/reason") == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting(o) && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }
    let restarts = match last_restart {
        Some(at) if restarts != 0 => format!("{restarts} ({} ago)", human_duration(now - at)),
        _ => restarts.to_string(),
    };
    let ip = match arr(o, "/status/podIPs").first() {
        Some(first) => str_at(first, "/ip"),
        None => str_at(o, "/status/podIP"),
    };
    let gates = arr(o, "/spec/readinessGates");
    let gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let met = gates
            .iter()
            .filter(|g| condition_true(o, "/status/conditions", str_at(g, "/conditionType")))
            .count();
        format!("{met}/{}", gates.len())
    };
    vec![
        name(o),
        (
            col(
                "Ready",
                "string",
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            json!(format!("{ready}/{total}")),
        ),
        (
            col(
                "Status",
                "string",
                "The aggregate status of the containers in this pod.",
            ),
            json!(reason),
        ),
        (
            col(
                "Restarts",
                "string",
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            ),
            json!(restarts),
        ),
        age(o, now),
        (
            wide(
                "IP",
                "IP address allocated to the pod. Routable at least within the cluster.",
            ),
            json!(or(ip, "<none>")),
        ),
        (
            wide(
                "Node",
                "NodeName indicates in which node this pod is scheduled.",
            ),
            json!(or(str_at(o, "/spec/nodeName"), "<none>")),
        ),
        (
            wide(
                "Nominated Node",
                "nominatedNodeName is set only when this pod preempts other pods on the node.",
            ),
            json!(or(str_at(o, "/status/nominatedNodeName"), "<none>")),
        ),
        (
            wide(
                "Readiness Gates",
                "If specified, all readiness gates will be evaluated for pod readiness.",
            ),
            json!(gates),
        ),
    ]
}

/// A terminated container's reason, or its signal or exit code.
fn exit_reason(terminated: &Value) -> String {
    match (str_at(terminated, "/reason"), int_at(terminated, "/signal")) {
        ("", 0) => format!("ExitCode:{}", int_at(terminated, "/exitCode")),
        ("", signal) => format!("Signal:{signal}"),
        (reason, _) => reason.to_string(),
    }
}

pub(crate) fn pod_template(o: &Value, _now: i64) -> Vec<Cell> {
    let [(_, names), (_, images)] = containers(o, "/template/spec/containers");
    vec![
        name(o),
        (
            col(
                "Containers",
                "string",
                "Names of each container in the template.",
            ),
            names,
        ),
        (
            col(
                "Images",
                "string",
                "Images referenced by each container in the template.",
            ),
            images,
        ),
        (
            col("Pod Labels", "string", "The labels for the pod template."),
            json!(labels(o.pointer("/template/metadata/labels"))),
        ),
    ]
}

pub(crate) fn service(o: &Value, now: i64) -> Vec<Cell> {
    let kind = str_at(o, "/spec/type");
    let external_ips: Vec<String> = arr(o, "/spec/externalIPs")
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    let external = match kind {
        "ClusterIP" | "NodePort" => or(&external_ips.join(","), "<none>"),
        "LoadBalancer" => {
            let mut all = load_balancer(o, "/status/loadBalancer/ingress");
            all.extend(external_ips);
            or(&all.join(","), "<pending>")
        }
        "ExternalName" => str_at(o, "/spec/externalName").to_string(),
        _ => "<unknown>".into(),
    };
    let cluster_ip = match arr(o, "/spec/clusterIPs").first() {
        Some(ip) => ip.as_str().unwrap_or_default(),
        None => str_at(o, "/spec/clusterIP"),
    };
    let ports: Vec<String> = arr(o, "/spec/ports")
        .iter()
        .map(|p| {
            let protocol = str_at(p, "/protocol");
            match int_at(p, "/nodePort") {
                0 => format!("{}/{protocol}", int_at(p, "/port")),
                node => format!("{}:{node}/{protocol}", int_at(p, "/port")),
            }
        })
        .collect();
    vec![
        name(o),
        (
            col(
                "Type",
                "string",
                "type determines how the Service is exposed.",
            ),
            json!(kind),
        ),
        (
            col(
                "Cluster-IP",
                "string",
                "clusterIP is the IP address of the service and is usually assigned randomly.",
            ),
            json!(or(cluster_ip, "<none>")),
        ),
        (
            col(
                "External-IP",
                "string",
                "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
            ),
            json!(external),
        ),
        (
            col(
                "Port(s)",
                "string",
                "The list of ports that are exposed by this service.",
            ),
            json!(or(&ports.join(","), "<none>")),
        ),
        age(o, now),
        (
            wide(
                "Selector",
                "Route service traffic to pods with label keys and values matching this selector.",
            ),
            json!(labels(o.pointer("/spec/selector"))),
        ),
    ]
}

pub(crate) fn endpoints(o: &Value, now: i64) -> Vec<Cell> {
    const MAX: usize = 3;
    let subsets = arr(o, "/subsets");
    let mut list = Vec::new();
    let mut count = 0;
    for subset in subsets {
        let addresses = arr(subset, "/addresses");
        let ports = arr(subset, "/ports");
        if ports.is_empty() {
            // A headless service without ports.
            count += addresses.len();
            list.extend(addresses.iter().map(|a| str_at(a, "/ip").to_string()));
            continue;
        }
        for port in ports {
            count += addresses.len();
            for a in addresses {
                let (ip, port) = (str_at(a, "/ip"), int_at(port, "/port"));
                list.push(if ip.contains(':') {
                    format!("[{ip}]:{port}")
                } else {
                    format!("{ip}:{port}")
                });
            }
        }
    }
    let text = if subsets.is_empty() {
        "<none>".to_string()
    } else if count > MAX {
        format!("{} + {} more...", list[..MAX].join(","), count - MAX)
    } else {
        list.join(",")
    };
    vec![
        name(o),
        (
            col(
                "Endpoints",
                "string",
                "The set of all endpoints is the union of all subsets.",
            ),
            json!(text),
        ),
        age(o, now),
    ]
}

pub(crate) fn node(o: &Value, now: i64) -> Vec<Cell> {
    let mut status = match condition(o, "/status/conditions", "Ready") {
        Some(c) if str_at(c, "/status") == "True" => vec!["Ready"],
        Some(_) => vec!["NotReady"],
        None => vec!["Unknown"],
    };
    if bool_at(o, "/spec/unschedulable", false) {
        status.push("SchedulingDisabled");
    }
    let mut roles: Vec<&str> = o
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|l| {
            l.iter()
                .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
                    Some(role) => Some(role).filter(|r| !r.is_empty()),
                    None if k == "kubernetes.io/role" => v.as_str().filter(|v| !v.is_empty()),
                    None => None,
                })
                .collect()
        })
        .unwrap_or_default();
    roles.sort_unstable();
    roles.dedup();
    let address = |kind: &str| {
        arr(o, "/status/addresses")
            .iter()
            .find(|a| str_at(a, "/type") == kind)
            .map_or("<none>", |a| str_at(a, "/address"))
            .to_string()
    };
    let info = |field: &str| or(str_at(o, &format!("/status/nodeInfo/{field}")), "<unknown>");
    vec![
        name(o),
        (
            col("Status", "string", "The status of the node"),
            json!(status.join(",")),
        ),
        (
            col("Roles", "string", "The roles of the node"),
            json!(or(&roles.join(","), "<none>")),
        ),
        age(o, now),
        (
            col("Version", "string", "Kubelet Version reported by the node."),
            json!(str_at(o, "/status/nodeInfo/kubeletVersion")),
        ),
        (
            wide("Internal-IP", "List of addresses reachable to the node."),
            json!(address("InternalIP")),
        ),
        (
            wide("External-IP", "List of addresses reachable to the node."),
            json!(address("ExternalIP")),
        ),
        (
            wide(
                "OS-Image",
                "OS Image reported by the node from /etc/os-release.",
            ),
            json!(info("osImage")),
        ),
        (
            wide(
                "Kernel-Version",
                "Kernel Version reported by the node from 'uname -r'.",
            ),
            json!(info("kernelVersion")),
        ),
        (
            wide(
                "Container-Runtime",
                "ContainerRuntime Version reported by the node through runtime remote API.",
            ),
            json!(info("containerRuntimeVersion")),
        ),
    ]
}

/// Where an Event keeps each field: core/v1 and events.k8s.io/v1 name them
/// differently.
struct EventFields {
    first: &'static str,
    last: &'static str,
    count: &'static str,
    object: &'static str,
    source: &'static str,
    message: &'static str,
}

pub(crate) fn event(o: &Value, now: i64) -> Vec<Cell> {
    let fields = EventFields {
        first: "/firstTimestamp",
        last: "/lastTimestamp",
        count: "/count",
        object: "/involvedObject",
        source: "/source",
        message: "/message",
    };
    event_row(o, now, &fields)
}

pub(crate) fn events_event(o: &Value, now: i64) -> Vec<Cell> {
    let fields = EventFields {
        first: "/deprecatedFirstTimestamp",
        last: "/deprecatedLastTimestamp",
        count: "/deprecatedCount",
        object: "/regarding",
        source: "/deprecatedSource",
        message: "/note",
    };
    event_row(o, now, &fields)
}

fn event_row(o: &Value, now: i64, f: &EventFields) -> Vec<Cell> {
    let unknown = || "<unknown>".to_string();
    let first = since(o, f.first, now)
        .or_else(|| since(o, "/eventTime", now))
        .unwrap_or_else(unknown);
    let mut last = since(o, f.last, now).unwrap_or_else(|| first.clone());
    let mut count = int_at(o, f.count);
    if present(o, "/series") {
        last = since(o, "/series/lastObservedTime", now).unwrap_or_else(unknown);
        count = int_at(o, "/series/count");
    } else if count == 0 {
        count = 1;
    }
    let object = o.pointer(f.object).unwrap_or(&Value::Null);
    let kind = str_at(object, "/kind").to_lowercase();
    let target = match str_at(object, "/name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let component = or(
        str_at(o, &format!("{}/component", f.source)),
        str_at(o, "/reportingController"),
    );
    let instance = or(
        str_at(o, &format!("{}/host", f.source)),
        str_at(o, "/reportingInstance"),
    );
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        (
            col(
                "Last Seen",
                "string",
                "The time at which the most recent occurrence of this event was recorded.",
            ),
            json!(last),
        ),
        (
            col(
                "Type",
                "string",
                "Type of this event (Normal, Warning), new types could be added in the future",
            ),
            json!(str_at(o, "/type")),
        ),
        (
            col(
                "Reason",
                "string",
                "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
            ),
            json!(str_at(o, "/reason")),
        ),
        (
            col("Object", "string", "The object that this event is about."),
            json!(target),
        ),
        (
            wide(
                "Subobject",
                "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement.",
            ),
            json!(str_at(object, "/fieldPath")),
        ),
        (
            wide("Source", "The component reporting this event."),
            json!(source),
        ),
        (
            col(
                "Message",
                "string",
                "A human-readable description of the status of this operation.",
            ),
            json!(str_at(o, f.message).trim()),
        ),
        (
            wide(
                "First Seen",
                "The time at which the event was first recorded.",
            ),
            json!(first),
        ),
        (
            wide("Count", "The number of times this event has occurred."),
            json!(count),
        ),
        (
            Column {
                priority: 1,
                ..NAME
            },
            json!(str_at(o, "/metadata/name")),
        ),
    ]
}

pub(crate) fn namespace(o: &Value, now: i64) -> Vec<Cell> {
    vec![
        name(o),
        (
            col("Status", "string", "The status of the namespace"),
            json!(str_at(o, "/status/phase")),
        ),
        age(o, now),
    ]
}

pub(crate) fn secret(o: &Value, now: i64) -> Vec<Cell> {
    vec![
        name(o),
        (
            col(
                "Type",
                "string",
                "Used to facilitate programmatic handling of secret data.",
            ),
            json!(str_at(o, "/type")),
        ),
        (
            col("Data", "string", "Data contains the secret data."),
            json!(map_len(o, "data")),
        ),
        age(o, now),
    ]
}

pub(crate) fn config_map(o: &Value, now: i64) -> Vec<Cell> {
    let entries = map_len(o, "data") + map_len(o, "binaryData");
    vec![
        name(o),
        (
            col("Data", "string", "Data contains the configuration data."),
            json!(entries),
        ),
        age(o, now),
    ]
}

pub(crate) fn service_account(o: &Value, now: i64) -> Vec<Cell> {
    vec![
        name(o),
        (
            col(
                "Secrets",
                "string",
                "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
            ),
            json!(arr(o, "/secrets").len()),
        ),
        age(o, now),
    ]
}

/// Access modes in upstream's short form and order.
fn access_modes(o: &Value, pointer: &str) -> String {
    let modes: Vec<&str> = arr(o, pointer).iter().filter_map(Value::as_str).collect();
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(long, _)| modes.contains(long))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// The StorageClass, VolumeAttributesClass cells of a volume or claim (`what`:
/// `pv` or `pvc`): the beta annotation before the field, as upstream.
fn classes(o: &Value, what: &'static str) -> [Cell; 2] {
    let class = o
        .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
        .and_then(Value::as_str)
        .unwrap_or_else(|| str_at(o, "/spec/storageClassName"));
    let attributes = or(str_at(o, "/spec/volumeAttributesClassName"), "<unset>");
    let (storage_doc, attributes_doc) = match what {
        "pv" => ("StorageClass of the pv", "VolumeAttributesClass of the pv"),
        _ => (
            "StorageClass of the pvc",
            "VolumeAttributesClass of the pvc",
        ),
    };
    [
        (col("StorageClass", "string", storage_doc), json!(class)),
        (
            col("VolumeAttributesClass", "string", attributes_doc),
            json!(attributes),
        ),
    ]
}

fn volume_mode(o: &Value) -> Cell {
    let mode = or(str_at(o, "/spec/volumeMode"), "<unset>");
    (
        wide(
            "VolumeMode",
            "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state.",
        ),
        json!(mode),
    )
}

fn phase(o: &Value) -> &str {
    if deleting(o) {
        "Terminating"
    } else {
        str_at(o, "/status/phase")
    }
}

pub(crate) fn persistent_volume(o: &Value, now: i64) -> Vec<Cell> {
    let claim = pair_at(o, "/spec/claimRef", "namespace", "name").unwrap_or_default();
    let capacity = text_at(o, "/spec/capacity/storage").unwrap_or_else(|| "0".into());
    let [class, attributes] = classes(o, "pv");
    vec![
        name(o),
        (
            col(
                "Capacity",
                "string",
                "capacity is the description of the persistent volume's resources and capacity.",
            ),
            json!(capacity),
        ),
        (
            col(
                "Access Modes",
                "string",
                "accessModes contains all ways the volume can be mounted.",
            ),
            json!(access_modes(o, "/spec/accessModes")),
        ),
        (
            col(
                "Reclaim Policy",
                "string",
                "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim.",
            ),
            json!(str_at(o, "/spec/persistentVolumeReclaimPolicy")),
        ),
        (
            col(
                "Status",
                "string",
                "phase indicates if a volume is available, bound to a claim, or released by a claim.",
            ),
            json!(phase(o)),
        ),
        (
            col(
                "Claim",
                "string",
                "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim.",
            ),
            json!(claim),
        ),
        class,
        attributes,
        (
            col(
                "Reason",
                "string",
                "reason is a brief CamelCase string that describes any failure.",
            ),
            json!(str_at(o, "/status/reason")),
        ),
        age(o, now),
        volume_mode(o),
    ]
}

pub(crate) fn persistent_volume_claim(o: &Value, now: i64) -> Vec<Cell> {
    let (capacity, modes) = if str_at(o, "/spec/volumeName").is_empty() {
        (String::new(), String::new())
    } else {
        (
            text_at(o, "/status/capacity/storage").unwrap_or_else(|| "0".into()),
            access_modes(o, "/status/accessModes"),
        )
    };
    let [class, attributes] = classes(o, "pvc");
    vec![
        name(o),
        (
            col(
                "Status",
                "string",
                "phase represents the current phase of PersistentVolumeClaim.",
            ),
            json!(phase(o)),
        ),
        (
            col(
                "Volume",
                "string",
                "volumeName is the binding reference to the PersistentVolume backing this claim.",
            ),
            json!(str_at(o, "/spec/volumeName")),
        ),
        (
            col(
                "Capacity",
                "string",
                "capacity represents the actual resources of the underlying volume.",
            ),
            json!(capacity),
        ),
        (
            col(
                "Access Modes",
                "string",
                "accessModes contains the actual access modes the volume backing the PVC has.",
            ),
            json!(modes),
        ),
        class,
        attributes,
        age(o, now),
        volume_mode(o),
    ]
}

pub(crate) fn resource_quota(o: &Value, now: i64) -> Vec<Cell> {
    let (mut requests, mut limits) = (Vec::new(), Vec::new());
    // serde_json's maps are sorted, as upstream sorts the resource names.
    let hard = o.pointer("/status/hard").and_then(Value::as_object);
    for (resource, limit) in hard.into_iter().flatten() {
        let used = o.pointer("/status/used").and_then(|u| u.get(resource));
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("0").to_string();
        let entry = format!("{resource}: {}/{}", text(used), text(Some(limit)));
        match resource.split_once('.') {
            Some(("limits", _)) => limits.push(entry),
            _ => requests.push(entry),
        }
    }
    vec![
        name(o),
        (
            col(
                "Request",
                "string",
                "Request represents a minimum amount of cpu/memory that a container may consume.",
            ),
            json!(requests.join(", ")),
        ),
        (
            col(
                "Limit",
                "string",
                "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
            ),
            json!(limits.join(", ")),
        ),
        age(o, now),
    ]
}

pub(crate) fn component_status(o: &Value, _now: i64) -> Vec<Cell> {
    let healthy = condition(o, "/conditions", "Healthy");
    let status = match healthy.map(|c| str_at(c, "/status")) {
        Some("True") => "Healthy",
        Some(_) => "Unhealthy",
        None => "Unknown",
    };
    let field = |f: &str| healthy.map_or("", |c| str_at(c, f));
    vec![
        name(o),
        (
            col("Status", "string", "Status of the component conditions"),
            json!(status),
        ),
        (
            col("Message", "string", "Message of the component conditions"),
            json!(field("/message")),
        ),
        (
            col("Error", "string", "Error of the component conditions"),
            json!(field("/error")),
        ),
    ]
}
