//! The wire protocols of `exec`, `attach` and `port-forward`, the project's
//! own code (no SPDY crate with a permissive licence exists):
//!
//! - [`ws`]: WebSocket (RFC 6455) framing and handshake, both roles;
//! - [`channel`]: Kubernetes' channel protocols over WebSocket
//!   (`channel.k8s.io` … `v5.channel.k8s.io`, the base64 variants, v5's
//!   close signal) and the remote-command status;
//! - [`spdy`]: SPDY/3.1 framing, header blocks and a multiplexed session,
//!   as Kubernetes' `httpstream/spdy` (moby/spdystream) speaks it;
//! - [`upgrade`] and [`splice`]: an upgrade forwarded to a backend and the
//!   two connections relayed byte for byte after its 101;
//! - [`translate`]: a WebSocket client's exec or port-forward carried to a
//!   node that speaks SPDY (the API server's stream translator and
//!   tunnel);
//! - [`tls`]: TLS to an endpoint reached by address, unverified as
//!   upstream's proxies and probes.
//!
//! Upstream's sources are the specification:
//! `staging/src/k8s.io/apimachinery/pkg/util/httpstream` and
//! `staging/src/k8s.io/client-go/tools/remotecommand`.

pub mod channel;
pub mod spdy;
pub mod splice;
pub mod tls;
pub mod translate;
pub mod upgrade;
pub mod ws;
