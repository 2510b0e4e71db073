//! The etcd v3 backend: the store contract over a real etcd cluster, for
//! users who outgrow one machine (`--store etcd://host:port[,host:port…]`).
//!
//! Keys live under a configurable prefix. Create, update and delete are etcd
//! transactions comparing `create_revision` / `mod_revision`, so the
//! compare-and-swap is enforced by etcd itself. A watch reconnects after a
//! broken stream and resumes at the revision after the last one it delivered
//! (events or progress), so nothing is lost or repeated; a compacted start is
//! reported as `Compacted`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, CompactionOptions, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType,
    GetOptions, KvClient, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse, WatchOptions,
};

use crate::types::check_size;
use crate::watch::{WatchSink, watch_channel};
use crate::{
    Deleted, Error, Event, EventKind, KeyValue, ListOptions, ListPage, Result, Store, WatchRequest,
    WatchResponse, WatchStream, prefix_end,
};

/// The key upstream's API server records its compactions under (outside the
/// prefix, as upstream does), so that every server sharing the etcd knows the
/// compacted revision.
const COMPACT_REV_KEY: &[u8] = b"compact_rev_key";

/// Settings of an etcd store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// `host:port` or `http://host:port` of each member.
    pub endpoints: Vec<String>,
    /// Prepended to every key (upstream's `--etcd-prefix`).
    pub prefix: Vec<u8>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
}

impl EtcdConfig {
    /// Parses `etcd://host:port[,host:port…]`.
    pub fn from_url(url: &str) -> Result<Self> {
        let rest = url.strip_prefix("etcd://").ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{url:?}: an etcd store is named etcd://host:port[,host:port...]"
            ))
        })?;
        let endpoints: Vec<String> = rest
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| format!("http://{e}"))
            .collect();
        if endpoints.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{url:?}: no etcd endpoint given"
            )));
        }
        Ok(EtcdConfig {
            endpoints,
            prefix: Vec::new(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
        })
    }

    pub fn with_prefix(mut self, prefix: impl Into<Vec<u8>>) -> Self {
        self.prefix = prefix.into();
        self
    }
}

/// A store over etcd.
#[derive(Clone)]
pub struct EtcdStore {
    client: Client,
    kv: KvClient,
    prefix: Bytes,
    /// The highest compacted revision this store has seen.
    compacted: Arc<AtomicU64>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects to the cluster.
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        let options = ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_timeout(config.request_timeout)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5));
        let client = Client::connect(&config.endpoints, Some(options))
            .await
            .map_err(|e| {
                Error::unavailable(
                    format!("connect to etcd at {}", config.endpoints.join(",")),
                    e,
                )
            })?;
        // Lists of many objects exceed tonic's default 4 MiB message limit.
        let kv = client.kv_client().max_decoding_message_size(usize::MAX);
        let store = EtcdStore {
            client,
            kv,
            prefix: Bytes::from(config.prefix),
            compacted: Arc::new(AtomicU64::new(0)),
        };
        let compacted = store.stored_compact_revision().await?;
        store.compacted.fetch_max(compacted, Ordering::SeqCst);
        Ok(store)
    }

    fn full_key(&self, key: &[u8]) -> Vec<u8> {
        let mut full = Vec::with_capacity(self.prefix.len() + key.len());
        full.extend_from_slice(&self.prefix);
        full.extend_from_slice(key);
        full
    }

    fn key_value(&self, kv: &etcd_client::KeyValue) -> KeyValue {
        KeyValue {
            key: Bytes::copy_from_slice(
                kv.key().strip_prefix(&self.prefix[..]).unwrap_or(kv.key()),
            ),
            value: Bytes::copy_from_slice(kv.value()),
            create_revision: revision(kv.create_revision()),
            mod_revision: revision(kv.mod_revision()),
            version: revision(kv.version()),
        }
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        self.kv.clone().txn(txn).await.map_err(|e| self.error(e))
    }

    /// The current value of `full_key` out of a failed transaction's `get`.
    fn current_from(&self, response: &TxnResponse) -> Option<KeyValue> {
        response.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| self.key_value(kv)),
            _ => None,
        })
    }

    async fn stored_compact_revision(&self) -> Result<u64> {
        let response = self
            .kv
            .clone()
            .get(COMPACT_REV_KEY, None)
            .await
            .map_err(|e| self.error(e))?;
        Ok(response
            .kvs()
            .first()
            .and_then(|kv| std::str::from_utf8(kv.value()).ok()?.parse().ok())
            .unwrap_or(0))
    }

    /// `error` with what etcd's future-revision message leaves out: the
    /// revision asked for and the current one.
    async fn complete(&self, error: Error, requested: u64) -> Error {
        match error {
            Error::FutureRevision { .. } => match self.current_revision().await {
                Ok(current) => Error::FutureRevision { requested, current },
                Err(e) => e,
            },
            other => other,
        }
    }

    fn error(&self, error: etcd_client::Error) -> Error {
        map_error(error, self.compacted.load(Ordering::SeqCst))
    }
}

