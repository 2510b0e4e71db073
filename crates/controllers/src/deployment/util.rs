//! The pure part of the Deployment controller (upstream's
//! `pkg/controller/deployment/util`): template hashes, revisions and their
//! annotations, the surge and unavailability fenceposts, proportional
//! scaling, and the conditions and status a Deployment reports.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The label a ReplicaSet's pods carry, naming its template.
pub const HASH_LABEL: &str = "pod-template-hash";
pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// Annotations of a Deployment never copied to its ReplicaSets.
const NOT_COPIED: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

// Condition types and reasons, as upstream spells them.
pub const PROGRESSING: &str = "Progressing";
pub const AVAILABLE: &str = "Available";
pub const REPLICA_FAILURE: &str = "ReplicaFailure";
pub const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
pub const RS_UPDATED: &str = "ReplicaSetUpdated";
pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
pub const PAUSED: &str = "DeploymentPaused";
pub const RESUMED: &str = "DeploymentResumed";
pub const RS_CREATE_ERROR: &str = "ReplicaSetCreateError";

/// The hash of a pod template (upstream's `ComputeHash`: FNV-1a over the
/// template and the collision count, written in safe characters).
pub fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    let mut write = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u32::from(*b);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    };
    write(&serde_json::to_vec(template).unwrap_or_default());
    if let Some(count) = collision_count {
        write(&(count as u32).to_le_bytes());
    }
    safe_encode(&hash.to_string())
}

/// Upstream's `rand.SafeEncodeString`: no vowels, no look-alikes.
fn safe_encode(text: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    text.bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// Whether two templates are the same but for the hash label.
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    let strip = |t: &PodTemplateSpec| {
        let mut t = t.clone();
        if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
            labels.remove(HASH_LABEL);
        }
        // An empty label map and none are the same template.
        if let Some(meta) = t.metadata.as_mut()
            && meta.labels.as_ref().is_some_and(BTreeMap::is_empty)
        {
            meta.labels = None;
        }
        serde_json::to_value(t).unwrap_or_default()
    };
    strip(a) == strip(b)
}

/// The revision a ReplicaSet carries (0 without one).
pub fn revision(rs: &ReplicaSet) -> i64 {
    rs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn annotation_i32(rs: &ReplicaSet, name: &str) -> Option<i32> {
    rs.metadata.annotations.as_ref()?.get(name)?.parse().ok()
}

pub fn replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn status_of(rs: &ReplicaSet) -> (i32, i32, i32) {
    rs.status
        .as_ref()
        .map(|s| {
            (
                s.replicas,
                s.ready_replicas.unwrap_or(0),
                s.available_replicas.unwrap_or(0),
            )
        })
        .unwrap_or_default()
}

pub fn desired(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn is_rolling(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .is_none_or(|t| t == "RollingUpdate")
}

/// An int-or-percent of `total`, rounded up or down
/// (`GetScaledValueFromIntOrPercent`).
fn scaled(value: Option<&IntOrString>, total: i32, round_up: bool, default: &str) -> i32 {
    match value {
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(s)) => percent(s, total, round_up),
        None => percent(default, total, round_up),
    }
}

fn percent(text: &str, total: i32, round_up: bool) -> i32 {
    let Some(p) = text.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) else {
        return text.parse().unwrap_or(0);
    };
    let product = p * i64::from(total);
    (if round_up {
        (product + 99).div_euclid(100)
    } else {
        product.div_euclid(100)
    }) as i32
}

/// maxSurge and maxUnavailable of a rolling Deployment, resolved
/// (upstream's `ResolveFenceposts`): surge rounds up, unavailability down,
/// and both zero would block, so unavailability becomes 1.
pub fn fenceposts(d: &Deployment) -> (i32, i32) {
    let rolling = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let total = desired(d);
    let surge = scaled(
        rolling.and_then(|r| r.max_surge.as_ref()),
        total,
        true,
        "25%",
    );
    let unavailable = scaled(
        rolling.and_then(|r| r.max_unavailable.as_ref()),
        total,
        false,
        "25%",
    );
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    }
}

pub fn max_surge(d: &Deployment) -> i32 {
    if is_rolling(d) { fenceposts(d).0 } else { 0 }
}

/// Upstream's `MaxUnavailable`: 0 for Recreate or no replicas, never more
/// than the replicas.
pub fn max_unavailable(d: &Deployment) -> i32 {
    if !is_rolling(d) || desired(d) == 0 {
        return 0;
    }
    fenceposts(d).1.min(desired(d))
}

