//! The Job controller against a real API server, the stand-in kubelet
//! finishing each pod as its `outcome` label (or its index) says:
//! completions and parallelism, Indexed Jobs, backoffLimit,
//! podFailurePolicy, deadlines, suspend and resume, successPolicy,
//! backoffLimitPerIndex and maxFailedIndexes, adoption and release of pods,
//! TTL after finished — and no finished pod kept by its finalizer; and,
//! with pods the stand-in holds terminating until it fails them on cue,
//! podReplacementPolicy and a podFailurePolicy deciding on terminal pods
//! only.

mod support;

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use rudder_harness::kubelet::{Hold, Outcome};
use serde_json::json;
use support::{cluster_with_kubelet, until};

const INDEX: &str = "batch.kubernetes.io/job-completion-index";
const FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";

/// Indexed pods finish as `outcome(index)` says.
fn by_index(outcome: fn(i32) -> Option<Outcome>) -> rudder_harness::kubelet::Decide {
    Arc::new(move |p: &Pod| {
        let index = p.metadata.labels.as_ref()?.get(INDEX)?.parse().ok()?;
        outcome(index)
    })
}

fn annotation<'a>(p: &'a Pod, key: &str) -> Option<&'a str> {
    p.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn status_of(j: &Job) -> k8s_openapi::api::batch::v1::JobStatus {
    j.status.clone().expect("status")
}

/// Pods finish as their `outcome` label says; `hang` ones never do.
fn by_label() -> rudder_harness::kubelet::Decide {
    Arc::new(
        |p: &Pod| match p.metadata.labels.as_ref()?.get("outcome")?.as_str() {
            "succeed" => Some(Outcome::Succeeded),
            "fail" => Some(Outcome::Failed(1)),
            "fail42" => Some(Outcome::Failed(42)),
            _ => None,
        },
    )
}

fn job(name: &str, outcome: &str, spec: serde_json::Value) -> Job {
    let mut object = json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"template": {"metadata": {"labels": {"outcome": outcome}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}
    });
    if let (Some(target), Some(extra)) = (object["spec"].as_object_mut(), spec.as_object()) {
        target.extend(extra.clone());
    }
    serde_json::from_value(object).expect("a job")
}

/// A Job of its own selector: pods labelled `app`.
fn selecting(name: &str, outcome: &str, app: &str, spec: serde_json::Value) -> Job {
    let mut j = job(name, outcome, spec);
    let spec = j.spec.as_mut().expect("spec");
    spec.manual_selector = Some(true);
    spec.selector =
        Some(serde_json::from_value(json!({"matchLabels": {"app": app}})).expect("selector"));
    let labels = spec
        .template
        .metadata
        .get_or_insert_default()
        .labels
        .get_or_insert_default();
    labels.insert("app".into(), app.into());
    j
}

fn condition(job: &Job, type_: &str) -> Option<(String, String)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

async fn pods_of(client: &Client, job: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .expect("list")
        .items
}

