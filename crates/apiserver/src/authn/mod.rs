//! Bearer tokens (`Authorization: Bearer …`), for requests that bring no
//! client certificate — upstream's order: a verified certificate wins,
//! then the token authenticators. Two kinds are known: ServiceAccount
//! JWTs of this server's issuer ([`serviceaccount`]) and bootstrap tokens
//! ([`bootstrap`]). A token that neither accepts fails the request with
//! 401 (upstream's "invalid bearer token"; the reason is logged, never
//! told).

pub mod bootstrap;
pub mod jwt;
pub mod serviceaccount;

use std::sync::Arc;

use rudder_api::Status;
use serde_json::Value;

use crate::auth::User;
use crate::state::State;
use serviceaccount::{Invalid, Issuer};

/// The ServiceAccount groups of a namespace's accounts.
pub fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{namespace}"),
        "system:authenticated".into(),
    ]
}

/// The user `token` authenticates, or 401.
pub async fn authenticate(state: &State, token: &str) -> Result<User, Status> {
    let outcome = match state.issuer() {
        Some(issuer) if issuer.verify(token).is_some() => {
            service_account(state, &issuer, token).await
        }
        _ => match bootstrap::Token::parse(token) {
            Some(parsed) => bootstrap_user(state, &parsed).await,
            None => Err("not a token of any authenticator".to_string()),
        },
    };
    outcome.map_err(|reason| {
        tracing::info!(%reason, "a bearer token was refused");
        Status::unauthorized("Unauthorized")
    })
}

/// A stored object, `None` when it does not exist.
async fn lookup(
    state: &State,
    resource: &str,
    namespace: &str,
    name: &str,
) -> Result<Option<Value>, String> {
    let registry = state.registry();
    let def = registry
        .get("", "v1", resource)
        .ok_or_else(|| format!("no {resource} resource"))?;
    match state.storage().get(def, Some(namespace), name).await {
        Ok(stored) => Ok(Some(stored.object)),
        Err(status) if status.code == 404 => Ok(None),
        Err(status) => Err(status.message),
    }
}

async fn service_account(state: &State, issuer: &Arc<Issuer>, token: &str) -> Result<User, String> {
    let claims = issuer
        .verify(token)
        .ok_or("not this issuer's")?
        .map_err(|e| e.to_string())?;
    let now = state.clock.now_seconds();
    claims
        .check(&issuer.audiences, now)
        .map_err(|e| e.to_string())?;
    let k = &claims.kubernetes;
    let gone = |e: Invalid| e.to_string();
    let account = lookup(
        state,
        "serviceaccounts",
        &k.namespace,
        &k.serviceaccount.name,
    )
    .await?;
    serviceaccount::still_backs(
        "service account",
        &k.namespace,
        &k.serviceaccount,
        account.as_ref(),
        now,
    )
    .map_err(gone)?;
    if let Some(secret) = &k.secret {
        let found = lookup(state, "secrets", &k.namespace, &secret.name).await?;
        serviceaccount::still_backs("secret", &k.namespace, secret, found.as_ref(), now)
            .map_err(gone)?;
    }
    if let Some(pod) = &k.pod {
        let found = lookup(state, "pods", &k.namespace, &pod.name).await?;
        serviceaccount::still_backs("pod", &k.namespace, pod, found.as_ref(), now).map_err(gone)?;
    }
    Ok(User {
        name: serviceaccount::username(&k.namespace, &k.serviceaccount.name),
        groups: service_account_groups(&k.namespace),
    })
}

async fn bootstrap_user(state: &State, token: &bootstrap::Token) -> Result<User, String> {
    let secret = lookup(state, "secrets", bootstrap::NAMESPACE, &token.secret_name())
        .await?
        .ok_or_else(|| {
            format!(
                "no secret of name {} to match bootstrap bearer token",
                token.secret_name()
            )
        })?;
    let mut groups = bootstrap::check(token, &secret, state.clock.now_seconds())?;
    groups.push("system:authenticated".into());
    Ok(User {
        name: token.username(),
        groups,
    })
}

/// The bearer token of a request's `Authorization` header, if any.
pub fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// `/.well-known/openid-configuration`: upstream's service account issuer
/// discovery document.
pub fn openid_configuration(issuer: &Issuer) -> Value {
    serde_json::json!({
        "issuer": issuer.issuer,
        "jwks_uri": format!("{}/openid/v1/jwks", issuer.issuer),
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    })
}

/// `/openid/v1/jwks`: the key set tokens are verified with.
pub fn jwks(issuer: &Issuer) -> Value {
    serde_json::json!({"keys": [issuer.verifier().jwk()]})
}
