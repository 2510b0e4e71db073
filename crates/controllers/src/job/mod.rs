//! The Job controller (upstream's `pkg/controller/job`): runs pods until
//! `completions` succeed (NonIndexed), or until each index below
//! `completions` has succeeded (Indexed), at most `parallelism` at once;
//! gives up after `backoffLimit` failures, after `activeDeadlineSeconds`,
//! or when a `podFailurePolicy` rule says so; suspends and resumes.
//!
//! No finished pod is lost from the counts: every pod carries the
//! `batch.kubernetes.io/job-tracking` finalizer; a finished pod's uid is
//! first written to `status.uncountedTerminatedPods`, then its finalizer is
//! removed, then it moves to `succeeded`/`failed` — a crash between the
//! steps repeats a step, never a count.
//!
//! As upstream since 1.31, a Job about to end says so first —
//! `SuccessCriteriaMet` or `FailureTarget` — and gets `Complete` or
//! `Failed` once its remaining pods are gone.

pub mod policy;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use rudder_runtime::controller::Action;
use rudder_runtime::events::reference_to;
use rudder_runtime::expectations::Seen;
use rudder_runtime::informer::{OWNER_INDEX, Store, key_of};
use rudder_runtime::meta::{controller_of, controller_reference, has_finalizer, pod};
use rudder_runtime::{Change, EventType, Expectations, Recorder, WorkQueue};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use self::policy::{INDEX, Verdict};
use crate::{Context, Error, api_error};
use crate::{failure_message, is_status};

/// The finalizer that keeps a Job's pods until they are counted.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
const CONTROLLER: &str = "job-controller";
/// Pods created in one pass at most (upstream's `MaxPodCreateDeletePerSync`).
const MAX_PER_SYNC: usize = 500;

/// Failures since the last success, and when the last was seen
/// (upstream's in-memory backoff records).
#[derive(Debug, Clone, Copy, Default)]
struct Backoff {
    failures: u32,
    last: Option<SystemTime>,
}

struct Controller {
    ctx: Arc<Context>,
    jobs: Store<Job>,
    pods: Store<Pod>,
    queue: WorkQueue<String>,
    expectations: Expectations,
    recorder: Recorder,
    backoff: Mutex<HashMap<String, Backoff>>,
    /// Pods whose tracking finalizer was removed (and which are counted)
    /// while the cache may still show it (upstream's finalizer
    /// expectations): never counted again.
    released: Mutex<HashSet<String>>,
}

/// Runs the Job controller until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let jobs = ctx.informers.typed::<Job>();
    let pods = ctx.informers.typed::<Pod>();
    let mut job_changes = jobs.subscribe();
    let mut pod_changes = pods.subscribe();
    let c = Arc::new(Controller {
        jobs: jobs.store(),
        pods: pods.store(),
        queue: WorkQueue::new(ctx.clock.clone()),
        expectations: Expectations::new(ctx.clock.clone()),
        recorder: Recorder::new(
            ctx.client.clone(),
            CONTROLLER,
            &ctx.identity,
            ctx.clock.clone(),
        ),
        backoff: Mutex::default(),
        released: Mutex::default(),
        ctx: ctx.clone(),
    });
    jobs.wait_synced().await;
    pods.wait_synced().await;
    c.jobs.keys().into_iter().for_each(|k| c.queue.add(k));
    let watch = {
        let (c, stop) = (c.clone(), stop.clone());
        async move {
            loop {
                tokio::select! {
                    change = job_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { new, .. }) => c.queue.add(key_of(&*new)),
                        Some(Change::Deleted(old)) => {
                            let key = key_of(&*old);
                            c.expectations.forget(&key);
                            c.backoff.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
                            c.queue.add(key);
                        }
                        Some(Change::Resync) => c.jobs.keys().into_iter().for_each(|k| c.queue.add(k)),
                    },
                    change = pod_changes.next_until(&stop) => match change {
                        None => return,
                        Some(change @ (Change::Applied { .. } | Change::Deleted(_))) => {
                            let (p, gone) = match change {
                                Change::Applied { new, .. } => {
                                    let deleting = new.metadata.deletion_timestamp.is_some();
                                    (new, deleting)
                                }
                                Change::Deleted(old) => {
                                    if let Some(uid) = &old.metadata.uid {
                                        c.released.lock().unwrap_or_else(|e| e.into_inner()).remove(uid);
                                    }
                                    (old, true)
                                }
                                Change::Resync => continue,
                            };
                            if let Some(job) = c.job_of(&p) {
                                let key = key_of(&*job);
                                c.expectations.observed(&key, &key_of(&*p), gone);
                                c.queue.add(key);
                            } else if has_finalizer(&*p, TRACKING_FINALIZER) && controller_of(&*p).is_some_and(|r| r.kind == "Job") {
                                // Its Job is gone: nothing will count it.
                                c.queue.add(orphan_key(&p));
                            }
                        }
                        Some(Change::Resync) => c.jobs.keys().into_iter().for_each(|k| c.queue.add(k)),
                    },
                }
            }
        }
    };
    crate::serve(
        CONTROLLER,
        c.clone(),
        c.queue.clone(),
        ctx.options.job_workers,
        Some(c.recorder.clone()),
        watch,
        stop,
        |c, key| async move { c.sync(&key).await },
    )
    .await;
}

