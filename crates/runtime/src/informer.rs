//! Shared informers: one list+watch per resource per process, kept in a
//! [`Store`] with indexes and fanned out to every subscriber — client-go's
//! `SharedInformerFactory`, on kube-runtime's [`watcher`] (its explicit
//! list/watch state machine, re-listing after a 410).
//!
//! A controller [`subscribe`](Informer::subscribe)s before it reads the
//! store, so no change slips between the two. A subscriber that falls
//! further behind than the fan-out buffer gets [`Change::Resync`] instead of
//! the changes it missed, and re-reads the store (upstream's informers
//! never drop a change; a resync is the same promise with bounded memory).

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::fmt::{self, Debug};
use std::sync::{Arc, Mutex, RwLock};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

/// The index of every store by namespace.
pub const NAMESPACE_INDEX: &str = "namespace";
/// The index of every store by the uids of the objects' owners.
pub const OWNER_INDEX: &str = "owner";

/// The index of a Pod store by node (`spec.nodeName`), as the node agent
/// and the scheduler ask "which pods are on this node"; added with
/// [`index_pods_by_node`].
pub const NODE_INDEX: &str = "node";

/// Indexes a store of Pods by the node they are bound to.
pub fn index_pods_by_node(store: &Store<k8s_openapi::api::core::v1::Pod>) {
    store.add_index(NODE_INDEX, |pod| {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty())
            .into_iter()
            .collect()
    });
}

/// Changes buffered per informer for subscribers that are behind.
const FAN_OUT_BUFFER: usize = 1024;

/// What an object type must be to be informed on.
pub trait Object: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static {}
impl<K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static> Object for K {}

/// The key of an object in a store: `namespace/name`, or `name` for a
/// cluster-scoped object (client-go's `MetaNamespaceKeyFunc`).
pub fn key_of<K: Resource>(object: &K) -> String {
    match object.meta().namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", object.name_any()),
        _ => object.name_any(),
    }
}

/// The key of `name` in `namespace`.
pub fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// One change an informer saw.
#[derive(Debug)]
pub enum Change<K> {
    /// Added (`old` is `None`) or modified.
    Applied { old: Option<Arc<K>>, new: Arc<K> },
    /// Deleted: the object's last state.
    Deleted(Arc<K>),
    /// Changes were missed: re-read the store.
    Resync,
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        match self {
            Change::Applied { old, new } => Change::Applied {
                old: old.clone(),
                new: new.clone(),
            },
            Change::Deleted(o) => Change::Deleted(o.clone()),
            Change::Resync => Change::Resync,
        }
    }
}

type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

struct Inner<K> {
    objects: HashMap<String, Arc<K>>,
    indexers: Vec<(String, IndexFn<K>)>,
    indexes: HashMap<String, HashMap<String, HashSet<String>>>,
}

impl<K> Inner<K> {
    fn unindex(&mut self, key: &str, object: &K) {
        for (name, index_of) in &self.indexers {
            let Some(index) = self.indexes.get_mut(name) else {
                continue;
            };
            for value in index_of(object) {
                if let Some(keys) = index.get_mut(&value) {
                    keys.remove(key);
                    if keys.is_empty() {
                        index.remove(&value);
                    }
                }
            }
        }
    }

    fn index(&mut self, key: &str, object: &K) {
        for (name, index_of) in &self.indexers {
            let index = self.indexes.entry(name.clone()).or_default();
            for value in index_of(object) {
                index.entry(value).or_default().insert(key.to_string());
            }
        }
    }
}

/// An informer's objects, by key and by index. Cloning shares it; only the
/// informer writes to it.
pub struct Store<K> {
    inner: Arc<RwLock<Inner<K>>>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Store {
            inner: self.inner.clone(),
        }
    }
}

impl<K> Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field(
                "objects",
                &self.inner.read().map(|i| i.objects.len()).unwrap_or(0),
            )
            .finish()
    }
}

impl<K: Resource> Default for Store<K> {
    fn default() -> Self {
        Store::new()
    }
}

