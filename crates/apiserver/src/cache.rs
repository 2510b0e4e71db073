//! The watch cache: one per resource, upstream's cacher. It lists the
//! resource from the store once, then follows a store watch, keeping every
//! object in memory with its JSON already serialized, and the recent events
//! in a bounded history. Lists are served from it at a consistent revision
//! (the cache first catches up with the store's revision, as upstream's
//! consistent reads from cache do), and watches replay from its history and
//! then follow one broadcast that every watcher of the resource shares:
//! each event is serialized once, whoever watches.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use rudder_api::Status;
use rudder_store::{Event, EventKind, ListOptions, Store, WatchRequest, WatchResponse};
use serde_json::Value;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

/// Events kept for watches that start in the past.
const HISTORY: usize = 10_000;
/// Live events buffered per resource before a slow watcher is cut off.
const BROADCAST: usize = 4_096;
/// The same, per trigger value.
const TRIGGERED: usize = 256;
/// How long a read waits for the cache to reach a revision.
const CATCH_UP: Duration = Duration::from_secs(3);

/// An object as the cache holds it: serialized once, plus the few fields
/// selectors read. The whole object is parsed again only when a Table row
/// needs it; a parsed tree costs several times its JSON in memory.
#[derive(Debug)]
pub struct Cached {
    /// `metadata.name`, `metadata.namespace`, `metadata.labels` and the
    /// kind's selectable fields, at their paths.
    pub selectable: Value,
    /// The object serialized, with its `resourceVersion`.
    pub json: Bytes,
    pub revision: u64,
}

impl Cached {
    /// `value` of the built-in definition `schema` ("" for none), its
    /// JSON in Go's field order.
    fn new(mut value: Value, revision: u64, fields: &[&str], schema: &str) -> Arc<Cached> {
        crate::storage::set_resource_version(&mut value, revision);
        let ordered = rudder_api::protobuf::go_json::Ordered::new(schema, &value);
        let json = Bytes::from(serde_json::to_vec(&ordered).unwrap_or_default());
        let mut selectable = serde_json::json!({});
        for path in ["metadata.name", "metadata.namespace", "metadata.labels"]
            .into_iter()
            .chain(
                fields
                    .iter()
                    .flat_map(|f| rudder_api::selector::stored_paths(f)),
            )
        {
            if let Some(found) = value.pointer(&format!("/{}", path.replace('.', "/"))) {
                let parts: Vec<&str> = path.split('.').collect();
                insert_path(&mut selectable, &parts, found.clone());
            }
        }
        Arc::new(Cached {
            selectable,
            json,
            revision,
        })
    }

    /// The object as stored under `revision`: the stored JSON with its
    /// `resourceVersion` spliced in, and the selectable fields picked out,
    /// without building the whole tree ([`Cached::new`] when the stored
    /// form is not one the splice can take).
    fn from_stored(
        stored: &[u8],
        revision: u64,
        selectable: &Paths,
    ) -> serde_json::Result<Arc<Cached>> {
        if let Some(cached) = Cached::spliced(stored, revision, selectable) {
            return Ok(cached);
        }
        let value: Value = serde_json::from_slice(stored)?;
        Ok(Cached::new(
            value,
            revision,
            &selectable.fields,
            &selectable.schema,
        ))
    }

    fn spliced(stored: &[u8], revision: u64, selectable: &Paths) -> Option<Arc<Cached>> {
        // A line break would split a watch event's line; such a value (not
        // one rudder wrote) is serialized afresh.
        if stored.contains(&b'\n') {
            return None;
        }
        let top: Level<'_> = serde_json::from_slice(stored).ok()?;
        let meta = top.get("metadata")?.get();
        let inner: Level<'_> = serde_json::from_str(meta).ok()?;
        if inner.contains_key("resourceVersion") {
            return None;
        }
        let open = (meta.as_ptr() as usize).checked_sub(stored.as_ptr() as usize)?;
        if stored.get(open) != Some(&b'{') {
            return None;
        }
        // After the last key that comes before it in the stored order (its
        // value's end), or first.
        let base = stored.as_ptr() as usize;
        let after = inner
            .iter()
            .filter(|(key, _)| selectable.order.before_resource_version(key))
            .filter_map(|(_, raw)| {
                let value = raw.get();
                (value.as_ptr() as usize)
                    .checked_sub(base)
                    .map(|at| at + value.len())
            })
            .max();
        let mut json = Vec::with_capacity(stored.len() + 40);
        let version = format!("\"resourceVersion\":\"{revision}\"");
        match after {
            Some(end) if end <= stored.len() => {
                json.extend_from_slice(&stored[..end]);
                json.push(b',');
                json.extend_from_slice(version.as_bytes());
                json.extend_from_slice(&stored[end..]);
            }
            _ => {
                json.extend_from_slice(&stored[..=open]);
                json.extend_from_slice(version.as_bytes());
                if !inner.is_empty() {
                    json.push(b',');
                }
                json.extend_from_slice(&stored[open + 1..]);
            }
        }
        let mut picked = serde_json::Map::new();
        selectable.pick(&top, &mut picked);
        Some(Arc::new(Cached {
            selectable: Value::Object(picked),
            json: Bytes::from(json),
            revision,
        }))
    }

