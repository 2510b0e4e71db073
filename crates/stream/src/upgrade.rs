//! Forwarding an upgrade request — SPDY/3.1 or WebSocket — to a backend
//! and splicing the two connections once it answers 101 (upstream's
//! `UpgradeAwareHandler`): the API server does this to a node's agent, the
//! agent to the runtime's streaming server. The backend's answer goes back
//! to the client as it is (a refusal with its code and body); after a 101
//! the bytes are relayed unparsed by [`crate::splice`].

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use crate::splice;

/// A forward that failed before the backend answered.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the request to the backend: {0}")]
    Request(#[source] http::Error),
    #[error("the HTTP exchange with the backend: {0}")]
    Http(#[source] hyper::Error),
}

/// Headers never passed on: the client's credentials (the backend
/// trusts the forwarder, not the client), impersonation, and the
/// hop-by-hop headers of RFC 9110 §7.6.1 other than the upgrade's own.
fn forwarded(name: &HeaderName) -> bool {
    let name = name.as_str();
    !(name == "authorization"
        || name == "proxy-authorization"
        || name == "host"
        || name == "keep-alive"
        || name == "te"
        || name == "trailer"
        || name == "transfer-encoding"
        || name == "content-length"
        || name.starts_with("impersonate-"))
}

/// Whether a request asks for a protocol upgrade (`Connection: upgrade`
/// and an `Upgrade` header), as upstream's `httpstream.IsUpgradeRequest`.
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// One upgrade to forward.
#[derive(Debug)]
pub struct Forward<'a> {
    pub method: Method,
    /// The backend's path and query.
    pub path_and_query: &'a str,
    /// The `Host` the backend is asked for.
    pub authority: &'a str,
    /// The client's headers (filtered by [`forwarded`] on the way).
    pub headers: &'a HeaderMap,
    /// How long a spliced connection may stay silent.
    pub idle: Duration,
    /// Ends the splice (the server's shutdown).
    pub stop: CancellationToken,
}

impl Forward<'_> {
    /// Sends the upgrade request over `backend` (a connection already made
    /// to the backend) and returns its response. When that is a 101, a
    /// task splices `client` (the client's side of the upgrade) with the
    /// backend's until either ends; otherwise the response (with its body)
    /// is the answer to give the client, and `client` is dropped.
    /// `hold` is kept until the splice ends (a metric's guard).
    pub async fn send<S, G>(
        self,
        backend: S,
        client: OnUpgrade,
        hold: G,
    ) -> Result<Response<Incoming>, Error>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
        G: Send + 'static,
    {
        let headers = self.headers.iter().filter(|(n, _)| forwarded(n));
        let mut response = exchange(
            backend,
            self.method,
            self.path_and_query,
            self.authority,
            headers,
        )
        .await?;
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            let backend = hyper::upgrade::on(&mut response);
            let (idle, stop) = (self.idle, self.stop);
            tokio::spawn(async move {
                let (client, backend) = match tokio::join!(client, backend) {
                    (Ok(client), Ok(backend)) => (client, backend),
                    (Err(error), _) | (_, Err(error)) => {
                        tracing::debug!(%error, "an upgrade did not complete");
                        return;
                    }
                };
                let spliced =
                    splice::splice(TokioIo::new(client), TokioIo::new(backend), idle, stop).await;
                tracing::debug!(?spliced, "a stream ended");
                drop(hold);
            });
        }
        Ok(response)
    }
}

/// What a backend answered an upgrade request this end made itself.
#[derive(Debug)]
pub enum Answer {
    /// 101: the backend's headers and the upgraded connection.
    Switched {
        headers: HeaderMap,
        io: TokioIo<hyper::upgrade::Upgraded>,
    },
    /// Anything else: the status and (at most 64 KiB of) the body.
    Refused { status: StatusCode, body: Bytes },
}

/// Makes an upgrade request over `backend` — `headers` are sent as they
/// are, with `Host` — and returns the backend's answer.
pub async fn request<S>(
    backend: S,
    method: Method,
    path_and_query: &str,
    authority: &str,
    headers: &HeaderMap,
) -> Result<Answer, Error>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    use http_body_util::BodyExt;

    let mut response = exchange(backend, method, path_and_query, authority, headers.iter()).await?;
    let status = response.status();
    if status == StatusCode::SWITCHING_PROTOCOLS {
        let upgraded = hyper::upgrade::on(&mut response)
            .await
            .map_err(Error::Http)?;
        return Ok(Answer::Switched {
            headers: response.headers().clone(),
            io: TokioIo::new(upgraded),
        });
    }
    let body = http_body_util::Limited::new(response.into_body(), 64 * 1024)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    Ok(Answer::Refused { status, body })
}

/// One HTTP/1.1 exchange over `backend`, upgrades allowed: the request
/// (`Host`, then `headers`, no body) and the backend's response.
async fn exchange<'h, S>(
    backend: S,
    method: Method,
    path_and_query: &str,
    authority: &str,
    headers: impl Iterator<Item = (&'h HeaderName, &'h HeaderValue)>,
) -> Result<Response<Incoming>, Error>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(backend))
        .await
        .map_err(Error::Http)?;
    tokio::spawn(async move {
        if let Err(error) = connection.with_upgrades().await {
            tracing::debug!(%error, "an upgraded connection to a backend ended");
        }
    });
    let mut request = Request::builder()
        .method(method)
        .uri(path_and_query)
        .header(header::HOST, authority);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let request = request
        .body(http_body_util::Empty::<Bytes>::new())
        .map_err(Error::Request)?;
    sender.send_request(request).await.map_err(Error::Http)
}

/// The headers of a 101 answer as the client should see them: the
/// backend's, less what describes the backend's own connection.
pub fn switching_headers(backend: &HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in backend {
        if name != header::CONTENT_LENGTH && name != header::TRANSFER_ENCODING {
            headers.append(name.clone(), value.clone());
        }
    }
    headers
        .entry(header::CONNECTION)
        .or_insert(HeaderValue::from_static("Upgrade"));
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upgrades_are_recognised_by_their_connection_token() {
        let mut headers = HeaderMap::new();
        headers.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        assert!(!is_upgrade(&headers));
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        assert!(is_upgrade(&headers));
    }

    #[test]
    fn credentials_and_hop_by_hop_headers_stay_behind() {
        for name in ["authorization", "impersonate-user", "keep-alive", "host"] {
            assert!(!forwarded(&HeaderName::from_static(name)), "{name}");
        }
        for name in [
            "upgrade",
            "connection",
            "x-stream-protocol-version",
            "sec-websocket-key",
        ] {
            assert!(forwarded(&HeaderName::from_static(name)), "{name}");
        }
    }
}
