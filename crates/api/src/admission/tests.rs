use super::*;
use crate::Registry;

fn def(plural: &str) -> std::sync::Arc<ResourceDef> {
    Registry::builtin()
        .get("", "v1", plural)
        .cloned()
        .expect("built-in")
}

fn pod() -> Value {
    json!({"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "c", "image": "i"}],
        "initContainers": [{"name": "init", "image": "i",
            "volumeMounts": [{"name": "own", "mountPath": API_ACCESS_MOUNT_PATH}]}]}})
}

fn step(name: &str) -> Step {
    *CHAIN.iter().find(|s| s.name == name).expect("step")
}

#[test]
fn the_chain_runs_upstreams_plugins_in_upstreams_order() {
    let names: Vec<&str> = CHAIN.iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "LimitRanger",
            "ServiceAccount",
            "Priority",
            "DefaultTolerationSeconds",
            "DefaultStorageClass"
        ]
    );
}

#[test]
fn service_account_defaults_the_account_and_mounts_api_access() {
    let inputs = Inputs {
        volume_suffix: "x7k2q".into(),
        ..Inputs::default()
    };
    let mut object = pod();
    (step("ServiceAccount").admit)(&inputs, &def("pods"), &mut object);
    let spec = &object["spec"];
    assert_eq!(spec["serviceAccountName"], "default");
    assert_eq!(spec["serviceAccount"], "default");
    assert_eq!(
        spec["containers"][0]["volumeMounts"],
        json!([{"name": "kube-api-access-x7k2q", "readOnly": true, "mountPath": API_ACCESS_MOUNT_PATH}])
    );
    // A container mounting something else there keeps its own mount.
    assert_eq!(
        spec["initContainers"][0]["volumeMounts"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let volume = &spec["volumes"][0];
    assert_eq!(volume["name"], "kube-api-access-x7k2q");
    let sources = &volume["projected"]["sources"];
    assert_eq!(sources[0]["serviceAccountToken"]["expirationSeconds"], 3607);
    assert_eq!(sources[1]["configMap"]["name"], "kube-root-ca.crt");
    assert_eq!(
        sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
}

#[test]
fn service_account_honours_opting_out_and_copies_pull_secrets() {
    let inputs = Inputs {
        service_account: Some(json!({"metadata": {"name": "robot"},
            "automountServiceAccountToken": false,
            "imagePullSecrets": [{"name": "registry"}]})),
        volume_suffix: "abcde".into(),
        ..Inputs::default()
    };
    let mut object = pod();
    object["spec"]["serviceAccountName"] = json!("robot");
    (step("ServiceAccount").admit)(&inputs, &def("pods"), &mut object);
    assert!(object["spec"].get("volumes").is_none());
    assert!(
        object["spec"]["containers"][0]
            .get("volumeMounts")
            .is_none()
    );
    assert_eq!(
        object["spec"]["imagePullSecrets"],
        json!([{"name": "registry"}])
    );
    // The pod's own choice wins over its account's.
    let mut object = pod();
    object["spec"]["automountServiceAccountToken"] = json!(true);
    (step("ServiceAccount").admit)(&inputs, &def("pods"), &mut object);
    assert_eq!(
        object["spec"]["volumes"][0]["name"],
        "kube-api-access-abcde"
    );
}

#[test]
fn priority_sets_the_class_value_and_policy() {
    let inputs = Inputs {
        priority: Some((Some("high".into()), 1000, "Never".into())),
        ..Inputs::default()
    };
    let mut object = pod();
    (step("Priority").admit)(&inputs, &def("pods"), &mut object);
    assert_eq!(object["spec"]["priorityClassName"], "high");
    assert_eq!(object["spec"]["priority"], 1000);
    assert_eq!(object["spec"]["preemptionPolicy"], "Never");
}

#[test]
fn new_pods_tolerate_lost_nodes_for_five_minutes() {
    let tolerate = step("DefaultTolerationSeconds").admit;
    let mut object = json!({"spec": {"containers": [], "tolerations": [
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}]}});
    tolerate(&Inputs::default(), &def("pods"), &mut object);
    let tolerations = object["spec"]["tolerations"].as_array().expect("list");
    assert_eq!(tolerations.len(), 2, "its own unreachable toleration kept");
    assert_eq!(tolerations[1]["key"], "node.kubernetes.io/not-ready");
    assert_eq!(tolerations[1]["tolerationSeconds"], 300);
    let mut everything = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
    tolerate(&Inputs::default(), &def("pods"), &mut everything);
    assert_eq!(
        everything["spec"]["tolerations"].as_array().map(Vec::len),
        Some(1)
    );
    let mut claim = json!({"spec": {}});
    tolerate(
        &Inputs::default(),
        &def("persistentvolumeclaims"),
        &mut claim,
    );
    assert_eq!(claim, json!({"spec": {}}), "pods only");
}

#[test]
fn claims_get_the_default_class_and_pods_their_limit_range_defaults() {
    let inputs = Inputs {
        default_class: Some("fast".into()),
        limit_ranges: vec![json!({"spec": {"limits": [
            {"type": "Container", "default": {"cpu": "200m"}}]}})],
        ..Inputs::default()
    };
    let mut claim = json!({"spec": {"resources": {}}});
    (step("DefaultStorageClass").admit)(&inputs, &def("persistentvolumeclaims"), &mut claim);
    assert_eq!(claim["spec"]["storageClassName"], "fast");
    let mut object = pod();
    (step("LimitRanger").admit)(&inputs, &def("pods"), &mut object);
    assert_eq!(
        object["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "200m"
    );
}
