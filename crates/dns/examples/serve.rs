//! A load target for dnsperf: the cluster DNS server on loopback with a
//! zone of many Services (no API server; names outside the cluster are
//! SERVFAIL unless `DNS_UPSTREAM=ip:port` names a resolver — another
//! instance on loopback with `DNS_DOMAIN=other.test`, say).
//!
//! ```sh
//! cargo run --release -p rudder-dns --example serve -- 127.0.0.1:5353 10000 [UDP sockets]
//! dnsperf -s 127.0.0.1 -p 5353 -d queries.txt -l 10
//! ```
//! Services are `svc-<i>.ns-<i % 100>.svc.<DNS_DOMAIN or cluster.local>` (ClusterIP
//! 10.43.x.y, port `http`), each with one ready endpoint 10.42.x.y.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rudder_dns::config::Config;
use rudder_dns::forward::{ForwardOptions, Forwarder, Upstreams};
use rudder_dns::{Handler, Metrics, Server, ServerOptions, Zone};
use tokio_util::sync::CancellationToken;

fn meta(ns: &str, name: &str, labels: Option<BTreeMap<String, String>>) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(ns.into()),
        name: Some(name.into()),
        labels,
        ..Default::default()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let listen: SocketAddr = args.next().as_deref().unwrap_or("127.0.0.1:5353").parse()?;
    let count: u32 = args.next().as_deref().unwrap_or("10000").parse()?;
    let mut options = ServerOptions::default();
    if let Some(sockets) = args.next() {
        options.udp_sockets = sockets.parse()?;
    }
    let domain = std::env::var("DNS_DOMAIN").unwrap_or_else(|_| "cluster.local".into());
    let mut zone = Zone::new(&domain, 5)?;
    for i in 0..count {
        let (ns, name) = (format!("ns-{}", i % 100), format!("svc-{i}"));
        let (hi, lo) = (i / 250, i % 250 + 1);
        zone.apply_service(&Service {
            metadata: meta(&ns, &name, None),
            spec: Some(ServiceSpec {
                cluster_ip: Some(format!("10.43.{hi}.{lo}")),
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    port: 80,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
        let label = BTreeMap::from([("kubernetes.io/service-name".to_string(), name.clone())]);
        zone.apply_slice(&EndpointSlice {
            metadata: meta(&ns, &format!("{name}-x"), Some(label)),
            address_type: "IPv4".into(),
            endpoints: vec![Endpoint {
                addresses: vec![format!("10.42.{hi}.{lo}")],
                ..Default::default()
            }],
            ports: Some(vec![EndpointPort {
                name: Some("http".into()),
                port: Some(8080),
                ..Default::default()
            }]),
        });
    }
    let mut config = Config::default();
    if let Ok(upstream) = std::env::var("DNS_UPSTREAM") {
        config.upstream_nameservers = vec![upstream.parse()?];
    }
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
    let server = Server::bind(&[listen], options)?;
    println!("serving {count} Services on {:?}", server.local_addrs());
    let stop = CancellationToken::new();
    let serving = tokio::spawn(server.serve(handler, stop.clone()));
    tokio::signal::ctrl_c().await?;
    stop.cancel();
    serving.await?;
    println!("{}", metrics.snapshot());
    Ok(())
}
