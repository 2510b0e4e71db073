//! Kubernetes' channel protocols over WebSocket: the subprotocol names
//! and their negotiation, the framing of a channel's data in a message
//! (a channel byte, or a digit and base64), v5's close signal, and the
//! initial port frames of port-forward over WebSocket.
//!
//! Upstream: `apiserver/pkg/util/wsstream/conn.go`,
//! `apimachinery/pkg/util/remotecommand/constants.go`,
//! `kubelet/cri/streaming/{remotecommand,portforward}/websocket.go`.

mod status;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::{BufMut, Bytes, BytesMut};

use crate::ws::Message;

pub use status::{
    EXIT_CODE_CAUSE, NON_ZERO_EXIT_CODE_REASON, Status, StatusCause, StatusDetails, StatusError,
    TerminalSize, exit_code_from_status, parse_resize_stream,
};

/// The remote-command channel of a process's standard input.
pub const STDIN: u8 = 0;
/// The channel of standard output.
pub const STDOUT: u8 = 1;
/// The channel of standard error.
pub const STDERR: u8 = 2;
/// The channel of the command's final status (plain text before v4, a
/// JSON `Status` from v4 on).
pub const ERROR: u8 = 3;
/// The channel of terminal size changes (JSON [`TerminalSize`]).
pub const RESIZE: u8 = 4;
/// The first byte of v5's close signal, `[255, channel]`.
pub const CLOSE: u8 = 255;

/// A subprotocol of exec, attach or port-forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// No subprotocol header: treated as binary `channel.k8s.io`.
    Unnamed,
    /// `channel.k8s.io`: binary, a channel byte before the data.
    ChannelV1,
    /// `base64.channel.k8s.io`: text, a channel digit before base64 data.
    Base64V1,
    /// `v4.channel.k8s.io`: as `channel.k8s.io`, with a JSON status on
    /// the error channel (exit codes).
    ChannelV4,
    /// `v4.base64.channel.k8s.io`: the base64 variant of v4.
    Base64V4,
    /// `v5.channel.k8s.io`: as v4, binary, with the close signal.
    ChannelV5,
    /// `portforward.k8s.io`: port-forward over SPDY.
    PortForward,
    /// `SPDY/3.1+portforward.k8s.io`: SPDY port-forward tunnelled through
    /// WebSocket binary messages.
    PortForwardTunnel,
}

/// Every protocol, for lookups by name.
const ALL: [Protocol; 8] = [
    Protocol::Unnamed,
    Protocol::ChannelV1,
    Protocol::Base64V1,
    Protocol::ChannelV4,
    Protocol::Base64V4,
    Protocol::ChannelV5,
    Protocol::PortForward,
    Protocol::PortForwardTunnel,
];

/// The WebSocket subprotocols exec and attach accept.
pub const REMOTE_COMMAND_PROTOCOLS: &[Protocol] = &[
    Protocol::ChannelV5,
    Protocol::ChannelV4,
    Protocol::Base64V4,
    Protocol::ChannelV1,
    Protocol::Base64V1,
    Protocol::Unnamed,
];

/// The WebSocket subprotocols port-forward accepts with channel framing
/// (the kubelet's set; the SPDY tunnel is separate).
pub const PORT_FORWARD_PROTOCOLS: &[Protocol] =
    &[Protocol::ChannelV4, Protocol::Base64V4, Protocol::Unnamed];