fn revision(r: i64) -> u64 {
    u64::try_from(r).unwrap_or(0)
}

fn header_revision(response: &TxnResponse) -> u64 {
    response.header().map_or(0, |h| revision(h.revision()))
}

/// Maps etcd's errors onto the store's, by etcd's documented messages.
fn map_error(error: etcd_client::Error, compact_revision: u64) -> Error {
    if let etcd_client::Error::GRpcStatus(status) = &error {
        let message = status.message();
        if message.contains("required revision has been compacted") {
            return Error::Compacted { compact_revision };
        }
        if message.contains("required revision is a future revision") {
            return Error::FutureRevision {
                requested: 0,
                current: 0,
            };
        }
        if message.contains("request is too large") {
            return Error::TooLarge {
                size: 0,
                limit: crate::MAX_REQUEST_BYTES,
            };
        }
    }
    Error::unavailable("etcd", error)
}

fn to_i64(r: u64) -> i64 {
    i64::try_from(r).unwrap_or(i64::MAX)
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &[u8], at: Option<u64>) -> Result<KeyValue> {
        let options = at.map(|r| GetOptions::new().with_revision(to_i64(r)));
        let response = self.kv.clone().get(self.full_key(key), options).await;
        match response {
            Ok(response) => response
                .kvs()
                .first()
                .map(|kv| self.key_value(kv))
                .ok_or(Error::NotFound),
            Err(e) => Err(self.complete(self.error(e), at.unwrap_or(0)).await),
        }
    }

    async fn list(&self, prefix: &[u8], options: ListOptions) -> Result<ListPage> {
        let full_prefix = self.full_key(prefix);
        let start = match &options.continue_after {
            Some(after) if after.as_ref() >= prefix => {
                let mut start = self.full_key(after);
                start.push(0);
                start
            }
            _ => full_prefix.clone(),
        };
        // An empty range end with a non-empty key means "this key only";
        // "\0" means "to the end of the keyspace".
        let end = prefix_end(&full_prefix).unwrap_or_else(|| vec![0]);
        let mut get = GetOptions::new().with_range(end);
        if options.limit > 0 {
            get = get.with_limit(i64::try_from(options.limit).unwrap_or(i64::MAX));
        }
        if let Some(r) = options.revision {
            get = get.with_revision(to_i64(r));
        }
        let start = if start.is_empty() { vec![0] } else { start };
        let response = match self.kv.clone().get(start, Some(get)).await {
            Ok(response) => response,
            Err(e) => {
                return Err(self
                    .complete(self.error(e), options.revision.unwrap_or(0))
                    .await);
            }
        };
        let read_at = options
            .revision
            .unwrap_or_else(|| response.header().map_or(0, |h| revision(h.revision())));
        Ok(ListPage {
            kvs: response.kvs().iter().map(|kv| self.key_value(kv)).collect(),
            revision: read_at,
            count: revision(response.count()),
            more: response.more(),
        })
    }

    async fn create(&self, key: &[u8], value: Bytes) -> Result<KeyValue> {
        check_size(key, &value)?;
        let full = self.full_key(key);
        let txn = Txn::new()
            .when([Compare::create_revision(full.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(full, value.to_vec(), None)]);
        let response = self.txn(txn).await?;
        if !response.succeeded() {
            return Err(Error::AlreadyExists);
        }
        let rev = header_revision(&response);
        Ok(KeyValue {
            key: Bytes::copy_from_slice(key),
            value,
            create_revision: rev,
            mod_revision: rev,
            version: 1,
        })
    }

    async fn update(&self, key: &[u8], value: Bytes, expected: u64) -> Result<KeyValue> {
        check_size(key, &value)?;
        let full = self.full_key(key);
        let txn = Txn::new()
            .when([
                Compare::create_revision(full.clone(), CompareOp::Greater, 0),
                Compare::mod_revision(full.clone(), CompareOp::Equal, to_i64(expected)),
            ])
            .and_then([TxnOp::put(
                full.clone(),
                value.to_vec(),
                Some(PutOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(full, None)]);
        let response = self.txn(txn).await?;
        if !response.succeeded() {
            return match self.current_from(&response) {
                None => Err(Error::NotFound),
                current => Err(Error::conflict(current)),
            };
        }
        let prev = response.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Put(put) => put.prev_key().map(|kv| self.key_value(kv)),
            _ => None,
        });
        let prev = prev.ok_or_else(|| Error::Unavailable {
            context: "etcd: a successful update returned no previous value".into(),
            source: None,
        })?;
        Ok(KeyValue {
            key: Bytes::copy_from_slice(key),
            value,
            create_revision: prev.create_revision,
            mod_revision: header_revision(&response),
            version: prev.version + 1,
        })
    }

    async fn delete(&self, key: &[u8], expected: Option<u64>) -> Result<Deleted> {
        check_size(key, &[])?;
        let full = self.full_key(key);
        let mut compares = vec![Compare::create_revision(
            full.clone(),
            CompareOp::Greater,
            0,
        )];
        if let Some(expected) = expected {
            compares.push(Compare::mod_revision(
                full.clone(),
                CompareOp::Equal,
                to_i64(expected),
            ));
        }
        let txn = Txn::new()
            .when(compares)
            .and_then([TxnOp::delete(
                full.clone(),
                Some(DeleteOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(full, None)]);
        let response = self.txn(txn).await?;
        if !response.succeeded() {
            return match self.current_from(&response) {
                None => Err(Error::NotFound),
                current => Err(Error::conflict(current)),
            };
        }
        let prev = response.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Delete(delete) => delete.prev_kvs().first().map(|kv| self.key_value(kv)),
            _ => None,
        });
        let prev = prev.ok_or(Error::NotFound)?;
        Ok(Deleted {
            prev,
            revision: header_revision(&response),
        })
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        let next = match request.start_revision {
            0 => self.current_revision().await? + 1,
            start => start,
        };
        let (sink, stream) = watch_channel();
        let watcher = EtcdWatcher {
            store: self.clone(),
            request,
            next,
            sink,
        };
        tokio::spawn(watcher.run());
        Ok(stream)
    }

    async fn compact(&self, revision: u64) -> Result<()> {
        let compacted = self.compacted.load(Ordering::SeqCst);
        match self
            .kv
            .clone()
            .compact(
                to_i64(revision),
                Some(CompactionOptions::new().with_physical()),
            )
            .await
        {
            Ok(_) => {}
            Err(e) => {
                return Err(match self.error(e) {
                    Error::Compacted { .. } => {
                        let stored = self.stored_compact_revision().await.unwrap_or(compacted);
                        Error::Compacted {
                            compact_revision: stored.max(compacted),
                        }
                    }
                    other => self.complete(other, revision).await,
                });
            }
        }
        self.compacted.fetch_max(revision, Ordering::SeqCst);
        // Record it for every server sharing this etcd, unless a later one is there.
        let record = Txn::new()
            .when([Compare::create_revision(
                COMPACT_REV_KEY,
                CompareOp::Equal,
                0,
            )])
            .and_then([TxnOp::put(COMPACT_REV_KEY, revision.to_string(), None)])
            .or_else([TxnOp::get(COMPACT_REV_KEY, None)]);
        let response = self.txn(record).await?;
        if !response.succeeded() {
            let stored = self.stored_compact_revision().await?;
            if stored < revision {
                self.kv
                    .clone()
                    .put(COMPACT_REV_KEY, revision.to_string(), None)
                    .await
                    .map_err(|e| self.error(e))?;
            }
        }
        Ok(())
    }

    async fn compacted_revision(&self) -> Result<u64> {
        let stored = self.stored_compact_revision().await?;
        Ok(self
            .compacted
            .fetch_max(stored, Ordering::SeqCst)
            .max(stored))
    }

    async fn current_revision(&self) -> Result<u64> {
        // A range over a key that cannot exist: the header carries the revision.
        let response = self
            .kv
            .clone()
            .get(
                self.full_key(b"\0"),
                Some(GetOptions::new().with_count_only()),
            )
            .await;
        let response = response.map_err(|e| self.error(e))?;
        Ok(response.header().map_or(0, |h| revision(h.revision())))
    }

    async fn check(&self) -> Result<()> {
        // Upstream's etcd health check: a linearizable read of a health key,
        // which needs a leader and a quorum, within 2 s.
        let mut kv = self.kv.clone();
        let read = kv.get(
            self.full_key(b"health"),
            Some(GetOptions::new().with_count_only()),
        );
        match tokio::time::timeout(std::time::Duration::from_secs(2), read).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(self.error(e)),
            Err(_) => Err(Error::Unavailable {
                context: "etcd did not answer a health read within 2s".into(),
                source: None,
            }),
        }
    }
}

