//! Which PersistentVolume a claim gets, and what binding writes — pure
//! functions of the objects (upstream's `index.go` and the binding helpers
//! of `component-helpers/storage/volume`).
//!
//! Volumes are grouped by their set of access modes; the groups that hold
//! every mode the claim asks for are searched from the fewest modes up, and
//! in the first group with a match the smallest volume that is big enough
//! wins. A volume pre-bound to the claim (its `claimRef` names it) wins in
//! its group whatever its size; a volume pre-bound to another claim is
//! never offered.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Wire;
use kube::ResourceExt;
use rudder_api::quantity::Quantity;
use rudder_runtime::events::reference_to;
use rudder_runtime::meta::selector_matches;

/// On a claim: binding has been done once (its value does not matter).
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// On a volume or claim: the controller, not the user, made the binding.
pub const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// On a claim: the node the scheduler chose for its first consumer.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// On a claim: the provisioner asked to make its volume.
pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The same, as it was first spelled (still written, as upstream does).
pub const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// On a volume: the plugin that provisioned it.
pub const DYNAMICALLY_PROVISIONED: &str = "pv.kubernetes.io/provisioned-by";
/// On a volume: the CSI driver an in-tree volume was migrated to.
pub const MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";
/// The storage class as an annotation, which wins over the field.
pub const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// On a volume: its size before a resize, for the claim's status.
pub const PRE_RESIZE_CAPACITY: &str = "volume.alpha.kubernetes.io/pre-resize-capacity";
const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
const BETA_DEFAULT_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";

/// The access modes, in upstream's order, as bits of a set.
const MODES: [&str; 4] = [
    "ReadWriteOnce",
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOncePod",
];

/// A set of access modes, `None` if one of them is unknown.
fn mode_set(modes: Option<&Vec<String>>) -> Option<u8> {
    modes.into_iter().flatten().try_fold(0u8, |set, mode| {
        let bit = MODES.iter().position(|m| m == mode)?;
        Some(set | 1 << bit)
    })
}

/// The set a volume is grouped by: its known modes (upstream's
/// `GetAccessModesAsString` drops unknown ones).
fn volume_modes(volume: &PersistentVolume) -> u8 {
    let modes = volume.spec.as_ref().and_then(|s| s.access_modes.as_ref());
    modes.into_iter().flatten().fold(0, |set, mode| {
        MODES
            .iter()
            .position(|m| m == mode)
            .map_or(set, |bit| set | 1 << bit)
    })
}

/// The claim's storage class: the beta annotation, else the field, else "".
pub fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    match claim.annotations().get(BETA_STORAGE_CLASS) {
        Some(class) => class,
        None => claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref())
            .unwrap_or_default(),
    }
}

/// Whether the claim names a class at all ("" counts: it asks for none).
pub fn claim_has_class(claim: &PersistentVolumeClaim) -> bool {
    claim.annotations().contains_key(BETA_STORAGE_CLASS)
        || claim
            .spec
            .as_ref()
            .is_some_and(|s| s.storage_class_name.is_some())
}

/// The volume's storage class: the beta annotation, else the field, else "".
pub fn volume_class(volume: &PersistentVolume) -> &str {
    match volume.annotations().get(BETA_STORAGE_CLASS) {
        Some(class) => class,
        None => volume
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref())
            .unwrap_or_default(),
    }
}

fn quantity(value: Option<&Wire>) -> Quantity {
    value
        .and_then(|q| Quantity::parse(&q.0).ok())
        .unwrap_or_else(Quantity::zero)
}

/// The storage the claim requests (zero if none).
pub fn requested(claim: &PersistentVolumeClaim) -> Quantity {
    let requests = claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref());
    quantity(requests.and_then(|r| r.get("storage")))
}

/// The volume's storage capacity (zero if none).
pub fn capacity(volume: &PersistentVolume) -> Quantity {
    let capacity = volume.spec.as_ref().and_then(|s| s.capacity.as_ref());
    quantity(capacity.and_then(|c| c.get("storage")))
}

/// Whether the claim and the volume differ in volumeMode (unset is
/// Filesystem on both sides).
pub fn volume_mode_mismatch(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let claim_mode = claim.spec.as_ref().and_then(|s| s.volume_mode.as_deref());
    let volume_mode = volume.spec.as_ref().and_then(|s| s.volume_mode.as_deref());
    claim_mode.unwrap_or("Filesystem") != volume_mode.unwrap_or("Filesystem")
}

/// Whether the volume offers every access mode the claim asks for.
pub fn access_modes_fit(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let offered = volume
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default();
    let wanted = claim.spec.as_ref().and_then(|s| s.access_modes.as_deref());
    wanted
        .unwrap_or_default()
        .iter()
        .all(|m| offered.contains(m))
}

