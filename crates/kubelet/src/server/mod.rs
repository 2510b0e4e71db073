//! The agent's HTTPS server (upstream's kubelet server, port 10250): the
//! API server comes here for what only the node has — a container's log
//! (`GET /containerLogs/{namespace}/{pod}/{container}`), and the streams
//! into a pod (`/exec`, `/attach`, `/portForward`, `/run`: `streams.rs`).
//!
//! TLS with a serving certificate from the cluster CA; clients present a
//! certificate from the same CA (the API server's kubelet client
//! certificate). As upstream's kubelet with anonymous access off, a
//! request without one is 401; a user the agent does not let in (anyone
//! but `system:masters`: there is no SubjectAccessReview yet) is 403 with
//! upstream's message. Errors are plain text, as the kubelet writes them;
//! the API server turns them into `Status`es.

pub mod crilog;
mod logs;
mod pods;
mod streams;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::Pod;
use rudder_runtime::informer::Store;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::cri::Runtime;

/// The serving certificate and key and the CA client certificates must
/// come from, PEM.
#[derive(Clone)]
pub struct ServingTls {
    pub cert_pem: String,
    pub key_pem: String,
    pub client_ca_pem: String,
}

impl std::fmt::Debug for ServingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingTls").finish_non_exhaustive()
    }
}

/// A server that could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("read the agent's TLS material: {0}")]
    Pem(#[source] std::io::Error),
    #[error("the agent's TLS material: {0}")]
    Tls(#[from] rustls::Error),
    #[error("the agent's client CA: {0}")]
    ClientCa(#[from] rustls::server::VerifierBuilderError),
    #[error("listen on {address}: {source}")]
    Listen {
        address: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// What the handlers read: the node's pods (as the API has them) and the
/// runtime; how streams are kept.
#[derive(Clone)]
pub struct Node {
    pub pods: Store<Pod>,
    pub runtime: Arc<dyn Runtime>,
    pub streaming: Streaming,
}

/// How the agent keeps streams (exec, attach, port-forward).
#[derive(Debug, Clone)]
pub struct Streaming {
    /// A stream on which nothing moves this long is closed (upstream's
    /// `--streaming-connection-idle-timeout`, 4 h).
    pub idle_timeout: Duration,
    /// Ends every open stream (the agent's shutdown).
    pub stop: CancellationToken,
}

/// Upstream's default `--streaming-connection-idle-timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 3600);

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("pods", &self.pods.len())
            .finish()
    }
}

type Body = BoxBody<Bytes, Infallible>;

/// A plain-text response, as the kubelet writes its errors.
fn text(code: StatusCode, message: impl Into<String>) -> Response<Body> {
    let mut body = message.into();
    if !body.ends_with('\n') {
        body.push('\n');
    }
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = code;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A request refused as the kubelet refuses it: a code and a plain-text
/// message.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub code: StatusCode,
    pub message: String,
}

impl Refusal {
    pub fn new(code: StatusCode, message: impl Into<String>) -> Self {
        Refusal {
            code,
            message: message.into(),
        }
    }

    pub fn into_response(self) -> Response<Body> {
        text(self.code, self.message)
    }
}

/// The rustls configuration: the serving certificate, client
/// certificates verified against the CA when offered.
pub fn tls_config(tls: &ServingTls) -> Result<rustls::ServerConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = |pem: &str| -> Result<Vec<CertificateDer<'static>>, Error> {
        rustls_pemfile::certs(&mut pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(Error::Pem)
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs(&tls.client_ca_pem)? {
        roots.add(cert)?;
    }
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut tls.key_pem.as_bytes())
        .map_err(Error::Pem)?
        .ok_or_else(|| Error::Pem(std::io::Error::other("no private key")))?;
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(&tls.cert_pem)?, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Who a client certificate says the client is: its common name and
/// organizations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    fn from_certificate(der: &[u8]) -> Option<User> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let subject = cert.subject();
        let name = subject
            .iter_common_name()
            .next()?
            .as_str()
            .ok()?
            .to_string();
        let groups = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_string))
            .collect();
        Some(User { name, groups })
    }
}

