//! `rudder images`: import docker-archive / OCI archives into the node's
//! containerd (k3s's air-gap pattern), and pack local single-layer images
//! (the static busybox tests run); and `rudder killall`.

use std::path::PathBuf;

use anyhow::Context;
use rudder_kubelet::images::Image;

#[derive(Debug, clap::Subcommand)]
pub enum ImagesCommand {
    /// Import image archives into the agent's containerd (it must be
    /// running: `rudder server` or `rudder agent`). Archives in
    /// DATA_DIR/agent/images/ are imported at every start.
    Import {
        /// docker-archive or OCI archive files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[arg(long, env = "RUDDER_DATA_DIR", default_value = "/var/lib/rudder")]
        data_dir: PathBuf,
        /// containerd's socket (default: the agent's, under DATA_DIR).
        #[arg(long)]
        address: Option<PathBuf>,
    },
    /// Pack a static busybox as a one-layer image archive (docker-archive).
    PackBusybox {
        /// Where to write the archive.
        output: PathBuf,
        /// The image's name.
        #[arg(long, default_value = "rudder.local/busybox:1")]
        name: String,
        /// The static busybox binary (Debian's busybox-static).
        #[arg(long, default_value = "/bin/busybox")]
        busybox: PathBuf,
    },
}

/// The applets the busybox image links (what tests and examples run).
/// `tar` is what `kubectl cp` runs; `stty` what a terminal's size shows.
const APPLETS: &[&str] = &[
    "ash", "cat", "chmod", "cmp", "cp", "cut", "date", "dd", "df", "du", "echo", "env", "false",
    "find", "grep", "head", "hostname", "httpd", "id", "ip", "kill", "ln", "ls", "md5sum", "mkdir",
    "mv", "nc", "nslookup", "ping", "printf", "ps", "rm", "sed", "seq", "sh", "sleep", "sort",
    "stat", "stty", "tail", "tar", "tee", "test", "timeout", "touch", "tr", "true", "tty", "uname",
    "wc", "wget", "whoami", "xargs", "yes",
];

pub async fn run(command: ImagesCommand) -> anyhow::Result<()> {
    match command {
        ImagesCommand::Import {
            files,
            data_dir,
            address,
        } => {
            let socket = address.unwrap_or_else(|| {
                rudder_kubelet::agent::Options::new("", data_dir)
                    .layout()
                    .socket()
            });
            rudder_kubelet::images::import(&rudder_host::System, &socket, &files).await?;
            Ok(())
        }
        ImagesCommand::PackBusybox {
            output,
            name,
            busybox,
        } => {
            let binary = std::fs::read(&busybox)
                .with_context(|| format!("read {} (Debian: busybox-static)", busybox.display()))?;
            Image::busybox(&name, binary, APPLETS).write(&output)?;
            println!("{name} -> {}", output.display());
            Ok(())
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct KillallArgs {
    #[arg(long, env = "RUDDER_DATA_DIR", default_value = "/var/lib/rudder")]
    data_dir: PathBuf,
    /// The agent's bridge (and nftables table), as given to `rudder server`.
    #[arg(long, default_value = "rudder0")]
    cni_bridge: String,
}

pub async fn killall(args: KillallArgs) -> anyhow::Result<()> {
    let mut options = rudder_kubelet::agent::Options::new("", args.data_dir);
    options.bridge = args.cni_bridge.clone();
    options.nftables_table = args.cni_bridge;
    rudder_kubelet::agent::killall(&options).await?;
    if let Err(error) = rudder_proxy::cleanup(&*options.host).await {
        tracing::warn!(%error, "could not remove the service proxy's rules");
    }
    Ok(())
}
