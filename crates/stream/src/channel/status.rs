//! What the remote-command channels carry besides data: the command's
//! final `metav1.Status` on the error channel (v4 and v5), built as the
//! kubelet's streaming server builds it and read as client-go's
//! `errorDecoderV4` reads it, and the terminal sizes of the resize
//! channel.

use serde::{Deserialize, Serialize};

/// The `reason` of a status reporting a non-zero exit code.
pub const NON_ZERO_EXIT_CODE_REASON: &str = "NonZeroExitCode";
/// The `reason` of the cause carrying the exit code in its message.
pub const EXIT_CODE_CAUSE: &str = "ExitCode";

/// `metav1.Status`, as far as the error channel uses it; fields in Go's
/// order so the JSON matches upstream's byte for byte.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(
        default,
        rename = "apiVersion",
        skip_serializing_if = "Option::is_none"
    )]
    pub api_version: Option<String>,
    /// `ListMeta`, always written (Go's `omitempty` keeps empty structs).
    #[serde(default)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub code: i32,
}

/// `metav1.StatusDetails`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusDetails {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    #[serde(default, rename = "retryAfterSeconds", skip_serializing_if = "is_zero")]
    pub retry_after_seconds: i32,
}

/// `metav1.StatusCause`: its Go field `Type` is `reason` in JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCause {
    #[serde(default, rename = "reason", skip_serializing_if = "String::is_empty")]
    pub cause_type: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

impl Status {
    /// The command succeeded: `{"metadata":{},"status":"Success"}`.
    pub fn success() -> Status {
        Status {
            status: "Success".into(),
            ..Status::default()
        }
    }

    /// The command exited with `code`; `detail` is the runtime's account
    /// of it, which upstream puts after "command terminated with non-zero
    /// exit code: ".
    pub fn exit_code(code: i32, detail: &str) -> Status {
        Status {
            status: "Failure".into(),
            message: format!("command terminated with non-zero exit code: {detail}"),
            reason: NON_ZERO_EXIT_CODE_REASON.into(),
            details: Some(StatusDetails {
                causes: vec![StatusCause {
                    cause_type: EXIT_CODE_CAUSE.into(),
                    message: code.to_string(),
                    ..StatusCause::default()
                }],
                ..StatusDetails::default()
            }),
            ..Status::default()
        }
    }

    /// The command could not be run (upstream's `NewInternalError`).
    pub fn internal_error(error: &str) -> Status {
        Status {
            status: "Failure".into(),
            message: format!("Internal error occurred: {error}"),
            reason: "InternalError".into(),
            details: Some(StatusDetails {
                causes: vec![StatusCause {
                    message: error.into(),
                    ..StatusCause::default()
                }],
                ..StatusDetails::default()
            }),
            code: 500,
            ..Status::default()
        }
    }

    /// The JSON written on the error channel.
    pub fn to_json(&self) -> Vec<u8> {
        // Strings, integers and string-keyed maps always serialize.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Why the error channel's status is not a plain outcome.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatusError {
    #[error("error stream protocol error: {0}")]
    Json(String),
    #[error("error stream protocol error: details must be set")]
    MissingDetails,
    #[error("error stream protocol error: invalid exit code value {0:?}")]
    InvalidExitCode(String),
    #[error("error stream protocol error: no ExitCode cause given")]
    NoExitCodeCause,
    #[error("error stream protocol error: unknown error")]
    Unknown,
    /// A failure other than an exit code; its message is what to show.
    #[error("{message}")]
    Failure { reason: String, message: String },
}

/// The outcome the error channel reports, as client-go reads it: `None`
/// for success, the exit code (0–255) for a non-zero exit, an error for
/// any other failure or a malformed status.
pub fn exit_code_from_status(json: &[u8]) -> Result<Option<i32>, StatusError> {
    let status: Status =
        serde_json::from_slice(json).map_err(|e| StatusError::Json(e.to_string()))?;
    match status.status.as_str() {
        "Success" => Ok(None),
        "Failure" if status.reason == NON_ZERO_EXIT_CODE_REASON => {
            let details = status.details.ok_or(StatusError::MissingDetails)?;
            let cause = details
                .causes
                .iter()
                .find(|c| c.cause_type == EXIT_CODE_CAUSE)
                .ok_or(StatusError::NoExitCodeCause)?;
            let digits =
                !cause.message.is_empty() && cause.message.bytes().all(|b| b.is_ascii_digit());
            match cause.message.parse::<u8>() {
                Ok(code) if digits => Ok(Some(i32::from(code))),
                _ => Err(StatusError::InvalidExitCode(cause.message.clone())),
            }
        }
        "Failure" => Err(StatusError::Failure {
            reason: status.reason,
            message: status.message,
        }),
        _ => Err(StatusError::Unknown),
    }
}

/// A terminal's size, as the resize channel carries it:
/// `{"Width":80,"Height":24}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSize {
    #[serde(rename = "Width", alias = "width")]
    pub width: u16,
    #[serde(rename = "Height", alias = "height")]
    pub height: u16,
}

