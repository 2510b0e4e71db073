//! `GET /containerLogs/{namespace}/{pod}/{container}` (upstream's
//! `getContainerLogs` and `GetKubeletContainerLogs`): the query is a
//! `v1.PodLogOptions`; the pod and container must be this node's; the
//! instance read is the running one, the last one, or with `previous` the
//! one before (from the pod's status); its log file comes from the
//! runtime (CRI `ContainerStatus`). Everything that can fail is checked
//! before the 200, so errors are answered with their code; then the log
//! is streamed, chunk by chunk as it is read.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Response, StatusCode};
use rudder_api::podlogs::{self, LogOptions};
use tokio::sync::mpsc;

use super::crilog::{self, ReadOptions, Sink};
use super::{Body, Node, Refusal, query_pairs};
use crate::cri::ContainerState;

/// The log options of a query; `tail` is the old name of `tailLines`
/// (`all` = every line), as upstream still reads it.
fn options(query: Option<&str>) -> Result<LogOptions, Refusal> {
    let mut pairs = query_pairs(query.unwrap_or_default());
    if let Some(tail) = pairs
        .iter()
        .rev()
        .find(|(k, _)| k == "tail")
        .map(|(_, v)| v.clone())
    {
        pairs.retain(|(k, _)| k != "tailLines" && k != "tail");
        if tail != "all" {
            pairs.push(("tailLines".into(), tail));
        }
    }
    let get = |key: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let options = LogOptions::from_query(get).map_err(|_| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            r#"{"message": "Unable to decode query."}"#,
        )
    })?;
    if options.validate("").is_err() {
        return Err(Refusal::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            r#"{"message": "Invalid request."}"#,
        ));
    }
    Ok(options)
}

pub async fn container_logs(
    node: &Node,
    namespace: &str,
    name: &str,
    container: &str,
    query: Option<&str>,
) -> Response<Body> {
    match open(node, namespace, name, container, query).await {
        Ok(response) => response,
        Err(refused) => refused.into_response(),
    }
}

async fn open(
    node: &Node,
    namespace: &str,
    name: &str,
    container: &str,
    query: Option<&str>,
) -> Result<Response<Body>, Refusal> {
    let options = options(query)?;
    let pod = node.pods.get_in(Some(namespace), name).ok_or_else(|| {
        Refusal::new(
            StatusCode::NOT_FOUND,
            format!("pod {name:?} does not exist"),
        )
    })?;
    if !podlogs::container_names(&pod)
        .iter()
        .any(|c| c == container)
    {
        return Err(Refusal::new(
            StatusCode::NOT_FOUND,
            format!("container {container:?} not found in pod {name:?}"),
        ));
    }
    let status = pod.status.clone().unwrap_or_default();
    let id = podlogs::log_container_id(name, &status, container, options.previous)
        .map_err(|message| Refusal::new(StatusCode::BAD_REQUEST, message))?;
    let id = podlogs::runtime_id(&id).to_string();
    let unavailable = || {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            format!("unable to retrieve container logs for containerd://{id}"),
        )
    };
    let runtime_status = node
        .runtime
        .container_status(&id)
        .await
        .map_err(|_| unavailable())?;
    if runtime_status.log_path.is_empty() {
        return Err(unavailable());
    }
    let path = std::path::PathBuf::from(&runtime_status.log_path);
    let file = std::fs::File::open(&path).map_err(|error| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            format!(
                "failed to open log file {:?}: {error}",
                path.display().to_string()
            ),
        )
    })?;
    let read = ReadOptions::new(&options, k8s_openapi::jiff::Timestamp::now());

    let (tx, rx) = mpsc::channel::<Bytes>(8);
    let runtime = node.runtime.clone();
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let mut sink = Channel(tx);
        let mut running = || {
            handle.block_on(async {
                tokio::time::timeout(Duration::from_secs(5), runtime.container_status(&id))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .is_none_or(|s| s.state == ContainerState::ContainerRunning as i32)
            })
        };
        if let Err(error) = crilog::copy(&path, file, &read, &mut sink, &mut running) {
            tracing::warn!(%error, log = %path.display(), "reading a container's log failed");
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<_, std::convert::Infallible>(Frame::data(chunk)), rx))
    });
    let mut response = Response::new(StreamBody::new(stream).boxed());
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    Ok(response)
}

/// The response body's channel: the reader blocks while the client is
/// slow, and stops when it is gone.
struct Channel(mpsc::Sender<Bytes>);

impl Sink for Channel {
    fn send(&mut self, chunk: Vec<u8>) -> bool {
        self.0.blocking_send(Bytes::from(chunk)).is_ok()
    }

    fn closed(&self) -> bool {
        self.0.is_closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_tail_parameter_is_read_too() {
        let tail = |q| options(Some(q)).ok().and_then(|o| o.tail_lines);
        assert_eq!(tail("tail=5"), Some(5));
        assert_eq!(tail("tail=all&tailLines=3"), None);
        assert_eq!(tail("tailLines=3"), Some(3));
        assert_eq!(
            options(Some("tailLines=-1")).err().map(|r| r.code),
            Some(StatusCode::UNPROCESSABLE_ENTITY)
        );
        assert_eq!(
            options(Some("follow=maybe")).err().map(|r| r.code),
            Some(StatusCode::BAD_REQUEST)
        );
        let pairs = query_pairs("sinceTime=2026-01-01T00%3A00%3A00Z&a");
        assert_eq!(pairs[0].1, "2026-01-01T00:00:00Z");
        assert_eq!(pairs[1], ("a".to_string(), String::new()));
    }
}
