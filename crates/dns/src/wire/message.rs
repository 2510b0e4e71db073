//! Whole messages: the header, one question, three sections of records and
//! the EDNS0 OPT pseudo-record (RFC 6891), parsed and written back with
//! truncation to the transport's limit. A query is vetted as miekg/dns
//! (CoreDNS's wire layer) does before anything answers it.

use super::WireError;
use super::encode::Encoder;
use super::name::{self, Name};
use super::record::{CLASS_IN, RData, Record, rtype, u16_at, u32_at};

/// Response codes, the extended ones (BADVERS) included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rcode(pub u16);

impl Rcode {
    pub const NOERROR: Rcode = Rcode(0);
    pub const FORMERR: Rcode = Rcode(1);
    pub const SERVFAIL: Rcode = Rcode(2);
    pub const NXDOMAIN: Rcode = Rcode(3);
    pub const NOTIMP: Rcode = Rcode(4);
    pub const REFUSED: Rcode = Rcode(5);
    pub const BADVERS: Rcode = Rcode(16);
}

impl std::fmt::Display for Rcode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Rcode::NOERROR => f.write_str("NOERROR"),
            Rcode::FORMERR => f.write_str("FORMERR"),
            Rcode::SERVFAIL => f.write_str("SERVFAIL"),
            Rcode::NXDOMAIN => f.write_str("NXDOMAIN"),
            Rcode::NOTIMP => f.write_str("NOTIMP"),
            Rcode::REFUSED => f.write_str("REFUSED"),
            Rcode::BADVERS => f.write_str("BADVERS"),
            Rcode(other) => write!(f, "RCODE{other}"),
        }
    }
}

/// The QUERY opcode, the only one answered.
pub const OPCODE_QUERY: u8 = 0;
/// The length of the header.
pub const HEADER_LEN: usize = 12;
/// The UDP limit without EDNS (RFC 1035 §4.2.1).
pub const MIN_UDP_PAYLOAD: u16 = 512;
/// The largest message (a TCP frame's length prefix is 16 bits).
pub const MAX_MESSAGE: usize = 65535;
/// An OPT record without options: root name, type, class, TTL, length.
const OPT_LEN: usize = 11;

/// The header's flags (the response code lives in [`Message::rcode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    pub id: u16,
    pub response: bool,
    pub opcode: u8,
    pub authoritative: bool,
    pub truncated: bool,
    pub recursion_desired: bool,
    pub recursion_available: bool,
    pub authentic_data: bool,
    pub checking_disabled: bool,
}

impl Header {
    fn from_wire(id: u16, flags: u16) -> Header {
        Header {
            id,
            response: flags & 0x8000 != 0,
            opcode: ((flags >> 11) & 0xF) as u8,
            authoritative: flags & 0x0400 != 0,
            truncated: flags & 0x0200 != 0,
            recursion_desired: flags & 0x0100 != 0,
            recursion_available: flags & 0x0080 != 0,
            authentic_data: flags & 0x0020 != 0,
            checking_disabled: flags & 0x0010 != 0,
        }
    }

    fn flags(&self, rcode: Rcode) -> u16 {
        let bit = |set: bool, mask: u16| if set { mask } else { 0 };
        bit(self.response, 0x8000)
            | (u16::from(self.opcode & 0xF) << 11)
            | bit(self.authoritative, 0x0400)
            | bit(self.truncated, 0x0200)
            | bit(self.recursion_desired, 0x0100)
            | bit(self.recursion_available, 0x0080)
            | bit(self.authentic_data, 0x0020)
            | bit(self.checking_disabled, 0x0010)
            | (rcode.0 & 0xF)
    }
}

/// The question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    pub name: Name,
    pub qtype: u16,
    pub qclass: u16,
}

/// EDNS0 as carried by an OPT record (options are not kept: none is
/// acted on, and RFC 6891 lets a responder ignore them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edns {
    /// The sender's UDP payload size.
    pub udp_size: u16,
    pub version: u8,
    /// The DNSSEC OK bit.
    pub dnssec_ok: bool,
}

/// A DNS message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    pub header: Header,
    /// The full response code: the header's 4 bits and OPT's upper 8.
    pub rcode: Rcode,
    pub question: Option<Question>,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    pub additional: Vec<Record>,
    pub edns: Option<Edns>,
}

/// Why a query gets no regular answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// Shorter than a header, or a response: no reply at all (nothing to
    /// reflect at a spoofed source).
    Drop,
    /// Malformed: FORMERR with no question.
    FormErr { id: u16 },
    /// An opcode other than QUERY: NOTIMP.
    NotImp { id: u16, opcode: u8, rd: bool },
}

