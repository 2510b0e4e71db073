//! The listeners on 127.0.0.1, ephemeral ports.

use std::sync::RwLock;

use super::*;
use crate::config::Config;
use crate::forward::tests::{Behaviour, Fake};
use crate::forward::{ForwardOptions, Forwarder, Upstreams};
use crate::wire::{Message, Name, Rcode, rtype};
use crate::zone::tests::{cluster, service, slice};

struct Running {
    address: SocketAddr,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(self) {
        self.stop.cancel();
        self.task.await.expect("the server stops cleanly");
    }
}

async fn start(options: ServerOptions, upstreams: &[SocketAddr]) -> Running {
    let mut zone = cluster();
    zone.apply_service(&service("demo", "many", "None", &[]));
    let addresses: Vec<String> = (0..100).map(|i| format!("10.42.9.{i}")).collect();
    let endpoints: Vec<(&str, Option<&str>, bool)> =
        addresses.iter().map(|a| (a.as_str(), None, true)).collect();
    zone.apply_slice(&slice("demo", "many", "many-1", &endpoints, &[]));
    let config = Config {
        upstream_nameservers: upstreams.to_vec(),
        ..Config::default()
    };
    let forwarder = Forwarder::new(
        Upstreams::new(&config, Vec::new(), &[]),
        config.cache,
        ForwardOptions::default(),
    );
    let metrics = Arc::new(Metrics::default());
    let handler = Arc::new(Handler::new(
        Arc::new(RwLock::new(zone)),
        Arc::new(forwarder),
        metrics.clone(),
    ));
    let server =
        Server::bind(&["127.0.0.1:0".parse().expect("an address")], options).expect("an address");
    let address = server.local_addrs()[0];
    assert_ne!(address.port(), 0);
    let stop = CancellationToken::new();
    let task = tokio::spawn(server.serve(handler, stop.clone()));
    Running {
        address,
        metrics,
        stop,
        task,
    }
}

fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    wire::query(
        id,
        Name::from_text(name).expect("a valid name"),
        qtype,
        None,
    )
    .to_vec()
}

async fn udp_ask(server: SocketAddr, packet: &[u8]) -> Option<Message> {
    let socket = UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("a socket on loopback");
    socket.send_to(packet, server).await.expect("a send");
    let mut buffer = vec![0u8; 65535];
    let received = tokio::time::timeout(Duration::from_millis(500), socket.recv(&mut buffer)).await;
    let len = received.ok()?.expect("a receive");
    Some(Message::parse(&buffer[..len]).expect("a message that parses"))
}

async fn read_frame(stream: &mut TcpStream) -> Option<Message> {
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).await.ok()?;
    let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut body).await.ok()?;
    Some(Message::parse(&body).expect("a message that parses"))
}

fn framed(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for packet in packets {
        out.extend_from_slice(&(packet.len() as u16).to_be_bytes());
        out.extend_from_slice(packet);
    }
    out
}

#[tokio::test]
async fn udp_answers_and_truncates_while_tcp_answers_whole() {
    let options = ServerOptions {
        udp_sockets: 2,
        ..ServerOptions::default()
    };
    let server = start(options, &[]).await;
    let reply = udp_ask(
        server.address,
        &query(1, "kubernetes.default.svc.cluster.local", rtype::A),
    )
    .await
    .expect("a reply");
    assert_eq!(
        reply.answers[0].to_string(),
        "kubernetes.default.svc.cluster.local. 5 IN A 10.43.0.1"
    );
    let big = query(2, "many.demo.svc.cluster.local", rtype::A);
    let reply = udp_ask(server.address, &big).await.expect("a reply");
    assert!(reply.header.truncated && reply.answers.len() < 100);
    // What a stub resolver does next: the same over TCP.
    let mut stream = TcpStream::connect(server.address)
        .await
        .expect("a connection to the server");
    stream.write_all(&framed(&[big])).await.expect("a write");
    let reply = read_frame(&mut stream).await.expect("a reply");
    assert!(!reply.header.truncated);
    assert_eq!(reply.answers.len(), 100);
    // Short packets get no reply at all.
    assert!(udp_ask(server.address, &[0, 1, 2]).await.is_none());
    let snapshot = server.metrics.snapshot();
    assert_eq!(
        (snapshot.udp_queries, snapshot.tcp_queries, snapshot.dropped),
        (3, 1, 1)
    );
    server.stop().await;
}

