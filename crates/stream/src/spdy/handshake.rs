//! The HTTP/1.1 upgrade to SPDY/3.1 as Kubernetes performs it: the
//! client's request headers (`Connection: Upgrade`, `Upgrade: SPDY/3.1`,
//! one `X-Stream-Protocol-Version` per subprotocol it speaks), the server's
//! negotiation and 101 (upstream's `httpstream.Handshake` and
//! `responseUpgrader`), and the client's check of that 101 (upstream's
//! `SpdyRoundTripper.NewConnection`). Pure functions over `http` types:
//! the callers own the connections.

use http::header::{CONNECTION, HeaderMap, HeaderValue, UPGRADE as UPGRADE_HEADER};
use http::{Response, StatusCode};

/// The `Upgrade` token.
pub const UPGRADE: &str = "SPDY/3.1";
/// The subprotocols the client offers, and the one the server chose.
pub const HEADER_PROTOCOL_VERSION: &str = "X-Stream-Protocol-Version";
/// The subprotocols a refusing server accepts.
pub const HEADER_ACCEPTED_PROTOCOL_VERSIONS: &str = "X-Accepted-Stream-Protocol-Versions";

/// A refused or failed upgrade.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("unable to upgrade: missing upgrade headers in request")]
    NotUpgrade,
    #[error("unable to upgrade: {HEADER_PROTOCOL_VERSION} is required")]
    NoProtocol,
    #[error(
        "unable to upgrade: unable to negotiate protocol: client supports {client:?}, server accepts {server:?}"
    )]
    NoCommonProtocol {
        client: Vec<String>,
        server: Vec<String>,
    },
    #[error("unable to upgrade connection: the response was {0}, not 101 SPDY/3.1")]
    BadResponse(StatusCode),
}

impl HandshakeError {
    /// The response a server sends for this refusal (upstream: 400, or 403
    /// listing the accepted protocols).
    pub fn to_response(&self) -> Response<String> {
        let mut resp = Response::new(format!("{self}\n"));
        *resp.status_mut() = StatusCode::BAD_REQUEST;
        if let HandshakeError::NoCommonProtocol { server, .. } = self {
            *resp.status_mut() = StatusCode::FORBIDDEN;
            for p in server {
                if let Ok(v) = HeaderValue::from_str(p) {
                    resp.headers_mut()
                        .append(HEADER_ACCEPTED_PROTOCOL_VERSIONS, v);
                }
            }
        }
        if let Ok(v) = HeaderValue::from_str("text/plain; charset=utf-8") {
            resp.headers_mut().insert(http::header::CONTENT_TYPE, v);
        }
        resp
    }
}

/// Adds the upgrade headers and the offered subprotocols (most preferred
/// first) to a client's request.
pub fn client_request_headers(headers: &mut HeaderMap, protocols: &[&str]) {
    headers.append(CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.append(UPGRADE_HEADER, HeaderValue::from_static(UPGRADE));
    for p in protocols {
        if let Ok(v) = HeaderValue::from_str(p) {
            headers.append(HEADER_PROTOCOL_VERSION, v);
        }
    }
}

fn contains_token(headers: &HeaderMap, name: impl http::header::AsHeaderName, token: &str) -> bool {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains(&token.to_ascii_lowercase()))
}

/// Whether a request asks for the SPDY/3.1 upgrade (upstream checks the
/// first `Connection` and `Upgrade` values, by substring).
pub fn is_upgrade_request(headers: &HeaderMap) -> bool {
    contains_token(headers, CONNECTION, "upgrade")
        && contains_token(headers, UPGRADE_HEADER, UPGRADE)
}

/// The client's offered subprotocols: every `X-Stream-Protocol-Version`
/// value, split at commas, trimmed.
pub fn offered_protocols(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(HEADER_PROTOCOL_VERSION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim_matches(' '))
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Upstream's `negotiateProtocol`: the first of the client's protocols
/// (in its order) that the server accepts.
pub fn negotiate(client: &[String], server: &[&str]) -> Option<String> {
    client
        .iter()
        .find(|c| server.contains(&c.as_str()))
        .cloned()
}

/// Checks an upgrade request and negotiates the subprotocol: on success the
/// 101 response to send (then the connection is SPDY) and the protocol.
pub fn server_handshake(
    request: &HeaderMap,
    server_protocols: &[&str],
) -> Result<(Response<()>, String), HandshakeError> {
    if !is_upgrade_request(request) {
        return Err(HandshakeError::NotUpgrade);
    }
    let client = offered_protocols(request);
    if client.is_empty() {
        return Err(HandshakeError::NoProtocol);
    }
    let Some(protocol) = negotiate(&client, server_protocols) else {
        return Err(HandshakeError::NoCommonProtocol {
            client,
            server: server_protocols.iter().map(|s| (*s).to_owned()).collect(),
        });
    };
    let mut resp = Response::new(());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(UPGRADE_HEADER, HeaderValue::from_static(UPGRADE));
    if let Ok(v) = HeaderValue::from_str(&protocol) {
        h.insert(HEADER_PROTOCOL_VERSION, v);
    }
    Ok((resp, protocol))
}

/// Checks the server's answer to a client's upgrade: 101 with the SPDY/3.1
/// upgrade headers. Returns the negotiated subprotocol (none from a server
/// that chose none).
pub fn check_response(
    status: StatusCode,
    headers: &HeaderMap,
) -> Result<Option<String>, HandshakeError> {
    if status != StatusCode::SWITCHING_PROTOCOLS
        || !contains_token(headers, CONNECTION, "upgrade")
        || !contains_token(headers, UPGRADE_HEADER, UPGRADE)
    {
        return Err(HandshakeError::BadResponse(status));
    }
    Ok(headers
        .get(HEADER_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned))
}
