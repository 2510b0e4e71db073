//! `rudder-bench services` (root): the service proxy, in network
//! namespaces the bench makes — a client "pod", a node holding the rules,
//! a server "pod" — with real nftables and real connections; nothing
//! leaves the machine.
//!
//! - Programming: 10,000 Services × 10 endpoints into a new table (the
//!   proxy's chunked cold start), and into a table that exists (a
//!   restarted agent: one atomic replacement); then one Service added on
//!   top, and endpoint changes until their rules are in place — beside
//!   upstream kube-proxy's nftables layout (per-endpoint chains, a
//!   service chain with an anonymous `numgen` vmap each, as its proxier
//!   tests spell them) for the same Services through the same `nft`.
//! - Data plane: connect (first packet) latency through a ClusterIP with
//!   one Service and with 10,000 programmed, beside the pod's own address;
//!   bulk throughput (iperf3) through the ClusterIP against the pod's
//!   address.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rudder_host::Host;
use rudder_proxy::model::ServiceName;
use rudder_proxy::proxier::{CHUNK, Proxier};
use rudder_proxy::rules::{Config, hashed};
use rudder_proxy::topology::Locality;
use serde_json::json;

use crate::Options;
use crate::report::nearest_rank as percentile;
use crate::report::{Metric, Report};

const CLIENT: &str = "rbench-client";
const NODE: &str = "rbench-node";
const PODS: &str = "rbench-pods";
/// The server pod's address, and the client pod's.
const SERVER_IP: &str = "10.44.2.2";
const CLIENT_IP: &str = "10.44.1.2";
/// The measured Services' addresses (outside the generated ones').
const TARGET_IP: &str = "10.43.200.1";
const IPERF_IP: &str = "10.43.200.2";
const SINK_PORT: u16 = 8080;
const IPERF_PORT: u16 = 5201;

fn sh(script: &str) -> anyhow::Result<()> {
    let status = Command::new("sh").args(["-c", script]).status()?;
    anyhow::ensure!(status.success(), "failed: {script}");
    Ok(())
}

/// The three namespaces and the servers in them; removed on drop.
struct Namespaces {
    servers: Vec<Child>,
}

impl Namespaces {
    fn make() -> anyhow::Result<Namespaces> {
        Namespaces::remove();
        sh(&format!(
            "ip netns add {CLIENT} && ip netns add {NODE} && ip netns add {PODS} && \
             ip link add rbc0 netns {CLIENT} type veth peer name rbn1 netns {NODE} && \
             ip link add rbp0 netns {PODS} type veth peer name rbn2 netns {NODE} && \
             ip -n {CLIENT} addr add {CLIENT_IP}/24 dev rbc0 && ip -n {CLIENT} link set rbc0 up && \
             ip -n {CLIENT} link set lo up && ip -n {CLIENT} route add default via 10.44.1.1 && \
             ip -n {PODS} addr add {SERVER_IP}/24 dev rbp0 && ip -n {PODS} link set rbp0 up && \
             ip -n {PODS} link set lo up && ip -n {PODS} route add default via 10.44.2.1 && \
             ip -n {NODE} addr add 10.44.1.1/24 dev rbn1 && ip -n {NODE} link set rbn1 up && \
             ip -n {NODE} addr add 10.44.2.1/24 dev rbn2 && ip -n {NODE} link set rbn2 up && \
             ip -n {NODE} link set lo up && \
             ip netns exec {NODE} sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'"
        ))?;
        let exe = std::env::current_exe()?;
        let sink = Command::new("ip")
            .args(["netns", "exec", PODS])
            .arg(&exe)
            .args(["tcp-sink", "--port", &SINK_PORT.to_string()])
            .stdout(Stdio::null())
            .spawn()?;
        let iperf = Command::new("ip")
            .args([
                "netns",
                "exec",
                PODS,
                "iperf3",
                "-s",
                "-p",
                &IPERF_PORT.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("iperf3 (scripts/setup --bench installs it)")?;
        std::thread::sleep(Duration::from_millis(300));
        Ok(Namespaces {
            servers: vec![sink, iperf],
        })
    }

    fn remove() {
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "for n in {CLIENT} {NODE} {PODS}; do ip netns pids $n 2>/dev/null | xargs -r kill; ip netns del $n 2>/dev/null; done"
            ))
            .status();
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
        Namespaces::remove();
    }
}

