//! Probes (upstream's prober): startup, liveness and readiness probes of
//! every running container, each a task of its own that runs its probe —
//! exec (CRI ExecSync), httpGet, tcpSocket, grpc — every `periodSeconds` after
//! `initialDelaySeconds`, counts consecutive results against the
//! thresholds, and wakes the pod's worker when a result flips. Liveness
//! and readiness wait until the startup probe has succeeded.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{
    Container, ExecAction, HTTPGetAction, LifecycleHandler, Pod, Probe,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rudder_runtime::EventType;
use rudder_runtime::events::reference_to;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::observed::Observed;
use super::worker::Shared;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Startup,
    Liveness,
    Readiness,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
        }
    }

    fn of(self, container: &Container) -> Option<&Probe> {
        match self {
            Kind::Startup => container.startup_probe.as_ref(),
            Kind::Liveness => container.liveness_probe.as_ref(),
            Kind::Readiness => container.readiness_probe.as_ref(),
        }
    }

    /// The result before the first probe: a container is alive, not ready
    /// and not started.
    fn initial(self) -> bool {
        self == Kind::Liveness
    }
}

/// What one probe run found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure(String),
}

/// The current results of a pod's probes, by container id and kind.
#[derive(Debug, Default)]
pub struct Results {
    map: Mutex<HashMap<(String, Kind), bool>>,
}

impl Results {
    pub fn get(&self, container_id: &str, kind: Kind) -> Option<bool> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(container_id.to_string(), kind))
            .copied()
    }

    /// Sets a result; whether it changed.
    fn set(&self, container_id: &str, kind: Kind, value: bool) -> bool {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.insert((container_id.to_string(), kind), value) != Some(value)
    }

    fn retain(&self, ids: &HashSet<String>) {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, _), _| ids.contains(id));
    }
}

/// Whether a running container is started (its startup probe succeeded,
/// or it has none) and ready (its readiness probe succeeded, or it has
/// none).
pub fn started_and_ready(
    container: &Container,
    container_id: &str,
    results: &Results,
) -> (bool, bool) {
    let started =
        container.startup_probe.is_none() || results.get(container_id, Kind::Startup) == Some(true);
    let ready = started
        && (container.readiness_probe.is_none()
            || results.get(container_id, Kind::Readiness) == Some(true));
    (started, ready)
}

/// Whether a container failed its liveness probe (it is then restarted).
pub fn unhealthy(container_id: &str, results: &Results) -> bool {
    results.get(container_id, Kind::Liveness) == Some(false)
}

/// A pod's probe tasks.
#[derive(Debug, Default)]
pub struct Prober {
    tasks: HashMap<(String, Kind), CancellationToken>,
    pub results: Arc<Results>,
}

impl Drop for Prober {
    fn drop(&mut self) {
        for token in self.tasks.values() {
            token.cancel();
        }
    }
}

impl Prober {
    /// Runs a task for every probe of every running container, and stops
    /// the tasks of containers that no longer run.
    pub fn sync(
        &mut self,
        shared: &Arc<Shared>,
        pod: &Pod,
        observed: &Observed,
        kick: &Arc<Notify>,
    ) {
        let spec = pod.spec.clone().unwrap_or_default();
        let pod_ip = if spec.host_network.unwrap_or(false) {
            Some(shared.host_ip.clone())
        } else {
            observed.ready_sandbox().and_then(|s| s.ip.clone())
        };
        let mut wanted = HashSet::new();
        let terminating = pod.metadata.deletion_timestamp.is_some();
        for container in &spec.containers {
            let Some(instance) = observed.latest(&container.name).filter(|i| i.running()) else {
                continue;
            };
            if terminating {
                continue;
            }
            for kind in [Kind::Startup, Kind::Liveness, Kind::Readiness] {
                let Some(probe) = kind.of(container) else {
                    continue;
                };
                let key = (instance.id.clone(), kind);
                wanted.insert(key.clone());
                if self.tasks.contains_key(&key) {
                    continue;
                }
                let token = CancellationToken::new();
                self.tasks.insert(key, token.clone());
                self.results.set(&instance.id, kind, kind.initial());
                let task = Task {
                    shared: shared.clone(),
                    pod: Arc::new(pod.clone()),
                    container: container.clone(),
                    container_id: instance.id.clone(),
                    kind,
                    probe: probe.clone(),
                    pod_ip: pod_ip.clone(),
                    started_at: instance.started_at.unwrap_or_else(SystemTime::now),
                    results: self.results.clone(),
                    kick: kick.clone(),
                };
                tokio::spawn(task.run(token));
            }
        }
        self.tasks.retain(|key, token| {
            let keep = wanted.contains(key);
            if !keep {
                token.cancel();
            }
            keep
        });
        let ids: HashSet<String> = wanted.into_iter().map(|(id, _)| id).collect();
        self.results.retain(&ids);
    }
}

