//! A SPDY/3.1 session over an upgraded connection, as moby/spdystream runs
//! one: [`Session`] opens streams (SYN_STREAM, then waits for SYN_REPLY as
//! Kubernetes' `CreateStream` does), [`Incoming`] yields the streams the
//! peer opens (answered with an empty SYN_REPLY at once, as Kubernetes'
//! handler does), PINGs are echoed, GOAWAY ends the session.
//!
//! Two tasks own the connection: the reader (`reader.rs`: frames in,
//! header blocks through the receiving zlib context) and the writer
//! (`writer.rs`: frames out, header blocks through the sending
//! context, so compression follows wire order).
//! The writer owns the reader's handle and ends last: when it is done every
//! stream is finished and [`Session::closed`] resolves. They end on the
//! connection's end, a GOAWAY either way, a protocol error (answered with
//! GOAWAY PROTOCOL_ERROR), [`Session::close`], or when every [`Session`],
//! [`Stream`] and [`Incoming`] is dropped.
//!
//! No flow control: spdystream never sends WINDOW_UPDATE or SETTINGS and
//! ignores both, so windows are neither enforced nor announced.

use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::SinkExt;
use futures::channel::{mpsc, oneshot};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::frame::{Frame, goaway};
use super::headers::{Decompressor, Headers};
use super::stream::{Stream, StreamShared, StreamState, lock};

/// How long [`Session::open`] waits for SYN_REPLY (Kubernetes'
/// `createStreamResponseTimeout`).
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a closing session may take to write what is queued.
pub const CLOSE_GRACE: Duration = Duration::from_secs(10);
/// Frames queued for the writer beyond one per sender.
const QUEUE: usize = 64;
/// Streams the peer opened, not yet accepted, before the reader waits.
const ACCEPT_QUEUE: usize = 16;
/// Bytes gathered into one write of the connection.
pub(super) const WRITE_BATCH: usize = 256 * 1024;

/// A failed operation on a session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("opening a SPDY stream: the session is closed")]
    Closed,
    #[error("opening a SPDY stream: the session is going away")]
    GoingAway,
    #[error("opening a SPDY stream: stream ids are exhausted")]
    IdsExhausted,
    #[error("opening a SPDY stream: the peer reset it (status {0})")]
    Refused(u32),
    #[error("opening a SPDY stream: no SYN_REPLY within {0:?}")]
    Timeout(Duration),
    #[error("pinging a SPDY peer: the session is closed")]
    PingClosed,
}

/// Why a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Closed from this side ([`Session::close`], or every handle dropped).
    Closed,
    /// The peer sent GOAWAY.
    GoneAway { status: u32 },
    /// The connection ended.
    Eof,
    /// The peer broke the protocol (a GOAWAY PROTOCOL_ERROR was sent).
    Protocol(String),
    /// Reading or writing the connection failed.
    Io(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Client,
    Server,
}

/// What the writer is asked to send.
#[derive(Debug)]
pub(super) enum Out {
    Frame(Frame),
    Syn {
        id: u32,
        headers: Headers,
        fin: bool,
    },
    Reply {
        id: u32,
        fin: bool,
    },
    /// Write GOAWAY with this status (none: just end), then end.
    Close(Option<u32>),
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) streams: HashMap<u32, Arc<StreamShared>>,
    pub(super) next_id: u32,
    /// The highest stream id the peer opened and we accepted.
    pub(super) last_remote_id: u32,
    pub(super) going_away: bool,
    pub(super) next_ping: u32,
    pub(super) pings: HashMap<u32, oneshot::Sender<()>>,
}

/// What the session's handles and tasks share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) role: Role,
    pub(super) tx: mpsc::Sender<Out>,
    pub(super) state: Mutex<State>,
    pub(super) abort: CancellationToken,
    pub(super) closing: Notify,
    pub(super) ended: watch::Sender<Option<Ended>>,
}

impl Shared {
    /// Queues a frame without waiting (each fresh sender has a slot).
    pub(super) fn send_now(&self, out: Out) {
        let _ = self.tx.clone().try_send(out);
    }

    /// Drops a finished stream from the table.
    pub(super) fn forget(&self, id: u32) {
        lock(&self.state).streams.remove(&id);
    }

    fn request_close(&self) {
        lock(&self.state).going_away = true;
        self.send_now(Out::Close(Some(goaway::OK)));
        self.closing.notify_one();
    }

    pub(super) fn stream(&self, id: u32) -> Option<Arc<StreamShared>> {
        lock(&self.state).streams.get(&id).cloned()
    }

    pub(super) fn forget_if_done(&self, s: &StreamShared) {
        if StreamShared::done(&s.lock()) {
            self.forget(s.id);
        }
    }
}

/// Held by every user-facing handle; the last one dropped closes the session.
#[derive(Debug)]
pub(super) struct Guard(Arc<Shared>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.request_close();
    }
}

/// A SPDY/3.1 session; clones share it.
#[derive(Debug, Clone)]
pub struct Session {
    shared: Arc<Shared>,
    guard: Arc<Guard>,
}

/// The streams the peer opens, already answered with SYN_REPLY. Accept
/// them or drop this (later ones are then refused): up to 16 wait, after
/// which the session stops reading until one is accepted.
#[derive(Debug)]
pub struct Incoming {
    rx: tokio::sync::mpsc::Receiver<Stream>,
    _guard: Arc<Guard>,
}

