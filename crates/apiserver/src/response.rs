//! Turning results into HTTP responses: JSON bodies, and every error a
//! `Status` with its code — the one place errors meet HTTP.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rudder_api::Status;
use serde_json::Value;

/// A handler's error: a Kubernetes `Status`.
#[derive(Debug)]
pub struct ApiError(pub Status);

impl From<Status> for ApiError {
    fn from(status: Status) -> Self {
        ApiError(status)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.0;
        let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = bytes_response(code, status.encode(), "application/json");
        if let Some(seconds) = status.retry_after
            && let Ok(value) = HeaderValue::from_str(&seconds.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}

pub type ApiResult = Result<Response, ApiError>;

/// A JSON response with `Content-Type: application/json`.
pub fn json_response<T: serde::Serialize + ?Sized>(code: StatusCode, body: &T) -> Response {
    typed_response(code, body, "application/json")
}

/// An object of `def` as the response, its fields in Go's order.
pub fn object_response(
    code: StatusCode,
    def: &rudder_api::ResourceDef,
    object: &Value,
) -> Response {
    json_response(
        code,
        &rudder_api::protobuf::go_json::Ordered::new(&def.schema_name, object),
    )
}

/// A JSON response with the given media type, ending in a newline as Go's
/// `json.Encoder` ends upstream's.
pub fn typed_response<T: serde::Serialize + ?Sized>(
    code: StatusCode,
    body: &T,
    content_type: &str,
) -> Response {
    bytes_response(code, rudder_api::status::encode_line(body), content_type)
}

/// A response of `bytes` with the given media type.
pub fn bytes_response(code: StatusCode, bytes: Vec<u8>, content_type: &str) -> Response {
    let mut response = (code, bytes).into_response();
    if let Ok(value) = HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}

/// Adds `Warning: 299 - "<text>"` headers, as upstream reports field
/// validation warnings.
pub fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let text = format!("299 - {:?}", warning);
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

/// Maps a store error to the `Status` clients expect for `what`.
pub fn store_error(
    error: rudder_store::Error,
    def: &rudder_api::ResourceDef,
    name: &str,
) -> Status {
    use rudder_store::Error as E;
    match error {
        E::NotFound => Status::not_found(def.target(), name),
        E::AlreadyExists => Status::already_exists(def.target(), name),
        E::Conflict { .. } => Status::modified(def.target(), name),
        E::Compacted { compact_revision } => Status::gone(format!(
            "The resourceVersion for the provided list is too old (compacted at {compact_revision})"
        )),
        E::FutureRevision { requested, current } => Status::timeout(format!(
            "Too large resource version: {requested}, current: {current}"
        )),
        E::TooLarge { size, limit } => Status::too_large(format!(
            "the object is {size} bytes, more than the limit of {limit} bytes"
        )),
        E::InvalidArgument(message) => Status::bad_request(message),
        error @ (E::Foreign { .. } | E::Unavailable { .. }) => {
            tracing::warn!(%error, "store unavailable");
            Status::unavailable(format!("storage is unavailable: {error}"))
        }
    }
}
