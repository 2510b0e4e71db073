//! Frames, header blocks and the handshake: byte vectors laid out as
//! spdystream's writer lays them out, compression across blocks, malformed
//! input, a seeded fuzz loop.

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

use super::frame::{Frame, FrameError, Setting, rst};
use super::handshake::*;
use super::headers::{
    Compressor, DICTIONARY, Decompressor, HeaderError, Headers, decode_block, encode_block,
};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn b(v: &[u8]) -> Bytes {
    Bytes::copy_from_slice(v)
}

#[test]
fn frames_encode_and_decode_as_spdystream_lays_them_out() {
    let cases: Vec<(&str, Frame, &str)> = vec![
        (
            "SYN_STREAM",
            Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 0,
                slot: 0,
                fin: false,
                unidirectional: false,
                block: b(&[0xaa, 0xbb]),
            },
            "80030001 0000000c 00000001 00000000 00 00 aabb",
        ),
        (
            "SYN_STREAM priority 3, FIN, unidirectional, associated",
            Frame::SynStream {
                stream_id: 7,
                associated_to: 5,
                priority: 3,
                slot: 0,
                fin: true,
                unidirectional: true,
                block: b(&[]),
            },
            "80030001 0300000a 00000007 00000005 60 00",
        ),
        (
            "SYN_REPLY FIN",
            Frame::SynReply {
                stream_id: 2,
                fin: true,
                block: b(&[1]),
            },
            "80030002 01000005 00000002 01",
        ),
        (
            "HEADERS",
            Frame::Headers {
                stream_id: 4,
                fin: false,
                block: b(&[9, 9]),
            },
            "80030008 00000006 00000004 0909",
        ),
        (
            "DATA",
            Frame::Data {
                stream_id: 3,
                fin: false,
                data: b(b"hi"),
            },
            "00000003 00000002 6869",
        ),
        (
            "DATA empty with FIN (Close)",
            Frame::Data {
                stream_id: 5,
                fin: true,
                data: b(&[]),
            },
            "00000005 01000000",
        ),
        (
            "RST_STREAM CANCEL",
            Frame::RstStream {
                stream_id: 1,
                status: rst::CANCEL,
            },
            "80030003 00000008 00000001 00000005",
        ),
        ("PING", Frame::Ping { id: 1 }, "80030006 00000004 00000001"),
        (
            "GOAWAY",
            Frame::GoAway {
                last_good_stream_id: 2,
                status: 0,
            },
            "80030007 00000008 00000002 00000000",
        ),
        (
            "WINDOW_UPDATE",
            Frame::WindowUpdate {
                stream_id: 1,
                delta: 65536,
            },
            "80030009 00000008 00000001 00010000",
        ),
        (
            "SETTINGS",
            Frame::Settings {
                clear: false,
                entries: vec![Setting {
                    flags: 1,
                    id: 7,
                    value: 65536,
                }],
            },
            "80030004 0000000c 00000001 01000007 00010000",
        ),
        (
            "unknown type 10 (CREDENTIAL)",
            Frame::Unknown {
                kind: 10,
                flags: 0,
                payload: b(&[1, 2]),
            },
            "8003000a 00000002 0102",
        ),
    ];
    for (name, frame, wire) in cases {
        let wire = hex(wire);
        let mut out = Vec::new();
        frame.encode(&mut out).expect(name);
        assert_eq!(out, wire, "{name}: encoding");
        let (decoded, used) = Frame::decode(&wire).expect(name).expect(name);
        assert_eq!(used, wire.len(), "{name}");
        assert_eq!(decoded, frame, "{name}: decoding");
        // Every proper prefix is "not yet".
        for cut in 0..wire.len() {
            assert_eq!(
                Frame::decode(&wire[..cut]),
                Ok(None),
                "{name}: prefix {cut}"
            );
        }
    }
}

#[test]
fn malformed_frames_are_errors() {
    let cases: Vec<(&str, &str)> = vec![
        ("version 2", "80020006 00000004 00000001"),
        ("version 4", "80040006 00000004 00000001"),
        ("DATA on stream 0", "00000000 00000001 00"),
        ("SYN_STREAM too short", "80030001 00000005 0000000100"),
        (
            "SYN_STREAM stream 0",
            "80030001 0000000a 00000000 00000000 0000",
        ),
        ("SYN_REPLY too short", "80030002 00000002 0000"),
        ("HEADERS stream 0", "80030008 00000004 00000000"),
        ("RST_STREAM status 0", "80030003 00000008 00000001 00000000"),
        ("RST_STREAM length 4", "80030003 00000004 00000001"),
        ("PING length 8", "80030006 00000008 00000001 00000001"),
        ("PING id 0", "80030006 00000004 00000000"),
        ("PING flags", "80030006 01000004 00000001"),
        ("GOAWAY length 4", "80030007 00000004 00000001"),
        (
            "WINDOW_UPDATE length 12",
            "80030009 0000000c 00000001 00000001 00000000",
        ),
        (
            "SETTINGS count beyond length",
            "80030004 0000000c 00000002 01000007 00010000",
        ),
        ("SETTINGS huge count", "80030004 00000004 ffffffff"),
    ];
    for (name, wire) in cases {
        let r = Frame::decode(&hex(wire));
        assert!(r.is_err(), "{name}: {r:?}");
    }
    assert_eq!(
        Frame::decode(&hex("80020006 00000004 00000001")),
        Err(FrameError::Version(2))
    );
    // The 24-bit length bounds every payload: a frame announcing 16 MiB
    // with none of it present is merely incomplete.
    assert_eq!(Frame::decode(&hex("00000001 00ffffff")), Ok(None));
    let data = Frame::Data {
        stream_id: 1,
        fin: false,
        data: Bytes::from(vec![0; 1 << 24]),
    };
    assert_eq!(
        data.encode(&mut Vec::new()),
        Err(FrameError::TooLarge(1 << 24))
    );
}

