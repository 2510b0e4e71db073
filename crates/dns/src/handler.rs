//! One query, from bytes to bytes: vetted (dropped, FORMERR, NOTIMP,
//! REFUSED for another class, BADVERS for EDNS past version 0), answered
//! by the cluster zone or the cache at once, or handed back as
//! [`Step::Forward`] for the caller to finish off the receive path — so a
//! listener never waits on an upstream between two packets.
//!
//! Replies: the query's ID, opcode, RD, CD and question; RA set (names
//! outside the cluster are resolved); AA on the zone's answers; address
//! records rotated from one reply to the next; an OPT
//! advertising [`UDP_PAYLOAD`] iff the query had one; cut to 512 octets
//! over UDP without EDNS, to the client's size (at most [`UDP_PAYLOAD`])
//! with it, to 64 KiB over TCP.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use tokio::time::Instant;

use crate::cache::{Entry, Key};
use crate::forward::{ForwardError, Forwarder};
use crate::metrics::Metrics;
use crate::wire::{self, CLASS_IN, MAX_MESSAGE, Message, Question, Rcode, Record, rtype};
use crate::zone::{Answer, Lookup, Zone};

/// The UDP payload this server offers and asks for: 1232, DNS Flag Day
/// 2020's size that no IPv6 path fragments.
pub const UDP_PAYLOAD: u16 = 1232;

/// How the query came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

/// What became of a packet.
#[derive(Debug)]
pub enum Step {
    /// The reply is in the output buffer.
    Reply,
    /// No reply.
    Drop,
    /// Needs an upstream: call [`Handler::finish`].
    Forward(Box<Pending>),
}

/// A query waiting for an upstream.
#[derive(Debug)]
pub struct Pending {
    query: Message,
    limit: usize,
    /// An ExternalName's CNAME whose target is resolved upstream.
    cname: Option<Answer>,
}

/// The query pipeline: the zone, the forwarder, the counters.
#[derive(Debug)]
pub struct Handler {
    zone: Arc<RwLock<Zone>>,
    forwarder: Arc<Forwarder>,
    metrics: Arc<Metrics>,
    /// How far address records are rotated next.
    turn: AtomicUsize,
}