/// The volume's phase ("" before the API server or the controller set one).
pub fn volume_phase(volume: &PersistentVolume) -> &str {
    let status = volume.status.as_ref();
    status.and_then(|s| s.phase.as_deref()).unwrap_or_default()
}

/// The claim's phase.
pub fn claim_phase(claim: &PersistentVolumeClaim) -> &str {
    let status = claim.status.as_ref();
    status.and_then(|s| s.phase.as_deref()).unwrap_or_default()
}

/// The claim's `spec.volumeName` ("" if unset).
pub fn volume_name(claim: &PersistentVolumeClaim) -> &str {
    let spec = claim.spec.as_ref();
    spec.and_then(|s| s.volume_name.as_deref())
        .unwrap_or_default()
}

/// The volume's `spec.claimRef`.
pub fn claim_ref(volume: &PersistentVolume) -> Option<&ObjectReference> {
    volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref())
}

/// The store key (`namespace/name`) of the claim a reference names.
pub fn claim_key(reference: &ObjectReference) -> String {
    format!(
        "{}/{}",
        reference.namespace.as_deref().unwrap_or_default(),
        reference.name.as_deref().unwrap_or_default()
    )
}

/// Whether the volume's claimRef names this claim (and, if it carries a
/// uid, this very claim).
pub fn is_bound_to(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(reference) = claim_ref(volume) else {
        return false;
    };
    let uid = reference.uid.as_deref().unwrap_or_default();
    reference.name.as_deref() == Some(claim.name_any().as_str())
        && reference.namespace.as_deref().unwrap_or_default()
            == claim.namespace().unwrap_or_default()
        && (uid.is_empty() || claim.metadata.uid.as_deref() == Some(uid))
}

/// The best volume for the claim among `volumes`, or none. With
/// `delay_binding` (WaitForFirstConsumer) only a volume pre-bound to the
/// claim is offered: the scheduler binds the others.
pub fn best_match<'a>(
    claim: &PersistentVolumeClaim,
    volumes: impl IntoIterator<Item = &'a PersistentVolume>,
    delay_binding: bool,
) -> Option<&'a PersistentVolume> {
    let wanted = mode_set(claim.spec.as_ref().and_then(|s| s.access_modes.as_ref()))?;
    let mut groups: BTreeMap<u8, Vec<&PersistentVolume>> = BTreeMap::new();
    for volume in volumes {
        groups.entry(volume_modes(volume)).or_default().push(volume);
    }
    let mut fitting: Vec<_> = groups
        .into_iter()
        .filter(|(modes, _)| modes & wanted == wanted)
        .collect();
    // Fewest modes first: the closest to what was asked for.
    fitting.sort_by_key(|(modes, _)| (modes.count_ones(), *modes));
    fitting.into_iter().find_map(|(_, mut group)| {
        group.sort_by_key(|v| v.name_any());
        best_in_group(claim, &group, delay_binding)
    })
}

/// Upstream's `FindMatchingVolume` without a node (the controller's path).
fn best_in_group<'a>(
    claim: &PersistentVolumeClaim,
    volumes: &[&'a PersistentVolume],
    delay_binding: bool,
) -> Option<&'a PersistentVolume> {
    let request = requested(claim);
    let class = claim_class(claim);
    let selector = claim.spec.as_ref().and_then(|s| s.selector.as_ref());
    let mut smallest: Option<(&PersistentVolume, Quantity)> = None;
    for &volume in volumes {
        if volume_mode_mismatch(claim, volume) || volume.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if is_bound_to(volume, claim) {
            return Some(volume);
        }
        if delay_binding {
            continue;
        }
        // Only Available volumes: the others are about to change.
        if volume_phase(volume) != "Available"
            || claim_ref(volume).is_some()
            || selector.is_some_and(|s| !selector_matches(s, volume.labels()))
            || volume_class(volume) != class
        {
            continue;
        }
        let size = capacity(volume);
        if size.cmp_value(&request).is_ge()
            && smallest
                .as_ref()
                .is_none_or(|(_, best)| best.cmp_value(&size).is_gt())
        {
            smallest = Some((volume, size));
        }
    }
    smallest.map(|(volume, _)| volume)
}

