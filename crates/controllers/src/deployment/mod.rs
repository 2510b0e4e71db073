//! The Deployment controller (upstream's `pkg/controller/deployment`): a
//! Deployment owns one ReplicaSet per pod template it has had. The one of
//! the current template (named and labelled by its hash) is scaled up and
//! the old ones down — within maxSurge and maxUnavailable (RollingUpdate),
//! or all old first (Recreate) — while revisions, the Progressing and
//! Available conditions, and the status say how far the rollout got.
//! Scaling mid-rollout is shared out proportionally; a paused Deployment
//! is only scaled; old ReplicaSets beyond revisionHistoryLimit go.
//!
//! `kubectl rollout undo` and `restart` are client-side: they write the
//! template, and this controller rolls it out like any change.

pub mod util;

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use rudder_runtime::controller::Action;
use rudder_runtime::events::reference_to;
use rudder_runtime::informer::{NAMESPACE_INDEX, OWNER_INDEX, Store, key_of};
use rudder_runtime::meta::{
    controller_of, controller_reference, labels_of, pod, selector_is_empty, selector_matches,
};
use rudder_runtime::{Change, EventType, Recorder, WorkQueue};
use tokio_util::sync::CancellationToken;

use self::util::*;
use crate::controller_ref::Claim;
use crate::{Context, Error, api_error};
use crate::{failure_message, is_status};

const CONTROLLER: &str = "deployment-controller";

struct Controller {
    ctx: Arc<Context>,
    deployments: Store<Deployment>,
    replica_sets: Store<ReplicaSet>,
    pods: Store<Pod>,
    queue: WorkQueue<String>,
    recorder: Recorder,
}

/// Runs the Deployment controller until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let deployments = ctx.informers.typed::<Deployment>();
    let replica_sets = ctx.informers.typed::<ReplicaSet>();
    let pods = ctx.informers.typed::<Pod>();
    let mut deployment_changes = deployments.subscribe();
    let mut rs_changes = replica_sets.subscribe();
    let mut pod_changes = pods.subscribe();
    let c = Arc::new(Controller {
        deployments: deployments.store(),
        replica_sets: replica_sets.store(),
        pods: pods.store(),
        queue: WorkQueue::new(ctx.clock.clone()),
        recorder: Recorder::new(
            ctx.client.clone(),
            CONTROLLER,
            &ctx.identity,
            ctx.clock.clone(),
        ),
        ctx: ctx.clone(),
    });
    deployments.wait_synced().await;
    replica_sets.wait_synced().await;
    pods.wait_synced().await;
    c.deployments
        .keys()
        .into_iter()
        .for_each(|k| c.queue.add(k));
    let watch = {
        let (c, stop) = (c.clone(), stop.clone());
        async move {
            loop {
                tokio::select! {
                    change = deployment_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { new, .. }) => c.queue.add(key_of(&*new)),
                        Some(Change::Deleted(old)) => c.queue.add(key_of(&*old)),
                        Some(Change::Resync) => c.deployments.keys().into_iter().for_each(|k| c.queue.add(k)),
                    },
                    change = rs_changes.next_until(&stop) => match change {
                        None => return,
                        Some(change) => c.replica_set_changed(change),
                    },
                    change = pod_changes.next_until(&stop) => match change {
                        None => return,
                        // Recreate waits for the old pods to be gone.
                        Some(Change::Deleted(old)) => c.pod_deleted(&old),
                        Some(Change::Resync) => c.deployments.keys().into_iter().for_each(|k| c.queue.add(k)),
                        Some(_) => {}
                    },
                }
            }
        }
    };
    crate::serve(
        CONTROLLER,
        c.clone(),
        c.queue.clone(),
        ctx.options.deployment_workers,
        Some(c.recorder.clone()),
        watch,
        stop,
        |c, key| async move { c.sync(&key).await },
    )
    .await;
}

impl Controller {
    fn deployment_of(&self, rs: &ReplicaSet) -> Option<Arc<Deployment>> {
        let reference = controller_of(rs)?;
        if reference.kind != "Deployment" {
            return None;
        }
        let d = self
            .deployments
            .get_in(rs.metadata.namespace.as_deref(), &reference.name)?;
        (d.metadata.uid.as_deref() == Some(reference.uid.as_str())).then_some(d)
    }

