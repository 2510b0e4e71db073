//! The agent's HTTPS server with real TLS (no root, the fake runtime):
//! a client without a certificate is 401, one the agent does not let in
//! 403 with upstream's message, the API server's certificate reads a
//! container's log, and an unknown pod is 404.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rudder_kubelet::cri::{self, Runtime};
use rudder_kubelet::server::{self, Node, ServingTls};
use rudder_kubelet::testing::FakeRuntime;
use rudder_runtime::Store;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

struct Pki {
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, "test-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("ca");
        Pki {
            ca_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate and key (PEM) for `cn` in `org`.
    fn issue(&self, cn: &str, org: &str, sans: Vec<String>, server: bool) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(sans).expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        params
            .distinguished_name
            .push(DnType::OrganizationName, org);
        params.extended_key_usages = vec![if server {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        (cert.pem(), key.serialize_pem())
    }
}

/// GET `path` over TLS as `client` (a certificate and key, or none): the
/// status code and the body as sent (chunk sizes and all).
async fn get(pki: &Pki, port: u16, client: Option<&(String, String)>, path: &str) -> (u16, String) {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pki.ca_pem.as_bytes()) {
        roots.add(cert.expect("ca")).expect("root");
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => {
            let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut cert.as_bytes())
                .collect::<Result<_, _>>()
                .expect("certs");
            let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut key.as_bytes())
                .expect("key")
                .expect("a key");
            builder.with_client_auth_cert(certs, key).expect("client")
        }
        None => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
        .await
        .expect("handshake");
    tls.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .expect("write");
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).to_string();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_server_lets_in_the_api_server_alone_and_serves_logs() {
    let dir = tempfile::tempdir().expect("dir");
    let runtime = Arc::new(FakeRuntime::new());
    let id = runtime
        .create_container(
            "sandbox",
            cri::ContainerConfig {
                metadata: Some(cri::v1::ContainerMetadata {
                    name: "c".into(),
                    attempt: 0,
                }),
                log_path: "c/0.log".into(),
                ..Default::default()
            },
            cri::PodSandboxConfig {
                log_directory: dir.path().display().to_string(),
                ..Default::default()
            },
        )
        .await
        .expect("create");
    runtime.start_container(&id).await.expect("start");
    std::fs::create_dir_all(dir.path().join("c")).expect("dir");
    std::fs::write(
        dir.path().join("c/0.log"),
        "2026-01-01T00:00:01Z stdout F one\n2026-01-01T00:00:02Z stderr F two\n",
    )
    .expect("log");
    let pods = Store::<Pod>::new();
    pods.apply(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": true,
                "restartCount": 0, "containerID": format!("containerd://{id}"), "state": {"running": {}}}]}
        }))
        .expect("pod"),
    );

    let pki = Pki::new();
    let (cert_pem, key_pem) = pki.issue(
        "system:node:n",
        "system:nodes",
        vec!["127.0.0.1".into()],
        true,
    );
    let tls = server::tls_config(&ServingTls {
        cert_pem,
        key_pem,
        client_ca_pem: pki.ca_pem.clone(),
    })
    .expect("tls");
    let listener = server::bind("127.0.0.1:0".parse().expect("address"))
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let stop = CancellationToken::new();
    let runtime: Arc<dyn Runtime> = runtime;
    let serving = tokio::spawn(server::serve(
        listener,
        tls,
        Node { pods, runtime },
        stop.clone(),
    ));

    let logs = "/containerLogs/default/p/c";
    assert_eq!(
        get(&pki, port, None, logs).await,
        (401, "Unauthorized\n".to_string())
    );
    let node = pki.issue("system:node:other", "system:nodes", Vec::new(), false);
    assert_eq!(
        get(&pki, port, Some(&node), logs).await,
        (
            403,
            "Forbidden (user=system:node:other, verb=get, resource=nodes, subresource=proxy)\n"
                .to_string()
        )
    );
    let apiserver = pki.issue(
        "kube-apiserver-kubelet-client",
        "system:masters",
        Vec::new(),
        false,
    );
    let (code, body) = get(&pki, port, Some(&apiserver), logs).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("one\ntwo\n"), "{body:?}");
    let (code, body) = get(
        &pki,
        port,
        Some(&apiserver),
        &format!("{logs}?tailLines=1&timestamps=true"),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("2026-01-01T00:00:02.000000000Z two\n"),
        "{body:?}"
    );
    assert!(!body.contains("one"), "{body:?}");
    assert_eq!(
        get(
            &pki,
            port,
            Some(&apiserver),
            "/containerLogs/default/nope/c"
        )
        .await,
        (404, "pod \"nope\" does not exist\n".to_string())
    );
    assert_eq!(
        get(&pki, port, Some(&apiserver), "/containerLogs/default/p/x").await,
        (404, "container \"x\" not found in pod \"p\"\n".to_string())
    );
    stop.cancel();
    serving.await.expect("stopped");
}
