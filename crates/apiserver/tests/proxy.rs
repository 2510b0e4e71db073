//! The proxy subresources over real requests: upstream's refusals before
//! any backend is reached — addresses that may not be proxied to (a pod's
//! loopback IP, a node's link-local address), a Service without
//! Endpoints, without ready ones, without the port asked — and, when this
//! machine has an address other than loopback to serve a backend on, the
//! request forwarded and the answer streamed back: path, query, body and
//! headers as upstream sends them, the backend's redirects and HTML links
//! pointed through the proxy, an unreachable backend's 503.

use std::net::{IpAddr, SocketAddr};

use http_body_util::{BodyExt, Full};
use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use rudder_apiserver::{Identity, Server, ServerOptions};
use serde_json::{Value, json};

/// A request through the in-process client: its code, headers and body.
async fn call(
    client: &kube::Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, http::HeaderMap, String) {
    let mut request = http::Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(kube::client::Body::from(body.as_bytes().to_vec()))
        .expect("request");
    let response = client.send(request).await.expect("a response");
    let code = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the body")
        .to_bytes();
    (code, headers, String::from_utf8_lossy(&body).into_owned())
}

/// A GET's error Status: (code, reason, message).
async fn refusal(client: &kube::Client, path: &str) -> (u16, String, String) {
    let (code, _, body) = call(client, "GET", path, &[], "").await;
    let status: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("a Status: {body}"));
    assert_eq!(status["kind"], "Status", "{body}");
    (
        code,
        status["reason"].as_str().unwrap_or_default().to_string(),
        status["message"].as_str().unwrap_or_default().to_string(),
    )
}

fn refused(code: u16, reason: &str, message: &str) -> (u16, String, String) {
    (code, reason.to_string(), message.to_string())
}

