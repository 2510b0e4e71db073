//! The agent: everything a node runs, in the order it must start —
//! blackhole routes first, the runtime (a managed containerd, or the
//! endpoint given), the images (pause, the images directory), the Node
//! and its lease, the pod network once the node has its podCIDR, and the
//! pods.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::Api;
use rudder_host::Host;
use rudder_runtime::{Informers, Recorder, Timer};
use tokio_util::sync::CancellationToken;

use crate::containerd::{Containerd, Layout};
use crate::cri::Runtime;
use crate::cri::remote::RemoteRuntime;
use crate::network::{self, Cidr};
use crate::node::{self, Machine, NodeConfig, Readiness};
use crate::pods;

/// The agent's configuration (parsed by the binary).
#[derive(Debug, Clone)]
pub struct Options {
    pub node_name: String,
    /// `<data-dir>/agent` holds containerd, CNI state, images and logs.
    pub data_dir: PathBuf,
    /// An existing CRI runtime (`unix:///run/containerd/containerd.sock`)
    /// instead of a managed containerd.
    pub container_runtime_endpoint: Option<String>,
    pub cluster_cidr: Cidr,
    pub service_cidr: Cidr,
    pub cni_bin_dir: PathBuf,
    /// The bridge pods are attached to.
    pub bridge: String,
    /// The server's own node: labelled control-plane.
    pub control_plane: bool,
    pub node_ip: Option<std::net::IpAddr>,
    pub max_pods: u32,
    pub reserved_cpu_millis: u64,
    pub reserved_memory_bytes: u64,
    /// The nftables table of the agent's rules.
    pub nftables_table: String,
    /// Hard eviction thresholds (`--eviction-hard`): memory available in
    /// bytes, node file system available in percent.
    pub eviction_memory_bytes: u64,
    pub eviction_nodefs_percent: u64,
    /// The port of the agent's HTTPS server (upstream's 10250), on every
    /// address; the Node's `daemonEndpoints.kubeletEndpoint.port`.
    pub kubelet_port: u16,
    /// Its serving certificate and the CA of its clients; without them
    /// the agent serves nothing (and `kubectl logs` cannot reach it).
    pub serving_tls: Option<crate::server::ServingTls>,
    /// A stream into a pod on which nothing moves this long is closed
    /// (`--streaming-connection-idle-timeout`; also the managed
    /// containerd's `stream_idle_timeout`).
    pub streaming_idle_timeout: std::time::Duration,
    /// The machine: every route, sysctl and nftables change goes through
    /// it.
    pub host: Arc<dyn Host>,
    /// The cluster DNS Service's address pods resolve with
    /// (`--cluster-dns`), and the cluster domain (`--cluster-domain`).
    pub cluster_dns: Vec<std::net::Ipv4Addr>,
    pub cluster_domain: String,
    /// The node's resolv.conf: what `dnsPolicy: Default` pods get, and the
    /// search domains cluster pods add (`--resolv-conf`).
    pub resolv_conf: PathBuf,
}

impl Options {
    pub fn new(node_name: &str, data_dir: PathBuf) -> Self {
        Options {
            node_name: node_name.into(),
            data_dir,
            container_runtime_endpoint: None,
            cluster_cidr: rudder_api::network::default_cluster_cidr(),
            service_cidr: rudder_api::network::default_service_cidr(),
            cni_bin_dir: "/usr/lib/cni".into(),
            bridge: "rudder0".into(),
            control_plane: false,
            node_ip: None,
            max_pods: 110,
            reserved_cpu_millis: 0,
            reserved_memory_bytes: 0,
            nftables_table: "rudder".into(),
            eviction_memory_bytes: 100 << 20,
            eviction_nodefs_percent: 10,
            kubelet_port: 10250,
            serving_tls: None,
            streaming_idle_timeout: crate::server::DEFAULT_IDLE_TIMEOUT,
            host: Arc::new(rudder_host::System),
            cluster_dns: vec![rudder_api::network::CLUSTER_DNS],
            cluster_domain: rudder_api::network::CLUSTER_DOMAIN.into(),
            resolv_conf: "/etc/resolv.conf".into(),
        }
    }

