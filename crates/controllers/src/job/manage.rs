//! Creating and deleting a running Job's pods so that the right number run
//! (upstream's `manageJob`): at most `parallelism`, no more than the
//! completions still needed, each missing index once; new pods wait out
//! the failure backoff — the Job's, or with `backoffLimitPerIndex` each
//! index's own.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::PostParams;
use rudder_runtime::EventType;
use rudder_runtime::controller::Action;
use rudder_runtime::events::reference_to;
use rudder_runtime::informer::key_of;
use rudder_runtime::meta::pod;

use super::pods::{Slot, pod_for};
use super::{Controller, indexes, policy};
use crate::{Error, api_error, failure_message};

/// Pods created in one pass at most (upstream's `MaxPodCreateDeletePerSync`).
const MAX_PER_SYNC: usize = 500;

/// What one pass knows of a running Job.
pub(super) struct Running<'a> {
    pub key: &'a str,
    pub job: &'a Job,
    pub spec: &'a JobSpec,
    pub active: &'a [Arc<Pod>],
    /// Pods being deleted that have not finished.
    pub terminating: &'a [Arc<Pod>],
    pub succeeded: i32,
    pub completed: &'a BTreeSet<i32>,
    pub failed_indexes: &'a BTreeSet<i32>,
    /// With `backoffLimitPerIndex`: the last failed pod of each index to
    /// try again.
    pub last_failures: &'a BTreeMap<i32, Arc<Pod>>,
    pub now: SystemTime,
}

impl Controller {
    pub(super) async fn manage(&self, r: &Running<'_>) -> Result<Action, Error> {
        let spec = r.spec;
        let parallelism = spec.parallelism.unwrap_or(1).max(0) as usize;
        let indexed = spec.completion_mode.as_deref() == Some("Indexed");
        let per_index = indexed && spec.backoff_limit_per_index.is_some();
        let replace_failed_only = super::only_failed_count(r.job);
        // With podReplacementPolicy Failed, terminating pods are not yet replaced.
        let waited: &[Arc<Pod>] = if replace_failed_only {
            r.terminating
        } else {
            &[]
        };
        // Indexes still wanted, lowest first.
        let running: HashSet<i32> = r
            .active
            .iter()
            .filter_map(|p| indexes::index_of(p))
            .collect();
        let missing: Vec<i32> = if indexed {
            let held: HashSet<i32> = waited.iter().filter_map(|p| indexes::index_of(p)).collect();
            (0..spec.completions.unwrap_or(0))
                .filter(|i| {
                    !r.completed.contains(i)
                        && !r.failed_indexes.contains(i)
                        && !running.contains(i)
                        && !held.contains(i)
                })
                .collect()
        } else {
            Vec::new()
        };
        let wanted = match spec.completions {
            Some(_) if indexed => parallelism.min(running.len() + missing.len()),
            Some(n) => parallelism.min((n - r.succeeded).max(0) as usize),
            // A work queue: once one pod succeeded, no new ones start.
            None if r.succeeded > 0 => r.active.len(),
            None => parallelism,
        };
        // Only running pods beyond what is wanted go: pods still
        // terminating hold their place against new ones, but never make a
        // running one surplus (upstream's `manageJob`).
        if r.active.len() > wanted {
            let mut surplus: Vec<Arc<Pod>> = r.active.to_vec();
            // Not ready, then newest, go first.
            surplus.sort_by(|a, b| {
                pod::is_ready(a).cmp(&pod::is_ready(b)).then_with(|| {
                    let t = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
                    t(b).cmp(&t(a))
                })
            });
            surplus.truncate(r.active.len() - wanted);
            self.remove_pods(r.job, &surplus).await?;
            return Ok(Action::Done);
        }
        let occupied = r.active.len() + waited.len();
        if occupied >= wanted || !self.expectations.satisfied(r.key, |k| self.seen(k)) {
            return Ok(Action::Done);
        }
        let count = (wanted - occupied).min(MAX_PER_SYNC);
        let slots: Vec<Option<Slot>> = if per_index {
            match ready_indexes(&missing, r.last_failures, r.now) {
                Ok(ready) => ready
                    .into_iter()
                    .take(count)
                    .map(|index| {
                        let last = r.last_failures.get(&index).map(|p| &**p);
                        Some(Slot {
                            index,
                            failures: Some(indexes::next_failure_counts(r.job, last)),
                        })
                    })
                    .collect(),
                Err(wait) => return Ok(Action::RequeueAfter(wait)),
            }
        } else {
            if let Some(wait) = self.global_backoff(r.key, r.now) {
                return Ok(Action::RequeueAfter(wait));
            }
            if indexed {
                let slot = |index| {
                    Some(Slot {
                        index,
                        failures: None,
                    })
                };
                missing.into_iter().take(count).map(slot).collect()
            } else {
                vec![None; count]
            }
        };
        self.create(r.key, r.job, slots).await?;
        Ok(Action::Done)
    }

