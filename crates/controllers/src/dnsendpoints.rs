//! The cluster DNS Service's endpoints. rudder's DNS is not a pod but a
//! part of every node agent (unless it runs with `--disable-dns`),
//! answering on its node's pod gateway — the first address of the node's
//! podCIDR, port 53. An agent whose DNS serves says so on its Node
//! ([`SERVING_ANNOTATION`]); this controller keeps the `kube-system/
//! kube-dns` Service's EndpointSlice listing those nodes' gateways, each
//! ready while its Node is Ready. The Service's `internalTrafficPolicy:
//! Local` then sends every node's queries to its own DNS — no query
//! crosses nodes. The same endpoints go into the legacy Endpoints object
//! older clients read.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Endpoints, Node};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use rudder_api::network::Cidr;
use rudder_runtime::controller::Action;
use rudder_runtime::informer::Store;
use rudder_runtime::{Change, WorkQueue};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::Context;

/// The Node annotation an agent whose DNS serves sets (to "true").
pub const SERVING_ANNOTATION: &str = "dns.rudder.io/serving";
/// The Service, and the EndpointSlice this controller owns.
pub const NAMESPACE: &str = "kube-system";
pub const SERVICE: &str = "kube-dns";
pub const SLICE: &str = "kube-dns-rudder";
const MANAGER: &str = "rudder-dns";

/// The slice's endpoints: every node whose DNS serves, at its gateway.
pub fn endpoints(nodes: &[Arc<Node>]) -> Vec<Value> {
    let mut endpoints: Vec<(String, Value)> = nodes
        .iter()
        .filter(|n| {
            n.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SERVING_ANNOTATION))
                .is_some_and(|v| v == "true")
        })
        .filter_map(|node| {
            let name = node.metadata.name.clone()?;
            let cidr: Cidr = node.spec.as_ref()?.pod_cidr.as_deref()?.parse().ok()?;
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            Some((
                name.clone(),
                json!({
                    "addresses": [cidr.gateway().to_string()],
                    "conditions": {"ready": ready, "serving": ready, "terminating": false},
                    "nodeName": name,
                }),
            ))
        })
        .collect();
    endpoints.sort_by(|a, b| a.0.cmp(&b.0));
    endpoints.into_iter().map(|(_, e)| e).collect()
}

/// The slice as this controller writes it.
pub fn slice(endpoints: Vec<Value>) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": SLICE,
            "namespace": NAMESPACE,
            "labels": {
                "kubernetes.io/service-name": SERVICE,
                "endpointslice.kubernetes.io/managed-by": MANAGER,
            },
        },
        "addressType": "IPv4",
        "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
            {"name": "metrics", "port": 9153, "protocol": "TCP"},
        ],
        "endpoints": endpoints,
    })
}

