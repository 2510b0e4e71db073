//! Resource records: their types and data, read from a message (names in
//! the data decompressed, so a forwarded record can be written into
//! another message) and shown in zone-file form for logs and tests.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::WireError;
use super::name::{self, Name};

/// Record types this server names (others travel as numbers).
pub mod rtype {
    pub const A: u16 = 1;
    pub const NS: u16 = 2;
    pub const MD: u16 = 3;
    pub const MF: u16 = 4;
    pub const CNAME: u16 = 5;
    pub const SOA: u16 = 6;
    pub const MB: u16 = 7;
    pub const MG: u16 = 8;
    pub const MR: u16 = 9;
    pub const PTR: u16 = 12;
    pub const MINFO: u16 = 14;
    pub const MX: u16 = 15;
    pub const TXT: u16 = 16;
    pub const RP: u16 = 17;
    pub const AFSDB: u16 = 18;
    pub const RT: u16 = 21;
    pub const AAAA: u16 = 28;
    pub const SRV: u16 = 33;
    pub const DNAME: u16 = 39;
    pub const OPT: u16 = 41;
    pub const IXFR: u16 = 251;
    pub const AXFR: u16 = 252;
    pub const ANY: u16 = 255;

    /// The mnemonic of a type, or `TYPEnnn` (RFC 3597).
    pub fn name(rtype: u16) -> std::borrow::Cow<'static, str> {
        let known = match rtype {
            A => "A",
            NS => "NS",
            CNAME => "CNAME",
            SOA => "SOA",
            PTR => "PTR",
            MX => "MX",
            TXT => "TXT",
            AAAA => "AAAA",
            SRV => "SRV",
            DNAME => "DNAME",
            OPT => "OPT",
            AXFR => "AXFR",
            IXFR => "IXFR",
            ANY => "ANY",
            _ => return format!("TYPE{rtype}").into(),
        };
        known.into()
    }
}

/// The Internet class, the only one served.
pub const CLASS_IN: u16 = 1;

/// A start of authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Soa {
    pub mname: Name,
    pub rname: Name,
    pub serial: u32,
    pub refresh: u32,
    pub retry: u32,
    pub expire: u32,
    pub minimum: u32,
}

/// A record's data, names decompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RData {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    /// NS, CNAME, PTR, DNAME and the obsolete single-name types.
    Name(Name),
    /// MINFO and RP: two names.
    Pair(Name, Name),
    /// MX, AFSDB and RT: a preference and a name.
    Exchange {
        preference: u16,
        exchange: Name,
    },
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        target: Name,
    },
    Soa(Box<Soa>),
    /// Anything else, as it came (TXT, and types with no names inside).
    Raw(Box<[u8]>),
}

impl RData {
    /// TXT data of one character-string (at most 255 octets kept).
    pub fn txt(text: &str) -> RData {
        let bytes = &text.as_bytes()[..text.len().min(255)];
        let mut data = Vec::with_capacity(bytes.len() + 1);
        data.push(bytes.len() as u8);
        data.extend_from_slice(bytes);
        RData::Raw(data.into())
    }

