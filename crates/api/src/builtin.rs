//! The built-in resources, as upstream 1.33 serves them: short names,
//! categories, verbs and subresources as its discovery documents list them,
//! and each kind's [strategy](crate::strategy) — but only the subresources
//! rudder serves (`pods/resize` joins when its component does).

use std::borrow::Cow;

use k8s_openapi::api::{
    admissionregistration, apps, authentication, autoscaling, batch, certificates, coordination,
    core, discovery, events, networking, node, policy, rbac, scheduling, storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;

use crate::registry::{Extra, ResourceDef, Subresource, builtin};
use crate::strategy;

const GET_PATCH_UPDATE: &[&str] = &["get", "patch", "update"];
const CREATE: &[&str] = &["create"];
const PROXY_VERBS: &[&str] = &["create", "delete", "get", "patch", "update"];

const fn sub(
    name: &'static str,
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    verbs: &'static [&'static str],
) -> Subresource {
    Subresource {
        name: Cow::Borrowed(name),
        group: Cow::Borrowed(group),
        version: Cow::Borrowed(version),
        kind: Cow::Borrowed(kind),
        verbs,
    }
}

const fn status(group: &'static str, version: &'static str, kind: &'static str) -> Subresource {
    sub("status", group, version, kind, GET_PATCH_UPDATE)
}

const SCALE: Subresource = sub("scale", "autoscaling", "v1", "Scale", GET_PATCH_UPDATE);

const POD_SUBRESOURCES: &[Subresource] = &[
    sub("attach", "", "v1", "PodAttachOptions", &["create", "get"]),
    sub("binding", "", "v1", "Binding", CREATE),
    sub("ephemeralcontainers", "", "v1", "Pod", GET_PATCH_UPDATE),
    sub("eviction", "policy", "v1", "Eviction", CREATE),
    sub("exec", "", "v1", "PodExecOptions", &["create", "get"]),
    sub("log", "", "v1", "Pod", &["get"]),
    sub(
        "portforward",
        "",
        "v1",
        "PodPortForwardOptions",
        &["create", "get"],
    ),
    sub("proxy", "", "v1", "PodProxyOptions", PROXY_VERBS),
    status("", "v1", "Pod"),
];

macro_rules! resources {
    ($($ty:ty $({ $($field:ident : $value:expr),* $(,)? })?),* $(,)?) => {
        vec![$(builtin::<$ty>(Extra { $($($field: $value,)*)? ..Extra::DEFAULT })),*]
    };
}