/// The queue key of a pod whose Job is gone.
fn orphan_key(p: &Pod) -> String {
    format!("pod:{}", key_of(p))
}

fn condition<'a>(status: &'a JobStatus, type_: &str) -> Option<&'a JobCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_ && c.status == "True")
}

fn finished(status: &JobStatus) -> bool {
    condition(status, "Complete").is_some() || condition(status, "Failed").is_some()
}

/// Sets a condition (True unless `status_value` says otherwise), keeping
/// its transition time if its status did not change.
fn set_condition(
    status: &mut JobStatus,
    type_: &str,
    status_value: &str,
    reason: &str,
    message: &str,
    now: SystemTime,
) {
    let time = crate::deployment::util::time(now);
    let conditions = status.conditions.get_or_insert_default();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c)
            if c.status == status_value
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref() == Some(message) => {}
        Some(c) => {
            if c.status != status_value {
                c.last_transition_time = Some(time.clone());
            }
            c.status = status_value.into();
            c.reason = Some(reason.into());
            c.message = Some(message.into());
            c.last_probe_time = Some(time);
        }
        None => conditions.push(JobCondition {
            type_: type_.into(),
            status: status_value.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_probe_time: Some(time.clone()),
            last_transition_time: Some(time),
        }),
    }
}

/// What a pod of the Job is, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Active,
    /// Being deleted, not finished.
    Terminating,
    Succeeded,
    Failed,
}

/// Whether only pods in the Failed phase count as failed (upstream's
/// `onlyReplaceFailedPods`: podReplacementPolicy Failed, or a
/// podFailurePolicy, which must see the phase and exit codes).
fn only_failed_count(job: &Job) -> bool {
    job.spec.as_ref().is_some_and(|s| {
        s.pod_replacement_policy.as_deref() == Some("Failed") || s.pod_failure_policy.is_some()
    })
}

/// What a pod is for counting (upstream's `isPodFailed`): a deleted pod
/// that did not succeed has failed — at once by default, or, when only
/// Failed pods count, once it reaches that phase; one that never reached a
/// node has failed either way, as nothing will run it (upstream's pod GC
/// marks it Failed).
fn fate(p: &Pod, only_failed: bool) -> Fate {
    match pod::phase(p) {
        "Succeeded" => Fate::Succeeded,
        "Failed" => Fate::Failed,
        _ if p.metadata.deletion_timestamp.is_some()
            && (!only_failed || pod::node(p).is_none()) =>
        {
            Fate::Failed
        }
        _ if p.metadata.deletion_timestamp.is_some() => Fate::Terminating,
        _ => Fate::Active,
    }
}

