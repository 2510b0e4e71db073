//! A kube-rs `#[derive(CustomResource)]` type round-trips through the API
//! server: its generated CustomResourceDefinition is established, and its
//! objects are created, read, listed, patched (merge and server-side apply),
//! scaled, given a status, validated, pruned, defaulted and deleted with the
//! definition.

mod support;

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::Backend;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "rudder.example.com",
    version = "v1",
    kind = "Gadget",
    namespaced,
    status = "GadgetStatus",
    shortname = "gd",
    scale = r#"{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas"}"#,
    printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size"}"#
)]
struct GadgetSpec {
    size: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tags: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
struct GadgetStatus {
    replicas: i32,
    ready: bool,
}

async fn established(crds: &Api<CustomResourceDefinition>, name: &str) {
    for _ in 0..100 {
        let crd = crds.get(name).await.expect("get definition");
        let ok = crd
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if ok {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{name} was not established");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_derived_custom_resource_round_trips() {
    let server = support::start(Backend::Embedded).await;
    let client = server.client.clone();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Gadget::crd())
        .await
        .expect("create the definition");
    established(&crds, "gadgets.rudder.example.com").await;
    let crd = crds.get("gadgets.rudder.example.com").await.expect("get");
    assert!(
        crd.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"customresourcecleanup.apiextensions.k8s.io".to_string())
    );

    let gadgets: Api<Gadget> = Api::namespaced(client.clone(), "default");
    let mut g = Gadget::new(
        "one",
        GadgetSpec {
            size: 3,
            replicas: Some(1),
            tags: vec![],
        },
    );
    let created = gadgets
        .create(&PostParams::default(), &g)
        .await
        .expect("create");
    assert_eq!(created.spec, g.spec);
    assert!(created.metadata.uid.is_some());
    let listed = gadgets.list(&ListParams::default()).await.expect("list");
    assert_eq!(listed.items.len(), 1);

    // Merge patch, server-side apply.
    let patched = gadgets
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 4}})),
        )
        .await
        .expect("merge patch");
    assert_eq!(patched.spec.size, 4);
    g.spec.tags = vec!["a".into()];
    g.spec.size = 4;
    let applied = gadgets
        .patch("one", &PatchParams::apply("rudder-test"), &Patch::Apply(&g))
        .await
        .expect("server-side apply");
    assert_eq!(applied.spec.tags, vec!["a".to_string()]);
    let managers: Vec<String> = applied
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(
        managers.contains(&"rudder-test".to_string()),
        "{managers:?}"
    );

    // Status and scale subresources.
    let status = gadgets
        .patch_status(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1, "ready": true}})),
        )
        .await
        .expect("status");
    assert_eq!(
        status.status,
        Some(GadgetStatus {
            replicas: 1,
            ready: true
        })
    );
    let scale = gadgets
        .patch_scale(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .expect("scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(5));
    assert_eq!(
        gadgets.get("one").await.expect("get").spec.replicas,
        Some(5)
    );
    // Server-side apply of a Scale owns the parent's replicas field.
    let scale_config = |n: i32| json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "one"}, "spec": {"replicas": n}});
    let applied_scale = gadgets
        .patch_scale(
            "one",
            &PatchParams::apply("autoscaler").force(),
            &Patch::Apply(scale_config(6)),
        )
        .await
        .expect("apply a scale");
    assert_eq!(applied_scale.spec.and_then(|s| s.replicas), Some(6));
    match gadgets
        .patch_scale(
            "one",
            &PatchParams::apply("someone-else"),
            &Patch::Apply(scale_config(7)),
        )
        .await
    {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 409, "{status:?}");
            assert!(status.message.contains("autoscaler"), "{}", status.message);
        }
        other => panic!("a conflicting scale apply was accepted: {other:?}"),
    }

    // Validation against the generated schema, and pruning.
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &kube::discovery::ApiResource::erase::<Gadget>(&()),
    );
    let bad: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "rudder.example.com/v1", "kind": "Gadget",
        "metadata": {"name": "bad"}, "spec": {"size": "big"}
    }))
    .expect("object");
    match raw.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(status.message.contains("spec.size"), "{}", status.message);
        }
        other => panic!("a string size was accepted: {other:?}"),
    }
    let extra: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "rudder.example.com/v1", "kind": "Gadget",
        "metadata": {"name": "pruned"}, "spec": {"size": 1, "unknown": true}
    }))
    .expect("object");
    let kept = raw
        .create(&PostParams::default(), &extra)
        .await
        .expect("create (fieldValidation defaults to Warn)");
    assert!(
        kept.data["spec"].get("unknown").is_none(),
        "{:?}",
        kept.data
    );

    // A second definition claiming the same kind in the group is not
    // accepted, and its resource is not served; the first keeps its names
    // even though the second comes first in the store.
    let mut rival = Gadget::crd();
    rival.metadata.name = Some("aardvarks.rudder.example.com".into());
    rival.spec.names.plural = "aardvarks".into();
    rival.spec.names.singular = Some("aardvark".into());
    rival.spec.names.short_names = None;
    crds.create(&PostParams::default(), &rival)
        .await
        .expect("create the rival");
    let mut accepted = None;
    for _ in 0..100 {
        let got = crds.get("aardvarks.rudder.example.com").await.expect("get");
        accepted = got
            .status
            .and_then(|s| s.conditions)
            .and_then(|c| c.into_iter().find(|c| c.type_ == "NamesAccepted"));
        if accepted.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let accepted = accepted.expect("a NamesAccepted condition");
    assert_eq!(accepted.status, "False", "{accepted:?}");
    assert_eq!(accepted.reason.as_deref(), Some("NameConflict"));
    let rivals: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &kube::discovery::ApiResource {
            plural: "aardvarks".into(),
            ..kube::discovery::ApiResource::erase::<Gadget>(&())
        },
    );
    match rivals.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 404),
        other => panic!("a rejected definition is served: {other:?}"),
    }
    // The established definition kept its names (the rival sorts first).
    assert_eq!(
        gadgets
            .list(&ListParams::default())
            .await
            .expect("still served")
            .items
            .len(),
        2
    );
    crds.delete("aardvarks.rudder.example.com", &DeleteParams::default())
        .await
        .expect("delete the rival");

    // Deleting the definition deletes its objects and the resource.
    let stored = server
        .store()
        .list(b"/registry/rudder.example.com/gadgets/", Default::default())
        .await
        .expect("list the store");
    assert_eq!(
        stored.kvs.len(),
        2,
        "the objects are where the check below looks"
    );
    crds.delete("gadgets.rudder.example.com", &DeleteParams::default())
        .await
        .expect("delete the definition");
    for _ in 0..100 {
        if crds
            .get_opt("gadgets.rudder.example.com")
            .await
            .expect("get")
            .is_none()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        crds.get_opt("gadgets.rudder.example.com")
            .await
            .expect("get")
            .is_none()
    );
    match gadgets.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 404),
        other => panic!("the resource is still served: {other:?}"),
    }
    // Its objects are gone from the store, not only from view.
    let left = server
        .store()
        .list(b"/registry/rudder.example.com/gadgets/", Default::default())
        .await
        .expect("list the store");
    assert!(
        left.kvs.is_empty(),
        "{} objects outlived their definition",
        left.kvs.len()
    );
}
