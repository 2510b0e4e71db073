//! Syncing a claim (upstream's `syncClaim`, `syncUnboundClaim`,
//! `syncBoundClaim`): a claim without `bind-completed` is matched (or its
//! requested volume checked) and bound; a bound one is kept bound, or
//! becomes Lost when its volume is gone or names another claim.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;
use rudder_runtime::EventType;
use rudder_runtime::events::reference_to;
use rudder_runtime::informer::key_of;

use super::Controller;
use super::matching::{
    BETA_STORAGE_PROVISIONER, BIND_COMPLETED, BOUND_BY_CONTROLLER, SELECTED_NODE,
    STORAGE_PROVISIONER, best_match, claim_class, claim_has_class, claim_key, claim_ref,
    default_class, is_bound_to, unsatisfied, volume_name,
};
use crate::{Error, is_status};

/// The Pending claim's event when nothing matches and no class is set.
const NO_CLASS: &str = "no persistent volumes available for this claim and no storage class is set";

impl Controller {
    pub(super) async fn sync_claim(&self, claim: Arc<PersistentVolumeClaim>) -> Result<(), Error> {
        if claim.annotations().contains_key(BIND_COMPLETED) {
            self.sync_bound_claim(claim).await
        } else {
            self.sync_unbound_claim(claim).await
        }
    }

