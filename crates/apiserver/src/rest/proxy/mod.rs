//! The proxy subresources — `pods/proxy`, `services/proxy`, `nodes/proxy`
//! (upstream's `ProxyREST`s and the `UpgradeAwareHandler` they return):
//! `…/{[scheme:]name[:port]}/proxy[/path]` is sent on to the pod's IP, a
//! ready endpoint of the Service, or the node's agent, with the path and
//! query asked, and the backend's answer streamed back.
//!
//! - Where: `location.rs` (upstream's `ResourceLocation`s), addresses that
//!   are not global unicast refused (`address not allowed`).
//! - What changes on the way: `rewrite.rs` (hop-by-hop headers and the
//!   client's credentials stay behind, `X-Forwarded-Uri` is added, the
//!   backend's `Location` and HTML links point back through the proxy, its
//!   CORS headers are dropped — upstream's wrapping `proxy.Transport`).
//! - How: pods and services over plain TCP (`https:` over TLS that checks
//!   no certificate, as upstream's proxy transport), the node's agent with
//!   the API server's kubelet client certificate. A backend that cannot
//!   be reached is upstream's 503 `error trying to reach service: …`.
//! - Upgrades (a WebSocket through a service) are forwarded and, after the
//!   backend's 101, spliced byte for byte.
//!
//! Proxy requests are long-running: the caller counts them against
//! neither the in-flight limit nor a timeout, and has authorized them.

mod location;
mod rewrite;

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use rand::Rng;
use rudder_api::Status;
use rudder_stream::upgrade::{self, Forward};
use tokio::io::{AsyncRead, AsyncWrite};

use self::location::{Location, Scheme, Transport};
use self::rewrite::Rewriter;
use super::Context;
use crate::response::{ApiError, ApiResult};

/// How long a connection to a backend may take (upstream's proxy dialer).
const DIAL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a TLS handshake with a backend may take (Go's transport
/// default).
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a spliced upgrade may stay silent. Upstream's proxy has no
/// such limit; a day stands for none.
const IDLE_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// A connection to a backend.
trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}
type Connection = Box<dyn Io>;

/// Serves a proxy subresource; `request` still holds its body and any
/// upgrade.
pub async fn serve(ctx: Context, request: axum::extract::Request) -> ApiResult {
    let id = rewrite::percent_decode(ctx.name());
    let location = match ctx.def().plural.as_str() {
        "pods" => locate_pod(&ctx, &id).await?,
        "services" => locate_service(&ctx, &id).await?,
        _ => locate_node(&ctx, &id).await?,
    };
    if location.transport == Transport::Kubelet && ctx.state.kubelet.get().is_none() {
        return Err(Status::unavailable("this server has no client for node agents").into());
    }
    let client_path = rewrite::percent_decode(request.uri().path());
    // `api/v1/namespaces/<ns>/<resource>/<name>/proxy` or
    // `api/v1/<resource>/<name>/proxy`.
    let skip = if ctx.namespace().is_some() { 7 } else { 5 };
    let mut path =
        rewrite::join_preserving_trailing_slash("", &rewrite::subpath(&client_path, skip));
    let client_host = request
        .headers()
        .get(header::HOST)
        .cloned()
        .or_else(|| {
            let authority = request.uri().authority()?;
            HeaderValue::from_str(authority.as_str()).ok()
        })
        .or_else(|| HeaderValue::from_str(&location.url_host()).ok())
        .unwrap_or(HeaderValue::from_static("localhost"));
    if upgrade::is_upgrade(request.headers()) {
        return forward_upgrade(&ctx, &location, &path, &client_host, request).await;
    }
    if !path.ends_with('/') && client_path.ends_with('/') {
        path.push('/');
    }
    // Upstream's `proxyRedirectsforRootPath`: `…/proxy` is redirected to
    // `…/proxy/` (https://issue.k8s.io/4958).
    if path.is_empty() && matches!(*request.method(), Method::GET | Method::HEAD) {
        return Ok(redirect_to_root(request.uri()));
    }
    let rewriter = Rewriter {
        backend_host: location.url_host(),
        request_host: String::from_utf8_lossy(client_host.as_bytes()).into_owned(),
        prepend: Rewriter::prepend_of(&client_path, &path),
    };
    forward(&ctx, &location, &path, client_host, &rewriter, request).await
}

