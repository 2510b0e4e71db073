//! HTTPS serving: TLS (client certificates optional), HTTP/1.1 and HTTP/2
//! on one port, the client's identity attached to each request, graceful
//! shutdown that lets in-flight requests finish.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use axum::body::{Body, Bytes};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use crate::auth::User;

/// How long in-flight requests may take to finish at shutdown.
const DRAIN: Duration = Duration::from_secs(10);
/// Concurrent HTTP/2 streams per connection: upstream's explicit default
/// (a watch is a stream, so this bounds one connection's watches).
const MAX_STREAMS: u32 = 250;
/// How long a client has to finish the TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let acceptor = TlsAcceptor::from(tls);
    let mut connections = JoinSet::new();
    loop {
        let (tcp, peer) = tokio::select! {
            _ = cancel.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (acceptor, app, cancel) = (acceptor.clone(), app.clone(), cancel.clone());
        connections.spawn(async move {
            let _ = tcp.set_nodelay(true);
            let stream = match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let user = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|certs| certs.first())
                .and_then(|cert| User::from_certificate(cert))
                .unwrap_or_else(User::anonymous);
            let service = tower::service_fn(move |mut request: axum::http::Request<Incoming>| {
                request.extensions_mut().insert(user.clone());
                answer_holding_body(app.clone(), request)
            });
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder.http2().max_concurrent_streams(MAX_STREAMS);
            let connection = builder.serve_connection_with_upgrades(
                TokioIo::new(stream),
                TowerToHyperService::new(service),
            );
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(%peer, %error, "connection ended with an error");
                    }
                }
                _ = cancel.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    drop(listener);
    let drained = tokio::time::timeout(DRAIN, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("in-flight requests did not finish within {DRAIN:?}; closing them");
        connections.abort_all();
    }
    Ok(())
}

/// Serves `request`, keeping its body open until the response has been
/// written, then reading what is left of it. A handler may answer without
/// reading the body (a 405, a 415) or stop part-way (413); over HTTP/2,
/// dropping the unread body at once resets the stream (`CANCEL`) before the
/// answer is out, and clients see a framing error instead of the `Status`.
/// Read to its end (up to [`DRAIN_BYTES`], within [`DRAIN`]) after the
/// response, the stream closes cleanly; past that it is reset after the
/// answer (`NO_ERROR`, RFC 9113 §8.1).
async fn answer_holding_body(
    app: Router,
    request: axum::http::Request<Incoming>,
) -> Result<axum::response::Response, std::convert::Infallible> {
    let slot = Arc::new(Mutex::new(None));
    let request = request.map(|body| {
        Body::new(Held {
            body: Some(body),
            slot: slot.clone(),
        })
    });
    let response = app.oneshot(request).await?;
    Ok(response.map(|body| Body::new(Answer { body, held: slot })))
}

/// A request body that, dropped unfinished, leaves itself in `slot`.
struct Held {
    body: Option<Incoming>,
    slot: Arc<Mutex<Option<Incoming>>>,
}

impl HttpBody for Held {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut().body.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(body) = self.body.take().filter(|b| !b.is_end_stream()) {
            *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(body);
        }
    }
}

/// At most this much of an unread request body is read (and dropped) after
/// an early answer.
const DRAIN_BYTES: usize = 64 * 1024 * 1024;

/// A response body holding its request's unread body until it is dropped,
/// after its last frame; then the rest of the request body is read.
struct Answer {
    body: Body,
    held: Arc<Mutex<Option<Incoming>>>,
}

impl Drop for Answer {
    fn drop(&mut self) {
        let unread = self.held.lock().unwrap_or_else(|e| e.into_inner()).take();
        let (Some(mut body), Ok(runtime)) = (unread, tokio::runtime::Handle::try_current()) else {
            return;
        };
        runtime.spawn(async move {
            let drain = async {
                let mut read = 0;
                while read < DRAIN_BYTES {
                    match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
                        Some(Ok(frame)) => read += frame.data_ref().map_or(0, Bytes::len),
                        _ => break,
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN, drain).await;
        });
    }
}

impl HttpBody for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
