//! An established WebSocket connection: split into a [`Reader`] that yields
//! whole messages and a cloneable [`Writer`].
//!
//! The reader answers pings with pongs through its own writer, swallows
//! pongs, and echoes the peer's close frame (RFC 6455 §5.5.1) before
//! handing it to the caller. Each write is one frame built in one buffer
//! and written while holding the write half's lock; a write cut short by
//! cancellation is finished by the next one, so frames never interleave.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::BytesMut;
use ring::rand::{SecureRandom, SystemRandom};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::frame::{DEFAULT_MAX_MESSAGE_SIZE, FrameDecoder, FrameError, MAX_CONTROL_PAYLOAD};
use super::frame::{Opcode, encode_frame};
use super::message::{Incoming, MessageAssembler};
use super::{Error, Message, Role};

/// How much the reader asks the connection for at a time.
const READ_CHUNK: usize = 16 * 1024;

/// A WebSocket connection after its opening handshake.
pub struct WebSocket<S> {
    io: S,
    role: Role,
    max_message_size: usize,
    /// Bytes read past the handshake: the start of the first frames.
    read_buf: BytesMut,
}

impl<S> fmt::Debug for WebSocket<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebSocket")
            .field("role", &self.role)
            .field("max_message_size", &self.max_message_size)
            .field("buffered", &self.read_buf.len())
            .finish_non_exhaustive()
    }
}

impl<S: AsyncRead + AsyncWrite> WebSocket<S> {
    /// A connection over `io`, whose HTTP upgrade was done elsewhere (by
    /// hyper, say), as the endpoint of `role`.
    pub fn from_upgraded(io: S, role: Role) -> WebSocket<S> {
        WebSocket::with_buffered(io, role, BytesMut::new())
    }

    /// A connection whose first bytes, read along with the handshake, are
    /// already in `read_buf`.
    pub(crate) fn with_buffered(io: S, role: Role, read_buf: BytesMut) -> WebSocket<S> {
        WebSocket {
            io,
            role,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            read_buf,
        }
    }

    /// Refuses incoming messages over `max` bytes (default 32 MiB): the
    /// reader fails with [`FrameError::TooLarge`], close code 1009.
    pub fn with_max_message_size(mut self, max: usize) -> WebSocket<S> {
        self.max_message_size = max;
        self
    }

    /// This endpoint's role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The reading and writing halves. The reader keeps a clone of the
    /// writer for its pongs and its close echo.
    pub fn split(self) -> (Reader<S>, Writer<S>) {
        let (read, write) = tokio::io::split(self.io);
        let writer = Writer {
            shared: Arc::new(Shared {
                role: self.role,
                close_sent: AtomicBool::new(false),
                state: Mutex::new(WriteState {
                    io: write,
                    close_sent: false,
                    pending: Vec::new(),
                    written: 0,
                }),
                masks: std::sync::Mutex::new(MaskSource::default()),
            }),
        };
        let reader = Reader {
            io: read,
            buf: self.read_buf,
            decoder: FrameDecoder::new(self.role, self.max_message_size),
            assembler: MessageAssembler::new(self.max_message_size),
            writer: writer.clone(),
            last_activity: Instant::now(),
            close_received: None,
            close_returned: false,
            failed: false,
        };
        (reader, writer)
    }
}

/// The receiving half of a connection.
pub struct Reader<S> {
    io: ReadHalf<S>,
    buf: BytesMut,
    decoder: FrameDecoder,
    assembler: MessageAssembler,
    writer: Writer<S>,
    last_activity: Instant,
    /// The peer's close frame, once received.
    close_received: Option<Option<(u16, String)>>,
    /// Whether the close frame was handed to the caller.
    close_returned: bool,
    /// Whether reading stopped on an error or the end of the stream.
    failed: bool,
}

