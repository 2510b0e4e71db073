//! The server side of the opening handshake (RFC 6455 §4): checks over
//! an HTTP request's headers and the headers of the 101 answer. The
//! upgrade itself is the HTTP server's (hyper's) business; the client side
//! is in `client`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// The GUID a server appends to the client's key (RFC 6455 §1.3).
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// The only version of the protocol spoken.
pub(crate) const VERSION: &str = "13";

/// `Sec-WebSocket-Key`, `-Accept`, `-Version` and `-Protocol`.
const SEC_KEY: &str = "sec-websocket-key";
pub(crate) const SEC_ACCEPT: &str = "sec-websocket-accept";
const SEC_VERSION: &str = "sec-websocket-version";
pub(crate) const SEC_PROTOCOL: &str = "sec-websocket-protocol";

/// The `Sec-WebSocket-Accept` value for a client's `Sec-WebSocket-Key`:
/// base64 of the SHA-1 of the key and the protocol's GUID.
pub fn accept_key(client_key: &str) -> String {
    let mut input = Vec::with_capacity(client_key.len() + ACCEPT_GUID.len());
    input.extend_from_slice(client_key.as_bytes());
    input.extend_from_slice(ACCEPT_GUID.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    BASE64.encode(digest.as_ref())
}

/// Whether a header's comma-separated values include `token`, in any case.
pub(crate) fn has_token(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Whether a request asks for a WebSocket: `Upgrade: websocket` and a
/// `Connection` header naming `upgrade`, both in any case (upstream's
/// `wsstream.IsWebSocketRequest`).
pub fn is_websocket_request(headers: &HeaderMap) -> bool {
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"));
    upgrade && has_token(headers, header::CONNECTION, "upgrade")
}

/// The subprotocols a request offers, in its order of preference: every
/// `Sec-WebSocket-Protocol` header, split at commas, trimmed.
pub fn requested_protocols(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(SEC_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Why a server refuses a WebSocket handshake.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("not a WebSocket upgrade request")]
    NotWebSocket,
    /// Answer 426 with `Sec-WebSocket-Version: 13`.
    #[error("unsupported WebSocket version {0:?} (only 13 is)")]
    UnsupportedVersion(String),
    #[error("missing Sec-WebSocket-Key")]
    MissingKey,
    #[error("Sec-WebSocket-Key is not 16 bytes in base64")]
    InvalidKey,
    #[error("subprotocol {0:?} cannot be a header value")]
    InvalidProtocol(String),
}

/// Checks a WebSocket request's headers and returns those of the 101
/// answer: `Upgrade`, `Connection`, `Sec-WebSocket-Accept`, and
/// `Sec-WebSocket-Protocol` when a subprotocol was chosen (an empty one
/// means none).
pub fn handshake_headers(
    headers: &HeaderMap,
    chosen_protocol: Option<&str>,
) -> Result<HeaderMap, HandshakeError> {
    if !is_websocket_request(headers) {
        return Err(HandshakeError::NotWebSocket);
    }
    let version = headers
        .get(SEC_VERSION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned())
        .unwrap_or_default();
    if version != VERSION {
        return Err(HandshakeError::UnsupportedVersion(version));
    }
    let mut keys = headers.get_all(SEC_KEY).iter();
    let key = keys.next().ok_or(HandshakeError::MissingKey)?;
    if keys.next().is_some() {
        return Err(HandshakeError::InvalidKey);
    }
    let key = key.to_str().map_err(|_| HandshakeError::InvalidKey)?.trim();
    match BASE64.decode(key) {
        Ok(nonce) if nonce.len() == 16 => {}
        _ => return Err(HandshakeError::InvalidKey),
    }

    let mut out = HeaderMap::new();
    out.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    out.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    let accept = HeaderValue::from_str(&accept_key(key)).map_err(|_| HandshakeError::InvalidKey)?;
    out.insert(SEC_ACCEPT, accept);
    if let Some(protocol) = chosen_protocol.filter(|p| !p.is_empty()) {
        let value = HeaderValue::from_str(protocol)
            .map_err(|_| HandshakeError::InvalidProtocol(protocol.to_owned()))?;
        out.insert(SEC_PROTOCOL, value);
    }
    Ok(out)
}

/// [`handshake_headers`] as a 101 Switching Protocols response, ready for
/// a body.
pub fn handshake_response(
    headers: &HeaderMap,
    chosen_protocol: Option<&str>,
) -> Result<http::response::Builder, HandshakeError> {
    let out = handshake_headers(headers, chosen_protocol)?;
    let mut builder = http::Response::builder().status(http::StatusCode::SWITCHING_PROTOCOLS);
    if let Some(h) = builder.headers_mut() {
        h.extend(out);
    }
    Ok(builder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_accept_key() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).expect("name"),
                HeaderValue::from_str(value).expect("value"),
            );
        }
        map
    }

    const GOOD: &[(&str, &str)] = &[
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Version", "13"),
    ];

    #[test]
    fn recognises_websocket_requests() {
        let cases: &[(&[(&str, &str)], bool)] = &[
            (&[("Upgrade", "websocket"), ("Connection", "Upgrade")], true),
            (
                &[
                    ("upgrade", "WebSocket"),
                    ("connection", "keep-alive, UPGRADE"),
                ],
                true,
            ),
            (
                &[
                    ("Upgrade", "websocket"),
                    ("Connection", "keep-alive"),
                    ("Connection", "upgrade"),
                ],
                true,
            ),
            (
                &[("Upgrade", "websocket"), ("Connection", "keep-alive")],
                false,
            ),
            (
                &[("Upgrade", "websocket"), ("Connection", "upgrades")],
                false,
            ),
            (&[("Upgrade", "SPDY/3.1"), ("Connection", "Upgrade")], false),
            (&[("Connection", "Upgrade")], false),
        ];
        for (pairs, want) in cases {
            assert_eq!(is_websocket_request(&headers(pairs)), *want, "{pairs:?}");
        }
    }

    #[test]
    fn lists_requested_protocols() {
        let h = headers(&[
            (
                "Sec-WebSocket-Protocol",
                "v5.channel.k8s.io, v4.channel.k8s.io",
            ),
            ("Sec-WebSocket-Protocol", " channel.k8s.io ,,"),
        ]);
        assert_eq!(
            requested_protocols(&h),
            ["v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"]
        );
        assert!(requested_protocols(&HeaderMap::new()).is_empty());
    }

    #[test]
    fn server_handshake() {
        let out = handshake_headers(&headers(GOOD), Some("v5.channel.k8s.io")).expect("ok");
        assert_eq!(out["upgrade"], "websocket");
        assert_eq!(out["connection"], "Upgrade");
        assert_eq!(out["sec-websocket-accept"], "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert_eq!(out["sec-websocket-protocol"], "v5.channel.k8s.io");
        let out = handshake_headers(&headers(GOOD), Some("")).expect("ok");
        assert!(!out.contains_key("sec-websocket-protocol"));
        let response = handshake_response(&headers(GOOD), None)
            .expect("ok")
            .body(())
            .expect("response");
        assert_eq!(response.status(), 101);
        assert_eq!(
            response.headers()["sec-websocket-accept"],
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn server_handshake_refusals() {
        let with = |name: &str, value: Option<&str>| {
            let mut pairs: Vec<(&str, &str)> =
                GOOD.iter().filter(|(n, _)| *n != name).copied().collect();
            if let Some(value) = value {
                pairs.push((name, value));
            }
            headers(&pairs)
        };
        let cases = [
            (with("Upgrade", None), HandshakeError::NotWebSocket),
            (
                with("Sec-WebSocket-Version", Some("8")),
                HandshakeError::UnsupportedVersion("8".into()),
            ),
            (
                with("Sec-WebSocket-Version", None),
                HandshakeError::UnsupportedVersion(String::new()),
            ),
            (with("Sec-WebSocket-Key", None), HandshakeError::MissingKey),
            (
                with("Sec-WebSocket-Key", Some("c2hvcnQ=")),
                HandshakeError::InvalidKey,
            ),
            (
                with("Sec-WebSocket-Key", Some("not base64!")),
                HandshakeError::InvalidKey,
            ),
        ];
        for (h, want) in cases {
            assert_eq!(handshake_headers(&h, None), Err(want));
        }
        let mut twice = headers(GOOD);
        twice.append(
            SEC_KEY,
            HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="),
        );
        assert_eq!(
            handshake_headers(&twice, None),
            Err(HandshakeError::InvalidKey)
        );
    }
}
