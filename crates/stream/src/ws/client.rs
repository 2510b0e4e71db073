//! The client side of the opening handshake, over a raw connection — for
//! tests, benchmarks and the project's own clients. A server that does
//! not switch protocols is reported with its status code and as much of
//! its body (upstream's `Status` JSON) as arrives promptly.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use ring::rand::{SecureRandom, SystemRandom};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::handshake::{SEC_ACCEPT, SEC_PROTOCOL, VERSION, accept_key, has_token};
use super::{Role, WebSocket};

/// The largest response head the client reads.
const MAX_HEAD: usize = 64 * 1024;

/// The most of a refusal's body the client keeps.
const MAX_REFUSAL_BODY: usize = 64 * 1024;

/// How long the client waits for a refusal's body.
const REFUSAL_BODY_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a client handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("websocket handshake I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("invalid handshake request: {0}")]
    InvalidRequest(String),
    /// The server answered without switching protocols; `body` is what of
    /// its body arrived (up to its length or 64 KiB, within 2 seconds).
    #[error(
        "the server answered {status} instead of switching protocols: {}",
        String::from_utf8_lossy(body)
    )]
    Status {
        status: u16,
        headers: Box<HeaderMap>,
        body: Bytes,
    },
    #[error("the connection closed before the response head")]
    Closed,
    #[error("the response head exceeds {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("malformed response head: {0}")]
    Malformed(&'static str),
    #[error("the 101 response lacks Upgrade: websocket and Connection: upgrade")]
    NotUpgraded,
    #[error("Sec-WebSocket-Accept does not match the key sent")]
    BadAccept,
    #[error("the server chose subprotocol {0:?}, which was not offered")]
    UnofferedProtocol(String),
}

/// Whether `s` can go into a request line or header value as is.
fn clean(s: &str) -> bool {
    !s.is_empty() && !s.bytes().any(|b| b < b' ' || b == 0x7f)
}

/// Dials a WebSocket over `io`: writes an HTTP/1.1 `GET` upgrade request
/// for `path_and_query` on `host` offering `protocols` (in order of
/// preference) with `extra_headers`, and reads the answer. Returns the
/// connection, in the client role, and the subprotocol the server chose
/// (empty for none).
pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
    mut io: S,
    host: &str,
    path_and_query: &str,
    protocols: &[&str],
    extra_headers: &[(&str, &str)],
) -> Result<(WebSocket<S>, String), ConnectError> {
    if !clean(host) || host.contains(' ') {
        return Err(ConnectError::InvalidRequest(format!("host {host:?}")));
    }
    if !clean(path_and_query) || path_and_query.contains(' ') {
        return Err(ConnectError::InvalidRequest(format!(
            "path {path_and_query:?}"
        )));
    }
    if let Some(p) = protocols
        .iter()
        .find(|p| !clean(p) || p.contains([',', ' ']))
    {
        return Err(ConnectError::InvalidRequest(format!("subprotocol {p:?}")));
    }
    let mut nonce = [0u8; 16];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| std::io::Error::other("no randomness for Sec-WebSocket-Key"))?;
    let key = BASE64.encode(nonce);

    let mut request = format!(
        "GET {path_and_query} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: {VERSION}\r\n"
    );
    if !protocols.is_empty() {
        request.push_str(&format!(
            "Sec-WebSocket-Protocol: {}\r\n",
            protocols.join(", ")
        ));
    }
    for (name, value) in extra_headers {
        if HeaderName::from_bytes(name.as_bytes()).is_err()
            || value.bytes().any(|b| b < b' ' && b != b'\t')
        {
            return Err(ConnectError::InvalidRequest(format!("header {name:?}")));
        }
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    io.write_all(request.as_bytes()).await?;
    io.flush().await?;

    let mut buf = BytesMut::with_capacity(4096);
    let head_len = read_head(&mut io, &mut buf).await?;
    let head = buf.split_to(head_len);
    let (status, headers) = parse_response_head(&head)?;
    if status != 101 {
        let body = read_refusal_body(&mut io, buf, &headers).await;
        return Err(ConnectError::Status {
            status,
            headers: Box::new(headers),
            body,
        });
    }
    if !(headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
        && has_token(&headers, header::CONNECTION, "upgrade"))
    {
        return Err(ConnectError::NotUpgraded);
    }
    let accept = headers.get(SEC_ACCEPT).and_then(|v| v.to_str().ok());
    if accept.map(str::trim) != Some(accept_key(&key).as_str()) {
        return Err(ConnectError::BadAccept);
    }
    let chosen = headers
        .get(SEC_PROTOCOL)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned())
        .unwrap_or_default();
    if !chosen.is_empty() && !protocols.contains(&chosen.as_str()) {
        return Err(ConnectError::UnofferedProtocol(chosen));
    }
    Ok((WebSocket::with_buffered(io, Role::Client, buf), chosen))
}

