//! What the Job controller does to pods: claims them (adopting orphans its
//! selector matches, releasing those it no longer does), makes them from
//! the template, takes its tracking finalizer off them, deletes them.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use rudder_runtime::EventType;
use rudder_runtime::events::reference_to;
use rudder_runtime::expectations::Seen;
use rudder_runtime::informer::{NAMESPACE_INDEX, key_of};
use rudder_runtime::meta::{controller_of, controller_reference, has_finalizer, labels_of};
use rudder_runtime::meta::{selector_is_empty, selector_matches};
use serde_json::json;

use super::indexes::{FAILURE_COUNT, IGNORED_FAILURE_COUNT, INDEX};
use super::{Controller, TRACKING_FINALIZER};
use crate::controller_ref::Claim;
use crate::{Error, api_error, is_status};

/// What a new pod of an Indexed Job carries: its index and, with
/// `backoffLimitPerIndex`, the failures of the index before it (counted,
/// ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Slot {
    pub index: i32,
    pub failures: Option<(i32, i32)>,
}

impl Controller {
    pub(super) fn pods_api(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.ctx.client.clone(), namespace)
    }

    /// The pods `job` owns (upstream's `getPodsForJob`): of those it
    /// controls (`owned`) and the orphans of its namespace, what its
    /// selector matches — orphans adopted with the tracking finalizer,
    /// pods that no longer match released without it.
    pub(super) async fn claim(
        &self,
        job: &Job,
        owned: Vec<Arc<Pod>>,
    ) -> Result<Vec<Arc<Pod>>, Error> {
        let Some(selector) = job
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .filter(|s| !selector_is_empty(s))
        else {
            // Validation refuses these; one from elsewhere keeps what it made.
            return Ok(owned);
        };
        let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
        let orphans = self
            .pods
            .by_index(NAMESPACE_INDEX, namespace)
            .into_iter()
            .filter(|p| controller_of(&**p).is_none());
        let candidates: Vec<Arc<Pod>> = owned.into_iter().chain(orphans).collect();
        Claim {
            client: &self.ctx.client,
            owner: job,
            selector,
            finalizer: Some(TRACKING_FINALIZER),
        }
        .claim(candidates)
        .await
    }

    /// The keys of the Jobs whose selector matches the orphan `pod`.
    pub(super) fn jobs_selecting(&self, pod: &Pod) -> Vec<String> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        self.jobs
            .by_index(NAMESPACE_INDEX, namespace)
            .iter()
            .filter(|j| {
                j.spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .is_some_and(|s| !selector_is_empty(s) && selector_matches(s, labels_of(pod)))
            })
            .map(|j| key_of(&**j))
            .collect()
    }

    /// Removes the tracking finalizer from `p`; a pod already gone is fine.
    pub(super) async fn release(&self, p: &Pod) -> Result<(), Error> {
        let patch =
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}});
        match self
            .pods_api(p.metadata.namespace.as_deref().unwrap_or_default())
            .patch(
                &p.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(api_error(format!(
                "remove the tracking finalizer of pod {}",
                p.name_any()
            ))(e)),
        }
    }

    pub(super) async fn release_all(&self, pods: &[Arc<Pod>]) -> Result<(), Error> {
        let releases: Vec<_> = pods
            .iter()
            .filter(|p| has_finalizer(&***p, TRACKING_FINALIZER))
            .map(|p| async move {
                self.release(p).await?;
                if let Some(uid) = p.metadata.uid.clone() {
                    self.released
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(uid);
                }
                Ok(())
            })
            .collect();
        let outcomes: Vec<Result<(), Error>> = futures::stream::iter(releases)
            .buffer_unordered(32)
            .collect()
            .await;
        outcomes.into_iter().collect()
    }

    /// Deletes pods the Job no longer wants (suspended, more than
    /// parallelism, or left running once it succeeded): their finalizer
    /// goes first, so they are not counted as failures (upstream's
    /// `deleteJobPods`).
    pub(super) async fn remove_pods(&self, job: &Job, pods: &[Arc<Pod>]) -> Result<(), Error> {
        self.release_all(pods).await?;
        self.delete_pods(job, pods).await
    }

    /// Deletes pods keeping their finalizer, so they are counted (as
    /// failed) once gone: a failing Job's remaining pods.
    pub(super) async fn delete_pods(&self, job: &Job, pods: &[Arc<Pod>]) -> Result<(), Error> {
        let key = key_of(job);
        self.expectations
            .expect_deletions(&key, pods.iter().map(|p| key_of(&**p)));
        let deletions: Vec<_> = pods
            .iter()
            .map(|p| {
                let api = self.pods_api(p.metadata.namespace.as_deref().unwrap_or_default());
                let (name, pod_key, key) = (p.name_any(), key_of(&**p), key.clone());
                async move {
                    match api.delete(&name, &DeleteParams::background()).await {
                        Ok(_) => {
                            self.recorder.event(
                                &reference_to(job),
                                EventType::Normal,
                                "SuccessfulDelete",
                                "Delete",
                                &format!("Deleted pod: {name}"),
                            );
                            Ok(())
                        }
                        Err(e) => {
                            self.expectations.deletion_failed(&key, &pod_key);
                            if is_status(&e, 404) {
                                Ok(())
                            } else {
                                Err(api_error(format!("delete pod {name}"))(e))
                            }
                        }
                    }
                }
            })
            .collect();
        let outcomes: Vec<Result<(), Error>> = futures::stream::iter(deletions)
            .buffer_unordered(32)
            .collect()
            .await;
        outcomes.into_iter().collect()
    }

    pub(super) fn seen(&self, pod_key: &str) -> Seen {
        match self.pods.get(pod_key) {
            None => Seen::Absent,
            Some(p) if p.metadata.deletion_timestamp.is_some() => Seen::Deleting,
            Some(_) => Seen::Present,
        }
    }
}