impl<S> fmt::Debug for Reader<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("decoder", &self.decoder)
            .field("buffered", &self.buf.len())
            .field("last_activity", &self.last_activity)
            .field("close_received", &self.close_received)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl<S: AsyncRead + AsyncWrite> Reader<S> {
    /// The next data message, or the peer's close frame (once, after
    /// echoing it), or `None` at the end: after the close frame, or when
    /// the connection ended between messages without one. Pings are
    /// answered and pongs dropped on the way.
    ///
    /// After an error the connection is unusable; on a protocol error the
    /// caller should close with [`Error::close_code`]. Dropping the future
    /// loses no frame, but may lose the pong owed to a ping.
    pub async fn next_message(&mut self) -> Result<Option<Message>, Error> {
        loop {
            if let Some(close) = &self.close_received {
                if self.close_returned {
                    return Ok(None);
                }
                let close = close.clone();
                // The echo carries the peer's code without its reason. The
                // peer may already have gone; its close frame stands.
                let echo = close.as_ref().map(|(code, _)| (*code, String::new()));
                if let Err(e) = self.writer.echo_close(echo.as_ref()).await {
                    tracing::debug!("websocket: echoing the close frame: {e}");
                }
                self.close_returned = true;
                return Ok(Some(Message::Close(close)));
            }
            if self.failed {
                return Ok(None);
            }
            let frame = match self.decoder.decode(&mut self.buf) {
                Ok(Some(frame)) => frame,
                Ok(None) => {
                    self.fill().await?;
                    continue;
                }
                Err(e) => return Err(self.fail(e)),
            };
            self.last_activity = Instant::now();
            match self.assembler.push(frame) {
                Ok(None) | Ok(Some(Incoming::Pong(_))) => {}
                Ok(Some(Incoming::Ping(payload))) => {
                    // After this side's close frame, pings go unanswered.
                    match self.writer.pong(&payload).await {
                        Ok(()) | Err(Error::Closed) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(Some(Incoming::Message(Message::Close(close)))) => {
                    self.close_received = Some(close);
                }
                Ok(Some(Incoming::Message(message))) => return Ok(Some(message)),
                Err(e) => return Err(self.fail(e)),
            }
        }
    }

    /// When the last frame (of any kind) arrived, for idle timeouts.
    pub fn last_activity(&self) -> Instant {
        self.last_activity
    }

    /// The writer this reader answers pings through.
    pub fn writer(&self) -> &Writer<S> {
        &self.writer
    }

    /// Reads more of the stream into the buffer.
    async fn fill(&mut self) -> Result<(), Error> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 2 {
            self.buf.reserve(READ_CHUNK);
        }
        match self.io.read_buf(&mut self.buf).await {
            Ok(0) => {
                self.failed = true;
                if self.buf.is_empty() && !self.assembler.in_progress() {
                    // Ended between messages: `next_message` yields None.
                    Ok(())
                } else {
                    Err(Error::Truncated)
                }
            }
            Ok(_) => Ok(()),
            Err(e) => {
                self.failed = true;
                Err(e.into())
            }
        }
    }

    fn fail(&mut self, e: FrameError) -> Error {
        self.failed = true;
        Error::Protocol(e)
    }
}

/// The sending half of a connection; clones share it.
pub struct Writer<S> {
    shared: Arc<Shared<S>>,
}

impl<S> Clone for Writer<S> {
    fn clone(&self) -> Self {
        Writer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S> Writer<S> {
    /// Whether this endpoint's close frame went out (or began to).
    pub fn is_close_sent(&self) -> bool {
        self.shared.close_sent.load(Ordering::Acquire)
    }
}

impl<S> fmt::Debug for Writer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer")
            .field("role", &self.shared.role)
            .field("close_sent", &self.is_close_sent())
            .finish_non_exhaustive()
    }
}

struct Shared<S> {
    role: Role,
    /// A copy of `WriteState::close_sent` readable without the lock.
    close_sent: AtomicBool,
    state: Mutex<WriteState<S>>,
    masks: std::sync::Mutex<MaskSource>,
}

struct WriteState<S> {
    io: WriteHalf<S>,
    close_sent: bool,
    /// The frame being written and how much of it went out: a write
    /// cancelled halfway leaves the rest here for the next.
    pending: Vec<u8>,
    written: usize,
}

impl<S: AsyncWrite> WriteState<S> {
    async fn finish_pending(&mut self) -> std::io::Result<()> {
        while self.written < self.pending.len() {
            let n = self.io.write(&self.pending[self.written..]).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Ok(())
    }
}

/// Mask keys drawn from the system's random source, 64 at a time.
struct MaskSource {
    keys: [u8; 256],
    used: usize,
}

impl Default for MaskSource {
    fn default() -> Self {
        MaskSource {
            keys: [0; 256],
            used: 0,
        }
    }
}

impl MaskSource {
    fn next(&mut self) -> Result<[u8; 4], Error> {
        if self.used == 0 || self.used >= self.keys.len() {
            SystemRandom::new()
                .fill(&mut self.keys)
                .map_err(|_| std::io::Error::other("no randomness for a mask key"))?;
            self.used = 0;
        }
        let mut key = [0u8; 4];
        key.copy_from_slice(&self.keys[self.used..self.used + 4]);
        self.used += 4;
        Ok(key)
    }
}

impl<S: AsyncRead + AsyncWrite> Writer<S> {
    /// Sends `message` as one frame; a close message sends a close frame
    /// as [`Writer::close`] does.
    pub async fn send(&self, message: Message) -> Result<(), Error> {
        match message {
            Message::Text(text) => self.send_text(&text).await,
            Message::Binary(data) => self.send_binary(data).await,
            Message::Close(close) => self.echo_close(close.as_ref()).await,
        }
    }

    /// Sends a binary message.
    pub async fn send_binary(&self, data: impl AsRef<[u8]>) -> Result<(), Error> {
        self.send_frame(Opcode::Binary, data.as_ref()).await
    }

    /// Sends a text message.
    pub async fn send_text(&self, text: &str) -> Result<(), Error> {
        self.send_frame(Opcode::Text, text.as_bytes()).await
    }

    /// Sends a ping carrying `payload` (at most 125 bytes).
    pub async fn ping(&self, payload: &[u8]) -> Result<(), Error> {
        self.send_frame(Opcode::Ping, payload).await
    }

    /// Sends an unsolicited pong carrying `payload` (at most 125 bytes);
    /// the reader answers pings itself.
    pub async fn pong(&self, payload: &[u8]) -> Result<(), Error> {
        self.send_frame(Opcode::Pong, payload).await
    }

    /// Sends a close frame with `code` and `reason` (cut to fit the 123
    /// bytes a control frame leaves for it). Only the first call sends
    /// anything; later ones, and data sent afterwards, are refused
    /// quietly and with [`Error::Closed`] respectively.
    pub async fn close(&self, code: u16, reason: &str) -> Result<(), Error> {
        self.echo_close(Some(&(code, reason.to_owned()))).await
    }

    /// Shuts the connection's sending direction down (after any frame a
    /// cancelled write left half sent).
    pub async fn shutdown(&self) -> Result<(), Error> {
        let mut state = self.shared.state.lock().await;
        state.finish_pending().await?;
        state.io.shutdown().await?;
        Ok(())
    }

    /// Sends a close frame with the given status, or with none.
    pub(crate) async fn echo_close(&self, close: Option<&(u16, String)>) -> Result<(), Error> {
        let mut payload = Vec::new();
        if let Some((code, reason)) = close {
            payload.extend_from_slice(&code.to_be_bytes());
            let mut end = reason.len().min(MAX_CONTROL_PAYLOAD - 2);
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            payload.extend_from_slice(&reason.as_bytes()[..end]);
        }
        match self.send_frame(Opcode::Close, &payload).await {
            Err(Error::Closed) => Ok(()),
            other => other,
        }
    }

    async fn send_frame(&self, opcode: Opcode, payload: &[u8]) -> Result<(), Error> {
        if opcode.is_control() && payload.len() > MAX_CONTROL_PAYLOAD {
            return Err(FrameError::ControlTooLong(payload.len() as u64).into());
        }
        let mask = match self.shared.role {
            Role::Client => Some(self.next_mask()?),
            Role::Server => None,
        };
        let mut frame = Vec::new();
        encode_frame(&mut frame, true, opcode, payload, mask);

        let mut state = self.shared.state.lock().await;
        if state.close_sent {
            return Err(Error::Closed);
        }
        if opcode == Opcode::Close {
            state.close_sent = true;
            self.shared.close_sent.store(true, Ordering::Release);
        }
        state.finish_pending().await?;
        state.pending = frame;
        state.written = 0;
        state.finish_pending().await?;
        state.io.flush().await?;
        Ok(())
    }

    fn next_mask(&self) -> Result<[u8; 4], Error> {
        let mut masks = self
            .shared
            .masks
            .lock()
            .map_err(|_| std::io::Error::other("the mask source was poisoned"))?;
        masks.next()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};

    use super::*;

    fn pair() -> (WebSocket<DuplexStream>, WebSocket<DuplexStream>) {
        let (a, b) = duplex(1 << 20);
        (
            WebSocket::from_upgraded(a, Role::Client),
            WebSocket::from_upgraded(b, Role::Server),
        )
    }

    #[tokio::test]
    async fn round_trip_both_ways() {
        let (client, server) = pair();
        let (mut client_rx, client_tx) = client.split();
        let (mut server_rx, server_tx) = server.split();

        client_tx.send_text("hello").await.expect("send");
        client_tx
            .send_binary(Bytes::from_static(b"\x00\x01\x02"))
            .await
            .expect("send");
        let big = vec![7u8; 100_000];
        client_tx.send_binary(&big).await.expect("send");
        assert_eq!(
            server_rx.next_message().await.expect("recv"),
            Some(Message::Text("hello".into()))
        );
        assert_eq!(
            server_rx.next_message().await.expect("recv"),
            Some(Message::Binary(Bytes::from_static(b"\x00\x01\x02")))
        );
        assert_eq!(
            server_rx.next_message().await.expect("recv"),
            Some(Message::Binary(Bytes::from(big)))
        );

        server_tx.send_text("back").await.expect("send");
        assert_eq!(
            client_rx.next_message().await.expect("recv"),
            Some(Message::Text("back".into()))
        );
    }

    #[tokio::test]
    async fn pings_are_answered_and_pongs_swallowed() {
        let (client, server) = pair();
        let (mut client_rx, client_tx) = client.split();
        let (mut server_rx, server_tx) = server.split();

        client_tx.ping(b"are you there").await.expect("ping");
        client_tx.send_text("after").await.expect("send");
        // The server's reader answers the ping while reading on.
        assert_eq!(
            server_rx.next_message().await.expect("recv"),
            Some(Message::Text("after".into()))
        );
        server_tx.send_text("done").await.expect("send");
        // The client's reader swallows the pong.
        let before = client_rx.last_activity();
        assert_eq!(
            client_rx.next_message().await.expect("recv"),
            Some(Message::Text("done".into()))
        );
        assert!(client_rx.last_activity() >= before);
    }

    #[tokio::test]
    async fn pong_is_sent_on_the_wire() {
        let (mut raw, server) = duplex(4096);
        let server = WebSocket::from_upgraded(server, Role::Server);
        let (mut rx, _tx) = server.split();
        let mut ping = Vec::new();
        encode_frame(&mut ping, true, Opcode::Ping, b"x", Some([1, 2, 3, 4]));
        raw.write_all(&ping).await.expect("write");
        drop(raw.shutdown().await);
        // The stream ends after the ping: no message, a clean end.
        assert_eq!(rx.next_message().await.expect("recv"), None);
        let mut pong = [0u8; 3];
        raw.read_exact(&mut pong).await.expect("read");
        assert_eq!(pong, [0x8a, 0x01, b'x']);
    }

    #[tokio::test]
    async fn close_handshake() {
        let (client, server) = pair();
        let (mut client_rx, client_tx) = client.split();
        let (mut server_rx, server_tx) = server.split();

        client_tx.close(1000, "bye").await.expect("close");
        // Closing twice sends nothing more; data after close is refused.
        client_tx.close(1001, "again").await.expect("close");
        assert!(matches!(
            client_tx.send_text("late").await,
            Err(Error::Closed)
        ));
        assert!(client_tx.is_close_sent());

        assert_eq!(
            server_rx.next_message().await.expect("recv"),
            Some(Message::Close(Some((1000, "bye".into()))))
        );
        assert_eq!(server_rx.next_message().await.expect("recv"), None);
        assert!(server_tx.is_close_sent());
        // The server echoed the status code.
        assert_eq!(
            client_rx.next_message().await.expect("recv"),
            Some(Message::Close(Some((1000, String::new()))))
        );
        assert_eq!(client_rx.next_message().await.expect("recv"), None);
    }

    #[tokio::test]
    async fn close_reason_is_cut_on_a_char_boundary() {
        let (client, server) = pair();
        let (_client_rx, client_tx) = client.split();
        let (mut server_rx, _server_tx) = server.split();
        let reason = "é".repeat(100);
        client_tx.close(4000, &reason).await.expect("close");
        let Some(Message::Close(Some((code, got)))) = server_rx.next_message().await.expect("recv")
        else {
            panic!("no close");
        };
        assert_eq!(code, 4000);
        assert_eq!(got, "é".repeat(61));
    }

    #[tokio::test]
    async fn protocol_errors_are_reported() {
        let cases: Vec<(&str, Role, Vec<u8>, u16)> = vec![
            ("unmasked to server", Role::Server, vec![0x81, 0x00], 1002),
            (
                "masked to client",
                Role::Client,
                vec![0x81, 0x80, 0, 0, 0, 0],
                1002,
            ),
            ("reserved bit", Role::Client, vec![0xa2, 0x00], 1002),
            ("bad UTF-8", Role::Client, vec![0x81, 0x01, 0xff], 1007),
            ("oversize", Role::Client, vec![0x82, 0x7e, 0x04, 0x01], 1009),
        ];
        for (name, role, wire, code) in cases {
            let (mut raw, io) = duplex(4096);
            let ws = WebSocket::from_upgraded(io, role).with_max_message_size(1024);
            let (mut rx, _tx) = ws.split();
            raw.write_all(&wire).await.expect("write");
            let err = rx.next_message().await.expect_err(name);
            assert_eq!(err.close_code(), Some(code), "{name}: {err}");
            // The reader stays stopped.
            assert_eq!(rx.next_message().await.expect(name), None, "{name}");
        }
    }

    #[tokio::test]
    async fn truncated_stream_is_an_error() {
        for wire in [vec![0x82], vec![0x82, 0x05, 1, 2], vec![0x02, 0x01, 1]] {
            let (mut raw, io) = duplex(4096);
            let (mut rx, _tx) = WebSocket::from_upgraded(io, Role::Client).split();
            raw.write_all(&wire).await.expect("write");
            drop(raw);
            assert!(
                matches!(rx.next_message().await, Err(Error::Truncated)),
                "{wire:?}"
            );
        }
    }

    #[tokio::test]
    async fn control_frames_over_125_bytes_are_refused() {
        let (client, _server) = pair();
        let (_rx, tx) = client.split();
        assert!(matches!(
            tx.ping(&[0; 126]).await,
            Err(Error::Protocol(FrameError::ControlTooLong(126)))
        ));
    }

    #[tokio::test]
    async fn writers_from_many_tasks_do_not_interleave() {
        let (client, server) = pair();
        let (_client_rx, client_tx) = client.split();
        let (mut server_rx, _server_tx) = server.split();
        let mut tasks = Vec::new();
        for task in 0u8..8 {
            let tx = client_tx.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..50 {
                    tx.send_binary(vec![task; 3000]).await.expect("send");
                }
            }));
        }
        for _ in 0..400 {
            let Some(Message::Binary(data)) = server_rx.next_message().await.expect("recv") else {
                panic!("not binary");
            };
            assert_eq!(data.len(), 3000);
            assert!(data.iter().all(|b| *b == data[0]));
        }
        for task in tasks {
            task.await.expect("task");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_timeout_by_wrapping() {
        let (client, _server) = pair();
        let (mut rx, _tx) = client.split();
        let got = tokio::time::timeout(Duration::from_secs(5), rx.next_message()).await;
        assert!(got.is_err());
    }
}
