//! `rudder agent --server URL --token TOKEN`: a node joining a cluster
//! (k3s's agent). The agent checks the server's CA against the join
//! token's hash, gets a node client certificate through a
//! CertificateSigningRequest as the token's bootstrap user (or reuses the
//! one it got before), and then runs exactly the agent `rudder server`
//! runs in-process — only its client is HTTPS. Also the node flags both
//! commands take, and `rudder token`.

use std::path::PathBuf;

use anyhow::Context;
use rudder_kubelet::bootstrap::JoinToken;
use tokio_util::sync::CancellationToken;

/// The flags of a node agent, the same for `rudder server` and `rudder
/// agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct NodeArgs {
    /// The name of this machine's node (default: the host name).
    #[arg(long, env = "RUDDER_NODE_NAME")]
    pub node_name: Option<String>,

    /// The agent uses this CRI runtime (`unix:///run/containerd/containerd.sock`)
    /// instead of starting its own containerd.
    #[arg(long)]
    pub container_runtime_endpoint: Option<String>,

    /// The node's address (default: the source address of the default route).
    #[arg(long)]
    pub node_ip: Option<std::net::IpAddr>,

    /// The agent's hard eviction thresholds, as upstream's kubelet takes
    /// them: the node reports MemoryPressure or DiskPressure below them.
    #[arg(long, default_value = "memory.available<100Mi,nodefs.available<10%")]
    pub eviction_hard: String,

    /// The bridge the agent attaches pods to; its nftables table has the
    /// same name. (Two agents on one machine need two.)
    #[arg(long, default_value = "rudder0")]
    pub cni_bridge: String,

    /// The port of the agent's HTTPS server (`kubectl logs` reaches it
    /// through the API server), as upstream's kubelet `--port`.
    #[arg(long, default_value_t = 10250)]
    pub kubelet_port: u16,

    /// Run no service proxy on this node (k3s's `--disable-kube-proxy`):
    /// Services' addresses answer only if something else programs them.
    #[arg(long)]
    pub disable_proxy: bool,

    /// Run no cluster DNS on this node (k3s's `--disable=coredns`; on
    /// `rudder server`, also no `kube-system/kube-dns` Service).
    #[arg(long)]
    pub disable_dns: bool,

    /// The cluster DNS address pods resolve with (`dnsPolicy:
    /// ClusterFirst`), as upstream's kubelet `--cluster-dns`.
    #[arg(long, default_value = "10.43.0.10")]
    pub cluster_dns: std::net::Ipv4Addr,

    /// The cluster's DNS domain.
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,

    /// The node's resolv.conf for pods (`dnsPolicy: Default`, and the
    /// search domains cluster pods add); one naming only loopback
    /// resolvers is replaced by systemd-resolved's upstream list.
    #[arg(long, default_value = "/etc/resolv.conf")]
    pub resolv_conf: PathBuf,

    /// A stream into a pod (exec, attach, port-forward) on which nothing
    /// moves this long is closed, as upstream's kubelet flag.
    #[arg(long, default_value = "4h", value_parser = crate::server::parse_duration)]
    pub streaming_connection_idle_timeout: std::time::Duration,
}

impl NodeArgs {
    /// The agent's options: its state under DATA_DIR/agent.
    pub fn options(
        &self,
        data_dir: PathBuf,
        cluster_cidr: &str,
        service_cidr: &str,
    ) -> anyhow::Result<rudder_kubelet::agent::Options> {
        let name = match &self.node_name {
            Some(name) => name.clone(),
            None => hostname()?,
        };
        let mut options = rudder_kubelet::agent::Options::new(&name, data_dir);
        options.container_runtime_endpoint = self.container_runtime_endpoint.clone();
        options.node_ip = self.node_ip;
        (
            options.eviction_memory_bytes,
            options.eviction_nodefs_percent,
        ) = parse_eviction_hard(&self.eviction_hard)
            .map_err(|e| anyhow::anyhow!("--eviction-hard: {e}"))?;
        options.kubelet_port = self.kubelet_port;
        options.cluster_dns = vec![self.cluster_dns];
        options.cluster_domain = self.cluster_domain.clone();
        options.resolv_conf = self.resolv_conf.clone();
        options.streaming_idle_timeout = self.streaming_connection_idle_timeout;
        options.bridge = self.cni_bridge.clone();
        options.nftables_table = self.cni_bridge.clone();
        options.cluster_cidr = cluster_cidr
            .parse()
            .map_err(|e| anyhow::anyhow!("--cluster-cidr: {e}"))?;
        options.service_cidr = service_cidr
            .parse()
            .map_err(|e| anyhow::anyhow!("--service-cidr: {e}"))?;
        Ok(options)
    }
}

