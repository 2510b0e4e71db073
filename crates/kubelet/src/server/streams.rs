//! The agent's streaming endpoints (upstream's kubelet `getExec`,
//! `getAttach`, `getPortForward`, `getRun`): `/exec`, `/attach` and
//! `/portForward` find the pod's running container (or its sandbox) in the
//! runtime, ask the runtime for a one-time streaming URL (CRI `Exec`,
//! `Attach`, `PortForward`) and forward the client's upgrade there,
//! relaying the runtime's stream byte for byte — the runtime speaks SPDY
//! and WebSocket itself; `/run` runs a command and answers its output.
//!
//! Errors are the kubelet's: a bad query 400, an unknown pod 404, a
//! container that is not running `container not found ("c")` (500, as the
//! kubelet's `streaming.WriteError` writes errors that are not gRPC
//! statuses), the runtime's gRPC errors mapped by their code.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use rudder_stream::upgrade::{self, Forward};

use super::{Body, Node, Refusal, text};
use crate::cri::{self, ContainerState, PodSandboxState};

/// How long the runtime's streaming server has to answer the upgrade.
const CONNECT: Duration = Duration::from_secs(30);

/// The streams a request asks for (upstream's `remotecommand.NewOptions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl Options {
    /// `input`, `output`, `error` and `tty` are `1` when wanted; with a
    /// TTY stderr is merged into stdout and not asked for.
    pub fn from_query(pairs: &[(String, String)]) -> Result<Options, Refusal> {
        let flag = |key: &str| pairs.iter().any(|(k, v)| k == key && v == "1");
        let tty = flag("tty");
        let options = Options {
            stdin: flag("input"),
            stdout: flag("output"),
            stderr: flag("error") && !tty,
            tty,
        };
        if !options.stdin && !options.stdout && !options.stderr {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                "you must specify at least 1 of stdin, stdout, stderr",
            ));
        }
        Ok(options)
    }
}

/// What the path names: the pod (and its uid, when given) and, for exec,
/// attach and run, the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    pub uid: Option<&'a str>,
    pub container: Option<&'a str>,
}

/// `/{verb}/{namespace}/{pod}[/{uid}]/{container}` (the container absent
/// for port-forward).
pub fn target<'a>(segments: &[&'a str], with_container: bool) -> Option<Target<'a>> {
    match (segments, with_container) {
        ([namespace, pod, container], true) => Some(Target {
            namespace,
            pod,
            uid: None,
            container: Some(container),
        }),
        ([namespace, pod, uid, container], true) => Some(Target {
            namespace,
            pod,
            uid: Some(uid),
            container: Some(container),
        }),
        ([namespace, pod], false) => Some(Target {
            namespace,
            pod,
            uid: None,
            container: None,
        }),
        ([namespace, pod, uid], false) => Some(Target {
            namespace,
            pod,
            uid: Some(uid),
            container: None,
        }),
        _ => None,
    }
}

/// The kubelet's answer to a runtime error (`streaming.WriteError`): a
/// gRPC NotFound is 404, ResourceExhausted 429, anything else 500.
fn runtime_refusal(error: &cri::Error) -> Refusal {
    let code = match error {
        cri::Error::Call { status, .. } => match status.code() {
            tonic::Code::NotFound => StatusCode::NOT_FOUND,
            tonic::Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        },
        cri::Error::Connect { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let message = match error {
        cri::Error::Call { status, .. } => status.message().to_string(),
        other => other.to_string(),
    };
    Refusal::new(code, message)
}

/// The pod the request names, from the node's pods.
fn pod(node: &Node, target: &Target<'_>) -> Result<std::sync::Arc<Pod>, Refusal> {
    node.pods
        .get_in(Some(target.namespace), target.pod)
        .filter(|pod| {
            target
                .uid
                .is_none_or(|uid| pod.metadata.uid.as_deref() == Some(uid))
        })
        .ok_or_else(|| Refusal::new(StatusCode::NOT_FOUND, "pod does not exist"))
}

/// The runtime id of the pod's running container `name` (upstream's
/// `findContainer`, over the runtime's running containers).
async fn running_container(node: &Node, pod: &Pod, name: &str) -> Result<String, Refusal> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let containers = node
        .runtime
        .list_containers(Some(uid))
        .await
        .map_err(|e| runtime_refusal(&e))?;
    containers
        .into_iter()
        .filter(|c| c.name == name && c.state == ContainerState::ContainerRunning)
        .max_by_key(|c| c.attempt)
        .map(|c| c.id)
        .ok_or_else(|| {
            Refusal::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("container not found ({name:?})"),
            )
        })
}

/// The id of the pod's ready sandbox.
async fn ready_sandbox(node: &Node, pod: &Pod) -> Result<String, Refusal> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let sandboxes = node
        .runtime
        .list_pod_sandboxes(Some(uid))
        .await
        .map_err(|e| runtime_refusal(&e))?;
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    sandboxes
        .into_iter()
        .filter(|s| s.state == PodSandboxState::SandboxReady)
        .max_by_key(|s| s.created_at)
        .map(|s| s.id)
        .ok_or_else(|| {
            Refusal::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("pod not found (\"{name}_{namespace}\")"),
            )
        })
}