impl<K: Resource> Store<K> {
    /// An empty store indexed by namespace and by owner.
    pub fn new() -> Self {
        let store = Store {
            inner: Arc::new(RwLock::new(Inner {
                objects: HashMap::new(),
                indexers: Vec::new(),
                indexes: HashMap::new(),
            })),
        };
        store.add_index(NAMESPACE_INDEX, |o: &K| {
            o.meta().namespace.clone().into_iter().collect()
        });
        store.add_index(OWNER_INDEX, |o: &K| {
            o.meta()
                .owner_references
                .iter()
                .flatten()
                .map(|r| r.uid.clone())
                .collect()
        });
        store
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner<K>> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner<K>> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds (or replaces) an index: `index_of` gives an object's values.
    pub fn add_index(
        &self,
        name: &str,
        index_of: impl Fn(&K) -> Vec<String> + Send + Sync + 'static,
    ) {
        let mut inner = self.write();
        inner.indexers.retain(|(n, _)| n != name);
        let index_of: IndexFn<K> = Arc::new(index_of);
        let mut index: HashMap<String, HashSet<String>> = HashMap::new();
        for (key, object) in &inner.objects {
            for value in index_of(object) {
                index.entry(value).or_default().insert(key.clone());
            }
        }
        inner.indexes.insert(name.to_string(), index);
        inner.indexers.push((name.to_string(), index_of));
    }

    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.read().objects.get(key).cloned()
    }

    /// The object `name` in `namespace` (`None` for cluster scope).
    pub fn get_in(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        self.get(&key(namespace, name))
    }

    pub fn list(&self) -> Vec<Arc<K>> {
        self.read().objects.values().cloned().collect()
    }

    pub fn keys(&self) -> Vec<String> {
        self.read().objects.keys().cloned().collect()
    }

    /// The objects whose `index` has `value`.
    pub fn by_index(&self, index: &str, value: &str) -> Vec<Arc<K>> {
        let inner = self.read();
        inner
            .indexes
            .get(index)
            .and_then(|i| i.get(value))
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| inner.objects.get(k).cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores `object`; returns what it replaces and what is stored.
    pub fn apply(&self, object: K) -> (Option<Arc<K>>, Arc<K>) {
        let key = key_of(&object);
        let new = Arc::new(object);
        let mut inner = self.write();
        let old = inner.objects.insert(key.clone(), new.clone());
        if let Some(old) = &old {
            inner.unindex(&key, old);
        }
        inner.index(&key, &new);
        (old, new)
    }

    /// Removes `object`'s key; returns what was stored.
    pub fn delete(&self, object: &K) -> Option<Arc<K>> {
        let key = key_of(object);
        let mut inner = self.write();
        let old = inner.objects.remove(&key)?;
        inner.unindex(&key, &old);
        Some(old)
    }

    /// Replaces everything with a fresh listing; returns the changes that
    /// make the old contents the new.
    pub fn replace(&self, objects: Vec<K>) -> Vec<Change<K>> {
        let mut changes = Vec::new();
        let mut listed = HashSet::new();
        for object in objects {
            let key = key_of(&object);
            listed.insert(key.clone());
            let unchanged = self.get(&key).is_some_and(|old| {
                old.meta().resource_version == object.meta().resource_version
                    && old.meta().uid == object.meta().uid
            });
            if !unchanged {
                let (old, new) = self.apply(object);
                changes.push(Change::Applied { old, new });
            }
        }
        let gone: Vec<Arc<K>> = self
            .list()
            .into_iter()
            .filter(|o| !listed.contains(&key_of(o.as_ref())))
            .collect();
        for object in gone {
            if let Some(old) = self.delete(&object) {
                changes.push(Change::Deleted(old));
            }
        }
        changes
    }
}

/// The changes of one informer, for one subscriber.
pub struct Subscription<K> {
    receiver: broadcast::Receiver<Change<K>>,
}

impl<K> Debug for Subscription<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("pending", &self.receiver.len())
            .finish()
    }
}

impl<K: Send + Sync + 'static> Subscription<K> {
    /// The next change; [`Change::Resync`] after missed ones; `None` once
    /// the informer stops.
    pub async fn next(&mut self) -> Option<Change<K>> {
        match self.receiver.recv().await {
            Ok(change) => Some(change),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::debug!(missed, "informer subscriber fell behind; resyncing");
                Some(Change::Resync)
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// [`next`](Subscription::next), or `None` once `stop` fires.
    pub async fn next_until(&mut self, stop: &CancellationToken) -> Option<Change<K>> {
        tokio::select! {
            _ = stop.cancelled() => None,
            change = self.next() => change,
        }
    }
}

/// A shared informer: its store, its changes, and whether it has listed.
pub struct Informer<K> {
    store: Store<K>,
    changes: broadcast::Sender<Change<K>>,
    synced: watch::Receiver<bool>,
}

impl<K> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer {
            store: self.store.clone(),
            changes: self.changes.clone(),
            synced: self.synced.clone(),
        }
    }
}

