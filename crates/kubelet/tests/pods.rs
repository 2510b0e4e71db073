//! The pod workers on the in-process control plane with the fake runtime
//! (no root, no containerd): pods bound to the node get a sandbox and
//! their containers and report Running with their IP; crashing containers
//! restart with back-off; deleted pods are stopped with their grace
//! period and finally deleted; orphans are removed; a pod that never
//! restarts ends Succeeded or Failed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use rudder_harness::{ControlPlane, Identity, eventually};
use rudder_kubelet::cri::Runtime;
use rudder_kubelet::pods::{self, Shared};
use rudder_kubelet::testing::FakeRuntime;
use rudder_runtime::{Informers, Recorder};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NODE: &str = "n1";
const IMAGE: &str = "rudder.local/busybox:1";

struct Node {
    plane: ControlPlane,
    runtime: Arc<FakeRuntime>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Node {
    async fn start() -> Node {
        let plane = ControlPlane::start().await;
        let runtime = Arc::new(FakeRuntime::new());
        runtime.add_image(IMAGE);
        let client = plane.client(&Identity::node(NODE));
        let clock = plane.clock();
        let shared = Arc::new(Shared {
            runtime: runtime.clone(),
            client: client.clone(),
            recorder: Recorder::new(client.clone(), "kubelet", NODE, clock.clone()),
            clock,
            backoff: Mutex::default(),
            log_root: "/nonexistent/logs".into(),
            pods_dir: plane.data_dir().join("pods"),
            memory_volumes: false,
            host_ip: "192.0.2.10".into(),
            runtime_name: "fake".into(),
            host_ports: tokio::sync::watch::Sender::new(Vec::new()),
            allocatable_cpu_millis: 2000,
            allocatable_memory: 4 << 30,
            tokens: Default::default(),
            host: Arc::new(rudder_host::testing::FakeHost::new()),
            dns: rudder_kubelet::pods::dns::Settings {
                cluster_dns: vec![[10, 43, 0, 10].into()],
                cluster_domain: "cluster.local".into(),
                host: Default::default(),
            },
        });
        // What the root CA publisher makes in every namespace, for the
        // kube-api-access volume admission adds to every pod.
        let root_ca: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": "CA"}
        }))
        .expect("config map");
        Api::<ConfigMap>::namespaced(plane.admin(), "default")
            .create(&PostParams::default(), &root_ca)
            .await
            .expect("kube-root-ca.crt");
        // And the account every pod runs as, which its projected token
        // is asked for.
        let account: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": "default"}})).expect("account");
        if let Err(error) = Api::<ServiceAccount>::namespaced(plane.admin(), "default")
            .create(&PostParams::default(), &account)
            .await
        {
            assert!(
                matches!(&error, kube::Error::Api(s) if s.code == 409),
                "{error}"
            );
        }
        let stop = CancellationToken::new();
        let (s, c) = (stop.clone(), client);
        let task = tokio::spawn(async move {
            let informers = Informers::new(c, s.child_token());
            pods::run(shared, &informers, NODE, s).await;
        });
        Node {
            plane,
            runtime,
            stop,
            task,
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.plane.admin(), "default")
    }

    async fn create(&self, name: &str, policy: &str, containers: serde_json::Value) -> Pod {
        self.create_json(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": NODE, "restartPolicy": policy, "containers": containers,
                     "terminationGracePeriodSeconds": 7}
        }))
        .await
    }

    async fn create_json(&self, pod: serde_json::Value) -> Pod {
        let pod: Pod = serde_json::from_value(pod).expect("pod");
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .expect("create")
    }

    async fn status_of(&self, name: &str, check: impl Fn(&Pod) -> bool) -> Pod {
        let api = self.pods();
        eventually(&format!("pod {name}"), Duration::from_secs(20), || {
            let api = api.clone();
            let check = &check;
            async move { api.get_opt(name).await.ok().flatten().filter(|p| check(p)) }
        })
        .await
    }

    async fn wait_no_sandboxes(&self, what: &str) {
        let runtime = self.runtime.clone();
        eventually(what, Duration::from_secs(20), || {
            let runtime = runtime.clone();
            async move {
                let sandboxes = runtime.list_pod_sandboxes(None).await.ok()?;
                sandboxes.is_empty().then_some(())
            }
        })
        .await;
    }

    async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
        self.plane.stop().await;
    }
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn container_state(pod: &Pod) -> serde_json::Value {
    let status = pod.status.clone().unwrap_or_default();
    match status.container_statuses.unwrap_or_default().first() {
        Some(first) => serde_json::to_value(first).expect("json"),
        None => serde_json::Value::Null,
    }
}