impl Protocol {
    /// The name in `Sec-WebSocket-Protocol` (empty for [`Protocol::Unnamed`]).
    pub const fn name(self) -> &'static str {
        match self {
            Protocol::Unnamed => "",
            Protocol::ChannelV1 => "channel.k8s.io",
            Protocol::Base64V1 => "base64.channel.k8s.io",
            Protocol::ChannelV4 => "v4.channel.k8s.io",
            Protocol::Base64V4 => "v4.base64.channel.k8s.io",
            Protocol::ChannelV5 => "v5.channel.k8s.io",
            Protocol::PortForward => "portforward.k8s.io",
            Protocol::PortForwardTunnel => "SPDY/3.1+portforward.k8s.io",
        }
    }

    /// The protocol of a name, exactly as spelt.
    pub fn from_name(name: &str) -> Option<Protocol> {
        ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether data travels as text: a channel digit, then base64.
    pub const fn is_base64(self) -> bool {
        matches!(self, Protocol::Base64V1 | Protocol::Base64V4)
    }

    /// Whether the error channel carries a JSON `Status` (v4 and v5)
    /// rather than plain text.
    pub const fn has_status(self) -> bool {
        matches!(
            self,
            Protocol::ChannelV4 | Protocol::Base64V4 | Protocol::ChannelV5
        )
    }

    /// Whether a channel's end is signalled with `[255, channel]` (v5).
    pub const fn has_close_signal(self) -> bool {
        matches!(self, Protocol::ChannelV5)
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The protocol to speak: the first of the client's `offered` protocols,
/// in its order, that the server `supported`; with nothing offered, the
/// unnamed protocol if supported (upstream's `wsstream.handshake`).
pub fn negotiate(offered: &[String], supported: &[Protocol]) -> Option<Protocol> {
    if offered.is_empty() {
        return supported
            .contains(&Protocol::Unnamed)
            .then_some(Protocol::Unnamed);
    }
    offered
        .iter()
        .find_map(|name| supported.iter().copied().find(|p| p.name() == name))
}

/// One channel message, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Data on a channel (possibly empty: servers send an empty message
    /// to show the connection is up).
    Data { channel: u8, data: Bytes },
    /// v5's signal that the sender is done writing to `channel`.
    Close { channel: u8 },
}

/// A channel message that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    #[error("a close message is not channel data")]
    NotData,
    #[error("a close signal of {0} bytes (2 expected)")]
    InvalidCloseSignal(usize),
    #[error("a base64 message that is not text")]
    NotText,
    #[error("channel character {0:?} out of range")]
    InvalidChannel(char),
    #[error("invalid base64 data: {0}")]
    Base64(String),
    #[error("a port-forward header of {0} bytes (2 expected)")]
    InvalidPortHeader(usize),
}

/// The message carrying `data` on `channel`.
pub fn encode(protocol: Protocol, channel: u8, data: &[u8]) -> Message {
    if protocol.is_base64() {
        let mut text = String::with_capacity(2 + data.len().div_ceil(3) * 4);
        text.push(char::from(b'0'.wrapping_add(channel)));
        BASE64.encode_string(data, &mut text);
        Message::Text(text)
    } else {
        let mut buf = BytesMut::with_capacity(1 + data.len());
        buf.put_u8(channel);
        buf.put_slice(data);
        Message::Binary(buf.freeze())
    }
}

/// v5's signal that this side is done writing to `channel`.
pub fn encode_close(channel: u8) -> Message {
    Message::Binary(Bytes::copy_from_slice(&[CLOSE, channel]))
}

/// The channel and data of a message; `Ok(None)` for an empty message,
/// which upstream ignores. Binary and text messages are read alike, as
/// upstream's server does; the protocol decides the encoding.
pub fn decode(protocol: Protocol, message: Message) -> Result<Option<Frame>, ChannelError> {
    if protocol.is_base64() {
        let text = match message {
            Message::Text(text) => text,
            Message::Binary(bytes) => {
                String::from_utf8(Vec::from(bytes)).map_err(|_| ChannelError::NotText)?
            }
            Message::Close(_) => return Err(ChannelError::NotData),
        };
        let mut chars = text.chars();
        let Some(first) = chars.next() else {
            return Ok(None);
        };
        let channel = u8::try_from(u32::from(first))
            .map_err(|_| ChannelError::InvalidChannel(first))?
            .wrapping_sub(b'0');
        let data = BASE64
            .decode(chars.as_str())
            .map_err(|e| ChannelError::Base64(e.to_string()))?;
        return Ok(Some(Frame::Data {
            channel,
            data: Bytes::from(data),
        }));
    }
    let bytes = match message {
        Message::Binary(bytes) => bytes,
        Message::Text(text) => Bytes::from(text),
        Message::Close(_) => return Err(ChannelError::NotData),
    };
    match bytes.first() {
        None => Ok(None),
        Some(&CLOSE) if protocol.has_close_signal() => match bytes[..] {
            [_, channel] => Ok(Some(Frame::Close { channel })),
            _ => Err(ChannelError::InvalidCloseSignal(bytes.len())),
        },
        Some(&channel) => Ok(Some(Frame::Data {
            channel,
            data: bytes.slice(1..),
        })),
    }
}

/// The data and error channels of the `index`th port of a port-forward
/// over WebSocket (`2i` and `2i + 1`); `None` past the 128th port.
pub fn port_forward_channels(index: usize) -> Option<(u8, u8)> {
    let data = u8::try_from(index.checked_mul(2)?).ok()?;
    Some((data, data.checked_add(1)?))
}

