//! authentication.k8s.io/v1 reviews, answered from the request and never
//! stored: a **SelfSubjectReview** says who the caller is (`kubectl auth
//! whoami`), a **TokenReview** who a token is for the audiences it names
//! (what webhook authenticators and add-ons such as metrics-server ask),
//! by the same authenticators that serve requests.

use axum::http::StatusCode;
use bytes::Bytes;
use rudder_api::Status;
use serde_json::{Map, Value, json};

use super::Context;
use super::write::object_body;
use crate::auth::User;
use crate::authn;
use crate::response::{ApiResult, json_response};

/// A user as `authentication.k8s.io/v1 UserInfo`.
fn user_info(user: &User) -> Value {
    let mut info = Map::new();
    info.insert("username".into(), json!(user.name));
    if !user.uid.is_empty() {
        info.insert("uid".into(), json!(user.uid));
    }
    info.insert("groups".into(), json!(user.groups));
    if !user.extra.is_empty() {
        info.insert("extra".into(), json!(user.extra));
    }
    Value::Object(info)
}

pub async fn create(ctx: &Context, body: Bytes) -> ApiResult {
    let mut review = object_body(ctx, &body)?;
    if !review.is_object() {
        return Err(
            Status::bad_request(format!("the request body is not a {}", ctx.def().kind)).into(),
        );
    }
    let status = match ctx.def().kind.as_str() {
        "SelfSubjectReview" => json!({"userInfo": user_info(&ctx.user)}),
        "TokenReview" => {
            let token = review
                .pointer("/spec/token")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if token.is_empty() {
                return Err(Status::bad_request(
                    "token is required for TokenReview in authentication",
                )
                .into());
            }
            let audiences = rudder_api::meta::strings_at(&review, "/spec/audiences");
            match authn::review(&ctx.state, token, &audiences).await {
                Ok(authenticated) => json!({
                    "authenticated": true,
                    "user": user_info(&authenticated.user),
                    "audiences": authenticated.audiences,
                }),
                Err(reason) => json!({"user": {}, "error": reason}),
            }
        }
        other => {
            return Err(Status::method_not_allowed(format!("{other} is not a review")).into());
        }
    };
    review["apiVersion"] = json!(ctx.def().api_version());
    review["kind"] = json!(ctx.def().kind);
    if !review.get("metadata").is_some_and(Value::is_object) {
        review["metadata"] = json!({});
    }
    review["metadata"]["creationTimestamp"] = json!(ctx.state.clock.now_rfc3339());
    review["status"] = status;
    Ok(json_response(StatusCode::CREATED, &review))
}