impl Reject {
    /// The reply, if any: a bare header.
    pub fn encode(&self, out: &mut Vec<u8>) -> bool {
        let (header, rcode) = match *self {
            Reject::Drop => return false,
            Reject::FormErr { id } => (
                Header {
                    id,
                    response: true,
                    ..Header::default()
                },
                Rcode::FORMERR,
            ),
            Reject::NotImp { id, opcode, rd } => (
                Header {
                    id,
                    response: true,
                    opcode,
                    recursion_desired: rd,
                    ..Header::default()
                },
                Rcode::NOTIMP,
            ),
        };
        out.extend_from_slice(&header.id.to_be_bytes());
        out.extend_from_slice(&header.flags(rcode).to_be_bytes());
        out.extend_from_slice(&[0; 8]);
        true
    }
}

/// Vets and parses a query: short or response packets are dropped, other
/// opcodes are NOTIMP, more than one question (or more records than a
/// query carries: one answer, one authority, an OPT and a signature) or
/// an unparsable body is FORMERR.
pub fn read_query(packet: &[u8]) -> Result<Message, Reject> {
    let (Some(id), Some(flags)) = (u16_at(packet, 0), u16_at(packet, 2)) else {
        return Err(Reject::Drop);
    };
    if packet.len() < HEADER_LEN {
        return Err(Reject::Drop);
    }
    let header = Header::from_wire(id, flags);
    if header.response {
        return Err(Reject::Drop);
    }
    if header.opcode != OPCODE_QUERY {
        return Err(Reject::NotImp {
            id,
            opcode: header.opcode,
            rd: header.recursion_desired,
        });
    }
    let count = |i: usize| u16_at(packet, 4 + 2 * i).unwrap_or(0);
    if count(0) != 1 || count(1) > 1 || count(2) > 1 || count(3) > 2 {
        return Err(Reject::FormErr { id });
    }
    Message::parse(packet).map_err(|_| Reject::FormErr { id })
}

impl Message {
    /// Parses a whole message. At most one question and one OPT; records
    /// may not run past the end (bytes after the last one are ignored).
    pub fn parse(packet: &[u8]) -> Result<Message, WireError> {
        if packet.len() < HEADER_LEN {
            return Err(WireError::ShortHeader);
        }
        let field = |i: usize| u16_at(packet, 2 * i).unwrap_or(0);
        let header = Header::from_wire(field(0), field(1));
        let mut rcode = Rcode(field(1) & 0xF);
        let (qd, an, ns, ar) = (field(2), field(3), field(4), field(5));
        if qd > 1 {
            return Err(WireError::Questions(qd));
        }
        let mut at = HEADER_LEN;
        let question = if qd == 1 {
            let (name, next) = name::read(packet, at)?;
            let qtype = u16_at(packet, next).ok_or(WireError::Truncated(next))?;
            let qclass = u16_at(packet, next + 2).ok_or(WireError::Truncated(next))?;
            at = next + 4;
            Some(Question {
                name,
                qtype,
                qclass,
            })
        } else {
            None
        };
        let mut message = Message {
            header,
            question,
            ..Message::default()
        };
        // A count can claim more records than the packet holds: reserve
        // by what the packet can hold, not by the count.
        let fits = |n: u16| usize::from(n).min(packet.len() / 11);
        message.answers.reserve(fits(an));
        for _ in 0..an {
            let (record, next) = read_record(packet, at)?;
            message.answers.push(record);
            at = next;
        }
        for _ in 0..ns {
            let (record, next) = read_record(packet, at)?;
            message.authority.push(record);
            at = next;
        }
        for _ in 0..ar {
            let (record, next) = read_record(packet, at)?;
            at = next;
            if record.rtype != rtype::OPT {
                message.additional.push(record);
                continue;
            }
            if message.edns.is_some() {
                return Err(WireError::DuplicateOpt);
            }
            if !record.name.is_root() {
                return Err(WireError::BadRData { rtype: rtype::OPT });
            }
            rcode = Rcode(((record.ttl >> 24) as u16) << 4 | rcode.0);
            message.edns = Some(Edns {
                udp_size: record.class,
                version: (record.ttl >> 16) as u8,
                dnssec_ok: record.ttl & 0x8000 != 0,
            });
        }
        message.rcode = rcode;
        Ok(message)
    }