/// A pod of `job` (for `slot` when Indexed), as upstream makes them.
pub(super) fn pod_for(job: &Job, slot: Option<Slot>) -> Pod {
    let template = job
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let mut p = Pod {
        metadata: template.metadata.unwrap_or_default(),
        spec: template.spec,
        status: None,
    };
    let name = job.name_any();
    p.metadata.name = None;
    p.metadata.namespace = job.metadata.namespace.clone();
    p.metadata.generate_name = Some(match slot {
        Some(s) => format!("{name}-{}-", s.index),
        None => format!("{name}-"),
    });
    p.metadata.owner_references = controller_reference(job).map(|r| vec![r]);
    p.metadata
        .finalizers
        .get_or_insert_default()
        .push(TRACKING_FINALIZER.into());
    let Some(Slot { index, failures }) = slot else {
        return p;
    };
    let annotations = p.metadata.annotations.get_or_insert_default();
    annotations.insert(INDEX.into(), index.to_string());
    if let Some((counted, ignored)) = failures {
        annotations.insert(FAILURE_COUNT.into(), counted.to_string());
        if ignored > 0 {
            annotations.insert(IGNORED_FAILURE_COUNT.into(), ignored.to_string());
        }
    }
    p.metadata
        .labels
        .get_or_insert_default()
        .insert(INDEX.into(), index.to_string());
    if let Some(spec) = p.spec.as_mut() {
        spec.hostname = Some(format!("{name}-{index}"));
        let env = EnvVar {
            name: "JOB_COMPLETION_INDEX".into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: format!("metadata.labels['{INDEX}']"),
                    api_version: None,
                }),
                ..Default::default()
            }),
        };
        for c in spec
            .init_containers
            .iter_mut()
            .flatten()
            .chain(spec.containers.iter_mut())
        {
            let vars = c.env.get_or_insert_default();
            if !vars.iter().any(|v| v.name == env.name) {
                vars.push(env.clone());
            }
        }
    }
    p
}
