//! Who is asking, and whether they may. Client certificates signed by the
//! cluster CA authenticate (CN = user, O = groups); without one a request is
//! `system:anonymous`, who may read only health and version endpoints, as
//! upstream's default RBAC allows (`system:public-info-viewer`); any
//! authenticated user may also read discovery (`system:discovery`) and ask
//! who it is (a SelfSubjectReview, `system:basic-user`).
//!
//! ServiceAccounts (`system:serviceaccounts`) are authenticated by their
//! tokens and get what upstream's default RBAC gives an account that no
//! RoleBinding names: discovery, health and version, and service account
//! issuer discovery — nothing of the resources; never `system:masters`
//! (docs/compatibility.md).
//!
//! There is no RBAC yet. Until there is, the control plane's own components
//! — `system:kube-controller-manager`, `system:kube-scheduler` and the node
//! agents (`system:nodes`) — may do everything, as `system:masters` may:
//! upstream's bootstrap roles and node authorizer grant them a narrower,
//! per-component set. Bootstrappers (`system:bootstrappers`) may ask for
//! and read CertificateSigningRequests, as upstream's
//! `system:node-bootstrapper` role lets them.

use rudder_api::Status;

/// An authenticated (or anonymous) user.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
    /// A ServiceAccount's uid; empty for other users.
    pub uid: String,
    /// What authentication adds (a ServiceAccount token's pod, node and
    /// credential id, as upstream's `authentication.kubernetes.io/…` keys).
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl User {
    pub fn anonymous() -> Self {
        User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..User::default()
        }
    }

    pub fn is_anonymous(&self) -> bool {
        self.name == "system:anonymous"
    }

    /// The user a verified client certificate names.
    pub fn from_certificate(der: &[u8]) -> Option<User> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let subject = cert.subject();
        let name = subject
            .iter_common_name()
            .next()?
            .as_str()
            .ok()?
            .to_string();
        let mut groups: Vec<String> = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_string))
            .collect();
        groups.push("system:authenticated".into());
        Some(User {
            name,
            groups,
            ..User::default()
        })
    }
}

/// What anyone may read: health and version (`system:public-info-viewer`)
/// and the cluster CA at `/cacerts`, which joining agents check against
/// the hash in their join token (k3s serves it the same way).
const PUBLIC_PATHS: &[&str] = &[
    "/healthz",
    "/livez",
    "/readyz",
    "/version",
    "/version/",
    "/cacerts",
];

/// Service account issuer discovery, which upstream's
/// `system:service-account-issuer-discovery` role grants to the group
/// `system:serviceaccounts`.
const ISSUER_DISCOVERY_PATHS: &[&str] = &["/.well-known/openid-configuration", "/openid/v1/jwks"];

/// What `system:discovery` lets every authenticated user read.
const DISCOVERY_PATHS: &[&str] = &["/api", "/apis", "/openapi"];

/// What `system:basic-user` lets every authenticated user create.
const SELF_SUBJECT_REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// The users and groups of the control plane's own components.
const COMPONENT_USERS: &[&str] = &["system:kube-controller-manager", "system:kube-scheduler"];
const ALL_POWERFUL_GROUPS: &[&str] = &["system:masters", "system:nodes"];

/// Whether `user` may make this request.
pub fn authorize(user: &User, path: &str, verb: &str) -> Result<(), Status> {
    if user
        .groups
        .iter()
        .any(|g| ALL_POWERFUL_GROUPS.contains(&g.as_str()))
        || COMPONENT_USERS.contains(&user.name.as_str())
    {
        return Ok(());
    }
    let under = |paths: &[&str]| {
        paths
            .iter()
            .any(|p| path == *p || path.starts_with(&format!("{p}/")) && *p != "/version/")
    };
    if under(PUBLIC_PATHS) && verb == "get" {
        return Ok(());
    }
    let bootstrapper = user.groups.iter().any(|g| g == "system:bootstrappers");
    if bootstrapper && is_csr_path(path) && matches!(verb, "create" | "get" | "list" | "watch") {
        return Ok(());
    }
    let service_account = user.groups.iter().any(|g| g == "system:serviceaccounts");
    if service_account && verb == "get" && ISSUER_DISCOVERY_PATHS.contains(&path) {
        return Ok(());
    }
    let authenticated = user.groups.iter().any(|g| g == "system:authenticated");
    if authenticated && verb == "get" && under(DISCOVERY_PATHS) && !crate::path::is_resource(path) {
        return Ok(());
    }
    // Who am I (`kubectl auth whoami`): `system:basic-user`.
    if authenticated && verb == "create" && path == SELF_SUBJECT_REVIEWS {
        return Ok(());
    }
    Err(Status::forbidden(format!(
        "forbidden: User {:?} cannot {verb} path {path:?}",
        user.name
    )))
}

