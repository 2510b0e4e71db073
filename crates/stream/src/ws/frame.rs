//! One WebSocket frame on the wire (RFC 6455 §5.2): decoding from a
//! buffer with a bound on the payload, masking, and encoding.
//!
//! The decoder checks everything a single frame can get wrong — reserved
//! bits, unknown opcodes, the mask a role requires, control frames over
//! 125 bytes or fragmented, lengths over the limit — and leaves what spans
//! frames (fragmentation, UTF-8, close payloads) to the message assembler.

use bytes::{Buf, Bytes, BytesMut};

use super::Role;

/// The largest message accepted unless configured otherwise: 32 MiB.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 32 << 20;

/// The largest payload a control frame may carry.
pub const MAX_CONTROL_PAYLOAD: usize = 125;

/// A frame's opcode (RFC 6455 §5.2, §11.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl Opcode {
    /// The opcode of the four bits given, `None` for a reserved value.
    pub fn from_bits(bits: u8) -> Option<Opcode> {
        Some(match bits {
            0x0 => Opcode::Continuation,
            0x1 => Opcode::Text,
            0x2 => Opcode::Binary,
            0x8 => Opcode::Close,
            0x9 => Opcode::Ping,
            0xa => Opcode::Pong,
            _ => return None,
        })
    }

    /// The opcode's four bits.
    pub const fn bits(self) -> u8 {
        match self {
            Opcode::Continuation => 0x0,
            Opcode::Text => 0x1,
            Opcode::Binary => 0x2,
            Opcode::Close => 0x8,
            Opcode::Ping => 0x9,
            Opcode::Pong => 0xa,
        }
    }

    /// Whether this is a control frame's opcode (close, ping, pong).
    pub const fn is_control(self) -> bool {
        matches!(self, Opcode::Close | Opcode::Ping | Opcode::Pong)
    }
}

/// A malformed frame or message. Each maps to the close code the
/// connection should end with ([`FrameError::close_code`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("reserved bits {0:#05b} set without a negotiated extension")]
    ReservedBits(u8),
    #[error("unknown opcode {0:#x}")]
    UnknownOpcode(u8),
    #[error("a client sent an unmasked frame")]
    Unmasked,
    #[error("a server sent a masked frame")]
    Masked,
    #[error("a control frame of {0} bytes (at most 125 allowed)")]
    ControlTooLong(u64),
    #[error("a fragmented control frame")]
    FragmentedControl,
    #[error("a 64-bit payload length with its most significant bit set")]
    LengthOverflow,
    #[error("a message of {size} bytes exceeds the limit of {max}")]
    TooLarge { size: u64, max: usize },
    #[error("a continuation frame with no message in progress")]
    UnexpectedContinuation,
    #[error("a new data frame while a fragmented message is in progress")]
    ExpectedContinuation,
    #[error("a text message or close reason that is not UTF-8")]
    InvalidUtf8,
    #[error("a close frame with a one-byte payload")]
    InvalidClosePayload,
    #[error("close status code {0} is not allowed on the wire")]
    InvalidCloseCode(u16),
}

impl FrameError {
    /// The status code to close the connection with (RFC 6455 §7.4.1).
    pub fn close_code(&self) -> u16 {
        match self {
            FrameError::TooLarge { .. } => super::CLOSE_TOO_BIG,
            FrameError::InvalidUtf8 => super::CLOSE_INVALID_DATA,
            _ => super::CLOSE_PROTOCOL_ERROR,
        }
    }
}

/// One decoded frame, its payload already unmasked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub fin: bool,
    pub opcode: Opcode,
    pub payload: Bytes,
}

/// Decodes frames for one endpoint: `role` is this endpoint's role, which
/// decides whether incoming frames must be masked.
#[derive(Debug, Clone, Copy)]
pub struct FrameDecoder {
    role: Role,
    max_payload: usize,
}