    /// Reads `len` octets of data of type `rtype` at `at` in `message`.
    pub fn read(message: &[u8], rtype: u16, at: usize, len: usize) -> Result<RData, WireError> {
        let end = at + len;
        let data = message.get(at..end).ok_or(WireError::Truncated(at))?;
        let bad = || WireError::BadRData { rtype };
        let name_at = |at: usize| -> Result<(Name, usize), WireError> {
            let (name, next) = name::read(message, at)?;
            if next > end {
                return Err(bad());
            }
            Ok((name, next))
        };
        let exact = |next: usize, rdata: RData| {
            if next == end { Ok(rdata) } else { Err(bad()) }
        };
        match rtype {
            rtype::A => {
                let octets: [u8; 4] = data.try_into().map_err(|_| bad())?;
                Ok(RData::A(Ipv4Addr::from(octets)))
            }
            rtype::AAAA => {
                let octets: [u8; 16] = data.try_into().map_err(|_| bad())?;
                Ok(RData::Aaaa(Ipv6Addr::from(octets)))
            }
            rtype::NS
            | rtype::MD
            | rtype::MF
            | rtype::CNAME
            | rtype::MB
            | rtype::MG
            | rtype::MR
            | rtype::PTR
            | rtype::DNAME => {
                let (name, next) = name_at(at)?;
                exact(next, RData::Name(name))
            }
            rtype::MINFO | rtype::RP => {
                let (first, next) = name_at(at)?;
                let (second, next) = name_at(next)?;
                exact(next, RData::Pair(first, second))
            }
            rtype::MX | rtype::AFSDB | rtype::RT => {
                let preference = u16_at(message, at).ok_or_else(bad)?;
                let (exchange, next) = name_at(at + 2)?;
                exact(
                    next,
                    RData::Exchange {
                        preference,
                        exchange,
                    },
                )
            }
            rtype::SRV => {
                let field = |i: usize| u16_at(message, at + 2 * i).ok_or_else(bad);
                let (priority, weight, port) = (field(0)?, field(1)?, field(2)?);
                let (target, next) = name_at(at + 6)?;
                exact(
                    next,
                    RData::Srv {
                        priority,
                        weight,
                        port,
                        target,
                    },
                )
            }
            rtype::SOA => {
                let (mname, next) = name_at(at)?;
                let (rname, next) = name_at(next)?;
                let field = |i: usize| u32_at(message, next + 4 * i).ok_or_else(bad);
                let soa = Soa {
                    mname,
                    rname,
                    serial: field(0)?,
                    refresh: field(1)?,
                    retry: field(2)?,
                    expire: field(3)?,
                    minimum: field(4)?,
                };
                exact(next + 20, RData::Soa(Box::new(soa)))
            }
            _ => Ok(RData::Raw(data.into())),
        }
    }
}

pub(crate) fn u16_at(message: &[u8], at: usize) -> Option<u16> {
    let bytes = message.get(at..at + 2)?;
    Some(u16::from_be_bytes([bytes[0], bytes[1]]))
}