/// A 301 to the request's path with a slash after it.
fn redirect_to_root(uri: &Uri) -> Response {
    let mut target = format!("{}/", uri.path());
    if let Some(query) = uri.query().filter(|q| !q.is_empty()) {
        target.push('?');
        target.push_str(query);
    }
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::MOVED_PERMANENTLY;
    if let Ok(value) = HeaderValue::from_str(&target) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// Upstream's pod `ResourceLocation`.
async fn locate_pod(ctx: &Context, id: &str) -> Result<Location, Status> {
    let (scheme, name, port) = location::split_scheme_name_port(id)
        .ok_or_else(|| Status::bad_request(format!("invalid pod request {id:?}")))?;
    let pod = ctx.core_object("pods", ctx.namespace(), name).await?;
    location::pod(&pod, id, scheme, port)
}

/// Upstream's service `ResourceLocation`: a port number stands for the
/// Service's port of that number (by its name); the Service's Endpoints
/// are tried from a random address for one serving that port name that is
/// an IP of the pod it names, in the Service's namespace.
async fn locate_service(ctx: &Context, id: &str) -> Result<Location, Status> {
    let (scheme, name, port) = location::split_scheme_name_port(id)
        .ok_or_else(|| Status::bad_request(format!("invalid service request {id:?}")))?;
    let namespace = ctx.namespace();
    let mut port = port.to_string();
    if let Ok(number) = port.parse::<i64>() {
        let service = ctx.core_object("services", namespace, name).await?;
        port = location::service_port_name(&service, name, number)?;
    }
    let endpoints = ctx.core_object("endpoints", namespace, name).await?;
    if endpoints["subsets"].as_array().is_none_or(Vec::is_empty) {
        return Err(location::service_unavailable(format!(
            "no endpoints available for service {name:?}"
        )));
    }
    let candidates = {
        let mut random = rand::rng();
        location::candidates(&endpoints, &port, &mut |n| random.random_range(0..n))
    };
    for candidate in &candidates {
        let Some((pod_namespace, pod_name)) = &candidate.pod else {
            tracing::debug!(ip = %candidate.ip, "an endpoint address has no target ref, skipping");
            continue;
        };
        if Some(pod_namespace.as_str()) != namespace {
            continue;
        }
        let Ok(pod) = ctx.core_object("pods", namespace, pod_name).await else {
            continue;
        };
        if !location::is_pods_address(&pod, &candidate.ip) {
            tracing::debug!(ip = %candidate.ip, pod = %pod_name, "an endpoint address is not its pod's, skipping");
            continue;
        }
        return location::endpoint(candidate, scheme);
    }
    Err(location::service_unavailable(format!(
        "no endpoints available for service {id:?}"
    )))
}

/// Upstream's node `ResourceLocation`: the node's agent (or another port
/// of the node), its host's addresses all global unicast ones.
async fn locate_node(ctx: &Context, id: &str) -> Result<Location, Status> {
    let (scheme, name, port) = location::split_scheme_name_port(id)
        .ok_or_else(|| Status::bad_request(format!("invalid node request {id:?}")))?;
    let node = ctx.core_object("nodes", None, name).await?;
    let location = location::node(&node, id, scheme, port)?;
    location::check_hostname(&location.host)
        .await
        .map_err(Status::bad_request)?;
    Ok(location)
}

/// An OS error as Go words it: `connection refused`, not `Connection
/// refused (os error 111)`.
fn go_words(message: &str) -> String {
    let mut text = message.to_string();
    while let Some(at) = text.find(" (os error ") {
        let end = text[at..].find(')').map_or(text.len(), |e| at + e + 1);
        text.replace_range(at..end, "");
    }
    if let Some(at) = text.find("connect: ").map(|at| at + "connect: ".len())
        && let Some(first) = text[at..].chars().next()
    {
        let lower = first.to_lowercase().to_string();
        text.replace_range(at..at + first.len_utf8(), &lower);
    }
    text
}

/// A connection to the backend; the error as Go's transport words it
/// (`dial tcp 10.0.0.5:80: connect: connection refused`).
async fn dial(ctx: &Context, location: &Location) -> Result<Connection, String> {
    let port = location.dial_port();
    if location.transport == Transport::Kubelet {
        let client = ctx
            .state
            .kubelet
            .get()
            .ok_or("this server has no client for node agents")?;
        let stream = client
            .dial(&location.host, port)
            .await
            .map_err(|e| go_words(&e))?;
        return Ok(Box::new(stream));
    }
    let authority = location.dial_authority();
    let tcp = tokio::time::timeout(
        DIAL_TIMEOUT,
        tokio::net::TcpStream::connect((location.host.as_str(), port)),
    )
    .await
    .map_err(|_| format!("dial tcp {authority}: i/o timeout"))?
    .map_err(|e| go_words(&format!("dial tcp {authority}: connect: {e}")))?;
    let _ = tcp.set_nodelay(true);
    if location.scheme == Scheme::Http {
        return Ok(Box::new(tcp));
    }
    let name = rustls::pki_types::ServerName::try_from(location.host.clone())
        .map_err(|e| format!("invalid host {:?}: {e}", location.host))?;
    let tls = tokio::time::timeout(
        TLS_HANDSHAKE_TIMEOUT,
        rudder_stream::tls::unverified()
            .map_err(|e| e.to_string())?
            .connect(name, tcp),
    )
    .await
    .map_err(|_| "net/http: TLS handshake timeout".to_string())?
    .map_err(|e| e.to_string())?;
    Ok(Box::new(tls))
}

/// Upstream's answer when the backend cannot be reached (its wrapping
/// transport's `NewServiceUnavailable`).
fn unreachable(message: impl std::fmt::Display) -> ApiError {
    ApiError(location::service_unavailable(format!(
        "error trying to reach service: {message}"
    )))
}

/// The request target: the escaped path (`/` when empty, as Go's
/// `RequestURI`) and the client's query.
fn target(path: &str, query: Option<&str>) -> String {
    let mut target = rewrite::escape_path(path);
    if target.is_empty() {
        target.push('/');
    }
    if let Some(query) = query.filter(|q| !q.is_empty()) {
        target.push('?');
        target.push_str(query);
    }
    target
}

/// Sends a plain request on: its headers filtered, its body streamed;
/// the backend's answer comes back streamed, its headers filtered and its
/// links rewritten.
async fn forward(
    ctx: &Context,
    location: &Location,
    path: &str,
    client_host: HeaderValue,
    rewriter: &Rewriter,
    request: axum::extract::Request,
) -> ApiResult {
    let (parts, body) = request.into_parts();
    let mut headers = rewrite::request_headers(&parts.headers);
    headers.insert(header::HOST, client_host);
    let escaped = rewrite::escape_path(path);
    if let Ok(uri) = HeaderValue::from_str(&rewriter.forwarded_uri(&escaped)) {
        headers.insert("x-forwarded-uri", uri);
    }
    if let Some(axum::extract::ConnectInfo(peer)) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
    {
        let prior = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(", ");
        let value = match prior.is_empty() {
            true => peer.ip().to_string(),
            false => format!("{prior}, {}", peer.ip()),
        };
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert("x-forwarded-for", value);
        }
    }
    let uri: Uri = target(path, parts.uri.query())
        .parse()
        .map_err(|e| Status::bad_request(format!("invalid proxy path: {e}")))?;

    let connection = dial(ctx, location).await.map_err(unreachable)?;
    let (mut sender, exchange) =
        hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(connection))
            .await
            .map_err(unreachable)?;
    tokio::spawn(async move {
        if let Err(error) = exchange.await {
            tracing::debug!(%error, "a proxied connection ended with an error");
        }
    });
    let mut outgoing = hyper::Request::new(body);
    *outgoing.method_mut() = parts.method.clone();
    *outgoing.uri_mut() = uri;
    *outgoing.headers_mut() = headers;
    let response = sender.send_request(outgoing).await.map_err(unreachable)?;

    let (mut answer, body) = response.into_parts();
    rewrite::response_headers(&mut answer.headers);
    let redirect = answer
        .headers
        .get(header::LOCATION)
        .filter(|v| !v.is_empty())
        .cloned();
    let body = if let Some(redirect) = redirect {
        let rewritten = rewriter.location(&redirect).map_err(Status::internal)?;
        answer.headers.insert(header::LOCATION, rewritten);
        Body::new(body)
    } else if rewrite::is_html(&answer.headers)
        && parts.method != Method::HEAD
        && encoding(&answer.headers).is_empty()
    {
        let page = body
            .collect()
            .await
            .map_err(|e| Status::new(500, "", e.to_string()))?
            .to_bytes();
        answer.headers.remove(header::CONTENT_LENGTH);
        Body::from(rewriter.html(&page))
    } else {
        Body::new(body)
    };
    let mut response = Response::new(body);
    *response.status_mut() = answer.status;
    *response.headers_mut() = answer.headers;
    Ok(response)
}

