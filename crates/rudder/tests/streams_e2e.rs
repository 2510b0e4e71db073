//! Into the pods on a real one-node cluster (`rudder server` with its
//! agent, containerd, the CNI bridge): with every kubectl, `exec` (exit
//! codes, stdin, a TTY with its size), `cp` both ways, `attach`, `run -i
//! --rm`, `port-forward` to a pod, a Service and a Deployment, `debug` with
//! an ephemeral container and on the node; the proxy subresources; the
//! Python client's and kube-rs's streams; 100 MiB through a port-forward,
//! checksummed; 1,000 sessions abandoned mid-stream leave nothing behind.
//! Needs root: fails otherwise, unless `RUDDER_SKIP_ROOT_TESTS=1` skips it
//! knowingly.
//!
//! Nothing leaves the machine: kubectl talks to the API server on
//! loopback, the API server to the agent on the node's address (on `lo`),
//! the runtime forwards into the pod's own network namespace.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Kubectl;
use common::node::{Cluster, NodeAddress, wait_for};

const BRIDGE: &str = "rudstr0";
const CLUSTER_CIDR: &str = "10.42.240.0/20";
const IMAGE: &str = "rudder.local/busybox:1";
const NODE_IP: &str = "10.99.225.1";

/// kubectl with the cluster's kubeconfig and namespace, no request
/// timeout (streams are long).
fn kubectl(k: &Kubectl<'_>, args: &[&str]) -> Command {
    let mut command = Command::new(k.binary);
    command
        .arg(format!("--kubeconfig={}", k.kubeconfig.display()))
        .arg(format!("--cache-dir={}", k.cache.display()))
        .arg(format!("--namespace={}", k.namespace))
        .args(args);
    command
}

/// What a finished command said: its exit code, stdout and stderr.
struct Outcome {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

impl Outcome {
    fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).to_string()
    }
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\nstdout: {}\nstderr: {}",
            self.code,
            self.out(),
            self.stderr
        )
    }
}

/// Runs `command` with `stdin`, for at most `within`.
fn run(mut command: Command, stdin: &[u8], within: Duration) -> Outcome {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut input = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let deadline = Instant::now() + within;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("output");
    let _ = writer.join();
    Outcome {
        code: output.status.code(),
        stdout: output.stdout,
        stderr: String::from_utf8_lossy(&output.stderr).to_string(),
    }
}

/// Runs `shell` (a command line) under a pseudo-terminal (`script`), so
/// that kubectl's `-t` has a terminal.
fn in_terminal(shell: &str, stdin: &[u8], within: Duration) -> Outcome {
    let mut command = Command::new("script");
    command.args(["-qec", shell, "/dev/null"]);
    run(command, stdin, within)
}

/// A kubectl command line for `script`.
fn kubectl_line(k: &Kubectl<'_>, args: &str) -> String {
    format!(
        "{} --kubeconfig={} --cache-dir={} --namespace={} {args}",
        k.binary.display(),
        k.kubeconfig.display(),
        k.cache.display(),
        k.namespace
    )
}

/// A running `kubectl port-forward`, and the local ports it listens on
/// (in the order asked).
struct Forward {
    child: Child,
    ports: Vec<u16>,
}

impl Forward {
    fn start(k: &Kubectl<'_>, target: &str, remote: &[u16], env: &[(&str, &str)]) -> Forward {
        let mut args = vec!["port-forward".to_string(), target.to_string()];
        args.extend(remote.iter().map(|p| format!(":{p}")));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut command = kubectl(k, &args);
        command.envs(env.iter().copied());
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl port-forward");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut ports = Vec::new();
        // "Forwarding from 127.0.0.1:41234 -> 8080"
        while ports.len() < remote.len() {
            let Some(Ok(line)) = lines.next() else {
                let mut err = String::new();
                let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
                panic!("kubectl port-forward {target} ended: {err}");
            };
            if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
                let port = rest.split_whitespace().next().and_then(|p| p.parse().ok());
                ports.push(port.expect("a local port"));
            }
        }
        // Keep draining stdout (kubectl logs each connection there).
        std::thread::spawn(move || for _ in lines {});
        Forward { child, ports }
    }

    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let mut err = String::new();
        let _ = self
            .child
            .stderr
            .take()
            .map(|mut e| e.read_to_string(&mut err));
        let _ = self.child.wait();
        err
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET /index.html from 127.0.0.1:`port` (a local forward): the body of
/// a 200.
fn http_get(port: u16) -> Result<String, String> {
    common::http_get("127.0.0.1", port, Duration::from_secs(10))
}

