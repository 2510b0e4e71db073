//! The pure decisions of the Job controller: what a finished pod counts as
//! under a `podFailurePolicy`, which indexes an Indexed Job still needs,
//! how long to wait after failures, and how `completedIndexes` is written.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, PodFailurePolicyRule};
use k8s_openapi::api::core::v1::Pod;

/// The annotation (and label) carrying an Indexed Job pod's index.
pub const INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// What a failed pod does to its Job under the pod failure policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Counts towards backoffLimit (no rule matched, or `Count`).
    Count,
    /// Not counted (`Ignore`: e.g. a disruption).
    Ignore,
    /// The whole Job fails at once, with this message (`FailJob`).
    FailJob(String),
    /// Its index fails at once (`FailIndex`, with backoffLimitPerIndex).
    FailIndex,
}

/// The verdict of the first rule of `job`'s podFailurePolicy matching
/// the failed `pod` (upstream's `matchPodFailurePolicy`).
pub fn judge(job: &Job, pod: &Pod) -> Verdict {
    let Some(policy) = job
        .spec
        .as_ref()
        .and_then(|s| s.pod_failure_policy.as_ref())
    else {
        return Verdict::Count;
    };
    for (index, rule) in policy.rules.iter().enumerate() {
        let Some(why) = rule_matches(rule, pod) else {
            continue;
        };
        return match rule.action.as_str() {
            "Ignore" => Verdict::Ignore,
            "FailJob" => Verdict::FailJob(format!("{why} matching FailJob rule at index {index}")),
            "FailIndex" => Verdict::FailIndex,
            _ => Verdict::Count,
        };
    }
    Verdict::Count
}

/// Why `rule` matches `pod` (upstream's message start), if it does.
fn rule_matches(rule: &PodFailurePolicyRule, pod: &Pod) -> Option<String> {
    let pod_name = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    );
    if let Some(codes) = &rule.on_exit_codes {
        let status = pod.status.as_ref()?;
        let containers = status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten());
        for container in containers {
            if codes
                .container_name
                .as_ref()
                .is_some_and(|n| *n != container.name)
            {
                continue;
            }
            let Some(code) = container
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map(|t| t.exit_code)
            else {
                continue;
            };
            // Exit code 0 never matches (upstream: only failed containers).
            if code == 0 {
                continue;
            }
            let listed = codes.values.contains(&code);
            let matched = match codes.operator.as_str() {
                "In" => listed,
                "NotIn" => !listed,
                _ => false,
            };
            if matched {
                return Some(format!(
                    "Container {} for pod {pod_name} failed with exit code {code}",
                    container.name
                ));
            }
        }
        return None;
    }
    for pattern in rule.on_pod_conditions.iter().flatten() {
        // The API server defaults it to True.
        let wanted_status = match pattern.status.as_str() {
            "" => "True",
            given => given,
        };
        let found = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == pattern.type_ && c.status == wanted_status);
        if found {
            return Some(format!(
                "Pod {pod_name} has condition {} matching",
                pattern.type_
            ));
        }
    }
    None
}

/// The index of an Indexed Job's pod.
pub fn index_of(pod: &Pod) -> Option<i32> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INDEX))
        .or_else(|| pod.metadata.labels.as_ref().and_then(|l| l.get(INDEX)))
        .and_then(|v| v.parse().ok())
}

/// Parses `completedIndexes` ("1,3-5,7").
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

/// How long to wait before creating pods again after `failures`
/// consecutive failures (upstream's pod backoff: 10 s doubling, at most
/// 6 minutes).
pub fn backoff(failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let base = Duration::from_secs(10);
    let max = Duration::from_secs(360);
    base.checked_mul(1u32 << (failures - 1).min(16))
        .map_or(max, |d| d.min(max))
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
    }

    #[test]
    fn backoff_doubles_up_to_six_minutes() {
        assert_eq!(backoff(0), Duration::ZERO);
        assert_eq!(backoff(1), Duration::from_secs(10));
        assert_eq!(backoff(3), Duration::from_secs(40));
        assert_eq!(backoff(10), Duration::from_secs(360));
        assert_eq!(backoff(60), Duration::from_secs(360));
    }

    fn failed_pod(code: i32) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"phase": "Failed",
                "conditions": [{"type": "DisruptionTarget", "status": "True"}],
                "containerStatuses": [{"name": "main", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                    "state": {"terminated": {"exitCode": code}}}]}
        }))
        .expect("pod")
    }

    fn job(rules: serde_json::Value) -> Job {
        serde_json::from_value(
            json!({"spec": {"template": {}, "podFailurePolicy": {"rules": rules}}}),
        )
        .expect("job")
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let j = job(json!([
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        ]));
        assert_eq!(
            judge(&j, &failed_pod(42)),
            Verdict::FailJob(
                "Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 0"
                    .into()
            )
        );
        assert_eq!(judge(&j, &failed_pod(1)), Verdict::Ignore);
        let not_in =
            job(json!([{"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}}]));
        assert_eq!(judge(&not_in, &failed_pod(2)), Verdict::Count);
        assert_eq!(judge(&Job::default(), &failed_pod(2)), Verdict::Count);
    }
}
