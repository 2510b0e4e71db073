//! The ResourceQuota controller (upstream's `pkg/controller/resourcequota`):
//! each quota's `status.hard` follows its `spec.hard`, and `status.used` is
//! what the namespace's objects use of every limited resource, measured
//! with the same evaluators the API server's quota admission charges with
//! ([`rudder_api::quota`]).
//!
//! Admission charges a quota before each create; this controller returns
//! what is freed — a pod deleted or finished, a Service or claim deleted
//! or shrunk, any counted object deleted (upstream's replenishment) — and
//! recounts every quota each resync period (`--resource-quota-sync-period`,
//! 5 minutes), which also returns what a write that failed after admission
//! was charged. Its status writes carry the version read, so a charge made
//! meanwhile is never overwritten: the write conflicts and is retried.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota, Secret, Service,
};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, PartialObjectMeta, PostParams};
use rudder_api::quota::{self, ResourceList, Target};
use rudder_runtime::controller::Action;
use rudder_runtime::informer::{Object, Store, key_of};
use rudder_runtime::{Change, WorkQueue};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::discovery::Resources;
use crate::{Context, is_status};

/// How often every quota is recounted (upstream's default).
pub const RESYNC: Duration = Duration::from_secs(300);

/// The kinds counted from their own typed caches; any other resource a
/// quota counts (`count/<resource>.<group>`) gets a metadata cache when a
/// quota first names it.
struct Caches {
    pods: Store<Pod>,
    services: Store<Service>,
    claims: Store<PersistentVolumeClaim>,
    config_maps: Store<ConfigMap>,
    secrets: Store<Secret>,
    controllers: Store<ReplicationController>,
}

struct Controller {
    ctx: Arc<Context>,
    quotas: Store<ResourceQuota>,
    caches: Caches,
    /// `count/<resource>.<group>` → the cache counting it (`None`: not
    /// served).
    counted: Mutex<HashMap<String, Option<Store<PartialObjectMeta<DynamicObject>>>>>,
    queue: WorkQueue<String>,
    stop: CancellationToken,
}

/// Runs the ResourceQuota controller until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let quotas = ctx.informers.typed::<ResourceQuota>();
    let mut changes = quotas.subscribe();
    let informers = &ctx.informers;
    let (pods, services, claims) = (
        informers.typed::<Pod>(),
        informers.typed::<Service>(),
        informers.typed::<PersistentVolumeClaim>(),
    );
    let (config_maps, secrets, controllers) = (
        informers.typed::<ConfigMap>(),
        informers.typed::<Secret>(),
        informers.typed::<ReplicationController>(),
    );
    let c = Arc::new(Controller {
        quotas: quotas.store(),
        caches: Caches {
            pods: pods.store(),
            services: services.store(),
            claims: claims.store(),
            config_maps: config_maps.store(),
            secrets: secrets.store(),
            controllers: controllers.store(),
        },
        counted: Mutex::new(HashMap::new()),
        queue: WorkQueue::new(ctx.clock.clone()),
        ctx: ctx.clone(),
        stop: stop.clone(),
    });
    quotas.wait_synced().await;
    pods.wait_synced().await;
    services.wait_synced().await;
    claims.wait_synced().await;
    config_maps.wait_synced().await;
    secrets.wait_synced().await;
    controllers.wait_synced().await;
    // Replenishment: what frees quota enqueues the namespace's quotas.
    let replenish = {
        let c = c.clone();
        let stop = stop.clone();
        async move {
            tokio::join!(
                c.replenish_on(&pods, &stop, pod_frees),
                c.replenish_on(&services, &stop, |old, new| {
                    old.spec
                        .as_ref()
                        .map(|s| (&s.type_, s.ports.as_ref().map(Vec::len)))
                        != new
                            .spec
                            .as_ref()
                            .map(|s| (&s.type_, s.ports.as_ref().map(Vec::len)))
                }),
                c.replenish_on(&claims, &stop, |old, new| {
                    let storage = |c: &PersistentVolumeClaim| {
                        c.spec
                            .as_ref()
                            .and_then(|s| s.resources.as_ref())
                            .and_then(|r| r.requests.as_ref())
                            .and_then(|r| r.get("storage"))
                            .cloned()
                    };
                    storage(old) != storage(new)
                }),
                c.replenish_on(&config_maps, &stop, |_, _| false),
                c.replenish_on(&secrets, &stop, |_, _| false),
                c.replenish_on(&controllers, &stop, |_, _| false),
            );
        }
    };
    c.quotas
        .list()
        .iter()
        .for_each(|q| c.queue.add(key_of(&**q)));
    let watch = {
        let (c, stop) = (c.clone(), stop.clone());
        async move {
            loop {
                tokio::select! {
                    change = changes.next_until(&stop) => match change {
                        // Upstream syncs a quota when its spec changes, not
                        // when its status does (admission's charges).
                        Some(Change::Applied { old, new }) => {
                            if old.is_none_or(|old| old.spec != new.spec) || needs_count(&new) {
                                c.queue.add(key_of(&*new));
                            }
                        }
                        Some(Change::Deleted(_)) => {}
                        Some(Change::Resync) => {
                            c.quotas.list().iter().for_each(|q| c.queue.add(key_of(&**q)));
                        }
                        None => break,
                    },
                    () = c.ctx.clock.sleep(RESYNC) => {
                        c.quotas.list().iter().for_each(|q| c.queue.add(key_of(&**q)));
                    }
                }
            }
        }
    };
    crate::serve(
        "resourcequota",
        c.clone(),
        c.queue.clone(),
        ctx.options.resource_quota_workers,
        None,
        async move {
            tokio::join!(watch, replenish);
        },
        stop,
        |c, key| async move { c.sync(&key).await },
    )
    .await;
}

