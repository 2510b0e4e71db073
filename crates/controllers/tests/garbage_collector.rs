//! The garbage collector against a real API server: each propagation
//! policy, dangling and cluster-scoped owners, custom resource owners,
//! cycles.

mod support;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use support::{cluster, config_map, exists, reference, uid_of, until};

async fn delete_with(api: &Api<ConfigMap>, name: &str, policy: PropagationPolicy) {
    let params = DeleteParams {
        propagation_policy: Some(policy),
        ..DeleteParams::default()
    };
    api.delete(name, &params).await.expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_deletes_dependents_after_the_owner() {
    let c = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(c.admin.clone(), "default");
    let owner = config_map(&c.admin, "default", "owner", vec![]).await;
    let owner_ref = reference("v1", "ConfigMap", "owner", &uid_of(&owner), false);
    for i in 0..5 {
        config_map(
            &c.admin,
            "default",
            &format!("dep-{i}"),
            vec![owner_ref.clone()],
        )
        .await;
    }
    let bystander = config_map(&c.admin, "default", "bystander", vec![]).await;
    delete_with(&api, "owner", PropagationPolicy::Background).await;
    assert!(!exists(&api, "owner").await, "the owner goes at once");
    until("the dependents are collected", || async {
        let mut left = 0;
        for i in 0..5 {
            left += usize::from(exists(&api, &format!("dep-{i}")).await);
        }
        left == 0
    })
    .await;
    assert!(exists(&api, &bystander.name_any()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_keeps_the_owner_until_its_blocking_dependents_are_gone() {
    let c = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(c.admin.clone(), "default");
    let owner = config_map(&c.admin, "default", "owner", vec![]).await;
    let uid = uid_of(&owner);
    // A blocking dependent held by a finalizer of its own.
    let mut held = config_map(
        &c.admin,
        "default",
        "held",
        vec![reference("v1", "ConfigMap", "owner", &uid, true)],
    )
    .await;
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.replace("held", &PostParams::default(), &held)
        .await
        .expect("hold it");
    config_map(
        &c.admin,
        "default",
        "loose",
        vec![reference("v1", "ConfigMap", "owner", &uid, false)],
    )
    .await;
    delete_with(&api, "owner", PropagationPolicy::Foreground).await;
    let waiting = api.get("owner").await.expect("still there");
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert!(
        waiting
            .finalizers()
            .contains(&"foregroundDeletion".to_string())
    );
    until("the blocking dependent is being deleted", || async {
        api.get("held")
            .await
            .expect("get")
            .metadata
            .deletion_timestamp
            .is_some()
    })
    .await;
    assert!(
        exists(&api, "owner").await,
        "held back by its blocking dependent"
    );
    // Release the dependent: it goes, then the owner.
    let mut held = api.get("held").await.expect("get");
    held.metadata.finalizers = None;
    api.replace("held", &PostParams::default(), &held)
        .await
        .expect("release");
    until("the owner goes", || async { !exists(&api, "owner").await }).await;
    until("the non-blocking dependent goes too", || async {
        !exists(&api, "loose").await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_removes_the_owner_references_and_keeps_the_dependents() {
    let c = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(c.admin.clone(), "default");
    let owner = config_map(&c.admin, "default", "owner", vec![]).await;
    let other = config_map(&c.admin, "default", "other", vec![]).await;
    let refs = vec![
        reference("v1", "ConfigMap", "owner", &uid_of(&owner), true),
        reference("v1", "ConfigMap", "other", &uid_of(&other), false),
    ];
    for i in 0..3 {
        config_map(&c.admin, "default", &format!("dep-{i}"), refs.clone()).await;
    }
    delete_with(&api, "owner", PropagationPolicy::Orphan).await;
    until("the owner goes", || async { !exists(&api, "owner").await }).await;
    for i in 0..3 {
        let dep = api.get(&format!("dep-{i}")).await.expect("kept");
        let owners: Vec<String> = dep
            .owner_references()
            .iter()
            .map(|r| r.name.clone())
            .collect();
        assert_eq!(owners, ["other"], "only the deleted owner's reference goes");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dangling_owners_and_cluster_scoped_owners() {
    let c = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(c.admin.clone(), "default");
    // An owner that never existed.
    config_map(
        &c.admin,
        "default",
        "dangling",
        vec![reference(
            "v1",
            "ConfigMap",
            "ghost",
            "00000000-0000-0000-0000-000000000000",
            false,
        )],
    )
    .await;
    until("a dependent of a missing owner is collected", || async {
        !exists(&api, "dangling").await
    })
    .await;
    // A cluster-scoped owner (a Namespace) of a namespaced dependent.
    let namespaces: Api<Namespace> = Api::all(c.admin.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some("owner-ns".into());
    let ns = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    // With a second owner that never existed: the collector looks at the
    // dependent once it finds that one missing, and — the Namespace being
    // a solid owner — only drops the dangling reference.
    config_map(
        &c.admin,
        "default",
        "of-a-namespace",
        vec![
            reference("v1", "Namespace", "owner-ns", &uid_of(&ns), false),
            reference(
                "v1",
                "ConfigMap",
                "ghost",
                "00000000-0000-0000-0000-000000000001",
                false,
            ),
        ],
    )
    .await;
    until("the dangling reference is dropped", || async {
        api.get_opt("of-a-namespace")
            .await
            .expect("get")
            .is_none_or(|cm| cm.owner_references().len() == 1)
    })
    .await;
    let kept = api.get_opt("of-a-namespace").await.expect("get");
    let owners: Vec<String> = kept
        .as_ref()
        .map(|cm| {
            cm.owner_references()
                .iter()
                .map(|r| r.kind.clone())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(owners, ["Namespace"], "its owner exists: kept");
    namespaces
        .delete("owner-ns", &DeleteParams::default())
        .await
        .expect("delete the namespace");
    until("the namespace's dependent is collected", || async {
        !exists(&api, "of-a-namespace").await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_in_another_namespace_is_no_owner() {
    let c = cluster().await;
    let namespaces: Api<Namespace> = Api::all(c.admin.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some("elsewhere".into());
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    let owner = config_map(&c.admin, "elsewhere", "owner", vec![]).await;
    let api: Api<ConfigMap> = Api::namespaced(c.admin.clone(), "default");
    config_map(
        &c.admin,
        "default",
        "misled",
        vec![reference(
            "v1",
            "ConfigMap",
            "owner",
            &uid_of(&owner),
            false,
        )],
    )
    .await;
    until(
        "a dependent naming an owner in another namespace is collected",
        || async { !exists(&api, "misled").await },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_of_owners_is_collected_without_hanging() {
    let c = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(c.admin.clone(), "default");
    let a = config_map(&c.admin, "default", "a", vec![]).await;
    let b = config_map(
        &c.admin,
        "default",
        "b",
        vec![reference("v1", "ConfigMap", "a", &uid_of(&a), true)],
    )
    .await;
    let mut a = api.get("a").await.expect("get");
    a.metadata.owner_references = Some(vec![reference("v1", "ConfigMap", "b", &uid_of(&b), true)]);
    api.replace("a", &PostParams::default(), &a)
        .await
        .expect("close the cycle");
    delete_with(&api, "a", PropagationPolicy::Foreground).await;
    until("both members of the cycle go", || async {
        !exists(&api, "a").await && !exists(&api, "b").await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_resource_owner_and_a_namespaced_owner_of_a_cluster_scoped_object() {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::DynamicObject;
    use kube::core::{ApiResource, GroupVersionKind};

    let c = cluster().await;
    let crds: Api<CustomResourceDefinition> = Api::all(c.admin.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
          "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
          "versions": [{"name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .expect("crd");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("crd");
    let gadget = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Gadget"),
        "gadgets",
    );
    let gadgets: Api<DynamicObject> = Api::namespaced_with(c.admin.clone(), "default", &gadget);
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}
    }))
    .expect("gadget");
    let owner = rudder_harness::eventually(
        "the custom resource to be served",
        std::time::Duration::from_secs(10),
        || async { gadgets.create(&PostParams::default(), &object).await.ok() },
    )
    .await;
    let api: Api<ConfigMap> = Api::namespaced(c.admin.clone(), "default");
    config_map(
        &c.admin,
        "default",
        "of-a-gadget",
        vec![reference(
            "example.com/v1",
            "Gadget",
            "g",
            &uid_of(&owner),
            true,
        )],
    )
    .await;
    // A cluster-scoped object may not be owned by a namespaced one: left alone.
    let roles: Api<ClusterRole> = Api::all(c.admin.clone());
    let mut role = ClusterRole::default();
    role.metadata.name = Some("misowned".into());
    role.metadata.owner_references = Some(vec![reference(
        "example.com/v1",
        "Gadget",
        "g",
        &uid_of(&owner),
        false,
    )]);
    roles
        .create(&PostParams::default(), &role)
        .await
        .expect("cluster role");

    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        ..DeleteParams::default()
    };
    gadgets
        .delete("g", &params)
        .await
        .expect("delete the gadget");
    until("the custom owner goes after its dependent", || async {
        gadgets.get_opt("g").await.expect("get").is_none()
    })
    .await;
    assert!(!exists(&api, "of-a-gadget").await);
    assert!(
        roles.get_opt("misowned").await.expect("get").is_some(),
        "never collected"
    );
}
