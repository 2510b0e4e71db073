//! One SPDY stream as its user sees it: [`Stream`] (`AsyncRead` +
//! `AsyncWrite`) and its owned halves. Owns the stream's receive buffer
//! (bounded: the session's reader waits for room, as spdystream's frame
//! worker blocks on its unbuffered channel), the half-close (an empty DATA
//! frame with FIN on `poll_shutdown`), RST_STREAM on [`Stream::reset`] and
//! on dropping a stream that is not closed both ways.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker, ready};

use bytes::Bytes;
use futures::channel::{mpsc, oneshot};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use super::Headers;
use super::frame::{Frame, rst};
use super::session::{Error, Guard, Out, Shared};

/// The most one stream buffers of what the peer sent and its reader has not
/// read yet; beyond it the session stops reading the connection until the
/// reader catches up (a frame is always taken whole, so one frame may
/// overshoot). spdystream buffers nothing: its frame worker blocks.
pub const RECV_BUFFER: usize = 1 << 20;

/// The largest DATA frame written (spdystream writes one frame per
/// `Write`, 32 KiB from `io.Copy`, and reads any size).
pub const MAX_DATA_FRAME: usize = 64 * 1024;

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The state a stream shares between its handles and the session.
#[derive(Debug)]
pub(super) struct StreamShared {
    pub(super) id: u32,
    pub(super) headers: Headers,
    pub(super) st: Mutex<StreamState>,
    /// Signalled when the reader makes room (the session reader waits on it).
    pub(super) space: Notify,
}

#[derive(Debug, Default)]
pub(super) struct StreamState {
    pub(super) chunks: VecDeque<Bytes>,
    pub(super) buffered: usize,
    /// The peer sent FIN.
    pub(super) remote_fin: bool,
    /// We sent FIN (or may not send: a unidirectional stream).
    pub(super) local_fin: bool,
    /// RST_STREAM was sent or received.
    pub(super) reset: bool,
    /// The session ended.
    pub(super) gone: bool,
    /// The read half was dropped: incoming data is discarded.
    pub(super) reader_gone: bool,
    pub(super) read_waker: Option<Waker>,
    /// The opener waiting for SYN_REPLY.
    pub(super) reply: Option<oneshot::Sender<Result<(), Error>>>,
}

impl StreamShared {
    pub(super) fn new(id: u32, headers: Headers, st: StreamState) -> Arc<StreamShared> {
        Arc::new(StreamShared {
            id,
            headers,
            st: Mutex::new(st),
            space: Notify::new(),
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, StreamState> {
        lock(&self.st)
    }

    /// Nothing more will happen on the stream.
    pub(super) fn done(st: &StreamState) -> bool {
        st.reset || st.gone || (st.local_fin && st.remote_fin)
    }

    /// Ends the stream's both directions locally, without telling the
    /// peer (the peer reset it, or the session ended).
    pub(super) fn terminate(&self, reset: bool, err: Error) {
        let mut st = self.lock();
        if reset {
            st.reset = true;
        } else {
            st.gone = true;
        }
        if let Some(reply) = st.reply.take() {
            let _ = reply.send(Err(err));
        }
        if let Some(w) = st.read_waker.take() {
            w.wake();
        }
        drop(st);
        self.space.notify_one();
    }

    /// Queues DATA from the peer, waiting while the buffer is full.
    pub(super) async fn deliver(&self, data: Bytes, fin: bool) {
        loop {
            {
                let mut st = self.lock();
                if st.reset || st.gone || st.remote_fin {
                    return; // after FIN or RST: ignored, as spdystream does
                }
                let room = st.buffered == 0 || st.buffered + data.len() <= RECV_BUFFER;
                if st.reader_gone || data.is_empty() || room {
                    if !st.reader_gone && !data.is_empty() {
                        st.buffered += data.len();
                        st.chunks.push_back(data);
                    }
                    st.remote_fin |= fin;
                    if let Some(w) = st.read_waker.take() {
                        w.wake();
                    }
                    return;
                }
            }
            self.space.notified().await;
        }
    }
}

/// What every handle of a stream holds; dropping the last resets a stream
/// that is still open either way.
struct Core {
    stream: Arc<StreamShared>,
    session: Arc<Shared>,
    _guard: Arc<Guard>,
}

impl Core {
    fn reset(&self) {
        {
            let mut st = self.stream.lock();
            if StreamShared::done(&st) {
                return;
            }
            st.reset = true;
            if let Some(w) = st.read_waker.take() {
                w.wake();
            }
        }
        self.stream.space.notify_one();
        self.session.forget(self.stream.id);
        self.session.send_now(Out::Frame(Frame::RstStream {
            stream_id: self.stream.id,
            status: rst::CANCEL,
        }));
    }
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.stream.id)
            .field("headers", &self.stream.headers)
            .finish_non_exhaustive()
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        self.reset();
        self.session.forget(self.stream.id);
    }
}

/// A SPDY stream: read what the peer sends, write to it, `shutdown()` to
/// half-close (FIN), [`Stream::reset`] to abandon it.
#[derive(Debug)]
pub struct Stream {
    recv: RecvHalf,
    send: SendHalf,
}

/// The reading half of a [`Stream`]; dropping it discards what arrives
/// later.
#[derive(Debug)]
pub struct RecvHalf {
    core: Arc<Core>,
}

/// The writing half of a [`Stream`].
#[derive(Debug)]
pub struct SendHalf {
    core: Arc<Core>,
    tx: mpsc::Sender<Out>,
}

impl Stream {
    pub(super) fn new(
        stream: Arc<StreamShared>,
        session: Arc<Shared>,
        guard: Arc<Guard>,
    ) -> Stream {
        let tx = session.tx.clone();
        let core = Arc::new(Core {
            stream,
            session,
            _guard: guard,
        });
        Stream {
            recv: RecvHalf { core: core.clone() },
            send: SendHalf { core, tx },
        }
    }