    fn replica_set_changed(&self, change: Change<ReplicaSet>) {
        match change {
            Change::Resync => self
                .deployments
                .keys()
                .into_iter()
                .for_each(|k| self.queue.add(k)),
            Change::Deleted(old) => {
                if let Some(d) = self.deployment_of(&old) {
                    self.queue.add(key_of(&*d));
                }
            }
            Change::Applied { old, new } => {
                if let Some(old) = &old
                    && controller_of(&**old).map(|r| &r.uid) != controller_of(&*new).map(|r| &r.uid)
                    && let Some(d) = self.deployment_of(old)
                {
                    self.queue.add(key_of(&*d));
                }
                match self.deployment_of(&new) {
                    Some(d) => self.queue.add(key_of(&*d)),
                    None if controller_of(&*new).is_none() => {
                        // An orphan: the Deployments that would adopt it.
                        let namespace = new.metadata.namespace.as_deref().unwrap_or_default();
                        for d in self.deployments.by_index(NAMESPACE_INDEX, namespace) {
                            let selector = d.spec.as_ref().map(|s| &s.selector);
                            if selector.is_some_and(|s| {
                                !selector_is_empty(s) && selector_matches(s, labels_of(&*new))
                            }) {
                                self.queue.add(key_of(&*d));
                            }
                        }
                    }
                    None => {}
                }
            }
        }
    }

    fn pod_deleted(&self, p: &Pod) {
        let Some(reference) = controller_of(p).filter(|r| r.kind == "ReplicaSet") else {
            return;
        };
        let Some(rs) = self
            .replica_sets
            .get_in(p.metadata.namespace.as_deref(), &reference.name)
        else {
            return;
        };
        if let Some(d) = self.deployment_of(&rs)
            && !is_rolling(&d)
        {
            self.queue.add(key_of(&*d));
        }
    }

    fn rs_api(&self, namespace: &str) -> Api<ReplicaSet> {
        Api::namespaced(self.ctx.client.clone(), namespace)
    }

    /// One pass over the Deployment `key` (upstream's `syncDeployment`).
    async fn sync(&self, key: &str) -> Result<Action, Error> {
        let Some(stored) = self.deployments.get(key) else {
            return Ok(Action::Done);
        };
        let mut d = (*stored).clone();
        let selector = d
            .spec
            .as_ref()
            .map(|s| s.selector.clone())
            .unwrap_or_default();
        if selector_is_empty(&selector) {
            self.recorder.event(
                &reference_to(&d),
                EventType::Warning,
                "SelectingAll",
                "Select",
                "This deployment is selecting all pods. A non-empty selector is required.",
            );
            return Ok(Action::Done);
        }
        let replica_sets = self.claim(&d, &selector).await?;
        let rss: Vec<&ReplicaSet> = replica_sets.iter().collect();
        if d.metadata.deletion_timestamp.is_some() {
            let (new, _) = find_new(&d, &rss);
            return self.sync_status_only(&d, &rss, new).await;
        }
        self.check_paused(&mut d).await?;
        let paused = d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        if paused || self.is_scaling_event(&d, &rss) {
            return self.scale_only(&mut d, &replica_sets).await;
        }
        if is_rolling(&d) {
            self.rollout_rolling(&mut d, &replica_sets).await
        } else {
            self.rollout_recreate(&mut d, &replica_sets).await
        }
    }

    /// The ReplicaSets this Deployment owns, adopting orphans its selector
    /// matches and releasing those it no longer does.
    async fn claim(
        &self,
        d: &Deployment,
        selector: &LabelSelector,
    ) -> Result<Vec<ReplicaSet>, Error> {
        let namespace = d.metadata.namespace.as_deref().unwrap_or_default();
        let candidates = self.replica_sets.by_index(NAMESPACE_INDEX, namespace);
        let claimed = Claim {
            client: &self.ctx.client,
            owner: d,
            selector,
            finalizer: None,
        }
        .claim(candidates)
        .await?;
        Ok(claimed.into_iter().map(Arc::unwrap_or_clone).collect())
    }

