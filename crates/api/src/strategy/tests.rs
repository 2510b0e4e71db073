use serde_json::{Value, json};

use super::*;
use crate::{Registry, ResourceDef};

/// `(group, kind)` of every built-in resource.
fn kinds(registry: &Registry) -> Vec<(&str, &str, &ResourceDef)> {
    registry
        .all()
        .iter()
        .map(|def| (def.group.as_str(), def.kind.as_str(), def.as_ref()))
        .collect()
}

/// The kinds upstream has a Table printer for; every other kind prints
/// Name and Created At.
const PRINTED: &[(&str, &str)] = &[
    ("", "ComponentStatus"),
    ("", "ConfigMap"),
    ("", "Endpoints"),
    ("", "Event"),
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "PersistentVolumeClaim"),
    ("", "Pod"),
    ("", "ResourceQuota"),
    ("", "PodTemplate"),
    ("", "ReplicationController"),
    ("", "ResourceQuota"),
    ("", "Secret"),
    ("", "Service"),
    ("", "ServiceAccount"),
    ("apps", "ControllerRevision"),
    ("apps", "DaemonSet"),
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("batch", "CronJob"),
    ("batch", "Job"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("policy", "PodDisruptionBudget"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("coordination.k8s.io", "Lease"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("networking.k8s.io", "IPAddress"),
    ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "IngressClass"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("networking.k8s.io", "ServiceCIDR"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "CSIStorageCapacity"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("events.k8s.io", "Event"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    ("apiregistration.k8s.io", "APIService"),
];

/// The kinds with rules for what an update may change.
const UPDATE_RULES: &[(&str, &str)] = &[
    ("", "ConfigMap"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "PersistentVolumeClaim"),
    ("", "Pod"),
    ("", "ResourceQuota"),
    ("", "Secret"),
    ("", "Service"),
    ("apps", "ControllerRevision"),
    ("apps", "DaemonSet"),
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("batch", "Job"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("networking.k8s.io", "IPAddress"),
    ("networking.k8s.io", "IngressClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("scheduling.k8s.io", "PriorityClass"),
];

/// The resources whose store sets `ReturnDeletedObject: true` upstream.
const RETURNS_DELETED: &[&str] = &[
    "namespaces",
    "persistentvolumeclaims",
    "persistentvolumes",
    "pods",
    "podtemplates",
    "resourcequotas",
    "serviceaccounts",
    "services",
    "csidrivers",
    "csinodes",
    "storageclasses",
    "volumeattachments",
];

#[test]
fn every_kind_has_the_strategy_of_its_kind() {
    let registry = Registry::builtin();
    for (group, kind, def) in kinds(&registry) {
        let gvr = def.gvr();
        let printed = PRINTED.contains(&(group, kind));
        assert_eq!(def.strategy.printer.is_some(), printed, "printer of {gvr}");
        let ruled = UPDATE_RULES.contains(&(group, kind));
        assert_eq!(def.strategy.update_rules.is_some(), ruled, "rules of {gvr}");
        let name_rule = match (group, kind) {
            ("", "Namespace") => NameRule::Label,
            ("", "Service") => NameRule::Dns1035,
            ("rbac.authorization.k8s.io", _) => NameRule::PathSegment,
            ("certificates.k8s.io", "CertificateSigningRequest") => NameRule::PathSegment,
            _ => NameRule::Subdomain,
        };
        assert_eq!(def.strategy.name_rule, name_rule, "name rule of {gvr}");
        // The same kind served in two versions is one kind.
        for other in registry.all() {
            if (other.group.as_str(), other.kind.as_str()) == (group, kind) {
                assert!(std::ptr::eq(other.strategy, def.strategy), "{gvr}");
            }
        }
    }
    let hpa = |version| {
        let def = registry.get("autoscaling", version, "horizontalpodautoscalers");
        def.expect("hpa").strategy
    };
    assert!(std::ptr::eq(hpa("v1"), hpa("v2")));
}

#[test]
fn the_two_event_kinds_print_and_select_differently() {
    let registry = Registry::builtin();
    let core = registry.get("", "v1", "events").expect("events");
    let events = registry
        .get("events.k8s.io", "v1", "events")
        .expect("events");
    // The same columns, read from each version's own fields.
    let object = json!({"involvedObject": {"kind": "Pod", "name": "p"}, "regarding": {"kind": "Node", "name": "n"}});
    let about = |def: &ResourceDef| crate::table::cells(def, &object, 0)[3].clone();
    assert_eq!(
        (about(core), about(events)),
        (json!("pod/p"), json!("node/n"))
    );
    assert!(crate::selector::fields_of(core).contains(&"involvedObject.name"));
    assert!(crate::selector::fields_of(events).is_empty());
}

#[test]
fn pods_and_deployments_print_upstreams_columns() {
    let registry = Registry::builtin();
    let columns = |group, resource| -> Vec<(&str, u8)> {
        let def = registry.get(group, "v1", resource).expect("def");
        let columns = crate::table::columns(def);
        columns.iter().map(|c| (c.name, c.priority)).collect()
    };
    assert_eq!(
        columns("", "pods"),
        [
            ("Name", 0),
            ("Ready", 0),
            ("Status", 0),
            ("Restarts", 0),
            ("Age", 0),
            ("IP", 1),
            ("Node", 1),
            ("Nominated Node", 1),
            ("Readiness Gates", 1)
        ]
    );
    assert_eq!(
        columns("apps", "deployments"),
        [
            ("Name", 0),
            ("Ready", 0),
            ("Up-to-date", 0),
            ("Available", 0),
            ("Age", 0),
            ("Containers", 1),
            ("Images", 1),
            ("Selector", 1)
        ]
    );
}

#[test]
fn field_selectors_are_the_kinds() {
    use crate::selector::fields_of;
    let registry = Registry::builtin();
    let fields = |group: &str, kind: &str| {
        kinds(&registry)
            .into_iter()
            .find(|(g, k, _)| *g == group && *k == kind)
            .map(|(_, _, def)| fields_of(def))
            .expect("a built-in kind")
    };
    assert_eq!(fields("", "Secret"), ["type"]);
    assert_eq!(fields("apps", "ReplicaSet"), ["status.replicas"]);
    assert_eq!(fields("batch", "Job"), ["status.successful"]);
    assert!(fields("", "Pod").contains(&"spec.nodeName"));
    assert!(fields("events.k8s.io", "Event").is_empty());
}

#[test]
fn custom_resources_have_the_generic_strategy() {
    let crd = json!({
        "metadata": {"name": "crontabs.stable.example.com"},
        "spec": {"group": "stable.example.com", "scope": "Namespaced",
            "names": {"plural": "crontabs", "kind": "CronTab"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object"}}}]}
    });
    let defs = crate::crd::definitions(&crd);
    assert_eq!(defs.len(), 1);
    let strategy = defs[0].strategy;
    assert_eq!(strategy.name_rule, NameRule::Subdomain);
    assert!(strategy.printer.is_none() && strategy.update_rules.is_none());
    assert!(strategy.field_selectors.is_empty());
    assert!(!strategy.returns_deleted && strategy.graceful_delete.is_none());
    assert_eq!(strategy.default_propagation, Some(Propagation::Background));
    let mut object = json!({"spec": {"x": 1}});
    (strategy.defaults)(&mut object);
    (strategy.on_create)(&mut object);
    let mut causes = Vec::new();
    (strategy.validate)(&object, &mut causes);
    assert_eq!((object, causes.len()), (json!({"spec": {"x": 1}}), 0));
}

#[test]
fn deletes_answer_with_the_object_where_upstreams_store_does() {
    let registry = Registry::builtin();
    for def in registry.all() {
        let expected = RETURNS_DELETED.contains(&def.plural.as_str());
        assert_eq!(def.strategy.returns_deleted, expected, "{}", def.gvr());
    }
}

#[test]
fn jobs_and_replication_controllers_orphan_by_default_and_events_are_not_collected() {
    let registry = Registry::builtin();
    for def in registry.all() {
        let expected = match (def.group.as_str(), def.kind.as_str()) {
            ("batch", "Job") | ("", "ReplicationController") => Some(Propagation::Orphan),
            (_, "Event") => None,
            _ => Some(Propagation::Background),
        };
        assert_eq!(def.strategy.default_propagation, expected, "{}", def.gvr());
        let graceful = def.strategy.graceful_delete.is_some();
        assert_eq!(graceful, def.kind == "Pod", "{}", def.gvr());
    }
    for policy in [
        Propagation::Background,
        Propagation::Foreground,
        Propagation::Orphan,
    ] {
        assert_eq!(Propagation::parse(policy.as_str()), Some(policy));
    }
    assert_eq!(Propagation::parse("orphan"), None);
}

#[test]
fn a_pods_grace_period_follows_upstreams_check_graceful_delete() {
    let grace = POD.graceful_delete.expect("pods are deleted gracefully");
    let pod = |node: &str, phase: &str, grace: Option<i64>| -> Value {
        let mut pod = json!({"spec": {"nodeName": node}, "status": {"phase": phase}});
        if let Some(seconds) = grace {
            pod["spec"]["terminationGracePeriodSeconds"] = json!(seconds);
        }
        pod
    };
    let running = pod("n1", "Running", Some(45));
    // What was asked, else the pod's own period.
    assert_eq!(grace(&running, Some(10)), 10);
    assert_eq!(grace(&running, None), 45);
    assert_eq!(grace(&running, Some(0)), 0);
    // A pod without a period of its own goes at once.
    assert_eq!(grace(&pod("n1", "Running", None), None), 0);
    // Not on a node, or finished: at once, whatever was asked.
    assert_eq!(grace(&pod("", "Pending", Some(30)), Some(10)), 0);
    assert_eq!(grace(&json!({"spec": {}}), Some(10)), 0);
    assert_eq!(grace(&pod("n1", "Succeeded", Some(30)), None), 0);
    assert_eq!(grace(&pod("n1", "Failed", Some(30)), Some(5)), 0);
    // A negative period becomes 1.
    assert_eq!(grace(&running, Some(-5)), 1);
    assert_eq!(grace(&pod("n1", "Running", Some(-1)), None), 1);
}