    /// The object in another version of its resource (`convert` turns the
    /// stored form into it, of the definition `schema`), selectable by that
    /// version's `fields`.
    pub fn converted(
        &self,
        convert: impl FnOnce(Value) -> Value,
        fields: &[&str],
        schema: &str,
    ) -> Arc<Cached> {
        Cached::new(convert(self.value()), self.revision, fields, schema)
    }

    /// The whole object, parsed from its cached JSON.
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }
}

/// One level of a JSON object, its values unparsed.
type Level<'a> = BTreeMap<&'a str, &'a serde_json::value::RawValue>;

/// How a resource's stored objects order their keys, and so where a
/// spliced `resourceVersion` goes among its metadata's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum KeyOrder {
    /// Go's field order (built-in kinds): after `name`, `generateName`,
    /// `namespace`, `selfLink` and `uid`, as ObjectMeta declares it.
    #[default]
    Go,
    /// Sorted (custom resources, unstructured in upstream too).
    Sorted,
}

impl KeyOrder {
    /// Whether the metadata key `key` comes before `resourceVersion`.
    fn before_resource_version(self, key: &str) -> bool {
        match self {
            KeyOrder::Go => matches!(
                key,
                "name" | "generateName" | "namespace" | "selfLink" | "uid"
            ),
            KeyOrder::Sorted => key < "resourceVersion",
        }
    }
}

/// The selectable fields of a kind as a tree of keys, for picking them
/// out of unparsed levels, and the order of its stored keys.
#[derive(Debug, Default)]
struct Paths {
    /// The kind's selectable fields beyond name, namespace and labels.
    fields: Vec<&'static str>,
    tree: PathTree,
    order: KeyOrder,
    /// The built-in definition objects are stored as ("" for none).
    schema: String,
}

#[derive(Debug, Default)]
struct PathTree {
    children: Vec<(&'static str, PathTree)>,
    /// A path ends here: the whole value is taken.
    whole: bool,
}

impl Paths {
    /// The paths of `fields` of objects stored as the built-in definition
    /// `schema` (in Go's order), or "" (custom resources: sorted).
    fn of(fields: &'static [&'static str], schema: &str) -> Paths {
        let mut tree = PathTree::default();
        for path in ["metadata.name", "metadata.namespace", "metadata.labels"]
            .into_iter()
            .chain(
                fields
                    .iter()
                    .flat_map(|f| rudder_api::selector::stored_paths(f)),
            )
        {
            let mut node = &mut tree;
            for key in path.split('.') {
                let at = match node.children.iter().position(|(k, _)| *k == key) {
                    Some(at) => at,
                    None => {
                        node.children.push((key, PathTree::default()));
                        node.children.len() - 1
                    }
                };
                node = &mut node.children[at].1;
            }
            node.whole = true;
        }
        Paths {
            fields: fields.to_vec(),
            tree,
            order: match schema.is_empty() {
                true => KeyOrder::Sorted,
                false => KeyOrder::Go,
            },
            schema: schema.to_string(),
        }
    }

    /// Copies the values at the paths of the object `level` into `target`,
    /// each nested object parsed once however many paths go through it.
    /// Paths that lead nowhere are left out.
    fn pick(&self, level: &Level<'_>, target: &mut serde_json::Map<String, Value>) {
        self.tree.pick(level, target);
    }
}

