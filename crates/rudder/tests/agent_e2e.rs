//! The whole one-machine cluster with real parts: `rudder server` with its
//! in-process agent driving a containerd of its own, runc and the CNI
//! plugins; real kubectl. A Deployment of three busybox httpd pods (the
//! image packed from Debian's busybox-static by `rudder images
//! pack-busybox`) runs, every pod answers HTTP on its pod IP from the
//! host, a deleted pod is replaced, and a crashing pod goes into
//! CrashLoopBackOff. Needs root (containers, network namespaces, routes):
//! fails otherwise, unless `RUDDER_SKIP_ROOT_TESTS=1` skips it knowingly.
//!
//! Nothing leaves the machine: the cluster CIDR is blackholed before the
//! agent starts anything, and the test talks only to loopback and to pod
//! IPs on its own bridge. Everything it made — containers, network
//! namespaces, mounts, the bridge and nftables table — is removed at the
//! end by `rudder killall`, even when it fails.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Kubectl;
use common::node::{Cluster, wait_for};

const BRIDGE: &str = "rudde2e0";
const CLUSTER_CIDR: &str = "10.42.240.0/20";
const IMAGE: &str = "rudder.local/busybox:1";

/// Debian's docker-registry on a loopback port, storing under the
/// cluster's directory; stopped on drop.
struct Registry(Child);

impl Registry {
    fn start(cluster: &Cluster, port: u16) -> Registry {
        let dir = cluster.data.parent().expect("dir").join("registry");
        std::fs::create_dir_all(&dir).expect("registry dir");
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.join("data").display()
            ),
        )
        .expect("registry config");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start docker-registry (Debian's docker-registry; scripts/setup --test installs it)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "docker-registry did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Registry(child)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET /index.html from `ip:port`; the body.
fn http_get(ip: &str, port: u16) -> Option<String> {
    http_get_path(ip, port, "/index.html")
}

/// GET `path` from `ip:port` over plain TCP; the body of a 200.
fn http_get_path(ip: &str, port: u16, path: &str) -> Option<String> {
    let address: SocketAddr = format!("{ip}:{port}").parse().ok()?;
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: pod\r\n\r\n").as_bytes())
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let ok = head.split_whitespace().nth(1) == Some("200");
    ok.then(|| body.trim_end().to_string())
}

/// `name ip phase` of every pod of the deployment `web`.
fn web_pods(k: &Kubectl<'_>) -> Vec<(String, String, String)> {
    let (ok, out) = k.run(
        &[
            "get", "pods", "-l", "app=web", "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.status.phase} {.metadata.deletionTimestamp}{\"\\n\"}{end}",
        ],
        None,
    );
    if !ok {
        return Vec::new();
    }
    out.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let name = words.next()?.to_string();
            let ip = words.next()?.to_string();
            let phase = words.next()?.to_string();
            // Terminating pods carry a fourth word.
            words.next().is_none().then_some((name, ip, phase))
        })
        .collect()
}

