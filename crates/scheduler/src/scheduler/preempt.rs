//! Preemption's IO (upstream's `prepareCandidate` and `PreemptPod`): each
//! victim not already terminating gets the `DisruptionTarget` condition
//! and is deleted gracefully, all at once, with a `Preempted` event; then
//! pods of lower priority nominated to the node lose their nomination, so
//! they look for room elsewhere at once.

use std::sync::Arc;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use rudder_runtime::EventType;
use rudder_runtime::events::reference_to;
use serde_json::json;

use super::{Loop, scheduler_name};
use crate::framework::PodInfo;
use crate::preemption;

fn not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

impl Loop {
    /// Evicts `victims` for `preemptor` on `node`, and clears the
    /// nominations it overrides; the first failure is returned.
    pub(super) async fn prepare_candidate(
        &self,
        preemptor: &PodInfo,
        node: &str,
        victims: &[Arc<PodInfo>],
    ) -> Result<(), String> {
        let evictions = victims
            .iter()
            // Graceful deletion already started: nothing to ask again.
            .filter(|v| v.pod.metadata.deletion_timestamp.is_none())
            .map(|v| self.evict(v, preemptor, node));
        if let Some(failed) = join_all(evictions).await.into_iter().find_map(Result::err) {
            return Err(failed);
        }
        let lower: Vec<Arc<PodInfo>> = {
            let shared = self.lock();
            let nominated = shared.nominator.for_node(node);
            preemption::lower_priority_nominated(preemptor, &nominated)
                .cloned()
                .collect()
        };
        for pod in lower {
            self.clear_nomination(&pod).await;
        }
        Ok(())
    }

    /// One victim: the condition (unless it is there), then the delete; a
    /// victim already gone is no failure.
    async fn evict(&self, victim: &PodInfo, preemptor: &PodInfo, node: &str) -> Result<(), String> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), victim.namespace());
        let name = victim.pod.name_any();
        let message = format!(
            "{}: preempting to accommodate a higher priority pod",
            scheduler_name(&preemptor.pod)
        );
        let marked = victim
            .pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget"))
            .is_some_and(|c| {
                c.status == "True"
                    && c.reason.as_deref() == Some("PreemptionByScheduler")
                    && c.message.as_deref() == Some(message.as_str())
            });
        if !marked {
            let now = rudder_api::time::format_rfc3339(rudder_api::time::unix_seconds(
                std::time::SystemTime::now(),
            ));
            let condition = json!({"status": {"conditions": [{
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": message,
                "lastTransitionTime": now,
            }]}});
            match self.patch_status(victim, condition).await {
                Ok(_) => {}
                Err(e) if not_found(&e) => return Ok(()),
                Err(e) => {
                    tracing::warn!(victim = %victim.key, error = %e, "could not add DisruptionTarget");
                    return Err(e.to_string());
                }
            }
        }
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if not_found(&e) => return Ok(()),
            Err(e) => {
                tracing::warn!(victim = %victim.key, error = %e, "could not preempt");
                return Err(e.to_string());
            }
        }
        tracing::info!(preemptor = %preemptor.key, victim = %victim.key, node, "preempted");
        self.recorder.event(
            &reference_to(&*victim.pod),
            EventType::Normal,
            "Preempted",
            "Preempting",
            &format!(
                "Preempted by pod {} on node {node}",
                preemptor.pod.metadata.uid.as_deref().unwrap_or_default()
            ),
        );
        Ok(())
    }

    /// Removes a pod's `nominatedNodeName` (the nominator follows when the
    /// change is seen); a failure is only logged, as upstream.
    async fn clear_nomination(&self, pod: &PodInfo) {
        let patch = json!({"status": {"nominatedNodeName": null}});
        if let Err(error) = self.patch_status(pod, patch).await {
            tracing::warn!(pod = %pod.key, %error, "could not clear nominatedNodeName");
        }
    }

    /// A strategic merge patch of the pod's status.
    pub(super) async fn patch_status(
        &self,
        pod: &PodInfo,
        patch: serde_json::Value,
    ) -> Result<(), kube::Error> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), pod.namespace());
        api.patch_status(
            &pod.pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await
        .map(drop)
    }
}
