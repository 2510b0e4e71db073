//! ResourceQuota and LimitRange end to end on the in-process control
//! plane: the controller counts a quota's usage, admission charges and
//! refuses creates past it (403 `exceeded quota`), deletions and finished
//! pods are given back, and LimitRanges default and bound pods.

mod support;

use k8s_openapi::api::core::v1::{ConfigMap, LimitRange, Pod, ResourceQuota};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use support::{cluster, until};

fn pod(name: &str, cpu: Option<&str>) -> Pod {
    let resources = match cpu {
        Some(cpu) => {
            json!({"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"cpu": cpu, "memory": "64Mi"}})
        }
        None => json!({}),
    };
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": resources}]},
    }))
    .expect("pod")
}

async fn used(quotas: &Api<ResourceQuota>, name: &str) -> Value {
    let q = quotas.get(name).await.expect("quota");
    serde_json::to_value(q.status.and_then(|s| s.used)).expect("json")
}

fn refusal(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(status) => (status.code, status.message),
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_are_counted_charged_enforced_and_replenished() {
    let c = cluster().await;
    let quotas: Api<ResourceQuota> = Api::namespaced(c.admin.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.admin.clone(), "default");
    let config_maps: Api<ConfigMap> = Api::namespaced(c.admin.clone(), "default");
    // One pod before the quota: counted when the quota is.
    pods.create(&PostParams::default(), &pod("before", Some("100m")))
        .await
        .expect("pod");
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "compute"},
        "spec": {"hard": {"pods": "3", "requests.cpu": "500m", "limits.memory": "1Gi", "configmaps": "10", "count/deployments.apps": "1"}},
    }))
    .expect("quota");
    quotas
        .create(&PostParams::default(), &quota)
        .await
        .expect("quota");
    until("the quota is counted", || async {
        let used = used(&quotas, "compute").await;
        used["pods"] == "1" && used["requests.cpu"] == "100m" && used["limits.memory"] == "64Mi"
    })
    .await;
    let cms = used(&quotas, "compute").await["configmaps"].clone();
    assert!(cms.as_str().is_some(), "config maps counted: {cms}");
    assert_eq!(
        used(&quotas, "compute").await["count/deployments.apps"],
        "0"
    );

    // A pod that fits is charged at once, by admission.
    pods.create(&PostParams::default(), &pod("fits", Some("300m")))
        .await
        .expect("fits");
    let now = used(&quotas, "compute").await;
    assert_eq!(now["pods"], "2");
    assert_eq!(now["requests.cpu"], "400m");

    // One that does not is refused as upstream words it.
    let (code, message) = refusal(
        pods.create(&PostParams::default(), &pod("too-big", Some("200m")))
            .await
            .expect_err("exceeds"),
    );
    assert_eq!(code, 403);
    assert_eq!(
        message,
        "pods \"too-big\" is forbidden: exceeded quota: compute, requested: requests.cpu=200m, used: requests.cpu=400m, limited: requests.cpu=500m"
    );
    // A pod naming no cpu or memory misses what the quota must count.
    let (code, message) = refusal(
        pods.create(&PostParams::default(), &pod("bare", None))
            .await
            .expect_err("must specify"),
    );
    assert_eq!(code, 403);
    assert_eq!(
        message,
        "pods \"bare\" is forbidden: failed quota: compute: must specify limits.memory for: c; requests.cpu for: c"
    );

    // Deleting gives it back: the controller recounts.
    pods.delete("fits", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete");
    until("the deleted pod is given back", || async {
        used(&quotas, "compute").await["requests.cpu"] == "100m"
    })
    .await;
    pods.create(&PostParams::default(), &pod("now-fits", Some("200m")))
        .await
        .expect("fits after the delete");

    // Object counts: a ConfigMap is charged, past the hard limit refused.
    let tight: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "objects"},
        "spec": {"hard": {"configmaps": "0"}},
    }))
    .expect("quota");
    quotas
        .create(&PostParams::default(), &tight)
        .await
        .expect("quota");
    until("the object quota is counted", || async {
        quotas
            .get("objects")
            .await
            .expect("get")
            .status
            .and_then(|s| s.used)
            .is_some()
    })
    .await;
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "one"}})).expect("cm");
    let (code, message) = refusal(
        config_maps
            .create(&PostParams::default(), &cm)
            .await
            .expect_err("no room"),
    );
    assert_eq!(code, 403);
    assert!(
        message.starts_with("configmaps \"one\" is forbidden: exceeded quota: objects, requested: configmaps=1, used: configmaps="),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_ranges_default_and_bound_pods() {
    let c = cluster().await;
    let ranges: Api<LimitRange> = Api::namespaced(c.admin.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.admin.clone(), "default");
    let range: LimitRange = serde_json::from_value(json!({
        "metadata": {"name": "limits"},
        "spec": {"limits": [{
            "type": "Container",
            "max": {"cpu": "1"},
            "min": {"cpu": "50m"},
            "default": {"cpu": "500m"},
        }]},
    }))
    .expect("range");
    let created = ranges
        .create(&PostParams::default(), &range)
        .await
        .expect("range");
    // Defaulted as upstream: the default request from the default limit.
    let limit = &created.spec.expect("spec").limits[0];
    assert_eq!(
        serde_json::to_value(&limit.default_request).expect("json"),
        json!({"cpu": "500m"})
    );

    let defaulted = pods
        .create(&PostParams::default(), &pod("defaulted", None))
        .await
        .expect("pod");
    let resources =
        serde_json::to_value(&defaulted.spec.expect("spec").containers[0].resources).expect("json");
    assert_eq!(
        resources,
        json!({"limits": {"cpu": "500m"}, "requests": {"cpu": "500m"}})
    );
    assert_eq!(
        defaulted
            .metadata
            .annotations
            .expect("annotations")
            .get("kubernetes.io/limit-ranger")
            .map(String::as_str),
        Some("LimitRanger plugin set: cpu request for container c; cpu limit for container c")
    );

    let (code, message) = refusal(
        pods.create(&PostParams::default(), &pod("greedy", Some("2")))
            .await
            .expect_err("over max"),
    );
    assert_eq!(code, 403);
    assert_eq!(
        message,
        "pods \"greedy\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"
    );

    // A range that contradicts itself is invalid.
    let bad: LimitRange = serde_json::from_value(json!({
        "metadata": {"name": "bad"},
        "spec": {"limits": [{"type": "Container", "min": {"cpu": "2"}, "max": {"cpu": "1"}}]},
    }))
    .expect("range");
    let (code, message) = refusal(
        ranges
            .create(&PostParams::default(), &bad)
            .await
            .expect_err("invalid"),
    );
    assert_eq!(code, 422);
    assert!(
        message.contains("min value 2 is greater than max value 1"),
        "{message}"
    );
}
