//! Server-side Table output (`meta.k8s.io/v1 Table`): the columns `kubectl
//! get` prints, per kind, as upstream's printers define them
//! (`pkg/printers/internalversion/printers.go`, and kube-aggregator's for
//! APIServices). Columns of priority 1 are the `-o wide` ones; the server
//! always sends their cells, and kubectl hides them unless asked.
//!
//! Each kind's printer yields its columns and cells together,
//! so the two cannot disagree; a kind without a printer gets upstream's
//! default table (Name, Created At).

mod cluster;
mod core;
mod read;
mod workloads;

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

/// A column and one object's value in it.
type Cell = (Column, Value);

/// A kind's printer: every cell of one object's row, in column order.
type Printer = fn(&Value, i64) -> Vec<Cell>;

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

const CREATED_AT: Column = col(
    "Created At",
    "date",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
);

/// The columns of a kind.
pub fn columns(def: &ResourceDef) -> Vec<Column> {
    match printer(&def.group, &def.kind) {
        // A printer asked about no object names its columns all the same.
        Some(print) => print(&Value::Null, 0).into_iter().map(|(c, _)| c).collect(),
        None => vec![NAME, CREATED_AT],
    }
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

/// The cells of one object's row, matching [`column_definitions`].
pub fn cells(def: &ResourceDef, o: &Value, now: i64) -> Vec<Value> {
    if let Some(custom) = &def.custom {
        let mut row = vec![json!(str_at(o, "/metadata/name"))];
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
    match printer(&def.group, &def.kind) {
        Some(print) => print(o, now).into_iter().map(|(_, v)| v).collect(),
        None => vec![
            json!(str_at(o, "/metadata/name")),
            json!(str_at(o, "/metadata/creationTimestamp")),
        ],
    }
}

/// The printer of a kind, if upstream has one.
fn printer(group: &str, kind: &str) -> Option<Printer> {
    Some(match (group, kind) {
        ("", "Pod") => core::pod,
        ("", "PodTemplate") => core::pod_template,
        ("", "ComponentStatus") => core::component_status,
        ("", "ReplicationController") => workloads::replication_controller,
        ("", "Service") => core::service,
        ("", "Endpoints") => core::endpoints,
        ("", "Node") => core::node,
        ("", "Event") => core::event,
        ("events.k8s.io", "Event") => core::events_event,
        ("", "Namespace") => core::namespace,
        ("", "Secret") => core::secret,
        ("", "ConfigMap") => core::config_map,
        ("", "ServiceAccount") => core::service_account,
        ("", "PersistentVolume") => core::persistent_volume,
        ("", "PersistentVolumeClaim") => core::persistent_volume_claim,
        ("", "ResourceQuota") => core::resource_quota,
        ("apps", "Deployment") => workloads::deployment,
        ("apps", "ReplicaSet") => workloads::replica_set,
        ("apps", "StatefulSet") => workloads::stateful_set,
        ("apps", "DaemonSet") => workloads::daemon_set,
        ("apps", "ControllerRevision") => workloads::controller_revision,
        ("batch", "Job") => workloads::job,
        ("batch", "CronJob") => workloads::cron_job,
        ("autoscaling", "HorizontalPodAutoscaler") => workloads::horizontal_pod_autoscaler,
        ("policy", "PodDisruptionBudget") => workloads::pod_disruption_budget,
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            cluster::role_binding
        }
        ("coordination.k8s.io", "Lease") => cluster::lease,
        ("discovery.k8s.io", "EndpointSlice") => cluster::endpoint_slice,
        ("networking.k8s.io", "Ingress") => cluster::ingress,
        ("networking.k8s.io", "IngressClass") => cluster::ingress_class,
        ("networking.k8s.io", "NetworkPolicy") => cluster::network_policy,
        ("networking.k8s.io", "ServiceCIDR") => cluster::service_cidr,
        ("networking.k8s.io", "IPAddress") => cluster::ip_address,
        ("storage.k8s.io", "StorageClass") => cluster::storage_class,
        ("storage.k8s.io", "VolumeAttachment") => cluster::volume_attachment,
        ("storage.k8s.io", "CSINode") => cluster::csi_node,
        ("storage.k8s.io", "CSIDriver") => cluster::csi_driver,
        ("storage.k8s.io", "CSIStorageCapacity") => cluster::csi_storage_capacity,
        ("scheduling.k8s.io", "PriorityClass") => cluster::priority_class,
        ("node.k8s.io", "RuntimeClass") => cluster::runtime_class,
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            cluster::certificate_signing_request
        }
        (
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration",
        ) => cluster::webhook_configuration,
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => cluster::admission_policy,
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            cluster::admission_policy_binding
        }
        ("apiregistration.k8s.io", "APIService") => cluster::api_service,
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
