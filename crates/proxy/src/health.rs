//! `healthCheckNodePort`s, as upstream's `pkg/proxy/healthcheck` serves
//! them: a LoadBalancer Service with `externalTrafficPolicy: Local` gets
//! an HTTP server on its health check port, on every address of the node,
//! answering any path with 200 while this node has a ready endpoint of it
//! (and the proxy is healthy), 503 otherwise — so that a load balancer in
//! front sends traffic only to nodes that keep the client's address *and*
//! can serve it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::model::ServiceName;

/// One Service's health check, as the proxy last computed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub service: ServiceName,
    /// Distinct addresses of this node's ready endpoints, over its ports.
    pub local_endpoints: usize,
}

/// What a health check answers, status and body (upstream's exact bytes).
pub fn answer(service: &ServiceName, local_endpoints: usize, proxy_healthy: bool) -> (u16, String) {
    let status = if local_endpoints > 0 && proxy_healthy {
        200
    } else {
        503
    };
    let body = format!(
        "{{\n\t\"service\": {{\n\t\t\"namespace\": {},\n\t\t\"name\": {}\n\t}},\n\t\"localEndpoints\": {local_endpoints},\n\t\"serviceProxyHealthy\": {proxy_healthy}\n}}",
        serde_json::Value::from(service.namespace.as_str()),
        serde_json::Value::from(service.name.as_str()),
    );
    (status, body)
}

struct Served {
    service: std::sync::Mutex<ServiceName>,
    local_endpoints: AtomicUsize,
    stop: CancellationToken,
}

/// The health check servers of this node, one per port.
pub struct Servers {
    served: BTreeMap<u16, Arc<Served>>,
    /// Whether the proxy's last transaction was applied.
    pub proxy_healthy: Arc<AtomicBool>,
    stop: CancellationToken,
}

impl std::fmt::Debug for Servers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Servers")
            .field("ports", &self.served.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Servers {
    pub fn new(stop: CancellationToken) -> Servers {
        Servers {
            served: BTreeMap::new(),
            proxy_healthy: Arc::new(AtomicBool::new(true)),
            stop,
        }
    }

    /// Serves exactly `wanted` (port → check): new ports are opened, gone
    /// ones closed, counts updated. A port that cannot be opened is
    /// retried at the next call.
    pub async fn sync(&mut self, wanted: &BTreeMap<u16, Check>) {
        self.served.retain(|port, served| {
            let keep = wanted.contains_key(port);
            if !keep {
                served.stop.cancel();
            }
            keep
        });
        for (port, check) in wanted {
            if let Some(served) = self.served.get(port) {
                served
                    .local_endpoints
                    .store(check.local_endpoints, Ordering::Relaxed);
                if let Ok(mut service) = served.service.lock() {
                    *service = check.service.clone();
                }
                continue;
            }
            let listener = match tokio::net::TcpListener::bind(("0.0.0.0", *port)).await {
                Ok(listener) => listener,
                Err(error) => {
                    tracing::warn!(port, service = %check.service, %error, "could not serve a health check node port");
                    continue;
                }
            };
            let served = Arc::new(Served {
                service: std::sync::Mutex::new(check.service.clone()),
                local_endpoints: AtomicUsize::new(check.local_endpoints),
                stop: self.stop.child_token(),
            });
            tokio::spawn(serve(listener, served.clone(), self.proxy_healthy.clone()));
            self.served.insert(*port, served);
        }
    }
}

async fn serve(listener: tokio::net::TcpListener, served: Arc<Served>, healthy: Arc<AtomicBool>) {
    loop {
        let accepted = tokio::select! {
            _ = served.stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((mut stream, _)) = accepted else {
            continue;
        };
        let (service, count) = (
            served
                .service
                .lock()
                .map(|s| s.clone())
                .unwrap_or_else(|e| e.into_inner().clone()),
            served.local_endpoints.load(Ordering::Relaxed),
        );
        let healthy = healthy.load(Ordering::Relaxed);
        tokio::spawn(async move {
            // Read the request's head (any path, any method), then answer.
            let mut head = Vec::new();
            let mut buffer = [0u8; 1024];
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buffer[..n]),
                    }
                }
            })
            .await;
            if read.is_err() {
                return;
            }
            let (status, body) = answer(&service, count, healthy);
            let reason = if status == 200 {
                "OK"
            } else {
                "Service Unavailable"
            };
            let response = format!(
                "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nX-Load-Balancing-Endpoint-Weight: {count}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_upstreams() {
        let (status, body) = answer(&ServiceName::new("ns1", "svc1"), 1, true);
        assert_eq!(status, 200);
        assert_eq!(
            body,
            "{\n\t\"service\": {\n\t\t\"namespace\": \"ns1\",\n\t\t\"name\": \"svc1\"\n\t},\n\t\"localEndpoints\": 1,\n\t\"serviceProxyHealthy\": true\n}"
        );
        assert_eq!(answer(&ServiceName::new("a", "b"), 0, true).0, 503);
        assert_eq!(answer(&ServiceName::new("a", "b"), 2, false).0, 503);
    }

    #[tokio::test]
    async fn a_port_answers_while_wanted_and_closes_when_not() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = free.local_addr().expect("address").port();
        drop(free);
        let mut servers = Servers::new(CancellationToken::new());
        let check = |n| Check {
            service: ServiceName::new("ns", "lb"),
            local_endpoints: n,
        };
        servers.sync(&[(port, check(0))].into()).await;
        let get = || async move {
            let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()?;
            stream
                .write_all(b"GET /anything HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .ok()?;
            let mut text = String::new();
            stream.read_to_string(&mut text).await.ok()?;
            Some(text)
        };
        let text = get().await.expect("answers");
        assert!(text.starts_with("HTTP/1.1 503"), "{text}");
        servers.sync(&[(port, check(2))].into()).await;
        let text = get().await.expect("answers");
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(text.contains("\"localEndpoints\": 2"), "{text}");
        servers.sync(&BTreeMap::new()).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(get().await.is_none(), "closed");
    }
}