impl<K> Debug for Informer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Informer")
            .field("synced", &*self.synced.borrow())
            .finish()
    }
}

impl<K: Object> Informer<K> {
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Every change from now on.
    pub fn subscribe(&self) -> Subscription<K> {
        Subscription {
            receiver: self.changes.subscribe(),
        }
    }

    /// Waits until the first listing is in the store.
    pub async fn wait_synced(&self) {
        let mut synced = self.synced.clone();
        let _ = synced.wait_for(|s| *s).await;
    }

    pub fn has_synced(&self) -> bool {
        *self.synced.borrow()
    }
}

/// An object without its managed fields, which no controller reads and
/// which are most of a small object's size (kube-controller-manager's
/// informers trim them the same way).
fn trimmed<K: Resource>(mut object: K) -> K {
    object.meta_mut().managed_fields = None;
    object
}

/// Starts an informer over `api`, running until `cancel` fires.
fn start<K: Object>(
    api: Api<K>,
    config: watcher::Config,
    cancel: CancellationToken,
    what: String,
) -> Informer<K> {
    let store = Store::new();
    let (changes, _) = broadcast::channel(FAN_OUT_BUFFER);
    let (synced_tx, synced) = watch::channel(false);
    let informer = Informer {
        store: store.clone(),
        changes: changes.clone(),
        synced,
    };
    tokio::spawn(async move {
        let stream = watcher(api, config).default_backoff();
        futures::pin_mut!(stream);
        let mut listing: Option<Vec<K>> = None;
        loop {
            let event = tokio::select! {
                _ = cancel.cancelled() => return,
                event = stream.next() => event,
            };
            match event {
                None => return,
                Some(Err(error)) => {
                    tracing::warn!(informer = %what, %error, "list/watch failed; retrying");
                }
                Some(Ok(Event::Init)) => listing = Some(Vec::new()),
                Some(Ok(Event::InitApply(object))) => {
                    listing.get_or_insert_with(Vec::new).push(trimmed(object));
                }
                Some(Ok(Event::InitDone)) => {
                    for change in store.replace(listing.take().unwrap_or_default()) {
                        let _ = changes.send(change);
                    }
                    let _ = synced_tx.send(true);
                }
                Some(Ok(Event::Apply(object))) => {
                    let (old, new) = store.apply(trimmed(object));
                    let _ = changes.send(Change::Applied { old, new });
                }
                Some(Ok(Event::Delete(object))) => {
                    store.delete(&object);
                    let _ = changes.send(Change::Deleted(Arc::new(trimmed(object))));
                }
            }
        }
    });
    informer
}

/// The informers of one process: asked twice for a resource, it hands out
/// the same informer (client-go's `SharedInformerFactory`).
pub struct Informers {
    client: Client,
    cancel: CancellationToken,
    started: Mutex<HashMap<String, Arc<dyn Any + Send + Sync>>>,
}

impl Debug for Informers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let started = self.started.lock().map(|s| s.len()).unwrap_or(0);
        f.debug_struct("Informers")
            .field("started", &started)
            .finish()
    }
}

impl Informers {
    /// Informers over `client`, stopped when `cancel` fires.
    pub fn new(client: Client, cancel: CancellationToken) -> Self {
        Informers {
            client,
            cancel,
            started: Mutex::new(HashMap::new()),
        }
    }

    pub fn client(&self) -> Client {
        self.client.clone()
    }

    fn shared<K: Object>(
        &self,
        id: String,
        config: watcher::Config,
        api: impl FnOnce() -> Api<K>,
    ) -> Informer<K> {
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = started.get(&id)
            && let Some(informer) = existing.downcast_ref::<Informer<K>>()
        {
            return informer.clone();
        }
        let informer = start(api(), config, self.cancel.child_token(), id.clone());
        started.insert(id, Arc::new(informer.clone()));
        informer
    }

    /// The informer of a built-in kind, over every namespace.
    pub fn typed<K>(&self) -> Informer<K>
    where
        K: Object + Resource<DynamicType = ()>,
    {
        let id = format!("typed:{}", K::url_path(&(), None));
        self.shared(id, watcher::Config::default(), || {
            Api::all(self.client.clone())
        })
    }

