//! What the API server does between a WebSocket client and a node that
//! speaks SPDY, as upstream's `StreamTranslatorHandler` and
//! `TunnelingHandler` (`apiserver/pkg/util/proxy`):
//!
//! - [`remote_command`]: a `v5.channel.k8s.io` exec or attach. The client's
//!   channels (0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize, and v5's
//!   close signal) become the SPDY streams of the remote-command protocol
//!   the node negotiated (v4 from a CRI runtime); the node's error stream
//!   becomes the final `Status` on channel 3, then a normal close.
//! - [`tunnel`]: a `SPDY/3.1+portforward.k8s.io` port-forward: the
//!   client's binary messages are the bytes of a SPDY connection, relayed
//!   to the node's upgraded connection and back unparsed.
//!
//! Both end when either side goes, or when nothing moves for the idle
//! timeout; neither leaves a task behind.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::channel::{self, Status, StatusError};
use crate::spdy::{self, Headers};
use crate::splice::Activity;
use crate::ws::{self, Message, WebSocket};

/// The remote-command protocols a SPDY client offers, best first
/// (client-go's order; a CRI runtime picks v4).
pub const SPDY_PROTOCOLS: [&str; 5] = [
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

/// The streams an exec or attach asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Streams {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// A command that exited with `code`, as the translator rebuilds it
/// (upstream's `codeExitToStatusError` around client-go's `CodeExitError`).
pub fn exit_code(code: i32) -> Status {
    Status::exit_code(code, &format!("command terminated with exit code {code}"))
}

/// What the node's error stream said, as the status for the client
/// (client-go's error decoders, then the translator's mapping): v4 and v5
/// carry a JSON `Status`; older protocols text on failure only.
pub fn outcome(protocol: &str, error_stream: &[u8]) -> Status {
    let json_status = matches!(protocol, "v4.channel.k8s.io" | "v5.channel.k8s.io");
    if !json_status {
        if error_stream.is_empty() {
            return Status::success();
        }
        let text = String::from_utf8_lossy(error_stream);
        return Status::internal_error(&format!("error executing remote command: {text}"));
    }
    match channel::exit_code_from_status(error_stream) {
        Ok(None) => Status::success(),
        Ok(Some(code)) => exit_code(code),
        Err(StatusError::Json(e)) => Status::internal_error(&format!(
            "error stream protocol error: {e} in {:?}",
            String::from_utf8_lossy(error_stream)
        )),
        Err(StatusError::Failure { message, .. }) => Status::internal_error(&message),
        Err(other) => Status::internal_error(&other.to_string()),
    }
}

/// At most this much of the node's error stream is read.
const MAX_ERROR_STREAM: usize = 64 * 1024;
/// The size of each copy's buffer (what client-go copies with).
const CHUNK: usize = 32 * 1024;

/// Tells a WebSocket client `status` on the error channel and closes the
/// connection normally: the end of every remote command.
pub async fn finish<S>(writer: &ws::Writer<S>, status: &Status)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let mut message = vec![channel::ERROR];
    message.extend_from_slice(&status.to_json());
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        let _ = writer.send_binary(message).await;
        let _ = writer.close(ws::CLOSE_NORMAL, "").await;
    })
    .await;
}

/// The first message of a remote command: empty, on the lowest channel
/// the client reads (so it knows the stream is up).
pub fn first_message(streams: Streams) -> Bytes {
    let channel = if streams.stdout {
        channel::STDOUT
    } else if streams.stderr && !streams.tty {
        channel::STDERR
    } else {
        channel::ERROR
    };
    Bytes::from(vec![channel])
}

