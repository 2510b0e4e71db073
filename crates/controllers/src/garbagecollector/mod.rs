//! The garbage collector (upstream's `pkg/controller/garbagecollector`):
//! deletes objects whose owners are gone, and carries out the
//! `Foreground` and `Orphan` propagation policies.
//!
//! - **Monitors** ([`run`]): a metadata informer for every resource that can
//!   be listed, watched and deleted (events excepted), found by discovery
//!   and looked for again every 30 s so custom resources join.
//! - **The graph** ([`graph`]): one task applies every change the monitors
//!   see to the owner/dependent graph, and queues what to look at.
//! - **attemptToDelete workers**: an object whose owners are all gone is
//!   deleted (Background, or as its own finalizers say); one with a live
//!   owner loses its references to the dead; an owner deleted in the
//!   foreground loses its `foregroundDeletion` finalizer once its blocking
//!   dependents are gone.
//! - **attemptToOrphan workers**: an owner with the `orphan` finalizer has
//!   its references removed from every dependent, then the finalizer.
//!
//! Owners that may not exist are verified with a live GET, and the absent
//! ones remembered, as upstream does.

pub mod graph;
mod operations;

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{DynamicObject, PartialObjectMeta};
use rudder_api::strategy::Propagation;
use rudder_runtime::controller::{Action, run_workers};
use rudder_runtime::events::{EventType, Recorder};
use rudder_runtime::{Change, WorkQueue};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::graph::{FOREGROUND, Graph, Identity, ORPHAN, Observed, Owner, Uid, Work};
use self::operations::Error;
use crate::Context;
use crate::discovery::{Resource, Resources};

/// Owners known not to exist, remembered (upstream keeps 500).
const ABSENT_OWNERS: usize = 500;
/// Dependents orphaned at once for one owner.
pub const ORPHAN_CONCURRENCY: usize = 64;

/// What the monitors tell the graph.
#[derive(Debug)]
enum GraphChange {
    Upsert(Observed),
    Delete(Uid),
    /// A virtual owner found not to exist.
    VirtualDelete(Uid),
    /// A monitor missed changes: everything of this kind as it is now.
    Resync {
        group: String,
        kind: String,
        live: Vec<Observed>,
    },
    /// Answered once every change sent before it is in the graph.
    Barrier(tokio::sync::oneshot::Sender<()>),
}

/// How long the workers wait for the monitors' first listings (upstream
/// waits its 30 s sync period).
const SYNC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

struct Collector {
    ctx: Arc<Context>,
    graph: RwLock<Graph>,
    resources: RwLock<Arc<Resources>>,
    absent: Mutex<(HashSet<String>, VecDeque<String>)>,
    deletes: WorkQueue<Uid>,
    orphans: WorkQueue<Uid>,
    /// Held shared by a worker per item, exclusively while new monitors
    /// sync.
    pause: tokio::sync::RwLock<()>,
    changes: mpsc::UnboundedSender<GraphChange>,
    recorder: Recorder,
}

fn absent_key(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    uid: &str,
) -> String {
    format!(
        "{}/{kind}/{}/{name}/{uid}",
        graph::group_of(api_version),
        namespace.unwrap_or_default()
    )
}

/// The identity of an object a monitor of `resource` saw.
fn observed(resource: &Resource, object: &PartialObjectMeta<DynamicObject>) -> Option<Observed> {
    let uid = object.metadata.uid.clone()?;
    Some(Observed {
        identity: Identity {
            api_version: resource.api.api_version.clone(),
            kind: resource.api.kind.clone(),
            namespace: object
                .metadata
                .namespace
                .clone()
                .filter(|_| resource.namespaced),
            name: object.name_any(),
            uid,
        },
        owners: object
            .owner_references()
            .iter()
            .map(|r| Owner {
                api_version: r.api_version.clone(),
                kind: r.kind.clone(),
                name: r.name.clone(),
                uid: r.uid.clone(),
                block: r.block_owner_deletion == Some(true),
            })
            .collect(),
        deleting: object.metadata.deletion_timestamp.is_some(),
        finalizers: object.finalizers().to_vec(),
        resource_version: object.metadata.resource_version.clone(),
    })
}

