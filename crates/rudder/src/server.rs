//! `rudder server`: opens the store and runs the control plane until
//! SIGINT or SIGTERM.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use rudder_apiserver::{Identity, Listen, Server, ServerOptions};
use rudder_store::embedded::{EmbeddedConfig, EmbeddedStore};
use rudder_store::etcd::{EtcdConfig, EtcdStore};
use rudder_store::{CompactionPolicy, Compactor, Store};
use tokio_util::sync::CancellationToken;

#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// Where the server keeps its state: the embedded store (`DIR/db`),
    /// certificates and the admin kubeconfig.
    #[arg(long, env = "RUDDER_DATA_DIR", default_value = "/var/lib/rudder")]
    pub data_dir: PathBuf,

    /// `embedded` (the default: a store inside the server, under
    /// DATA_DIR/db) or `etcd://host:port[,host:port...]`.
    #[arg(long, env = "RUDDER_STORE", default_value = "embedded")]
    pub store: String,

    /// With an etcd store: the prefix of every key rudder writes.
    #[arg(long, default_value = "")]
    pub etcd_prefix: String,

    /// The HTTPS port of the API server.
    #[arg(long, env = "RUDDER_PORT", default_value_t = 6443)]
    pub port: u16,

    /// The address the API server listens on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: std::net::IpAddr,

    /// The address the cluster reaches this server at (the `kubernetes`
    /// Service's endpoint). Default: the bind address, or when that is
    /// 0.0.0.0, this machine's address on its default route.
    #[arg(long)]
    pub advertise_address: Option<std::net::IpAddr>,

    /// More names (DNS or IP) for the API server's certificate.
    #[arg(long = "tls-san")]
    pub tls_sans: Vec<String>,

    /// Run the control plane only, without a node agent on this machine.
    #[arg(long)]
    pub disable_agent: bool,

    #[command(flatten)]
    pub node: crate::agent::NodeArgs,

    /// The CIDR Service ClusterIPs are allocated from (blackholed on the node).
    #[arg(long, default_value = rudder_api::network::SERVICE_CIDR)]
    pub service_cidr: String,

    /// Run no controllers (garbage collector, namespace lifecycle, …): the
    /// API server stores what it is given and nothing reconciles it.
    #[arg(long)]
    pub disable_controllers: bool,

    /// Run no scheduler: pods stay Pending unless something else binds
    /// them.
    #[arg(long)]
    pub disable_scheduler: bool,

    /// Give LoadBalancer Services no addresses (k3s's
    /// `--disable=servicelb`): another load balancer controller does, or
    /// none.
    #[arg(long)]
    pub disable_servicelb: bool,

    /// The scheduler's configuration: a KubeSchedulerConfiguration
    /// (kubescheduler.config.k8s.io/v1, YAML or JSON) — its profiles,
    /// plugins and their arguments, percentageOfNodesToScore, backoff.
    #[arg(long)]
    pub scheduler_config: Option<PathBuf>,

    /// The CIDR every Node's pod range (`spec.podCIDR`, a /24) is cut from.
    #[arg(long, default_value = rudder_api::network::CLUSTER_CIDR)]
    pub cluster_cidr: String,

    /// How often the node lifecycle controller looks at node health.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub node_monitor_period: std::time::Duration,

    /// How long a node may go without a heartbeat before it is marked
    /// unready (its pods then evicted after their tolerations).
    #[arg(long, default_value = "50s", value_parser = parse_duration)]
    pub node_monitor_grace_period: std::time::Duration,

    /// The same for a node that has never reported.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub node_startup_grace_period: std::time::Duration,

    /// The longest certificate the CertificateSigningRequest signer issues
    /// from the cluster CA, as Go writes durations (`8760h`, `90m`).
    #[arg(long, default_value = "8760h", value_parser = parse_duration)]
    pub cluster_signing_duration: std::time::Duration,
}

