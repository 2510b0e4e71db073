//! The `streams` scenario: exec and port-forward through the API server
//! and the agent into a pod on a real node (the node scenario's cluster:
//! `rudder server` and a joined `rudder agent` on this machine's
//! containerd), each beside the floor the path cannot beat, in the same
//! run. Needs root.
//!
//! - `exec_roundtrip_p50_ms`, `exec_roundtrip_p99_ms`: 100 sequential
//!   `exec … true` through the API server — TLS, a `v5.channel.k8s.io`
//!   WebSocket, the API server's SPDY to the agent, the agent's CRI `Exec`
//!   and its relay to containerd's streaming server — from the upgrade
//!   request to the exit status; the floor: the same exec done directly,
//!   CRI `Exec` to containerd and a WebSocket to the URL it gives, with the
//!   same client code.
//! - `portforward_mb_per_s`: 256 MiB (64 with `--quick`) written through
//!   `kubectl port-forward` (the newest kubectl: SPDY tunnelled in
//!   WebSocket) to a pod that reads it to its end, from the first byte to
//!   the pod closing; the floor: the same copy straight to the pod's
//!   address. `portforward_spdy_mb_per_s`: the same with kubectl 1.27
//!   (plain SPDY). `portforward_relayed_mb_per_s`: the bench's own SPDY
//!   client through the API server and the agent, beside the same client
//!   straight at containerd's streaming URL: what the relays cost, apart
//!   from the runtime's and kubectl's own SPDY.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use rudder_kubelet::cri::{Runtime, remote::RemoteRuntime};
use rudder_stream::ws::{self, Message};
use rudder_stream::{spdy, upgrade};
use serde_json::json;

use crate::Options;
use crate::api::rudder_binary;
use crate::controllers::until;
use crate::node::{Cluster, is_root, node_ready};
use crate::report::nearest_rank as percentile;
use crate::report::{Metric, Report};

const NAMESPACE: &str = "bench-streams";
const IMAGE: &str = "rudder.local/busybox:1";
const EXECS: usize = 100;

/// Where the kubectl versions are (`scripts/setup --test` installs them).
fn kubectl_dir() -> PathBuf {
    std::env::var_os("RUDDER_KUBECTL_DIR").map_or_else(
        || PathBuf::from("/usr/local/lib/rudder/clients"),
        PathBuf::from,
    )
}

/// A rustls client presenting the kubeconfig's client certificate and
/// trusting its CA.
fn tls_from_kubeconfig(path: &Path) -> anyhow::Result<(rustls::ClientConfig, u16)> {
    use base64::Engine;
    let text = std::fs::read_to_string(path)?;
    let kubeconfig: serde_json::Value = serde_yaml_ng::from_str(&text)?;
    let field = |pointer: &str| -> anyhow::Result<Vec<u8>> {
        let data = kubeconfig
            .pointer(pointer)
            .and_then(serde_json::Value::as_str)
            .with_context(|| format!("{pointer} in {}", path.display()))?;
        Ok(base64::engine::general_purpose::STANDARD.decode(data)?)
    };
    let ca = field("/clusters/0/cluster/certificate-authority-data")?;
    let cert = field("/users/0/user/client-certificate-data")?;
    let key = field("/users/0/user/client-key-data")?;
    let port = kubeconfig
        .pointer("/clusters/0/cluster/server")
        .and_then(serde_json::Value::as_str)
        .and_then(|s| s.rsplit(':').next())
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .context("the server's port")?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca.as_slice()) {
        roots.add(cert?)?;
    }
    let certs = rustls_pemfile::certs(&mut cert.as_slice()).collect::<Result<Vec<_>, _>>()?;
    let key = rustls_pemfile::private_key(&mut key.as_slice())?.context("a private key")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)?;
    Ok((config, port))
}