    /// Sets Progressing to say a Deployment was paused or resumed
    /// (`checkPausedConditions`).
    async fn check_paused(&self, d: &mut Deployment) -> Result<(), Error> {
        if !has_progress_deadline(d) {
            return Ok(());
        }
        let paused = d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        let status = d.status.clone().unwrap_or_default();
        let reason = condition(&status, PROGRESSING).and_then(|c| c.reason.clone());
        // A rollout that timed out stays timed out, paused or not.
        if reason.as_deref() == Some(TIMED_OUT) {
            return Ok(());
        }
        let now = self.ctx.clock.now();
        let wanted = if paused && reason.as_deref() != Some(PAUSED) {
            new_condition(
                PROGRESSING,
                "Unknown",
                PAUSED,
                "Deployment is paused".into(),
                now,
            )
        } else if !paused && reason.as_deref() == Some(PAUSED) {
            new_condition(
                PROGRESSING,
                "Unknown",
                RESUMED,
                "Deployment is resumed".into(),
                now,
            )
        } else {
            return Ok(());
        };
        let mut status = status;
        set_condition(&mut status, wanted);
        d.status = Some(status);
        *d = self.write_status(d).await?;
        Ok(())
    }

    /// Whether a Deployment's size changed since its active ReplicaSets
    /// were sized (`isScalingEvent`).
    fn is_scaling_event(&self, d: &Deployment, rss: &[&ReplicaSet]) -> bool {
        rss.iter()
            .filter(|rs| replicas(rs) > 0)
            .filter_map(|rs| {
                rs.metadata
                    .annotations
                    .as_ref()?
                    .get(DESIRED_REPLICAS)?
                    .parse::<i32>()
                    .ok()
            })
            .any(|annotated| annotated != desired(d))
    }