#[test]
fn dictionary_is_spdy3s() {
    // Length and Adler-32 of the dictionary in spdystream's dictionary.go
    // (the draft's); zlib names it by this checksum in the stream header.
    assert_eq!(DICTIONARY.len(), 1423);
    let (mut a, mut b) = (1u32, 0u32);
    for &x in DICTIONARY {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    assert_eq!(b << 16 | a, 0xe3c6_a7c2);
}

#[test]
fn header_blocks_layout() {
    let h = Headers::new().with("streamType", "error");
    // Names lowercase, 32-bit count and lengths.
    assert_eq!(
        encode_block(&h),
        hex("00000001 0000000a 73747265616d74797065 00000005 6572726f72")
    );
    // A name's values become one NUL-joined entry, and come back apart.
    let mut h = Headers::new();
    h.append("a", "1");
    h.append("b", "x");
    h.append("A", "2");
    let block = encode_block(&h);
    assert_eq!(
        block,
        hex("00000002 00000001 61 00000003 310032 00000001 62 00000001 78")
    );
    let back = decode_block(&block).expect("decode");
    assert_eq!(back.get_all("a").collect::<Vec<_>>(), ["1", "2"]);
    assert_eq!(back.get("B"), Some("x"));
    // Malformed blocks.
    for bad in [
        "",
        "00000001",
        "00000001 00000005 6162",
        "00000001 00000001 61 00000009 31",
        "00000001 00000000 00000000",
        "00000000 00",
        "ffffffff 00000001 61 00000001 31",
    ] {
        assert!(decode_block(&hex(bad)).is_err(), "{bad}");
    }
}

#[test]
fn blocks_from_c_zlib_with_the_dictionary_decompress_on_one_context() {
    // Python's zlib (C zlib) at level 9 with the dictionary, two blocks on
    // one stream, each ended by Z_SYNC_FLUSH, as Go's framer does.
    let first = hex("78f9e3c6a7c202a62346703a2b294a4dcc851625aca9a08006000000ffff");
    let second = hex("c22e555c02cc2e00000000ffff");
    let mut d = Decompressor::new();
    assert_eq!(
        d.decompress(&first).expect("first").get("streamtype"),
        Some("error")
    );
    assert_eq!(
        d.decompress(&second).expect("second").get("streamtype"),
        Some("stdin")
    );
    // The second block alone means nothing to a fresh context.
    assert!(Decompressor::new().decompress(&second).is_err());
}

#[test]
fn header_blocks_round_trip_on_one_context_and_need_the_dictionary() {
    let mut c = Compressor::new().expect("compressor");
    let mut d = Decompressor::new();
    let blocks: Vec<Headers> = vec![
        Headers::new().with("streamtype", "error"),
        Headers::new().with("streamtype", "stdin"),
        Headers::new()
            .with("streamtype", "data")
            .with("port", "8080")
            .with("requestid", "0"),
        Headers::new(),
        (0..50)
            .map(|i| (format!("x-{i}"), "v".repeat(i * 7)))
            .collect(),
    ];
    let mut compressed = Vec::new();
    for h in &blocks {
        let z = c.compress(h).expect("compress");
        assert!(z.ends_with(&[0, 0, 0xff, 0xff]), "sync flush");
        let back = d.decompress(&z).expect("decompress");
        assert_eq!(back, *h);
        compressed.push(z);
    }
    // The first block announces the dictionary (FDICT and its id).
    assert_eq!(compressed[0][1] & 0x20, 0x20);
    assert_eq!(compressed[0][2..6], [0xe3, 0xc6, 0xa7, 0xc2]);
    // Plain zlib without the dictionary cannot read it.
    let mut plain = flate2::Decompress::new(true);
    let mut out = Vec::with_capacity(4096);
    let r = plain.decompress_vec(&compressed[0], &mut out, flate2::FlushDecompress::Sync);
    assert!(r.is_err_and(|e| e.needs_dictionary() == Some(0xe3c6_a7c2)));
    // The wrong dictionary fails too.
    let mut wrong = flate2::Decompress::new(true);
    assert!(wrong.set_dictionary(b"not the spdy dictionary").is_err());
    // Out of order (skipping a block) fails or misreads, never panics.
    let mut d2 = Decompressor::new();
    d2.decompress(&compressed[0]).expect("first");
    assert_ne!(
        d2.decompress(&compressed[2]).ok().as_ref(),
        Some(&blocks[2])
    );
}

#[test]
fn bad_zlib_and_bombs_are_errors() {
    let mut d = Decompressor::new();
    assert!(d.decompress(&hex("00112233")).is_err());
    // A highly compressible block beyond the limit.
    let mut c = flate2::Compress::new(flate2::Compression::best(), true);
    c.set_dictionary(DICTIONARY).expect("dict");
    let mut input = Vec::from(1u32.to_be_bytes());
    input.extend_from_slice(&1u32.to_be_bytes());
    input.push(b'a');
    input.extend_from_slice(&(4u32 << 20).to_be_bytes());
    input.resize(input.len() + (4 << 20), b'x');
    let mut z = Vec::with_capacity(1 << 20);
    c.compress_vec(&input, &mut z, flate2::FlushCompress::Sync)
        .expect("compress");
    assert!(z.len() < 64 * 1024);
    assert_eq!(
        Decompressor::new().decompress(&z),
        Err(HeaderError::TooLarge)
    );
}

#[test]
fn fuzz_frame_and_block_decoders() {
    let mut rng = StdRng::seed_from_u64(0x5bd1_e995);
    let mut valid = Vec::new();
    let mut c = Compressor::new().expect("compressor");
    for f in [
        Frame::SynStream {
            stream_id: 1,
            associated_to: 0,
            priority: 0,
            slot: 0,
            fin: false,
            unidirectional: false,
            block: Bytes::from(
                c.compress(&Headers::new().with("streamtype", "stdout"))
                    .expect("z"),
            ),
        },
        Frame::Ping { id: 3 },
        Frame::GoAway {
            last_good_stream_id: 0,
            status: 0,
        },
        Frame::Data {
            stream_id: 1,
            fin: true,
            data: b(b"payload"),
        },
    ] {
        let mut w = Vec::new();
        f.encode(&mut w).expect("encode");
        valid.push(w);
    }
    for i in 0..20_000 {
        let input: Vec<u8> = if i % 2 == 0 {
            let len = rng.random_range(0..64);
            let mut v = vec![0u8; len];
            rng.fill_bytes(&mut v);
            if len >= 4 && rng.random_bool(0.5) {
                v[0] = 0x80;
                v[1] = 3;
            }
            v
        } else {
            let mut v = valid[rng.random_range(0..valid.len())].clone();
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(0..v.len());
                v[at] = rng.random();
            }
            v
        };
        if let Ok(Some((frame, used))) = Frame::decode(&input) {
            assert!(used <= input.len());
            let block = match &frame {
                Frame::SynStream { block, .. }
                | Frame::SynReply { block, .. }
                | Frame::Headers { block, .. } => Some(block.clone()),
                _ => None,
            };
            if let Some(block) = block {
                let _ = Decompressor::new().decompress(&block);
            }
        }
        let _ = decode_block(&input);
        let _ = Decompressor::new().decompress(&input);
    }
}