    /// The informer of a built-in kind over the objects a field selector
    /// picks (the node agent's: pods with `spec.nodeName=<node>`).
    pub fn typed_with_fields<K>(&self, fields: &str) -> Informer<K>
    where
        K: Object + Resource<DynamicType = ()>,
    {
        let id = format!("typed:{}?fieldSelector={fields}", K::url_path(&(), None));
        self.shared(id, watcher::Config::default().fields(fields), || {
            Api::all(self.client.clone())
        })
    }

    /// The informer of any resource, as dynamic objects.
    pub fn dynamic(&self, resource: &ApiResource) -> Informer<DynamicObject> {
        let id = format!("dynamic:{}", resource_id(resource));
        self.shared(id, watcher::Config::default(), || {
            Api::all_with(self.client.clone(), resource)
        })
    }

    /// The informer of any resource's metadata only
    /// (`PartialObjectMetadata`), as the garbage collector reads them.
    pub fn metadata(&self, resource: &ApiResource) -> Informer<PartialObjectMeta<DynamicObject>> {
        let id = format!("metadata:{}", resource_id(resource));
        self.shared(id, watcher::Config::default(), || {
            Api::all_with(self.client.clone(), resource)
        })
    }
}

fn resource_id(resource: &ApiResource) -> String {
    format!("{}/{}", resource.api_version, resource.plural)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    fn cm(ns: &str, name: &str, rv: &str, owner: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                owner_references: owner.map(|uid| {
                    vec![OwnerReference {
                        uid: uid.into(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn the_store_indexes_by_namespace_owner_and_added_indexes() {
        let store: Store<ConfigMap> = Store::new();
        store.apply(cm("a", "x", "1", Some("u1")));
        store.apply(cm("a", "y", "1", Some("u1")));
        store.apply(cm("b", "x", "1", None));
        assert_eq!(store.by_index(NAMESPACE_INDEX, "a").len(), 2);
        assert_eq!(store.by_index(OWNER_INDEX, "u1").len(), 2);
        store.apply(cm("a", "y", "2", Some("u2")));
        assert_eq!(store.by_index(OWNER_INDEX, "u1").len(), 1, "reindexed");
        assert_eq!(store.by_index(OWNER_INDEX, "u2").len(), 1);
        store.add_index("name", |o: &ConfigMap| vec![o.name_any()]);
        assert_eq!(store.by_index("name", "x").len(), 2);
        store.delete(&cm("a", "x", "1", None));
        assert_eq!(store.by_index("name", "x").len(), 1);
        assert_eq!(store.by_index(OWNER_INDEX, "u1").len(), 0);
        assert!(store.get_in(Some("b"), "x").is_some());
    }

    #[test]
    fn pods_are_found_by_node() {
        use k8s_openapi::api::core::v1::{Pod, PodSpec};
        let store: Store<Pod> = Store::new();
        index_pods_by_node(&store);
        let pod = |name: &str, node: Option<&str>| Pod {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        };
        store.apply(pod("a", Some("n1")));
        store.apply(pod("b", Some("n1")));
        store.apply(pod("c", None));
        assert_eq!(store.by_index(NODE_INDEX, "n1").len(), 2);
        store.apply(pod("b", Some("n2")));
        assert_eq!(store.by_index(NODE_INDEX, "n1").len(), 1);
        assert_eq!(store.by_index(NODE_INDEX, "n2").len(), 1);
    }

    #[test]
    fn a_relist_yields_only_what_changed() {
        let store: Store<ConfigMap> = Store::new();
        store.apply(cm("a", "same", "1", None));
        store.apply(cm("a", "changed", "1", None));
        store.apply(cm("a", "gone", "1", None));
        let changes = store.replace(vec![
            cm("a", "same", "1", None),
            cm("a", "changed", "2", None),
            cm("a", "new", "3", None),
        ]);
        let mut seen: Vec<String> = changes
            .iter()
            .map(|c| match c {
                Change::Applied { old: None, new } => format!("added {}", new.name_any()),
                Change::Applied { new, .. } => format!("updated {}", new.name_any()),
                Change::Deleted(o) => format!("deleted {}", o.name_any()),
                Change::Resync => "resync".into(),
            })
            .collect();
        seen.sort();
        assert_eq!(seen, ["added new", "deleted gone", "updated changed"]);
        assert_eq!(store.len(), 3);
    }
}
