//! Health that tells the truth: `/livez`, `/readyz`, `/healthz` and
//! `componentstatuses` report a store that cannot write (the embedded
//! store after a failed sync) or cannot answer (etcd stopped), with
//! upstream's check names, `?verbose` and `?exclude=`.

use std::time::Duration;

use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{ComponentStatus, ConfigMap};
use kube::api::{Api, PostParams};
use rudder_apiserver::{Identity, Server, ServerOptions};
use rudder_store::Store;
use rudder_store::testing::{ControlledSync, EtcdServer, embedded_with_sync};

async fn get(client: &kube::Client, path: &str) -> (u16, String) {
    let request = http::Request::get(path)
        .body(kube::client::Body::empty())
        .expect("request");
    let response = client.send(request).await.expect("an answer");
    let code = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (code, String::from_utf8_lossy(&body).into_owned())
}

async fn storage_healthy(client: &kube::Client) -> String {
    let components: Api<ComponentStatus> = Api::all(client.clone());
    let storage = components.get("storage").await.expect("storage");
    storage.conditions.expect("conditions")[0].status.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_write_makes_the_server_unhealthy() {
    let sync = ControlledSync::new();
    let store = embedded_with_sync(sync.clone()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(ServerOptions::new(dir.path(), store.store.clone(), None))
        .await
        .expect("start");
    let client = server.client(&Identity::admin());
    assert_eq!(get(&client, "/readyz").await, (200, "ok".into()));
    let (code, verbose) = get(&client, "/readyz?verbose").await;
    assert_eq!(code, 200);
    assert!(
        verbose.contains("[+]etcd ok\n[+]etcd-readiness ok"),
        "{verbose}"
    );
    assert!(verbose.ends_with("readyz check passed\n"), "{verbose}");
    assert_eq!(storage_healthy(&client).await, "True");

    // The disk fails under a write.
    sync.fail();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut object = ConfigMap::default();
    object.metadata.name = Some("lost".into());
    assert!(
        config_maps
            .create(&PostParams::default(), &object)
            .await
            .is_err()
    );

    for endpoint in ["/readyz", "/livez", "/healthz"] {
        let (code, body) = get(&client, endpoint).await;
        assert_eq!(code, 500, "{endpoint}: {body}");
        assert!(
            body.contains("[-]etcd failed: reason withheld"),
            "{endpoint}: {body}"
        );
        let name = endpoint.trim_start_matches('/');
        assert!(body.ends_with(&format!("{name} check failed\n")), "{body}");
    }
    let (code, one) = get(&client, "/readyz/etcd").await;
    assert_eq!(code, 500);
    assert!(one.starts_with("internal server error: "), "{one}");
    // Leaving the failing checks out, what is left passes.
    let (code, body) = get(&client, "/readyz?exclude=etcd&exclude=etcd-readiness").await;
    assert_eq!((code, body.as_str()), (200, "ok"));
    let (_, warned) = get(&client, "/livez?exclude=etcd&exclude=nope&verbose").await;
    assert!(warned.contains("[+]etcd excluded: ok"), "{warned}");
    assert!(
        warned.contains("warn: some health checks cannot be excluded: no matches for \"nope\""),
        "{warned}"
    );
    assert_eq!(storage_healthy(&client).await, "False");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_that_does_not_answer_makes_the_server_unready() {
    let mut etcd = EtcdServer::start().await.expect("etcd");
    let config = rudder_store::etcd::EtcdConfig::from_url(&etcd.url())
        .expect("url")
        .with_prefix("/health-test");
    let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(
        rudder_store::etcd::EtcdStore::connect(config)
            .await
            .expect("connect"),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(ServerOptions::new(dir.path(), store, None))
        .await
        .expect("start");
    let client = server.client(&Identity::admin());
    assert_eq!(get(&client, "/readyz").await.0, 200);
    etcd.stop().expect("stop etcd");
    let (code, body) = tokio::time::timeout(Duration::from_secs(20), get(&client, "/readyz"))
        .await
        .expect("an answer within the check's timeout");
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("[-]etcd failed"), "{body}");
    etcd.restart().await.expect("restart etcd");
    let mut ready = false;
    for _ in 0..100 {
        if get(&client, "/readyz").await.0 == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "ready again once etcd answers");
    server.stop().await;
}