/// Upstream's 403 for a resource request: `pods "web" is forbidden: User
/// "…" cannot get resource "pods" in API group "" in the namespace "…"`.
pub fn forbidden_resource(user: &User, verb: &str, resource: &crate::path::ResourcePath) -> Status {
    let def = &resource.def;
    let name = resource.name.as_deref().unwrap_or_default();
    let qualified = if def.group.is_empty() {
        def.plural.clone()
    } else {
        format!("{}.{}", def.plural, def.group)
    };
    let full = match &resource.subresource {
        Some(sub) => format!("{}/{sub}", def.plural),
        None => def.plural.clone(),
    };
    let scope = match &resource.namespace {
        Some(ns) => format!("in the namespace {ns:?}"),
        None => "at the cluster scope".to_string(),
    };
    let reason = format!(
        "User {:?} cannot {verb} resource {full:?} in API group {:?} {scope}",
        user.name, def.group
    );
    let message = if name.is_empty() {
        format!("{qualified} is forbidden: {reason}")
    } else {
        format!("{qualified} {name:?} is forbidden: {reason}")
    };
    Status {
        details: Some(Box::new(rudder_api::status::Details {
            group: def.group.clone(),
            kind: def.plural.clone(),
            name: name.to_string(),
            uid: String::new(),
        })),
        ..Status::forbidden(message)
    }
}

/// A URL of CertificateSigningRequests themselves (not a subresource).
fn is_csr_path(path: &str) -> bool {
    const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    path.strip_prefix(CSRS).is_some_and(|rest| {
        rest.is_empty()
            || rest
                .strip_prefix('/')
                .is_some_and(|name| !name.is_empty() && !name.contains('/'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_reads_health_only_and_masters_everything() {
        let anonymous = User::anonymous();
        assert!(authorize(&anonymous, "/readyz", "get").is_ok());
        assert!(authorize(&anonymous, "/livez/ping", "get").is_ok());
        assert_eq!(
            authorize(&anonymous, "/api/v1/pods", "list")
                .expect_err("forbidden")
                .code,
            403
        );
        let admin = User {
            name: "admin".into(),
            groups: vec!["system:masters".into()],
            ..User::default()
        };
        assert!(authorize(&admin, "/api/v1/pods", "delete").is_ok());
        let controllers = User {
            name: "system:kube-controller-manager".into(),
            groups: vec!["system:authenticated".into()],
            ..User::default()
        };
        assert!(authorize(&controllers, "/apis/apps/v1/deployments", "list").is_ok());
        let someone = User {
            name: "someone".into(),
            groups: vec!["system:authenticated".into()],
            ..User::default()
        };
        assert!(authorize(&someone, "/apis", "get").is_ok(), "discovery");
        assert!(authorize(&someone, "/api/v1", "get").is_ok(), "discovery");
        assert!(authorize(&someone, "/api/v1/pods", "list").is_err());
        assert!(authorize(&someone, "/api/v1/namespaces/default/pods/p", "get").is_err());
        let bootstrapper = User {
            name: "system:bootstrap:abcdef".into(),
            groups: vec!["system:bootstrappers".into(), "system:authenticated".into()],
            ..User::default()
        };
        let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
        assert!(authorize(&bootstrapper, csrs, "create").is_ok());
        assert!(authorize(&bootstrapper, &format!("{csrs}/node-csr-1"), "get").is_ok());
        assert!(
            authorize(
                &bootstrapper,
                &format!("{csrs}/node-csr-1/approval"),
                "update"
            )
            .is_err()
        );
        assert!(authorize(&bootstrapper, &format!("{csrs}/node-csr-1"), "delete").is_err());
        assert!(authorize(&bootstrapper, "/api/v1/pods", "list").is_err());
    }
}
