//! Reassembling frames into messages (RFC 6455 §5.4–5.5): continuation
//! frames joined to the message they continue, control frames passed
//! through between fragments, text checked for UTF-8 and close payloads
//! parsed and checked.

use bytes::{Bytes, BytesMut};

use super::Message;
use super::frame::{Frame, FrameError, Opcode};

/// What one frame amounts to once reassembled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Incoming {
    /// A whole data message, or the peer's close frame.
    Message(Message),
    Ping(Bytes),
    Pong(Bytes),
}

/// The state between the frames of one fragmented message.
#[derive(Debug)]
pub(crate) struct MessageAssembler {
    max_message_size: usize,
    partial: Option<(Opcode, BytesMut)>,
}

impl MessageAssembler {
    pub(crate) fn new(max_message_size: usize) -> MessageAssembler {
        MessageAssembler {
            max_message_size,
            partial: None,
        }
    }

    /// Whether a fragmented message has begun and not yet ended.
    pub(crate) fn in_progress(&self) -> bool {
        self.partial.is_some()
    }

    /// Takes one frame; `Ok(None)` when it began or continued a message
    /// that has not ended yet.
    pub(crate) fn push(&mut self, frame: Frame) -> Result<Option<Incoming>, FrameError> {
        match frame.opcode {
            Opcode::Ping => Ok(Some(Incoming::Ping(frame.payload))),
            Opcode::Pong => Ok(Some(Incoming::Pong(frame.payload))),
            Opcode::Close => Ok(Some(Incoming::Message(Message::Close(parse_close(
                &frame.payload,
            )?)))),
            Opcode::Text | Opcode::Binary => {
                if self.partial.is_some() {
                    return Err(FrameError::ExpectedContinuation);
                }
                if frame.fin {
                    return finish(frame.opcode, frame.payload).map(Some);
                }
                self.partial = Some((frame.opcode, BytesMut::from(frame.payload)));
                Ok(None)
            }
            Opcode::Continuation => {
                let Some((_, buf)) = self.partial.as_mut() else {
                    return Err(FrameError::UnexpectedContinuation);
                };
                let size = buf.len() + frame.payload.len();
                if size > self.max_message_size {
                    return Err(FrameError::TooLarge {
                        size: size as u64,
                        max: self.max_message_size,
                    });
                }
                buf.extend_from_slice(&frame.payload);
                if !frame.fin {
                    return Ok(None);
                }
                match self.partial.take() {
                    Some((opcode, buf)) => finish(opcode, buf.freeze()).map(Some),
                    None => Err(FrameError::UnexpectedContinuation),
                }
            }
        }
    }
}

/// A whole message of `opcode` (text or binary) from its payload.
fn finish(opcode: Opcode, payload: Bytes) -> Result<Incoming, FrameError> {
    let message = if opcode == Opcode::Text {
        let text = String::from_utf8(Vec::from(payload)).map_err(|_| FrameError::InvalidUtf8)?;
        Message::Text(text)
    } else {
        Message::Binary(payload)
    };
    Ok(Incoming::Message(message))
}