/// Percent-decoded `key=value` pairs of a query.
pub(crate) fn query_pairs(query: &str) -> Vec<(String, String)> {
    fn decode(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = |b: u8| (b as char).to_digit(16);
                    match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                        (Some(h), Some(l)) => {
                            out.push((h * 16 + l) as u8);
                            i += 2;
                        }
                        _ => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

/// Upstream's kubelet authorizer attributes for a path: the `nodes`
/// subresource it stands for.
fn subresource(path: &str) -> &'static str {
    match path.trim_start_matches('/').split('/').next() {
        Some("stats") => "stats",
        Some("metrics") => "metrics",
        Some("logs") => "log",
        Some("spec") => "spec",
        _ => "proxy",
    }
}

/// Authentication and authorization of one request.
fn admit(user: Option<&User>, request: &Request<Incoming>) -> Result<(), Refusal> {
    let Some(user) = user else {
        return Err(Refusal::new(StatusCode::UNAUTHORIZED, "Unauthorized"));
    };
    if user.groups.iter().any(|g| g == "system:masters") {
        return Ok(());
    }
    let verb = match *request.method() {
        hyper::Method::GET | hyper::Method::HEAD => "get",
        hyper::Method::POST => "create",
        hyper::Method::PUT => "update",
        hyper::Method::PATCH => "patch",
        hyper::Method::DELETE => "delete",
        _ => "*",
    };
    Err(Refusal::new(
        StatusCode::FORBIDDEN,
        format!(
            "Forbidden (user={}, verb={verb}, resource=nodes, subresource={})",
            user.name,
            subresource(request.uri().path())
        ),
    ))
}

async fn handle(
    node: Node,
    user: Option<User>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    if let Err(refused) = admit(user.as_ref(), &request) {
        return Ok(refused.into_response());
    }
    let path = request.uri().path().to_string();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let method = request.method().clone();
    let response = match (&method, segments.as_slice()) {
        (&hyper::Method::GET, ["healthz"]) => text(StatusCode::OK, "ok"),
        (&hyper::Method::GET, ["pods"]) => pods::list(&node),
        (&hyper::Method::GET, ["containerLogs", namespace, pod, container]) => {
            logs::container_logs(&node, namespace, pod, container, request.uri().query()).await
        }
        (method, [verb @ ("exec" | "attach" | "portForward"), rest @ ..]) => {
            let kind = match *verb {
                "exec" => streams::Kind::Exec,
                "attach" => streams::Kind::Attach,
                _ => streams::Kind::PortForward,
            };
            let target = streams::target(rest, kind != streams::Kind::PortForward);
            match (method, target) {
                (&hyper::Method::GET | &hyper::Method::POST, Some(target)) => {
                    streams::serve(&node, kind, target, request).await
                }
                (_, Some(_)) => streams::method_not_allowed(),
                (_, None) => text(StatusCode::NOT_FOUND, "404 page not found"),
            }
        }
        (method, ["run", rest @ ..]) => match (method, streams::target(rest, true)) {
            (&hyper::Method::POST, Some(target)) => {
                streams::run(&node, target, request.uri().query()).await
            }
            (_, Some(_)) => streams::method_not_allowed(),
            (_, None) => text(StatusCode::NOT_FOUND, "404 page not found"),
        },
        _ => text(StatusCode::NOT_FOUND, "404 page not found"),
    };
    Ok(response)
}

/// How long a client has to finish the TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Listens on `address`; serves until `stop`.
pub async fn bind(address: std::net::SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(address)
        .await
        .map_err(|source| Error::Listen { address, source })
}

/// Serves `listener` until `stop`; open streams (a followed log) end with
/// it.
pub async fn serve(
    listener: TcpListener,
    tls: rustls::ServerConfig,
    node: Node,
    stop: CancellationToken,
) {
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let mut connections = JoinSet::new();
    loop {
        let (tcp, peer) = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    tracing::warn!(%error, "the agent's server could not accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (acceptor, node, stop) = (acceptor.clone(), node.clone(), stop.clone());
        connections.spawn(async move {
            let _ = tcp.set_nodelay(true);
            let stream = match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "TLS handshake with the agent failed");
                    return;
                }
                Err(_) => return,
            };
            let user = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|certs| certs.first())
                .and_then(|cert| User::from_certificate(cert));
            let service = hyper::service::service_fn(move |request| {
                handle(node.clone(), user.clone(), request)
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(%peer, %error, "a connection to the agent ended with an error");
                    }
                }
                _ = stop.cancelled() => {}
            }
        });
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_upstreams_node_subresources() {
        assert_eq!(subresource("/containerLogs/default/p/c"), "proxy");
        assert_eq!(subresource("/logs/syslog"), "log");
        assert_eq!(subresource("/stats/summary"), "stats");
    }
}
