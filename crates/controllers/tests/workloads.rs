//! The ReplicaSet, ReplicationController and Deployment controllers against
//! a real API server, with the harness's stand-in kubelet making pods
//! Running and Ready: pods created and replaced, orphans adopted and
//! released, rollouts with revisions, rollback, scaling and pause.

mod support;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use rudder_runtime::meta::controller_of;
use serde_json::json;
use support::{cluster, cluster_with_nodes, until};

async fn pods_of(client: &Client, uid: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| controller_of(p).is_some_and(|r| r.uid == uid))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

fn replica_set(name: &str, replicas: i32) -> ReplicaSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .expect("a replica set")
}

fn deployment(name: &str, replicas: i32, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]}}}
    }))
    .expect("a deployment")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_set_keeps_its_pods_and_replaces_a_deleted_one() {
    let c = cluster_with_nodes().await;
    let api: Api<ReplicaSet> = Api::namespaced(c.admin.clone(), "default");
    let rs = api
        .create(&PostParams::default(), &replica_set("web", 3))
        .await
        .expect("create");
    let uid = rs.uid().expect("uid");
    until("three pods", || async {
        pods_of(&c.admin, &uid).await.len() == 3
    })
    .await;
    until("the status counts them ready and available", || async {
        let s = api
            .get("web")
            .await
            .expect("get")
            .status
            .unwrap_or_default();
        s.replicas == 3
            && s.ready_replicas == Some(3)
            && s.available_replicas == Some(3)
            && s.fully_labeled_replicas == Some(3)
            && s.observed_generation == Some(1)
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(c.admin.clone(), "default");
    let victim = pods_of(&c.admin, &uid).await.remove(0).name_any();
    pods.delete(&victim, &DeleteParams::default())
        .await
        .expect("delete a pod");
    until("the pod is replaced", || async {
        let now = pods_of(&c.admin, &uid).await;
        now.len() == 3 && now.iter().all(|p| p.name_any() != victim)
    })
    .await;

    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .expect("scale down");
    until("one pod is left", || async {
        pods_of(&c.admin, &uid).await.len() == 1
    })
    .await;
    // Pods made by it carry its reference as their controller.
    let left = pods_of(&c.admin, &uid).await.remove(0);
    let reference = controller_of(&left).expect("a controller");
    assert_eq!(
        (reference.kind.as_str(), reference.block_owner_deletion),
        ("ReplicaSet", Some(true))
    );
    assert!(left.name_any().starts_with("web-"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_are_adopted_and_relabelled_pods_released() {
    let c = cluster().await;
    let pods: Api<Pod> = Api::namespaced(c.admin.clone(), "default");
    // The set's first sync may run before its pod informer has seen the
    // stray: it then creates two pods, adopts the stray and scales one
    // away. The deletion cost makes that one a new pod, never the stray
    // (pods otherwise alike, created within a second, tie).
    let orphan: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stray", "labels": {"app": "adopter"},
            "annotations": {"controller.kubernetes.io/pod-deletion-cost": "100"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &orphan)
        .await
        .expect("orphan");
    let api: Api<ReplicaSet> = Api::namespaced(c.admin.clone(), "default");
    let rs = api
        .create(&PostParams::default(), &replica_set("adopter", 2))
        .await
        .expect("create");
    let uid = rs.uid().expect("uid");
    until("the orphan is adopted and one pod added", || async {
        let owned = pods_of(&c.admin, &uid).await;
        owned.len() == 2 && owned.iter().any(|p| p.name_any() == "stray")
    })
    .await;
    pods.patch(
        "stray",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})),
    )
    .await
    .expect("relabel");
    until("it is released and replaced", || async {
        let stray = pods.get("stray").await.expect("get");
        let owned = pods_of(&c.admin, &uid).await;
        controller_of(&stray).is_none()
            && owned.len() == 2
            && owned.iter().all(|p| p.name_any() != "stray")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replication_controller_keeps_its_pods() {
    let c = cluster_with_nodes().await;
    let api: Api<ReplicationController> = Api::namespaced(c.admin.clone(), "default");
    let rc: ReplicationController = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": "legacy"},
        "spec": {"replicas": 2, "selector": {"app": "legacy"},
            "template": {"metadata": {"labels": {"app": "legacy"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .expect("rc");
    let rc = api
        .create(&PostParams::default(), &rc)
        .await
        .expect("create");
    let uid = rc.uid().expect("uid");
    until("two pods, counted ready", || async {
        let s = api
            .get("legacy")
            .await
            .expect("get")
            .status
            .unwrap_or_default();
        pods_of(&c.admin, &uid).await.len() == 2 && s.ready_replicas == Some(2)
    })
    .await;
    let reference = controller_of(&pods_of(&c.admin, &uid).await[0])
        .cloned()
        .expect("owner");
    assert_eq!(
        (reference.kind.as_str(), reference.api_version.as_str()),
        ("ReplicationController", "v1")
    );
}

fn annotation(object: &impl kube::Resource, name: &str) -> Option<String> {
    object.meta().annotations.as_ref()?.get(name).cloned()
}

fn progressing_reason(d: &Deployment) -> Option<String> {
    d.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Progressing")?
        .reason
        .clone()
}

fn rolled_out(d: &Deployment, replicas: i32) -> bool {
    let s = d.status.clone().unwrap_or_default();
    s.observed_generation >= d.metadata.generation
        && s.replicas == Some(replicas)
        && s.updated_replicas == Some(replicas)
        && s.available_replicas == Some(replicas)
        && progressing_reason(d).as_deref() == Some("NewReplicaSetAvailable")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_rolls_out_rolls_back_scales_and_pauses() {
    let c = cluster_with_nodes().await;
    let deployments: Api<Deployment> = Api::namespaced(c.admin.clone(), "default");
    let replica_sets: Api<ReplicaSet> = Api::namespaced(c.admin.clone(), "default");
    deployments
        .create(&PostParams::default(), &deployment("app", 4, "busybox:1"))
        .await
        .expect("create");
    until("the first rollout completes", || async {
        rolled_out(&deployments.get("app").await.expect("get"), 4)
    })
    .await;
    let d = deployments.get("app").await.expect("get");
    assert_eq!(
        annotation(&d, "deployment.kubernetes.io/revision").as_deref(),
        Some("1")
    );
    let first: Vec<ReplicaSet> = replica_sets
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert_eq!(first.len(), 1);
    let first = &first[0];
    let hash = first
        .labels()
        .get("pod-template-hash")
        .cloned()
        .expect("hash label");
    assert_eq!(first.name_any(), format!("app-{hash}"));
    assert_eq!(
        annotation(first, "deployment.kubernetes.io/desired-replicas").as_deref(),
        Some("4")
    );
    assert_eq!(
        annotation(first, "deployment.kubernetes.io/max-replicas").as_deref(),
        Some("5")
    );

    // A new image: a second ReplicaSet takes over.
    deployments
        .patch("app", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}}})))
        .await
        .expect("new image");
    until("the second rollout completes", || async {
        rolled_out(&deployments.get("app").await.expect("get"), 4)
    })
    .await;
    let all = replica_sets
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert_eq!(all.len(), 2);
    let old = all
        .iter()
        .find(|rs| rs.name_any() == first.name_any())
        .expect("old kept");
    assert_eq!(
        old.spec.as_ref().and_then(|s| s.replicas),
        Some(0),
        "old scaled to zero"
    );
    let d = deployments.get("app").await.expect("get");
    assert_eq!(
        annotation(&d, "deployment.kubernetes.io/revision").as_deref(),
        Some("2")
    );

    // Back to the first template, as `kubectl rollout undo` writes it: the
    // first ReplicaSet returns as revision 3.
    deployments
        .patch("app", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}}})))
        .await
        .expect("roll back");
    until("the first ReplicaSet is back at revision 3", || async {
        let rs = replica_sets.get(&first.name_any()).await.expect("get");
        let d = deployments.get("app").await.expect("get");
        annotation(&rs, "deployment.kubernetes.io/revision").as_deref() == Some("3")
            && annotation(&rs, "deployment.kubernetes.io/revision-history").as_deref() == Some("1")
            && rolled_out(&d, 4)
    })
    .await;
    assert_eq!(
        replica_sets
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        2,
        "no third ReplicaSet"
    );

    // Scale, then pause: a paused Deployment still scales, but rolls nothing out.
    deployments
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 6}})),
        )
        .await
        .expect("scale");
    until("six replicas", || async {
        rolled_out(&deployments.get("app").await.expect("get"), 6)
    })
    .await;
    deployments
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .expect("pause");
    until("Progressing says paused", || async {
        progressing_reason(&deployments.get("app").await.expect("get")).as_deref()
            == Some("DeploymentPaused")
    })
    .await;
    let changed = deployments
        .patch("app", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:3"}]}}}})))
        .await
        .expect("change while paused");
    // The controller has synced the new template once its status says it
    // observed this generation; a rollout would have made its ReplicaSet
    // before that status was written.
    until("the paused change observed", || async {
        let d = deployments.get("app").await.expect("get");
        d.status.and_then(|s| s.observed_generation) >= changed.metadata.generation
    })
    .await;
    assert_eq!(
        replica_sets
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        2,
        "nothing rolled out while paused"
    );
    deployments
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": false}})),
        )
        .await
        .expect("resume");
    until("the change rolls out once resumed", || async {
        let d = deployments.get("app").await.expect("get");
        rolled_out(&d, 6)
            && annotation(&d, "deployment.kubernetes.io/revision").as_deref() == Some("4")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_replica_set_of_a_deployment_comes_back_and_recreate_replaces_all() {
    let c = cluster_with_nodes().await;
    let deployments: Api<Deployment> = Api::namespaced(c.admin.clone(), "default");
    let replica_sets: Api<ReplicaSet> = Api::namespaced(c.admin.clone(), "default");
    let mut d = deployment("heal", 2, "busybox:1");
    d.spec.as_mut().expect("spec").strategy =
        Some(serde_json::from_value(json!({"type": "Recreate"})).expect("strategy"));
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("create");
    until("rolled out", || async {
        rolled_out(&deployments.get("heal").await.expect("get"), 2)
    })
    .await;
    let rs = replica_sets
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .remove(0);
    replica_sets
        .delete(&rs.name_any(), &DeleteParams::default())
        .await
        .expect("delete");
    until("a new ReplicaSet with ready pods", || async {
        let all = replica_sets
            .list(&ListParams::default())
            .await
            .expect("list")
            .items;
        all.len() == 1
            && all[0].uid() != rs.uid()
            && rolled_out(&deployments.get("heal").await.expect("get"), 2)
    })
    .await;
    // Recreate: the new template's pods only once the old ones are gone.
    deployments
        .patch("heal", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}}})))
        .await
        .expect("new image");
    until("recreated", || async {
        rolled_out(&deployments.get("heal").await.expect("get"), 2)
    })
    .await;
    let all = replica_sets
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert_eq!(
        all.iter()
            .filter(|rs| rs.spec.as_ref().and_then(|s| s.replicas) == Some(2))
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_after_a_scale_rolls_out() {
    let c = cluster_with_nodes().await;
    let deployments: Api<Deployment> = Api::namespaced(c.admin.clone(), "default");
    deployments
        .create(&PostParams::default(), &deployment("back", 2, "busybox:1"))
        .await
        .expect("create");
    until("rolled out", || async {
        rolled_out(&deployments.get("back").await.expect("get"), 2)
    })
    .await;
    let image = |tag: &str| {
        Patch::Strategic(
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": format!("busybox:{tag}")}]}}}}),
        )
    };
    deployments
        .patch("back", &PatchParams::default(), &image("2"))
        .await
        .expect("new image");
    until("the new image rolled out", || async {
        rolled_out(&deployments.get("back").await.expect("get"), 2)
    })
    .await;
    deployments
        .patch(
            "back",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("scale");
    until("scaled", || async {
        rolled_out(&deployments.get("back").await.expect("get"), 4)
    })
    .await;
    // The first ReplicaSet, at 0 and annotated for 2 replicas, comes back.
    deployments
        .patch("back", &PatchParams::default(), &image("1"))
        .await
        .expect("roll back");
    until("the rollback rolls out at the new size", || async {
        let d = deployments.get("back").await.expect("get");
        rolled_out(&d, 4)
            && annotation(&d, "deployment.kubernetes.io/revision").as_deref() == Some("3")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disruption_budget_counts_healthy_pods_against_the_deployment() {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let c = cluster_with_nodes().await;
    let deployments: Api<Deployment> = Api::namespaced(c.admin.clone(), "default");
    deployments
        .create(
            &PostParams::default(),
            &deployment("guarded", 4, "busybox:1"),
        )
        .await
        .expect("create");
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(c.admin.clone(), "default");
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "guard"},
        "spec": {"maxUnavailable": "25%", "selector": {"matchLabels": {"app": "guarded"}}}
    }))
    .expect("pdb");
    budgets
        .create(&PostParams::default(), &budget)
        .await
        .expect("create");
    until("the budget allows one disruption of four", || async {
        let s = budgets
            .get("guard")
            .await
            .expect("get")
            .status
            .unwrap_or_default();
        let allowed = s.conditions.iter().flatten().any(|c| {
            c.type_ == "DisruptionAllowed" && c.status == "True" && c.reason == "SufficientPods"
        });
        s.expected_pods == 4
            && s.current_healthy == 4
            && s.desired_healthy == 3
            && s.disruptions_allowed == 1
            && allowed
    })
    .await;
}
