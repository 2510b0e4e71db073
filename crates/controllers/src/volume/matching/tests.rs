use std::sync::Arc;

use serde_json::{Value, json};

use super::*;

fn volume(name: &str, extra: Value) -> PersistentVolume {
    let mut pv = json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}},
        "status": {"phase": "Available"},
    });
    merge(&mut pv, extra);
    serde_json::from_value(pv).expect("volume")
}

fn claim(extra: Value) -> PersistentVolumeClaim {
    let mut pvc = json!({
        "metadata": {"name": "data", "namespace": "default", "uid": "c-1", "resourceVersion": "7"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    });
    merge(&mut pvc, extra);
    serde_json::from_value(pvc).expect("claim")
}

/// A JSON merge patch, enough for the tables.
fn merge(target: &mut Value, patch: Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = json!({});
            }
            for (k, v) in fields {
                if v.is_null() {
                    target.as_object_mut().expect("object").remove(&k);
                } else {
                    merge(&mut target[&k], v);
                }
            }
        }
        other => *target = other,
    }
}

type Case = (
    &'static str,
    Value,
    Vec<PersistentVolume>,
    bool,
    Option<&'static str>,
);

#[test]
fn the_best_match_is_the_smallest_fitting_volume_in_the_closest_modes() {
    // (what, the claim, the volumes, WaitForFirstConsumer, the match)
    let cases: Vec<Case> = vec![
        ("nothing", json!({}), vec![], false, None),
        (
            "the smallest big enough",
            json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
            vec![
                volume("small", json!({"spec": {"capacity": {"storage": "1Gi"}}})),
                volume("big", json!({"spec": {"capacity": {"storage": "10Gi"}}})),
                volume("fits", json!({"spec": {"capacity": {"storage": "2048Mi"}}})),
                volume("larger", json!({"spec": {"capacity": {"storage": "3Gi"}}})),
            ],
            false,
            Some("fits"),
        ),
        (
            "too small everywhere",
            json!({"spec": {"resources": {"requests": {"storage": "5Gi"}}}}),
            vec![volume("a", json!({}))],
            false,
            None,
        ),
        (
            "access modes a superset",
            json!({"spec": {"accessModes": ["ReadWriteOnce", "ReadOnlyMany"]}}),
            vec![
                volume("rwo", json!({})),
                volume(
                    "both",
                    json!({"spec": {"accessModes": ["ReadOnlyMany", "ReadWriteOnce"]}}),
                ),
            ],
            false,
            Some("both"),
        ),
        (
            "fewest modes first, even if bigger",
            json!({}),
            vec![
                volume(
                    "many",
                    json!({"spec": {"accessModes": ["ReadWriteOnce", "ReadWriteMany"]}}),
                ),
                volume("exact", json!({"spec": {"capacity": {"storage": "5Gi"}}})),
            ],
            false,
            Some("exact"),
        ),
        (
            "an unknown requested mode matches nothing",
            json!({"spec": {"accessModes": ["ReadWriteSometimes"]}}),
            vec![volume("a", json!({}))],
            false,
            None,
        ),
        (
            "only Available volumes",
            json!({}),
            vec![
                volume("released", json!({"status": {"phase": "Released"}})),
                volume("new", json!({"status": null})),
            ],
            false,
            None,
        ),
        (
            "classes equal; \"\" only matches unset",
            json!({"spec": {"storageClassName": ""}}),
            vec![
                volume("fast", json!({"spec": {"storageClassName": "fast"}})),
                volume("plain", json!({})),
            ],
            false,
            Some("plain"),
        ),
        (
            "a class asks for that class",
            json!({"spec": {"storageClassName": "fast"}}),
            vec![
                volume("plain", json!({})),
                volume(
                    "fast",
                    json!({"spec": {"storageClassName": "fast", "capacity": {"storage": "9Gi"}}}),
                ),
            ],
            false,
            Some("fast"),
        ),
        (
            "the beta annotation wins over the field",
            json!({"metadata": {"annotations": {"volume.beta.kubernetes.io/storage-class": "slow"}},
                   "spec": {"storageClassName": "fast"}}),
            vec![
                volume("fast", json!({"spec": {"storageClassName": "fast"}})),
                volume("slow", json!({"spec": {"storageClassName": "slow"}})),
            ],
            false,
            Some("slow"),
        ),
        (
            "the selector",
            json!({"spec": {"selector": {"matchLabels": {"tier": "db"},
                   "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}}),
            vec![
                volume(
                    "web",
                    json!({"metadata": {"labels": {"tier": "web", "zone": "a"}}}),
                ),
                volume(
                    "db-b",
                    json!({"metadata": {"labels": {"tier": "db", "zone": "b"}}}),
                ),
                volume(
                    "db-a",
                    json!({"metadata": {"labels": {"tier": "db", "zone": "a"}}, "spec": {"capacity": {"storage": "8Gi"}}}),
                ),
            ],
            false,
            Some("db-a"),
        ),
        (
            "volumeMode equal, unset is Filesystem",
            json!({"spec": {"volumeMode": "Block"}}),
            vec![
                volume("fs", json!({})),
                volume("fs2", json!({"spec": {"volumeMode": "Filesystem"}})),
                volume(
                    "block",
                    json!({"spec": {"volumeMode": "Block", "capacity": {"storage": "4Gi"}}}),
                ),
            ],
            false,
            Some("block"),
        ),
        (
            "pre-bound to another claim: never",
            json!({}),
            vec![volume(
                "theirs",
                json!({"spec": {"claimRef": {"namespace": "default", "name": "other"}}}),
            )],
            false,
            None,
        ),
        (
            "pre-bound to this claim: whatever its size, phase or class",
            json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}}),
            vec![
                volume("free", json!({})),
                volume(
                    "mine",
                    json!({"spec": {"claimRef": {"namespace": "default", "name": "data"},
                    "capacity": {"storage": "100Mi"}, "storageClassName": "x"}, "status": {"phase": "Pending"}}),
                ),
            ],
            false,
            Some("mine"),
        ),
        (
            "pre-bound to an earlier claim of that name: never",
            json!({}),
            vec![volume(
                "old",
                json!({"spec": {"claimRef": {"namespace": "default", "name": "data", "uid": "c-0"}}}),
            )],
            false,
            None,
        ),
        (
            "a volume being deleted: never",
            json!({}),
            vec![volume(
                "going",
                json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}}),
            )],
            false,
            None,
        ),
        (
            "WaitForFirstConsumer: not a free volume",
            json!({}),
            vec![volume("free", json!({}))],
            true,
            None,
        ),
        (
            "WaitForFirstConsumer: a pre-bound one",
            json!({}),
            vec![
                volume("free", json!({})),
                volume(
                    "mine",
                    json!({"spec": {"claimRef": {"namespace": "default", "name": "data"}}}),
                ),
            ],
            true,
            Some("mine"),
        ),
        (
            "node affinity is not looked at",
            json!({}),
            vec![volume(
                "local",
                json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}}}),
            )],
            false,
            Some("local"),
        ),
    ];
    for (what, claim_patch, volumes, delay, want) in cases {
        let c = claim(claim_patch);
        let got = best_match(&c, volumes.iter(), delay).map(|v| v.name_any());
        assert_eq!(got.as_deref(), want, "{what}");
    }
}