struct Task {
    shared: Arc<Shared>,
    pod: Arc<Pod>,
    container: Container,
    container_id: String,
    kind: Kind,
    probe: Probe,
    pod_ip: Option<String>,
    started_at: SystemTime,
    results: Arc<Results>,
    kick: Arc<Notify>,
}

fn seconds(value: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(value.unwrap_or(default).max(0) as u64)
}

impl Task {
    async fn run(self, stop: CancellationToken) {
        let clock = self.shared.clock.clone();
        let period = seconds(self.probe.period_seconds, 10).max(Duration::from_secs(1));
        let delay = seconds(self.probe.initial_delay_seconds, 0);
        let first = self.started_at + delay;
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = clock.sleep_until(first) => {}
        }
        let success_threshold = self.probe.success_threshold.unwrap_or(1).max(1);
        let failure_threshold = self.probe.failure_threshold.unwrap_or(3).max(1);
        let (mut successes, mut failures) = (0, 0);
        loop {
            let waiting_for_startup = self.kind != Kind::Startup
                && self.container.startup_probe.is_some()
                && self.results.get(&self.container_id, Kind::Startup) != Some(true);
            let startup_done = self.kind == Kind::Startup
                && self.results.get(&self.container_id, Kind::Startup) == Some(true);
            if startup_done {
                return;
            }
            if !waiting_for_startup {
                match self.probe_once().await {
                    Outcome::Success => {
                        failures = 0;
                        successes += 1;
                        if successes >= success_threshold
                            && self.results.set(&self.container_id, self.kind, true)
                        {
                            self.kick.notify_one();
                        }
                    }
                    Outcome::Failure(output) => {
                        successes = 0;
                        failures += 1;
                        self.shared.recorder.event(
                            &reference_to(self.pod.as_ref()),
                            EventType::Warning,
                            "Unhealthy",
                            "ProbeWarning",
                            &format!("{} probe failed: {output}", self.kind.name()),
                        );
                        if failures >= failure_threshold
                            && self.results.set(&self.container_id, self.kind, false)
                        {
                            self.kick.notify_one();
                        }
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = clock.sleep(period) => {}
            }
        }
    }

    async fn probe_once(&self) -> Outcome {
        let timeout = seconds(self.probe.timeout_seconds, 1).max(Duration::from_secs(1));
        let action = Action::of_probe(&self.probe);
        run_action(
            &self.shared,
            &self.container,
            &self.container_id,
            self.pod_ip.as_deref(),
            &action,
            timeout,
        )
        .await
    }
}

/// What a probe or a lifecycle hook does.
#[derive(Debug, Default)]
pub struct Action<'a> {
    pub exec: Option<&'a ExecAction>,
    pub http_get: Option<&'a HTTPGetAction>,
    /// A TCP connect: the host (default: the pod's IP) and port.
    pub tcp: Option<(Option<String>, IntOrString)>,
    /// A gRPC health check of the pod's IP at this port, for this service.
    pub grpc: Option<(u16, String)>,
    pub sleep_seconds: Option<i64>,
}

impl<'a> Action<'a> {
    pub fn of_probe(probe: &'a Probe) -> Self {
        Action {
            exec: probe.exec.as_ref(),
            http_get: probe.http_get.as_ref(),
            tcp: probe
                .tcp_socket
                .as_ref()
                .map(|t| (t.host.clone(), t.port.clone())),
            grpc: probe
                .grpc
                .as_ref()
                .map(|g| (g.port as u16, g.service.clone().unwrap_or_default())),
            sleep_seconds: None,
        }
    }

