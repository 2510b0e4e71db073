//! The StatefulSet controller (upstream's `pkg/controller/statefulset`):
//! pods with stable names (`<set>-<ordinal>`), hostnames and claims
//! (`<template>-<set>-<ordinal>`), created in order and each Running and
//! Ready before the next (`OrderedReady`) or all at once (`Parallel`),
//! removed from the highest ordinal down; templates recorded as
//! ControllerRevisions, rolled out from the highest ordinal down to the
//! partition (`RollingUpdate`) or left to the user (`OnDelete`); claims
//! kept or deleted as the retention policy says.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use rudder_runtime::controller::Action;
use rudder_runtime::events::reference_to;
use rudder_runtime::informer::{OWNER_INDEX, Store, key, key_of};
use rudder_runtime::meta::{controller_of, controller_reference, pod};
use rudder_runtime::{Change, EventType, Recorder, WorkQueue};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Context;
use crate::{failure_message, is_status};

const CONTROLLER: &str = "statefulset-controller";
/// The label naming a pod's revision.
pub const REVISION_LABEL: &str = "controller-revision-hash";
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

struct Controller {
    ctx: Arc<Context>,
    sets: Store<StatefulSet>,
    pods: Store<Pod>,
    revisions: Store<ControllerRevision>,
    claims: Store<PersistentVolumeClaim>,
    queue: WorkQueue<String>,
    recorder: Recorder,
}

/// Runs the StatefulSet controller until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let sets = ctx.informers.typed::<StatefulSet>();
    let pods = ctx.informers.typed::<Pod>();
    let revisions = ctx.informers.typed::<ControllerRevision>();
    let claims = ctx.informers.typed::<PersistentVolumeClaim>();
    let (mut set_changes, mut pod_changes) = (sets.subscribe(), pods.subscribe());
    let c = Arc::new(Controller {
        sets: sets.store(),
        pods: pods.store(),
        revisions: revisions.store(),
        claims: claims.store(),
        queue: WorkQueue::new(ctx.clock.clone()),
        recorder: Recorder::new(
            ctx.client.clone(),
            CONTROLLER,
            &ctx.identity,
            ctx.clock.clone(),
        ),
        ctx: ctx.clone(),
    });
    sets.wait_synced().await;
    pods.wait_synced().await;
    revisions.wait_synced().await;
    claims.wait_synced().await;
    c.sets.keys().into_iter().for_each(|k| c.queue.add(k));
    let watch = {
        let (c, stop) = (c.clone(), stop.clone());
        async move {
            loop {
                tokio::select! {
                    change = set_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { new: s, .. } | Change::Deleted(s)) => c.queue.add(key_of(&*s)),
                        Some(Change::Resync) => c.sets.keys().into_iter().for_each(|k| c.queue.add(k)),
                    },
                    change = pod_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { new: p, .. } | Change::Deleted(p)) => {
                            if let Some(owner) = controller_of(&*p).filter(|r| r.kind == "StatefulSet") {
                                c.queue.add(key(p.metadata.namespace.as_deref(), &owner.name));
                            }
                        }
                        Some(Change::Resync) => c.sets.keys().into_iter().for_each(|k| c.queue.add(k)),
                    },
                }
            }
        }
    };
    crate::serve(
        CONTROLLER,
        c.clone(),
        c.queue.clone(),
        ctx.options.statefulset_workers,
        Some(c.recorder.clone()),
        watch,
        stop,
        |c, key| async move { c.sync(&key).await },
    )
    .await;
}

/// The ordinal of a pod named `<set>-<ordinal>`.
pub fn ordinal_of(set: &str, pod: &str) -> Option<i32> {
    pod.strip_prefix(set)?.strip_prefix('-')?.parse().ok()
}

/// A revision's data: the template as a strategic merge patch that
/// replaces it (what `kubectl rollout undo` applies).
fn revision_data(set: &StatefulSet) -> serde_json::Value {
    let template = set
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let mut template = serde_json::to_value(template).unwrap_or_default();
    template["$patch"] = json!("replace");
    json!({"spec": {"template": template}})
}

fn revision_label(p: &Pod) -> Option<&str> {
    p.metadata
        .labels
        .as_ref()?
        .get(REVISION_LABEL)
        .map(String::as_str)
}

fn running_and_ready(p: &Pod) -> bool {
    pod::phase(p) == "Running" && pod::is_ready(p)
}

