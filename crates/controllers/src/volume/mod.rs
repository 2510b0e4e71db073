//! The PersistentVolume binder (upstream's
//! `pkg/controller/volume/persistentvolume`, `persistentvolume-binder`):
//! binds each Pending claim to the best Available volume, honours
//! pre-binding in both directions, keeps the phases of both sides
//! (volumes Pending → Available → Bound → Released or Failed; claims
//! Pending → Bound, or Lost when their volume goes), and applies a released
//! volume's reclaim policy.
//!
//! Binding is the two-step write of upstream: the volume's `claimRef`
//! first, then its phase, then the claim's `volumeName` and annotations,
//! then the claim's status. A crash between steps leaves a state the next
//! sync of either object finishes.
//!
//! As upstream, the controller keeps its own copy of every volume and claim
//! (`Cache`), fed by the informers and by its own writes, and never acts on
//! an informer's version older than one it wrote: binding makes four
//! writes, whose watch events arrive after the controller has moved on.
//! One worker syncs both kinds, so no two syncs bind one volume twice.
//! Everything is synced again every 15 s (`--pvclaimbinder-sync-period`).
//!
//! Dynamic provisioning is not built: a claim whose class names an external
//! provisioner gets the provisioner annotations and upstream's
//! `ExternalProvisioning` event, and waits for a volume to appear.

mod claims;
pub mod matching;
pub mod reclaim;
mod volumes;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};
use rudder_runtime::controller::Action;
use rudder_runtime::events::reference_to;
use rudder_runtime::informer::{Store, key_of};
use rudder_runtime::{Change, EventType, Recorder, WorkQueue};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use self::matching::{claim_key, claim_ref, volume_name};
use crate::{Context, Error, api_error};

/// The name events carry (upstream's event source).
const COMPONENT: &str = "persistentvolume-controller";
/// How often every volume and claim is synced again.
const RESYNC: Duration = Duration::from_secs(15);

/// The queue key of a volume.
fn volume_key(name: &str) -> String {
    format!("pv:{name}")
}

/// The queue key of a claim (`namespace/name`).
fn claim_queue_key(key: &str) -> String {
    format!("pvc:{key}")
}

/// The last version of each object the controller knows, from the
/// informer or from its own writes (upstream's `storeObjectUpdate`).
struct Cache<K> {
    objects: Mutex<HashMap<String, Arc<K>>>,
}

