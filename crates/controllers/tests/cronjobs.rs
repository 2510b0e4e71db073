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
    api.create(&PostParams::default(), &cj)
        .await
        .expect("create");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        jobs(&c.admin).await.is_empty(),
        "nothing before the first minute"
    );
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

    // Suspended: the next minute starts nothing.
    api.patch(
        "tick",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": true}})),
    )
    .await
    .expect("suspend");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before: Vec<String> = jobs(&c.admin).await.iter().map(|j| j.name_any()).collect();
    clock.advance(Duration::from_secs(60));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after: Vec<String> = jobs(&c.admin).await.iter().map(|j| j.name_any()).collect();
    assert_eq!(before, after, "no job while suspended");
}