impl PathTree {
    fn pick(&self, level: &Level<'_>, target: &mut serde_json::Map<String, Value>) {
        for (key, child) in &self.children {
            let Some(raw) = level.get(key) else {
                continue;
            };
            if child.whole {
                if let Ok(value) = serde_json::from_str::<Value>(raw.get()) {
                    target.insert((*key).to_string(), value);
                }
                continue;
            }
            let Ok(inner) = serde_json::from_str::<Level<'_>>(raw.get()) else {
                continue;
            };
            let mut picked = serde_json::Map::new();
            child.pick(&inner, &mut picked);
            if !picked.is_empty() {
                target.insert((*key).to_string(), Value::Object(picked));
            }
        }
    }
}

/// Sets `value` at the nested `path` of `target`, making objects on the way.
fn insert_path(target: &mut Value, path: &[&str], value: Value) {
    let Some(map) = target.as_object_mut() else {
        return;
    };
    match path {
        [] => {}
        [last] => {
            map.insert((*last).to_string(), value);
        }
        [first, rest @ ..] => {
            let child = map
                .entry((*first).to_string())
                .or_insert_with(|| serde_json::json!({}));
            insert_path(child, rest, value);
        }
    }
}

/// One change, as every watcher of the resource receives it.
#[derive(Debug)]
pub enum CachedEvent {
    Change {
        kind: EventKind,
        revision: u64,
        /// The object after the change; on a delete, the object as it was,
        /// at the delete's revision.
        object: Arc<Cached>,
        prev: Option<Arc<Cached>>,
        /// When the cache received the change from the store.
        received: std::time::Instant,
    },
    /// Nothing is pending up to this revision.
    Progress(u64),
    /// A stored value under the cache's prefix cannot be decoded: every
    /// watcher ends with an error (as upstream's watcher sends one), and
    /// lists fail until the value is repaired — never a made-up delete,
    /// which would send informers and the garbage collector after an
    /// object that still exists.
    Broken { revision: u64, error: Status },
}

impl CachedEvent {
    pub fn revision(&self) -> u64 {
        match self {
            CachedEvent::Change { revision, .. }
            | CachedEvent::Progress(revision)
            | CachedEvent::Broken { revision, .. } => *revision,
        }
    }
}

#[derive(Debug, Default)]
struct Contents {
    objects: BTreeMap<Bytes, Arc<Cached>>,
    /// The cache holds every change up to this revision.
    revision: u64,
    history: VecDeque<Arc<CachedEvent>>,
    /// Watches from this revision on can be served from `history`.
    oldest: u64,
    ready: bool,
    /// Keys whose stored value cannot be decoded, and why.
    undecodable: BTreeMap<Bytes, String>,
}

/// The field whose value routes events to the watchers that select it
/// (upstream's watch-cache trigger for pods: a kubelet watches the pods of
/// its node, and should not be woken for everyone else's).
pub const TRIGGER_FIELD: &str = "spec.nodeName";

/// The cache of one resource (every namespace).
#[derive(Debug)]
pub struct Cache {
    prefix: String,
    /// The kind's selectable fields.
    selectable: Paths,
    contents: RwLock<Contents>,
    /// Every event, for watchers without a trigger.
    events: broadcast::Sender<Arc<CachedEvent>>,
    /// The events of the objects whose trigger field has a value (before or
    /// after the change), for the watchers that select that value.
    triggered: Mutex<HashMap<String, broadcast::Sender<Arc<CachedEvent>>>>,
    revision: watch::Sender<u64>,
    progress: tokio::sync::Notify,
    metrics: Arc<crate::metrics::Metrics>,
}

/// A snapshot of the objects under a key prefix at one revision.
#[derive(Debug)]
pub struct Snapshot {
    pub objects: Vec<Arc<Cached>>,
    pub revision: u64,
}

/// What a watch starts with: its replay and its live feed.
#[derive(Debug)]
pub struct Subscription {
    pub replay: Vec<Arc<CachedEvent>>,
    /// The objects that exist, for watches without a resourceVersion.
    pub initial: Option<Snapshot>,
    pub live: broadcast::Receiver<Arc<CachedEvent>>,
    /// Live events at or below this were in the replay or the snapshot.
    pub after: u64,
}

