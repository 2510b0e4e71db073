//! SPDY/3.1 as Kubernetes speaks it (`httpstream/spdy` over
//! moby/spdystream) for exec, attach and port-forward, both roles:
//!
//! - [`frame`]: frames on the wire;
//! - [`headers`]: name/value header blocks and their zlib contexts with the
//!   SPDY/3 dictionary;
//! - [`session`]: the multiplexed session ([`Session`], [`Incoming`]);
//! - [`stream`]: one stream ([`Stream`]: `AsyncRead` + `AsyncWrite`);
//! - [`handshake`]: the HTTP upgrade that precedes it.
//!
//! What spdystream does, and this module mirrors: no flow control (it
//! neither sends nor heeds WINDOW_UPDATE and SETTINGS), one DATA frame per
//! write, a SYN_REPLY for every accepted stream before anything else on it
//! (Kubernetes' opener waits for it, 30 s), PINGs of the peer's parity
//! echoed, GOAWAY ending the session, a reset stream reading as ended.

pub mod frame;
pub mod handshake;
pub mod headers;
mod reader;
pub mod session;
pub mod stream;
mod writer;

pub use handshake::{HEADER_PROTOCOL_VERSION, UPGRADE};
pub use headers::Headers;
pub use session::{Ended, Error, Incoming, Session};
pub use stream::{RecvHalf, SendHalf, Stream};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod session_tests;
