//! VolumeBinding's PreBind (upstream's `BindPodVolumes`): the bindings
//! Reserve chose are written — a volume's `claimRef`, a claim's
//! `selected-node` — then the claims are polled until the PV controller
//! has bound them, or a binding was undone, or `bindTimeoutSeconds` pass.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim};
use kube::Client;
use kube::api::{Api, PostParams};

use super::{
    BIND_COMPLETED, BOUND_BY_CONTROLLER, PodVolumes, RESERVED, SELECTED_NODE, VolumeBinding,
    is_bound_to,
};
use crate::framework::volumes::claim_volume_name;
use crate::framework::{CycleState, PodInfo, PreBind, Status};

/// The volume bound to the claim, as upstream's `GetBindVolumeToClaim`
/// writes it.
pub fn bind_volume(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> PersistentVolume {
    let mut bound = pv.clone();
    if !is_bound_to(pv, claim) {
        bound
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(BOUND_BY_CONTROLLER.into(), "yes".into());
    }
    bound.spec.get_or_insert_default().claim_ref = Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: claim.metadata.namespace.clone(),
        name: claim.metadata.name.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        ..Default::default()
    });
    bound
}

impl VolumeBinding {
    /// Writes the bindings and waits for the PV controller to finish them
    /// (upstream's `BindPodVolumes`).
    async fn bind_pod_volumes(&self, client: &Client, chosen: &PodVolumes, node: &str) -> Status {
        let volumes: Api<PersistentVolume> = Api::all(client.clone());
        for (pv, claim) in &chosen.bindings {
            let name = pv.metadata.name.as_deref().unwrap_or_default();
            let bound = bind_volume(pv, claim);
            if let Err(e) = volumes.replace(name, &PostParams::default(), &bound).await {
                return Status::error(format!("binding volumes: {e}"));
            }
        }
        for claim in &chosen.provisions {
            let claims: Api<PersistentVolumeClaim> = Api::namespaced(
                client.clone(),
                claim.metadata.namespace.as_deref().unwrap_or(""),
            );
            let mut selected = (**claim).clone();
            selected
                .metadata
                .annotations
                .get_or_insert_default()
                .insert(SELECTED_NODE.into(), node.into());
            let name = claim.metadata.name.as_deref().unwrap_or_default();
            if let Err(e) = claims
                .replace(name, &PostParams::default(), &selected)
                .await
            {
                return Status::error(format!("binding volumes: {e}"));
            }
        }
        let deadline = Instant::now() + self.bind_timeout;
        loop {
            match self.check_bindings(client, chosen, node).await {
                Ok(true) => return Status::success(),
                Ok(false) => {}
                Err(message) => return Status::error(format!("binding volumes: {message}")),
            }
            if Instant::now() >= deadline {
                return Status::error("binding volumes: timed out waiting for the condition");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Whether every claim is bound; an error when a binding was undone
    /// (upstream's `checkBindings`).
    async fn check_bindings(
        &self,
        client: &Client,
        chosen: &PodVolumes,
        node: &str,
    ) -> Result<bool, String> {
        let volumes: Api<PersistentVolume> = Api::all(client.clone());
        let fetch_claim = |claim: &PersistentVolumeClaim| {
            let claims: Api<PersistentVolumeClaim> = Api::namespaced(
                client.clone(),
                claim.metadata.namespace.as_deref().unwrap_or(""),
            );
            let name = claim.metadata.name.clone().unwrap_or_default();
            async move { claims.get(&name).await.map_err(|e| e.to_string()) }
        };
        let fully_bound = |c: &PersistentVolumeClaim| {
            !claim_volume_name(c).is_empty()
                && c.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(BIND_COMPLETED))
        };
        for (pv, claim) in &chosen.bindings {
            let name = pv.metadata.name.as_deref().unwrap_or_default();
            let now = volumes.get(name).await.map_err(|e| e.to_string())?;
            let reference = now.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
            if reference.is_none_or(|r| r.uid.as_deref().unwrap_or_default().is_empty()) {
                return Err(format!("ClaimRef got reset for pv {name:?}"));
            }
            if !fully_bound(&fetch_claim(claim).await?) {
                return Ok(false);
            }
        }
        for claim in &chosen.provisions {
            let now = fetch_claim(claim).await?;
            let selected = now
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SELECTED_NODE));
            if selected.map(String::as_str) != Some(node) {
                return Err(format!(
                    "provisioning failed for PVC {:?}",
                    now.metadata.name.as_deref().unwrap_or_default()
                ));
            }
            if !fully_bound(&now) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl PreBind for VolumeBinding {
    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        _: &'a PodInfo,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            let Some(chosen) = state.read::<PodVolumes>(RESERVED) else {
                return Status::success();
            };
            if chosen.bindings.is_empty() && chosen.provisions.is_empty() {
                return Status::success();
            }
            let Some(client) = &self.client else {
                return Status::error("binding volumes: no client");
            };
            self.bind_pod_volumes(client, chosen, node).await
        })
    }
}