    /// The new ReplicaSet (created if `create` and missing, with its
    /// revision and annotations brought up to date) and the old ones
    /// (`getAllReplicaSetsAndSyncRevision`).
    async fn new_and_old(
        &self,
        d: &mut Deployment,
        replica_sets: &[ReplicaSet],
        create: bool,
    ) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>), Error> {
        let rss: Vec<&ReplicaSet> = replica_sets.iter().collect();
        let (new, old) = find_new(d, &rss);
        let old: Vec<ReplicaSet> = old.into_iter().cloned().collect();
        let max_old_revision = old.iter().map(revision).max().unwrap_or(0);
        let new_revision = max_old_revision + 1;
        let namespace = d.metadata.namespace.clone().unwrap_or_default();
        let now = self.ctx.clock.now();
        if let Some(existing) = new {
            let mut rs = existing.clone();
            let annotated = set_new_rs_annotations(d, &mut rs, new_revision);
            let min_ready = d.spec.as_ref().and_then(|s| s.min_ready_seconds);
            let spec = rs.spec.get_or_insert_default();
            let min_ready_changed = spec.min_ready_seconds != min_ready;
            if annotated || min_ready_changed {
                spec.min_ready_seconds = min_ready;
                let rs = self
                    .rs_api(&namespace)
                    .replace(&rs.name_any(), &PostParams::default(), &rs)
                    .await
                    .map_err(api_error("update the new replica set"))?;
                return Ok((Some(rs), old));
            }
            let mut changed = set_revision(d, &revision(&rs).to_string());
            if has_progress_deadline(d)
                && d.status
                    .as_ref()
                    .and_then(|s| condition(s, PROGRESSING))
                    .is_none()
            {
                set_condition(
                    d.status.get_or_insert_default(),
                    new_condition(
                        PROGRESSING,
                        "True",
                        FOUND_NEW_RS,
                        format!("Found new replica set \"{}\"", rs.name_any()),
                        now,
                    ),
                );
                changed = true;
            }
            if changed {
                *d = self.write_status(d).await?;
            }
            return Ok((Some(rs), old));
        }
        if !create {
            return Ok((None, old));
        }
        let spec = d.spec.clone().unwrap_or_default();
        let collision_count = d.status.as_ref().and_then(|s| s.collision_count);
        let hash = template_hash(&spec.template, collision_count);
        let mut template = spec.template.clone();
        template
            .metadata
            .get_or_insert_default()
            .labels
            .get_or_insert_default()
            .insert(HASH_LABEL.into(), hash.clone());
        let mut selector = spec.selector.clone();
        selector
            .match_labels
            .get_or_insert_default()
            .insert(HASH_LABEL.into(), hash.clone());
        let mut rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(format!("{}-{hash}", d.name_any())),
                namespace: Some(namespace.clone()),
                labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
                owner_references: controller_reference(d).map(|r| vec![r]),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: spec.min_ready_seconds,
                selector,
                template: Some(template),
            }),
            status: None,
        };
        let all: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(&rs)).collect();
        let size = new_rs_replicas(d, &all, &rs);
        rs.spec.get_or_insert_default().replicas = Some(size);
        set_new_rs_annotations(d, &mut rs, new_revision);
        set_replicas_annotations(&mut rs, desired(d), desired(d) + max_surge(d));
        let api = self.rs_api(&namespace);
        let created = match api.create(&PostParams::default(), &rs).await {
            Ok(created) => created,
            Err(e) if is_status(&e, 409) => {
                // Ours already (a cache behind us), or a hash collision.
                let existing = api
                    .get(&rs.name_any())
                    .await
                    .map_err(api_error("get the existing replica set"))?;
                let ours = controller_of(&existing)
                    .is_some_and(|r| Some(&r.uid) == d.metadata.uid.as_ref());
                let same = existing
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.as_ref())
                    .is_some_and(|t| equal_ignore_hash(t, &spec.template));
                if ours && same {
                    return Ok((Some(existing), old));
                }
                let status = d.status.get_or_insert_default();
                status.collision_count = Some(status.collision_count.unwrap_or(0) + 1);
                self.write_status(d).await?;
                return Err(Error::Failed(format!(
                    "replica set {} exists with another template: collision count raised",
                    rs.name_any()
                )));
            }
            Err(e) => {
                let message = failure_message(&e);
                self.recorder.event(
                    &reference_to(d),
                    EventType::Warning,
                    RS_CREATE_ERROR,
                    "Create",
                    &format!(
                        "Failed to create new replica set \"{}\": {message}",
                        rs.name_any()
                    ),
                );
                if has_progress_deadline(d) {
                    let status = d.status.get_or_insert_default();
                    set_condition(
                        status,
                        new_condition(
                            PROGRESSING,
                            "False",
                            RS_CREATE_ERROR,
                            format!(
                                "Failed to create new replica set \"{}\": {message}",
                                rs.name_any()
                            ),
                            now,
                        ),
                    );
                    self.write_status(d).await?;
                }
                return Err(api_error("create the new replica set")(e));
            }
        };
        if size > 0 {
            self.recorder.event(
                &reference_to(d),
                EventType::Normal,
                "ScalingReplicaSet",
                "Scaling",
                &format!(
                    "Scaled up replica set {} from 0 to {size}",
                    created.name_any()
                ),
            );
        }
        set_revision(d, &new_revision.to_string());
        if has_progress_deadline(d) {
            let status = d.status.get_or_insert_default();
            set_condition(
                status,
                new_condition(
                    PROGRESSING,
                    "True",
                    NEW_RS_CREATED,
                    format!("Created new replica set \"{}\"", created.name_any()),
                    now,
                ),
            );
        }
        *d = self.write_status(d).await?;
        Ok((Some(created), old))
    }

    /// Scales `rs` to `size`, with its size annotations; whether it did.
    async fn scale(&self, d: &Deployment, rs: &mut ReplicaSet, size: i32) -> Result<bool, Error> {
        let before = replicas(rs);
        let annotated = set_replicas_annotations(rs, desired(d), desired(d) + max_surge(d));
        if before == size && !annotated {
            return Ok(false);
        }
        rs.spec.get_or_insert_default().replicas = Some(size);
        *rs = self
            .rs_api(rs.metadata.namespace.as_deref().unwrap_or_default())
            .replace(&rs.name_any(), &PostParams::default(), rs)
            .await
            .map_err(api_error(format!("scale replica set {}", rs.name_any())))?;
        if before != size {
            let direction = if size > before { "up" } else { "down" };
            self.recorder.event(
                &reference_to(d),
                EventType::Normal,
                "ScalingReplicaSet",
                "Scaling",
                &format!(
                    "Scaled {direction} replica set {} from {before} to {size}",
                    rs.name_any()
                ),
            );
        }
        Ok(before != size)
    }

    /// A rolling update step (`rolloutRolling`).
    async fn rollout_rolling(
        &self,
        d: &mut Deployment,
        replica_sets: &[ReplicaSet],
    ) -> Result<Action, Error> {
        let (new, mut old) = self.new_and_old(d, replica_sets, true).await?;
        let mut new = new.ok_or_else(|| Error::Failed("no new replica set".into()))?;
        // Scale up the new one.
        let wanted = {
            let all: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(&new)).collect();
            if replicas(&new) > desired(d) {
                desired(d)
            } else {
                new_rs_replicas(d, &all, &new)
            }
        };
        if self.scale(d, &mut new, wanted).await? {
            return self.sync_rollout_status(d, &old, Some(&new)).await;
        }
        // Scale down the old ones.
        if self.reconcile_old(d, &mut old, &new).await? {
            return self.sync_rollout_status(d, &old, Some(&new)).await;
        }
        let all: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(&new)).collect();
        let status = calculate_status(d, &all, Some(&new), self.ctx.clock.now());
        if complete(d, &status) {
            self.cleanup(d, &old).await?;
        }
        self.sync_rollout_status(d, &old, Some(&new)).await
    }

    /// Scales old ReplicaSets down as far as availability allows
    /// (`reconcileOldReplicaSets`); whether any was.
    async fn reconcile_old(
        &self,
        d: &Deployment,
        old: &mut [ReplicaSet],
        new: &ReplicaSet,
    ) -> Result<bool, Error> {
        let old_pods: i32 = old.iter().map(replicas).sum();
        if old_pods == 0 {
            return Ok(false);
        }
        let all_pods = old_pods + replicas(new);
        let min_available = desired(d) - max_unavailable(d);
        let new_unavailable = replicas(new)
            - new
                .status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0);
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        old.sort_by_key(|rs| rs.metadata.creation_timestamp.as_ref().map(|t| t.0));
        // First the unhealthy replicas: they count for nothing.
        let mut cleaned = 0;
        for rs in old.iter_mut() {
            if cleaned >= max_scaled_down {
                break;
            }
            let size = replicas(rs);
            let available = rs
                .status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0);
            let unhealthy = size - available;
            if size == 0 || unhealthy <= 0 {
                continue;
            }
            let down = (max_scaled_down - cleaned).min(unhealthy);
            self.scale(d, rs, size - down).await?;
            cleaned += down;
        }
        // Then healthy ones, keeping the minimum available.
        let all: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(new)).collect();
        let available: i32 = all
            .iter()
            .map(|rs| {
                rs.status
                    .as_ref()
                    .and_then(|s| s.available_replicas)
                    .unwrap_or(0)
            })
            .sum();
        let mut scaled = 0;
        if available > min_available {
            let total = available - min_available;
            for rs in old.iter_mut() {
                if scaled >= total {
                    break;
                }
                let size = replicas(rs);
                if size == 0 {
                    continue;
                }
                let down = size.min(total - scaled);
                self.scale(d, rs, size - down).await?;
                scaled += down;
            }
        }
        Ok(cleaned + scaled > 0)
    }

    /// A Recreate step (`rolloutRecreate`): every old pod gone before the
    /// new ReplicaSet is scaled up.
    async fn rollout_recreate(
        &self,
        d: &mut Deployment,
        replica_sets: &[ReplicaSet],
    ) -> Result<Action, Error> {
        let (new, mut old) = self.new_and_old(d, replica_sets, false).await?;
        let mut scaled = false;
        for rs in old.iter_mut().filter(|rs| replicas(rs) > 0) {
            scaled |= self.scale(d, rs, 0).await?;
        }
        if scaled {
            return self.sync_rollout_status(d, &old, new.as_ref()).await;
        }
        if self.old_pods_running(new.as_ref(), &old) {
            return self.sync_rollout_status(d, &old, new.as_ref()).await;
        }
        let mut new = match new {
            Some(new) => new,
            None => {
                let (new, fresh_old) = self.new_and_old(d, replica_sets, true).await?;
                old = fresh_old;
                new.ok_or_else(|| Error::Failed("no new replica set".into()))?
            }
        };
        self.scale(d, &mut new, desired(d)).await?;
        let all: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(&new)).collect();
        if complete(
            d,
            &calculate_status(d, &all, Some(&new), self.ctx.clock.now()),
        ) {
            self.cleanup(d, &old).await?;
        }
        self.sync_rollout_status(d, &old, Some(&new)).await
    }

    /// Whether pods of the old ReplicaSets still run (`oldPodsRunning`).
    fn old_pods_running(&self, new: Option<&ReplicaSet>, old: &[ReplicaSet]) -> bool {
        if old
            .iter()
            .any(|rs| rs.status.as_ref().is_some_and(|s| s.replicas > 0))
        {
            return true;
        }
        old.iter().any(|rs| {
            let uid = rs.metadata.uid.clone().unwrap_or_default();
            if new.is_some_and(|n| n.metadata.uid.as_deref() == Some(uid.as_str())) {
                return false;
            }
            self.pods
                .by_index(OWNER_INDEX, &uid)
                .iter()
                .any(|p| !matches!(pod::phase(p), "Failed" | "Succeeded"))
        })
    }

    /// A paused Deployment, or one whose size changed: scale only
    /// (`sync`).
    async fn scale_only(
        &self,
        d: &mut Deployment,
        replica_sets: &[ReplicaSet],
    ) -> Result<Action, Error> {
        let (mut new, mut old) = self.new_and_old(d, replica_sets, false).await?;
        self.scale_proportionally(d, new.as_mut(), &mut old).await?;
        let paused = d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        if paused {
            self.cleanup(d, &old).await?;
        }
        let all: Vec<&ReplicaSet> = old.iter().chain(new.iter()).collect();
        self.sync_status_only(d, &all, new.as_ref()).await
    }

    /// Upstream's `scale`: one active ReplicaSet takes the new size; a
    /// saturated new one means the old go; otherwise the change is shared
    /// out in proportion to the ReplicaSets' sizes.
    async fn scale_proportionally(
        &self,
        d: &Deployment,
        mut new: Option<&mut ReplicaSet>,
        old: &mut [ReplicaSet],
    ) -> Result<(), Error> {
        let active_old: Vec<usize> = (0..old.len()).filter(|i| replicas(&old[*i]) > 0).collect();
        let new_active = new.as_ref().is_some_and(|n| replicas(n) > 0);
        let active_count = active_old.len() + usize::from(new_active);
        // One active (or none: the newest) takes the whole size.
        if active_count <= 1 {
            if let Some(n) = new
                .as_deref_mut()
                .filter(|_| new_active || active_old.is_empty())
            {
                self.scale(d, n, desired(d)).await?;
                return Ok(());
            }
            let target = if let Some(i) = active_old.first() {
                Some(*i)
            } else {
                (0..old.len())
                    .max_by_key(|i| old[*i].metadata.creation_timestamp.as_ref().map(|t| t.0))
            };
            if let Some(i) = target {
                self.scale(d, &mut old[i], desired(d)).await?;
            }
            return Ok(());
        }
        // A saturated new ReplicaSet: the old go.
        if let Some(n) = new.as_deref()
            && replicas(n) == desired(d)
            && n.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DESIRED_REPLICAS))
                == Some(&desired(d).to_string())
            && n.status.as_ref().and_then(|s| s.available_replicas) == Some(desired(d))
        {
            for i in active_old {
                self.scale(d, &mut old[i], 0).await?;
            }
            return Ok(());
        }
        if !is_rolling(d) {
            return Ok(());
        }
        let mut all: Vec<&mut ReplicaSet> = old.iter_mut().filter(|rs| replicas(rs) > 0).collect();
        if let Some(n) = new.filter(|n| replicas(n) > 0) {
            all.push(n);
        }
        let current: i32 = all.iter().map(|rs| replicas(rs)).sum();
        let allowed = if desired(d) > 0 {
            desired(d) + max_surge(d)
        } else {
            0
        };
        let to_add = allowed - current;
        // Growing: largest and newest first; shrinking: largest and oldest.
        let created = |rs: &ReplicaSet| rs.metadata.creation_timestamp.as_ref().map(|t| t.0);
        if to_add > 0 {
            all.sort_by(|a, b| {
                replicas(b)
                    .cmp(&replicas(a))
                    .then_with(|| created(b).cmp(&created(a)))
            });
        } else {
            all.sort_by(|a, b| {
                replicas(b)
                    .cmp(&replicas(a))
                    .then_with(|| created(a).cmp(&created(b)))
            });
        }
        let mut added = 0;
        let mut sizes: Vec<i32> = Vec::with_capacity(all.len());
        for rs in &all {
            let share = if to_add != 0 {
                proportion(d, rs, to_add, added)
            } else {
                0
            };
            sizes.push(replicas(rs) + share);
            added += share;
        }
        if let Some(first) = sizes.first_mut() {
            *first = (*first + to_add - added).max(0);
        }
        for (rs, size) in all.into_iter().zip(sizes) {
            self.scale(d, rs, size.max(0)).await?;
        }
        Ok(())
    }

    /// Deletes old ReplicaSets beyond revisionHistoryLimit, oldest revision
    /// first, if they are empty (`cleanupDeployment`).
    async fn cleanup(&self, d: &Deployment, old: &[ReplicaSet]) -> Result<(), Error> {
        let Some(limit) = d.spec.as_ref().and_then(|s| s.revision_history_limit) else {
            return Ok(());
        };
        let mut alive: Vec<&ReplicaSet> = old
            .iter()
            .filter(|rs| rs.metadata.deletion_timestamp.is_none())
            .collect();
        let excess = alive.len() as i64 - i64::from(limit);
        if excess <= 0 {
            return Ok(());
        }
        alive.sort_by(|a, b| {
            revision(a).cmp(&revision(b)).then_with(|| {
                a.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0)
                    .cmp(&b.metadata.creation_timestamp.as_ref().map(|t| t.0))
            })
        });
        for rs in alive.into_iter().take(excess as usize) {
            let observed = rs
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            if rs.status.as_ref().is_some_and(|s| s.replicas != 0)
                || replicas(rs) != 0
                || rs.metadata.generation.unwrap_or(0) > observed
            {
                continue;
            }
            match self
                .rs_api(rs.metadata.namespace.as_deref().unwrap_or_default())
                .delete(&rs.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(api_error("delete an old replica set")(e)),
            }
        }
        Ok(())
    }

    /// Writes the status the ReplicaSets make, conditions as they are
    /// (`syncDeploymentStatus`).
    async fn sync_status_only(
        &self,
        d: &Deployment,
        all: &[&ReplicaSet],
        new: Option<&ReplicaSet>,
    ) -> Result<Action, Error> {
        let status = calculate_status(d, all, new, self.ctx.clock.now());
        if d.status.as_ref() != Some(&status) {
            let mut d = d.clone();
            d.status = Some(status);
            self.write_status(&d).await?;
        }
        Ok(Action::Done)
    }

    /// Writes the status with Progressing brought up to date
    /// (`syncRolloutStatus`), and looks again when the deadline would pass.
    async fn sync_rollout_status(
        &self,
        d: &Deployment,
        old: &[ReplicaSet],
        new: Option<&ReplicaSet>,
    ) -> Result<Action, Error> {
        let all: Vec<&ReplicaSet> = old.iter().chain(new).collect();
        let now = self.ctx.clock.now();
        let mut status = calculate_status(d, &all, new, now);
        if !has_progress_deadline(d) {
            remove_condition(&mut status, PROGRESSING);
        }
        let current = d
            .status
            .as_ref()
            .and_then(|s| condition(s, PROGRESSING))
            .cloned();
        let already_complete = status.replicas == status.updated_replicas
            && current.as_ref().and_then(|c| c.reason.as_deref()) == Some(NEW_RS_AVAILABLE);
        if has_progress_deadline(d) && !already_complete {
            let what = match new {
                Some(rs) => format!("ReplicaSet \"{}\"", rs.name_any()),
                None => format!("Deployment \"{}\"", d.name_any()),
            };
            if complete(d, &status) {
                set_condition(
                    &mut status,
                    new_condition(
                        PROGRESSING,
                        "True",
                        NEW_RS_AVAILABLE,
                        format!("{what} has successfully progressed."),
                        now,
                    ),
                );
            } else if progressing(d, &status) {
                let mut wanted = new_condition(
                    PROGRESSING,
                    "True",
                    RS_UPDATED,
                    format!("{what} is progressing."),
                    now,
                );
                if let Some(current) = &current {
                    if current.status == "True" {
                        wanted.last_transition_time = current.last_transition_time.clone();
                    }
                    remove_condition(&mut status, PROGRESSING);
                }
                status.conditions.get_or_insert_default().push(wanted);
            } else if timed_out(d, &status, now) {
                set_condition(
                    &mut status,
                    new_condition(
                        PROGRESSING,
                        "False",
                        TIMED_OUT,
                        format!("{what} has timed out progressing."),
                        now,
                    ),
                );
            }
        }
        // A failure of the new ReplicaSet (else of an old one) shows on the
        // Deployment.
        let failure = new.into_iter().chain(old.iter()).find_map(|rs| {
            rs.status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == REPLICA_FAILURE)
                .cloned()
        });
        match failure {
            Some(f) => set_condition(
                &mut status,
                k8s_openapi::api::apps::v1::DeploymentCondition {
                    type_: REPLICA_FAILURE.into(),
                    status: f.status,
                    reason: f.reason,
                    message: f.message,
                    last_update_time: f.last_transition_time.clone(),
                    last_transition_time: f.last_transition_time,
                },
            ),
            None => remove_condition(&mut status, REPLICA_FAILURE),
        }
        let next = stuck_check_after(d, &status, now);
        if d.status.as_ref() != Some(&status) {
            let mut d = d.clone();
            d.status = Some(status);
            self.write_status(&d).await?;
        }
        Ok(next.map_or(Action::Done, Action::RequeueAfter))
    }

    /// Writes `d`'s status (and annotations, which a status update may
    /// change); a conflict means the cache is behind and the next change
    /// brings the key back.
    async fn write_status(&self, d: &Deployment) -> Result<Deployment, Error> {
        let api: Api<Deployment> = Api::namespaced(
            self.ctx.client.clone(),
            d.metadata.namespace.as_deref().unwrap_or_default(),
        );
        api.replace_status(&d.name_any(), &PostParams::default(), d)
            .await
            .map_err(api_error(format!(
                "update the status of deployment {}",
                d.name_any()
            )))
    }
}

