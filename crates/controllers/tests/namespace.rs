//! Deleting a namespace against a real API server: everything in it goes,
//! built-in and custom kinds, finalizers are honoured with upstream's
//! conditions saying so, creates are refused meanwhile, and the namespace
//! goes last.

mod support;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use support::{cluster, config_map, exists, until};

const CRD: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "widgets.example.com"},
  "spec": {"group": "example.com", "scope": "Namespaced",
    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_namespace_is_emptied_and_then_removed() {
    let c = cluster().await;
    let namespaces: Api<Namespace> = Api::all(c.admin.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some("doomed".into());
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");

    let crds: Api<CustomResourceDefinition> = Api::all(c.admin.clone());
    let crd: CustomResourceDefinition = serde_json::from_str(CRD).expect("crd");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("crd");
    let widget = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(c.admin.clone(), "doomed", &widget);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 3}
    }))
    .expect("widget");
    until("the custom resource is served", || async {
        widgets
            .create(&PostParams::default(), &object)
            .await
            .is_ok()
    })
    .await;

    config_map(&c.admin, "doomed", "plain", vec![]).await;
    let mut held = config_map(&c.admin, "doomed", "held", vec![]).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(c.admin.clone(), "doomed");
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    config_maps
        .replace("held", &PostParams::default(), &held)
        .await
        .expect("hold");
    let secrets: Api<Secret> = Api::namespaced(c.admin.clone(), "doomed");
    let mut secret = Secret::default();
    secret.metadata.name = Some("s".into());
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");

    let deleted = namespaces
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete");
    let terminating = deleted
        .left()
        .expect("the namespace comes back while it terminates");
    assert_eq!(
        terminating.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );

    // Nothing new may be created in it.
    let mut late = ConfigMap::default();
    late.metadata.name = Some("late".into());
    match config_maps.create(&PostParams::default(), &late).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
            assert_eq!(
                status.message,
                "configmaps \"late\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
            );
        }
        other => panic!("a create in a terminating namespace was not refused: {other:?}"),
    }

    until("everything without a finalizer is gone", || async {
        !exists(&config_maps, "plain").await
            && !exists(&secrets, "s").await
            && widgets.get_opt("w").await.expect("get").is_none()
    })
    .await;
    let condition = |ns: &Namespace, kind: &str| {
        ns.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == kind).cloned())
    };
    until("the conditions name what remains", || async {
        let ns = namespaces.get("doomed").await.expect("still there");
        condition(&ns, "NamespaceFinalizersRemaining").is_some_and(|c| c.status == "True")
    })
    .await;
    let ns = namespaces.get("doomed").await.expect("still there");
    let remaining = condition(&ns, "NamespaceContentRemaining").expect("condition");
    assert_eq!(remaining.reason.as_deref(), Some("SomeResourcesRemain"));
    assert_eq!(
        remaining.message.as_deref(),
        Some("Some resources are remaining: configmaps. has 1 resource instances")
    );
    let finalizers = condition(&ns, "NamespaceFinalizersRemaining").expect("condition");
    assert_eq!(
        finalizers.message.as_deref(),
        Some(
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
        )
    );
    let discovered = condition(&ns, "NamespaceDeletionDiscoveryFailure").expect("condition");
    assert_eq!(
        (discovered.status.as_str(), discovered.reason.as_deref()),
        ("False", Some("ResourcesDiscovered"))
    );

    // The last finalizer removed, the namespace goes.
    let mut held = config_maps.get("held").await.expect("held");
    held.metadata.finalizers = None;
    config_maps
        .replace("held", &PostParams::default(), &held)
        .await
        .expect("release");
    until("the namespace is removed", || async {
        namespaces.get_opt("doomed").await.expect("get").is_none()
    })
    .await;
    assert!(held.finalizers().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_namespaces_may_not_be_deleted() {
    let c = cluster().await;
    let namespaces: Api<Namespace> = Api::all(c.admin.clone());
    for name in ["default", "kube-system", "kube-public"] {
        match namespaces.delete(name, &DeleteParams::default()).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 403, "{name}");
                assert!(
                    status.message.contains("this namespace may not be deleted"),
                    "{}",
                    status.message
                );
            }
            other => panic!("{name} was not protected: {other:?}"),
        }
    }
}