pub(crate) fn u32_at(message: &[u8], at: usize) -> Option<u32> {
    let bytes = message.get(at..at + 4)?;
    Some(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// A resource record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub name: Name,
    pub rtype: u16,
    pub class: u16,
    pub ttl: u32,
    pub data: RData,
}

impl Record {
    /// A record of class IN.
    pub fn new(name: Name, rtype: u16, ttl: u32, data: RData) -> Record {
        Record {
            name,
            rtype,
            class: CLASS_IN,
            ttl,
            data,
        }
    }

    pub fn a(name: Name, ttl: u32, ip: Ipv4Addr) -> Record {
        Record::new(name, rtype::A, ttl, RData::A(ip))
    }

    pub fn aaaa(name: Name, ttl: u32, ip: Ipv6Addr) -> Record {
        Record::new(name, rtype::AAAA, ttl, RData::Aaaa(ip))
    }

    /// An A or AAAA record, as the address is.
    pub fn address(name: Name, ttl: u32, ip: std::net::IpAddr) -> Record {
        match ip {
            std::net::IpAddr::V4(ip) => Record::a(name, ttl, ip),
            std::net::IpAddr::V6(ip) => Record::aaaa(name, ttl, ip),
        }
    }

    pub fn cname(name: Name, ttl: u32, target: Name) -> Record {
        Record::new(name, rtype::CNAME, ttl, RData::Name(target))
    }

    pub fn ptr(name: Name, ttl: u32, target: Name) -> Record {
        Record::new(name, rtype::PTR, ttl, RData::Name(target))
    }

    pub fn ns(name: Name, ttl: u32, target: Name) -> Record {
        Record::new(name, rtype::NS, ttl, RData::Name(target))
    }

    pub fn srv(
        name: Name,
        ttl: u32,
        priority: u16,
        weight: u16,
        port: u16,
        target: Name,
    ) -> Record {
        let data = RData::Srv {
            priority,
            weight,
            port,
            target,
        };
        Record::new(name, rtype::SRV, ttl, data)
    }

    pub fn soa(name: Name, ttl: u32, soa: Soa) -> Record {
        Record::new(name, rtype::SOA, ttl, RData::Soa(Box::new(soa)))
    }

    pub fn txt(name: Name, ttl: u32, text: &str) -> Record {
        Record::new(name, rtype::TXT, ttl, RData::txt(text))
    }
}

impl fmt::Display for Record {
    /// Zone-file form, as `dig` prints it:
    /// `web.default.svc.cluster.local. 5 IN A 10.43.0.5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let class = if self.class == CLASS_IN {
            "IN".to_string()
        } else {
            format!("CLASS{}", self.class)
        };
        write!(
            f,
            "{} {} {class} {} ",
            self.name,
            self.ttl,
            rtype::name(self.rtype)
        )?;
        match &self.data {
            RData::A(ip) => write!(f, "{ip}"),
            RData::Aaaa(ip) => write!(f, "{ip}"),
            RData::Name(name) => write!(f, "{name}"),
            RData::Pair(a, b) => write!(f, "{a} {b}"),
            RData::Exchange {
                preference,
                exchange,
            } => write!(f, "{preference} {exchange}"),
            RData::Srv {
                priority,
                weight,
                port,
                target,
            } => write!(f, "{priority} {weight} {port} {target}"),
            RData::Soa(soa) => write!(
                f,
                "{} {} {} {} {} {} {}",
                soa.mname, soa.rname, soa.serial, soa.refresh, soa.retry, soa.expire, soa.minimum
            ),
            RData::Raw(data) if self.rtype == rtype::TXT => {
                let mut rest = &data[..];
                let mut first = true;
                while let Some((&len, tail)) = rest.split_first() {
                    let len = usize::from(len).min(tail.len());
                    if !first {
                        f.write_str(" ")?;
                    }
                    first = false;
                    write!(f, "\"{}\"", String::from_utf8_lossy(&tail[..len]))?;
                    rest = &tail[len..];
                }
                Ok(())
            }
            RData::Raw(data) => {
                write!(f, "\\# {}", data.len())?;
                for b in data.iter() {
                    write!(f, " {b:02x}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_with_names_is_decompressed_and_bounded() {
        // "example.com" at 0; an MX at 13 whose exchange is "mail" + ptr.
        let mut msg = b"\x07example\x03com\x00".to_vec();
        msg.extend_from_slice(&[0, 10]);
        msg.extend_from_slice(b"\x04mail\xC0\x00");
        let data = RData::read(&msg, rtype::MX, 13, msg.len() - 13).expect("record data");
        let exchange = Name::from_text("mail.example.com").expect("a valid name");
        assert_eq!(
            data,
            RData::Exchange {
                preference: 10,
                exchange
            }
        );
        // The same data claiming one octet more or less is refused.
        assert!(RData::read(&msg, rtype::MX, 13, msg.len() - 14).is_err());
        assert!(RData::read(&msg, rtype::MX, 13, msg.len() - 12).is_err());
        assert!(RData::read(&msg, rtype::A, 0, 3).is_err());
        assert!(RData::read(&msg, rtype::SOA, 0, 13).is_err());
    }

    #[test]
    fn records_print_as_dig_does() {
        let name = Name::from_text("dns-version.cluster.local").expect("a valid name");
        assert_eq!(
            Record::txt(name, 28800, "1.1.0").to_string(),
            "dns-version.cluster.local. 28800 IN TXT \"1.1.0\""
        );
        let srv = Record::srv(
            Name::from_text("_http._tcp.web.default.svc.cluster.local").expect("a valid name"),
            5,
            0,
            100,
            80,
            Name::from_text("web.default.svc.cluster.local").expect("a valid name"),
        );
        assert_eq!(
            srv.to_string(),
            "_http._tcp.web.default.svc.cluster.local. 5 IN SRV 0 100 80 web.default.svc.cluster.local."
        );
    }
}
