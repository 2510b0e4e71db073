//! The ReplicaSet and ReplicationController controllers (upstream's
//! `pkg/controller/replicaset`, which also runs ReplicationControllers by
//! converting them): keep `spec.replicas` active pods matching the
//! selector — create them from the template in slow-start batches, delete
//! the least useful first, adopt orphans the selector matches and release
//! pods it no longer does — and report what exists in the status.
//!
//! Expectations hold a ReplicaSet back from acting again until the pods it
//! created or deleted show in the cache, so a burst of watch events never
//! doubles a creation.

pub mod ranking;

use std::collections::HashSet;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference, Time};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Resource, ResourceExt};
use rudder_runtime::controller::Action;
use rudder_runtime::events::reference_to;
use rudder_runtime::expectations::Seen;
use rudder_runtime::informer::{NAMESPACE_INDEX, Object, Store, key, key_of};
use rudder_runtime::meta::{controller_of, labels_of, pod, selector_is_empty, selector_matches};
use rudder_runtime::{Change, EventType, Expectations, Recorder, WorkQueue};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::controller_ref::{Claim, controller_reference};
use crate::{Context, Error, api_error, failure_message, is_status};

/// Pods created or deleted in one pass at most (upstream's
/// `BurstReplicas`).
pub const BURST_REPLICAS: usize = 500;
/// The first batch of a slow start (upstream's `SlowStartInitialBatchSize`).
pub const SLOW_START_INITIAL: usize = 1;

/// A kind of object that keeps a number of pods: ReplicaSets, and
/// ReplicationControllers seen as ReplicaSets (as upstream converts them).
pub trait Workload:
    Object + Serialize + DeserializeOwned + Resource<DynamicType = (), Scope = NamespaceResourceScope>
{
    /// The controller's name, in events and logs.
    const CONTROLLER: &'static str;
    /// The object as a ReplicaSet.
    fn as_replica_set(&self) -> ReplicaSet;
}

impl Workload for ReplicaSet {
    const CONTROLLER: &'static str = "replicaset-controller";
    fn as_replica_set(&self) -> ReplicaSet {
        self.clone()
    }
}

impl Workload for ReplicationController {
    const CONTROLLER: &'static str = "replication-controller";
    fn as_replica_set(&self) -> ReplicaSet {
        let spec = self.spec.clone().unwrap_or_default();
        let status = self.status.clone();
        ReplicaSet {
            metadata: self.metadata.clone(),
            spec: Some(k8s_openapi::api::apps::v1::ReplicaSetSpec {
                min_ready_seconds: spec.min_ready_seconds,
                replicas: spec.replicas,
                selector: LabelSelector {
                    match_labels: spec.selector,
                    match_expressions: None,
                },
                template: spec.template,
            }),
            status: status.map(|s| ReplicaSetStatus {
                available_replicas: s.available_replicas,
                conditions: s.conditions.map(|c| {
                    c.into_iter()
                        .map(|c| ReplicaSetCondition {
                            last_transition_time: c.last_transition_time,
                            message: c.message,
                            reason: c.reason,
                            status: c.status,
                            type_: c.type_,
                        })
                        .collect()
                }),
                fully_labeled_replicas: s.fully_labeled_replicas,
                observed_generation: s.observed_generation,
                ready_replicas: s.ready_replicas,
                replicas: s.replicas,
                terminating_replicas: None,
            }),
        }
    }
}

/// One controller's state: its informers' caches, queue and expectations.
struct Controller<K> {
    ctx: Arc<Context>,
    owners: Store<K>,
    pods: Store<Pod>,
    /// Every ReplicaSet, to find a ReplicaSet's siblings (for ranking).
    replica_sets: Store<ReplicaSet>,
    queue: WorkQueue<String>,
    expectations: Expectations,
    recorder: Recorder,
    _kind: PhantomData<K>,
}

/// Runs the ReplicaSet controller until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    run_for::<ReplicaSet>(ctx, stop).await
}

/// Runs the ReplicationController controller until `stop` fires.
pub async fn run_replication_controllers(ctx: Arc<Context>, stop: CancellationToken) {
    run_for::<ReplicationController>(ctx, stop).await
}

