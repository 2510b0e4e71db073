//! Test and benchmark support (feature `testing`): start `rudder server` as
//! a process of its own, and connect to an API server with kube-rs once it
//! is ready.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A loopback port that was free a moment ago.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts `binary server` on loopback, on `port`, with its state in
/// `data_dir`; its output is discarded.
pub fn spawn_server(binary: &Path, data_dir: &Path, port: u16) -> std::io::Result<Child> {
    spawn_server_with(binary, data_dir, port, &[])
}

/// The same, with more `rudder server` flags (`--disable-controllers`).
pub fn spawn_server_with(
    binary: &Path,
    data_dir: &Path,
    port: u16,
    extra: &[&str],
) -> std::io::Result<Child> {
    Command::new(binary)
        .args([
            "server",
            "--disable-agent",
            "--bind-address",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--data-dir",
        ])
        .arg(data_dir)
        .args(extra)
        .env("RUDDER_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// A kube-rs client from the admin kubeconfig at `kubeconfig`, once the
/// server answers `/readyz`. The client does not retry 429s and 503s: tests
/// look at the server's own answers.
pub async fn connect(kubeconfig: &Path, within: Duration) -> anyhow::Result<kube::Client> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(kc) = kube::config::Kubeconfig::read_from(kubeconfig)
            && let Ok(mut config) =
                kube::Config::from_custom_kubeconfig(kc, &Default::default()).await
        {
            config.default_retry = false;
            if let Ok(client) = kube::Client::try_from(config) {
                let request = http::Request::get("/readyz").body(Vec::new())?;
                if client.request_text(request).await.ok().as_deref() == Some("ok") {
                    return Ok(client);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    anyhow::bail!(
        "the API server with kubeconfig {} did not become ready",
        kubeconfig.display()
    )
}
