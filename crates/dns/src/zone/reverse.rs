//! Reverse names (`in-addr.arpa`, `ip6.arpa`): PTR for ClusterIPs (to the
//! Service's name; the first Service if two claim one) and for ready
//! endpoints (to `<endpoint>.<svc>.<ns>.svc.<zone>`, one per Service that
//! selects the address), as CoreDNS answers them.
//!
//! An address nobody has is forwarded (CoreDNS's `fallthrough in-addr.arpa
//! ip6.arpa`) unless it lies in one of the zone's reverse ranges — the
//! service and cluster CIDRs — where this server is the only one that
//! could know it: NXDOMAIN here, instead of a query about cluster
//! addresses leaving the node.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::Zone;
use super::lookup::{Answer, Lookup};
use crate::wire::{Name, Question, Rcode, Record, rtype};

/// Answers a name outside the cluster domain, if it is a reverse name this
/// zone knows; `labels` are the question's, lowercase.
pub(super) fn lookup(zone: &Zone, q: &Question, labels: &[&[u8]]) -> Lookup {
    match labels {
        [rest @ .., b"in-addr", b"arpa"] => ipv4(zone, q, rest),
        [rest @ .., b"ip6", b"arpa"] => ipv6(zone, q, rest),
        _ => Lookup::NotOurs,
    }
}

fn ipv4(zone: &Zone, q: &Question, rest: &[&[u8]]) -> Lookup {
    let skip = rest.len();
    // The address's octets, most significant first (the name's last).
    let octets: Option<Vec<u8>> = rest.iter().rev().take(4).map(|l| octet(l)).collect();
    let Some(octets) = octets else {
        return Lookup::NotOurs;
    };
    if octets.len() < 4 {
        // A name above whole addresses: it exists (empty) if its block is
        // inside one of the zone's ranges.
        let inside = !octets.is_empty()
            && zone.reverse_cidrs.iter().any(|cidr| {
                let mut base = [0u8; 4];
                base[..octets.len()].copy_from_slice(&octets);
                let prefix = 8 * octets.len() as u8;
                prefix >= cidr.prefix && cidr.contains(Ipv4Addr::from(base))
            });
        return if inside {
            Lookup::Answer(zone.nodata(q, skip))
        } else {
            Lookup::NotOurs
        };
    }
    let ip = Ipv4Addr::new(octets[0], octets[1], octets[2], octets[3]);
    let ours = zone.reverse_cidrs.iter().any(|cidr| cidr.contains(ip));
    if rest.len() == 4 {
        let names = names_of(zone, IpAddr::V4(ip));
        if !names.is_empty() {
            return Lookup::Answer(pointers(zone, q, skip, names));
        }
    }
    if ours {
        Lookup::Answer(zone.nxdomain(q, skip))
    } else {
        Lookup::NotOurs
    }
}

fn ipv6(zone: &Zone, q: &Question, rest: &[&[u8]]) -> Lookup {
    if rest.len() != 32 {
        return Lookup::NotOurs;
    }
    let mut value: u128 = 0;
    for label in rest.iter().rev() {
        let Some(nibble) = nibble(label) else {
            return Lookup::NotOurs;
        };
        value = value << 4 | u128::from(nibble);
    }
    let names = names_of(zone, IpAddr::V6(Ipv6Addr::from(value)));
    if names.is_empty() {
        return Lookup::NotOurs;
    }
    Lookup::Answer(pointers(zone, q, rest.len(), names))
}

fn pointers(zone: &Zone, q: &Question, skip: usize, names: Vec<Name>) -> Answer {
    if q.qtype != rtype::PTR && q.qtype != rtype::ANY {
        return zone.nodata(q, skip);
    }
    Answer {
        answers: names
            .into_iter()
            .map(|target| Record::ptr(q.name.clone(), zone.ttl, target))
            .collect(),
        ..Answer::rcode(Rcode::NOERROR)
    }
}

/// The names an address has: its Service's if it is a ClusterIP, else
/// one per Service whose ready endpoint it is.
fn names_of(zone: &Zone, ip: IpAddr) -> Vec<Name> {
    if let Some(service) = zone.cluster_ips.get(&ip).and_then(|refs| refs.first()) {
        return zone
            .in_zone(&[
                service.name.as_bytes(),
                service.namespace.as_bytes(),
                b"svc",
            ])
            .into_iter()
            .collect();
    }
    zone.endpoint_ips
        .get(&ip)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            zone.in_zone(&[
                e.label.as_bytes(),
                e.service.name.as_bytes(),
                e.service.namespace.as_bytes(),
                b"svc",
            ])
            .ok()
        })
        .collect()
}

/// A decimal octet as a reverse name writes it: no sign, no leading zero.
fn octet(label: &[u8]) -> Option<u8> {
    if label.is_empty() || label.len() > 3 || (label.len() > 1 && label[0] == b'0') {
        return None;
    }
    std::str::from_utf8(label).ok()?.parse().ok()
}

fn nibble(label: &[u8]) -> Option<u8> {
    match label {
        [c] => (*c as char).to_digit(16).map(|d| d as u8),
        _ => None,
    }
}

/// The reverse name of an address (`10.43.0.10` →
/// `10.0.43.10.in-addr.arpa.`; IPv6 as 32 nibbles under `ip6.arpa.`).
pub fn reverse_name(ip: IpAddr) -> Name {
    let text = match ip {
        IpAddr::V4(ip) => {
            let [a, b, c, d] = ip.octets();
            format!("{d}.{c}.{b}.{a}.in-addr.arpa")
        }
        IpAddr::V6(ip) => {
            let mut text = String::with_capacity(72);
            for byte in ip.octets().iter().rev() {
                text.push_str(&format!("{:x}.{:x}.", byte & 0xF, byte >> 4));
            }
            text.push_str("ip6.arpa");
            text
        }
    };
    // Always a valid name: at most 34 short labels.
    Name::from_text(&text).unwrap_or_else(|_| Name::root())
}
