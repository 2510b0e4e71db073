//! The embeddable control plane: a [`Server`] built from
//! [`ServerOptions`] that a binary, a test or a benchmark starts, asks for
//! clients and stops.
//!
//! [`Server::client`] hands out a `kube::Client` wired to the router
//! in-process — a tower service, no socket, no TLS — carrying the identity
//! that authentication would have produced (user, groups, and the
//! User-Agent its field manager comes from), so managed fields, events and
//! authorization see `system:kube-controller-manager`,
//! `system:kube-scheduler` or `system:node:<name>` exactly as upstream.
//! A remote component uses the same client over HTTPS; everything above
//! the transport is the same code.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context as _;
use axum::http::HeaderValue;
use rudder_api::Registry;
use rudder_api::time::{Clock, SystemClock};
use rudder_store::Store;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::auth::User;
use crate::state::State;
use crate::storage::services::{REPAIR_EVERY, Repair};
use crate::{crd, router, serve, tls};

/// Where and how the server listens.
#[derive(Debug, Clone)]
pub struct Listen {
    /// The address to listen on (port 0: any free port).
    pub bind: SocketAddr,
    /// Extra names (DNS or IP) for the serving certificate.
    pub extra_sans: Vec<String>,
    /// The address other members of the cluster reach this server at (the
    /// `kubernetes` Service's endpoint); by default the bind address, or
    /// when that is unspecified this machine's address on its default route.
    pub advertise: Option<IpAddr>,
}

/// What a server is built from.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Certificates go under `<data_dir>/tls`, the admin kubeconfig to
    /// `<data_dir>/kubeconfig.yaml`.
    pub data_dir: PathBuf,
    pub store: Arc<dyn Store>,
    /// HTTPS, or `None` for a server reached only in-process.
    pub listen: Option<Listen>,
    pub clock: Arc<dyn Clock>,
    /// The range ClusterIPs are allocated from (`--service-cidr`).
    pub service_cidr: rudder_api::network::Cidr,
}

impl ServerOptions {
    /// A server on `store` keeping its files in `data_dir`, listening as
    /// `listen` says, on the system clock.
    pub fn new(
        data_dir: impl Into<PathBuf>,
        store: Arc<dyn Store>,
        listen: Option<Listen>,
    ) -> Self {
        ServerOptions {
            data_dir: data_dir.into(),
            store,
            listen,
            clock: Arc::new(SystemClock),
            service_cidr: rudder_api::network::default_service_cidr(),
        }
    }
}

/// Who a client is, as authentication would have found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub groups: Vec<String>,
    /// The User-Agent it sends: its default field manager is the part
    /// before the first `/`.
    pub agent: String,
}

const VERSION: &str = "v1.33.0";

impl Identity {
    fn system(user: &str, groups: &[&str], agent: &str) -> Self {
        let mut groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        groups.push("system:authenticated".into());
        Identity {
            user: user.into(),
            groups,
            agent: format!("{agent}/{VERSION} (linux/amd64) rudder"),
        }
    }

    /// The cluster admin (`system:masters`), as the admin kubeconfig is.
    pub fn admin() -> Self {
        Identity::system("system:admin", &["system:masters"], "rudder")
    }

    /// kube-controller-manager's identity.
    pub fn controller_manager() -> Self {
        Identity::system(
            "system:kube-controller-manager",
            &[],
            "kube-controller-manager",
        )
    }

    /// kube-scheduler's identity.
    pub fn scheduler() -> Self {
        Identity::system("system:kube-scheduler", &[], "kube-scheduler")
    }

    /// The node agent of `node`.
    pub fn node(node: &str) -> Self {
        Identity::system(&format!("system:node:{node}"), &["system:nodes"], "kubelet")
    }

    fn user(&self) -> User {
        User {
            name: self.user.clone(),
            groups: self.groups.clone(),
            ..User::default()
        }
    }
}

/// A running API server.
#[derive(Debug)]
pub struct Server {
    state: Arc<State>,
    cancel: CancellationToken,
    tasks: JoinSet<anyhow::Result<()>>,
    address: Option<SocketAddr>,
    kubeconfig: Option<PathBuf>,
}