    pub fn of_hook(handler: &'a LifecycleHandler) -> Self {
        Action {
            exec: handler.exec.as_ref(),
            http_get: handler.http_get.as_ref(),
            tcp: handler
                .tcp_socket
                .as_ref()
                .map(|t| (t.host.clone(), t.port.clone())),
            grpc: None,
            sleep_seconds: handler.sleep.as_ref().map(|s| s.seconds),
        }
    }
}

/// Runs a probe's or hook's action against a container.
pub async fn run_action(
    shared: &Shared,
    container: &Container,
    container_id: &str,
    pod_ip: Option<&str>,
    action: &Action<'_>,
    timeout: Duration,
) -> Outcome {
    if let Some(exec) = action.exec {
        let command = exec.command.clone().unwrap_or_default();
        return match shared
            .runtime
            .exec_sync(container_id, command, timeout.as_secs() as i64)
            .await
        {
            Ok(result) if result.exit_code == 0 => Outcome::Success,
            Ok(result) => Outcome::Failure(
                String::from_utf8_lossy(&[result.stdout, result.stderr].concat())
                    .trim()
                    .to_string(),
            ),
            Err(error) => Outcome::Failure(error.to_string()),
        };
    }
    let port_of = |port: &IntOrString| match port {
        IntOrString::Int(n) => Some(*n as u16),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port as u16),
    };
    let pod_ip = pod_ip.unwrap_or_default().to_string();
    if let Some(http) = action.http_get {
        let host = http.host.clone().unwrap_or(pod_ip);
        let Some(port) = port_of(&http.port) else {
            return Outcome::Failure(format!("no port {:?} in the container", http.port));
        };
        return match tokio::time::timeout(timeout, http_get(&host, port, http)).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::Failure(format!(
                "Get \"http://{host}:{port}{}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
                http.path.as_deref().unwrap_or("/")
            )),
        };
    }
    if let Some((host, port)) = &action.tcp {
        let host = host.clone().unwrap_or(pod_ip);
        let Some(port) = port_of(port) else {
            return Outcome::Failure("no such port in the container".into());
        };
        return match tokio::time::timeout(
            timeout,
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await
        {
            Ok(Ok(_)) => Outcome::Success,
            Ok(Err(error)) => Outcome::Failure(format!("dial tcp {host}:{port}: {error}")),
            Err(_) => Outcome::Failure(format!("dial tcp {host}:{port}: i/o timeout")),
        };
    }
    if let Some((port, service)) = &action.grpc {
        return grpc_check(&pod_ip, *port, service, timeout).await;
    }
    if let Some(seconds) = action.sleep_seconds {
        tokio::time::sleep(Duration::from_secs(seconds.max(0) as u64).min(timeout)).await;
    }
    Outcome::Success
}

/// grpc.health.v1, the protocol of `grpc` probes.
mod health {
    tonic::include_proto!("grpc.health.v1");
}