/// The task behind one etcd watch.
struct EtcdWatcher {
    store: EtcdStore,
    request: WatchRequest,
    /// The next revision to deliver.
    next: u64,
    sink: WatchSink,
}

enum Stream {
    /// The stream broke: reconnect from `next`.
    Broken,
    Stop,
}

impl EtcdWatcher {
    async fn run(mut self) {
        let mut backoff = Duration::from_millis(50);
        loop {
            match self.stream().await {
                Stream::Stop => return,
                Stream::Broken => {
                    tokio::select! {
                        _ = self.sink.cancel.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    fn options(&self) -> (Vec<u8>, WatchOptions) {
        let key = self.store.full_key(&self.request.key);
        let mut options = WatchOptions::new()
            .with_prev_key()
            .with_progress_notify()
            .with_start_revision(to_i64(self.next));
        if self.request.prefix {
            options = options.with_range(prefix_end(&key).unwrap_or_else(|| vec![0]));
        }
        let key = if key.is_empty() { vec![0] } else { key };
        (key, options)
    }

    /// One watch stream, until it breaks or the watch ends.
    async fn stream(&mut self) -> Stream {
        let (key, options) = self.options();
        let mut client = self.store.client.watch_client();
        let opened = tokio::select! {
            _ = self.sink.cancel.cancelled() => return Stream::Stop,
            opened = client.watch(key, Some(options)) => opened,
        };
        let (mut watcher, mut stream) = match opened {
            Ok(pair) => pair.split(),
            Err(error) => {
                tracing::warn!(%error, "etcd watch: cannot open the stream; retrying");
                return Stream::Broken;
            }
        };
        loop {
            let message = tokio::select! {
                _ = self.sink.cancel.cancelled() => return Stream::Stop,
                request = self.sink.progress_requests.recv() => {
                    if request.is_none() {
                        return Stream::Stop;
                    }
                    if let Err(error) = watcher.request_progress().await {
                        tracing::warn!(%error, "etcd watch: progress request failed; reconnecting");
                        return Stream::Broken;
                    }
                    continue;
                }
                message = stream.message() => message,
            };
            let response = match message {
                Ok(Some(response)) => response,
                Ok(None) => return Stream::Broken,
                Err(error) => {
                    tracing::warn!(%error, "etcd watch: stream failed; reconnecting");
                    return Stream::Broken;
                }
            };
            if response.compact_revision() > 0 {
                let compact_revision = revision(response.compact_revision());
                self.store
                    .compacted
                    .fetch_max(compact_revision, Ordering::SeqCst);
                let _ = self
                    .sink
                    .send(Err(Error::Compacted { compact_revision }))
                    .await;
                return Stream::Stop;
            }
            if response.canceled() {
                tracing::warn!(
                    reason = response.cancel_reason(),
                    "etcd watch: canceled by the server; reconnecting"
                );
                return Stream::Broken;
            }
            if response.created() {
                continue;
            }
            let events: Vec<Event> = response
                .events()
                .iter()
                .filter_map(|event| self.event(event))
                .filter(|event| event.revision() >= self.next)
                .collect();
            let delivered = match events.last() {
                Some(last) => {
                    self.next = last.revision() + 1;
                    self.sink.send(Ok(WatchResponse::Events(events))).await
                }
                None if response.events().is_empty() => {
                    // A progress notification: nothing up to its revision is left.
                    let at = response.header().map_or(0, |h| revision(h.revision()));
                    if at + 1 >= self.next {
                        self.next = at + 1;
                        self.sink
                            .send(Ok(WatchResponse::Progress { revision: at }))
                            .await
                    } else {
                        true
                    }
                }
                None => true,
            };
            if !delivered {
                return Stream::Stop;
            }
        }
    }

    fn event(&self, event: &etcd_client::Event) -> Option<Event> {
        let kv = self.store.key_value(event.kv()?);
        let prev = event.prev_kv().map(|kv| self.store.key_value(kv));
        Some(match event.event_type() {
            EventType::Put => {
                let kind = if kv.create_revision == kv.mod_revision {
                    EventKind::Created
                } else {
                    EventKind::Updated
                };
                Event { kind, kv, prev }
            }
            EventType::Delete => Event {
                kind: EventKind::Deleted,
                kv: KeyValue {
                    value: Bytes::new(),
                    create_revision: 0,
                    version: 0,
                    ..kv
                },
                prev,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_store_urls() {
        let config =
            EtcdConfig::from_url("etcd://127.0.0.1:2379, 10.0.0.2:2379").expect("valid url");
        assert_eq!(
            config.endpoints,
            vec!["http://127.0.0.1:2379", "http://10.0.0.2:2379"]
        );
        assert!(matches!(
            EtcdConfig::from_url("http://x:1"),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            EtcdConfig::from_url("etcd://"),
            Err(Error::InvalidArgument(_))
        ));
    }
}
