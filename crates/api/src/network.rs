//! Address ranges of the cluster (ARCHITECTURE.md §5): IPv4 CIDR arithmetic
//! for the service and pod ranges, the NodePort range, and the cluster's
//! network defaults (k3s's) — defined here once for the API server, the
//! controllers and every node component.

use std::net::Ipv4Addr;

/// The default service CIDR.
pub const SERVICE_CIDR: &str = "10.43.0.0/16";
/// The default cluster (pod) CIDR: every node's podCIDR is cut from it.
pub const CLUSTER_CIDR: &str = "10.42.0.0/16";
/// The default address of the cluster DNS Service (`kube-system/kube-dns`).
pub const CLUSTER_DNS: Ipv4Addr = Ipv4Addr::new(10, 43, 0, 10);
/// The default cluster domain.
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// The default NodePort range (inclusive).
pub const NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;

/// An IPv4 CIDR block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub base: Ipv4Addr,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Option<Cidr> {
        let (ip, prefix) = text.split_once('/')?;
        let ip: Ipv4Addr = ip.parse().ok()?;
        let prefix: u8 = prefix.parse().ok().filter(|p| *p <= 32)?;
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - prefix)
        };
        Some(Cidr {
            base: Ipv4Addr::from(u32::from(ip) & mask),
            prefix,
        })
    }

    /// Addresses in the block.
    pub fn size(&self) -> u64 {
        1u64 << (32 - self.prefix)
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - self.prefix)
        };
        u32::from(ip) & mask == u32::from(self.base)
    }

    /// The address at `offset` from the start of the block.
    pub fn nth(&self, offset: u64) -> Option<Ipv4Addr> {
        (offset < self.size())
            .then(|| Ipv4Addr::from(u32::from(self.base).wrapping_add(offset as u32)))
    }

    /// The offsets services may be given: not the network address, not the
    /// broadcast address.
    pub fn usable(&self) -> std::ops::Range<u64> {
        1..self.size().saturating_sub(1)
    }

    /// The first host address: a node's bridge on its podCIDR (the pods'
    /// gateway).
    pub fn gateway(&self) -> Ipv4Addr {
        self.nth(1).unwrap_or(self.base)
    }
}

/// A CIDR that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidCidr(pub String);

impl std::fmt::Display for InvalidCidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid CIDR address: {}", self.0)
    }
}

impl std::error::Error for InvalidCidr {}

impl std::str::FromStr for Cidr {
    type Err = InvalidCidr;

    fn from_str(text: &str) -> Result<Cidr, InvalidCidr> {
        Cidr::parse(text).ok_or_else(|| InvalidCidr(text.to_string()))
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

/// The default cluster CIDR, parsed.
pub fn default_cluster_cidr() -> Cidr {
    Cidr {
        base: Ipv4Addr::new(10, 42, 0, 0),
        prefix: 16,
    }
}

/// The default service CIDR, parsed.
pub fn default_service_cidr() -> Cidr {
    Cidr {
        base: Ipv4Addr::new(10, 43, 0, 0),
        prefix: 16,
    }
}

/// The address of the `kubernetes` service: the first of the range.
pub fn kubernetes_service_ip(cidr: &Cidr) -> Ipv4Addr {
    cidr.nth(1).unwrap_or(cidr.base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_and_count() {
        let c = Cidr::parse(SERVICE_CIDR).expect("valid");
        assert_eq!(c.size(), 65536);
        assert_eq!(c.nth(1), Some(Ipv4Addr::new(10, 43, 0, 1)));
        assert_eq!(c.nth(256 + 10), Some(Ipv4Addr::new(10, 43, 1, 10)));
        assert_eq!(c.nth(65536), None);
        assert!(c.contains(Ipv4Addr::new(10, 43, 255, 254)));
        assert!(!c.contains(Ipv4Addr::new(10, 42, 0, 1)));
        assert_eq!(Cidr::parse("10.43.7.7/16"), Some(c));
        assert_eq!(c.usable(), 1..65535);
        assert_eq!(kubernetes_service_ip(&c), Ipv4Addr::new(10, 43, 0, 1));
        assert!(Cidr::parse("10.43.0.0/33").is_none());
        assert!(Cidr::parse("nope").is_none());
        assert_eq!(c.to_string(), SERVICE_CIDR);
        assert_eq!(c, default_service_cidr());
        assert_eq!(CLUSTER_CIDR.parse::<Cidr>(), Ok(default_cluster_cidr()));
        assert!(default_service_cidr().contains(CLUSTER_DNS));
        assert_eq!(
            "10.42.3.0/24".parse::<Cidr>().map(|c| c.gateway()),
            Ok(Ipv4Addr::new(10, 42, 3, 1))
        );
        assert!("10.42.0.0".parse::<Cidr>().is_err());
    }
}