impl Handler {
    pub fn new(
        zone: Arc<RwLock<Zone>>,
        forwarder: Arc<Forwarder>,
        metrics: Arc<Metrics>,
    ) -> Handler {
        Handler {
            zone,
            forwarder,
            metrics,
            turn: AtomicUsize::new(0),
        }
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Answers `packet` into `out` (appended) if it can without waiting.
    pub fn answer(&self, packet: &[u8], transport: Transport, out: &mut Vec<u8>) -> Step {
        let m = &*self.metrics;
        Metrics::add(match transport {
            Transport::Udp => &m.udp_queries,
            Transport::Tcp => &m.tcp_queries,
        });
        let query = match wire::read_query(packet) {
            Ok(query) => query,
            Err(reject) => {
                Metrics::add(match reject {
                    wire::Reject::Drop => &m.dropped,
                    wire::Reject::FormErr { .. } => &m.formerr,
                    wire::Reject::NotImp { .. } => &m.notimp,
                });
                return if reject.encode(out) {
                    Step::Reply
                } else {
                    Step::Drop
                };
            }
        };
        let limit = match transport {
            Transport::Udp => wire::udp_limit(&query, UDP_PAYLOAD),
            Transport::Tcp => MAX_MESSAGE,
        };
        let Some(question) = &query.question else {
            // read_query guarantees one; answer FORMERR all the same.
            wire::Reject::FormErr {
                id: query.header.id,
            }
            .encode(out);
            return Step::Reply;
        };
        if question.qclass != CLASS_IN {
            Metrics::add(&m.refused);
            self.write(reply(&query, Rcode::REFUSED), limit, out);
            return Step::Reply;
        }
        if query.edns.is_some_and(|edns| edns.version > 0) {
            self.write(reply(&query, Rcode::BADVERS), limit, out);
            return Step::Reply;
        }
        let lookup = self
            .zone
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .lookup(question);
        match lookup {
            Lookup::Answer(answer) => {
                if answer.chase.is_some() && query.header.recursion_desired {
                    return Step::Forward(Box::new(Pending {
                        query,
                        limit,
                        cname: Some(answer),
                    }));
                }
                self.write_zone(&query, answer, limit, out);
                Step::Reply
            }
            Lookup::NotOurs => {
                let key = Key::new(question, dnssec_ok(&query), query.header.checking_disabled);
                match self.forwarder.cached(&key) {
                    Some(entry) => {
                        Metrics::add(&m.cache_hits);
                        self.write_entry(&query, &entry, Vec::new(), false, limit, out);
                        Step::Reply
                    }
                    None => Step::Forward(Box::new(Pending {
                        query,
                        limit,
                        cname: None,
                    })),
                }
            }
        }
    }

    /// Finishes a forwarded query into `out` (appended).
    pub async fn finish(&self, pending: Box<Pending>, out: &mut Vec<u8>) {
        let Pending {
            query,
            limit,
            cname,
        } = *pending;
        let Some(question) = &query.question else {
            return;
        };
        Metrics::add(&self.metrics.forwarded);
        let (target, prefix) = match cname {
            Some(mut answer) => {
                let target = Question {
                    name: answer.chase.take().unwrap_or_else(|| question.name.clone()),
                    qtype: question.qtype,
                    qclass: question.qclass,
                };
                (target, answer.answers)
            }
            None => (question.clone(), Vec::new()),
        };
        let chased = !prefix.is_empty();
        let result = self
            .forwarder
            .resolve(&target, dnssec_ok(&query), query.header.checking_disabled)
            .await;
        match result {
            // After an ExternalName's CNAME the question's name is this
            // zone's: the answer is authoritative.
            Ok(entry) => self.write_entry(&query, &entry, prefix, chased, limit, out),
            Err(error) => {
                let rcode = match error {
                    ForwardError::Busy => {
                        Metrics::add(&self.metrics.refused);
                        Rcode::REFUSED
                    }
                    _ => {
                        Metrics::add(&self.metrics.upstream_failures);
                        tracing::debug!(name = %target.name, %error, "forwarding failed");
                        Rcode::SERVFAIL
                    }
                };
                self.write(reply(&query, rcode), limit, out);
            }
        }
    }

    /// Refuses a query that would wait for an upstream: too many do.
    pub fn refuse(&self, pending: Box<Pending>, out: &mut Vec<u8>) {
        Metrics::add(&self.metrics.refused);
        self.write(reply(&pending.query, Rcode::REFUSED), pending.limit, out);
    }

    fn write_zone(&self, query: &Message, answer: Answer, limit: usize, out: &mut Vec<u8>) {
        let m = &*self.metrics;
        Metrics::add(&m.authoritative);
        match answer.rcode {
            Rcode::NXDOMAIN => Metrics::add(&m.nxdomain),
            Rcode::REFUSED => Metrics::add(&m.refused),
            _ => {}
        }
        let mut message = reply(query, answer.rcode);
        message.header.authoritative = true;
        message.answers = answer.answers;
        message.authority = answer.authority;
        message.additional = answer.additional;
        self.write(message, limit, out);
    }

    /// An upstream's answer, after `prefix` (an ExternalName's CNAME).
    fn write_entry(
        &self,
        query: &Message,
        entry: &Entry,
        prefix: Vec<Record>,
        authoritative: bool,
        limit: usize,
        out: &mut Vec<u8>,
    ) {
        let now = Instant::now();
        let mut message = reply(query, entry.rcode);
        message.header.authoritative = authoritative;
        message.header.authentic_data =
            entry.authentic_data && (query.header.authentic_data || dnssec_ok(query));
        message.answers = prefix;
        message.answers.extend(entry.section(&entry.answers, now));
        message.authority = entry.section(&entry.authority, now);
        message.additional = entry.section(&entry.additional, now);
        self.write(message, limit, out);
    }

    fn write(&self, mut message: Message, limit: usize, out: &mut Vec<u8>) {
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        rotate(&mut message.answers, turn);
        if message.encode(limit, out) {
            Metrics::add(&self.metrics.truncated);
        }
    }
}

/// Rotates the address records that follow any CNAMEs by `turn`: clients
/// that take the first address spread over all of them (CoreDNS's
/// `loadbalance`, in k3s's Corefile, shuffles them).
fn rotate(records: &mut [Record], turn: usize) {
    let cnames = records
        .iter()
        .take_while(|r| r.rtype == rtype::CNAME)
        .count();
    let run = &mut records[cnames..];
    let addresses = run
        .iter()
        .take_while(|r| matches!(r.rtype, rtype::A | rtype::AAAA))
        .count();
    if addresses > 1 {
        run[..addresses].rotate_left(turn % addresses);
    }
}

fn dnssec_ok(query: &Message) -> bool {
    query.edns.is_some_and(|edns| edns.dnssec_ok)
}

/// A reply to `query` with `rcode`, RA set.
fn reply(query: &Message, rcode: Rcode) -> Message {
    let mut message = wire::reply_to(query, UDP_PAYLOAD);
    message.header.recursion_available = true;
    message.rcode = rcode;
    message
}

#[cfg(test)]
mod tests;