/// Opens the remote-command streams on `session` in client-go's order
/// (error, stdin, stdout, stderr, resize), each waiting for the node's
/// reply.
async fn open_streams(
    session: &spdy::Session,
    protocol: &str,
    streams: Streams,
) -> Result<Opened, spdy::Error> {
    let open = |kind: &'static str| session.open(Headers::new().with("streamtype", kind), false);
    let error = open("error").await?;
    let stdin = match streams.stdin {
        true => Some(open("stdin").await?),
        false => None,
    };
    let stdout = match streams.stdout {
        true => Some(open("stdout").await?),
        false => None,
    };
    let stderr = match streams.stderr && !streams.tty {
        true => Some(open("stderr").await?),
        false => None,
    };
    let resize_supported = !matches!(protocol, "channel.k8s.io" | "v2.channel.k8s.io");
    let resize = match streams.tty && resize_supported {
        true => Some(open("resize").await?),
        false => None,
    };
    Ok(Opened {
        error,
        stdin,
        stdout,
        stderr,
        resize,
    })
}

struct Opened {
    error: spdy::Stream,
    stdin: Option<spdy::Stream>,
    stdout: Option<spdy::Stream>,
    stderr: Option<spdy::Stream>,
    resize: Option<spdy::Stream>,
}

/// Runs one exec or attach between a v5 WebSocket `client` (this end the
/// server, its 101 sent) and `session`, a SPDY client session to the node
/// that negotiated `protocol`. Returns when the command has ended and the
/// client was told how, or when either side went away.
pub async fn remote_command<C>(
    client: WebSocket<C>,
    session: spdy::Session,
    protocol: &str,
    streams: Streams,
    idle: Duration,
) where
    C: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut reader, writer) = client.split();
    if writer.send_binary(first_message(streams)).await.is_err() {
        session.close().await;
        return;
    }
    let opened = match open_streams(&session, protocol, streams).await {
        Ok(opened) => opened,
        Err(error) => {
            session.close().await;
            finish(&writer, &Status::internal_error(&error.to_string())).await;
            return;
        }
    };
    let activity = Activity::new();
    let Opened {
        error,
        stdin,
        stdout,
        stderr,
        resize,
    } = opened;

    // The client's messages: stdin, resizes, v5's close signal.
    let from_client = {
        let activity = activity.clone();
        async move {
            // Kept (not dropped) after its close: a dropped stream is
            // reset, which would cut what the command still reads.
            let mut stdin = stdin;
            let mut stdin_open = stdin.is_some();
            let mut resize = resize;
            loop {
                // Text frames carry the same bytes (the Python client
                // sends strings so; upstream's server reads both alike).
                let message = match reader.next_message().await {
                    Ok(Some(Message::Binary(data))) => data,
                    Ok(Some(Message::Text(text))) => Bytes::from(text),
                    Ok(Some(Message::Close(_)) | None) | Err(_) => return,
                };
                activity.touch();
                let Some((&id, data)) = message.split_first() else {
                    continue;
                };
                match id {
                    channel::CLOSE => {
                        if data.len() != 1 {
                            return;
                        }
                        if data[0] == channel::STDIN
                            && stdin_open
                            && let Some(s) = stdin.as_mut()
                        {
                            stdin_open = false;
                            let _ = s.shutdown().await;
                        }
                    }
                    channel::STDIN => {
                        if stdin_open
                            && let Some(s) = stdin.as_mut()
                            && s.write_all(data).await.is_err()
                        {
                            stdin_open = false;
                        }
                    }
                    channel::RESIZE => {
                        if let Some(s) = resize.as_mut()
                            && s.write_all(data).await.is_err()
                        {
                            resize = None;
                        }
                    }
                    _ => {}
                }
            }
        }
    };

    // The node's output, then its verdict.
    let to_client = {
        let activity = activity.clone();
        let writer = writer.clone();
        async move {
            let out = copy_out(stdout, channel::STDOUT, &writer, &activity);
            let err = copy_out(stderr, channel::STDERR, &writer, &activity);
            tokio::join!(out, err);
            let mut status = Vec::new();
            let mut error = error;
            let _ = (&mut error)
                .take(MAX_ERROR_STREAM as u64)
                .read_to_end(&mut status)
                .await;
            outcome(protocol, &status)
        }
    };

    tokio::select! {
        status = to_client => finish(&writer, &status).await,
        _ = from_client => {}
        _ = activity.idle_for(idle) => {}
    }
    session.close().await;
    let _ = writer.shutdown().await;
}