    /// How long the Job still waits after its last failures, if it does.
    fn global_backoff(&self, key: &str, now: SystemTime) -> Option<Duration> {
        let record = self
            .backoff
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
            .unwrap_or_default();
        let ready_at = record.last? + policy::backoff(record.failures);
        ready_at.duration_since(now).ok().filter(|d| !d.is_zero())
    }

    async fn create(&self, key: &str, job: &Job, slots: Vec<Option<Slot>>) -> Result<(), Error> {
        self.expectations.expect_creations(key, slots.len());
        let api = self.pods_api(job.metadata.namespace.as_deref().unwrap_or_default());
        let creates: Vec<_> = slots
            .into_iter()
            .map(|slot| {
                let api = api.clone();
                let template = pod_for(job, slot);
                async move {
                    match api.create(&PostParams::default(), &template).await {
                        Ok(p) => {
                            self.expectations.created(key, Some(key_of(&p)));
                            self.recorder.event(
                                &reference_to(job),
                                EventType::Normal,
                                "SuccessfulCreate",
                                "Create",
                                &format!("Created pod: {}", p.name_any()),
                            );
                            Ok(())
                        }
                        Err(e) => {
                            self.expectations.created(key, None);
                            Err(e)
                        }
                    }
                }
            })
            .collect();
        let outcomes: Vec<Result<(), kube::Error>> = futures::stream::iter(creates)
            .buffer_unordered(64)
            .collect()
            .await;
        if let Some(e) = outcomes.into_iter().find_map(Result::err) {
            self.recorder.event(
                &reference_to(job),
                EventType::Warning,
                "FailedCreate",
                "Create",
                &format!("Error creating: {}", failure_message(&e)),
            );
            return Err(api_error("create pods")(e));
        }
        Ok(())
    }
}

/// The `missing` indexes whose backoff is over, or, when none is, how long
/// until the first one's is (upstream's
/// `getPodCreationInfoForIndependentIndexes`).
fn ready_indexes(
    missing: &[i32],
    last_failures: &BTreeMap<i32, Arc<Pod>>,
    now: SystemTime,
) -> Result<Vec<i32>, Duration> {
    let mut ready = Vec::new();
    let mut soonest: Option<Duration> = None;
    for &index in missing {
        let left = last_failures
            .get(&index)
            .map_or(Duration::ZERO, |p| indexes::backoff_left(p, now));
        if left.is_zero() {
            ready.push(index);
        } else {
            soonest = Some(soonest.map_or(left, |s| s.min(left)));
        }
    }
    match soonest {
        Some(wait) if ready.is_empty() => Err(wait),
        _ => Ok(ready),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn indexes_wait_out_their_own_backoff() {
        let failed: Arc<Pod> = Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "p", "annotations": {indexes::INDEX: "1",
                    indexes::FAILURE_COUNT: "1"}},
                "status": {"phase": "Failed", "containerStatuses": [{"name": "main", "ready": false,
                    "restartCount": 0, "image": "", "imageID": "",
                    "state": {"terminated": {"exitCode": 1, "finishedAt": "2025-01-01T00:00:00Z"}}}]}
            }))
            .expect("pod"),
        );
        let finished = indexes::finished_at(&failed).expect("finished");
        let last: BTreeMap<i32, Arc<Pod>> = [(1, failed)].into();
        // Index 1 failed twice: 20 s.
        assert_eq!(ready_indexes(&[0, 1, 2], &last, finished), Ok(vec![0, 2]));
        assert_eq!(
            ready_indexes(&[1], &last, finished + Duration::from_secs(5)),
            Err(Duration::from_secs(15))
        );
        assert_eq!(
            ready_indexes(&[1], &last, finished + Duration::from_secs(20)),
            Ok(vec![1])
        );
    }
}