/// Reads until `buf` holds a whole head (ending in an empty line) and
/// returns its length, the empty line included.
pub(crate) async fn read_head<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
) -> Result<usize, ConnectError> {
    let mut searched = 0;
    loop {
        if let Some(at) = buf[searched..].windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(searched + at + 4);
        }
        searched = buf.len().saturating_sub(3);
        if buf.len() >= MAX_HEAD {
            return Err(ConnectError::HeadTooLarge);
        }
        buf.reserve(4096);
        if io.read_buf(buf).await? == 0 {
            return Err(ConnectError::Closed);
        }
    }
}

/// The status code and headers of a response head.
pub(crate) fn parse_response_head(head: &[u8]) -> Result<(u16, HeaderMap), ConnectError> {
    let head = std::str::from_utf8(head).map_err(|_| ConnectError::Malformed("not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(ConnectError::Malformed("not an HTTP/1.x status line"));
    }
    let code = parts.next().unwrap_or_default();
    let status = match code.parse::<u16>() {
        Ok(status) if code.len() == 3 && (100..=999).contains(&status) => status,
        _ => return Err(ConnectError::Malformed("bad status code")),
    };
    let headers = parse_header_lines(lines)?;
    Ok((status, headers))
}

/// Header lines up to the empty one, into a map.
pub(crate) fn parse_header_lines<'a>(
    lines: impl Iterator<Item = &'a str>,
) -> Result<HeaderMap, ConnectError> {
    let mut headers = HeaderMap::new();
    for line in lines {
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or(ConnectError::Malformed("header line without a colon"))?;
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| ConnectError::Malformed("bad header name"))?;
        let value = HeaderValue::from_str(value.trim())
            .map_err(|_| ConnectError::Malformed("bad header value"))?;
        headers.append(name, value);
    }
    Ok(headers)
}

