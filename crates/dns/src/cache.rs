//! The cache of forwarded answers, as CoreDNS's `cache 30`: keyed by the
//! lowercase name, type, class and the DO and CD bits; an answer is kept
//! for its smallest TTL, a denial (NXDOMAIN, NODATA) for its SOA's
//! negative TTL (RFC 2308), both capped at the configured maximum (30 s);
//! what comes out of it has its TTLs counted down. Truncated answers,
//! errors (SERVFAIL, REFUSED, …), denials without an SOA and records with
//! TTL 0 are not kept. The number of answers is bounded; a full cache
//! drops an arbitrary one to take a new one (CoreDNS's drops a random
//! one too).
//!
//! Time is a parameter: the cache is pure but for its lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::wire::{Message, Name, Question, RData, Rcode, Record, rtype};

/// What an answer is kept under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    name: Name,
    qtype: u16,
    qclass: u16,
    dnssec_ok: bool,
    checking_disabled: bool,
}

impl Key {
    pub fn new(question: &Question, dnssec_ok: bool, checking_disabled: bool) -> Key {
        Key {
            name: question.name.to_lowercase(),
            qtype: question.qtype,
            qclass: question.qclass,
            dnssec_ok,
            checking_disabled,
        }
    }
}

/// An upstream's answer, as kept (or as just received).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub rcode: Rcode,
    pub authentic_data: bool,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    pub additional: Vec<Record>,
    stored: Instant,
    /// Seconds it is served for.
    lifetime: u32,
}

impl Entry {
    /// An upstream reply's content, received `now`.
    pub fn from_reply(reply: Message, now: Instant) -> Entry {
        Entry {
            rcode: reply.rcode,
            authentic_data: reply.header.authentic_data,
            answers: reply.answers,
            authority: reply.authority,
            additional: reply.additional,
            stored: now,
            lifetime: 0,
        }
    }

    /// The records of one section with TTLs as of `now`: never more than
    /// the entry has left.
    pub fn section(&self, records: &[Record], now: Instant) -> Vec<Record> {
        let elapsed = now.saturating_duration_since(self.stored).as_secs();
        let elapsed = u32::try_from(elapsed).unwrap_or(u32::MAX);
        records
            .iter()
            .map(|r| Record {
                ttl: r.ttl.min(self.lifetime).saturating_sub(elapsed),
                ..r.clone()
            })
            .collect()
    }
}

/// How long an upstream answer may be kept, if at all, at most `max_ttl`.
pub fn lifetime(reply: &Message, max_ttl: u32) -> Option<u32> {
    if reply.header.truncated {
        return None;
    }
    let min_ttl = |records: &[&Record]| records.iter().map(|r| r.ttl).min();
    let ttl = match reply.rcode {
        Rcode::NOERROR if !reply.answers.is_empty() => {
            let all: Vec<&Record> = reply
                .answers
                .iter()
                .chain(&reply.authority)
                .chain(&reply.additional)
                .collect();
            min_ttl(&all)?
        }
        Rcode::NOERROR | Rcode::NXDOMAIN => reply
            .authority
            .iter()
            .filter_map(|r| match (&r.data, r.rtype) {
                (RData::Soa(soa), rtype::SOA) => Some(r.ttl.min(soa.minimum)),
                _ => None,
            })
            .min()?,
        _ => return None,
    };
    Some(ttl.min(max_ttl)).filter(|ttl| *ttl > 0)
}

/// The cache.
#[derive(Debug)]
pub struct Cache {
    entries: Mutex<HashMap<Key, Arc<Entry>>>,
    capacity: usize,
    max_ttl: u32,
}

