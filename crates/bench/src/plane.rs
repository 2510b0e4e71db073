//! `rudder server --disable-agent` in the bench's own process: the embedded
//! store as `rudder server` opens it (on a real disk, with its compactor),
//! the API server listening on loopback, the controller manager with
//! `rudder server`'s options and, unless disabled, the scheduler — each
//! component on an in-process client of the server, as in `rudder server`.
//!
//! A scenario's floor asks the same server for an in-process client, as
//! the controllers get theirs, so the floor and the controllers reach the
//! API server by the same path (no TLS, no socket) and share the same
//! cores with the same components running.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use rudder_apiserver::{Identity, Listen, Server, ServerOptions};
use rudder_store::embedded::{EmbeddedConfig, EmbeddedStore};
use rudder_store::{CompactionPolicy, Compactor, Store};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Whether the plane runs a scheduler (`rudder server --disable-scheduler`
/// when not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheduler {
    Enabled,
    Disabled,
}

/// A running control plane in this process; stopped on drop.
pub(crate) struct Plane {
    server: Option<Server>,
    cancel: CancellationToken,
    tasks: JoinSet<()>,
}

impl Plane {
    /// Starts what `rudder server --disable-agent` starts (without its
    /// scheduler when `scheduler` says so), keeping its files in
    /// `data_dir`; ready when this returns.
    pub(crate) async fn start(data_dir: &Path, scheduler: Scheduler) -> anyhow::Result<Plane> {
        let config = EmbeddedConfig::new(data_dir.join("db"));
        let store: Arc<dyn Store> = Arc::new(
            tokio::task::spawn_blocking(move || EmbeddedStore::open(config))
                .await?
                .context("open the embedded store")?,
        );
        let cancel = CancellationToken::new();
        let mut tasks = JoinSet::new();
        tasks.spawn(Compactor::new(CompactionPolicy::default()).run(store.clone(), cancel.clone()));
        let listen = Listen {
            bind: "127.0.0.1:0".parse()?,
            extra_sans: Vec::new(),
            advertise: None,
        };
        let server = Server::start(ServerOptions::new(data_dir, store, Some(listen))).await?;
        // The controller manager as `rudder server` configures it: the
        // cluster CA publishes `kube-root-ca.crt` and signs CSRs; every
        // other option at the flags' defaults, which are the defaults.
        let tls = rudder_apiserver::tls::TlsFiles::new(data_dir);
        let read = |path: PathBuf| {
            std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))
        };
        let root_ca = read(tls.ca_cert())?;
        let options = rudder_controllers::Options {
            signing_ca: Some(rudder_controllers::certificates::SigningCa {
                cert_pem: root_ca.clone(),
                key_pem: read(tls.ca_key())?,
            }),
            root_ca: Some(root_ca),
            ..rudder_controllers::Options::default()
        };
        let manager = rudder_controllers::ControllerManager::new(
            server.client(&Identity::controller_manager()),
            options,
        );
        tasks.spawn(manager.run(cancel.clone()));
        if scheduler == Scheduler::Enabled {
            let scheduler = rudder_scheduler::Scheduler::new(
                server.client(&Identity::scheduler()),
                rudder_scheduler::Options::default(),
            );
            tasks.spawn(scheduler.run(cancel.clone()));
        }
        Ok(Plane {
            server: Some(server),
            cancel,
            tasks,
        })
    }

    fn server(&self) -> &Server {
        self.server.as_ref().expect("running until stopped")
    }

    /// An in-process client as `identity`, as the controllers have.
    pub(crate) fn client(&self, identity: &Identity) -> kube::Client {
        self.server().client(identity)
    }

    /// An in-process client as the cluster admin.
    pub(crate) fn admin(&self) -> kube::Client {
        self.client(&Identity::admin())
    }

    /// A kube-rs client over HTTPS with the admin kubeconfig, as a remote
    /// user (or node) would have.
    pub(crate) async fn https(&self) -> anyhow::Result<kube::Client> {
        let kubeconfig = self.server().kubeconfig().context("the plane listens")?;
        rudder_apiserver::testing::connect(kubeconfig, Duration::from_secs(30)).await
    }

    /// Stops the components, then the API server.
    pub(crate) async fn stop(mut self) {
        self.cancel.cancel();
        while self.tasks.join_next().await.is_some() {}
        if let Some(server) = self.server.take() {
            server.stop().await;
        }
    }
}

impl Drop for Plane {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
