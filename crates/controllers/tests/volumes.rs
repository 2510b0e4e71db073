//! The PersistentVolume binder against a real API server: claims bound to
//! the best volume, pre-binding both ways, selectors and classes,
//! WaitForFirstConsumer claims left alone, volumes released and reclaimed
//! when their claims go, claims Lost when their volumes go, and a
//! StatefulSet's claims bound.

mod support;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use support::{cluster, cluster_with_nodes, exists, until};

fn volumes(client: &Client) -> Api<PersistentVolume> {
    Api::all(client.clone())
}

fn claims(client: &Client) -> Api<PersistentVolumeClaim> {
    Api::namespaced(client.clone(), "default")
}

/// Creates volume `name` of `size` (ReadWriteOnce, hostPath under /tmp,
/// policy Retain) with `extra` merged into it.
async fn volume(client: &Client, name: &str, size: &str, extra: Value) -> PersistentVolume {
    let mut pv = json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": size},
                 "persistentVolumeReclaimPolicy": "Retain",
                 "hostPath": {"path": format!("/tmp/rudder-test/{name}")}},
    });
    merge(&mut pv, extra);
    let pv = serde_json::from_value(pv).expect("volume");
    volumes(client)
        .create(&PostParams::default(), &pv)
        .await
        .expect("create a volume")
}

/// Creates claim `name` requesting `size` (ReadWriteOnce) with `extra`.
async fn claim(client: &Client, name: &str, size: &str, extra: Value) -> PersistentVolumeClaim {
    let mut pvc = json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    });
    merge(&mut pvc, extra);
    let pvc = serde_json::from_value(pvc).expect("claim");
    claims(client)
        .create(&PostParams::default(), &pvc)
        .await
        .expect("create a claim")
}

fn merge(target: &mut Value, patch: Value) {
    match patch {
        Value::Object(fields) => {
            for (k, v) in fields {
                merge(&mut target[&k], v);
            }
        }
        other => *target = other,
    }
}

