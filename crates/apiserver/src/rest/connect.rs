//! The connect subresources that stream into a pod — `pods/exec`,
//! `pods/attach`, `pods/portforward` (upstream's `ExecREST`, `AttachREST`,
//! `PortForwardREST` and the pod strategy's `streamLocation`): the options
//! read from the query, the container defaulted and checked, the node's
//! agent located, then the client's upgrade taken there with the API
//! server's kubelet client certificate:
//!
//! - a WebSocket offering `v5.channel.k8s.io` (kubectl ≥ 1.30, client
//!   libraries) is translated to SPDY towards the agent (`translate.rs`, as
//!   upstream's `StreamTranslatorHandler`): runtimes speak v4 at most, and
//!   v5's close signal (stdin's end) needs SPDY's half-close;
//! - a WebSocket offering `SPDY/3.1+portforward.k8s.io` (kubectl ≥ 1.31) is
//!   unwrapped: its binary messages are the SPDY connection's bytes, sent
//!   on to the agent as a SPDY upgrade (upstream's tunnelling handler);
//! - any other upgrade (SPDY/3.1, older WebSocket protocols) is forwarded
//!   and spliced byte for byte (upstream's `UpgradeAwareHandler`); the
//!   agent's refusal reaches the client as the agent wrote it.
//!
//! Streams count against neither the in-flight limit nor the request
//! timeout, as upstream's long-running requests.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use rudder_api::Status;
use rudder_stream::channel::Status as StreamStatus;
use rudder_stream::spdy;
use rudder_stream::translate::{self, Streams};
use rudder_stream::upgrade::{self, Answer, Forward};
use rudder_stream::ws::{self, Role, WebSocket};

use super::Context;
use crate::response::{ApiError, ApiResult};

/// How long a spliced stream may stay silent (upstream's kubelet default
/// `--streaming-connection-idle-timeout`; the agent enforces its own too).
pub const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(4 * 3600);

/// Which stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Exec,
    Attach,
    PortForward,
}

impl Kind {
    pub fn of(subresource: &str) -> Option<Kind> {
        match subresource {
            "exec" => Some(Kind::Exec),
            "attach" => Some(Kind::Attach),
            "portforward" => Some(Kind::PortForward),
            _ => None,
        }
    }

    /// The agent's path segment.
    fn agent_path(self) -> &'static str {
        match self {
            Kind::Exec => "exec",
            Kind::Attach => "attach",
            Kind::PortForward => "portForward",
        }
    }
}

/// A boolean query parameter as Go's `strconv.ParseBool` reads one.
fn boolean(ctx: &Context, key: &str) -> Result<bool, Status> {
    match ctx.params.get(key) {
        None | Some("") => Ok(false),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
        Some(other) => Err(Status::bad_request(format!(
            "{key}: invalid value {other:?}: strconv.ParseBool: parsing {other:?}: invalid syntax"
        ))),
    }
}

/// Percent-encoding of a query component (RFC 3986 unreserved kept).
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The agent's query for the request (upstream's `streamParams`):
/// `input`, `output`, `error`, `tty` as `1`, each `command`; a
/// port-forward's `ports` (repeated or comma lists) as one comma list in
/// `port`.
fn agent_query(ctx: &Context, kind: Kind) -> Result<String, Status> {
    let mut params: Vec<String> = Vec::new();
    if kind == Kind::PortForward {
        let mut ports = Vec::new();
        for port in ctx.params.all("ports").flat_map(|v| v.split(',')) {
            let number: u16 = port
                .trim()
                .parse()
                .map_err(|e| Status::bad_request(format!("cannot convert to []int32: {e}")))?;
            ports.push(number.to_string());
        }
        if !ports.is_empty() {
            params.push(format!("port={}", encode(&ports.join(","))));
        }
        return Ok(params.join("&"));
    }
    for (key, agent) in [
        ("stdin", "input"),
        ("stdout", "output"),
        ("stderr", "error"),
        ("tty", "tty"),
    ] {
        if boolean(ctx, key)? {
            params.push(format!("{agent}=1"));
        }
    }
    if kind == Kind::Exec {
        for command in ctx.params.all("command") {
            params.push(format!("command={}", encode(command)));
        }
    }
    Ok(params.join("&"))
}

