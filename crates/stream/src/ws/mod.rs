//! WebSocket (RFC 6455), both roles, over any tokio byte stream.
//!
//! - [`frame`]: the wire format of one frame, decoding with a size bound
//!   and encoding with or without a mask;
//! - [`handshake`]: the server's side of the opening handshake — its
//!   checks and its 101 headers;
//! - [`client`]: a client that dials over a raw connection;
//! - `conn`: a connection split into a [`Reader`] that yields whole
//!   messages (answering pings itself) and a cloneable [`Writer`].
//!
//! Extensions (compression) are never negotiated, so the reserved bits
//! must always be clear.

pub mod client;
mod conn;
pub mod frame;
pub mod handshake;
mod message;

use bytes::Bytes;

pub use client::{ConnectError, connect};
pub use conn::{Reader, WebSocket, Writer};
pub use frame::{DEFAULT_MAX_MESSAGE_SIZE, FrameError, Opcode};
pub use handshake::{
    HandshakeError, accept_key, handshake_headers, handshake_response, is_websocket_request,
    requested_protocols,
};

/// Normal closure.
pub const CLOSE_NORMAL: u16 = 1000;
/// The endpoint is going away (a server shutting down, a page left).
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// The peer broke the protocol.
pub const CLOSE_PROTOCOL_ERROR: u16 = 1002;
/// The peer sent a kind of data this endpoint does not accept.
pub const CLOSE_UNSUPPORTED_DATA: u16 = 1003;
/// A text message was not UTF-8 (or other data inconsistent with its type).
pub const CLOSE_INVALID_DATA: u16 = 1007;
/// The message violates this endpoint's policy.
pub const CLOSE_POLICY: u16 = 1008;
/// The message is larger than this endpoint accepts.
pub const CLOSE_TOO_BIG: u16 = 1009;
/// The endpoint hit an unexpected condition.
pub const CLOSE_INTERNAL_ERROR: u16 = 1011;

/// Which end of the connection this endpoint is. Clients mask what they
/// send and expect unmasked frames; servers the reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Server,
    Client,
}

/// One whole message, reassembled from its fragments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A text message (always valid UTF-8).
    Text(String),
    /// A binary message.
    Binary(Bytes),
    /// The peer's close frame: its status code and reason, or `None` when
    /// the frame carried no status.
    Close(Option<(u16, String)>),
}

/// What went wrong on an established connection.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("websocket I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("websocket protocol error: {0}")]
    Protocol(#[from] FrameError),
    /// The connection ended in the middle of a frame or a fragmented
    /// message.
    #[error("the connection ended in the middle of a message")]
    Truncated,
    /// A data frame was to be sent after this endpoint's close frame.
    #[error("the close frame was already sent")]
    Closed,
}

impl Error {
    /// The status code to close the connection with after this error, for
    /// errors the peer caused: 1002 for a protocol error, 1007 for a text
    /// message that is not UTF-8, 1009 for a message over the size limit.
    pub fn close_code(&self) -> Option<u16> {
        match self {
            Error::Protocol(e) => Some(e.close_code()),
            Error::Io(_) | Error::Truncated | Error::Closed => None,
        }
    }
}
