//! The DNS wire format, written by hand (RFC 1035, with EDNS0 from RFC
//! 6891 and TCP framing from RFC 7766): nothing in here allocates more
//! than a message needs or trusts a count, an offset or a length it read.
//! Malformed input is an error, never a panic — the fuzz test below throws
//! random and mutated packets at every entry point.
//!
//! - [`name`]: names, their decompression and comparison;
//! - [`record`]: record types and data;
//! - [`encode`]: writing a message with name compression;
//! - [`message`]: whole messages, query vetting, truncation.

pub mod encode;
pub mod message;
pub mod name;
pub mod record;

pub use message::{
    Edns, Header, MAX_MESSAGE, MIN_UDP_PAYLOAD, Message, Question, Rcode, Reject, query,
    read_query, reply_to, udp_limit,
};
pub use name::Name;
pub use record::{CLASS_IN, RData, Record, Soa, rtype};

/// Why a message could not be read or a name built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message shorter than its 12-octet header")]
    ShortHeader,
    #[error("message ends inside the field at offset {0}")]
    Truncated(usize),
    #[error("label of {0} octets (at most 63)")]
    LabelTooLong(usize),
    #[error("empty label inside a name")]
    EmptyLabel,
    #[error("name longer than 255 octets")]
    NameTooLong,
    #[error("compression pointer at offset {0} does not point backwards")]
    BadPointer(usize),
    #[error("reserved label type at offset {0}")]
    BadLabelType(usize),
    #[error("{0} questions (at most one)")]
    Questions(u16),
    #[error("more than one OPT record")]
    DuplicateOpt,
    #[error("malformed data in a record of type {rtype}")]
    BadRData { rtype: u16 },
}

/// The first whole TCP frame in `buffer` (a 16-bit length, then the
/// message): the message's range and where the next frame starts.
pub fn split_frame(buffer: &[u8]) -> Option<(std::ops::Range<usize>, usize)> {
    let len = usize::from(record::u16_at(buffer, 0)?);
    (buffer.len() >= 2 + len).then_some((2..2 + len, 2 + len))
}

/// Starts a TCP frame in `out`: a length to be filled by [`end_frame`].
pub fn begin_frame(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0, 0]);
    at
}