/// Runs the garbage collector until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let (changes, incoming) = mpsc::unbounded_channel();
    let recorder = Recorder::new(
        ctx.client.clone(),
        "garbage-collector-controller",
        &ctx.identity,
        ctx.clock.clone(),
    );
    let collector = Arc::new(Collector {
        deletes: WorkQueue::new(ctx.clock.clone()),
        orphans: WorkQueue::new(ctx.clock.clone()),
        ctx: ctx.clone(),
        graph: RwLock::new(Graph::default()),
        resources: RwLock::new(Arc::new(Resources::default())),
        absent: Mutex::new((HashSet::new(), VecDeque::new())),
        pause: tokio::sync::RwLock::new(()),
        changes,
        recorder,
    });
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(collector.clone().build_graph(incoming, stop.clone()));
    let (synced, graph_ready) = tokio::sync::oneshot::channel();
    tasks.spawn(collector.clone().monitor(stop.clone(), synced));
    // No worker acts on a graph that has not seen everything yet: an
    // orphaning owner would find no dependents, a foreground one no
    // blocking ones.
    tokio::select! {
        _ = stop.cancelled() => return,
        _ = graph_ready => {}
    }
    let workers = ctx.options.gc_workers;
    let deleter = collector.clone();
    tasks.spawn(run_workers(
        "garbage-collector-attempt-to-delete",
        collector.deletes.clone(),
        workers,
        stop.clone(),
        move |uid: Uid| {
            let collector = deleter.clone();
            async move {
                let _working = collector.pause.read().await;
                collector.attempt_to_delete(&uid).await
            }
        },
    ));
    let orphaner = collector.clone();
    tasks.spawn(run_workers(
        "garbage-collector-attempt-to-orphan",
        collector.orphans.clone(),
        workers,
        stop.clone(),
        move |uid: Uid| {
            let collector = orphaner.clone();
            async move {
                let _working = collector.pause.read().await;
                collector.attempt_to_orphan(&uid).await
            }
        },
    ));
    while tasks.join_next().await.is_some() {}
}

