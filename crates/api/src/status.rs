//! `Status`: every API error as upstream reports it, with its reason and
//! HTTP code (`apimachinery/pkg/api/errors`). Built here, sent once at the
//! API server's edge.

use serde::Serialize;
use serde_json::Value;
#[cfg(test)]
use serde_json::json;

/// A field-level cause of an `Invalid` (or other) error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueDuplicate`, ...
    pub reason: String,
    pub message: String,
    /// The field path, as `spec.template.spec.containers[0].name`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field: String,
}

impl Cause {
    pub fn new(reason: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Cause {
            reason: reason.into(),
            field: field.into(),
            message: message.into(),
        }
    }
    pub fn required(field: impl Into<String>) -> Self {
        Cause::new("FieldValueRequired", field, "Required value")
    }
    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        let shown = match value {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        Cause::new(
            "FieldValueInvalid",
            field,
            format!("Invalid value: {shown}: {detail}"),
        )
    }
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Cause::new("FieldValueForbidden", field, format!("Forbidden: {detail}"))
    }
    pub fn not_supported(field: impl Into<String>, value: &Value, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        Cause::new(
            "FieldValueNotSupported",
            field,
            format!(
                "Unsupported value: {value}: supported values: {}",
                list.join(", ")
            ),
        )
    }
    pub fn duplicate(field: impl Into<String>, value: &Value) -> Self {
        Cause::new(
            "FieldValueDuplicate",
            field,
            format!("Duplicate value: {value}"),
        )
    }
    /// The line upstream prints for the cause inside an `Invalid` message.
    fn line(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

/// A failed API request, as a `metav1.Status` with code and reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} ({code}): {message}")]
pub struct Status {
    pub code: u16,
    /// `NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, `BadRequest`, ...
    pub reason: &'static str,
    pub message: String,
    /// What the error is about: `(group, kind, name)`.
    pub details: Option<Box<Details>>,
    pub causes: Vec<Cause>,
    /// Seconds before a retry, for 429 and 503 (`Retry-After`).
    pub retry_after: Option<u32>,
}

/// `Status.details`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Details {
    pub group: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// The resource an error is about, as upstream names it in messages:
/// `deployments.apps` or `pods`.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub group: &'a str,
    /// The plural resource name.
    pub resource: &'a str,
    pub kind: &'a str,
}

impl Target<'_> {
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
    fn details(&self, name: &str) -> Details {
        Details {
            group: self.group.to_string(),
            kind: self.resource.to_string(),
            name: name.to_string(),
            uid: String::new(),
        }
    }
    fn kind_details(&self, name: &str) -> Details {
        Details {
            kind: self.kind.to_string(),
            ..self.details(name)
        }
    }
}

impl Status {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Status {
            code,
            reason,
            message: message.into(),
            details: None,
            causes: Vec::new(),
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Status::new(400, "BadRequest", message)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Status::new(401, "Unauthorized", message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Status::new(403, "Forbidden", message)
    }
    pub fn not_found_path(path: &str) -> Self {
        Status::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Status::new(405, "MethodNotAllowed", message)
    }
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Status::new(406, "NotAcceptable", message)
    }
    pub fn gone(message: impl Into<String>) -> Self {
        Status::new(410, "Expired", message)
    }
    pub fn too_large(message: impl Into<String>) -> Self {
        Status::new(413, "RequestEntityTooLarge", message)
    }
    /// A body in a media type the verb does not take: upstream's
    /// `NewUnsupportedMediaTypeError`, naming the types it does take.
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        Status::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }
    pub fn too_many_requests(retry_after: u32) -> Self {
        Status {
            retry_after: Some(retry_after),
            ..Status::new(
                429,
                "TooManyRequests",
                "the server has received too many requests and has asked us to try again later",
            )
        }
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Status::new(
            500,
            "InternalError",
            format!("Internal error occurred: {}", message.into()),
        )
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Status {
            retry_after: Some(1),
            ..Status::new(503, "ServiceUnavailable", message)
        }
    }
    pub fn timeout(message: impl Into<String>) -> Self {
        Status::new(504, "Timeout", message)
    }

    pub fn not_found(target: Target<'_>, name: &str) -> Self {
        Status {
            details: Some(Box::new(target.details(name))),
            ..Status::new(
                404,
                "NotFound",
                format!("{} {name:?} not found", target.qualified()),
            )
        }
    }
    pub fn already_exists(target: Target<'_>, name: &str) -> Self {
        Status {
            details: Some(Box::new(target.details(name))),
            ..Status::new(
                409,
                "AlreadyExists",
                format!("{} {name:?} already exists", target.qualified()),
            )
        }
    }
    pub fn conflict(target: Target<'_>, name: &str, detail: &str) -> Self {
        Status {
            details: Some(Box::new(target.details(name))),
            ..Status::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} {name:?}: {detail}",
                    target.qualified()
                ),
            )
        }
    }
    /// The optimistic-concurrency conflict kubectl recognises.
    pub fn modified(target: Target<'_>, name: &str) -> Self {
        Status::conflict(
            target,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }
    pub fn invalid(target: Target<'_>, name: &str, causes: Vec<Cause>) -> Self {
        let kind = if target.group.is_empty() {
            target.kind.to_string()
        } else {
            format!("{}.{}", target.kind, target.group)
        };
        let lines: Vec<String> = causes.iter().map(Cause::line).collect();
        let message = match lines.as_slice() {
            [] => format!("{kind} {name:?} is invalid"),
            [one] => format!("{kind} {name:?} is invalid: {one}"),
            many => format!("{kind} {name:?} is invalid: [{}]", many.join(", ")),
        };
        Status {
            details: Some(Box::new(target.kind_details(name))),
            causes,
            ..Status::new(422, "Invalid", message)
        }
    }

    /// The `metav1.Status` object.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.wire()).unwrap_or_default()
    }

    /// The `metav1.Status` as upstream's encoder writes it: fields in the Go
    /// type's order, empty ones left out, and a closing newline.
    pub fn encode(&self) -> Vec<u8> {
        encode_line(&self.wire())
    }

    fn wire(&self) -> WireStatus<'_> {
        let mut details = WireDetails::default();
        if let Some(d) = &self.details {
            details.name = &d.name;
            details.group = &d.group;
            details.kind = &d.kind;
            details.uid = &d.uid;
        }
        details.causes = &self.causes;
        details.retry_after_seconds = self.retry_after.unwrap_or(0);
        WireStatus {
            kind: "Status",
            api_version: "v1",
            metadata: Empty {},
            status: "Failure",
            message: &self.message,
            reason: self.reason,
            details: (details != WireDetails::default()).then_some(details),
            code: self.code,
        }
    }
}

