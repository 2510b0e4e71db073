//! A real etcd for tests: started on loopback on random ports in a temporary
//! directory, killed and removed on drop.

use std::fs::OpenOptions;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running single-member etcd.
#[derive(Debug)]
pub struct EtcdServer {
    child: Child,
    client_port: u16,
    peer_port: u16,
    extra: Vec<String>,
    dir: tempfile::TempDir,
}

/// A loopback port that was free a moment ago.
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn spawn(dir: &Path, client_port: u16, peer_port: u16, extra: &[String]) -> std::io::Result<Child> {
    let binary = std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into());
    let client = format!("http://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("etcd.log"))?;
    Command::new(&binary)
        .args(["--name", "test", "--data-dir"])
        .arg(dir.join("data"))
        .args([
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args([
            "--initial-cluster",
            &format!("test={peer}"),
            "--log-level",
            "warn",
        ])
        .args(["--logger", "zap"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .map_err(|e| std::io::Error::new(e.kind(), format!("start {binary}: {e}")))
}

impl EtcdServer {
    /// Starts `etcd` (from `$ETCD_BIN` or the PATH) and waits until it answers.
    pub async fn start() -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Self::start_with(&[]).await
    }

    /// Starts etcd with extra flags.
    pub async fn start_with(
        extra: &[&str],
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        for _attempt in 0..5 {
            let dir = tempfile::tempdir()?;
            let (client_port, peer_port) = (free_port()?, free_port()?);
            let child = spawn(dir.path(), client_port, peer_port, &extra)?;
            let mut server = EtcdServer {
                child,
                client_port,
                peer_port,
                extra: extra.clone(),
                dir,
            };
            if server.wait_ready(Duration::from_secs(20)).await {
                return Ok(server);
            }
            // A port taken between picking it and etcd binding it: try again.
            let _ = server.child.kill();
            let _ = server.child.wait();
        }
        Err("etcd did not become ready".into())
    }

    /// Kills etcd (SIGKILL) and starts it again on the same ports and data.
    pub async fn restart(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.child.kill()?;
        self.child.wait()?;
        self.child = spawn(
            self.dir.path(),
            self.client_port,
            self.peer_port,
            &self.extra,
        )?;
        if self.wait_ready(Duration::from_secs(20)).await {
            Ok(())
        } else {
            Err("etcd did not come back".into())
        }
    }

    /// Kills etcd (SIGKILL), leaving its data: the store behind it stops
    /// answering until [`restart`](EtcdServer::restart).
    pub fn stop(&mut self) -> std::io::Result<()> {
        self.child.kill()?;
        self.child.wait().map(|_| ())
    }

    async fn wait_ready(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(mut client) = etcd_client::Client::connect([self.endpoint()], None).await
                && client.get("ready-probe", None).await.is_ok()
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// `etcd://127.0.0.1:PORT`, as `--store` takes it.
    pub fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.client_port)
    }

    /// The directory etcd keeps its data and log in.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The etcd version, from `etcd --version`.
    pub fn version() -> Option<String> {
        let binary = std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into());
        let out = Command::new(binary).arg("--version").output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| l.strip_prefix("etcd Version: "))
            .map(|v| v.trim().to_string())
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
