//! ServiceAccount tokens: the claims upstream's `pkg/serviceaccount`
//! writes (`iss`, `sub`, `aud`, `exp`, `iat`, `nbf`, `jti` and the private
//! `kubernetes.io` claim naming the namespace, the ServiceAccount and the
//! Pod or Secret the token is bound to), issued by TokenRequest and
//! checked on every request that carries one: signature, issuer, audience,
//! times (with go-jose's minute of leeway), then the ServiceAccount and the
//! bound object must still exist with the uids the token names, as
//! upstream's validator requires.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::jwt::{self, SigningKey, Verifier};

/// How much clock skew the time claims tolerate (go-jose's DefaultLeeway).
pub const LEEWAY_SECONDS: i64 = 60;
/// The lifetime a pod's projected token asks for by default (upstream's
/// `WarnOnlyBoundTokenExpirationSeconds`) …
pub const WARN_ONLY_EXPIRATION_SECONDS: i64 = 3607;
/// … and the lifetime it is given instead (upstream's
/// `ExpirationExtensionSeconds`, one year), `warnafter` marking the end of
/// the requested one, so that clients that do not reload their token keep
/// working (`--service-account-extend-token-expiration`, on by default).
pub const EXTENDED_EXPIRATION_SECONDS: i64 = 365 * 24 * 60 * 60;

/// A name and uid in the private claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ref {
    pub name: String,
    pub uid: String,
}

/// The private `kubernetes.io` claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kubernetes {
    pub namespace: String,
    pub serviceaccount: Ref,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Ref>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<Ref>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<Ref>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnafter: Option<i64>,
}

/// One audience or several, as RFC 7519 allows `aud` to be written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    One(String),
    Many(Vec<String>),
}

impl Audience {
    pub fn as_slice(&self) -> &[String] {
        match self {
            Audience::One(one) => std::slice::from_ref(one),
            Audience::Many(many) => many,
        }
    }
}

/// A ServiceAccount token's claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    pub aud: Audience,
    pub exp: i64,
    pub iat: i64,
    pub nbf: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: Kubernetes,
}

/// The object a token is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    None,
    /// A pod, and the node it is bound to, if any.
    Pod(Ref, Option<Ref>),
    Secret(Ref),
    Node(Ref),
}

/// What a token is issued for.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub namespace: &'a str,
    pub service_account: Ref,
    pub bound: Bound,
    pub audiences: Vec<String>,
    pub expiration_seconds: i64,
    /// Seconds after which a still-valid token is stale (0: none).
    pub warn_after_seconds: i64,
}

/// `system:serviceaccount:<namespace>:<name>`.
pub fn username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The claims of a token issued at `now` (unix seconds).
pub fn claims(issuer: &str, request: &Request<'_>, now: i64) -> Claims {
    let (pod, secret, node) = match &request.bound {
        Bound::None => (None, None, None),
        Bound::Pod(pod, node) => (Some(pod.clone()), None, node.clone()),
        Bound::Secret(secret) => (None, Some(secret.clone()), None),
        Bound::Node(node) => (None, None, Some(node.clone())),
    };
    Claims {
        iss: issuer.to_string(),
        sub: username(request.namespace, &request.service_account.name),
        aud: Audience::Many(request.audiences.clone()),
        exp: now + request.expiration_seconds,
        iat: now,
        nbf: now,
        jti: uuid::Uuid::new_v4().to_string(),
        kubernetes: Kubernetes {
            namespace: request.namespace.to_string(),
            serviceaccount: request.service_account.clone(),
            pod,
            secret,
            node,
            warnafter: (request.warn_after_seconds > 0).then_some(now + request.warn_after_seconds),
        },
    }
}

/// Why a token was refused, as upstream's validator says it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("service account token has expired")]
    Expired,
    #[error("service account token is not valid yet")]
    NotValidYet,
    #[error("service account token is issued in the future")]
    IssuedInTheFuture,
    #[error("token audiences {token:?} is invalid for the target audiences {server:?}")]
    Audience {
        token: Vec<String>,
        server: Vec<String>,
    },
    #[error("{0}")]
    Gone(String),
}