async fn finished(api: &Api<Job>, name: &str, type_: &str) -> Job {
    rudder_harness::eventually(
        &format!("{name} {type_}"),
        std::time::Duration::from_secs(30),
        || async {
            let j = api.get(name).await.expect("get");
            condition(&j, type_).is_some().then_some(j)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_its_completions_and_keeps_no_pod() {
    let c = cluster_with_kubelet(by_label()).await;
    let api: Api<Job> = Api::namespaced(c.admin.clone(), "default");
    api.create(
        &PostParams::default(),
        &job(
            "three",
            "succeed",
            json!({"completions": 3, "parallelism": 2}),
        ),
    )
    .await
    .expect("create");
    let j = finished(&api, "three", "Complete").await;
    let s = j.status.clone().expect("status");
    assert_eq!(
        (s.succeeded, s.failed, s.active),
        (Some(3), Some(0), Some(0))
    );
    assert!(s.completion_time.is_some() && s.start_time.is_some());
    assert_eq!(
        condition(&j, "SuccessCriteriaMet"),
        Some((
            "CompletionsReached".into(),
            "Reached expected number of succeeded pods".into()
        ))
    );
    until("every pod released", || async {
        pods_of(&c.admin, "three")
            .await
            .iter()
            .all(|p| p.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty()))
    })
    .await;
    assert_eq!(
        pods_of(&c.admin, "three").await.len(),
        3,
        "exactly three pods ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_indexed_job_completes_every_index() {
    let c = cluster_with_kubelet(by_label()).await;
    let api: Api<Job> = Api::namespaced(c.admin.clone(), "default");
    api.create(
        &PostParams::default(),
        &job(
            "indexed",
            "succeed",
            json!({"completions": 4, "parallelism": 4, "completionMode": "Indexed"}),
        ),
    )
    .await
    .expect("create");
    let j = finished(&api, "indexed", "Complete").await;
    assert_eq!(
        j.status
            .as_ref()
            .and_then(|s| s.completed_indexes.as_deref()),
        Some("0-3")
    );
    let mut indexes: Vec<String> = pods_of(&c.admin, "indexed")
        .await
        .iter()
        .map(|p| {
            let spec = p.spec.as_ref().expect("spec");
            let index = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("batch.kubernetes.io/job-completion-index"))
                .cloned()
                .expect("index");
            assert_eq!(
                spec.hostname.as_deref(),
                Some(format!("indexed-{index}").as_str())
            );
            assert!(
                spec.containers[0]
                    .env
                    .iter()
                    .flatten()
                    .any(|e| e.name == "JOB_COMPLETION_INDEX")
            );
            index
        })
        .collect();
    indexes.sort();
    assert_eq!(indexes, ["0", "1", "2", "3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_past_the_backoff_limit_or_a_fail_job_rule_fail_the_job() {
    let c = cluster_with_kubelet(by_label()).await;
    let api: Api<Job> = Api::namespaced(c.admin.clone(), "default");
    api.create(
        &PostParams::default(),
        &job("doomed", "fail", json!({"backoffLimit": 0})),
    )
    .await
    .expect("create");
    let j = finished(&api, "doomed", "Failed").await;
    assert_eq!(
        condition(&j, "Failed"),
        Some((
            "BackoffLimitExceeded".into(),
            "Job has reached the specified backoff limit".into()
        ))
    );
    assert!(condition(&j, "FailureTarget").is_some(), "announced first");
    assert_eq!(j.status.as_ref().and_then(|s| s.failed), Some(1));

    let policy = json!({"backoffLimit": 5, "podFailurePolicy": {"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}]}});
    api.create(&PostParams::default(), &job("policed", "fail42", policy))
        .await
        .expect("create");
    let j = finished(&api, "policed", "Failed").await;
    let (reason, message) = condition(&j, "Failed").expect("failed");
    assert_eq!(reason, "PodFailurePolicy");
    assert!(
        message.starts_with("Container main for pod default/policed-")
            && message.ends_with("failed with exit code 42 matching FailJob rule at index 0"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_and_suspension() {
    let c = cluster_with_kubelet(by_label()).await;
    let api: Api<Job> = Api::namespaced(c.admin.clone(), "default");
    api.create(
        &PostParams::default(),
        &job("slow", "hang", json!({"activeDeadlineSeconds": 1})),
    )
    .await
    .expect("create");
    let j = finished(&api, "slow", "Failed").await;
    assert_eq!(
        condition(&j, "Failed").map(|c| c.0).as_deref(),
        Some("DeadlineExceeded")
    );

    api.create(
        &PostParams::default(),
        &job("paused", "succeed", json!({"suspend": true})),
    )
    .await
    .expect("create");
    let j = finished(&api, "paused", "Suspended").await;
    assert_eq!(
        condition(&j, "Suspended").map(|c| c.0).as_deref(),
        Some("JobSuspended")
    );
    assert!(
        pods_of(&c.admin, "paused").await.is_empty(),
        "no pods while suspended"
    );
    api.patch(
        "paused",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": false}})),
    )
    .await
    .expect("resume");
    let j = finished(&api, "paused", "Complete").await;
    let suspended = j
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Suspended"))
        .cloned()
        .expect("kept");
    assert_eq!(
        (suspended.status.as_str(), suspended.reason.as_deref()),
        ("False", Some("JobResumed"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_goes_after_its_ttl() {
    let c = support::cluster_with_fake_clock(by_label()).await;
    let clock = c.plane.fake_clock().expect("fake");
    let api: Api<Job> = Api::namespaced(c.admin.clone(), "default");
    let mark = clock.mark();
    api.create(
        &PostParams::default(),
        &job("brief", "succeed", json!({"ttlSecondsAfterFinished": 30})),
    )
    .await
    .expect("create");
    let j = finished(&api, "brief", "Complete").await;
    let done = j
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Complete"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| std::time::SystemTime::from(t.0))
        .expect("finished at");
    // The TTL controller has looked at the finished Job once it waits
    // (its queue asleep) until 30 s after the Job finished.
    rudder_harness::asleep_until(&clock, done + std::time::Duration::from_secs(30), mark).await;
    assert!(
        api.get_opt("brief").await.expect("get").is_some(),
        "kept until its TTL"
    );
    clock.advance(std::time::Duration::from_secs(31));
    until("the job and its pods are gone", || async {
        api.get_opt("brief").await.expect("get").is_none()
            && pods_of(&c.admin, "brief").await.is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_policy_completes_an_indexed_job_early() {
    // Index 0 succeeds, the others would run for ever.
    let c = cluster_with_kubelet(by_index(|i| (i == 0).then_some(Outcome::Succeeded))).await;
    let api: Api<Job> = Api::namespaced(c.admin.clone(), "default");
    let spec = json!({"completions": 4, "parallelism": 4, "completionMode": "Indexed",
        "successPolicy": {"rules": [{"succeededIndexes": "1-3"}, {"succeededIndexes": "0-2", "succeededCount": 1}]}});
    api.create(&PostParams::default(), &job("leader", "hang", spec))
        .await
        .expect("create");
    let j = finished(&api, "leader", "Complete").await;
    let matched = Some(("SuccessPolicy".into(), "Matched rules at index 1".into()));
    assert_eq!(condition(&j, "SuccessCriteriaMet"), matched);
    assert_eq!(condition(&j, "Complete"), matched);
    let s = status_of(&j);
    assert_eq!(s.completed_indexes.as_deref(), Some("0"));
    // The pods stopped were not failures.
    assert_eq!(
        (s.succeeded, s.failed, s.active),
        (Some(1), Some(0), Some(0))
    );
    assert!(s.completion_time.is_some());
    // Complete only once they were gone.
    let left = pods_of(&c.admin, "leader").await;
    assert_eq!(left.len(), 1, "only the pod that succeeded is left");
    assert_eq!(annotation(&left[0], INDEX), Some("0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_out_of_retries_fails_alone_and_then_the_job() {
    // Index 1 always fails; its retry waits out a 10 s backoff on the fake clock.
    let c = support::cluster_with_fake_clock(by_index(|i| {
        Some(if i == 1 {
            Outcome::Failed(1)
        } else {
            Outcome::Succeeded
        })
    }))
    .await;
    let clock = c.plane.fake_clock().expect("fake");
    let api: Api<Job> = Api::namespaced(c.admin.clone(), "default");
    let spec = json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed",
        "backoffLimitPerIndex": 1});
    let mark = clock.mark();
    api.create(&PostParams::default(), &job("flaky", "succeed", spec))
        .await
        .expect("create");
    let j: Job = api.get("flaky").await.expect("get");
    assert_eq!(
        j.spec.as_ref().and_then(|s| s.backoff_limit),
        Some(i32::MAX),
        "backoffLimit defaults to the largest with backoffLimitPerIndex"
    );
    until(
        "the other indexes succeed and index 1 fails once",
        || async {
            let s = api
                .get("flaky")
                .await
                .expect("get")
                .status
                .unwrap_or_default();
            let failed = pods_of(&c.admin, "flaky").await.iter().any(|p| {
                annotation(p, INDEX) == Some("1")
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
            });
            s.completed_indexes.as_deref() == Some("0,2") && failed
        },
    )
    .await;
    let failed_at = pods_of(&c.admin, "flaky")
        .await
        .iter()
        .filter(|p| annotation(p, INDEX) == Some("1"))
        .find_map(|p| {
            let status = p.status.as_ref()?.container_statuses.as_ref()?;
            let finished = status[0]
                .state
                .as_ref()?
                .terminated
                .as_ref()?
                .finished_at
                .as_ref()?;
            Some(std::time::SystemTime::from(finished.0))
        })
        .expect("index 1 finished");
    // A second before index 1's 10 s backoff is over (a retry of a write
    // that conflicted, waiting on the fake clock, has run by then), the Job
    // controller waits, its queue asleep, until the backoff's end.
    let over = failed_at + std::time::Duration::from_secs(10);
    let now = rudder_api::time::Clock::now(&*clock);
    clock.advance(
        (over - std::time::Duration::from_secs(1))
            .duration_since(now)
            .expect("forward"),
    );
    rudder_harness::eventually(
        "the Job controller waiting out the backoff (or retrying)",
        std::time::Duration::from_secs(30),
        || async {
            let waiting = clock.sleepers_since(mark).contains(&over);
            (waiting || pods_of(&c.admin, "flaky").await.len() > 3).then_some(())
        },
    )
    .await;
    let j = api.get("flaky").await.expect("get");
    assert_eq!(status_of(&j).failed_indexes.as_deref(), Some(""));
    assert!(condition(&j, "FailureTarget").is_none());
    let pods = pods_of(&c.admin, "flaky").await;
    assert_eq!(pods.len(), 3, "no retry before the backoff");
    let failed = pods
        .iter()
        .find(|p| annotation(p, INDEX) == Some("1"))
        .expect("index 1");
    assert_eq!(annotation(failed, FAILURE_COUNT), Some("0"));
    assert!(
        failed
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "batch.kubernetes.io/job-tracking"),
        "the failure is kept until its replacement exists"
    );
    clock.advance(std::time::Duration::from_secs(2));
    let j = finished(&api, "flaky", "Failed").await;
    assert_eq!(
        condition(&j, "Failed"),
        Some(("FailedIndexes".into(), "Job has failed indexes".into()))
    );
    let s = status_of(&j);
    assert_eq!(s.failed_indexes.as_deref(), Some("1"));
    assert_eq!((s.succeeded, s.failed), (Some(2), Some(2)));
    let mut tries: Vec<(String, String)> = pods_of(&c.admin, "flaky")
        .await
        .iter()
        .filter(|p| annotation(p, INDEX) == Some("1"))
        .map(|p| {
            assert!(p.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty()));
            let count = annotation(p, FAILURE_COUNT).unwrap_or_default().to_string();
            (
                count,
                p.status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default(),
            )
        })
        .collect();
    tries.sort();
    assert_eq!(
        tries,
        [
            ("0".to_string(), "Failed".to_string()),
            ("1".into(), "Failed".into())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_index_rule_past_max_failed_indexes_fails_the_job() {
    let c = cluster_with_kubelet(by_index(|i| (i == 2).then_some(Outcome::Failed(42)))).await;
    let api: Api<Job> = Api::namespaced(c.admin.clone(), "default");
    let spec = json!({"completions": 4, "parallelism": 4, "completionMode": "Indexed",
        "backoffLimitPerIndex": 3, "maxFailedIndexes": 0,
        "podFailurePolicy": {"rules": [
            {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [42]}}]}});
    api.create(&PostParams::default(), &job("strict", "hang", spec))
        .await
        .expect("create");
    let j = finished(&api, "strict", "Failed").await;
    let failure = Some((
        "MaxFailedIndexesExceeded".into(),
        "Job has exceeded the specified maximal number of failed indexes".into(),
    ));
    assert_eq!(condition(&j, "FailureTarget"), failure);
    assert_eq!(condition(&j, "Failed"), failure);
    let s = status_of(&j);
    assert_eq!(s.failed_indexes.as_deref(), Some("2"));
    assert_eq!(s.active, Some(0));
    let index_two = pods_of(&c.admin, "strict")
        .await
        .into_iter()
        .filter(|p| annotation(p, INDEX) == Some("2"))
        .count();
    assert_eq!(index_two, 1, "FailIndex: no retry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_the_selector_matches_are_adopted_and_relabelled_pods_released() {
    let c = cluster_with_kubelet(by_label()).await;
    let pods: Api<Pod> = Api::namespaced(c.admin.clone(), "default");
    let stray: Pod = serde_json::from_value(json!({
        "metadata": {"name": "stray", "labels": {"app": "batch", "outcome": "succeed"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &stray)
        .await
        .expect("create");
    until("the orphan succeeded", || async {
        pods.get("stray")
            .await
            .expect("get")
            .status
            .and_then(|s| s.phase)
            == Some("Succeeded".into())
    })
    .await;
    let api: Api<Job> = Api::namespaced(c.admin.clone(), "default");
    api.create(
        &PostParams::default(),
        &selecting(
            "adopter",
            "succeed",
            "batch",
            json!({"completions": 2, "parallelism": 1}),
        ),
    )
    .await
    .expect("create");
    let j = finished(&api, "adopter", "Complete").await;
    assert_eq!(status_of(&j).succeeded, Some(2));
    let stray = pods.get("stray").await.expect("get");
    let owner = stray.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(
        owner
            .iter()
            .map(|r| (r.kind.as_str(), r.name.as_str(), r.controller))
            .collect::<Vec<_>>(),
        [("Job", "adopter", Some(true))],
        "adopted"
    );
    assert!(
        stray
            .metadata
            .finalizers
            .as_ref()
            .is_none_or(|f| f.is_empty()),
        "counted and released"
    );
    let owned = pods
        .list(&ListParams::default().labels("app=batch"))
        .await
        .expect("list")
        .items;
    assert_eq!(
        owned.len(),
        2,
        "the orphan counted as one of the two completions"
    );

    // An orphan still carrying the tracking finalizer loses it.
    let leftover: Pod = serde_json::from_value(json!({
        "metadata": {"name": "leftover", "labels": {"app": "nobody"},
            "finalizers": ["batch.kubernetes.io/job-tracking"]},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &leftover)
        .await
        .expect("create");
    until("the orphan's finalizer is removed", || async {
        let p = pods.get("leftover").await.expect("get");
        p.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty())
    })
    .await;

    // A pod relabelled out of the selector is released and replaced.
    api.create(
        &PostParams::default(),
        &selecting(
            "keeper",
            "hang",
            "keep",
            json!({"parallelism": 1, "completions": 1}),
        ),
    )
    .await
    .expect("create");
    let first = rudder_harness::eventually(
        "a keeper pod",
        std::time::Duration::from_secs(30),
        || async {
            pods.list(&ListParams::default().labels("app=keep"))
                .await
                .expect("list")
                .items
                .into_iter()
                .next()
        },
    )
    .await;
    let name = first.metadata.name.clone().expect("name");
    pods.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "gone"}}})),
    )
    .await
    .expect("relabel");
    until("released and replaced", || async {
        let released = pods.get(&name).await.expect("get");
        let free = released
            .metadata
            .owner_references
            .as_ref()
            .is_none_or(|r| r.is_empty())
            && released
                .metadata
                .finalizers
                .as_ref()
                .is_none_or(|f| f.is_empty());
        let replaced = pods
            .list(&ListParams::default().labels("app=keep"))
            .await
            .expect("list")
            .items
            .len()
            == 1;
        free && replaced
    })
    .await;
}

/// Pods labelled `outcome: held` run Ready and, once deleted, stay
/// terminating until `hold` fails them; the others as `by_label` says.
fn held_by_label(hold: Hold) -> rudder_harness::kubelet::Decide {
    let others = by_label();
    Arc::new(move |p: &Pod| {
        let label = p.metadata.labels.as_ref()?.get("outcome")?;
        if label == "held" {
            Some(Outcome::Held(hold.clone()))
        } else {
            others(p)
        }
    })
}

/// A Job of `held` pods bound to node n1: the Job controller counts a
/// deleted pod that never reached a node as failed at once.
fn held_job(name: &str, spec: serde_json::Value) -> Job {
    let mut j = job(name, "held", spec);
    let template = j.spec.as_mut().expect("spec").template.spec.as_mut();
    template.expect("pod spec").node_name = Some("n1".into());
    j
}

async fn add_node(client: &Client, name: &str) {
    let node: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("node");
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
}

/// The Job's pods not being deleted.
async fn live_pods(client: &Client, job: &str) -> Vec<Pod> {
    let mut pods = pods_of(client, job).await;
    pods.retain(|p| p.metadata.deletion_timestamp.is_none());
    pods
}

/// The Job's one running pod, once it is Ready and counted.
async fn running(api: &Api<Job>, client: &Client, job: &str) -> Pod {
    rudder_harness::eventually(
        &format!("{job}'s pod ready"),
        std::time::Duration::from_secs(30),
        || async {
            let s = api.get(job).await.expect("get").status.unwrap_or_default();
            let pods = live_pods(client, job).await;
            let ready = pods
                .iter()
                .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
            (s.active == Some(1) && s.ready == Some(1) && pods.len() == 1 && ready)
                .then(|| pods[0].clone())
        },
    )
    .await
}

/// Waits until the Job's status counts (active, terminating, failed).
async fn counted(api: &Api<Job>, job: &str, active: i32, terminating: i32, failed: i32) -> Job {
    rudder_harness::eventually(
        &format!("{job}: {active} active, {terminating} terminating, {failed} failed"),
        std::time::Duration::from_secs(30),
        || async {
            let j = api.get(job).await.expect("get");
            let s = j.status.clone().unwrap_or_default();
            (s.active == Some(active)
                && s.terminating == Some(terminating)
                && s.failed == Some(failed))
            .then_some(j)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_pod_replacement_policy_failed_a_pod_is_replaced_only_once_it_failed() {
    // On a fake clock: a failure's replacement waits out a 10 s backoff.
    let hold = Hold::new();
    let c = support::cluster_with_fake_clock(held_by_label(hold.clone())).await;
    let clock = c.plane.fake_clock().expect("fake");
    let backoff = std::time::Duration::from_secs(10);
    add_node(&c.admin, "n1").await;
    let api: Api<Job> = Api::namespaced(c.admin.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.admin.clone(), "default");
    api.create(
        &PostParams::default(),
        &held_job("patient", json!({"podReplacementPolicy": "Failed"})),
    )
    .await
    .expect("create");
    let old = running(&api, &c.admin, "patient").await.name_any();
    pods.delete(&old, &DeleteParams::default())
        .await
        .expect("delete");
    // Once the controller counts it terminating, it has decided: no
    // replacement while it is.
    let j = counted(&api, "patient", 0, 1, 0).await;
    assert!(condition(&j, "FailureTarget").is_none());
    let all = pods_of(&c.admin, "patient").await;
    assert_eq!(all.len(), 1, "no replacement while the old pod terminates");
    assert_eq!(
        all[0].status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    // Its containers stopped: Failed, counted, and replaced after the
    // failure backoff.
    hold.fail("default", &old, 137);
    counted(&api, "patient", 0, 0, 1).await;
    clock.advance(backoff);
    counted(&api, "patient", 1, 0, 1).await;
    let fresh = live_pods(&c.admin, "patient").await;
    assert_eq!(fresh.len(), 1);
    assert_ne!(fresh[0].name_any(), old, "a new pod");

    // The default, TerminatingOrFailed: the deleted pod counted failed at
    // once, and replaced (after the backoff) while it still terminates.
    api.create(&PostParams::default(), &held_job("eager", json!({})))
        .await
        .expect("create");
    let first = running(&api, &c.admin, "eager").await.name_any();
    pods.delete(&first, &DeleteParams::default())
        .await
        .expect("delete");
    counted(&api, "eager", 0, 1, 1).await;
    clock.advance(backoff);
    counted(&api, "eager", 1, 1, 1).await;
    let both = pods_of(&c.admin, "eager").await;
    assert_eq!(both.len(), 2, "the replacement runs beside it");
    hold.fail("default", &first, 137);
    counted(&api, "eager", 1, 0, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_failure_policy_judges_a_deleted_pod_only_once_it_failed() {
    let hold = Hold::new();
    let c = cluster_with_kubelet(held_by_label(hold.clone())).await;
    add_node(&c.admin, "n1").await;
    let api: Api<Job> = Api::namespaced(c.admin.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.admin.clone(), "default");
    // No failure allowed, but disruptions ignored; exit code 42 fails the
    // Job. (A podFailurePolicy replaces only Failed pods, as upstream.)
    let spec = json!({"backoffLimit": 0, "podFailurePolicy": {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}]}});
    api.create(&PostParams::default(), &held_job("judged", spec))
        .await
        .expect("create");
    let j = api.get("judged").await.expect("get");
    assert_eq!(
        j.spec.and_then(|s| s.pod_replacement_policy).as_deref(),
        Some("Failed"),
        "defaulted with a podFailurePolicy"
    );

    // Evicted: marked disrupted, then deleted.
    let evicted = running(&api, &c.admin, "judged").await.name_any();
    pods.patch_status(
        &evicted,
        &PatchParams::default(),
        &Patch::Strategic(
            json!({"status": {"conditions": [{"type": "DisruptionTarget",
            "status": "True", "reason": "EvictionByEvictionAPI"}]}}),
        ),
    )
    .await
    .expect("disrupted");
    pods.delete(&evicted, &DeleteParams::default())
        .await
        .expect("delete");
    // Terminating, it is neither a failure past the limit of 0 nor yet an
    // ignored one to replace.
    let j = counted(&api, "judged", 0, 1, 0).await;
    assert!(condition(&j, "FailureTarget").is_none());
    assert_eq!(pods_of(&c.admin, "judged").await.len(), 1, "not replaced");
    // Failed, still disrupted: ignored, so replaced and not counted.
    hold.fail("default", &evicted, 137);
    let j = counted(&api, "judged", 1, 0, 0).await;
    assert!(condition(&j, "FailureTarget").is_none(), "ignored");

    // Deleted again, no disruption: undecided while it terminates...
    let second = running(&api, &c.admin, "judged").await.name_any();
    pods.delete(&second, &DeleteParams::default())
        .await
        .expect("delete");
    let j = counted(&api, "judged", 0, 1, 0).await;
    assert!(condition(&j, "FailureTarget").is_none());
    assert_eq!(live_pods(&c.admin, "judged").await.len(), 0, "not replaced");
    // ... then its exit code 42 fails the Job.
    hold.fail("default", &second, 42);
    let j = finished(&api, "judged", "Failed").await;
    let (reason, message) = condition(&j, "Failed").expect("failed");
    assert_eq!(reason, "PodFailurePolicy");
    assert_eq!(
        message,
        format!(
            "Container main for pod default/{second} failed with exit code 42 matching FailJob rule at index 1"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminating_pod_does_not_make_a_running_one_surplus() {
    // A work queue (no completions) of three, replacing only Failed pods.
    let hold = Hold::new();
    let c = cluster_with_kubelet(held_by_label(hold.clone())).await;
    add_node(&c.admin, "n1").await;
    let api: Api<Job> = Api::namespaced(c.admin.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.admin.clone(), "default");
    api.create(
        &PostParams::default(),
        &held_job(
            "queue",
            json!({"parallelism": 3, "podReplacementPolicy": "Failed"}),
        ),
    )
    .await
    .expect("create");
    let three = rudder_harness::eventually(
        "three pods ready",
        std::time::Duration::from_secs(30),
        || async {
            let s = api
                .get("queue")
                .await
                .expect("get")
                .status
                .unwrap_or_default();
            let names: Vec<String> = live_pods(&c.admin, "queue")
                .await
                .iter()
                .map(|p| p.name_any())
                .collect();
            (s.ready == Some(3) && names.len() == 3).then_some(names)
        },
    )
    .await;
    let (gone, done, left) = (&three[0], &three[1], &three[2]);
    pods.delete(gone, &DeleteParams::default())
        .await
        .expect("delete");
    counted(&api, "queue", 2, 1, 0).await;
    // One succeeds (the test plays its kubelet): a work queue starts no
    // more pods and keeps those running — the terminating one does not
    // make the last running one surplus (upstream removes only active pods
    // beyond what it wants).
    pods.patch_status(
        done,
        &PatchParams::default(),
        &Patch::Strategic(
            json!({"status": {"phase": "Succeeded", "containerStatuses": [
            {"name": "main", "ready": false, "restartCount": 0, "image": "stand-in", "imageID": "",
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}}),
        ),
    )
    .await
    .expect("succeeded");
    // The pass that counts the success writes it last, after it has
    // created or deleted what it wanted.
    let j = rudder_harness::eventually(
        "the success counted",
        std::time::Duration::from_secs(30),
        || async {
            let j = api.get("queue").await.expect("get");
            (j.status.as_ref().and_then(|s| s.succeeded) == Some(1)).then_some(j)
        },
    )
    .await;
    assert!(
        condition(&j, "SuccessCriteriaMet").is_none(),
        "one still runs"
    );
    let last = pods.get(left).await.expect("get");
    assert!(
        last.metadata.deletion_timestamp.is_none(),
        "the running pod is kept"
    );
    assert_eq!(status_of(&j).active, Some(1));
    hold.fail("default", gone, 137);
    counted(&api, "queue", 1, 0, 1).await;
    let mut names: Vec<String> = pods_of(&c.admin, "queue")
        .await
        .iter()
        .map(|p| p.name_any())
        .collect();
    names.sort();
    let mut kept = vec![done.clone(), left.clone()];
    kept.sort();
    assert_eq!(names, kept, "the failed pod not replaced");
}