/// Copies a node stream to the client's `channel`, one message per read.
async fn copy_out<C>(
    stream: Option<spdy::Stream>,
    channel: u8,
    writer: &ws::Writer<C>,
    activity: &Activity,
) where
    C: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let Some(mut stream) = stream else {
        return;
    };
    let mut buffer = BytesMut::zeroed(CHUNK + 1);
    loop {
        buffer[0] = channel;
        let n = match stream.read(&mut buffer[1..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        activity.touch();
        if writer.send_binary(&buffer[..=n]).await.is_err() {
            return;
        }
    }
}

/// Relays a tunnelled SPDY connection: the WebSocket `client`'s binary
/// messages to `node` (an upgraded connection to the node), and what the
/// node sends back as binary messages, until either ends or nothing
/// moves for `idle`.
pub async fn tunnel<C, N>(client: WebSocket<C>, node: N, idle: Duration)
where
    C: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    N: AsyncRead + AsyncWrite + Send + Unpin,
{
    let (mut reader, writer) = client.split();
    let (mut node_read, mut node_write) = tokio::io::split(node);
    let activity = Activity::new();
    let upstream = async {
        loop {
            let data = match reader.next_message().await {
                Ok(Some(Message::Binary(data))) => data,
                Ok(Some(Message::Text(_))) => return "the client sent text".to_string(),
                Ok(Some(Message::Close(_)) | None) => return "the client closed".to_string(),
                Err(e) => return format!("the client's WebSocket: {e}"),
            };
            activity.touch();
            if let Err(e) = node_write.write_all(&data).await {
                return format!("writing to the node: {e}");
            }
            if let Err(e) = node_write.flush().await {
                return format!("writing to the node: {e}");
            }
        }
    };
    let downstream = async {
        let mut buffer = vec![0; CHUNK];
        loop {
            let n = match node_read.read(&mut buffer).await {
                Ok(0) => return "the node closed".to_string(),
                Err(e) => return format!("reading from the node: {e}"),
                Ok(n) => n,
            };
            activity.touch();
            if let Err(e) = writer.send_binary(&buffer[..n]).await {
                return format!("the client's WebSocket: {e}");
            }
        }
    };
    let ended = tokio::select! {
        why = upstream => why,
        why = downstream => why,
        _ = activity.idle_for(idle) => "idle".to_string(),
    };
    tracing::debug!(%ended, "a tunnelled stream ended");
    let _ = tokio::time::timeout(Duration::from_secs(1), writer.close(ws::CLOSE_NORMAL, "")).await;
    let _ = writer.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_error_stream_becomes_upstreams_status() {
        let v4 = "v4.channel.k8s.io";
        let success = Status::success();
        assert_eq!(
            outcome(v4, br#"{"metadata":{},"status":"Success"}"#),
            success
        );
        assert_eq!(outcome(v4, br#"{"status":"Success"}"#), success);
        let exit = br#"{"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        let status: serde_json::Value =
            serde_json::from_slice(&outcome(v4, exit).to_json()).expect("json");
        assert_eq!(
            status,
            serde_json::json!({"metadata": {}, "status": "Failure",
                "message": "command terminated with non-zero exit code: command terminated with exit code 3",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}})
        );
        let failed = outcome(
            v4,
            br#"{"status":"Failure","message":"error executing command in container: no such file","reason":"InternalError","code":500}"#,
        );
        assert_eq!(
            failed.message,
            "Internal error occurred: error executing command in container: no such file"
        );
        assert_eq!(failed.code, 500);
        assert_eq!(outcome("v2.channel.k8s.io", b""), success);
        assert_eq!(
            outcome("channel.k8s.io", b"boom").message,
            "Internal error occurred: error executing remote command: boom"
        );
        assert!(
            outcome(v4, b"not json")
                .message
                .contains("error stream protocol error")
        );
    }

    use crate::ws::Role;

    /// A node that runs `cat` uppercased: stdin to stdout in capitals, a
    /// word on stderr, then exit code 3 — as a CRI runtime's v4 server.
    async fn node(io: tokio::io::DuplexStream) -> Vec<String> {
        let (session, mut incoming) = spdy::Session::server(io);
        let mut kinds = Vec::new();
        let mut streams = std::collections::HashMap::new();
        while streams.len() < 4 {
            let Some(stream) = incoming.accept().await else {
                return kinds;
            };
            let kind = stream.headers().get("streamtype").unwrap_or("").to_string();
            kinds.push(kind.clone());
            streams.insert(kind, stream);
        }
        let mut stdin = streams.remove("stdin").expect("stdin");
        let mut input = Vec::new();
        stdin
            .read_to_end(&mut input)
            .await
            .expect("stdin to its end");
        let mut stdout = streams.remove("stdout").expect("stdout");
        stdout
            .write_all(&input.to_ascii_uppercase())
            .await
            .expect("stdout");
        stdout.shutdown().await.expect("fin");
        let mut stderr = streams.remove("stderr").expect("stderr");
        stderr.write_all(b"warn").await.expect("stderr");
        stderr.shutdown().await.expect("fin");
        let mut error = streams.remove("error").expect("error");
        error
            .write_all(br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [cat], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#)
            .await
            .expect("status");
        // The runtime's server ends the connection once it has spoken.
        drop((stdin, stdout, stderr, error));
        session.close().await;
        kinds
    }

    #[tokio::test]
    async fn a_v5_exec_becomes_the_nodes_spdy_streams_and_its_exit_code() {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let (spdy_client, spdy_node) = tokio::io::duplex(64 * 1024);
        let node = tokio::spawn(node(spdy_node));
        let translator = tokio::spawn(async move {
            let (session, _incoming) = spdy::Session::client(spdy_client);
            let streams = Streams {
                stdin: true,
                stdout: true,
                stderr: true,
                tty: false,
            };
            remote_command(
                WebSocket::from_upgraded(server_io, Role::Server),
                session,
                "v4.channel.k8s.io",
                streams,
                Duration::from_secs(60),
            )
            .await;
        });
        let (mut reader, writer) = WebSocket::from_upgraded(client_io, Role::Client).split();
        writer.send_binary(b"\x00hello ").await.expect("stdin");
        // As the Python client sends strings: a text frame.
        writer.send_text("\u{0}world").await.expect("stdin");
        writer
            .send_binary([channel::CLOSE, channel::STDIN])
            .await
            .expect("close stdin");
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut status = None;
        let mut first = None;
        loop {
            match reader.next_message().await.expect("a message") {
                Some(Message::Binary(data)) => {
                    first.get_or_insert(data.clone());
                    match data.split_first() {
                        Some((&channel::STDOUT, rest)) => stdout.extend_from_slice(rest),
                        Some((&channel::STDERR, rest)) => stderr.extend_from_slice(rest),
                        Some((&channel::ERROR, rest)) => {
                            status = Some(serde_json::from_slice::<Status>(rest).expect("json"))
                        }
                        other => panic!("unexpected message {other:?}"),
                    }
                }
                Some(Message::Close(code)) => {
                    assert_eq!(code.map(|c| c.0), Some(ws::CLOSE_NORMAL));
                    break;
                }
                Some(Message::Text(_)) => panic!("text"),
                None => break,
            }
        }
        assert_eq!(
            first.as_deref(),
            Some(&[channel::STDOUT][..]),
            "the first message"
        );
        assert_eq!(stdout, b"HELLO WORLD");
        assert_eq!(stderr, b"warn");
        assert_eq!(status, Some(exit_code(3)));
        assert_eq!(
            node.await.expect("node"),
            ["error", "stdin", "stdout", "stderr"]
        );
        translator.await.expect("translator");
    }

    #[tokio::test]
    async fn a_client_that_vanishes_ends_the_nodes_session() {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let (spdy_client, spdy_node) = tokio::io::duplex(64 * 1024);
        let (node_session, mut incoming) = spdy::Session::server(spdy_node);
        let translator = tokio::spawn(async move {
            let (session, _incoming) = spdy::Session::client(spdy_client);
            let streams = Streams {
                stdin: true,
                stdout: true,
                stderr: false,
                tty: true,
            };
            remote_command(
                WebSocket::from_upgraded(server_io, Role::Server),
                session,
                "v4.channel.k8s.io",
                streams,
                Duration::from_secs(60),
            )
            .await;
        });
        let mut kinds = Vec::new();
        let mut held = Vec::new();
        while kinds.len() < 4 {
            let stream = incoming.accept().await.expect("a stream");
            kinds.push(stream.headers().get("streamtype").unwrap_or("").to_string());
            held.push(stream);
        }
        assert_eq!(kinds, ["error", "stdin", "stdout", "resize"]);
        drop(client_io);
        tokio::time::timeout(Duration::from_secs(10), translator)
            .await
            .expect("the translator ends")
            .expect("join");
        let ended = tokio::time::timeout(Duration::from_secs(10), node_session.closed())
            .await
            .expect("the node's session ends");
        assert!(!matches!(ended, spdy::Ended::Closed), "{ended:?}");
    }

    #[tokio::test]
    async fn a_tunnel_carries_bytes_both_ways_and_ends_with_either_side() {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let (node_near, mut node_far) = tokio::io::duplex(64 * 1024);
        let relay = tokio::spawn(tunnel(
            WebSocket::from_upgraded(server_io, Role::Server),
            node_near,
            Duration::from_secs(60),
        ));
        let (mut reader, writer) = WebSocket::from_upgraded(client_io, Role::Client).split();
        writer.send_binary(b"spdy bytes").await.expect("send");
        let mut got = [0u8; 10];
        node_far.read_exact(&mut got).await.expect("node reads");
        assert_eq!(&got, b"spdy bytes");
        node_far.write_all(b"reply").await.expect("node writes");
        match reader.next_message().await.expect("message") {
            Some(Message::Binary(data)) => assert_eq!(&data[..], b"reply"),
            other => panic!("{other:?}"),
        }
        drop(node_far);
        tokio::time::timeout(Duration::from_secs(10), relay)
            .await
            .expect("the tunnel ends")
            .expect("join");
        assert!(matches!(
            reader.next_message().await,
            Ok(Some(Message::Close(_)) | None)
        ));
    }

    #[test]
    fn the_first_message_is_on_the_lowest_channel_the_client_reads() {
        let streams = |stdout, stderr, tty| Streams {
            stdin: true,
            stdout,
            stderr,
            tty,
        };
        assert_eq!(first_message(streams(true, true, false))[..], [1]);
        assert_eq!(first_message(streams(false, true, false))[..], [2]);
        assert_eq!(first_message(streams(false, true, true))[..], [3]);
        assert_eq!(first_message(streams(false, false, false))[..], [3]);
    }
}

#[cfg(test)]
mod bulk_tests {
    use super::*;
    use crate::ws::Role;
    use rand::{Rng, SeedableRng};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tunnel_carries_many_megabytes_intact() {
        let (client_io, server_io) = tokio::io::duplex(16 * 1024);
        let (node_near, node_far) = tokio::io::duplex(16 * 1024);
        let relay = tokio::spawn(tunnel(
            WebSocket::from_upgraded(server_io, Role::Server),
            node_near,
            Duration::from_secs(60),
        ));
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut data = vec![0u8; 24 << 20];
        rng.fill(&mut data[..]);
        let (_reader, writer) = WebSocket::from_upgraded(client_io, Role::Client).split();
        let sent = data.clone();
        let sender = tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(8);
            let mut at = 0;
            while at < sent.len() {
                let n = rng.random_range(1..70_000).min(sent.len() - at);
                writer.send_binary(&sent[at..at + n]).await.expect("send");
                at += n;
            }
            writer
        });
        let (mut far_read, _far_write) = tokio::io::split(node_far);
        let mut got = vec![0u8; data.len()];
        far_read.read_exact(&mut got).await.expect("read");
        let _writer = sender.await.expect("sender");
        assert!(got == data, "the bytes arrived changed");
        relay.abort();
    }
}
