//! The Job controller (upstream's `pkg/controller/job`): runs pods until
//! `completions` succeed (NonIndexed), or until each index below
//! `completions` has succeeded (Indexed), at most `parallelism` at once;
//! gives up after `backoffLimit` failures, after `activeDeadlineSeconds`,
//! when a `podFailurePolicy` rule says so, or — with
//! `backoffLimitPerIndex` — once indexes failed; succeeds early when a
//! `successPolicy` is met; suspends and resumes; adopts orphan pods its
//! selector matches.
//!
//! No finished pod is lost from the counts: every pod carries the
//! `batch.kubernetes.io/job-tracking` finalizer; a finished pod's uid is
//! first written to `status.uncountedTerminatedPods`, then its finalizer is
//! removed, then it moves to `succeeded`/`failed` — a crash between the
//! steps repeats a step, never a count. With `backoffLimitPerIndex` the
//! last failed pod of an index keeps its finalizer until its replacement
//! exists, which carries the index's failure count on.
//!
//! As upstream since 1.31, a Job about to end says so first —
//! `SuccessCriteriaMet` or `FailureTarget` — and gets `Complete` or
//! `Failed` once its remaining pods are gone.
//!
//! `sync` is one pass; `pods` does what is done to pods, `manage` keeps
//! the right number running, `ending` decides whether the Job is over,
//! `indexes` and `policy` hold the pure rules.

pub mod ending;
pub mod indexes;
mod manage;
mod pods;
pub mod policy;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};
use rudder_runtime::controller::Action;
use rudder_runtime::events::reference_to;
use rudder_runtime::informer::{OWNER_INDEX, Store, key_of};
use rudder_runtime::meta::{controller_of, has_finalizer, pod};
use rudder_runtime::{Change, EventType, Expectations, Recorder, WorkQueue};
use tokio_util::sync::CancellationToken;

use self::ending::{Ending, Facts};
use self::manage::Running;
use self::policy::Verdict;
use crate::{Context, Error, api_error};