impl FrameDecoder {
    /// A decoder for an endpoint of `role` refusing payloads over
    /// `max_payload` bytes.
    pub fn new(role: Role, max_payload: usize) -> FrameDecoder {
        FrameDecoder { role, max_payload }
    }

    /// Takes one frame off the front of `buf` when it holds a whole one.
    /// `Ok(None)` means more bytes are needed (and `buf` has been given the
    /// capacity for the rest of the frame); an error means the stream is
    /// unusable.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        let [b0, b1, ..] = buf[..] else {
            return Ok(None);
        };
        let rsv = (b0 >> 4) & 0b111;
        if rsv != 0 {
            return Err(FrameError::ReservedBits(rsv));
        }
        let opcode = Opcode::from_bits(b0 & 0x0f).ok_or(FrameError::UnknownOpcode(b0 & 0x0f))?;
        let fin = b0 & 0x80 != 0;
        let masked = b1 & 0x80 != 0;
        match (self.role, masked) {
            (Role::Server, false) => return Err(FrameError::Unmasked),
            (Role::Client, true) => return Err(FrameError::Masked),
            _ => {}
        }
        let len7 = b1 & 0x7f;
        if opcode.is_control() {
            if !fin {
                return Err(FrameError::FragmentedControl);
            }
            if usize::from(len7) > MAX_CONTROL_PAYLOAD {
                return Err(FrameError::ControlTooLong(u64::from(len7)));
            }
        }
        let (len, mut header) = match len7 {
            126 => {
                let Some(b) = buf.get(2..4) else {
                    return Ok(None);
                };
                (u64::from(u16::from_be_bytes([b[0], b[1]])), 4)
            }
            127 => {
                let Some(b) = buf.get(2..10) else {
                    return Ok(None);
                };
                let mut be = [0u8; 8];
                be.copy_from_slice(b);
                let len = u64::from_be_bytes(be);
                if len >> 63 != 0 {
                    return Err(FrameError::LengthOverflow);
                }
                (len, 10)
            }
            n => (u64::from(n), 2),
        };
        let len = match usize::try_from(len) {
            Ok(len) if len <= self.max_payload => len,
            _ => {
                return Err(FrameError::TooLarge {
                    size: len,
                    max: self.max_payload,
                });
            }
        };
        let mask_at = header;
        if masked {
            header += 4;
        }
        let total = header + len;
        if buf.len() < total {
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        let mask = if masked {
            let mut key = [0u8; 4];
            key.copy_from_slice(&buf[mask_at..mask_at + 4]);
            Some(key)
        } else {
            None
        };
        buf.advance(header);
        let mut payload = buf.split_to(len);
        if let Some(key) = mask {
            apply_mask(&mut payload, key);
        }
        Ok(Some(Frame {
            fin,
            opcode,
            payload: payload.freeze(),
        }))
    }
}

/// XORs `data` with the repeated four-byte `key`, the payload's first byte
/// with the key's first (RFC 6455 §5.3). Masking twice restores the input.
pub fn apply_mask(data: &mut [u8], key: [u8; 4]) {
    let wide = u64::from_ne_bytes([
        key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3],
    ]);
    let mut chunks = data.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let masked = u64::from_ne_bytes(word) ^ wide;
        chunk.copy_from_slice(&masked.to_ne_bytes());
    }
    // The remainder starts at a multiple of eight, so the key restarts.
    for (i, byte) in chunks.into_remainder().iter_mut().enumerate() {
        *byte ^= key[i % 4];
    }
}

/// The length of the header [`encode_frame`] writes for a payload of `len`
/// bytes.
pub fn header_len(len: usize, masked: bool) -> usize {
    let base = match len {
        0..=125 => 2,
        126..=0xffff => 4,
        _ => 10,
    };
    if masked { base + 4 } else { base }
}