impl Cache {
    pub fn new(capacity: usize, max_ttl: u32) -> Cache {
        Cache {
            entries: Mutex::new(HashMap::new()),
            capacity,
            max_ttl,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<Entry>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The answer kept for `key`, if still fresh at `now`.
    pub fn get(&self, key: &Key, now: Instant) -> Option<Arc<Entry>> {
        let mut entries = self.lock();
        let entry = entries.get(key)?;
        if now.saturating_duration_since(entry.stored) < Duration::from_secs(entry.lifetime.into())
        {
            return Some(entry.clone());
        }
        entries.remove(key);
        None
    }

    /// Keeps `entry` if it may be kept (see [`lifetime`]); returns it
    /// either way, to be served.
    pub fn insert(&self, key: Key, reply: Message, now: Instant) -> Arc<Entry> {
        let lifetime = lifetime(&reply, self.max_ttl);
        let mut entry = Entry::from_reply(reply, now);
        let Some(lifetime) = lifetime.filter(|_| self.capacity > 0) else {
            entry.lifetime = u32::MAX;
            return Arc::new(entry);
        };
        entry.lifetime = lifetime;
        let entry = Arc::new(entry);
        let mut entries = self.lock();
        if entries.len() >= self.capacity
            && !entries.contains_key(&key)
            && let Some(victim) = entries.keys().next().cloned()
        {
            entries.remove(&victim);
        }
        entries.insert(key, entry.clone());
        entry
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::wire::{CLASS_IN, Soa, query, reply_to};

    fn name(text: &str) -> Name {
        Name::from_text(text).expect("a valid name")
    }

    fn question(text: &str) -> Question {
        Question {
            name: name(text),
            qtype: rtype::A,
            qclass: CLASS_IN,
        }
    }

    fn answer(ttl: u32) -> Message {
        let q = query(1, name("www.example.com"), rtype::A, None);
        let mut reply = reply_to(&q, 1232);
        reply.answers.push(Record::a(
            name("www.example.com"),
            ttl,
            Ipv4Addr::new(192, 0, 2, 1),
        ));
        reply
    }

    fn denial(rcode: Rcode, soa_ttl: u32, minimum: u32) -> Message {
        let q = query(1, name("nope.example.com"), rtype::A, None);
        let mut reply = reply_to(&q, 1232);
        reply.rcode = rcode;
        let soa = Soa {
            mname: name("ns.example.com"),
            rname: name("hostmaster.example.com"),
            serial: 1,
            refresh: 1,
            retry: 1,
            expire: 1,
            minimum,
        };
        reply
            .authority
            .push(Record::soa(name("example.com"), soa_ttl, soa));
        reply
    }

    #[test]
    fn lifetimes_honour_ttls_under_the_cap() {
        assert_eq!(lifetime(&answer(3600), 30), Some(30));
        assert_eq!(lifetime(&answer(7), 30), Some(7));
        assert_eq!(lifetime(&answer(0), 30), None);
        assert_eq!(lifetime(&denial(Rcode::NXDOMAIN, 3600, 900), 30), Some(30));
        assert_eq!(lifetime(&denial(Rcode::NXDOMAIN, 3600, 10), 30), Some(10));
        assert_eq!(
            lifetime(&denial(Rcode::NOERROR, 4, 600), 30),
            Some(4),
            "NODATA"
        );
        let mut no_soa = denial(Rcode::NXDOMAIN, 60, 60);
        no_soa.authority.clear();
        assert_eq!(lifetime(&no_soa, 30), None);
        assert_eq!(lifetime(&denial(Rcode::SERVFAIL, 60, 60), 30), None);
        let mut truncated = answer(60);
        truncated.header.truncated = true;
        assert_eq!(lifetime(&truncated, 30), None);
    }

    #[test]
    fn entries_count_down_and_expire() {
        let cache = Cache::new(10, 30);
        let start = Instant::now();
        let key = Key::new(&question("WWW.example.com"), false, false);
        cache.insert(key.clone(), answer(3600), start);
        let same = Key::new(&question("www.EXAMPLE.com"), false, false);
        let entry = cache
            .get(&same, start + Duration::from_secs(12))
            .expect("a cached entry");
        let ttls: Vec<u32> = entry
            .section(&entry.answers, start + Duration::from_secs(12))
            .iter()
            .map(|r| r.ttl)
            .collect();
        assert_eq!(ttls, [18], "capped at 30, 12 s gone");
        assert!(cache.get(&same, start + Duration::from_secs(30)).is_none());
        assert!(cache.is_empty(), "expired entries are dropped when met");
        // The DO bit is part of the key.
        cache.insert(key, answer(60), start);
        assert!(
            cache
                .get(&Key::new(&question("www.example.com"), true, false), start)
                .is_none()
        );
    }

    #[test]
    fn the_cache_is_bounded_and_skips_what_it_must_not_keep() {
        let cache = Cache::new(3, 30);
        let now = Instant::now();
        for i in 0..10 {
            let key = Key::new(&question(&format!("n{i}.example.com")), false, false);
            cache.insert(key, answer(60), now);
        }
        assert_eq!(cache.len(), 3);
        let key = Key::new(&question("fail.example.com"), false, false);
        let served = cache.insert(key.clone(), denial(Rcode::SERVFAIL, 60, 60), now);
        assert_eq!(served.rcode, Rcode::SERVFAIL);
        assert!(cache.get(&key, now).is_none());
        // Not kept, served with its own TTLs.
        let served = cache.insert(key, answer(0), now);
        assert_eq!(served.section(&served.answers, now)[0].ttl, 0);
        let disabled = Cache::new(0, 30);
        let key = Key::new(&question("x.example.com"), false, false);
        let served = disabled.insert(key.clone(), answer(60), now);
        assert_eq!(served.section(&served.answers, now)[0].ttl, 60);
        assert!(disabled.get(&key, now).is_none());
    }
}