/// Runs one exec over a WebSocket already connected on `io`: reads until
/// the server closes; the exit status from the error channel.
async fn ws_exec<S>(io: S, host: &str, path: &str, protocol: &str) -> anyhow::Result<String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (socket, chosen) = ws::connect(io, host, path, &[protocol], &[])
        .await
        .map_err(|e| anyhow::anyhow!("exec upgrade: {e}"))?;
    anyhow::ensure!(chosen == protocol, "the server chose {chosen:?}");
    let (mut reader, writer) = socket.split();
    let mut status = String::new();
    while let Some(message) = reader.next_message().await? {
        match message {
            Message::Binary(data) if data.first() == Some(&3) => {
                status = String::from_utf8_lossy(&data[1..]).to_string();
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
    let _ = writer.shutdown().await;
    Ok(status)
}

/// 100 execs of `true` through the API server: their latencies.
async fn through_api(kubeconfig: &Path) -> anyhow::Result<Vec<f64>> {
    let (tls, port) = tls_from_kubeconfig(kubeconfig)?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    let path = format!(
        "/api/v1/namespaces/{NAMESPACE}/pods/sleeper/exec?command=true&stdout=true&stderr=true"
    );
    let mut latencies = Vec::with_capacity(EXECS);
    for _ in 0..EXECS {
        let began = Instant::now();
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
        let stream = connector.connect(name, tcp).await?;
        let status = ws_exec(stream, "127.0.0.1", &path, "v5.channel.k8s.io").await?;
        latencies.push(began.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(status.contains("Success"), "exec through the API: {status}");
    }
    Ok(latencies)
}

/// The same 100 execs straight to the runtime: CRI `Exec`, then a
/// WebSocket to its URL.
async fn floor(runtime: &RemoteRuntime, uid: &str) -> anyhow::Result<Vec<f64>> {
    let container = runtime
        .list_containers(Some(uid))
        .await?
        .into_iter()
        .find(|c| c.name == "sleeper")
        .context("the sleeper container")?;
    let mut latencies = Vec::with_capacity(EXECS);
    for _ in 0..EXECS {
        let began = Instant::now();
        let url = runtime
            .exec(rudder_kubelet::cri::v1::ExecRequest {
                container_id: container.id.clone(),
                cmd: vec!["true".into()],
                tty: false,
                stdin: false,
                stdout: true,
                stderr: true,
            })
            .await?;
        let rest = url.strip_prefix("http://").context("an http URL")?;
        let (authority, path) = rest.split_once('/').context("a path")?;
        let tcp = tokio::net::TcpStream::connect(authority).await?;
        tcp.set_nodelay(true)?;
        let status = ws_exec(tcp, authority, &format!("/{path}"), "v4.channel.k8s.io").await?;
        latencies.push(began.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(status.contains("Success"), "exec at the runtime: {status}");
    }
    Ok(latencies)
}

/// A running `kubectl port-forward` and its local port.
struct Forward(Child, u16);

impl Forward {
    fn start(kubectl: &Path, kubeconfig: &Path, pod: &str, port: u16) -> anyhow::Result<Forward> {
        let mut child = Command::new(kubectl)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(["-n", NAMESPACE, "port-forward", pod])
            .arg(format!(":{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("run {}", kubectl.display()))?;
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let local = loop {
            let line = lines
                .next()
                .context("kubectl port-forward ended before forwarding")??;
            if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
                break rest
                    .split_whitespace()
                    .next()
                    .and_then(|p| p.parse().ok())
                    .context("a local port")?;
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Ok(Forward(child, local))
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writes `bytes` to `address` and waits for the pod to close: MB/s.
fn copy_to(address: (&str, u16), bytes: usize) -> anyhow::Result<f64> {
    let chunk = vec![0x5a_u8; 1 << 20];
    let began = Instant::now();
    let mut stream = TcpStream::connect(address)?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        stream.write_all(&chunk[..n])?;
        left -= n;
    }
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    Ok(bytes as f64 / 1e6 / began.elapsed().as_secs_f64())
}

/// A port-forward of `bytes` over a SPDY connection already upgraded on
/// `io` (the `portforward.k8s.io` protocol, as client-go speaks it: an
/// error stream half-closed at once, then the data stream): MB/s from the
/// first byte to the pod's close.
async fn spdy_forward<S>(io: S, port: u16, bytes: usize) -> anyhow::Result<f64>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (session, _incoming) = spdy::Session::client(io);
    let headers = |kind: &str| {
        spdy::Headers::new()
            .with("streamtype", kind)
            .with("port", port.to_string())
            .with("requestid", "0")
    };
    let mut error = session.open(headers("error"), false).await?;
    error.shutdown().await?;
    let mut data = session.open(headers("data"), false).await?;
    let chunk = vec![0x5a_u8; 1 << 20];
    let began = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        data.write_all(&chunk[..n]).await?;
        left -= n;
    }
    data.shutdown().await?;
    let mut rest = Vec::new();
    let _ = data.read_to_end(&mut rest).await;
    let rate = bytes as f64 / 1e6 / began.elapsed().as_secs_f64();
    drop((error, data));
    session.close().await;
    Ok(rate)
}

/// The SPDY upgrade headers of a port-forward.
fn forward_headers() -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    spdy::handshake::client_request_headers(&mut headers, &["portforward.k8s.io"]);
    headers
}

/// The same client's port-forward through the API server (and the agent).
async fn forward_through_api(kubeconfig: &Path, bytes: usize) -> anyhow::Result<f64> {
    let (tls, port) = tls_from_kubeconfig(kubeconfig)?;
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    tcp.set_nodelay(true)?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, tcp)
        .await?;
    let path = format!("/api/v1/namespaces/{NAMESPACE}/pods/sink/portforward");
    match upgrade::request(
        stream,
        http::Method::POST,
        &path,
        "127.0.0.1",
        &forward_headers(),
    )
    .await?
    {
        upgrade::Answer::Switched { io, .. } => spdy_forward(io, 9000, bytes).await,
        upgrade::Answer::Refused { status, body } => {
            anyhow::bail!("port-forward through the API: {status} {body:?}")
        }
    }
}

/// The same client's port-forward straight to containerd's streaming
/// server (CRI `PortForward`, then its URL).
async fn forward_at_runtime(
    runtime: &RemoteRuntime,
    sandbox: &str,
    bytes: usize,
) -> anyhow::Result<f64> {
    let url = runtime.port_forward(sandbox, vec![9000]).await?;
    let rest = url.strip_prefix("http://").context("an http URL")?;
    let (authority, path) = rest.split_once('/').context("a path")?;
    let tcp = tokio::net::TcpStream::connect(authority).await?;
    tcp.set_nodelay(true)?;
    match upgrade::request(
        tcp,
        http::Method::POST,
        &format!("/{path}"),
        authority,
        &forward_headers(),
    )
    .await?
    {
        upgrade::Answer::Switched { io, .. } => spdy_forward(io, 9000, bytes).await,
        upgrade::Answer::Refused { status, body } => {
            anyhow::bail!("port-forward at the runtime: {status} {body:?}")
        }
    }
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    anyhow::ensure!(
        is_root(),
        "the streams scenario runs a real node (containerd, the pod network): run it as root"
    );
    let binary = rudder_binary()?;
    std::fs::create_dir_all(&options.work_dir)?;
    let dir = tempfile::Builder::new()
        .prefix("rudder-bench-streams")
        .tempdir_in(&options.work_dir)?;
    let megabytes = if options.quick { 64 } else { 256 };
    let cluster = Cluster::start(&binary, dir.path())?;
    let client =
        rudder_apiserver::testing::connect(&cluster.kubeconfig, Duration::from_secs(60)).await?;
    node_ready(&client).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?,
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for (name, command) in [
        (
            "sleeper",
            "trap 'exit 0' TERM; while true; do sleep 1; done",
        ),
        // Reads each connection to its end; `-e` keeps nc's write side
        // open (with its stdin at its end busybox nc half-closes at once,
        // and containerd ends a forward a second after either side does).
        ("sink", "nc -ll -p 9000 -e sh -c 'cat > /dev/null'"),
    ] {
        let pod = json!({"metadata": {"name": name}, "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": name, "image": IMAGE, "command": ["sh", "-c", command]}]}});
        pods.create(&PostParams::default(), &serde_json::from_value(pod)?)
            .await?;
    }
    until("the pods to run", Duration::from_secs(120), || async {
        let mut running = true;
        for name in ["sleeper", "sink"] {
            let pod = pods.get(name).await?;
            running &= pod.status.and_then(|s| s.phase).as_deref() == Some("Running");
        }
        Ok(running)
    })
    .await?;
    let sleeper = pods.get("sleeper").await?;
    let sink_ip = pods
        .get("sink")
        .await?
        .status
        .and_then(|s| s.pod_ip)
        .context("the sink's IP")?;
    let runtime = RemoteRuntime::connect(&cluster.layout().socket().to_string_lossy())?;
    let uid = sleeper.metadata.uid.clone().unwrap_or_default();

    // Warm both paths, then alternate rounds so the machine's swings fall
    // on both alike.
    through_api(&cluster.kubeconfig).await?;
    floor(&runtime, &uid).await?;
    let (mut api, mut direct) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        api.extend(through_api(&cluster.kubeconfig).await?);
        direct.extend(floor(&runtime, &uid).await?);
    }

    let bytes = megabytes << 20;
    let clients = kubectl_dir();
    let newest = ["1.35", "1.34", "1.33"]
        .iter()
        .map(|v| clients.join(format!("kubectl.{v}")))
        .find(|p| p.is_file())
        .context("kubectl 1.33 or newer (scripts/setup --test installs them)")?;
    let spdy = clients.join("kubectl.1.27");
    let newest_name = newest
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let kubeconfig = cluster.kubeconfig.clone();
    let sink_address = sink_ip.clone();
    let (tunnelled, plain, straight) = tokio::task::spawn_blocking(move || {
        let best = |f: &dyn Fn() -> anyhow::Result<f64>| -> anyhow::Result<f64> {
            let mut runs = Vec::new();
            for _ in 0..3 {
                runs.push(f()?);
            }
            Ok(runs.into_iter().fold(0.0, f64::max))
        };
        let forward = Forward::start(&newest, &kubeconfig, "sink", 9000)?;
        let tunnelled = best(&|| copy_to(("127.0.0.1", forward.1), bytes))?;
        drop(forward);
        let forward = Forward::start(&spdy, &kubeconfig, "sink", 9000)?;
        let plain = best(&|| copy_to(("127.0.0.1", forward.1), bytes))?;
        drop(forward);
        let straight = best(&|| copy_to((sink_address.as_str(), 9000), bytes))?;
        anyhow::Ok((tunnelled, plain, straight))
    })
    .await??;

    // The same SPDY client both ways: through the API server and the
    // agent, and straight at the runtime (what the relays cost).
    let sandbox = runtime
        .list_pod_sandboxes(pods.get("sink").await?.metadata.uid.as_deref())
        .await?
        .into_iter()
        .next()
        .context("the sink's sandbox")?
        .id;
    let (mut relayed, mut floor_rate) = (0.0_f64, 0.0_f64);
    for _ in 0..3 {
        relayed = relayed.max(forward_through_api(&cluster.kubeconfig, bytes).await?);
        floor_rate = floor_rate.max(forward_at_runtime(&runtime, &sandbox, bytes).await?);
    }

    let metrics = vec![
        Metric::new("exec_roundtrip_p50_ms", "ms", percentile(&api, 50.0))
            .peer("CRI Exec + runtime stream", percentile(&direct, 50.0))
            .target("≤ 1.5× the floor"),
        Metric::new("exec_roundtrip_p99_ms", "ms", percentile(&api, 99.0))
            .peer("CRI Exec + runtime stream", percentile(&direct, 99.0))
            .target("≤ 1.5× the floor"),
        Metric::new("portforward_mb_per_s", "MB/s", tunnelled)
            .peer("TCP to the pod IP", straight)
            .target("≥ 0.5× the direct copy"),
        Metric::new("portforward_spdy_mb_per_s", "MB/s", plain).peer("TCP to the pod IP", straight),
        Metric::new("portforward_relayed_mb_per_s", "MB/s", relayed)
            .peer("the same client at the runtime", floor_rate),
    ];
    Ok(Report {
        scenario: "streams".into(),
        quick: options.quick,
        partial: None,
        metrics,
        conditions: vec![
            format!(
                "`exec_roundtrip_…`: {} sequential `exec … true` into a running busybox pod through the API server (a new TLS connection and `v5.channel.k8s.io` WebSocket each: API server → SPDY to the agent → CRI `Exec` → the agent's relay to containerd's streaming server), from the connect to the exit status; the floor: CRI `Exec` to the same containerd and a `v4.channel.k8s.io` WebSocket to the URL it gives, by the same client code; rounds alternated",
                2 * EXECS
            ),
            format!(
                "`portforward_mb_per_s`: {megabytes} MiB written through `kubectl port-forward` ({}, SPDY tunnelled in WebSocket) to a pod reading it to its end with busybox `nc`, timed to the pod's close, the best of 3; `portforward_spdy_mb_per_s`: the same with kubectl 1.27 (SPDY); the floor: the same copy to the pod's address over the bridge",
                newest_name
            ),
            "`portforward_relayed_mb_per_s`: the bench's own SPDY client (rudder-stream: client-go's streams, 1 MiB writes) through the API server and the agent, beside the same client straight at containerd's streaming URL — what rudder's relays cost, apart from the runtime's and kubectl's own SPDY".into(),
        ],
    })
}