/// `metav1.Status` in Go's field order (`k8s.io/apimachinery` types.go);
/// every field but the type's and `status` is `omitempty` there.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WireStatus<'a> {
    kind: &'static str,
    api_version: &'static str,
    metadata: Empty,
    status: &'static str,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<WireDetails<'a>>,
    #[serde(skip_serializing_if = "is_zero")]
    code: u16,
}

/// `metav1.StatusDetails`, in Go's field order.
#[derive(Debug, Serialize, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
struct WireDetails<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    group: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    kind: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    uid: &'a str,
    #[serde(skip_serializing_if = "<[Cause]>::is_empty")]
    causes: &'a [Cause],
    #[serde(skip_serializing_if = "is_zero")]
    retry_after_seconds: u32,
}

#[derive(Debug, Serialize, PartialEq)]
struct Empty {}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

/// `value` as JSON and a newline, as Go's `json.Encoder` writes it.
pub fn encode_line<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// The `Status` a successful delete returns when the object is gone at once
/// (Go's field order, as [`Status::encode`]).
pub fn success_status<'a>(target: Target<'a>, name: &'a str, uid: &'a str) -> WireStatus<'a> {
    WireStatus {
        kind: "Status",
        api_version: "v1",
        metadata: Empty {},
        status: "Success",
        message: "",
        reason: "",
        details: Some(WireDetails {
            name,
            group: target.group,
            kind: target.resource,
            uid,
            ..WireDetails::default()
        }),
        code: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEPLOYMENTS: Target<'static> = Target {
        group: "apps",
        resource: "deployments",
        kind: "Deployment",
    };
    const PODS: Target<'static> = Target {
        group: "",
        resource: "pods",
        kind: "Pod",
    };

    #[test]
    fn a_status_is_written_in_go_field_order_with_a_newline() {
        let body = Status::not_found(PODS, "p").encode();
        assert_eq!(
            String::from_utf8(body).expect("utf-8"),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"pods \\\"p\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"p\",\"kind\":\"pods\"},\"code\":404}\n"
        );
        let success = encode_line(&success_status(DEPLOYMENTS, "web", "u-1"));
        assert_eq!(
            String::from_utf8(success).expect("utf-8"),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Success\",\"details\":{\"name\":\"web\",\"group\":\"apps\",\"kind\":\"deployments\",\"uid\":\"u-1\"}}\n"
        );
    }

    #[test]
    fn not_found_reads_as_upstream() {
        let s = Status::not_found(DEPLOYMENTS, "web");
        assert_eq!(s.message, "deployments.apps \"web\" not found");
        let json = s.to_json();
        assert_eq!(json["code"], 404);
        assert_eq!(json["reason"], "NotFound");
        assert_eq!(
            json["details"],
            json!({"name": "web", "group": "apps", "kind": "deployments"})
        );
        assert_eq!(Status::not_found(PODS, "p").message, "pods \"p\" not found");
    }

    #[test]
    fn invalid_lists_every_cause_with_its_field() {
        let s = Status::invalid(
            PODS,
            "Bad_Name",
            vec![
                Cause::invalid(
                    "metadata.name",
                    &json!("Bad_Name"),
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters",
                ),
                Cause::required("spec.containers"),
            ],
        );
        assert_eq!(s.code, 422);
        assert!(s.message.starts_with(
            "Pod \"Bad_Name\" is invalid: [metadata.name: Invalid value: \"Bad_Name\""
        ));
        assert!(s.message.ends_with("spec.containers: Required value]"));
        let json = s.to_json();
        assert_eq!(json["details"]["kind"], "Pod");
        assert_eq!(json["details"]["causes"][1]["field"], "spec.containers");
    }

    #[test]
    fn too_many_requests_says_when_to_retry() {
        let json = Status::too_many_requests(2).to_json();
        assert_eq!(json["code"], 429);
        assert_eq!(json["details"]["retryAfterSeconds"], 2);
    }
}
