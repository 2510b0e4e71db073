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

/// What a token authenticated as, and the audiences it was good for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub user: User,
    pub audiences: Vec<String>,
}

/// The user `token` authenticates, or 401.
pub async fn authenticate(state: &State, token: &str) -> Result<User, Status> {
    review(state, token, &[])
        .await
        .map(|authenticated| authenticated.user)
        .map_err(|reason| {
            tracing::info!(%reason, "a bearer token was refused");
            Status::unauthorized("Unauthorized")
        })
}

/// Who `token` is, for `audiences` (empty: the API server's own) — the
/// request authenticator and TokenReview both ask this; why not
/// otherwise.
pub async fn review(
    state: &State,
    token: &str,
    audiences: &[String],
) -> Result<Authenticated, String> {
    let issuer = state.issuer();
    let server_audiences = issuer
        .as_ref()
        .map(|i| i.audiences.clone())
        .unwrap_or_default();
    let wanted = if audiences.is_empty() {
        server_audiences.clone()
    } else {
        audiences.to_vec()
    };
    match issuer {
        Some(issuer) if issuer.verify(token).is_some() => {
            service_account(state, &issuer, token, &wanted).await
        }
        _ => match bootstrap::Token::parse(token) {
            Some(parsed) => {
                // Bootstrap tokens know no audiences: good for the API
                // server's own (upstream's audience-agnostic wrapper).
                let matched: Vec<String> = wanted
                    .iter()
                    .filter(|a| server_audiences.contains(a))
                    .cloned()
                    .collect();
                if matched.is_empty() {
                    return Err(Invalid::Audience {
                        token: server_audiences,
                        server: wanted,
                    }
                    .to_string());
                }
                let user = bootstrap_user(state, &parsed).await?;
                Ok(Authenticated {
                    user,
                    audiences: matched,
                })
            }
            None => Err("invalid bearer token".to_string()),
        },
    }
}

/// A stored object, `None` when it does not exist.
async fn lookup(
    state: &State,
    resource: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Value>, String> {
    let registry = state.registry();
    let def = registry
        .get("", "v1", resource)
        .ok_or_else(|| format!("no {resource} resource"))?;
    match state.storage().get(def, namespace, name).await {
        Ok(stored) => Ok(Some(stored.object)),
        Err(status) if status.code == 404 => Ok(None),
        Err(status) => Err(status.message),
    }
}

async fn service_account(
    state: &State,
    issuer: &Arc<Issuer>,
    token: &str,
    audiences: &[String],
) -> Result<Authenticated, String> {
    let claims = issuer
        .verify(token)
        .ok_or("not this issuer's")?
        .map_err(|e| e.to_string())?;
    let now = state.clock.now_seconds();
    claims.check(audiences, now).map_err(|e| e.to_string())?;
    let k = &claims.kubernetes;
    let ns = Some(k.namespace.as_str());
    let gone = |e: Invalid| e.to_string();
    let account = lookup(state, "serviceaccounts", ns, &k.serviceaccount.name).await?;
    serviceaccount::still_backs(
        "service account",
        &k.namespace,
        &k.serviceaccount,
        account.as_ref(),
        now,
    )
    .map_err(gone)?;
    if let Some(secret) = &k.secret {
        let found = lookup(state, "secrets", ns, &secret.name).await?;
        serviceaccount::still_backs("secret", &k.namespace, secret, found.as_ref(), now)
            .map_err(gone)?;
    }
    if let Some(pod) = &k.pod {
        let found = lookup(state, "pods", ns, &pod.name).await?;
        serviceaccount::still_backs("pod", &k.namespace, pod, found.as_ref(), now).map_err(gone)?;
    } else if let Some(node) = &k.node {
        // A token bound to a node (a pod's token names its node too, but
        // the pod is what it depends on).
        let found = lookup(state, "nodes", None, &node.name).await?;
        serviceaccount::still_backs("node", "", node, found.as_ref(), now).map_err(gone)?;
    }
    let mut extra = std::collections::BTreeMap::new();
    let mut put = |key: &str, value: &str| {
        extra.insert(
            format!("authentication.kubernetes.io/{key}"),
            vec![value.to_string()],
        );
    };
    if !claims.jti.is_empty() {
        put("credential-id", &format!("JTI={}", claims.jti));
    }
    if let Some(node) = &k.node {
        put("node-name", &node.name);
        put("node-uid", &node.uid);
    }
    if let Some(pod) = &k.pod {
        put("pod-name", &pod.name);
        put("pod-uid", &pod.uid);
    }
    let matched = claims
        .aud
        .as_slice()
        .iter()
        .filter(|a| audiences.contains(a))
        .cloned()
        .collect();
    Ok(Authenticated {
        user: User {
            name: serviceaccount::username(&k.namespace, &k.serviceaccount.name),
            groups: service_account_groups(&k.namespace),
            uid: k.serviceaccount.uid.clone(),
            extra,
        },
        audiences: matched,
    })
}

async fn bootstrap_user(state: &State, token: &bootstrap::Token) -> Result<User, String> {
    let secret = lookup(
        state,
        "secrets",
        Some(bootstrap::NAMESPACE),
        &token.secret_name(),
    )
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
        ..User::default()
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