/// The first message the server sends on each of a port's channels: the
/// port, little-endian (three bytes in the binary protocols).
pub fn encode_port_header(protocol: Protocol, channel: u8, port: u16) -> Message {
    encode(protocol, channel, &port.to_le_bytes())
}

/// The port in the data of a channel's first message.
pub fn decode_port_header(data: &[u8]) -> Result<u16, ChannelError> {
    match data {
        [lo, hi] => Ok(u16::from_le_bytes([*lo, *hi])),
        _ => Err(ChannelError::InvalidPortHeader(data.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHANNELS: [Protocol; 6] = [
        Protocol::Unnamed,
        Protocol::ChannelV1,
        Protocol::Base64V1,
        Protocol::ChannelV4,
        Protocol::Base64V4,
        Protocol::ChannelV5,
    ];

    #[test]
    fn names_round_trip() {
        for p in ALL {
            assert_eq!(Protocol::from_name(p.name()), Some(p));
            assert_eq!(p.to_string(), p.name());
        }
        assert_eq!(Protocol::from_name("v3.channel.k8s.io"), None);
        assert_eq!(Protocol::from_name("V4.CHANNEL.K8S.IO"), None);
    }

    #[test]
    fn round_trips_every_protocol() {
        let payloads: [&[u8]; 4] = [b"", b"foo\n", &[0, 255, 128, 10], &[0x5a; 1000]];
        for protocol in CHANNELS {
            for channel in [0u8, 1, 2, 3, 4, 9, 10, 200, 254] {
                for data in payloads {
                    let message = encode(protocol, channel, data);
                    assert_eq!(
                        matches!(message, Message::Text(_)),
                        protocol.is_base64(),
                        "{protocol}"
                    );
                    assert_eq!(
                        decode(protocol, message),
                        Ok(Some(Frame::Data {
                            channel,
                            data: Bytes::copy_from_slice(data)
                        })),
                        "{protocol} {channel} {data:?}"
                    );
                }
            }
        }
    }

    /// The byte sequences of upstream's examples.
    #[test]
    fn upstream_examples() {
        assert_eq!(
            encode(Protocol::ChannelV1, 0, b"foo\n"),
            Message::Binary(Bytes::from_static(&[0, 102, 111, 111, 10]))
        );
        // Upstream's example bytes (its comment says "foo\n", the bytes
        // carry "foo\n\n").
        assert_eq!(
            encode(Protocol::Base64V1, 0, b"foo\n\n"),
            Message::Text(
                String::from_utf8(vec![48, 90, 109, 57, 118, 67, 103, 111, 61]).expect("ascii")
            )
        );
        assert_eq!(
            decode(Protocol::Base64V4, Message::Text("1Cg==".into())),
            Ok(Some(Frame::Data {
                channel: 1,
                data: Bytes::from_static(b"\n")
            }))
        );
    }

    #[test]
    fn close_signal() {
        assert_eq!(
            encode_close(STDIN),
            Message::Binary(Bytes::from_static(&[255, 0]))
        );
        assert_eq!(
            decode(Protocol::ChannelV5, encode_close(STDIN)),
            Ok(Some(Frame::Close { channel: STDIN }))
        );
        assert_eq!(
            decode(
                Protocol::ChannelV5,
                Message::Binary(Bytes::from_static(&[255]))
            ),
            Err(ChannelError::InvalidCloseSignal(1))
        );
        assert_eq!(
            decode(
                Protocol::ChannelV5,
                Message::Binary(Bytes::from_static(&[255, 1, 2]))
            ),
            Err(ChannelError::InvalidCloseSignal(3))
        );
        // Before v5, 255 is just a channel number.
        assert_eq!(
            decode(Protocol::ChannelV4, encode_close(STDIN)),
            Ok(Some(Frame::Data {
                channel: 255,
                data: Bytes::from_static(&[0])
            }))
        );
    }

    #[test]
    fn malformed_messages() {
        let cases: Vec<(Protocol, Message, Result<Option<Frame>, ChannelError>)> = vec![
            (Protocol::ChannelV4, Message::Binary(Bytes::new()), Ok(None)),
            (Protocol::Base64V4, Message::Text(String::new()), Ok(None)),
            (
                Protocol::ChannelV4,
                Message::Close(None),
                Err(ChannelError::NotData),
            ),
            (
                Protocol::Base64V1,
                Message::Close(Some((1000, String::new()))),
                Err(ChannelError::NotData),
            ),
            (
                Protocol::Base64V4,
                Message::Text("1not base64!".into()),
                Err(ChannelError::Base64("Invalid symbol 32, offset 3.".into())),
            ),
            (
                Protocol::Base64V4,
                Message::Binary(Bytes::from_static(&[0xff, 0xfe])),
                Err(ChannelError::NotText),
            ),
            (
                Protocol::Base64V4,
                Message::Text("λAA==".into()),
                Err(ChannelError::InvalidChannel('λ')),
            ),
            // Binary messages in a base64 protocol are read as text.
            (
                Protocol::Base64V1,
                Message::Binary(Bytes::from_static(b"2aGk=")),
                Ok(Some(Frame::Data {
                    channel: 2,
                    data: Bytes::from_static(b"hi"),
                })),
            ),
            // Text messages in a binary protocol are read as bytes.
            (
                Protocol::ChannelV1,
                Message::Text("\u{1}hi".into()),
                Ok(Some(Frame::Data {
                    channel: 1,
                    data: Bytes::from_static(b"hi"),
                })),
            ),
        ];
        for (protocol, message, want) in cases {
            let shown = format!("{protocol} {message:?}");
            let got = decode(protocol, message);
            match (&got, &want) {
                (Err(ChannelError::Base64(_)), Err(ChannelError::Base64(_))) => {}
                _ => assert_eq!(got, want, "{shown}"),
            }
        }
    }

    #[test]
    fn negotiation_follows_the_client() {
        let offer = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let cases: Vec<(Vec<String>, &[Protocol], Option<Protocol>)> = vec![
            (
                offer(&["v5.channel.k8s.io", "v4.channel.k8s.io"]),
                REMOTE_COMMAND_PROTOCOLS,
                Some(Protocol::ChannelV5),
            ),
            (
                offer(&["v4.channel.k8s.io", "v5.channel.k8s.io"]),
                REMOTE_COMMAND_PROTOCOLS,
                Some(Protocol::ChannelV4),
            ),
            (
                offer(&["v5.channel.k8s.io", "v4.base64.channel.k8s.io"]),
                PORT_FORWARD_PROTOCOLS,
                Some(Protocol::Base64V4),
            ),
            (
                offer(&[]),
                REMOTE_COMMAND_PROTOCOLS,
                Some(Protocol::Unnamed),
            ),
            (offer(&[]), &[Protocol::ChannelV5], None),
            (
                offer(&["v9.channel.k8s.io"]),
                REMOTE_COMMAND_PROTOCOLS,
                None,
            ),
            (
                offer(&["SPDY/3.1+portforward.k8s.io"]),
                &[Protocol::PortForwardTunnel],
                Some(Protocol::PortForwardTunnel),
            ),
        ];
        for (offered, supported, want) in cases {
            assert_eq!(negotiate(&offered, supported), want, "{offered:?}");
        }
    }

    #[test]
    fn protocol_properties() {
        let v5 = Protocol::ChannelV5;
        assert!(v5.has_status() && v5.has_close_signal() && !v5.is_base64());
        let b4 = Protocol::Base64V4;
        assert!(b4.has_status() && !b4.has_close_signal() && b4.is_base64());
        let v1 = Protocol::ChannelV1;
        assert!(!v1.has_status() && !v1.has_close_signal() && !v1.is_base64());
        assert!(!Protocol::Unnamed.has_status() && !Protocol::Unnamed.is_base64());
    }

    #[test]
    fn port_forward_headers() {
        assert_eq!(port_forward_channels(0), Some((0, 1)));
        assert_eq!(port_forward_channels(3), Some((6, 7)));
        assert_eq!(port_forward_channels(127), Some((254, 255)));
        assert_eq!(port_forward_channels(128), None);
        assert_eq!(
            encode_port_header(Protocol::ChannelV4, 2, 8080),
            Message::Binary(Bytes::from_static(&[2, 0x90, 0x1f]))
        );
        for protocol in PORT_FORWARD_PROTOCOLS {
            let message = encode_port_header(*protocol, 3, 443);
            let Ok(Some(Frame::Data { channel, data })) = decode(*protocol, message) else {
                panic!("{protocol}");
            };
            assert_eq!((channel, decode_port_header(&data)), (3, Ok(443)));
        }
        assert_eq!(
            decode_port_header(&[1]),
            Err(ChannelError::InvalidPortHeader(1))
        );
        assert_eq!(
            decode_port_header(&[1, 2, 3]),
            Err(ChannelError::InvalidPortHeader(3))
        );
    }
}
