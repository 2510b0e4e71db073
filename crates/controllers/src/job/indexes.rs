//! The pure decisions of Indexed Jobs (upstream's `indexed_job_utils.go`,
//! `success_policy.go` and the per-index part of `backoff_utils.go`): a
//! pod's index, how index sets are written, when a `successPolicy` is met,
//! when an index has failed under `backoffLimitPerIndex`, which failed pod
//! of an index keeps its finalizer until its replacement exists, and how
//! long an index waits before it is tried again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::batch::v1::{Job, SuccessPolicy};
use k8s_openapi::api::core::v1::Pod;

use super::policy::{self, Verdict};

/// The annotation (and label) carrying an Indexed Job pod's index.
pub const INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// Failures counted against `backoffLimitPerIndex` before this pod, in its
/// index.
pub const FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
/// Failures of its index before this pod that a podFailurePolicy ignored.
pub const IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";

/// The index of an Indexed Job's pod (never negative).
pub fn index_of(pod: &Pod) -> Option<i32> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INDEX))
        .or_else(|| pod.metadata.labels.as_ref().and_then(|l| l.get(INDEX)))
        .and_then(|v| v.parse().ok())
        .filter(|i| *i >= 0)
}

/// Parses an index set ("1,3-5,7"), skipping what does not parse.
pub fn parse_indexes(text: &str) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                    out.extend(a..=b);
                }
            }
            None => {
                if let Ok(i) = part.parse() {
                    out.insert(i);
                }
            }
        }
    }
    out
}

/// The indexes of `text` below `completions` (upstream's
/// `parseIndexesFromString`).
pub fn parse_below(text: &str, completions: i32) -> BTreeSet<i32> {
    let mut out = parse_indexes(text);
    out.retain(|i| (0..completions).contains(i));
    out
}

/// Writes indexes as upstream does: ascending, runs of three or more as
/// ranges, pairs as two entries ("1,3-5,7,8").
pub fn format_indexes(indexes: &BTreeSet<i32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut iter = indexes.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        match end - start {
            0 => parts.push(start.to_string()),
            1 => {
                parts.push(start.to_string());
                parts.push(end.to_string());
            }
            _ => parts.push(format!("{start}-{end}")),
        }
    }
    parts.join(",")
}

/// The message of the first rule of `policy` that the succeeded indexes
/// meet (upstream's `matchSuccessPolicy`): all its `succeededIndexes`, or
/// `succeededCount` of them, or `succeededCount` indexes at all.
pub fn success_policy_met(
    policy: &SuccessPolicy,
    completions: i32,
    succeeded: &BTreeSet<i32>,
) -> Option<String> {
    if succeeded.is_empty() {
        return None;
    }
    policy.rules.iter().enumerate().find_map(|(index, rule)| {
        let met = match (&rule.succeeded_indexes, rule.succeeded_count) {
            (Some(text), count) => {
                let required = parse_below(text, completions);
                // Upstream skips a rule whose indexes do not parse.
                !required.is_empty() && {
                    let done = required.intersection(succeeded).count();
                    done == required.len() || count.is_some_and(|c| done as i64 >= i64::from(c))
                }
            }
            (None, Some(count)) => succeeded.len() as i64 >= i64::from(count),
            (None, None) => false,
        };
        met.then(|| format!("Matched rules at index {index}"))
    })
}

fn annotation_count(pod: &Pod, key: &str) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|n| *n >= 0)
        .unwrap_or(0)
}

/// The failures of its index before `pod`: counted, and ignored by the
/// podFailurePolicy.
pub fn failure_counts(pod: &Pod) -> (i32, i32) {
    (
        annotation_count(pod, FAILURE_COUNT),
        annotation_count(pod, IGNORED_FAILURE_COUNT),
    )
}

/// The counts the pod replacing the failed `replaced` carries (none
/// replaced: a first try).
pub fn next_failure_counts(job: &Job, replaced: Option<&Pod>) -> (i32, i32) {
    let Some(replaced) = replaced else {
        return (0, 0);
    };
    let (counted, ignored) = failure_counts(replaced);
    match policy::judge(job, replaced) {
        Verdict::Ignore => (counted, ignored.saturating_add(1)),
        _ => (counted.saturating_add(1), ignored),
    }
}

