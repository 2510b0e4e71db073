//! The StatefulSet controller against a real API server with the stand-in
//! kubelet: stable names, hostnames and claims, ordered creation, revisions
//! rolled out from the highest ordinal, scale-down from the top with the
//! claims kept.

mod support;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use support::{cluster_with_nodes, until};

async fn pods(client: &Client) -> Vec<Pod> {
    let mut all = Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels("app=db"))
        .await
        .expect("list")
        .items;
    all.retain(|p| p.metadata.deletion_timestamp.is_none());
    all.sort_by_key(|p| p.name_any());
    all
}

fn settled(set: &StatefulSet, replicas: i32) -> bool {
    let s = set.status.clone().unwrap_or_default();
    s.observed_generation >= set.metadata.generation
        && s.replicas == replicas
        && s.ready_replicas == Some(replicas)
        && s.updated_replicas == Some(replicas)
        && s.current_revision.is_some()
        && s.current_revision == s.update_revision
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_keeps_stable_pods_and_claims_and_rolls_out_from_the_top() {
    let c = cluster_with_nodes().await;
    let api: Api<StatefulSet> = Api::namespaced(c.admin.clone(), "default");
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}
    }))
    .expect("set");
    api.create(&PostParams::default(), &set)
        .await
        .expect("create");
    until("three ready pods", || async {
        settled(&api.get("db").await.expect("get"), 3)
    })
    .await;
    let all = pods(&c.admin).await;
    assert_eq!(
        all.iter().map(|p| p.name_any()).collect::<Vec<_>>(),
        ["db-0", "db-1", "db-2"]
    );
    // Created in order: each after the one before was ready.
    let created: Vec<_> = all
        .iter()
        .map(|p| p.metadata.creation_timestamp.clone().expect("created").0)
        .collect();
    assert!(created.windows(2).all(|w| w[0] <= w[1]));
    for (i, p) in all.iter().enumerate() {
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(spec.hostname.as_deref(), Some(format!("db-{i}").as_str()));
        assert_eq!(spec.subdomain.as_deref(), Some("db"));
        let claim = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "data")
            .and_then(|v| v.persistent_volume_claim.clone())
            .expect("claim");
        assert_eq!(claim.claim_name, format!("data-db-{i}"));
        assert_eq!(
            p.labels().get("apps.kubernetes.io/pod-index"),
            Some(&i.to_string())
        );
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.admin.clone(), "default");
    assert_eq!(
        claims
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        3
    );
    let first = api
        .get("db")
        .await
        .expect("get")
        .status
        .and_then(|s| s.current_revision)
        .expect("revision");
    assert!(
        all.iter()
            .all(|p| p.labels().get("controller-revision-hash") == Some(&first))
    );

    api.patch("db", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}}})))
        .await
        .expect("new image");
    until("the new revision everywhere", || async {
        let set = api.get("db").await.expect("get");
        settled(&set, 3)
            && set
                .status
                .and_then(|s| s.current_revision)
                .is_some_and(|r| r != first)
    })
    .await;
    let revisions: Api<ControllerRevision> = Api::namespaced(c.admin.clone(), "default");
    let mut numbers: Vec<i64> = revisions
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|r| r.revision)
        .collect();
    numbers.sort();
    assert_eq!(numbers, [1, 2]);
    assert!(pods(&c.admin).await.iter().all(|p| {
        p.spec
            .as_ref()
            .is_some_and(|s| s.containers[0].image.as_deref() == Some("busybox:2"))
    }));

    api.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .expect("scale down");
    until("one pod left, the lowest", || async {
        let left = pods(&c.admin).await;
        left.len() == 1
            && left[0].name_any() == "db-0"
            && settled(&api.get("db").await.expect("get"), 1)
    })
    .await;
    assert_eq!(
        claims
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        3,
        "claims are retained"
    );
}