/// Every built-in resource, the core group first.
pub fn resources() -> Vec<ResourceDef> {
    resources![
        // core/v1
        core::v1::Binding {
            verbs: CREATE,
            strategy: &strategy::BINDING
        },
        core::v1::ComponentStatus {
            short_names: &["cs"],
            verbs: &["get", "list"],
            deprecation: Some("v1 ComponentStatus is deprecated in v1.19+"),
            strategy: &strategy::COMPONENT_STATUS,
        },
        core::v1::ConfigMap {
            short_names: &["cm"],
            strategy: &strategy::CONFIG_MAP,
        },
        core::v1::Endpoints {
            short_names: &["ep"],
            deprecation: Some(
                "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice"
            ),
            strategy: &strategy::ENDPOINTS,
        },
        core::v1::Event {
            short_names: &["ev"],
            strategy: &strategy::EVENT,
        },
        core::v1::LimitRange {
            short_names: &["limits"],
            strategy: &strategy::LIMIT_RANGE,
        },
        core::v1::Namespace {
            short_names: &["ns"],
            verbs: &[
                "create", "delete", "get", "list", "patch", "update", "watch"
            ],
            subresources: &[
                sub("finalize", "", "v1", "Namespace", &["update"]),
                status("", "v1", "Namespace")
            ],
            strategy: &strategy::NAMESPACE,
        },
        core::v1::Node {
            short_names: &["no"],
            subresources: &[
                sub("proxy", "", "v1", "NodeProxyOptions", PROXY_VERBS),
                status("", "v1", "Node"),
            ],
            strategy: &strategy::NODE,
        },
        core::v1::PersistentVolumeClaim {
            short_names: &["pvc"],
            subresources: &[status("", "v1", "PersistentVolumeClaim")],
            strategy: &strategy::PERSISTENT_VOLUME_CLAIM,
        },
        core::v1::PersistentVolume {
            short_names: &["pv"],
            subresources: &[status("", "v1", "PersistentVolume")],
            strategy: &strategy::PERSISTENT_VOLUME,
        },
        core::v1::Pod {
            short_names: &["po"],
            categories: &["all"],
            subresources: POD_SUBRESOURCES,
            strategy: &strategy::POD,
        },
        core::v1::PodTemplate {
            strategy: &strategy::POD_TEMPLATE
        },
        core::v1::ReplicationController {
            short_names: &["rc"],
            categories: &["all"],
            subresources: &[SCALE, status("", "v1", "ReplicationController")],
            strategy: &strategy::REPLICATION_CONTROLLER,
        },
        core::v1::ResourceQuota {
            short_names: &["quota"],
            subresources: &[status("", "v1", "ResourceQuota")],
            strategy: &strategy::RESOURCE_QUOTA,
        },
        core::v1::Secret {
            strategy: &strategy::SECRET
        },
        core::v1::ServiceAccount {
            short_names: &["sa"],
            subresources: &[sub(
                "token",
                "authentication.k8s.io",
                "v1",
                "TokenRequest",
                CREATE
            )],
            strategy: &strategy::SERVICE_ACCOUNT,
        },
        core::v1::Service {
            short_names: &["svc"],
            categories: &["all"],
            subresources: &[
                sub("proxy", "", "v1", "ServiceProxyOptions", PROXY_VERBS),
                status("", "v1", "Service"),
            ],
            strategy: &strategy::SERVICE,
        },
        // apps/v1
        apps::v1::ControllerRevision {
            strategy: &strategy::CONTROLLER_REVISION
        },
        apps::v1::DaemonSet {
            short_names: &["ds"],
            categories: &["all"],
            subresources: &[status("apps", "v1", "DaemonSet")],
            strategy: &strategy::DAEMON_SET,
        },
        apps::v1::Deployment {
            short_names: &["deploy"],
            categories: &["all"],
            subresources: &[SCALE, status("apps", "v1", "Deployment")],
            strategy: &strategy::DEPLOYMENT,
        },
        apps::v1::ReplicaSet {
            short_names: &["rs"],
            categories: &["all"],
            subresources: &[SCALE, status("apps", "v1", "ReplicaSet")],
            strategy: &strategy::REPLICA_SET,
        },
        apps::v1::StatefulSet {
            short_names: &["sts"],
            categories: &["all"],
            subresources: &[SCALE, status("apps", "v1", "StatefulSet")],
            strategy: &strategy::STATEFUL_SET,
        },
        // batch/v1
        batch::v1::CronJob {
            short_names: &["cj"],
            categories: &["all"],
            subresources: &[status("batch", "v1", "CronJob")],
            strategy: &strategy::CRON_JOB,
        },
        batch::v1::Job {
            categories: &["all"],
            subresources: &[status("batch", "v1", "Job")],
            strategy: &strategy::JOB,
        },
        // autoscaling
        autoscaling::v2::HorizontalPodAutoscaler {
            short_names: &["hpa"],
            categories: &["all"],
            subresources: &[status("autoscaling", "v2", "HorizontalPodAutoscaler")],
            strategy: &strategy::HORIZONTAL_POD_AUTOSCALER,
        },
        autoscaling::v1::HorizontalPodAutoscaler {
            short_names: &["hpa"],
            categories: &["all"],
            subresources: &[status("autoscaling", "v1", "HorizontalPodAutoscaler")],
            conversion: Some(crate::conversion::HPA_V1),
            strategy: &strategy::HORIZONTAL_POD_AUTOSCALER,
        },
        // policy/v1
        policy::v1::PodDisruptionBudget {
            short_names: &["pdb"],
            subresources: &[status("policy", "v1", "PodDisruptionBudget")],
            strategy: &strategy::POD_DISRUPTION_BUDGET,
        },
        // rbac.authorization.k8s.io/v1
        rbac::v1::ClusterRoleBinding {
            strategy: &strategy::CLUSTER_ROLE_BINDING
        },
        rbac::v1::ClusterRole {
            strategy: &strategy::CLUSTER_ROLE
        },
        rbac::v1::RoleBinding {
            strategy: &strategy::ROLE_BINDING
        },
        rbac::v1::Role {
            strategy: &strategy::ROLE
        },
        // coordination.k8s.io/v1
        coordination::v1::Lease {
            strategy: &strategy::LEASE
        },
        // discovery.k8s.io/v1
        discovery::v1::EndpointSlice {
            strategy: &strategy::ENDPOINT_SLICE
        },
        // networking.k8s.io/v1
        networking::v1::IngressClass {
            strategy: &strategy::INGRESS_CLASS
        },
        networking::v1::Ingress {
            short_names: &["ing"],
            subresources: &[status("networking.k8s.io", "v1", "Ingress")],
            strategy: &strategy::INGRESS,
        },
        networking::v1::IPAddress {
            short_names: &["ip"],
            strategy: &strategy::IP_ADDRESS,
        },
        networking::v1::NetworkPolicy {
            short_names: &["netpol"],
            strategy: &strategy::NETWORK_POLICY,
        },
        networking::v1::ServiceCIDR {
            subresources: &[status("networking.k8s.io", "v1", "ServiceCIDR")],
            strategy: &strategy::SERVICE_CIDR,
        },
        // storage.k8s.io/v1
        storage::v1::CSIDriver {
            strategy: &strategy::CSI_DRIVER
        },
        storage::v1::CSINode {
            strategy: &strategy::CSI_NODE
        },
        storage::v1::CSIStorageCapacity {
            strategy: &strategy::CSI_STORAGE_CAPACITY
        },
        storage::v1::StorageClass {
            short_names: &["sc"],
            strategy: &strategy::STORAGE_CLASS,
        },
        storage::v1::VolumeAttachment {
            subresources: &[status("storage.k8s.io", "v1", "VolumeAttachment")],
            strategy: &strategy::VOLUME_ATTACHMENT,
        },
        // scheduling.k8s.io/v1
        scheduling::v1::PriorityClass {
            short_names: &["pc"],
            strategy: &strategy::PRIORITY_CLASS,
        },
        // node.k8s.io/v1
        node::v1::RuntimeClass {
            strategy: &strategy::RUNTIME_CLASS
        },
        // events.k8s.io/v1: the core/v1 Events, as the newer type
        events::v1::Event {
            short_names: &["ev"],
            conversion: Some(crate::conversion::EVENTS_V1),
            storage_prefix: Some("/registry/core/events/"),
            strategy: &strategy::EVENTS_EVENT,
        },
        // authentication.k8s.io/v1
        authentication::v1::SelfSubjectReview {
            verbs: CREATE,
            strategy: &strategy::REVIEW
        },
        authentication::v1::TokenReview {
            verbs: CREATE,
            strategy: &strategy::REVIEW
        },
        // certificates.k8s.io/v1
        certificates::v1::CertificateSigningRequest {
            short_names: &["csr"],
            subresources: &[
                sub(
                    "approval",
                    "certificates.k8s.io",
                    "v1",
                    "CertificateSigningRequest",
                    GET_PATCH_UPDATE
                ),
                status("certificates.k8s.io", "v1", "CertificateSigningRequest"),
            ],
            strategy: &strategy::CERTIFICATE_SIGNING_REQUEST,
        },
        // admissionregistration.k8s.io/v1
        admissionregistration::v1::MutatingWebhookConfiguration {
            strategy: &strategy::WEBHOOK_CONFIGURATION
        },
        admissionregistration::v1::ValidatingAdmissionPolicy {
            subresources: &[status(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingAdmissionPolicy"
            )],
            strategy: &strategy::VALIDATING_ADMISSION_POLICY,
        },
        admissionregistration::v1::ValidatingAdmissionPolicyBinding {
            strategy: &strategy::VALIDATING_ADMISSION_POLICY_BINDING
        },
        admissionregistration::v1::ValidatingWebhookConfiguration {
            strategy: &strategy::WEBHOOK_CONFIGURATION
        },
        // apiextensions.k8s.io/v1
        apiextensions::v1::CustomResourceDefinition {
            short_names: &["crd", "crds"],
            categories: &["api-extensions"],
            subresources: &[status(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition"
            )],
            strategy: &strategy::CUSTOM_RESOURCE_DEFINITION,
        },
        // apiregistration.k8s.io/v1
        apiregistration::v1::APIService {
            categories: &["api-extensions"],
            subresources: &[status("apiregistration.k8s.io", "v1", "APIService")],
            strategy: &strategy::API_SERVICE,
        },
    ]
}
