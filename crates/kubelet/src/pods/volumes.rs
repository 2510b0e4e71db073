//! A pod's volumes on the node (upstream's volume manager, for the volume
//! kinds a single node serves): each under
//! `<agent>/pods/<uid>/volumes/<plugin>/<name>`, bind-mounted into the
//! containers by CRI. emptyDir (on disk, or tmpfs for `medium: Memory`
//! with its sizeLimit), hostPath, configMap, secret (on tmpfs, never on
//! disk), downwardAPI, projected (ConfigMaps, Secrets, downward API, and
//! ServiceAccount tokens from TokenRequest, kept fresh by
//! [`super::tokens`]), and claims bound
//! to hostPath or local PersistentVolumes. ConfigMap, Secret, downward API
//! and projected contents are written as upstream's atomic writer does —
//! a `..data` symlink swapped to a new timestamped directory — so they
//! change in place, all at once, when their sources do.

use rudder_host::{Command, Host};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    Container, DownwardAPIVolumeFile, KeyToPath, PersistentVolume, PersistentVolumeClaim, Pod,
    Volume,
};
use kube::api::Api;
use kube::{Client, ResourceExt};

use super::env::{self, Context, Sources};
use crate::cri::v1 as cri;

/// A file of a ConfigMap, Secret, downward API or projected volume.
type Files = BTreeMap<String, (Vec<u8>, u32)>;

/// A failed mount: the message of a FailedMount event.
pub type MountError = String;

/// The directory of a pod's volumes.
pub fn pod_dir(root: &Path, uid: &str) -> PathBuf {
    root.join(uid)
}

fn volume_dir(root: &Path, uid: &str, plugin: &str, name: &str) -> PathBuf {
    pod_dir(root, uid).join("volumes").join(plugin).join(name)
}

/// The ConfigMaps and Secrets a pod's volumes read.
pub fn referenced(pod: &Pod) -> (Vec<String>, Vec<String>) {
    let (mut config_maps, mut secrets) = (Vec::new(), Vec::new());
    for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        if let Some(c) = &volume.config_map {
            config_maps.push(c.name.clone());
        }
        if let Some(s) = &volume.secret {
            secrets.extend(s.secret_name.clone());
        }
        for source in volume
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten())
        {
            if let Some(c) = &source.config_map {
                config_maps.push(c.name.clone());
            }
            if let Some(s) = &source.secret {
                secrets.push(s.name.clone());
            }
        }
    }
    (config_maps, secrets)
}

/// The files of ConfigMap or Secret `name` from `found` (`kind` names it
/// in errors): every key, or the `items` asked for.
fn keys(
    found: &std::collections::HashMap<String, Option<BTreeMap<String, String>>>,
    name: &str,
    items: Option<&Vec<KeyToPath>>,
    mode: u32,
    kind: &str,
    optional: Option<bool>,
) -> Result<Files, MountError> {
    let optional = optional.unwrap_or(false);
    let Some(data) = found.get(name).and_then(Option::as_ref) else {
        return if optional {
            Ok(Files::new())
        } else {
            Err(format!("{kind} \"{name}\" not found"))
        };
    };
    let mut files = Files::new();
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                match data.get(&item.key) {
                    Some(value) => {
                        files.insert(
                            item.path.clone(),
                            (
                                value.clone().into_bytes(),
                                item.mode.map_or(mode, |m| m as u32),
                            ),
                        );
                    }
                    None if optional => {}
                    None => {
                        return Err(format!(
                            "configmap references non-existent config key: {}",
                            item.key
                        ));
                    }
                }
            }
        }
        _ => {
            for (key, value) in data {
                files.insert(key.clone(), (value.clone().into_bytes(), mode));
            }
        }
    }
    Ok(files)
}

fn downward(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    mode: u32,
    context: &Context,
) -> Result<Files, MountError> {
    let mut files = Files::new();
    let first = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .cloned()
        .unwrap_or_default();
    for item in items {
        let value = if let Some(field) = &item.field_ref {
            env::pod_field(pod, &field.field_path, context)?
        } else if let Some(field) = &item.resource_field_ref {
            env::resource_field(pod, &first, field, context)?
        } else {
            continue;
        };
        files.insert(
            item.path.clone(),
            (value.into_bytes(), item.mode.map_or(mode, |m| m as u32)),
        );
    }
    Ok(files)
}