/// Creates pod `name` in `default`, declaring `port`, with `ip` as its
/// address (none: not given one yet).
async fn pod(pods: &Api<Pod>, name: &str, port: u16, ip: Option<&str>) {
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
        "containers": [{"name": "c", "image": "i", "ports": [{"containerPort": port}]}]}}))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create the pod");
    if let Some(ip) = ip {
        let status = json!({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .expect("give the pod its IP");
    }
}

/// Endpoints `name` listing `addresses` (ip, pod) on `ports` (name, port).
async fn endpoints(
    api: &Api<Endpoints>,
    name: &str,
    addresses: &[(&str, &str)],
    ports: &[(&str, u16)],
) {
    let subsets = if addresses.is_empty() {
        json!([])
    } else {
        json!([{
            "addresses": addresses.iter().map(|(ip, pod)| json!({"ip": ip,
                "targetRef": {"kind": "Pod", "namespace": "default", "name": pod}})).collect::<Vec<_>>(),
            "ports": ports.iter().map(|(name, port)| json!({"name": name, "port": port, "protocol": "TCP"})).collect::<Vec<_>>(),
        }])
    };
    let object: Endpoints =
        serde_json::from_value(json!({"metadata": {"name": name}, "subsets": subsets}))
            .expect("endpoints");
    api.create(&PostParams::default(), &object)
        .await
        .expect("create the endpoints");
}

/// This machine's address towards the outside, if it has one that is not
/// loopback or link-local (a backend there may be proxied to).
fn outside_address() -> Option<IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("198.51.100.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    let IpAddr::V4(v4) = ip else { return None };
    (!v4.is_loopback() && !v4.is_unspecified() && !v4.is_link_local()).then_some(ip)
}

/// The backend's answers: `/redirect` a redirect, `/page` an HTML page,
/// anything else what it was asked, as JSON.
async fn answer(
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<Full<bytes::Bytes>>, http::Error> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut response = hyper::Response::builder();
    let text = match parts.uri.path() {
        "/redirect" => {
            response = response
                .status(302)
                .header("location", "/landing?from=redirect");
            String::new()
        }
        "/page" => {
            response = response
                .header("content-type", "text/html; charset=utf-8")
                .header("access-control-allow-origin", "*");
            "<html><body><a href=\"/docs/\">docs</a><img src=\"logo.png\"></body></html>"
                .to_string()
        }
        _ => {
            let headers: serde_json::Map<String, Value> = parts
                .headers
                .iter()
                .map(|(n, v)| (n.to_string(), json!(v.to_str().unwrap_or_default())))
                .collect();
            response = response.header("content-type", "application/json");
            json!({
                "method": parts.method.as_str(),
                "uri": parts.uri.to_string(),
                "headers": headers,
                "body": String::from_utf8_lossy(&body),
            })
            .to_string()
        }
    };
    response.body(Full::new(bytes::Bytes::from(text)))
}

/// A backend on `ip` giving [`answer`]s, over TLS with a self-signed
/// certificate when `tls`.
async fn backend(ip: IpAddr, tls: bool) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((ip, 0))
        .await
        .expect("bind the backend");
    let address = listener.local_addr().expect("address");
    let acceptor = tls.then(|| {
        let issued =
            rcgen::generate_simple_self_signed(vec!["backend".to_string()]).expect("a certificate");
        let key = rustls::pki_types::PrivateKeyDer::try_from(issued.signing_key.serialize_der())
            .expect("the key");
        let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![issued.cert.der().clone()], key)
        .expect("serving config");
        tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config))
    });
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let http = hyper::server::conn::http1::Builder::new();
                let service = hyper::service::service_fn(answer);
                let _ = match acceptor {
                    Some(acceptor) => match acceptor.accept(tcp).await {
                        Ok(tls) => {
                            http.serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                                .await
                        }
                        Err(_) => return,
                    },
                    None => {
                        http.serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                            .await
                    }
                };
            });
        }
    });
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxies_refuse_what_upstream_refuses_and_forward_the_rest() {
    let store = rudder_store::testing::embedded().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(ServerOptions::new(dir.path(), store.store.clone(), None))
        .await
        .expect("start");
    let client = server.client(&Identity::admin());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let endpoint_api: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    let not_allowed = refused(400, "BadRequest", "address not allowed");

    // Pods: no address yet, loopback, link-local.
    pod(&pods, "pending", 80, None).await;
    pod(&pods, "looped", 80, Some("127.0.0.1")).await;
    pod(&pods, "metadata", 80, Some("169.254.169.254")).await;
    for name in ["pending", "looped", "metadata", "https:looped:443"] {
        assert_eq!(
            refusal(
                &client,
                &format!("/api/v1/namespaces/default/pods/{name}/proxy/")
            )
            .await,
            not_allowed,
            "{name}"
        );
    }
    assert_eq!(
        refusal(&client, "/api/v1/namespaces/default/pods/missing/proxy/").await,
        refused(404, "NotFound", "pods \"missing\" not found")
    );
    assert_eq!(
        refusal(&client, "/api/v1/namespaces/default/pods/a:b:c:d/proxy/").await,
        refused(400, "BadRequest", "invalid pod request \"a:b:c:d\"")
    );

    // Services: no Endpoints, none ready, no such port, only a pod that
    // is not the address's, only a loopback pod.
    let service: Service = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {
        "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}))
    .expect("service");
    services
        .create(&PostParams::default(), &service)
        .await
        .expect("create the service");
    let web = "/api/v1/namespaces/default/services";
    assert_eq!(
        refusal(&client, &format!("{web}/web/proxy/")).await,
        refused(404, "NotFound", "endpoints \"web\" not found")
    );
    assert_eq!(
        refusal(&client, &format!("{web}/web:81/proxy/")).await,
        refused(
            503,
            "ServiceUnavailable",
            "no service port 81 found for service \"web\""
        )
    );
    endpoints(&endpoint_api, "web", &[], &[]).await;
    assert_eq!(
        refusal(&client, &format!("{web}/web:80/proxy/")).await,
        refused(
            503,
            "ServiceUnavailable",
            "no endpoints available for service \"web\""
        )
    );
    endpoints(
        &endpoint_api,
        "stale",
        &[("10.9.9.9", "looped")],
        &[("http", 8080)],
    )
    .await;
    assert_eq!(
        refusal(&client, &format!("{web}/stale:http/proxy/")).await,
        refused(
            503,
            "ServiceUnavailable",
            "no endpoints available for service \"stale:http\""
        )
    );
    endpoints(
        &endpoint_api,
        "looped",
        &[("127.0.0.1", "looped")],
        &[("", 8080)],
    )
    .await;
    assert_eq!(
        refusal(&client, &format!("{web}/looped/proxy/")).await,
        not_allowed
    );
    // The unnamed port is the one a bare name asks for.
    assert_eq!(
        refusal(&client, &format!("{web}/looped:http/proxy/")).await,
        refused(
            503,
            "ServiceUnavailable",
            "no endpoints available for service \"looped:http\""
        )
    );

    // Nodes: loopback and link-local addresses; a proxyable one is
    // reached through the kubelet client, which this server lacks.
    for (name, address) in [
        ("n-loop", "127.0.0.1"),
        ("n-link", "169.254.3.4"),
        ("n-ok", "192.0.2.77"),
    ] {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("create the node");
        let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": address}]}});
        nodes
            .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .expect("give the node its address");
    }
    for name in ["n-loop", "n-link", "n-link:10255"] {
        assert_eq!(
            refusal(&client, &format!("/api/v1/nodes/{name}/proxy/pods")).await,
            not_allowed,
            "{name}"
        );
    }
    assert_eq!(
        refusal(&client, "/api/v1/nodes/n-ok/proxy/pods").await.0,
        503
    );
    assert_eq!(
        refusal(&client, "/api/v1/nodes/missing/proxy/pods").await,
        refused(404, "NotFound", "nodes \"missing\" not found")
    );

    let Some(ip) = outside_address() else {
        eprintln!("no address but loopback here: the forwarding itself is not tested");
        server.stop().await;
        return;
    };
    let address = backend(ip, false).await;
    let ip_text = ip.to_string();
    pod(&pods, "echo", address.port(), Some(&ip_text)).await;
    let echo = "/api/v1/namespaces/default/pods/echo/proxy";

    // Path, query, body and headers as upstream forwards them.
    let (code, _, body) = call(
        &client,
        "POST",
        &format!("{echo}/a/b/?x=1&y=%2F"),
        &[
            ("authorization", "Bearer not-for-the-pod"),
            ("impersonate-user", "someone"),
            ("x-custom", "kept"),
            ("content-type", "text/plain"),
        ],
        "hello",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let echoed: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(echoed["method"], "POST");
    assert_eq!(echoed["uri"], "/a/b/?x=1&y=%2F");
    assert_eq!(echoed["body"], "hello");
    let headers = &echoed["headers"];
    assert_eq!(headers["x-custom"], "kept");
    assert_eq!(headers["x-forwarded-uri"], format!("{echo}/a/b/"));
    assert_eq!(headers.get("authorization"), None);
    assert_eq!(headers.get("impersonate-user"), None);

    // `…/proxy` is redirected to `…/proxy/`.
    let (code, headers, _) = call(&client, "GET", &format!("{echo}?q=1"), &[], "").await;
    assert_eq!(code, 301);
    assert_eq!(headers["location"], format!("{echo}/?q=1"));
    let (code, _, body) = call(&client, "GET", &format!("{echo}/"), &[], "").await;
    assert_eq!(
        (
            code,
            serde_json::from_str::<Value>(&body).expect("json")["uri"].clone()
        ),
        (200, json!("/"))
    );

    // The backend's redirects and links point through the proxy; its
    // CORS headers stay behind.
    let (code, headers, _) = call(&client, "GET", &format!("{echo}/redirect"), &[], "").await;
    assert_eq!(code, 302);
    assert_eq!(headers["location"], format!("{echo}/landing?from=redirect"));
    let (code, headers, body) = call(&client, "GET", &format!("{echo}/page"), &[], "").await;
    assert_eq!(code, 200);
    assert_eq!(headers.get("access-control-allow-origin"), None);
    assert_eq!(
        body,
        format!(
            "<html><body><a href=\"{echo}/docs/\">docs</a><img src=\"logo.png\"></body></html>"
        )
    );

    // Through the Service, by port name and by number.
    let service: Service = serde_json::from_value(json!({"metadata": {"name": "echo"}, "spec": {
        "ports": [{"name": "http", "port": 80, "targetPort": address.port()}]}}))
    .expect("service");
    services
        .create(&PostParams::default(), &service)
        .await
        .expect("create the service");
    endpoints(
        &endpoint_api,
        "echo",
        &[(&ip_text, "echo")],
        &[("http", address.port())],
    )
    .await;
    for name in ["echo:http", "echo:80", "http:echo:http"] {
        let (code, _, body) = call(
            &client,
            "GET",
            &format!("{web}/{name}/proxy/healthz?full=1"),
            &[],
            "",
        )
        .await;
        assert_eq!(code, 200, "{name}: {body}");
        let echoed: Value = serde_json::from_str(&body).expect("json");
        assert_eq!(echoed["uri"], "/healthz?full=1", "{name}");
        assert_eq!(
            echoed["headers"]["x-forwarded-uri"],
            format!("{web}/{name}/proxy/healthz"),
            "{name}"
        );
    }

    // `https:` with a port: over TLS, the backend's certificate not
    // verified (pods are reached by IP).
    let secure = backend(ip, true).await;
    pod(&pods, "secure", 80, Some(&ip_text)).await;
    let (code, _, body) = call(
        &client,
        "GET",
        &format!(
            "/api/v1/namespaces/default/pods/https:secure:{}/proxy/tls",
            secure.port()
        ),
        &[],
        "",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json")["uri"],
        "/tls"
    );

    // A backend that is not there.
    let closed = tokio::net::TcpListener::bind((ip, 0))
        .await
        .expect("bind")
        .local_addr()
        .expect("address")
        .port();
    pod(&pods, "gone", closed, Some(&ip_text)).await;
    assert_eq!(
        refusal(&client, "/api/v1/namespaces/default/pods/gone/proxy/").await,
        refused(
            503,
            "ServiceUnavailable",
            &format!(
                "error trying to reach service: dial tcp {ip}:{closed}: connect: connection refused"
            )
        )
    );
    server.stop().await;
}

mod support;

/// A TLS connection to the API server as its admin, from the kubeconfig
/// it wrote.
async fn admin_connection(
    kubeconfig: &std::path::Path,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use base64::Engine;
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
    let config: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    let pem = |pointer: &str| {
        let data = config
            .pointer(pointer)
            .and_then(Value::as_str)
            .expect(pointer);
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("base64")
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in
        rustls_pemfile::certs(&mut pem("/clusters/0/cluster/certificate-authority-data").as_slice())
    {
        roots.add(cert.expect("ca")).expect("add the CA");
    }
    let certs = rustls_pemfile::certs(&mut pem("/users/0/user/client-certificate-data").as_slice())
        .collect::<Result<Vec<_>, _>>()
        .expect("client certificate");
    let key = rustls_pemfile::private_key(&mut pem("/users/0/user/client-key-data").as_slice())
        .expect("key")
        .expect("a key");
    let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_client_auth_cert(certs, key)
    .expect("client auth");
    let server = config
        .pointer("/clusters/0/cluster/server")
        .and_then(Value::as_str)
        .expect("server");
    let authority = server.trim_start_matches("https://").trim_end_matches('/');
    let tcp = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect");
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).expect("name");
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls))
        .connect(name, tcp)
        .await
        .expect("TLS")
}

