//! `/metrics` in the Prometheus text format: requests and their latencies by
//! verb, resource and code; the watches in flight; store operation
//! latencies (through [`MeteredStore`], a decorator of any backend). Names
//! follow upstream's (`apiserver_request_total`, …).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use rudder_store::{Deleted, KeyValue, ListOptions, ListPage, Store, WatchRequest, WatchStream};

/// Upper bounds (seconds) of the latency histograms.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len()];
        }
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                self.counts[i] += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let (sep, set) = if labels.is_empty() {
            ("", String::new())
        } else {
            (",", format!("{{{labels}}}"))
        };
        for (i, bound) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {}",
                self.counts.get(i).copied().unwrap_or(0)
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(out, "{name}_sum{set} {}", self.sum);
        let _ = writeln!(out, "{name}_count{set} {}", self.count);
    }
}

/// The server's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    latencies: Mutex<BTreeMap<(String, String), Histogram>>,
    /// Long-running requests now: by verb, and resource labels.
    watches: Mutex<BTreeMap<(&'static str, String), i64>>,
    store: Mutex<BTreeMap<(String, String), Histogram>>,
    rejected: AtomicU64,
    delivery: Mutex<Histogram>,
    /// Stored values the watch cache could not decode, per resource.
    decode_errors: Mutex<BTreeMap<String, u64>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Metrics {
    /// One finished request.
    pub fn request(&self, verb: &str, resource: &str, code: u16, took: Duration) {
        *lock(&self.requests)
            .entry((verb.to_string(), resource.to_string(), code))
            .or_default() += 1;
        lock(&self.latencies)
            .entry((verb.to_string(), resource.to_string()))
            .or_default()
            .observe(took.as_secs_f64());
    }

    /// A watch started; the guard counts it until dropped.
    pub fn watch(self: &std::sync::Arc<Self>, resource: &str) -> WatchGuard {
        self.long_running("WATCH", format!("resource=\"{resource}\""))
    }

    /// A stream into a pod started (exec, attach, port-forward: verb
    /// `CONNECT`); the guard counts it until dropped.
    pub fn stream(self: &std::sync::Arc<Self>, resource: &str, subresource: &str) -> WatchGuard {
        self.long_running(
            "CONNECT",
            format!("resource=\"{resource}\",subresource=\"{subresource}\""),
        )
    }

    fn long_running(self: &std::sync::Arc<Self>, verb: &'static str, labels: String) -> WatchGuard {
        *lock(&self.watches)
            .entry((verb, labels.clone()))
            .or_default() += 1;
        WatchGuard {
            metrics: self.clone(),
            key: (verb, labels),
        }
    }

    /// One watch event handed to its watcher's response, `took` after the
    /// watch cache received it from the store.
    pub fn watch_delivery(&self, took: Duration) {
        lock(&self.delivery).observe(took.as_secs_f64());
    }

    pub fn rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// A stored value under `prefix` that could not be decoded.
    pub fn decode_error(&self, prefix: &str) {
        *lock(&self.decode_errors)
            .entry(prefix.to_string())
            .or_default() += 1;
    }

    fn store_op(&self, operation: &str, kind: &str, took: Duration) {
        lock(&self.store)
            .entry((operation.to_string(), kind.to_string()))
            .or_default()
            .observe(took.as_secs_f64());
    }

    /// The Prometheus text exposition; `inflight` is the number of requests
    /// being served now.
    pub fn render(&self, inflight: usize) -> String {
        let mut out = String::new();
        out.push_str("# HELP apiserver_storage_decode_errors_total Number of stored objects that could not be decoded.\n# TYPE apiserver_storage_decode_errors_total counter\n");
        for (resource, n) in lock(&self.decode_errors).iter() {
            let _ = writeln!(
                out,
                "apiserver_storage_decode_errors_total{{resource=\"{resource}\"}} {n}"
            );
        }
        out.push_str("# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, resource and HTTP response code.\n# TYPE apiserver_request_total counter\n");
        for ((verb, resource, code), n) in lock(&self.requests).iter() {
            let _ = writeln!(
                out,
                "apiserver_request_total{{verb=\"{verb}\",resource=\"{resource}\",code=\"{code}\"}} {n}"
            );
        }
        out.push_str("# HELP apiserver_request_duration_seconds Response latency distribution in seconds for each verb and resource.\n# TYPE apiserver_request_duration_seconds histogram\n");
        for ((verb, resource), h) in lock(&self.latencies).iter() {
            h.render(
                &mut out,
                "apiserver_request_duration_seconds",
                &format!("verb=\"{verb}\",resource=\"{resource}\""),
            );
        }
        out.push_str("# HELP apiserver_longrunning_requests Gauge of all active long-running apiserver requests (watches, streams) by verb and resource.\n# TYPE apiserver_longrunning_requests gauge\n");
        for ((verb, labels), n) in lock(&self.watches).iter() {
            let _ = writeln!(
                out,
                "apiserver_longrunning_requests{{verb=\"{verb}\",{labels}}} {n}"
            );
        }
        out.push_str("# HELP apiserver_current_inflight_requests Requests being served now (watches excluded).\n# TYPE apiserver_current_inflight_requests gauge\n");
        let _ = writeln!(out, "apiserver_current_inflight_requests {}", inflight);
        out.push_str("# HELP apiserver_rejected_requests_total Requests refused with 429 because too many were in flight.\n# TYPE apiserver_rejected_requests_total counter\n");
        let _ = writeln!(
            out,
            "apiserver_rejected_requests_total {}",
            self.rejected.load(Ordering::Relaxed)
        );
        out.push_str("# HELP rudder_watch_delivery_seconds Time from the watch cache receiving a change to a watcher's response taking its event, for watches served from the cache.\n# TYPE rudder_watch_delivery_seconds histogram\n");
        lock(&self.delivery).render(&mut out, "rudder_watch_delivery_seconds", "");
        out.push_str("# HELP rudder_store_request_duration_seconds Store request latency in seconds by operation and resource.\n# TYPE rudder_store_request_duration_seconds histogram\n");
        for ((operation, kind), h) in lock(&self.store).iter() {
            h.render(
                &mut out,
                "rudder_store_request_duration_seconds",
                &format!("operation=\"{operation}\",type=\"{kind}\""),
            );
        }
        out
    }
}

/// Counts one long-running request (a watch, a stream) while it lives.
#[derive(Debug)]
pub struct WatchGuard {
    metrics: std::sync::Arc<Metrics>,
    key: (&'static str, String),
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        *lock(&self.metrics.watches)
            .entry(self.key.clone())
            .or_default() -= 1;
    }
}

/// The resource a store key belongs to: `/registry/apps/deployments/…` →
/// `deployments`.
fn resource_of(key: &[u8]) -> String {
    let text = String::from_utf8_lossy(key);
    text.split('/').nth(3).unwrap_or_default().to_string()
}

/// A store that records the latency of every operation.
#[derive(Debug)]
pub struct MeteredStore {
    inner: std::sync::Arc<dyn Store>,
    metrics: std::sync::Arc<Metrics>,
}

impl MeteredStore {
    pub fn new(inner: std::sync::Arc<dyn Store>, metrics: std::sync::Arc<Metrics>) -> Self {
        MeteredStore { inner, metrics }
    }
}

#[async_trait]
impl Store for MeteredStore {
    async fn get(&self, key: &[u8], revision: Option<u64>) -> rudder_store::Result<KeyValue> {
        let began = Instant::now();
        let result = self.inner.get(key, revision).await;
        self.metrics
            .store_op("get", &resource_of(key), began.elapsed());
        result
    }

    async fn list(&self, prefix: &[u8], options: ListOptions) -> rudder_store::Result<ListPage> {
        let began = Instant::now();
        let result = self.inner.list(prefix, options).await;
        self.metrics
            .store_op("list", &resource_of(prefix), began.elapsed());
        result
    }

    async fn create(&self, key: &[u8], value: Bytes) -> rudder_store::Result<KeyValue> {
        let began = Instant::now();
        let result = self.inner.create(key, value).await;
        self.metrics
            .store_op("create", &resource_of(key), began.elapsed());
        result
    }

    async fn update(
        &self,
        key: &[u8],
        value: Bytes,
        expected: u64,
    ) -> rudder_store::Result<KeyValue> {
        let began = Instant::now();
        let result = self.inner.update(key, value, expected).await;
        self.metrics
            .store_op("update", &resource_of(key), began.elapsed());
        result
    }

    async fn delete(&self, key: &[u8], expected: Option<u64>) -> rudder_store::Result<Deleted> {
        let began = Instant::now();
        let result = self.inner.delete(key, expected).await;
        self.metrics
            .store_op("delete", &resource_of(key), began.elapsed());
        result
    }

    async fn watch(&self, request: WatchRequest) -> rudder_store::Result<WatchStream> {
        self.inner.watch(request).await
    }

    async fn compact(&self, revision: u64) -> rudder_store::Result<()> {
        self.inner.compact(revision).await
    }

    async fn compacted_revision(&self) -> rudder_store::Result<u64> {
        self.inner.compacted_revision().await
    }

    async fn current_revision(&self) -> rudder_store::Result<u64> {
        self.inner.current_revision().await
    }

    async fn check(&self) -> rudder_store::Result<()> {
        self.inner.check().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_gauges() {
        let metrics = std::sync::Arc::new(Metrics::default());
        metrics.request("create", "pods", 201, Duration::from_millis(3));
        metrics.request("create", "pods", 201, Duration::from_millis(30));
        let guard = metrics.watch("pods");
        metrics.watch_delivery(Duration::from_millis(2));
        let text = metrics.render(3);
        assert!(text.contains("apiserver_current_inflight_requests 3"));
        assert!(text.contains("rudder_watch_delivery_seconds_bucket{le=\"0.0025\"} 1"));
        assert!(text.contains("rudder_watch_delivery_seconds_count 1"));
        assert!(
            text.contains(
                "apiserver_request_total{verb=\"create\",resource=\"pods\",code=\"201\"} 2"
            )
        );
        assert!(text.contains("apiserver_request_duration_seconds_bucket{verb=\"create\",resource=\"pods\",le=\"0.005\"} 1"));
        assert!(text.contains(
            "apiserver_request_duration_seconds_count{verb=\"create\",resource=\"pods\"} 2"
        ));
        assert!(
            text.contains("apiserver_longrunning_requests{verb=\"WATCH\",resource=\"pods\"} 1")
        );
        drop(guard);
        assert!(
            metrics
                .render(0)
                .contains("apiserver_longrunning_requests{verb=\"WATCH\",resource=\"pods\"} 0")
        );
        assert_eq!(
            resource_of(b"/registry/apps/deployments/ns/web"),
            "deployments"
        );
    }
}