/// The files of a ConfigMap, Secret, downward API or projected volume
/// (`None` for the other kinds).
pub fn files_of(
    pod: &Pod,
    volume: &Volume,
    sources: &Sources,
    context: &Context,
) -> Option<Result<Files, MountError>> {
    if let Some(c) = &volume.config_map {
        let mode = c.default_mode.unwrap_or(0o644) as u32;
        return Some(keys(
            &sources.config_maps,
            &c.name,
            c.items.as_ref(),
            mode,
            "configmap",
            c.optional,
        ));
    }
    if let Some(s) = &volume.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let mode = s.default_mode.unwrap_or(0o644) as u32;
        return Some(keys(
            &sources.secrets,
            &name,
            s.items.as_ref(),
            mode,
            "secret",
            s.optional,
        ));
    }
    if let Some(d) = &volume.downward_api {
        let mode = d.default_mode.unwrap_or(0o644) as u32;
        return Some(downward(
            pod,
            d.items.as_deref().unwrap_or_default(),
            mode,
            context,
        ));
    }
    let projected = volume.projected.as_ref()?;
    let mode = projected.default_mode.unwrap_or(0o644) as u32;
    let mut files = Files::new();
    for source in projected.sources.iter().flatten() {
        let part = if let Some(c) = &source.config_map {
            keys(
                &sources.config_maps,
                &c.name,
                c.items.as_ref(),
                mode,
                "configmap",
                c.optional,
            )
        } else if let Some(s) = &source.secret {
            keys(
                &sources.secrets,
                &s.name,
                s.items.as_ref(),
                mode,
                "secret",
                s.optional,
            )
        } else if let Some(d) = &source.downward_api {
            downward(pod, d.items.as_deref().unwrap_or_default(), mode, context)
        } else if let Some(t) = &source.service_account_token {
            let key = token_key(t.audience.as_deref(), t.expiration_seconds);
            match sources.tokens.get(&key) {
                Some(token) => Ok(Files::from([(
                    t.path.clone(),
                    (token.clone().into_bytes(), mode),
                )])),
                None => Err(format!("no service account token for {}", t.path)),
            }
        } else {
            Ok(Files::new())
        };
        match part {
            Ok(part) => files.extend(part),
            Err(error) => return Some(Err(error)),
        }
    }
    Some(Ok(files))
}

fn io(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> MountError {
    let what = format!("{what} {}", path.display());
    move |e| format!("{what}: {e}")
}

/// Writes `files` into `dir` as upstream's atomic writer: the user's
/// paths are symlinks into `..data`, which is swapped to a new
/// `..<timestamp>` directory in one rename. Nothing is written when the
/// contents are the same.
pub fn write_atomic(dir: &Path, files: &Files) -> Result<bool, MountError> {
    std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    let data = dir.join("..data");
    let current = std::fs::read_link(&data)
        .ok()
        .map(|target| dir.join(target));
    if let Some(current) = &current {
        // Group bits are the fsGroup's to set (`set_ownership`).
        let same = files.iter().all(|(path, (bytes, mode))| {
            let file = current.join(path);
            std::fs::read(&file).is_ok_and(|b| &b == bytes)
                && std::fs::metadata(&file)
                    .is_ok_and(|m| m.permissions().mode() & 0o7707 == *mode & 0o7707)
        }) && count_files(current) == files.len();
        if same {
            return Ok(false);
        }
    }
    let stamp = format!(
        "..{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let fresh = dir.join(&stamp);
    std::fs::create_dir(&fresh).map_err(io("create", &fresh))?;
    std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o755))
        .map_err(io("chmod", &fresh))?;
    for (path, (bytes, mode)) in files {
        let file = fresh.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(io("create", parent))?;
        }
        std::fs::write(&file, bytes).map_err(io("write", &file))?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(*mode))
            .map_err(io("chmod", &file))?;
    }
    let swap = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&swap);
    std::os::unix::fs::symlink(&stamp, &swap).map_err(io("link", &swap))?;
    std::fs::rename(&swap, &data).map_err(io("rename", &data))?;
    // The user-visible names: one symlink per top-level path.
    let tops: std::collections::BTreeSet<String> = files
        .keys()
        .filter_map(|p| p.split('/').next().map(str::to_string))
        .collect();
    for top in &tops {
        let link = dir.join(top);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{top}"), &link)
                .map_err(io("link", &link))?;
        }
    }
    for entry in std::fs::read_dir(dir).map_err(io("read", dir))?.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !name.starts_with("..") && !tops.contains(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = current.filter(|c| c != &fresh) {
        let _ = std::fs::remove_dir_all(old);
    }
    Ok(true)
}