fn service(name: &str, ip: &str, port: u16) -> Service {
    serde_json::from_value(json!({
        "metadata": {"namespace": "bench", "name": name},
        "spec": {"clusterIP": ip, "ports": [{"name": "p", "port": port, "protocol": "TCP"}]}
    }))
    .expect("a Service")
}

fn slice(service: &str, ips: &[String], port: u16) -> EndpointSlice {
    let endpoints: Vec<_> = ips
        .iter()
        .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}, "nodeName": "other"}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"namespace": "bench", "name": format!("{service}-1"),
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "p", "port": port, "protocol": "TCP"}],
        "endpoints": endpoints
    }))
    .expect("an EndpointSlice")
}

/// The generated Service `i`'s address, and its endpoints'.
fn generated(i: usize, endpoints: usize) -> (String, Vec<String>) {
    let ip = format!("10.43.{}.{}", i / 250, i % 250 + 1);
    let eps = (0..endpoints)
        .map(|e| {
            let n = i * endpoints + e;
            format!(
                "10.{}.{}.{}",
                60 + n / 62_500,
                (n % 62_500) / 250,
                n % 250 + 1
            )
        })
        .collect();
    (ip, eps)
}

fn config() -> Config {
    Config {
        cluster_cidr: "10.44.0.0/16".parse().expect("cidr"),
        service_cidr: "10.43.0.0/16".parse().expect("cidr"),
    }
}

fn proxier() -> Proxier {
    Proxier::new(
        config(),
        Locality {
            node_name: "bench".into(),
            zone: None,
        },
    )
}

/// Adds the measured Services (the sink's and iperf3's).
fn add_targets(proxier: &mut Proxier) {
    for (name, ip, port, target) in [
        ("target", TARGET_IP, 80, SINK_PORT),
        ("iperf", IPERF_IP, IPERF_PORT, IPERF_PORT),
    ] {
        proxier.service(
            ServiceName::new("bench", name),
            Some(&service(name, ip, port)),
        );
        proxier.slice(None, Some(&slice(name, &[SERVER_IP.to_string()], target)));
    }
}

fn add_generated(proxier: &mut Proxier, count: usize, endpoints: usize) {
    for i in 0..count {
        let name = format!("svc-{i}");
        let (ip, eps) = generated(i, endpoints);
        proxier.service(
            ServiceName::new("bench", &name),
            Some(&service(&name, &ip, 80)),
        );
        proxier.slice(None, Some(&slice(&name, &eps, 80)));
    }
}

/// Applies every pending transaction; how long they took together.
async fn sync(proxier: &mut Proxier, host: &dyn Host) -> anyhow::Result<Duration> {
    let started = Instant::now();
    while let Some(transaction) = proxier.next_transaction(CHUNK) {
        rudder_host::nft::apply(host, &transaction)
            .await
            .context("apply the proxy's transaction")?;
    }
    Ok(started.elapsed())
}