/// Why a volume the claim names in `volumeName` cannot be bound to it, in
/// upstream's words.
pub fn unsatisfied(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> Option<String> {
    if volume.metadata.deletion_timestamp.is_some() {
        return Some(format!(
            "the volume is marked for deletion {:?}",
            volume.name_any()
        ));
    }
    if capacity(volume).cmp_value(&requested(claim)).is_lt() {
        return Some("requested PV is too small".into());
    }
    if volume_class(volume) != claim_class(claim) {
        return Some("storageClassName does not match".into());
    }
    if volume_mode_mismatch(claim, volume) {
        return Some("incompatible volumeMode".into());
    }
    if !access_modes_fit(claim, volume) {
        return Some("incompatible accessMode".into());
    }
    None
}

fn annotate<K: kube::Resource>(object: &mut K, key: &str) {
    object
        .meta_mut()
        .annotations
        .get_or_insert_default()
        .insert(key.into(), "yes".into());
}

/// The volume bound to the claim (claimRef with the claim's uid and
/// resourceVersion; `bound-by-controller` unless the user pre-bound it), or
/// `None` if it already is.
pub fn bind_volume(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Option<PersistentVolume> {
    let by_controller = !is_bound_to(volume, claim);
    let mut bound = volume.clone();
    let mut dirty = false;
    let same = claim_ref(volume).is_some_and(|r| {
        r.name.as_deref() == claim.metadata.name.as_deref()
            && r.namespace.as_deref() == claim.metadata.namespace.as_deref()
            && r.uid.as_deref() == claim.metadata.uid.as_deref()
    });
    if !same {
        bound.spec.get_or_insert_default().claim_ref = Some(reference_to(claim));
        dirty = true;
    }
    if by_controller && !volume.annotations().contains_key(BOUND_BY_CONTROLLER) {
        annotate(&mut bound, BOUND_BY_CONTROLLER);
        dirty = true;
    }
    dirty.then_some(bound)
}

/// The claim bound to the volume (`volumeName`, `bound-by-controller` when
/// the controller chose the volume, `bind-completed`), or `None` if it
/// already is.
pub fn bind_claim(
    claim: &PersistentVolumeClaim,
    volume: &PersistentVolume,
) -> Option<PersistentVolumeClaim> {
    let mut bound = claim.clone();
    let mut dirty = false;
    let name = volume.name_any();
    if volume_name(claim) != name {
        bound.spec.get_or_insert_default().volume_name = Some(name);
        if !claim.annotations().contains_key(BOUND_BY_CONTROLLER) {
            annotate(&mut bound, BOUND_BY_CONTROLLER);
        }
        dirty = true;
    }
    if !claim.annotations().contains_key(BIND_COMPLETED) {
        annotate(&mut bound, BIND_COMPLETED);
        dirty = true;
    }
    dirty.then_some(bound)
}

/// The claim's status in `phase`, with the volume's access modes and (when
/// the claim becomes Bound) capacity — or with neither without a volume;
/// `Ok(None)` if nothing changes.
pub fn claim_status(
    claim: &PersistentVolumeClaim,
    phase: &str,
    volume: Option<&PersistentVolume>,
) -> Result<Option<PersistentVolumeClaimStatus>, String> {
    let old = claim.status.clone().unwrap_or_default();
    let mut new = old.clone();
    new.phase = Some(phase.into());
    match volume {
        None => {
            new.access_modes = None;
            new.capacity = None;
        }
        Some(volume) => {
            let spec = volume.spec.clone().unwrap_or_default();
            new.access_modes = spec.access_modes.clone();
            // Only when becoming Bound: a later difference may be meant
            // (a filesystem smaller than its block device).
            if claim_phase(claim) != phase {
                let Some(size) = spec.capacity.as_ref().and_then(|c| c.get("storage")) else {
                    return Err(format!(
                        "PersistentVolume {:?} is without a storage capacity",
                        volume.name_any()
                    ));
                };
                let before = old.capacity.as_ref().and_then(|c| c.get("storage"));
                if let Some(pre) = volume.annotations().get(PRE_RESIZE_CAPACITY) {
                    let pre = match Quantity::parse(pre) {
                        Ok(_) => Wire(pre.clone()),
                        Err(_) => size.clone(),
                    };
                    new.capacity
                        .get_or_insert_default()
                        .insert("storage".into(), pre);
                } else if before
                    .is_none_or(|b| quantity(Some(b)).cmp_value(&quantity(Some(size))).is_ne())
                {
                    new.capacity = spec.capacity.clone();
                }
            }
        }
    }
    let unchanged = old.phase == new.phase
        && old.access_modes == new.access_modes
        && old.capacity == new.capacity;
    Ok((!unchanged).then_some(new))
}

/// The default StorageClass: of those annotated default, the newest (then
/// the first by name), as upstream's `GetDefaultClass`.
pub fn default_class(classes: &[impl AsRef<StorageClass>]) -> Option<&StorageClass> {
    let is_default = |c: &StorageClass| {
        [DEFAULT_CLASS, BETA_DEFAULT_CLASS]
            .iter()
            .any(|a| c.annotations().get(*a).is_some_and(|v| v == "true"))
    };
    classes
        .iter()
        .map(AsRef::as_ref)
        .filter(|c| is_default(c))
        .min_by(|a, b| {
            let created = |c: &StorageClass| c.metadata.creation_timestamp.clone().map(|t| t.0);
            created(b)
                .cmp(&created(a))
                .then_with(|| a.name_any().cmp(&b.name_any()))
        })
}

#[cfg(test)]
mod tests;