/// A duration as Go's `time.ParseDuration` reads the flags upstream's take:
/// numbers each followed by `h`, `m`, `s` or `ms` (`1h30m`).
pub(crate) fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let invalid = || format!("invalid duration {text:?}");
    let (mut total, mut rest) = (0f64, text.trim());
    if rest.is_empty() {
        return Err(invalid());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(invalid)?;
        let number: f64 = rest[..digits].parse().map_err(|_| invalid())?;
        let unit_end = rest[digits..]
            .find(|c: char| c.is_ascii_digit())
            .map_or(rest.len(), |i| digits + i);
        let seconds = match &rest[digits..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return Err(invalid()),
        };
        total += number * seconds;
        rest = &rest[unit_end..];
    }
    Ok(std::time::Duration::from_secs_f64(total))
}

/// The backend a `--store` value names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum StoreChoice {
    Embedded(PathBuf),
    Etcd(EtcdConfig),
}

impl ServerArgs {
    fn store_choice(&self) -> anyhow::Result<StoreChoice> {
        if self.store == "embedded" {
            return Ok(StoreChoice::Embedded(self.data_dir.join("db")));
        }
        let config = EtcdConfig::from_url(&self.store).with_context(|| {
            format!(
                "--store {}: expected `embedded` or etcd://host:port[,...]",
                self.store
            )
        })?;
        Ok(StoreChoice::Etcd(
            config.with_prefix(self.etcd_prefix.as_bytes()),
        ))
    }
}

async fn open_store(choice: StoreChoice) -> anyhow::Result<Arc<dyn Store>> {
    Ok(match choice {
        StoreChoice::Embedded(path) => {
            let config = EmbeddedConfig::new(&path);
            let store = tokio::task::spawn_blocking(move || EmbeddedStore::open(config)).await?;
            Arc::new(
                store.with_context(|| format!("open the embedded store at {}", path.display()))?,
            )
        }
        StoreChoice::Etcd(config) => {
            let endpoints = config.endpoints.join(",");
            Arc::new(
                EtcdStore::connect(config)
                    .await
                    .with_context(|| format!("connect to etcd at {endpoints}"))?,
            )
        }
    })
}

/// Creates the data directory readable by its owner only (it holds the
/// store, with every Secret, and the cluster's keys), as k3s keeps its
/// server data dir; one that exists is tightened to 0700 unless it is a
/// shared directory (sticky, like /tmp), which is left alone with a warning.
pub(crate) fn prepare_data_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("create the data directory {}", dir.display()))?;
    let mode = std::fs::metadata(dir)
        .with_context(|| format!("inspect the data directory {}", dir.display()))?
        .permissions()
        .mode();
    if mode & 0o1000 != 0 {
        tracing::warn!(data_dir = %dir.display(), "the data directory is a shared directory; its permissions are left as they are");
    } else if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("restrict the data directory {}", dir.display()))?;
    }
    Ok(())
}

/// The scheduler's configuration file, read and checked (its plugins
/// too) before anything starts.
fn scheduler_config(
    path: Option<&std::path::Path>,
) -> anyhow::Result<Option<rudder_scheduler::config::Configuration>> {
    let Some(path) = path else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("read --scheduler-config {}", path.display()))?;
    let config = rudder_scheduler::config::Configuration::parse(&text)
        .with_context(|| format!("--scheduler-config {}", path.display()))?;
    rudder_scheduler::Profile::all_from_config(&config, None)
        .with_context(|| format!("--scheduler-config {}", path.display()))?;
    Ok(Some(config))
}

