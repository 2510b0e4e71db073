//! The strategies of the core group (`pkg/registry/core/*`).

use serde_json::Value;

use super::{GENERIC, Propagation, Rest, Strategy};
use crate::table::{core as print, workloads as print_workloads};
use crate::validation::{NameRule, kinds, policy, service, workloads};
use crate::{defaults, update};

/// The legacy `bindings` resource: nothing stored, a create binds a pod.
pub static BINDING: Strategy = Strategy {
    rest: Rest::Binding,
    ..GENERIC
};

/// TokenReview and SelfSubjectReview (authentication.k8s.io/v1).
pub static REVIEW: Strategy = Strategy {
    rest: Rest::Review,
    ..GENERIC
};

pub static COMPONENT_STATUS: Strategy = Strategy {
    rest: Rest::ComponentStatus,
    printer: Some(print::component_status),
    ..GENERIC
};

pub static CONFIG_MAP: Strategy = Strategy {
    validate: kinds::config_map,
    update_rules: Some(update::config_map),
    printer: Some(print::config_map),
    ..GENERIC
};

pub static ENDPOINTS: Strategy = Strategy {
    printer: Some(print::endpoints),
    ..GENERIC
};

/// Events are outside garbage collection (upstream's event strategy answers
/// `rest.Unsupported`).
pub static EVENT: Strategy = Strategy {
    printer: Some(print::event),
    field_selectors: &[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ],
    default_propagation: None,
    ..GENERIC
};

pub static NAMESPACE: Strategy = Strategy {
    rest: Rest::Namespace,
    name_rule: NameRule::Label,
    defaults: defaults::namespace,
    on_create: defaults::namespace_finalizer,
    kept_on_update: &["/spec/finalizers"],
    printer: Some(print::namespace),
    field_selectors: &["status.phase"],
    returns_deleted: true,
    ..GENERIC
};

pub static NODE: Strategy = Strategy {
    keeps_status_on_create: true,
    update_rules: Some(update::node),
    printer: Some(print::node),
    field_selectors: &["spec.unschedulable"],
    ..GENERIC
};

pub static PERSISTENT_VOLUME_CLAIM: Strategy = Strategy {
    defaults: defaults::persistent_volume_claim,
    validate: kinds::persistent_volume_claim,
    update_rules: Some(update::persistent_volume_claim),
    printer: Some(print::persistent_volume_claim),
    returns_deleted: true,
    ..GENERIC
};

pub static PERSISTENT_VOLUME: Strategy = Strategy {
    defaults: defaults::persistent_volume,
    validate: kinds::persistent_volume,
    update_rules: Some(update::persistent_volume),
    printer: Some(print::persistent_volume),
    returns_deleted: true,
    ..GENERIC
};

pub static POD: Strategy = Strategy {
    defaults: defaults::pod,
    on_create: defaults::pod_qos_class,
    validate: workloads::pod,
    validate_create: workloads::pod_create,
    update_rules: Some(update::pod),
    printer: Some(print::pod),
    field_selectors: &[
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ],
    returns_deleted: true,
    graceful_delete: Some(pod_grace_period),
    ..GENERIC
};

pub static POD_TEMPLATE: Strategy = Strategy {
    defaults: defaults::pod_template,
    printer: Some(print::pod_template),
    returns_deleted: true,
    ..GENERIC
};

/// core/v1 orphans a ReplicationController's pods unless told otherwise,
/// for compatibility (the policy of every other version is Background).
pub static REPLICATION_CONTROLLER: Strategy = Strategy {
    defaults: defaults::replication_controller,
    validate: workloads::replication_controller,
    printer: Some(print_workloads::replication_controller),
    field_selectors: &["status.replicas"],
    default_propagation: Some(Propagation::Orphan),
    ..GENERIC
};

pub static LIMIT_RANGE: Strategy = Strategy {
    defaults: defaults::limit_range,
    validate: policy::limit_range,
    ..GENERIC
};

pub static RESOURCE_QUOTA: Strategy = Strategy {
    validate: policy::resource_quota,
    update_rules: Some(update::resource_quota),
    printer: Some(print::resource_quota),
    returns_deleted: true,
    ..GENERIC
};

pub static SECRET: Strategy = Strategy {
    defaults: defaults::secret,
    validate: kinds::secret,
    update_rules: Some(update::secret),
    printer: Some(print::secret),
    field_selectors: &["type"],
    ..GENERIC
};

pub static SERVICE_ACCOUNT: Strategy = Strategy {
    printer: Some(print::service_account),
    returns_deleted: true,
    ..GENERIC
};

pub static SERVICE: Strategy = Strategy {
    rest: Rest::Service,
    name_rule: NameRule::Dns1035,
    defaults: defaults::service,
    validate: service::service,
    update_rules: Some(update::service),
    printer: Some(print::service),
    field_selectors: &["spec.clusterIP", "spec.type"],
    returns_deleted: true,
    ..GENERIC
};

/// The grace period a delete of `pod` asking for `requested` seconds (if
/// it names any) gets, as upstream's `CheckGracefulDelete`: what was asked,
/// else the pod's `terminationGracePeriodSeconds` (0 when unset); 0 for a
/// pod no node runs (no `spec.nodeName`) or one that has finished (phase
/// Failed or Succeeded); a negative period becomes 1.
fn pod_grace_period(pod: &Value, requested: Option<i64>) -> i64 {
    let spec_grace = || {
        pod.pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let scheduled = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|node| !node.is_empty());
    let phase = pod.pointer("/status/phase").and_then(Value::as_str);
    let finished = matches!(phase, Some("Failed" | "Succeeded"));
    match requested.unwrap_or_else(spec_grace) {
        _ if !scheduled || finished => 0,
        period if period < 0 => 1,
        period => period,
    }
}
