use serde_json::{Value, json};

use super::*;

fn scope<'a>(types: &'a Types, schema: &str, api_version: &'a str) -> Scope<'a> {
    Scope {
        types,
        root: types.root(schema),
        api_version,
        subresource: "",
        ignore: Ignore::Nothing,
        now: "2026-11-30T10:00:00Z",
    }
}

fn cm_scope(types: &Types) -> Scope<'_> {
    scope(types, "io.k8s.api.core.v1.ConfigMap", "v1")
}

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d"}, "data": data})
}

fn managers(object: &Value) -> Vec<(String, String, Value)> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or_default().to_string(),
                        e["operation"].as_str().unwrap_or_default().to_string(),
                        e["fieldsV1"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_create_records_what_it_set() {
    let types = Types::builtin();
    let scope = cm_scope(types);
    let mut new = cm(json!({"a": "1"}));
    new["metadata"]["labels"] = json!({"x": "y"});
    update(&scope, None, &mut new, "kubectl-create");
    assert_eq!(
        managers(&new),
        vec![(
            "kubectl-create".into(),
            "Update".into(),
            json!({"f:data": {".": {}, "f:a": {}}, "f:metadata": {"f:labels": {".": {}, "f:x": {}}}})
        )]
    );
    assert_eq!(new["metadata"]["managedFields"][0]["apiVersion"], "v1");
    assert_eq!(
        new["metadata"]["managedFields"][0]["time"],
        "2026-11-30T10:00:00Z"
    );
}

#[test]
fn an_update_takes_changed_fields_and_drops_removed_ones() {
    let types = Types::builtin();
    let scope = cm_scope(types);
    let mut first = cm(json!({"a": "1", "b": "2"}));
    update(&scope, None, &mut first, "one");
    let mut second = first.clone();
    second["data"] = json!({"a": "changed"});
    update(&scope, Some(&first), &mut second, "two");
    let m = managers(&second);
    assert_eq!(m.len(), 2, "{m:?}");
    assert_eq!(m[0].0, "one");
    // The map itself is still the first manager's (it created it).
    assert_eq!(m[0].2, json!({"f:data": {}}));
    assert_eq!(m[1].0, "two");
    assert_eq!(m[1].2, json!({"f:data": {"f:a": {}}}));
    // No change: no new entry, no new time.
    let mut third = second.clone();
    update(&scope, Some(&second), &mut third, "three");
    assert_eq!(third, second);
}

#[test]
fn an_empty_managed_fields_list_resets_them() {
    let types = Types::builtin();
    let scope = cm_scope(types);
    let mut first = cm(json!({"a": "1"}));
    update(&scope, None, &mut first, "one");
    let mut second = first.clone();
    second["metadata"]["managedFields"] = json!([]);
    update(&scope, Some(&first), &mut second, "two");
    assert!(second["metadata"].get("managedFields").is_none());
}

#[test]
fn apply_creates_owns_and_prunes_what_it_stops_applying() {
    let types = Types::builtin();
    let scope = cm_scope(types);
    let created = apply(
        &scope,
        None,
        &cm(json!({"a": "1", "b": "2"})),
        "kubectl",
        false,
    )
    .expect("applies");
    assert_eq!(created["data"], json!({"a": "1", "b": "2"}));
    assert_eq!(
        managers(&created),
        vec![(
            "kubectl".into(),
            "Apply".into(),
            json!({"f:data": {"f:a": {}, "f:b": {}}})
        )]
    );
    let again = apply(
        &scope,
        Some(&created),
        &cm(json!({"a": "1"})),
        "kubectl",
        false,
    )
    .expect("applies");
    assert_eq!(again["data"], json!({"a": "1"}));
    assert_eq!(managers(&again)[0].2, json!({"f:data": {"f:a": {}}}));
    // Dropping everything under data removes data itself.
    let none = apply(
        &scope,
        Some(&again),
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
        "kubectl",
        false,
    )
    .expect("applies");
    assert!(none.get("data").is_none(), "{none}");
}

#[test]
fn conflicts_name_the_manager_and_field_and_force_takes_ownership() {
    let types = Types::builtin();
    let scope = cm_scope(types);
    let a = apply(&scope, None, &cm(json!({"a": "1"})), "alpha", false).expect("applies");
    // The same value: shared, no conflict.
    let shared = apply(&scope, Some(&a), &cm(json!({"a": "1"})), "beta", false).expect("shared");
    assert_eq!(managers(&shared).len(), 2);
    // A different value: conflict with alpha.
    let conflicts = apply(
        &scope,
        Some(&shared),
        &cm(json!({"a": "2"})),
        "gamma",
        false,
    )
    .expect_err("conflicts");
    assert_eq!(conflicts.len(), 2, "{conflicts:?}");
    let status = conflict_status(&conflicts);
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert_eq!(
        status.message,
        "Apply failed with 2 conflicts: conflicts with \"alpha\":\n- .data.a\nconflicts with \"beta\":\n- .data.a"
    );
    assert_eq!(status.causes[0].reason, "FieldManagerConflict");
    assert_eq!(status.causes[0].field, ".data.a");
    let one = conflict_status(&conflicts[..1]);
    assert_eq!(
        one.message,
        "Apply failed with 1 conflict: conflict with \"alpha\": .data.a"
    );
    let forced =
        apply(&scope, Some(&shared), &cm(json!({"a": "2"})), "gamma", true).expect("forced");
    assert_eq!(forced["data"]["a"], "2");
    let m = managers(&forced);
    assert_eq!(m.len(), 1, "alpha and beta lost their only field: {m:?}");
    assert_eq!(m[0].0, "gamma");
}

#[test]
fn an_update_by_another_manager_makes_a_later_apply_conflict() {
    let types = Types::builtin();
    let scope = cm_scope(types);
    let applied = apply(
        &scope,
        None,
        &cm(json!({"a": "1", "b": "1"})),
        "kubectl",
        false,
    )
    .expect("applies");
    let mut edited = applied.clone();
    edited["data"]["a"] = json!("edited");
    update(&scope, Some(&applied), &mut edited, "kubectl-edit");
    let conflicts = apply(
        &scope,
        Some(&edited),
        &cm(json!({"a": "1", "b": "1"})),
        "kubectl",
        false,
    )
    .expect_err("conflicts");
    assert_eq!(conflicts.len(), 1);
    assert!(
        conflicts[0]
            .manager
            .starts_with("\"kubectl-edit\" using v1"),
        "{}",
        conflicts[0].manager
    );
    // A field shared with another manager survives the applier dropping it.
    let other = apply(
        &scope,
        Some(&applied),
        &cm(json!({"b": "1"})),
        "other",
        false,
    )
    .expect("shares b");
    let dropped = apply(
        &scope,
        Some(&other),
        &cm(json!({"a": "1"})),
        "kubectl",
        false,
    )
    .expect("applies");
    assert_eq!(dropped["data"], json!({"a": "1", "b": "1"}));
}

fn deployment(containers: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "d"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}}}
    })
}

