//! The strategies of the groups beyond core, apps and batch: autoscaling
//! (v1 and v2 share one), policy, RBAC, coordination, discovery,
//! networking, storage, scheduling, node, events.k8s.io, certificates,
//! admissionregistration, apiextensions and apiregistration.

use super::{GENERIC, Strategy};
use crate::table::{cluster as print, core as print_core, workloads as print_workloads};
use crate::validation::{NameRule, kinds};
use crate::{certificates, defaults, update};

pub static HORIZONTAL_POD_AUTOSCALER: Strategy = Strategy {
    validate: kinds::autoscaler,
    printer: Some(print_workloads::horizontal_pod_autoscaler),
    ..GENERIC
};

pub static POD_DISRUPTION_BUDGET: Strategy = Strategy {
    validate: kinds::pod_disruption_budget,
    printer: Some(print_workloads::pod_disruption_budget),
    ..GENERIC
};

pub static CLUSTER_ROLE_BINDING: Strategy = Strategy {
    name_rule: NameRule::PathSegment,
    validate: kinds::cluster_role_binding,
    update_rules: Some(update::role_binding),
    printer: Some(print::role_binding),
    ..GENERIC
};

pub static CLUSTER_ROLE: Strategy = Strategy {
    name_rule: NameRule::PathSegment,
    validate: kinds::cluster_role,
    ..GENERIC
};

pub static ROLE_BINDING: Strategy = Strategy {
    name_rule: NameRule::PathSegment,
    validate: kinds::role_binding,
    update_rules: Some(update::role_binding),
    printer: Some(print::role_binding),
    ..GENERIC
};

pub static ROLE: Strategy = Strategy {
    name_rule: NameRule::PathSegment,
    validate: kinds::role,
    ..GENERIC
};

pub static LEASE: Strategy = Strategy {
    validate: kinds::lease,
    printer: Some(print::lease),
    ..GENERIC
};

pub static ENDPOINT_SLICE: Strategy = Strategy {
    validate: kinds::endpoint_slice,
    update_rules: Some(update::endpoint_slice),
    printer: Some(print::endpoint_slice),
    ..GENERIC
};

pub static INGRESS_CLASS: Strategy = Strategy {
    update_rules: Some(update::ingress_class),
    printer: Some(print::ingress_class),
    ..GENERIC
};

pub static INGRESS: Strategy = Strategy {
    validate: kinds::ingress,
    printer: Some(print::ingress),
    ..GENERIC
};

pub static IP_ADDRESS: Strategy = Strategy {
    update_rules: Some(update::ip_address),
    printer: Some(print::ip_address),
    ..GENERIC
};

pub static NETWORK_POLICY: Strategy = Strategy {
    validate: kinds::network_policy,
    printer: Some(print::network_policy),
    ..GENERIC
};

pub static SERVICE_CIDR: Strategy = Strategy {
    printer: Some(print::service_cidr),
    ..GENERIC
};

pub static CSI_DRIVER: Strategy = Strategy {
    update_rules: Some(update::csi_driver),
    printer: Some(print::csi_driver),
    returns_deleted: true,
    ..GENERIC
};

pub static CSI_NODE: Strategy = Strategy {
    printer: Some(print::csi_node),
    returns_deleted: true,
    ..GENERIC
};

pub static CSI_STORAGE_CAPACITY: Strategy = Strategy {
    printer: Some(print::csi_storage_capacity),
    ..GENERIC
};

pub static STORAGE_CLASS: Strategy = Strategy {
    defaults: defaults::storage_class,
    validate: kinds::storage_class,
    update_rules: Some(update::storage_class),
    printer: Some(print::storage_class),
    returns_deleted: true,
    ..GENERIC
};

pub static VOLUME_ATTACHMENT: Strategy = Strategy {
    update_rules: Some(update::volume_attachment),
    printer: Some(print::volume_attachment),
    returns_deleted: true,
    ..GENERIC
};

pub static PRIORITY_CLASS: Strategy = Strategy {
    validate: kinds::priority_class,
    update_rules: Some(update::priority_class),
    printer: Some(print::priority_class),
    ..GENERIC
};

pub static RUNTIME_CLASS: Strategy = Strategy {
    printer: Some(print::runtime_class),
    ..GENERIC
};

/// events.k8s.io/v1 Event: the core Events in the newer form, with its own
/// columns, and like them outside garbage collection.
pub static EVENTS_EVENT: Strategy = Strategy {
    printer: Some(print_core::events_event),
    default_propagation: None,
    ..GENERIC
};

/// A CertificateSigningRequest: any path-safe name, the requester
/// recorded, spec fixed after create, `status` and `approval` each writing
/// their part.
pub static CERTIFICATE_SIGNING_REQUEST: Strategy = Strategy {
    name_rule: NameRule::PathSegment,
    validate: certificates::validate,
    printer: Some(print::certificate_signing_request),
    field_selectors: &["spec.signerName"],
    kept_on_update: &["/spec"],
    subresource_update: Some(certificates::update_subresource),
    requester: Some(certificates::set_requester),
    ..GENERIC
};

/// A MutatingWebhookConfiguration or ValidatingWebhookConfiguration.
pub static WEBHOOK_CONFIGURATION: Strategy = Strategy {
    printer: Some(print::webhook_configuration),
    ..GENERIC
};

pub static VALIDATING_ADMISSION_POLICY: Strategy = Strategy {
    printer: Some(print::admission_policy),
    ..GENERIC
};

pub static VALIDATING_ADMISSION_POLICY_BINDING: Strategy = Strategy {
    printer: Some(print::admission_policy_binding),
    ..GENERIC
};

pub static CUSTOM_RESOURCE_DEFINITION: Strategy = Strategy {
    validate: |crd, causes| causes.extend(crate::crd::validate_definition(crd)),
    ..GENERIC
};

pub static API_SERVICE: Strategy = Strategy {
    printer: Some(print::api_service),
    ..GENERIC
};
