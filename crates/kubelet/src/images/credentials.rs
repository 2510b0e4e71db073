//! imagePullSecrets as upstream's credential provider reads them: Secrets
//! of type `kubernetes.io/dockerconfigjson` (`.dockerconfigjson`: `{"auths":
//! {…}}`) or `kubernetes.io/dockercfg` (`.dockercfg`: the map alone), each
//! entry keyed by a registry (`host[:port][/path]`, with or without a
//! scheme) and holding a username and password or their base64 `auth`.
//! The credentials whose key matches the image's registry and repository
//! best come first; a pull tries each, then none (pure).

use base64::Engine;
use serde_json::Value;

use crate::cri::v1::AuthConfig;

/// The registry host and repository path of an image reference, as
/// Docker normalises them (`busybox` → `docker.io`, `library/busybox`).
pub fn registry_and_path(image: &str) -> (String, String) {
    let name = image.split('@').next().unwrap_or(image);
    // A tag is after the last ':' that follows the last '/'.
    let name = match (name.rfind(':'), name.rfind('/')) {
        (Some(colon), Some(slash)) if colon > slash => &name[..colon],
        (Some(colon), None) => &name[..colon],
        _ => name,
    };
    match name.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first.to_string(), rest.to_string())
        }
        Some(_) => ("docker.io".into(), name.to_string()),
        None => ("docker.io".into(), format!("library/{name}")),
    }
}

fn normalise_key(key: &str) -> String {
    let key = key
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let key = key
        .strip_suffix("/v1")
        .or_else(|| key.strip_suffix("/v2"))
        .unwrap_or(key);
    match key {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".into(),
        other => other.to_string(),
    }
    .replace("index.docker.io/", "docker.io/")
}

/// The entries of one pull secret's data (`.dockerconfigjson` or
/// `.dockercfg`), as `(key, AuthConfig)`.
pub fn entries(docker_config: &[u8]) -> Vec<(String, AuthConfig)> {
    let Ok(value) = serde_json::from_slice::<Value>(docker_config) else {
        return Vec::new();
    };
    let auths = value.get("auths").cloned().unwrap_or(value);
    let Some(map) = auths.as_object() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for (key, entry) in map {
        let text = |field: &str| {
            entry
                .get(field)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let (mut username, mut password) = (text("username"), text("password"));
        let auth = text("auth");
        if username.is_empty()
            && let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(auth.trim())
            && let Some((user, pass)) = String::from_utf8_lossy(&decoded).split_once(':')
        {
            username = user.to_string();
            password = pass.to_string();
        }
        found.push((
            normalise_key(key),
            AuthConfig {
                username,
                password,
                auth,
                server_address: key.clone(),
                ..Default::default()
            },
        ));
    }
    found
}

/// The credentials for `image` from the pull secrets' entries, the most
/// specific match first.
pub fn for_image(image: &str, entries: &[(String, AuthConfig)]) -> Vec<AuthConfig> {
    let (registry, path) = registry_and_path(image);
    let full = format!("{registry}/{path}");
    let mut matching: Vec<(usize, AuthConfig)> = entries
        .iter()
        .filter(|(key, _)| key == &registry || full == *key || full.starts_with(&format!("{key}/")))
        .map(|(key, auth)| (key.len(), auth.clone()))
        .collect();
    matching.sort_by_key(|m| std::cmp::Reverse(m.0));
    matching.into_iter().map(|(_, auth)| auth).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_normalised_as_docker_does() {
        assert_eq!(
            registry_and_path("busybox"),
            ("docker.io".into(), "library/busybox".into())
        );
        assert_eq!(
            registry_and_path("me/app:1"),
            ("docker.io".into(), "me/app".into())
        );
        assert_eq!(
            registry_and_path("localhost:5000/app:1"),
            ("localhost:5000".into(), "app".into())
        );
        assert_eq!(
            registry_and_path("rudder.local/busybox:1"),
            ("rudder.local".into(), "busybox".into())
        );
        assert_eq!(
            registry_and_path("r.io/a/b@sha256:00"),
            ("r.io".into(), "a/b".into())
        );
    }

    #[test]
    fn pull_secrets_match_by_registry_and_path_most_specific_first() {
        let config = br#"{"auths": {
            "https://index.docker.io/v1/": {"auth": "dTE6cDE="},
            "127.0.0.1:5000": {"username": "u2", "password": "p2"},
            "127.0.0.1:5000/team": {"username": "u3", "password": "p3"}
        }}"#;
        let all = entries(config);
        let users = |image: &str| -> Vec<String> {
            for_image(image, &all)
                .into_iter()
                .map(|a| a.username)
                .collect()
        };
        assert_eq!(users("busybox"), ["u1"]);
        assert_eq!(users("127.0.0.1:5000/team/app:1"), ["u3", "u2"]);
        assert_eq!(users("127.0.0.1:5000/other:1"), ["u2"]);
        assert!(users("quay.io/x:1").is_empty());
        let legacy = entries(br#"{"r.io": {"auth": "YTpi"}}"#);
        assert_eq!(for_image("r.io/x", &legacy)[0].password, "b");
    }
}