/// Connect latencies (µs) from the client pod to `target`, `count` times.
fn connect_latencies(target: &str, count: usize) -> anyhow::Result<Vec<f64>> {
    let exe = std::env::current_exe()?;
    let output = Command::new("ip")
        .args(["netns", "exec", CLIENT])
        .arg(exe)
        .args([
            "connect-probe",
            "--target",
            target,
            "--count",
            &count.to_string(),
        ])
        .output()?;
    anyhow::ensure!(
        output.status.success(),
        "connect probe to {target}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let latencies: Vec<f64> = serde_json::from_slice(&output.stdout)?;
    Ok(latencies)
}

/// iperf3 from the client pod to `address` for `seconds`: Gbit/s.
fn throughput(address: &str, seconds: u32) -> anyhow::Result<f64> {
    let output = Command::new("ip")
        .args(["netns", "exec", CLIENT, "iperf3", "-J", "-c", address, "-p"])
        .arg(IPERF_PORT.to_string())
        .args(["-t", &seconds.to_string()])
        .output()?;
    anyhow::ensure!(output.status.success(), "iperf3 to {address} failed");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .map(|b| b / 1e9)
        .context("iperf3's report has no sum_received")
}

/// Upstream kube-proxy's nftables ruleset (its proxier tests' layout,
/// 1.34) for the same Services: per-endpoint chains, and a service chain
/// with an anonymous `numgen` vmap each.
fn upstream_layout(from: usize, count: usize, endpoints: usize, base: bool) -> String {
    let t = "kube-proxy";
    let mut out = String::new();
    if base {
        out.push_str(&format!(
            "add table ip {t}\nadd set ip {t} cluster-ips {{ type ipv4_addr ; }}\n\
             add map ip {t} service-ips {{ type ipv4_addr . inet_proto . inet_service : verdict ; }}\n\
             add chain ip {t} nat-prerouting {{ type nat hook prerouting priority -100 ; }}\n\
             add chain ip {t} services\nadd chain ip {t} mark-for-masquerade\n\
             add rule ip {t} mark-for-masquerade mark set mark or 0x4000\n\
             add rule ip {t} nat-prerouting jump services\n\
             add rule ip {t} services ip daddr . meta l4proto . th dport vmap @service-ips\n"
        ));
    }
    for i in from..from + count {
        let (ip, eps) = generated(i, endpoints);
        let service = format!("service-{}", hashed(&format!("bench/up-{i}/tcp/p")));
        out.push_str(&format!("add chain ip {t} {service}\n"));
        let mut choices = Vec::new();
        for (n, ep) in eps.iter().enumerate() {
            let chain = format!(
                "endpoint-{}",
                hashed(&format!("bench/up-{i}/tcp/p__{ep}/80"))
            );
            out.push_str(&format!(
                "add chain ip {t} {chain}\nadd rule ip {t} {chain} ip saddr {ep} jump mark-for-masquerade\n\
                 add rule ip {t} {chain} meta l4proto tcp dnat to {ep}:80\n"
            ));
            choices.push(format!("{n} : goto {chain}"));
        }
        out.push_str(&format!(
            "add rule ip {t} {service} ip daddr {ip} ip saddr != 10.44.0.0/16 jump mark-for-masquerade\n\
             add rule ip {t} {service} numgen random mod {} vmap {{ {} }}\n\
             add element ip {t} cluster-ips {{ {ip} }}\n\
             add element ip {t} service-ips {{ {ip} . tcp . 80 : goto {service} }}\n",
            eps.len(),
            choices.join(", ")
        ));
    }
    out
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// What the programming phases measured (printed as JSON by the hidden
/// `services-program` subcommand, which runs inside the node's namespace
/// so that its `nft` runs there as a node's proxy runs it — not through
/// `ip netns exec`).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Programmed {
    cold_ms: f64,
    replaced_ms: f64,
    adds_ms: Vec<f64>,
    changes_ms: Vec<f64>,
    upstream_cold_ms: f64,
    upstream_adds_ms: Vec<f64>,
}

/// The programming phases (`small`: the measured Services alone; `full`:
/// all of them, cold, replaced, one on top, endpoint changes; `upstream`:
/// upstream's layout), in the namespace this process runs in.
pub async fn program(
    phase: &str,
    services: usize,
    endpoints: usize,
    changes: usize,
) -> anyhow::Result<()> {
    let host = rudder_host::System;
    let mut out = Programmed::default();
    rudder_host::nft::delete_table(&host, "ip", rudder_proxy::rules::TABLE).await?;
    match phase {
        "small" => {
            let mut small = proxier();
            add_targets(&mut small);
            sync(&mut small, &host).await?;
        }
        "full" => {
            let mut big = proxier();
            add_targets(&mut big);
            add_generated(&mut big, services, endpoints);
            out.cold_ms = ms(sync(&mut big, &host).await?);
            // A restarted agent: the existing table replaced whole, at once.
            let mut restarted = proxier();
            add_targets(&mut restarted);
            add_generated(&mut restarted, services, endpoints);
            restarted.failed();
            out.replaced_ms = ms(sync(&mut restarted, &host).await?);
            // One Service on top, and endpoint changes, each until applied.
            for k in 0..20 {
                let name = format!("extra-{k}");
                let (_, eps) = generated(services + k, endpoints);
                let started = Instant::now();
                restarted.service(
                    ServiceName::new("bench", &name),
                    Some(&service(&name, &format!("10.43.199.{}", k + 1), 80)),
                );
                restarted.slice(None, Some(&slice(&name, &eps, 80)));
                sync(&mut restarted, &host).await?;
                out.adds_ms.push(ms(started.elapsed()));
            }
            for c in 0..changes {
                let i = (c * 7919) % services;
                let name = format!("svc-{i}");
                let (_, mut eps) = generated(i, endpoints);
                eps[c % endpoints] = format!("10.59.{}.{}", c / 250, c % 250 + 1);
                let started = Instant::now();
                restarted.slice(None, Some(&slice(&name, &eps, 80)));
                sync(&mut restarted, &host).await?;
                out.changes_ms.push(ms(started.elapsed()));
            }
        }
        "upstream" => {
            let text = upstream_layout(0, services, endpoints, true);
            let started = Instant::now();
            rudder_host::nft::apply(&host, &text).await?;
            out.upstream_cold_ms = ms(started.elapsed());
            for k in 0..5 {
                let text = upstream_layout(services + k, 1, endpoints, false);
                let started = Instant::now();
                rudder_host::nft::apply(&host, &text).await?;
                out.upstream_adds_ms.push(ms(started.elapsed()));
            }
            rudder_host::nft::delete_table(&host, "ip", "kube-proxy").await?;
        }
        other => anyhow::bail!("no phase {other}"),
    }
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

/// Runs a programming phase inside the node's namespace.
fn program_in_node(
    phase: &str,
    services: usize,
    endpoints: usize,
    changes: usize,
) -> anyhow::Result<Programmed> {
    let output = Command::new("ip")
        .args(["netns", "exec", NODE])
        .arg(std::env::current_exe()?)
        .args(["services-program", "--phase", phase])
        .args(["--services", &services.to_string()])
        .args(["--endpoints", &endpoints.to_string()])
        .args(["--changes", &changes.to_string()])
        .stderr(Stdio::inherit())
        .output()?;
    anyhow::ensure!(
        output.status.success(),
        "the {phase} programming phase failed"
    );
    Ok(serde_json::from_slice(&output.stdout)?)
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    anyhow::ensure!(
        crate::node::is_root(),
        "the services bench needs root (network namespaces, nftables)"
    );
    let (services, endpoints, samples, changes) = if options.quick {
        (1_000, 10, 300, 40)
    } else {
        (10_000, 10, 2_000, 200)
    };
    let _namespaces = Namespaces::make()?;
    let target = format!("{TARGET_IP}:80");
    let mut metrics = Vec::new();

    // The data plane with one Service (and iperf3's).
    program_in_node("small", 0, 0, 0)?;
    let pod = connect_latencies(&format!("{SERVER_IP}:{SINK_PORT}"), samples)?;
    let one = connect_latencies(&target, samples)?;
    let through_cluster_ip = throughput(IPERF_IP, if options.quick { 2 } else { 5 })?;
    let to_pod = throughput(SERVER_IP, if options.quick { 2 } else { 5 })?;
    eprintln!(
        "connect p50: pod {:.0} µs, ClusterIP (1 Service) {:.0} µs; throughput {through_cluster_ip:.1} vs {to_pod:.1} Gbit/s",
        percentile(&pod, 50.0),
        percentile(&one, 50.0)
    );
    let full = program_in_node("full", services, endpoints, changes)?;
    let many = connect_latencies(&target, samples)?;
    let (adds, programmed) = (&full.adds_ms, &full.changes_ms);
    eprintln!(
        "cold start {services} Services × {endpoints}: {:.0} ms; replace whole {:.0} ms; one Service on top p50 {:.1} ms p99 {:.1} ms; endpoint change p50 {:.1} ms p99 {:.1} ms; connect p50 with them {:.0} µs",
        full.cold_ms,
        full.replaced_ms,
        percentile(adds, 50.0),
        percentile(adds, 99.0),
        percentile(programmed, 50.0),
        percentile(programmed, 99.0),
        percentile(&many, 50.0)
    );
    let peer = program_in_node("upstream", services, endpoints, 0)?;
    eprintln!(
        "upstream's layout: cold {:.0} ms, one Service on top p50 {:.1} ms",
        peer.upstream_cold_ms,
        percentile(&peer.upstream_adds_ms, 50.0)
    );

    let upstream = "upstream's nftables layout, same nft";
    metrics.push(
        Metric::new("cold_start_ms", "ms", full.cold_ms)
            .peer(upstream, peer.upstream_cold_ms)
            .target("< 2,000 ms"),
    );
    metrics.push(Metric::new("replace_whole_ms", "ms", full.replaced_ms));
    metrics.push(
        Metric::new("one_service_on_top_p50_ms", "ms", percentile(adds, 50.0))
            .peer(upstream, percentile(&peer.upstream_adds_ms, 50.0)),
    );
    metrics.push(
        Metric::new("one_service_on_top_p99_ms", "ms", percentile(adds, 99.0)).target("< 20 ms"),
    );
    metrics.push(Metric::new(
        "endpoint_change_p50_ms",
        "ms",
        percentile(programmed, 50.0),
    ));
    metrics.push(
        Metric::new("endpoint_change_p99_ms", "ms", percentile(programmed, 99.0))
            .target("< 100 ms (upstream's SLO: 30 s)"),
    );
    metrics.push(
        Metric::new("connect_p50_us_1_service", "µs", percentile(&one, 50.0))
            .peer("the pod's own address", percentile(&pod, 50.0)),
    );
    metrics.push(
        Metric::new("connect_p50_us_10k_services", "µs", percentile(&many, 50.0))
            .peer("1 Service", percentile(&one, 50.0))
            .target("≤ 1.2× with 1 Service"),
    );
    metrics.push(
        Metric::new("connect_p99_us_10k_services", "µs", percentile(&many, 99.0))
            .peer("1 Service", percentile(&one, 99.0)),
    );
    metrics.push(
        Metric::new("throughput_gbps", "Gbit/s", through_cluster_ip)
            .peer("the pod's own address", to_pod)
            .target("≥ 0.9× the pod's address"),
    );
    let dns = crate::dns::run(options.quick)?;
    metrics.push(
        Metric::new("dns_qps", "queries/s", dns.rudder_qps)
            .peer("NSD 4.6", dns.nsd_qps)
            .target("≥ 0.5× NSD and ≥ 30,000"),
    );
    metrics.push(Metric::new("dns_p50_ms", "ms", dns.rudder_p50_ms));
    metrics.push(
        Metric::new("dns_p99_ms", "ms", dns.rudder_p99_ms)
            .peer("NSD 4.6", dns.nsd_p99_ms)
            .target("< 5 ms"),
    );
    let coredns_mb = 49.0 + 0.86 * (dns.services * (dns.endpoints + 1)) as f64 / 1024.0;
    metrics.push(
        Metric::new("dns_rss_mb", "MB", dns.rudder_rss_mb)
            .peer("CoreDNS's published formula", coredns_mb)
            .target("≤ half of CoreDNS's formula"),
    );
    metrics.push(Metric::new("dns_lost_queries", "queries", dns.rudder_lost));
    Ok(Report {
        scenario: "services".into(),
        quick: options.quick,
        partial: None,
        metrics,
        conditions: vec![
            format!("three network namespaces the bench makes: a client pod, a node holding the rules (the proxy's code, `nft -f`), a server pod; {services} Services × {endpoints} endpoints generated (their endpoints addresses nothing answers), plus the measured Services whose one endpoint is the server pod"),
            "`cold_start_ms`: from the Services known to all of them programmed, into a new table, in the proxy's chunks of 1,000 Services; the peer: upstream kube-proxy's nftables layout (its proxier tests', 1.34: a service chain with an anonymous `numgen … vmap` and a chain per endpoint) for the same Services in one transaction, as upstream's cold start makes it".into(),
            "`replace_whole_ms`: the same Services replacing an existing table in one transaction (what a restarted agent does, so that traffic never meets half a table)".into(),
            "`one_service_on_top_…`: one more Service of 10 endpoints, from the change to its transaction applied, 20 times (the peer: the same Service's chains and elements added to upstream's layout, 5 times)".into(),
            format!("`endpoint_change_…`: one endpoint of an existing Service replaced, from the EndpointSlice change handed to the proxy to its transaction applied, {changes} times (not the API server's or the informer's share)"),
            format!("`connect_…`: TCP connects from the client pod, {samples} per figure, with one Service and with all of them programmed; the peer of the first: the pod's own address"),
            "`throughput_gbps`: iperf3 from the client pod through the ClusterIP, against the same to the pod's own address, over veth pairs".into(),
            format!("`dns_…`: rudder's DNS server in a process of its own (the bench binary's `dns-serve`: the zone of {services} Services with {endpoints} endpoints each, loaded through the code the informers feed; no API server) beside NSD 4.6 serving a zone file with the same Services' A and SRV records, both on loopback; `dns_qps`: dnsperf 2.10 (20 clients, 2 threads, 500 outstanding) for 10 s against each in turn, A queries for the Services' names; `dns_p99_ms`: 8 closed-loop clients for 5 s against each (a lost answer counts as 1 s); `dns_rss_mb`: the server process's RSS with all of them loaded, against CoreDNS's published memory formula, 49 MB + 0.86 KB per pod and Service (coredns/deployment `kubernetes/Scaling_CoreDNS.md`), for {} pods and Services (CoreDNS's own published QPS anchor: 33.7k on 2 vCPUs)", services * (endpoints + 1)),
        ],
    })
}

/// The hidden `connect-probe` subcommand: connects to `target` `count`
/// times, printing each connect's latency in µs as a JSON list.
pub fn connect_probe(target: SocketAddr, count: usize) -> anyhow::Result<()> {
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let stream = std::net::TcpStream::connect_timeout(&target, Duration::from_secs(2))
            .with_context(|| format!("connect to {target}"))?;
        latencies.push(started.elapsed().as_secs_f64() * 1e6);
        drop(stream);
    }
    println!("{}", serde_json::to_string(&latencies)?);
    Ok(())
}

/// The hidden `tcp-sink` subcommand: accepts and drops connections.
pub fn tcp_sink(port: u16) -> anyhow::Result<()> {
    let listener = std::net::TcpListener::bind(("0.0.0.0", port))?;
    for stream in listener.incoming() {
        drop(stream);
    }
    Ok(())
}
