//! The CronJob controller (upstream's `pkg/controller/cronjob`,
//! `cronjob_controllerv2.go`): at each time its schedule names (standard
//! cron, `@hourly`-style macros, in `spec.timeZone`), a CronJob creates a
//! Job from its template, named `<cronjob>-<minutes since the epoch>`.
//! Missed times are handled as upstream: only the most recent is started,
//! none if `startingDeadlineSeconds` passed, with a warning when more than
//! 100 were missed; `concurrencyPolicy` Allow, Forbid or Replace decides
//! what happens to a Job still running; finished Jobs beyond the history
//! limits are deleted; `suspend` stops new Jobs.

pub mod schedule;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use rudder_runtime::controller::Action;
use rudder_runtime::events::reference_to;
use rudder_runtime::informer::{OWNER_INDEX, Store, key_of};
use rudder_runtime::meta::{controller_of, controller_reference};
use rudder_runtime::{Change, EventType, Recorder, WorkQueue};
use tokio_util::sync::CancellationToken;

use self::schedule::Schedule;
use crate::Context;
use crate::{failure_message, is_status};

const CONTROLLER: &str = "cronjob-controller";
/// The annotation recording the time a Job was scheduled for.
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

struct Controller {
    ctx: Arc<Context>,
    cronjobs: Store<CronJob>,
    jobs: Store<Job>,
    queue: WorkQueue<String>,
    recorder: Recorder,
}

/// Runs the CronJob controller until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let cronjobs = ctx.informers.typed::<CronJob>();
    let jobs = ctx.informers.typed::<Job>();
    let (mut cronjob_changes, mut job_changes) = (cronjobs.subscribe(), jobs.subscribe());
    let c = Arc::new(Controller {
        cronjobs: cronjobs.store(),
        jobs: jobs.store(),
        queue: WorkQueue::new(ctx.clock.clone()),
        recorder: Recorder::new(
            ctx.client.clone(),
            CONTROLLER,
            &ctx.identity,
            ctx.clock.clone(),
        ),
        ctx: ctx.clone(),
    });
    cronjobs.wait_synced().await;
    jobs.wait_synced().await;
    c.cronjobs.keys().into_iter().for_each(|k| c.queue.add(k));
    let watch = {
        let (c, stop) = (c.clone(), stop.clone());
        async move {
            loop {
                tokio::select! {
                    change = cronjob_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { new: cj, .. } | Change::Deleted(cj)) => c.queue.add(key_of(&*cj)),
                        Some(Change::Resync) => c.cronjobs.keys().into_iter().for_each(|k| c.queue.add(k)),
                    },
                    change = job_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { new: job, .. } | Change::Deleted(job)) => {
                            if let Some(owner) = controller_of(&*job).filter(|r| r.kind == "CronJob") {
                                c.queue.add(rudder_runtime::informer::key(job.metadata.namespace.as_deref(), &owner.name));
                            }
                        }
                        Some(Change::Resync) => c.cronjobs.keys().into_iter().for_each(|k| c.queue.add(k)),
                    },
                }
            }
        }
    };
    crate::serve(
        CONTROLLER,
        c.clone(),
        c.queue.clone(),
        ctx.options.cronjob_workers,
        Some(c.recorder.clone()),
        watch,
        stop,
        |c, key| async move { c.sync(&key).await },
    )
    .await;
}

fn timestamp(time: SystemTime) -> Timestamp {
    Timestamp::try_from(time).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The scheduled-timestamp annotation: RFC 3339 in `spec.timeZone`, or in
/// UTC when none is set (upstream's `time.LoadLocation("")`), `Z` for UTC.
fn scheduled_timestamp(at: Timestamp, zone: Option<&TimeZone>) -> String {
    let zoned = at.to_zoned(zone.cloned().unwrap_or(TimeZone::UTC));
    let text = zoned.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string();
    match text.strip_suffix("+00:00") {
        Some(utc) => format!("{utc}Z"),
        None => text,
    }
}

fn job_finished(job: &Job) -> Option<&str> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| c.type_.as_str())
}

fn job_reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        namespace: job.metadata.namespace.clone(),
        name: job.metadata.name.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        field_path: None,
    }
}