#[test]
fn a_deployment_runs_on_containerd_answers_on_its_pod_ips_and_replaces_a_deleted_pod() {
    if !common::require_root("agent_e2e") {
        return;
    }
    let mut cluster = Cluster::start(BRIDGE, CLUSTER_CIDR);
    let kubectl = common::versions().pop().expect("a kubectl").1;
    let k = cluster.kubectl(&kubectl, "default");
    wait_for(
        "the node to be Ready",
        Duration::from_secs(60),
        &cluster,
        || {
            let (ok, out) = k.run(&["get", "nodes", "--no-headers"], None);
            (ok && out.contains("e2e-node") && out.contains(" Ready ")).then_some(())
        },
    );
    let (_, nodes) = k.run(&["get", "nodes", "-o", "wide"], None);
    assert!(nodes.contains("control-plane"), "{nodes}");
    assert!(nodes.contains("containerd://"), "{nodes}");

    let (ok, out) = k.run(
        &[
            "create",
            "deployment",
            "web",
            &format!("--image={IMAGE}"),
            "--replicas=3",
            "--",
            "sh",
            "-c",
            "echo hello from $(hostname) > /tmp/index.html; exec httpd -f -p 8080 -h /tmp",
        ],
        None,
    );
    assert!(ok, "{out}");
    let pods = wait_for(
        "3 Running pods with IPs",
        Duration::from_secs(90),
        &cluster,
        || {
            let pods = web_pods(&k);
            (pods.len() == 3
                && pods
                    .iter()
                    .all(|(_, ip, phase)| phase == "Running" && ip.starts_with("10.42.")))
            .then_some(pods)
        },
    );
    for (name, ip, _) in &pods {
        let body = wait_for(
            &format!("{name} to answer on {ip}:8080"),
            Duration::from_secs(20),
            &cluster,
            || http_get(ip, 8080),
        );
        assert_eq!(body.trim(), format!("hello from {name}"));
    }

    // Killed with SIGKILL and started again, the agent adopts every
    // running container: none restarted, none duplicated. The stored
    // Node says Ready before the new agent has done anything, so the
    // comparison waits for proof that the new agent runs: its node Lease
    // renewed after the kill.
    let containers = |k: &Kubectl<'_>| {
        let (ok, out) = k.run(
            &[
                "get",
                "pods",
                "-l",
                "app=web",
                "-o",
                r#"jsonpath={range .items[*]}{.metadata.name} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount}{"\n"}{end}"#,
            ],
            None,
        );
        assert!(ok, "{out}");
        let mut ids: Vec<String> = out.lines().map(str::to_string).collect();
        ids.sort();
        ids
    };
    let before = containers(&k);
    assert_eq!(before.len(), 3, "{before:?}");
    assert!(before.iter().all(|c| c.ends_with(" 0")), "{before:?}");
    let killed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_secs() as i64;
    cluster.kill_hard();
    cluster.spawn();
    wait_for(
        "the new agent to renew its node Lease",
        Duration::from_secs(60),
        &cluster,
        || {
            let (ok, out) = k.run(
                &[
                    "get",
                    "lease",
                    "-n",
                    "kube-node-lease",
                    "e2e-node",
                    "-o",
                    "jsonpath={.spec.renewTime}",
                ],
                None,
            );
            let renewed = rudder_api::time::parse_rfc3339(out.trim())?;
            (ok && renewed > killed_at).then_some(())
        },
    );
    cluster.wait_node_ready(&k);
    assert_eq!(
        containers(&k),
        before,
        "the same containers, never restarted, after the restart"
    );
    let runtime_containers = Command::new("ctr")
        .arg("--address")
        .arg(cluster.data.join("agent/containerd/containerd.sock"))
        .args(["--namespace", "k8s.io", "containers", "list", "--quiet"])
        .output()
        .expect("ctr");
    let listed = String::from_utf8_lossy(&runtime_containers.stdout)
        .lines()
        .count();
    assert_eq!(listed, 6, "3 sandboxes and 3 containers, no more: {listed}");
    // The file system image garbage collection watches is containerd's
    // own answer (CRI ImageFsInfo): its snapshotter, under the data dir.
    let socket = cluster.data.join("agent/containerd/containerd.sock");
    let mountpoint = tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(async {
            use rudder_kubelet::cri::Runtime;
            let runtime = rudder_kubelet::cri::remote::RemoteRuntime::connect(
                socket.to_str().expect("a UTF-8 path"),
            )
            .expect("a CRI client");
            runtime.image_fs_mountpoint().await
        })
        .expect("ImageFsInfo")
        .expect("a mount point");
    assert!(
        mountpoint.starts_with(&cluster.data) && mountpoint.is_dir(),
        "{mountpoint:?}"
    );
    for (name, ip, _) in &pods {
        assert_eq!(
            http_get(ip, 8080).map(|b| b.trim().to_string()),
            Some(format!("hello from {name}"))
        );
    }

    // A deleted pod is replaced. httpd, as PID 1, ignores SIGTERM: the
    // grace period ends in SIGKILL.
    let victim = pods[0].0.clone();
    let (ok, out) = k.run(
        &["delete", "pod", &victim, "--grace-period=2", "--wait=false"],
        None,
    );
    assert!(ok, "{out}");
    let replaced = wait_for(
        "a replacement Running",
        Duration::from_secs(60),
        &cluster,
        || {
            let now = web_pods(&k);
            (now.len() == 3
                && now
                    .iter()
                    .all(|(n, _, phase)| n != &victim && phase == "Running"))
            .then_some(now)
        },
    );
    let newcomer = replaced
        .iter()
        .find(|(n, _, _)| !pods.iter().any(|(old, _, _)| old == n))
        .expect("a new pod");
    let body = wait_for(
        "the replacement to answer",
        Duration::from_secs(20),
        &cluster,
        || http_get(&newcomer.1, 8080),
    );
    assert_eq!(body.trim(), format!("hello from {}", newcomer.0));
    wait_for(
        "the deleted pod to be gone",
        Duration::from_secs(30),
        &cluster,
        || {
            let (ok, out) = k.run(
                &["get", "pod", &victim, "--ignore-not-found", "-o", "name"],
                None,
            );
            (ok && out.trim().is_empty()).then_some(())
        },
    );

    // A container that keeps failing waits in CrashLoopBackOff.
    let (ok, out) = k.run(
        &[
            "run",
            "crash",
            &format!("--image={IMAGE}"),
            "--",
            "sh",
            "-c",
            "exit 3",
        ],
        None,
    );
    assert!(ok, "{out}");
    wait_for(
        "crash in CrashLoopBackOff",
        Duration::from_secs(60),
        &cluster,
        || {
            let (ok, out) = k.run(
            &["get", "pod", "crash", "-o", "jsonpath={.status.containerStatuses[0].state.waiting.reason} {.status.containerStatuses[0].lastState.terminated.exitCode}"],
            None,
        );
            (ok && out.trim() == "CrashLoopBackOff 3").then_some(())
        },
    );

    container_logs(&cluster, &k, &kubectl);

    // Probes on real containers: readiness (exec) flips Ready on and off
    // as the container makes and removes /tmp/ready; liveness (httpGet)
    // fails once index.html is gone, and the container is restarted.
    let probed = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probed"},
      "spec": {"terminationGracePeriodSeconds": 2, "containers": [{"name": "web", "image": "rudder.local/busybox:1",
        "command": ["sh", "-c", "echo ok > /tmp/index.html; (sleep 4; touch /tmp/ready; sleep 5; rm /tmp/ready; sleep 3; rm /tmp/index.html) & exec httpd -f -p 8080 -h /tmp"],
        "readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 1, "failureThreshold": 1},
        "livenessProbe": {"httpGet": {"path": "/index.html", "port": 8080}, "periodSeconds": 1, "failureThreshold": 2}}]}}"#;
    let (ok, out) = k.run(&["apply", "-f", "-"], Some(probed));
    assert!(ok, "{out}");
    let ready = |k: &Kubectl<'_>| {
        let (ok, out) = k.run(
            &["get", "pod", "probed", "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status} {.status.containerStatuses[0].restartCount}"],
            None,
        );
        ok.then_some(out.trim().to_string())
    };
    wait_for(
        "probed Running, not ready",
        Duration::from_secs(30),
        &cluster,
        || (ready(&k)? == "False 0").then_some(()),
    );
    wait_for("probed ready", Duration::from_secs(30), &cluster, || {
        (ready(&k)? == "True 0").then_some(())
    });
    wait_for(
        "probed unready again",
        Duration::from_secs(30),
        &cluster,
        || (ready(&k)? == "False 0").then_some(()),
    );
    wait_for(
        "probed restarted by its liveness probe",
        Duration::from_secs(60),
        &cluster,
        || ready(&k)?.ends_with(" 1").then_some(()),
    );
    let (_, events) = k.run(
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=probed",
        ],
        None,
    );
    assert!(
        events.contains("failed liveness probe, will be restarted"),
        "{events}"
    );

    // A ConfigMap and a Secret as environment and as files, an emptyDir
    // shared by two containers; the ConfigMap's file changes in place.
    let manifest = r#"{"apiVersion": "v1", "kind": "List", "items": [
      {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"greeting": "hello"}},
      {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"}, "stringData": {"password": "hunter2"}},
      {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "volumes"}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "volumes": [{"name": "shared", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "cfg"}},
                    {"name": "sec", "secret": {"secretName": "sec", "defaultMode": 256}}],
        "containers": [
          {"name": "writer", "image": "rudder.local/busybox:1",
           "command": ["sh", "-c", "echo $GREETING $PASSWORD > /shared/out; cat /cfg/greeting /sec/password >> /shared/out; exec sleep 100000"],
           "env": [{"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
                   {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "password"}}}],
           "volumeMounts": [{"name": "shared", "mountPath": "/shared"}, {"name": "cfg", "mountPath": "/cfg"},
                            {"name": "sec", "mountPath": "/sec", "readOnly": true}]},
          {"name": "reader", "image": "rudder.local/busybox:1",
           "command": ["httpd", "-f", "-p", "8080", "-h", "/www"],
           "volumeMounts": [{"name": "shared", "mountPath": "/www/shared"}, {"name": "cfg", "mountPath": "/www/cfg"}]}]}}]}"#;
    let (ok, out) = k.run(&["apply", "-f", "-"], Some(manifest));
    assert!(ok, "{out}");
    let ip = wait_for("volumes Running", Duration::from_secs(60), &cluster, || {
        let (ok, out) = k.run(
            &[
                "get",
                "pod",
                "volumes",
                "-o",
                "jsonpath={.status.phase} {.status.podIP}",
            ],
            None,
        );
        let (phase, ip) = out.trim().split_once(' ')?;
        (ok && phase == "Running").then(|| ip.to_string())
    });
    let get = |path: &str| http_get_path(&ip, 8080, path);
    let shared = wait_for(
        "the writer's file through the emptyDir",
        Duration::from_secs(20),
        &cluster,
        || get("/shared/out").filter(|b| b.contains("hunter2")),
    );
    assert_eq!(
        shared, "hello hunter2\nhellohunter2",
        "env and files from the ConfigMap and Secret"
    );
    assert_eq!(get("/cfg/greeting").as_deref(), Some("hello"));
    let (ok, out) = k.run(
        &[
            "patch",
            "configmap",
            "cfg",
            "-p",
            r#"{"data": {"greeting": "bonjour"}}"#,
        ],
        None,
    );
    assert!(ok, "{out}");
    wait_for(
        "the ConfigMap's file updated in place",
        Duration::from_secs(60),
        &cluster,
        || (get("/cfg/greeting")? == "bonjour").then_some(()),
    );

    // A hostPort answers on the node's loopback (DNAT by the agent's
    // nftables table).
    let host_port = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hostport"}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "web", "image": "rudder.local/busybox:1",
          "command": ["sh", "-c", "echo through the host port > /tmp/index.html; exec httpd -f -p 8080 -h /tmp"],
          "ports": [{"containerPort": 8080, "hostPort": 18080}]}]}}"#;
    let (ok, out) = k.run(&["apply", "-f", "-"], Some(host_port));
    assert!(ok, "{out}");
    let body = wait_for(
        "the hostPort to answer on 127.0.0.1:18080",
        Duration::from_secs(60),
        &cluster,
        || http_get("127.0.0.1", 18080),
    );
    assert_eq!(body.trim(), "through the host port");

    // The pull path against a real registry on loopback (Debian's
    // docker-registry): the busybox image pushed there by containerd's own
    // client, then pulled by the agent through CRI for a pod.
    let registry_port = rudder_apiserver::testing::free_port().expect("a free port");
    let registry = Registry::start(&cluster, registry_port);
    let socket = cluster.data.join("agent/containerd/containerd.sock");
    let pushed = format!("127.0.0.1:{registry_port}/busybox:1");
    let ctr = |args: &[&str]| {
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&socket)
            .args(["--namespace", "k8s.io"])
            .args(args)
            .output()
            .expect("ctr");
        assert!(
            out.status.success(),
            "ctr {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ctr(&["images", "tag", IMAGE, &pushed]);
    ctr(&["images", "push", "--plain-http", &pushed]);
    ctr(&["images", "rm", &pushed]);
    let (ok, out) = k.run(
        &[
            "run",
            "pulled",
            &format!("--image={pushed}"),
            "--image-pull-policy=Always",
            "--",
            "sleep",
            "100000",
        ],
        None,
    );
    assert!(ok, "{out}");
    wait_for(
        "the pulled image Running",
        Duration::from_secs(60),
        &cluster,
        || {
            let (ok, out) = k.run(
                &["get", "pod", "pulled", "-o", "jsonpath={.status.phase}"],
                None,
            );
            (ok && out.trim() == "Running").then_some(())
        },
    );
    let (_, events) = k.run(
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=pulled",
        ],
        None,
    );
    assert!(
        events.contains(&format!("Successfully pulled image \"{pushed}\"")),
        "{events}"
    );
    let missing = format!("127.0.0.1:{registry_port}/nothing:1");
    let (ok, out) = k.run(&["run", "missing", &format!("--image={missing}")], None);
    assert!(ok, "{out}");
    wait_for(
        "ErrImagePull for an image the registry lacks",
        Duration::from_secs(60),
        &cluster,
        || {
            let (ok, out) = k.run(
                &[
                    "get",
                    "pod",
                    "missing",
                    "-o",
                    "jsonpath={.status.containerStatuses[0].state.waiting.reason}",
                ],
                None,
            );
            (ok && matches!(out.trim(), "ErrImagePull" | "ImagePullBackOff")).then_some(())
        },
    );
    drop(registry);

    // A container over its memory limit is OOM-killed and says so.
    let oom = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "oom"}, "spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "hog", "image": "rudder.local/busybox:1",
          "command": ["sh", "-c", "a=x; while true; do a=$a$a; done"],
          "resources": {"limits": {"memory": "32Mi"}}}]}}"#;
    let (ok, out) = k.run(&["apply", "-f", "-"], Some(oom));
    assert!(ok, "{out}");
    wait_for("oom OOMKilled", Duration::from_secs(60), &cluster, || {
        let (ok, out) = k.run(
            &["get", "pod", "oom", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].state.terminated.reason} {.status.containerStatuses[0].state.terminated.exitCode}"],
            None,
        );
        (ok && out.trim() == "Failed OOMKilled 137").then_some(())
    });

    // The adopted containers the test did not delete are still the same
    // ones, never restarted, at the end.
    let after = containers(&k);
    let survivors: Vec<&String> = before.iter().filter(|c| !c.starts_with(&victim)).collect();
    assert_eq!(survivors.len(), 2, "{before:?}");
    for survivor in survivors {
        assert!(
            after.contains(survivor),
            "{survivor} adopted, then restarted or replaced: {after:?}"
        );
    }

    runtime_down_makes_the_node_not_ready(&cluster, &k);

    // Everything the cluster made goes with it.
    let log = cluster.log();
    let stopped = cluster.teardown();
    assert!(
        stopped.is_some_and(|s| s.success()),
        "the server (and its agent) stops cleanly on SIGTERM: {stopped:?}\n{log}"
    );
    let left = cluster.mounts_left();
    assert!(left.is_empty(), "mounts left: {left:?}");
    let links = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("ip link");
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(!links.contains(BRIDGE), "the bridge is left: {links}");
}

