//! The service load balancer: LoadBalancer Services work on a bare
//! machine, as k3s's ServiceLB makes them work, but without its DaemonSet
//! of hostPort pods. A LoadBalancer Service that names no
//! `loadBalancerClass` gets `status.loadBalancer.ingress` set to the
//! addresses of the nodes that may carry it — the Ready nodes labelled
//! `svccontroller.k3s.cattle.io/enablelb=true` when any node is, else
//! every Ready node — and the service proxy on each node answers on them
//! (with `externalTrafficPolicy: Local` keeping the client's address,
//! which k3s's ServiceLB loses). A Service with another class is left to
//! its own controller; one that stops being a LoadBalancer loses the
//! addresses this controller gave it.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, Patch, PatchParams};
use rudder_runtime::controller::Action;
use rudder_runtime::informer::{Store, key_of};
use rudder_runtime::{Change, WorkQueue};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Context;
use crate::is_status;

/// The node label that picks the nodes carrying load balancers (k3s's).
pub const ENABLE_LABEL: &str = "svccontroller.k3s.cattle.io/enablelb";

/// Whether this controller serves `service`.
pub fn serves(service: &Service) -> bool {
    let Some(spec) = &service.spec else {
        return false;
    };
    spec.type_.as_deref() == Some("LoadBalancer") && spec.load_balancer_class.is_none()
}

/// A node's address for load balancers: its ExternalIP, else its
/// InternalIP (IPv4; never loopback, which no client elsewhere could
/// reach and on which the proxy answers no external traffic).
fn address(node: &Node) -> Option<Ipv4Addr> {
    let addresses = node.status.as_ref()?.addresses.as_ref()?;
    let of = |kind: &str| {
        addresses
            .iter()
            .filter(|a| a.type_ == kind)
            .filter_map(|a| a.address.parse::<Ipv4Addr>().ok())
            .find(|ip| !ip.is_loopback())
    };
    of("ExternalIP").or_else(|| of("InternalIP"))
}

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn enabled(node: &Node) -> Option<bool> {
    node.metadata
        .labels
        .as_ref()?
        .get(ENABLE_LABEL)
        .map(|v| v == "true")
}

/// The load balancer addresses `nodes` give: the labelled nodes' when any
/// node carries the label set to true, else every node's; Ready nodes
/// only, each once, in order.
pub fn addresses<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> Vec<Ipv4Addr> {
    let nodes: Vec<&Node> = nodes.into_iter().collect();
    let chosen = nodes.iter().any(|n| enabled(n) == Some(true));
    let set: BTreeSet<Ipv4Addr> = nodes
        .iter()
        .filter(|n| ready(n))
        .filter(|n| !chosen || enabled(n) == Some(true))
        .filter_map(|n| address(n))
        .collect();
    set.into_iter().collect()
}

/// The ingress `status.loadBalancer` holds now, as addresses.
fn current(service: &Service) -> Vec<String> {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|ingress| ingress.iter().filter_map(|i| i.ip.clone()).collect())
        .unwrap_or_default()
}

struct Controller {
    ctx: Arc<Context>,
    services: Store<Service>,
    nodes: Store<Node>,
    queue: WorkQueue<String>,
}

/// Runs the service load balancer until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let services = ctx.informers.typed::<Service>();
    let nodes = ctx.informers.typed::<Node>();
    let mut service_changes = services.subscribe();
    let mut node_changes = nodes.subscribe();
    let c = Arc::new(Controller {
        services: services.store(),
        nodes: nodes.store(),
        queue: WorkQueue::new(ctx.clock.clone()),
        ctx: ctx.clone(),
    });
    services.wait_synced().await;
    nodes.wait_synced().await;
    let enqueue_all = {
        let c = c.clone();
        move || {
            for service in c.services.list() {
                if serves(&service) || !current(&service).is_empty() {
                    c.queue.add(key_of(&*service));
                }
            }
        }
    };
    enqueue_all();
    let watch = {
        let (c, stop) = (c.clone(), stop.clone());
        async move {
            loop {
                tokio::select! {
                    change = service_changes.next_until(&stop) => match change {
                        Some(Change::Applied { new, .. }) => c.queue.add(key_of(&*new)),
                        Some(Change::Deleted(_)) => {}
                        Some(Change::Resync) => enqueue_all(),
                        None => return,
                    },
                    change = node_changes.next_until(&stop) => match change {
                        Some(_) => enqueue_all(),
                        None => return,
                    },
                }
            }
        }
    };
    crate::serve(
        "service-lb",
        c.clone(),
        c.queue.clone(),
        2,
        None,
        watch,
        stop,
        |c, key| async move { c.sync(&key).await },
    )
    .await;
}

