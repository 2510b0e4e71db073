//! The [`Host`] trait and [`System`], the real machine behind it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// A failed host operation, naming it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A command that could not run or exited non-zero; `message` is what
    /// it printed on stderr (or why it could not start).
    #[error("{command}: {message}")]
    Command { command: String, message: String },
    #[error("{what} {path}: {source}")]
    File {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One external command: a program, its arguments, and what to write on
/// its stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub program: String,
    pub args: Vec<String>,
    pub stdin: Option<String>,
}

impl Command {
    pub fn new<I, S>(program: &str, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Command {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            stdin: None,
        }
    }

    pub fn stdin(mut self, text: impl Into<String>) -> Command {
        self.stdin = Some(text.into());
        self
    }
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.program)?;
        for arg in &self.args {
            write!(f, " {arg}")?;
        }
        Ok(())
    }
}

/// The node's host: commands and files. Implementations must be cheap to
/// share (`Arc<dyn Host>`) and safe to call from many tasks at once.
#[async_trait::async_trait]
pub trait Host: Send + Sync + std::fmt::Debug {
    /// Runs `command` to completion: what it printed on stdout, or an error
    /// carrying its stderr when it exited non-zero.
    async fn run(&self, command: &Command) -> Result<String, Error>;

    /// Writes `contents` to `path` (a sysctl under `/proc/sys`, a file the
    /// node owns outside its data directory).
    fn write_file(&self, path: &Path, contents: &str) -> Result<(), Error>;

    /// Reads `path` as text.
    fn read_file(&self, path: &Path) -> Result<String, Error>;
}

/// The real machine.
#[derive(Debug, Default, Clone, Copy)]
pub struct System;

#[async_trait::async_trait]
impl Host for System {
    async fn run(&self, command: &Command) -> Result<String, Error> {
        use tokio::io::AsyncWriteExt;
        let failed = |message: String| Error::Command {
            command: command.to_string(),
            message,
        };
        let mut child = system_command(&command.program)
            .args(&command.args)
            .stdin(if command.stdin.is_some() {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| failed(e.to_string()))?;
        // Written from a task of its own: a program that fills its stdout
        // pipe before reading all of its stdin would otherwise deadlock
        // with us.
        let feeder = match (command.stdin.clone(), child.stdin.take()) {
            (Some(text), Some(mut pipe)) => Some(tokio::spawn(async move {
                let written = pipe.write_all(text.as_bytes()).await;
                drop(pipe);
                written
            })),
            _ => None,
        };
        let output = child
            .wait_with_output()
            .await
            .map_err(|e| failed(e.to_string()))?;
        if let Some(feeder) = feeder {
            match feeder.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) if output.status.success() => return Err(failed(error.to_string())),
                _ => {}
            }
        }
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
            Err(failed(if stderr.is_empty() {
                output.status.to_string()
            } else {
                stderr
            }))
        }
    }

    fn write_file(&self, path: &Path, contents: &str) -> Result<(), Error> {
        std::fs::write(path, contents).map_err(|source| Error::File {
            what: "write",
            path: path.to_path_buf(),
            source,
        })
    }

    fn read_file(&self, path: &Path) -> Result<String, Error> {
        std::fs::read_to_string(path).map_err(|source| Error::File {
            what: "read",
            path: path.to_path_buf(),
            source,
        })
    }
}

/// The system directories the node's tools live in on Debian (`nft`, `ip`,
/// and `runc`, which containerd runs).
const SYSTEM_PATH: [&str; 3] = ["/usr/local/sbin", "/usr/sbin", "/sbin"];

/// `path` with the system directories it lacks appended: a shell that is
/// not a login shell (`env -i`, cron, some service managers) leaves
/// `/usr/sbin` out, and the node's nftables rules then failed with "No
/// such file or directory" and containerd could start no pod.
fn with_system_path(path: Option<OsString>) -> OsString {
    let mut dirs: Vec<PathBuf> = path
        .as_deref()
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    for dir in SYSTEM_PATH {
        if !dirs.iter().any(|d| d.as_os_str() == dir) {
            dirs.push(dir.into());
        }
    }
    std::env::join_paths(dirs).unwrap_or_else(|_| path.unwrap_or_default())
}

/// A command for one of the node's system tools, or a long-running child
/// (containerd, whose children inherit the same `PATH`), found and run
/// with the system directories on its `PATH`. What runs to completion
/// goes through [`Host::run`] instead.
pub fn system_command(program: &str) -> tokio::process::Command {
    let path = with_system_path(std::env::var_os("PATH"));
    let mut command = tokio::process::Command::new(resolve(program, &path));
    command.env("PATH", path);
    command
}

/// The same for a synchronous caller (a `Drop`).
pub fn system_command_blocking(program: &str) -> std::process::Command {
    let path = with_system_path(std::env::var_os("PATH"));
    let mut command = std::process::Command::new(resolve(program, &path));
    command.env("PATH", path);
    command
}

/// `program`'s file on `path`, when it has no directory of its own and is
/// found there; else `program` as given.
///
/// Why not leave the lookup to the spawn: the standard library starts a
/// child with `posix_spawn` (no copy of the parent) only when it need not
/// search a `PATH` the child's environment changes; otherwise it forks,
/// and forking a process of a few hundred megabytes (the server, with the
/// control plane in it) cost every `nft` call ~20 ms — the largest part of
/// a Service change's latency.
fn resolve(program: &str, path: &std::ffi::OsStr) -> PathBuf {
    if program.contains('/') {
        return PathBuf::from(program);
    }
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
        .unwrap_or_else(|| PathBuf::from(program))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_directories_are_appended_once() {
        let path = with_system_path(Some("/root/.cargo/bin:/usr/bin:/sbin".into()));
        assert_eq!(
            path,
            "/root/.cargo/bin:/usr/bin:/sbin:/usr/local/sbin:/usr/sbin"
        );
        assert_eq!(with_system_path(None), "/usr/local/sbin:/usr/sbin:/sbin");
    }

    #[test]
    fn programs_are_found_on_the_system_path_and_paths_kept() {
        let path = with_system_path(Some("/usr/bin:/bin".into()));
        assert_eq!(
            resolve("sh", &path).parent().map(|p| p.is_absolute()),
            Some(true)
        );
        assert_eq!(resolve("/opt/x/tool", &path), PathBuf::from("/opt/x/tool"));
        assert_eq!(
            resolve("rudder-no-such-program", &path),
            PathBuf::from("rudder-no-such-program")
        );
    }

    #[tokio::test]
    async fn a_command_answers_its_stdout_or_its_stderr() {
        let echo = Command::new("sh", ["-c", "cat; echo done"]).stdin("in ");
        assert_eq!(System.run(&echo).await.expect("runs"), "in done\n");
        let failing = Command::new("sh", ["-c", "echo bad >&2; exit 3"]);
        let error = System.run(&failing).await.expect_err("fails");
        assert_eq!(error.to_string(), "sh -c echo bad >&2; exit 3: bad");
        let missing = Command::new("rudder-no-such-program", Vec::<String>::new());
        assert!(System.run(&missing).await.is_err());
    }

    #[tokio::test]
    async fn a_large_stdin_does_not_deadlock_against_a_full_stdout() {
        let text = "x".repeat(1 << 20);
        let cat = Command::new("cat", Vec::<String>::new()).stdin(text.clone());
        assert_eq!(System.run(&cat).await.expect("runs").len(), text.len());
    }
}
