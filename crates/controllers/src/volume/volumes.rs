//! Syncing a volume (upstream's `syncVolume`, `unbindVolume`,
//! `reclaimVolume` and the delete and recycle operations): an unclaimed or
//! merely pre-bound volume is Available, a bound one Bound; one whose claim
//! is gone is Released and reclaimed as its policy says; one bound by the
//! controller to a claim that went elsewhere is freed again.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use rudder_runtime::EventType;
use rudder_runtime::events::reference_to;
use rudder_runtime::informer::key_of;

use super::matching::{
    BOUND_BY_CONTROLLER, DYNAMICALLY_PROVISIONED, MIGRATED_TO, claim_key, claim_ref,
    volume_mode_mismatch, volume_name, volume_phase,
};
use super::reclaim::{Deletion, Reclaim, policy, reclaim};
use super::{Controller, claim_queue_key};
use crate::{Error, api_error, is_status};

impl Controller {
    pub(super) async fn sync_volume(&self, volume: Arc<PersistentVolume>) -> Result<(), Error> {
        let Some(reference) = claim_ref(&volume).cloned() else {
            self.update_volume_phase(volume, "Available", "").await?;
            return Ok(());
        };
        let uid = reference.uid.clone().unwrap_or_default();
        if uid.is_empty() {
            // Pre-bound by the user; the claim's sync binds it.
            self.update_volume_phase(volume, "Available", "").await?;
            return Ok(());
        }
        let key = claim_key(&reference);
        let released = matches!(volume_phase(&volume), "Released" | "Failed");
        let mut claim = self.claims.get(&key);
        if claim.is_none() && !released {
            // Not to reclaim a volume whose claim the cache has not seen
            // yet: ask the informer, then the API server.
            claim = match self.claim_store.get(&key) {
                Some(c) => Some(c),
                None => self.live_claim(&reference).await?,
            };
        }
        if claim
            .as_ref()
            .is_some_and(|c| c.metadata.uid.as_deref() != Some(uid.as_str()))
        {
            // Maybe a stale copy: the API server says which claim is there.
            claim = self
                .live_claim(&reference)
                .await?
                .filter(|c| c.metadata.uid.as_deref() == Some(uid.as_str()));
        }
        let Some(claim) = claim else {
            let volume = if released {
                volume
            } else {
                tracing::info!(
                    volume = volume.name_any(),
                    policy = policy(&volume),
                    "volume is released"
                );
                self.update_volume_phase(volume, "Released", "").await?
            };
            return self.reclaim_volume(volume).await;
        };
        let name = volume.name_any();
        if volume_name(&claim).is_empty() {
            if volume_mode_mismatch(&claim, &volume) {
                let note = format!(
                    "Cannot bind PersistentVolume to requested PersistentVolumeClaim {:?} due to incompatible volumeMode.",
                    claim.name_any()
                );
                self.recorder.event(
                    &reference_to(&*volume),
                    EventType::Warning,
                    "VolumeMismatch",
                    "Binding",
                    &note,
                );
                let note = format!(
                    "Cannot bind PersistentVolume {name:?} to requested PersistentVolumeClaim due to incompatible volumeMode."
                );
                self.recorder.event(
                    &reference_to(&*claim),
                    EventType::Warning,
                    "VolumeMismatch",
                    "Binding",
                    &note,
                );
                return Ok(());
            }
            // Bound on the volume's side only: the claim's sync finishes.
            self.queue.add(claim_queue_key(&key_of(&*claim)));
            return Ok(());
        }
        if volume_name(&claim) == name {
            self.update_volume_phase(volume, "Bound", "").await?;
            return Ok(());
        }
        // The claim is bound to another volume.
        let provisioned = volume.annotations().contains_key(DYNAMICALLY_PROVISIONED);
        if provisioned && policy(&volume) == "Delete" {
            let volume = if matches!(volume_phase(&volume), "Released" | "Failed") {
                volume
            } else {
                self.update_volume_phase(volume, "Released", "").await?
            };
            return self.reclaim_volume(volume).await;
        }
        self.unbind_volume(volume).await
    }

    async fn live_claim(
        &self,
        reference: &k8s_openapi::api::core::v1::ObjectReference,
    ) -> Result<Option<Arc<PersistentVolumeClaim>>, Error> {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(
            self.ctx.client.clone(),
            reference.namespace.as_deref().unwrap_or_default(),
        );
        let name = reference.name.as_deref().unwrap_or_default();
        let claim = api.get_opt(name).await.map_err(api_error(format!(
            "get PersistentVolumeClaim {}",
            claim_key(reference)
        )))?;
        Ok(claim.map(Arc::new))
    }

