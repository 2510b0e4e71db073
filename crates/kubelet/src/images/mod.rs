//! Images without a registry: the pause image built from the project's own
//! source, single-layer images packed from host files (Debian's static
//! busybox for tests), written as docker-archive tarballs, and imported
//! into the runtime (k3s's air-gap pattern: every archive in
//! `<data-dir>/agent/images/` at start, and `rudder images import`).

pub mod credentials;
pub mod gc;
pub mod tar;

use std::path::{Path, PathBuf};

use serde_json::json;
use tar::Entry;

/// The sandbox image every pod's infrastructure container runs.
pub const PAUSE_IMAGE: &str = "rudder.local/pause:1";

/// The pause program, built by build.rs from `pause/pause.c`.
const PAUSE_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pause"));

/// A failed image operation, naming it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("import {path}: {message}")]
    Import { path: PathBuf, message: String },
}

/// A one-layer image: its files and how it runs.
#[derive(Debug, Clone, Default)]
pub struct Image {
    /// The reference it is tagged with (`rudder.local/busybox:1`).
    pub name: String,
    pub files: Vec<Entry>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Image {
    /// The project's pause image.
    pub fn pause() -> Image {
        Image {
            name: PAUSE_IMAGE.into(),
            files: vec![Entry::File {
                path: "pause".into(),
                mode: 0o755,
                data: PAUSE_BINARY.to_vec(),
            }],
            entrypoint: vec!["/pause".into()],
            ..Image::default()
        }
    }

    /// An image of a static busybox (`/bin/busybox` and a link per applet
    /// in `applets`), named `name`, running `sh` by default.
    pub fn busybox(name: &str, busybox: Vec<u8>, applets: &[&str]) -> Image {
        let mut files = vec![
            Entry::Dir {
                path: "bin".into(),
                mode: 0o755,
            },
            Entry::Dir {
                path: "tmp".into(),
                mode: 0o1777,
            },
            Entry::Dir {
                path: "etc".into(),
                mode: 0o755,
            },
            Entry::File {
                path: "etc/passwd".into(),
                mode: 0o644,
                data: b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
                    .to_vec(),
            },
            Entry::File {
                path: "etc/group".into(),
                mode: 0o644,
                data: b"root:x:0:\nnogroup:x:65534:\n".to_vec(),
            },
            Entry::File {
                path: "bin/busybox".into(),
                mode: 0o755,
                data: busybox,
            },
        ];
        files.extend(applets.iter().map(|applet| Entry::Symlink {
            path: format!("bin/{applet}"),
            target: "busybox".into(),
        }));
        Image {
            name: name.into(),
            files,
            cmd: vec!["sh".into()],
            env: vec!["PATH=/bin".into()],
            ..Image::default()
        }
    }

    /// The image as a docker-archive tarball (what `docker save` writes:
    /// `manifest.json`, the config, one `layer.tar`).
    pub fn docker_archive(&self) -> Vec<u8> {
        let layer = tar::archive(&self.files);
        let diff_id = sha256_hex(&layer);
        let config = json!({
            "architecture": go_arch(),
            "os": "linux",
            "config": {
                "Entrypoint": (!self.entrypoint.is_empty()).then_some(&self.entrypoint),
                "Cmd": (!self.cmd.is_empty()).then_some(&self.cmd),
                "Env": self.env,
                "WorkingDir": "/",
            },
            "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{diff_id}")]},
            "history": [{"created_by": "rudder images"}],
        });
        let config = serde_json::to_vec(&config).unwrap_or_default();
        let config_name = format!("{}.json", sha256_hex(&config));
        let manifest = json!([{
            "Config": config_name,
            "RepoTags": [self.name],
            "Layers": [format!("{diff_id}/layer.tar")],
        }]);
        tar::archive(&[
            Entry::Dir {
                path: diff_id.clone(),
                mode: 0o755,
            },
            Entry::File {
                path: format!("{diff_id}/layer.tar"),
                mode: 0o644,
                data: layer,
            },
            Entry::File {
                path: config_name,
                mode: 0o644,
                data: config,
            },
            Entry::File {
                path: "manifest.json".into(),
                mode: 0o644,
                data: serde_json::to_vec(&manifest).unwrap_or_default(),
            },
        ])
    }

    /// Writes the docker-archive to `path`.
    pub fn write(&self, path: &Path) -> Result<(), Error> {
        std::fs::write(path, self.docker_archive()).map_err(|source| Error::Io {
            what: "write the image archive",
            path: path.to_path_buf(),
            source,
        })
    }
}

/// This machine's architecture as OCI (Go) names it.
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        other => other,
    }
}

/// Imports docker-archive or OCI archives into containerd's `k8s.io`
/// namespace (the one its CRI plugin serves) through containerd's own
/// client, `ctr`.
pub async fn import(
    host: &dyn rudder_host::Host,
    containerd_socket: &Path,
    archives: &[PathBuf],
) -> Result<(), Error> {
    for archive in archives {
        let socket = containerd_socket.display().to_string();
        let path = archive.display().to_string();
        let command = rudder_host::Command::new(
            "ctr",
            [
                "--address",
                socket.as_str(),
                "--namespace",
                "k8s.io",
                "images",
                "import",
                path.as_str(),
            ],
        );
        host.run(&command).await.map_err(|e| Error::Import {
            path: archive.clone(),
            message: match e {
                rudder_host::Error::Command { message, .. } => message,
                other => other.to_string(),
            },
        })?;
        tracing::info!(archive = %archive.display(), "image archive imported");
    }
    Ok(())
}

/// The archives in an images directory (`*.tar`), in name order.
pub fn archives_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tar"))
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_docker_archive_names_its_config_and_layer_by_digest() {
        let image = Image::pause();
        let bytes = image.docker_archive();
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("p.tar"), &bytes).expect("write");
        let status = std::process::Command::new("tar")
            .arg("-xf")
            .arg(dir.path().join("p.tar"))
            .arg("-C")
            .arg(dir.path())
            .status();
        if status.is_err() {
            eprintln!("skipped: no tar binary");
            return;
        }
        let manifest: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.path().join("manifest.json")).expect("manifest"),
        )
        .expect("json");
        assert_eq!(manifest[0]["RepoTags"][0], PAUSE_IMAGE);
        let layer_path = manifest[0]["Layers"][0].as_str().expect("layer");
        let layer = std::fs::read(dir.path().join(layer_path)).expect("layer");
        let config_name = manifest[0]["Config"].as_str().expect("config");
        let config_bytes = std::fs::read(dir.path().join(config_name)).expect("config");
        assert_eq!(config_name, format!("{}.json", sha256_hex(&config_bytes)));
        let config: serde_json::Value = serde_json::from_slice(&config_bytes).expect("json");
        assert_eq!(
            config["rootfs"]["diff_ids"][0],
            format!("sha256:{}", sha256_hex(&layer))
        );
        assert_eq!(config["config"]["Entrypoint"][0], "/pause");
        assert_eq!(
            image.docker_archive(),
            bytes,
            "the same image, the same bytes"
        );
    }
}