impl Claims {
    /// The time and audience checks (the lookups are the caller's).
    pub fn check(&self, audiences: &[String], now: i64) -> Result<(), Invalid> {
        if now > self.exp + LEEWAY_SECONDS {
            return Err(Invalid::Expired);
        }
        if now + LEEWAY_SECONDS < self.nbf {
            return Err(Invalid::NotValidYet);
        }
        if now + LEEWAY_SECONDS < self.iat {
            return Err(Invalid::IssuedInTheFuture);
        }
        let token = self.aud.as_slice();
        if !token.iter().any(|a| audiences.contains(a)) {
            return Err(Invalid::Audience {
                token: token.to_vec(),
                server: audiences.to_vec(),
            });
        }
        Ok(())
    }
}

/// Whether a stored object still backs a token's reference: it exists
/// with the uid the token names and was not deleted more than the leeway
/// ago (upstream's `invalidIfDeletedBefore`).
pub fn still_backs(
    kind: &str,
    namespace: &str,
    reference: &Ref,
    object: Option<&Value>,
    now: i64,
) -> Result<(), Invalid> {
    let shown = if namespace.is_empty() {
        reference.name.clone()
    } else {
        format!("{namespace}/{}", reference.name)
    };
    let Some(object) = object else {
        return Err(Invalid::Gone(format!("{kind} {shown} not found")));
    };
    let deleted = object
        .pointer("/metadata/deletionTimestamp")
        .and_then(Value::as_str)
        .and_then(rudder_api::time::parse_rfc3339);
    if deleted.is_some_and(|at| at < now - LEEWAY_SECONDS) {
        return Err(Invalid::Gone(format!("{kind} {shown} has been deleted")));
    }
    let uid = object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if uid != reference.uid {
        let what = match kind {
            "service account" => "claim".to_string(),
            other => format!("service account {other} ref claim"),
        };
        let kind_uid = match kind {
            "service account" => "service account UID".to_string(),
            other => format!("{other} UID"),
        };
        return Err(Invalid::Gone(format!(
            "{kind_uid} ({uid}) does not match {what} ({})",
            reference.uid
        )));
    }
    Ok(())
}

/// The server's token issuer: its key, its issuer URL and the audiences
/// it accepts (upstream's `--service-account-issuer`, `--api-audiences`).
#[derive(Debug)]
pub struct Issuer {
    key: SigningKey,
    verifier: Verifier,
    pub issuer: String,
    pub audiences: Vec<String>,
}

/// The issuer URL, as k3s and kubeadm set `--service-account-issuer`.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

impl Issuer {
    pub fn new(key: SigningKey, issuer: &str) -> Self {
        Issuer {
            verifier: key.verifier(),
            key,
            issuer: issuer.to_string(),
            audiences: vec![issuer.to_string()],
        }
    }

    /// A signed token for `request` at `now`; its claims with it.
    pub fn issue(&self, request: &Request<'_>, now: i64) -> Result<(String, Claims), jwt::Error> {
        let claims = claims(&self.issuer, request, now);
        Ok((self.key.sign(&claims)?, claims))
    }