/// The same endpoints as the legacy Endpoints object older clients read
/// (`kubectl get endpoints`, `describe svc`), marked so that the
/// EndpointSlice mirroring leaves it alone.
pub fn legacy(endpoints: &[Value]) -> Value {
    let address = |e: &Value| json!({"ip": e["addresses"][0], "nodeName": e["nodeName"]});
    let ready: Vec<Value> = endpoints
        .iter()
        .filter(|e| e["conditions"]["ready"] == json!(true))
        .map(address)
        .collect();
    let not_ready: Vec<Value> = endpoints
        .iter()
        .filter(|e| e["conditions"]["ready"] != json!(true))
        .map(address)
        .collect();
    let mut subset = json!({"ports": [
        {"name": "dns", "port": 53, "protocol": "UDP"},
        {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
        {"name": "metrics", "port": 9153, "protocol": "TCP"},
    ]});
    if !ready.is_empty() {
        subset["addresses"] = json!(ready);
    }
    if !not_ready.is_empty() {
        subset["notReadyAddresses"] = json!(not_ready);
    }
    let subsets = if endpoints.is_empty() {
        json!([])
    } else {
        json!([subset])
    };
    json!({
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {
            "name": SERVICE,
            "namespace": NAMESPACE,
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"},
        },
        "subsets": subsets,
    })
}

struct Controller {
    ctx: Arc<Context>,
    nodes: Store<Node>,
    slices: Store<EndpointSlice>,
    endpoints: Store<Endpoints>,
    queue: WorkQueue<String>,
}

/// Runs the controller until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let nodes = ctx.informers.typed::<Node>();
    let slices = ctx.informers.typed::<EndpointSlice>();
    let legacy_endpoints = ctx.informers.typed::<Endpoints>();
    let mut node_changes = nodes.subscribe();
    let mut slice_changes = slices.subscribe();
    let mut endpoint_changes = legacy_endpoints.subscribe();
    let c = Arc::new(Controller {
        nodes: nodes.store(),
        slices: slices.store(),
        endpoints: legacy_endpoints.store(),
        queue: WorkQueue::new(ctx.clock.clone()),
        ctx: ctx.clone(),
    });
    nodes.wait_synced().await;
    slices.wait_synced().await;
    legacy_endpoints.wait_synced().await;
    let key = format!("{NAMESPACE}/{SLICE}");
    c.queue.add(key.clone());
    let watch = {
        let (c, stop) = (c.clone(), stop.clone());
        async move {
            loop {
                tokio::select! {
                    change = node_changes.next_until(&stop) => match change {
                        Some(_) => c.queue.add(key.clone()),
                        None => return,
                    },
                    change = endpoint_changes.next_until(&stop) => match change {
                        Some(Change::Applied { new, .. }) if new.metadata.name.as_deref() == Some(SERVICE) && new.metadata.namespace.as_deref() == Some(NAMESPACE) => c.queue.add(key.clone()),
                        Some(Change::Deleted(old)) if old.metadata.name.as_deref() == Some(SERVICE) && old.metadata.namespace.as_deref() == Some(NAMESPACE) => c.queue.add(key.clone()),
                        Some(_) => {}
                        None => return,
                    },
                    change = slice_changes.next_until(&stop) => match change {
                        Some(Change::Applied { new, .. }) if new.metadata.name.as_deref() == Some(SLICE) => c.queue.add(key.clone()),
                        Some(Change::Deleted(old)) if old.metadata.name.as_deref() == Some(SLICE) => c.queue.add(key.clone()),
                        Some(Change::Resync) => c.queue.add(key.clone()),
                        Some(_) => {}
                        None => return,
                    },
                }
            }
        }
    };
    crate::serve(
        "dns-endpoints",
        c.clone(),
        c.queue.clone(),
        1,
        None,
        watch,
        stop,
        |c, _key| async move { c.sync().await },
    )
    .await;
}

impl Controller {
    async fn sync(&self) -> Result<Action, kube::Error> {
        let wanted = endpoints(&self.nodes.list());
        let params = PatchParams::apply(MANAGER).force();
        let current = self.slices.get_in(Some(NAMESPACE), SLICE);
        let have: Option<Value> = current
            .as_ref()
            .and_then(|s| serde_json::to_value(&s.endpoints).ok());
        if have.as_ref() != Some(&Value::Array(wanted.clone())) {
            let api: Api<EndpointSlice> = Api::namespaced(self.ctx.client.clone(), NAMESPACE);
            api.patch(SLICE, &params, &Patch::Apply(slice(wanted.clone())))
                .await?;
        }
        let legacy_wanted = legacy(&wanted);
        let legacy_have = self
            .endpoints
            .get_in(Some(NAMESPACE), SERVICE)
            .and_then(|e| serde_json::to_value(&e.subsets).ok())
            .map(|s| if s.is_null() { json!([]) } else { s });
        if legacy_have.as_ref() != Some(&legacy_wanted["subsets"]) {
            let api: Api<Endpoints> = Api::namespaced(self.ctx.client.clone(), NAMESPACE);
            api.patch(SERVICE, &params, &Patch::Apply(legacy_wanted))
                .await?;
        }
        Ok(Action::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cidr: Option<&str>, serving: bool, ready: bool) -> Arc<Node> {
        let mut annotations = serde_json::Map::new();
        if serving {
            annotations.insert(SERVING_ANNOTATION.into(), json!("true"));
        }
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "annotations": annotations},
                "spec": {"podCIDR": cidr},
                "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
            }))
            .expect("a Node"),
        )
    }

    #[test]
    fn serving_nodes_with_a_pod_range_are_the_endpoints_at_their_gateways() {
        let nodes = [
            node("b", Some("10.42.1.0/24"), true, false),
            node("a", Some("10.42.0.0/24"), true, true),
            node("c", Some("10.42.2.0/24"), false, true),
            node("d", None, true, true),
        ];
        let found = endpoints(&nodes);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0]["addresses"], json!(["10.42.0.1"]));
        assert_eq!(found[0]["nodeName"], "a");
        assert_eq!(found[0]["conditions"]["ready"], true);
        assert_eq!(found[1]["nodeName"], "b");
        assert_eq!(found[1]["conditions"]["ready"], false);
        let slice = slice(found);
        assert_eq!(
            slice["metadata"]["labels"]["kubernetes.io/service-name"],
            "kube-dns"
        );
        assert_eq!(
            slice["ports"][0],
            json!({"name": "dns", "port": 53, "protocol": "UDP"})
        );
    }
}