/// Whether `code` may appear in a close frame (RFC 6455 §7.4): the
/// defined codes other than those reserved for local use (1004–1006,
/// 1015), and the ranges for libraries and applications.
pub(crate) fn valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// A close frame's status code and reason (RFC 6455 §5.5.1).
fn parse_close(payload: &[u8]) -> Result<Option<(u16, String)>, FrameError> {
    match payload {
        [] => Ok(None),
        [_] => Err(FrameError::InvalidClosePayload),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !valid_close_code(code) {
                return Err(FrameError::InvalidCloseCode(code));
            }
            let reason = std::str::from_utf8(reason).map_err(|_| FrameError::InvalidUtf8)?;
            Ok(Some((code, reason.to_owned())))
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::super::Role;
    use super::super::frame::{FrameDecoder, encode_frame};
    use super::*;

    const MAX: usize = 1024;

    /// Everything `wire` decodes to, for an endpoint of `role`, stopping at
    /// the first error.
    fn run(role: Role, wire: &[u8]) -> Result<Vec<Incoming>, FrameError> {
        let decoder = FrameDecoder::new(role, MAX);
        let mut assembler = MessageAssembler::new(MAX);
        let mut buf = BytesMut::from(wire);
        let mut out = Vec::new();
        while let Some(frame) = decoder.decode(&mut buf)? {
            if let Some(incoming) = assembler.push(frame)? {
                out.push(incoming);
            }
        }
        Ok(out)
    }

    fn wire(frames: &[(bool, Opcode, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (fin, opcode, payload) in frames {
            encode_frame(&mut out, *fin, *opcode, payload, None);
        }
        out
    }

    fn text(s: &str) -> Incoming {
        Incoming::Message(Message::Text(s.to_owned()))
    }

    #[test]
    fn reassembles_messages() {
        let cases: Vec<(&str, Vec<u8>, Vec<Incoming>)> = vec![
            (
                "RFC 6455 fragmented Hello",
                vec![0x01, 0x03, 0x48, 0x65, 0x6c, 0x80, 0x02, 0x6c, 0x6f],
                vec![text("Hello")],
            ),
            (
                "ping between fragments",
                wire(&[
                    (false, Opcode::Binary, b"ab"),
                    (true, Opcode::Ping, b"p"),
                    (false, Opcode::Continuation, b"cd"),
                    (true, Opcode::Continuation, b""),
                ]),
                vec![
                    Incoming::Ping(Bytes::from_static(b"p")),
                    Incoming::Message(Message::Binary(Bytes::from_static(b"abcd"))),
                ],
            ),
            (
                "UTF-8 split across fragments",
                wire(&[
                    (false, Opcode::Text, &[0xce]),
                    (true, Opcode::Continuation, &[0xbb]),
                ]),
                vec![text("λ")],
            ),
            (
                "pong and empty messages",
                wire(&[
                    (true, Opcode::Pong, b""),
                    (true, Opcode::Text, b""),
                    (true, Opcode::Binary, b""),
                ]),
                vec![
                    Incoming::Pong(Bytes::new()),
                    text(""),
                    Incoming::Message(Message::Binary(Bytes::new())),
                ],
            ),
            (
                "close without status",
                wire(&[(true, Opcode::Close, b"")]),
                vec![Incoming::Message(Message::Close(None))],
            ),
            (
                "close with status and reason",
                wire(&[(true, Opcode::Close, b"\x03\xe8bye")]),
                vec![Incoming::Message(Message::Close(Some((
                    1000,
                    "bye".to_owned(),
                ))))],
            ),
        ];
        for (name, bytes, want) in cases {
            assert_eq!(run(Role::Client, &bytes), Ok(want), "{name}");
        }
    }

    #[test]
    fn malformed_messages_are_errors() {
        let cases: Vec<(&str, Vec<u8>, FrameError)> = vec![
            (
                "continuation first",
                wire(&[(true, Opcode::Continuation, b"x")]),
                FrameError::UnexpectedContinuation,
            ),
            (
                "new message inside a fragmented one",
                wire(&[(false, Opcode::Text, b"a"), (true, Opcode::Text, b"b")]),
                FrameError::ExpectedContinuation,
            ),
            (
                "bad UTF-8",
                wire(&[(true, Opcode::Text, &[0xff, 0xfe])]),
                FrameError::InvalidUtf8,
            ),
            (
                "truncated UTF-8 at the end",
                wire(&[
                    (false, Opcode::Text, b"ok"),
                    (true, Opcode::Continuation, &[0xe2, 0x82]),
                ]),
                FrameError::InvalidUtf8,
            ),
            (
                "fragments over the limit",
                wire(&[
                    (false, Opcode::Binary, &[0; 1000]),
                    (true, Opcode::Continuation, &[0; 25]),
                ]),
                FrameError::TooLarge {
                    size: 1025,
                    max: MAX,
                },
            ),
            (
                "one-byte close",
                wire(&[(true, Opcode::Close, b"\x03")]),
                FrameError::InvalidClosePayload,
            ),
            (
                "close code 1005",
                wire(&[(true, Opcode::Close, b"\x03\xed")]),
                FrameError::InvalidCloseCode(1005),
            ),
            (
                "close code 999",
                wire(&[(true, Opcode::Close, b"\x03\xe7")]),
                FrameError::InvalidCloseCode(999),
            ),
            (
                "close code 5000",
                wire(&[(true, Opcode::Close, b"\x13\x88")]),
                FrameError::InvalidCloseCode(5000),
            ),
            (
                "close reason not UTF-8",
                wire(&[(true, Opcode::Close, b"\x03\xe8\xc0")]),
                FrameError::InvalidUtf8,
            ),
        ];
        for (name, bytes, want) in cases {
            assert_eq!(run(Role::Client, &bytes), Err(want), "{name}");
        }
    }

    #[test]
    fn close_code_ranges() {
        for code in [1000, 1001, 1002, 1003, 1007, 1011, 3000, 4999] {
            assert!(valid_close_code(code), "{code}");
        }
        for code in [0, 999, 1004, 1005, 1006, 1015, 2999, 5000, 65535] {
            assert!(!valid_close_code(code), "{code}");
        }
    }

    /// Random bytes, and valid frames with random bytes flipped, fed to
    /// both roles' decoders: errors are fine, panics are not.
    #[test]
    fn fuzz_decoder_never_panics() {
        let mut rng = StdRng::seed_from_u64(0x5eed_6455);
        let mut seeds = Vec::new();
        for (opcode, len) in [
            (Opcode::Text, 5),
            (Opcode::Binary, 200),
            (Opcode::Continuation, 4),
            (Opcode::Ping, 3),
            (Opcode::Close, 2),
        ] {
            let payload: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            let mut unmasked = Vec::new();
            encode_frame(&mut unmasked, rng.random(), opcode, &payload, None);
            let mut masked = Vec::new();
            encode_frame(&mut masked, true, opcode, &payload, Some(rng.random()));
            seeds.push(unmasked);
            seeds.push(masked);
        }
        for i in 0..20_000 {
            let bytes: Vec<u8> = if i % 2 == 0 {
                let len = rng.random_range(0..64);
                (0..len).map(|_| rng.random()).collect()
            } else {
                // One to three valid frames back to back, then damaged.
                let mut bytes = Vec::new();
                for _ in 0..rng.random_range(1..=3) {
                    bytes.extend_from_slice(&seeds[rng.random_range(0..seeds.len())]);
                }
                for _ in 0..rng.random_range(1..4) {
                    let at = rng.random_range(0..bytes.len());
                    bytes[at] = rng.random();
                }
                bytes.truncate(rng.random_range(0..=bytes.len()));
                bytes
            };
            for role in [Role::Client, Role::Server] {
                let _ = run(role, &bytes);
            }
        }
    }
}