#[tokio::test]
async fn a_bound_pod_runs_and_reports_running_ready_with_its_ip() {
    let node = Node::start().await;
    node.create(
        "web",
        "Always",
        json!([{"name": "httpd", "image": IMAGE, "command": ["httpd", "-f"],
                "env": [{"name": "PORT", "value": "8080"}], "args": ["-p", "$(PORT)"]}]),
    )
    .await;
    let pod = node
        .status_of("web", |p| {
            phase(p) == "Running" && rudder_runtime::meta::pod::is_ready(p)
        })
        .await;
    let status = pod.status.clone().expect("status");
    assert!(
        status
            .pod_ip
            .as_deref()
            .is_some_and(|ip| ip.starts_with("10.42.0."))
    );
    assert_eq!(status.host_ip.as_deref(), Some("192.0.2.10"));
    assert!(status.start_time.is_some());
    assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));
    let c = container_state(&pod);
    assert_eq!(c["restartCount"], 0);
    assert!(
        c["containerID"]
            .as_str()
            .expect("id")
            .starts_with("fake://")
    );
    let running = node.runtime.running("httpd");
    assert_eq!(running.len(), 1, "one container, not duplicated");
    let config = node.runtime.config_of(&running[0].id).expect("config");
    assert_eq!(config.command, ["httpd", "-f"]);
    assert_eq!(config.args, ["-p", "8080"]);
    let calls = node.runtime.calls();
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("RunPodSandbox"))
            .count(),
        1,
        "{calls:?}"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_crashing_container_restarts_then_waits_in_crash_loop_back_off() {
    let node = Node::start().await;
    node.create("crash", "Always", json!([{"name": "app", "image": IMAGE}]))
        .await;
    node.status_of("crash", |p| phase(p) == "Running").await;
    let first = node.runtime.running("app").remove(0);
    node.runtime.exit(&first.id, 3);
    // The first restart is at once.
    let pod = node
        .status_of("crash", |p| {
            container_state(p)["restartCount"] == 1
                && container_state(p)["state"]["running"].is_object()
        })
        .await;
    assert_eq!(
        container_state(&pod)["lastState"]["terminated"]["exitCode"],
        3
    );
    let second = node.runtime.running("app").remove(0);
    node.runtime.exit(&second.id, 3);
    let pod = node
        .status_of("crash", |p| {
            container_state(p)["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        })
        .await;
    let message = container_state(&pod)["state"]["waiting"]["message"].clone();
    assert!(
        message
            .as_str()
            .is_some_and(|m| m
                .starts_with("back-off 10s restarting failed container=app pod=crash_default(")),
        "{message}"
    );
    assert!(
        node.runtime.running("app").is_empty(),
        "not restarted during the back-off"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_deleted_pod_is_stopped_with_its_grace_period_then_deleted() {
    let node = Node::start().await;
    node.create("bye", "Always", json!([{"name": "app", "image": IMAGE}]))
        .await;
    node.status_of("bye", |p| phase(p) == "Running").await;
    let id = node.runtime.running("app").remove(0).id;
    node.pods()
        .delete("bye", &DeleteParams::default())
        .await
        .expect("delete");
    let api = node.pods();
    eventually("the pod's final delete", Duration::from_secs(20), || {
        let api = api.clone();
        async move {
            api.get_opt("bye")
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        }
    })
    .await;
    assert!(
        node.runtime
            .calls()
            .contains(&format!("StopContainer {id} 7")),
        "stopped with the pod's grace period: {:?}",
        node.runtime.calls()
    );
    node.wait_no_sandboxes("the pod's containers removed").await;
    node.stop().await;
}

#[tokio::test]
async fn pods_that_never_restart_end_succeeded_or_failed() {
    let node = Node::start().await;
    node.create("ok", "Never", json!([{"name": "app", "image": IMAGE}]))
        .await;
    node.create("bad", "Never", json!([{"name": "job", "image": IMAGE}]))
        .await;
    node.status_of("ok", |p| phase(p) == "Running").await;
    node.status_of("bad", |p| phase(p) == "Running").await;
    node.runtime.exit(&node.runtime.running("app")[0].id, 0);
    node.runtime.exit(&node.runtime.running("job")[0].id, 1);
    let ok = node.status_of("ok", |p| phase(p) == "Succeeded").await;
    assert_eq!(
        container_state(&ok)["state"]["terminated"]["reason"],
        "Completed"
    );
    let bad = node.status_of("bad", |p| phase(p) == "Failed").await;
    assert_eq!(container_state(&bad)["state"]["terminated"]["exitCode"], 1);
    node.stop().await;
}

#[tokio::test]
async fn a_missing_image_is_err_image_pull() {
    let node = Node::start().await;
    node.create(
        "nope",
        "Always",
        json!([{"name": "app", "image": "rudder.local/none:1"}]),
    )
    .await;
    // ErrImagePull, and at once ImagePullBackOff (a status write wakes the
    // worker again): either may be what the API shows first.
    let pod = node
        .status_of("nope", |p| {
            let reason = container_state(p)["state"]["waiting"]["reason"].clone();
            reason == "ErrImagePull" || reason == "ImagePullBackOff"
        })
        .await;
    assert_eq!(phase(&pod), "Pending");
    // The next attempt waits out the image back-off.
    let pod = node
        .status_of("nope", |p| {
            container_state(p)["state"]["waiting"]["reason"] == "ImagePullBackOff"
        })
        .await;
    assert_eq!(
        container_state(&pod)["state"]["waiting"]["message"],
        "Back-off pulling image \"rudder.local/none:1\""
    );
    node.stop().await;
}

#[tokio::test]
async fn containers_of_pods_the_api_no_longer_has_are_removed() {
    let node = Node::start().await;
    // A sandbox left by an earlier agent for a pod that is gone.
    let orphan = rudder_kubelet::cri::PodSandboxConfig {
        metadata: Some(rudder_kubelet::cri::v1::PodSandboxMetadata {
            name: "gone".into(),
            uid: "uid-gone".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        labels: [("io.kubernetes.pod.uid".to_string(), "uid-gone".to_string())].into(),
        ..Default::default()
    };
    node.runtime.run_pod_sandbox(orphan).await.expect("sandbox");
    node.wait_no_sandboxes("the orphan removed").await;
    node.stop().await;
}

#[tokio::test]
async fn readiness_follows_the_readiness_probe_and_a_failed_liveness_probe_restarts() {
    let node = Node::start().await;
    node.runtime.set_exec_exit_code("ready-check", 1);
    node.create(
        "probed",
        "Always",
        json!([{"name": "app", "image": IMAGE,
                "readinessProbe": {"exec": {"command": ["ready-check"]}, "periodSeconds": 1, "failureThreshold": 1},
                "livenessProbe": {"exec": {"command": ["live-check"]}, "periodSeconds": 1, "failureThreshold": 2}}]),
    )
    .await;
    let pod = node
        .status_of("probed", |p| {
            phase(p) == "Running" && container_state(p)["state"]["running"].is_object()
        })
        .await;
    assert_eq!(
        container_state(&pod)["ready"],
        false,
        "not ready before a successful probe"
    );
    node.runtime.set_exec_exit_code("ready-check", 0);
    node.status_of("probed", rudder_runtime::meta::pod::is_ready)
        .await;
    node.runtime.set_exec_exit_code("ready-check", 1);
    node.status_of("probed", |p| !rudder_runtime::meta::pod::is_ready(p))
        .await;
    // Liveness fails twice: the container is stopped and started again.
    node.runtime.set_exec_exit_code("live-check", 1);
    let pod = node
        .status_of("probed", |p| container_state(p)["restartCount"] == 1)
        .await;
    assert_eq!(
        container_state(&pod)["lastState"]["terminated"]["exitCode"],
        143
    );
    node.stop().await;
}

#[tokio::test]
async fn a_pod_past_its_active_deadline_is_failed_deadline_exceeded() {
    let node = Node::start().await;
    node.create_json(json!({
        "metadata": {"name": "deadline"},
        "spec": {"nodeName": NODE, "activeDeadlineSeconds": 1,
                 "containers": [{"name": "app", "image": IMAGE}]}
    }))
    .await;
    let pod = node.status_of("deadline", |p| phase(p) == "Failed").await;
    let status = pod.status.expect("status");
    assert_eq!(status.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(
        status.message.as_deref(),
        Some("Pod was active on the node longer than the specified deadline")
    );
    assert!(
        node.runtime.running("app").is_empty(),
        "its containers are stopped"
    );
    node.stop().await;
}

#[tokio::test]
async fn hooks_run_after_start_and_before_stop() {
    let node = Node::start().await;
    node.create(
        "hooked",
        "Always",
        json!([{"name": "app", "image": IMAGE, "lifecycle": {
            "postStart": {"exec": {"command": ["post-start"]}},
            "preStop": {"exec": {"command": ["pre-stop"]}}}}]),
    )
    .await;
    node.status_of("hooked", |p| phase(p) == "Running").await;
    let id = node.runtime.running("app").remove(0).id;
    node.pods()
        .delete("hooked", &DeleteParams::default())
        .await
        .expect("delete");
    node.wait_no_sandboxes("the pod removed").await;
    let calls = node.runtime.calls();
    let at = |call: &str| calls.iter().position(|c| c == call);
    let started = at(&format!("StartContainer {id}")).expect("started");
    let post = at(&format!("ExecSync {id} post-start")).expect("postStart ran");
    let pre = at(&format!("ExecSync {id} pre-stop")).expect("preStop ran");
    let stopped = calls
        .iter()
        .position(|c| c.starts_with(&format!("StopContainer {id} ")))
        .expect("stopped");
    assert!(started < post && post < pre && pre < stopped, "{calls:?}");
    node.stop().await;
}

#[tokio::test]
async fn image_pull_secrets_are_the_pulls_credentials() {
    use k8s_openapi::api::core::v1::Secret;
    let node = Node::start().await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "regcred"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": "{\"auths\": {\"registry.test:5000\": {\"username\": \"robot\", \"password\": \"s3cret\"}}}"}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(node.plane.admin(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    node.create_json(json!({
        "metadata": {"name": "private"},
        "spec": {"nodeName": NODE, "imagePullSecrets": [{"name": "regcred"}],
                 "containers": [{"name": "app", "image": "registry.test:5000/app:1"}]}
    }))
    .await;
    // ErrImagePull, or already ImagePullBackOff (a status write wakes the
    // worker again): either may be what the API shows first.
    node.status_of("private", |p| {
        let reason = container_state(p)["state"]["waiting"]["reason"].clone();
        reason == "ErrImagePull" || reason == "ImagePullBackOff"
    })
    .await;
    let calls = node.runtime.calls();
    let robot = calls
        .iter()
        .position(|c| c == "PullImage registry.test:5000/app:1 as robot")
        .expect("pulled with the secret's credentials");
    let anonymous = calls
        .iter()
        .position(|c| c == "PullImage registry.test:5000/app:1")
        .expect("then without");
    assert!(robot < anonymous, "{calls:?}");
    node.stop().await;
}

#[tokio::test]
async fn sidecars_run_beside_the_containers_and_stop_after_them() {
    let node = Node::start().await;
    node.create_json(json!({
        "metadata": {"name": "sidecar"},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 3,
                 "initContainers": [{"name": "proxy", "image": IMAGE, "restartPolicy": "Always"}],
                 "containers": [{"name": "app", "image": IMAGE}]}
    }))
    .await;
    let pod = node
        .status_of("sidecar", |p| {
            phase(p) == "Running" && rudder_runtime::meta::pod::is_ready(p)
        })
        .await;
    let conditions = pod.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Initialized" && c.status == "True"),
        "{conditions:?}"
    );
    let proxy = node.runtime.running("proxy").remove(0).id;
    let app = node.runtime.running("app").remove(0).id;
    node.pods()
        .delete("sidecar", &DeleteParams::default())
        .await
        .expect("delete");
    node.wait_no_sandboxes("the pod removed").await;
    let calls = node.runtime.calls();
    let at = |id: &str| {
        calls
            .iter()
            .position(|c| c.starts_with(&format!("StopContainer {id} ")))
            .expect("stopped")
    };
    assert!(at(&app) < at(&proxy), "the sidecar stops last: {calls:?}");
    node.stop().await;
}

#[tokio::test]
async fn the_projected_token_is_a_token_bound_to_the_pod() {
    let node = Node::start().await;
    let pod = node
        .create("reader", "Always", json!([{"name": "app", "image": IMAGE}]))
        .await;
    node.status_of("reader", |p| phase(p) == "Running").await;
    let uid = pod.metadata.uid.clone().expect("uid");
    let volume = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .and_then(|v| v.iter().find(|v| v.name.starts_with("kube-api-access-")))
        .expect("the kube-api-access volume")
        .name
        .clone();
    let dir = node
        .plane
        .data_dir()
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~projected")
        .join(volume);
    let token = std::fs::read_to_string(dir.join("token")).expect("the token file");
    use base64::Engine;
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.split('.').nth(1).expect("a JWT"))
            .expect("base64url"),
    )
    .expect("claims");
    assert_eq!(claims["sub"], "system:serviceaccount:default:default");
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], json!(uid));
    assert_eq!(
        claims["kubernetes.io"]["warnafter"]
            .as_i64()
            .expect("warnafter")
            - claims["iat"].as_i64().expect("iat"),
        3607,
        "the admission's 3607 s, extended"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("namespace")).expect("namespace"),
        "default"
    );
    node.stop().await;
}

#[tokio::test]
async fn an_ephemeral_container_joins_its_target_and_is_never_restarted() {
    use kube::api::{Patch, PatchParams};
    use rudder_kubelet::cri::v1::NamespaceMode;
    let node = Node::start().await;
    node.create(
        "debugged",
        "Always",
        json!([{"name": "app", "image": IMAGE}]),
    )
    .await;
    node.status_of("debugged", |p| phase(p) == "Running").await;
    let app = node.runtime.running("app").remove(0).id;
    // What kubectl debug -it --target=app sends.
    let patch = json!({"spec": {"ephemeralContainers": [{
        "name": "debugger", "image": IMAGE, "targetContainerName": "app",
        "command": ["sh"], "stdin": true, "tty": true, "terminationMessagePolicy": "File"
    }]}});
    node.pods()
        .patch_ephemeral_containers(
            "debugged",
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await
        .expect("add the ephemeral container");
    let ephemeral = |p: &Pod| -> serde_json::Value {
        let statuses = p
            .status
            .clone()
            .and_then(|s| s.ephemeral_container_statuses);
        match statuses.unwrap_or_default().first() {
            Some(first) => serde_json::to_value(first).expect("json"),
            None => serde_json::Value::Null,
        }
    };
    let pod = node
        .status_of("debugged", |p| ephemeral(p)["state"]["running"].is_object())
        .await;
    let status = ephemeral(&pod);
    assert_eq!(status["name"], "debugger");
    assert_eq!(status["ready"], false);
    let debugger = node.runtime.running("debugger").remove(0).id;
    assert_eq!(status["containerID"], format!("fake://{debugger}"));
    let config = node.runtime.config_of(&debugger).expect("config");
    assert_eq!(config.command, ["sh"]);
    assert!(config.stdin && config.tty, "attachable");
    let namespaces = config
        .linux
        .and_then(|l| l.security_context)
        .and_then(|s| s.namespace_options)
        .expect("namespace options");
    assert_eq!(namespaces.pid, NamespaceMode::Target as i32);
    assert_eq!(namespaces.target_id, app);
    assert_eq!(phase(&pod), "Running");
    assert!(
        rudder_runtime::meta::pod::is_ready(&pod),
        "no say in readiness"
    );

    // Once it exits it stays exited, whatever the pod's restart policy.
    node.runtime.exit(&debugger, 0);
    let pod = node
        .status_of("debugged", |p| {
            ephemeral(p)["state"]["terminated"]["reason"] == "Completed"
        })
        .await;
    assert_eq!(ephemeral(&pod)["restartCount"], 0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(node.runtime.running("debugger").is_empty());
    let created = node
        .runtime
        .calls()
        .iter()
        .filter(|c| *c == "CreateContainer debugger")
        .count();
    assert_eq!(created, 1, "never started again");
    node.stop().await;
}
