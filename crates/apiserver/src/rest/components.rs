//! `componentstatuses` (core/v1, deprecated since 1.19, still served by
//! upstream 1.33): computed on each request from the health of the parts
//! this server runs, never stored. Today that is the store, named
//! `storage`; a scheduler and controller manager join the list when rudder
//! runs them (upstream lists `scheduler`, `controller-manager`, `etcd-N`).

use axum::http::StatusCode;
use rudder_api::Status;
use serde_json::{Value, json};

use super::read::{Include, table, table_response};
use super::{Context, Verb};
use crate::negotiate::{self, Output};
use crate::response::{ApiResult, json_response};

/// The components and their health, as ComponentStatus objects.
async fn components(ctx: &Context) -> Vec<Value> {
    let checked = tokio::time::timeout(std::time::Duration::from_secs(2), ctx.state.store.check())
        .await
        .unwrap_or_else(|_| {
            Err(rudder_store::Error::Unavailable {
                context: "the store did not answer within 2s".into(),
                source: None,
            })
        });
    let condition = match checked {
        Ok(()) => json!({"type": "Healthy", "status": "True", "message": "ok"}),
        Err(error) => {
            json!({"type": "Healthy", "status": "False", "error": error.to_string()})
        }
    };
    vec![json!({
        "kind": "ComponentStatus", "apiVersion": "v1",
        "metadata": {"name": "storage"},
        "conditions": [condition],
    })]
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
