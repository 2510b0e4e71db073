//! The query pipeline from bytes to bytes, with the test cluster's zone and
//! fake upstreams on 127.0.0.1.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::*;
use crate::config::Config;
use crate::forward::tests::{Behaviour, Fake};
use crate::forward::{ForwardOptions, Upstreams};
use crate::wire::{Edns, Name, rtype};
use crate::zone::tests::{cluster, service, slice};

fn handler(upstreams: &[SocketAddr]) -> Handler {
    let mut zone = cluster();
    // A headless Service with 100 ready endpoints: too many for 512 octets.
    zone.apply_service(&service("demo", "many", "None", &[("http", "TCP", 80)]));
    let addresses: Vec<String> = (0..100).map(|i| format!("10.42.9.{i}")).collect();
    let endpoints: Vec<(&str, Option<&str>, bool)> =
        addresses.iter().map(|a| (a.as_str(), None, true)).collect();
    zone.apply_slice(&slice(
        "demo",
        "many",
        "many-1",
        &endpoints,
        &[("http", "TCP", 80)],
    ));
    let config = Config {
        upstream_nameservers: upstreams.to_vec(),
        ..Config::default()
    };
    let options = ForwardOptions {
        timeout: Duration::from_millis(300),
        ..ForwardOptions::default()
    };
    let forwarder = Forwarder::new(
        Upstreams::new(&config, Vec::new(), &[]),
        config.cache,
        options,
    );
    Handler::new(
        Arc::new(RwLock::new(zone)),
        Arc::new(forwarder),
        Arc::new(Metrics::default()),
    )
}

fn packet(name: &str, qtype: u16, edns: Option<u16>) -> Vec<u8> {
    let edns = edns.map(|udp_size| Edns {
        udp_size,
        version: 0,
        dnssec_ok: false,
    });
    wire::query(
        0x1234,
        Name::from_text(name).expect("a valid name"),
        qtype,
        edns,
    )
    .to_vec()
}

/// Answers without an upstream; the reply parsed.
fn ask(handler: &Handler, packet: &[u8], transport: Transport) -> Message {
    let mut out = Vec::new();
    match handler.answer(packet, transport, &mut out) {
        Step::Reply => Message::parse(&out).expect("a message that parses"),
        other => panic!("expected a reply, got {other:?}"),
    }
}

async fn ask_upstream(handler: &Handler, packet: &[u8]) -> Message {
    let mut out = Vec::new();
    match handler.answer(packet, Transport::Udp, &mut out) {
        Step::Forward(pending) => {
            handler.finish(pending, &mut out).await;
            Message::parse(&out).expect("a message that parses")
        }
        other => panic!("expected to forward, got {other:?}"),
    }
}

#[test]
fn zone_answers_are_authoritative_and_echo_the_query() {
    let handler = handler(&[]);
    let reply = ask(
        &handler,
        &packet("Web.Demo.svc.cluster.local", rtype::A, None),
        Transport::Udp,
    );
    assert_eq!(reply.header.id, 0x1234);
    assert!(reply.header.response && reply.header.authoritative);
    assert!(reply.header.recursion_desired && reply.header.recursion_available);
    assert_eq!(
        reply.question.expect("a question").name.to_string(),
        "Web.Demo.svc.cluster.local."
    );
    assert_eq!(
        reply.answers[0].to_string(),
        "Web.Demo.svc.cluster.local. 5 IN A 10.43.0.20"
    );
    assert_eq!(reply.edns, None, "no OPT without one in the query");
    let nx = ask(
        &handler,
        &packet("nope.demo.svc.cluster.local", rtype::A, None),
        Transport::Udp,
    );
    assert_eq!(nx.rcode, Rcode::NXDOMAIN);
    assert_eq!(nx.authority[0].rtype, rtype::SOA);
    assert_eq!(handler.metrics().snapshot().nxdomain, 1);
}