    /// The claim's class binds late (WaitForFirstConsumer); a class that
    /// does not exist binds at once, as upstream.
    fn delay_binding(&self, claim: &PersistentVolumeClaim) -> bool {
        let class = claim_class(claim);
        !class.is_empty()
            && self
                .classes
                .get(class)
                .is_some_and(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
    }

    async fn sync_unbound_claim(&self, claim: Arc<PersistentVolumeClaim>) -> Result<(), Error> {
        let requested = volume_name(&claim).to_string();
        if requested.is_empty() {
            let delay = self.delay_binding(&claim);
            let volumes = self.volumes.list();
            if let Some(volume) = best_match(&claim, volumes.iter().map(|v| &**v), delay) {
                return self.bind(Arc::new(volume.clone()), claim).await;
            }
            if self.assign_default_class(&claim).await? {
                // The update brings the claim back.
                return Ok(());
            }
            if delay && !claim.annotations().contains_key(SELECTED_NODE) {
                self.wait_for_first_consumer(&claim);
            } else if !claim_class(&claim).is_empty() {
                return self.provision(claim).await;
            } else {
                self.recorder.event(
                    &reference_to(&*claim),
                    EventType::Normal,
                    "FailedBinding",
                    "Binding",
                    NO_CLASS,
                );
            }
            self.update_claim_status(claim, "Pending", None).await?;
            return Ok(());
        }
        // The user asked for a particular volume.
        let Some(volume) = self.volumes.get(&requested) else {
            self.update_claim_status(claim, "Pending", None).await?;
            return Ok(());
        };
        if claim_ref(&volume).is_none() {
            if let Some(why) = unsatisfied(&volume, &claim) {
                let note = format!("Cannot bind to requested volume {requested:?}: {why}");
                let regarding = reference_to(&*claim);
                self.recorder.event(
                    &regarding,
                    EventType::Warning,
                    "VolumeMismatch",
                    "Binding",
                    &note,
                );
                self.update_claim_status(claim, "Pending", None).await?;
                return Ok(());
            }
            return self.bind(volume, claim).await;
        }
        if is_bound_to(&volume, &claim) {
            // Finish the binding: the volume gets the claim's uid.
            return self.bind(volume, claim).await;
        }
        let note = format!("volume {requested:?} already bound to a different claim.");
        let regarding = reference_to(&*claim);
        self.recorder.event(
            &regarding,
            EventType::Warning,
            "FailedBinding",
            "Binding",
            &note,
        );
        if !claim.annotations().contains_key(BOUND_BY_CONTROLLER) {
            // The user's choice: wait until the volume is free.
            self.update_claim_status(claim, "Pending", None).await?;
            return Ok(());
        }
        let holder = claim_ref(&volume).map(claim_key).unwrap_or_default();
        Err(Error::Failed(format!(
            "invalid binding of claim {:?} to volume {requested:?}: volume already claimed by {holder:?}",
            key_of(&*claim)
        )))
    }

    async fn sync_bound_claim(&self, claim: Arc<PersistentVolumeClaim>) -> Result<(), Error> {
        let name = volume_name(&claim).to_string();
        if name.is_empty() {
            let note =
                "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!";
            return self
                .update_claim_status_with_event(claim, "Lost", "ClaimLost", note)
                .await;
        }
        let Some(volume) = self.volumes.get(&name) else {
            let note = "Bound claim has lost its PersistentVolume. Data on the volume is lost!";
            return self
                .update_claim_status_with_event(claim, "Lost", "ClaimLost", note)
                .await;
        };
        let uid = claim_ref(&volume).map(|r| r.uid.as_deref().unwrap_or_default());
        match uid {
            // Unbound volume (or one whose update has not come yet): bind
            // again; or all is well and bind() has nothing to write.
            None => self.bind(volume, claim).await,
            Some(uid) if Some(uid) == claim.metadata.uid.as_deref() => {
                self.bind(volume, claim).await
            }
            Some(_) => {
                let note = "Two claims are bound to the same volume, this one is bound incorrectly";
                self.update_claim_status_with_event(claim, "Lost", "ClaimMisbound", note)
                    .await
            }
        }
    }

    /// Gives a claim without a class the default class, if there is one
    /// (upstream's retroactive default StorageClass); whether it did.
    async fn assign_default_class(&self, claim: &PersistentVolumeClaim) -> Result<bool, Error> {
        if claim_has_class(claim) {
            return Ok(false);
        }
        let classes = self.classes.list();
        let Some(class) = default_class(&classes) else {
            return Ok(false);
        };
        let mut changed = claim.clone();
        changed.spec.get_or_insert_default().storage_class_name = Some(class.name_any());
        match self.update_claim(&changed).await {
            Ok(_) => Ok(true),
            // rudder's API server does not take a class set late yet
            // (upstream's validation allows nil → a class).
            Err(Error::Api { source, .. }) if is_status(&source, 422) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Upstream's event on a delayed claim: which unscheduled pods use it,
    /// or that none does yet.
    fn wait_for_first_consumer(&self, claim: &PersistentVolumeClaim) {
        let name = claim.name_any();
        let namespace = claim.namespace().unwrap_or_default();
        let mut waiting: Vec<String> = self
            .pods
            .by_index(rudder_runtime::informer::NAMESPACE_INDEX, &namespace)
            .iter()
            .filter(|p| {
                let spec = p.spec.as_ref();
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                !matches!(phase, Some("Succeeded" | "Failed"))
                    && spec.is_some_and(|s| s.node_name.as_deref().unwrap_or_default().is_empty())
                    && spec
                        .and_then(|s| s.volumes.as_ref())
                        .into_iter()
                        .flatten()
                        .any(|v| {
                            v.persistent_volume_claim
                                .as_ref()
                                .is_some_and(|c| c.claim_name == name)
                        })
            })
            .map(|p| p.name_any())
            .collect();
        waiting.sort();
        let (reason, note) = match waiting.as_slice() {
            [] => (
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding".to_string(),
            ),
            [one] => (
                "WaitForPodScheduled",
                format!("waiting for pod {one} to be scheduled"),
            ),
            many => (
                "WaitForPodScheduled",
                format!("waiting for pods {} to be scheduled", many.join(",")),
            ),
        };
        self.recorder.event(
            &reference_to(claim),
            EventType::Normal,
            reason,
            "Binding",
            &note,
        );
    }

    /// What upstream's provisioning comes to without in-tree provisioners:
    /// an external provisioner is asked for a volume (the claim's
    /// provisioner annotations and an `ExternalProvisioning` event); an
    /// in-tree one or a missing class fails with upstream's message.
    async fn provision(&self, claim: Arc<PersistentVolumeClaim>) -> Result<(), Error> {
        let class_name = claim_class(&claim);
        let Some(class) = self.classes.get(class_name) else {
            let note = format!("storageclass.storage.k8s.io {class_name:?} not found");
            self.provisioning_failed(&claim, &note);
            return Ok(());
        };
        let provisioner = class.provisioner.clone();
        if provisioner.starts_with("kubernetes.io/") {
            self.provisioning_failed(
                &claim,
                &format!("no volume plugin matched name: {provisioner}"),
            );
            return Ok(());
        }
        let claim = match self.set_provisioner(&claim, &class).await {
            Ok(claim) => claim,
            Err(e) => {
                self.provisioning_failed(&claim, &format!("Error saving claim: {e}"));
                return Err(e);
            }
        };
        let note = format!(
            "Waiting for a volume to be created either by the external provisioner '{provisioner}' \
             or manually by the system administrator. If volume creation is delayed, please verify \
             that the provisioner is running and correctly registered."
        );
        let regarding = reference_to(&*claim);
        self.recorder.event(
            &regarding,
            EventType::Normal,
            "ExternalProvisioning",
            "Provisioning",
            &note,
        );
        Ok(())
    }

    fn provisioning_failed(&self, claim: &PersistentVolumeClaim, note: &str) {
        let regarding = reference_to(claim);
        self.recorder.event(
            &regarding,
            EventType::Warning,
            "ProvisioningFailed",
            "Provisioning",
            note,
        );
    }

    /// Names the class's provisioner on the claim, for it to start.
    async fn set_provisioner(
        &self,
        claim: &Arc<PersistentVolumeClaim>,
        class: &StorageClass,
    ) -> Result<Arc<PersistentVolumeClaim>, Error> {
        let provisioner = &class.provisioner;
        if claim.annotations().get(BETA_STORAGE_PROVISIONER) == Some(provisioner) {
            return Ok(claim.clone());
        }
        let mut changed = (**claim).clone();
        let annotations = changed.annotations_mut();
        annotations.insert(BETA_STORAGE_PROVISIONER.into(), provisioner.clone());
        annotations.insert(STORAGE_PROVISIONER.into(), provisioner.clone());
        self.update_claim(&changed).await
    }
}