/// Replicas the new ReplicaSet should have now (upstream's
/// `NewRSNewReplicas`).
pub fn new_rs_replicas(d: &Deployment, all: &[&ReplicaSet], new: &ReplicaSet) -> i32 {
    if !is_rolling(d) {
        return desired(d);
    }
    let current = replicas(new);
    if current >= desired(d) {
        return current;
    }
    let (surge, _) = fenceposts(d);
    let pods: i32 = all.iter().map(|rs| replicas(rs)).sum();
    let max_total = desired(d) + surge;
    if pods >= max_total {
        return current;
    }
    let up = max_total - pods;
    current + up.min(desired(d) - current)
}

/// Annotations a ReplicaSet of `d` carries for its size
/// (`SetReplicasAnnotations`); whether they changed.
pub fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    let annotations = rs.metadata.annotations.get_or_insert_default();
    let mut changed = false;
    for (name, value) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let value = value.to_string();
        if annotations.get(name) != Some(&value) {
            annotations.insert(name.to_string(), value);
            changed = true;
        }
    }
    changed
}

/// Copies `d`'s annotations (but upstream's own) onto `rs`, and sets its
/// revision, recording a replaced one in the history
/// (`SetNewReplicaSetAnnotations`); whether anything changed.
pub fn set_new_rs_annotations(d: &Deployment, rs: &mut ReplicaSet, new_revision: i64) -> bool {
    let annotations = rs.metadata.annotations.get_or_insert_default();
    let mut changed = false;
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if NOT_COPIED.contains(&k.as_str()) {
            continue;
        }
        if annotations.get(k) != Some(v) {
            annotations.insert(k.clone(), v.clone());
            changed = true;
        }
    }
    let old: i64 = annotations
        .get(REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    if old < new_revision {
        if old > 0 {
            let history = match annotations.get(REVISION_HISTORY) {
                Some(h) if !h.is_empty() => format!("{h},{old}"),
                _ => old.to_string(),
            };
            annotations.insert(REVISION_HISTORY.into(), history);
        }
        annotations.insert(REVISION.into(), new_revision.to_string());
        changed = true;
    }
    if !annotations.contains_key(DESIRED_REPLICAS) || !annotations.contains_key(MAX_REPLICAS) {
        let (desired, max) = (desired(d), desired(d) + max_surge(d));
        changed |= set_replicas_annotations(rs, desired, max);
    }
    changed
}

/// The share of `to_add` (negative to remove) that `rs` takes in a
/// proportional scale (upstream's `GetProportion`).
pub fn proportion(d: &Deployment, rs: &ReplicaSet, to_add: i32, added: i32) -> i32 {
    if replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = fraction(d, rs);
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

fn fraction(d: &Deployment, rs: &ReplicaSet) -> i32 {
    if desired(d) == 0 {
        return -replicas(rs);
    }
    let total = desired(d) + max_surge(d);
    let from_status = || {
        d.status
            .as_ref()
            .and_then(|s| s.replicas)
            .unwrap_or_default()
    };
    let annotated = annotation_i32(rs, MAX_REPLICAS)
        .filter(|a| *a != 0)
        .unwrap_or_else(from_status);
    if annotated == 0 {
        return 0;
    }
    let size = f64::from(replicas(rs)) * f64::from(total) / f64::from(annotated);
    size.round() as i32 - replicas(rs)
}

pub fn time(at: SystemTime) -> Time {
    Time(
        k8s_openapi::jiff::Timestamp::try_from(at)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

pub fn condition<'a>(status: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
}

pub fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: SystemTime,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(time(now)),
        last_transition_time: Some(time(now)),
    }
}

/// Sets `wanted` unless one of its type with the same status and reason is
/// there; keeps the transition time if only the reason changed
/// (`SetDeploymentCondition`).
pub fn set_condition(status: &mut DeploymentStatus, mut wanted: DeploymentCondition) {
    if let Some(current) = condition(status, &wanted.type_) {
        if current.status == wanted.status && current.reason == wanted.reason {
            return;
        }
        if current.status == wanted.status {
            wanted.last_transition_time = current.last_transition_time.clone();
        }
    }
    remove_condition(status, &wanted.type_);
    status.conditions.get_or_insert_default().push(wanted);
}

pub fn remove_condition(status: &mut DeploymentStatus, type_: &str) {
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| c.type_ != type_);
        if conditions.is_empty() {
            status.conditions = None;
        }
    }
}

