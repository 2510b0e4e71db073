//! Sessions end to end over `tokio::io::duplex`: client and server
//! together, and each against a raw peer writing bytes by hand.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::time::timeout;

use super::frame::{Frame, goaway, rst};
use super::headers::{Compressor, Decompressor};
use super::{Ended, Error, Headers, Incoming, Session, Stream};

const T: Duration = Duration::from_secs(20);

async fn within<F: Future>(f: F) -> F::Output {
    timeout(T, f).await.expect("timed out")
}

fn pair() -> (Session, Incoming, Session, Incoming) {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (client, client_in) = Session::client(a);
    let (server, server_in) = Session::server(b);
    (client, client_in, server, server_in)
}

fn typed(t: &str) -> Headers {
    Headers::new().with("streamType", t)
}

/// Accepts streams and echoes each back, half-closing after the peer did.
fn echo_server(mut incoming: Incoming) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tasks = tokio::task::JoinSet::new();
        while let Some(stream) = incoming.accept().await {
            tasks.spawn(async move {
                let (mut r, mut w) = stream.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
        while tasks.join_next().await.is_some() {}
    })
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

async fn round_trip(stream: Stream, data: Vec<u8>) -> Vec<u8> {
    let (mut r, mut w) = stream.into_split();
    let writer = tokio::spawn(async move {
        w.write_all(&data).await.expect("write");
        w.shutdown().await.expect("shutdown");
        w
    });
    let mut back = Vec::new();
    r.read_to_end(&mut back).await.expect("read");
    let _w = writer.await.expect("writer");
    back
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_streams_and_8_mib_checksummed() {
    let (client, _client_in, server, server_in) = pair();
    let echo = echo_server(server_in);
    let mut opens = Vec::new();
    for i in 0..6u64 {
        let client = client.clone();
        opens.push(tokio::spawn(async move {
            let len = if i == 0 {
                8 << 20
            } else {
                100_000 + i as usize
            };
            let data = pattern(i + 1, len);
            let sum = fnv(&data);
            let stream = client
                .open(typed(&format!("s{i}")), false)
                .await
                .expect("open");
            assert_eq!(stream.id() % 2, 1, "client ids are odd");
            let back = round_trip(stream, data).await;
            assert_eq!(back.len(), len);
            assert_eq!(fnv(&back), sum, "stream {i}");
        }));
    }
    for o in opens {
        within(o).await.expect("stream task");
    }
    within(client.close()).await;
    assert_eq!(
        within(server.closed()).await,
        Ended::GoneAway { status: goaway::OK }
    );
    within(echo).await.expect("echo");
}

#[tokio::test]
async fn server_opens_streams_with_even_ids_and_headers_arrive() {
    let (client, mut client_in, server, mut server_in) = pair();
    let opened = tokio::spawn(async move {
        let s1 = server
            .open(typed("data").with("port", "8080"), false)
            .await
            .expect("open");
        let s2 = server.open(typed("error"), true).await.expect("open");
        (server, s1, s2)
    });
    let a = within(client_in.accept()).await.expect("first");
    let b = within(client_in.accept()).await.expect("second");
    let (server, s1, s2) = within(opened).await.expect("opened");
    assert_eq!((s1.id(), s2.id()), (2, 4));
    assert_eq!((a.id(), b.id()), (2, 4));
    assert_eq!(a.headers().get("streamtype"), Some("data"));
    assert_eq!(a.headers().get("Port"), Some("8080"));
    // Opened with FIN: the accepting side reads the end at once.
    let mut b = b;
    let mut buf = Vec::new();
    within(b.read_to_end(&mut buf)).await.expect("read");
    assert!(buf.is_empty());
    assert!(futures::FutureExt::now_or_never(server_in.accept()).is_none());
    drop((a, b, s1, s2));
    within(client.close()).await;
    within(server.closed()).await;
}

#[tokio::test]
async fn half_close_keeps_the_other_direction_flowing() {
    let (client, _ci, _server, mut server_in) = pair();
    let opened = tokio::spawn(async move {
        client
            .open(typed("stdin"), false)
            .await
            .map(|s| (client, s))
    });
    let mut srv = within(server_in.accept()).await.expect("accept");
    let (_client, mut cli) = within(opened).await.expect("join").expect("open");

    cli.write_all(b"input").await.expect("write");
    cli.shutdown().await.expect("FIN");
    assert!(cli.write_all(b"more").await.is_err(), "no writes after FIN");
    let mut got = Vec::new();
    within(srv.read_to_end(&mut got)).await.expect("read");
    assert_eq!(got, b"input");
    // The server still writes after the client's FIN.
    for i in 0..100 {
        srv.write_all(format!("line {i}\n").as_bytes())
            .await
            .expect("write");
    }
    srv.shutdown().await.expect("FIN");
    let mut back = String::new();
    within(cli.read_to_string(&mut back)).await.expect("read");
    assert_eq!(back.lines().count(), 100);
    assert!(!cli.is_reset() && !srv.is_reset());
}

#[tokio::test]
async fn reset_ends_both_directions() {
    let (client, _ci, _server, mut server_in) = pair();
    let c2 = client.clone();
    let opened = tokio::spawn(async move { c2.open(typed("stdout"), false).await });
    let mut srv = within(server_in.accept()).await.expect("accept");
    let mut cli = within(opened).await.expect("join").expect("open");

    cli.write_all(b"before").await.expect("write");
    cli.reset();
    assert!(cli.is_reset());
    assert!(cli.write_all(b"x").await.is_err());
    let mut got = Vec::new();
    within(srv.read_to_end(&mut got))
        .await
        .expect("reads end, as in spdystream");
    assert_eq!(got, b"before");
    assert!(srv.is_reset());
    let err = srv.write_all(b"late").await.expect_err("write after reset");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);

    // The server resets one; the client's read ends.
    let c2 = client.clone();
    let opened = tokio::spawn(async move { c2.open(typed("stderr"), false).await });
    let srv = within(server_in.accept()).await.expect("accept");
    let mut cli = within(opened).await.expect("join").expect("open");
    srv.reset();
    let mut got = Vec::new();
    within(cli.read_to_end(&mut got)).await.expect("read");
    assert!(cli.is_reset());
}

#[tokio::test]
async fn refused_and_dropped_streams() {
    let (client, _ci, server, server_in) = pair();
    // Nobody accepts: the stream is reset, the opener learns it.
    drop(server_in);
    let err = within(client.open(typed("data"), false))
        .await
        .expect_err("refused");
    assert_eq!(err, Error::Refused(rst::REFUSED_STREAM));
    drop(server);
    assert!(matches!(
        within(client.closed()).await,
        Ended::GoneAway { .. }
    ));
    assert_eq!(
        within(client.open(typed("x"), false))
            .await
            .expect_err("closed"),
        Error::GoingAway
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_does_not_read_holds_the_writer_back_until_it_does() {
    let (client, _ci, _server, mut server_in) = pair();
    let c2 = client.clone();
    let opened = tokio::spawn(async move { c2.open(typed("stdout"), false).await });
    let mut srv = within(server_in.accept()).await.expect("accept");
    let cli = within(opened).await.expect("join").expect("open");
    let data = pattern(9, 8 << 20);
    let sum = fnv(&data);
    let writer = tokio::spawn(async move {
        srv.write_all(&data).await.expect("write");
        srv.shutdown().await.expect("FIN");
        srv
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished(), "8 MiB cannot all be buffered");
    // Like spdystream, a full stream stalls the connection's reader (so
    // nothing else moves either); reading resumes everything.
    let (mut r, _w) = cli.into_split();
    let mut got = Vec::new();
    within(r.read_to_end(&mut got)).await.expect("read");
    assert_eq!(fnv(&got), sum);
    within(writer).await.expect("writer");
    assert!(within(client.ping()).await.is_ok());
}

#[tokio::test]
async fn a_dropped_read_half_discards() {
    let (client, _ci, _server, mut server_in) = pair();
    let c2 = client.clone();
    let opened = tokio::spawn(async move { c2.open(typed("stdout"), false).await });
    let mut srv = within(server_in.accept()).await.expect("accept");
    let cli = within(opened).await.expect("join").expect("open");
    let (r, _w) = cli.into_split();
    drop(r);
    within(srv.write_all(&vec![7; 8 << 20]))
        .await
        .expect("discarded, not stalled");
    within(srv.shutdown()).await.expect("FIN");
    assert!(within(client.ping()).await.is_ok());
}

#[tokio::test]
async fn close_ends_everything_and_no_task_is_left() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let (client, client_in, server, mut server_in) = pair();
    let c2 = client.clone();
    let opened = tokio::spawn(async move { c2.open(typed("stdout"), false).await });
    let mut srv = within(server_in.accept()).await.expect("accept");
    let mut cli = within(opened).await.expect("join").expect("open");
    assert!(within(server.ping()).await.is_ok());

    within(client.close()).await;
    assert_eq!(client.ended(), Some(Ended::Closed));
    assert_eq!(
        within(server.closed()).await,
        Ended::GoneAway { status: goaway::OK }
    );
    let mut buf = Vec::new();
    within(srv.read_to_end(&mut buf)).await.expect("ends");
    within(cli.read_to_end(&mut buf)).await.expect("ends");
    assert!(srv.write_all(b"x").await.is_err());
    assert!(within(server_in.accept()).await.is_none());
    assert_eq!(
        within(client.open(typed("x"), false)).await.err(),
        Some(Error::GoingAway)
    );
    drop((client, client_in, server, server_in, srv, cli));
    within(async {
        while metrics.num_alive_tasks() > before {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn dropping_every_handle_closes_the_session() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let (client, client_in, server, server_in) = pair();
    let client_closed = client.closed();
    let s = {
        let c2 = client.clone();
        let opened = tokio::spawn(async move { c2.open(typed("x"), false).await });
        let mut server_in = server_in;
        let srv = within(server_in.accept()).await.expect("accept");
        let cli = within(opened).await.expect("join").expect("open");
        drop(srv);
        (cli, server_in)
    };
    drop((client, client_in));
    // A stream still holds the session.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(server.ended().is_none());
    drop(s);
    assert_eq!(within(client_closed).await, Ended::Closed);
    assert!(matches!(
        within(server.closed()).await,
        Ended::GoneAway { .. }
    ));
    drop(server);
    within(async {
        while metrics.num_alive_tasks() > before {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

// ---- against a raw peer ----

async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Option<Frame> {
    let mut head = [0u8; 8];
    r.read_exact(&mut head).await.ok()?;
    let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
    let mut buf = head.to_vec();
    buf.resize(8 + len, 0);
    r.read_exact(&mut buf[8..]).await.ok()?;
    let (f, _) = Frame::decode(&buf)
        .expect("our frames decode")
        .expect("whole");
    Some(f)
}

async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, f: Frame) {
    let mut buf = Vec::new();
    f.encode(&mut buf).expect("encode");
    w.write_all(&buf).await.expect("write");
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn raw_server() -> (Session, Incoming, DuplexStream) {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (s, i) = Session::server(b);
    (s, i, a)
}

#[tokio::test]
async fn serves_a_peer_compressing_with_c_zlib() {
    let (server, mut incoming, mut peer) = raw_server();
    // SYN_STREAM 1 and 3 with blocks from C zlib (one context).
    let blocks = [
        hex("78f9e3c6a7c202a62346703a2b294a4dcc851625aca9a08006000000ffff"),
        hex("c22e555c02cc2e00000000ffff"),
    ];
    let mut inflate = Decompressor::new();
    for (i, block) in blocks.into_iter().enumerate() {
        let id = 1 + 2 * i as u32;
        let syn = Frame::SynStream {
            stream_id: id,
            associated_to: 0,
            priority: 0,
            slot: 0,
            fin: false,
            unidirectional: false,
            block: Bytes::from(block),
        };
        write_frame(&mut peer, syn).await;
        let Some(Frame::SynReply {
            stream_id,
            fin,
            block,
        }) = within(read_frame(&mut peer)).await
        else {
            panic!("expected SYN_REPLY");
        };
        assert_eq!((stream_id, fin), (id, false));
        assert!(
            inflate
                .decompress(&block)
                .expect("reply headers")
                .is_empty()
        );
        let mut s = within(incoming.accept()).await.expect("accept");
        assert_eq!(s.headers().get("streamtype"), Some(["error", "stdin"][i]));
        let data = Frame::Data {
            stream_id: id,
            fin: true,
            data: Bytes::from_static(b"hello"),
        };
        write_frame(&mut peer, data).await;
        let mut got = Vec::new();
        within(s.read_to_end(&mut got)).await.expect("read");
        assert_eq!(got, b"hello");
        s.write_all(b"back").await.expect("write");
        s.shutdown().await.expect("FIN");
        assert_eq!(
            within(read_frame(&mut peer)).await,
            Some(Frame::Data {
                stream_id: id,
                fin: false,
                data: Bytes::from_static(b"back")
            })
        );
        assert_eq!(
            within(read_frame(&mut peer)).await,
            Some(Frame::Data {
                stream_id: id,
                fin: true,
                data: Bytes::new()
            })
        );
    }
    // Ignored: SETTINGS, WINDOW_UPDATE, unknown types, data for no stream.
    write_frame(
        &mut peer,
        Frame::Settings {
            clear: false,
            entries: vec![],
        },
    )
    .await;
    write_frame(
        &mut peer,
        Frame::WindowUpdate {
            stream_id: 1,
            delta: 5,
        },
    )
    .await;
    write_frame(
        &mut peer,
        Frame::Unknown {
            kind: 10,
            flags: 0,
            payload: Bytes::from_static(b"cred"),
        },
    )
    .await;
    write_frame(
        &mut peer,
        Frame::Data {
            stream_id: 99,
            fin: false,
            data: Bytes::from_static(b"x"),
        },
    )
    .await;
    // The peer's (odd) ping is echoed.
    write_frame(&mut peer, Frame::Ping { id: 7 }).await;
    assert_eq!(
        within(read_frame(&mut peer)).await,
        Some(Frame::Ping { id: 7 })
    );
    // GOAWAY from the peer ends the session, without a GOAWAY back.
    write_frame(
        &mut peer,
        Frame::GoAway {
            last_good_stream_id: 0,
            status: goaway::OK,
        },
    )
    .await;
    assert_eq!(within(read_frame(&mut peer)).await, None, "EOF");
    assert_eq!(within(server.closed()).await, Ended::GoneAway { status: 0 });
}

#[tokio::test]
async fn client_frames_on_the_wire() {
    let (a, mut peer) = tokio::io::duplex(64 * 1024);
    let (client, _incoming) = Session::client(a);
    let c2 = client.clone();
    let opened = tokio::spawn(async move { c2.open(typed("error"), false).await });
    let Some(Frame::SynStream {
        stream_id,
        associated_to,
        priority,
        fin,
        unidirectional,
        block,
        ..
    }) = within(read_frame(&mut peer)).await
    else {
        panic!("expected SYN_STREAM");
    };
    assert_eq!(
        (stream_id, associated_to, priority, fin, unidirectional),
        (1, 0, 0, false, false)
    );
    let mut inflate = Decompressor::new();
    let h = inflate.decompress(&block).expect("headers");
    assert_eq!(h.iter().collect::<Vec<_>>(), [("streamtype", "error")]);
    // Not yet replied: open() waits.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!opened.is_finished());
    let mut deflate = Compressor::new().expect("compressor");
    let reply = Frame::SynReply {
        stream_id: 1,
        fin: false,
        block: Bytes::from(deflate.compress(&Headers::new()).expect("z")),
    };
    write_frame(&mut peer, reply).await;
    let mut s = within(opened).await.expect("join").expect("open");
    s.write_all(&vec![1; 100_000]).await.expect("write");
    // One frame per write, at most 64 KiB each.
    let mut total = 0;
    while total < 100_000 {
        let Some(Frame::Data {
            stream_id: 1,
            fin: false,
            data,
        }) = within(read_frame(&mut peer)).await
        else {
            panic!("expected DATA");
        };
        assert!(data.len() <= super::stream::MAX_DATA_FRAME);
        total += data.len();
    }
    // Our ping has our (odd) parity; the echo completes it.
    let c2 = client.clone();
    let ping = tokio::spawn(async move { c2.ping().await });
    let Some(Frame::Ping { id }) = within(read_frame(&mut peer)).await else {
        panic!("expected PING");
    };
    assert_eq!(id % 2, 1);
    write_frame(&mut peer, Frame::Ping { id }).await;
    within(ping).await.expect("join").expect("pong");
    // close(): GOAWAY naming the last stream the peer opened (none), EOF.
    let c2 = client.clone();
    let closing = tokio::spawn(async move { c2.close().await });
    assert_eq!(
        within(read_frame(&mut peer)).await,
        Some(Frame::GoAway {
            last_good_stream_id: 0,
            status: goaway::OK
        })
    );
    assert_eq!(within(read_frame(&mut peer)).await, None);
    within(closing).await.expect("closed");
}

#[tokio::test]
async fn stream_ids_are_validated_as_spdystream_does() {
    let (_server, mut incoming, mut peer) = raw_server();
    let mut deflate = Compressor::new().expect("compressor");
    let mut inflate = Decompressor::new();
    let mut kept = Vec::new();
    // (id, accepted): 1 fine; 1 again and 6 (server parity) refused with
    // PROTOCOL_ERROR; 3 fine — the refused blocks still went through the
    // decompression context, which stays in step.
    for (id, accepted) in [(1, true), (1, false), (6, false), (3, true)] {
        let syn = Frame::SynStream {
            stream_id: id,
            associated_to: 0,
            priority: 0,
            slot: 0,
            fin: false,
            unidirectional: false,
            block: Bytes::from(deflate.compress(&typed("x")).expect("z")),
        };
        write_frame(&mut peer, syn).await;
        match within(read_frame(&mut peer)).await {
            Some(Frame::SynReply {
                stream_id, block, ..
            }) if accepted => {
                assert_eq!(stream_id, id);
                inflate.decompress(&block).expect("reply block");
                let s = within(incoming.accept()).await.expect("accept");
                assert_eq!(s.id(), id);
                kept.push(s); // dropping it would send RST_STREAM
            }
            Some(Frame::RstStream { stream_id, status }) if !accepted => {
                assert_eq!((stream_id, status), (id, rst::PROTOCOL_ERROR));
            }
            other => panic!("stream {id}: {other:?}"),
        }
    }
}

async fn expect_protocol_error(input: Vec<u8>) {
    let (server, _incoming, mut peer) = raw_server();
    peer.write_all(&input).await.expect("write");
    let ended = within(server.closed()).await;
    assert!(matches!(ended, Ended::Protocol(_)), "{ended:?}");
    assert_eq!(
        within(read_frame(&mut peer)).await,
        Some(Frame::GoAway {
            last_good_stream_id: 0,
            status: goaway::PROTOCOL_ERROR
        })
    );
    assert_eq!(within(read_frame(&mut peer)).await, None);
}

#[tokio::test]
async fn malformed_input_ends_the_session_with_goaway() {
    // Bad version.
    expect_protocol_error(hex("80020006 00000004 00000001")).await;
    // Bad PING length.
    expect_protocol_error(hex("80030006 00000008 00000001 00000001")).await;
    // A SYN_STREAM whose block is not zlib.
    expect_protocol_error(hex("80030001 0000000e 00000001 00000000 0000 01020304")).await;
    // A SYN_STREAM whose block is not even there.
    expect_protocol_error(hex("80030001 0000000a 00000001 00000000 0000")).await;
    // DATA on stream 0.
    expect_protocol_error(hex("00000000 00000000")).await;
}

#[tokio::test]
async fn truncated_input_ends_the_session() {
    for input in [
        hex("8003"),
        hex("00000001 00ffffff 0102"), // announces 16 MiB, delivers 2 bytes
        hex("80030001 0000000a 0000"),
    ] {
        let (server, _incoming, mut peer) = raw_server();
        peer.write_all(&input).await.expect("write");
        peer.shutdown().await.expect("shutdown");
        let ended = within(server.closed()).await;
        assert!(matches!(ended, Ended::Io(_)), "{ended:?}");
        drop(peer);
    }
    // A peer that just goes away.
    let (server, _incoming, peer) = raw_server();
    drop(peer);
    assert_eq!(within(server.closed()).await, Ended::Eof);
}