/// A gRPC health check as upstream's prober makes it: plain HTTP/2 (no
/// TLS), `Check` for `service`, success only for `SERVING`; its messages.
async fn grpc_check(host: &str, port: u16, service: &str, timeout: Duration) -> Outcome {
    use health::health_check_response::ServingStatus;

    let address = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let endpoint = match tonic::transport::Endpoint::from_shared(format!("http://{address}")) {
        Ok(endpoint) => endpoint
            .connect_timeout(timeout)
            .timeout(timeout)
            .user_agent("kube-probe/1.33")
            .expect("a valid user agent"),
        Err(error) => {
            return Outcome::Failure(format!(
                "error: failed to connect service at \"{address}\": {error}"
            ));
        }
    };
    let channel = match tokio::time::timeout(timeout, endpoint.connect()).await {
        Ok(Ok(channel)) => channel,
        Ok(Err(error)) => {
            return Outcome::Failure(format!(
                "error: failed to connect service at \"{address}\": {}",
                error_chain(&error)
            ));
        }
        Err(_) => {
            return Outcome::Failure(format!(
                "timeout: failed to connect service \"{address}\" within {}s: context deadline exceeded",
                timeout.as_secs()
            ));
        }
    };
    let mut client = health::health_client::HealthClient::new(channel);
    let request = health::HealthCheckRequest {
        service: service.to_string(),
    };
    let answer = match tokio::time::timeout(timeout, client.check(request)).await {
        Ok(answer) => answer,
        Err(_) => {
            return Outcome::Failure(format!(
                "timeout: health rpc did not complete within {}s",
                timeout.as_secs()
            ));
        }
    };
    match answer {
        Ok(response) => match response.into_inner().status() {
            ServingStatus::Serving => Outcome::Success,
            other => Outcome::Failure(format!(
                "service unhealthy (responded with \"{}\")",
                other.as_str_name()
            )),
        },
        Err(status) if status.code() == tonic::Code::Unimplemented => Outcome::Failure(format!(
            "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
            status.message()
        )),
        Err(status) if status.code() == tonic::Code::DeadlineExceeded => Outcome::Failure(format!(
            "timeout: health rpc did not complete within {}s",
            timeout.as_secs()
        )),
        Err(status) => Outcome::Failure(format!(
            "error: health rpc probe failed: rpc error: code = {:?} desc = {}",
            status.code(),
            status.message()
        )),
    }
}

/// An error and its sources, as one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// An HTTP GET as upstream's prober makes it: success for 200–399. HTTPS
/// as upstream's too: TLS without verifying the container's certificate
/// (`InsecureSkipVerify`), the server name the probe's host.
async fn http_get(host: &str, port: u16, action: &HTTPGetAction) -> Outcome {
    let path = action.path.clone().unwrap_or_else(|| "/".into());
    let https = action.scheme.as_deref() == Some("HTTPS");
    let url = format!(
        "{}://{host}:{port}{path}",
        if https { "https" } else { "http" }
    );
    let stream = match tokio::net::TcpStream::connect((host, port)).await {
        Ok(stream) => stream,
        Err(error) => {
            return Outcome::Failure(format!("Get \"{url}\": dial tcp {host}:{port}: {error}"));
        }
    };
    if !https {
        return http_exchange(stream, host, port, &path, &url, action).await;
    }
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .unwrap_or_else(|_| rustls::pki_types::ServerName::try_from("localhost").expect("a name"));
    let tls = match rudder_stream::tls::unverified() {
        Ok(tls) => tls,
        Err(error) => return Outcome::Failure(format!("Get \"{url}\": {error}")),
    };
    match tls.connect(name, stream).await {
        Ok(tls) => http_exchange(tls, host, port, &path, &url, action).await,
        Err(error) => Outcome::Failure(format!("Get \"{url}\": {error}")),
    }
}

