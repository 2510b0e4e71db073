//! `serviceaccounts/<name>/token` (authentication.k8s.io/v1 TokenRequest),
//! as upstream's `pkg/registry/core/serviceaccount/storage/token.go`:
//! the body's name and namespace must match the URL's, audiences default
//! to the server's, `expirationSeconds` to 3600 (at least 600, at most
//! 2^32), a `boundObjectRef` names a Pod (running as this account; its
//! node goes into the claims too), a Secret of the namespace or a Node,
//! with its uid if given; a pod's token asking
//! for 3607 s with the server's audiences gets a year and a `warnafter`
//! (upstream's extended expiration). Nothing is stored.

use axum::http::StatusCode;
use bytes::Bytes;
use rudder_api::json::str_at;
use rudder_api::meta::strings_at;
use rudder_api::status::Target;
use rudder_api::{Cause, Status};
use serde_json::{Value, json};

use super::Context;
use super::write::object_body;
use crate::authn::serviceaccount::{
    self, Bound, EXTENDED_EXPIRATION_SECONDS, Ref, WARN_ONLY_EXPIRATION_SECONDS,
};
use crate::response::{ApiResult, json_response};

const TOKEN_REQUEST: Target<'static> = Target {
    group: "authentication.k8s.io",
    resource: "tokenrequests",
    kind: "TokenRequest",
};

/// The shortest and longest lifetimes a token may be asked for.
const MIN_EXPIRATION_SECONDS: i64 = 10 * 60;
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// `expirationSeconds` when the request leaves it out.
const DEFAULT_EXPIRATION_SECONDS: i64 = 60 * 60;

