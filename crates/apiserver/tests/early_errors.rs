//! Answers given before the request body is read (405, 413, 415), over
//! HTTP/2 and HTTP/1.1, with curl as the client: each must arrive as its
//! `Status`, not as a reset stream (issue 13).

mod support;

use base64::Engine;
use support::Backend;

/// Writes the kubeconfig's CA, client certificate and key as PEM files.
fn credentials(server: &support::Server) -> [std::path::PathBuf; 3] {
    let kubeconfig = std::fs::read_to_string(&server.kubeconfig).expect("kubeconfig");
    [
        "certificate-authority-data",
        "client-certificate-data",
        "client-key-data",
    ]
    .map(|field| {
        let encoded = kubeconfig
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{field}: ")))
            .expect("field");
        let pem = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .expect("base64");
        let path = server.dir.path().join(format!("{field}.pem"));
        std::fs::write(&path, pem).expect("write");
        path
    })
}

fn server_url(server: &support::Server) -> String {
    let kubeconfig = std::fs::read_to_string(&server.kubeconfig).expect("kubeconfig");
    kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .expect("server")
        .to_string()
}

/// `curl` the request; the HTTP code and the body's `reason`.
fn curl(
    protocol: &str,
    creds: &[std::path::PathBuf; 3],
    method: &str,
    url: &str,
    content_type: &str,
    body: &std::path::Path,
) -> (String, String) {
    let output = std::process::Command::new("curl")
        .args(["-sS", protocol, "-X", method, "-H"])
        .arg(format!("Content-Type: {content_type}"))
        .arg("--cacert")
        .arg(&creds[0])
        .arg("--cert")
        .arg(&creds[1])
        .arg("--key")
        .arg(&creds[2])
        .arg("--data-binary")
        .arg(format!("@{}", body.display()))
        .args(["-w", "\n%{http_code}", url])
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let reason = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["reason"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&output.stderr).to_string());
    (code.to_string(), reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_errors_reach_the_client_over_http2_and_http11() {
    let server = support::start(Backend::Embedded).await;
    let creds = credentials(&server);
    let base = server_url(&server);
    let small = server.dir.path().join("small");
    std::fs::write(&small, vec![b'a'; 300 * 1024]).expect("write");
    let large = server.dir.path().join("large");
    std::fs::write(&large, vec![b'a'; 8 * 1024 * 1024]).expect("write");
    let configmaps = format!("{base}/api/v1/namespaces/default/configmaps");
    let cases = [
        (
            "POST",
            format!("{configmaps}/keep"),
            "application/json",
            &small,
            "405",
            "MethodNotAllowed",
        ),
        (
            "POST",
            format!("{configmaps}/keep"),
            "application/json",
            &large,
            "405",
            "MethodNotAllowed",
        ),
        (
            "POST",
            configmaps.clone(),
            "application/json",
            &large,
            "413",
            "RequestEntityTooLarge",
        ),
        (
            "PATCH",
            format!("{configmaps}/keep"),
            "text/plain",
            &large,
            "415",
            "UnsupportedMediaType",
        ),
        (
            "POST",
            configmaps.clone(),
            "text/plain",
            &small,
            "415",
            "UnsupportedMediaType",
        ),
    ];
    for protocol in ["--http2", "--http1.1"] {
        for (method, url, content_type, body, code, reason) in &cases {
            let got = curl(protocol, &creds, method, url, content_type, body);
            assert_eq!(
                got,
                (code.to_string(), reason.to_string()),
                "{protocol} {method} {url} ({content_type}, {} bytes)",
                std::fs::metadata(body).map(|m| m.len()).unwrap_or(0)
            );
        }
    }
}