fn volume_phase(pv: &PersistentVolume) -> String {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

fn claim_phase(pvc: &PersistentVolumeClaim) -> String {
    pvc.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

async fn wait_volume_phase(client: &Client, name: &str, phase: &str) -> PersistentVolume {
    let api = volumes(client);
    until(&format!("volume {name} {phase}"), || async {
        api.get_opt(name)
            .await
            .expect("get")
            .is_some_and(|v| volume_phase(&v) == phase)
    })
    .await;
    api.get(name).await.expect("get")
}

async fn wait_claim_phase(client: &Client, name: &str, phase: &str) -> PersistentVolumeClaim {
    let api = claims(client);
    until(&format!("claim {name} {phase}"), || async {
        api.get_opt(name)
            .await
            .expect("get")
            .is_some_and(|c| claim_phase(&c) == phase)
    })
    .await;
    api.get(name).await.expect("get")
}

/// The notes of the events about claim or volume `name` with `reason`.
async fn events(client: &Client, name: &str, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::all(client.clone());
    api.list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect()
}

async fn wait_event(client: &Client, name: &str, reason: &str) -> String {
    until(&format!("a {reason} event about {name}"), || async {
        !events(client, name, reason).await.is_empty()
    })
    .await;
    events(client, name, reason).await.remove(0)
}

async fn storage_class(client: &Client, name: &str, extra: Value) {
    let mut class = json!({"metadata": {"name": name}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "Immediate", "reclaimPolicy": "Delete"});
    merge(&mut class, extra);
    let class: StorageClass = serde_json::from_value(class).expect("class");
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("create a class");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_gets_the_smallest_volume_that_fits_and_both_are_bound() {
    let c = cluster().await;
    volume(&c.admin, "small", "1Gi", json!({})).await;
    volume(&c.admin, "fits", "5Gi", json!({})).await;
    volume(&c.admin, "big", "100Gi", json!({})).await;
    volume(
        &c.admin,
        "wide",
        "3Gi",
        json!({"spec": {"accessModes": ["ReadWriteMany"]}}),
    )
    .await;
    wait_volume_phase(&c.admin, "small", "Available").await;
    let created = claim(&c.admin, "data", "2Gi", json!({})).await;

    let bound = wait_claim_phase(&c.admin, "data", "Bound").await;
    assert_eq!(
        bound.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        Some("fits")
    );
    let annotations = bound.annotations();
    assert_eq!(
        annotations
            .get("pv.kubernetes.io/bind-completed")
            .map(String::as_str),
        Some("yes")
    );
    assert_eq!(
        annotations
            .get("pv.kubernetes.io/bound-by-controller")
            .map(String::as_str),
        Some("yes")
    );
    let status = bound.status.expect("status");
    assert_eq!(status.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
    assert_eq!(
        status.capacity.and_then(|c| c.get("storage").cloned()),
        Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
            "5Gi".into()
        ))
    );

    let pv = wait_volume_phase(&c.admin, "fits", "Bound").await;
    let reference = pv
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.clone())
        .expect("claimRef");
    assert_eq!(reference.kind.as_deref(), Some("PersistentVolumeClaim"));
    assert_eq!(reference.namespace.as_deref(), Some("default"));
    assert_eq!(reference.name.as_deref(), Some("data"));
    assert_eq!(reference.uid, created.metadata.uid);
    assert!(reference.resource_version.is_some());
    assert_eq!(
        pv.annotations()
            .get("pv.kubernetes.io/bound-by-controller")
            .map(String::as_str),
        Some("yes")
    );
    for other in ["small", "big", "wide"] {
        wait_volume_phase(&c.admin, other, "Available").await;
    }

    // Nothing left that fits: Pending, with upstream's event.
    claim(&c.admin, "more", "500Gi", json!({})).await;
    wait_claim_phase(&c.admin, "more", "Pending").await;
    assert_eq!(
        wait_event(&c.admin, "more", "FailedBinding").await,
        "no persistent volumes available for this claim and no storage class is set"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_bound_volumes_and_claims_bind_only_to_each_other() {
    let c = cluster().await;
    // A volume reserved for "mine": not given to "first", which asks first.
    volume(
        &c.admin,
        "reserved",
        "1Gi",
        json!({"spec": {"claimRef": {"namespace": "default", "name": "mine"}}}),
    )
    .await;
    wait_volume_phase(&c.admin, "reserved", "Available").await;
    claim(&c.admin, "first", "1Gi", json!({})).await;
    wait_claim_phase(&c.admin, "first", "Pending").await;
    claim(&c.admin, "mine", "1Gi", json!({})).await;
    let mine = wait_claim_phase(&c.admin, "mine", "Bound").await;
    assert_eq!(
        mine.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        Some("reserved")
    );
    let pv = wait_volume_phase(&c.admin, "reserved", "Bound").await;
    // The user bound the volume: no bound-by-controller on it, but on the
    // claim (the controller chose the volume for it).
    assert!(
        !pv.annotations()
            .contains_key("pv.kubernetes.io/bound-by-controller")
    );
    assert!(
        mine.annotations()
            .contains_key("pv.kubernetes.io/bound-by-controller")
    );
    assert_eq!(
        claim_phase(&claims(&c.admin).get("first").await.expect("get")),
        "Pending"
    );

    // A claim naming its volume gets it, though a smaller one would fit.
    volume(&c.admin, "tiny", "1Gi", json!({})).await;
    volume(&c.admin, "named", "8Gi", json!({})).await;
    wait_volume_phase(&c.admin, "named", "Available").await;
    claim(
        &c.admin,
        "wants-named",
        "1Gi",
        json!({"spec": {"volumeName": "named"}}),
    )
    .await;
    let named = wait_claim_phase(&c.admin, "wants-named", "Bound").await;
    assert!(
        !named
            .annotations()
            .contains_key("pv.kubernetes.io/bound-by-controller")
    );
    wait_volume_phase(&c.admin, "named", "Bound").await;

    // A named volume that does not fit: Pending, VolumeMismatch.
    // (A class of its own: "first" cannot take it meanwhile.)
    volume(
        &c.admin,
        "narrow",
        "1Gi",
        json!({"spec": {"storageClassName": "narrow"}}),
    )
    .await;
    wait_volume_phase(&c.admin, "narrow", "Available").await;
    claim(
        &c.admin,
        "too-big",
        "2Gi",
        json!({"spec": {"volumeName": "narrow"}}),
    )
    .await;
    assert_eq!(
        wait_event(&c.admin, "too-big", "VolumeMismatch").await,
        "Cannot bind to requested volume \"narrow\": requested PV is too small"
    );
    assert_eq!(
        claim_phase(&claims(&c.admin).get("too-big").await.expect("get")),
        "Pending"
    );
    // "first" was eventually given the free 1Gi volume.
    wait_claim_phase(&c.admin, "first", "Bound").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_and_classes_choose_among_volumes() {
    let c = cluster().await;
    storage_class(&c.admin, "fast", json!({})).await;
    volume(
        &c.admin,
        "web",
        "1Gi",
        json!({"metadata": {"labels": {"tier": "web"}}}),
    )
    .await;
    volume(
        &c.admin,
        "db",
        "4Gi",
        json!({"metadata": {"labels": {"tier": "db"}}}),
    )
    .await;
    volume(
        &c.admin,
        "fast-one",
        "1Gi",
        json!({"spec": {"storageClassName": "fast"}}),
    )
    .await;
    wait_volume_phase(&c.admin, "db", "Available").await;

    claim(
        &c.admin,
        "selected",
        "1Gi",
        json!({"spec": {"selector": {"matchLabels": {"tier": "db"}}}}),
    )
    .await;
    let selected = wait_claim_phase(&c.admin, "selected", "Bound").await;
    assert_eq!(
        selected
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref()),
        Some("db")
    );

    claim(
        &c.admin,
        "fast-claim",
        "1Gi",
        json!({"spec": {"storageClassName": "fast"}}),
    )
    .await;
    let fast = wait_claim_phase(&c.admin, "fast-claim", "Bound").await;
    assert_eq!(
        fast.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        Some("fast-one")
    );

    // storageClassName "" matches only volumes without a class.
    claim(
        &c.admin,
        "no-class",
        "1Gi",
        json!({"spec": {"storageClassName": ""}}),
    )
    .await;
    let plain = wait_claim_phase(&c.admin, "no-class", "Bound").await;
    assert_eq!(
        plain.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        Some("web")
    );

    // A class with no volume left and an in-tree provisioner rudder lacks.
    claim(
        &c.admin,
        "fast-two",
        "1Gi",
        json!({"spec": {"storageClassName": "fast"}}),
    )
    .await;
    assert_eq!(
        wait_event(&c.admin, "fast-two", "ProvisioningFailed").await,
        "no volume plugin matched name: kubernetes.io/no-provisioner"
    );

    // An external provisioner is asked for a volume.
    storage_class(&c.admin, "csi", json!({"provisioner": "csi.example.com"})).await;
    claim(
        &c.admin,
        "external",
        "1Gi",
        json!({"spec": {"storageClassName": "csi"}}),
    )
    .await;
    assert_eq!(
        wait_event(&c.admin, "external", "ExternalProvisioning").await,
        "Waiting for a volume to be created either by the external provisioner 'csi.example.com' \
         or manually by the system administrator. If volume creation is delayed, please verify \
         that the provisioner is running and correctly registered."
    );
    let external = claims(&c.admin).get("external").await.expect("get");
    for annotation in [
        "volume.kubernetes.io/storage-provisioner",
        "volume.beta.kubernetes.io/storage-provisioner",
    ] {
        assert_eq!(
            external.annotations().get(annotation).map(String::as_str),
            Some("csi.example.com")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_first_consumer_claim_is_left_pending() {
    let c = cluster().await;
    storage_class(
        &c.admin,
        "local",
        json!({"volumeBindingMode": "WaitForFirstConsumer"}),
    )
    .await;
    volume(
        &c.admin,
        "local-1",
        "1Gi",
        json!({"spec": {"storageClassName": "local"}}),
    )
    .await;
    wait_volume_phase(&c.admin, "local-1", "Available").await;
    claim(
        &c.admin,
        "later",
        "1Gi",
        json!({"spec": {"storageClassName": "local"}}),
    )
    .await;
    assert_eq!(
        wait_event(&c.admin, "later", "WaitForFirstConsumer").await,
        "waiting for first consumer to be created before binding"
    );
    let later = wait_claim_phase(&c.admin, "later", "Pending").await;
    assert!(
        later
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_ref())
            .is_none()
    );
    assert_eq!(
        volume_phase(&volumes(&c.admin).get("local-1").await.expect("get")),
        "Available"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_claims_volume_is_retained_or_deleted_as_its_policy_says() {
    let c = cluster().await;
    volume(&c.admin, "kept", "1Gi", json!({})).await;
    volume(
        &c.admin,
        "scratch",
        "2Gi",
        json!({"spec": {"persistentVolumeReclaimPolicy": "Delete"}}),
    )
    .await;
    volume(
        &c.admin,
        "local",
        "3Gi",
        json!({"spec": {"persistentVolumeReclaimPolicy": "Delete", "hostPath": null,
            "local": {"path": "/mnt/disk"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}}}),
    )
    .await;
    volume(
        &c.admin,
        "recycled",
        "4Gi",
        json!({"spec": {"persistentVolumeReclaimPolicy": "Recycle"}}),
    )
    .await;
    wait_volume_phase(&c.admin, "recycled", "Available").await;
    for (name, size) in [("a", "1Gi"), ("b", "2Gi"), ("c", "3Gi"), ("d", "4Gi")] {
        claim(&c.admin, name, size, json!({})).await;
    }
    for name in ["a", "b", "c", "d"] {
        wait_claim_phase(&c.admin, name, "Bound").await;
    }
    for name in ["a", "b", "c", "d"] {
        claims(&c.admin)
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete");
    }

    // Retain: Released, still pointing at the claim that was.
    let kept = wait_volume_phase(&c.admin, "kept", "Released").await;
    assert_eq!(
        kept.spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|r| r.name.as_deref()),
        Some("a")
    );
    // Delete on a hostPath under /tmp: the object goes.
    let api = volumes(&c.admin);
    until("the Delete volume gone", || async {
        !exists(&api, "scratch").await
    })
    .await;
    // Delete with no deleter (local): Failed, as upstream.
    wait_volume_phase(&c.admin, "local", "Failed").await;
    assert_eq!(
        wait_event(&c.admin, "local", "VolumeFailedDelete").await,
        "error getting deleter volume plugin for volume \"local\": no volume plugin matched"
    );
    // Recycle: no recycler.
    wait_volume_phase(&c.admin, "recycled", "Failed").await;
    assert_eq!(
        wait_event(&c.admin, "recycled", "VolumeFailedRecycle").await,
        "No recycler plugin found for the volume!"
    );

    // A new claim of the old name does not get the released volume.
    claim(&c.admin, "a", "1Gi", json!({})).await;
    wait_claim_phase(&c.admin, "a", "Pending").await;
    assert_eq!(
        volume_phase(&api.get("kept").await.expect("get")),
        "Released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_volume_vanished_is_lost() {
    let c = cluster().await;
    volume(&c.admin, "fragile", "1Gi", json!({})).await;
    wait_volume_phase(&c.admin, "fragile", "Available").await;
    claim(&c.admin, "data", "1Gi", json!({})).await;
    wait_claim_phase(&c.admin, "data", "Bound").await;
    volumes(&c.admin)
        .delete("fragile", &DeleteParams::default())
        .await
        .expect("delete");
    let lost = wait_claim_phase(&c.admin, "data", "Lost").await;
    assert_eq!(
        lost.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        Some("fragile")
    );
    assert_eq!(
        wait_event(&c.admin, "data", "ClaimLost").await,
        "Bound claim has lost its PersistentVolume. Data on the volume is lost!"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulsets_claims_are_bound_to_matching_volumes() {
    let c = cluster_with_nodes().await;
    for i in 0..3 {
        volume(&c.admin, &format!("disk-{i}"), "1Gi", json!({})).await;
    }
    let api: Api<StatefulSet> = Api::namespaced(c.admin.clone(), "default");
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
            "podManagementPolicy": "Parallel",
            "template": {"metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}
    }))
    .expect("set");
    api.create(&PostParams::default(), &set)
        .await
        .expect("create");
    let mut bound = Vec::new();
    for i in 0..3 {
        let claim = wait_claim_phase(&c.admin, &format!("data-db-{i}"), "Bound").await;
        bound.push(claim.spec.and_then(|s| s.volume_name).expect("volume name"));
    }
    bound.sort();
    assert_eq!(bound, ["disk-0", "disk-1", "disk-2"]);
    for i in 0..3 {
        wait_volume_phase(&c.admin, &format!("disk-{i}"), "Bound").await;
    }
}
