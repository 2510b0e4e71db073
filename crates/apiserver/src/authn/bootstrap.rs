//! Bootstrap tokens (upstream's `plugin/pkg/auth/authenticator/token/
//! bootstrap`): a bearer token `<id>.<secret>` (6 and 16 characters of
//! `[a-z0-9]`) is checked against the Secret `bootstrap-token-<id>` of
//! type `bootstrap.kubernetes.io/token` in kube-system — its `token-id`
//! and `token-secret` (compared in constant time), `expiration`, and
//! `usage-bootstrap-authentication: "true"` — and authenticates as
//! `system:bootstrap:<id>` in `system:bootstrappers` and the token's
//! `auth-extra-groups`.

use base64::Engine;
use serde_json::Value;

/// The namespace of bootstrap token Secrets.
pub const NAMESPACE: &str = "kube-system";
/// Their type.
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// Their name: this prefix and the token id.
pub const SECRET_PREFIX: &str = "bootstrap-token-";
/// The group every bootstrap token's user is in.
pub const GROUP: &str = "system:bootstrappers";

/// A bootstrap token, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub id: String,
    pub secret: String,
}

impl Token {
    /// `<id>.<secret>`, or `None` when it is not of that form (not a
    /// bootstrap token: another authenticator's).
    pub fn parse(text: &str) -> Option<Token> {
        let (id, secret) = text.split_once('.')?;
        let valid = |part: &str, len: usize| {
            part.len() == len
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        (valid(id, 6) && valid(secret, 16)).then(|| Token {
            id: id.into(),
            secret: secret.into(),
        })
    }

    /// A new random token.
    pub fn generate() -> Token {
        use rand::Rng;
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let mut rng = rand::rng();
        let mut pick = |n: usize| -> String {
            (0..n)
                .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
                .collect()
        };
        Token {
            id: pick(6),
            secret: pick(16),
        }
    }

    /// The name of its Secret.
    pub fn secret_name(&self) -> String {
        format!("{SECRET_PREFIX}{}", self.id)
    }

    /// The user it authenticates as.
    pub fn username(&self) -> String {
        format!("system:bootstrap:{}", self.id)
    }
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.id, self.secret)
    }
}

/// A key of a Secret's data, decoded.
fn data(secret: &Value, key: &str) -> Option<String> {
    let encoded = secret.pointer(&format!("/data/{key}"))?.as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// Whether `group` may be an extra group (`system:bootstrappers:…`).
fn valid_extra_group(group: &str) -> bool {
    let Some(rest) = group.strip_prefix("system:bootstrappers:") else {
        return false;
    };
    !rest.is_empty()
        && rest.len() <= 256
        && rest
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'-')
        && rest
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Whether `a` and `b` are equal, in a time that depends on their lengths
/// only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The groups `token` authenticates with, if `secret` (its Secret, as
/// stored) accepts it at `now`; why not otherwise (logged, never told to
/// the client: upstream's `tokenErrorf`).
pub fn check(token: &Token, secret: &Value, now: i64) -> Result<Vec<String>, String> {
    let name = token.secret_name();
    if secret
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        return Err(format!(
            "secret {NAMESPACE}/{name} is deleted and awaiting removal"
        ));
    }
    if secret.get("type").and_then(Value::as_str) != Some(SECRET_TYPE) {
        return Err(format!(
            "secret {NAMESPACE}/{name} has invalid type, expected {SECRET_TYPE}."
        ));
    }
    let stored = data(secret, "token-secret").unwrap_or_default();
    if !constant_time_eq(stored.as_bytes(), token.secret.as_bytes()) {
        return Err(format!(
            "secret {NAMESPACE}/{name} has invalid value for key token-secret."
        ));
    }
    if data(secret, "token-id").as_deref() != Some(token.id.as_str()) {
        return Err(format!(
            "secret {NAMESPACE}/{name} has invalid value for key token-id."
        ));
    }
    if let Some(expiration) = data(secret, "expiration") {
        match rudder_api::time::parse_rfc3339(&expiration) {
            Some(at) if at > now => {}
            Some(_) => return Err(format!("secret {NAMESPACE}/{name} has expired")),
            None => {
                return Err(format!(
                    "secret {NAMESPACE}/{name} has an unparsable expiration {expiration:?}"
                ));
            }
        }
    }
    if data(secret, "usage-bootstrap-authentication").as_deref() != Some("true") {
        return Err(format!(
            "secret {NAMESPACE}/{name} not marked usage-bootstrap-authentication=true."
        ));
    }
    let mut groups = vec![GROUP.to_string()];
    if let Some(extra) = data(secret, "auth-extra-groups") {
        for group in extra.split(',').map(str::trim).filter(|g| !g.is_empty()) {
            if !valid_extra_group(group) {
                return Err(format!(
                    "secret {NAMESPACE}/{name} has invalid value for key auth-extra-groups: {group:?} is not a valid bootstrap group."
                ));
            }
            if !groups.iter().any(|g| g == group) {
                groups.push(group.to_string());
            }
        }
    }
    Ok(groups)
}