/// The request and the status line of its answer, over `stream`.
async fn http_exchange<S>(
    mut stream: S,
    host: &str,
    port: u16,
    path: &str,
    url: &str,
    action: &HTTPGetAction,
) -> Outcome
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\nConnection: close\r\n"
    );
    for header in action.http_headers.iter().flatten() {
        request.push_str(&format!("{}: {}\r\n", header.name, header.value));
    }
    request.push_str("\r\n");
    if let Err(error) = stream.write_all(request.as_bytes()).await {
        return Outcome::Failure(format!("Get \"{url}\": {error}"));
    }
    let mut head = vec![0u8; 1024];
    let read = match stream.read(&mut head).await {
        Ok(n) => n,
        Err(error) => return Outcome::Failure(format!("Get \"{url}\": {error}")),
    };
    let text = String::from_utf8_lossy(&head[..read]);
    let code: Option<u16> = text.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    match code {
        Some(code) if (200..400).contains(&code) => Outcome::Success,
        Some(code) => Outcome::Failure(format!("HTTP probe failed with statuscode: {code}")),
        None => Outcome::Failure(format!("Get \"{url}\": malformed HTTP response")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TLS server on loopback with a self-signed certificate answering
    /// every connection with `status`; its port.
    async fn https_server(status: &'static str) -> u16 {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["pod.local".into()])
            .expect("params")
            .self_signed(&key)
            .expect("certificate");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .expect("config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut request = vec![0u8; 1024];
                    let _ = tls.read(&mut request).await;
                    let answer = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
                    let _ = tls.write_all(answer.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        port
    }

    fn https(port: u16) -> HTTPGetAction {
        HTTPGetAction {
            path: Some("/healthz".into()),
            port: IntOrString::Int(port.into()),
            scheme: Some("HTTPS".into()),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn an_https_probe_speaks_tls_and_reads_the_status() {
        let ok = https_server("200 OK").await;
        assert!(matches!(
            http_get("127.0.0.1", ok, &https(ok)).await,
            Outcome::Success
        ));
        let failing = https_server("503 Service Unavailable").await;
        match http_get("127.0.0.1", failing, &https(failing)).await {
            Outcome::Failure(message) => {
                assert_eq!(message, "HTTP probe failed with statuscode: 503")
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn an_https_probe_of_a_plain_http_server_fails() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                let _ = tcp.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await;
            }
        });
        match http_get("127.0.0.1", port, &https(port)).await {
            Outcome::Failure(message) => {
                assert!(message.starts_with("Get \"https://127.0.0.1:"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// A gRPC health server on loopback: the empty service and "web" are
    /// SERVING, "down" NOT_SERVING, "old" answers Unimplemented (as a
    /// server without the health service would), others NOT_FOUND.
    async fn grpc_server() -> u16 {
        use health::health_check_response::ServingStatus;
        use health::health_server::{Health, HealthServer};

        struct Checks;

        #[tonic::async_trait]
        impl Health for Checks {
            async fn check(
                &self,
                request: tonic::Request<health::HealthCheckRequest>,
            ) -> Result<tonic::Response<health::HealthCheckResponse>, tonic::Status> {
                let status = match request.into_inner().service.as_str() {
                    "" | "web" => ServingStatus::Serving,
                    "down" => ServingStatus::NotServing,
                    "old" => return Err(tonic::Status::unimplemented("unknown service")),
                    _ => return Err(tonic::Status::not_found("unknown service")),
                };
                Ok(tonic::Response::new(health::HealthCheckResponse {
                    status: status as i32,
                }))
            }
        }

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let incoming = futures::stream::unfold(listener, |listener| async move {
            let accepted = listener.accept().await.map(|(tcp, _)| tcp);
            Some((accepted, listener))
        });
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(HealthServer::new(Checks))
                .serve_with_incoming(incoming),
        );
        port
    }

    #[tokio::test]
    async fn a_grpc_probe_asks_the_health_service() {
        let port = grpc_server().await;
        let second = Duration::from_secs(1);
        assert_eq!(
            grpc_check("127.0.0.1", port, "", second).await,
            Outcome::Success
        );
        assert_eq!(
            grpc_check("127.0.0.1", port, "web", second).await,
            Outcome::Success
        );
        assert_eq!(
            grpc_check("127.0.0.1", port, "down", second).await,
            Outcome::Failure("service unhealthy (responded with \"NOT_SERVING\")".into())
        );
        assert_eq!(
            grpc_check("127.0.0.1", port, "old", second).await,
            Outcome::Failure(
                "error: this server does not implement the grpc health protocol \
                 (grpc.health.v1.Health): unknown service"
                    .into()
            )
        );
        assert_eq!(
            grpc_check("127.0.0.1", port, "db", second).await,
            Outcome::Failure(
                "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"
                    .into()
            )
        );
    }

    #[tokio::test]
    async fn a_grpc_probe_of_a_closed_port_fails_to_connect() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        match grpc_check("127.0.0.1", port, "", Duration::from_secs(1)).await {
            Outcome::Failure(message) => assert!(
                message.starts_with(&format!(
                    "error: failed to connect service at \"127.0.0.1:{port}\""
                )),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_grpc_probe_is_an_action_of_its_own() {
        let probe = Probe {
            grpc: Some(k8s_openapi::api::core::v1::GRPCAction {
                port: 9090,
                service: Some("web".into()),
            }),
            ..Default::default()
        };
        let action = Action::of_probe(&probe);
        assert_eq!(action.grpc, Some((9090, "web".to_string())));
        assert!(action.tcp.is_none());
    }
}
