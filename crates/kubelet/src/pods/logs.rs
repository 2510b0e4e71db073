//! Container log rotation (upstream's `containerLogManager`): the runtime
//! writes each container's output to one file; every 10 s the agent
//! renames a file past `container_log_max_size` to
//! `<file>.<timestamp>`, has the runtime reopen it (CRI
//! ReopenContainerLog), and keeps at most `container_log_max_files` files
//! per container, the current one included.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::cri::{ContainerState, Runtime};

/// Upstream's defaults: 10 MiB, 5 files.
#[derive(Debug, Clone, Copy)]
pub struct Rotation {
    pub max_size: u64,
    pub max_files: usize,
}

impl Default for Rotation {
    fn default() -> Self {
        Rotation {
            max_size: 10 << 20,
            max_files: 5,
        }
    }
}

const PERIOD: Duration = Duration::from_secs(10);

/// The rotated files of `log`, oldest first.
fn rotated(log: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name()) else {
        return Vec::new();
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        })
        .collect();
    found.sort();
    found
}

/// Rotates `log` when it is past the size; whether it did.
pub fn rotate(log: &Path, rotation: Rotation, stamp: &str) -> std::io::Result<bool> {
    // Keep max_files - 1 rotated files beside the current one.
    let mut old = rotated(log);
    while old.len() + 1 > rotation.max_files.max(1) {
        std::fs::remove_file(old.remove(0))?;
    }
    let size = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
    if size <= rotation.max_size {
        return Ok(false);
    }
    if rotation.max_files <= 1 {
        std::fs::remove_file(log)?;
        return Ok(true);
    }
    let mut target = log.as_os_str().to_owned();
    target.push(format!(".{stamp}"));
    std::fs::rename(log, PathBuf::from(&target))?;
    let mut old = rotated(log);
    while old.len() + 1 > rotation.max_files {
        std::fs::remove_file(old.remove(0))?;
    }
    Ok(true)
}

/// Rotates the logs of every running container every 10 s until `stop`.
pub async fn run(runtime: Arc<dyn Runtime>, rotation: Rotation, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(PERIOD) => {}
        }
        let Ok(containers) = runtime.list_containers(None).await else {
            continue;
        };
        for container in containers
            .into_iter()
            .filter(|c| c.state == ContainerState::ContainerRunning)
        {
            let Ok(status) = runtime.container_status(&container.id).await else {
                continue;
            };
            if status.log_path.is_empty() {
                continue;
            }
            let stamp = chrono_stamp();
            match rotate(Path::new(&status.log_path), rotation, &stamp) {
                Ok(true) => {
                    if let Err(error) = runtime.reopen_container_log(&container.id).await {
                        tracing::warn!(%error, container = %container.id, "could not reopen a rotated log");
                    }
                }
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, log = %status.log_path, "could not rotate a container's log")
                }
            }
        }
    }
}

/// A sortable UTC timestamp for a rotated file's name (upstream:
/// `20060102-150405`).
fn chrono_stamp() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    now.strftime("%Y%m%d-%H%M%S").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_past_its_size_is_rotated_and_old_files_pruned() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("0.log");
        let rotation = Rotation {
            max_size: 10,
            max_files: 3,
        };
        std::fs::write(&log, "short").expect("write");
        assert!(!rotate(&log, rotation, "20260101-000000").expect("rotate"));
        for (i, stamp) in ["20260101-000001", "20260101-000002", "20260101-000003"]
            .iter()
            .enumerate()
        {
            std::fs::write(&log, format!("a line long enough {i}")).expect("write");
            assert!(rotate(&log, rotation, stamp).expect("rotate"));
        }
        let names: Vec<String> = rotated(&log)
            .iter()
            .map(|p| p.file_name().expect("name").to_string_lossy().to_string())
            .collect();
        assert_eq!(names, ["0.log.20260101-000002", "0.log.20260101-000003"]);
        assert!(!log.exists(), "the runtime reopens it");
    }
}