pub async fn run(args: ServerArgs) -> anyhow::Result<()> {
    let mut shutdown = Shutdown::listen()?;
    let scheduler_config = scheduler_config(args.scheduler_config.as_deref())?;
    prepare_data_dir(&args.data_dir)?;
    let store = open_store(args.store_choice()?).await?;
    let revision = store
        .current_revision()
        .await
        .context("read the store's revision")?;
    tracing::info!(data_dir = %args.data_dir.display(), store = %args.store, revision, "store ready");

    let cancel = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    let compactor = Compactor::new(CompactionPolicy::default()).run(store.clone(), cancel.clone());
    tasks.spawn(async move {
        compactor.await;
        Ok::<(), anyhow::Error>(())
    });
    let listen = Listen {
        bind: std::net::SocketAddr::new(args.bind_address, args.port),
        extra_sans: args.tls_sans.clone(),
        advertise: args.advertise_address,
    };
    let mut options = ServerOptions::new(&args.data_dir, store, Some(listen));
    options.service_cidr = args
        .service_cidr
        .parse()
        .map_err(|e| anyhow::anyhow!("--service-cidr: {e}"))?;
    let mut server = Server::start(options).await?;
    if !args.disable_controllers {
        rudder_controllers::nodeipam::Ranges::parse(&args.cluster_cidr, 24)
            .map_err(|e| anyhow::anyhow!("--cluster-cidr: {e}"))?;
        let client = server.client(&Identity::controller_manager());
        let tls = rudder_apiserver::tls::TlsFiles::new(&args.data_dir);
        let read = |path: std::path::PathBuf| {
            std::fs::read_to_string(&path)
                .with_context(|| format!("read the cluster CA {}", path.display()))
        };
        let root_ca = read(tls.ca_cert())?;
        let options = rudder_controllers::Options {
            signing_ca: Some(rudder_controllers::certificates::SigningCa {
                cert_pem: root_ca.clone(),
                key_pem: read(tls.ca_key())?,
            }),
            cluster_signing_duration: args.cluster_signing_duration,
            root_ca: Some(root_ca),
            cluster_cidr: args.cluster_cidr.clone(),
            node_monitor_period: args.node_monitor_period,
            node_monitor_grace_period: args.node_monitor_grace_period,
            node_startup_grace_period: args.node_startup_grace_period,
            disabled: [
                (args.disable_servicelb, "service-lb-controller"),
                (args.node.disable_dns, "dns-endpoints-controller"),
            ]
            .into_iter()
            .filter(|(off, _)| *off)
            .map(|(_, name)| name.to_string())
            .collect(),
            ..rudder_controllers::Options::default()
        };
        let manager = rudder_controllers::ControllerManager::new(client, options);
        let stop = cancel.clone();
        tasks.spawn(async move {
            manager.run(stop).await;
            Ok(())
        });
    }
    if !args.disable_scheduler {
        let client = server.client(&Identity::scheduler());
        let mut scheduler =
            rudder_scheduler::Scheduler::new(client, rudder_scheduler::Options::default());
        if let Some(config) = &scheduler_config {
            scheduler = scheduler.with_config(config)?;
        }
        let stop = cancel.clone();
        tasks.spawn(async move {
            scheduler.run(stop).await;
            Ok(())
        });
    }

    crate::join::ensure(&args.data_dir, server.client(&Identity::admin())).await?;
    if !args.node.disable_dns {
        crate::dns::ensure_service(server.client(&Identity::admin()), args.node.cluster_dns)
            .await
            .context("make the cluster DNS Service kube-system/kube-dns")?;
    }
    tracing::info!(
        token_file = %crate::join::token_path(&args.data_dir).display(),
        "agents join with: rudder agent --server https://<this server>:{} --token $(rudder token)",
        args.port
    );

    if !args.disable_agent {
        let mut options = args.node.options(
            args.data_dir.clone(),
            &args.cluster_cidr,
            &args.service_cidr,
        )?;
        options.control_plane = true;
        serve_agent(&mut options, &args.data_dir).await?;
        let client = server.client(&Identity::node(&options.node_name));
        let node = NodeServices {
            proxy: !args.node.disable_proxy,
            dns: !args.node.disable_dns,
        };
        tasks.spawn(run_agent(client, options, node, cancel.clone()));
    }

    let outcome = tokio::select! {
        signal = shutdown.signalled() => signal,
        ended = server.wait() => ended,
        Some(ended) = tasks.join_next() => match ended {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(error),
            Err(error) => Err(error.into()),
        },
    };
    tracing::info!("shutting down");
    cancel.cancel();
    while let Some(ended) = tasks.join_next().await {
        if let Ok(Err(error)) = ended {
            tracing::warn!(%error, "component stopped with an error");
        }
    }
    server.stop().await;
    outcome
}

