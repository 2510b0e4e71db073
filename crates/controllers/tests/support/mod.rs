//! What the controller tests share: a control plane with the controller
//! manager running on it, and small object builders.
#![allow(dead_code)]

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use rudder_controllers::{ControllerManager, Options};
use rudder_harness::{ControlPlane, Identity};
use tokio_util::sync::CancellationToken;

/// The CA bundle the root CA publisher of test clusters publishes.
pub const TEST_CA: &str = "-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n";

/// The CA the signer of test clusters issues certificates from (made once
/// per test binary).
pub fn signing_ca() -> &'static rudder_controllers::certificates::SigningCa {
    static CA: std::sync::OnceLock<rudder_controllers::certificates::SigningCa> =
        std::sync::OnceLock::new();
    CA.get_or_init(|| {
        let key = rcgen::KeyPair::generate().expect("a CA key");
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "rudder-test-ca");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let cert = params.self_signed(&key).expect("a CA certificate");
        rudder_controllers::certificates::SigningCa {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    })
}

/// A control plane with every controller running, unelected.
pub struct Cluster {
    pub plane: ControlPlane,
    pub admin: Client,
    stop: CancellationToken,
    manager: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("plane", &self.plane)
            .finish_non_exhaustive()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop.cancel();
        self.manager.abort();
    }
}

/// A cluster whose every pod is made Running and Ready by the harness's
/// stand-in kubelet.
pub async fn cluster_with_nodes() -> Cluster {
    cluster_with_kubelet(rudder_harness::kubelet::all_ready()).await
}

/// A cluster whose pods the stand-in kubelet treats as `decide` says.
pub async fn cluster_with_kubelet(decide: rudder_harness::kubelet::Decide) -> Cluster {
    let c = cluster().await;
    tokio::spawn(rudder_harness::kubelet::play_nodes(
        c.admin.clone(),
        c.plane.clock(),
        decide,
        c.stop.clone(),
    ));
    c
}

pub async fn cluster() -> Cluster {
    cluster_on(ControlPlane::start().await)
}

/// A cluster on a fake clock the test advances, the stand-in kubelet
/// treating pods as `decide` says.
pub async fn cluster_with_fake_clock(decide: rudder_harness::kubelet::Decide) -> Cluster {
    start_on(ControlPlane::with_fake_clock().await, decide)
}

/// The controllers and the stand-in kubelet (treating pods as `decide`
/// says) started on `plane`: what the test made there before is in the
/// controllers' first list, so their first pass already sees it.
pub fn start_on(plane: ControlPlane, decide: rudder_harness::kubelet::Decide) -> Cluster {
    let c = cluster_on(plane);
    tokio::spawn(rudder_harness::kubelet::play_nodes(
        c.admin.clone(),
        c.plane.clock(),
        decide,
        c.stop.clone(),
    ));
    c
}

fn cluster_on(plane: ControlPlane) -> Cluster {
    // RUDDER_LOG=debug shows what the controllers do.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RUDDER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
    let admin = plane.admin();
    let client = plane.client(&Identity::controller_manager());
    let options = Options {
        lease: None,
        root_ca: Some(TEST_CA.into()),
        signing_ca: Some(signing_ca().clone()),
        discovery_every: Duration::from_millis(500),
        ..Options::default()
    };
    let stop = CancellationToken::new();
    let manager = tokio::spawn(
        ControllerManager::new(client, options)
            .with_clock(plane.clock())
            .run(stop.clone()),
    );
    Cluster {
        plane,
        admin,
        stop,
        manager,
    }
}

/// A reference to `owner` (its kind and version given).
pub fn reference(
    api_version: &str,
    kind: &str,
    name: &str,
    uid: &str,
    block: bool,
) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: None,
        block_owner_deletion: Some(block),
    }
}

/// Creates ConfigMap `name` in `namespace` with `owners`.
pub async fn config_map(
    client: &Client,
    namespace: &str,
    name: &str,
    owners: Vec<OwnerReference>,
) -> ConfigMap {
    let object = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references: (!owners.is_empty()).then_some(owners),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &object)
        .await
        .expect("create a config map")
}

pub fn uid_of<K: kube::Resource>(object: &K) -> String {
    object.uid().expect("a uid")
}

/// Waits until `check` holds (real time, at most 30 s).
pub async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    rudder_harness::eventually(what, Duration::from_secs(30), || {
        let done = check();
        async move { done.await.then_some(()) }
    })
    .await
}

/// Whether the named object of `api` exists.
pub async fn exists<K>(api: &Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.expect("get").is_some()
}
