//! The `store` scenario: the embedded store against a single-member etcd on
//! the same machine, both through the same `Store` trait, both fsyncing
//! every acknowledged write.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use rudder_store::embedded::{EmbeddedConfig, EmbeddedStore};
use rudder_store::etcd::{EtcdConfig, EtcdStore};
use rudder_store::testing::EtcdServer;
use rudder_store::{ListOptions, Store, WatchRequest, WatchResponse};

use crate::Options;
use crate::report::{Metric, Report};

const VALUE_BYTES: usize = 1024;
const LIST_KEYS: usize = 10_000;

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let write_for = if options.quick {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(10)
    };
    let watch_writes = if options.quick { 2_000 } else { 10_000 };
    std::fs::create_dir_all(&options.work_dir)?;
    let dir = tempfile::tempdir_in(&options.work_dir)?;
    let embedded: Arc<dyn Store> = Arc::new(
        EmbeddedStore::open(EmbeddedConfig::new(dir.path().join("db")))
            .context("open the embedded store")?,
    );
    let server = EtcdServer::start()
        .await
        .map_err(|e| anyhow::anyhow!("start etcd: {e}"))?;
    let etcd_version = EtcdServer::version().unwrap_or_else(|| "unknown".into());
    let peer = format!("etcd {etcd_version}");
    let etcd: Arc<dyn Store> = Arc::new(
        EtcdStore::connect(EtcdConfig::from_url(&server.url())?.with_prefix("/bench")).await?,
    );

    let mut metrics = Vec::new();
    for clients in [1usize, 16, 64] {
        let ours = write_load(&embedded, clients, write_for).await?;
        let theirs = write_load(&etcd, clients, write_for).await?;
        eprintln!(
            "writes c{clients}: embedded {:.0}/s p99 {:.2} ms, etcd {:.0}/s p99 {:.2} ms",
            ours.per_second, ours.p99_ms, theirs.per_second, theirs.p99_ms
        );
        let mut metric = Metric::new(
            &format!("write_ops_per_s_c{clients}"),
            "ops/s",
            ours.per_second,
        )
        .peer(&peer, theirs.per_second);
        if clients == 64 {
            metric = metric.target("≥ 2× etcd");
            metrics.push(metric);
            metrics.push(
                Metric::new("write_p99_ms_c64", "ms", ours.p99_ms)
                    .peer(&peer, theirs.p99_ms)
                    .target("≤ etcd"),
            );
        } else {
            metrics.push(metric);
        }
    }

    let ours = watch_latency(&embedded, watch_writes).await?;
    let theirs = watch_latency(&etcd, watch_writes).await?;
    eprintln!("watch p99: embedded {ours:.2} ms, etcd {theirs:.2} ms");
    metrics.push(
        Metric::new("watch_p99_ms", "ms", ours)
            .peer(&peer, theirs)
            .target("< 5 ms"),
    );

    let ours = list_latency(&embedded, options.quick).await?;
    let theirs = list_latency(&etcd, options.quick).await?;
    eprintln!("list 10k: embedded {ours:.1} ms, etcd {theirs:.1} ms");
    metrics.push(Metric::new("list_10k_ms", "ms", ours).peer(&peer, theirs));

    Ok(Report {
        scenario: "store".into(),
        quick: options.quick,
        partial: None,
        metrics,
        conditions: vec![
            format!("1 KiB values; each writer creates fresh keys back to back for {} s per concurrency level", write_for.as_secs()),
            format!("both stores fsync before acknowledging a write: the embedded store by group commit into its write-ahead log (one fdatasync per batch; redb behind it, checkpointed durably every 5 s), {peer} with its default WAL fsync; both data directories on the same disk"),
            "both driven through rudder's `Store` trait in one process: etcd over gRPC on loopback (a create is an etcd transaction, as the API server issues it)".into(),
            format!("`watch_p99_ms`: {watch_writes} writes from 8 writers, time from issuing the write to the event's arrival at a prefix watcher (so it includes the write itself, fsync and all; a missing event counts as never arriving)"),
            "`list_10k_ms`: median of several unpaginated prefix lists of 10,000 keys of 1 KiB".into(),
        ],
    })
}

