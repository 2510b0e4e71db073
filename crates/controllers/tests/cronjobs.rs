//! The CronJob controller on a fake clock the test advances: a Job per
//! schedule time, named by its minute, with the scheduled-timestamp
//! annotation; history limits; suspend; an unparseable time zone.

mod support;

use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use support::{cluster_with_fake_clock, until};

async fn jobs(client: &Client) -> Vec<Job> {
    Api::<Job>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
}

fn complete(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cronjob_starts_a_job_each_minute_and_keeps_its_history_limit() {
    let c = cluster_with_fake_clock(rudder_harness::kubelet::jobs_succeed()).await;
    let clock = c.plane.fake_clock().expect("fake");
    let api: Api<CronJob> = Api::namespaced(c.admin.clone(), "default");
    let cj: CronJob = serde_json::from_value(json!({
        "metadata": {"name": "tick"},
        "spec": {"schedule": "* * * * *", "successfulJobsHistoryLimit": 2, "timeZone": "Etc/UTC",
            "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox"}]}}}}}
    }))
    .expect("cronjob");
    let created = api
        .create(&PostParams::default(), &cj)
        .await
        .expect("create");
    let first_minute = created
        .metadata
        .creation_timestamp
        .as_ref()
        .expect("created")
        .0
        .as_second()
        / 60
        + 1;
    let mut seen: Vec<String> = Vec::new();
    for run in 1..=3usize {
        clock.advance(Duration::from_secs(60));
        let fresh = rudder_harness::eventually(
            &format!("run {run} completes"),
            Duration::from_secs(30),
            || async {
                let all = jobs(&c.admin).await;
                let fresh = all
                    .iter()
                    .find(|j| complete(j) && !seen.contains(&j.name_any()))?;
                (all.len() == run.min(2) && all.iter().all(complete)).then(|| fresh.name_any())
            },
        )
        .await;
        if run == 1 {
            // Nothing before the first minute: the one Job is that minute's.
            assert_eq!(fresh, format!("tick-{first_minute}"));
        }
        seen.push(fresh);
    }
    let all = jobs(&c.admin).await;
    assert_eq!(all.len(), 2, "the oldest successful job was deleted");
    for job in &all {
        let minutes: i64 = job
            .name_any()
            .strip_prefix("tick-")
            .and_then(|m| m.parse().ok())
            .expect("named by minute");
        let stamp = job
            .annotations()
            .get("batch.kubernetes.io/cronjob-scheduled-timestamp")
            .cloned()
            .expect("annotated");
        let at: jiff::Timestamp = stamp.parse().expect("a timestamp");
        assert_eq!(at.as_second() / 60, minutes);
        assert_eq!(job.owner_references()[0].kind, "CronJob");
    }
    until("the status says when it last ran and succeeded", || async {
        let s = api
            .get("tick")
            .await
            .expect("get")
            .status
            .unwrap_or_default();
        s.last_schedule_time.is_some() && s.last_successful_time.is_some() && s.active.is_none()
    })
    .await;

    // Suspended, keeping one finished Job fewer: history is cleaned up at
    // every sync, suspended or not, so once the oldest Job is gone the
    // controller has the suspended spec.
    let scheduled = |cj: CronJob| cj.status.and_then(|s| s.last_schedule_time);
    let last = scheduled(api.get("tick").await.expect("get"));
    api.patch(
        "tick",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": true, "successfulJobsHistoryLimit": 1}})),
    )
    .await
    .expect("suspend");
    until("one finished job kept", || async {
        jobs(&c.admin).await.len() == 1
    })
    .await;
    // The next minute passes: a Job would be due.
    clock.advance(Duration::from_secs(60));
    // A change made after it: once its cleanup shows, the controller has
    // synced past the due time, suspended. A Job started then would have
    // been made before that cleanup, and its time written as the last
    // scheduled one.
    api.patch(
        "tick",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"successfulJobsHistoryLimit": 0}})),
    )
    .await
    .expect("keep none");
    until("the last finished job cleaned up", || async {
        !jobs(&c.admin)
            .await
            .iter()
            .any(|j| seen.contains(&j.name_any()))
    })
    .await;
    let left: Vec<String> = jobs(&c.admin).await.iter().map(|j| j.name_any()).collect();
    assert_eq!(left, Vec::<String>::new(), "no job while suspended");
    assert_eq!(
        scheduled(api.get("tick").await.expect("get")),
        last,
        "nothing scheduled while suspended"
    );
}