fn count_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                count_files(&e.path())
            } else {
                1
            }
        })
        .sum()
}

/// The mount points the host has, as `/proc/self/mounts` lists them.
fn mount_points(host: &dyn Host) -> Vec<String> {
    host.read_file(Path::new("/proc/self/mounts"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect()
}

async fn mount_tmpfs(host: &dyn Host, dir: &Path, size: Option<String>) -> Result<(), MountError> {
    std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    let path = dir.display().to_string();
    if mount_points(host).contains(&path) {
        return Ok(());
    }
    let mut options = "mode=0755".to_string();
    if let Some(size) = size {
        options.push_str(&format!(",size={size}"));
    }
    host.run(&Command::new(
        "mount",
        [
            "-t",
            "tmpfs",
            "-o",
            options.as_str(),
            "tmpfs",
            path.as_str(),
        ],
    ))
    .await
    .map(drop)
    .map_err(|e| match e {
        rudder_host::Error::Command { message, .. } => format!("mount tmpfs on {path}: {message}"),
        other => format!("mount tmpfs on {path}: {other}"),
    })
}

/// The host path of a claim bound to a hostPath or local volume.
async fn claim_path(client: &Client, pod: &Pod, claim: &str) -> Result<PathBuf, MountError> {
    let namespace = pod.namespace().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
    let claim_object = claims
        .get_opt(claim)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("persistentvolumeclaim \"{claim}\" not found"))?;
    let volume = claim_object
        .spec
        .and_then(|s| s.volume_name)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("PVC {namespace}/{claim} has non-bound phase (\"Pending\") or empty pvc.Spec.VolumeName (\"\")"))?;
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let pv = volumes
        .get_opt(&volume)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("persistentvolume \"{volume}\" not found"))?;
    let spec = pv.spec.unwrap_or_default();
    spec.host_path
        .map(|h| PathBuf::from(h.path))
        .or_else(|| spec.local.map(|l| PathBuf::from(l.path)))
        .ok_or_else(|| format!("persistentvolume \"{volume}\" is neither hostPath nor local: not supported on this node"))
}

/// Where volumes go, and whether memory-backed ones get tmpfs; the
/// agent's ServiceAccount tokens.
#[derive(Debug, Clone, Copy)]
pub struct Root<'a> {
    pub dir: &'a Path,
    pub tmpfs: bool,
    pub tokens: &'a super::tokens::Tokens,
    /// Mounts go through the node's host seam.
    pub host: &'a dyn Host,
}

/// How a projected token source is known in [`Sources::tokens`].
fn token_key(audience: Option<&str>, expiration_seconds: Option<i64>) -> String {
    format!(
        "{}/{}",
        audience.unwrap_or_default(),
        expiration_seconds.unwrap_or(super::tokens::DEFAULT_EXPIRATION_SECONDS)
    )
}

/// The tokens `pod`'s projected volumes ask for, by [`token_key`].
async fn fetch_tokens(
    client: &Client,
    tokens: &super::tokens::Tokens,
    pod: &Pod,
) -> Result<BTreeMap<String, String>, MountError> {
    let mut found = BTreeMap::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        for source in volume
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten())
        {
            let Some(t) = &source.service_account_token else {
                continue;
            };
            let key = token_key(t.audience.as_deref(), t.expiration_seconds);
            if found.contains_key(&key) {
                continue;
            }
            let expiration = t
                .expiration_seconds
                .unwrap_or(super::tokens::DEFAULT_EXPIRATION_SECONDS);
            let token = tokens
                .get(
                    client,
                    pod,
                    t.audience.as_deref().unwrap_or_default(),
                    expiration,
                    now,
                )
                .await?;
            found.insert(key, token);
        }
    }
    Ok(found)
}