/// Whether the failed `pod` fails its index (upstream's `isIndexFailed`):
/// a `FailIndex` rule matched, or a counted failure with
/// `backoffLimitPerIndex` failures before it.
pub fn fails_index(job: &Job, pod: &Pod) -> bool {
    let limit = job
        .spec
        .as_ref()
        .and_then(|s| s.backoff_limit_per_index)
        .unwrap_or(0);
    match policy::judge(job, pod) {
        Verdict::FailIndex => true,
        Verdict::Ignore => false,
        Verdict::Count | Verdict::FailJob(_) => failure_counts(pod).0 >= limit,
    }
}

/// When a pod finished (upstream's `getFinishedTime`): its containers'
/// last `finishedAt` once all ended, else when it stopped being Ready,
/// else its deletion (less the grace period), else its creation.
pub fn finished_at(pod: &Pod) -> Option<SystemTime> {
    let status = pod.status.as_ref();
    let containers: Option<Vec<SystemTime>> = status
        .and_then(|s| s.container_statuses.as_ref())
        .filter(|c| !c.is_empty())
        .and_then(|statuses| {
            statuses
                .iter()
                .map(|c| {
                    let t = c
                        .state
                        .as_ref()?
                        .terminated
                        .as_ref()?
                        .finished_at
                        .as_ref()?;
                    Some(SystemTime::from(t.0))
                })
                .collect()
        });
    if let Some(last) = containers.and_then(|times| times.into_iter().max()) {
        return Some(last);
    }
    let not_ready = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Ready" && c.status == "False")
        .and_then(|c| c.last_transition_time.as_ref());
    if let Some(t) = not_ready {
        return Some(SystemTime::from(t.0));
    }
    if let Some(t) = &pod.metadata.deletion_timestamp {
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .unwrap_or(0)
            .max(0);
        return Some(SystemTime::from(t.0) - Duration::from_secs(grace as u64));
    }
    pod.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| SystemTime::from(t.0))
}

/// For each index still to run that has no active pod, its last failed
/// pod (the one with the most failures, the latest on a tie): it keeps its
/// finalizer until its replacement exists, which takes its counts from it
/// (upstream's `getPodsWithDelayedDeletionPerIndex`).
pub fn last_failures<'a>(
    failed: impl IntoIterator<Item = &'a Arc<Pod>>,
    settled: impl Fn(i32) -> bool,
) -> BTreeMap<i32, Arc<Pod>> {
    let mut last: BTreeMap<i32, Arc<Pod>> = BTreeMap::new();
    for p in failed {
        let Some(index) = index_of(p).filter(|i| !settled(*i)) else {
            continue;
        };
        let total = |p: &Pod| {
            let (counted, ignored) = failure_counts(p);
            i64::from(counted) + i64::from(ignored)
        };
        let later = match last.get(&index) {
            None => true,
            Some(kept) => total(kept) <= total(p) && finished_at(p) >= finished_at(kept),
        };
        if later {
            last.insert(index, p.clone());
        }
    }
    last
}