fn apply(k: &Kubectl<'_>, manifest: &str) {
    let (ok, out) = k.run(&["apply", "-f", "-"], Some(manifest));
    assert!(ok, "{out}");
}

fn pod(name: &str, spec: &str) -> String {
    format!(
        r#"{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "{name}", "labels": {{"app": "{name}"}}}},
          "spec": {{"terminationGracePeriodSeconds": 1, {spec}}}}}"#
    )
}

/// The pods every version's checks use.
fn workloads(k: &Kubectl<'_>) {
    apply(
        k,
        &pod(
            "sleeper",
            &format!(
                r#""containers": [{{"name": "sleeper", "image": "{IMAGE}",
                   "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]}},
                  {{"name": "second", "image": "{IMAGE}", "command": ["sleep", "3600"]}}]"#
            ),
        ),
    );
    // Answers "web" on 8080 and "alt" on 8081.
    let web = format!(
        r#"{{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {{"name": "web"}},
          "spec": {{"replicas": 1, "selector": {{"matchLabels": {{"app": "web"}}}},
            "template": {{"metadata": {{"labels": {{"app": "web"}}}},
              "spec": {{"terminationGracePeriodSeconds": 1, "containers": [{{"name": "web", "image": "{IMAGE}",
                "command": ["sh", "-c", "mkdir -p /w /a; echo web > /w/index.html; echo alt > /a/index.html; httpd -p 8081 -h /a; exec httpd -f -p 8080 -h /w"],
                "ports": [{{"containerPort": 8080, "name": "http"}}, {{"containerPort": 8081, "name": "alt"}}]}}]}}}}}}}}"#
    );
    apply(k, &web);
    let service = r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080},
          {"name": "alt", "port": 81, "targetPort": 8081}]}}"#;
    apply(k, service);
    // Reads lines on stdin and answers them (for attach).
    apply(
        k,
        &pod(
            "echoer",
            &format!(
                r#""containers": [{{"name": "echoer", "image": "{IMAGE}", "stdin": true,
                   "command": ["sh", "-c", "while read line; do echo \"got $line\"; done; sleep 3600"]}}]"#
            ),
        ),
    );
    // A shell on a terminal (for attach -it).
    apply(
        k,
        &pod(
            "shell",
            &format!(
                r#""containers": [{{"name": "shell", "image": "{IMAGE}", "stdin": true, "tty": true,
                   "command": ["sh"]}}]"#
            ),
        ),
    );
    for selector in ["app=sleeper", "app=web", "app=echoer", "app=shell"] {
        let (ok, out) = k.run(
            &[
                "wait",
                "--for=condition=Ready",
                "pod",
                "-l",
                selector,
                "--timeout=120s",
            ],
            None,
        );
        assert!(ok, "{selector}: {out}");
    }
}

