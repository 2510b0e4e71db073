//! SPDY/3 frames on the wire: the 8-byte frame header, the control frames
//! (SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS,
//! WINDOW_UPDATE) and DATA frames, encoded and decoded with the checks
//! moby/spdystream's reader makes. Header blocks stay compressed here:
//! [`super::headers`] owns the zlib contexts, which are per connection.
//!
//! Every length on the wire is 24 bits, so a frame's payload is at most
//! 16 MiB − 1 by construction; nothing here allocates more than that.

use bytes::{BufMut, Bytes};

/// The protocol version this module speaks (SPDY/3, and 3.1's frames).
pub const VERSION: u16 = 3;
/// The size of every frame header (control and data alike).
pub const HEADER_LEN: usize = 8;
/// The largest payload a 24-bit length can announce.
pub const MAX_PAYLOAD: usize = (1 << 24) - 1;

/// The FIN flag (DATA, SYN_STREAM, SYN_REPLY, HEADERS).
pub const FLAG_FIN: u8 = 0x01;
/// SYN_STREAM's UNIDIRECTIONAL flag: the receiver may not send on it.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;
/// SETTINGS' CLEAR_SETTINGS flag.
pub const FLAG_SETTINGS_CLEAR: u8 = 0x01;

pub const TYPE_SYN_STREAM: u16 = 1;
pub const TYPE_SYN_REPLY: u16 = 2;
pub const TYPE_RST_STREAM: u16 = 3;
pub const TYPE_SETTINGS: u16 = 4;
pub const TYPE_PING: u16 = 6;
pub const TYPE_GOAWAY: u16 = 7;
pub const TYPE_HEADERS: u16 = 8;
pub const TYPE_WINDOW_UPDATE: u16 = 9;

/// RST_STREAM status codes (SPDY/3 §2.4.2).
pub mod rst {
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INVALID_STREAM: u32 = 2;
    pub const REFUSED_STREAM: u32 = 3;
    pub const UNSUPPORTED_VERSION: u32 = 4;
    pub const CANCEL: u32 = 5;
    pub const INTERNAL_ERROR: u32 = 6;
    pub const FLOW_CONTROL_ERROR: u32 = 7;
    pub const STREAM_IN_USE: u32 = 8;
    pub const STREAM_ALREADY_CLOSED: u32 = 9;
    pub const FRAME_TOO_LARGE: u32 = 11;
}

/// GOAWAY status codes (SPDY/3 §2.6.6).
pub mod goaway {
    pub const OK: u32 = 0;
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INTERNAL_ERROR: u32 = 2;
}

const STREAM_ID_MASK: u32 = 0x7fff_ffff;

/// A malformed frame: the session answers with GOAWAY and ends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("decoding a control frame: unsupported SPDY version {0}")]
    Version(u16),
    #[error("decoding a {frame} frame: {reason}")]
    Invalid {
        frame: &'static str,
        reason: &'static str,
    },
    #[error("encoding a frame: payload of {0} bytes exceeds the 24-bit length")]
    TooLarge(usize),
}

fn invalid(frame: &'static str, reason: &'static str) -> FrameError {
    FrameError::Invalid { frame, reason }
}

/// A decoded frame header: what kind of frame follows and how long it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    Control {
        version: u16,
        kind: u16,
        flags: u8,
        length: usize,
    },
    Data {
        stream_id: u32,
        flags: u8,
        length: usize,
    },
}

impl Head {
    /// Parses the first eight bytes of a frame.
    pub fn parse(b: [u8; HEADER_LEN]) -> Head {
        let first = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let flags = b[4];
        let length = u32::from_be_bytes([0, b[5], b[6], b[7]]) as usize;
        if first & 0x8000_0000 != 0 {
            Head::Control {
                version: ((first >> 16) & 0x7fff) as u16,
                kind: (first & 0xffff) as u16,
                flags,
                length,
            }
        } else {
            Head::Data {
                stream_id: first,
                flags,
                length,
            }
        }
    }

    /// The payload length that follows the header.
    pub fn length(&self) -> usize {
        match *self {
            Head::Control { length, .. } | Head::Data { length, .. } => length,
        }
    }
}

/// One SETTINGS entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub flags: u8,
    pub id: u32,
    pub value: u32,
}

