//! Parsing a resource URL: `/api/v1/namespaces/default/pods/web/status`,
//! `/apis/apps/v1/deployments`, `/api/v1/namespaces/kube-system`.

use std::sync::Arc;

use rudder_api::{Registry, ResourceDef, Status};

/// What a resource URL names.
#[derive(Debug, Clone)]
pub struct ResourcePath {
    pub def: Arc<ResourceDef>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// The group, version and remaining segments of a path shaped like a
/// resource URL (`/api/<v>/<…>`, `/apis/<g>/<v>/<…>`).
fn split(path: &str) -> Option<(&str, &str, Vec<&str>)> {
    let segments: Vec<&str> = path
        .trim_start_matches('/')
        .trim_end_matches('/')
        .split('/')
        .collect();
    match segments.as_slice() {
        ["api", version, rest @ ..] if !rest.is_empty() => Some(("", *version, rest.to_vec())),
        ["apis", group, version, rest @ ..] if !rest.is_empty() => {
            Some((*group, *version, rest.to_vec()))
        }
        _ => None,
    }
}

/// Whether `path` is shaped like a resource URL, whether or not the
/// resource exists.
pub fn is_resource(path: &str) -> bool {
    split(path).is_some()
}

/// Parses `path` against the registry (`None`: not a resource URL at all).
pub fn parse(registry: &Registry, path: &str) -> Option<Result<ResourcePath, Status>> {
    let (group, version, rest) = split(path)?;
    let rest = rest.as_slice();
    let not_found = || Some(Err(Status::not_found_path(path)));
    // `namespaces/<ns>/<resource>...` when <resource> is a namespaced resource.
    let (namespace, rest) = match rest {
        ["namespaces", ns, resource, tail @ ..]
            if registry
                .get(group, version, resource)
                .is_some_and(|d| d.namespaced) =>
        {
            (Some(ns.to_string()), [&[*resource][..], tail].concat())
        }
        _ => (None, rest.to_vec()),
    };
    let Some(def) = registry.get(group, version, rest[0]) else {
        return not_found();
    };
    let name = rest.get(1).map(|s| s.to_string());
    let subresource = rest.get(2).map(|s| s.to_string());
    // A proxy subresource carries the path to proxy after it
    // (`pods/p/proxy/some/path`), read from the request's own path.
    let proxied = subresource.as_deref() == Some("proxy");
    if (rest.len() > 3 && !proxied) || rest.iter().take(3).any(|s| s.is_empty()) {
        return not_found();
    }
    if let Some(sub) = &subresource
        && def.subresource(sub).is_none()
    {
        return not_found();
    }
    if namespace.is_some() && !def.namespaced {
        return not_found();
    }
    Some(Ok(ResourcePath {
        def: def.clone(),
        namespace,
        name,
        subresource,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(path: &str) -> ResourcePath {
        parse(&Registry::builtin(), path)
            .expect("a resource path")
            .expect("valid")
    }

    #[test]
    fn resource_urls_parse() {
        let p = parsed("/api/v1/namespaces/default/pods/web/status");
        assert_eq!(
            (
                p.def.plural.as_str(),
                p.namespace.as_deref(),
                p.name.as_deref(),
                p.subresource.as_deref()
            ),
            ("pods", Some("default"), Some("web"), Some("status"))
        );
        let p = parsed("/api/v1/namespaces/kube-system");
        assert_eq!(
            (p.def.plural.as_str(), p.namespace, p.name.as_deref()),
            ("namespaces", None, Some("kube-system"))
        );
        let p = parsed("/api/v1/namespaces/x/finalize");
        assert_eq!(
            (p.name.as_deref(), p.subresource.as_deref()),
            (Some("x"), Some("finalize"))
        );
        let p = parsed("/apis/apps/v1/deployments");
        assert_eq!(
            (p.def.plural.as_str(), p.namespace, p.name),
            ("deployments", None, None)
        );
        let p = parsed("/apis/apps/v1/namespaces/ns/deployments/web/scale");
        assert_eq!(p.subresource.as_deref(), Some("scale"));
        let registry = Registry::builtin();
        assert!(is_resource("/apis/nothing.example/v1/things"));
        assert!(!is_resource("/apis/apps/v1") && !is_resource("/api") && !is_resource("/metrics"));
        assert!(parse(&registry, "/api").is_none());
        assert!(
            parse(&registry, "/apis/apps/v1/nothings")
                .expect("resource path")
                .is_err()
        );
        assert!(
            parse(&registry, "/api/v1/namespaces/ns/pods/p/bogus")
                .expect("resource path")
                .is_err()
        );
    }
}