/// Every stream command with kubectl `k`, whose version is `version`
/// (`1.27` …); failures are collected.
fn check_version(k: &Kubectl<'_>, version: &str, web_pod: &str, failures: &mut Vec<String>) {
    let mut check = |what: &str, ok: bool, detail: &dyn std::fmt::Debug| {
        if !ok {
            failures.push(format!("kubectl {version}: {what}: {detail:?}"));
        }
    };
    let t = Duration::from_secs(60);

    // Exit codes, stdout and stderr apart.
    let exec = run(
        kubectl(
            k,
            &[
                "exec",
                "sleeper",
                "-c",
                "sleeper",
                "--",
                "sh",
                "-c",
                "echo out; echo err >&2; exit 3",
            ],
        ),
        b"",
        t,
    );
    check(
        "exec exits 3",
        exec.code == Some(3) && exec.out() == "out\n" && exec.stderr.contains("err\n"),
        &exec,
    );
    let exec = run(kubectl(k, &["exec", "sleeper", "--", "true"]), b"", t);
    check("exec true exits 0", exec.code == Some(0), &exec);

    // Stdin, to its end.
    let input = format!("hello from {version}\n").repeat(1000);
    let exec = run(
        kubectl(k, &["exec", "-i", "sleeper", "--", "cat"]),
        input.as_bytes(),
        t,
    );
    check(
        "exec -i cat echoes stdin",
        exec.code == Some(0) && exec.out() == input,
        &exec.code,
    );

    // A container that does not exist.
    let exec = run(
        kubectl(k, &["exec", "sleeper", "-c", "nope", "--", "true"]),
        b"",
        t,
    );
    check(
        "exec into an unknown container",
        exec.code != Some(0)
            && exec
                .stderr
                .contains("container nope is not valid for pod sleeper"),
        &exec,
    );

    // A terminal, with its size.
    let line = kubectl_line(
        k,
        "exec -it sleeper -c sleeper -- sh -c 'sleep 1; stty size'",
    );
    let tty = in_terminal(&format!("stty cols 123 rows 45; {line}"), b"", t);
    check(
        "exec -it has the terminal's size",
        tty.code == Some(0) && tty.out().contains("45 123"),
        &tty,
    );

    // cp both ways (tar over exec).
    let dir = tempfile::tempdir().expect("tempdir");
    let data: Vec<u8> = (0..1_500_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let local = dir.path().join("data.bin");
    std::fs::write(&local, &data).expect("write");
    let remote = format!("sleeper:/tmp/cp-{version}.bin");
    let up = run(
        kubectl(
            k,
            &[
                "cp",
                "-c",
                "sleeper",
                local.to_str().expect("path"),
                &remote,
            ],
        ),
        b"",
        t,
    );
    check("cp to the pod", up.code == Some(0), &up);
    let back = dir.path().join("back.bin");
    let down = run(
        kubectl(
            k,
            &["cp", "-c", "sleeper", &remote, back.to_str().expect("path")],
        ),
        b"",
        t,
    );
    let same = std::fs::read(&back).is_ok_and(|b| b == data);
    check(
        "cp from the pod gives the same bytes",
        down.code == Some(0) && same,
        &down,
    );

    // attach: stdin in, the container's answer out.
    let mut attach = kubectl(k, &["attach", "-i", "echoer"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl attach");
    let mut stdin = attach.stdin.take().expect("stdin");
    let mut lines = BufReader::new(attach.stdout.take().expect("stdout")).lines();
    let word = format!("word-{}", version.replace('.', "-"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.by_ref().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut answered = false;
    let deadline = Instant::now() + t;
    while !answered && Instant::now() < deadline {
        let _ = writeln!(stdin, "{word}");
        let _ = stdin.flush();
        if let Ok(line) = rx.recv_timeout(Duration::from_secs(1)) {
            answered = line.contains(&format!("got {word}"));
        }
        while let Ok(line) = rx.try_recv() {
            answered |= line.contains(&format!("got {word}"));
        }
    }
    let _ = attach.kill();
    let _ = attach.wait();
    check("attach -i carries stdin and stdout", answered, &word);

    // attach -it to a shell on a terminal.
    let line = kubectl_line(k, "attach -it shell");
    let tty = in_terminal(
        &format!("(sleep 2; echo 'echo attached-$((6*7))'; sleep 2) | {line}"),
        b"",
        Duration::from_secs(15),
    );
    check(
        "attach -it reaches the shell",
        tty.out().contains("attached-42"),
        &tty,
    );

    // run -i --rm: attach to a new pod, which is deleted after.
    let name = format!("run-{}", version.replace('.', "-"));
    let image = format!("--image={IMAGE}");
    let ran = run(
        kubectl(
            k,
            &[
                "run",
                &name,
                &image,
                "--rm",
                "-i",
                "--restart=Never",
                "--command",
                "--",
                "sh",
                "-c",
                "read line; echo \"ran $line\"",
            ],
        ),
        b"it\n",
        Duration::from_secs(90),
    );
    check(
        "run -i --rm",
        ran.code == Some(0) && ran.out().contains("ran it"),
        &ran,
    );

    // port-forward: a pod's two ports, several connections at once.
    let forward = Forward::start(k, &format!("pod/{web_pod}"), &[8080, 8081], &[]);
    let (web, alt) = (forward.ports[0], forward.ports[1]);
    let answers: Vec<Result<String, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| s.spawn(move || http_get(if i % 2 == 0 { web } else { alt })))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("join"))
            .collect()
    });
    let good = answers
        .iter()
        .enumerate()
        .all(|(i, a)| a.as_deref() == Ok(if i % 2 == 0 { "web" } else { "alt" }));
    check(
        "port-forward pod/x: two ports, eight connections",
        good,
        &answers,
    );
    drop(forward);
    // A Service and a Deployment resolve to the pod and its target port.
    for target in ["svc/web", "deploy/web"] {
        let remote = if target == "svc/web" { 80 } else { 8080 };
        let forward = Forward::start(k, target, &[remote], &[]);
        let got = http_get(forward.ports[0]);
        check(
            &format!("port-forward {target}"),
            got.as_deref() == Ok("web"),
            &got,
        );
    }
    // A port nothing listens on: the connection is refused with
    // upstream's error; the forward is not broken for the server.
    let forward = Forward::start(k, &format!("pod/{web_pod}"), &[9999], &[]);
    let refused = http_get(forward.ports[0]);
    std::thread::sleep(Duration::from_millis(500));
    let err = forward.stop();
    check(
        "port-forward to a closed port is refused",
        refused.is_err() && err.contains("error forwarding port 9999"),
        &(refused, err),
    );

    // debug: an ephemeral container sharing the target's processes. Its
    // stdin stays open a while: an attach without stdinOnce ends with the
    // client's stdin (the runtime detaches), as upstream's.
    let debugger = format!("debugger-{}", version.replace('.', "-"));
    let line = kubectl_line(
        k,
        &format!("debug sleeper -i --image={IMAGE} --target=sleeper -c {debugger} -- sh"),
    );
    let mut shell = Command::new("sh");
    shell.args([
        "-c",
        &format!(
            "(sleep 1; echo 'ps -o args | grep -q \"while true\" && echo shared-pids'; sleep 3) | {line}"
        ),
    ]);
    let debug = run(shell, b"", Duration::from_secs(90));
    check(
        "debug -i with an ephemeral container",
        debug.out().contains("shared-pids"),
        &debug,
    );
}

#[test]
fn streams_reach_into_pods_with_every_client() {
    if !common::require_root("streams_e2e") {
        return;
    }
    let _address = NodeAddress::add(NODE_IP);
    let cluster = Cluster::start_with_node_ip(BRIDGE, CLUSTER_CIDR, NODE_IP);
    let versions = common::versions();
    let newest = versions.last().expect("a kubectl").1.clone();
    let k = cluster.kubectl(&newest, "default");
    cluster.wait_node_ready(&k);
    workloads(&k);
    let web_pod = k.jsonpath(
        &["get", "pods", "-l", "app=web"],
        "{.items[0].metadata.name}",
    );

    let mut failures = Vec::new();
    for (version, binary) in &versions {
        let k = cluster.kubectl(binary, "default");
        check_version(&k, version, &web_pod, &mut failures);
    }

    // The proxy subresources, and kubectl proxy.
    let (ok, out) = k.run(
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/services/web:80/proxy/",
        ],
        None,
    );
    if !(ok && out.trim() == "web") {
        failures.push(format!("services/proxy: {out}"));
    }
    let (ok, out) = k.run(
        &[
            "get",
            "--raw",
            &format!("/api/v1/namespaces/default/pods/{web_pod}:8081/proxy/index.html"),
        ],
        None,
    );
    if !(ok && out.trim() == "alt") {
        failures.push(format!("pods/proxy: {out}"));
    }
    let (ok, out) = k.run(
        &["get", "--raw", "/api/v1/nodes/e2e-node/proxy/healthz"],
        None,
    );
    if !(ok && out.trim() == "ok") {
        failures.push(format!("nodes/proxy: {out}"));
    }
    let mut proxy = kubectl(&k, &["proxy", "--port=0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl proxy");
    let mut first = String::new();
    BufReader::new(proxy.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("kubectl proxy says where");
    let port: Option<u16> = first.trim().rsplit(':').next().and_then(|p| p.parse().ok());
    let through = port.map(|port| {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        stream
            .write_all(
                b"GET /api/v1/namespaces/default/services/web:http/proxy/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n",
            )
            .expect("write");
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response
    });
    let _ = proxy.kill();
    let _ = proxy.wait();
    if !through.as_deref().is_some_and(|r| r.ends_with("web\n")) {
        failures.push(format!("kubectl proxy ({first}): {through:?}"));
    }

    // kubectl debug node/<n>: a pod on the node, in its namespaces.
    let image = format!("--image={IMAGE}");
    let node_debug = run(
        kubectl(
            &k,
            &[
                "debug",
                "node/e2e-node",
                "-i",
                &image,
                "--",
                "sh",
                "-c",
                "test -d /host/proc && echo host-mounted",
            ],
        ),
        b"",
        Duration::from_secs(90),
    );
    if !node_debug.out().contains("host-mounted") {
        failures.push(format!("debug node/e2e-node: {node_debug:?}"));
    }

    python_client(&cluster, &web_pod, &mut failures);
    large_port_forward(&k, &web_pod, &mut failures);
    assert!(
        failures.is_empty(),
        "{} failures:\n{}\n\nthe server's log ends:\n{}",
        failures.len(),
        failures.join("\n"),
        cluster.log()
    );

    abandoned_sessions_leave_nothing(&cluster, &k, &web_pod);
}

/// The Python client's `stream()` exec and its port-forward.
fn python_client(cluster: &Cluster, web_pod: &str, failures: &mut Vec<String>) {
    let venv =
        std::env::var("RUDDER_PYTHON_VENV").unwrap_or_else(|_| "/var/tmp/rudder-python".into());
    let script = format!(
        r#"
import socket
from kubernetes import client, config
from kubernetes.stream import stream, portforward
config.load_kube_config()
api = client.CoreV1Api()
out = stream(api.connect_get_namespaced_pod_exec, "sleeper", "default", container="sleeper",
             command=["sh", "-c", "echo py-exec"], stderr=True, stdin=False, stdout=True, tty=False)
print("exec:", out.strip())
resp = stream(api.connect_get_namespaced_pod_exec, "sleeper", "default", container="sleeper",
              command=["sh", "-c", "exit 7"], stderr=True, stdin=False, stdout=True, tty=False,
              _preload_content=False)
resp.run_forever(timeout=30)
print("code:", resp.returncode)
resp = stream(api.connect_get_namespaced_pod_exec, "sleeper", "default", container="sleeper",
              command=["cat"], stderr=True, stdin=True, stdout=True, tty=False,
              _preload_content=False)
resp.write_stdin("abc\n")
print("stdin:", resp.readline_stdout(timeout=10))
resp.close()
pf = portforward(api.connect_get_namespaced_pod_portforward, "{web_pod}", "default", ports="8080")
sock = pf.socket(8080)
sock.setblocking(True)
sock.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
data = b""
while True:
    chunk = sock.recv(4096)
    if not chunk:
        break
    data += chunk
print("forward:", data.split(b"\r\n\r\n", 1)[-1].decode().strip())
sock.close()
"#
    );
    let output = Command::new(format!("{venv}/bin/python"))
        .args(["-c", &script])
        .env("KUBECONFIG", cluster.data.join("kubeconfig.yaml"))
        .output()
        .expect("run python (scripts/setup installs the client)");
    let out = String::from_utf8_lossy(&output.stdout);
    let ok = out.contains("exec: py-exec")
        && out.contains("code: 7")
        && out.contains("stdin: abc")
        && out.contains("forward: web");
    if !ok {
        failures.push(format!(
            "the Python client: {out}\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
}

/// 100 MiB each way through `kubectl port-forward`, checksummed at both
/// ends.
fn large_port_forward(k: &Kubectl<'_>, web_pod: &str, failures: &mut Vec<String>) {
    const SIZE: usize = 100 << 20;
    let exec = |command: &str| {
        run(
            kubectl(k, &["exec", web_pod, "--", "sh", "-c", command]),
            b"",
            Duration::from_secs(120),
        )
    };
    // Into the pod: what arrives goes through md5sum. (`-e`: busybox nc
    // with its stdin at its end would half-close the connection at once,
    // and the runtime ends a forward a second after either side closes.)
    let listen = kubectl(
        k,
        &[
            "exec",
            web_pod,
            "--",
            "sh",
            "-c",
            "nc -l -p 9000 -e sh -c 'md5sum > /tmp/in.md5'",
        ],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn();
    let mut listen = listen.expect("kubectl exec nc");
    std::thread::sleep(Duration::from_secs(1));
    let data: Vec<u8> = {
        let mut state = 0x2545_f491_u32;
        (0..SIZE)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                state as u8
            })
            .collect()
    };
    let forward = Forward::start(k, &format!("pod/{web_pod}"), &[9000, 9001], &[]);
    let sent = TcpStream::connect(("127.0.0.1", forward.ports[0])).and_then(|mut s| {
        s.write_all(&data)?;
        s.shutdown(std::net::Shutdown::Write)?;
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        Ok(())
    });
    let _ = listen.wait();
    let local = md5(&data);
    let remote = exec("cat /tmp/in.md5");
    if sent.is_err() || !remote.out().starts_with(&local) {
        failures.push(format!(
            "100 MiB into the pod: {sent:?}, local {local}, remote {remote:?}"
        ));
    }
    // Out of the pod: nc serves a file of random bytes.
    let made = exec(&format!(
        "head -c {SIZE} /dev/urandom > /tmp/out.bin; md5sum /tmp/out.bin; (nc -l -p 9001 -e cat /tmp/out.bin < /dev/null > /dev/null 2>&1 &)"
    ));
    std::thread::sleep(Duration::from_secs(1));
    let mut received = Vec::new();
    let got = TcpStream::connect(("127.0.0.1", forward.ports[1]))
        .and_then(|mut s| s.read_to_end(&mut received));
    if got.is_err() || received.len() != SIZE || !made.out().starts_with(&md5(&received)) {
        failures.push(format!(
            "100 MiB out of the pod: {got:?}, {} bytes, remote {made:?}",
            received.len()
        ));
    }
    drop(forward);
}

/// The MD5 of `data`, hex, by the system's md5sum.
fn md5(data: &[u8]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("data");
    std::fs::write(&path, data).expect("write");
    let out = Command::new("md5sum").arg(&path).output().expect("md5sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The open file descriptors of process `pid`.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The pids and command lines of every process.
fn processes() -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            Some((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")))
        })
        .collect()
}

/// The server's pid (the one listening on the cluster's port).
fn server_pid(cluster: &Cluster) -> u32 {
    let port = format!("--port {} ", cluster.port);
    processes()
        .into_iter()
        .find(|(_, cmdline)| cmdline.contains(" server ") && cmdline.contains(&port))
        .map(|(pid, _)| pid)
        .expect("the server's pid")
}

/// How many processes' command lines contain `marker`.
fn processes_with(marker: &str) -> usize {
    processes()
        .iter()
        .filter(|(_, cmdline)| cmdline.contains(marker))
        .count()
}

/// The API server's count of open streams into pods.
fn open_streams(k: &Kubectl<'_>) -> i64 {
    let (ok, out) = k.run(&["get", "--raw", "/metrics"], None);
    assert!(ok, "{out}");
    out.lines()
        .filter(|l| l.starts_with("apiserver_longrunning_requests{verb=\"CONNECT\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
        .sum()
}

/// kube-rs's exec and port-forward work unmodified; then 1,000 exec
/// sessions through kube-rs (WebSocket), each dropped mid-stream:
/// afterwards no stream is open in the API server, the server holds no
/// more sockets than before, and no exec'd process is left in the
/// container.
fn abandoned_sessions_leave_nothing(cluster: &Cluster, k: &Kubectl<'_>, web_pod: &str) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, AttachParams};

    let pid = server_pid(cluster);
    let marker = "abandoned-session-marker";
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let kubeconfig = cluster.data.join("kubeconfig.yaml");
    let before = fds(pid);
    runtime.block_on(async {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig"),
            &Default::default(),
        )
        .await
        .expect("config");
        let client = kube::Client::try_from(config).expect("client");
        let pods: Api<Pod> = Api::namespaced(client, "default");
        // One whole session first: kube-rs's exec works unmodified.
        let mut whole = pods
            .exec(
                "sleeper",
                ["sh", "-c", "echo kube-rs"],
                &AttachParams::default().container("sleeper").stderr(false),
            )
            .await
            .expect("kube-rs exec");
        let mut out = String::new();
        let _ =
            tokio::io::AsyncReadExt::read_to_string(&mut whole.stdout().expect("stdout"), &mut out)
                .await;
        let status = whole.take_status().expect("status").await;
        assert_eq!(out, "kube-rs\n");
        assert_eq!(status.and_then(|s| s.status).as_deref(), Some("Success"));
        // kube-rs's Portforwarder (WebSocket, `v4.channel.k8s.io`).
        let mut forwarder = pods
            .portforward(web_pod, &[8080])
            .await
            .expect("kube-rs port-forward");
        let mut port = forwarder.take_stream(8080).expect("the port's stream");
        tokio::io::AsyncWriteExt::write_all(&mut port, b"GET /index.html HTTP/1.0\r\n\r\n")
            .await
            .expect("write");
        let mut answer = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut port, &mut answer).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.ends_with("\r\n\r\nweb\n"),
            "kube-rs port-forward: {answer:?}"
        );
        drop(port);
        forwarder.abort();
        for i in 0..1000 {
            let mut attached = pods
                .exec(
                    "sleeper",
                    ["sh", "-c", "cat > /dev/null", marker],
                    &AttachParams::default()
                        .container("sleeper")
                        .stdin(true)
                        .stderr(false),
                )
                .await
                .unwrap_or_else(|e| panic!("session {i}: {e}"));
            let mut stdin = attached.stdin().expect("stdin");
            let _ = tokio::io::AsyncWriteExt::write_all(&mut stdin, b"some bytes\n").await;
            // Gone without a word: the connection is dropped.
            drop(stdin);
            drop(attached);
        }
    });
    drop(runtime);
    let settled = wait_for(
        "abandoned sessions to be cleaned up",
        Duration::from_secs(60),
        cluster,
        || {
            let (streams, processes, now) = (open_streams(k), processes_with(marker), fds(pid));
            (streams == 0 && processes == 0 && now <= before + 20).then_some(now)
        },
    );
    eprintln!("fds before {before}, after 1000 abandoned sessions {settled}");
}
