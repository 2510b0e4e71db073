//! The forwarder against fake upstreams on 127.0.0.1 (ephemeral ports;
//! nothing leaves the machine).

use std::net::Ipv4Addr;
use std::sync::atomic::AtomicUsize;

use tokio::net::TcpListener;

use super::*;
use crate::config::Config;
use crate::wire::{CLASS_IN, Rcode, Record, Soa, reply_to as reply_for, rtype};

/// What a fake upstream does with a query.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Behaviour {
    /// One A record 192.0.2.1 with this TTL.
    Answer(u32),
    /// NXDOMAIN with an SOA.
    NxDomain,
    /// Nothing.
    Silent,
    /// Over UDP: a mismatched reply, then the real one.
    SpoofFirst,
    /// Over UDP: TC and no records; over TCP: 60 A records.
    Truncate,
    /// Over UDP: TC and a record cut in two; over TCP: 60 A records.
    CutShort,
}

/// A fake upstream on 127.0.0.1 that counts the queries it gets.
pub(crate) struct Fake {
    pub addr: SocketAddr,
    pub queries: Arc<AtomicUsize>,
    tasks: tokio::task::JoinSet<()>,
}

impl Fake {
    pub(crate) async fn start(behaviour: Behaviour) -> Fake {
        // The TCP listener needs the UDP socket's port; try a few.
        for _ in 0..20 {
            let udp = UdpSocket::bind("127.0.0.1:0")
                .await
                .expect("a socket on loopback");
            let addr = udp.local_addr().expect("a local address");
            let Ok(tcp) = TcpListener::bind(addr).await else {
                continue;
            };
            let queries = Arc::new(AtomicUsize::new(0));
            let mut tasks = tokio::task::JoinSet::new();
            let count = queries.clone();
            tasks.spawn(async move {
                let mut buffer = vec![0u8; 4096];
                while let Ok((len, peer)) = udp.recv_from(&mut buffer).await {
                    count.fetch_add(1, Ordering::SeqCst);
                    let Ok(q) = Message::parse(&buffer[..len]) else {
                        continue;
                    };
                    if let Behaviour::SpoofFirst = behaviour {
                        let mut wrong = answer(&q, Behaviour::Answer(60));
                        wrong.header.id = wrong.header.id.wrapping_add(1);
                        let _ = udp.send_to(&wrong.to_vec(), peer).await;
                    }
                    if let Behaviour::Silent = behaviour {
                        continue;
                    }
                    let reply = answer(&q, behaviour);
                    let mut bytes = reply.to_vec();
                    if let Behaviour::CutShort = behaviour {
                        // TC set, and the packet ends inside a record.
                        bytes.truncate(bytes.len() - 3);
                    }
                    let _ = udp.send_to(&bytes, peer).await;
                }
            });
            tasks.spawn(async move {
                while let Ok((mut stream, _)) = tcp.accept().await {
                    let mut len = [0u8; 2];
                    if stream.read_exact(&mut len).await.is_err() {
                        continue;
                    }
                    let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
                    if stream.read_exact(&mut body).await.is_err() {
                        continue;
                    }
                    let Ok(q) = Message::parse(&body) else {
                        continue;
                    };
                    let mut reply = answer(&q, Behaviour::Answer(60));
                    for i in 0..60 {
                        let name = reply.answers[0].name.clone();
                        reply
                            .answers
                            .push(Record::a(name, 60, Ipv4Addr::new(192, 0, 2, i)));
                    }
                    reply.answers.remove(0);
                    let bytes = reply.to_vec();
                    let mut frame = (bytes.len() as u16).to_be_bytes().to_vec();
                    frame.extend_from_slice(&bytes);
                    let _ = stream.write_all(&frame).await;
                }
            });
            return Fake {
                addr,
                queries,
                tasks,
            };
        }
        panic!("no free port pair on 127.0.0.1");
    }