/// Runs the node until `stop`: the agent and, unless disabled, the
/// service proxy beside it. An agent that cannot start (no containerd,
/// not root) is retried, as a kubelet waits for its runtime; the control
/// plane serves on meanwhile.
pub(crate) async fn run_agent(
    client: kube::Client,
    options: rudder_kubelet::agent::Options,
    node: NodeServices,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    // The proxy and DNS share one set of informers (one watch of
    // Services, one of EndpointSlices).
    let informers = std::sync::Arc::new(rudder_runtime::Informers::new(
        client.clone(),
        stop.child_token(),
    ));
    let mut tasks = tokio::task::JoinSet::new();
    if node.proxy {
        let proxy_options = rudder_proxy::Options {
            node_name: options.node_name.clone(),
            cluster_cidr: options.cluster_cidr,
            service_cidr: options.service_cidr,
        };
        let (informers, host, stop) = (informers.clone(), options.host.clone(), stop.clone());
        tasks.spawn(async move { rudder_proxy::run(&informers, host, proxy_options, stop).await });
    }
    if node.dns {
        let (informers, client, options, stop) = (
            informers.clone(),
            client.clone(),
            options.clone(),
            stop.clone(),
        );
        tasks.spawn(async move { run_dns(informers, client, options, stop).await });
    }
    let outcome = run_node_agent(client, options, stop).await;
    while tasks.join_next().await.is_some() {}
    outcome
}

/// What runs beside a node's agent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeServices {
    pub proxy: bool,
    pub dns: bool,
}