/// A progress deadline is set (and not the "never" of `MaxInt32`).
pub fn has_progress_deadline(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .is_some_and(|s| s != i32::MAX)
}

fn deadline(d: &Deployment) -> Duration {
    Duration::from_secs(
        d.spec
            .as_ref()
            .and_then(|s| s.progress_deadline_seconds)
            .unwrap_or(600)
            .max(0) as u64,
    )
}

/// Every replica updated and available, none old, the spec observed
/// (`DeploymentComplete`).
pub fn complete(d: &Deployment, status: &DeploymentStatus) -> bool {
    let n = desired(d);
    status.updated_replicas.unwrap_or(0) == n
        && status.replicas.unwrap_or(0) == n
        && status.available_replicas.unwrap_or(0) == n
        && status.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

/// The new status shows progress over the stored one
/// (`DeploymentProgressing`).
pub fn progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let old_old = old.replicas.unwrap_or(0) - old.updated_replicas.unwrap_or(0);
    let new_old = new.replicas.unwrap_or(0) - new.updated_replicas.unwrap_or(0);
    new.updated_replicas.unwrap_or(0) > old.updated_replicas.unwrap_or(0)
        || new_old < old_old
        || new.ready_replicas.unwrap_or(0) > old.ready_replicas.unwrap_or(0)
        || new.available_replicas.unwrap_or(0) > old.available_replicas.unwrap_or(0)
}

/// The deadline passed since progress was last recorded
/// (`DeploymentTimedOut`).
pub fn timed_out(d: &Deployment, new: &DeploymentStatus, now: SystemTime) -> bool {
    if !has_progress_deadline(d) {
        return false;
    }
    let Some(c) = condition(new, PROGRESSING) else {
        return false;
    };
    match c.reason.as_deref() {
        Some(NEW_RS_AVAILABLE) => false,
        Some(TIMED_OUT) => true,
        _ => {
            let from = c
                .last_update_time
                .as_ref()
                .map(|t| SystemTime::from(t.0))
                .unwrap_or(now);
            from + deadline(d) < now
        }
    }
}

/// When to look at a Deployment again to see whether it timed out
/// (`requeueStuckDeployment`), if it might.
pub fn stuck_check_after(
    d: &Deployment,
    new: &DeploymentStatus,
    now: SystemTime,
) -> Option<Duration> {
    let c = condition(new, PROGRESSING)?;
    if !has_progress_deadline(d)
        || complete(d, new)
        || matches!(c.reason.as_deref(), Some(NEW_RS_AVAILABLE | TIMED_OUT))
    {
        return None;
    }
    let from = c
        .last_update_time
        .as_ref()
        .map(|t| SystemTime::from(t.0))
        .unwrap_or(now);
    Some(
        (from + deadline(d))
            .duration_since(now)
            .unwrap_or(Duration::ZERO)
            .max(Duration::from_secs(1)),
    )
}

