//! The approver (upstream's `pkg/controller/certificates/approver`,
//! `csrapproving`): a request for a node client certificate
//! (`kubernetes.io/kube-apiserver-client-kubelet`, a valid kubelet client
//! subject and usages) that is neither approved nor denied is approved when
//! its requester may ask for it.
//!
//! Upstream asks a SubjectAccessReview whether the requester may `create`
//! `certificatesigningrequests/selfnodeclient` (a node renewing its own
//! certificate) or `certificatesigningrequests/nodeclient` (a bootstrapper
//! asking for a node's first one). Rudder has no RBAC yet, so it grants
//! what upstream's bootstrap bindings grant: `selfnodeclient` to the group
//! `system:nodes`, `nodeclient` to `system:bootstrappers`, both to
//! `system:masters`.
//!
//! Beyond upstream, as k3s's server signs its agents' serving certificates:
//! a node's request for its own serving certificate
//! (`kubernetes.io/kubelet-serving`, CN = the requesting node) is approved
//! too, so that a joined agent's HTTPS server (logs) is trusted by the API
//! server. Upstream leaves these to an external approver; the addresses in
//! it are the node's word, as they are in its Node status.

use std::time::SystemTime;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

use super::signer::{KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING, Request, validate};
use super::{Outcome, condition, has_condition, request_pem, usages};
use crate::Error;

/// The condition reason of an automatic approval.
pub const REASON: &str = "AutoApproved";

/// One kind of request the approver recognizes, and who may have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recognized {
    /// A node asking for its own client certificate.
    SelfNodeClient,
    /// A node client certificate asked for by someone else.
    NodeClient,
    /// A node asking for its own serving certificate (rudder, as k3s).
    SelfNodeServing,
}

impl Recognized {
    /// The subresource upstream's SubjectAccessReview names.
    pub fn subresource(self) -> &'static str {
        match self {
            Recognized::SelfNodeClient => "selfnodeclient",
            Recognized::NodeClient => "nodeclient",
            Recognized::SelfNodeServing => "selfnodeserving",
        }
    }

    /// The message of the approval, as upstream's.
    pub fn message(self) -> &'static str {
        match self {
            Recognized::SelfNodeClient => {
                "Auto approving self kubelet client certificate after SubjectAccessReview."
            }
            Recognized::NodeClient => {
                "Auto approving kubelet client certificate after SubjectAccessReview."
            }
            Recognized::SelfNodeServing => {
                "Auto approving self kubelet serving certificate: the requesting node's own name."
            }
        }
    }

    /// Whether a requester in `groups` may have it (rudder's stand-in for
    /// the SubjectAccessReview).
    pub fn allowed(self, groups: &[String]) -> bool {
        let member = |group: &str| groups.iter().any(|g| g == group);
        member("system:masters")
            || match self {
                Recognized::SelfNodeClient | Recognized::SelfNodeServing => member("system:nodes"),
                Recognized::NodeClient => member("system:bootstrappers"),
            }
    }
}

/// What the request is, in the order upstream tries: a self node client
/// request is also a node client one.
pub fn recognize(csr: &CertificateSigningRequest, request: &Request) -> Vec<Recognized> {
    let own = csr.spec.username.as_deref() == Some(request.common_name.as_str());
    if csr.spec.signer_name == KUBELET_SERVING {
        let valid = validate(KUBELET_SERVING, request, usages(csr)).is_ok();
        return if valid && own {
            vec![Recognized::SelfNodeServing]
        } else {
            Vec::new()
        };
    }
    let node_client = csr.spec.signer_name == KUBE_APISERVER_CLIENT_KUBELET
        && validate(KUBE_APISERVER_CLIENT_KUBELET, request, usages(csr)).is_ok();
    if !node_client {
        return Vec::new();
    }
    if own {
        vec![Recognized::SelfNodeClient, Recognized::NodeClient]
    } else {
        vec![Recognized::NodeClient]
    }
}

/// The approval `csr` gets, if any: the first recognized kind its
/// requester may have.
pub fn decide(csr: &CertificateSigningRequest, request: &Request) -> Option<Recognized> {
    let groups = csr.spec.groups.as_deref().unwrap_or_default();
    recognize(csr, request)
        .into_iter()
        .find(|kind| kind.allowed(groups))
}

/// What to do with `csr` at `now` (upstream's `sarApprover.handle`).
pub fn handle(csr: &CertificateSigningRequest, now: SystemTime) -> Result<Outcome, Error> {
    if has_condition(csr, "Approved") || has_condition(csr, "Denied") {
        return Ok(Outcome::Nothing);
    }
    let name = csr.metadata.name.as_deref().unwrap_or_default();
    let request = request_pem(csr)
        .and_then(|pem| rudder_api::certificates::request_der(pem.as_bytes()))
        .and_then(|der| Request::parse(&der))
        .map_err(|e| Error::Failed(format!("unable to parse csr {name:?}: {e}")))?;
    if let Some(kind) = decide(csr, &request) {
        return Ok(Outcome::Approve(Box::new(condition(
            "Approved",
            REASON,
            kind.message(),
            now,
        ))));
    }
    let tried: Vec<&str> = recognize(csr, &request)
        .into_iter()
        .map(Recognized::subresource)
        .collect();
    if !tried.is_empty() {
        // Upstream's IgnorableError: said, not retried.
        tracing::info!(
            csr = name,
            "recognized csr as {tried:?} but subject access review was not approved"
        );
    }
    Ok(Outcome::Nothing)
}

#[cfg(test)]
mod tests;
