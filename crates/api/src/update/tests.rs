use serde_json::{Value, json};

use super::{Via, validate};
use crate::Registry;

/// `(field, message)` of each cause refusing the update of `old` to `new`,
/// `new` prepared as `object::prepare_update` prepares it (canonical
/// quantities, defaults) before it asks.
fn refused(
    group: &str,
    resource: &str,
    old: Value,
    mut new: Value,
    via: Via,
) -> Vec<(String, String)> {
    let registry = Registry::builtin();
    let version = match group {
        ""
        | "apps"
        | "batch"
        | "rbac.authorization.k8s.io"
        | "storage.k8s.io"
        | "scheduling.k8s.io"
        | "discovery.k8s.io"
        | "networking.k8s.io" => "v1",
        other => panic!("no version for {other}"),
    };
    let def = registry.get(group, version, resource).expect("def");
    crate::quantity::canonicalize(def, &mut new).expect("valid quantities");
    crate::defaults::apply(def, &mut new);
    validate(def, &mut new, &old, via)
        .into_iter()
        .map(|c| (c.field, c.message))
        .collect()
}

fn pod(spec: Value) -> Value {
    json!({"metadata": {"name": "p"}, "spec": spec})
}

#[test]
fn a_pods_spec_is_immutable_but_images_deadlines_and_tolerations() {
    let old = pod(json!({
        "containers": [{"name": "a", "image": "r/a:1", "env": [{"name": "X", "value": "1"}]}],
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "activeDeadlineSeconds": 60
    }));
    // New image, lower deadline, one more toleration: allowed.
    let mut new = old.clone();
    new["spec"]["containers"][0]["image"] = json!("r/a:2");
    new["spec"]["activeDeadlineSeconds"] = json!(30);
    new["spec"]["tolerations"]
        .as_array_mut()
        .expect("list")
        .push(json!({"key": "j", "operator": "Exists"}));
    assert_eq!(
        refused("", "pods", old.clone(), new.clone(), Via::Main),
        vec![]
    );
    // A changed env: forbidden on spec.
    let mut env = new.clone();
    env["spec"]["containers"][0]["env"][0]["value"] = json!("2");
    let causes = refused("", "pods", old.clone(), env, Via::Main);
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].0, "spec");
    assert!(causes[0].1.starts_with(
        "Forbidden: pod updates may not change fields other than `spec.containers[*].image`"
    ));
    // A raised deadline, a removed toleration.
    let mut raised = old.clone();
    raised["spec"]["activeDeadlineSeconds"] = json!(90);
    raised["spec"]["tolerations"] = json!([]);
    let fields: Vec<String> = refused("", "pods", old.clone(), raised, Via::Main)
        .into_iter()
        .map(|c| c.0)
        .collect();
    assert_eq!(fields, ["spec.activeDeadlineSeconds", "spec"]);
    // nodeName: only pods/binding sets it.
    let mut bound = old.clone();
    bound["spec"]["nodeName"] = json!("n1");
    assert_eq!(
        refused("", "pods", old.clone(), bound.clone(), Via::Binding),
        vec![]
    );
    assert_eq!(refused("", "pods", old, bound, Via::Main).len(), 1);
}