    /// The claims of `token` if it is one of this issuer's whose signature
    /// holds; `None` when it is not a token of this issuer at all (another
    /// authenticator may know it).
    pub fn verify(&self, token: &str) -> Option<Result<Claims, jwt::Error>> {
        // Only tokens naming this issuer are ours to judge (upstream's
        // jwtTokenAuthenticator: an unknown issuer is not handled).
        let payload = token.split('.').nth(1)?;
        let payload =
            base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, payload)
                .ok()?;
        let issuer: Value = serde_json::from_slice(&payload).ok()?;
        if issuer.get("iss").and_then(Value::as_str) != Some(self.issuer.as_str()) {
            return None;
        }
        Some(self.verifier.verify(token))
    }

    pub fn verifier(&self) -> &Verifier {
        &self.verifier
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn issuer() -> Issuer {
        Issuer::new(SigningKey::generate().expect("key").0, DEFAULT_ISSUER)
    }

    fn request(bound: Bound) -> Request<'static> {
        Request {
            namespace: "default",
            service_account: Ref {
                name: "robot".into(),
                uid: "sa-uid".into(),
            },
            bound,
            audiences: vec![DEFAULT_ISSUER.into()],
            expiration_seconds: 3600,
            warn_after_seconds: 0,
        }
    }

    #[test]
    fn claims_are_upstreams() {
        let pod = Ref {
            name: "web".into(),
            uid: "pod-uid".into(),
        };
        let issuer = issuer();
        let (token, claims) = issuer
            .issue(&request(Bound::Pod(pod.clone(), None)), 1_000)
            .expect("issue");
        let payload: Value = serde_json::from_slice(
            &base64::Engine::decode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                token.split('.').nth(1).expect("payload"),
            )
            .expect("b64"),
        )
        .expect("json");
        assert_eq!(payload["iss"], DEFAULT_ISSUER);
        assert_eq!(payload["sub"], "system:serviceaccount:default:robot");
        assert_eq!(payload["aud"], json!([DEFAULT_ISSUER]));
        assert_eq!(
            (payload["iat"].clone(), payload["nbf"].clone()),
            (json!(1000), json!(1000))
        );
        assert_eq!(payload["exp"], 4600);
        assert_eq!(
            payload["kubernetes.io"],
            json!({"namespace": "default", "serviceaccount": {"name": "robot", "uid": "sa-uid"},
                   "pod": {"name": "web", "uid": "pod-uid"}})
        );
        assert_eq!(issuer.verify(&token).expect("ours").expect("valid"), claims);
        // Another issuer's token is not ours to judge.
        let other = Issuer::new(SigningKey::generate().expect("key").0, "https://elsewhere");
        let (foreign, _) = other.issue(&request(Bound::None), 1_000).expect("issue");
        assert!(issuer.verify(&foreign).is_none());
        assert!(issuer.verify("abcdef.0123456789abcdef").is_none());
    }

    #[test]
    fn expiry_not_before_and_audience_are_checked_with_leeway() {
        let claims = claims(DEFAULT_ISSUER, &request(Bound::None), 1_000);
        let auds = vec![DEFAULT_ISSUER.to_string()];
        assert_eq!(claims.check(&auds, 1_000), Ok(()));
        assert_eq!(claims.check(&auds, 4_600 + 60), Ok(()), "within the leeway");
        assert_eq!(claims.check(&auds, 4_661), Err(Invalid::Expired));
        assert_eq!(claims.check(&auds, 900), Err(Invalid::NotValidYet));
        assert_eq!(claims.check(&auds, 950), Ok(()));
        let error = claims
            .check(&["vault".to_string()], 1_000)
            .expect_err("audience");
        assert_eq!(
            error.to_string(),
            format!(
                "token audiences [\"{DEFAULT_ISSUER}\"] is invalid for the target audiences [\"vault\"]"
            )
        );
        // A single audience written as a string is read too.
        let mut one: Value = serde_json::to_value(&claims).expect("json");
        one["aud"] = json!(DEFAULT_ISSUER);
        let one: Claims = serde_json::from_value(one).expect("read");
        assert_eq!(one.check(&auds, 1_000), Ok(()));
        let warned = super::claims(
            DEFAULT_ISSUER,
            &Request {
                warn_after_seconds: 3607,
                expiration_seconds: EXTENDED_EXPIRATION_SECONDS,
                ..request(Bound::None)
            },
            0,
        );
        assert_eq!(warned.kubernetes.warnafter, Some(3607));
        assert_eq!(warned.exp, EXTENDED_EXPIRATION_SECONDS);
    }

    #[test]
    fn a_bound_object_must_exist_with_its_uid() {
        let reference = Ref {
            name: "web".into(),
            uid: "u1".into(),
        };
        let pod = json!({"metadata": {"name": "web", "uid": "u1"}});
        assert_eq!(
            still_backs("pod", "default", &reference, Some(&pod), 0),
            Ok(())
        );
        assert_eq!(
            still_backs("pod", "default", &reference, None, 0)
                .expect_err("gone")
                .to_string(),
            "pod default/web not found"
        );
        let other = json!({"metadata": {"name": "web", "uid": "u2"}});
        assert_eq!(
            still_backs("pod", "default", &reference, Some(&other), 0)
                .expect_err("replaced")
                .to_string(),
            "pod UID (u2) does not match service account pod ref claim (u1)"
        );
        let deleting = json!({"metadata": {"name": "web", "uid": "u1",
            "deletionTimestamp": "1970-01-01T00:01:40Z"}});
        assert_eq!(
            still_backs("pod", "default", &reference, Some(&deleting), 130),
            Ok(()),
            "deleted less than the leeway ago"
        );
        assert!(still_backs("pod", "default", &reference, Some(&deleting), 200).is_err());
    }
}
