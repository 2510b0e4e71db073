//! Writing a message: names compressed against every name already written
//! (RFC 1035 §4.1.4; exact-case matches only, so every name keeps the case
//! it was given), record data, and roll-back to a record boundary for
//! truncation.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::name::Name;
use super::record::{RData, Record, rtype};

/// Pointers address the first 16 KiB of a message.
const MAX_POINTER: usize = 0x3FFF;

/// Appends one message to a buffer (after whatever the buffer holds, such
/// as a TCP length prefix: offsets are the message's own).
#[derive(Debug)]
pub struct Encoder<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
    /// Hash of a name suffix written in full → its offset.
    names: HashMap<u64, u16, BuildHasherDefault<Prehashed>>,
}

impl<'a> Encoder<'a> {
    pub fn new(out: &'a mut Vec<u8>) -> Encoder<'a> {
        let start = out.len();
        Encoder {
            out,
            start,
            names: HashMap::default(),
        }
    }

    /// The message's length so far.
    pub fn len(&self) -> usize {
        self.out.len() - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rolls the message back to `len` octets (a record boundary), forgetting
    /// the names written after it.
    pub fn truncate(&mut self, len: usize) {
        self.out.truncate(self.start + len);
        self.names.retain(|_, at| usize::from(*at) < len);
    }

    pub fn u8(&mut self, value: u8) {
        self.out.push(value);
    }

    pub fn u16(&mut self, value: u16) {
        self.out.extend_from_slice(&value.to_be_bytes());
    }

    pub fn u32(&mut self, value: u32) {
        self.out.extend_from_slice(&value.to_be_bytes());
    }

    pub fn bytes(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    /// Overwrites the 16 bits at `at` (a message offset).
    pub fn patch_u16(&mut self, at: usize, value: u16) {
        let at = self.start + at;
        if let Some(slot) = self.out.get_mut(at..at + 2) {
            slot.copy_from_slice(&value.to_be_bytes());
        }
    }

    /// Writes `name`, ending in a pointer to an earlier copy of its longest
    /// written suffix when `compress`. Every suffix written in full may
    /// itself be pointed at later, compressing or not.
    pub fn name(&mut self, name: &Name, compress: bool) {
        let wire = name.wire();
        let mut at = 0;
        while let Some(&len) = wire.get(at) {
            if len == 0 {
                break;
            }
            let suffix = &wire[at..];
            let hash = hash(suffix);
            if compress
                && let Some(&target) = self.names.get(&hash)
                && self.matches(usize::from(target), suffix)
            {
                self.u16(0xC000 | target);
                return;
            }
            let here = self.len();
            if here <= MAX_POINTER {
                // `here` fits in 14 bits.
                self.names.entry(hash).or_insert(here as u16);
            }
            let end = (at + 1 + usize::from(len)).min(wire.len());
            self.bytes(&wire[at..end]);
            at = end;
        }
        self.u8(0);
    }

    /// Whether the name written at message offset `at` is `suffix` (exact
    /// octets), following the pointers this encoder wrote.
    fn matches(&self, mut at: usize, suffix: &[u8]) -> bool {
        let message = &self.out[self.start..];
        let mut i = 0;
        for _ in 0..256 {
            let Some(&len) = message.get(at) else {
                return false;
            };
            if len & 0xC0 == 0xC0 {
                let Some(&low) = message.get(at + 1) else {
                    return false;
                };
                at = usize::from(len & 0x3F) << 8 | usize::from(low);
                continue;
            }
            let len = usize::from(len);
            let (Some(written), Some(wanted)) =
                (message.get(at..at + 1 + len), suffix.get(i..i + 1 + len))
            else {
                return false;
            };
            if written != wanted {
                return false;
            }
            if len == 0 {
                return true;
            }
            at += 1 + len;
            i += 1 + len;
        }
        false
    }

    /// Writes a whole record.
    pub fn record(&mut self, record: &Record) {
        self.name(&record.name, true);
        self.u16(record.rtype);
        self.u16(record.class);
        self.u32(record.ttl);
        let length_at = self.len();
        self.u16(0);
        self.rdata(record.rtype, &record.data);
        let length = self.len() - length_at - 2;
        // Record data of a well-formed record is < 64 KiB; a longer one is
        // cut by the message limit before it is sent.
        self.patch_u16(length_at, u16::try_from(length).unwrap_or(u16::MAX));
    }

    fn rdata(&mut self, rtype: u16, data: &RData) {
        // RFC 3597 §4: only RFC 1035's types may be compressed.
        let compress = matches!(
            rtype,
            rtype::NS
                | rtype::MD
                | rtype::MF
                | rtype::CNAME
                | rtype::SOA
                | rtype::MB
                | rtype::MG
                | rtype::MR
                | rtype::PTR
                | rtype::MINFO
                | rtype::MX
        );
        match data {
            RData::A(ip) => self.bytes(&ip.octets()),
            RData::Aaaa(ip) => self.bytes(&ip.octets()),
            RData::Name(name) => self.name(name, compress),
            RData::Pair(a, b) => {
                self.name(a, compress);
                self.name(b, compress);
            }
            RData::Exchange {
                preference,
                exchange,
            } => {
                self.u16(*preference);
                self.name(exchange, compress);
            }
            RData::Srv {
                priority,
                weight,
                port,
                target,
            } => {
                self.u16(*priority);
                self.u16(*weight);
                self.u16(*port);
                // RFC 2782: the target is never compressed.
                self.name(target, false);
            }
            RData::Soa(soa) => {
                self.name(&soa.mname, compress);
                self.name(&soa.rname, compress);
                for value in [soa.serial, soa.refresh, soa.retry, soa.expire, soa.minimum] {
                    self.u32(value);
                }
            }
            RData::Raw(bytes) => self.bytes(bytes),
        }
    }
}

/// FNV-1a over a name suffix's octets.
fn hash(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The compression table's keys are hashes already.
#[derive(Debug, Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::name;

    #[test]
    fn suffixes_are_compressed_and_read_back() {
        let mut out = Vec::new();
        let mut encoder = Encoder::new(&mut out);
        let a = Name::from_text("web.default.svc.cluster.local").expect("a valid name");
        let b = Name::from_text("db.default.svc.cluster.local").expect("a valid name");
        let c = Name::from_text("cluster.local").expect("a valid name");
        encoder.name(&a, true);
        encoder.name(&b, true);
        encoder.name(&c, true);
        encoder.name(&a, false);
        let first = a.wire().len();
        // "db" + pointer; then a bare pointer.
        assert_eq!(out.len(), first + 3 + 2 + 2 + first);
        assert_eq!(name::read(&out, first).expect("a name").0, b);
        assert_eq!(name::read(&out, first + 5).expect("a name").0, c);
        assert_eq!(name::read(&out, first + 7).expect("a name").0, a);
    }

    #[test]
    fn compression_keeps_case_and_forgets_truncated_names() {
        let mut out = Vec::new();
        let mut encoder = Encoder::new(&mut out);
        encoder.name(&Name::from_text("A.example").expect("a valid name"), true);
        let mark = encoder.len();
        encoder.name(&Name::from_text("b.other").expect("a valid name"), true);
        encoder.truncate(mark);
        encoder.name(&Name::from_text("a.example").expect("a valid name"), true);
        encoder.name(&Name::from_text("c.other").expect("a valid name"), true);
        let (second, next) = name::read(&out, mark).expect("a name");
        assert_eq!(second.to_string(), "a.example.");
        assert_eq!(
            name::read(&out, next).expect("a name").0.to_string(),
            "c.other."
        );
        // "a" written in full (case differs), "example" pointed at.
        assert_eq!(next - mark, 2 + 2);
    }
}