    pub(crate) fn count(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

fn answer(q: &Message, behaviour: Behaviour) -> Message {
    let mut reply = reply_for(q, 1232);
    reply.header.recursion_available = true;
    let name = q
        .question
        .as_ref()
        .map(|q| q.name.clone())
        .unwrap_or_else(Name::root);
    match behaviour {
        Behaviour::Answer(ttl) => {
            reply
                .answers
                .push(Record::a(name, ttl, Ipv4Addr::new(192, 0, 2, 1)));
        }
        Behaviour::SpoofFirst => {
            reply
                .answers
                .push(Record::a(name, 60, Ipv4Addr::new(192, 0, 2, 1)));
        }
        Behaviour::NxDomain => {
            reply.rcode = Rcode::NXDOMAIN;
            let soa = Soa {
                mname: Name::from_text("ns.example").expect("a valid name"),
                rname: Name::from_text("h.example").expect("a valid name"),
                serial: 1,
                refresh: 1,
                retry: 1,
                expire: 1,
                minimum: 600,
            };
            reply.authority.push(Record::soa(
                Name::from_text("example").expect("a valid name"),
                600,
                soa,
            ));
        }
        Behaviour::Truncate => reply.header.truncated = true,
        Behaviour::CutShort => {
            reply.header.truncated = true;
            reply
                .answers
                .push(Record::a(name, 60, Ipv4Addr::new(192, 0, 2, 1)));
        }
        Behaviour::Silent => {}
    }
    reply
}

fn question(name: &str) -> Question {
    Question {
        name: Name::from_text(name).expect("a valid name"),
        qtype: rtype::A,
        qclass: CLASS_IN,
    }
}

fn forwarder(default: &[SocketAddr], stubs: &[(&str, SocketAddr)]) -> Forwarder {
    let config = Config {
        upstream_nameservers: default.to_vec(),
        stub_domains: stubs
            .iter()
            .map(|(d, s)| (Name::from_text(d).expect("a valid name"), vec![*s]))
            .collect(),
        ..Config::default()
    };
    let options = ForwardOptions {
        timeout: Duration::from_millis(300),
        deadline: Duration::from_secs(2),
        ..ForwardOptions::default()
    };
    Forwarder::new(
        Upstreams::new(&config, Vec::new(), &[]),
        config.cache,
        options,
    )
}

#[tokio::test]
async fn answers_are_forwarded_then_served_from_the_cache() {
    let upstream = Fake::start(Behaviour::Answer(3600)).await;
    let forwarder = forwarder(&[upstream.addr], &[]);
    let entry = forwarder
        .resolve(&question("www.example.com"), false, false)
        .await
        .expect("an answer");
    assert_eq!(entry.rcode, Rcode::NOERROR);
    let served = entry.section(&entry.answers, Instant::now());
    assert_eq!(
        served[0].to_string(),
        "www.example.com. 30 IN A 192.0.2.1",
        "TTL capped at 30"
    );
    // The same question in another case: the cache answers.
    forwarder
        .resolve(&question("WWW.Example.COM"), false, false)
        .await
        .expect("an answer");
    assert_eq!(upstream.count(), 1);
    // NXDOMAIN is relayed and kept too.
    let nx = Fake::start(Behaviour::NxDomain).await;
    let forwarder = self::forwarder(&[nx.addr], &[]);
    for _ in 0..2 {
        let entry = forwarder
            .resolve(&question("nope.example"), false, false)
            .await
            .expect("an answer");
        assert_eq!(entry.rcode, Rcode::NXDOMAIN);
        assert_eq!(entry.section(&entry.authority, Instant::now())[0].ttl, 30);
    }
    assert_eq!(nx.count(), 1);
}

#[tokio::test]
async fn a_silent_server_is_skipped_and_the_next_preferred() {
    let silent = Fake::start(Behaviour::Silent).await;
    let good = Fake::start(Behaviour::Answer(60)).await;
    let forwarder = forwarder(&[silent.addr, good.addr], &[]);
    let started = std::time::Instant::now();
    let entry = forwarder
        .resolve(&question("a.example"), false, false)
        .await
        .expect("an answer");
    assert_eq!(entry.answers.len(), 1);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "waited for the first"
    );
    forwarder
        .resolve(&question("b.example"), false, false)
        .await
        .expect("an answer");
    assert_eq!(
        (silent.count(), good.count()),
        (1, 2),
        "the answering server goes first"
    );
}

#[tokio::test]
async fn when_every_server_fails_the_error_says_so() {
    let a = Fake::start(Behaviour::Silent).await;
    let b = Fake::start(Behaviour::Silent).await;
    let forwarder = forwarder(&[a.addr, b.addr], &[]);
    let error = forwarder
        .resolve(&question("a.example"), false, false)
        .await
        .expect_err("should be refused");
    assert!(matches!(error, ForwardError::AllFailed { .. }), "{error}");
    assert_eq!((a.count(), b.count()), (1, 1));
    let none = self::forwarder(&[], &[]);
    let error = none
        .resolve(&question("a.example"), false, false)
        .await
        .expect_err("should be refused");
    assert!(matches!(error, ForwardError::NoUpstreams));
}

#[tokio::test]
async fn a_truncated_reply_is_asked_again_over_tcp() {
    for behaviour in [Behaviour::Truncate, Behaviour::CutShort] {
        let upstream = Fake::start(behaviour).await;
        let forwarder = forwarder(&[upstream.addr], &[]);
        let entry = forwarder
            .resolve(&question("big.example"), false, false)
            .await
            .expect("an answer");
        assert_eq!(entry.answers.len(), 60, "{behaviour:?}");
    }
}

#[tokio::test]
async fn replies_that_do_not_match_are_ignored() {
    let upstream = Fake::start(Behaviour::SpoofFirst).await;
    let forwarder = forwarder(&[upstream.addr], &[]);
    let entry = forwarder
        .resolve(&question("x.example"), false, false)
        .await
        .expect("an answer");
    assert_eq!(entry.answers.len(), 1);
}

#[tokio::test]
async fn stub_domains_have_their_own_servers() {
    let default = Fake::start(Behaviour::Answer(60)).await;
    let corp = Fake::start(Behaviour::Answer(60)).await;
    let inner = Fake::start(Behaviour::Answer(60)).await;
    let forwarder = forwarder(
        &[default.addr],
        &[("a.corp.example", inner.addr), ("corp.example", corp.addr)],
    );
    for name in [
        "db.corp.example",
        "x.a.corp.example",
        "Corp.Example",
        "example.org",
    ] {
        forwarder
            .resolve(&question(name), false, false)
            .await
            .expect("an answer");
    }
    assert_eq!((default.count(), corp.count(), inner.count()), (1, 2, 1));
}

#[test]
fn own_addresses_are_never_upstreams() {
    let own: Vec<SocketAddr> = vec![
        "0.0.0.0:53".parse().expect("an address"),
        "10.43.0.10:53".parse().expect("an address"),
    ];
    let resolv = vec![
        "127.0.0.1:53".parse().expect("an address"),
        "127.0.0.53:53".parse().expect("an address"),
        "10.43.0.10:53".parse().expect("an address"),
        "192.168.1.1:53".parse().expect("an address"),
    ];
    let upstreams = Upstreams::new(&Config::default(), resolv, &own);
    assert_eq!(
        upstreams.default_servers(),
        ["192.168.1.1:53".parse::<SocketAddr>().expect("an address")]
    );
    // Listening on loopback's port 5353 leaves 127.0.0.53:53 alone.
    let own: Vec<SocketAddr> = vec!["127.0.0.1:5353".parse().expect("an address")];
    let upstreams = Upstreams::new(
        &Config::default(),
        vec!["127.0.0.53:53".parse().expect("an address")],
        &own,
    );
    assert_eq!(upstreams.default_servers().len(), 1);
}

#[tokio::test]
async fn past_the_in_flight_bound_queries_are_refused() {
    let upstream = Fake::start(Behaviour::Answer(60)).await;
    let config = Config {
        upstream_nameservers: vec![upstream.addr],
        ..Config::default()
    };
    let options = ForwardOptions {
        max_in_flight: 0,
        ..ForwardOptions::default()
    };
    let forwarder = Forwarder::new(
        Upstreams::new(&config, Vec::new(), &[]),
        config.cache,
        options,
    );
    let error = forwarder
        .resolve(&question("a.example"), false, false)
        .await
        .expect_err("should be refused");
    assert!(matches!(error, ForwardError::Busy));
    assert_eq!(upstream.count(), 0);
}