/// The container a stream goes to: the one named (which the pod must
/// have, among its containers, init containers and ephemeral
/// containers), or the pod's only one.
fn container(pod: &Pod, named: Option<&str>) -> Result<String, Status> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let names = |list: &[String]| list.join(" ");
    let regular: Vec<String> = spec.containers.iter().map(|c| c.name.clone()).collect();
    let init: Vec<String> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect();
    let ephemeral: Vec<String> = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect();
    match named.filter(|c| !c.is_empty()) {
        Some(c)
            if regular
                .iter()
                .chain(&init)
                .chain(&ephemeral)
                .any(|n| n == c) =>
        {
            Ok(c.to_string())
        }
        Some(c) => Err(Status::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None if regular.len() == 1 => Ok(regular[0].clone()),
        None if regular.is_empty() => Err(Status::bad_request(format!(
            "a container name must be specified for pod {name}"
        ))),
        None => {
            let mut message = format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names(&regular)
            );
            if !init.is_empty() {
                message.push_str(&format!(
                    " or one of the init containers: [{}]",
                    names(&init)
                ));
            }
            Err(Status::bad_request(message))
        }
    }
}

/// Where the stream goes: the agent's host and port, and the path and
/// query there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub host: String,
    pub port: u16,
    pub path_and_query: String,
}

