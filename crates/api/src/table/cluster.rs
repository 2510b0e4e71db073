//! Printers of the cluster's other kinds: RBAC, coordination, discovery,
//! networking, storage, scheduling, node, certificates, admission and API
//! registration (kube-aggregator's printer).

use serde_json::{Value, json};

use super::read::{
    age, arr, bool_at, condition, int_at, label_selector, list_with_more, load_balancer, name, or,
    pair_at, present, text_at,
};
use super::{Cell, Column, NAME, col, wide};
use crate::json::str_at;
use crate::time::human_duration;

pub(crate) fn role_binding(o: &Value, now: i64) -> Vec<Cell> {
    let subjects = |kind: &str| -> String {
        arr(o, "/subjects")
            .iter()
            .filter(|s| str_at(s, "/kind") == kind)
            .map(|s| match kind {
                "ServiceAccount" => format!("{}/{}", str_at(s, "/namespace"), str_at(s, "/name")),
                _ => str_at(s, "/name").to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let role = format!(
        "{}/{}",
        str_at(o, "/roleRef/kind"),
        str_at(o, "/roleRef/name")
    );
    vec![
        name(o),
        (
            col(
                "Role",
                "string",
                "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace.",
            ),
            json!(role),
        ),
        age(o, now),
        (
            wide("Users", "Users in the roleBinding"),
            json!(subjects("User")),
        ),
        (
            wide("Groups", "Groups in the roleBinding"),
            json!(subjects("Group")),
        ),
        (
            wide("ServiceAccounts", "ServiceAccounts in the roleBinding"),
            json!(subjects("ServiceAccount")),
        ),
    ]
}

pub(crate) fn lease(o: &Value, now: i64) -> Vec<Cell> {
    vec![
        name(o),
        (
            col(
                "Holder",
                "string",
                "holderIdentity contains the identity of the holder of a current lease.",
            ),
            json!(str_at(o, "/spec/holderIdentity")),
        ),
        age(o, now),
    ]
}

pub(crate) fn endpoint_slice(o: &Value, now: i64) -> Vec<Cell> {
    let ports: Vec<String> = arr(o, "/ports")
        .iter()
        .map(|p| match p.get("port").and_then(Value::as_i64) {
            Some(port) => port.to_string(),
            None => or(str_at(p, "/name"), "*"),
        })
        .collect();
    let addresses: Vec<String> = arr(o, "/endpoints")
        .iter()
        .flat_map(|e| arr(e, "/addresses"))
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    vec![
        name(o),
        (
            col(
                "AddressType",
                "string",
                "addressType specifies the type of address carried by this EndpointSlice.",
            ),
            json!(str_at(o, "/addressType")),
        ),
        (
            col(
                "Ports",
                "string",
                "ports specifies the list of network ports exposed by each endpoint in this slice.",
            ),
            json!(list_with_more(&ports, 3)),
        ),
        (
            col(
                "Endpoints",
                "string",
                "endpoints is a list of unique endpoints in this slice.",
            ),
            json!(list_with_more(&addresses, 3)),
        ),
        age(o, now),
    ]
}

pub(crate) fn ingress(o: &Value, now: i64) -> Vec<Cell> {
    const MAX: usize = 3;
    let rules = arr(o, "/spec/rules");
    let hosts: Vec<&str> = rules
        .iter()
        .take(MAX)
        .map(|r| str_at(r, "/host"))
        .filter(|h| !h.is_empty())
        .collect();
    let hosts = if hosts.is_empty() {
        "*".to_string()
    } else if rules.len() > MAX {
        format!("{} + {} more...", hosts.join(","), rules.len() - MAX)
    } else {
        hosts.join(",")
    };
    let ports = if arr(o, "/spec/tls").is_empty() {
        "80"
    } else {
        "80, 443"
    };
    let address = load_balancer(o, "/status/loadBalancer/ingress").join(",");
    vec![
        name(o),
        (
            col(
                "Class",
                "string",
                "The name of the IngressClass resource that should be used for additional configuration",
            ),
            json!(or(str_at(o, "/spec/ingressClassName"), "<none>")),
        ),
        (
            col(
                "Hosts",
                "string",
                "Hosts that incoming requests are matched against before the ingress rule",
            ),
            json!(hosts),
        ),
        (
            col(
                "Address",
                "string",
                "Address is a list containing ingress points for the load-balancer",
            ),
            json!(address),
        ),
        (
            col("Ports", "string", "Ports of TLS configurations that open"),
            json!(ports),
        ),
        age(o, now),
    ]
}

pub(crate) fn ingress_class(o: &Value, now: i64) -> Vec<Cell> {
    let parameters = match o.pointer("/spec/parameters").filter(|p| !p.is_null()) {
        None => "<none>".to_string(),
        Some(p) => {
            // `Kind.group/name`; the group only when it is set at all.
            let kind = match p.get("apiGroup").and_then(Value::as_str) {
                Some(group) => format!("{}.{group}", str_at(p, "/kind")),
                None => str_at(p, "/kind").to_string(),
            };
            format!("{kind}/{}", str_at(p, "/name"))
        }
    };
    vec![
        name(o),
        (
            col(
                "Controller",
                "string",
                "Controller that is responsible for handling this class",
            ),
            json!(str_at(o, "/spec/controller")),
        ),
        (
            col(
                "Parameters",
                "string",
                "A reference to a resource with additional parameters",
            ),
            json!(parameters),
        ),
        age(o, now),
    ]
}

pub(crate) fn network_policy(o: &Value, now: i64) -> Vec<Cell> {
    let selector = label_selector(o.pointer("/spec/podSelector"));
    vec![
        name(o),
        (
            col(
                "Pod-Selector",
                "string",
                "podSelector selects the pods to which this NetworkPolicy object applies.",
            ),
            json!(selector),
        ),
        age(o, now),
    ]
}

pub(crate) fn service_cidr(o: &Value, now: i64) -> Vec<Cell> {
    let cidrs: Vec<&str> = arr(o, "/spec/cidrs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    vec![
        name(o),
        (
            col(
                "CIDRs",
                "string",
                "CIDRs defines the IP blocks in CIDR notation from which to assign service cluster IPs.",
            ),
            json!(cidrs.join(",")),
        ),
        age(o, now),
    ]
}

/// Name and ParentRef: upstream declares no Age column for IPAddresses.
pub(crate) fn ip_address(o: &Value, _now: i64) -> Vec<Cell> {
    let parent = match o.pointer("/spec/parentRef").filter(|p| !p.is_null()) {
        None => "<none>".to_string(),
        Some(p) => {
            let mut text = match str_at(p, "/group") {
                "" => str_at(p, "/resource").to_lowercase(),
                group => format!("{}.{group}", str_at(p, "/resource")).to_lowercase(),
            };
            let namespace = str_at(p, "/namespace");
            if !namespace.is_empty() {
                text.push('/');
                text.push_str(namespace);
            }
            format!("{text}/{}", str_at(p, "/name"))
        }
    };
    vec![
        name(o),
        (
            col(
                "ParentRef",
                "string",
                "ParentRef references the resource that an IPAddress is attached to.",
            ),
            json!(parent),
        ),
    ]
}

pub(crate) fn storage_class(o: &Value, now: i64) -> Vec<Cell> {
    let default = [
        "storageclass.kubernetes.io~1is-default-class",
        "storageclass.beta.kubernetes.io~1is-default-class",
    ]
    .iter()
    .any(|a| str_at(o, &format!("/metadata/annotations/{a}")) == "true");
    let mut shown = str_at(o, "/metadata/name").to_string();
    if default {
        shown.push_str(" (default)");
    }
    vec![
        (NAME, json!(shown)),
        (
            col(
                "Provisioner",
                "string",
                "provisioner indicates the type of the provisioner.",
            ),
            json!(str_at(o, "/provisioner")),
        ),
        (
            col(
                "ReclaimPolicy",
                "string",
                "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class.",
            ),
            json!(or(str_at(o, "/reclaimPolicy"), "Delete")),
        ),
        (
            col(
                "VolumeBindingMode",
                "string",
                "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.",
            ),
            json!(or(str_at(o, "/volumeBindingMode"), "Immediate")),
        ),
        (
            col(
                "AllowVolumeExpansion",
                "string",
                "allowVolumeExpansion shows whether the storage class allow volume expand.",
            ),
            json!(bool_at(o, "/allowVolumeExpansion", false)),
        ),
        age(o, now),
    ]
}

pub(crate) fn volume_attachment(o: &Value, now: i64) -> Vec<Cell> {
    let attacher = Column {
        format: "name",
        ..col(
            "Attacher",
            "string",
            "attacher indicates the name of the volume driver that MUST handle this request.",
        )
    };
    vec![
        name(o),
        (attacher, json!(str_at(o, "/spec/attacher"))),
        (
            col(
                "PV",
                "string",
                "persistentVolumeName represents the name of the persistent volume to attach.",
            ),
            json!(str_at(o, "/spec/source/persistentVolumeName")),
        ),
        (
            col(
                "Node",
                "string",
                "nodeName represents the node that the volume should be attached to.",
            ),
            json!(str_at(o, "/spec/nodeName")),
        ),
        (
            col(
                "Attached",
                "boolean",
                "attached indicates the volume is successfully attached.",
            ),
            json!(bool_at(o, "/status/attached", false)),
        ),
        age(o, now),
    ]
}

pub(crate) fn csi_node(o: &Value, now: i64) -> Vec<Cell> {
    vec![
        name(o),
        (
            col(
                "Drivers",
                "integer",
                "Drivers indicates the number of CSI drivers registered on the node",
            ),
            json!(arr(o, "/spec/drivers").len()),
        ),
        age(o, now),
    ]
}

pub(crate) fn csi_driver(o: &Value, now: i64) -> Vec<Cell> {
    let tokens = if present(o, "/spec/tokenRequests") {
        let audiences: Vec<&str> = arr(o, "/spec/tokenRequests")
            .iter()
            .map(|t| str_at(t, "/audience"))
            .collect();
        audiences.join(",")
    } else {
        "<unset>".to_string()
    };
    let modes: Vec<&str> = arr(o, "/spec/volumeLifecycleModes")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    vec![
        name(o),
        (
            col(
                "AttachRequired",
                "boolean",
                "attachRequired indicates this CSI volume driver requires an attach operation.",
            ),
            json!(bool_at(o, "/spec/attachRequired", true)),
        ),
        (
            col(
                "PodInfoOnMount",
                "boolean",
                "podInfoOnMount indicates this CSI volume driver requires additional pod information during mount operations.",
            ),
            json!(bool_at(o, "/spec/podInfoOnMount", false)),
        ),
        (
            col(
                "StorageCapacity",
                "boolean",
                "storageCapacity indicates that the CSI volume driver wants pod scheduling to consider the storage capacity it reports.",
            ),
            json!(bool_at(o, "/spec/storageCapacity", false)),
        ),
        (
            col(
                "TokenRequests",
                "string",
                "tokenRequests indicates the CSI driver needs pods' service account tokens it is mounting volume for.",
            ),
            json!(tokens),
        ),
        (
            col(
                "RequiresRepublish",
                "boolean",
                "requiresRepublish indicates the CSI driver wants NodePublishVolume being periodically called.",
            ),
            json!(bool_at(o, "/spec/requiresRepublish", false)),
        ),
        (
            col(
                "Modes",
                "string",
                "volumeLifecycleModes defines what kind of volumes this CSI volume driver supports.",
            ),
            json!(or(&modes.join(","), "<none>")),
        ),
        age(o, now),
    ]
}

/// Name, StorageClassName and Capacity: upstream declares no Age column.
pub(crate) fn csi_storage_capacity(o: &Value, _now: i64) -> Vec<Cell> {
    let capacity = text_at(o, "/capacity").unwrap_or_else(|| "<unset>".into());
    vec![
        name(o),
        (
            col(
                "StorageClassName",
                "string",
                "storageClassName represents the name of the StorageClass that the reported capacity applies to.",
            ),
            json!(str_at(o, "/storageClassName")),
        ),
        (
            col(
                "Capacity",
                "string",
                "capacity is the value reported by the CSI driver in its GetCapacityResponse.",
            ),
            json!(capacity),
        ),
    ]
}

pub(crate) fn priority_class(o: &Value, now: i64) -> Vec<Cell> {
    vec![
        name(o),
        (
            col(
                "Value",
                "integer",
                "value represents the integer value of this priority class.",
            ),
            json!(int_at(o, "/value")),
        ),
        (
            col(
                "Global-Default",
                "boolean",
                "globalDefault specifies whether this PriorityClass should be considered as the default priority.",
            ),
            json!(bool_at(o, "/globalDefault", false)),
        ),
        age(o, now),
        (
            col(
                "PreemptionPolicy",
                "string",
                "preemptionPolicy is the Policy for preempting pods with lower priority.",
            ),
            json!(str_at(o, "/preemptionPolicy")),
        ),
    ]
}

pub(crate) fn runtime_class(o: &Value, now: i64) -> Vec<Cell> {
    vec![
        name(o),
        (
            col(
                "Handler",
                "string",
                "handler specifies the underlying runtime and configuration that the CRI implementation will use.",
            ),
            json!(str_at(o, "/handler")),
        ),
        age(o, now),
    ]
}

pub(crate) fn certificate_signing_request(o: &Value, now: i64) -> Vec<Cell> {
    let has = |t: &str| condition(o, "/status/conditions", t).is_some();
    let mut status = if has("Denied") {
        "Denied"
    } else if has("Approved") {
        "Approved"
    } else {
        "Pending"
    }
    .to_string();
    if has("Failed") {
        status.push_str(",Failed");
    }
    if !str_at(o, "/status/certificate").is_empty() {
        status.push_str(",Issued");
    }
    let duration = o.pointer("/spec/expirationSeconds").and_then(Value::as_i64);
    vec![
        name(o),
        age(o, now),
        (
            col(
                "SignerName",
                "string",
                "signerName indicates the requested signer, and is a qualified name.",
            ),
            json!(or(str_at(o, "/spec/signerName"), "<none>")),
        ),
        (
            col(
                "Requestor",
                "string",
                "username contains the name of the user that created the CertificateSigningRequest.",
            ),
            json!(str_at(o, "/spec/username")),
        ),
        (
            col(
                "RequestedDuration",
                "string",
                "expirationSeconds is the requested duration of validity of the issued certificate.",
            ),
            json!(duration.map_or("<none>".to_string(), human_duration)),
        ),
        (
            col("Condition", "string", "conditions applied to the request."),
            json!(status),
        ),
    ]
}

pub(crate) fn webhook_configuration(o: &Value, now: i64) -> Vec<Cell> {
    vec![
        name(o),
        (
            col(
                "Webhooks",
                "integer",
                "Webhooks indicates the number of webhooks registered in this configuration",
            ),
            json!(arr(o, "/webhooks").len()),
        ),
        age(o, now),
    ]
}

pub(crate) fn admission_policy(o: &Value, now: i64) -> Vec<Cell> {
    let param_kind = pair_at(o, "/spec/paramKind", "apiVersion", "kind")
        .unwrap_or_else(|| "<unset>".to_string());
    vec![
        name(o),
        (
            col(
                "Validations",
                "integer",
                "Validations indicates the number of validation rules defined in this configuration",
            ),
            json!(arr(o, "/spec/validations").len()),
        ),
        (
            col(
                "ParamKind",
                "string",
                "ParamKind specifies the kind of resources used to parameterize this policy",
            ),
            json!(param_kind),
        ),
        age(o, now),
    ]
}

pub(crate) fn admission_policy_binding(o: &Value, now: i64) -> Vec<Cell> {
    let param = match o.pointer("/spec/paramRef").filter(|p| !p.is_null()) {
        None => "<unset>".to_string(),
        Some(p) => match (str_at(p, "/name"), str_at(p, "/namespace")) {
            ("", _) if present(p, "/selector") => label_selector(p.get("selector")),
            ("", _) => "<unset>".to_string(),
            (name, "") => format!("*/{name}"),
            (name, namespace) => format!("{namespace}/{name}"),
        },
    };
    vec![
        name(o),
        (
            col(
                "PolicyName",
                "string",
                "PolicyName indicates the policy definition which the policy binding binded to",
            ),
            json!(str_at(o, "/spec/policyName")),
        ),
        (
            col(
                "ParamRef",
                "string",
                "ParamRef indicates the param resource which sets the configration param",
            ),
            json!(param),
        ),
        age(o, now),
    ]
}

pub(crate) fn api_service(o: &Value, now: i64) -> Vec<Cell> {
    let service =
        pair_at(o, "/spec/service", "namespace", "name").unwrap_or_else(|| "Local".to_string());
    let available = match condition(o, "/status/conditions", "Available") {
        None => "Unknown".to_string(),
        Some(c) => match (str_at(c, "/status"), str_at(c, "/reason")) {
            ("True", _) => "True".to_string(),
            (status, "") => status.to_string(),
            (status, reason) => format!("{status} ({reason})"),
        },
    };
    vec![
        name(o),
        (
            col(
                "Service",
                "string",
                "The reference to the service that hosts this API endpoint.",
            ),
            json!(service),
        ),
        (
            col("Available", "string", "Whether this service is available."),
            json!(available),
        ),
        age(o, now),
    ]
}