pub async fn create(ctx: &Context, body: Bytes) -> ApiResult {
    let Some(issuer) = ctx.state.issuer() else {
        return Err(
            Status::not_found_path("serviceaccounts/token: this server issues no tokens").into(),
        );
    };
    let mut request = object_body(ctx, &body)?;
    if !request.is_object() {
        return Err(Status::bad_request("the request body is not a TokenRequest").into());
    }
    let kind = str_at(&request, "/kind");
    if !kind.is_empty() && kind != "TokenRequest" {
        return Err(Status::bad_request(format!("expected a TokenRequest, got a {kind}")).into());
    }
    let name = ctx.name().to_string();
    let namespace = ctx.namespace().unwrap_or_default().to_string();
    let given = str_at(&request, "/metadata/name");
    if !given.is_empty() && given != name {
        return Err(Status::invalid(
            TOKEN_REQUEST,
            &name,
            vec![Cause::invalid(
                "metadata.name",
                &json!(given),
                "must match the service account name if specified",
            )],
        )
        .into());
    }
    let given = str_at(&request, "/metadata/namespace");
    if !given.is_empty() && given != namespace {
        return Err(Status::invalid(
            TOKEN_REQUEST,
            &name,
            vec![Cause::invalid(
                "metadata.namespace",
                &json!(given),
                "must match the service account namespace if specified",
            )],
        )
        .into());
    }
    let (account, _) = ctx.current().await?;

    let spec = request
        .get("spec")
        .filter(|s| s.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut audiences = strings_at(&spec, "/audiences");
    if audiences.is_empty() {
        audiences = issuer.audiences.clone();
    }
    let expiration = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
        Some(value) => value.as_i64().ok_or_else(|| {
            Status::bad_request(format!(
                "spec.expirationSeconds: invalid value {value}: must be an integer"
            ))
        })?,
    };
    let mut causes = Vec::new();
    if expiration < MIN_EXPIRATION_SECONDS {
        causes.push(Cause::invalid(
            "spec.expirationSeconds",
            &json!(expiration),
            "may not specify a duration less than 10 minutes",
        ));
    }
    if expiration > MAX_EXPIRATION_SECONDS {
        causes.push(Cause::invalid(
            "spec.expirationSeconds",
            &json!(expiration),
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    if !causes.is_empty() {
        return Err(Status::invalid(TOKEN_REQUEST, "", causes).into());
    }

    let bound = match spec.get("boundObjectRef").filter(|r| r.is_object()) {
        Some(reference) => bind(ctx, &name, &namespace, reference).await?,
        None => Bound::None,
    };
    let kube_audiences = audiences.iter().all(|a| issuer.audiences.contains(a));
    let (lifetime, warn_after) = if matches!(bound, Bound::Pod(..))
        && expiration == WARN_ONLY_EXPIRATION_SECONDS
        && kube_audiences
    {
        (EXTENDED_EXPIRATION_SECONDS, expiration)
    } else {
        (expiration, 0)
    };
    let now = ctx.state.clock.now_seconds();
    let token_request = serviceaccount::Request {
        namespace: &namespace,
        service_account: Ref {
            name: name.clone(),
            uid: str_at(&account, "/metadata/uid").to_string(),
        },
        bound,
        audiences: audiences.clone(),
        expiration_seconds: lifetime,
        warn_after_seconds: warn_after,
    };
    let (token, _) = issuer
        .issue(&token_request, now)
        .map_err(|e| Status::internal(format!("failed to generate token: {e}")))?;

    let mut spec = spec;
    spec["audiences"] = json!(audiences);
    spec["expirationSeconds"] = json!(expiration);
    if spec.get("boundObjectRef").is_some_and(Value::is_null) {
        spec.as_object_mut().map(|s| s.remove("boundObjectRef"));
    }
    request["apiVersion"] = json!("authentication.k8s.io/v1");
    request["kind"] = json!("TokenRequest");
    if !request.get("metadata").is_some_and(Value::is_object) {
        request["metadata"] = json!({});
    }
    request["metadata"]["name"] = json!(name);
    request["metadata"]["namespace"] = json!(namespace);
    request["metadata"]["creationTimestamp"] = json!(rudder_api::time::format_rfc3339(now));
    request["spec"] = spec;
    request["status"] = json!({
        "token": token,
        "expirationTimestamp": rudder_api::time::format_rfc3339(now + expiration),
    });
    Ok(json_response(StatusCode::CREATED, &request))
}

/// The object a `boundObjectRef` names, checked as upstream checks it.
async fn bind(
    ctx: &Context,
    account: &str,
    namespace: &str,
    reference: &Value,
) -> Result<Bound, Status> {
    let api_version = str_at(reference, "/apiVersion");
    let kind = str_at(reference, "/kind");
    let name = str_at(reference, "/name");
    let uid = str_at(reference, "/uid");
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    };
    let resource = match (group, kind) {
        ("", "Pod") => "pods",
        ("", "Secret") => "secrets",
        ("", "Node") => "nodes",
        _ => {
            return Err(Status::bad_request(format!(
                "cannot bind token to object of type {group}/{version}, Kind={kind}"
            )));
        }
    };
    let object = get(ctx, resource, (kind != "Node").then_some(namespace), name).await?;
    if kind == "Pod" {
        let runs_as = str_at(&object, "/spec/serviceAccountName");
        if runs_as != account {
            return Err(Status::bad_request(format!(
                "cannot bind token for serviceaccount {account:?} to pod running with serviceaccount {runs_as:?}"
            )));
        }
    }
    let recorded = str_at(&object, "/metadata/uid");
    if !uid.is_empty() && uid != recorded {
        return Err(Status::conflict(
            Target {
                group: "",
                resource: kind,
                kind,
            },
            name,
            &format!(
                "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
            ),
        ));
    }
    let reference = Ref {
        name: name.to_string(),
        uid: recorded.to_string(),
    };
    Ok(match kind {
        "Pod" => {
            // The pod's node goes into the claims too (upstream's
            // ServiceAccountTokenPodNodeInfo), when it is there.
            let node_name = str_at(&object, "/spec/nodeName");
            let node = if node_name.is_empty() {
                None
            } else {
                get(ctx, "nodes", None, node_name)
                    .await
                    .ok()
                    .map(|node| Ref {
                        name: node_name.to_string(),
                        uid: str_at(&node, "/metadata/uid").to_string(),
                    })
            };
            Bound::Pod(reference, node)
        }
        "Node" => Bound::Node(reference),
        _ => Bound::Secret(reference),
    })
}

/// A core/v1 object as stored.
async fn get(
    ctx: &Context,
    resource: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Value, Status> {
    let registry = ctx.state.registry();
    let def = registry
        .get("", "v1", resource)
        .ok_or_else(|| Status::internal(format!("no {resource} resource")))?;
    Ok(ctx.state.storage().get(def, namespace, name).await?.object)
}