/// Fills in the length of the frame begun at `at`; `false` if the message
/// is too long for one (it never is: messages are cut at 65,535 octets).
pub fn end_frame(out: &mut [u8], at: usize) -> bool {
    let Some(len) = out.len().checked_sub(at + 2) else {
        return false;
    };
    let Ok(len) = u16::try_from(len) else {
        return false;
    };
    out[at..at + 2].copy_from_slice(&len.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn name(text: &str) -> Name {
        Name::from_text(text).expect("a valid name")
    }

    /// A small deterministic generator (Knuth's MMIX LCG), so the fuzz
    /// cases are the same on every run.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    fn sample_response() -> Vec<u8> {
        let q = query(
            7,
            name("web.default.svc.cluster.local"),
            rtype::SRV,
            Some(Edns {
                udp_size: 1232,
                version: 0,
                dnssec_ok: false,
            }),
        );
        let mut reply = reply_to(&q, 1232);
        let owner = name("_http._tcp.web.default.svc.cluster.local");
        let target = name("web.default.svc.cluster.local");
        reply
            .answers
            .push(Record::srv(owner, 5, 0, 100, 80, target.clone()));
        reply
            .additional
            .push(Record::a(target.clone(), 5, Ipv4Addr::new(10, 43, 0, 5)));
        reply.authority.push(Record::soa(
            name("cluster.local"),
            5,
            Soa {
                mname: name("ns.dns.cluster.local"),
                rname: name("hostmaster.cluster.local"),
                serial: 1,
                refresh: 7200,
                retry: 1800,
                expire: 86400,
                minimum: 5,
            },
        ));
        reply.answers.push(Record::cname(
            name("x.default.svc.cluster.local"),
            5,
            target,
        ));
        reply.to_vec()
    }

    #[test]
    fn a_message_round_trips() {
        let bytes = sample_response();
        let message = Message::parse(&bytes).expect("a message that parses");
        assert_eq!(message.answers.len(), 2);
        assert_eq!(message.authority.len(), 1);
        assert_eq!(message.additional.len(), 1);
        assert_eq!(message.edns.map(|e| e.udp_size), Some(1232));
        assert_eq!(message.to_vec(), bytes);
    }

    #[test]
    fn badvers_splits_the_extended_rcode() {
        let q = query(
            1,
            name("a.b"),
            rtype::A,
            Some(Edns {
                udp_size: 4096,
                version: 1,
                dnssec_ok: true,
            }),
        );
        let mut reply = reply_to(&q, 1232);
        reply.rcode = Rcode::BADVERS;
        let bytes = reply.to_vec();
        assert_eq!(bytes[3] & 0xF, 0, "header rcode: low bits of 16");
        let back = Message::parse(&bytes).expect("a message that parses");
        assert_eq!(back.rcode, Rcode::BADVERS);
        let edns = back.edns.expect("an OPT record");
        assert_eq!((edns.version, edns.dnssec_ok), (0, true));
    }

    #[test]
    fn queries_are_vetted_as_coredns_does() {
        let good = query(9, name("a.b"), rtype::A, None).to_vec();
        assert!(read_query(&good).is_ok());
        assert_eq!(read_query(&good[..11]), Err(Reject::Drop));
        assert_eq!(read_query(&[]), Err(Reject::Drop));
        let mut response = good.clone();
        response[2] |= 0x80;
        assert_eq!(read_query(&response), Err(Reject::Drop));
        let mut notify = good.clone();
        notify[2] |= 4 << 3;
        assert_eq!(
            read_query(&notify),
            Err(Reject::NotImp {
                id: 9,
                opcode: 4,
                rd: true
            })
        );
        let mut two = good.clone();
        two[5] = 2;
        assert_eq!(read_query(&two), Err(Reject::FormErr { id: 9 }));
        let mut none = good.clone();
        none[5] = 0;
        assert_eq!(read_query(&none), Err(Reject::FormErr { id: 9 }));
        // A question cut short.
        assert_eq!(
            read_query(&good[..good.len() - 1]),
            Err(Reject::FormErr { id: 9 })
        );
        let mut out = Vec::new();
        assert!(Reject::FormErr { id: 9 }.encode(&mut out));
        assert_eq!(out, [0, 9, 0x80, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
        out.clear();
        assert!(
            Reject::NotImp {
                id: 9,
                opcode: 4,
                rd: true
            }
            .encode(&mut out)
        );
        assert_eq!(out, [0, 9, 0xA1, 4, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert!(!Reject::Drop.encode(&mut out));
    }

    #[test]
    fn two_opt_records_are_formerr() {
        let edns = Some(Edns {
            udp_size: 1232,
            version: 0,
            dnssec_ok: false,
        });
        let mut bytes = query(3, name("a.b"), rtype::A, edns).to_vec();
        bytes.extend_from_slice(&[0, 0, 41, 4, 0xD0, 0, 0, 0, 0, 0, 0]);
        bytes[11] = 2;
        assert_eq!(read_query(&bytes), Err(Reject::FormErr { id: 3 }));
    }

    #[test]
    fn truncation_keeps_whole_records_and_sets_tc() {
        let q = query(1, name("many.default.svc.cluster.local"), rtype::A, None);
        let mut reply = reply_to(&q, 1232);
        let owner = q.question.as_ref().expect("a question").name.clone();
        for i in 0..100u8 {
            reply
                .answers
                .push(Record::a(owner.clone(), 5, Ipv4Addr::new(10, 42, 0, i)));
        }
        let mut out = Vec::new();
        assert!(reply.encode(512, &mut out));
        assert!(out.len() <= 512);
        let back = Message::parse(&out).expect("a message that parses");
        assert!(back.header.truncated);
        // Header 12, question 36, then 16 octets per compressed A record.
        assert_eq!(back.answers.len(), (512 - 12 - 36) / 16);
        // Additional records that do not fit are dropped without TC.
        let mut reply = reply_to(&q, 1232);
        reply
            .answers
            .push(Record::a(owner.clone(), 5, Ipv4Addr::LOCALHOST));
        for _ in 0..100 {
            reply
                .additional
                .push(Record::a(owner.clone(), 5, Ipv4Addr::LOCALHOST));
        }
        out.clear();
        assert!(!reply.encode(512, &mut out));
        assert!(
            !Message::parse(&out)
                .expect("a message that parses")
                .header
                .truncated
        );
    }

    #[test]
    fn tcp_frames_split_and_join() {
        let mut out = Vec::new();
        let at = begin_frame(&mut out);
        out.extend_from_slice(b"abc");
        assert!(end_frame(&mut out, at));
        out.extend_from_slice(&[0, 5, 1]);
        let (range, next) = split_frame(&out).expect("a whole frame");
        assert_eq!(&out[range], b"abc");
        assert_eq!(split_frame(&out[next..]), None, "incomplete");
        assert_eq!(split_frame(&[0]), None);
    }

    /// Thousands of random and mutated packets: every parser returns, none
    /// panics, and whatever parses encodes again.
    #[test]
    fn fuzzed_packets_never_panic() {
        let mut rng = Lcg(0x5eed);
        let seeds = [
            sample_response(),
            query(1, name("web.default.svc.cluster.local"), rtype::A, None).to_vec(),
        ];
        let mut parsed = 0;
        for round in 0..20_000 {
            let packet: Vec<u8> = if round % 4 == 0 {
                let len = rng.below(300);
                (0..len).map(|_| rng.next() as u8).collect()
            } else {
                let mut p = seeds[round % 2].clone();
                for _ in 0..=rng.below(6) {
                    match rng.below(4) {
                        0 if !p.is_empty() => {
                            let i = rng.below(p.len());
                            p[i] = rng.next() as u8;
                        }
                        1 if !p.is_empty() => {
                            // A compression pointer anywhere.
                            let i = rng.below(p.len());
                            p[i] = 0xC0 | (rng.next() as u8 & 0x3F);
                        }
                        2 => p.truncate(rng.below(p.len() + 1)),
                        _ => {
                            let i = rng.below(p.len() + 1);
                            p.insert(i, rng.next() as u8);
                        }
                    }
                }
                p
            };
            if let Ok(message) = Message::parse(&packet) {
                parsed += 1;
                let again = message.to_vec();
                assert!(Message::parse(&again).is_ok());
            }
            let _ = read_query(&packet);
            let at = rng.below(packet.len() + 1);
            let _ = name::read(&packet, at);
            let _ = split_frame(&packet);
        }
        assert!(
            parsed > 1000,
            "the mutations should keep some packets valid"
        );
    }
}
