//! Whether a Job is over, and why (upstream's chain of checks in
//! `syncJob`): an ending already announced stands; then a `FailJob` rule,
//! `backoffLimit`, `activeDeadlineSeconds`, failed indexes; then a
//! `successPolicy` and, last, the completions.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::{JobSpec, JobStatus};

use super::condition;
use super::indexes;

/// How a Job ends: the reason and message of its interim condition
/// (`FailureTarget`, `SuccessCriteriaMet`) and then of its final one
/// (`Failed`, `Complete`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Fail { reason: String, message: String },
    Succeed { reason: String, message: String },
}

impl Ending {
    fn fail(reason: &str, message: &str) -> Self {
        Ending::Fail {
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn succeed(reason: &str, message: &str) -> Self {
        Ending::Succeed {
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// What one pass knows of a Job, once its finished pods are counted.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub spec: &'a JobSpec,
    pub status: &'a JobStatus,
    /// The message of a `FailJob` rule a newly failed pod matched.
    pub fail_job: Option<&'a str>,
    pub deadline_passed: bool,
    /// Indexed: the indexes that succeeded, and those that failed (with
    /// `backoffLimitPerIndex`).
    pub completed: &'a BTreeSet<i32>,
    pub failed_indexes: &'a BTreeSet<i32>,
    /// Pods still running.
    pub active: usize,
}

/// How the Job ends, if it does.
pub fn decide(f: &Facts<'_>) -> Option<Ending> {
    let announced = |type_: &str| {
        condition(f.status, type_).map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
    };
    if let Some((reason, message)) = announced("SuccessCriteriaMet") {
        return Some(Ending::Succeed { reason, message });
    }
    if let Some((reason, message)) = announced("FailureTarget") {
        return Some(Ending::Fail { reason, message });
    }
    if let Some(message) = f.fail_job {
        return Some(Ending::fail("PodFailurePolicy", message));
    }
    let spec = f.spec;
    if f.status.failed.unwrap_or(0) > spec.backoff_limit.unwrap_or(6) {
        return Some(Ending::fail(
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        ));
    }
    if f.deadline_passed {
        return Some(Ending::fail(
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
        ));
    }
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let completions = spec.completions.unwrap_or(0);
    if indexed && spec.backoff_limit_per_index.is_some() {
        let failed = f.failed_indexes.len();
        if spec
            .max_failed_indexes
            .is_some_and(|max| failed as i64 > i64::from(max))
        {
            return Some(Ending::fail(
                "MaxFailedIndexesExceeded",
                "Job has exceeded the specified maximal number of failed indexes",
            ));
        }
        if failed > 0 && (failed + f.completed.len()) as i64 >= i64::from(completions) {
            return Some(Ending::fail("FailedIndexes", "Job has failed indexes"));
        }
    }
    if indexed
        && let Some(policy) = &spec.success_policy
        && let Some(message) = indexes::success_policy_met(policy, completions, f.completed)
    {
        return Some(Ending::succeed("SuccessPolicy", &message));
    }
    let succeeded = f.status.succeeded.unwrap_or(0);
    let done = match spec.completions {
        Some(n) if indexed => f.completed.len() as i64 >= i64::from(n),
        Some(n) => succeeded >= n,
        None => succeeded > 0 && f.active == 0,
    };
    done.then(|| {
        Ending::succeed(
            "CompletionsReached",
            "Reached expected number of succeeded pods",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(extra: serde_json::Value) -> JobSpec {
        let mut spec = json!({"template": {}, "completionMode": "Indexed", "completions": 4,
            "backoffLimit": 2147483647, "backoffLimitPerIndex": 1});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        serde_json::from_value(spec).expect("spec")
    }

    fn decide_with(spec: &JobSpec, completed: &[i32], failed: &[i32]) -> Option<Ending> {
        let status = JobStatus {
            failed: Some(failed.len() as i32 * 2),
            succeeded: Some(completed.len() as i32),
            ..Default::default()
        };
        decide(&Facts {
            spec,
            status: &status,
            fail_job: None,
            deadline_passed: false,
            completed: &completed.iter().copied().collect(),
            failed_indexes: &failed.iter().copied().collect(),
            active: 0,
        })
    }

    #[test]
    fn failed_indexes_end_the_job_once_the_rest_is_done_or_too_many_failed() {
        let s = spec(json!({}));
        assert_eq!(decide_with(&s, &[0, 1], &[2]), None, "index 3 still runs");
        assert_eq!(
            decide_with(&s, &[0, 1, 3], &[2]),
            Some(Ending::fail("FailedIndexes", "Job has failed indexes"))
        );
        let capped = spec(json!({"maxFailedIndexes": 1}));
        assert_eq!(decide_with(&capped, &[], &[2]), None);
        assert_eq!(
            decide_with(&capped, &[], &[1, 2]),
            Some(Ending::fail(
                "MaxFailedIndexesExceeded",
                "Job has exceeded the specified maximal number of failed indexes"
            ))
        );
    }

    #[test]
    fn a_success_policy_ends_the_job_before_its_completions() {
        let s = spec(json!({"successPolicy": {"rules": [{"succeededIndexes": "0"}]}}));
        assert_eq!(decide_with(&s, &[1, 2], &[]), None);
        assert_eq!(
            decide_with(&s, &[0], &[]),
            Some(Ending::succeed("SuccessPolicy", "Matched rules at index 0"))
        );
        // Failing indexes decide first.
        assert_eq!(
            decide_with(&s, &[0, 1, 2], &[3]).map(|e| matches!(e, Ending::Fail { .. })),
            Some(true)
        );
        let plain = spec(json!({"backoffLimitPerIndex": null}));
        assert_eq!(
            decide_with(&plain, &[0, 1, 2, 3], &[]),
            Some(Ending::succeed(
                "CompletionsReached",
                "Reached expected number of succeeded pods"
            ))
        );
    }
}
