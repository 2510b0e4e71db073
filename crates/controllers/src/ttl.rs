//! The TTL-after-finished controller (upstream's
//! `pkg/controller/ttlafterfinished`): a finished Job with
//! `ttlSecondsAfterFinished` is deleted (in the foreground, so its pods go
//! first) that long after it finished.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Preconditions, PropagationPolicy};
use rudder_runtime::controller::Action;
use rudder_runtime::informer::{Store, key_of};
use rudder_runtime::{Change, WorkQueue};
use tokio_util::sync::CancellationToken;

use crate::Context;
use crate::is_status;

/// When a Job finished: its Complete or Failed condition's time.
pub fn finished_at(job: &Job) -> Option<SystemTime> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| SystemTime::from(t.0))
}

/// When the Job is due to go, if it has a TTL and finished.
pub fn expires_at(job: &Job) -> Option<SystemTime> {
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?;
    Some(finished_at(job)? + Duration::from_secs(ttl.max(0) as u64))
}

struct Controller {
    ctx: Arc<Context>,
    jobs: Store<Job>,
    queue: WorkQueue<String>,
}

/// Runs the TTL-after-finished controller until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let jobs = ctx.informers.typed::<Job>();
    let mut changes = jobs.subscribe();
    let c = Arc::new(Controller {
        jobs: jobs.store(),
        queue: WorkQueue::new(ctx.clock.clone()),
        ctx: ctx.clone(),
    });
    jobs.wait_synced().await;
    let enqueue = {
        let c = c.clone();
        move |job: &Job| {
            if expires_at(job).is_some() && job.metadata.deletion_timestamp.is_none() {
                c.queue.add(key_of(job));
            }
        }
    };
    c.jobs.list().iter().for_each(|j| enqueue(j));
    let watch = {
        let (c, stop) = (c.clone(), stop.clone());
        async move {
            while let Some(change) = changes.next_until(&stop).await {
                match change {
                    Change::Applied { new, .. } => enqueue(&new),
                    Change::Deleted(_) => {}
                    Change::Resync => c.jobs.list().iter().for_each(|j| enqueue(j)),
                }
            }
        }
    };
    crate::serve(
        "ttl-after-finished",
        c.clone(),
        c.queue.clone(),
        ctx.options.ttl_workers,
        None,
        watch,
        stop,
        |c, key| async move { c.sync(&key).await },
    )
    .await;
}

impl Controller {
    async fn sync(&self, key: &str) -> Result<Action, kube::Error> {
        let Some(job) = self.jobs.get(key) else {
            return Ok(Action::Done);
        };
        let Some(expires) = expires_at(&job) else {
            return Ok(Action::Done);
        };
        let now = self.ctx.clock.now();
        if let Ok(left) = expires.duration_since(now)
            && !left.is_zero()
        {
            return Ok(Action::RequeueAfter(left));
        }
        // Upstream reads it live before deleting: the TTL may have changed.
        let api: Api<Job> = Api::namespaced(
            self.ctx.client.clone(),
            job.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let Some(live) = api.get_opt(&job.name_any()).await? else {
            return Ok(Action::Done);
        };
        match expires_at(&live) {
            Some(at) if at <= now && live.metadata.deletion_timestamp.is_none() => {}
            Some(at) => {
                return Ok(Action::RequeueAfter(
                    at.duration_since(now).unwrap_or_default(),
                ));
            }
            None => return Ok(Action::Done),
        }
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                uid: live.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&live.name_any(), &params).await {
            Ok(_) => Ok(Action::Done),
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(Action::Done),
            Err(e) => Err(e),
        }
    }
}
