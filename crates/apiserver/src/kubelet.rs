//! Reaching node agents (upstream's `pkg/kubelet/client`): where a node's
//! agent listens — its preferred address from `status.addresses`
//! (InternalIP, then ExternalIP, then Hostname, k3s's order) and the port
//! from `status.daemonEndpoints.kubeletEndpoint` — and an HTTPS client
//! that verifies the agent's serving certificate against the cluster CA
//! and presents the API server's kubelet client certificate.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::Value;

/// The port upstream's kubelet listens on when a Node does not say.
pub const DEFAULT_PORT: u16 = 10250;
/// How long a connection to an agent may take (upstream's dialer: 30 s).
const DIAL_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a Node's agent is: `(host, port)`, or why it cannot be reached.
pub fn location(node: &Value) -> Result<(String, u16), String> {
    let addresses = node
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let name = node
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let host = ["InternalIP", "ExternalIP", "Hostname"]
        .iter()
        .find_map(|wanted| {
            addresses
                .iter()
                .find(|a| a["type"] == *wanted)
                .and_then(|a| a["address"].as_str())
                .filter(|a| !a.is_empty())
        })
        .ok_or_else(|| format!("no preferred addresses found; known addresses: {addresses:?}"))
        .map_err(|e| format!("node {name:?}: {e}"))?;
    let port = node
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .unwrap_or(DEFAULT_PORT);
    Ok((host.to_string(), port))
}

/// The API server's HTTPS client for node agents.
#[derive(Clone)]
pub struct KubeletClient {
    tls: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for KubeletClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletClient").finish_non_exhaustive()
    }
}

impl KubeletClient {
    pub fn new(config: rustls::ClientConfig) -> Self {
        KubeletClient {
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
        }
    }

    /// A TLS connection to the agent at `host:port`, its certificate
    /// verified and the API server's presented. The error is Go's way of
    /// saying it (`dial tcp …: connect: connection refused`).
    pub async fn dial(
        &self,
        host: &str,
        port: u16,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
        let authority = authority(host, port);
        let tcp = tokio::time::timeout(DIAL_TIMEOUT, tokio::net::TcpStream::connect((host, port)))
            .await
            .map_err(|_| format!("dial tcp {authority}: i/o timeout"))?
            .map_err(|e| format!("dial tcp {authority}: connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("invalid host {host:?}: {e}"))?;
        self.tls
            .connect(name, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))
    }

    /// `GET https://host:port/path_and_query`: the agent's response, its
    /// body streaming as the agent writes it. The connection ends when
    /// the body is read or dropped. The error is Go's way of saying it
    /// (`Get "https://…": dial tcp …: connection refused`).
    pub async fn get(
        &self,
        host: &str,
        port: u16,
        path_and_query: &str,
    ) -> Result<hyper::Response<Incoming>, String> {
        let authority = authority(host, port);
        let url = format!("https://{authority}{path_and_query}");
        let failed = |what: String| format!("Get {url:?}: {what}");
        let stream = self.dial(host, port).await.map_err(failed)?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| failed(e.to_string()))?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "a connection to a node agent ended");
            }
        });
        let request = hyper::Request::get(path_and_query)
            .header(hyper::header::HOST, authority.as_str())
            .header(hyper::header::USER_AGENT, "kube-apiserver")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .map_err(|e| failed(e.to_string()))?;
        sender
            .send_request(request)
            .await
            .map_err(|e| failed(e.to_string()))
    }
}

/// `host:port`, an IPv6 host in brackets.
pub fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_internal_ip_and_the_nodes_kubelet_port_are_preferred() {
        let node = json!({"metadata": {"name": "n"}, "status": {
            "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.5"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 12250}}}});
        assert_eq!(location(&node), Ok(("10.0.0.5".into(), 12250)));
        let bare = json!({"metadata": {"name": "n"}, "status": {
            "addresses": [{"type": "Hostname", "address": "n1"}]}});
        assert_eq!(location(&bare), Ok(("n1".into(), DEFAULT_PORT)));
        assert!(location(&json!({"metadata": {"name": "n"}})).is_err());
    }
}