#[tokio::test]
async fn tcp_takes_pipelined_queries_and_forwards() {
    let upstream = Fake::start(Behaviour::Answer(60)).await;
    let server = start(ServerOptions::default(), &[upstream.addr]).await;
    let mut stream = TcpStream::connect(server.address)
        .await
        .expect("a connection to the server");
    // One write, three queries: one forwarded, two from the zone; the
    // replies come as they are ready.
    let packets = [
        query(10, "www.example.com", rtype::A),
        query(11, "web.demo.svc.cluster.local", rtype::A),
        query(12, "nope.demo.svc.cluster.local", rtype::A),
    ];
    stream.write_all(&framed(&packets)).await.expect("a write");
    let mut seen = Vec::new();
    for _ in 0..3 {
        let reply = read_frame(&mut stream).await.expect("a reply");
        seen.push((reply.header.id, reply.rcode, reply.answers.len()));
    }
    seen.sort_by_key(|s| s.0);
    assert_eq!(
        seen,
        [
            (10, Rcode::NOERROR, 1),
            (11, Rcode::NOERROR, 1),
            (12, Rcode::NXDOMAIN, 0)
        ]
    );
    // A client that half-closes still gets its answers.
    let mut stream = TcpStream::connect(server.address)
        .await
        .expect("a connection to the server");
    stream
        .write_all(&framed(&[query(13, "db.demo.svc.cluster.local", rtype::A)]))
        .await
        .expect("a write");
    stream.shutdown().await.expect("a half-close");
    assert_eq!(read_frame(&mut stream).await.map(|r| r.header.id), Some(13));
    // Forwarded over UDP too.
    let reply = udp_ask(server.address, &query(14, "www.example.org", rtype::A))
        .await
        .expect("a reply");
    assert_eq!((reply.header.id, reply.answers.len()), (14, 1));
    server.stop().await;
}

#[tokio::test]
async fn idle_and_surplus_connections_are_closed() {
    let options = ServerOptions {
        tcp_connections: 1,
        tcp_idle: Duration::from_millis(200),
        ..ServerOptions::default()
    };
    let server = start(options, &[]).await;
    let mut first = TcpStream::connect(server.address)
        .await
        .expect("a connection to the server");
    first
        .write_all(&framed(&[query(1, "cluster.local", rtype::SOA)]))
        .await
        .expect("a write");
    assert!(read_frame(&mut first).await.is_some());
    // A second connection while the first is open: closed at once.
    let mut second = TcpStream::connect(server.address)
        .await
        .expect("a connection to the server");
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_millis(150), second.read(&mut byte)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    // The first goes idle and is closed.
    let read = tokio::time::timeout(Duration::from_secs(2), first.read(&mut byte)).await;
    assert!(matches!(read, Ok(Ok(0))), "{read:?}");
    let snapshot = server.metrics.snapshot();
    assert_eq!((snapshot.tcp_connections, snapshot.tcp_rejected), (1, 1));
    server.stop().await;
}

#[tokio::test]
async fn an_address_in_use_is_an_error_naming_it() {
    let taken = UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("a socket on loopback");
    let address = taken.local_addr().expect("a local address");
    let options = ServerOptions {
        udp_sockets: 1,
        ..ServerOptions::default()
    };
    let error = Server::bind(&[address], options).expect_err("should be refused");
    assert!(
        error
            .to_string()
            .starts_with(&format!("listening for DNS on {address} (udp)")),
        "{error}"
    );
}
