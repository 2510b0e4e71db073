//! `componentstatuses` (core/v1, deprecated since 1.19, still served by
//! upstream 1.33): computed on each request, never stored. Upstream lists
//! `scheduler`, `controller-manager` (each probed on its local health port)
//! and `etcd-N`. Rudder's scheduler and controller manager run in some
//! server's process, leader-elected, so their health is the one thing every
//! server can see of them: whether a holder renews their Lease
//! (`kube-system/kube-scheduler`, `kube-system/kube-controller-manager`)
//! within its duration. The store is `storage`, checked as `/readyz` checks
//! it.

use axum::http::StatusCode;
use rudder_api::Status;
use serde_json::{Value, json};

use super::read::{Include, table, table_response};
use super::{Context, Verb};
use crate::negotiate::{self, Output};
use crate::response::{ApiResult, json_response};

/// A component's health: `Ok(message)` or `Err(error)`.
type Health = Result<String, String>;

fn component(name: &str, health: Health) -> Value {
    let condition = match health {
        Ok(message) => json!({"type": "Healthy", "status": "True", "message": message}),
        Err(error) => json!({"type": "Healthy", "status": "False", "error": error}),
    };
    json!({
        "kind": "ComponentStatus", "apiVersion": "v1",
        "metadata": {"name": name},
        "conditions": [condition],
    })
}

/// The store's health, as `/readyz` checks it.
async fn storage(ctx: &Context) -> Health {
    match tokio::time::timeout(std::time::Duration::from_secs(2), ctx.state.store.check()).await {
        Ok(Ok(())) => Ok("ok".into()),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err("the store did not answer within 2s".into()),
    }
}

/// A leader-elected component's health: its Lease is held and was renewed
/// within its duration.
async fn leader(ctx: &Context, lease: &str) -> Health {
    let registry = ctx.state.registry();
    let Some(def) = registry.get("coordination.k8s.io", "v1", "leases") else {
        return Err("the coordination.k8s.io/v1 API is not served".into());
    };
    let stored = match ctx
        .state
        .storage()
        .get(def, Some("kube-system"), lease)
        .await
    {
        Ok(stored) => stored.object,
        Err(status) if status.code == 404 => {
            return Err(format!(
                "no instance has taken the kube-system/{lease} lease: none runs"
            ));
        }
        Err(status) => return Err(status.message),
    };
    lease_health(&stored, lease, ctx.state.clock.now_seconds())
}

/// Whether the Lease `object` says its holder is alive at `now` (Unix s).
fn lease_health(object: &Value, lease: &str, now: i64) -> Health {
    let spec = &object["spec"];
    let holder = spec["holderIdentity"].as_str().unwrap_or_default();
    if holder.is_empty() {
        return Err(format!("no instance holds the kube-system/{lease} lease"));
    }
    let renewed = spec["renewTime"]
        .as_str()
        .and_then(rudder_api::time::parse_rfc3339);
    let duration = spec["leaseDurationSeconds"].as_i64().unwrap_or(0);
    match renewed {
        Some(renewed) if now <= renewed + duration => Ok("ok".into()),
        Some(renewed) => Err(format!(
            "{holder} last renewed the kube-system/{lease} lease {}s ago (its duration is {duration}s)",
            now - renewed
        )),
        None => Err(format!(
            "the kube-system/{lease} lease held by {holder} has no renewTime"
        )),
    }
}

/// The components and their health, as ComponentStatus objects, in
/// upstream's order.
async fn components(ctx: &Context) -> Vec<Value> {
    let (scheduler, controllers, store) = tokio::join!(
        leader(ctx, "kube-scheduler"),
        leader(ctx, "kube-controller-manager"),
        storage(ctx),
    );
    vec![
        component("scheduler", scheduler),
        component("controller-manager", controllers),
        component("storage", store),
    ]
}

/// get and list; the resource has no other verbs.
pub async fn serve(ctx: &Context, verb: Verb) -> ApiResult {
    let output = negotiate::output(&ctx.headers)?;
    let def = ctx.def();
    let mut items = components(ctx).await;
    if verb == Verb::Get {
        let name = ctx.name();
        items.retain(|c| c["metadata"]["name"] == json!(name));
        if items.is_empty() {
            return Err(Status::not_found(def.target(), name).into());
        }
    }
    let include = Include::parse(&ctx.params)?;
    Ok(match (output, verb) {
        (Output::Table, _) => table_response(&table(
            def,
            &items,
            json!({}),
            include,
            true,
            ctx.state.clock.now_seconds(),
        )),
        (Output::Metadata, Verb::Get) => {
            json_response(StatusCode::OK, &super::read::partial_metadata(&items[0]))
        }
        (Output::Json, Verb::Get) => json_response(StatusCode::OK, &items[0]),
        (Output::Json | Output::Metadata, _) => json_response(
            StatusCode::OK,
            &json!({"kind": def.list_kind, "apiVersion": def.api_version(), "metadata": {}, "items": items}),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, renewed: &str, duration: i64) -> Value {
        json!({"spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": duration}})
    }

    #[test]
    fn a_component_is_healthy_while_its_lease_is_renewed() {
        let now = rudder_api::time::parse_rfc3339("2026-12-06T10:00:00Z").expect("time");
        let fresh = lease("vm_1", "2026-12-06T09:59:50.123456Z", 15);
        assert_eq!(lease_health(&fresh, "kube-scheduler", now), Ok("ok".into()));
        let stale = lease("vm_1", "2026-12-06T09:59:40.000000Z", 15);
        let error = lease_health(&stale, "kube-scheduler", now).expect_err("stale");
        assert!(error.contains("20s ago"), "{error}");
        assert!(lease_health(&lease("", "2026-12-06T09:59:59Z", 15), "x", now).is_err());
        assert!(lease_health(&json!({"spec": {"holderIdentity": "a"}}), "x", now).is_err());
    }
}