#[test]
fn ephemeral_containers_are_added_never_changed_or_removed() {
    let debug = json!({"name": "debug", "image": "busybox:1", "stdin": true, "tty": true});
    let old = pod(json!({"containers": [{"name": "app", "image": "r/a:1"}]}));
    let mut added = old.clone();
    added["spec"]["ephemeralContainers"] = json!([debug.clone()]);
    // Only the subresource adds them; the main resource forbids it.
    assert_eq!(
        refused(
            "",
            "pods",
            old.clone(),
            added.clone(),
            Via::EphemeralContainers
        ),
        vec![]
    );
    let through_main = refused("", "pods", old.clone(), added.clone(), Via::Main);
    assert_eq!(through_main.len(), 1, "{through_main:?}");
    assert_eq!(through_main[0].0, "spec");
    assert!(
        through_main[0]
            .1
            .starts_with("Forbidden: pod updates may not change fields other than"),
        "{through_main:?}"
    );

    // The same container again, after a second one (a patch keeps no
    // order), is no change.
    let stored = added.clone();
    let mut second = added.clone();
    second["spec"]["ephemeralContainers"] =
        json!([{"name": "two", "image": "busybox:1"}, debug.clone()]);
    assert_eq!(
        refused("", "pods", stored.clone(), second, Via::EphemeralContainers),
        vec![]
    );
    let mut changed = added.clone();
    changed["spec"]["ephemeralContainers"][0]["image"] = json!("busybox:2");
    assert_eq!(
        refused(
            "",
            "pods",
            stored.clone(),
            changed,
            Via::EphemeralContainers
        ),
        vec![(
            "spec.ephemeralContainers".to_string(),
            "Forbidden: existing ephemeral containers \"debug\" may not be changed\n".to_string()
        )]
    );
    assert_eq!(
        refused(
            "",
            "pods",
            stored.clone(),
            old.clone(),
            Via::EphemeralContainers
        ),
        vec![(
            "spec.ephemeralContainers".to_string(),
            "Forbidden: existing ephemeral containers \"debug\" may not be removed\n".to_string()
        )]
    );

    // A static pod's mirror takes none.
    let mut mirror = old.clone();
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "abc"});
    let mut mirror_added = added;
    mirror_added["metadata"] = mirror["metadata"].clone();
    assert_eq!(
        refused("", "pods", mirror, mirror_added, Via::EphemeralContainers),
        vec![(
            "[]".to_string(),
            "Forbidden: static pods do not support ephemeral containers".to_string()
        )]
    );
}

#[test]
fn workload_selectors_and_statefulset_spec() {
    let deploy = |app: &str| json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"app": app}}, "replicas": 1}});
    let causes = refused("apps", "deployments", deploy("a"), deploy("b"), Via::Main);
    assert_eq!(
        causes,
        vec![(
            "spec.selector".to_string(),
            r#"Invalid value: {"matchLabels":{"app":"b"}}: field is immutable"#.to_string()
        )]
    );
    let mut scaled = deploy("a");
    scaled["spec"]["replicas"] = json!(5);
    assert_eq!(
        refused("apps", "deployments", deploy("a"), scaled, Via::Main),
        vec![]
    );

    let sts = json!({"metadata": {"name": "s"}, "spec": {"serviceName": "s", "replicas": 1, "selector": {}, "template": {}}});
    let mut changed = sts.clone();
    changed["spec"]["replicas"] = json!(3);
    changed["spec"]["template"] = json!({"metadata": {"labels": {"v": "2"}}});
    assert_eq!(
        refused(
            "apps",
            "statefulsets",
            sts.clone(),
            changed.clone(),
            Via::Main
        ),
        vec![]
    );
    changed["spec"]["serviceName"] = json!("other");
    let causes = refused("apps", "statefulsets", sts, changed, Via::Main);
    assert_eq!(causes[0].0, "spec");
    assert!(
        causes[0]
            .1
            .contains("updates to statefulset spec for fields other than 'replicas'")
    );
}

#[test]
fn immutable_config_and_secret_data() {
    let cm = |immutable: bool, v: &str| json!({"metadata": {"name": "c"}, "immutable": immutable, "data": {"k": v}});
    assert_eq!(
        refused("", "configmaps", cm(false, "1"), cm(false, "2"), Via::Main),
        vec![]
    );
    assert_eq!(
        refused("", "configmaps", cm(false, "1"), cm(true, "1"), Via::Main),
        vec![]
    );
    let causes = refused("", "configmaps", cm(true, "1"), cm(false, "2"), Via::Main);
    let fields: Vec<&str> = causes.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(fields, ["data", "immutable"]);
    assert_eq!(
        causes[0].1,
        "Forbidden: field is immutable when `immutable` is set"
    );
    let secret = |t: &str| json!({"metadata": {"name": "s"}, "type": t});
    let causes = refused(
        "",
        "secrets",
        secret("Opaque"),
        secret("kubernetes.io/tls"),
        Via::Main,
    );
    assert_eq!(
        causes,
        vec![(
            "type".to_string(),
            r#"Invalid value: "kubernetes.io/tls": field is immutable"#.to_string()
        )]
    );
}

