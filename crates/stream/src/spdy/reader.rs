//! The session's reading task: frames in, header blocks through the
//! connection's receiving zlib context, SYN_STREAMs validated and answered,
//! DATA into the streams' bounded buffers (waiting for room: a stream whose
//! reader does not read stalls the connection, as in spdystream), PINGs
//! echoed, GOAWAY and protocol errors ending the session.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use futures::SinkExt;
use futures::channel::mpsc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

use super::frame::{Frame, Head, VERSION, goaway, rst};
use super::headers::{Decompressor, Headers};
use super::session::{Ended, Error, Guard, Out, Role, Shared};
use super::stream::{Stream, StreamShared, StreamState, lock};

/// The reading task's state.
pub(super) struct Reader {
    pub(super) shared: Arc<Shared>,
    pub(super) tx: mpsc::Sender<Out>,
    pub(super) inflate: Decompressor,
    pub(super) guard: Weak<Guard>,
    pub(super) incoming: tokio::sync::mpsc::Sender<Stream>,
}

impl Reader {
    /// Reads until the connection ends; `None` when aborted.
    pub(super) async fn run<R: AsyncRead + Send>(mut self, r: R) -> Option<Ended> {
        let abort = self.shared.abort.clone();
        let ended = tokio::select! {
            e = self.read_loop(r) => e,
            () = abort.cancelled() => return None,
        };
        match &ended {
            Ended::GoneAway { .. } => {
                let _ = self.tx.send(Out::Close(None)).await;
            }
            Ended::Protocol(why) => {
                tracing::debug!(error = %why, "SPDY protocol error");
                let _ = self.tx.send(Out::Close(Some(goaway::PROTOCOL_ERROR))).await;
            }
            Ended::Eof | Ended::Io(_) | Ended::Closed => abort.cancel(),
        }
        Some(ended)
    }

    async fn read_loop<R: AsyncRead>(&mut self, r: R) -> Ended {
        let r = BufReader::with_capacity(64 * 1024, r);
        tokio::pin!(r);
        loop {
            match r.as_mut().fill_buf().await {
                Ok([]) => return Ended::Eof,
                Ok(_) => {}
                Err(e) => return Ended::Io(e.to_string()),
            }
            let mut head = [0u8; 8];
            if let Err(e) = r.read_exact(&mut head).await {
                return Ended::Io(format!("reading a frame header: {e}"));
            }
            let head = Head::parse(head);
            if let Head::Control { version, .. } = head
                && version != VERSION
            {
                return Ended::Protocol(format!("unsupported SPDY version {version}"));
            }
            let mut payload = vec![0u8; head.length()];
            if let Err(e) = r.read_exact(&mut payload).await {
                return Ended::Io(format!("reading a frame: {e}"));
            }
            let frame = match Frame::decode_payload(head, Bytes::from(payload)) {
                Ok(f) => f,
                Err(e) => return Ended::Protocol(e.to_string()),
            };
            if let Some(end) = self.handle(frame).await {
                return end;
            }
        }
    }

    fn headers(&mut self, block: &[u8]) -> Result<Headers, Ended> {
        self.inflate
            .decompress(block)
            .map_err(|e| Ended::Protocol(e.to_string()))
    }

    async fn send(&mut self, out: Out) {
        let _ = self.tx.send(out).await;
    }