/// What the ReplicaSets make of a Deployment's status
/// (`calculateStatus`); conditions carried over, Available set.
pub fn calculate_status(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    now: SystemTime,
) -> DeploymentStatus {
    let available: i32 = all.iter().map(|rs| status_of(rs).2).sum();
    let total: i32 = all.iter().map(|rs| replicas(rs)).sum();
    let previous = d.status.clone().unwrap_or_default();
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(all.iter().map(|rs| status_of(rs).0).sum()),
        updated_replicas: Some(new.map(|rs| status_of(rs).0).unwrap_or(0)),
        ready_replicas: Some(all.iter().map(|rs| status_of(rs).1).sum()),
        available_replicas: Some(available),
        unavailable_replicas: Some((total - available).max(0)),
        collision_count: previous.collision_count,
        conditions: previous.conditions.clone(),
        terminating_replicas: None,
    };
    if available >= desired(d) - max_unavailable(d) {
        set_condition(
            &mut status,
            new_condition(
                AVAILABLE,
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
                now,
            ),
        );
    } else {
        set_condition(
            &mut status,
            new_condition(
                AVAILABLE,
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
                now,
            ),
        );
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{
        DeploymentSpec, DeploymentStrategy, ReplicaSetSpec, RollingUpdateDeployment,
    };

    fn deployment(replicas: i32, surge: IntOrString, unavailable: IntOrString) -> Deployment {
        Deployment {
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(surge),
                        max_unavailable: Some(unavailable),
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn rs(replicas: i32, max_annotation: Option<i32>) -> ReplicaSet {
        let mut rs = ReplicaSet {
            spec: Some(ReplicaSetSpec {
                replicas: Some(replicas),
                ..Default::default()
            }),
            ..Default::default()
        };
        if let Some(max) = max_annotation {
            rs.metadata.annotations = Some([(MAX_REPLICAS.to_string(), max.to_string())].into());
        }
        rs
    }

    #[test]
    fn fenceposts_round_as_upstream() {
        let pct = |s: &str| IntOrString::String(s.into());
        // 25 % of 10: surge rounds up to 3, unavailable down to 2.
        assert_eq!(fenceposts(&deployment(10, pct("25%"), pct("25%"))), (3, 2));
        // Both zero: one may be unavailable.
        assert_eq!(
            fenceposts(&deployment(10, IntOrString::Int(0), pct("0%"))),
            (0, 1)
        );
        assert_eq!(fenceposts(&deployment(1, pct("25%"), pct("25%"))), (1, 0));
        assert_eq!(
            max_unavailable(&deployment(2, IntOrString::Int(0), IntOrString::Int(5))),
            2
        );
    }

    #[test]
    fn the_new_replica_set_grows_within_the_surge() {
        let d = deployment(10, IntOrString::Int(3), IntOrString::Int(2));
        let old = rs(10, None);
        let new = rs(0, None);
        assert_eq!(new_rs_replicas(&d, &[&old, &new], &new), 3);
        let new = rs(3, None);
        assert_eq!(new_rs_replicas(&d, &[&old, &new], &new), 3, "at 13 already");
        let old = rs(5, None);
        assert_eq!(new_rs_replicas(&d, &[&old, &new], &new), 8);
    }

    #[test]
    fn scaling_mid_rollout_is_proportional() {
        // 10 → 20 with 25 % surge while old has 8 and new 5 (of max 13).
        let d = deployment(20, IntOrString::String("25%".into()), IntOrString::Int(0));
        let old = rs(8, Some(13));
        let new = rs(5, Some(13));
        // 20 + 5 = 25 allowed; 13 exist; 12 to add.
        assert_eq!(proportion(&d, &old, 12, 0), 7); // round(8*25/13)=15 → +7
        assert_eq!(proportion(&d, &new, 12, 7), 5); // round(5*25/13)=10 → +5
    }

    #[test]
    fn hashes_are_stable_and_distinguish_templates() {
        let a = PodTemplateSpec::default();
        let mut b = PodTemplateSpec::default();
        b.metadata.get_or_insert_default().labels =
            Some([("x".to_string(), "y".to_string())].into());
        assert_eq!(template_hash(&a, None), template_hash(&a, None));
        assert_ne!(template_hash(&a, None), template_hash(&b, None));
        assert_ne!(template_hash(&a, None), template_hash(&a, Some(1)));
        assert!(
            template_hash(&a, None)
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
        );
        let mut hashed = b.clone();
        hashed
            .metadata
            .get_or_insert_default()
            .labels
            .get_or_insert_default()
            .insert(HASH_LABEL.into(), "abc".into());
        assert!(equal_ignore_hash(&b, &hashed));
        assert!(!equal_ignore_hash(&a, &hashed));
    }

    #[test]
    fn a_rollback_records_the_replaced_revision() {
        let d = Deployment::default();
        let mut rs = rs(1, None);
        rs.metadata.annotations = Some([(REVISION.to_string(), "1".to_string())].into());
        assert!(set_new_rs_annotations(&d, &mut rs, 3));
        let a = rs.metadata.annotations.as_ref().expect("test data");
        assert_eq!(a.get(REVISION).map(String::as_str), Some("3"));
        assert_eq!(a.get(REVISION_HISTORY).map(String::as_str), Some("1"));
        assert!(!set_new_rs_annotations(&d, &mut rs, 3), "nothing new");
    }

    #[test]
    fn conditions_keep_their_transition_time_when_only_the_reason_changes() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let t1 = t0 + Duration::from_secs(50);
        let mut status = DeploymentStatus::default();
        set_condition(
            &mut status,
            new_condition(PROGRESSING, "True", NEW_RS_CREATED, "a".into(), t0),
        );
        set_condition(
            &mut status,
            new_condition(PROGRESSING, "True", NEW_RS_AVAILABLE, "b".into(), t1),
        );
        let c = condition(&status, PROGRESSING).expect("test data");
        assert_eq!(c.last_transition_time, Some(time(t0)));
        assert_eq!(c.last_update_time, Some(time(t1)));
        assert_eq!(status.conditions.as_ref().expect("test data").len(), 1);
    }
}
