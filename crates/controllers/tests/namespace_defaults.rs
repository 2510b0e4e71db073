//! What every namespace gets: the `default` ServiceAccount and the
//! `kube-root-ca.crt` ConfigMap, put back when deleted or changed.

mod support;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{TEST_CA, cluster, until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_namespace_gets_its_default_account_and_the_root_ca() {
    let c = cluster().await;
    let namespaces: Api<Namespace> = Api::all(c.admin.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "fresh"}})).expect("ns");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("create");
    let accounts: Api<ServiceAccount> = Api::namespaced(c.admin.clone(), "fresh");
    let config_maps: Api<ConfigMap> = Api::namespaced(c.admin.clone(), "fresh");
    until("the default account", || async {
        accounts.get_opt("default").await.expect("get").is_some()
    })
    .await;
    let ca_of = |cm: Option<ConfigMap>| {
        cm.and_then(|cm| cm.data)
            .and_then(|d| d.get("ca.crt").cloned())
    };
    until("the root CA", || async {
        ca_of(config_maps.get_opt("kube-root-ca.crt").await.expect("get")).as_deref()
            == Some(TEST_CA)
    })
    .await;
    let cm = config_maps.get("kube-root-ca.crt").await.expect("get");
    assert!(
        cm.metadata
            .annotations
            .unwrap_or_default()
            .get("kubernetes.io/description")
            .is_some_and(|d| d.contains("kube-apiserver")),
        "upstream's description"
    );

    accounts
        .delete("default", &DeleteParams::default())
        .await
        .expect("delete");
    until("the account is back", || async {
        accounts.get_opt("default").await.expect("get").is_some()
    })
    .await;
    config_maps
        .patch(
            "kube-root-ca.crt",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"ca.crt": "tampered"}})),
        )
        .await
        .expect("tamper");
    until("the CA is restored", || async {
        ca_of(config_maps.get_opt("kube-root-ca.crt").await.expect("get")).as_deref()
            == Some(TEST_CA)
    })
    .await;
    config_maps
        .delete("kube-root-ca.crt", &DeleteParams::default())
        .await
        .expect("delete");
    until("the CA is recreated", || async {
        ca_of(config_maps.get_opt("kube-root-ca.crt").await.expect("get")).as_deref()
            == Some(TEST_CA)
    })
    .await;
    // Existing namespaces (default, kube-system) have them too.
    let system: Api<ServiceAccount> = Api::namespaced(c.admin.clone(), "kube-system");
    until("kube-system's account", || async {
        system.get_opt("default").await.expect("get").is_some()
    })
    .await;
}