#[test]
fn a_requested_volume_is_checked_with_upstreams_reasons() {
    let cases = [
        (json!({}), json!({}), None),
        (
            json!({}),
            json!({"spec": {"capacity": {"storage": "1Mi"}}}),
            Some("requested PV is too small"),
        ),
        (
            json!({"spec": {"storageClassName": "a"}}),
            json!({}),
            Some("storageClassName does not match"),
        ),
        (
            json!({"spec": {"volumeMode": "Block"}}),
            json!({}),
            Some("incompatible volumeMode"),
        ),
        (
            json!({"spec": {"accessModes": ["ReadWriteMany"]}}),
            json!({}),
            Some("incompatible accessMode"),
        ),
        (
            json!({}),
            json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}}),
            Some("the volume is marked for deletion \"pv\""),
        ),
    ];
    for (claim_patch, volume_patch, want) in cases {
        let got = unsatisfied(
            &volume("pv", volume_patch.clone()),
            &claim(claim_patch.clone()),
        );
        assert_eq!(got.as_deref(), want, "{claim_patch} {volume_patch}");
    }
}

#[test]
fn binding_writes_what_upstream_writes() {
    let c = claim(json!({}));
    let bound = bind_volume(&volume("pv", json!({})), &c).expect("changed");
    let reference = bound
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.clone())
        .expect("claimRef");
    assert_eq!(
        serde_json::to_value(&reference).expect("json"),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "default",
               "name": "data", "uid": "c-1", "resourceVersion": "7"})
    );
    assert_eq!(
        bound
            .annotations()
            .get(BOUND_BY_CONTROLLER)
            .map(String::as_str),
        Some("yes")
    );
    assert!(bind_volume(&bound, &c).is_none(), "bound already");

    // Pre-bound by the user: the uid is filled in, no bound-by-controller.
    let pre = volume(
        "pv",
        json!({"spec": {"claimRef": {"namespace": "default", "name": "data"}}}),
    );
    let bound = bind_volume(&pre, &c).expect("changed");
    assert!(!bound.annotations().contains_key(BOUND_BY_CONTROLLER));
    assert_eq!(
        claim_ref(&bound).and_then(|r| r.uid.as_deref()),
        Some("c-1")
    );

    let bound_claim = bind_claim(&c, &bound).expect("changed");
    assert_eq!(volume_name(&bound_claim), "pv");
    assert!(bound_claim.annotations().contains_key(BOUND_BY_CONTROLLER));
    assert!(bound_claim.annotations().contains_key(BIND_COMPLETED));
    assert!(bind_claim(&bound_claim, &bound).is_none(), "bound already");

    // A claim that named its volume: bind-completed only.
    let named = claim(json!({"spec": {"volumeName": "pv"}}));
    let bound_claim = bind_claim(&named, &bound).expect("changed");
    assert!(!bound_claim.annotations().contains_key(BOUND_BY_CONTROLLER));
    assert!(bound_claim.annotations().contains_key(BIND_COMPLETED));
}