impl TerminalSize {
    /// The JSON sent on the resize channel.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Every size in a stretch of the resize channel: upstream decodes the
/// channel as a stream of JSON values, so one message may hold several.
pub fn parse_resize_stream(data: &[u8]) -> Result<Vec<TerminalSize>, serde_json::Error> {
    serde_json::Deserializer::from_slice(data)
        .into_iter::<TerminalSize>()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_json_shapes() {
        assert_eq!(
            Status::success().to_json(),
            br#"{"metadata":{},"status":"Success"}"#
        );
        assert_eq!(
            String::from_utf8(Status::exit_code(3, "exit status 3").to_json()).expect("utf-8"),
            r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: exit status 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
        );
        assert_eq!(
            String::from_utf8(Status::internal_error("boom").to_json()).expect("utf-8"),
            r#"{"metadata":{},"status":"Failure","message":"Internal error occurred: boom","reason":"InternalError","details":{"causes":[{"message":"boom"}]},"code":500}"#
        );
    }

    #[test]
    fn statuses_round_trip() {
        for status in [
            Status::success(),
            Status::exit_code(1, "x"),
            Status::internal_error("y"),
        ] {
            let json = status.to_json();
            assert_eq!(
                serde_json::from_slice::<Status>(&json).expect("parse"),
                status
            );
        }
        assert_eq!(
            exit_code_from_status(&Status::success().to_json()),
            Ok(None)
        );
        for code in [1, 3, 127, 255] {
            assert_eq!(
                exit_code_from_status(&Status::exit_code(code, "").to_json()),
                Ok(Some(code))
            );
        }
        assert_eq!(
            exit_code_from_status(&Status::internal_error("boom").to_json()),
            Err(StatusError::Failure {
                reason: "InternalError".into(),
                message: "Internal error occurred: boom".into()
            })
        );
    }

    #[test]
    fn malformed_statuses() {
        let cases: &[(&str, StatusError)] = &[
            (
                r#"{"status":"Failure","reason":"NonZeroExitCode"}"#,
                StatusError::MissingDetails,
            ),
            (
                r#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"Other","message":"1"}]}}"#,
                StatusError::NoExitCodeCause,
            ),
            (
                r#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"256"}]}}"#,
                StatusError::InvalidExitCode("256".into()),
            ),
            (
                r#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"+3"}]}}"#,
                StatusError::InvalidExitCode("+3".into()),
            ),
            (r#"{"status":"Pending"}"#, StatusError::Unknown),
            (r#"{}"#, StatusError::Unknown),
        ];
        for (json, want) in cases {
            assert_eq!(
                exit_code_from_status(json.as_bytes()).as_ref(),
                Err(want),
                "{json}"
            );
        }
        assert!(matches!(
            exit_code_from_status(b"command failed"),
            Err(StatusError::Json(_))
        ));
        // Upstream's own statuses, kind and all, parse too.
        let full = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"}"#;
        assert_eq!(exit_code_from_status(full), Ok(None));
    }

    #[test]
    fn terminal_sizes() {
        let size = TerminalSize {
            width: 80,
            height: 24,
        };
        assert_eq!(size.to_json(), br#"{"Width":80,"Height":24}"#);
        assert_eq!(
            parse_resize_stream(br#"{"Width":80,"Height":24}{"width":100,"height":50} "#)
                .expect("parse"),
            [
                size,
                TerminalSize {
                    width: 100,
                    height: 50
                }
            ]
        );
        assert!(parse_resize_stream(br#"{"Width":-1,"Height":24}"#).is_err());
        assert_eq!(parse_resize_stream(b"").expect("empty"), []);
    }
}
