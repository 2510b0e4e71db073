//! containerd as the agent's child process (k3s's shape): a config written
//! under the data dir (its own root, state and socket; the CRI plugin with
//! the project's pause image, cgroupfs, Debian's CNI plugins and the
//! agent's CNI config dir), started, waited for on CRI `Version`,
//! restarted when it dies, stopped with the agent.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::cri::Runtime;

/// Where a managed containerd keeps everything.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `<data-dir>/agent/containerd`
    pub dir: PathBuf,
    /// CNI plugin binaries (Debian: `/usr/lib/cni`).
    pub cni_bin_dir: PathBuf,
    /// Where the agent writes its CNI conflist.
    pub cni_conf_dir: PathBuf,
    pub sandbox_image: String,
    /// How long a silent stream (exec, attach, port-forward) stays open
    /// on the runtime's streaming server.
    pub stream_idle_timeout: Duration,
}

impl Layout {
    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.toml")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("containerd.log")
    }

    pub fn pid_path(&self) -> PathBuf {
        self.dir.join("containerd.pid")
    }

    /// containerd's config (version 2). The keys that matter on this kind
    /// of machine are in `shared/reference/node-runtime.md`:
    /// `restrict_oom_score_adj` (no CAP_SYS_RESOURCE), cgroupfs
    /// (`SystemdCgroup = false`), Debian's plugin dir.
    pub fn config(&self) -> String {
        let dir = self.dir.display();
        let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
        format!(
            r#"# Written by the rudder agent at every start; edits are lost.
version = 2
root = "{dir}/root"
state = "{dir}/state"

[grpc]
  address = "{socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{dir}/opt"

[{cri}]
  sandbox_image = "{sandbox}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  stream_idle_timeout = "{idle}s"
  enable_cdi = false
  netns_mounts_under_state_dir = true

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{bin}"
  conf_dir = "{conf}"
"#,
            socket = self.socket().display(),
            sandbox = self.sandbox_image,
            bin = self.cni_bin_dir.display(),
            conf = self.cni_conf_dir.display(),
            idle = self.stream_idle_timeout.as_secs().max(1),
        )
    }
}

/// A failed start of containerd.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("containerd did not answer CRI Version within {0:?} (its log: {1})")]
    NotReady(Duration, PathBuf),
    #[error("containerd exited at start ({status}); its log: {log}")]
    Exited { status: String, log: PathBuf },
}

/// How long containerd may take to serve CRI after it starts.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running, supervised containerd.
#[derive(Debug)]
pub struct Containerd {
    layout: Layout,
    stop: CancellationToken,
    supervisor: tokio::task::JoinHandle<()>,
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { what, path, source }
}

/// Stops a containerd an earlier agent of this data dir left running (an
/// agent killed with SIGKILL cannot stop its child): two on one root would
/// fight over its database. Its containers run on under their shims.
async fn stop_leftover(layout: &Layout) {
    let Some(pid) = std::fs::read_to_string(layout.pid_path())
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
    else {
        return;
    };
    let ours = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|cmdline| {
            let config = layout.config_path().display().to_string();
            cmdline
                .split(|b| *b == 0)
                .any(|arg| arg == config.as_bytes())
        })
        .unwrap_or(false);
    let Some(process) = rustix::process::Pid::from_raw(pid).filter(|_| ours) else {
        return;
    };
    tracing::info!(pid, "stopping the containerd an earlier agent left running");
    let _ = rustix::process::kill_process(process, rustix::process::Signal::TERM);
    // Gone, or a zombie its new parent has not reaped yet.
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().to_string())
            })
            .is_some_and(|rest| !rest.starts_with('Z'))
    };
    for _ in 0..100 {
        if !alive() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = rustix::process::kill_process(process, rustix::process::Signal::KILL);
    tokio::time::sleep(Duration::from_millis(200)).await;
}

async fn spawn(layout: &Layout) -> Result<tokio::process::Child, Error> {
    stop_leftover(layout).await;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(layout.log_path())
        .map_err(io("open containerd's log", &layout.log_path()))?;
    let log_err = log
        .try_clone()
        .map_err(io("open containerd's log", &layout.log_path()))?;
    // A socket left by a containerd that was killed would make it refuse
    // to start.
    let _ = std::fs::remove_file(layout.socket());
    // Its shims and runc (in /usr/sbin) are found on the system PATH.
    let mut command = rudder_host::system_command("containerd");
    command
        .arg("--config")
        .arg(layout.config_path())
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // The shims containerd starts must outlive it (they hold the
        // containers): its own process group, not the agent's, so a ^C to
        // the agent does not reach them.
        .process_group(0)
        .kill_on_drop(false);
    let child = command
        .spawn()
        .map_err(io("start containerd with", &layout.config_path()))?;
    if let Some(pid) = child.id() {
        std::fs::write(layout.pid_path(), pid.to_string())
            .map_err(io("write containerd's pid to", &layout.pid_path()))?;
    }
    Ok(child)
}