impl Incoming {
    /// The next stream the peer opened; `None` once the session ended.
    pub async fn accept(&mut self) -> Option<Stream> {
        self.rx.recv().await
    }

    pub fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<Option<Stream>> {
        self.rx.poll_recv(cx)
    }
}

impl Session {
    /// Runs the client side over an upgraded connection (odd stream ids).
    /// Must be called within a Tokio runtime.
    pub fn client<S>(io: S) -> (Session, Incoming)
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        Session::start(io, Role::Client)
    }

    /// Runs the server side over an upgraded connection (even stream ids).
    pub fn server<S>(io: S) -> (Session, Incoming)
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        Session::start(io, Role::Server)
    }

    fn start<S>(io: S, role: Role) -> (Session, Incoming)
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(QUEUE);
        let first = if role == Role::Client { 1 } else { 2 };
        let shared = Arc::new(Shared {
            role,
            tx,
            state: Mutex::new(State {
                streams: HashMap::new(),
                next_id: first,
                last_remote_id: 0,
                going_away: false,
                next_ping: first,
                pings: HashMap::new(),
            }),
            abort: CancellationToken::new(),
            closing: Notify::new(),
            ended: watch::Sender::new(None),
        });
        let guard = Arc::new(Guard(shared.clone()));
        let (accept_tx, accept_rx) = tokio::sync::mpsc::channel(ACCEPT_QUEUE);
        let (r, w) = tokio::io::split(io);
        let reader = super::reader::Reader {
            shared: shared.clone(),
            tx: shared.tx.clone(),
            inflate: Decompressor::new(),
            guard: Arc::downgrade(&guard),
            incoming: accept_tx,
        };
        let reader = tokio::spawn(reader.run(r));
        tokio::spawn(super::writer::run(shared.clone(), rx, w, reader));
        let incoming = Incoming {
            rx: accept_rx,
            _guard: guard.clone(),
        };
        (Session { shared, guard }, incoming)
    }

    /// Opens a stream (SYN_STREAM with `headers`; `fin` half-closes it at
    /// once) and waits for the peer's SYN_REPLY.
    pub async fn open(&self, headers: Headers, fin: bool) -> Result<Stream, Error> {
        if lock(&self.shared.state).going_away {
            return Err(Error::GoingAway);
        }
        let mut tx = self.shared.tx.clone();
        poll_fn(|cx| tx.poll_ready(cx))
            .await
            .map_err(|_| Error::Closed)?;
        let (reply_tx, reply_rx) = oneshot::channel();
        let stream = {
            let mut st = lock(&self.shared.state);
            if st.going_away {
                return Err(Error::GoingAway);
            }
            let id = st.next_id;
            if id > 0x7fff_ffff {
                return Err(Error::IdsExhausted);
            }
            let shared = StreamShared::new(
                id,
                headers.clone(),
                StreamState {
                    local_fin: fin,
                    reply: Some(reply_tx),
                    ..StreamState::default()
                },
            );
            // Sent under the lock: ids must reach the wire in order.
            tx.start_send(Out::Syn { id, headers, fin })
                .map_err(|_| Error::Closed)?;
            st.next_id += 2;
            st.streams.insert(id, shared.clone());
            shared
        };
        // A handle from here on: dropping this future resets the stream.
        let stream = Stream::new(stream, self.shared.clone(), self.guard.clone());
        match tokio::time::timeout(OPEN_TIMEOUT, reply_rx).await {
            Ok(Ok(Ok(()))) => Ok(stream),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(Error::Closed),
            Err(_) => Err(Error::Timeout(OPEN_TIMEOUT)),
        }
    }

    /// Sends a PING and waits for its echo.
    pub async fn ping(&self) -> Result<Duration, Error> {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut st = lock(&self.shared.state);
            let id = st.next_ping;
            st.next_ping = if id > 0x7fff_fffd {
                id - 0x7fff_fffe
            } else {
                id + 2
            };
            st.pings.insert(id, tx);
            id
        };
        let start = Instant::now();
        let mut sender = self.shared.tx.clone();
        if sender.send(Out::Frame(Frame::Ping { id })).await.is_err() {
            lock(&self.shared.state).pings.remove(&id);
            return Err(Error::PingClosed);
        }
        rx.await.map_err(|_| Error::PingClosed)?;
        Ok(start.elapsed())
    }

    /// Sends GOAWAY and ends the session (streams end: reads see the end,
    /// writes fail); returns when both tasks are done.
    pub async fn close(&self) {
        self.shared.request_close();
        self.closed().await;
    }

    /// Resolves when the session has ended and its tasks are done.
    pub fn closed(&self) -> impl Future<Output = Ended> + Send + 'static {
        let mut rx = self.shared.ended.subscribe();
        async move {
            match rx.wait_for(Option::is_some).await {
                Ok(e) => e.clone().unwrap_or(Ended::Closed),
                Err(_) => Ended::Closed,
            }
        }
    }

    /// Why the session ended, once it has.
    pub fn ended(&self) -> Option<Ended> {
        self.shared.ended.borrow().clone()
    }
}