#[test]
fn a_bound_claims_status_carries_the_volumes_modes_and_capacity() {
    let v = volume(
        "pv",
        json!({"spec": {"accessModes": ["ReadWriteOnce", "ReadOnlyMany"], "capacity": {"storage": "5Gi"}}}),
    );
    let status = claim_status(&claim(json!({})), "Bound", Some(&v))
        .expect("ok")
        .expect("changed");
    assert_eq!(
        serde_json::to_value(&status).expect("json"),
        json!({"phase": "Bound", "accessModes": ["ReadWriteOnce", "ReadOnlyMany"], "capacity": {"storage": "5Gi"}})
    );
    // Already Bound: the capacity is not touched again.
    let bound = claim(
        json!({"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
        "capacity": {"storage": "4Gi"}}}),
    );
    assert!(
        claim_status(&bound, "Bound", Some(&v))
            .expect("ok")
            .is_none()
    );
    // Pending clears both.
    let status = claim_status(&bound, "Pending", None)
        .expect("ok")
        .expect("changed");
    assert_eq!(
        serde_json::to_value(&status).expect("json"),
        json!({"phase": "Pending"})
    );
    // A volume with no capacity cannot be bound.
    let empty = volume("pv", json!({"spec": {"capacity": null}}));
    assert!(claim_status(&claim(json!({})), "Bound", Some(&empty)).is_err());
    // A resized volume: the claim shows the size before the resize.
    let resized = volume(
        "pv",
        json!({"metadata": {"annotations": {"volume.alpha.kubernetes.io/pre-resize-capacity": "1Gi"}}}),
    );
    let status = claim_status(&claim(json!({})), "Bound", Some(&resized))
        .expect("ok")
        .expect("changed");
    assert_eq!(
        status.capacity.and_then(|c| c.get("storage").cloned()),
        Some(Wire("1Gi".into()))
    );
}

#[test]
fn the_default_class_is_the_newest_annotated_one() {
    let class = |name: &str, created: &str, default: Option<&str>| -> Arc<StorageClass> {
        let mut c =
            json!({"metadata": {"name": name, "creationTimestamp": created}, "provisioner": "p"});
        if let Some(v) = default {
            c["metadata"]["annotations"] =
                json!({"storageclass.kubernetes.io/is-default-class": v});
        }
        Arc::new(serde_json::from_value(c).expect("class"))
    };
    let name = |classes: &[Arc<StorageClass>]| default_class(classes).map(|c| c.name_any());
    assert_eq!(name(&[class("a", "2024-01-01T00:00:00Z", None)]), None);
    assert_eq!(
        name(&[class("a", "2024-01-01T00:00:00Z", Some("false"))]),
        None
    );
    assert_eq!(
        name(&[
            class("old", "2024-01-01T00:00:00Z", Some("true")),
            class("new", "2024-02-01T00:00:00Z", Some("true")),
            class("plain", "2024-03-01T00:00:00Z", None),
        ]),
        Some("new".into())
    );
    assert_eq!(
        name(&[
            class("b", "2024-01-01T00:00:00Z", Some("true")),
            class("a", "2024-01-01T00:00:00Z", Some("true")),
        ]),
        Some("a".into())
    );
}
