//! Self-healing across a crash: `rudder server` killed (SIGKILL) in the
//! middle of a Deployment's rollout and started again on the same data
//! finishes the rollout with exactly the replicas asked for — no pod
//! created twice, none left behind. The harness's stand-in kubelet plays
//! the nodes.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const REPLICAS: i32 = 30;

struct Running {
    child: Child,
    client: kube::Client,
    stop: CancellationToken,
}

async fn start(data: &Path, port: u16) -> Running {
    let child = rudder_apiserver::testing::spawn_server(
        Path::new(env!("CARGO_BIN_EXE_rudder")),
        data,
        port,
    )
    .expect("start rudder server");
    let client =
        rudder_apiserver::testing::connect(&data.join("kubeconfig.yaml"), Duration::from_secs(30))
            .await
            .expect("ready");
    let stop = CancellationToken::new();
    tokio::spawn(rudder_harness::kubelet::play_nodes(
        client.clone(),
        rudder_runtime::clock::system(),
        rudder_harness::kubelet::all_ready(),
        stop.clone(),
    ));
    Running {
        child,
        client,
        stop,
    }
}

fn rolled_out(d: &Deployment) -> bool {
    let s = d.status.clone().unwrap_or_default();
    s.observed_generation >= d.metadata.generation
        && s.replicas == Some(REPLICAS)
        && s.updated_replicas == Some(REPLICAS)
        && s.available_replicas == Some(REPLICAS)
}

async fn wait_for(what: &str, within: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_cut_by_a_crash_finishes_after_a_restart_without_extra_pods() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let port = rudder_apiserver::testing::free_port().expect("a free port");
    let mut server = start(&data, port).await;
    let deployments: Api<Deployment> = Api::namespaced(server.client.clone(), "default");
    // minReadySeconds makes each step of the rollout wait 1 s: time to cut it.
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": REPLICAS, "minReadySeconds": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}}
    }))
    .expect("deployment");
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("create");
    wait_for("the first rollout", Duration::from_secs(60), async || {
        rolled_out(&deployments.get("web").await.expect("get"))
    })
    .await;
    deployments
        .patch("web", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}}})))
        .await
        .expect("new image");
    wait_for(
        "the rollout under way",
        Duration::from_secs(60),
        async || {
            let s = deployments
                .get("web")
                .await
                .expect("get")
                .status
                .unwrap_or_default();
            s.updated_replicas.unwrap_or(0) > 0 && s.updated_replicas.unwrap_or(0) < REPLICAS
        },
    )
    .await;
    // Cut it: no clean shutdown, no released Lease.
    server.stop.cancel();
    server.child.kill().expect("kill");
    server.child.wait().expect("reap");

    server = start(&data, port).await;
    let deployments: Api<Deployment> = Api::namespaced(server.client.clone(), "default");
    // The new leader waits out the old Lease (15 s) before the controllers run.
    wait_for(
        "the rollout to finish after the restart",
        Duration::from_secs(120),
        async || rolled_out(&deployments.get("web").await.expect("get")),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods: Vec<Pod> = Api::<Pod>::namespaced(server.client.clone(), "default")
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    assert_eq!(
        pods.len() as i32,
        REPLICAS,
        "exactly the replicas asked for"
    );
    assert!(
        pods.iter().all(|p| p
            .spec
            .as_ref()
            .is_some_and(|s| s.containers[0].image.as_deref() == Some("busybox:2"))),
        "all of the new template"
    );
    server.stop.cancel();
    let _ = server.child.kill();
    let _ = server.child.wait();
}