/// Upstream's `streamLocation`/`PortForwardLocation`.
async fn locate(ctx: &Context, kind: Kind) -> Result<Location, Status> {
    let (object, _) = ctx.current().await?;
    let pod: Pod = serde_json::from_value(object)
        .map_err(|e| Status::internal(format!("decode the pod: {e}")))?;
    let name = ctx.name();
    let namespace = ctx.namespace().unwrap_or_default();
    let query = agent_query(ctx, kind)?;
    let path = match kind {
        Kind::PortForward => format!("/{}/{namespace}/{name}", kind.agent_path()),
        _ => {
            let container = container(&pod, ctx.params.get("container"))?;
            format!("/{}/{namespace}/{name}/{container}", kind.agent_path())
        }
    };
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    if node.is_empty() {
        return Err(Status::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let (host, port) = ctx.agent_of(&node).await?;
    let path_and_query = if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    };
    Ok(Location {
        host,
        port,
        path_and_query,
    })
}

/// Serves a stream subresource; `request` still holds its upgrade.
pub async fn serve(ctx: Context, kind: Kind, mut request: axum::extract::Request) -> ApiResult {
    // A WebSocket's GET is authorized as `get`; the stream needs `create`
    // too (upstream's AuthorizePodWebsocketUpgradeCreatePermission).
    if request.method() == Method::GET {
        let path = request.uri().path().to_string();
        crate::auth::authorize(&ctx.user, &path, "create")
            .map_err(|_| crate::auth::forbidden_resource(&ctx.user, "create", &ctx.resource))?;
    }
    let location = locate(&ctx, kind).await?;
    let headers = request.headers().clone();
    if !upgrade::is_upgrade(&headers) {
        return Err(Status::bad_request("Upgrade request required").into());
    }
    let client = ctx
        .state
        .kubelet
        .get()
        .cloned()
        .ok_or_else(|| Status::unavailable("this server has no client for node agents"))?;
    let dial = || async {
        client
            .dial(&location.host, location.port)
            .await
            .map_err(|message| {
                ApiError(Status::new(
                    500,
                    "",
                    format!("error dialing backend: {message}"),
                ))
            })
    };
    let on_upgrade = hyper::upgrade::on(&mut request);
    let method = request.method().clone();
    if ws::is_websocket_request(&headers) {
        let offered = ws::requested_protocols(&headers);
        if kind != Kind::PortForward && offered.iter().any(|p| p == V5) {
            let streams = Streams {
                stdin: boolean(&ctx, "stdin")?,
                stdout: boolean(&ctx, "stdout")?,
                stderr: boolean(&ctx, "stderr")?,
                tty: boolean(&ctx, "tty")?,
            };
            return translate(
                &ctx,
                location,
                client.clone(),
                &headers,
                streams,
                on_upgrade,
            );
        }
        let tunnelled: Vec<&str> = offered
            .iter()
            .filter_map(|p| p.strip_prefix(TUNNEL_PREFIX))
            .filter(|p| p.ends_with(".k8s.io"))
            .collect();
        if kind == Kind::PortForward && !tunnelled.is_empty() {
            let backend = dial().await?;
            return tunnel(&ctx, &location, backend, &headers, &tunnelled, on_upgrade).await;
        }
    }
    let backend = dial().await?;
    forward(&ctx, &location, method, &headers, backend, on_upgrade).await
}

/// Counts the stream in `apiserver_longrunning_requests` while it lives.
fn stream_guard(ctx: &Context) -> crate::metrics::WatchGuard {
    ctx.state.metrics.stream(
        "pods",
        ctx.resource.subresource.as_deref().unwrap_or_default(),
    )
}

/// The WebSocket protocol the translator serves.
const V5: &str = "v5.channel.k8s.io";
/// The prefix of a SPDY protocol tunnelled in WebSocket.
const TUNNEL_PREFIX: &str = "SPDY/3.1+";

/// A `v5.channel.k8s.io` exec or attach: the WebSocket is accepted at
/// once; then the agent is reached over SPDY, and whatever fails from
/// there is told on the error channel (as upstream's translator).
fn translate(
    ctx: &Context,
    location: Location,
    client: crate::kubelet::KubeletClient,
    headers: &HeaderMap,
    streams: Streams,
    on_upgrade: hyper::upgrade::OnUpgrade,
) -> ApiResult {
    accept_websocket(
        ctx,
        headers,
        Some(V5),
        on_upgrade,
        async move |websocket| match spdy_to_agent(&client, &location, &translate::SPDY_PROTOCOLS)
            .await
        {
            Ok((protocol, io)) => {
                let (session, _incoming) = spdy::Session::client(io);
                translate::remote_command(websocket, session, &protocol, streams, IDLE_TIMEOUT)
                    .await;
            }
            Err(status) => {
                let (_reader, writer) = websocket.split();
                let _ = writer.send_binary(translate::first_message(streams)).await;
                translate::finish(&writer, &status).await;
                let _ = writer.shutdown().await;
            }
        },
    )
}

/// The client's upgraded WebSocket.
type ClientSocket = WebSocket<TokioIo<hyper::upgrade::Upgraded>>;

/// Accepts a WebSocket with `protocol` (the 101 returned), then `serve`s
/// it in a task counted as a stream, ended by the server's shutdown.
fn accept_websocket<F>(
    ctx: &Context,
    headers: &HeaderMap,
    protocol: Option<&str>,
    on_upgrade: hyper::upgrade::OnUpgrade,
    serve: impl FnOnce(ClientSocket) -> F + Send + 'static,
) -> ApiResult
where
    F: std::future::Future<Output = ()> + Send,
{
    let answer = ws::handshake_response(headers, protocol)
        .map_err(|e| Status::bad_request(e.to_string()))?
        .body(Body::empty())
        .map_err(|e| Status::internal(e.to_string()))?;
    let stop = ctx.state.shutdown.clone();
    let guard = stream_guard(ctx);
    tokio::spawn(async move {
        let _guard = guard;
        let run = async {
            let Ok(upgraded) = on_upgrade.await else {
                return;
            };
            serve(WebSocket::from_upgraded(
                TokioIo::new(upgraded),
                Role::Server,
            ))
            .await;
        };
        tokio::select! {
            _ = run => {}
            _ = stop.cancelled() => {}
        }
    });
    Ok(answer)
}

/// A SPDY upgrade to the agent offering `protocols`: the protocol it
/// chose and the upgraded connection, or the status to tell the client
/// (client-go's SPDY round tripper's errors, as the translator passes
/// them on).
async fn spdy_to_agent(
    client: &crate::kubelet::KubeletClient,
    location: &Location,
    protocols: &[&str],
) -> Result<(String, TokioIo<hyper::upgrade::Upgraded>), StreamStatus> {
    let backend = client
        .dial(&location.host, location.port)
        .await
        .map_err(|e| StreamStatus::internal_error(&format!("error dialing backend: {e}")))?;
    match spdy_upgrade(backend, location, protocols).await {
        Ok(Answer::Switched { headers, io }) => {
            let protocol = headers
                .get(PROTOCOL_VERSION)
                .and_then(|v| v.to_str().ok())
                .filter(|p| !p.is_empty())
                .unwrap_or("channel.k8s.io")
                .to_string();
            Ok((protocol, io))
        }
        Ok(Answer::Refused { body, .. }) => {
            let status: Option<StreamStatus> = serde_json::from_slice(&body)
                .ok()
                .filter(|s: &StreamStatus| s.kind.as_deref() == Some("Status"));
            Err(status.unwrap_or_else(|| {
                StreamStatus::internal_error(&format!(
                    "unable to upgrade connection: {}",
                    String::from_utf8_lossy(&body).trim()
                ))
            }))
        }
        Err(e) => Err(StreamStatus::internal_error(&e.to_string())),
    }
}

/// The header naming stream protocols (`httpstream.HeaderProtocolVersion`).
const PROTOCOL_VERSION: &str = spdy::handshake::HEADER_PROTOCOL_VERSION;

/// A SPDY upgrade of `backend` (a connection to the agent) to the
/// stream at `location`, offering `protocols` (one
/// `X-Stream-Protocol-Version` each), as upstream's SPDY round tripper
/// asks: POST.
async fn spdy_upgrade(
    backend: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    location: &Location,
    protocols: &[&str],
) -> Result<Answer, upgrade::Error> {
    let mut headers = HeaderMap::new();
    spdy::handshake::client_request_headers(&mut headers, protocols);
    headers.insert(
        header::USER_AGENT,
        HeaderValue::from_static("kube-apiserver"),
    );
    let authority = crate::kubelet::authority(&location.host, location.port);
    upgrade::request(
        backend,
        Method::POST,
        &location.path_and_query,
        &authority,
        &headers,
    )
    .await
}

/// A port-forward tunnelled in WebSocket (`SPDY/3.1+portforward.k8s.io`):
/// the agent is asked for a SPDY upgrade first; its refusal goes back as
/// it is (the client then falls back to plain SPDY), its 101 completes the
/// WebSocket and the two are relayed.
async fn tunnel(
    ctx: &Context,
    location: &Location,
    backend: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    headers: &HeaderMap,
    protocols: &[&str],
    on_upgrade: hyper::upgrade::OnUpgrade,
) -> ApiResult {
    let answer = spdy_upgrade(backend, location, protocols)
        .await
        .map_err(|e| ApiError(Status::new(500, "", format!("error dialing backend: {e}"))))?;
    let (agent_headers, io) = match answer {
        Answer::Switched { headers, io } => (headers, io),
        Answer::Refused { status, body } => {
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = status;
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            return Ok(response);
        }
    };
    let chosen = agent_headers
        .get(PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .map(|p| format!("{TUNNEL_PREFIX}{p}"));
    accept_websocket(
        ctx,
        headers,
        chosen.as_deref(),
        on_upgrade,
        async move |websocket| {
            translate::tunnel(websocket, io, IDLE_TIMEOUT).await;
        },
    )
}

/// Forwards the upgrade as it is and splices after the agent's 101; any
/// other answer of the agent goes back as the agent wrote it.
async fn forward(
    ctx: &Context,
    location: &Location,
    method: Method,
    headers: &HeaderMap,
    backend: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    on_upgrade: hyper::upgrade::OnUpgrade,
) -> ApiResult {
    let authority = crate::kubelet::authority(&location.host, location.port);
    let guard = stream_guard(ctx);
    let response = Forward {
        method,
        path_and_query: &location.path_and_query,
        authority: &authority,
        headers,
        idle: IDLE_TIMEOUT,
        stop: ctx.state.shutdown.clone(),
    }
    .send(backend, on_upgrade, guard)
    .await
    .map_err(|e| ApiError(Status::new(500, "", e.to_string())))?;
    relay_answer(response)
}

/// A backend's answer to a forwarded upgrade, as the client gets it
/// (upstream's `UpgradeAwareHandler`): a 101 with the backend's headers, a
/// refusal (400 and up) as the backend wrote it; anything else is not an
/// answer to an upgrade.
pub(super) fn relay_answer(response: hyper::Response<hyper::body::Incoming>) -> ApiResult {
    let (parts, body) = response.into_parts();
    let code = parts.status;
    if code != StatusCode::SWITCHING_PROTOCOLS && code.as_u16() < 400 {
        return Err(ApiError(Status::new(
            500,
            "",
            format!("invalid upgrade response: status code {}", code.as_u16()),
        )));
    }
    let mut answer = if code == StatusCode::SWITCHING_PROTOCOLS {
        let mut answer = Response::new(Body::empty());
        *answer.headers_mut() = upgrade::switching_headers(&parts.headers);
        answer
    } else {
        let mut answer = Response::new(Body::new(body));
        *answer.headers_mut() = parts.headers;
        answer
    };
    *answer.status_mut() = code;
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).expect("pod")
    }

    #[test]
    fn the_container_is_the_named_one_or_the_only_one() {
        let one = pod(json!({"containers": [{"name": "a"}]}));
        assert_eq!(container(&one, None).expect("only"), "a");
        assert_eq!(container(&one, Some("a")).expect("named"), "a");
        assert_eq!(
            container(&one, Some("b")).expect_err("unknown").message,
            "container b is not valid for pod p"
        );
        let two = pod(json!({"containers": [{"name": "a"}, {"name": "b"}],
            "initContainers": [{"name": "i"}], "ephemeralContainers": [{"name": "debugger"}]}));
        assert_eq!(
            container(&two, None).expect_err("ambiguous").message,
            "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]"
        );
        assert_eq!(
            container(&two, Some("debugger")).expect("ephemeral"),
            "debugger"
        );
    }

    #[test]
    fn query_components_are_percent_encoded() {
        assert_eq!(encode("sh -c 'exit 3'"), "sh%20-c%20%27exit%203%27");
        assert_eq!(encode("a/b&c=d"), "a%2Fb%26c%3Dd");
    }
}
