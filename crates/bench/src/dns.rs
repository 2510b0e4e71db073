//! The cluster DNS part of `rudder-bench services`: rudder's DNS server
//! (its own process, the zone of 10,000 Services with 10 endpoints each —
//! 100,000 pod addresses — loaded through the same code the informers
//! feed) beside NSD (Debian's `nsd`, an authoritative server) serving a
//! zone file with the same Services' records, both on loopback. `dnsperf`
//! (Debian's) measures each one's QPS in turn, under the same settings;
//! a closed-loop probe measures their latency percentiles; rudder's RSS is
//! read from its process.

use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// A Service's name in both servers.
fn name(i: usize) -> String {
    format!("svc-{i}.ns-{}.svc.cluster.local", i % 100)
}

fn address(i: usize) -> String {
    format!("10.43.{}.{}", i / 250, i % 250 + 1)
}

/// The hidden `dns-serve` subcommand: rudder's DNS on `listen` with
/// `services` Services of `endpoints` endpoints each; prints `ready`.
pub async fn serve(listen: SocketAddr, services: usize, endpoints: usize) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use serde_json::json;
    use std::sync::{Arc, RwLock};
    let mut zone = rudder_dns::Zone::new("cluster.local", 5)?;
    for i in 0..services {
        let (ns, svc) = (format!("ns-{}", i % 100), format!("svc-{i}"));
        let service: Service = serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": svc},
            "spec": {"clusterIP": address(i), "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
        }))?;
        zone.apply_service(&service);
        let eps: Vec<_> = (0..endpoints)
            .map(|e| {
                let n = i * endpoints + e;
                json!({"addresses": [format!("10.{}.{}.{}", 60 + n / 62_500, (n % 62_500) / 250, n % 250 + 1)],
                       "conditions": {"ready": true}, "nodeName": "n1"})
            })
            .collect();
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": format!("{svc}-1"),
                         "labels": {"kubernetes.io/service-name": svc}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": eps
        }))?;
        zone.apply_slice(&slice);
    }
    zone.set_synced(true);
    let config = rudder_dns::Config::default();
    let forwarder = rudder_dns::forward::Forwarder::new(
        rudder_dns::forward::Upstreams::new(&config, Vec::new(), &[]),
        config.cache,
        rudder_dns::ForwardOptions::default(),
    );
    let handler = Arc::new(rudder_dns::Handler::new(
        Arc::new(RwLock::new(zone)),
        Arc::new(forwarder),
        Arc::new(rudder_dns::Metrics::default()),
    ));
    let server = rudder_dns::Server::bind(&[listen], rudder_dns::ServerOptions::default())?;
    println!("ready");
    std::io::stdout().flush()?;
    server
        .serve(handler, tokio_util::sync::CancellationToken::new())
        .await;
    Ok(())
}