/// A quota not yet counted: its status does not follow its spec, or lacks
/// a use for something limited.
fn needs_count(q: &ResourceQuota) -> bool {
    let spec = q.spec.as_ref().and_then(|s| s.hard.as_ref());
    let status = q.status.as_ref();
    let hard = status.and_then(|s| s.hard.as_ref());
    let used = status.and_then(|s| s.used.as_ref());
    spec != hard || spec.is_some_and(|h| h.keys().any(|k| used.is_none_or(|u| !u.contains_key(k))))
}

/// Whether a pod's update frees quota: it finished, or is being deleted.
fn pod_frees(old: &Pod, new: &Pod) -> bool {
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
    let finished = |p: &Pod| matches!(phase(p).as_deref(), Some("Succeeded" | "Failed"));
    (finished(new) && !finished(old))
        || (new.metadata.deletion_timestamp.is_some() && old.metadata.deletion_timestamp.is_none())
}

impl Controller {
    /// Enqueues the quotas of a namespace whenever `informer` deletes one
    /// of its objects, or `frees(old, new)` says an update freed quota.
    async fn replenish_on<K>(
        &self,
        informer: &rudder_runtime::Informer<K>,
        stop: &CancellationToken,
        frees: fn(&K, &K) -> bool,
    ) where
        K: Object + kube::Resource,
    {
        let mut changes = informer.subscribe();
        while let Some(change) = changes.next_until(stop).await {
            let namespace = match &change {
                Change::Deleted(gone) => gone.namespace(),
                Change::Applied {
                    old: Some(old),
                    new,
                } if frees(old, new) => new.namespace(),
                _ => None,
            };
            if let Some(ns) = namespace {
                self.enqueue_namespace(&ns);
            }
        }
    }

    fn enqueue_namespace(&self, namespace: &str) {
        for q in self.quotas.list() {
            if q.metadata.namespace.as_deref() == Some(namespace) {
                self.queue.add(key_of(&*q));
            }
        }
    }

    async fn sync(&self, key: &str) -> Result<Action, kube::Error> {
        let Some(q) = self.quotas.get(key) else {
            return Ok(Action::Done);
        };
        let namespace = q.namespace().unwrap_or_default();
        let as_json = serde_json::to_value(&*q).unwrap_or_default();
        let hard = quota::list(as_json.pointer("/spec/hard"));
        let mut used = quota::list(as_json.pointer("/status/used"));
        used.extend(self.usage(&namespace, &as_json, &hard).await?);
        let used = quota::mask(&used, hard.keys());
        let status_hard = quota::list(as_json.pointer("/status/hard"));
        if quota::to_json(&used) == quota::to_json(&quota::list(as_json.pointer("/status/used")))
            && quota::to_json(&hard) == quota::to_json(&status_hard)
        {
            return Ok(Action::Done);
        }
        let mut updated = as_json;
        updated["status"] = serde_json::json!({
            "hard": quota::to_json(&hard),
            "used": quota::to_json(&used),
        });
        let api: Api<ResourceQuota> = Api::namespaced(self.ctx.client.clone(), &namespace);
        let Ok(body) = serde_json::from_value::<ResourceQuota>(updated) else {
            return Ok(Action::Done);
        };
        let first_count = q.status.as_ref().and_then(|s| s.used.as_ref()).is_none();
        match api
            .replace_status(&q.name_any(), &PostParams::default(), &body)
            .await
        {
            // A new quota is counted once more shortly after: objects
            // created just before it may not have reached the caches yet,
            // and nothing else would recount them before the resync.
            Ok(_) if first_count => Ok(Action::RequeueAfter(Duration::from_secs(1))),
            Ok(_) => Ok(Action::Done),
            // Charged by admission meanwhile, or gone: count again.
            Err(e) if is_status(&e, 409) => Ok(Action::RequeueAfter(Duration::ZERO)),
            Err(e) if is_status(&e, 404) => Ok(Action::Done),
            Err(e) => Err(e),
        }
    }