#[test]
fn addresses_take_turns_at_the_front() {
    let handler = handler(&[]);
    let query = packet("db.demo.svc.cluster.local", rtype::A, None);
    let firsts: Vec<String> = (0..3)
        .map(|_| ask(&handler, &query, Transport::Udp).answers[0].to_string())
        .collect();
    assert_eq!(
        firsts,
        [
            "db.demo.svc.cluster.local. 5 IN A 10.42.1.5",
            "db.demo.svc.cluster.local. 5 IN A 10.42.1.6",
            "db.demo.svc.cluster.local. 5 IN A 10.42.1.7",
        ]
    );
    let mut records = vec![
        Record::cname(Name::from_text("a").expect("a valid name"), 5, Name::root()),
        Record::a(Name::root(), 5, Ipv4Addr::new(1, 1, 1, 1)),
        Record::a(Name::root(), 5, Ipv4Addr::new(2, 2, 2, 2)),
    ];
    rotate(&mut records, 1);
    assert_eq!(records[0].rtype, rtype::CNAME, "CNAMEs stay first");
    assert_eq!(records[1].data, wire::RData::A(Ipv4Addr::new(2, 2, 2, 2)));
}

#[test]
fn edns_is_echoed_and_other_versions_are_badvers() {
    let handler = handler(&[]);
    let reply = ask(
        &handler,
        &packet("web.demo.svc.cluster.local", rtype::A, Some(4096)),
        Transport::Udp,
    );
    assert_eq!(
        reply.edns.map(|e| (e.udp_size, e.version)),
        Some((UDP_PAYLOAD, 0))
    );
    let mut query = wire::query(
        7,
        Name::from_text("web.demo.svc.cluster.local").expect("a valid name"),
        rtype::A,
        Some(Edns {
            udp_size: 4096,
            version: 1,
            dnssec_ok: true,
        }),
    );
    let reply = ask(&handler, &query.to_vec(), Transport::Udp);
    assert_eq!(reply.rcode, Rcode::BADVERS);
    assert!(reply.answers.is_empty());
    assert_eq!(
        reply.edns.map(|e| (e.version, e.dnssec_ok)),
        Some((0, true))
    );
    assert!(reply.question.is_some());
    // Another class is refused, its question echoed.
    query.edns = None;
    if let Some(q) = &mut query.question {
        q.qclass = 3;
    }
    let reply = ask(&handler, &query.to_vec(), Transport::Udp);
    assert_eq!(reply.rcode, Rcode::REFUSED);
    assert_eq!(reply.question.map(|q| q.qclass), Some(3));
}

#[test]
fn big_answers_are_truncated_over_udp_and_whole_over_tcp() {
    let handler = handler(&[]);
    let name = "many.demo.svc.cluster.local";
    let plain = packet(name, rtype::A, None);
    let mut out = Vec::new();
    assert!(matches!(
        handler.answer(&plain, Transport::Udp, &mut out),
        Step::Reply
    ));
    assert!(out.len() <= 512, "{}", out.len());
    let reply = Message::parse(&out).expect("a message that parses");
    assert!(reply.header.truncated);
    assert!(!reply.answers.is_empty() && reply.answers.len() < 100);
    // A larger EDNS size takes more, up to the server's 1232.
    let edns = ask(
        &handler,
        &packet(name, rtype::A, Some(65000)),
        Transport::Udp,
    );
    assert!(edns.header.truncated && edns.answers.len() > reply.answers.len());
    let tcp = ask(&handler, &plain, Transport::Tcp);
    assert!(!tcp.header.truncated);
    assert_eq!(tcp.answers.len(), 100);
    assert_eq!(handler.metrics().snapshot().truncated, 2);
}