/// Whether the pod's container `name` (of any kind) has a terminal.
fn container_tty(pod: &Pod, name: &str) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let regular = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .and_then(|c| c.tty);
    let ephemeral = || {
        spec.ephemeral_containers
            .iter()
            .flatten()
            .find(|c| c.name == name)
            .and_then(|c| c.tty)
    };
    regular.or_else(ephemeral).unwrap_or(false)
}

/// The ports of a port-forward: `port` values, each a comma list
/// (upstream's `NewV4Options`). A WebSocket names them there; over SPDY
/// they come later, in each stream's headers.
fn ports(pairs: &[(String, String)], websocket: bool) -> Result<Vec<i32>, Refusal> {
    let bad = |message: String| Refusal::new(StatusCode::BAD_REQUEST, message);
    let values: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k == "port")
        .map(|(_, v)| v.as_str())
        .collect();
    if websocket && values.is_empty() {
        return Err(bad("query parameter \"port\" is required".into()));
    }
    let mut ports = Vec::new();
    for text in values.iter().flat_map(|v| v.split(',')) {
        let text = text.trim();
        if text.is_empty() {
            return Err(bad("query parameter \"port\" cannot be empty".into()));
        }
        let port: u16 = text
            .parse()
            .map_err(|e| bad(format!("unable to parse {text:?} as a port: {e}")))?;
        if port == 0 {
            return Err(bad(format!("port {text:?} must be > 0")));
        }
        ports.push(i32::from(port));
    }
    Ok(ports)
}

/// The kinds of stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Exec,
    Attach,
    PortForward,
}

/// Serves `/exec`, `/attach` and `/portForward`.
pub async fn serve(
    node: &Node,
    kind: Kind,
    target: Target<'_>,
    request: Request<Incoming>,
) -> Response<Body> {
    match open(node, kind, target, request).await {
        Ok(response) => response,
        Err(refused) => refused.into_response(),
    }
}

async fn open(
    node: &Node,
    kind: Kind,
    target: Target<'_>,
    mut request: Request<Incoming>,
) -> Result<Response<Body>, Refusal> {
    if !upgrade::is_upgrade(request.headers()) {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "Upgrade request required",
        ));
    }
    let pairs = super::query_pairs(request.uri().query().unwrap_or_default());
    let options = match kind {
        Kind::PortForward => None,
        _ => Some(Options::from_query(&pairs)?),
    };
    let pod = pod(node, &target)?;
    let url = match (kind, options) {
        (Kind::Exec, Some(o)) => {
            let container = target.container.unwrap_or_default();
            let id = running_container(node, &pod, container).await?;
            let cmd: Vec<String> = pairs
                .iter()
                .filter(|(k, _)| k == "command")
                .map(|(_, v)| v.clone())
                .collect();
            node.runtime
                .exec(cri::v1::ExecRequest {
                    container_id: id,
                    cmd,
                    tty: o.tty,
                    stdin: o.stdin,
                    stdout: o.stdout,
                    stderr: o.stderr,
                })
                .await
        }
        (Kind::Attach, Some(o)) => {
            let container = target.container.unwrap_or_default();
            let id = running_container(node, &pod, container).await?;
            // The process has a terminal or not as its container was
            // made; the request cannot change that (upstream reads the
            // spec too).
            let tty = container_tty(&pod, container);
            node.runtime
                .attach(cri::v1::AttachRequest {
                    container_id: id,
                    stdin: o.stdin,
                    tty,
                    stdout: o.stdout,
                    stderr: o.stderr && !tty,
                })
                .await
        }
        _ => {
            let sandbox = ready_sandbox(node, &pod).await?;
            let websocket = request
                .headers()
                .get(hyper::header::UPGRADE)
                .is_some_and(|u| u.as_bytes().eq_ignore_ascii_case(b"websocket"));
            let ports = ports(&pairs, websocket)?;
            node.runtime.port_forward(&sandbox, ports).await
        }
    }
    .map_err(|e| runtime_refusal(&e))?;
    let client = hyper::upgrade::on(&mut request);
    relay(node, &url, request, client).await
}

