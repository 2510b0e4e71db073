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
    }
}