async fn run_for<K: Workload>(ctx: Arc<Context>, stop: CancellationToken) {
    let owners = ctx.informers.typed::<K>();
    let pods = ctx.informers.typed::<Pod>();
    let replica_sets = ctx.informers.typed::<ReplicaSet>();
    let mut owner_changes = owners.subscribe();
    let mut pod_changes = pods.subscribe();
    let controller = Arc::new(Controller {
        owners: owners.store(),
        pods: pods.store(),
        replica_sets: replica_sets.store(),
        queue: WorkQueue::new(ctx.clock.clone()),
        expectations: Expectations::new(ctx.clock.clone()),
        recorder: Recorder::new(
            ctx.client.clone(),
            K::CONTROLLER,
            &ctx.identity,
            ctx.clock.clone(),
        ),
        ctx: ctx.clone(),
        _kind: PhantomData,
    });
    owners.wait_synced().await;
    pods.wait_synced().await;
    replica_sets.wait_synced().await;
    for key in controller.owners.keys() {
        controller.queue.add(key);
    }
    let watch_owners = {
        let (c, stop) = (controller.clone(), stop.clone());
        async move {
            while let Some(change) = owner_changes.next_until(&stop).await {
                match change {
                    Change::Applied { new, .. } => c.queue.add(key_of(&*new)),
                    Change::Deleted(old) => {
                        let key = key_of(&*old);
                        c.expectations.forget(&key);
                        c.queue.add(key);
                    }
                    Change::Resync => c.owners.keys().into_iter().for_each(|k| c.queue.add(k)),
                }
            }
        }
    };
    let watch_pods = {
        let (c, stop) = (controller.clone(), stop.clone());
        async move {
            while let Some(change) = pod_changes.next_until(&stop).await {
                c.pod_changed(change);
            }
        }
    };
    crate::serve(
        K::CONTROLLER,
        controller.clone(),
        controller.queue.clone(),
        ctx.options.replicaset_workers,
        Some(controller.recorder.clone()),
        async move {
            tokio::join!(watch_owners, watch_pods);
        },
        stop,
        |c, key| async move { c.sync(&key).await },
    )
    .await;
}

impl<K: Workload> Controller<K> {
    /// The workload that controls `pod`, if it is one of ours.
    fn controller_of_pod(&self, pod: &Pod) -> Option<Arc<K>> {
        let reference = controller_of(pod)?;
        if reference.kind != K::kind(&()) {
            return None;
        }
        let owner = self
            .owners
            .get_in(pod.metadata.namespace.as_deref(), &reference.name)?;
        (owner.meta().uid.as_deref() == Some(reference.uid.as_str())).then_some(owner)
    }