#[test]
fn associative_lists_merge_by_key_and_keys_take_defaults() {
    let types = Types::builtin();
    let scope = scope(types, "io.k8s.api.apps.v1.Deployment", "apps/v1");
    let first = apply(
        &scope,
        None,
        &deployment(json!([{"name": "main", "image": "a", "ports": [{"containerPort": 80}]}])),
        "one",
        false,
    )
    .expect("applies");
    let fields = &managers(&first)[0].2;
    let containers = &fields["f:spec"]["f:template"]["f:spec"]["f:containers"];
    let main = &containers["k:{\"name\":\"main\"}"];
    assert_eq!(main["."], json!({}));
    assert_eq!(main["f:image"], json!({}));
    assert!(
        main["f:ports"]["k:{\"containerPort\":80,\"protocol\":\"TCP\"}"].is_object(),
        "{main}"
    );
    let second = apply(
        &scope,
        Some(&first),
        &deployment(json!([{"name": "side", "image": "b"}])),
        "two",
        false,
    )
    .expect("applies");
    let names: Vec<&str> = second["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, vec!["main", "side"]);
    // The second manager stops applying its container: it goes, main stays.
    let third =
        apply(&scope, Some(&second), &deployment(json!([])), "two", false).expect("applies");
    let names: Vec<&str> = third["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, vec!["main"]);
    // Changing main's image conflicts with "one".
    let conflicts = apply(
        &scope,
        Some(&third),
        &deployment(json!([{"name": "main", "image": "z"}])),
        "two",
        false,
    )
    .expect_err("conflicts");
    assert_eq!(
        path_string(&conflicts[0].path),
        ".spec.template.spec.containers[name=\"main\"].image"
    );
}

#[test]
fn sets_and_atomic_lists() {
    let types = Types::builtin();
    let scope = cm_scope(types);
    let mut with_finalizers = cm(json!({}));
    with_finalizers["metadata"]["finalizers"] = json!(["a/x"]);
    let first = apply(&scope, None, &with_finalizers, "one", false).expect("applies");
    let mut other = cm(json!({}));
    other["metadata"]["finalizers"] = json!(["b/y"]);
    let second = apply(&scope, Some(&first), &other, "two", false).expect("applies");
    assert_eq!(second["metadata"]["finalizers"], json!(["a/x", "b/y"]));
    assert_eq!(
        managers(&second)[1].2,
        json!({"f:data": {}, "f:metadata": {"f:finalizers": {"v:\"b/y\"": {}}}})
    );
    // Tolerations are atomic: a second applier replaces the whole list and
    // conflicts with the first.
    let pod = |tolerations: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"tolerations": tolerations}});
    let pod_scope = scope_for_pod(types);
    let p1 = apply(&pod_scope, None, &pod(json!([{"key": "a"}])), "one", false).expect("applies");
    let conflicts = apply(
        &pod_scope,
        Some(&p1),
        &pod(json!([{"key": "b"}])),
        "two",
        false,
    )
    .expect_err("atomic list conflicts");
    assert_eq!(path_string(&conflicts[0].path), ".spec.tolerations");
}

fn scope_for_pod(types: &Types) -> Scope<'_> {
    scope(types, "io.k8s.api.core.v1.Pod", "v1")
}

#[test]
fn server_fields_and_status_are_not_owned() {
    let types = Types::builtin();
    let mut scope = scope_for_pod(types);
    scope.ignore = Ignore::Status;
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u", "resourceVersion": "5"}, "spec": {"nodeName": "n"}, "status": {"phase": "Running"}});
    let applied = apply(&scope, None, &pod, "one", false).expect("applies");
    assert_eq!(
        managers(&applied)[0].2,
        json!({"f:spec": {"f:nodeName": {}}})
    );
    scope.ignore = Ignore::AllButStatus;
    scope.subresource = "status";
    let mut new = applied.clone();
    new["status"]["phase"] = json!("Succeeded");
    new["spec"]["nodeName"] = json!("other");
    update(&scope, Some(&applied), &mut new, "kubelet");
    let m = managers(&new);
    assert_eq!(m[1].0, "kubelet");
    assert_eq!(m[1].2, json!({"f:status": {"f:phase": {}}}));
    assert_eq!(new["metadata"]["managedFields"][1]["subresource"], "status");
}
