//! A scheduler run from a `KubeSchedulerConfiguration` with two profiles:
//! each pod is scheduled by the profile its `schedulerName` names — the
//! default one spreads pods (LeastAllocated), a `packer` profile scoring
//! by MostAllocated alone stacks them — and a pod naming no profile is
//! left alone.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, PostParams};
use rudder_harness::{ControlPlane, eventually};
use rudder_scheduler::config::Configuration;
use rudder_scheduler::{Options, Scheduler};
use serde_json::json;
use support::unschedulable_message;
use tokio_util::sync::CancellationToken;

const CONFIG: &str = r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 2
profiles:
- schedulerName: default-scheduler
- schedulerName: packer
  plugins:
    score:
      disabled:
      - name: "*"
      enabled:
      - name: NodeResourcesFit
        weight: 1
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources:
        - name: cpu
          weight: 1
"#;

async fn add_node(client: &Client, name: &str) {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }))
    .expect("node");
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
}

fn pod(name: &str, scheduler: &str) -> Pod {
    pod_of(name, scheduler, "1")
}

fn pod_of(name: &str, scheduler: &str, cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "image": "busybox:1",
            "resources": {"requests": {"cpu": cpu}}}]},
    }))
    .expect("pod")
}

async fn bound(pods: &Api<Pod>, name: &str) -> String {
    eventually(
        &format!("{name} bound"),
        Duration::from_secs(20),
        || async {
            pods.get(name)
                .await
                .expect("get")
                .spec
                .and_then(|s| s.node_name)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_pod_is_scheduled_by_the_profile_it_names() {
    let plane = ControlPlane::start().await;
    let admin = plane.admin();
    let config = Configuration::parse(CONFIG).expect("config");
    let scheduler = Scheduler::new(
        plane.client(&rudder_harness::Identity::scheduler()),
        Options {
            lease: None,
            ..Options::default()
        },
    )
    .with_config(&config)
    .expect("profiles");
    let stop = CancellationToken::new();
    let _stop_on_drop = stop.clone().drop_guard();
    tokio::spawn(scheduler.run(stop.clone()));
    add_node(&admin, "n1").await;
    add_node(&admin, "n2").await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let create = |p: Pod| {
        let pods = pods.clone();
        async move {
            pods.create(&PostParams::default(), &p)
                .await
                .expect("create pod");
        }
    };
    create(pod("packed-0", "packer")).await;
    let first = bound(&pods, "packed-0").await;
    // MostAllocated: the packer's pods stack on the busier node.
    for i in 1..3 {
        let name = format!("packed-{i}");
        create(pod(&name, "packer")).await;
        assert_eq!(bound(&pods, &name).await, first, "{name} packed");
    }
    // LeastAllocated: the default profile's pod goes to the emptier one.
    create(pod("spread", "default-scheduler")).await;
    assert_ne!(bound(&pods, "spread").await, first);
    // Nobody's profile: left pending. Both ask for more than a node has:
    // a pod the scheduler tries is told so (PodScheduled=False) in its one
    // loop before it tries one queued after it, the probe.
    create(pod_of("orphan", "nobody", "8")).await;
    create(pod_of("probe", "packer", "8")).await;
    eventually("the probe tried", Duration::from_secs(20), || async {
        unschedulable_message(&pods.get("probe").await.expect("get"))
    })
    .await;
    let orphan = pods.get("orphan").await.expect("get");
    assert_eq!(unschedulable_message(&orphan), None, "not tried");
    assert_eq!(orphan.spec.and_then(|s| s.node_name), None);
}