/// The node's cluster DNS: on its pod gateway (the first address of its
/// podCIDR, bound before the bridge has it), port 53, once the node has a
/// podCIDR; the Node is then marked as serving, so that the kube-dns
/// Service's endpoints list it. Retried while it cannot start.
async fn run_dns(
    informers: std::sync::Arc<rudder_runtime::Informers>,
    client: kube::Client,
    options: rudder_kubelet::agent::Options,
    stop: CancellationToken,
) {
    use k8s_openapi::api::core::v1::Node;
    let nodes: kube::Api<Node> = kube::Api::all(client);
    loop {
        let gateway = nodes
            .get_opt(&options.node_name)
            .await
            .ok()
            .flatten()
            .and_then(|n| n.spec?.pod_cidr)
            .and_then(|c| c.parse::<rudder_api::network::Cidr>().ok())
            .map(|c| c.gateway());
        if let Some(gateway) = gateway {
            let mut dns = rudder_dns::Options::new(vec![std::net::SocketAddr::from((gateway, 53))]);
            dns.cluster_domain = options.cluster_domain.clone();
            dns.resolv_conf = options.resolv_conf.clone();
            dns.reverse_cidrs = vec![options.service_cidr, options.cluster_cidr];
            dns.server.freebind = true;
            let metrics = {
                let serving = rudder_dns::metrics::serve_http(
                    std::net::SocketAddr::from((gateway, 9153)),
                    dns.metrics.clone(),
                    true,
                    stop.child_token(),
                );
                tokio::spawn(async move {
                    if let Err(error) = serving.await {
                        tracing::warn!(%error, "the cluster DNS's metrics are not served");
                    }
                })
            };
            let serving = rudder_dns::run(&informers, dns, stop.clone());
            tokio::pin!(serving);
            // Serving once it has bound and kept running a moment.
            let started = tokio::select! {
                ended = &mut serving => Some(ended),
                _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => None,
            };
            let ended = match started {
                Some(ended) => ended,
                None => {
                    let patch = serde_json::json!({"metadata": {"annotations": {
                        rudder_controllers::dnsendpoints::SERVING_ANNOTATION: "true"
                    }}});
                    if let Err(error) = nodes
                        .patch(
                            &options.node_name,
                            &kube::api::PatchParams::default(),
                            &kube::api::Patch::Merge(&patch),
                        )
                        .await
                    {
                        tracing::warn!(%error, "could not mark the node's DNS as serving");
                    }
                    serving.await
                }
            };
            metrics.abort();
            match ended {
                Ok(()) => return,
                Err(error) => {
                    tracing::error!(%error, "cluster DNS could not start; retrying in 10s")
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(std::time::Duration::from_secs(if gateway.is_some() { 10 } else { 1 })) => {}
        }
    }
}

/// The node agent, retried while it cannot start.
async fn run_node_agent(
    client: kube::Client,
    options: rudder_kubelet::agent::Options,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    loop {
        let clock = rudder_runtime::clock::system();
        match rudder_kubelet::agent::run(client.clone(), options.clone(), clock, stop.clone()).await
        {
            Ok(()) => return Ok(()),
            Err(error) => {
                tracing::error!(error = %format!("{error:#}"), "the node agent could not start; retrying in 10s");
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep(std::time::Duration::from_secs(10)) => {}
        }
    }
}

/// The in-process agent's server: its address (the node IP, found now if
/// not given) and a serving certificate for it from the cluster CA, with
/// the CA its clients' certificates must come from.
async fn serve_agent(
    options: &mut rudder_kubelet::agent::Options,
    data_dir: &std::path::Path,
) -> anyhow::Result<()> {
    let node_ip = match options.node_ip {
        Some(ip) => ip,
        None => rudder_host::routes::node_ip(&rudder_host::System)
            .await
            .into(),
    };
    options.node_ip = Some(node_ip);
    let files = rudder_apiserver::tls::TlsFiles::new(data_dir);
    let mut names = vec![options.node_name.clone(), node_ip.to_string()];
    for local in ["127.0.0.1", "localhost"] {
        if !names.iter().any(|n| n == local) {
            names.push(local.to_string());
        }
    }
    let (cert_pem, key_pem) =
        rudder_apiserver::tls::issue_kubelet_serving(&files, &options.node_name, &names)
            .context("issue the node agent's serving certificate")?;
    let client_ca_pem = std::fs::read_to_string(files.ca_cert())
        .with_context(|| format!("read the cluster CA {}", files.ca_cert().display()))?;
    options.serving_tls = Some(rudder_kubelet::server::ServingTls {
        cert_pem,
        key_pem,
        client_ca_pem,
    });
    Ok(())
}

/// SIGTERM and SIGINT, listened for from the moment the command starts:
/// a signal that comes while the server is still starting stops it cleanly
/// (before, the default action killed it, and one between two waits was
/// lost).
pub(crate) struct Shutdown {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Shutdown {
    pub(crate) fn listen() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Shutdown {
            term: signal(SignalKind::terminate()).context("install the SIGTERM handler")?,
            interrupt: signal(SignalKind::interrupt()).context("install the SIGINT handler")?,
        })
    }

    /// Until SIGTERM or SIGINT.
    pub(crate) async fn signalled(&mut self) -> anyhow::Result<()> {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: ServerArgs,
    }

    fn parse(args: &[&str]) -> ServerArgs {
        Cli::parse_from(std::iter::once("server").chain(args.iter().copied())).args
    }

    #[test]
    fn the_data_dir_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| {
            std::fs::metadata(p).expect("metadata").permissions().mode() & 0o7777
        };
        let root = tempfile::tempdir().expect("tempdir");
        let fresh = root.path().join("a/data");
        prepare_data_dir(&fresh).expect("create");
        assert_eq!(mode(&fresh), 0o700);
        let loose = root.path().join("loose");
        std::fs::create_dir(&loose).expect("mkdir");
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        prepare_data_dir(&loose).expect("tighten");
        assert_eq!(mode(&loose), 0o700);
        let shared = root.path().join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        prepare_data_dir(&shared).expect("left alone");
        assert_eq!(mode(&shared), 0o1777);
    }

    #[test]
    fn eviction_thresholds_are_read_as_upstream_writes_them() {
        use crate::agent::parse_eviction_hard;
        assert_eq!(
            parse_eviction_hard(&parse(&[]).node.eviction_hard),
            Ok((100 << 20, 10))
        );
        assert_eq!(
            parse_eviction_hard("memory.available<1Gi,nodefs.available<1%"),
            Ok((1 << 30, 1))
        );
        assert!(parse_eviction_hard("imagefs.available<15%").is_err());
        assert!(parse_eviction_hard("nodefs.available<150%").is_err());
    }

    #[test]
    fn signing_durations_are_read_as_go_writes_them() {
        let hours = |h: u64| std::time::Duration::from_secs(h * 3600);
        assert_eq!(parse(&[]).cluster_signing_duration, hours(8760));
        assert_eq!(parse_duration("8760h0m0s"), Ok(hours(8760)));
        assert_eq!(
            parse_duration("1h30m"),
            Ok(std::time::Duration::from_secs(5400))
        );
        assert_eq!(
            parse_duration("1.5h"),
            Ok(std::time::Duration::from_secs(5400))
        );
        for bad in ["", "10", "3d", "h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_bad_scheduler_configuration_is_refused_naming_its_field() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("scheduler.yaml");
        let header =
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";
        std::fs::write(&path, format!("{header}percentageOfNodesToScore: 101\n")).expect("write");
        let error = format!("{:#}", scheduler_config(Some(&path)).expect_err("invalid"));
        assert!(
            error.contains(
                "percentageOfNodesToScore: Invalid value: 101: not in valid range [0-100]"
            ),
            "{error}"
        );
        let plugin = "profiles:\n- plugins:\n    score:\n      enabled:\n      - name: Nope\n";
        std::fs::write(&path, format!("{header}{plugin}")).expect("write");
        let error = format!("{:#}", scheduler_config(Some(&path)).expect_err("invalid"));
        assert!(
            error.contains("ScorePlugin \"Nope\" does not exist"),
            "{error}"
        );
        std::fs::write(&path, header).expect("write");
        let config = scheduler_config(Some(&path)).expect("valid").expect("read");
        assert_eq!(config.profiles[0].scheduler_name, "default-scheduler");
        assert!(scheduler_config(None).expect("none").is_none());
        let args = parse(&["--scheduler-config", "/etc/rudder/scheduler.yaml"]);
        assert_eq!(
            args.scheduler_config.as_deref(),
            Some(std::path::Path::new("/etc/rudder/scheduler.yaml"))
        );
    }

    #[test]
    fn store_defaults_to_embedded_under_the_data_dir() {
        let args = parse(&["--data-dir", "/tmp/x"]);
        assert_eq!(
            args.store_choice().expect("valid"),
            StoreChoice::Embedded("/tmp/x/db".into())
        );
    }

    #[test]
    fn etcd_store_urls_are_parsed_and_bad_ones_refused() {
        let args = parse(&[
            "--store",
            "etcd://127.0.0.1:2379,127.0.0.2:2379",
            "--etcd-prefix",
            "/r",
        ]);
        match args.store_choice().expect("valid") {
            StoreChoice::Etcd(config) => {
                assert_eq!(config.endpoints.len(), 2);
                assert_eq!(config.prefix, b"/r");
            }
            other => panic!("expected etcd, got {other:?}"),
        }
        assert!(parse(&["--store", "postgres://x"]).store_choice().is_err());
    }
}
