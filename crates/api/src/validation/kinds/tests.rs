use serde_json::{Value, json};

use crate::Registry;

/// `(field, message)` of each cause the object of `resource` has, as its
/// strategy validates it.
fn causes(group: &str, version: &str, resource: &str, object: Value) -> Vec<(String, String)> {
    let registry = Registry::builtin();
    let def = registry.get(group, version, resource).expect("def");
    let mut out = Vec::new();
    (def.strategy.validate)(&object, &mut out);
    out.into_iter().map(|c| (c.field, c.message)).collect()
}

fn fields(found: &[(String, String)]) -> Vec<&str> {
    found.iter().map(|(f, _)| f.as_str()).collect()
}

#[test]
fn rbac_rules_and_bindings() {
    let rbac = "rbac.authorization.k8s.io";
    let role = json!({"rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": [""], "verbs": []},
        {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}
    ]});
    let found = causes(rbac, "v1", "roles", role.clone());
    assert_eq!(
        fields(&found),
        [
            "rules[1].verbs",
            "rules[1].resources",
            "rules[2].nonResourceURLs"
        ]
    );
    assert_eq!(
        found[0].1,
        "Required value: verbs must contain at least one value"
    );
    // A ClusterRole may name non-resource URLs.
    assert_eq!(
        fields(&causes(rbac, "v1", "clusterroles", role)),
        ["rules[1].verbs", "rules[1].resources"]
    );

    let binding = json!({"roleRef": {"apiGroup": rbac, "kind": "Role", "name": "r"},
        "subjects": [{"kind": "ServiceAccount", "name": "sa"}, {"kind": "User", "name": "alice", "apiGroup": rbac}, {"kind": "Robot", "name": "x"}]});
    let found = causes(rbac, "v1", "rolebindings", binding.clone());
    assert_eq!(
        found,
        vec![(
            "subjects[2].kind".to_string(),
            r#"Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group""#
                .to_string()
        )]
    );
    // A cluster binding: ClusterRoles only, and namespaced service accounts.
    let found = causes(rbac, "v1", "clusterrolebindings", binding);
    assert_eq!(
        fields(&found),
        ["roleRef.kind", "subjects[0].namespace", "subjects[2].kind"]
    );
}

#[test]
fn autoscalers_budgets_and_claims() {
    let found = causes(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        json!({"spec": {"scaleTargetRef": {"kind": "Deployment"}, "minReplicas": 5, "maxReplicas": 2}}),
    );
    assert_eq!(
        found,
        vec![
            (
                "spec.scaleTargetRef.name".to_string(),
                "Required value".to_string()
            ),
            (
                "spec.minReplicas".to_string(),
                "Invalid value: 5: must be less than or equal to maxReplicas".to_string()
            ),
        ]
    );
    let found = causes(
        "policy",
        "v1",
        "poddisruptionbudgets",
        json!({"spec": {"minAvailable": 1, "maxUnavailable": "50%"}}),
    );
    assert_eq!(fields(&found), ["spec"]);
    assert!(
        found[0]
            .1
            .ends_with("minAvailable and maxUnavailable cannot be both set")
    );
    let found = causes("", "v1", "persistentvolumeclaims", json!({"spec": {}}));
    assert_eq!(
        fields(&found),
        ["spec.accessModes", "spec.resources[storage]"]
    );
    let found = causes(
        "",
        "v1",
        "persistentvolumes",
        json!({"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]}}),
    );
    assert_eq!(
        found,
        vec![(
            "spec".to_string(),
            "Required value: must specify a volume type".to_string()
        )]
    );
    assert_eq!(
        causes(
            "",
            "v1",
            "persistentvolumes",
            json!({"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/d"}}})
        ),
        vec![]
    );
}

#[test]
fn typed_secrets_ingresses_and_the_rest() {
    let found = causes(
        "",
        "v1",
        "secrets",
        json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "Y2VydA=="}}),
    );
    assert_eq!(
        found,
        vec![("data[tls.key]".to_string(), "Required value".to_string())]
    );
    assert_eq!(
        causes(
            "",
            "v1",
            "secrets",
            json!({"type": "kubernetes.io/basic-auth", "data": {"password": "cA=="}})
        ),
        vec![]
    );
    let ingress = json!({"spec": {"rules": [{"http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": {}},
        {"path": "api", "pathType": "Exact", "backend": {}},
        {"path": "/x", "backend": {}}
    ]}}]}});
    let found = causes("networking.k8s.io", "v1", "ingresses", ingress);
    assert_eq!(
        fields(&found),
        [
            "spec.rules[0].http.paths[1].path",
            "spec.rules[0].http.paths[2].pathType"
        ]
    );
    assert_eq!(
        fields(&causes(
            "networking.k8s.io",
            "v1",
            "ingresses",
            json!({"spec": {}})
        )),
        ["spec"]
    );
    let found = causes(
        "storage.k8s.io",
        "v1",
        "storageclasses",
        json!({"reclaimPolicy": "Keep"}),
    );
    assert_eq!(fields(&found), ["provisioner", "reclaimPolicy"]);
    let found = causes(
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        json!({"metadata": {"name": "huge"}, "value": 2_000_000_000}),
    );
    assert_eq!(
        found,
        vec![(
            "value".to_string(),
            "Forbidden: maximum allowed value of a user defined priority is 1000000000".to_string()
        )]
    );
    assert_eq!(
        causes(
            "scheduling.k8s.io",
            "v1",
            "priorityclasses",
            json!({"metadata": {"name": "system-x"}, "value": 2_000_000_000})
        ),
        vec![]
    );
    let found = causes(
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        json!({"addressType": "IPv5", "endpoints": [{"addresses": []}]}),
    );
    assert_eq!(fields(&found), ["addressType", "endpoints[0].addresses"]);
    let found = causes(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        json!({"spec": {"policyTypes": ["Ingress", "Sideways"]}}),
    );
    assert_eq!(fields(&found), ["spec.policyTypes[1]"]);
}

#[test]
fn secrets_and_config_maps_hold_at_most_a_mebibyte() {
    let big = "x".repeat(600 * 1024);
    let found = causes(
        "",
        "v1",
        "configmaps",
        json!({"data": {"a": big, "b": big}}),
    );
    assert_eq!(
        found,
        vec![(
            "".to_string(),
            "Too long: may not be more than 1048576 bytes".to_string()
        )]
    );
    assert_eq!(
        causes("", "v1", "configmaps", json!({"data": {"a": big}})),
        vec![]
    );
    // 800 KiB twice, base64-encoded.
    let encoded = "QUFB".repeat(800 * 1024 / 3);
    let found = causes(
        "",
        "v1",
        "secrets",
        json!({"data": {"a": encoded, "b": encoded}}),
    );
    assert_eq!(fields(&found), ["data"]);
    assert_eq!(
        causes("", "v1", "secrets", json!({"data": {"a": encoded}})),
        vec![]
    );
}