/// As much of a refusal's body as arrives in time: up to its
/// `Content-Length` (or the end of its chunks, or of the connection) and
/// at most 64 KiB. `buf` holds what was read past the head.
async fn read_refusal_body<S: AsyncRead + Unpin>(
    io: &mut S,
    mut buf: BytesMut,
    headers: &HeaderMap,
) -> Bytes {
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    let chunked = has_token(headers, header::TRANSFER_ENCODING, "chunked");
    let want = length.unwrap_or(MAX_REFUSAL_BODY).min(MAX_REFUSAL_BODY);
    let complete = |buf: &BytesMut| {
        if chunked {
            buf.starts_with(b"0\r\n") || buf.windows(5).any(|w| w == b"\n0\r\n")
        } else {
            buf.len() >= want
        }
    };
    let read = async {
        while !complete(&buf) && buf.len() < MAX_REFUSAL_BODY {
            buf.reserve(4096);
            match io.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    };
    // A body that does not arrive in time is kept as far as it came.
    let _ = tokio::time::timeout(REFUSAL_BODY_TIMEOUT, read).await;
    if chunked {
        return dechunk(&buf);
    }
    buf.truncate(want);
    buf.freeze()
}

/// The data of a chunked body, as far as it is well formed.
fn dechunk(mut input: &[u8]) -> Bytes {
    let mut out = Vec::new();
    while let Some(eol) = input.windows(2).position(|w| w == b"\r\n") {
        let size_field = String::from_utf8_lossy(&input[..eol]);
        let size_hex = size_field.split(';').next().unwrap_or_default().trim();
        let Ok(size) = usize::from_str_radix(size_hex, 16) else {
            break;
        };
        input = &input[eol + 2..];
        if size == 0 {
            break;
        }
        let take = size.min(input.len());
        out.extend_from_slice(&input[..take]);
        if take < size {
            break;
        }
        input = input.get(size + 2..).unwrap_or_default();
    }
    out.truncate(MAX_REFUSAL_BODY);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use tokio::io::{DuplexStream, duplex};

    use super::super::Message;
    use super::super::handshake::{handshake_headers, requested_protocols};
    use super::*;

    /// A minimal server: reads the request head, answers with `answer`
    /// (given the request's headers), then hands back the stream.
    async fn serve(
        mut io: DuplexStream,
        answer: impl FnOnce(&HeaderMap) -> Vec<u8>,
    ) -> (DuplexStream, String, HeaderMap, BytesMut) {
        let mut buf = BytesMut::new();
        let len = read_head(&mut io, &mut buf).await.expect("head");
        let head = buf.split_to(len);
        let head = std::str::from_utf8(&head).expect("utf-8").to_owned();
        let mut lines = head.split("\r\n");
        let request_line = lines.next().expect("request line").to_owned();
        let headers = parse_header_lines(lines).expect("headers");
        let reply = answer(&headers);
        io.write_all(&reply).await.expect("write");
        (io, request_line, headers, buf)
    }

    fn switching(headers: &HeaderMap, protocol: Option<&str>) -> String {
        let out = handshake_headers(headers, protocol).expect("handshake");
        let mut reply = "HTTP/1.1 101 Switching Protocols\r\n".to_owned();
        for (name, value) in &out {
            reply.push_str(&format!("{name}: {}\r\n", value.to_str().expect("ascii")));
        }
        reply + "\r\n"
    }

    #[tokio::test]
    async fn client_and_server_round_trip() {
        let (client_io, server_io) = duplex(64 * 1024);
        let server = tokio::spawn(async move {
            let (io, line, headers, rest) = serve(server_io, |h| {
                let offered = requested_protocols(h);
                assert_eq!(offered, ["v5.channel.k8s.io", "v4.channel.k8s.io"]);
                let mut reply = switching(h, Some("v4.channel.k8s.io")).into_bytes();
                // A frame right behind the head reaches the client too.
                super::super::frame::encode_frame(
                    &mut reply,
                    true,
                    super::super::Opcode::Text,
                    b"early",
                    None,
                );
                reply
            })
            .await;
            assert_eq!(line, "GET /api/v1/x?command=ls HTTP/1.1");
            assert_eq!(headers["host"], "example:6443");
            assert_eq!(headers["authorization"], "Bearer t");
            assert!(rest.is_empty());
            let (mut rx, tx) = WebSocket::from_upgraded(io, Role::Server).split();
            let got = rx.next_message().await.expect("recv");
            assert_eq!(got, Some(Message::Binary(Bytes::from_static(b"\x00hi"))));
            tx.close(1000, "").await.expect("close");
            assert!(matches!(
                rx.next_message().await.expect("recv"),
                Some(Message::Close(_))
            ));
        });
        let (ws, protocol) = connect(
            client_io,
            "example:6443",
            "/api/v1/x?command=ls",
            &["v5.channel.k8s.io", "v4.channel.k8s.io"],
            &[("Authorization", "Bearer t")],
        )
        .await
        .expect("connect");
        assert_eq!(protocol, "v4.channel.k8s.io");
        let (mut rx, tx) = ws.split();
        assert_eq!(
            rx.next_message().await.expect("recv"),
            Some(Message::Text("early".into()))
        );
        tx.send_binary(b"\x00hi").await.expect("send");
        assert_eq!(
            rx.next_message().await.expect("recv"),
            Some(Message::Close(Some((1000, String::new()))))
        );
        server.await.expect("server");
    }

    #[tokio::test]
    async fn refusal_carries_status_and_body() {
        let status_json = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" is forbidden","reason":"Forbidden","code":403}"#;
        let cases = [
            format!(
                "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{status_json}",
                status_json.len()
            ),
            format!(
                "HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n",
                &status_json[..16],
                status_json.len() - 16,
                &status_json[16..]
            ),
            format!("HTTP/1.0 403 Forbidden\r\n\r\n{status_json}"),
        ];
        for reply in cases {
            let (client_io, server_io) = duplex(64 * 1024);
            let server = tokio::spawn(async move {
                let (io, ..) = serve(server_io, |_| reply.into_bytes()).await;
                drop(io);
            });
            let err = connect(client_io, "h", "/", &[], &[])
                .await
                .expect_err("refused");
            let ConnectError::Status { status, body, .. } = err else {
                panic!("{err}");
            };
            assert_eq!(status, 403);
            assert_eq!(body, status_json.as_bytes());
            server.await.expect("server");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn refusal_body_that_never_comes_times_out() {
        let (client_io, server_io) = duplex(64 * 1024);
        let server = tokio::spawn(async move {
            let (io, ..) = serve(server_io, |_| {
                b"HTTP/1.1 500 Oops\r\nContent-Length: 100\r\n\r\npartial".to_vec()
            })
            .await;
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(io);
        });
        let err = connect(client_io, "h", "/", &[], &[])
            .await
            .expect_err("refused");
        let ConnectError::Status { status, body, .. } = err else {
            panic!("{err}");
        };
        assert_eq!((status, &body[..]), (500, &b"partial"[..]));
        server.abort();
    }

    #[tokio::test]
    async fn client_rejects_bad_answers() {
        type Answer = Box<dyn FnOnce(&HeaderMap) -> String + Send>;
        type Check = fn(&ConnectError) -> bool;
        let cases: Vec<(Answer, Check)> = vec![
            (
                Box::new(|_| {
                    "HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: nope\r\n\r\n".to_owned()
                }),
                |e| matches!(e, ConnectError::BadAccept),
            ),
            (Box::new(|_| "HTTP/1.1 101 OK\r\n\r\n".to_owned()), |e| {
                matches!(e, ConnectError::NotUpgraded)
            }),
            (
                Box::new(|h| switching(h, Some("other"))),
                |e| matches!(e, ConnectError::UnofferedProtocol(p) if p == "other"),
            ),
            (Box::new(|_| "SSH-2.0-OpenSSH\r\n\r\n".to_owned()), |e| {
                matches!(e, ConnectError::Malformed(_))
            }),
            (
                Box::new(|_| "HTTP/1.1 101 OK\r\nno colon\r\n\r\n".to_owned()),
                |e| matches!(e, ConnectError::Malformed(_)),
            ),
            (Box::new(|_| "HTTP/1.1 101".to_owned()), |e| {
                matches!(e, ConnectError::Closed)
            }),
        ];
        for (answer, check) in cases {
            let (client_io, server_io) = duplex(64 * 1024);
            let server = tokio::spawn(async move {
                let (io, ..) = serve(server_io, |h| answer(h).into_bytes()).await;
                drop(io);
            });
            let err = connect(client_io, "h", "/", &["a"], &[])
                .await
                .expect_err("bad answer");
            assert!(check(&err), "{err}");
            server.await.expect("server");
        }
    }

    #[tokio::test]
    async fn client_refuses_to_write_bad_requests() {
        for (host, path, protocols, extra) in [
            ("h\r\nX: y", "/", &[][..], &[][..]),
            ("h", "/ HTTP/1.1", &[][..], &[][..]),
            ("h", "/", &["a,b"][..], &[][..]),
            ("h", "/", &[][..], &[("Bad Name", "v")][..]),
            ("h", "/", &[][..], &[("X", "v\r\nY: z")][..]),
        ] {
            let (client_io, _server_io) = duplex(1024);
            let err = connect(client_io, host, path, protocols, extra)
                .await
                .expect_err("refused");
            assert!(matches!(err, ConnectError::InvalidRequest(_)), "{err}");
        }
    }

    #[tokio::test]
    async fn oversized_head_is_refused() {
        let (client_io, server_io) = duplex(256 * 1024);
        let server = tokio::spawn(async move {
            let (io, ..) = serve(server_io, |_| {
                format!("HTTP/1.1 101 OK\r\nX: {}\r\n\r\n", "a".repeat(70_000)).into_bytes()
            })
            .await;
            io
        });
        let err = connect(client_io, "h", "/", &[], &[])
            .await
            .expect_err("too large");
        assert!(matches!(err, ConnectError::HeadTooLarge), "{err}");
        drop(server.await);
    }

    #[test]
    fn dechunks_what_it_can() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n"),
            &b"abcde"[..]
        );
        assert_eq!(dechunk(b"3\r\nab"), &b"ab"[..]);
        assert_eq!(dechunk(b"zz\r\nab"), &b""[..]);
    }
}