impl Controller {
    async fn sync(&self, key: &str) -> Result<Action, kube::Error> {
        let Some(cj) = self.cronjobs.get(key) else {
            return Ok(Action::Done);
        };
        let namespace = cj.metadata.namespace.clone().unwrap_or_default();
        let uid = cj.metadata.uid.clone().unwrap_or_default();
        let jobs: Vec<Arc<Job>> = self
            .jobs
            .by_index(OWNER_INDEX, &uid)
            .into_iter()
            .filter(|j| controller_of(&**j).is_some_and(|r| r.uid == uid))
            .collect();
        let mut status = cj.status.clone().unwrap_or_default();
        self.track_active(&cj, &jobs, &mut status).await?;
        let now = self.ctx.clock.now();
        let spec = cj.spec.clone().unwrap_or_default();
        let mut action = Action::Done;
        if cj.metadata.deletion_timestamp.is_none() {
            action = self.schedule(&cj, &jobs, &mut status, now).await?;
            self.cleanup(&cj, &jobs, &status, &spec).await?;
        }
        if cj.status.as_ref() != Some(&status) {
            let mut updated = (*cj).clone();
            updated.status = Some(status);
            match Api::<CronJob>::namespaced(self.ctx.client.clone(), &namespace)
                .replace_status(&cj.name_any(), &PostParams::default(), &updated)
                .await
            {
                Ok(_) => {}
                Err(e) if is_status(&e, 409) || is_status(&e, 404) => return Ok(Action::Retry),
                Err(e) => return Err(e),
            }
        }
        Ok(action)
    }

    /// Brings `status.active` in line with the Jobs (upstream's
    /// `syncCronJob` first half): finished ones leave it, with
    /// `lastSuccessfulTime`; ones that vanished leave it too.
    async fn track_active(
        &self,
        cj: &CronJob,
        jobs: &[Arc<Job>],
        status: &mut CronJobStatus,
    ) -> Result<(), kube::Error> {
        let regarding = reference_to(cj);
        for job in jobs {
            let listed = status
                .active
                .iter()
                .flatten()
                .any(|r| r.uid == job.metadata.uid);
            match job_finished(job) {
                Some(outcome) => {
                    if listed {
                        status
                            .active
                            .get_or_insert_default()
                            .retain(|r| r.uid != job.metadata.uid);
                        self.recorder.event(
                            &regarding,
                            EventType::Normal,
                            "SawCompletedJob",
                            "Track",
                            &format!(
                                "Saw completed job: {}, condition: {outcome}",
                                job.name_any()
                            ),
                        );
                    }
                    if outcome == "Complete"
                        && let Some(done) =
                            job.status.as_ref().and_then(|s| s.completion_time.clone())
                        && status
                            .last_successful_time
                            .as_ref()
                            .is_none_or(|t| t.0 < done.0)
                    {
                        status.last_successful_time = Some(done);
                    }
                }
                None if !listed && job.metadata.deletion_timestamp.is_none() => {
                    // Ours but not listed (made by hand, or a status write
                    // lost): upstream only warns.
                    self.recorder.event(
                        &regarding,
                        EventType::Warning,
                        "UnexpectedJob",
                        "Track",
                        &format!(
                            "Saw a job that the controller did not create or forgot: {}",
                            job.name_any()
                        ),
                    );
                }
                None => {}
            }
        }
        // Listed but not in the cache: gone, or just made and not seen
        // yet — asked live, as upstream does.
        let unseen: Vec<String> = status
            .active
            .iter()
            .flatten()
            .filter(|r| !jobs.iter().any(|j| j.metadata.uid == r.uid))
            .filter_map(|r| r.name.clone())
            .collect();
        let api: Api<Job> = Api::namespaced(
            self.ctx.client.clone(),
            cj.metadata.namespace.as_deref().unwrap_or_default(),
        );
        for name in unseen {
            if api.get_opt(&name).await?.is_some() {
                continue;
            }
            status
                .active
                .get_or_insert_default()
                .retain(|r| r.name.as_deref() != Some(&name));
            self.recorder.event(
                &regarding,
                EventType::Normal,
                "MissingJob",
                "Track",
                &format!("Active job went missing: {name}"),
            );
        }
        if status.active.as_ref().is_some_and(Vec::is_empty) {
            status.active = None;
        }
        Ok(())
    }