/// A response's `Content-Encoding` (`""`: none). Upstream rewrites gzip
/// and deflate pages too; without those codecs here, they pass as they
/// are.
fn encoding(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// Forwards an upgrade request (upstream's `tryUpgrade`): to the
/// location's path, without the query as upstream; after the backend's
/// 101 the connections are spliced, a refusal (400 and above) goes back as
/// the backend wrote it, any other answer is an error.
async fn forward_upgrade(
    ctx: &Context,
    location: &Location,
    path: &str,
    client_host: &HeaderValue,
    mut request: axum::extract::Request,
) -> ApiResult {
    let on_upgrade = hyper::upgrade::on(&mut request);
    let backend = dial(ctx, location)
        .await
        .map_err(|e| Status::new(500, "", format!("error dialing backend: {e}")))?;
    let host = String::from_utf8_lossy(client_host.as_bytes()).into_owned();
    // Counted in `apiserver_longrunning_requests` while spliced.
    let guard = ctx.state.metrics.stream(&ctx.def().plural, "proxy");
    let response = Forward {
        method: request.method().clone(),
        path_and_query: &target(path, None),
        authority: &host,
        headers: request.headers(),
        idle: IDLE_TIMEOUT,
        stop: ctx.state.shutdown.clone(),
    }
    .send(backend, on_upgrade, guard)
    .await
    .map_err(|e| Status::new(500, "", format!("error sending request: {e}")))?;
    super::connect::relay_answer(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_are_worded_as_go_words_them() {
        assert_eq!(
            go_words("dial tcp 10.0.0.5:80: connect: Connection refused (os error 111)"),
            "dial tcp 10.0.0.5:80: connect: connection refused"
        );
        assert_eq!(
            go_words("dial tcp [fd00::1]:443: connect: No route to host (os error 113)"),
            "dial tcp [fd00::1]:443: connect: no route to host"
        );
        assert_eq!(go_words("tls: handshake failure"), "tls: handshake failure");
    }

    #[test]
    fn the_request_target_keeps_the_query() {
        assert_eq!(target("", None), "/");
        assert_eq!(target("/a b/", Some("x=1&y=%2F")), "/a%20b/?x=1&y=%2F");
        assert_eq!(target("/metrics", Some("")), "/metrics");
    }

    #[test]
    fn a_bare_proxy_path_is_redirected_to_its_root() {
        let uri: Uri = "/api/v1/namespaces/ns/services/web/proxy?a=1"
            .parse()
            .expect("uri");
        let response = redirect_to_root(&uri);
        assert_eq!(response.status(), StatusCode::MOVED_PERMANENTLY);
        assert_eq!(
            response.headers()[header::LOCATION],
            "/api/v1/namespaces/ns/services/web/proxy/?a=1"
        );
    }
}