impl<K: Resource> Cache<K> {
    fn new() -> Self {
        Cache {
            objects: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<K>>> {
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `object` unless a newer version is known; whether it was kept
    /// (the same version is: periodic syncs must pass).
    fn store(&self, object: Arc<K>) -> bool {
        let version = |o: &K| {
            let rv = o.meta().resource_version.as_deref().unwrap_or_default();
            rv.parse::<u64>().unwrap_or(0)
        };
        let mut objects = self.lock();
        let key = key_of(&*object);
        if objects
            .get(&key)
            .is_some_and(|old| version(old) > version(&object))
        {
            return false;
        }
        objects.insert(key, object);
        true
    }

    fn get(&self, key: &str) -> Option<Arc<K>> {
        self.lock().get(key).cloned()
    }

    fn remove(&self, key: &str) {
        self.lock().remove(key);
    }

    fn list(&self) -> Vec<Arc<K>> {
        self.lock().values().cloned().collect()
    }

    /// Writes `object` (its status, with `status`) and remembers what the
    /// API server returned.
    async fn save(&self, api: &Api<K>, object: &K, status: bool) -> Result<Arc<K>, Error>
    where
        K: Clone + Serialize + DeserializeOwned + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let (name, pp) = (object.name_any(), PostParams::default());
        let saved = match status {
            true => api.replace_status(&name, &pp, object).await,
            false => api.replace(&name, &pp, object).await,
        };
        let what = format!(
            "update {} {}{}",
            K::kind(&K::DynamicType::default()),
            key_of(object),
            if status { " status" } else { "" }
        );
        let saved = Arc::new(saved.map_err(api_error(what))?);
        self.store(saved.clone());
        Ok(saved)
    }
}

struct Controller {
    ctx: Arc<Context>,
    volume_store: Store<PersistentVolume>,
    claim_store: Store<PersistentVolumeClaim>,
    classes: Store<StorageClass>,
    pods: Store<Pod>,
    volumes: Cache<PersistentVolume>,
    claims: Cache<PersistentVolumeClaim>,
    queue: WorkQueue<String>,
    recorder: Recorder,
}

/// Runs the PersistentVolume binder until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let volumes = ctx.informers.typed::<PersistentVolume>();
    let claims = ctx.informers.typed::<PersistentVolumeClaim>();
    let classes = ctx.informers.typed::<StorageClass>();
    let pods = ctx.informers.typed::<Pod>();
    let mut volume_changes = volumes.subscribe();
    let mut claim_changes = claims.subscribe();
    let c = Arc::new(Controller {
        volume_store: volumes.store(),
        claim_store: claims.store(),
        classes: classes.store(),
        pods: pods.store(),
        volumes: Cache::new(),
        claims: Cache::new(),
        queue: WorkQueue::new(ctx.clock.clone()),
        recorder: Recorder::new(
            ctx.client.clone(),
            COMPONENT,
            &ctx.identity,
            ctx.clock.clone(),
        ),
        ctx: ctx.clone(),
    });
    volumes.wait_synced().await;
    claims.wait_synced().await;
    classes.wait_synced().await;
    pods.wait_synced().await;
    // Upstream's initializeCaches, then everything queued once.
    c.volume_store.list().into_iter().for_each(|v| {
        c.volumes.store(v);
    });
    c.claim_store.list().into_iter().for_each(|v| {
        c.claims.store(v);
    });
    c.resync();
    let watch = {
        let (c, stop) = (c.clone(), stop.clone());
        async move {
            // A deadline, not a sleep per turn: changes must not starve it.
            let mut resync_at = c.ctx.clock.now() + RESYNC;
            loop {
                tokio::select! {
                    change = volume_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { new, .. }) => c.queue.add(volume_key(&new.name_any())),
                        Some(Change::Deleted(old)) => {
                            c.volumes.remove(&old.name_any());
                            // The claim becomes Lost sooner.
                            if let Some(reference) = claim_ref(&old) {
                                c.queue.add(claim_queue_key(&claim_key(reference)));
                            }
                        }
                        Some(Change::Resync) => c.resync(),
                    },
                    change = claim_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { new, .. }) => c.queue.add(claim_queue_key(&key_of(&*new))),
                        Some(Change::Deleted(old)) => {
                            c.claims.remove(&key_of(&*old));
                            // Its volume is released sooner.
                            if !volume_name(&old).is_empty() {
                                c.queue.add(volume_key(volume_name(&old)));
                            }
                        }
                        Some(Change::Resync) => c.resync(),
                    },
                    () = c.ctx.clock.sleep_until(resync_at) => {
                        resync_at = c.ctx.clock.now() + RESYNC;
                        c.resync();
                    }
                }
            }
        }
    };
    crate::serve(
        "persistentvolume-binder",
        c.clone(),
        c.queue.clone(),
        // One worker: two syncs at once could bind one volume to two
        // claims (upstream runs one per queue for the same reason).
        1,
        Some(c.recorder.clone()),
        watch,
        stop,
        |c, key| async move { c.sync(&key).await },
    )
    .await;
}

impl Controller {
    /// Queues every volume and claim the informers hold.
    fn resync(&self) {
        for name in self.volume_store.keys() {
            self.queue.add(volume_key(&name));
        }
        for key in self.claim_store.keys() {
            self.queue.add(claim_queue_key(&key));
        }
    }

    #[tracing::instrument(skip(self), level = "debug")]
    async fn sync(&self, key: &str) -> Result<Action, Error> {
        if let Some(name) = key.strip_prefix("pv:") {
            let Some(volume) = self.volume_store.get(name) else {
                self.volumes.remove(name);
                return Ok(Action::Done);
            };
            if !self.volumes.store(volume.clone()) {
                // A newer version (our own write) is on its way.
                return Ok(Action::Done);
            }
            self.sync_volume(volume).await?;
        } else if let Some(key) = key.strip_prefix("pvc:") {
            let Some(claim) = self.claim_store.get(key) else {
                self.claims.remove(key);
                return Ok(Action::Done);
            };
            if !self.claims.store(claim.clone()) {
                return Ok(Action::Done);
            }
            self.sync_claim(claim).await?;
        }
        Ok(Action::Done)
    }