    /// What the namespace's objects use of `hard` within `quota`'s scopes.
    async fn usage(
        &self,
        namespace: &str,
        quota_json: &Value,
        hard: &ResourceList,
    ) -> Result<ResourceList, kube::Error> {
        let now = self.ctx.clock.now();
        let mut used = ResourceList::new();
        let mut measure = |target: Target<'_>, objects: Vec<Value>| {
            let matched = target.matching_resources(hard.keys());
            if matched.is_empty() {
                return;
            }
            let mut total: ResourceList = matched
                .iter()
                .map(|name| (name.clone(), rudder_api::quantity::Quantity::zero()))
                .collect();
            for object in objects {
                if target.in_scopes(quota_json, &object) {
                    total = quota::add(&total, &quota::mask(&target.usage(&object, now), &matched));
                }
            }
            used.extend(total);
        };
        let c = &self.caches;
        measure(Target::new("", "pods"), in_namespace(&c.pods, namespace));
        measure(
            Target::new("", "services"),
            in_namespace(&c.services, namespace),
        );
        measure(
            Target::new("", "persistentvolumeclaims"),
            in_namespace(&c.claims, namespace),
        );
        measure(
            Target::new("", "configmaps"),
            in_namespace(&c.config_maps, namespace),
        );
        measure(
            Target::new("", "secrets"),
            in_namespace(&c.secrets, namespace),
        );
        measure(
            Target::new("", "replicationcontrollers"),
            in_namespace(&c.controllers, namespace),
        );
        measure(
            Target::new("", "resourcequotas"),
            in_namespace(&self.quotas, namespace),
        );
        // Every other `count/<resource>.<group>` the quota names.
        let known: BTreeSet<&str> = [
            "count/pods",
            "count/services",
            "count/persistentvolumeclaims",
            "count/configmaps",
            "count/secrets",
            "count/replicationcontrollers",
            "count/resourcequotas",
        ]
        .into();
        for name in hard.keys() {
            let Some(counted) = name.strip_prefix("count/") else {
                continue;
            };
            if known.contains(name.as_str()) {
                continue;
            }
            let Some(store) = self.counted_store(name, counted).await? else {
                continue;
            };
            let count = store
                .list()
                .iter()
                .filter(|o| o.metadata.namespace.as_deref() == Some(namespace))
                .count();
            used.insert(
                name.clone(),
                rudder_api::quantity::Quantity::from_int(count as i64),
            );
        }
        Ok(used)
    }

    /// The cache counting `resource[.group]`, started (with its
    /// replenishment) the first time a quota names it.
    async fn counted_store(
        &self,
        name: &str,
        counted: &str,
    ) -> Result<Option<Store<PartialObjectMeta<DynamicObject>>>, kube::Error> {
        if let Some(known) = self
            .counted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            return Ok(known.clone());
        }
        let (resource, group) = counted.split_once('.').unwrap_or((counted, ""));
        let resources = Resources::discover(&self.ctx.client).await?;
        let found = resources
            .preferred()
            .iter()
            .find(|r| r.api.plural == resource && r.api.group == group && r.namespaced)
            .map(|r| r.api.clone());
        let store = match found {
            Some(api) => {
                let informer = self.ctx.informers.metadata(&api);
                informer.wait_synced().await;
                let mut changes = informer.subscribe();
                let (quotas, queue, stop) =
                    (self.quotas.clone(), self.queue.clone(), self.stop.clone());
                tokio::spawn(async move {
                    while let Some(change) = changes.next_until(&stop).await {
                        if let Change::Deleted(gone) = change
                            && let Some(ns) = gone.metadata.namespace.as_deref()
                        {
                            for q in quotas.list() {
                                if q.metadata.namespace.as_deref() == Some(ns) {
                                    queue.add(key_of(&*q));
                                }
                            }
                        }
                    }
                });
                Some(informer.store())
            }
            None => None,
        };
        self.counted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), store.clone());
        Ok(store)
    }
}

fn in_namespace<K>(store: &Store<K>, namespace: &str) -> Vec<Value>
where
    K: Object + kube::Resource + serde::Serialize,
{
    store
        .list()
        .iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(namespace))
        .filter_map(|o| serde_json::to_value(&**o).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_whose_status_lags_its_spec_needs_counting() {
        let q: ResourceQuota = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "q", "namespace": "n"},
            "spec": {"hard": {"pods": "2"}},
        }))
        .expect("quota");
        assert!(needs_count(&q));
        let counted: ResourceQuota = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "q", "namespace": "n"},
            "spec": {"hard": {"pods": "2"}},
            "status": {"hard": {"pods": "2"}, "used": {"pods": "0"}},
        }))
        .expect("quota");
        assert!(!needs_count(&counted));
    }

    #[test]
    fn finishing_or_deleting_a_pod_frees_quota() {
        let pod = |phase: &str, deleting: bool| -> Pod {
            let mut p: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "status": {"phase": phase},
            }))
            .expect("pod");
            if deleting {
                p.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        jiff::Timestamp::UNIX_EPOCH,
                    ));
            }
            p
        };
        assert!(pod_frees(&pod("Running", false), &pod("Succeeded", false)));
        assert!(pod_frees(&pod("Running", false), &pod("Running", true)));
        assert!(!pod_frees(&pod("Pending", false), &pod("Running", false)));
    }
}