    fn agent_dir(&self) -> PathBuf {
        self.data_dir.join("agent")
    }

    pub fn images_dir(&self) -> PathBuf {
        self.agent_dir().join("images")
    }

    pub fn layout(&self) -> Layout {
        Layout {
            dir: self.agent_dir().join("containerd"),
            cni_bin_dir: self.cni_bin_dir.clone(),
            cni_conf_dir: self.agent_dir().join("cni/net.d"),
            sandbox_image: crate::images::PAUSE_IMAGE.into(),
            stream_idle_timeout: self.streaming_idle_timeout,
        }
    }
}

/// A failed start of the agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("install the blackhole routes: {0}")]
    Routes(#[from] rudder_host::routes::Error),
    #[error(transparent)]
    Network(#[from] network::Error),
    #[error(transparent)]
    Containerd(#[from] crate::containerd::Error),
    #[error(transparent)]
    Runtime(#[from] crate::cri::Error),
    #[error(transparent)]
    Images(#[from] crate::images::Error),
    #[error("register the node: {0}")]
    Register(#[source] kube::Error),
    #[error("the agent's server: {0}")]
    Server(#[from] crate::server::Error),
}

/// Runs the agent until `stop`; the containers keep running after it.
pub async fn run(
    client: Client,
    options: Options,
    clock: Arc<dyn Timer>,
    stop: CancellationToken,
) -> Result<(), Error> {
    // No packet to a cluster address that is not a pod here leaves.
    rudder_host::routes::install_blackholes(
        &*options.host,
        &[options.cluster_cidr, options.service_cidr],
    )
    .await?;

    let layout = options.layout();
    let (runtime, containerd): (Arc<dyn Runtime>, Option<Containerd>) =
        match &options.container_runtime_endpoint {
            Some(endpoint) => (Arc::new(RemoteRuntime::connect(endpoint)?), None),
            None => {
                let runtime: Arc<dyn Runtime> = Arc::new(RemoteRuntime::connect(
                    &layout.socket().display().to_string(),
                )?);
                let containerd = Containerd::start(layout.clone(), runtime.clone()).await?;
                (runtime, Some(containerd))
            }
        };
    let outcome = run_with(client, &options, runtime, clock, stop).await;
    if let Some(containerd) = containerd {
        containerd.stop().await;
    }
    outcome
}

async fn run_with(
    client: Client,
    options: &Options,
    runtime: Arc<dyn Runtime>,
    clock: Arc<dyn Timer>,
    stop: CancellationToken,
) -> Result<(), Error> {
    let version = runtime.version().await?;
    let layout = options.layout();
    if options.container_runtime_endpoint.is_none() {
        let dir = std::env::temp_dir().join(format!("rudder-pause-{}.tar", std::process::id()));
        crate::images::Image::pause().write(&dir)?;
        let imported =
            crate::images::import(&*options.host, &layout.socket(), std::slice::from_ref(&dir))
                .await;
        let _ = std::fs::remove_file(&dir);
        imported?;
        let archives = crate::images::archives_in(&options.images_dir());
        if let Err(error) = crate::images::import(&*options.host, &layout.socket(), &archives).await
        {
            tracing::warn!(%error, "an image archive could not be imported");
        }
    }

    let node_ip = match options.node_ip {
        Some(ip) => ip,
        None => rudder_host::routes::node_ip(&*options.host).await.into(),
    };
    let config = Arc::new(NodeConfig {
        name: options.node_name.clone(),
        node_ip,
        hostname: options.node_name.clone(),
        control_plane: options.control_plane,
        max_pods: options.max_pods,
        reserved_cpu_millis: options.reserved_cpu_millis,
        reserved_memory_bytes: options.reserved_memory_bytes,
        eviction_memory_bytes: options.eviction_memory_bytes,
        eviction_nodefs_percent: options.eviction_nodefs_percent,
        kubelet_port: i32::from(options.kubelet_port),
        kubelet_version: "v1.33.0".into(),
    });
    // The agent's server listens before the Node says where it is.
    let serving = match &options.serving_tls {
        Some(tls) => {
            let config = crate::server::tls_config(tls)?;
            let address = std::net::SocketAddr::from(([0, 0, 0, 0], options.kubelet_port));
            Some((crate::server::bind(address).await?, config))
        }
        None => None,
    };
    let machine = Machine::detect(&options.data_dir);
    let allocatable_cpu_millis =
        (i128::from(machine.cpus) * 1000 - i128::from(options.reserved_cpu_millis)).max(0);
    let allocatable_memory = (i128::from(machine.memory_bytes)
        - i128::from(options.reserved_memory_bytes)
        - i128::from(options.eviction_memory_bytes))
    .max(0);
    let runtime_version = format!("{}://{}", version.runtime_name, version.runtime_version);
    let not_ready = Readiness::NotReady(CNI_NOT_READY.into());
    let registered = node::register(
        &client,
        &config.node(&machine, &runtime_version, not_ready.clone(), clock.now()),
    )
    .await
    .map_err(Error::Register)?;

    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(node::run_lease(
        client.clone(),
        config.clone(),
        registered.metadata.uid.clone(),
        clock.clone(),
        stop.clone(),
    ));
    let cidr = tokio::sync::watch::Sender::new(None);
    let status_loop = NodeStatusLoop {
        pod_cidr_out: cidr.clone(),
        runtime: runtime.clone(),
        client: client.clone(),
        config: config.clone(),
        machine,
        runtime_version,
        options: options.clone(),
        clock: clock.clone(),
    };
    tasks.spawn(status_loop.run(stop.clone()));
    tasks.spawn(pods::logs::run(
        runtime.clone(),
        pods::logs::Rotation::default(),
        stop.clone(),
    ));
    tasks.spawn(crate::images::gc::run(
        runtime.clone(),
        options.layout().dir,
        crate::images::PAUSE_IMAGE.into(),
        crate::images::gc::Policy::default(),
        stop.clone(),
    ));
    let recorder = Recorder::new(client.clone(), "kubelet", &options.node_name, clock.clone());
    let (host_ports, ports) = tokio::sync::watch::channel(Vec::new());
    tasks.spawn(run_nftables(
        options.clone(),
        cidr.subscribe(),
        ports,
        stop.clone(),
    ));
    let shared = Arc::new(pods::Shared {
        host_ports,
        runtime,
        client: client.clone(),
        recorder,
        clock,
        backoff: Mutex::default(),
        log_root: options.agent_dir().join("logs"),
        pods_dir: options.agent_dir().join("pods"),
        memory_volumes: true,
        host_ip: node_ip.to_string(),
        runtime_name: version.runtime_name,
        allocatable_cpu_millis,
        allocatable_memory,
        tokens: Default::default(),
        host: options.host.clone(),
        dns: pods::dns::Settings {
            cluster_dns: options.cluster_dns.clone(),
            cluster_domain: options.cluster_domain.clone(),
            host: node_resolv_conf(&*options.host, &options.resolv_conf),
        },
    });
    let informers = Informers::new(client, stop.child_token());
    if let Some((listener, config)) = serving {
        let node = crate::server::Node {
            pods: informers
                .typed_with_fields::<k8s_openapi::api::core::v1::Pod>(&pods::node_fields(
                    &options.node_name,
                ))
                .store(),
            runtime: shared.runtime.clone(),
            streaming: crate::server::Streaming {
                idle_timeout: options.streaming_idle_timeout,
                stop: stop.clone(),
            },
        };
        tasks.spawn(crate::server::serve(listener, config, node, stop.clone()));
    }
    pods::run(shared, &informers, &options.node_name, stop.clone()).await;
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// The node's resolv.conf for its pods. One that names only loopback
/// resolvers (systemd-resolved's stub, 127.0.0.53) is no use inside a
/// pod: systemd-resolved's own upstream list is taken instead when there
/// is one, as k3s does.
fn node_resolv_conf(host: &dyn Host, path: &std::path::Path) -> pods::dns::ResolvConf {
    let read = |path: &std::path::Path| {
        host.read_file(path)
            .ok()
            .and_then(|text| match pods::dns::ResolvConf::parse(&text) {
                Ok(conf) => Some(conf),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "the node's resolv.conf is malformed");
                    None
                }
            })
    };
    let conf = read(path).unwrap_or_default();
    let loopback_only = !conf.nameservers.is_empty()
        && conf.nameservers.iter().all(|s| {
            s.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
        });
    if loopback_only
        && let Some(resolved) = read(std::path::Path::new("/run/systemd/resolve/resolv.conf"))
    {
        return resolved;
    }
    conf
}

/// Sets up the pod network for `pod_cidr`: the conflist, forwarding and
/// the masquerade rules.
async fn setup_network(options: &Options, pod_cidr: Cidr) -> Result<(), network::Error> {
    let layout = options.layout();
    let mtu = rudder_host::routes::default_mtu(&*options.host).await;
    let ipam = options.agent_dir().join("cni/ipam");
    network::write_conflist(
        &layout.cni_conf_dir,
        &network::conflist(pod_cidr, &options.bridge, mtu, &ipam),
    )?;
    if let Err(error) = rudder_host::sysctl::enable_forwarding(&*options.host, &options.agent_dir())
    {
        tracing::warn!(%error, "could not turn on IPv4 forwarding");
    }
    tracing::info!(%pod_cidr, "pod network configured");
    Ok(())
}

/// Keeps the agent's nftables table (masquerade, hostPorts) in step with
/// the node's podCIDR and the pods' hostPorts.
async fn run_nftables(
    options: Options,
    mut pod_cidr: tokio::sync::watch::Receiver<Option<Cidr>>,
    mut ports: tokio::sync::watch::Receiver<Vec<network::HostPort>>,
    stop: CancellationToken,
) {
    loop {
        let cidr = *pod_cidr.borrow_and_update();
        let wanted = ports.borrow_and_update().clone();
        if let Some(cidr) = cidr {
            let rules = network::nftables_rules(
                &options.nftables_table,
                options.cluster_cidr,
                cidr,
                &wanted,
            );
            match network::apply_nftables(&*options.host, &rules).await {
                Ok(()) => tracing::debug!(host_ports = wanted.len(), "nftables rules applied"),
                Err(error) => tracing::warn!(%error, "could not apply the agent's nftables rules"),
            }
            // The bridge exists once a pod has a sandbox.
            let _ = rudder_host::sysctl::allow_localnet(&*options.host, &options.bridge);
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = pod_cidr.changed() => if changed.is_err() { return },
            changed = ports.changed() => if changed.is_err() { return },
        }
    }
}

/// Upstream's Ready message while the pod network is not set up.
const CNI_NOT_READY: &str = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized";

/// Looks at the node every 10 s (every second until it has its podCIDR):
/// sets the pod network up once the podCIDR is known, asks the runtime
/// for its health (CRI `Status`), and writes the status when it changed or
/// 5 minutes passed.
struct NodeStatusLoop {
    /// Where the podCIDR goes once the network is set up for it.
    pod_cidr_out: tokio::sync::watch::Sender<Option<Cidr>>,
    runtime: Arc<dyn Runtime>,
    client: Client,
    config: Arc<NodeConfig>,
    machine: Machine,
    runtime_version: String,
    options: Options,
    clock: Arc<dyn Timer>,
}

impl NodeStatusLoop {
    async fn run(self, stop: CancellationToken) {
        let NodeStatusLoop {
            pod_cidr_out,
            runtime,
            client,
            config,
            machine,
            runtime_version,
            options,
            clock,
        } = self;
        let api: Api<Node> = Api::all(client.clone());
        let mut network_for: Option<Cidr> = None;
        let mut last_report = None;
        let mut health = crate::health::RuntimeHealth::default();
        loop {
            match api.get(&config.name).await {
                Ok(current) => {
                    let pod_cidr = current
                        .spec
                        .as_ref()
                        .and_then(|s| s.pod_cidr.as_deref())
                        .and_then(|c| c.parse::<Cidr>().ok());
                    if let Some(cidr) = pod_cidr
                        && network_for != Some(cidr)
                    {
                        match setup_network(&options, cidr).await {
                            Ok(()) => {
                                network_for = Some(cidr);
                                pod_cidr_out.send_replace(Some(cidr));
                            }
                            Err(error) => {
                                tracing::warn!(%error, "could not set the pod network up")
                            }
                        }
                    }
                    let now = clock.now();
                    let answer =
                        tokio::time::timeout(crate::health::STATUS_TIMEOUT, runtime.status()).await;
                    match answer {
                        Ok(Ok(conditions)) => health.observe(Some(&conditions), now),
                        Ok(Err(error)) => {
                            tracing::warn!(%error, "container runtime sanity check failed");
                            health.observe(None, now);
                        }
                        Err(_) => {
                            tracing::warn!(
                                "container runtime sanity check failed: no answer to Status within {:?}",
                                crate::health::STATUS_TIMEOUT
                            );
                            health.observe(None, now);
                        }
                    }
                    let pod_network = network_for.is_none().then_some(CNI_NOT_READY);
                    let readiness = health.readiness(now, pod_network);
                    let previous = current.status.clone().unwrap_or_default();
                    let pressure = node::Pressure::measure(&options.data_dir, &config);
                    let mut status = config.status(
                        &machine,
                        &runtime_version,
                        readiness,
                        pressure,
                        Some(&previous),
                        now,
                    );
                    // A runtime that does not answer keeps the images
                    // last reported, and holds up no status write.
                    let images =
                        tokio::time::timeout(crate::health::STATUS_TIMEOUT, runtime.list_images())
                            .await;
                    match images {
                        Ok(Ok(images)) => status.images = Some(node::images(images)),
                        Ok(Err(error)) => {
                            tracing::debug!(%error, "could not list the runtime's images")
                        }
                        Err(_) => tracing::debug!("the runtime did not list its images in time"),
                    }
                    let due = last_report.is_none_or(|at| {
                        now.duration_since(at).unwrap_or_default() >= node::STATUS_REPORT_FREQUENCY
                    });
                    if due || node::changed(&previous, &status) {
                        match node::patch_status(&client, &config.name, &status).await {
                            Ok(_) => last_report = Some(now),
                            Err(error) => {
                                tracing::warn!(%error, "could not update the node's status")
                            }
                        }
                    }
                }
                Err(error) => tracing::warn!(%error, "could not read the node"),
            }
            let wait = if network_for.is_some() {
                node::STATUS_UPDATE_FREQUENCY
            } else {
                Duration::from_secs(1)
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = clock.sleep(wait) => {}
            }
        }
    }
}

/// Stops and removes every pod the agent's containerd runs, then
/// containerd itself, the agent's network (bridge, nftables table) and any
/// mount left under the agent's directory, and turns IPv4 forwarding off
/// again if the agent turned it on — k3s's `k3s-killall.sh`, for
/// tests and for taking a node down. The blackhole routes stay: they
/// only ever keep packets in, and another agent on the machine may rely
/// on them.
pub async fn killall(options: &Options) -> Result<(), Error> {
    let layout = options.layout();
    if layout.config_path().exists() {
        let runtime: Arc<dyn Runtime> = Arc::new(RemoteRuntime::connect(
            &layout.socket().display().to_string(),
        )?);
        let running = runtime.version().await.is_ok();
        let containerd = if running {
            None
        } else {
            Some(Containerd::start(layout.clone(), runtime.clone()).await?)
        };
        for sandbox in runtime.list_pod_sandboxes(None).await? {
            if let Err(error) = runtime.stop_pod_sandbox(&sandbox.id).await {
                tracing::warn!(%error, sandbox = %sandbox.id, "could not stop a pod sandbox");
            }
            if let Err(error) = runtime.remove_pod_sandbox(&sandbox.id).await {
                tracing::warn!(%error, sandbox = %sandbox.id, "could not remove a pod sandbox");
            }
        }
        match containerd {
            Some(containerd) => containerd.stop().await,
            None => tracing::warn!("containerd was running (an agent is up?); left running"),
        }
    }
    let host = &*options.host;
    let _ = network::delete_nftables(host, &options.nftables_table).await;
    let _ = network::delete_bridge(host, &options.bridge).await;
    crate::pods::volumes::unmount_under(host, &options.agent_dir()).await;
    if let Err(error) = rudder_host::sysctl::restore_forwarding(host, &options.agent_dir()) {
        tracing::warn!(%error, "could not turn IPv4 forwarding off again");
    }
    Ok(())
}