#[test]
fn malformed_queries_get_what_coredns_gives() {
    let handler = handler(&[]);
    let mut out = Vec::new();
    assert!(matches!(
        handler.answer(&[1, 2, 3], Transport::Udp, &mut out),
        Step::Drop
    ));
    assert!(out.is_empty());
    let mut broken = packet("web.demo.svc.cluster.local", rtype::A, None);
    broken.truncate(20);
    let reply = ask(&handler, &broken, Transport::Udp);
    assert_eq!((reply.rcode, reply.question), (Rcode::FORMERR, None));
    let mut update = packet("web.demo.svc.cluster.local", rtype::A, None);
    update[2] |= 5 << 3;
    assert_eq!(ask(&handler, &update, Transport::Udp).rcode, Rcode::NOTIMP);
    let snapshot = handler.metrics().snapshot();
    assert_eq!(
        (snapshot.dropped, snapshot.formerr, snapshot.notimp),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn other_names_are_forwarded_then_cached() {
    let upstream = Fake::start(Behaviour::Answer(300)).await;
    let handler = handler(&[upstream.addr]);
    let query = packet("WWW.example.com", rtype::A, Some(1232));
    let reply = ask_upstream(&handler, &query).await;
    assert_eq!(reply.rcode, Rcode::NOERROR);
    assert!(!reply.header.authoritative && reply.header.recursion_available);
    assert_eq!(
        reply.question.expect("a question").name.to_string(),
        "WWW.example.com."
    );
    assert_eq!(
        reply.answers[0].data,
        wire::RData::A(Ipv4Addr::new(192, 0, 2, 1))
    );
    assert!(reply.answers[0].ttl <= 30);
    // Again: from the cache, at once.
    let again = ask(
        &handler,
        &packet("www.example.com", rtype::A, Some(1232)),
        Transport::Udp,
    );
    assert_eq!(again.answers.len(), 1);
    assert_eq!(upstream.count(), 1);
    let snapshot = handler.metrics().snapshot();
    assert_eq!((snapshot.forwarded, snapshot.cache_hits), (1, 1));
}

#[tokio::test]
async fn an_external_name_is_chased_upstream() {
    let upstream = Fake::start(Behaviour::Answer(60)).await;
    let handler = handler(&[upstream.addr]);
    let reply = ask_upstream(
        &handler,
        &packet("ext.demo.svc.cluster.local", rtype::A, None),
    )
    .await;
    let answers: Vec<String> = reply.answers.iter().map(ToString::to_string).collect();
    assert_eq!(
        answers,
        [
            "ext.demo.svc.cluster.local. 5 IN CNAME www.example.com.",
            "www.example.com. 30 IN A 192.0.2.1",
        ]
    );
    assert!(reply.header.authoritative);
    // Without recursion desired: the CNAME alone.
    let mut no_rd = packet("ext.demo.svc.cluster.local", rtype::A, None);
    no_rd[2] &= !1;
    assert_eq!(ask(&handler, &no_rd, Transport::Udp).answers.len(), 1);
}

#[tokio::test]
async fn no_upstream_is_servfail() {
    let silent = Fake::start(Behaviour::Silent).await;
    let handler = handler(&[silent.addr]);
    let reply = ask_upstream(&handler, &packet("www.example.com", rtype::A, None)).await;
    assert_eq!(reply.rcode, Rcode::SERVFAIL);
    assert_eq!(
        reply.question.map(|q| q.name.to_string()).as_deref(),
        Some("www.example.com.")
    );
    assert_eq!(handler.metrics().snapshot().upstream_failures, 1);
    let none = self::handler(&[]);
    let reply = ask_upstream(&none, &packet("www.example.com", rtype::A, None)).await;
    assert_eq!(reply.rcode, Rcode::SERVFAIL);
}

/// Random and mutated packets through the whole pipeline: never a panic,
/// and any reply parses.
#[test]
fn fuzzed_queries_never_panic() {
    let handler = handler(&[]);
    let mut state: u64 = 42;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize
    };
    let seeds = [
        packet("web.demo.svc.cluster.local", rtype::SRV, Some(1232)),
        packet("_http._tcp.many.demo.svc.cluster.local", rtype::SRV, None),
        packet("5.1.42.10.in-addr.arpa", rtype::PTR, None),
        packet("10-42-0-1.demo.pod.cluster.local", rtype::AAAA, None),
    ];
    let mut out = Vec::new();
    for round in 0..20_000 {
        let mut p = seeds[round % seeds.len()].clone();
        for _ in 0..=next() % 4 {
            let at = next() % p.len();
            match next() % 3 {
                0 => p[at] = next() as u8,
                1 => p.truncate(at),
                _ => p.insert(at, next() as u8),
            }
            if p.is_empty() {
                break;
            }
        }
        out.clear();
        let transport = if round % 2 == 0 {
            Transport::Udp
        } else {
            Transport::Tcp
        };
        if let Step::Reply = handler.answer(&p, transport, &mut out) {
            assert!(
                Message::parse(&out).is_ok(),
                "reply to {p:?} does not parse"
            );
        }
    }
}