impl Controller {
    async fn sync(&self, key: &str) -> Result<Action, kube::Error> {
        let Some(service) = self.services.get(key) else {
            return Ok(Action::Done);
        };
        let has = current(&service);
        let wanted: Vec<String> = if serves(&service) {
            addresses(self.nodes.list().iter().map(|n| &**n))
                .iter()
                .map(ToString::to_string)
                .collect()
        } else if service
            .spec
            .as_ref()
            .is_some_and(|s| s.type_.as_deref() == Some("LoadBalancer"))
        {
            // Another class's: its own controller's business.
            return Ok(Action::Done);
        } else {
            Vec::new()
        };
        if has == wanted {
            return Ok(Action::Done);
        }
        let ingress: Vec<_> = wanted.iter().map(|ip| json!({"ip": ip})).collect();
        let patch = json!({"status": {"loadBalancer": if ingress.is_empty() {
            json!({})
        } else {
            json!({"ingress": ingress})
        }}});
        let api: Api<Service> = Api::namespaced(
            self.ctx.client.clone(),
            service.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let name = service.metadata.name.as_deref().unwrap_or_default();
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(Action::Done),
            Err(e) if is_status(&e, 404) => Ok(Action::Done),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, ip: &str, ready: bool, label: Option<&str>) -> Node {
        let mut labels = serde_json::Map::new();
        if let Some(value) = label {
            labels.insert(ENABLE_LABEL.into(), json!(value));
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "status": {
                "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]
            }
        }))
        .expect("a Node")
    }

    #[test]
    fn every_ready_node_carries_load_balancers_unless_some_are_chosen() {
        let nodes = [
            node("a", "192.168.1.12", true, None),
            node("b", "192.168.1.11", true, None),
            node("c", "192.168.1.13", false, None),
            node("d", "127.0.0.1", true, None),
        ];
        let ips = |nodes: &[Node]| -> Vec<String> {
            addresses(nodes.iter())
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(ips(&nodes), ["192.168.1.11", "192.168.1.12"]);
        let chosen = [
            node("a", "192.168.1.12", true, Some("true")),
            node("b", "192.168.1.11", true, Some("false")),
            node("c", "192.168.1.13", true, None),
        ];
        assert_eq!(ips(&chosen), ["192.168.1.12"]);
    }

    #[test]
    fn an_external_address_wins_over_the_internal_one() {
        let mut n = node("a", "10.0.0.5", true, None);
        if let Some(addresses) = n.status.as_mut().and_then(|s| s.addresses.as_mut()) {
            addresses.push(
                serde_json::from_value(json!({"type": "ExternalIP", "address": "203.0.113.9"}))
                    .expect("an address"),
            );
        }
        assert_eq!(address(&n), Some(Ipv4Addr::new(203, 0, 113, 9)));
    }

    #[test]
    fn only_load_balancers_without_a_class_are_served() {
        let service = |spec: serde_json::Value| -> Service {
            serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": spec}))
                .expect("a Service")
        };
        assert!(serves(&service(json!({"type": "LoadBalancer"}))));
        assert!(!serves(&service(
            json!({"type": "LoadBalancer", "loadBalancerClass": "example.com/lb"})
        )));
        assert!(!serves(&service(json!({"type": "NodePort"}))));
    }
}