impl Cache {
    /// Waits until the cache has every change up to `revision`.
    pub async fn wait_for(&self, revision: u64) -> Result<(), Status> {
        let mut seen = self.revision.subscribe();
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        loop {
            if *seen.borrow_and_update() >= revision
                && self.contents.read().map(|c| c.ready).unwrap_or(false)
            {
                return Ok(());
            }
            self.progress.notify_one();
            tokio::select! {
                changed = seen.changed() => {
                    if changed.is_err() {
                        return Err(Status::unavailable("the watch cache stopped"));
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(Status::timeout(format!("Too large resource version: {revision}, the cache is at {}", *seen.borrow())));
                }
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    }

    /// The object stored under `key`, as far as the cache has seen.
    pub fn object(&self, key: &[u8]) -> Option<Arc<Cached>> {
        let contents = self.contents.read().unwrap_or_else(|e| e.into_inner());
        contents.objects.get(key).cloned()
    }

    /// The objects under `prefix` (a namespace, or the whole resource).
    pub fn snapshot(&self, prefix: &str, start_after: Option<&[u8]>) -> Snapshot {
        let contents = self.contents.read().unwrap_or_else(|e| e.into_inner());
        let from = match start_after {
            Some(after) => std::ops::Bound::Excluded(Bytes::copy_from_slice(after)),
            None => std::ops::Bound::Included(Bytes::copy_from_slice(prefix.as_bytes())),
        };
        let objects = contents
            .objects
            .range((from, std::ops::Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix.as_bytes()))
            .map(|(_, v)| v.clone())
            .collect();
        Snapshot {
            objects,
            revision: contents.revision,
        }
    }

    /// Starts a watch: from `from` (exclusive) if the history reaches back
    /// that far (`None` when it does not), or from the current state.
    ///
    /// The live feed is subscribed before the replay or snapshot is taken,
    /// so nothing falls between them; what both carry is skipped by
    /// revision (`after`).
    ///
    /// With a `trigger` (the value a watcher selects of [`TRIGGER_FIELD`],
    /// on a kind that has it), the live feed carries only the events of
    /// objects that have or had that value.
    pub fn subscribe(
        &self,
        from: Option<u64>,
        prefix: &str,
        trigger: Option<&str>,
    ) -> Option<Subscription> {
        let live = match trigger.filter(|_| self.selectable.fields.contains(&TRIGGER_FIELD)) {
            Some(value) => self
                .triggered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(value.to_string())
                .or_insert_with(|| broadcast::channel(TRIGGERED).0)
                .subscribe(),
            None => self.events.subscribe(),
        };
        match from {
            Some(rv) => {
                let contents = self.contents.read().unwrap_or_else(|e| e.into_inner());
                if rv < contents.oldest || !contents.ready {
                    return None;
                }
                let replay = contents
                    .history
                    .iter()
                    .filter(|e| e.revision() > rv)
                    .cloned()
                    .collect();
                Some(Subscription {
                    replay,
                    initial: None,
                    live,
                    after: contents.revision.max(rv),
                })
            }
            None => {
                let snapshot = self.snapshot(prefix, None);
                let after = snapshot.revision;
                Some(Subscription {
                    replay: Vec::new(),
                    initial: Some(snapshot),
                    live,
                    after,
                })
            }
        }
    }

    /// The resource this cache holds, as upstream's metrics name it
    /// (`configmaps`, `deployments.apps`).
    fn resource(&self) -> String {
        let parts: Vec<&str> = self.prefix.trim_matches('/').split('/').collect();
        match parts.as_slice() {
            [_, "core", plural, ..] => (*plural).to_string(),
            [_, group, plural, ..] => format!("{plural}.{group}"),
            _ => self.prefix.clone(),
        }
    }

    /// Records that `key`'s stored value cannot be decoded (reported and
    /// counted once per key, in `apiserver_storage_decode_errors_total`);
    /// returns the error lists and watchers get.
    fn undecodable(
        &self,
        contents: &mut Contents,
        key: &Bytes,
        revision: u64,
        error: &serde_json::Error,
    ) -> Status {
        let name = String::from_utf8_lossy(key).into_owned();
        let reason =
            format!("the stored object {name:?} at revision {revision} cannot be decoded: {error}");
        if contents
            .undecodable
            .insert(key.clone(), reason.clone())
            .is_none()
        {
            tracing::error!(key = %name, revision, %error, "watch cache: a stored object cannot be decoded; this resource's lists and watches fail until it is repaired");
            self.metrics.decode_error(&self.resource());
        }
        Status::internal(reason)
    }

    /// Fails while a stored value under `prefix` cannot be decoded, as
    /// upstream's lists do: rather an error than a list without an object
    /// that exists.
    pub fn check_decodable(&self, prefix: &str) -> Result<(), Status> {
        let contents = self.contents.read().unwrap_or_else(|e| e.into_inner());
        match contents
            .undecodable
            .iter()
            .find(|(key, _)| key.starts_with(prefix.as_bytes()))
        {
            Some((_, reason)) => Err(Status::internal(reason.clone())),
            None => Ok(()),
        }
    }

    fn apply(&self, event: &Event) -> Option<Arc<CachedEvent>> {
        let revision = event.revision();
        let key = &event.kv.key;
        let prev = event.prev.as_ref().and_then(|p| {
            // The cache holds the previous value already, unless it missed it.
            let held = self
                .contents
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .objects
                .get(key)
                .filter(|c| c.revision == p.mod_revision)
                .cloned();
            held.or_else(|| Cached::from_stored(&p.value, p.mod_revision, &self.selectable).ok())
        });
        let object = match event.kind {
            EventKind::Deleted => {
                let mut contents = self.contents.write().unwrap_or_else(|e| e.into_inner());
                // A deleted key is no longer undecodable.
                contents.undecodable.remove(key);
                drop(contents);
                match &prev {
                    Some(prev) => Cached::new(
                        prev.value(),
                        revision,
                        &self.selectable.fields,
                        &self.selectable.schema,
                    ),
                    None => {
                        // Gone, and never served: nothing to tell watchers.
                        self.advance(revision);
                        return None;
                    }
                }
            }
            _ => match Cached::from_stored(&event.kv.value, revision, &self.selectable) {
                Ok(cached) => {
                    let mut contents = self.contents.write().unwrap_or_else(|e| e.into_inner());
                    contents.undecodable.remove(key);
                    drop(contents);
                    cached
                }
                Err(error) => {
                    let mut contents = self.contents.write().unwrap_or_else(|e| e.into_inner());
                    let status = self.undecodable(&mut contents, key, revision, &error);
                    // Lists fail from now on; the stale object is not
                    // served either way.
                    contents.objects.remove(key);
                    contents.revision = revision;
                    return Some(Arc::new(CachedEvent::Broken {
                        revision,
                        error: status,
                    }));
                }
            },
        };
        let kind = event.kind;
        let cached = Arc::new(CachedEvent::Change {
            kind,
            revision,
            object: object.clone(),
            prev,
            received: std::time::Instant::now(),
        });
        let mut contents = self.contents.write().unwrap_or_else(|e| e.into_inner());
        match kind {
            EventKind::Deleted => contents.objects.remove(&event.kv.key),
            _ => contents.objects.insert(event.kv.key.clone(), object),
        };
        contents.revision = revision;
        contents.history.push_back(cached.clone());
        while contents.history.len() > HISTORY {
            if let Some(old) = contents.history.pop_front() {
                contents.oldest = old.revision();
            }
        }
        Some(cached)
    }

    fn advance(&self, revision: u64) -> bool {
        let mut contents = self.contents.write().unwrap_or_else(|e| e.into_inner());
        if revision > contents.revision {
            contents.revision = revision;
            true
        } else {
            false
        }
    }

    /// Fills the cache from a list, then follows the store until `cancel`.
    async fn run(self: Arc<Self>, store: Arc<dyn Store>, cancel: CancellationToken) {
        loop {
            if cancel.is_cancelled() {
                return;
            }
            match self.follow(&store, &cancel).await {
                Ok(()) => return,
                Err(error) => {
                    tracing::warn!(prefix = %self.prefix, %error, "watch cache restarting");
                    if let Ok(mut contents) = self.contents.write() {
                        contents.ready = false;
                    }
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    }
                }
            }
        }
    }

    async fn follow(
        &self,
        store: &Arc<dyn Store>,
        cancel: &CancellationToken,
    ) -> Result<(), rudder_store::Error> {
        // `limit: 0` lists everything in one page.
        let page = store
            .list(self.prefix.as_bytes(), ListOptions::default())
            .await?;
        let revision = page.revision;
        let mut objects = BTreeMap::new();
        let mut bad = Vec::new();
        for kv in &page.kvs {
            match Cached::from_stored(&kv.value, kv.mod_revision, &self.selectable) {
                Ok(cached) => {
                    objects.insert(kv.key.clone(), cached);
                }
                Err(error) => bad.push((kv.key.clone(), kv.mod_revision, error)),
            }
        }
        let mut stream = store
            .watch(WatchRequest::prefix(
                Bytes::from(self.prefix.clone()),
                revision + 1,
            ))
            .await?;
        {
            let mut contents = self.contents.write().unwrap_or_else(|e| e.into_inner());
            // Keys already known to be undecodable are not reported again.
            let known = std::mem::take(&mut contents.undecodable);
            *contents = Contents {
                objects,
                revision,
                history: VecDeque::new(),
                oldest: revision,
                ready: true,
                undecodable: known,
            };
            let bad_keys: std::collections::BTreeSet<Bytes> =
                bad.iter().map(|(key, _, _)| key.clone()).collect();
            contents.undecodable.retain(|key, _| bad_keys.contains(key));
            for (key, revision, error) in &bad {
                self.undecodable(&mut contents, key, *revision, error);
            }
        }
        self.revision.send_replace(revision);
        let mut tick = tokio::time::interval(Duration::from_secs(30));
        loop {
            let item = tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                _ = self.progress.notified() => {
                    stream.request_progress();
                    continue;
                }
                _ = tick.tick() => {
                    stream.request_progress();
                    continue;
                }
                item = stream.recv() => item,
            };
            match item {
                None => {
                    return Err(rudder_store::Error::Unavailable {
                        context: "store watch ended".into(),
                        source: None,
                    });
                }
                Some(Err(error)) => return Err(error),
                Some(Ok(WatchResponse::Events(events))) => {
                    for event in &events {
                        if let Some(cached) = self.apply(event) {
                            self.dispatch(cached);
                        }
                    }
                    if let Some(last) = events.last() {
                        self.revision.send_replace(last.revision());
                    }
                }
                Some(Ok(WatchResponse::Progress { revision })) => {
                    if self.advance(revision) {
                        self.revision.send_replace(revision);
                    }
                    let progress = Arc::new(CachedEvent::Progress(revision));
                    let _ = self.events.send(progress.clone());
                    let mut triggered = self.triggered.lock().unwrap_or_else(|e| e.into_inner());
                    triggered.retain(|_, channel| channel.send(progress.clone()).is_ok());
                }
            }
        }
    }

    /// Sends a change to the watchers without a trigger, and to those of
    /// the trigger values the object has or had.
    fn dispatch(&self, event: Arc<CachedEvent>) {
        let _ = self.events.send(event.clone());
        if let CachedEvent::Broken { .. } = event.as_ref() {
            // Every watcher, whatever it selects, ends with the error.
            let mut triggered = self.triggered.lock().unwrap_or_else(|e| e.into_inner());
            triggered.retain(|_, channel| channel.send(event.clone()).is_ok());
            return;
        }
        let CachedEvent::Change { object, prev, .. } = event.as_ref() else {
            return;
        };
        if !self.selectable.fields.contains(&TRIGGER_FIELD) {
            return;
        }
        // A missing field selects as "" (the scheduler's `spec.nodeName=`).
        let value_of = |c: &Cached| {
            c.selectable
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let now = value_of(object);
        let before = prev.as_deref().map(value_of).filter(|b| *b != now);
        let mut triggered = self.triggered.lock().unwrap_or_else(|e| e.into_inner());
        for value in std::iter::once(&now).chain(before.iter()) {
            // A channel nobody listens to any more is dropped.
            if let Some(channel) = triggered.get(value)
                && channel.send(event.clone()).is_err()
            {
                triggered.remove(value);
            }
        }
    }
}

/// The caches of every resource, made on first use.
#[derive(Debug, Default)]
pub struct Caches {
    caches: Mutex<HashMap<String, Arc<Cache>>>,
}

impl Caches {
    /// The cache of the resource stored under `prefix`, if one runs.
    pub fn running(&self, prefix: &str) -> Option<Arc<Cache>> {
        let caches = self.caches.lock().unwrap_or_else(|e| e.into_inner());
        caches.get(prefix).cloned()
    }

    /// The cache of the resource stored under `prefix`, started if new.
    pub fn get(
        &self,
        prefix: &str,
        fields: &'static [&'static str],
        schema: &str,
        store: &Arc<dyn Store>,
        cancel: &CancellationToken,
        metrics: &Arc<crate::metrics::Metrics>,
    ) -> Arc<Cache> {
        let mut caches = self.caches.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cache) = caches.get(prefix) {
            return cache.clone();
        }
        let (events, _) = broadcast::channel(BROADCAST);
        let cache = Arc::new(Cache {
            prefix: prefix.to_string(),
            selectable: Paths::of(fields, schema),
            contents: RwLock::new(Contents::default()),
            events,
            triggered: Mutex::new(HashMap::new()),
            revision: watch::channel(0).0,
            progress: tokio::sync::Notify::new(),
            metrics: metrics.clone(),
        });
        tokio::spawn(cache.clone().run(store.clone(), cancel.clone()));
        caches.insert(prefix.to_string(), cache.clone());
        cache
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD_FIELDS: &[&str] = &["spec.nodeName", "status.phase", "spec.schedulerName"];

    fn stored(value: &Value) -> Vec<u8> {
        serde_json::to_vec(value).expect("json")
    }

    #[test]
    fn a_spliced_object_is_the_object_with_its_version_and_fields() {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}, "uid": "u"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending", "conditions": []},
        });
        let spliced =
            Cached::spliced(&stored(&pod), 42, &Paths::of(POD_FIELDS, "")).expect("spliced");
        let rebuilt = Cached::new(pod.clone(), 42, POD_FIELDS, "");
        assert_eq!(spliced.value(), rebuilt.value());
        assert_eq!(spliced.value()["metadata"]["resourceVersion"], "42");
        assert_eq!(spliced.selectable, rebuilt.selectable);
        assert_eq!(
            spliced.selectable,
            serde_json::json!({
                "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}},
                "spec": {"nodeName": "n1"},
                "status": {"phase": "Pending"},
            })
        );
    }

    #[test]
    fn empty_metadata_null_fields_and_missing_paths_match_the_tree() {
        for object in [
            serde_json::json!({"kind": "X", "metadata": {}}),
            serde_json::json!({"metadata": {"name": "x"}, "spec": {"nodeName": null}}),
            serde_json::json!({"metadata": {"name": "x"}, "spec": 3, "status": {}}),
        ] {
            let spliced =
                Cached::spliced(&stored(&object), 7, &Paths::of(POD_FIELDS, "")).expect("spliced");
            let rebuilt = Cached::new(object.clone(), 7, POD_FIELDS, "");
            assert_eq!(spliced.value(), rebuilt.value(), "{object}");
            assert_eq!(spliced.selectable, rebuilt.selectable, "{object}");
        }
    }

    #[test]
    fn what_the_splice_cannot_take_is_serialized_afresh() {
        // A stored version, a value with line breaks, escaped keys, no
        // metadata: the same result by the slow road.
        let with_version = br#"{"metadata":{"name":"x","resourceVersion":"3"}}"#.to_vec();
        let pretty = b"{\n \"metadata\": {\"name\": \"x\"}\n}".to_vec();
        let escaped = br#"{"metadata":{"na\u006de":"x"}}"#.to_vec();
        let bare = br#"{"kind":"X"}"#.to_vec();
        for bytes in [with_version, pretty, escaped, bare] {
            assert!(Cached::spliced(&bytes, 9, &Paths::of(POD_FIELDS, "")).is_none());
            let value: Value = serde_json::from_slice(&bytes).expect("json");
            let cached =
                Cached::from_stored(&bytes, 9, &Paths::of(POD_FIELDS, "")).expect("cached");
            assert_eq!(
                cached.value(),
                Cached::new(value, 9, POD_FIELDS, "").value()
            );
            assert!(!cached.json.contains(&b'\n'));
        }
        assert!(Cached::from_stored(b"{not json", 9, &Paths::of(POD_FIELDS, "")).is_err());
    }
}
