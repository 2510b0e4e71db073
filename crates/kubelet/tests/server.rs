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
    let (code, body, _) = request(pki, port, client, "GET", path, "").await;
    (code, body)
}

/// A TLS connection to the agent as `client`.
async fn connect(
    pki: &Pki,
    port: u16,
    client: Option<&(String, String)>,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
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
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
        .await
        .expect("handshake")
}

/// `method path` with `headers` (CRLF-terminated lines) over TLS as
/// `client`: the code, the body, and the connection (after a 101, the
/// upgraded stream).
async fn request(
    pki: &Pki,
    port: u16,
    client: Option<&(String, String)>,
    method: &str,
    path: &str,
    headers: &str,
) -> (
    u16,
    String,
    tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
) {
    let mut tls = connect(pki, port, client).await;
    let connection = if headers.is_empty() {
        "Connection: close\r\n"
    } else {
        ""
    };
    tls.write_all(
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{connection}{headers}\r\n")
            .as_bytes(),
    )
    .await
    .expect("write");
    if !headers.is_empty() {
        // An upgrade: read the head alone; the rest is the stream's.
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if tls.read(&mut byte).await.unwrap_or(0) == 0 {
                break;
            }
            head.push(byte[0]);
        }
        let text = String::from_utf8_lossy(&head).to_string();
        let code = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        if code != 101 {
            let mut rest = Vec::new();
            let length = text
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            rest.resize(length, 0);
            let _ = tls.read_exact(&mut rest).await;
            return (code, String::from_utf8_lossy(&rest).to_string(), tls);
        }
        return (code, String::new(), tls);
    }
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
    (code, body, tls)
}

/// The agent's server for `pods` on `runtime`, on a free port, with a
/// serving certificate from a test CA: the CA, the port, the stop switch
/// and the serving task.
async fn serve(
    pods: Store<Pod>,
    runtime: Arc<dyn Runtime>,
) -> (Pki, u16, CancellationToken, tokio::task::JoinHandle<()>) {
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
    let serving = tokio::spawn(server::serve(
        listener,
        tls,
        Node {
            pods,
            runtime,
            streaming: server::Streaming {
                idle_timeout: server::DEFAULT_IDLE_TIMEOUT,
                stop: stop.clone(),
            },
        },
        stop.clone(),
    ));
    (pki, port, stop, serving)
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

    let runtime: Arc<dyn Runtime> = runtime;
    let (pki, port, stop, serving) = serve(pods, runtime).await;

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

/// A stand-in for the runtime's streaming server: answers one upgrade
/// with 101 and echoes what follows; sends the request head it got.
async fn streaming_server() -> (u16, tokio::sync::oneshot::Receiver<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                return;
            }
            head.push(byte[0]);
        }
        let _ = tx.send(String::from_utf8_lossy(&head).to_string());
        stream
            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n")
            .await
            .expect("101");
        let (mut read, mut write) = stream.split();
        let _ = tokio::io::copy(&mut read, &mut write).await;
    });
    (port, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_refused_as_the_kubelet_refuses_them_and_relayed_to_the_runtime() {
    let runtime = Arc::new(FakeRuntime::new());
    let labels: std::collections::HashMap<String, String> =
        [(cri::POD_UID_LABEL.to_string(), "uid-1".to_string())].into();
    let sandbox = runtime
        .run_pod_sandbox(cri::PodSandboxConfig {
            metadata: Some(cri::v1::PodSandboxMetadata {
                name: "p".into(),
                namespace: "default".into(),
                uid: "uid-1".into(),
                attempt: 0,
            }),
            labels: labels.clone(),
            ..Default::default()
        })
        .await
        .expect("sandbox");
    let id = runtime
        .create_container(
            &sandbox,
            cri::ContainerConfig {
                metadata: Some(cri::v1::ContainerMetadata {
                    name: "c".into(),
                    attempt: 0,
                }),
                labels,
                ..Default::default()
            },
            cri::PodSandboxConfig::default(),
        )
        .await
        .expect("create");
    runtime.start_container(&id).await.expect("start");
    let (streaming_port, seen) = streaming_server().await;
    runtime.serve_streams_at(&format!("http://127.0.0.1:{streaming_port}"));
    let pods = Store::<Pod>::new();
    pods.apply(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "uid-1"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .expect("pod"),
    );
    let (pki, port, stop, serving) = serve(pods, runtime.clone()).await;
    let apiserver = pki.issue(
        "kube-apiserver-kubelet-client",
        "system:masters",
        Vec::new(),
        false,
    );
    let spdy = "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n";
    let ask = |method: &'static str, path: &'static str, headers: &'static str| {
        let (pki, apiserver) = (&pki, &apiserver);
        async move {
            let (code, body, _) = request(pki, port, Some(apiserver), method, path, headers).await;
            (code, body.trim_end().to_string())
        }
    };

    assert_eq!(
        ask("POST", "/exec/default/p/c?command=true&output=1", "").await,
        (400, "Upgrade request required".into())
    );
    assert_eq!(
        ask("POST", "/exec/default/nope/c?output=1", spdy).await,
        (404, "pod does not exist".into())
    );
    assert_eq!(
        ask("POST", "/exec/default/p/uid-2/c?output=1", spdy).await,
        (404, "pod does not exist".into())
    );
    assert_eq!(
        ask("POST", "/exec/default/p/c?command=true", spdy).await,
        (
            400,
            "you must specify at least 1 of stdin, stdout, stderr".into()
        )
    );
    assert_eq!(
        ask("POST", "/exec/default/p/other?command=true&output=1", spdy).await,
        (500, "container not found (\"other\")".into())
    );
    assert_eq!(ask("PUT", "/exec/default/p/c?output=1", spdy).await.0, 405);
    let ws = "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    assert_eq!(
        ask("GET", "/portForward/default/p", ws).await,
        (400, "query parameter \"port\" is required".into())
    );

    // A stream the runtime takes: relayed there, the bytes spliced.
    let (code, _, mut stream) = request(
        &pki,
        port,
        Some(&apiserver),
        "POST",
        "/exec/default/p/uid-1/c?command=echo&command=hi&input=1&output=1",
        spdy,
    )
    .await;
    assert_eq!(code, 101);
    let head = seen.await.expect("the runtime was asked");
    assert!(
        head.starts_with(&format!(
            "POST /exec/{id}?command=echo&command=hi&input=1&output=1 HTTP/1.1\r\n"
        )),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains("x-stream-protocol-version: v4.channel.k8s.io"),
        "{head}"
    );
    stream.write_all(b"spdy frames").await.expect("write");
    let mut echoed = [0u8; 11];
    stream.read_exact(&mut echoed).await.expect("echo");
    assert_eq!(&echoed, b"spdy frames");
    assert!(
        runtime.calls().contains(&format!("Exec {id} echo hi")),
        "{:?}",
        runtime.calls()
    );
    drop(stream);
    stop.cancel();
    serving.await.expect("stopped");
}