impl Collector {
    fn resources(&self) -> Arc<Resources> {
        self.resources
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What the workers need of a node (not its dependents, which can be
    /// many).
    fn node(&self, uid: &str) -> Option<NodeView> {
        self.graph
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .map(|n| NodeView {
                identity: n.identity.clone(),
                being_deleted: n.being_deleted,
                deleting_dependents: n.deleting_dependents,
                virtual_: n.virtual_,
                has_dependents: !n.dependents.is_empty(),
                owners: n.owners.clone(),
                finalizers: n.finalizers.clone(),
                resource_version: n.resource_version.clone(),
            })
    }

    fn dependents(&self, uid: &str) -> Vec<Uid> {
        self.graph
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .map(|n| n.dependents.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn remember_absent(&self, key: String) {
        let mut absent = self.absent.lock().unwrap_or_else(|e| e.into_inner());
        if absent.0.insert(key.clone()) {
            absent.1.push_back(key);
            if absent.1.len() > ABSENT_OWNERS
                && let Some(old) = absent.1.pop_front()
            {
                absent.0.remove(&old);
            }
        }
    }

    fn known_absent(&self, key: &str) -> bool {
        self.absent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .contains(key)
    }

    /// Discovers the deletable resources now and every so often, and
    /// starts a monitor for each new one; `synced` fires once the first
    /// monitors have listed and the graph holds what they found.
    async fn monitor(
        self: Arc<Self>,
        stop: CancellationToken,
        synced: tokio::sync::oneshot::Sender<()>,
    ) {
        let mut monitored: HashSet<String> = HashSet::new();
        let mut synced = Some(synced);
        loop {
            match Resources::discover(&self.ctx.client).await {
                Ok(found) => {
                    let new: Vec<Resource> = found
                        .deletable()
                        .filter(|r| {
                            !monitored.contains(&format!("{}/{}", r.api.api_version, r.api.plural))
                        })
                        .cloned()
                        .collect();
                    *self.resources.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(found);
                    let mut listed = Vec::new();
                    for resource in new {
                        monitored.insert(format!(
                            "{}/{}",
                            resource.api.api_version, resource.api.plural
                        ));
                        let (done, first_listing) = tokio::sync::oneshot::channel();
                        listed.push(first_listing);
                        tokio::spawn(self.clone().follow(resource, stop.clone(), done));
                    }
                    if !listed.is_empty() || synced.is_some() {
                        // The workers wait (as upstream's `workerLock`)
                        // until the new monitors have listed and the graph
                        // holds what they found.
                        let paused = tokio::time::timeout(SYNC_TIMEOUT, self.pause.write()).await;
                        let all = futures::future::join_all(listed);
                        if tokio::time::timeout(SYNC_TIMEOUT, all).await.is_err() {
                            tracing::warn!(
                                "garbage collector: not every monitor listed in time; going on"
                            );
                        }
                        let (barrier, passed) = tokio::sync::oneshot::channel();
                        let _ = self.changes.send(GraphChange::Barrier(barrier));
                        let _ = passed.await;
                        drop(paused);
                        if let Some(ready) = synced.take() {
                            let _ = ready.send(());
                        }
                    }
                }
                Err(error) => tracing::warn!(%error, "garbage collector: discovery failed"),
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                () = self.ctx.clock.sleep(self.ctx.options.discovery_every) => {}
            }
        }
    }

    /// Feeds one resource's changes to the graph; `listed` fires once its
    /// first listing is on the way.
    async fn follow(
        self: Arc<Self>,
        resource: Resource,
        stop: CancellationToken,
        listed: tokio::sync::oneshot::Sender<()>,
    ) {
        let informer = self.ctx.informers.metadata(&resource.api);
        let mut changes = informer.subscribe();
        let store = informer.store();
        let send = |change| {
            let _ = self.changes.send(change);
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            () = informer.wait_synced() => {}
        }
        for object in store.list() {
            if let Some(seen) = observed(&resource, &object) {
                send(GraphChange::Upsert(seen));
            }
        }
        let _ = listed.send(());
        loop {
            match changes.next_until(&stop).await {
                None => return,
                Some(Change::Applied { new, .. }) => {
                    if let Some(seen) = observed(&resource, &new) {
                        send(GraphChange::Upsert(seen));
                    }
                }
                Some(Change::Deleted(old)) => {
                    if let Some(uid) = old.metadata.uid.clone() {
                        send(GraphChange::Delete(uid));
                    }
                }
                Some(Change::Resync) => send(GraphChange::Resync {
                    group: resource.api.group.clone(),
                    kind: resource.api.kind.clone(),
                    live: store
                        .list()
                        .iter()
                        .filter_map(|o| observed(&resource, o))
                        .collect(),
                }),
            }
        }
    }

    /// The graph's single writer: applies every change, queues the work.
    async fn build_graph(
        self: Arc<Self>,
        mut incoming: mpsc::UnboundedReceiver<GraphChange>,
        stop: CancellationToken,
    ) {
        loop {
            let change = tokio::select! {
                _ = stop.cancelled() => return,
                change = incoming.recv() => change,
            };
            let Some(change) = change else { return };
            let mut work = Work::default();
            {
                let mut graph = self.graph.write().unwrap_or_else(|e| e.into_inner());
                let mut absent = Vec::new();
                match change {
                    GraphChange::Upsert(seen) => work = graph.upsert(seen),
                    GraphChange::Delete(uid) => {
                        let (w, gone) = graph.remove(&uid, false);
                        work = w;
                        absent.extend(gone);
                    }
                    GraphChange::VirtualDelete(uid) => {
                        let (w, gone) = graph.remove(&uid, true);
                        work = w;
                        absent.extend(gone);
                    }
                    GraphChange::Barrier(passed) => {
                        let _ = passed.send(());
                    }
                    GraphChange::Resync { group, kind, live } => {
                        let alive: HashSet<Uid> =
                            live.iter().map(|o| o.identity.uid.clone()).collect();
                        for uid in graph.observed_of(&group, &kind) {
                            if !alive.contains(&uid) {
                                let (w, gone) = graph.remove(&uid, false);
                                merge(&mut work, w);
                                absent.extend(gone);
                            }
                        }
                        for seen in live {
                            merge(&mut work, graph.upsert(seen));
                        }
                    }
                }
                drop(graph);
                for identity in absent {
                    self.remember_absent(absent_key(
                        &identity.api_version,
                        &identity.kind,
                        identity.namespace.as_deref(),
                        &identity.name,
                        &identity.uid,
                    ));
                }
            }
            for uid in work.attempt_to_delete {
                self.deletes.add(uid);
            }
            for uid in work.attempt_to_orphan {
                self.orphans.add(uid);
            }
            for (dependent, owner) in work.invalid_namespace {
                self.report_invalid_namespace(&dependent, &owner);
            }
        }
    }

    fn report_invalid_namespace(&self, dependent: &Identity, owner: &Identity) {
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(dependent.api_version.clone()),
            kind: Some(dependent.kind.clone()),
            namespace: dependent.namespace.clone(),
            name: Some(dependent.name.clone()),
            uid: Some(dependent.uid.clone()),
            ..Default::default()
        };
        let note = format!(
            "ownerRef {owner} does not exist in namespace {:?}",
            dependent.namespace.as_deref().unwrap_or_default()
        );
        self.recorder.event(
            &reference,
            EventType::Warning,
            "OwnerRefInvalidNamespace",
            "GarbageCollection",
            &note,
        );
    }

    /// Whether the owner `reference` of `item` is gone (`Ok(None)`), or
    /// its metadata.
    async fn owner_of(
        &self,
        resources: &Resources,
        item: &Identity,
        reference: &Owner,
    ) -> Result<Option<PartialObjectMeta<DynamicObject>>, Error> {
        let cluster_key = absent_key(
            &reference.api_version,
            &reference.kind,
            None,
            &reference.name,
            &reference.uid,
        );
        let namespaced_key = absent_key(
            &reference.api_version,
            &reference.kind,
            item.namespace.as_deref(),
            &reference.name,
            &reference.uid,
        );
        if self.known_absent(&cluster_key) || self.known_absent(&namespaced_key) {
            return Ok(None);
        }
        let owner = Identity {
            api_version: reference.api_version.clone(),
            kind: reference.kind.clone(),
            namespace: item.namespace.clone(),
            name: reference.name.clone(),
            uid: reference.uid.clone(),
        };
        let resource = operations::resource_of(resources, &owner)?;
        if item.namespace.is_none() && resource.namespaced {
            return Err(Error::NamespacedOwnerOfClusterScoped);
        }
        let found = operations::get(&self.ctx.client, resources, &owner).await?;
        if found.is_none() {
            self.remember_absent(if resource.namespaced {
                namespaced_key
            } else {
                cluster_key
            });
        }
        Ok(found)
    }

    /// upstream's `attemptToDeleteItem`.
    async fn attempt_to_delete(&self, uid: &str) -> Result<Action, Error> {
        let Some(node) = self.node(uid) else {
            return Ok(Action::Done);
        };
        if node.being_deleted && !node.deleting_dependents {
            return Ok(Action::Done);
        }
        let resources = self.resources();
        let client = &self.ctx.client;
        // A foreground owner still blocked needs no read: each dependent
        // that goes brings it back here.
        if node.deleting_dependents
            && !node.virtual_
            && self
                .graph
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .has_blocking_dependents(uid)
        {
            return Ok(Action::Done);
        }
        if let Some(action) = self.delete_orphan_as_seen(&node, &resources).await? {
            return Ok(action);
        }
        // A kind discovery does not (yet) know is retried, never taken for
        // absent: its resource may be a custom one not discovered yet.
        let latest = operations::get(client, &resources, &node.identity).await?;
        let Some(latest) = latest else {
            let _ = self
                .changes
                .send(GraphChange::VirtualDelete(uid.to_string()));
            return Ok(Action::Done);
        };
        if node.virtual_ {
            // It exists but its informer has not shown it yet: look again,
            // backing off.
            return Ok(Action::Retry);
        }
        let deleting = latest.metadata.deletion_timestamp.is_some();
        if deleting && latest.finalizers().iter().any(|f| f == FOREGROUND) {
            return self.finish_foreground(&node, &resources).await;
        }
        let references = latest.owner_references().to_vec();
        if references.is_empty() {
            return Ok(Action::Done);
        }
        let (mut solid, mut dangling, mut waiting) = (Vec::new(), Vec::new(), Vec::new());
        for reference in &references {
            let owner = Owner {
                api_version: reference.api_version.clone(),
                kind: reference.kind.clone(),
                name: reference.name.clone(),
                uid: reference.uid.clone(),
                block: reference.block_owner_deletion == Some(true),
            };
            // An owner the graph has seen start a foreground deletion is
            // waiting for its dependents: that only ends with the owner gone
            // (dangling), which decides the same, so no read is needed.
            // (Only for an owner this object may have: cluster-scoped, or in
            // its namespace; the others are settled by `owner_of`.)
            if self.seen_waiting(&node.identity, &owner.uid) {
                waiting.push(owner.uid);
                continue;
            }
            match self.owner_of(&resources, &node.identity, &owner).await {
                Ok(None) => dangling.push(owner.uid),
                Ok(Some(found)) => {
                    let waits = found.metadata.deletion_timestamp.is_some()
                        && found.finalizers().iter().any(|f| f == FOREGROUND);
                    if waits {
                        waiting.push(owner.uid);
                    } else {
                        solid.push(owner.uid);
                    }
                }
                // Never collected, never retried (upstream).
                Err(Error::NamespacedOwnerOfClusterScoped) => return Ok(Action::Done),
                Err(e) => return Err(e),
            }
        }
        if !solid.is_empty() {
            if dangling.is_empty() && waiting.is_empty() {
                return Ok(Action::Done);
            }
            let gone: Vec<String> = dangling.into_iter().chain(waiting).collect();
            operations::patch_owners(client, &resources, &node.identity, &gone, &[]).await?;
            return Ok(Action::Done);
        }
        let rv = latest.metadata.resource_version.clone();
        if !waiting.is_empty() && node.has_dependents {
            let cycle = self
                .dependents(uid)
                .iter()
                .any(|d| self.node(d).is_some_and(|n| n.deleting_dependents));
            if cycle {
                let blocking: Vec<String> = references
                    .iter()
                    .filter(|r| r.block_owner_deletion == Some(true))
                    .map(|r| r.uid.clone())
                    .collect();
                operations::patch_owners(client, &resources, &node.identity, &[], &blocking)
                    .await?;
            }
            operations::delete(
                client,
                &resources,
                &node.identity,
                rv,
                &references,
                Propagation::Foreground,
            )
            .await?;
            return Ok(Action::Done);
        }
        let policy = if latest.finalizers().iter().any(|f| f == ORPHAN) {
            Propagation::Orphan
        } else if latest.finalizers().iter().any(|f| f == FOREGROUND) {
            Propagation::Foreground
        } else {
            Propagation::Background
        };
        let deleted =
            operations::delete(client, &resources, &node.identity, rv, &references, policy).await?;
        if !deleted {
            let _ = self
                .changes
                .send(GraphChange::VirtualDelete(uid.to_string()));
        }
        Ok(Action::Done)
    }

    /// Whether the graph saw `owner` (one `item` may have: cluster-scoped,
    /// or in its namespace) start a foreground deletion: it waits for its
    /// dependents, which only ends with it gone — either way its dependents
    /// are not kept for it.
    fn seen_waiting(&self, item: &Identity, owner: &str) -> bool {
        self.node(owner).is_some_and(|o| {
            !o.virtual_
                && o.deleting_dependents
                && (o.identity.namespace.is_none() || o.identity.namespace == item.namespace)
        })
    }

    /// The common case without a read: every owner of the object as last
    /// observed is known to be gone, or seen deleting its dependents in the
    /// foreground, and the object has no dependents of its own — so it is
    /// deleted (as upstream's classification would), on the condition that
    /// it is still that version (a changed object is read live and looked
    /// at again). `None` when this does not apply.
    async fn delete_orphan_as_seen(
        &self,
        node: &NodeView,
        resources: &Resources,
    ) -> Result<Option<Action>, Error> {
        let Some(version) = node.resource_version.clone() else {
            return Ok(None);
        };
        if node.virtual_ || node.being_deleted || node.owners.is_empty() || node.has_dependents {
            return Ok(None);
        }
        let all_gone_or_waiting = node.owners.iter().all(|o| {
            let gone = [None, node.identity.namespace.as_deref()].iter().any(|ns| {
                self.known_absent(&absent_key(&o.api_version, &o.kind, *ns, &o.name, &o.uid))
            });
            gone || self.seen_waiting(&node.identity, &o.uid)
        });
        if !all_gone_or_waiting {
            return Ok(None);
        }
        let policy = if node.finalizers.iter().any(|f| f == ORPHAN) {
            Propagation::Orphan
        } else if node.finalizers.iter().any(|f| f == FOREGROUND) {
            Propagation::Foreground
        } else {
            Propagation::Background
        };
        match operations::delete_if_unchanged(
            &self.ctx.client,
            resources,
            &node.identity,
            &version,
            policy,
        )
        .await?
        {
            // Deleted, or gone already: its delete event updates the graph.
            Some(_) => Ok(Some(Action::Done)),
            // Changed since: read it live.
            None => Ok(None),
        }
    }

    /// An owner deleted in the foreground: done once its blocking
    /// dependents are gone; until then, they are deleted.
    async fn finish_foreground(
        &self,
        node: &NodeView,
        resources: &Resources,
    ) -> Result<Action, Error> {
        let blocked = self
            .graph
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .has_blocking_dependents(&node.identity.uid);
        if !blocked {
            operations::remove_finalizer(&self.ctx.client, resources, &node.identity, FOREGROUND)
                .await?;
        }
        // While some block it, they are on their way: each was queued when
        // the foreground deletion started (and retries on its own), and
        // each that goes queues this owner again.
        Ok(Action::Done)
    }

    /// upstream's `attemptToOrphanWorker`: every dependent loses its
    /// reference to the owner, then the owner its `orphan` finalizer.
    async fn attempt_to_orphan(&self, uid: &str) -> Result<Action, Error> {
        let Some(owner) = self.node(uid) else {
            return Ok(Action::Done);
        };
        let resources = self.resources();
        let dependents: Vec<Identity> = self
            .dependents(uid)
            .iter()
            .filter_map(|d| self.node(d).map(|n| n.identity))
            .collect();
        let client = self.ctx.client.clone();
        let failures: Vec<String> =
            futures::stream::iter(dependents.into_iter().map(|dependent| {
                let (client, resources, owner_uid) =
                    (client.clone(), resources.clone(), uid.to_string());
                async move {
                    operations::patch_owners(&client, &resources, &dependent, &[owner_uid], &[])
                        .await
                        .err()
                        .map(|e| e.to_string())
                }
            }))
            .buffer_unordered(ORPHAN_CONCURRENCY)
            .filter_map(|failure| async move { failure })
            .collect()
            .await;
        if !failures.is_empty() {
            return Err(Error::Other(format!(
                "failed to orphan dependents of owner {}, got errors: {}",
                owner.identity,
                failures.join(", ")
            )));
        }
        operations::remove_finalizer(&client, &resources, &owner.identity, ORPHAN).await?;
        Ok(Action::Done)
    }
}

/// What a worker reads of a node.
#[derive(Debug, Clone)]
struct NodeView {
    identity: Identity,
    being_deleted: bool,
    deleting_dependents: bool,
    virtual_: bool,
    has_dependents: bool,
    owners: Vec<Owner>,
    finalizers: Vec<String>,
    resource_version: Option<String>,
}

fn merge(into: &mut Work, from: Work) {
    into.attempt_to_delete.extend(from.attempt_to_delete);
    into.attempt_to_orphan.extend(from.attempt_to_orphan);
    into.invalid_namespace.extend(from.invalid_namespace);
}
