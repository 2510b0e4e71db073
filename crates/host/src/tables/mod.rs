//! Every nftables table the node programs, in one place: the agent's
//! own ([`agent`]: masquerade, hostPorts, the tests' egress guard) and the
//! service proxy's ([`proxy`]: its sets, maps, dispatch chains, marks and
//! fixed chains), with the protocol type they share. The rules each
//! Service adds are computed by the proxy from its model; their layout,
//! names, priorities and marks are declared here, so that the node's
//! tables can be read — and kept from colliding — side by side.

pub mod agent;
pub mod proxy;

/// A transport protocol a Service port can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// The API's name (`TCP`, the default when unset).
    pub fn parse(api: Option<&str>) -> Option<Protocol> {
        match api.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// nftables' name, and the one in chain names.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}