impl Controller {
    async fn sync(&self, key: &str) -> Result<Action, kube::Error> {
        let Some(set) = self.sets.get(key) else {
            return Ok(Action::Done);
        };
        if set.metadata.deletion_timestamp.is_some() {
            return Ok(Action::Done);
        }
        let name = set.name_any();
        let namespace = set.metadata.namespace.clone().unwrap_or_default();
        let uid = set.metadata.uid.clone().unwrap_or_default();
        let spec = set.spec.clone().unwrap_or_default();
        let (current_revision, update_revision) = self.revisions_of(&set).await?;
        let pods: BTreeMap<i32, Arc<Pod>> = self
            .pods
            .by_index(OWNER_INDEX, &uid)
            .into_iter()
            .filter(|p| controller_of(&**p).is_some_and(|r| r.uid == uid))
            .filter_map(|p| Some((ordinal_of(&name, &p.name_any())?, p)))
            .collect();
        let start = spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0);
        let replicas = spec.replicas.unwrap_or(1).max(0);
        let end = start + replicas;
        let ordered = spec.pod_management_policy.as_deref() != Some("Parallel");
        let rolling = spec
            .update_strategy
            .as_ref()
            .and_then(|u| u.type_.as_deref())
            .is_none_or(|t| t == "RollingUpdate");
        let partition = spec
            .update_strategy
            .as_ref()
            .and_then(|u| u.rolling_update.as_ref())
            .and_then(|r| r.partition)
            .unwrap_or(0);
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &namespace);
        let mut action = Action::Done;
        'work: {
            // Bring up each ordinal in the range, in order.
            for ordinal in start..end {
                match pods.get(&ordinal) {
                    None => {
                        let revision = if rolling && ordinal - start < partition {
                            &current_revision
                        } else {
                            &update_revision
                        };
                        self.create_pod(&set, ordinal, revision).await?;
                        if ordered {
                            break 'work;
                        }
                    }
                    Some(p)
                        if matches!(pod::phase(p), "Failed" | "Succeeded")
                            && p.metadata.deletion_timestamp.is_none() =>
                    {
                        // A pod that exited is recreated.
                        self.delete_pod(&set, &api, p).await?;
                        if ordered {
                            break 'work;
                        }
                    }
                    Some(p)
                        if ordered
                            && (p.metadata.deletion_timestamp.is_some()
                                || !running_and_ready(p)) =>
                    {
                        break 'work;
                    }
                    Some(_) => {}
                }
            }
            // Remove the condemned, highest first.
            let condemned: Vec<&Arc<Pod>> = pods
                .range(end..)
                .chain(pods.range(..start))
                .map(|(_, p)| p)
                .rev()
                .collect();
            if !condemned.is_empty() {
                if ordered {
                    let all_ready = pods.range(start..end).all(|(_, p)| running_and_ready(p));
                    if let Some(highest) = condemned.first()
                        && highest.metadata.deletion_timestamp.is_none()
                        && all_ready
                    {
                        self.retain_claims_on_scale_down(&set, highest).await?;
                        self.delete_pod(&set, &api, highest).await?;
                    }
                    break 'work;
                }
                for p in condemned
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                {
                    self.retain_claims_on_scale_down(&set, p).await?;
                    self.delete_pod(&set, &api, p).await?;
                }
            }
            // Roll out the update revision, highest ordinal first, one
            // unavailable at a time.
            if rolling && current_revision != update_revision {
                let in_range: Vec<&Arc<Pod>> = pods.range(start..end).map(|(_, p)| p).collect();
                if in_range
                    .iter()
                    .any(|p| !running_and_ready(p) || p.metadata.deletion_timestamp.is_some())
                {
                    break 'work;
                }
                for (ordinal, p) in pods.range(start..end).rev() {
                    if ordinal - start < partition {
                        break;
                    }
                    if revision_label(p) != Some(update_revision.as_str()) {
                        self.delete_pod(&set, &api, p).await?;
                        break 'work;
                    }
                }
            }
        }
        // Status.
        let in_range: Vec<&Arc<Pod>> = pods.range(start..end).map(|(_, p)| p).collect();
        let min_ready = Duration::from_secs(spec.min_ready_seconds.unwrap_or(0).max(0) as u64);
        let now = self.ctx.clock.now();
        let count = |f: &dyn Fn(&Pod) -> bool| pods.values().filter(|p| f(p)).count() as i32;
        let mut status = set.status.clone().unwrap_or_default();
        let updated = count(&|p| revision_label(p) == Some(update_revision.as_str()));
        let ready = count(&|p| pod::is_ready(p));
        let mut current = current_revision.clone();
        let mut current_replicas = count(&|p| revision_label(p) == Some(current_revision.as_str()));
        // Every pod at the update revision and ready: it becomes current.
        if updated == replicas
            && in_range.len() as i32 == replicas
            && in_range.iter().all(|p| running_and_ready(p))
        {
            current = update_revision.clone();
            current_replicas = updated;
        }
        let wanted = StatefulSetStatus {
            observed_generation: set.metadata.generation,
            replicas: pods
                .values()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count() as i32,
            ready_replicas: Some(ready),
            available_replicas: Some(count(&|p| pod::is_available(p, min_ready, now))),
            current_replicas: Some(current_replicas),
            updated_replicas: Some(updated),
            current_revision: Some(current),
            update_revision: Some(update_revision.clone()),
            collision_count: status.collision_count.or(Some(0)),
            conditions: status.conditions.take(),
        };
        if set.status.as_ref() != Some(&wanted) {
            let mut fresh = (*set).clone();
            fresh.status = Some(wanted);
            match Api::<StatefulSet>::namespaced(self.ctx.client.clone(), &namespace)
                .replace_status(&name, &PostParams::default(), &fresh)
                .await
            {
                Ok(_) => {}
                Err(e) if is_status(&e, 409) || is_status(&e, 404) => {}
                Err(e) => return Err(e),
            }
        }
        self.trim_history(&set, &current_revision, &update_revision)
            .await?;
        if !min_ready.is_zero()
            && in_range
                .iter()
                .any(|p| pod::is_ready(p) && !pod::is_available(p, min_ready, now))
        {
            action = Action::RequeueAfter(min_ready);
        }
        Ok(action)
    }

    /// The current and update revisions' names, the update one created
    /// (or, if an older revision has the same template — a rollback —
    /// renumbered to be the newest).
    async fn revisions_of(&self, set: &StatefulSet) -> Result<(String, String), kube::Error> {
        let uid = set.metadata.uid.clone().unwrap_or_default();
        let namespace = set.metadata.namespace.clone().unwrap_or_default();
        let owned: Vec<Arc<ControllerRevision>> = self
            .revisions
            .by_index(OWNER_INDEX, &uid)
            .into_iter()
            .filter(|r| controller_of(&**r).is_some_and(|o| o.uid == uid))
            .collect();
        let data = revision_data(set);
        let newest = owned.iter().map(|r| r.revision).max().unwrap_or(0);
        let api: Api<ControllerRevision> = Api::namespaced(self.ctx.client.clone(), &namespace);
        let update = match owned
            .iter()
            .find(|r| r.data.as_ref().map(|d| &d.0) == Some(&data))
        {
            Some(existing) if existing.revision == newest => existing.name_any(),
            Some(existing) => {
                let mut renumbered = (**existing).clone();
                renumbered.revision = newest + 1;
                api.replace(&existing.name_any(), &PostParams::default(), &renumbered)
                    .await?;
                existing.name_any()
            }
            None => {
                let template = set
                    .spec
                    .as_ref()
                    .map(|s| s.template.clone())
                    .unwrap_or_default();
                let collision = set.status.as_ref().and_then(|s| s.collision_count);
                let hash = crate::deployment::util::template_hash(&template, collision);
                let name = format!("{}-{hash}", set.name_any());
                let mut revision = ControllerRevision {
                    data: Some(RawExtension(data)),
                    revision: newest + 1,
                    ..Default::default()
                };
                revision.metadata.name = Some(name.clone());
                revision.metadata.namespace = Some(namespace.clone());
                revision.metadata.labels = set
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.metadata.as_ref()?.labels.clone());
                revision
                    .metadata
                    .labels
                    .get_or_insert_default()
                    .insert("controller.kubernetes.io/hash".into(), hash);
                revision.metadata.owner_references = controller_reference(set).map(|r| vec![r]);
                match api.create(&PostParams::default(), &revision).await {
                    Ok(_) => {}
                    // Ours from a cache behind us: found next time.
                    Err(e) if is_status(&e, 409) => {}
                    Err(e) => return Err(e),
                }
                name
            }
        };
        let current = set
            .status
            .as_ref()
            .and_then(|s| s.current_revision.clone())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| update.clone());
        Ok((current, update))
    }

    /// Deletes revisions beyond revisionHistoryLimit that no pod uses.
    async fn trim_history(
        &self,
        set: &StatefulSet,
        current: &str,
        update: &str,
    ) -> Result<(), kube::Error> {
        let uid = set.metadata.uid.clone().unwrap_or_default();
        let limit = set
            .spec
            .as_ref()
            .and_then(|s| s.revision_history_limit)
            .unwrap_or(10)
            .max(0) as usize;
        let used: Vec<String> = self
            .pods
            .by_index(OWNER_INDEX, &uid)
            .iter()
            .filter_map(|p| revision_label(p).map(String::from))
            .collect();
        let mut spare: Vec<Arc<ControllerRevision>> = self
            .revisions
            .by_index(OWNER_INDEX, &uid)
            .into_iter()
            .filter(|r| {
                let n = r.name_any();
                n != current && n != update && !used.contains(&n)
            })
            .collect();
        if spare.len() <= limit {
            return Ok(());
        }
        spare.sort_by_key(|r| r.revision);
        let excess = spare.len() - limit;
        let api: Api<ControllerRevision> = Api::namespaced(
            self.ctx.client.clone(),
            set.metadata.namespace.as_deref().unwrap_or_default(),
        );
        for r in spare.into_iter().take(excess) {
            match api.delete(&r.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The claim of `template` for `ordinal`.
    fn claim_name(template: &PersistentVolumeClaim, set: &str, ordinal: i32) -> String {
        format!("{}-{set}-{ordinal}", template.name_any())
    }

    async fn create_pod(
        &self,
        set: &StatefulSet,
        ordinal: i32,
        revision: &str,
    ) -> Result<(), kube::Error> {
        let name = set.name_any();
        let namespace = set.metadata.namespace.clone().unwrap_or_default();
        let spec = set.spec.clone().unwrap_or_default();
        let pod_name = format!("{name}-{ordinal}");
        // The revision's template, which the current revision may differ in.
        let template = self
            .revisions
            .get_in(Some(&namespace), revision)
            .and_then(|r| {
                r.data
                    .as_ref()
                    .and_then(|d| d.0.pointer("/spec/template").cloned())
            })
            .and_then(|mut t| {
                if let Some(o) = t.as_object_mut() {
                    o.remove("$patch");
                }
                serde_json::from_value(t).ok()
            })
            .unwrap_or(spec.template.clone());
        let owner: OwnerReference = controller_reference(set).unwrap_or_default();
        let mut p = crate::replicaset::pod_from_template(&template, "", &namespace, owner.clone());
        p.metadata.generate_name = None;
        p.metadata.name = Some(pod_name.clone());
        let labels = p.metadata.labels.get_or_insert_default();
        labels.insert(POD_NAME_LABEL.into(), pod_name.clone());
        labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
        labels.insert(REVISION_LABEL.into(), revision.to_string());
        // Claims first, then the pod that mounts them.
        let claims_api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.ctx.client.clone(), &namespace);
        let delete_with_set = spec
            .persistent_volume_claim_retention_policy
            .as_ref()
            .and_then(|p| p.when_deleted.as_deref())
            == Some("Delete");
        if let Some(pod_spec) = p.spec.as_mut() {
            pod_spec.hostname = Some(pod_name.clone());
            if let Some(service) = spec.service_name.clone().filter(|s| !s.is_empty()) {
                pod_spec.subdomain = Some(service);
            }
            for template in spec.volume_claim_templates.iter().flatten() {
                let claim_name = Self::claim_name(template, &name, ordinal);
                if self.claims.get_in(Some(&namespace), &claim_name).is_none() {
                    let mut claim = PersistentVolumeClaim {
                        spec: template.spec.clone(),
                        ..Default::default()
                    };
                    claim.metadata.name = Some(claim_name.clone());
                    claim.metadata.namespace = Some(namespace.clone());
                    claim.metadata.labels = template.metadata.labels.clone();
                    for (k, v) in spec.selector.match_labels.iter().flatten() {
                        claim
                            .metadata
                            .labels
                            .get_or_insert_default()
                            .insert(k.clone(), v.clone());
                    }
                    claim.metadata.annotations = template.metadata.annotations.clone();
                    if delete_with_set {
                        let mut reference = owner.clone();
                        reference.block_owner_deletion = Some(true);
                        claim.metadata.owner_references = Some(vec![reference]);
                    }
                    match claims_api.create(&PostParams::default(), &claim).await {
                        Ok(_) => {}
                        Err(e) if is_status(&e, 409) => {}
                        Err(e) => {
                            self.recorder.event(&reference_to(set), EventType::Warning, "FailedCreate", "Create", &format!("create Claim {claim_name} for Pod {pod_name} in StatefulSet {name} failed error: {}", failure_message(&e)));
                            return Err(e);
                        }
                    }
                }
                let volume_name = template.name_any();
                pod_spec
                    .volumes
                    .get_or_insert_default()
                    .retain(|v| v.name != volume_name);
                pod_spec.volumes.get_or_insert_default().push(Volume {
                    name: volume_name,
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name,
                        read_only: None,
                    }),
                    ..Default::default()
                });
            }
        }
        match Api::<Pod>::namespaced(self.ctx.client.clone(), &namespace)
            .create(&PostParams::default(), &p)
            .await
        {
            Ok(_) => {
                self.recorder.event(
                    &reference_to(set),
                    EventType::Normal,
                    "SuccessfulCreate",
                    "Create",
                    &format!("create Pod {pod_name} in StatefulSet {name} successful"),
                );
                Ok(())
            }
            Err(e) if is_status(&e, 409) => Ok(()),
            Err(e) => {
                self.recorder.event(
                    &reference_to(set),
                    EventType::Warning,
                    "FailedCreate",
                    "Create",
                    &format!(
                        "create Pod {pod_name} in StatefulSet {name} failed error: {}",
                        failure_message(&e)
                    ),
                );
                Err(e)
            }
        }
    }

    async fn delete_pod(
        &self,
        set: &StatefulSet,
        api: &Api<Pod>,
        p: &Pod,
    ) -> Result<(), kube::Error> {
        match api.delete(&p.name_any(), &DeleteParams::default()).await {
            Ok(_) => {
                self.recorder.event(
                    &reference_to(set),
                    EventType::Normal,
                    "SuccessfulDelete",
                    "Delete",
                    &format!(
                        "delete Pod {} in StatefulSet {} successful",
                        p.name_any(),
                        set.name_any()
                    ),
                );
                Ok(())
            }
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// With `whenScaled: Delete`, a condemned pod's claims are given the
    /// pod as owner, so they go with it.
    async fn retain_claims_on_scale_down(
        &self,
        set: &StatefulSet,
        p: &Pod,
    ) -> Result<(), kube::Error> {
        let spec = set.spec.clone().unwrap_or_default();
        let delete = spec
            .persistent_volume_claim_retention_policy
            .as_ref()
            .and_then(|p| p.when_scaled.as_deref())
            == Some("Delete");
        let Some(ordinal) = ordinal_of(&set.name_any(), &p.name_any()).filter(|_| delete) else {
            return Ok(());
        };
        let namespace = set.metadata.namespace.clone().unwrap_or_default();
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.ctx.client.clone(), &namespace);
        for template in spec.volume_claim_templates.iter().flatten() {
            let claim = Self::claim_name(template, &set.name_any(), ordinal);
            let reference = json!({"apiVersion": "v1", "kind": "Pod", "name": p.name_any(), "uid": p.metadata.uid, "controller": false, "blockOwnerDeletion": true});
            let patch = json!({"metadata": {"ownerReferences": [reference]}});
            match api
                .patch(&claim, &PatchParams::default(), &Patch::Strategic(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_are_read_off_names() {
        assert_eq!(ordinal_of("web", "web-0"), Some(0));
        assert_eq!(ordinal_of("web", "web-12"), Some(12));
        assert_eq!(ordinal_of("web", "web-x"), None);
        assert_eq!(ordinal_of("web", "webby-1"), None);
    }

    #[test]
    fn a_revision_replaces_the_template_when_applied() {
        let set: StatefulSet = serde_json::from_value(
            json!({"spec": {"selector": {}, "template": {"metadata": {"labels": {"a": "b"}}}}}),
        )
        .expect("set");
        assert_eq!(revision_data(&set)["spec"]["template"]["$patch"], "replace");
        assert_eq!(
            revision_data(&set)["spec"]["template"]["metadata"]["labels"]["a"],
            "b"
        );
    }
}