/// Reads up to the end of an HTTP head.
async fn read_head<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> String {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.expect("read") == 0 {
            break;
        }
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_through_a_pod_proxy_is_spliced() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(ip) = outside_address() else {
        eprintln!("no address but loopback here: upgrades are not tested");
        return;
    };
    // A backend that switches protocols, says which request line it got,
    // then answers each chunk in capitals; `/refuse` is refused.
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let head = read_head(&mut tcp).await;
                let line = head.lines().next().unwrap_or_default().to_string();
                if line.contains("/refuse") {
                    let _ = tcp
                        .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 4\r\n\r\nnope")
                        .await;
                    return;
                }
                let switched = format!(
                    "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n{line}\n"
                );
                if tcp.write_all(switched.as_bytes()).await.is_err() {
                    return;
                }
                let mut buffer = [0u8; 1024];
                while let Ok(n) = tcp.read(&mut buffer).await {
                    if n == 0
                        || tcp
                            .write_all(&buffer[..n].to_ascii_uppercase())
                            .await
                            .is_err()
                    {
                        break;
                    }
                }
            });
        }
    });

    let server = support::start(support::Backend::Embedded).await;
    let pods: Api<Pod> = Api::namespaced(server.client.clone(), "default");
    pod(&pods, "ws", port, Some(&ip.to_string())).await;

    let mut stream = admin_connection(&server.kubeconfig).await;
    stream
        .write_all(
            concat!(
                "GET /api/v1/namespaces/default/pods/ws/proxy/socket?token=x HTTP/1.1\r\n",
                "Host: rudder\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n",
                "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .expect("write");
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\n") {
        stream.read_exact(&mut byte).await.expect("read");
        line.push(byte[0]);
    }
    // As upstream's `tryUpgrade`, the location's path without the query.
    assert_eq!(String::from_utf8_lossy(&line), "GET /socket HTTP/1.1\n");
    stream.write_all(b"ping").await.expect("write");
    let mut answer = [0u8; 4];
    stream.read_exact(&mut answer).await.expect("read");
    assert_eq!(&answer, b"PING");
    drop(stream);

    // A refusal goes back as the backend wrote it.
    let mut stream = admin_connection(&server.kubeconfig).await;
    stream
        .write_all(
            concat!(
                "GET /api/v1/namespaces/default/pods/ws/proxy/refuse HTTP/1.1\r\n",
                "Host: rudder\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .expect("write");
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let mut body = [0u8; 4];
    stream.read_exact(&mut body).await.expect("body");
    assert_eq!(&body, b"nope");
}