/// A frame, header blocks still compressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Data {
        stream_id: u32,
        fin: bool,
        data: Bytes,
    },
    SynStream {
        stream_id: u32,
        associated_to: u32,
        /// 0 (highest) to 7.
        priority: u8,
        slot: u8,
        fin: bool,
        unidirectional: bool,
        block: Bytes,
    },
    SynReply {
        stream_id: u32,
        fin: bool,
        block: Bytes,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    Settings {
        clear: bool,
        entries: Vec<Setting>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good_stream_id: u32,
        status: u32,
    },
    Headers {
        stream_id: u32,
        fin: bool,
        block: Bytes,
    },
    WindowUpdate {
        stream_id: u32,
        delta: u32,
    },
    /// A control frame of a type SPDY/3 does not define (CREDENTIAL
    /// among them): the spec says to ignore it.
    Unknown {
        kind: u16,
        flags: u8,
        payload: Bytes,
    },
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn fin(flags: u8) -> bool {
    flags & FLAG_FIN != 0
}

impl Frame {
    /// Decodes a frame's payload given its header. `payload.len()` must
    /// equal `head.length()`.
    pub fn decode_payload(head: Head, payload: Bytes) -> Result<Frame, FrameError> {
        let p = &payload[..];
        match head {
            Head::Data {
                stream_id, flags, ..
            } => {
                if stream_id == 0 {
                    return Err(invalid("DATA", "stream id 0"));
                }
                Ok(Frame::Data {
                    stream_id,
                    fin: fin(flags),
                    data: payload,
                })
            }
            Head::Control {
                version,
                kind,
                flags,
                ..
            } => {
                if version != VERSION {
                    return Err(FrameError::Version(version));
                }
                match kind {
                    TYPE_SYN_STREAM => {
                        if p.len() < 10 {
                            return Err(invalid("SYN_STREAM", "shorter than 10 bytes"));
                        }
                        let stream_id = be32(p, 0) & STREAM_ID_MASK;
                        if stream_id == 0 {
                            return Err(invalid("SYN_STREAM", "stream id 0"));
                        }
                        Ok(Frame::SynStream {
                            stream_id,
                            associated_to: be32(p, 4) & STREAM_ID_MASK,
                            priority: p[8] >> 5,
                            slot: p[9],
                            fin: fin(flags),
                            unidirectional: flags & FLAG_UNIDIRECTIONAL != 0,
                            block: payload.slice(10..),
                        })
                    }
                    TYPE_SYN_REPLY | TYPE_HEADERS => {
                        let name = if kind == TYPE_HEADERS {
                            "HEADERS"
                        } else {
                            "SYN_REPLY"
                        };
                        if p.len() < 4 {
                            return Err(invalid(name, "shorter than 4 bytes"));
                        }
                        let stream_id = be32(p, 0) & STREAM_ID_MASK;
                        if stream_id == 0 {
                            return Err(invalid(name, "stream id 0"));
                        }
                        let block = payload.slice(4..);
                        Ok(if kind == TYPE_HEADERS {
                            Frame::Headers {
                                stream_id,
                                fin: fin(flags),
                                block,
                            }
                        } else {
                            Frame::SynReply {
                                stream_id,
                                fin: fin(flags),
                                block,
                            }
                        })
                    }
                    TYPE_RST_STREAM => {
                        if p.len() != 8 {
                            return Err(invalid("RST_STREAM", "length is not 8"));
                        }
                        let stream_id = be32(p, 0) & STREAM_ID_MASK;
                        let status = be32(p, 4);
                        if stream_id == 0 {
                            return Err(invalid("RST_STREAM", "stream id 0"));
                        }
                        if status == 0 {
                            return Err(invalid("RST_STREAM", "status 0"));
                        }
                        Ok(Frame::RstStream { stream_id, status })
                    }
                    TYPE_SETTINGS => {
                        if p.len() < 4 {
                            return Err(invalid("SETTINGS", "shorter than 4 bytes"));
                        }
                        let count = be32(p, 0) as usize;
                        if count.checked_mul(8).and_then(|n| n.checked_add(4)) != Some(p.len()) {
                            return Err(invalid("SETTINGS", "entry count does not match length"));
                        }
                        let entries = p[4..]
                            .chunks_exact(8)
                            .map(|e| Setting {
                                flags: e[0],
                                id: be32(e, 0) & 0x00ff_ffff,
                                value: be32(e, 4),
                            })
                            .collect();
                        Ok(Frame::Settings {
                            clear: flags & FLAG_SETTINGS_CLEAR != 0,
                            entries,
                        })
                    }
                    TYPE_PING => {
                        if p.len() != 4 {
                            return Err(invalid("PING", "length is not 4"));
                        }
                        if flags != 0 {
                            return Err(invalid("PING", "flags set"));
                        }
                        let id = be32(p, 0);
                        if id == 0 {
                            return Err(invalid("PING", "id 0"));
                        }
                        Ok(Frame::Ping { id })
                    }
                    TYPE_GOAWAY => {
                        if p.len() != 8 {
                            return Err(invalid("GOAWAY", "length is not 8"));
                        }
                        if flags != 0 {
                            return Err(invalid("GOAWAY", "flags set"));
                        }
                        Ok(Frame::GoAway {
                            last_good_stream_id: be32(p, 0) & STREAM_ID_MASK,
                            status: be32(p, 4),
                        })
                    }
                    TYPE_WINDOW_UPDATE => {
                        if p.len() != 8 {
                            return Err(invalid("WINDOW_UPDATE", "length is not 8"));
                        }
                        if flags != 0 {
                            return Err(invalid("WINDOW_UPDATE", "flags set"));
                        }
                        Ok(Frame::WindowUpdate {
                            stream_id: be32(p, 0) & STREAM_ID_MASK,
                            delta: be32(p, 4) & STREAM_ID_MASK,
                        })
                    }
                    _ => Ok(Frame::Unknown {
                        kind,
                        flags,
                        payload,
                    }),
                }
            }
        }
    }

    /// Decodes one frame from the front of `buf`: `Ok(None)` when `buf`
    /// holds less than a whole frame, else the frame and the bytes it took.
    pub fn decode(buf: &[u8]) -> Result<Option<(Frame, usize)>, FrameError> {
        let Some(head) = buf.first_chunk::<HEADER_LEN>() else {
            return Ok(None);
        };
        let head = Head::parse(*head);
        let end = HEADER_LEN + head.length();
        if buf.len() < end {
            return Ok(None);
        }
        let payload = Bytes::copy_from_slice(&buf[HEADER_LEN..end]);
        Ok(Some((Frame::decode_payload(head, payload)?, end)))
    }

    /// Appends the frame's wire form to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), FrameError> {
        match self {
            Frame::Data {
                stream_id,
                fin,
                data,
            } => {
                let len = length(data.len())?;
                out.reserve(HEADER_LEN + data.len());
                out.put_u32(stream_id & STREAM_ID_MASK);
                out.put_u32(u32::from(flag(*fin)) << 24 | len);
                out.extend_from_slice(data);
            }
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                slot,
                fin,
                unidirectional,
                block,
            } => {
                let flags = flag(*fin)
                    | if *unidirectional {
                        FLAG_UNIDIRECTIONAL
                    } else {
                        0
                    };
                control(out, TYPE_SYN_STREAM, flags, 10 + block.len())?;
                out.put_u32(stream_id & STREAM_ID_MASK);
                out.put_u32(associated_to & STREAM_ID_MASK);
                out.put_u8((priority & 0x07) << 5);
                out.put_u8(*slot);
                out.extend_from_slice(block);
            }
            Frame::SynReply {
                stream_id,
                fin,
                block,
            } => {
                control(out, TYPE_SYN_REPLY, flag(*fin), 4 + block.len())?;
                out.put_u32(stream_id & STREAM_ID_MASK);
                out.extend_from_slice(block);
            }
            Frame::Headers {
                stream_id,
                fin,
                block,
            } => {
                control(out, TYPE_HEADERS, flag(*fin), 4 + block.len())?;
                out.put_u32(stream_id & STREAM_ID_MASK);
                out.extend_from_slice(block);
            }
            Frame::RstStream { stream_id, status } => {
                control(out, TYPE_RST_STREAM, 0, 8)?;
                out.put_u32(stream_id & STREAM_ID_MASK);
                out.put_u32(*status);
            }
            Frame::Settings { clear, entries } => {
                let flags = if *clear { FLAG_SETTINGS_CLEAR } else { 0 };
                let len = entries
                    .len()
                    .checked_mul(8)
                    .and_then(|n| n.checked_add(4))
                    .ok_or(FrameError::TooLarge(usize::MAX))?;
                control(out, TYPE_SETTINGS, flags, len)?;
                out.put_u32(entries.len() as u32);
                for e in entries {
                    out.put_u32(u32::from(e.flags) << 24 | (e.id & 0x00ff_ffff));
                    out.put_u32(e.value);
                }
            }
            Frame::Ping { id } => {
                control(out, TYPE_PING, 0, 4)?;
                out.put_u32(*id);
            }
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => {
                control(out, TYPE_GOAWAY, 0, 8)?;
                out.put_u32(last_good_stream_id & STREAM_ID_MASK);
                out.put_u32(*status);
            }
            Frame::WindowUpdate { stream_id, delta } => {
                control(out, TYPE_WINDOW_UPDATE, 0, 8)?;
                out.put_u32(stream_id & STREAM_ID_MASK);
                out.put_u32(delta & STREAM_ID_MASK);
            }
            Frame::Unknown {
                kind,
                flags,
                payload,
            } => {
                control(out, *kind, *flags, payload.len())?;
                out.extend_from_slice(payload);
            }
        }
        Ok(())
    }
}

fn flag(fin: bool) -> u8 {
    if fin { FLAG_FIN } else { 0 }
}

fn length(len: usize) -> Result<u32, FrameError> {
    if len > MAX_PAYLOAD {
        return Err(FrameError::TooLarge(len));
    }
    Ok(len as u32)
}

fn control(out: &mut Vec<u8>, kind: u16, flags: u8, len: usize) -> Result<(), FrameError> {
    let len = length(len)?;
    out.reserve(HEADER_LEN + len as usize);
    out.put_u16(0x8000 | VERSION);
    out.put_u16(kind);
    out.put_u32(u32::from(flags) << 24 | len);
    Ok(())
}
