//! What a released volume's reclaim policy comes to, with no storage
//! backend behind rudder yet — the decisions of upstream's
//! `reclaimVolume`, `findDeletablePlugin` and the in-tree plugins the
//! controller manager carries, as pure functions.
//!
//! Upstream's kube-controller-manager (1.33) deletes storage itself only
//! for `hostPath` volumes under `/tmp/` (its host-path deleter removes the
//! directory on the controller manager's own machine); rudder deletes the
//! PersistentVolume object for those and leaves the directory alone. A
//! volume provisioned by an external provisioner, a CSI volume, or one
//! migrated to CSI is the external deleter's to delete: nothing happens
//! here. Every other volume (`local`, `nfs`, …) has no deleter: it is
//! marked Failed with upstream's `VolumeFailedDelete` message. Recycle is
//! deprecated; rudder has no recycler (upstream runs a scrubber pod for
//! `hostPath` and `nfs`), so a recycled volume is marked Failed with
//! upstream's "no recycler plugin" message.

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::ResourceExt;

use super::matching::{DYNAMICALLY_PROVISIONED, MIGRATED_TO};

/// The in-tree host-path plugin's name.
const HOST_PATH: &str = "kubernetes.io/host-path";

/// What a volume with reclaim policy Delete comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deletion {
    /// The storage is (deemed) gone: delete the PersistentVolume object.
    Delete,
    /// An external deleter (a CSI driver's provisioner) will do it.
    External,
    /// No deleter can: mark the volume Failed with this message.
    Fail(String),
}

/// What to do with a released volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reclaim {
    /// Retain: the volume stays Released until an administrator acts.
    Keep,
    /// Delete: see [`Deletion`].
    Delete(Deletion),
    /// Recycle, or a policy upstream does not know: mark the volume Failed
    /// with this reason and message.
    Fail(&'static str, String),
}

/// The reclaim policy, Retain when unset (upstream's default).
pub fn policy(volume: &PersistentVolume) -> &str {
    let spec = volume.spec.as_ref();
    spec.and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("Retain")
}

/// What the volume's reclaim policy asks for, now that it is released.
pub fn reclaim(volume: &PersistentVolume) -> Reclaim {
    match policy(volume) {
        "Retain" => Reclaim::Keep,
        "Delete" => Reclaim::Delete(deletion(volume)),
        "Recycle" => Reclaim::Fail(
            "VolumeFailedRecycle",
            "No recycler plugin found for the volume!".into(),
        ),
        _ => Reclaim::Fail(
            "VolumeUnknownReclaimPolicy",
            "Volume has unrecognized PersistentVolumeReclaimPolicy".into(),
        ),
    }
}

/// Who deletes a volume of policy Delete.
pub fn deletion(volume: &PersistentVolume) -> Deletion {
    let name = volume.name_any();
    let spec = volume.spec.clone().unwrap_or_default();
    if let Some(plugin) = volume
        .annotations()
        .get(DYNAMICALLY_PROVISIONED)
        .filter(|p| !p.is_empty())
    {
        return match plugin.as_str() {
            HOST_PATH => host_path(spec.host_path.as_ref().map(|h| h.path.as_str())),
            p if !p.starts_with("kubernetes.io/") => Deletion::External,
            p => Deletion::Fail(format!("no volume plugin matched name: {p}")),
        };
    }
    if volume.annotations().contains_key(MIGRATED_TO) || spec.csi.is_some() {
        return Deletion::External;
    }
    let no_plugin = |why: &str| {
        Deletion::Fail(format!(
            "error getting deleter volume plugin for volume {name:?}: {why}"
        ))
    };
    match (&spec.host_path, &spec.nfs) {
        (Some(h), _) => host_path(Some(&h.path)),
        (None, Some(_)) => no_plugin("no deletable volume plugin matched"),
        (None, None) => no_plugin("no volume plugin matched"),
    }
}