    /// Starts the Job of the most recent unmet schedule time, if it is
    /// due; says when to look again.
    async fn schedule(
        &self,
        cj: &CronJob,
        jobs: &[Arc<Job>],
        status: &mut CronJobStatus,
        now: SystemTime,
    ) -> Result<Action, kube::Error> {
        let regarding = reference_to(cj);
        let spec = cj.spec.clone().unwrap_or_default();
        let tz = match spec.time_zone.as_deref() {
            None => TimeZone::system(),
            Some(name) => match TimeZone::get(name) {
                Ok(tz) => tz,
                Err(_) => {
                    self.recorder.event(
                        &regarding,
                        EventType::Warning,
                        "UnknownTimeZone",
                        "Schedule",
                        &format!("invalid timeZone: {name:?}: unknown time zone {name}"),
                    );
                    return Ok(Action::Done);
                }
            },
        };
        let parsed = match Schedule::parse(&spec.schedule) {
            Ok(parsed) => parsed,
            Err(error) => {
                self.recorder.event(
                    &regarding,
                    EventType::Warning,
                    "UnparseableSchedule",
                    "Schedule",
                    &format!("unparseable schedule: {:?} : {error}", spec.schedule),
                );
                return Ok(Action::Done);
            }
        };
        if spec.suspend.unwrap_or(false) {
            return Ok(Action::Done);
        }
        let now_ts = timestamp(now);
        let earliest = status
            .last_schedule_time
            .as_ref()
            .or(cj.metadata.creation_timestamp.as_ref())
            .map(|t| t.0)
            .unwrap_or(now_ts);
        let next_look = || {
            schedule::next_schedule_time_duration(&parsed, &tz, earliest, now_ts)
                .and_then(|d| Duration::try_from(d).ok())
                .map_or(Action::Done, Action::RequeueAfter)
        };
        let found = match schedule::most_recent_schedule_time(
            &parsed,
            &tz,
            earliest,
            now_ts,
            spec.starting_deadline_seconds,
        ) {
            Ok(found) => found,
            Err(error) => {
                self.recorder.event(
                    &regarding,
                    EventType::Warning,
                    "InvalidSchedule",
                    "Schedule",
                    &format!("invalid schedule: {} : {error}", spec.schedule),
                );
                return Ok(Action::Done);
            }
        };
        if found.too_many_missed {
            self.recorder.event(&regarding, EventType::Warning, "TooManyMissedTimes", "Schedule", &format!("too many missed start times: {}. Set or decrease .spec.startingDeadlineSeconds or check clock skew", found.missed));
        }
        let Some(scheduled) = found.most_recent else {
            return Ok(next_look());
        };
        if let Some(deadline) = spec.starting_deadline_seconds
            && scheduled + jiff::SignedDuration::from_secs(deadline) < now_ts
        {
            self.recorder.event(
                &regarding,
                EventType::Warning,
                "MissSchedule",
                "Schedule",
                &format!(
                    "Missed scheduled time to start a job: {}",
                    scheduled
                        .to_zoned(tz.clone())
                        .strftime("%a, %d %b %Y %H:%M:%S %z")
                ),
            );
            return Ok(next_look());
        }
        let name = format!("{}-{}", cj.name_any(), scheduled.as_second() / 60);
        if jobs.iter().any(|j| j.name_any() == name) {
            return Ok(next_look());
        }
        let running = status.active.iter().flatten().count();
        match spec.concurrency_policy.as_deref() {
            Some("Forbid") if running > 0 => {
                self.recorder.event(&regarding, EventType::Normal, "JobAlreadyActive", "Schedule", "Not starting job because prior execution is running and concurrency policy is Forbid");
                return Ok(next_look());
            }
            Some("Replace") if running > 0 => {
                for active in status.active.clone().into_iter().flatten() {
                    let Some(job_name) = active.name.clone() else {
                        continue;
                    };
                    match Api::<Job>::namespaced(
                        self.ctx.client.clone(),
                        cj.metadata.namespace.as_deref().unwrap_or_default(),
                    )
                    .delete(&job_name, &DeleteParams::background())
                    .await
                    {
                        Ok(_) => self.recorder.event(
                            &regarding,
                            EventType::Normal,
                            "SuccessfulDelete",
                            "Delete",
                            &format!("Deleted job {job_name}"),
                        ),
                        Err(e) if is_status(&e, 404) => {}
                        Err(e) => return Err(e),
                    }
                    status
                        .active
                        .get_or_insert_default()
                        .retain(|r| r.uid != active.uid);
                }
            }
            _ => {}
        }
        let template = spec.job_template.clone();
        let meta = template.metadata.unwrap_or_default();
        let mut job = Job {
            spec: template.spec,
            ..Job::default()
        };
        job.metadata.name = Some(name.clone());
        job.metadata.namespace = cj.metadata.namespace.clone();
        job.metadata.labels = meta.labels;
        let mut annotations = meta.annotations.unwrap_or_default();
        annotations.insert(
            SCHEDULED_TIMESTAMP.into(),
            scheduled_timestamp(scheduled, spec.time_zone.as_ref().map(|_| &tz)),
        );
        job.metadata.annotations = Some(annotations);
        job.metadata.owner_references = controller_reference(cj).map(|r| vec![r]);
        let created = match Api::<Job>::namespaced(
            self.ctx.client.clone(),
            cj.metadata.namespace.as_deref().unwrap_or_default(),
        )
        .create(&PostParams::default(), &job)
        .await
        {
            Ok(created) => created,
            // Made already (the cache is behind): the next change brings it.
            Err(e) if is_status(&e, 409) => return Ok(next_look()),
            Err(e) => {
                self.recorder.event(
                    &regarding,
                    EventType::Warning,
                    "FailedCreate",
                    "Create",
                    &format!("Error creating job: {}", failure_message(&e)),
                );
                return Err(e);
            }
        };
        self.recorder.event(
            &regarding,
            EventType::Normal,
            "SuccessfulCreate",
            "Create",
            &format!("Created job {name}"),
        );
        status
            .active
            .get_or_insert_default()
            .push(job_reference(&created));
        status.last_schedule_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            scheduled,
        ));
        // Look again from the time just scheduled.
        Ok(
            schedule::next_schedule_time_duration(&parsed, &tz, scheduled, now_ts)
                .and_then(|d| Duration::try_from(d).ok())
                .map_or(Action::Done, Action::RequeueAfter),
        )
    }

    /// Deletes the oldest finished Jobs beyond the history limits
    /// (successful 3, failed 1 by default).
    async fn cleanup(
        &self,
        cj: &CronJob,
        jobs: &[Arc<Job>],
        status: &CronJobStatus,
        spec: &k8s_openapi::api::batch::v1::CronJobSpec,
    ) -> Result<(), kube::Error> {
        let regarding = reference_to(cj);
        for (outcome, limit) in [
            ("Complete", spec.successful_jobs_history_limit.unwrap_or(3)),
            ("Failed", spec.failed_jobs_history_limit.unwrap_or(1)),
        ] {
            let mut finished: Vec<&Arc<Job>> = jobs
                .iter()
                .filter(|j| {
                    job_finished(j) == Some(outcome) && j.metadata.deletion_timestamp.is_none()
                })
                .filter(|j| {
                    !status
                        .active
                        .iter()
                        .flatten()
                        .any(|r| r.uid == j.metadata.uid)
                })
                .collect();
            let excess = finished.len().saturating_sub(limit.max(0) as usize);
            if excess == 0 {
                continue;
            }
            finished.sort_by_key(|j| {
                j.status
                    .as_ref()
                    .and_then(|s| s.start_time.clone())
                    .map(|t| t.0)
                    .or(j.metadata.creation_timestamp.as_ref().map(|t| t.0))
            });
            for job in finished.into_iter().take(excess) {
                match Api::<Job>::namespaced(
                    self.ctx.client.clone(),
                    job.metadata.namespace.as_deref().unwrap_or_default(),
                )
                .delete(&job.name_any(), &DeleteParams::background())
                .await
                {
                    Ok(_) => self.recorder.event(
                        &regarding,
                        EventType::Normal,
                        "SuccessfulDelete",
                        "Delete",
                        &format!("Deleted job {}", job.name_any()),
                    ),
                    Err(e) if is_status(&e, 404) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
}