/// Sets every volume of the pod up; returns each volume's host path.
pub async fn setup(
    client: &Client,
    root: Root<'_>,
    pod: &Pod,
    context: &Context,
) -> Result<BTreeMap<String, PathBuf>, MountError> {
    let (tmpfs_allowed, tokens, host, root) = (root.tmpfs, root.tokens, root.host, root.dir);
    let fs_group = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|c| c.fs_group);
    let uid = pod.uid().unwrap_or_default();
    let (config_maps, secrets) = referenced(pod);
    let mut sources = Sources::fetch(client, pod, config_maps, secrets)
        .await
        .map_err(|e| e.to_string())?;
    sources.tokens = fetch_tokens(client, tokens, pod).await?;
    let mut paths = BTreeMap::new();
    for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let name = &volume.name;
        let path = if let Some(empty) = &volume.empty_dir {
            let dir = volume_dir(root, &uid, "kubernetes.io~empty-dir", name);
            if empty.medium.as_deref() == Some("Memory") && tmpfs_allowed {
                mount_tmpfs(host, &dir, empty.size_limit.as_ref().map(|q| q.0.clone())).await?;
            } else {
                std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
            }
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
                .map_err(io("chmod", &dir))?;
            dir
        } else if let Some(host) = &volume.host_path {
            let path = PathBuf::from(&host.path);
            match host.type_.as_deref() {
                Some("DirectoryOrCreate") => {
                    std::fs::create_dir_all(&path).map_err(io("create", &path))?
                }
                Some("FileOrCreate") if !path.exists() => {
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent).map_err(io("create", parent))?;
                    }
                    std::fs::write(&path, b"").map_err(io("create", &path))?;
                }
                Some("Directory") if !path.is_dir() => {
                    return Err(format!(
                        "hostPath type check failed: {} is not a directory",
                        host.path
                    ));
                }
                Some("File") if !path.is_file() => {
                    return Err(format!(
                        "hostPath type check failed: {} is not a file",
                        host.path
                    ));
                }
                _ => {}
            }
            path
        } else if let Some(claim) = &volume.persistent_volume_claim {
            claim_path(client, pod, &claim.claim_name).await?
        } else if let Some(files) = files_of(pod, volume, &sources, context) {
            let files = files?;
            let (plugin, tmpfs) = if volume.secret.is_some() {
                ("kubernetes.io~secret", true)
            } else if volume.config_map.is_some() {
                ("kubernetes.io~configmap", false)
            } else if volume.downward_api.is_some() {
                ("kubernetes.io~downward-api", false)
            } else {
                // Projected volumes may hold secrets and tokens: tmpfs.
                ("kubernetes.io~projected", true)
            };
            let dir = volume_dir(root, &uid, plugin, name);
            if tmpfs && tmpfs_allowed {
                mount_tmpfs(host, &dir, None).await?;
            }
            write_atomic(&dir, &files)?;
            dir
        } else {
            return Err(format!(
                "volume {name}: this kind of volume is not supported on this node yet"
            ));
        };
        let owned_by_pod = volume.host_path.is_none() && volume.persistent_volume_claim.is_none();
        if let Some(group) = fs_group.filter(|_| owned_by_pod) {
            set_ownership(&path, group as u32).map_err(io("set the fsGroup of", &path))?;
        }
        paths.insert(name.clone(), path);
    }
    Ok(paths)
}

/// Gives a volume to the pod's `fsGroup` as upstream does: every file
/// and directory owned by the group, group-readable and writable
/// (group-readable only for read-only contents), directories setgid.
fn set_ownership(dir: &Path, group: u32) -> std::io::Result<()> {
    let metadata = std::fs::symlink_metadata(dir)?;
    if metadata.file_type().is_symlink() {
        return Ok(());
    }
    std::os::unix::fs::lchown(dir, None, Some(group))?;
    let mode = metadata.permissions().mode() & 0o7777;
    if metadata.is_dir() {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o2070))?;
        for entry in std::fs::read_dir(dir)? {
            set_ownership(&entry?.path(), group)?;
        }
    } else {
        let group_bits = if mode & 0o200 != 0 { 0o060 } else { 0o040 };
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | group_bits))?;
    }
    Ok(())
}

/// The CRI mounts of a container's volumeMounts.
pub fn mounts(
    container: &Container,
    paths: &BTreeMap<String, PathBuf>,
) -> Result<Vec<cri::Mount>, MountError> {
    let mut mounts = Vec::new();
    for mount in container.volume_mounts.iter().flatten() {
        let Some(host) = paths.get(&mount.name) else {
            return Err(format!(
                "unable to find volume {:?} for container {:?}",
                mount.name, container.name
            ));
        };
        let mut host = host.clone();
        if let Some(sub) = mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
            if sub.split('/').any(|part| part == "..") || sub.starts_with('/') {
                return Err(format!(
                    "subPath {sub:?} must be a relative path without '..'"
                ));
            }
            host = host.join(sub);
            if !host.exists() {
                std::fs::create_dir_all(&host).map_err(io("create", &host))?;
            }
        }
        mounts.push(cri::Mount {
            container_path: mount.mount_path.clone(),
            host_path: host.display().to_string(),
            readonly: mount.read_only.unwrap_or(false),
            ..Default::default()
        });
    }
    Ok(mounts)
}

