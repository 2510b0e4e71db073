//! The ServiceAccount tokens of projected volumes (upstream's kubelet
//! token manager, `pkg/kubelet/token`): each `serviceAccountToken` source
//! is a TokenRequest bound to its pod (its audience and
//! `expirationSeconds`), kept per pod and asked again once 80% of its
//! requested lifetime has passed or it is older than 24 hours — a volume
//! refresh then writes the new one, atomically with the other files.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

/// The longest a token is used before a new one is asked for.
const MAX_TTL_SECONDS: i64 = 24 * 60 * 60;
/// The lifetime asked for when the source gives none (the API's default).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 60 * 60;

/// What a token is asked for with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    pod_uid: String,
    audience: String,
    expiration_seconds: i64,
}

/// A token as the API server gave it.
#[derive(Debug, Clone)]
struct Issued {
    token: String,
    /// When it was received, by this node's clock (unix seconds).
    received: i64,
    /// `spec.expirationSeconds` the server answered with.
    lifetime: i64,
}

impl Issued {
    /// The end of its lifetime, by this node's clock.
    fn expires(&self) -> i64 {
        self.received + self.lifetime
    }
}

/// Whether `issued` must be asked for again at `now` (upstream's
/// `requiresRefresh`, without its jitter): past 80% of its lifetime, or
/// older than a day. Measured from when this node received it rather than
/// from the server's timestamps, so a skewed clock on either side
/// neither hammers the API server nor lets a token lapse.
fn requires_refresh(issued: &Issued, now: i64) -> bool {
    now > issued.received + MAX_TTL_SECONDS || now > issued.expires() - issued.lifetime * 20 / 100
}

/// The agent's tokens, by pod.
#[derive(Debug, Default)]
pub struct Tokens {
    cache: Mutex<HashMap<Key, Issued>>,
}

impl Tokens {
    /// The token for `pod`'s account with `audience` (empty: the API
    /// server's) and `expiration_seconds`, from the cache while it is
    /// fresh, else asked for.
    pub async fn get(
        &self,
        client: &Client,
        pod: &Pod,
        audience: &str,
        expiration_seconds: i64,
        now: i64,
    ) -> Result<String, String> {
        let key = Key {
            pod_uid: pod.uid().unwrap_or_default(),
            audience: audience.to_string(),
            expiration_seconds,
        };
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        if let Some(issued) = &cached
            && !requires_refresh(issued, now)
        {
            return Ok(issued.token.clone());
        }
        match request(client, pod, audience, expiration_seconds, now).await {
            Ok(issued) => {
                let token = issued.token.clone();
                self.cache
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, issued);
                Ok(token)
            }
            // A refresh that fails keeps the old token while it is valid,
            // as upstream's manager does.
            Err(error) => match cached.filter(|c| c.expires() > now) {
                Some(issued) => {
                    tracing::warn!(%error, pod = %pod.name_any(), "could not refresh a service account token; keeping the current one");
                    Ok(issued.token)
                }
                None => Err(error),
            },
        }
    }

    /// Forgets the tokens of a pod that is gone.
    pub fn forget(&self, pod_uid: &str) {
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|key, _| key.pod_uid != pod_uid);
    }
}

/// A TokenRequest bound to `pod`.
async fn request(
    client: &Client,
    pod: &Pod,
    audience: &str,
    expiration_seconds: i64,
    now: i64,
) -> Result<Issued, String> {
    let namespace = pod.namespace().unwrap_or_default();
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| "default".into());
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: if audience.is_empty() {
                Vec::new()
            } else {
                vec![audience.to_string()]
            },
            expiration_seconds: Some(expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.name_any()),
                uid: pod.uid(),
            }),
        },
        ..TokenRequest::default()
    };
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
    let answer = accounts
        .create_token_request(&account, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("failed to fetch token: {e}"))?;
    let status = answer
        .status
        .ok_or("failed to fetch token: the answer has no status")?;
    Ok(Issued {
        token: status.token,
        received: now,
        lifetime: answer.spec.expiration_seconds.unwrap_or(expiration_seconds),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_refreshed_at_80_percent_or_after_a_day() {
        let hour = Issued {
            token: "t".into(),
            received: 0,
            lifetime: 3600,
        };
        assert!(!requires_refresh(&hour, 0));
        assert!(!requires_refresh(&hour, 2880));
        assert!(requires_refresh(&hour, 2881));
        let year = Issued {
            token: "t".into(),
            received: 0,
            lifetime: 365 * 86400,
        };
        assert!(!requires_refresh(&year, 86400));
        assert!(requires_refresh(&year, 86401), "never older than a day");
    }
}