    /// The workloads whose selector matches an orphan `pod`.
    fn workloads_selecting(&self, pod: &Pod) -> Vec<String> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let labels = labels_of(pod);
        self.owners
            .by_index(NAMESPACE_INDEX, namespace)
            .iter()
            .filter(|o| {
                let rs = o.as_replica_set();
                let selector = rs.spec.map(|s| s.selector).unwrap_or_default();
                !selector_is_empty(&selector) && selector_matches(&selector, labels)
            })
            .map(|o| key_of(&**o))
            .collect()
    }

    /// Turns a pod change into the keys to look at (upstream's
    /// `addPod`/`updatePod`/`deletePod`).
    fn pod_changed(&self, change: Change<Pod>) {
        match change {
            Change::Resync => self
                .owners
                .keys()
                .into_iter()
                .for_each(|k| self.queue.add(k)),
            Change::Deleted(old) => {
                if let Some(owner) = self.controller_of_pod(&old) {
                    let key = key_of(&*owner);
                    self.expectations.observed(&key, &key_of(&*old), true);
                    self.queue.add(key);
                }
            }
            Change::Applied { old, new } => {
                let owner = self.controller_of_pod(&new);
                if let Some(old) = &old {
                    if old.metadata.resource_version == new.metadata.resource_version {
                        return;
                    }
                    // A changed controller reference: the old controller
                    // lost a pod.
                    if controller_of(&**old).map(|r| &r.uid) != controller_of(&*new).map(|r| &r.uid)
                        && let Some(previous) = self.controller_of_pod(old)
                    {
                        self.queue.add(key_of(&*previous));
                    }
                }
                match owner {
                    Some(owner) => {
                        let key = key_of(&*owner);
                        let deleting = new.metadata.deletion_timestamp.is_some();
                        self.expectations.observed(&key, &key_of(&*new), deleting);
                        self.queue.add(key.clone());
                        // Ready now: available after minReadySeconds.
                        let min_ready = owner
                            .as_replica_set()
                            .spec
                            .and_then(|s| s.min_ready_seconds)
                            .unwrap_or(0);
                        if min_ready > 0
                            && old.as_ref().is_some_and(|o| !pod::is_ready(o))
                            && pod::is_ready(&new)
                        {
                            self.queue
                                .add_after(key, Duration::from_secs(min_ready as u64 + 1));
                        }
                    }
                    None if controller_of(&*new).is_none()
                        && new.metadata.deletion_timestamp.is_none() =>
                    {
                        let relabelled = old
                            .as_ref()
                            .is_none_or(|o| o.metadata.labels != new.metadata.labels);
                        if relabelled || old.as_ref().is_some_and(|o| controller_of(&**o).is_some())
                        {
                            for key in self.workloads_selecting(&new) {
                                self.queue.add(key);
                            }
                        }
                    }
                    None => {}
                }
            }
        }
    }

    fn seen(&self, pod_key: &str) -> Seen {
        match self.pods.get(pod_key) {
            None => Seen::Absent,
            Some(p) if p.metadata.deletion_timestamp.is_some() => Seen::Deleting,
            Some(_) => Seen::Present,
        }
    }

    /// One pass over the workload `key` (upstream's `syncReplicaSet`).
    async fn sync(&self, key: &str) -> Result<Action, Error> {
        let Some(owner) = self.owners.get(key) else {
            self.expectations.forget(key);
            return Ok(Action::Done);
        };
        let rs = owner.as_replica_set();
        let spec = rs.spec.clone().unwrap_or_default();
        let namespace = rs.metadata.namespace.clone().unwrap_or_default();
        if selector_is_empty(&spec.selector) {
            // Validation refuses these; one from elsewhere is left alone.
            tracing::warn!(
                controller = K::CONTROLLER,
                key,
                "a selector that selects everything; ignored"
            );
            return Ok(Action::Done);
        }
        let satisfied = self.expectations.satisfied(key, |k| self.seen(k));
        let active: Vec<Arc<Pod>> = self
            .pods
            .by_index(NAMESPACE_INDEX, &namespace)
            .into_iter()
            .filter(|p| pod::is_active(p))
            .collect();
        let claimed = self.claim(&owner, &spec.selector, active).await?;
        let managed = if satisfied && rs.metadata.deletion_timestamp.is_none() {
            self.manage(key, &owner, &spec, &claimed).await
        } else {
            Ok(())
        };
        let status = self.status(&rs, &claimed, managed.as_ref().err());
        let written = self.write_status(&owner, &rs, status).await?;
        managed?;
        let min_ready = spec.min_ready_seconds.unwrap_or(0);
        if min_ready > 0
            && written.ready_replicas == Some(spec.replicas.unwrap_or(1))
            && written.available_replicas != Some(spec.replicas.unwrap_or(1))
        {
            return Ok(Action::RequeueAfter(Duration::from_secs(min_ready as u64)));
        }
        Ok(Action::Done)
    }

    /// The pods this workload owns (upstream's `ClaimPods`): those it
    /// controls and its selector matches, plus orphans it adopts; those it
    /// controls that no longer match are released.
    async fn claim(
        &self,
        owner: &K,
        selector: &LabelSelector,
        pods: Vec<Arc<Pod>>,
    ) -> Result<Vec<Arc<Pod>>, Error> {
        Claim {
            client: &self.ctx.client,
            owner,
            selector,
            finalizer: None,
        }
        .claim(pods)
        .await
    }

    fn pods_api(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.ctx.client.clone(), namespace)
    }

    /// Creates or deletes pods to reach `spec.replicas` (upstream's
    /// `manageReplicas`).
    async fn manage(
        &self,
        key: &str,
        owner: &K,
        spec: &k8s_openapi::api::apps::v1::ReplicaSetSpec,
        claimed: &[Arc<Pod>],
    ) -> Result<(), Error> {
        let wanted = spec.replicas.unwrap_or(1).max(0) as usize;
        let have = claimed.len();
        let namespace = owner.meta().namespace.clone().unwrap_or_default();
        if have < wanted {
            let count = (wanted - have).min(BURST_REPLICAS);
            let Some(template) = spec.template.clone() else {
                return Err(Error::Failed("no pod template".into()));
            };
            let pod = pod_from_template(
                &template,
                &format!("{}-", owner.name_any()),
                &namespace,
                controller_reference(owner),
            );
            self.expectations.expect_creations(key, count);
            let (created, failure) = self
                .create_in_batches(key, owner, &namespace, &pod, count)
                .await;
            if let Some(error) = failure {
                let message = failure_message(&error);
                self.recorder.event(
                    &reference_to(owner),
                    EventType::Warning,
                    "FailedCreate",
                    "Create",
                    &format!("Error creating: {message}"),
                );
                tracing::info!(controller = K::CONTROLLER, key, created, count, %message, "pod creation failed");
                // The message as upstream's ReplicaFailure condition shows it.
                return Err(Error::Failed(message));
            }
            if created > 0 {
                tracing::debug!(controller = K::CONTROLLER, key, created, "created pods");
            }
        } else if have > wanted {
            let count = (have - wanted).min(BURST_REPLICAS);
            let related = self.related_pods(owner, claimed);
            let doomed = ranking::pods_to_delete(claimed.to_vec(), &related, count);
            let keys: Vec<String> = doomed.iter().map(|p| key_of(&**p)).collect();
            self.expectations.expect_deletions(key, keys.clone());
            let api = self.pods_api(&namespace);
            let deletions = doomed.into_iter().zip(keys).map(|(p, pod_key)| {
                let api = api.clone();
                let name = p.name_any();
                async move {
                    match api.delete(&name, &DeleteParams::default()).await {
                        Ok(_) => {
                            self.recorder.event(
                                &reference_to(owner),
                                EventType::Normal,
                                "SuccessfulDelete",
                                "Delete",
                                &format!("Deleted pod: {name}"),
                            );
                            Ok(())
                        }
                        Err(e) if is_status(&e, 404) => {
                            self.expectations.deletion_failed(key, &pod_key);
                            Ok(())
                        }
                        Err(e) => {
                            self.expectations.deletion_failed(key, &pod_key);
                            Err(e)
                        }
                    }
                }
            });
            let outcomes: Vec<Result<(), kube::Error>> = futures::stream::iter(deletions)
                .buffer_unordered(64)
                .collect()
                .await;
            if let Some(error) = outcomes.into_iter().find_map(Result::err) {
                let message = failure_message(&error);
                self.recorder.event(
                    &reference_to(owner),
                    EventType::Warning,
                    "FailedDelete",
                    "Delete",
                    &format!("Error deleting: {message}"),
                );
                return Err(Error::Failed(format!("deleting pods: {message}")));
            }
        }
        Ok(())
    }

    /// Creates `count` copies of `pod` in batches of 1, 2, 4, … stopping
    /// at the first batch with a failure (upstream's `slowStartBatch`).
    /// Returns how many were created and the first failure.
    async fn create_in_batches(
        &self,
        key: &str,
        owner: &K,
        namespace: &str,
        pod: &Pod,
        count: usize,
    ) -> (usize, Option<kube::Error>) {
        let api = self.pods_api(namespace);
        let mut remaining = count;
        let mut batch = SLOW_START_INITIAL.min(count);
        let mut created = 0;
        while batch > 0 {
            let creates = (0..batch).map(|_| {
                let api = api.clone();
                async move {
                    match api.create(&PostParams::default(), pod).await {
                        Ok(p) => {
                            self.expectations.created(key, Some(key_of(&p)));
                            self.recorder.event(
                                &reference_to(owner),
                                EventType::Normal,
                                "SuccessfulCreate",
                                "Create",
                                &format!("Created pod: {}", p.name_any()),
                            );
                            Ok(())
                        }
                        Err(e) => {
                            self.expectations.created(key, None);
                            Err(e)
                        }
                    }
                }
            });
            let outcomes: Vec<Result<(), kube::Error>> = futures::future::join_all(creates).await;
            let failed: Vec<kube::Error> = outcomes.into_iter().filter_map(Result::err).collect();
            created += batch - failed.len();
            remaining -= batch;
            if let Some(error) = failed.into_iter().next() {
                // The batches never sent will never be seen.
                for _ in 0..remaining {
                    self.expectations.created(key, None);
                }
                return (created, Some(error));
            }
            batch = (batch * 2).min(remaining);
        }
        (created, None)
    }

    /// The active pods of the same workload: this one's, and those of the
    /// ReplicaSets sharing its controller (a Deployment's old and new).
    fn related_pods(&self, owner: &K, claimed: &[Arc<Pod>]) -> Vec<Arc<Pod>> {
        let Some(parent) = controller_of(owner) else {
            return claimed.to_vec();
        };
        let namespace = owner.meta().namespace.clone().unwrap_or_default();
        let siblings: HashSet<String> = self
            .replica_sets
            .by_index(NAMESPACE_INDEX, &namespace)
            .iter()
            .filter(|rs| controller_of(&***rs).is_some_and(|r| r.uid == parent.uid))
            .filter_map(|rs| rs.metadata.uid.clone())
            .collect();
        self.pods
            .by_index(NAMESPACE_INDEX, &namespace)
            .into_iter()
            .filter(|p| pod::is_active(p))
            .filter(|p| controller_of(&**p).is_some_and(|r| siblings.contains(&r.uid)))
            .collect()
    }

    /// The status the pods make (upstream's `calculateStatus`).
    fn status(
        &self,
        rs: &ReplicaSet,
        claimed: &[Arc<Pod>],
        failure: Option<&Error>,
    ) -> ReplicaSetStatus {
        let spec = rs.spec.clone().unwrap_or_default();
        let template_labels = spec
            .template
            .as_ref()
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        let min_ready = Duration::from_secs(spec.min_ready_seconds.unwrap_or(0).max(0) as u64);
        let now = self.ctx.clock.now();
        let fully_labeled = claimed
            .iter()
            .filter(|p| {
                let labels = labels_of(&***p);
                template_labels
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v))
            })
            .count();
        let ready = claimed.iter().filter(|p| pod::is_ready(p)).count();
        let available = claimed
            .iter()
            .filter(|p| pod::is_available(p, min_ready, now))
            .count();
        let previous = rs.status.clone().unwrap_or_default();
        let mut conditions = previous.conditions.clone().unwrap_or_default();
        let failed_create = failure.map(|e| e.to_string());
        let wanted = spec.replicas.unwrap_or(1) as usize;
        match failed_create {
            Some(message) if claimed.len() < wanted => {
                if !conditions.iter().any(|c| c.type_ == "ReplicaFailure") {
                    conditions.push(ReplicaSetCondition {
                        type_: "ReplicaFailure".into(),
                        status: "True".into(),
                        reason: Some("FailedCreate".into()),
                        message: Some(message),
                        last_transition_time: Some(Time(
                            k8s_openapi::jiff::Timestamp::try_from(now)
                                .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                        )),
                    });
                }
            }
            Some(_) => {}
            None => conditions.retain(|c| c.type_ != "ReplicaFailure"),
        }
        ReplicaSetStatus {
            replicas: claimed.len() as i32,
            fully_labeled_replicas: Some(fully_labeled as i32),
            ready_replicas: Some(ready as i32),
            available_replicas: Some(available as i32),
            observed_generation: rs.metadata.generation,
            conditions: (!conditions.is_empty()).then_some(conditions),
            terminating_replicas: None,
        }
    }

    /// Writes `status` unless the stored one already says it.
    async fn write_status(
        &self,
        owner: &K,
        rs: &ReplicaSet,
        status: ReplicaSetStatus,
    ) -> Result<ReplicaSetStatus, Error> {
        let previous = rs.status.clone().unwrap_or_default();
        let same = |a: &ReplicaSetStatus, b: &ReplicaSetStatus| {
            a.replicas == b.replicas
                && a.fully_labeled_replicas.unwrap_or(0) == b.fully_labeled_replicas.unwrap_or(0)
                && a.ready_replicas.unwrap_or(0) == b.ready_replicas.unwrap_or(0)
                && a.available_replicas.unwrap_or(0) == b.available_replicas.unwrap_or(0)
                && a.observed_generation == b.observed_generation
                && a.conditions.as_deref().unwrap_or_default()
                    == b.conditions.as_deref().unwrap_or_default()
        };
        if same(&previous, &status) {
            return Ok(status);
        }
        let failed = |e: serde_json::Error| Error::Failed(e.to_string());
        let mut object = serde_json::to_value(owner).map_err(failed)?;
        object["status"] = serde_json::to_value(&status).map_err(failed)?;
        let object: K = serde_json::from_value(object).map_err(failed)?;
        let api: Api<K> = Api::namespaced(
            self.ctx.client.clone(),
            owner.meta().namespace.as_deref().unwrap_or_default(),
        );
        match api
            .replace_status(&owner.name_any(), &PostParams::default(), &object)
            .await
        {
            Ok(_) => Ok(status),
            // The cache is behind: its next change brings the key back.
            Err(e) if is_status(&e, 409) || is_status(&e, 404) => Ok(previous),
            Err(e) => Err(api_error(format!(
                "update the status of {}",
                key(owner.meta().namespace.as_deref(), &owner.name_any())
            ))(e)),
        }
    }
}

/// A pod from `template` as upstream's `GetPodFromTemplate` makes it: its
/// labels, annotations and finalizers, a generated name, the controller's
/// reference; nothing else of the template's metadata.
pub(crate) fn pod_from_template(
    template: &k8s_openapi::api::core::v1::PodTemplateSpec,
    generate_name: &str,
    namespace: &str,
    controller: OwnerReference,
) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    let mut pod = Pod {
        spec: template.spec.clone(),
        ..Pod::default()
    };
    pod.metadata.labels = meta.labels;
    pod.metadata.annotations = meta.annotations;
    pod.metadata.finalizers = meta.finalizers;
    pod.metadata.generate_name = Some(generate_name.to_string());
    pod.metadata.namespace = Some(namespace.to_string());
    pod.metadata.owner_references = Some(vec![controller]);
    pod
}