/// Sets the Deployment's revision annotation; whether it changed.
fn set_revision(d: &mut Deployment, revision: &str) -> bool {
    let annotations = d.metadata.annotations.get_or_insert_default();
    if annotations.get(REVISION).map(String::as_str) == Some(revision) {
        return false;
    }
    annotations.insert(REVISION.into(), revision.into());
    true
}

/// The ReplicaSet of the Deployment's current template (the oldest, if
/// several), and the others (`FindNewReplicaSet`, `FindOldReplicaSets`).
fn find_new<'a>(
    d: &Deployment,
    rss: &[&'a ReplicaSet],
) -> (Option<&'a ReplicaSet>, Vec<&'a ReplicaSet>) {
    let template = d
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let mut sorted: Vec<&ReplicaSet> = rss.to_vec();
    sorted.sort_by(|a, b| {
        let created = |rs: &ReplicaSet| rs.metadata.creation_timestamp.as_ref().map(|t| t.0);
        created(a)
            .cmp(&created(b))
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    let new = sorted
        .iter()
        .find(|rs| {
            rs.spec
                .as_ref()
                .and_then(|s| s.template.as_ref())
                .is_some_and(|t| equal_ignore_hash(t, &template))
        })
        .copied();
    let old = sorted
        .into_iter()
        .filter(|rs| new.is_none_or(|n| n.metadata.uid != rs.metadata.uid))
        .collect();
    (new, old)
}