    async fn handle(&mut self, frame: Frame) -> Option<Ended> {
        match frame {
            Frame::Data {
                stream_id,
                fin,
                data,
            } => {
                if let Some(s) = self.shared.stream(stream_id) {
                    s.deliver(data, fin).await;
                    self.shared.forget_if_done(&s);
                }
            }
            Frame::SynStream {
                stream_id,
                fin,
                unidirectional,
                block,
                ..
            } => {
                let headers = match self.headers(&block) {
                    Ok(h) => h,
                    Err(e) => return Some(e),
                };
                self.accept(stream_id, headers, fin, unidirectional).await;
            }
            Frame::SynReply {
                stream_id,
                fin,
                block,
            } => {
                if let Err(e) = self.headers(&block) {
                    return Some(e);
                }
                if let Some(s) = self.shared.stream(stream_id) {
                    let reply = s.lock().reply.take();
                    if let Some(reply) = reply {
                        let _ = reply.send(Ok(()));
                    }
                    if fin {
                        s.deliver(Bytes::new(), true).await;
                        self.shared.forget_if_done(&s);
                    }
                }
            }
            Frame::Headers {
                stream_id,
                fin,
                block,
            } => {
                if let Err(e) = self.headers(&block) {
                    return Some(e);
                }
                if fin && let Some(s) = self.shared.stream(stream_id) {
                    s.deliver(Bytes::new(), true).await;
                    self.shared.forget_if_done(&s);
                }
            }
            Frame::RstStream { stream_id, status } => {
                if let Some(s) = self.shared.stream(stream_id) {
                    self.shared.forget(stream_id);
                    s.terminate(true, Error::Refused(status));
                }
            }
            Frame::Ping { id } => {
                let ours = (id % 2 == 1) == (self.shared.role == Role::Client);
                if ours {
                    if let Some(tx) = lock(&self.shared.state).pings.remove(&id) {
                        let _ = tx.send(());
                    }
                } else {
                    self.send(Out::Frame(Frame::Ping { id })).await;
                }
            }
            Frame::GoAway { status, .. } => {
                lock(&self.shared.state).going_away = true;
                return Some(Ended::GoneAway { status });
            }
            // spdystream neither sends nor heeds these.
            Frame::Settings { .. } | Frame::WindowUpdate { .. } | Frame::Unknown { .. } => {}
        }
        None
    }

    /// A SYN_STREAM: validated as spdystream does (increasing ids of the
    /// peer's parity), answered, handed to [`Incoming`].
    async fn accept(&mut self, id: u32, headers: Headers, fin: bool, unidirectional: bool) {
        let peer_parity = if self.shared.role == Role::Client {
            0
        } else {
            1
        };
        let verdict = {
            let mut st = lock(&self.shared.state);
            if id % 2 != peer_parity || id <= st.last_remote_id {
                Err(rst::PROTOCOL_ERROR)
            } else if st.going_away {
                Err(rst::REFUSED_STREAM)
            } else {
                st.last_remote_id = id;
                let s = StreamShared::new(
                    id,
                    headers,
                    StreamState {
                        remote_fin: fin,
                        local_fin: unidirectional,
                        ..StreamState::default()
                    },
                );
                st.streams.insert(id, s.clone());
                Ok(s)
            }
        };
        let s = match verdict {
            Ok(s) => s,
            Err(status) => {
                let rst = Frame::RstStream {
                    stream_id: id,
                    status,
                };
                self.send(Out::Frame(rst)).await;
                return;
            }
        };
        let Some(guard) = self.guard.upgrade() else {
            self.shared.forget(id);
            s.terminate(true, Error::Closed);
            let rst = Frame::RstStream {
                stream_id: id,
                status: rst::REFUSED_STREAM,
            };
            self.send(Out::Frame(rst)).await;
            return;
        };
        let Ok(permit) = self.incoming.reserve().await else {
            // Nobody accepts: refused, as Kubernetes' handler refuses.
            self.shared.forget(id);
            s.terminate(true, Error::Closed);
            drop(guard);
            let rst = Frame::RstStream {
                stream_id: id,
                status: rst::REFUSED_STREAM,
            };
            self.send(Out::Frame(rst)).await;
            return;
        };
        // Replied before the stream is handed out, so that its data follows.
        let reply = Out::Reply {
            id,
            fin: unidirectional,
        };
        let _ = self.tx.send(reply).await;
        permit.send(Stream::new(s, self.shared.clone(), guard));
    }
}