    /// The stream id (odd when the client opened it, even the server).
    pub fn id(&self) -> u32 {
        self.recv.id()
    }

    /// The headers of the SYN_STREAM that opened it.
    pub fn headers(&self) -> &Headers {
        self.recv.headers()
    }

    /// Sends RST_STREAM (CANCEL) unless the stream is already closed both
    /// ways: reads then end, writes fail.
    pub fn reset(&self) {
        self.recv.core.reset();
    }

    /// Whether either side reset the stream.
    pub fn is_reset(&self) -> bool {
        self.recv.is_reset()
    }

    /// Separates the halves (each still owns the stream: it is reset only
    /// when both are dropped).
    pub fn into_split(self) -> (RecvHalf, SendHalf) {
        (self.recv, self.send)
    }
}

impl RecvHalf {
    pub fn id(&self) -> u32 {
        self.core.stream.id
    }

    pub fn headers(&self) -> &Headers {
        &self.core.stream.headers
    }

    pub fn is_reset(&self) -> bool {
        self.core.stream.lock().reset
    }
}

impl SendHalf {
    pub fn id(&self) -> u32 {
        self.core.stream.id
    }

    pub fn headers(&self) -> &Headers {
        &self.core.stream.headers
    }

    pub fn reset(&self) {
        self.core.reset();
    }

    fn check(&self) -> io::Result<()> {
        let st = self.core.stream.lock();
        if st.reset {
            Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "SPDY stream reset",
            ))
        } else if st.gone {
            Err(closed())
        } else if st.local_fin {
            Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "SPDY stream write half closed",
            ))
        } else {
            Ok(())
        }
    }
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "SPDY session closed")
}

impl Drop for RecvHalf {
    fn drop(&mut self) {
        let mut st = self.core.stream.lock();
        st.reader_gone = true;
        st.chunks.clear();
        st.buffered = 0;
        drop(st);
        self.core.stream.space.notify_one();
    }
}

impl AsyncRead for RecvHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let stream = &self.core.stream;
        let mut st = stream.lock();
        if let Some(chunk) = st.chunks.front_mut() {
            let n = chunk.len().min(buf.remaining());
            buf.put_slice(&chunk.split_to(n));
            if chunk.is_empty() {
                st.chunks.pop_front();
            }
            st.buffered -= n;
            drop(st);
            stream.space.notify_one();
            return Poll::Ready(Ok(()));
        }
        // A reset or a lost session reads as the end, as in spdystream.
        if st.remote_fin || st.reset || st.gone {
            return Poll::Ready(Ok(()));
        }
        st.read_waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl AsyncWrite for SendHalf {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        ready!(self.tx.poll_ready(cx)).map_err(|_| closed())?;
        // Checked again: the stream may have been reset while waiting.
        self.check()?;
        let n = buf.len().min(MAX_DATA_FRAME);
        let frame = Frame::Data {
            stream_id: self.core.stream.id,
            fin: false,
            data: Bytes::copy_from_slice(&buf[..n]),
        };
        self.tx
            .start_send(Out::Frame(frame))
            .map_err(|_| closed())?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        {
            let st = self.core.stream.lock();
            if st.local_fin || st.reset {
                return Poll::Ready(Ok(()));
            }
            if st.gone {
                return Poll::Ready(Err(closed()));
            }
        }
        ready!(self.tx.poll_ready(cx)).map_err(|_| closed())?;
        let frame = Frame::Data {
            stream_id: self.core.stream.id,
            fin: true,
            data: Bytes::new(),
        };
        self.tx
            .start_send(Out::Frame(frame))
            .map_err(|_| closed())?;
        let done = {
            let mut st = self.core.stream.lock();
            st.local_fin = true;
            StreamShared::done(&st)
        };
        if done {
            self.core.session.forget(self.core.stream.id);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.recv).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.send).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.send).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.send).poll_shutdown(cx)
    }
}
