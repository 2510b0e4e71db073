//! Server-side Table output (`meta.k8s.io/v1 Table`): the columns `kubectl
//! get` prints, per kind, as upstream's printers define them
//! (`pkg/printers/internalversion/printers.go`). Columns of priority 1 are
//! the `-o wide` ones.

use serde_json::{Value, json};

use crate::json::str_at;
use crate::registry::ResourceDef;
use crate::time::{human_duration, parse_rfc3339};

/// One column definition.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub name: &'static str,
    pub kind: &'static str,
    pub format: &'static str,
    pub description: &'static str,
    pub priority: u8,
}

const fn col(name: &'static str, kind: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind,
        format: "",
        description,
        priority: 0,
    }
}

const fn wide(name: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind: "string",
        format: "",
        description,
        priority: 1,
    }
}

const NAME: Column = Column {
    name: "Name",
    kind: "string",
    format: "name",
    description: "Name must be unique within a namespace.",
    priority: 0,
};
const AGE: Column = col(
    "Age",
    "string",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
);
const CONTAINERS: Column = wide("Containers", "Names of each container in the template.");
const IMAGES: Column = wide(
    "Images",
    "Images referenced by each container in the template.",
);
const SELECTOR: Column = wide("Selector", "Label selector over pods.");

/// The columns of a kind.
pub fn columns(def: &ResourceDef) -> Vec<Column> {
    let mut c = vec![NAME];
    match (def.group.as_str(), def.kind.as_str()) {
        ("", "Pod") => c.extend([
            col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
            col("Status", "string", "The aggregate status of the containers in this pod."),
            col("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            AGE,
            wide("IP", "IP address allocated to the pod."),
            wide("Node", "Name of the node this pod is assigned to."),
            wide("Nominated Node", "Name of the node where the pod is nominated for preemption."),
            wide("Readiness Gates", "Readiness gates of the pod."),
        ]),
        ("apps", "Deployment") => c.extend([
            col("Ready", "string", "Number of the pod with ready state"),
            col("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
            col("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ]),
        ("apps", "ReplicaSet") | ("", "ReplicationController") => c.extend([
            col("Desired", "integer", "Replicas is the number of desired replicas."),
            col("Current", "integer", "Replicas is the most recently observed number of replicas."),
            col("Ready", "integer", "The number of ready replicas for this replica set."),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ]),
        ("apps", "StatefulSet") => c.extend([col("Ready", "string", "Number of the pod with ready state"), AGE, CONTAINERS, IMAGES]),
        ("apps", "DaemonSet") => c.extend([
            col("Desired", "integer", "The total number of nodes that should be running the daemon pod."),
            col("Current", "integer", "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod."),
            col("Ready", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready."),
            col("Up-to-date", "integer", "The total number of nodes that are running updated daemon pod"),
            col("Available", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available."),
            col("Node Selector", "string", "NodeSelector is a selector which must be true for the pod to fit on a node."),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ]),
        ("batch", "Job") => c.extend([
            col("Status", "string", "Status of the job."),
            col("Completions", "string", "The desired number of successfully finished pods the job should be run with."),
            col("Duration", "string", "Time required to complete the job."),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ]),
        ("batch", "CronJob") => c.extend([
            col("Schedule", "string", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
            col("Timezone", "string", "The time zone name for the given schedule."),
            col("Suspend", "boolean", "This flag tells the controller to suspend subsequent executions."),
            col("Active", "integer", "A list of pointers to currently running jobs."),
            col("Last Schedule", "string", "Information when was the last time the job was successfully scheduled."),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ]),
        ("", "Service") => c.extend([
            col("Type", "string", "The type of service."),
            col("Cluster-IP", "string", "The cluster IP of the service."),
            col("External-IP", "string", "The external IPs of the service."),
            col("Port(s)", "string", "The ports of the service."),
            AGE,
            SELECTOR,
        ]),
        ("", "ConfigMap") => c.extend([col("Data", "integer", "The number of entries in the data."), AGE]),
        ("", "Secret") => c.extend([
            col("Type", "string", "The type of the secret."),
            col("Data", "integer", "The number of entries in the data."),
            AGE,
        ]),
        ("", "Namespace") => c.extend([col("Status", "string", "The status of the namespace."), AGE]),
        ("", "Node") => c.extend([
            col("Status", "string", "The status of the node."),
            col("Roles", "string", "The roles of the node."),
            AGE,
            col("Version", "string", "Kubelet Version reported by the node."),
            wide("Internal-IP", "List of internal IPs."),
            wide("External-IP", "List of external IPs."),
            wide("OS-Image", "OS image reported by the node."),
            wide("Kernel-Version", "Kernel version reported by the node."),
            wide("Container-Runtime", "Container runtime reported by the node."),
        ]),
        ("", "ServiceAccount") => c.extend([col("Secrets", "integer", "The number of secrets."), AGE]),
        ("", "Endpoints") => c.extend([col("Endpoints", "string", "Endpoints of the service."), AGE]),
        ("coordination.k8s.io", "Lease") => c.extend([col("Holder", "string", "The holder of the lease."), AGE]),
        ("", "Event") => {
            return vec![
                col("Last Seen", "string", "Time when this event was last seen."),
                col("Type", "string", "The type of the event."),
                col("Reason", "string", "The reason of the event."),
                col("Object", "string", "The object the event is about."),
                col("Message", "string", "The message of the event."),
                wide("Source", "The component reporting the event."),
                wide("First Seen", "Time when this event was first seen."),
                wide("Count", "The number of times this event happened."),
                NAME,
            ];
        }
        _ => c.push(col("Created At", "date", "CreationTimestamp is a timestamp representing the server time when this object was created.")),
    }
    c
}

/// The column definitions of a Table, as JSON.
pub fn column_definitions(def: &ResourceDef) -> Value {
    if let Some(custom) = &def.custom {
        // A custom resource: its definition's printer columns after the name.
        let mut out = vec![
            json!({"name": NAME.name, "type": NAME.kind, "format": NAME.format, "description": NAME.description, "priority": 0}),
        ];
        out.extend(custom.printer_columns.iter().map(|c| {
            json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority})
        }));
        return Value::Array(out);
    }
    Value::Array(
        columns(def)
            .iter()
            .map(|c| json!({"name": c.name, "type": c.kind, "format": c.format, "description": c.description, "priority": c.priority}))
            .collect(),
    )
}

fn int_at(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn age(object: &Value, now: i64) -> Value {
    match parse_rfc3339(str_at(object, "/metadata/creationTimestamp")) {
        Some(created) => json!(human_duration(now - created)),
        None => json!("<unknown>"),
    }
}

fn none_if_empty(s: String) -> String {
    if s.is_empty() { "<none>".into() } else { s }
}

fn template_containers(object: &Value, pointer: &str) -> (Value, Value) {
    let containers = object
        .pointer(pointer)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = containers.iter().map(|c| str_at(c, "/name")).collect();
    let images: Vec<&str> = containers.iter().map(|c| str_at(c, "/image")).collect();
    (json!(names.join(",")), json!(images.join(",")))
}

fn selector_text(selector: Option<&Value>) -> String {
    none_if_empty(
        selector
            .map(crate::selector::format_label_selector)
            .unwrap_or_default(),
    )
}

fn map_selector(selector: Option<&Value>) -> String {
    none_if_empty(
        selector
            .map(crate::selector::format_map_selector)
            .unwrap_or_default(),
    )
}

fn pod_cells(pod: &Value, now: i64) -> Vec<Value> {
    let containers = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ready = statuses
        .iter()
        .filter(|s| s.get("ready").and_then(Value::as_bool) == Some(true))
        .count();
    let restarts: i64 = statuses.iter().map(|s| int_at(s, "/restartCount")).sum();
    let mut reason = str_at(pod, "/status/phase").to_string();
    if let Some(r) = pod.pointer("/status/reason").and_then(Value::as_str) {
        reason = r.to_string();
    }
    for status in &statuses {
        if let Some(waiting) = status
            .pointer("/state/waiting/reason")
            .and_then(Value::as_str)
        {
            reason = waiting.to_string();
        } else if let Some(terminated) = status
            .pointer("/state/terminated/reason")
            .and_then(Value::as_str)
        {
            reason = terminated.to_string();
        }
    }
    if pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        reason = "Terminating".into();
    }
    let gates = pod
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    vec![
        json!(format!("{ready}/{containers}")),
        json!(reason),
        json!(restarts.to_string()),
        age(pod, now),
        json!(none_if_empty(str_at(pod, "/status/podIP").to_string())),
        json!(none_if_empty(str_at(pod, "/spec/nodeName").to_string())),
        json!(none_if_empty(
            str_at(pod, "/status/nominatedNodeName").to_string()
        )),
        json!(if gates == 0 {
            "<none>".to_string()
        } else {
            format!("0/{gates}")
        }),
    ]
}

fn service_ports(svc: &Value) -> String {
    let ports = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let parts: Vec<String> = ports
        .iter()
        .map(|p| {
            let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            match p.get("nodePort").and_then(Value::as_i64) {
                Some(node) => format!("{}:{node}/{protocol}", int_at(p, "/port")),
                None => format!("{}/{protocol}", int_at(p, "/port")),
            }
        })
        .collect();
    none_if_empty(parts.join(","))
}

/// The cells of one object's row, matching [`columns`].
pub fn cells(def: &ResourceDef, o: &Value, now: i64) -> Vec<Value> {
    let name = json!(str_at(o, "/metadata/name"));
    let mut row = vec![name.clone()];
    if let Some(custom) = &def.custom {
        for column in &custom.printer_columns {
            let value = crate::crd::json_path(o, &column.json_path);
            row.push(match (column.type_.as_str(), value) {
                (_, None) => Value::Null,
                ("date", Some(Value::String(t))) => match parse_rfc3339(t) {
                    Some(at) => json!(human_duration(now - at)),
                    None => json!(t),
                },
                (_, Some(v)) => v.clone(),
            });
        }
        return row;
    }
    match (def.group.as_str(), def.kind.as_str()) {
        ("", "Pod") => row.extend(pod_cells(o, now)),
        ("apps", "Deployment") => {
            let (containers, images) = template_containers(o, "/spec/template/spec/containers");
            row.extend([
                json!(format!(
                    "{}/{}",
                    int_at(o, "/status/readyReplicas"),
                    int_at(o, "/spec/replicas")
                )),
                json!(int_at(o, "/status/updatedReplicas")),
                json!(int_at(o, "/status/availableReplicas")),
                age(o, now),
                containers,
                images,
                json!(selector_text(o.pointer("/spec/selector"))),
            ]);
        }
        ("apps", "ReplicaSet") | ("", "ReplicationController") => {
            let (containers, images) = template_containers(o, "/spec/template/spec/containers");
            let selector = if def.kind == "ReplicaSet" {
                selector_text(o.pointer("/spec/selector"))
            } else {
                map_selector(o.pointer("/spec/selector"))
            };
            row.extend([
                json!(int_at(o, "/spec/replicas")),
                json!(int_at(o, "/status/replicas")),
                json!(int_at(o, "/status/readyReplicas")),
                age(o, now),
                containers,
                images,
                json!(selector),
            ]);
        }
        ("apps", "StatefulSet") => {
            let (containers, images) = template_containers(o, "/spec/template/spec/containers");
            row.extend([
                json!(format!(
                    "{}/{}",
                    int_at(o, "/status/readyReplicas"),
                    int_at(o, "/spec/replicas")
                )),
                age(o, now),
                containers,
                images,
            ]);
        }
        ("apps", "DaemonSet") => {
            let (containers, images) = template_containers(o, "/spec/template/spec/containers");
            row.extend([
                json!(int_at(o, "/status/desiredNumberScheduled")),
                json!(int_at(o, "/status/currentNumberScheduled")),
                json!(int_at(o, "/status/numberReady")),
                json!(int_at(o, "/status/updatedNumberScheduled")),
                json!(int_at(o, "/status/numberAvailable")),
                json!(map_selector(o.pointer("/spec/template/spec/nodeSelector"))),
                age(o, now),
                containers,
                images,
                json!(selector_text(o.pointer("/spec/selector"))),
            ]);
        }
        ("batch", "Job") => {
            let (containers, images) = template_containers(o, "/spec/template/spec/containers");
            let conditions = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let has = |t: &str| {
                conditions
                    .iter()
                    .any(|c| str_at(c, "/type") == t && str_at(c, "/status") == "True")
            };
            let status = if has("Complete") {
                "Complete"
            } else if has("Failed") {
                "Failed"
            } else if has("Suspended") {
                "Suspended"
            } else {
                "Running"
            };
            let duration = match (
                parse_rfc3339(str_at(o, "/status/startTime")),
                parse_rfc3339(str_at(o, "/status/completionTime")),
            ) {
                (Some(start), Some(end)) => human_duration(end - start),
                (Some(start), None) => human_duration(now - start),
                _ => String::new(),
            };
            row.extend([
                json!(status),
                json!(format!(
                    "{}/{}",
                    int_at(o, "/status/succeeded"),
                    int_at(o, "/spec/completions")
                )),
                json!(duration),
                age(o, now),
                containers,
                images,
                json!(selector_text(o.pointer("/spec/selector"))),
            ]);
        }
        ("batch", "CronJob") => {
            let (containers, images) =
                template_containers(o, "/spec/jobTemplate/spec/template/spec/containers");
            let last = parse_rfc3339(str_at(o, "/status/lastScheduleTime"))
                .map_or("<none>".to_string(), |t| human_duration(now - t));
            row.extend([
                json!(str_at(o, "/spec/schedule")),
                json!(none_if_empty(str_at(o, "/spec/timeZone").to_string())),
                json!(
                    o.pointer("/spec/suspend")
                        .and_then(Value::as_bool)
                        .unwrap_or(false)
                ),
                json!(
                    o.pointer("/status/active")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len)
                ),
                json!(last),
                age(o, now),
                containers,
                images,
                json!(selector_text(o.pointer("/spec/jobTemplate/spec/selector"))),
            ]);
        }
        ("", "Service") => {
            let external: Vec<&str> = o
                .pointer("/spec/externalIPs")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let kind = str_at(o, "/spec/type");
            let external = if !external.is_empty() {
                external.join(",")
            } else if kind == "LoadBalancer" {
                "<pending>".into()
            } else {
                "<none>".into()
            };
            row.extend([
                json!(kind),
                json!(none_if_empty(str_at(o, "/spec/clusterIP").to_string())),
                json!(external),
                json!(service_ports(o)),
                age(o, now),
                json!(map_selector(o.pointer("/spec/selector"))),
            ]);
        }
        ("", "ConfigMap") => {
            let count = ["data", "binaryData"]
                .iter()
                .map(|f| o.get(f).and_then(Value::as_object).map_or(0, |m| m.len()))
                .sum::<usize>();
            row.extend([json!(count), age(o, now)]);
        }
        ("", "Secret") => {
            let count = o
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len());
            row.extend([json!(str_at(o, "/type")), json!(count), age(o, now)]);
        }
        ("", "Namespace") => row.extend([json!(str_at(o, "/status/phase")), age(o, now)]),
        ("", "Node") => {
            let conditions = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let ready = conditions.iter().find(|c| str_at(c, "/type") == "Ready");
            let mut status = match ready.map(|c| str_at(c, "/status")) {
                Some("True") => "Ready".to_string(),
                _ => "NotReady".to_string(),
            };
            if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
                status.push_str(",SchedulingDisabled");
            }
            let roles: Vec<String> = o
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .map(|l| {
                    l.keys()
                        .filter_map(|k| {
                            k.strip_prefix("node-role.kubernetes.io/")
                                .map(str::to_string)
                        })
                        .collect()
                })
                .unwrap_or_default();
            let address = |t: &str| -> String {
                let list: Vec<&str> = o
                    .pointer("/status/addresses")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter(|x| str_at(x, "/type") == t)
                            .map(|x| str_at(x, "/address"))
                            .collect()
                    })
                    .unwrap_or_default();
                none_if_empty(list.join(","))
            };
            row.extend([
                json!(status),
                json!(none_if_empty(roles.join(","))),
                age(o, now),
                json!(str_at(o, "/status/nodeInfo/kubeletVersion")),
                json!(address("InternalIP")),
                json!(address("ExternalIP")),
                json!(str_at(o, "/status/nodeInfo/osImage")),
                json!(str_at(o, "/status/nodeInfo/kernelVersion")),
                json!(str_at(o, "/status/nodeInfo/containerRuntimeVersion")),
            ]);
        }
        ("", "ServiceAccount") => row.extend([
            json!(
                o.get("secrets")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len)
            ),
            age(o, now),
        ]),
        ("", "Endpoints") => {
            let mut list = Vec::new();
            for subset in o
                .get("subsets")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
            {
                for address in subset
                    .get("addresses")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
                {
                    for port in subset
                        .get("ports")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                    {
                        list.push(format!(
                            "{}:{}",
                            str_at(&address, "/ip"),
                            int_at(&port, "/port")
                        ));
                    }
                }
            }
            row.extend([json!(none_if_empty(list.join(","))), age(o, now)]);
        }
        ("coordination.k8s.io", "Lease") => {
            row.extend([json!(str_at(o, "/spec/holderIdentity")), age(o, now)]);
        }
        ("", "Event") => {
            let last = [
                "/lastTimestamp",
                "/eventTime",
                "/metadata/creationTimestamp",
            ]
            .iter()
            .find_map(|p| parse_rfc3339(str_at(o, p)))
            .map_or("<unknown>".to_string(), |t| human_duration(now - t));
            let first = parse_rfc3339(str_at(o, "/firstTimestamp"))
                .map_or("<unknown>".to_string(), |t| human_duration(now - t));
            let object = format!(
                "{}/{}",
                str_at(o, "/involvedObject/kind").to_lowercase(),
                str_at(o, "/involvedObject/name")
            );
            return vec![
                json!(last),
                json!(str_at(o, "/type")),
                json!(str_at(o, "/reason")),
                json!(object),
                json!(str_at(o, "/message")),
                json!(str_at(o, "/source/component")),
                json!(first),
                json!(int_at(o, "/count")),
                name,
            ];
        }
        _ => row.push(json!(str_at(o, "/metadata/creationTimestamp"))),
    }
    row
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Registry;

    #[test]
    fn every_row_has_a_cell_per_column() {
        let registry = Registry::builtin();
        let object =
            json!({"metadata": {"name": "x", "creationTimestamp": "2026-11-30T09:00:00Z"}});
        for def in registry.all() {
            assert_eq!(
                columns(def).len(),
                cells(def, &object, 0).len(),
                "{}",
                def.gvr()
            );
        }
    }

    #[test]
    fn deployment_rows_read_as_kubectl_prints_them() {
        let registry = Registry::builtin();
        let def = registry.get("apps", "v1", "deployments").expect("def");
        let d = json!({
            "metadata": {"name": "web", "creationTimestamp": "2026-11-30T09:00:00Z"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"spec": {"containers": [{"name": "main", "image": "r/web:2"}]}}},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}
        });
        let now = parse_rfc3339("2026-11-30T09:05:00Z").expect("time");
        let row = cells(def, &d, now);
        assert_eq!(
            row,
            vec![
                json!("web"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("5m"),
                json!("main"),
                json!("r/web:2"),
                json!("app=web")
            ]
        );
        let names: Vec<&str> = columns(def).iter().map(|c| c.name).collect();
        assert_eq!(
            names[..5],
            ["Name", "Ready", "Up-to-date", "Available", "Age"]
        );
    }
}