#[test]
fn jobs_claims_volumes_and_the_rest() {
    let job = |image: &str, suspend: bool| {
        json!({"metadata": {"name": "j"}, "spec": {
        "suspend": suspend, "completions": 1, "selector": {"matchLabels": {"x": "y"}},
        "template": {"spec": {"nodeSelector": {"zone": image}, "containers": [{"name": "c", "image": image}]}}}})
    };
    let causes = refused("batch", "jobs", job("a", false), job("b", false), Via::Main);
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].0, "spec.template");
    // Suspended and never started: its pods' scheduling may change, not their image.
    let mut moved = job("a", true);
    moved["spec"]["template"]["spec"]["nodeSelector"] = json!({"zone": "b"});
    assert_eq!(
        refused("batch", "jobs", job("a", true), moved, Via::Main),
        vec![]
    );
    assert_eq!(
        refused("batch", "jobs", job("a", true), job("b", true), Via::Main).len(),
        1
    );

    let claim = |size: &str, class: &str, volume: &str| {
        json!({"metadata": {"name": "c"}, "spec": {
        "resources": {"requests": {"storage": size}}, "storageClassName": class, "volumeName": volume}})
    };
    assert_eq!(
        refused(
            "",
            "persistentvolumeclaims",
            claim("1Gi", "a", ""),
            claim("2Gi", "a", "pv1"),
            Via::Main
        ),
        vec![]
    );
    let causes = refused(
        "",
        "persistentvolumeclaims",
        claim("1Gi", "a", "pv1"),
        claim("1Gi", "b", "pv1"),
        Via::Main,
    );
    assert_eq!(causes[0].0, "spec");

    let pv = |path: &str, size: &str| json!({"metadata": {"name": "v"}, "spec": {"hostPath": {"path": path}, "capacity": {"storage": size}}});
    assert_eq!(
        refused(
            "",
            "persistentvolumes",
            pv("/a", "1Gi"),
            pv("/a", "2Gi"),
            Via::Main
        ),
        vec![]
    );
    assert_eq!(
        refused(
            "",
            "persistentvolumes",
            pv("/a", "1Gi"),
            pv("/b", "1Gi"),
            Via::Main
        )[0]
        .0,
        "spec.persistentvolumesource"
    );

    let binding = |role: &str| json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": role, "apiGroup": "rbac.authorization.k8s.io"}});
    let causes = refused(
        "rbac.authorization.k8s.io",
        "rolebindings",
        binding("view"),
        binding("edit"),
        Via::Main,
    );
    assert!(causes[0].1.ends_with("cannot change roleRef"), "{causes:?}");

    let class = |p: &str| json!({"metadata": {"name": "c"}, "provisioner": p});
    assert_eq!(
        refused(
            "storage.k8s.io",
            "storageclasses",
            class("a"),
            class("b"),
            Via::Main
        ),
        vec![(
            "provisioner".to_string(),
            "Forbidden: updates to provisioner are forbidden.".to_string()
        )]
    );
    let priority = |v: i64| json!({"metadata": {"name": "p"}, "value": v});
    assert_eq!(
        refused(
            "scheduling.k8s.io",
            "priorityclasses",
            priority(1),
            priority(2),
            Via::Main
        )[0]
        .0,
        "value"
    );
    let node = |cidr: &str| json!({"metadata": {"name": "n"}, "spec": {"podCIDR": cidr}});
    assert_eq!(
        refused("", "nodes", node(""), node("10.42.1.0/24"), Via::Main),
        vec![]
    );
    assert_eq!(
        refused(
            "",
            "nodes",
            node("10.42.1.0/24"),
            node("10.42.2.0/24"),
            Via::Main
        )[0]
        .0,
        "spec.podCIDRs"
    );
}