/// Appends one frame to `out`: the header, then the payload, masked with
/// `mask` when one is given (a client's frames must be).
pub fn encode_frame(
    out: &mut Vec<u8>,
    fin: bool,
    opcode: Opcode,
    payload: &[u8],
    mask: Option<[u8; 4]>,
) {
    out.reserve(header_len(payload.len(), mask.is_some()) + payload.len());
    out.push(if fin { 0x80 } else { 0 } | opcode.bits());
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        // Each arm's range makes the narrowing exact.
        len @ 0..=125 => out.push(mask_bit | len as u8),
        len @ 126..=0xffff => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        len => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    match mask {
        Some(key) => {
            out.extend_from_slice(&key);
            let start = out.len();
            out.extend_from_slice(payload);
            apply_mask(&mut out[start..], key);
        }
        None => out.extend_from_slice(payload),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(role: Role, bytes: &[u8]) -> Result<Vec<Frame>, FrameError> {
        let decoder = FrameDecoder::new(role, DEFAULT_MAX_MESSAGE_SIZE);
        let mut buf = BytesMut::from(bytes);
        let mut frames = Vec::new();
        while let Some(frame) = decoder.decode(&mut buf)? {
            frames.push(frame);
        }
        assert!(buf.is_empty(), "left over: {buf:?}");
        Ok(frames)
    }

    fn frame(fin: bool, opcode: Opcode, payload: &[u8]) -> Frame {
        Frame {
            fin,
            opcode,
            payload: Bytes::copy_from_slice(payload),
        }
    }

    /// The examples of RFC 6455 §5.7, plus the 16- and 64-bit lengths.
    #[test]
    fn rfc_examples_decode_and_encode() {
        let long256 = vec![0x5a; 256];
        let long64k = vec![0xa5; 65536];
        let mut head256 = vec![0x82, 0x7e, 0x01, 0x00];
        head256.extend_from_slice(&long256);
        let mut head64k = vec![0x82, 0x7f, 0, 0, 0, 0, 0, 1, 0, 0];
        head64k.extend_from_slice(&long64k);
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        type Case = (&'static str, Role, Option<[u8; 4]>, Vec<u8>, Vec<Frame>);
        let cases: Vec<Case> = vec![
            (
                "unmasked text",
                Role::Client,
                None,
                vec![0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f],
                vec![frame(true, Opcode::Text, b"Hello")],
            ),
            (
                "masked text",
                Role::Server,
                Some(mask),
                vec![
                    0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
                ],
                vec![frame(true, Opcode::Text, b"Hello")],
            ),
            (
                "fragmented text",
                Role::Client,
                None,
                vec![0x01, 0x03, 0x48, 0x65, 0x6c, 0x80, 0x02, 0x6c, 0x6f],
                vec![
                    frame(false, Opcode::Text, b"Hel"),
                    frame(true, Opcode::Continuation, b"lo"),
                ],
            ),
            (
                "unmasked ping",
                Role::Client,
                None,
                vec![0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f],
                vec![frame(true, Opcode::Ping, b"Hello")],
            ),
            (
                "masked pong",
                Role::Server,
                Some(mask),
                vec![
                    0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
                ],
                vec![frame(true, Opcode::Pong, b"Hello")],
            ),
            (
                "256 bytes binary",
                Role::Client,
                None,
                head256,
                vec![frame(true, Opcode::Binary, &long256)],
            ),
            (
                "64 KiB binary",
                Role::Client,
                None,
                head64k,
                vec![frame(true, Opcode::Binary, &long64k)],
            ),
        ];
        for (name, role, mask, wire, frames) in cases {
            assert_eq!(decode_all(role, &wire).as_ref(), Ok(&frames), "{name}");
            let mut out = Vec::new();
            for f in &frames {
                encode_frame(&mut out, f.fin, f.opcode, &f.payload, mask);
            }
            assert_eq!(out, wire, "{name}");
        }
    }

    #[test]
    fn decodes_byte_by_byte() {
        let wire = [
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        let decoder = FrameDecoder::new(Role::Server, 1024);
        let mut buf = BytesMut::new();
        for (i, byte) in wire.iter().enumerate() {
            buf.extend_from_slice(&[*byte]);
            let got = decoder.decode(&mut buf);
            if i + 1 < wire.len() {
                assert_eq!(got, Ok(None), "after {} bytes", i + 1);
            } else {
                assert_eq!(got, Ok(Some(frame(true, Opcode::Text, b"Hello"))));
            }
        }
    }

    #[test]
    fn malformed_frames_are_errors() {
        let cases: Vec<(&str, Role, Vec<u8>, FrameError)> = vec![
            (
                "rsv1",
                Role::Client,
                vec![0xc1, 0x00],
                FrameError::ReservedBits(0b100),
            ),
            (
                "rsv3",
                Role::Client,
                vec![0x91, 0x00],
                FrameError::ReservedBits(0b001),
            ),
            (
                "opcode 3",
                Role::Client,
                vec![0x83, 0x00],
                FrameError::UnknownOpcode(3),
            ),
            (
                "opcode 0xb",
                Role::Client,
                vec![0x8b, 0x00],
                FrameError::UnknownOpcode(0xb),
            ),
            (
                "unmasked to a server",
                Role::Server,
                vec![0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f],
                FrameError::Unmasked,
            ),
            (
                "masked to a client",
                Role::Client,
                vec![0x81, 0x80, 1, 2, 3, 4],
                FrameError::Masked,
            ),
            (
                "ping of 126 bytes",
                Role::Client,
                vec![0x89, 0x7e, 0x00, 0x7e],
                FrameError::ControlTooLong(126),
            ),
            (
                "fragmented close",
                Role::Client,
                vec![0x08, 0x00],
                FrameError::FragmentedControl,
            ),
            (
                "64-bit length with the top bit",
                Role::Client,
                vec![0x82, 0x7f, 0x80, 0, 0, 0, 0, 0, 0, 1],
                FrameError::LengthOverflow,
            ),
            (
                "over the limit",
                Role::Client,
                vec![0x82, 0x7f, 0, 0, 0, 0, 0x02, 0, 0, 1],
                FrameError::TooLarge {
                    size: (32 << 20) + 1,
                    max: DEFAULT_MAX_MESSAGE_SIZE,
                },
            ),
        ];
        for (name, role, wire, want) in cases {
            assert_eq!(decode_all(role, &wire), Err(want), "{name}");
        }
    }

    #[test]
    fn close_codes_of_errors() {
        assert_eq!(FrameError::Unmasked.close_code(), 1002);
        assert_eq!(FrameError::InvalidUtf8.close_code(), 1007);
        assert_eq!(FrameError::TooLarge { size: 2, max: 1 }.close_code(), 1009);
    }

    #[test]
    fn truncated_frames_want_more() {
        let wire = [0x82, 0x7e, 0x01, 0x00, 1, 2, 3];
        let decoder = FrameDecoder::new(Role::Client, 1024);
        for end in 0..wire.len() {
            let mut buf = BytesMut::from(&wire[..end]);
            assert_eq!(decoder.decode(&mut buf), Ok(None), "{end} bytes");
        }
    }

    #[test]
    fn mask_is_an_involution_at_every_length() {
        let key = [0x12, 0x34, 0x56, 0x78];
        for len in 0..40 {
            let original: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut data = original.clone();
            apply_mask(&mut data, key);
            for (i, (m, o)) in data.iter().zip(&original).enumerate() {
                assert_eq!(*m, o ^ key[i % 4]);
            }
            apply_mask(&mut data, key);
            assert_eq!(data, original);
        }
    }

    #[test]
    fn header_lengths() {
        for (len, masked, want) in [
            (0, false, 2),
            (125, false, 2),
            (126, false, 4),
            (65535, true, 8),
            (65536, false, 10),
            (65536, true, 14),
        ] {
            assert_eq!(header_len(len, masked), want, "{len} {masked}");
            let mut out = Vec::new();
            encode_frame(
                &mut out,
                true,
                Opcode::Binary,
                &vec![0; len],
                masked.then_some([1, 2, 3, 4]),
            );
            assert_eq!(out.len(), want + len);
        }
    }
}
