//! The pure decisions of the Job controller about failures: what a failed
//! pod counts as under a `podFailurePolicy` (upstream's
//! `pod_failure_policy.go`) and how long to wait after failures (its
//! `backoff_utils.go`). Indexed Jobs' decisions are in `indexes`.

use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, PodFailurePolicyRule};
use k8s_openapi::api::core::v1::Pod;

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