    /// Writes the message after whatever `out` holds, keeping it within
    /// `limit` octets: whole records are dropped from the end, and when an
    /// answer or authority record had to go the TC bit is set (RFC 2181
    /// §9: additional records are optional, losing them is not
    /// truncation). The OPT record, if any, always fits. Returns whether
    /// it truncated.
    pub fn encode(&self, limit: usize, out: &mut Vec<u8>) -> bool {
        let limit = limit.min(MAX_MESSAGE);
        let mut encoder = Encoder::new(out);
        encoder.u16(self.header.id);
        encoder.u16(0);
        encoder.bytes(&[0; 8]);
        if let Some(question) = &self.question {
            encoder.name(&question.name, true);
            encoder.u16(question.qtype);
            encoder.u16(question.qclass);
        }
        let opt = if self.edns.is_some() { OPT_LEN } else { 0 };
        let budget = limit.saturating_sub(opt).max(encoder.len());
        let mut counts = [0u16; 3];
        let mut truncated = false;
        'sections: for (section, records) in [&self.answers, &self.authority, &self.additional]
            .into_iter()
            .enumerate()
        {
            for record in records {
                let mark = encoder.len();
                encoder.record(record);
                if encoder.len() > budget || counts[section] == u16::MAX {
                    encoder.truncate(mark);
                    truncated = section < 2;
                    break 'sections;
                }
                counts[section] += 1;
            }
        }
        if let Some(edns) = &self.edns {
            encoder.u8(0);
            encoder.u16(rtype::OPT);
            encoder.u16(edns.udp_size);
            let ext_rcode = u32::from(self.rcode.0 >> 4) & 0xFF;
            let dnssec_ok = if edns.dnssec_ok { 0x8000 } else { 0 };
            encoder.u32(ext_rcode << 24 | u32::from(edns.version) << 16 | dnssec_ok);
            encoder.u16(0);
        }
        let mut header = self.header;
        header.truncated |= truncated;
        encoder.patch_u16(2, header.flags(self.rcode));
        encoder.patch_u16(4, u16::from(self.question.is_some()));
        encoder.patch_u16(6, counts[0]);
        encoder.patch_u16(8, counts[1]);
        encoder.patch_u16(10, counts[2] + u16::from(self.edns.is_some()));
        truncated
    }

    /// The whole message, unbounded but for the 64 KiB of a TCP frame.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(512);
        self.encode(MAX_MESSAGE, &mut out);
        out
    }
}

fn read_record(packet: &[u8], at: usize) -> Result<(Record, usize), WireError> {
    let (name, at) = name::read(packet, at)?;
    let (Some(rtype), Some(class), Some(ttl), Some(len)) = (
        u16_at(packet, at),
        u16_at(packet, at + 2),
        u32_at(packet, at + 4),
        u16_at(packet, at + 8),
    ) else {
        return Err(WireError::Truncated(at));
    };
    let start = at + 10;
    let len = usize::from(len);
    let data = if rtype == rtype::OPT {
        // Options are skipped; they must still lie inside the packet.
        packet
            .get(start..start + len)
            .ok_or(WireError::Truncated(start))?;
        RData::Raw(Box::default())
    } else {
        RData::read(packet, rtype, start, len)?
    };
    let record = Record {
        name,
        rtype,
        class,
        ttl,
        data,
    };
    Ok((record, start + len))
}

/// The UDP payload a reply to `query` may use: 512 without EDNS, else the
/// client's size between 512 and `cap` (the server's own).
pub fn udp_limit(query: &Message, cap: u16) -> usize {
    match &query.edns {
        None => usize::from(MIN_UDP_PAYLOAD),
        Some(edns) => usize::from(
            edns.udp_size
                .clamp(MIN_UDP_PAYLOAD, cap.max(MIN_UDP_PAYLOAD)),
        ),
    }
}

/// A reply to `query`: its ID, opcode, RD and CD, its question, QR set,
/// and an OPT (version 0, DO echoed, advertising `udp_size`) iff the
/// query had one.
pub fn reply_to(query: &Message, udp_size: u16) -> Message {
    Message {
        header: Header {
            id: query.header.id,
            response: true,
            opcode: query.header.opcode,
            recursion_desired: query.header.recursion_desired,
            checking_disabled: query.header.checking_disabled,
            ..Header::default()
        },
        rcode: Rcode::NOERROR,
        question: query.question.clone(),
        edns: query.edns.map(|edns| Edns {
            udp_size,
            version: 0,
            dnssec_ok: edns.dnssec_ok,
        }),
        ..Message::default()
    }
}

/// A query for `name`/`qtype` with class IN.
pub fn query(id: u16, name: Name, qtype: u16, edns: Option<Edns>) -> Message {
    Message {
        header: Header {
            id,
            recursion_desired: true,
            ..Header::default()
        },
        question: Some(Question {
            name,
            qtype,
            qclass: CLASS_IN,
        }),
        edns,
        ..Message::default()
    }
}