impl Controller {
    fn job_of(&self, p: &Pod) -> Option<Arc<Job>> {
        let reference = controller_of(p).filter(|r| r.kind == "Job")?;
        let job = self
            .jobs
            .get_in(p.metadata.namespace.as_deref(), &reference.name)?;
        (job.metadata.uid.as_deref() == Some(reference.uid.as_str())).then_some(job)
    }

    fn pods_api(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.ctx.client.clone(), namespace)
    }

    /// Removes the tracking finalizer from `p`; a pod already gone is fine.
    async fn release(&self, p: &Pod) -> Result<(), Error> {
        let patch =
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}});
        match self
            .pods_api(p.metadata.namespace.as_deref().unwrap_or_default())
            .patch(
                &p.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(api_error(format!(
                "remove the tracking finalizer of pod {}",
                p.name_any()
            ))(e)),
        }
    }

    async fn release_all(&self, pods: &[Arc<Pod>]) -> Result<(), Error> {
        let releases: Vec<_> = pods
            .iter()
            .filter(|p| has_finalizer(&***p, TRACKING_FINALIZER))
            .map(|p| async move {
                self.release(p).await?;
                if let Some(uid) = p.metadata.uid.clone() {
                    self.released
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(uid);
                }
                Ok(())
            })
            .collect();
        let outcomes: Vec<Result<(), Error>> = futures::stream::iter(releases)
            .buffer_unordered(32)
            .collect()
            .await;
        outcomes.into_iter().collect()
    }

    /// Deletes pods the Job no longer wants (suspended, or more than
    /// parallelism): their finalizer goes first, so they are not counted
    /// as failures (upstream's `deleteJobPods`).
    async fn remove_pods(&self, job: &Job, pods: &[Arc<Pod>]) -> Result<(), Error> {
        self.release_all(pods).await?;
        self.delete_pods(job, pods).await
    }

    async fn delete_pods(&self, job: &Job, pods: &[Arc<Pod>]) -> Result<(), Error> {
        let key = key_of(job);
        self.expectations
            .expect_deletions(&key, pods.iter().map(|p| key_of(&**p)));
        let deletions: Vec<_> = pods
            .iter()
            .map(|p| {
                let api = self.pods_api(p.metadata.namespace.as_deref().unwrap_or_default());
                let (name, pod_key, key) = (p.name_any(), key_of(&**p), key.clone());
                async move {
                    match api.delete(&name, &DeleteParams::background()).await {
                        Ok(_) => {
                            self.recorder.event(
                                &reference_to(job),
                                EventType::Normal,
                                "SuccessfulDelete",
                                "Delete",
                                &format!("Deleted pod: {name}"),
                            );
                            Ok(())
                        }
                        Err(e) => {
                            self.expectations.deletion_failed(&key, &pod_key);
                            if is_status(&e, 404) {
                                Ok(())
                            } else {
                                Err(api_error(format!("delete pod {name}"))(e))
                            }
                        }
                    }
                }
            })
            .collect();
        let outcomes: Vec<Result<(), Error>> = futures::stream::iter(deletions)
            .buffer_unordered(32)
            .collect()
            .await;
        outcomes.into_iter().collect()
    }

    async fn sync(&self, key: &str) -> Result<Action, Error> {
        if let Some(pod_key) = key.strip_prefix("pod:") {
            // A tracked pod whose Job is gone: let it go.
            if let Some(p) = self.pods.get(pod_key)
                && self.job_of(&p).is_none()
            {
                self.release(&p).await?;
            }
            return Ok(Action::Done);
        }
        let Some(job) = self.jobs.get(key) else {
            self.expectations.forget(key);
            return Ok(Action::Done);
        };
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let pods: Vec<Arc<Pod>> = self
            .pods
            .by_index(OWNER_INDEX, &uid)
            .into_iter()
            .filter(|p| controller_of(&**p).is_some_and(|r| r.uid == uid))
            .collect();
        let mut status = job.status.clone().unwrap_or_default();
        if job.metadata.deletion_timestamp.is_some() || finished(&status) {
            self.release_all(&pods).await?;
            return Ok(Action::Done);
        }
        let now = self.ctx.clock.now();
        let spec = job.spec.clone().unwrap_or_default();
        let indexed = spec.completion_mode.as_deref() == Some("Indexed");
        let only_failed = only_failed_count(&job);

        // Count what finished: uncounted first, then released, then counted.
        let mut uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
        let mut uncounted_succeeded: Vec<String> = uncounted.succeeded.clone().unwrap_or_default();
        let mut uncounted_failed: Vec<String> = uncounted.failed.clone().unwrap_or_default();
        let listed: HashSet<String> = uncounted_succeeded
            .iter()
            .chain(&uncounted_failed)
            .cloned()
            .collect();
        let mut fail_job: Option<String> = None;
        let mut ignored: Vec<Arc<Pod>> = Vec::new();
        let mut newly_uncounted = false;
        let mut completed: BTreeSet<i32> = status
            .completed_indexes
            .as_deref()
            .map(policy::parse_indexes)
            .unwrap_or_default();
        // Released pods the cache now shows without the finalizer need no
        // more remembering.
        {
            let mut released = self.released.lock().unwrap_or_else(|e| e.into_inner());
            for p in &pods {
                if !has_finalizer(&**p, TRACKING_FINALIZER)
                    && let Some(uid) = &p.metadata.uid
                {
                    released.remove(uid);
                }
            }
        }
        for p in pods
            .iter()
            .filter(|p| has_finalizer(&***p, TRACKING_FINALIZER))
        {
            let pod_uid = p.metadata.uid.clone().unwrap_or_default();
            let released = self
                .released
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&pod_uid);
            if listed.contains(&pod_uid) || released {
                continue;
            }
            match fate(p, only_failed) {
                Fate::Succeeded => {
                    if indexed {
                        match policy::index_of(p) {
                            Some(i)
                                if i >= 0
                                    && i < spec.completions.unwrap_or(0)
                                    && !completed.contains(&i) => {}
                            // A second success of an index counts once.
                            _ => {
                                ignored.push(p.clone());
                                continue;
                            }
                        }
                    }
                    uncounted_succeeded.push(pod_uid);
                    newly_uncounted = true;
                }
                Fate::Failed => match policy::judge(&job, p) {
                    Verdict::Ignore => ignored.push(p.clone()),
                    Verdict::FailJob(message) => {
                        fail_job.get_or_insert(message);
                        uncounted_failed.push(pod_uid);
                        newly_uncounted = true;
                    }
                    Verdict::Count | Verdict::FailIndex => {
                        uncounted_failed.push(pod_uid);
                        newly_uncounted = true;
                    }
                },
                _ => {}
            }
        }
        // The object the next status write is based on.
        let mut current: Arc<Job> = job.clone();
        if newly_uncounted {
            uncounted.succeeded = Some(uncounted_succeeded.clone());
            uncounted.failed = Some(uncounted_failed.clone());
            status.uncounted_terminated_pods = Some(uncounted.clone());
            // A FailJob verdict is written with the pod that caused it: once
            // the pod is released, nothing else remembers it.
            if let Some(message) = &fail_job
                && condition(&status, "FailureTarget").is_none()
            {
                set_condition(
                    &mut status,
                    "FailureTarget",
                    "True",
                    "PodFailurePolicy",
                    message,
                    now,
                );
            }
            let written = self.write_status(&current, status.clone()).await?;
            status = written.status.clone().unwrap_or_default();
            current = Arc::new(written);
        }
        // Release the uncounted and the ignored.
        let uncounted_uids: HashSet<&String> = uncounted_succeeded
            .iter()
            .chain(&uncounted_failed)
            .collect();
        let to_release: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| {
                p.metadata
                    .uid
                    .as_ref()
                    .is_some_and(|u| uncounted_uids.contains(u))
            })
            .cloned()
            .chain(ignored)
            .collect();
        self.release_all(&to_release).await?;
        // Count them.
        if !uncounted_succeeded.is_empty() || !uncounted_failed.is_empty() {
            let by_uid: HashMap<&str, &Arc<Pod>> = pods
                .iter()
                .filter_map(|p| Some((p.metadata.uid.as_deref()?, p)))
                .collect();
            if indexed {
                for u in &uncounted_succeeded {
                    if let Some(i) = by_uid.get(u.as_str()).and_then(|p| policy::index_of(p)) {
                        completed.insert(i);
                    }
                }
                status.completed_indexes = Some(policy::format_indexes(&completed));
            }
            status.succeeded =
                Some(status.succeeded.unwrap_or(0) + uncounted_succeeded.len() as i32);
            status.failed = Some(status.failed.unwrap_or(0) + uncounted_failed.len() as i32);
            {
                let mut records = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
                let record = records.entry(key.to_string()).or_default();
                if !uncounted_succeeded.is_empty() {
                    *record = Backoff::default();
                }
                if !uncounted_failed.is_empty() {
                    record.failures += uncounted_failed.len() as u32;
                    record.last = Some(now);
                }
            }
            status.uncounted_terminated_pods = Some(UncountedTerminatedPods::default());
        }
        if status.uncounted_terminated_pods.is_none() {
            status.uncounted_terminated_pods = Some(UncountedTerminatedPods::default());
        }

        let active: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| fate(p, only_failed) == Fate::Active)
            .cloned()
            .collect();
        let terminating = pods
            .iter()
            .filter(|p| fate(p, only_failed) == Fate::Terminating)
            .count() as i32;
        let succeeded = status.succeeded.unwrap_or(0);
        let failed = status.failed.unwrap_or(0);
        let mut action = Action::Done;

        // Suspended: no pods run.
        let suspended = spec.suspend.unwrap_or(false);
        let was_suspended = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Suspended" && c.status == "True");
        if suspended {
            if !was_suspended {
                set_condition(
                    &mut status,
                    "Suspended",
                    "True",
                    "JobSuspended",
                    "Job suspended",
                    now,
                );
                self.recorder.event(
                    &reference_to(&*job),
                    EventType::Normal,
                    "Suspended",
                    "Suspend",
                    "Job suspended",
                );
            }
            self.remove_pods(&job, &active).await?;
            status.active = Some(0);
        } else {
            if was_suspended {
                set_condition(
                    &mut status,
                    "Suspended",
                    "False",
                    "JobResumed",
                    "Job resumed",
                    now,
                );
                self.recorder.event(
                    &reference_to(&*job),
                    EventType::Normal,
                    "Resumed",
                    "Resume",
                    "Job resumed",
                );
                status.start_time = Some(crate::deployment::util::time(now));
            }
            if status.start_time.is_none() {
                status.start_time = Some(crate::deployment::util::time(now));
            }
            let started = status
                .start_time
                .as_ref()
                .map(|t| SystemTime::from(t.0))
                .unwrap_or(now);
            let deadline = spec
                .active_deadline_seconds
                .map(|s| started + Duration::from_secs(s.max(0) as u64));

            // Is it over?
            let failure: Option<(String, String)> =
                if let Some(c) = condition(&status, "FailureTarget") {
                    Some((
                        c.reason.clone().unwrap_or_default(),
                        c.message.clone().unwrap_or_default(),
                    ))
                } else if let Some(message) = fail_job {
                    Some(("PodFailurePolicy".into(), message))
                } else if failed > spec.backoff_limit.unwrap_or(6) {
                    Some((
                        "BackoffLimitExceeded".into(),
                        "Job has reached the specified backoff limit".into(),
                    ))
                } else if deadline.is_some_and(|d| d <= now) {
                    Some((
                        "DeadlineExceeded".into(),
                        "Job was active longer than specified deadline".into(),
                    ))
                } else {
                    None
                };
            let done = match spec.completions {
                _ if status
                    .conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "SuccessCriteriaMet" && c.status == "True") =>
                {
                    true
                }
                Some(n) if indexed => completed.len() as i32 >= n,
                Some(n) => succeeded >= n,
                None => succeeded > 0 && active.is_empty(),
            };
            if let Some((reason, message)) = failure {
                if condition(&status, "FailureTarget").is_none() {
                    set_condition(&mut status, "FailureTarget", "True", &reason, &message, now);
                }
                self.delete_pods(&job, &active).await?;
                if active.is_empty() && terminating == 0 {
                    set_condition(&mut status, "Failed", "True", &reason, &message, now);
                    self.recorder.event(
                        &reference_to(&*job),
                        EventType::Warning,
                        &reason,
                        "Fail",
                        &message,
                    );
                }
                status.active = Some(0);
            } else if done {
                let (reason, message) = (
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                );
                if condition(&status, "SuccessCriteriaMet").is_none() {
                    set_condition(
                        &mut status,
                        "SuccessCriteriaMet",
                        "True",
                        reason,
                        message,
                        now,
                    );
                }
                self.delete_pods(&job, &active).await?;
                if active.is_empty() && terminating == 0 {
                    set_condition(&mut status, "Complete", "True", reason, message, now);
                    status.completion_time = Some(crate::deployment::util::time(now));
                    self.recorder.event(
                        &reference_to(&*job),
                        EventType::Normal,
                        "Completed",
                        "Complete",
                        "Job completed",
                    );
                }
                status.active = Some(0);
            } else {
                action = self
                    .manage(
                        key,
                        &job,
                        &spec,
                        &active,
                        terminating,
                        succeeded,
                        &completed,
                        now,
                    )
                    .await?;
                if let Some(deadline) = deadline {
                    let left = deadline.duration_since(now).unwrap_or_default();
                    action = match action {
                        Action::RequeueAfter(after) => Action::RequeueAfter(after.min(left)),
                        _ => Action::RequeueAfter(left),
                    };
                }
                status.active = Some(active.len() as i32);
            }
        }
        status.ready = Some(active.iter().filter(|p| pod::is_ready(p)).count() as i32);
        status.terminating = Some(terminating);
        if status.succeeded.is_none() {
            status.succeeded = Some(0);
        }
        if status.failed.is_none() {
            status.failed = Some(0);
        }
        if current.status.as_ref() != Some(&status) {
            self.write_status(&current, status).await?;
        }
        Ok(action)
    }

    /// Creates or deletes pods so that the right number run (upstream's
    /// `manageJob`); waits out the failure backoff first.
    #[allow(clippy::too_many_arguments)]
    async fn manage(
        &self,
        key: &str,
        job: &Job,
        spec: &k8s_openapi::api::batch::v1::JobSpec,
        active: &[Arc<Pod>],
        terminating: i32,
        succeeded: i32,
        completed: &BTreeSet<i32>,
        now: SystemTime,
    ) -> Result<Action, Error> {
        let parallelism = spec.parallelism.unwrap_or(1).max(0) as usize;
        let indexed = spec.completion_mode.as_deref() == Some("Indexed");
        // Indexes still wanted, lowest first.
        let running: HashSet<i32> = active.iter().filter_map(|p| policy::index_of(p)).collect();
        let missing: Vec<i32> = if indexed {
            (0..spec.completions.unwrap_or(0))
                .filter(|i| !completed.contains(i) && !running.contains(i))
                .collect()
        } else {
            Vec::new()
        };
        let wanted = match spec.completions {
            Some(_) if indexed => parallelism.min(running.len() + missing.len()),
            Some(n) => parallelism.min((n - succeeded).max(0) as usize),
            // A work queue: once one pod succeeded, no new ones start.
            None if succeeded > 0 => active.len(),
            None => parallelism,
        };
        // With podReplacementPolicy Failed, terminating pods are not yet replaced.
        let occupied = active.len()
            + if spec.pod_replacement_policy.as_deref() == Some("Failed") {
                terminating.max(0) as usize
            } else {
                0
            };
        if occupied > wanted {
            let mut surplus: Vec<Arc<Pod>> = active.to_vec();
            // Not ready, then newest, go first.
            surplus.sort_by(|a, b| {
                pod::is_ready(a).cmp(&pod::is_ready(b)).then_with(|| {
                    let t = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
                    t(b).cmp(&t(a))
                })
            });
            surplus.truncate(occupied - wanted);
            self.remove_pods(job, &surplus).await?;
            return Ok(Action::Done);
        }
        if occupied == wanted || !self.expectations.satisfied(key, |k| self.seen(k)) {
            return Ok(Action::Done);
        }
        let record = self
            .backoff
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
            .unwrap_or_default();
        if let Some(last) = record.last {
            let ready_at = last + policy::backoff(record.failures);
            if ready_at > now {
                return Ok(Action::RequeueAfter(
                    ready_at.duration_since(now).unwrap_or_default(),
                ));
            }
        }
        let count = (wanted - occupied).min(MAX_PER_SYNC);
        let indexes: Vec<Option<i32>> = if indexed {
            missing.into_iter().take(count).map(Some).collect()
        } else {
            vec![None; count]
        };
        self.expectations.expect_creations(key, indexes.len());
        let namespace = job.metadata.namespace.clone().unwrap_or_default();
        let api = self.pods_api(&namespace);
        let creates: Vec<_> = indexes
            .into_iter()
            .map(|index| {
                let api = api.clone();
                let template = self.pod_for(job, index);
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
        Ok(Action::Done)
    }

    fn seen(&self, pod_key: &str) -> Seen {
        match self.pods.get(pod_key) {
            None => Seen::Absent,
            Some(p) if p.metadata.deletion_timestamp.is_some() => Seen::Deleting,
            Some(_) => Seen::Present,
        }
    }

    /// A pod of `job` (for `index` when Indexed), as upstream makes them.
    fn pod_for(&self, job: &Job, index: Option<i32>) -> Pod {
        let template = job
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        let mut p = Pod {
            metadata: template.metadata.unwrap_or_default(),
            spec: template.spec,
            status: None,
        };
        let name = job.name_any();
        p.metadata.name = None;
        p.metadata.namespace = job.metadata.namespace.clone();
        p.metadata.generate_name = Some(match index {
            Some(i) => format!("{name}-{i}-"),
            None => format!("{name}-"),
        });
        p.metadata.owner_references = controller_reference(job).map(|r| vec![r]);
        p.metadata
            .finalizers
            .get_or_insert_default()
            .push(TRACKING_FINALIZER.into());
        if let Some(i) = index {
            p.metadata
                .annotations
                .get_or_insert_default()
                .insert(INDEX.into(), i.to_string());
            p.metadata
                .labels
                .get_or_insert_default()
                .insert(INDEX.into(), i.to_string());
            if let Some(spec) = p.spec.as_mut() {
                spec.hostname = Some(format!("{name}-{i}"));
                let env = EnvVar {
                    name: "JOB_COMPLETION_INDEX".into(),
                    value: None,
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: format!("metadata.labels['{INDEX}']"),
                            api_version: None,
                        }),
                        ..Default::default()
                    }),
                };
                for c in spec
                    .init_containers
                    .iter_mut()
                    .flatten()
                    .chain(spec.containers.iter_mut())
                {
                    let vars = c.env.get_or_insert_default();
                    if !vars.iter().any(|v| v.name == env.name) {
                        vars.push(env.clone());
                    }
                }
            }
        }
        p
    }

    async fn write_status(&self, job: &Job, status: JobStatus) -> Result<Job, Error> {
        let mut updated = job.clone();
        updated.status = Some(status);
        Api::<Job>::namespaced(
            self.ctx.client.clone(),
            job.meta().namespace.as_deref().unwrap_or_default(),
        )
        .replace_status(&job.name_any(), &PostParams::default(), &updated)
        .await
        .map_err(api_error(format!(
            "update the status of job {}",
            job.name_any()
        )))
    }
}
