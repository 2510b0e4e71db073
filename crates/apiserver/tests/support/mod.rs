//! Starts a real API server (HTTPS, a real store) for a test and gives back
//! a kube-rs client configured from the admin kubeconfig it writes.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rudder_store::Store;
use rudder_store::testing::TestStore;
use tokio_util::sync::CancellationToken;

pub struct Server {
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    pub dir: tempfile::TempDir,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _store: TestStore,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.task.abort();
    }
}

/// Which store the server stands on.
#[derive(Debug, Clone, Copy)]
pub enum Backend {
    Embedded,
    Etcd,
}

impl Server {
    pub fn store(&self) -> Arc<dyn Store> {
        self._store.store.clone()
    }
}

pub async fn start(backend: Backend) -> Server {
    let store = match backend {
        Backend::Embedded => rudder_store::testing::embedded().await,
        Backend::Etcd => rudder_store::testing::etcd().await,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let listen = rudder_apiserver::Listen {
        bind: "127.0.0.1:0".parse().expect("address"),
        extra_sans: vec![],
        advertise: None,
    };
    let options =
        rudder_apiserver::ServerOptions::new(dir.path(), store.store.clone(), Some(listen));
    let cancel = CancellationToken::new();
    let task = tokio::spawn(rudder_apiserver::run(options, cancel.clone()));
    let kubeconfig = dir.path().join("kubeconfig.yaml");
    let client = connect(&kubeconfig).await;
    Server {
        client,
        kubeconfig,
        dir,
        cancel,
        task,
        _store: store,
    }
}

/// A kube-rs client from a kubeconfig, once the server answers /readyz.
pub async fn connect(kubeconfig: &std::path::Path) -> kube::Client {
    rudder_apiserver::testing::connect(kubeconfig, Duration::from_secs(10))
        .await
        .expect("the API server became ready")
}
