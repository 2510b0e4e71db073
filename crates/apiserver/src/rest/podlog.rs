//! `GET pods/<name>/log` (upstream's `LogREST` and `LogLocation`): the
//! `PodLogOptions` validated, the container defaulted, then the log
//! streamed from the node agent's `/containerLogs` as it writes it —
//! flushed chunk by chunk, so `kubectl logs -f` is live, and dropped with
//! the client (which ends the agent's request too).
//!
//! A pod not yet scheduled has an empty log, as upstream. Beyond
//! upstream, the instance the agent would read is checked here from the
//! pod's status first (`container "c" in pod "p" is waiting to start:
//! ContainerCreating`, with the agent's own words), so the answer does not
//! depend on reaching the node.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use rudder_api::Status;
use rudder_api::podlogs::{self, LogOptions};
use rudder_api::status::Details;

use super::Context;
use crate::response::ApiResult;

/// At most this much of an agent's error is read (upstream's
/// `maxReadLength`).
const MAX_ERROR_BYTES: usize = 50_000;

fn text_response(body: Body) -> Response {
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

pub async fn get(ctx: &Context) -> ApiResult {
    let options = LogOptions::from_query(|key| ctx.params.get(key))?;
    options.validate(ctx.name())?;
    let (object, _) = ctx.current().await?;
    let pod: Pod = serde_json::from_value(object)
        .map_err(|e| Status::internal(format!("decode the pod: {e}")))?;
    let container = podlogs::container_for(&pod, options.container.as_deref())?;
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    if node.is_empty() {
        return Ok(text_response(Body::empty()));
    }
    let status = pod.status.clone().unwrap_or_default();
    podlogs::log_container_id(ctx.name(), &status, &container, options.previous)
        .map_err(Status::bad_request)?;

    let (host, port) = ctx.agent_of(&node).await?;
    let client = ctx
        .state
        .kubelet
        .get()
        .ok_or_else(|| Status::unavailable("this server has no client for node agents"))?;
    let mut path = format!(
        "/containerLogs/{}/{}/{container}",
        ctx.namespace().unwrap_or_default(),
        ctx.name()
    );
    let query = options.agent_query();
    if !query.is_empty() {
        path = format!("{path}?{query}");
    }
    let response = client
        .get(&host, port, &path)
        .await
        .map_err(|message| Status::new(500, "", message))?;
    let code = response.status();
    if !(200..=206).contains(&code.as_u16()) {
        let body = http_body_util::Limited::new(response.into_body(), MAX_ERROR_BYTES)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&body).trim_end().to_string();
        return Err(agent_error(code, ctx.name(), text).into());
    }
    Ok(text_response(Body::new(response.into_body())))
}

/// An agent's error as upstream's `GenericHttpResponseChecker` makes it:
/// 400 and 500 keep the agent's words, others are described by their
/// code and name the pod's log.
fn agent_error(code: StatusCode, pod: &str, text: String) -> Status {
    match code {
        StatusCode::BAD_REQUEST => return Status::bad_request(text),
        StatusCode::INTERNAL_SERVER_ERROR => return Status::internal(text),
        _ => {}
    }
    let (reason, message) = match code {
        StatusCode::NOT_FOUND => (
            "NotFound",
            "the server could not find the requested resource".to_string(),
        ),
        StatusCode::UNAUTHORIZED => (
            "Unauthorized",
            "the server has asked for the client to provide credentials".to_string(),
        ),
        StatusCode::FORBIDDEN => ("Forbidden", text.clone()),
        StatusCode::UNPROCESSABLE_ENTITY => (
            "Invalid",
            "the server rejected our request due to an error in our request".to_string(),
        ),
        code if code.as_u16() >= 500 => (
            "InternalError",
            format!("an error on the server ({text:?}) has prevented the request from succeeding"),
        ),
        code => (
            "",
            format!(
                "the server responded with the status code {} but did not return more information",
                code.as_u16()
            ),
        ),
    };
    let mut status = Status::new(
        code.as_u16(),
        reason,
        format!("{message} ( pods/log {pod})"),
    );
    status.details = Some(Box::new(Details {
        kind: "pods/log".into(),
        name: pod.into(),
        ..Details::default()
    }));
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_errors_become_upstreams_statuses() {
        let bad = agent_error(
            StatusCode::BAD_REQUEST,
            "p",
            "container \"c\" is terminated".into(),
        );
        assert_eq!((bad.code, bad.reason), (400, "BadRequest"));
        assert_eq!(bad.message, "container \"c\" is terminated");
        let missing = agent_error(
            StatusCode::NOT_FOUND,
            "p",
            "pod \"p\" does not exist".into(),
        );
        assert_eq!(
            missing.message,
            "the server could not find the requested resource ( pods/log p)"
        );
        let forbidden = agent_error(StatusCode::FORBIDDEN, "p", "Forbidden (user=x)".into());
        assert_eq!(
            (forbidden.reason, forbidden.message.as_str()),
            ("Forbidden", "Forbidden (user=x) ( pods/log p)")
        );
    }
}
