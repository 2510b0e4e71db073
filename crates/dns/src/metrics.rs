//! What the server counts: plain atomic counters the wiring can read and
//! print (or serve in Prometheus text form) — no registry, no exporter.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident),* $(,)?) => {
        /// The server's counters, shared by every listener.
        #[derive(Debug, Default)]
        pub struct Metrics {
            $($(#[doc = $doc])* pub $name: AtomicU64,)*
        }

        /// The counters at one moment.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct Snapshot {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl Metrics {
            pub fn snapshot(&self) -> Snapshot {
                Snapshot {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                }
            }
        }

        impl Snapshot {
            /// The counters in Prometheus' text format
            /// (`rudder_dns_<name>_total`).
            pub fn prometheus(&self) -> String {
                let mut out = String::new();
                $(
                    out.push_str(&format!(
                        "# TYPE rudder_dns_{name}_total counter\nrudder_dns_{name}_total {value}\n",
                        name = stringify!($name),
                        value = self.$name,
                    ));
                )*
                out
            }
        }

        impl fmt::Display for Snapshot {
            /// `name=value` pairs, space separated.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut first = true;
                $(
                    if !first {
                        f.write_str(" ")?;
                    }
                    first = false;
                    write!(f, "{}={}", stringify!($name), self.$name)?;
                )*
                let _ = first;
                Ok(())
            }
        }
    };
}

counters! {
    /// Queries received over UDP (dropped ones included).
    udp_queries,
    /// Queries received over TCP.
    tcp_queries,
    /// Answered from the cluster zone.
    authoritative,
    /// NXDOMAIN answers from the cluster zone.
    nxdomain,
    /// Forwarded names answered from the cache.
    cache_hits,
    /// Forwarded names that were not in the cache.
    forwarded,
    /// Forwarded names no upstream answered (SERVFAIL).
    upstream_failures,
    /// REFUSED: another class, a zone transfer, too many in flight.
    refused,
    /// FORMERR: malformed queries.
    formerr,
    /// NOTIMP: opcodes other than QUERY.
    notimp,
    /// Packets too short or not queries: no reply.
    dropped,
    /// UDP replies cut to fit (TC set).
    truncated,
    /// TCP connections accepted.
    tcp_connections,
    /// TCP connections closed at once: too many open.
    tcp_rejected,
}

impl Metrics {
    pub(crate) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Serves the counters at `GET /metrics` (any other path: 404) on
/// `listen` until `stop` — the `metrics` port (9153) of the `kube-dns`
/// Service, as CoreDNS's `prometheus` plugin serves it.
pub async fn serve_http(
    listen: std::net::SocketAddr,
    metrics: std::sync::Arc<Metrics>,
    freebind: bool,
    stop: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener =
        tokio::net::TcpListener::from_std(crate::server::tcp_listener(listen, freebind)?)?;
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            accepted = listener.accept() => accepted,
        };
        let Ok((mut stream, _)) = accepted else {
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buffer = [0u8; 1024];
            let read = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buffer[..n]),
                    }
                }
            })
            .await;
            if read.is_err() {
                return;
            }
            let request = String::from_utf8_lossy(&head);
            let path = request.split_whitespace().nth(1).unwrap_or_default();
            let (status, body) = if path == "/metrics" || path.starts_with("/metrics?") {
                ("200 OK", metrics.snapshot().prometheus())
            } else {
                ("404 Not Found", "404 page not found\n".to_string())
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_print_every_counter() {
        let metrics = Metrics::default();
        Metrics::add(&metrics.udp_queries);
        Metrics::add(&metrics.udp_queries);
        Metrics::add(&metrics.tcp_rejected);
        let text = metrics.snapshot().to_string();
        assert!(text.starts_with("udp_queries=2 tcp_queries=0 "), "{text}");
        assert!(text.ends_with(" tcp_rejected=1"), "{text}");
        let prometheus = metrics.snapshot().prometheus();
        assert!(
            prometheus.starts_with(
                "# TYPE rudder_dns_udp_queries_total counter\nrudder_dns_udp_queries_total 2\n"
            ),
            "{prometheus}"
        );
    }
}