/// The Secret of `token` (with `extra_groups`, no expiration), as
/// kubeadm's `token create` writes one.
pub fn secret(token: &Token, description: &str, extra_groups: &[&str]) -> Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut data = serde_json::json!({
        "token-id": b64(&token.id),
        "token-secret": b64(&token.secret),
        "usage-bootstrap-authentication": b64("true"),
        "usage-bootstrap-signing": b64("true"),
        "description": b64(description),
    });
    if !extra_groups.is_empty() {
        data["auth-extra-groups"] = Value::String(b64(&extra_groups.join(",")));
    }
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": token.secret_name(), "namespace": NAMESPACE},
        "type": SECRET_TYPE,
        "data": data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tokens_parse_as_upstream_reads_them() {
        let token = Token::parse("abcdef.0123456789abcdef").expect("valid");
        assert_eq!(token.id, "abcdef");
        assert_eq!(token.username(), "system:bootstrap:abcdef");
        assert_eq!(token.secret_name(), "bootstrap-token-abcdef");
        assert_eq!(token.to_string(), "abcdef.0123456789abcdef");
        for bad in [
            "abcdef0123456789abcdef",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef.0123456789abcde",
            "abcdef.0123456789abcdef.",
            "abc-ef.0123456789abcdef",
            "eyJhbGciOiJFUzI1NiJ9.e30.sig",
        ] {
            assert_eq!(Token::parse(bad), None, "{bad}");
        }
        let generated = Token::generate();
        assert_eq!(Token::parse(&generated.to_string()), Some(generated));
    }

    #[test]
    fn the_secret_decides() {
        let token = Token::parse("abcdef.0123456789abcdef").expect("valid");
        let good = secret(
            &token,
            "test",
            &["system:bootstrappers:rudder:default-node-token"],
        );
        assert_eq!(
            check(&token, &good, 0),
            Ok(vec![
                "system:bootstrappers".to_string(),
                "system:bootstrappers:rudder:default-node-token".to_string()
            ])
        );
        let wrong = Token::parse("abcdef.0123456789abcdeg").expect("valid");
        assert!(check(&wrong, &good, 0).is_err());
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let mut expiring = good.clone();
        expiring["data"]["expiration"] = json!(b64("1970-01-01T00:10:00Z"));
        assert!(check(&token, &expiring, 599).is_ok());
        assert_eq!(
            check(&token, &expiring, 600),
            Err("secret kube-system/bootstrap-token-abcdef has expired".into())
        );
        let mut unusable = good.clone();
        unusable["data"]["usage-bootstrap-authentication"] = json!(b64("false"));
        assert!(check(&token, &unusable, 0).is_err());
        let mut typed = good.clone();
        typed["type"] = json!("Opaque");
        assert!(check(&token, &typed, 0).is_err());
        let mut groups = good.clone();
        groups["data"]["auth-extra-groups"] = json!(b64("system:masters"));
        assert!(
            check(&token, &groups, 0).is_err(),
            "no escalation to masters"
        );
        let mut deleting = good;
        deleting["metadata"]["deletionTimestamp"] = json!("1970-01-01T00:00:00Z");
        assert!(check(&token, &deleting, 0).is_err());
    }
}