/// A runtime that stops answering (containerd frozen with SIGSTOP: the
/// agent restarts a containerd that exits, so a dead one would come back)
/// turns the node NotReady with upstream's message within its 30 s
/// threshold plus a status pass; answering again, Ready again.
fn runtime_down_makes_the_node_not_ready(cluster: &Cluster, k: &Kubectl<'_>) {
    let pid_file = cluster.data.join("agent/containerd/containerd.pid");
    let pid = std::fs::read_to_string(&pid_file)
        .expect("the agent's containerd pid file")
        .trim()
        .to_string();
    let signal = |name: &str| {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{name} {pid}");
    };
    let ready = || {
        let (ok, out) = k.run(
            &["get", "node", "e2e-node", "-o", r#"jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].message}"#],
            None,
        );
        ok.then(|| out.trim().to_string())
    };
    signal("STOP");
    let frozen = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(
            "the node NotReady with its runtime frozen",
            Duration::from_secs(90),
            cluster,
            || (ready()? == "False container runtime is down").then_some(()),
        )
    }));
    signal("CONT");
    if let Err(panic) = frozen {
        std::panic::resume_unwind(panic);
    }
    wait_for(
        "the node Ready once its runtime answers",
        Duration::from_secs(60),
        cluster,
        || ready()?.starts_with("True ").then_some(()),
    );
}