impl Server {
    /// Prepares and starts a server: TLS material and the admin kubeconfig
    /// (when it listens), the system namespaces and the `kubernetes`
    /// Service, the CRD controller, the allocator repair loop; then serves.
    /// Ready (as `/readyz` says) when this returns.
    pub async fn start(options: ServerOptions) -> anyhow::Result<Server> {
        let base = Arc::new(Registry::builtin());
        let state = State::new(base.clone(), options.store.clone(), options.clock.clone());
        let _ = state.service_cidr.set(options.service_cidr);
        let cancel = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let (listener, advertise, port, kubeconfig) = match &options.listen {
            Some(listen) => {
                let (listener, kubeconfig) = prepare_listener(&options.data_dir, listen).await?;
                let address = listener.local_addr()?;
                let advertise = listen
                    .advertise
                    .unwrap_or_else(|| crate::advertise_address(listen.bind.ip()));
                (Some(listener), advertise, address.port(), Some(kubeconfig))
            }
            None => (None, IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 6443, None),
        };
        let key_path = tls::TlsFiles::new(&options.data_dir).service_account_key();
        let key = tokio::task::spawn_blocking(move || {
            crate::authn::jwt::SigningKey::load_or_create(&key_path)
        })
        .await??;
        state.set_issuer(crate::authn::serviceaccount::Issuer::new(
            key,
            crate::authn::serviceaccount::DEFAULT_ISSUER,
        ));
        if options.listen.is_some() {
            let ca = tls::TlsFiles::new(&options.data_dir).ca_cert();
            let pem = std::fs::read(&ca).with_context(|| format!("read {}", ca.display()))?;
            let _ = state.ca_bundle.set(pem.into());
        }
        let storage = state.storage();
        storage.bootstrap_namespaces().await?;
        storage.bootstrap_priority_classes().await?;
        crate::storage::services::bootstrap(&storage, advertise, port).await?;
        crd::start(state.clone(), base).await?;
        tasks.spawn(repair_allocations(state.clone(), cancel.clone()));
        let mut address = None;
        if let Some(listener) = listener {
            let files = tls::TlsFiles::new(&options.data_dir);
            let tls_config = tls::server_config(&files).context("load TLS certificates")?;
            let kubelet = tls::kubelet_client_config(&files)
                .context("load the kubelet client certificate")?;
            let _ = state
                .kubelet
                .set(crate::kubelet::KubeletClient::new(kubelet));
            address = Some(listener.local_addr()?);
            let app = router(state.clone());
            let shutdown = cancel.clone();
            tasks.spawn(async move {
                serve::serve(listener, Arc::new(tls_config), app, shutdown).await
            });
        }
        state.ready.store(true, Ordering::SeqCst);
        tracing::info!(address = ?address, "API server ready");
        Ok(Server {
            state,
            cancel,
            tasks,
            address,
            kubeconfig,
        })
    }

    /// A client to this server, in-process, as `identity`.
    pub fn client(&self, identity: &Identity) -> kube::Client {
        let app = router(self.state.clone());
        let user = identity.user();
        let agent = HeaderValue::from_str(&identity.agent)
            .unwrap_or_else(|_| HeaderValue::from_static("rudder"));
        let service = tower::service_fn(move |request: axum::http::Request<kube::client::Body>| {
            let (app, user, agent) = (app.clone(), user.clone(), agent.clone());
            async move {
                let mut request = request.map(axum::body::Body::new);
                request.extensions_mut().insert(user);
                request
                    .headers_mut()
                    .entry(axum::http::header::USER_AGENT)
                    .or_insert(agent);
                app.oneshot(request).await
            }
        });
        kube::Client::new(service, "default")
    }

    /// Where it listens, if it does.
    pub fn address(&self) -> Option<SocketAddr> {
        self.address
    }

    /// The admin kubeconfig, if it listens.
    pub fn kubeconfig(&self) -> Option<&Path> {
        self.kubeconfig.as_deref()
    }

    /// Its shared state (tests and benchmarks look inside).
    pub fn state(&self) -> &Arc<State> {
        &self.state
    }

    /// Waits until a task of the server ends (an error, or a stop).
    pub async fn wait(&mut self) -> anyhow::Result<()> {
        match self.tasks.join_next().await {
            Some(Ok(result)) => result,
            Some(Err(error)) => Err(error.into()),
            None => {
                self.cancel.cancelled().await;
                Ok(())
            }
        }
    }

    /// Stops serving: in-flight requests finish, watches end.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        self.state.shutdown.cancel();
        while let Some(ended) = self.tasks.join_next().await {
            if let Ok(Err(error)) = ended {
                tracing::warn!(%error, "API server task stopped with an error");
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.state.shutdown.cancel();
    }
}

/// TLS material, the listener and the admin kubeconfig for `listen`.
async fn prepare_listener(
    data_dir: &Path,
    listen: &Listen,
) -> anyhow::Result<(tokio::net::TcpListener, PathBuf)> {
    let files = tls::TlsFiles::new(data_dir);
    let advertise = listen
        .advertise
        .unwrap_or_else(|| crate::advertise_address(listen.bind.ip()));
    let mut names = listen.extra_sans.clone();
    if !listen.bind.ip().is_unspecified() {
        names.push(listen.bind.ip().to_string());
    }
    names.push(advertise.to_string());
    tls::ensure(&files, &tls::server_names(&names)).context("prepare TLS certificates")?;
    let listener = tokio::net::TcpListener::bind(listen.bind)
        .await
        .with_context(|| format!("listen on {}", listen.bind))?;
    let port = listener.local_addr()?.port();
    let host = if listen.bind.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        listen.bind.ip().to_string()
    };
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    let kubeconfig = data_dir.join("kubeconfig.yaml");
    tls::write_kubeconfig(&files, &kubeconfig, &format!("https://{host}:{port}"))
        .context("write the admin kubeconfig")?;
    Ok((listener, kubeconfig))
}

/// Frees ClusterIPs and NodePorts no Service holds, every few minutes.
async fn repair_allocations(state: Arc<State>, cancel: CancellationToken) -> anyhow::Result<()> {
    let mut repair = Repair::default();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            () = tokio::time::sleep(REPAIR_EVERY) => {}
        }
        match repair.pass(&state.storage()).await {
            Ok(done) if done.released.is_empty() && done.restored.is_empty() => {}
            Ok(done) => {
                tracing::info!(released = ?done.released, restored = ?done.restored, "repaired service allocations")
            }
            Err(status) => {
                tracing::warn!(error = %status.message, "service allocation repair failed")
            }
        }
    }
}
