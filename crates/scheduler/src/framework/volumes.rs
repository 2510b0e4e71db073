//! What the volume plugins read besides nodes and pods: the informers'
//! stores of PersistentVolumeClaims, PersistentVolumes, StorageClasses and
//! CSINodes (upstream's listers), shared by every snapshot and read only
//! by the PreFilter of a pod that has volumes — pods without pay nothing.
//! And the claims a pod uses, as upstream's volume plugins find them.

use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use rudder_runtime::Informers;
use rudder_runtime::informer::Store;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Default)]
pub struct VolumeListers {
    pub claims: Store<PersistentVolumeClaim>,
    pub volumes: Store<PersistentVolume>,
    pub classes: Store<StorageClass>,
    pub csi_nodes: Store<CSINode>,
}

impl VolumeListers {
    /// No objects, shared (what a snapshot reads until the scheduler
    /// gives it its informers' stores).
    pub fn empty() -> Arc<VolumeListers> {
        static EMPTY: OnceLock<Arc<VolumeListers>> = OnceLock::new();
        EMPTY.get_or_init(Arc::default).clone()
    }

    /// The stores of `informers`, once they have synced.
    pub async fn start(informers: &Informers) -> Self {
        let (claims, volumes) = (
            informers.typed::<PersistentVolumeClaim>(),
            informers.typed::<PersistentVolume>(),
        );
        let (classes, csi_nodes) = (
            informers.typed::<StorageClass>(),
            informers.typed::<CSINode>(),
        );
        claims.wait_synced().await;
        volumes.wait_synced().await;
        classes.wait_synced().await;
        csi_nodes.wait_synced().await;
        VolumeListers {
            claims: claims.store(),
            volumes: volumes.store(),
            classes: classes.store(),
            csi_nodes: csi_nodes.store(),
        }
    }

    /// Calls `changed` on every change of a claim, volume, class or
    /// CSINode (any may make a waiting pod fit), until `stop` fires.
    pub async fn watch(informers: &Informers, stop: &CancellationToken, changed: impl Fn()) {
        let mut claims = informers.typed::<PersistentVolumeClaim>().subscribe();
        let mut volumes = informers.typed::<PersistentVolume>().subscribe();
        let mut classes = informers.typed::<StorageClass>().subscribe();
        let mut csi_nodes = informers.typed::<CSINode>().subscribe();
        loop {
            let more = tokio::select! {
                c = claims.next_until(stop) => c.is_some(),
                c = volumes.next_until(stop) => c.is_some(),
                c = classes.next_until(stop) => c.is_some(),
                c = csi_nodes.next_until(stop) => c.is_some(),
            };
            if !more {
                return;
            }
            changed();
        }
    }

    pub fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get_in(Some(namespace), name)
    }

    pub fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes.get_in(None, name)
    }

    pub fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.classes.get_in(None, name)
    }

    pub fn csi_node(&self, name: &str) -> Option<Arc<CSINode>> {
        self.csi_nodes.get_in(None, name)
    }
}

/// The names of the claims a pod's volumes use: `persistentVolumeClaim`
/// volumes, and generic ephemeral volumes (`<pod>-<volume>`, upstream's
/// `ephemeral.VolumeClaimName`).
pub fn pod_claim_names(pod: &Pod) -> Vec<String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            if let Some(claim) = &v.persistent_volume_claim {
                Some(claim.claim_name.clone())
            } else if v.ephemeral.is_some() {
                Some(format!("{pod_name}-{}", v.name))
            } else {
                None
            }
        })
        .collect()
}

/// The claim's `spec.volumeName` ("" when unbound).
pub fn claim_volume_name(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or_default()
}

/// The claim's storage class: the beta annotation, else the field.
pub fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    match claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
    {
        Some(class) => class,
        None => claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref())
            .unwrap_or_default(),
    }
}

/// Whether the claim's class binds it only once a pod uses it.
pub fn is_delayed(claim: &PersistentVolumeClaim, listers: &VolumeListers) -> bool {
    let class = claim_class(claim);
    !class.is_empty()
        && listers
            .class(class)
            .is_some_and(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
}