    fn volume_api(&self) -> Api<PersistentVolume> {
        Api::all(self.ctx.client.clone())
    }

    fn claim_api(&self, claim: &PersistentVolumeClaim) -> Api<PersistentVolumeClaim> {
        Api::namespaced(
            self.ctx.client.clone(),
            &claim.namespace().unwrap_or_default(),
        )
    }

    /// Writes a changed volume (spec and metadata) and remembers it.
    async fn update_volume(
        &self,
        volume: &PersistentVolume,
    ) -> Result<Arc<PersistentVolume>, Error> {
        self.volumes.save(&self.volume_api(), volume, false).await
    }

    /// Writes a changed claim (spec and metadata) and remembers it.
    async fn update_claim(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<Arc<PersistentVolumeClaim>, Error> {
        self.claims.save(&self.claim_api(claim), claim, false).await
    }

    /// Sets the volume's phase (and message) if it differs.
    async fn update_volume_phase(
        &self,
        volume: Arc<PersistentVolume>,
        phase: &str,
        message: &str,
    ) -> Result<Arc<PersistentVolume>, Error> {
        if matching::volume_phase(&volume) == phase {
            return Ok(volume);
        }
        let mut changed = (*volume).clone();
        let status = changed.status.get_or_insert_default();
        status.phase = Some(phase.into());
        status.message = (!message.is_empty()).then(|| message.into());
        let saved = self
            .volumes
            .save(&self.volume_api(), &changed, true)
            .await?;
        tracing::debug!(volume = volume.name_any(), phase, "volume entered phase");
        Ok(saved)
    }

    /// The same, with an event when the phase changes.
    async fn update_volume_phase_with_event(
        &self,
        volume: Arc<PersistentVolume>,
        phase: &str,
        (reason, action): (&str, &str),
        message: &str,
    ) -> Result<Arc<PersistentVolume>, Error> {
        if matching::volume_phase(&volume) == phase {
            return Ok(volume);
        }
        let saved = self.update_volume_phase(volume, phase, message).await?;
        self.recorder.event(
            &reference_to(&*saved),
            EventType::Warning,
            reason,
            action,
            message,
        );
        Ok(saved)
    }

    /// Sets the claim's phase, access modes and capacity (from `volume`)
    /// if they differ.
    async fn update_claim_status(
        &self,
        claim: Arc<PersistentVolumeClaim>,
        phase: &str,
        volume: Option<&PersistentVolume>,
    ) -> Result<Arc<PersistentVolumeClaim>, Error> {
        let Some(status) = matching::claim_status(&claim, phase, volume).map_err(Error::Failed)?
        else {
            return Ok(claim);
        };
        let mut changed = (*claim).clone();
        changed.status = Some(status);
        let saved = self
            .claims
            .save(&self.claim_api(&claim), &changed, true)
            .await?;
        tracing::debug!(claim = key_of(&*claim), phase, "claim entered phase");
        Ok(saved)
    }

    /// The same, with a Warning event when the phase changes.
    async fn update_claim_status_with_event(
        &self,
        claim: Arc<PersistentVolumeClaim>,
        phase: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), Error> {
        if matching::claim_phase(&claim) == phase {
            return Ok(());
        }
        let saved = self.update_claim_status(claim, phase, None).await?;
        self.recorder.event(
            &reference_to(&*saved),
            EventType::Warning,
            reason,
            "Binding",
            message,
        );
        Ok(())
    }

    /// Binds the volume and the claim to each other, in upstream's order:
    /// the volume's claimRef, its phase, the claim's volumeName, its
    /// status.
    async fn bind(
        &self,
        volume: Arc<PersistentVolume>,
        claim: Arc<PersistentVolumeClaim>,
    ) -> Result<(), Error> {
        let volume = match matching::bind_volume(&volume, &claim) {
            Some(bound) => {
                tracing::debug!(
                    volume = volume.name_any(),
                    claim = key_of(&*claim),
                    "binding"
                );
                self.update_volume(&bound).await?
            }
            None => volume,
        };
        let volume = self.update_volume_phase(volume, "Bound", "").await?;
        let claim = match matching::bind_claim(&claim, &volume) {
            Some(bound) => self.update_claim(&bound).await?,
            None => claim,
        };
        self.update_claim_status(claim, "Bound", Some(&volume))
            .await?;
        Ok(())
    }
}