#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// The server to join (`https://HOST:6443`).
    #[arg(long, env = "RUDDER_URL")]
    pub server: String,

    /// The join token (`rudder token` on the server prints it).
    #[arg(long, env = "RUDDER_TOKEN", conflicts_with = "token_file")]
    pub token: Option<String>,

    /// A file holding the join token.
    #[arg(long, env = "RUDDER_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,

    /// Where the agent keeps its state: its kubeconfig and key, containerd,
    /// CNI state, images and logs, all under DIR/agent.
    #[arg(long, env = "RUDDER_DATA_DIR", default_value = "/var/lib/rudder")]
    pub data_dir: PathBuf,

    #[command(flatten)]
    pub node: NodeArgs,

    /// The cluster's pod CIDR (blackholed on the node).
    #[arg(long, default_value = rudder_api::network::CLUSTER_CIDR)]
    pub cluster_cidr: String,

    /// The cluster's Service CIDR (blackholed on the node).
    #[arg(long, default_value = rudder_api::network::SERVICE_CIDR)]
    pub service_cidr: String,
}

impl AgentArgs {
    fn join_token(&self) -> anyhow::Result<JoinToken> {
        let text = match (&self.token, &self.token_file) {
            (Some(token), _) => token.clone(),
            (None, Some(file)) => std::fs::read_to_string(file)
                .with_context(|| format!("read --token-file {}", file.display()))?,
            (None, None) => anyhow::bail!("give the join token: --token or --token-file"),
        };
        Ok(JoinToken::parse(&text)?)
    }
}

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    let mut shutdown = crate::server::Shutdown::listen()?;
    let token = args.join_token()?;
    anyhow::ensure!(
        args.server.starts_with("https://"),
        "--server {}: expected https://HOST:PORT",
        args.server
    );
    crate::server::prepare_data_dir(&args.data_dir)?;
    let options = args.node.options(
        args.data_dir.clone(),
        &args.cluster_cidr,
        &args.service_cidr,
    )?;
    let agent_dir = args.data_dir.join("agent");
    let stop = CancellationToken::new();
    let client = tokio::select! {
        joined = join(&args.server, &token, &options.node_name, &agent_dir, &stop) => joined?,
        signal = shutdown.signalled() => return signal,
    };
    let mut options = options;
    tokio::select! {
        () = serve(&client, &mut options, &agent_dir) => {}
        signal = shutdown.signalled() => return signal,
    }
    let task = {
        let stop = stop.clone();
        let node = crate::server::NodeServices {
            proxy: !args.node.disable_proxy,
            dns: !args.node.disable_dns,
        };
        tokio::spawn(crate::server::run_agent(client, options, node, stop))
    };
    shutdown.signalled().await?;
    tracing::info!("shutting down");
    stop.cancel();
    task.await??;
    Ok(())
}

/// The node's client: joins (retrying while the server cannot be reached,
/// as k3s's agent waits for its server), or reuses the certificate it has.
async fn join(
    server: &str,
    token: &JoinToken,
    node: &str,
    agent_dir: &std::path::Path,
    stop: &CancellationToken,
) -> anyhow::Result<kube::Client> {
    use rudder_kubelet::bootstrap::{Error, node_client};
    loop {
        match node_client(server, token, node, agent_dir).await {
            Ok(client) => return Ok(client),
            // Refusals that waiting will not change.
            Err(error @ (Error::CaMismatch { .. } | Error::Token | Error::Refused { .. })) => {
                return Err(error.into());
            }
            Err(error) => {
                tracing::warn!(error = %format!("{error:#}"), "could not join {server} yet; retrying in 5s");
            }
        }
        tokio::select! {
            _ = stop.cancelled() => anyhow::bail!("stopped before joining"),
            _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
        }
    }
}