    /// Undoes the controller's binding (or, on a volume the user pre-bound,
    /// only the claim's uid), and makes the volume Available.
    async fn unbind_volume(&self, volume: Arc<PersistentVolume>) -> Result<(), Error> {
        let mut changed = (*volume).clone();
        if volume.annotations().contains_key(BOUND_BY_CONTROLLER) {
            changed.spec.get_or_insert_default().claim_ref = None;
            if let Some(annotations) = changed.metadata.annotations.as_mut() {
                annotations.remove(BOUND_BY_CONTROLLER);
                if annotations.is_empty() {
                    changed.metadata.annotations = None;
                }
            }
        } else if let Some(reference) = changed.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
            reference.uid = None;
        }
        let saved = self.update_volume(&changed).await?;
        self.update_volume_phase(saved, "Available", "").await?;
        Ok(())
    }

    /// Applies the reclaim policy of a released volume.
    async fn reclaim_volume(&self, volume: Arc<PersistentVolume>) -> Result<(), Error> {
        if volume
            .annotations()
            .get(MIGRATED_TO)
            .is_some_and(|m| !m.is_empty())
        {
            // The CSI driver's provisioner reclaims it.
            return Ok(());
        }
        match reclaim(&volume) {
            Reclaim::Keep => Ok(()),
            Reclaim::Fail(reason @ "VolumeFailedRecycle", note) => {
                // Upstream's recycle operation: looked at again first.
                let Some(live) = self.live_released(&volume).await? else {
                    return Ok(());
                };
                self.update_volume_phase_with_event(live, "Failed", (reason, "Recycling"), &note)
                    .await
                    .map(drop)
            }
            Reclaim::Fail(reason, note) => self
                .update_volume_phase_with_event(volume, "Failed", (reason, "Reclaiming"), &note)
                .await
                .map(drop),
            Reclaim::Delete(deletion) => self.delete_volume(&volume, deletion).await,
        }
    }

    /// The volume as the API server has it, if it still needs reclaiming.
    async fn live_released(
        &self,
        volume: &PersistentVolume,
    ) -> Result<Option<Arc<PersistentVolume>>, Error> {
        let name = volume.name_any();
        let live = match self.volume_api().get_opt(&name).await {
            Ok(Some(live)) => Arc::new(live),
            Ok(None) => return Ok(None),
            Err(e) => {
                tracing::debug!(volume = name, error = %e, "cannot read the volume to reclaim");
                return Ok(None);
            }
        };
        Ok(self.is_released(&live).then_some(live))
    }

    /// Upstream's `isVolumeReleased`: bound to a claim that is gone, or
    /// that is bound to another volume.
    fn is_released(&self, volume: &PersistentVolume) -> bool {
        let Some(reference) = claim_ref(volume) else {
            return false;
        };
        let uid = reference.uid.as_deref().unwrap_or_default();
        if uid.is_empty() {
            return false;
        }
        match self.claims.get(&claim_key(reference)) {
            Some(claim) if claim.metadata.uid.as_deref() == Some(uid) => {
                let bound_to = volume_name(&claim);
                !bound_to.is_empty() && bound_to != volume.name_any()
            }
            _ => true,
        }
    }

    /// Upstream's delete operation, without storage behind it: the object
    /// goes when a deleter would have deleted the storage; a volume no
    /// deleter can delete is marked Failed. Tried again on every sync.
    async fn delete_volume(
        &self,
        volume: &PersistentVolume,
        deletion: Deletion,
    ) -> Result<(), Error> {
        let Some(live) = self.live_released(volume).await? else {
            return Ok(());
        };
        let name = live.name_any();
        match deletion {
            Deletion::External => Ok(()),
            Deletion::Fail(note) => {
                // Not an error to retry at once: the next resync tries again.
                self.update_volume_phase_with_event(
                    live,
                    "Failed",
                    ("VolumeFailedDelete", "Deleting"),
                    &note,
                )
                .await
                .map(drop)
            }
            Deletion::Delete => match self
                .volume_api()
                .delete(&name, &DeleteParams::default())
                .await
            {
                Ok(_) => {
                    tracing::info!(volume = name, "volume deleted");
                    Ok(())
                }
                Err(e) if is_status(&e, 404) => Ok(()),
                Err(e) => {
                    tracing::debug!(volume = name, error = %e, "cannot delete the volume");
                    Ok(())
                }
            },
        }
    }
}