async fn wait_ready(
    runtime: &dyn Runtime,
    child: &mut tokio::process::Child,
    layout: &Layout,
) -> Result<(), Error> {
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(version) = runtime.version().await {
            tracing::info!(
                runtime = %version.runtime_name,
                version = %version.runtime_version,
                "containerd ready"
            );
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Error::Exited {
                status: status.to_string(),
                log: layout.log_path(),
            });
        }
        if tokio::time::Instant::now() > deadline {
            return Err(Error::NotReady(READY_TIMEOUT, layout.log_path()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether `mountinfo` (as `/proc/self/mountinfo` reads) has a cgroup v1
/// or v2 file system mounted, without which runc starts no container.
fn has_cgroups(mountinfo: &str) -> bool {
    mountinfo.lines().any(|line| {
        line.split_once(" - ")
            .and_then(|(_, fields)| fields.split_whitespace().next())
            .is_some_and(|fs| fs == "cgroup" || fs == "cgroup2")
    })
}

/// Stops containerd: SIGTERM, then SIGKILL after 10 s. The containers go
/// on running under their shims, as they do when k3s stops.
async fn terminate(child: &mut tokio::process::Child) {
    if let Some(pid) = child
        .id()
        .and_then(|p| rustix::process::Pid::from_raw(p as i32))
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        if tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .is_ok()
        {
            return;
        }
    }
    let _ = child.kill().await;
}

impl Containerd {
    /// Writes the config, starts containerd and waits until it serves CRI;
    /// then keeps it running (restarted a second after it dies) until
    /// [`stop`](Self::stop).
    pub async fn start(layout: Layout, runtime: Arc<dyn Runtime>) -> Result<Self, Error> {
        if let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo")
            && !has_cgroups(&mountinfo)
        {
            tracing::warn!(
                "no cgroup file system is mounted (/sys/fs/cgroup): runc will refuse to start containers"
            );
        }
        for dir in [&layout.dir, &layout.cni_conf_dir] {
            std::fs::create_dir_all(dir).map_err(io("create", dir))?;
        }
        std::fs::write(layout.config_path(), layout.config())
            .map_err(io("write containerd's config", &layout.config_path()))?;
        let mut child = spawn(&layout).await?;
        if let Err(error) = wait_ready(runtime.as_ref(), &mut child, &layout).await {
            terminate(&mut child).await;
            return Err(error);
        }
        let stop = CancellationToken::new();
        let supervisor = tokio::spawn(supervise(layout.clone(), child, runtime, stop.clone()));
        Ok(Containerd {
            layout,
            stop,
            supervisor,
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Stops containerd (its containers keep running).
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.supervisor.await;
    }
}

async fn supervise(
    layout: Layout,
    mut child: tokio::process::Child,
    runtime: Arc<dyn Runtime>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => {
                terminate(&mut child).await;
                return;
            }
            status = child.wait() => {
                tracing::warn!(status = ?status.ok(), log = %layout.log_path().display(), "containerd exited; restarting it");
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        match spawn(&layout).await {
            Ok(mut next) => match wait_ready(runtime.as_ref(), &mut next, &layout).await {
                Ok(()) => child = next,
                Err(error) => {
                    tracing::error!(%error, "containerd did not come back");
                    terminate(&mut next).await;
                    child = next;
                }
            },
            Err(error) => {
                tracing::error!(%error, "could not restart containerd");
                // Try again after the pause; `child` has exited, so its
                // wait returns at once.
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_keeps_containerd_inside_the_data_dir() {
        let layout = Layout {
            dir: "/d/agent/containerd".into(),
            cni_bin_dir: "/usr/lib/cni".into(),
            cni_conf_dir: "/d/agent/cni".into(),
            sandbox_image: "rudder.local/pause:1".into(),
            stream_idle_timeout: Duration::from_secs(4 * 3600),
        };
        let config = layout.config();
        for line in [
            "root = \"/d/agent/containerd/root\"",
            "state = \"/d/agent/containerd/state\"",
            "address = \"/d/agent/containerd/containerd.sock\"",
            "sandbox_image = \"rudder.local/pause:1\"",
            "restrict_oom_score_adj = true",
            "SystemdCgroup = false",
            "bin_dir = \"/usr/lib/cni\"",
            "conf_dir = \"/d/agent/cni\"",
            "snapshotter = \"overlayfs\"",
        ] {
            assert!(config.contains(line), "{line} missing from\n{config}");
        }
    }

    #[test]
    fn cgroups_are_found_in_mountinfo_by_file_system_type() {
        let v2 = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                  30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let v1 = "31 30 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        // A mount point named like a cgroup is not one.
        let neither = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                       40 27 0:30 / /sys/fs/cgroup rw,nosuid - tmpfs cgroup rw\n";
        assert!(has_cgroups(v2));
        assert!(has_cgroups(v1));
        assert!(!has_cgroups(neither));
        assert!(!has_cgroups(""));
    }
}