/// Forwards the upgrade to the runtime's streaming `url`, the client's
/// query passed on (the port-forward's ports are read from it).
async fn relay(
    node: &Node,
    url: &str,
    request: Request<Incoming>,
    client: hyper::upgrade::OnUpgrade,
) -> Result<Response<Body>, Refusal> {
    let failed = |message: String| Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, message);
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| failed(format!("the runtime's streaming URL {url:?}: {e}")))?;
    let authority = uri
        .authority()
        .ok_or_else(|| failed(format!("the runtime's streaming URL {url:?} has no host")))?
        .clone();
    let port = authority.port_u16().unwrap_or(80);
    let tcp = tokio::time::timeout(
        CONNECT,
        tokio::net::TcpStream::connect((authority.host(), port)),
    )
    .await
    .map_err(|_| failed(format!("dial {authority}: i/o timeout")))?
    .map_err(|e| failed(format!("dial {authority}: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let path_and_query = match request.uri().query() {
        Some(query) => format!("{}?{query}", uri.path()),
        None => uri.path().to_string(),
    };
    let response = Forward {
        method: request.method().clone(),
        path_and_query: &path_and_query,
        authority: authority.as_str(),
        headers: request.headers(),
        idle: node.streaming.idle_timeout,
        stop: node.streaming.stop.clone(),
    }
    .send(tcp, client, ())
    .await
    .map_err(|e| failed(e.to_string()))?;
    Ok(pass_on(response).await)
}

/// The runtime's answer as the client's: a 101 with its headers, anything
/// else with its body (at most 64 KiB of it).
pub(crate) async fn pass_on(response: Response<Incoming>) -> Response<Body> {
    let (parts, body) = response.into_parts();
    let body = if parts.status == StatusCode::SWITCHING_PROTOCOLS {
        Bytes::new()
    } else {
        Limited::new(body, 64 * 1024)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default()
    };
    let mut answer = Response::new(Full::new(body).boxed());
    *answer.status_mut() = parts.status;
    *answer.headers_mut() = if parts.status == StatusCode::SWITCHING_PROTOCOLS {
        upgrade::switching_headers(&parts.headers)
    } else {
        parts.headers
    };
    answer
}

/// `POST /run/{namespace}/{pod}[/{uid}]/{container}?cmd=…`: runs the
/// space-separated command and answers its output (stdout, then stderr),
/// as upstream's `RunInContainer` (which labels it JSON, whatever it is).
pub async fn run(node: &Node, target: Target<'_>, query: Option<&str>) -> Response<Body> {
    let outcome = async {
        let pairs = super::query_pairs(query.unwrap_or_default());
        let cmd: Vec<String> = pairs
            .iter()
            .filter(|(k, _)| k == "cmd")
            .flat_map(|(_, v)| v.split_whitespace().map(str::to_string))
            .collect();
        let pod = pod(node, &target)?;
        let id = running_container(node, &pod, target.container.unwrap_or_default()).await?;
        let result = node
            .runtime
            .exec_sync(&id, cmd, 0)
            .await
            .map_err(|e| runtime_refusal(&e))?;
        let mut output = result.stdout;
        output.extend_from_slice(&result.stderr);
        Ok::<_, Refusal>(output)
    };
    match outcome.await {
        Ok(output) => {
            let mut response = Response::new(Full::new(Bytes::from(output)).boxed());
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(refused) => refused.into_response(),
    }
}

/// A plain 405 for a method the endpoint does not take.
pub fn method_not_allowed() -> Response<Body> {
    text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(query: &str) -> Vec<(String, String)> {
        super::super::query_pairs(query)
    }

    #[test]
    fn a_tty_merges_stderr_and_some_stream_is_required() {
        let options = Options::from_query(&pairs("input=1&output=1&error=1&tty=1")).expect("ok");
        assert_eq!(
            options,
            Options {
                stdin: true,
                stdout: true,
                stderr: false,
                tty: true
            }
        );
        let refused = Options::from_query(&pairs("tty=1&command=sh")).expect_err("no streams");
        assert_eq!(refused.code, StatusCode::BAD_REQUEST);
        assert_eq!(
            refused.message,
            "you must specify at least 1 of stdin, stdout, stderr"
        );
    }

    #[test]
    fn paths_name_the_pod_its_uid_and_the_container() {
        assert_eq!(
            target(&["ns", "p", "c"], true),
            Some(Target {
                namespace: "ns",
                pod: "p",
                uid: None,
                container: Some("c")
            })
        );
        assert_eq!(
            target(&["ns", "p", "u", "c"], true).and_then(|t| t.uid),
            Some("u")
        );
        assert_eq!(target(&["ns", "p"], false).and_then(|t| t.container), None);
        assert_eq!(target(&["ns"], false), None);
        assert_eq!(target(&["ns", "p", "u", "c", "x"], true), None);
    }

    #[test]
    fn forwarded_ports_are_comma_lists_and_a_websocket_needs_them() {
        assert_eq!(
            ports(&pairs("port=80,443&port=8080"), true).expect("ok"),
            vec![80, 443, 8080]
        );
        assert_eq!(ports(&pairs(""), false).expect("spdy"), Vec::<i32>::new());
        let refused = |q: &str| ports(&pairs(q), true).expect_err(q).message;
        assert_eq!(refused(""), "query parameter \"port\" is required");
        assert_eq!(refused("port=0"), "port \"0\" must be > 0");
        assert_eq!(
            refused("port=80,"),
            "query parameter \"port\" cannot be empty"
        );
        assert!(refused("port=x").starts_with("unable to parse \"x\" as a port"));
    }
}