pub struct Load {
    pub per_second: f64,
    pub p99_ms: f64,
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub async fn write_load(
    store: &Arc<dyn Store>,
    clients: usize,
    run_for: Duration,
) -> anyhow::Result<Load> {
    let value = Bytes::from(vec![b'x'; VALUE_BYTES]);
    let start = Instant::now();
    let deadline = start + run_for;
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..clients {
        let (store, value) = (store.clone(), value.clone());
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            let mut i = 0u64;
            while Instant::now() < deadline {
                let key = format!("/bench/writes/c{clients}/{client}/{i}");
                let began = Instant::now();
                store.create(key.as_bytes(), value.clone()).await?;
                latencies.push(began.elapsed());
                i += 1;
            }
            anyhow::Ok(latencies)
        });
    }
    let mut latencies = Vec::new();
    while let Some(result) = tasks.join_next().await {
        latencies.extend(result??);
    }
    let elapsed = start.elapsed().as_secs_f64();
    latencies.sort_unstable();
    Ok(Load {
        per_second: latencies.len() as f64 / elapsed,
        p99_ms: percentile(&latencies, 0.99).as_secs_f64() * 1000.0,
    })
}

/// p99 of acknowledgement → event arrival, in ms.
async fn watch_latency(store: &Arc<dyn Store>, writes: usize) -> anyhow::Result<f64> {
    // Revision → when its write was issued.
    let acked: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let mut watch = store
        .watch(WatchRequest::prefix(
            Bytes::from_static(b"/bench/watch/"),
            0,
        ))
        .await?;
    let receiver = tokio::spawn(async move {
        let mut arrived = HashMap::with_capacity(writes);
        while arrived.len() < writes {
            match tokio::time::timeout(Duration::from_secs(30), watch.recv()).await {
                Ok(Some(Ok(WatchResponse::Events(events)))) => {
                    let now = Instant::now();
                    for event in events {
                        arrived.insert(event.revision(), now);
                    }
                }
                Ok(Some(Ok(WatchResponse::Progress { .. }))) => {}
                // Nothing for 30 s: the rest never arrives (counted as
                // infinitely late below).
                Err(_) => break,
                other => anyhow::bail!("watch failed: {other:?}"),
            }
        }
        Ok(arrived)
    });
    let writers = 8;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..writers {
        let (store, acked) = (store.clone(), acked.clone());
        tasks.spawn(async move {
            for i in 0..writes / writers {
                let key = format!("/bench/watch/{w}/{i}");
                // From when the write is issued: a store that publishes
                // before it acknowledges gains nothing by it.
                let issued = Instant::now();
                let kv = store
                    .create(key.as_bytes(), Bytes::from(vec![b'w'; VALUE_BYTES]))
                    .await?;
                acked
                    .lock()
                    .map_err(|_| anyhow::anyhow!("poisoned"))?
                    .insert(kv.mod_revision, issued);
            }
            anyhow::Ok(())
        });
    }
    while let Some(result) = tasks.join_next().await {
        result??;
    }
    let arrived = receiver.await??;
    let acked = acked.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    let mut delays: Vec<Duration> = acked
        .iter()
        .map(|(rev, ack)| {
            arrived
                .get(rev)
                .map_or(Duration::MAX, |at| at.saturating_duration_since(*ack))
        })
        .collect();
    delays.sort_unstable();
    Ok(percentile(&delays, 0.99).as_secs_f64() * 1000.0)
}

/// Median ms of an unpaginated list of 10,000 keys.
async fn list_latency(store: &Arc<dyn Store>, quick: bool) -> anyhow::Result<f64> {
    let mut tasks = tokio::task::JoinSet::new();
    let writers = 64;
    for w in 0..writers {
        let store = store.clone();
        tasks.spawn(async move {
            for i in (w..LIST_KEYS).step_by(writers) {
                let key = format!("/bench/list/{i:05}");
                store
                    .create(key.as_bytes(), Bytes::from(vec![b'l'; VALUE_BYTES]))
                    .await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(result) = tasks.join_next().await {
        result??;
    }
    let mut times = Vec::new();
    for _ in 0..if quick { 3 } else { 9 } {
        let began = Instant::now();
        let page = store.list(b"/bench/list/", ListOptions::default()).await?;
        times.push(began.elapsed());
        anyhow::ensure!(
            page.kvs.len() == LIST_KEYS,
            "listed {} keys, expected {LIST_KEYS}",
            page.kvs.len()
        );
    }
    times.sort_unstable();
    Ok(times[times.len() / 2].as_secs_f64() * 1000.0)
}
