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
    let config = rudder_apiserver::Config {
        data_dir: dir.path().to_path_buf(),
        bind: "127.0.0.1:0".parse().expect("address"),
        extra_sans: vec![],
    };
    let cancel = CancellationToken::new();
    let store_handle: Arc<dyn Store> = store.store.clone();
    let task = tokio::spawn(rudder_apiserver::run(config, store_handle, cancel.clone()));
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
    for _ in 0..400 {
        if kubeconfig.exists()
            && let Ok(kc) = kube::config::Kubeconfig::read_from(kubeconfig)
            && let Ok(mut config) =
                kube::Config::from_custom_kubeconfig(kc, &Default::default()).await
            && let Ok(client) = {
                // Tests assert on the server's own answers: no client-side retries of 429s.
                config.default_retry = false;
                kube::Client::try_from(config)
            }
        {
            let ready = client
                .request_text(
                    http::Request::get("/readyz")
                        .body(Vec::new())
                        .expect("request"),
                )
                .await;
            if ready.as_deref().ok() == Some("ok") {
                return client;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the API server did not become ready");
}