/// The finalizer that keeps a Job's pods until they are counted.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
const CONTROLLER: &str = "job-controller";

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
                            } else if controller_of(&*p).is_none_or(|r| r.kind == "Job") {
                                if has_finalizer(&*p, TRACKING_FINALIZER) {
                                    // Its Job is gone (or let it go): nothing
                                    // will count it (upstream's orphan queue).
                                    c.queue.add(orphan_key(&p));
                                }
                                if controller_of(&*p).is_none() && !gone {
                                    // The Jobs that may adopt it.
                                    c.jobs_selecting(&p).into_iter().for_each(|k| c.queue.add(k));
                                }
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

/// What a pod is being deleted without having finished (upstream's
/// `CountTerminatingPods`): a Job is not over while it has any.
fn terminating(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some() && !matches!(pod::phase(p), "Succeeded" | "Failed")
}

/// The finished pods of one pass, as counted.
#[derive(Default)]
struct Tally {
    /// Written to `uncountedTerminatedPods` before their finalizers go.
    succeeded: Vec<String>,
    failed: Vec<String>,
    /// Finished pods that do not count (ignored failures, second successes
    /// of an index): released uncounted.
    ignored: Vec<Arc<Pod>>,
    /// The message of a `FailJob` rule a pod matched.
    fail_job: Option<String>,
    /// Whether the status must be written before finalizers go.
    changed: bool,
}

impl Controller {
    fn job_of(&self, p: &Pod) -> Option<Arc<Job>> {
        let reference = controller_of(p).filter(|r| r.kind == "Job")?;
        let job = self
            .jobs
            .get_in(p.metadata.namespace.as_deref(), &reference.name)?;
        (job.metadata.uid.as_deref() == Some(reference.uid.as_str())).then_some(job)
    }

    /// Whether the pod with `uid` had its finalizer removed (and was
    /// counted) while the cache may still show it.
    fn was_released(&self, uid: &str) -> bool {
        self.released
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(uid)
    }

    async fn sync(&self, key: &str) -> Result<Action, Error> {
        if let Some(pod_key) = key.strip_prefix("pod:") {
            // A tracked pod whose Job is gone, or an orphan: let it go.
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
        let owned: Vec<Arc<Pod>> = self
            .pods
            .by_index(OWNER_INDEX, &uid)
            .into_iter()
            .filter(|p| controller_of(&**p).is_some_and(|r| r.uid == uid))
            .collect();
        let mut status = job.status.clone().unwrap_or_default();
        if job.metadata.deletion_timestamp.is_some() || finished(&status) {
            self.release_all(&owned).await?;
            return Ok(Action::Done);
        }
        let pods = self.claim(&job, owned).await?;
        let now = self.ctx.clock.now();
        let spec = job.spec.clone().unwrap_or_default();
        let indexed = spec.completion_mode.as_deref() == Some("Indexed");
        let per_index = indexed && spec.backoff_limit_per_index.is_some();
        let completions = spec.completions.unwrap_or(0);
        let only_failed = only_failed_count(&job);

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
        let mut uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
        let mut tally = Tally {
            succeeded: uncounted.succeeded.clone().unwrap_or_default(),
            failed: uncounted.failed.clone().unwrap_or_default(),
            ..Tally::default()
        };
        let listed: HashSet<String> = tally
            .succeeded
            .iter()
            .chain(&tally.failed)
            .cloned()
            .collect();
        // What an earlier pass listed was taken into the backoff record
        // when it was listed.
        let (listed_succeeded, listed_failed) = (tally.succeeded.len(), tally.failed.len());
        // Pods that finished or run, not yet counted.
        let fresh: Vec<&Arc<Pod>> = pods
            .iter()
            .filter(|p| has_finalizer(&***p, TRACKING_FINALIZER))
            .filter(|p| {
                let pod_uid = p.metadata.uid.as_deref().unwrap_or_default();
                !listed.contains(pod_uid) && !self.was_released(pod_uid)
            })
            .collect();
        let mut completed: BTreeSet<i32> = status
            .completed_indexes
            .as_deref()
            .map(|t| indexes::parse_below(t, completions))
            .unwrap_or_default();
        let in_range = |p: &Pod| indexes::index_of(p).filter(|i| *i < completions);

        // With backoffLimitPerIndex: the indexes that failed, and each
        // index's last failure, kept until it is replaced.
        let mut failed_indexes: BTreeSet<i32> = BTreeSet::new();
        let mut last_failures: BTreeMap<i32, Arc<Pod>> = BTreeMap::new();
        if per_index {
            let failures: Vec<&Arc<Pod>> = fresh
                .iter()
                .copied()
                .filter(|p| fate(p, only_failed) == Fate::Failed && in_range(p).is_some())
                .collect();
            failed_indexes = status
                .failed_indexes
                .as_deref()
                .map(|t| indexes::parse_below(t, completions))
                .unwrap_or_default();
            failed_indexes.extend(
                failures
                    .iter()
                    .filter(|p| indexes::fails_index(&job, p))
                    .filter_map(|p| in_range(p)),
            );
            let ending_announced = condition(&status, "FailureTarget").is_some()
                || condition(&status, "SuccessCriteriaMet").is_some();
            if !ending_announced {
                let settled: HashSet<i32> = pods
                    .iter()
                    .filter(|p| match fate(p, only_failed) {
                        Fate::Active => true,
                        Fate::Succeeded => has_finalizer(&***p, TRACKING_FINALIZER),
                        _ => false,
                    })
                    .filter_map(|p| indexes::index_of(p))
                    .chain(completed.iter().copied())
                    .chain(failed_indexes.iter().copied())
                    .collect();
                last_failures = indexes::last_failures(failures, |i| settled.contains(&i));
            }
            let written = indexes::format_indexes(&failed_indexes);
            if status.failed_indexes.as_deref() != Some(written.as_str()) {
                status.failed_indexes = Some(written);
                tally.changed = true;
            }
        }
        let waiting: HashSet<&str> = last_failures
            .values()
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();

        // Count what finished.
        for p in &fresh {
            let pod_uid = p.metadata.uid.clone().unwrap_or_default();
            if waiting.contains(pod_uid.as_str()) {
                continue;
            }
            match fate(p, only_failed) {
                Fate::Succeeded => {
                    if indexed {
                        match in_range(p) {
                            Some(i) if !completed.contains(&i) => {}
                            // A second success of an index counts once.
                            _ => {
                                tally.ignored.push((*p).clone());
                                continue;
                            }
                        }
                    }
                    tally.succeeded.push(pod_uid);
                    tally.changed = true;
                }
                Fate::Failed => match policy::judge(&job, p) {
                    Verdict::Ignore => tally.ignored.push((*p).clone()),
                    verdict => {
                        if let Verdict::FailJob(message) = verdict {
                            tally.fail_job.get_or_insert(message);
                        }
                        tally.failed.push(pod_uid);
                        tally.changed = true;
                    }
                },
                _ => {}
            }
        }
        // The object the next status write is based on.
        let mut current: Arc<Job> = job.clone();
        if tally.changed {
            uncounted.succeeded = Some(tally.succeeded.clone());
            uncounted.failed = Some(tally.failed.clone());
            status.uncounted_terminated_pods = Some(uncounted.clone());
            // A FailJob verdict is written with the pod that caused it: once
            // the pod is released, nothing else remembers it.
            if let Some(message) = &tally.fail_job
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
            // With backoffLimitPerIndex, each index keeps its own backoff.
            if !per_index {
                self.record_finished(
                    key,
                    tally.succeeded.len() - listed_succeeded,
                    tally.failed.len() - listed_failed,
                    now,
                );
            }
        }
        self.count(&pods, &tally, &mut status, &mut completed, indexed)
            .await?;

        let active: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| fate(p, only_failed) == Fate::Active)
            .cloned()
            .collect();
        let stopping: Vec<Arc<Pod>> = pods.iter().filter(|p| terminating(p)).cloned().collect();
        let mut action = Action::Done;

        let suspended = spec.suspend.unwrap_or(false);
        if status.start_time.is_none() && !suspended {
            status.start_time = Some(crate::deployment::util::time(now));
        }
        let deadline = spec
            .active_deadline_seconds
            .filter(|_| !suspended)
            .zip(status.start_time.as_ref())
            .map(|(s, t)| SystemTime::from(t.0) + Duration::from_secs(s.max(0) as u64));
        let ending = ending::decide(&Facts {
            spec: &spec,
            status: &status,
            fail_job: tally.fail_job.as_deref(),
            deadline_passed: deadline.is_some_and(|d| d <= now),
            completed: &completed,
            failed_indexes: &failed_indexes,
            active: active.len(),
        });
        if let Some(ending) = ending {
            let over = active.is_empty() && stopping.is_empty() && last_failures.is_empty();
            self.end(&job, &mut status, &ending, &active, over, now)
                .await?;
        } else {
            self.suspend_or_resume(&job, &mut status, suspended, now);
            if suspended {
                self.remove_pods(&job, &active).await?;
                status.active = Some(0);
            } else {
                action = self
                    .manage(&Running {
                        key,
                        job: &job,
                        spec: &spec,
                        active: &active,
                        terminating: &stopping,
                        succeeded: status.succeeded.unwrap_or(0),
                        completed: &completed,
                        failed_indexes: &failed_indexes,
                        last_failures: &last_failures,
                        now,
                    })
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
        status.terminating = Some(stopping.len() as i32);
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

    /// Releases the pods of `tally` and moves them from
    /// `uncountedTerminatedPods` to the counters (and `completedIndexes`).
    async fn count(
        &self,
        pods: &[Arc<Pod>],
        tally: &Tally,
        status: &mut JobStatus,
        completed: &mut BTreeSet<i32>,
        indexed: bool,
    ) -> Result<(), Error> {
        let uncounted: HashSet<&String> = tally.succeeded.iter().chain(&tally.failed).collect();
        let to_release: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| {
                p.metadata
                    .uid
                    .as_ref()
                    .is_some_and(|u| uncounted.contains(u))
            })
            .cloned()
            .chain(tally.ignored.iter().cloned())
            .collect();
        self.release_all(&to_release).await?;
        if !uncounted.is_empty() {
            let by_uid: HashMap<&str, &Arc<Pod>> = pods
                .iter()
                .filter_map(|p| Some((p.metadata.uid.as_deref()?, p)))
                .collect();
            if indexed {
                for u in &tally.succeeded {
                    if let Some(i) = by_uid.get(u.as_str()).and_then(|p| indexes::index_of(p)) {
                        completed.insert(i);
                    }
                }
                status.completed_indexes = Some(indexes::format_indexes(completed));
            }
            status.succeeded = Some(status.succeeded.unwrap_or(0) + tally.succeeded.len() as i32);
            status.failed = Some(status.failed.unwrap_or(0) + tally.failed.len() as i32);
        }
        status.uncounted_terminated_pods = Some(UncountedTerminatedPods::default());
        Ok(())
    }

    /// Takes pods found finished in this pass — and now written to
    /// `uncountedTerminatedPods` — into the Job's backoff record (upstream
    /// updates it with the status write that lists them): a success starts
    /// it over, failures add up. Pods listed by an earlier pass are not
    /// taken again, so a pass that fails after listing them and is
    /// retried does not count them twice.
    fn record_finished(&self, key: &str, succeeded: usize, failed: usize, now: SystemTime) {
        let mut records = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        let record = records.entry(key.to_string()).or_default();
        if succeeded > 0 {
            *record = Backoff::default();
        }
        if failed > 0 {
            record.failures += failed as u32;
            record.last = Some(now);
        }
    }

    /// A Job that is over: announces it (`FailureTarget`,
    /// `SuccessCriteriaMet`), stops what still runs — a failing Job's pods
    /// are counted as failed, a succeeding Job's are not — and, once `over`
    /// (nothing runs or terminates), sets `Failed` or `Complete`.
    async fn end(
        &self,
        job: &Job,
        status: &mut JobStatus,
        ending: &Ending,
        active: &[Arc<Pod>],
        over: bool,
        now: SystemTime,
    ) -> Result<(), Error> {
        match ending {
            Ending::Fail { reason, message } => {
                if condition(status, "FailureTarget").is_none() {
                    set_condition(status, "FailureTarget", "True", reason, message, now);
                }
                self.delete_pods(job, active).await?;
                if over {
                    set_condition(status, "Failed", "True", reason, message, now);
                    self.recorder.event(
                        &reference_to(job),
                        EventType::Warning,
                        reason,
                        "Fail",
                        message,
                    );
                }
            }
            Ending::Succeed { reason, message } => {
                if condition(status, "SuccessCriteriaMet").is_none() {
                    set_condition(status, "SuccessCriteriaMet", "True", reason, message, now);
                }
                self.remove_pods(job, active).await?;
                if over {
                    set_condition(status, "Complete", "True", reason, message, now);
                    status.completion_time = Some(crate::deployment::util::time(now));
                    self.recorder.event(
                        &reference_to(job),
                        EventType::Normal,
                        "Completed",
                        "Complete",
                        "Job completed",
                    );
                }
            }
        }
        status.active = Some(0);
        Ok(())
    }

    /// Keeps the `Suspended` condition as `spec.suspend` says; a resumed
    /// Job's deadline starts again.
    fn suspend_or_resume(
        &self,
        job: &Job,
        status: &mut JobStatus,
        suspended: bool,
        now: SystemTime,
    ) {
        let was_suspended = condition(status, "Suspended").is_some();
        if suspended && !was_suspended {
            set_condition(
                status,
                "Suspended",
                "True",
                "JobSuspended",
                "Job suspended",
                now,
            );
            self.recorder.event(
                &reference_to(job),
                EventType::Normal,
                "Suspended",
                "Suspend",
                "Job suspended",
            );
        } else if !suspended && was_suspended {
            set_condition(
                status,
                "Suspended",
                "False",
                "JobResumed",
                "Job resumed",
                now,
            );
            self.recorder.event(
                &reference_to(job),
                EventType::Normal,
                "Resumed",
                "Resume",
                "Job resumed",
            );
            status.start_time = Some(crate::deployment::util::time(now));
        }
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