/// The host-path deleter: only paths with `/tmp/` and more in them
/// (upstream's unanchored `/tmp/.+`).
fn host_path(path: Option<&str>) -> Deletion {
    let Some(path) = path else {
        return Deletion::Fail("spec.PersistentVolumeSource.HostPath is nil".into());
    };
    let under_tmp = path
        .match_indices("/tmp/")
        .any(|(at, m)| path.len() > at + m.len());
    if under_tmp {
        Deletion::Delete
    } else {
        Deletion::Fail(format!(
            "host_path deleter only supports /tmp/.+ but received provided {path}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn volume(spec: serde_json::Value, annotations: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {"name": "pv", "annotations": annotations},
            "spec": spec,
        }))
        .expect("volume")
    }

    #[test]
    fn each_policy_and_source_comes_to_what_upstream_does() {
        let none = json!({});
        let cases = [
            (json!({"hostPath": {"path": "/tmp/a"}}), none.clone(), Reclaim::Keep),
            (
                json!({"persistentVolumeReclaimPolicy": "Delete", "hostPath": {"path": "/tmp/a"}}),
                none.clone(),
                Reclaim::Delete(Deletion::Delete),
            ),
            (
                json!({"persistentVolumeReclaimPolicy": "Delete", "hostPath": {"path": "/var/tmp/x"}}),
                none.clone(),
                Reclaim::Delete(Deletion::Delete),
            ),
            (
                json!({"persistentVolumeReclaimPolicy": "Delete", "hostPath": {"path": "/tmp/"}}),
                none.clone(),
                Reclaim::Delete(Deletion::Fail(
                    "host_path deleter only supports /tmp/.+ but received provided /tmp/".into(),
                )),
            ),
            (
                json!({"persistentVolumeReclaimPolicy": "Delete", "hostPath": {"path": "/data"}}),
                none.clone(),
                Reclaim::Delete(Deletion::Fail(
                    "host_path deleter only supports /tmp/.+ but received provided /data".into(),
                )),
            ),
            (
                json!({"persistentVolumeReclaimPolicy": "Delete", "local": {"path": "/mnt/a"}}),
                none.clone(),
                Reclaim::Delete(Deletion::Fail(
                    "error getting deleter volume plugin for volume \"pv\": no volume plugin matched"
                        .into(),
                )),
            ),
            (
                json!({"persistentVolumeReclaimPolicy": "Delete", "nfs": {"server": "s", "path": "/"}}),
                none.clone(),
                Reclaim::Delete(Deletion::Fail(
                    "error getting deleter volume plugin for volume \"pv\": no deletable volume plugin matched"
                        .into(),
                )),
            ),
            (
                json!({"persistentVolumeReclaimPolicy": "Delete", "csi": {"driver": "d", "volumeHandle": "h"}}),
                none.clone(),
                Reclaim::Delete(Deletion::External),
            ),
            (
                json!({"persistentVolumeReclaimPolicy": "Delete", "local": {"path": "/mnt/a"}}),
                json!({"pv.kubernetes.io/provisioned-by": "rancher.io/local-path"}),
                Reclaim::Delete(Deletion::External),
            ),
            (
                json!({"persistentVolumeReclaimPolicy": "Delete", "local": {"path": "/mnt/a"}}),
                json!({"pv.kubernetes.io/provisioned-by": "kubernetes.io/aws-ebs"}),
                Reclaim::Delete(Deletion::Fail(
                    "no volume plugin matched name: kubernetes.io/aws-ebs".into(),
                )),
            ),
            (
                json!({"persistentVolumeReclaimPolicy": "Recycle", "hostPath": {"path": "/tmp/a"}}),
                none.clone(),
                Reclaim::Fail(
                    "VolumeFailedRecycle",
                    "No recycler plugin found for the volume!".into(),
                ),
            ),
            (
                json!({"persistentVolumeReclaimPolicy": "Shred"}),
                none.clone(),
                Reclaim::Fail(
                    "VolumeUnknownReclaimPolicy",
                    "Volume has unrecognized PersistentVolumeReclaimPolicy".into(),
                ),
            ),
        ];
        for (spec, annotations, want) in cases {
            let v = volume(spec.clone(), annotations);
            assert_eq!(reclaim(&v), want, "{spec}");
        }
    }
}