/// A child killed on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The RSS of `pid` and its children, in MB.
fn rss_mb(pid: u32) -> f64 {
    let mut pids = vec![pid];
    if let Ok(children) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
        pids.extend(
            children
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .sum::<f64>()
        / 1024.0
}

fn free_port() -> anyhow::Result<u16> {
    Ok(UdpSocket::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// NSD serving the same Services' records from a zone file.
fn nsd(dir: &std::path::Path, port: u16, services: usize) -> anyhow::Result<Process> {
    let mut zone = String::from(
        "$ORIGIN cluster.local.\n$TTL 5\n@ IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5\n@ IN NS ns.dns.cluster.local.\nns.dns IN A 10.43.0.10\n",
    );
    for i in 0..services {
        let svc = name(i).trim_end_matches(".cluster.local").to_string();
        zone.push_str(&format!(
            "{svc} IN A {}\n_http._tcp.{svc} IN SRV 0 100 80 {svc}.cluster.local.\n",
            address(i)
        ));
    }
    std::fs::write(dir.join("cluster.local.zone"), zone)?;
    let config = format!(
        "server:\n  ip-address: 127.0.0.1@{port}\n  port: {port}\n  username: \"\"\n  chroot: \"\"\n  zonesdir: \"{d}\"\n  pidfile: \"{d}/nsd.pid\"\n  database: \"\"\n  xfrdfile: \"{d}/xfrd.state\"\n  zonelistfile: \"{d}/zone.list\"\n  server-count: 2\n  verbosity: 0\nremote-control:\n  control-enable: no\nzone:\n  name: cluster.local\n  zonefile: \"{d}/cluster.local.zone\"\n",
        d = dir.display()
    );
    let path = dir.join("nsd.conf");
    std::fs::write(&path, config)?;
    let child = Command::new("nsd")
        .args(["-d", "-c"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("nsd (scripts/setup --bench installs it)")?;
    Ok(Process(child))
}

/// Waits until `port` answers a query for Service 0.
fn wait_answering(port: u16) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if query_once(port, &name(0)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    anyhow::bail!("no DNS answer on port {port}")
}

/// An A query for `name`.
fn query(id: u16, name: &str) -> Vec<u8> {
    let mut packet = id.to_be_bytes().to_vec();
    packet.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        packet.push(label.len() as u8);
        packet.extend_from_slice(label.as_bytes());
    }
    packet.extend_from_slice(&[0, 0, 1, 0, 1]);
    packet
}

fn query_once(port: u16, name: &str) -> anyhow::Result<()> {
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    socket.set_read_timeout(Some(Duration::from_millis(500)))?;
    socket.send_to(&query(7, name), ("127.0.0.1", port))?;
    let mut buffer = [0u8; 512];
    let n = socket.recv(&mut buffer)?;
    anyhow::ensure!(
        n > 12 && buffer[3] & 0x0f == 0 && buffer[7] > 0,
        "no answer"
    );
    Ok(())
}

/// Closed-loop latencies (ms): `clients` threads, each sending the next
/// query when the last is answered, for `seconds`.
fn latencies(port: u16, clients: usize, seconds: u64, services: usize) -> Vec<f64> {
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            std::thread::spawn(move || {
                let mut out = Vec::new();
                let Ok(socket) = UdpSocket::bind("127.0.0.1:0") else {
                    return out;
                };
                let _ = socket.set_read_timeout(Some(Duration::from_secs(1)));
                let deadline = Instant::now() + Duration::from_secs(seconds);
                let mut buffer = [0u8; 512];
                let mut i = c * 7919;
                while Instant::now() < deadline {
                    i = (i + 104_729) % services;
                    let id = (i % 65_536) as u16;
                    let started = Instant::now();
                    if socket
                        .send_to(&query(id, &name(i)), ("127.0.0.1", port))
                        .is_err()
                    {
                        continue;
                    }
                    // A lost answer counts as a second.
                    let elapsed = match socket.recv(&mut buffer) {
                        Ok(_) => started.elapsed(),
                        Err(_) => Duration::from_secs(1),
                    };
                    out.push(elapsed.as_secs_f64() * 1000.0);
                }
                out
            })
        })
        .collect();
    threads
        .into_iter()
        .flat_map(|t| t.join().unwrap_or_default())
        .collect()
}

/// dnsperf against `port` for `seconds`: queries per second, and how many
/// were lost.
fn dnsperf(port: u16, file: &std::path::Path, seconds: u32) -> anyhow::Result<(f64, f64)> {
    let output = Command::new("dnsperf")
        .args(["-s", "127.0.0.1", "-p", &port.to_string(), "-d"])
        .arg(file)
        .args([
            "-l",
            &seconds.to_string(),
            "-c",
            "20",
            "-T",
            "2",
            "-q",
            "500",
        ])
        .output()
        .context("dnsperf (scripts/setup --bench installs it)")?;
    let text = String::from_utf8_lossy(&output.stdout);
    let field = |label: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(label))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    let qps = field("Queries per second").context(format!("dnsperf printed no QPS: {text}"))?;
    let lost = field("Queries lost").unwrap_or(0.0);
    Ok((qps, lost))
}

/// What the DNS part measured.
#[derive(Debug)]
pub struct Measured {
    pub rudder_qps: f64,
    pub nsd_qps: f64,
    pub rudder_lost: f64,
    pub nsd_lost: f64,
    pub rudder_p50_ms: f64,
    pub rudder_p99_ms: f64,
    pub nsd_p99_ms: f64,
    pub rudder_rss_mb: f64,
    pub nsd_rss_mb: f64,
    pub services: usize,
    pub endpoints: usize,
}

pub fn run(quick: bool) -> anyhow::Result<Measured> {
    let (services, endpoints, seconds) = if quick {
        (1_000, 10, 3)
    } else {
        (10_000, 10, 10)
    };
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("queries.txt");
    let mut queries = String::new();
    for i in 0..services {
        queries.push_str(&format!("{} A\n", name((i * 7919) % services)));
    }
    std::fs::write(&file, queries)?;

    let rudder_port = free_port()?;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["dns-serve", "--listen", &format!("127.0.0.1:{rudder_port}")])
        .args([
            "--services",
            &services.to_string(),
            "--endpoints",
            &endpoints.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().context("the DNS server's stdout")?;
    let rudder = Process(child);
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut ready)?;
    anyhow::ensure!(
        ready.trim() == "ready",
        "the DNS server did not start: {ready}"
    );
    wait_answering(rudder_port)?;
    let nsd_port = free_port()?;
    let nsd = nsd(dir.path(), nsd_port, services)?;
    wait_answering(nsd_port)?;

    let (rudder_qps, rudder_lost) = dnsperf(rudder_port, &file, seconds)?;
    let (nsd_qps, nsd_lost) = dnsperf(nsd_port, &file, seconds)?;
    let rudder_latencies = latencies(rudder_port, 8, u64::from(seconds) / 2, services);
    let nsd_latencies = latencies(nsd_port, 8, u64::from(seconds) / 2, services);
    let percentile = crate::report::nearest_rank;
    let measured = Measured {
        rudder_qps,
        nsd_qps,
        rudder_lost,
        nsd_lost,
        rudder_p50_ms: percentile(&rudder_latencies, 50.0),
        rudder_p99_ms: percentile(&rudder_latencies, 99.0),
        nsd_p99_ms: percentile(&nsd_latencies, 99.0),
        rudder_rss_mb: rss_mb(rudder.0.id()),
        nsd_rss_mb: rss_mb(nsd.0.id()),
        services,
        endpoints,
    };
    eprintln!(
        "DNS: rudder {:.0} QPS ({} lost), p50 {:.2} ms p99 {:.2} ms, RSS {:.1} MB; NSD {:.0} QPS ({} lost), p99 {:.2} ms, RSS {:.1} MB",
        measured.rudder_qps,
        measured.rudder_lost,
        measured.rudder_p50_ms,
        measured.rudder_p99_ms,
        measured.rudder_rss_mb,
        measured.nsd_qps,
        measured.nsd_lost,
        measured.nsd_p99_ms,
        measured.nsd_rss_mb
    );
    Ok(measured)
}