/// Unmounts and removes a pod's volume directories.
pub async fn teardown(host: &dyn Host, root: &Path, uid: &str) {
    let dir = pod_dir(root, uid);
    if !dir.exists() {
        return;
    }
    unmount_under(host, &dir).await;
    if let Err(error) = std::fs::remove_dir_all(&dir) {
        tracing::warn!(%error, dir = %dir.display(), "could not remove a pod's volumes");
    }
}

/// Unmounts every mount under `dir`, deepest first.
pub async fn unmount_under(host: &dyn Host, dir: &Path) {
    let mut under: Vec<String> = mount_points(host)
        .into_iter()
        .filter(|m| Path::new(m).starts_with(dir))
        .collect();
    under.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for mount in under {
        if let Err(error) = host.run(&Command::new("umount", [mount.as_str()])).await {
            tracing::warn!(%error, "could not unmount a volume");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(entries: &[(&str, &str)]) -> Files {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), (v.as_bytes().to_vec(), 0o644)))
            .collect()
    }

    #[test]
    fn the_atomic_writer_swaps_contents_in_one_rename() {
        let dir = tempfile::tempdir().expect("tempdir");
        let volume = dir.path().join("v");
        assert!(write_atomic(&volume, &files(&[("a", "1"), ("sub/b", "2")])).expect("write"));
        assert_eq!(std::fs::read_to_string(volume.join("a")).expect("a"), "1");
        assert_eq!(
            std::fs::read_to_string(volume.join("sub/b")).expect("b"),
            "2"
        );
        assert_eq!(
            std::fs::read_link(volume.join("a")).expect("link"),
            Path::new("..data/a")
        );
        assert!(
            !write_atomic(&volume, &files(&[("a", "1"), ("sub/b", "2")])).expect("same"),
            "unchanged"
        );
        assert!(write_atomic(&volume, &files(&[("a", "9")])).expect("update"));
        assert_eq!(std::fs::read_to_string(volume.join("a")).expect("a"), "9");
        assert!(!volume.join("sub").exists(), "a removed key goes");
        let stamps = std::fs::read_dir(&volume)
            .expect("dir")
            .flatten()
            .filter(|e| {
                let name = e.file_name().to_string_lossy().to_string();
                name.starts_with("..") && name != "..data"
            })
            .count();
        assert_eq!(stamps, 1, "the old contents are removed");
    }

    #[test]
    fn config_map_volumes_take_items_modes_and_optional() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .expect("pod");
        let volume: Volume = serde_json::from_value(serde_json::json!({
            "name": "cfg", "configMap": {"name": "cm", "defaultMode": 0o600, "items": [{"key": "x", "path": "dir/x.txt"}]}
        }))
        .expect("volume");
        let mut sources = Sources::default();
        sources.config_maps.insert(
            "cm".into(),
            Some(
                [
                    ("x".to_string(), "ex".to_string()),
                    ("y".to_string(), "why".to_string()),
                ]
                .into(),
            ),
        );
        let got = files_of(&pod, &volume, &sources, &Context::default())
            .expect("kind")
            .expect("files");
        assert_eq!(
            got,
            [("dir/x.txt".to_string(), (b"ex".to_vec(), 0o600))].into()
        );
        sources.config_maps.insert("cm".into(), None);
        let missing = files_of(&pod, &volume, &sources, &Context::default()).expect("kind");
        assert_eq!(missing, Err("configmap \"cm\" not found".to_string()));
    }

    #[test]
    fn mounts_follow_volume_mounts_and_refuse_escaping_sub_paths() {
        let container: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}]
        }))
        .expect("container");
        let paths: BTreeMap<String, PathBuf> =
            [("data".to_string(), PathBuf::from("/v/data"))].into();
        let got = mounts(&container, &paths).expect("mounts");
        assert_eq!(
            (
                got[0].container_path.as_str(),
                got[0].host_path.as_str(),
                got[0].readonly
            ),
            ("/data", "/v/data", true)
        );
        let escaping: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "volumeMounts": [{"name": "data", "mountPath": "/d", "subPath": "../etc"}]
        }))
        .expect("container");
        assert!(mounts(&escaping, &paths).is_err());
    }
}