#[test]
fn handshake_as_upstream() {
    let mut req = http::HeaderMap::new();
    client_request_headers(&mut req, &["v4.channel.k8s.io", "v3.channel.k8s.io"]);
    assert_eq!(req["connection"], "Upgrade");
    assert_eq!(req["upgrade"], "SPDY/3.1");
    assert_eq!(req.get_all(HEADER_PROTOCOL_VERSION).iter().count(), 2);
    assert!(is_upgrade_request(&req));

    // The client's order wins, as in upstream's negotiateProtocol.
    let (resp, proto) = server_handshake(
        &req,
        &[
            "v2.channel.k8s.io",
            "v3.channel.k8s.io",
            "v4.channel.k8s.io",
        ],
    )
    .expect("handshake");
    assert_eq!(proto, "v4.channel.k8s.io");
    assert_eq!(resp.status(), http::StatusCode::SWITCHING_PROTOCOLS);
    assert_eq!(
        check_response(resp.status(), resp.headers()),
        Ok(Some("v4.channel.k8s.io".to_owned()))
    );

    // Comma-separated values count too.
    let mut req2 = http::HeaderMap::new();
    client_request_headers(&mut req2, &["a, v3.channel.k8s.io"]);
    assert_eq!(offered_protocols(&req2), ["a", "v3.channel.k8s.io"]);

    let err = server_handshake(&req, &["portforward.k8s.io"]).expect_err("no common");
    let resp = err.to_response();
    assert_eq!(resp.status(), http::StatusCode::FORBIDDEN);
    assert_eq!(
        resp.headers()[HEADER_ACCEPTED_PROTOCOL_VERSIONS],
        "portforward.k8s.io"
    );

    let mut bare = http::HeaderMap::new();
    client_request_headers(&mut bare, &[]);
    assert!(matches!(
        server_handshake(&bare, &["x"]),
        Err(HandshakeError::NoProtocol)
    ));
    assert!(matches!(
        server_handshake(&http::HeaderMap::new(), &["x"]),
        Err(HandshakeError::NotUpgrade)
    ));
    assert!(check_response(http::StatusCode::OK, &http::HeaderMap::new()).is_err());
}