/// The agent's HTTPS server (logs): a serving certificate for its name and
/// address, asked of the cluster as the node itself, and the cluster CA
/// for its clients (the API server's kubelet client certificate). Without
/// one the agent runs without its server, saying why.
async fn serve(
    client: &kube::Client,
    options: &mut rudder_kubelet::agent::Options,
    agent_dir: &std::path::Path,
) {
    let node_ip = match options.node_ip {
        Some(ip) => ip,
        None => rudder_host::routes::node_ip(&rudder_host::System)
            .await
            .into(),
    };
    options.node_ip = Some(node_ip);
    let names = vec![options.node_name.clone(), node_ip.to_string()];
    let Some(client_ca_pem) = rudder_kubelet::bootstrap::cluster_ca(agent_dir) else {
        tracing::warn!("no cluster CA in the agent's kubeconfig: the agent's server stays off");
        return;
    };
    match rudder_kubelet::bootstrap::serving_certificate(
        client.clone(),
        &options.node_name,
        &names,
        agent_dir,
    )
    .await
    {
        Ok((cert_pem, key_pem)) => {
            options.serving_tls = Some(rudder_kubelet::server::ServingTls {
                cert_pem,
                key_pem,
                client_ca_pem,
            });
        }
        Err(error) => {
            tracing::warn!(error = %format!("{error:#}"), "no serving certificate: the agent's server (logs) stays off");
        }
    }
}

/// `memory.available<100Mi,nodefs.available<10%` as (bytes, percent);
/// a signal left out keeps upstream's default.
pub fn parse_eviction_hard(text: &str) -> Result<(u64, u64), String> {
    let (mut memory, mut nodefs) = (100u64 << 20, 10u64);
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (signal, value) = part
            .split_once('<')
            .ok_or_else(|| format!("{part:?}: expected SIGNAL<VALUE"))?;
        match signal {
            "memory.available" => {
                let q = rudder_api::quantity::Quantity::parse(value)
                    .map_err(|e| format!("{value:?}: {e}"))?;
                memory =
                    u64::try_from(q.value()).map_err(|_| format!("{value:?}: out of range"))?;
            }
            "nodefs.available" => {
                nodefs = value
                    .strip_suffix('%')
                    .and_then(|p| p.parse::<u64>().ok())
                    .filter(|p| *p <= 100)
                    .ok_or_else(|| format!("{value:?}: expected a percentage"))?;
            }
            other => return Err(format!("unsupported signal {other:?}")),
        }
    }
    Ok((memory, nodefs))
}

/// This machine's host name, lower-cased as a node name must be.
fn hostname() -> anyhow::Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("read the host name")?
        .trim()
        .to_lowercase();
    anyhow::ensure!(!name.is_empty(), "the host name is empty: give --node-name");
    Ok(name)
}

#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    /// The server's data directory.
    #[arg(long, env = "RUDDER_DATA_DIR", default_value = "/var/lib/rudder")]
    pub data_dir: PathBuf,
}

/// `rudder token`: prints the server's join token.
pub fn token(args: TokenArgs) -> anyhow::Result<()> {
    let path = crate::join::token_path(&args.data_dir);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "read {} (the server writes it at its first start)",
            path.display()
        )
    })?;
    println!("{}", text.trim());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: AgentArgs,
    }

    #[test]
    fn the_agent_takes_k3s_shaped_flags() {
        let token = format!("K10{}::abcdef.0123456789abcdef", "a".repeat(64));
        let cli = Cli::parse_from([
            "agent",
            "--server",
            "https://10.0.0.1:6443",
            "--token",
            &token,
            "--node-name",
            "worker-1",
            "--cni-bridge",
            "rudj0",
        ]);
        let args = cli.args;
        assert_eq!(
            args.join_token().expect("token").bootstrap,
            "abcdef.0123456789abcdef"
        );
        let options = args
            .node
            .options(
                args.data_dir.clone(),
                &args.cluster_cidr,
                &args.service_cidr,
            )
            .expect("options");
        assert_eq!(options.node_name, "worker-1");
        assert_eq!(options.bridge, "rudj0");
        assert!(!options.control_plane);
        let bad = Cli::parse_from(["agent", "--server", "https://x:1", "--token", "nope"]);
        assert!(bad.args.join_token().is_err());
    }
}