/// `kubectl logs` through the API server's `pods/log` and the agent's
/// HTTPS server: two containers (one restarting), stdout and stderr, a
/// line longer than the runtime's 16 KiB split, `-c`, `--all-containers`,
/// `--previous`, `--tail`, `--timestamps`, `--since`, `--limit-bytes`,
/// `-f` seeing a line written after it started, and the errors.
fn container_logs(cluster: &Cluster, k: &Kubectl<'_>, kubectl: &Path) {
    let pod = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "logs"}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [
          {"name": "counter", "image": "rudder.local/busybox:1",
           "command": ["sh", "-c", "for i in 1 2 3; do echo line $i; done; echo oops >&2; printf '%020000d\\n' 0; i=0; while true; do i=$((i+1)); echo tick $i; sleep 1; done"]},
          {"name": "once", "image": "rudder.local/busybox:1",
           "command": ["sh", "-c", "echo run $(cat /proc/sys/kernel/random/uuid); sleep 1; exit 1"]}]}}"#;
    let (ok, out) = k.run(&["apply", "-f", "-"], Some(pod));
    assert!(ok, "{out}");
    wait_for(
        "logs running with a restarted container",
        Duration::from_secs(60),
        cluster,
        || {
            let (ok, out) = k.run(
                &["get", "pod", "logs", "-o", "jsonpath={.status.containerStatuses[?(@.name==\"counter\")].state.running.startedAt} {.status.containerStatuses[?(@.name==\"once\")].lastState.terminated.exitCode}"],
                None,
            );
            let words: Vec<&str> = out.split_whitespace().collect();
            (ok && words.len() == 2 && words[1] == "1").then_some(())
        },
    );
    let logs = |args: &[&str]| {
        let mut all = vec!["logs", "logs"];
        all.extend_from_slice(args);
        let (ok, out) = k.run(&all, None);
        assert!(ok, "kubectl {all:?}: {out}");
        out
    };
    let counter = wait_for("a few ticks", Duration::from_secs(20), cluster, || {
        let out = logs(&["-c", "counter"]);
        out.contains("tick 3").then_some(out)
    });
    // stdout and stderr are two pipes: "oops" has no fixed place.
    let lines: Vec<&str> = counter.lines().filter(|l| *l != "oops").collect();
    let long = "0".repeat(20000);
    let shown: Vec<String> = lines
        .iter()
        .map(|l| format!("{}…({})", l.chars().take(20).collect::<String>(), l.len()))
        .collect();
    assert_eq!(&lines[..3], ["line 1", "line 2", "line 3"], "{shown:?}");
    assert!(counter.lines().any(|l| l == "oops"), "{shown:?}");
    assert!(lines[3] == long, "a long line joined whole: {shown:?}");
    assert_eq!(lines[4], "tick 1", "{shown:?}");

    let tail = logs(&["-c", "counter", "--tail=2"]);
    assert_eq!(tail.lines().count(), 2, "{tail}");
    assert!(tail.lines().all(|l| l.starts_with("tick ")), "{tail}");
    // The log's first 9 bytes, whichever of stdout and stderr came first.
    assert_eq!(
        logs(&["-c", "counter", "--limit-bytes=9"]),
        counter[..9],
        "{shown:?}"
    );
    let stamped = logs(&["-c", "counter", "--timestamps", "--tail=1"]);
    let (time, rest) = stamped.trim_end().split_once(' ').expect("a time");
    assert!(
        time.len() >= 30
            && &time[10..11] == "T"
            && &time[19..20] == "."
            && time[20..29].bytes().all(|b| b.is_ascii_digit()),
        "RFC3339 with nine digits: {stamped}"
    );
    assert!(rest.starts_with("tick "), "{stamped}");
    let recent = logs(&["-c", "counter", "--since=1s"]);
    assert!(
        !recent.contains("line 1") && recent.lines().count() <= 3,
        "{recent}"
    );
    assert!(logs(&["-c", "counter", "--since=1h"]).contains("line 1"));

    let previous = logs(&["-c", "once", "--previous"]);
    assert!(previous.starts_with("run "), "{previous}");
    let all = logs(&["--all-containers"]);
    assert!(all.contains("line 1") && all.contains("run "), "{all}");

    // -f: a tick written after kubectl started.
    let last = |text: &str| -> u64 {
        text.lines()
            .filter_map(|l| l.strip_prefix("tick ")?.parse().ok())
            .max()
            .unwrap_or(0)
    };
    let before = last(&logs(&["-c", "counter"]));
    let mut follow = Command::new(kubectl)
        .arg(format!("--kubeconfig={}", k.kubeconfig.display()))
        .arg(format!("--cache-dir={}", k.cache.display()))
        .args(["logs", "-f", "logs", "-c", "counter", "--tail=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl logs -f");
    let stdout = follow.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    let live = loop {
        match rx.recv_timeout(Duration::from_millis(500)) {
            // With --tail=1, every line after the first was written
            // after the agent began following.
            Ok(line) => {
                seen.push(line);
                if seen.len() >= 2 && last(&seen[1]) > before {
                    break true;
                }
            }
            Err(_) if Instant::now() > deadline => break false,
            Err(_) => {}
        }
    };
    // The API server's request to the agent lives as long as kubectl's.
    let to_agent = || {
        let out = Command::new("ss")
            .args(["-Htn", "state", "established"])
            .arg(format!("( dport = :{} )", cluster.kubelet_port))
            .output()
            .expect("ss");
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    let following = to_agent();
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(
        live,
        "kubectl logs -f saw only {seen:?} (before: tick {before})"
    );
    assert_eq!(following, 1, "one connection to the agent while following");
    wait_for(
        "the connection to the agent to close with kubectl's",
        Duration::from_secs(10),
        cluster,
        || (to_agent() == 0).then_some(()),
    );

    // The errors, as upstream words them.
    let (ok, out) = k.run(
        &["get", "--raw", "/api/v1/namespaces/default/pods/logs/log"],
        None,
    );
    assert!(!ok);
    assert!(
        out.contains(
            "a container name must be specified for pod logs, choose one of: [counter once]"
        ),
        "{out}"
    );
    let (ok, out) = k.run(&["logs", "logs", "-c", "nope"], None);
    assert!(
        !ok && out.contains("container nope is not valid for pod logs"),
        "{out}"
    );
    let (ok, out) = k.run(&["logs", "logs", "-c", "counter", "--previous"], None);
    assert!(
        !ok && out.contains("previous terminated container \"counter\" in pod \"logs\" not found"),
        "{out}"
    );
    let (ok, out) = k.run(&["delete", "pod", "logs", "--wait=false"], None);
    assert!(ok, "{out}");
}