/// How long the index of `last_failed` still waits before it is tried
/// again (upstream's `getRemainingTimePerIndex`): the pod backoff for its
/// failures so far, from when it finished.
pub fn backoff_left(last_failed: &Pod, now: SystemTime) -> Duration {
    let (counted, ignored) = failure_counts(last_failed);
    let failures = (i64::from(counted) + i64::from(ignored) + 1).min(64) as u32;
    let since = finished_at(last_failed)
        .and_then(|t| now.duration_since(t).ok())
        .unwrap_or_default();
    policy::backoff(failures).saturating_sub(since)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn indexes_round_trip_in_upstreams_format() {
        let set: BTreeSet<i32> = [1, 3, 4, 5, 7, 8].into_iter().collect();
        assert_eq!(format_indexes(&set), "1,3-5,7,8");
        assert_eq!(parse_indexes("1,3-5,7,8"), set);
        assert_eq!(format_indexes(&BTreeSet::new()), "");
        assert_eq!(parse_below("1,3-5,7,8", 5), [1, 3, 4].into());
    }

    fn success_policy(rules: serde_json::Value) -> SuccessPolicy {
        serde_json::from_value(json!({ "rules": rules })).expect("policy")
    }

    #[test]
    fn a_success_policy_names_the_first_rule_met() {
        let policy = success_policy(json!([
            {"succeededIndexes": "0,2-3"},
            {"succeededIndexes": "4-9", "succeededCount": 2},
            {"succeededCount": 5},
        ]));
        let met = |done: &[i32]| success_policy_met(&policy, 10, &done.iter().copied().collect());
        assert_eq!(met(&[]), None);
        assert_eq!(met(&[0, 2]), None, "3 is still missing");
        assert_eq!(met(&[0, 2, 3]), Some("Matched rules at index 0".into()));
        assert_eq!(met(&[4, 9]), Some("Matched rules at index 1".into()));
        assert_eq!(met(&[0, 1, 3, 4]), None);
        assert_eq!(
            met(&[0, 1, 3, 4, 5]),
            Some("Matched rules at index 1".into())
        );
        assert_eq!(
            met(&[0, 1, 2, 3, 4]),
            Some("Matched rules at index 0".into())
        );
        // Indexes past completions are not required.
        let beyond = success_policy(json!([{"succeededIndexes": "1,20-30"}]));
        assert_eq!(
            success_policy_met(&beyond, 10, &[1].into()),
            Some("Matched rules at index 0".into())
        );
        let nothing = success_policy(json!([{"succeededIndexes": "20-30"}]));
        assert_eq!(success_policy_met(&nothing, 10, &[1].into()), None);
    }

    fn indexed_job(extra: serde_json::Value) -> Job {
        let mut spec = json!({"template": {}, "completionMode": "Indexed", "completions": 4,
            "backoffLimitPerIndex": 1});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        serde_json::from_value(json!({ "spec": spec })).expect("job")
    }

    fn failed(index: i32, counts: (i32, i32), code: i32, finished: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": format!("p{index}-{}", counts.0), "namespace": "ns",
                    "annotations": {INDEX: index.to_string(), FAILURE_COUNT: counts.0.to_string(),
                        IGNORED_FAILURE_COUNT: counts.1.to_string()}},
                "status": {"phase": "Failed", "containerStatuses": [{"name": "main", "ready": false,
                    "restartCount": 0, "image": "", "imageID": "",
                    "state": {"terminated": {"exitCode": code, "finishedAt": finished}}}]}
            }))
            .expect("pod"),
        )
    }

    #[test]
    fn an_index_fails_after_its_backoff_limit_or_a_fail_index_rule() {
        let job = indexed_job(json!({"podFailurePolicy": {"rules": [
            {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [42]}},
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}}]}}));
        let at = "2025-01-01T00:00:00Z";
        assert!(
            !fails_index(&job, &failed(0, (0, 0), 1, at)),
            "one retry left"
        );
        assert!(fails_index(&job, &failed(0, (1, 0), 1, at)));
        assert!(fails_index(&job, &failed(0, (0, 0), 42, at)), "FailIndex");
        assert!(!fails_index(&job, &failed(0, (5, 0), 7, at)), "ignored");
        // The replacement carries the counts on.
        assert_eq!(next_failure_counts(&job, None), (0, 0));
        assert_eq!(
            next_failure_counts(&job, Some(&failed(0, (0, 2), 1, at))),
            (1, 2)
        );
        assert_eq!(
            next_failure_counts(&job, Some(&failed(0, (1, 0), 7, at))),
            (1, 1)
        );
    }

    #[test]
    fn the_last_failure_of_an_index_waits_for_its_replacement() {
        let pods = [
            failed(0, (0, 0), 1, "2025-01-01T00:00:00Z"),
            failed(0, (1, 0), 1, "2025-01-01T00:00:10Z"),
            failed(1, (0, 0), 1, "2025-01-01T00:00:00Z"),
            failed(2, (0, 0), 1, "2025-01-01T00:00:00Z"),
        ];
        let last = last_failures(&pods, |i| i == 2);
        assert_eq!(last.keys().copied().collect::<Vec<_>>(), [0, 1]);
        assert_eq!(failure_counts(&last[&0]), (1, 0));
        // Its backoff: 10 s after one failure, 20 s after two.
        let finished = finished_at(&pods[1]).expect("finished");
        assert_eq!(
            backoff_left(&pods[0], finished_at(&pods[0]).expect("t")),
            Duration::from_secs(10)
        );
        assert_eq!(
            backoff_left(&pods[1], finished + Duration::from_secs(5)),
            Duration::from_secs(15)
        );
        assert_eq!(
            backoff_left(&pods[1], finished + Duration::from_secs(60)),
            Duration::ZERO
        );
    }
}
