//! IP address and CIDR rules with upstream's words
//! (`apimachinery/pkg/util/validation/ip.go` and `ValidateNonSpecialIP`):
//! addresses parsed as Go's `ParseIPSloppy` does, which takes IPv4 octets
//! with leading zeros as decimal.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde_json::Value;

use crate::Cause;

const INVALID_IP: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";
const INVALID_CIDR: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";

/// An address as Go's `netutils.ParseIPSloppy` reads it.
pub fn parse_ip(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    // Leading zeros: "010.001.0.1" is 10.1.0.1 to Go, an error to Rust.
    let octets: Vec<&str> = text.split('.').collect();
    if octets.len() != 4 {
        return None;
    }
    let mut parsed = [0u8; 4];
    for (slot, octet) in parsed.iter_mut().zip(&octets) {
        if octet.is_empty() || octet.len() > 3 || !octet.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *slot = octet.parse().ok()?;
    }
    Some(IpAddr::V4(Ipv4Addr::from(parsed)))
}

/// Whether `text` is a CIDR as Go's `netutils.ParseCIDRSloppy` reads it.
pub fn is_cidr(text: &str) -> bool {
    let Some((ip, prefix)) = text.split_once('/') else {
        return false;
    };
    let bits = match parse_ip(ip) {
        Some(IpAddr::V4(_)) => 32,
        Some(IpAddr::V6(_)) => 128,
        None => return false,
    };
    !prefix.is_empty()
        && prefix.bytes().all(|b| b.is_ascii_digit())
        && prefix.parse::<u32>().is_ok_and(|p| p <= bits)
}

/// Upstream's `IsValidIP`: the cause when `text` is no address.
pub fn valid_ip(field: impl Into<String>, text: &str) -> Option<Cause> {
    parse_ip(text)
        .is_none()
        .then(|| Cause::invalid(field, &Value::String(text.into()), INVALID_IP))
}

/// Upstream's `IsValidCIDR`.
pub fn valid_cidr(field: impl Into<String>, text: &str) -> Option<Cause> {
    (!is_cidr(text)).then(|| Cause::invalid(field, &Value::String(text.into()), INVALID_CIDR))
}

/// Upstream's `ValidateNonSpecialIP`: no unspecified, loopback or
/// link-local address (external IPs, endpoints).
pub fn non_special_ip(field: &str, text: &str, causes: &mut Vec<Cause>) {
    let value = Value::String(text.into());
    let Some(ip) = parse_ip(text) else {
        causes.push(Cause::invalid(field, &value, "must be a valid IP address"));
        return;
    };
    // Go tests an IPv4-mapped IPv6 address as the IPv4 address it maps.
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let (unspecified, loopback, link_local, link_local_multicast) = match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            (
                v4.is_unspecified(),
                v4.is_loopback(),
                v4.is_link_local(),
                a == 224 && b == 0 && c == 0,
            )
        }
        IpAddr::V6(v6) => (
            v6.is_unspecified(),
            v6.is_loopback(),
            is_v6_link_local(&v6),
            v6.octets()[0] == 0xff && v6.octets()[1] & 0x0f == 0x02,
        ),
    };
    if unspecified {
        let why = format!("may not be unspecified ({text})");
        causes.push(Cause::invalid(field, &value, &why));
    }
    if loopback {
        causes.push(Cause::invalid(
            field,
            &value,
            "may not be in the loopback range (127.0.0.0/8, ::1/128)",
        ));
    }
    if link_local {
        causes.push(Cause::invalid(
            field,
            &value,
            "may not be in the link-local range (169.254.0.0/16, fe80::/10)",
        ));
    }
    if link_local_multicast {
        causes.push(Cause::invalid(
            field,
            &value,
            "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)",
        ));
    }
}

fn is_v6_link_local(ip: &Ipv6Addr) -> bool {
    ip.segments()[0] & 0xffc0 == 0xfe80
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_ranges_parse_as_go_reads_them() {
        assert_eq!(parse_ip("010.0.0.1"), Some("10.0.0.1".parse().expect("ip")));
        assert!(parse_ip("2001:db8::1").is_some());
        assert!(parse_ip("10.0.0").is_none());
        assert!(parse_ip("256.0.0.1").is_none());
        assert!(is_cidr("10.0.0.0/8") && is_cidr("::/0") && is_cidr("1.2.3.4/32"));
        assert!(!is_cidr("10.0.0.0/33") && !is_cidr("10.0.0.0") && !is_cidr("x/8"));
    }

    #[test]
    fn special_addresses_are_named() {
        let messages = |ip: &str| {
            let mut causes = Vec::new();
            non_special_ip("f", ip, &mut causes);
            causes.into_iter().map(|c| c.message).collect::<Vec<_>>()
        };
        assert_eq!(
            messages("0.0.0.0"),
            ["Invalid value: \"0.0.0.0\": may not be unspecified (0.0.0.0)"]
        );
        assert!(messages("127.0.0.2")[0].contains("loopback"));
        assert!(messages("::ffff:127.0.0.1")[0].contains("loopback"));
        assert!(messages("169.254.1.1")[0].contains("link-local range"));
        assert!(messages("fe80::1")[0].contains("link-local range"));
        assert!(messages("224.0.0.5")[0].contains("link-local multicast"));
        assert!(messages("ff02::1")[0].contains("link-local multicast"));
        assert!(messages("203.0.113.7").is_empty());
        assert!(
            messages("239.1.1.1").is_empty(),
            "other multicast is allowed"
        );
    }
}
