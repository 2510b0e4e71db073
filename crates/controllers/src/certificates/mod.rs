//! CertificateSigningRequests (upstream's `pkg/controller/certificates`):
//! the signer ([`signer`], `csrsigning`), which issues approved requests
//! for the `kubernetes.io/kube-apiserver-client` and
//! `kubernetes.io/kube-apiserver-client-kubelet` signers from the cluster
//! CA, and the approver ([`approver`], `csrapproving`), which approves
//! node client certificates asked for by the node itself or a bootstrapper.
//!
//! Both are upstream's `CertificateController`: every request not yet
//! issued is handed to one pure decision, and what it decides is written
//! back — a certificate or a `Failed` condition through `status`, an
//! `Approved` condition through `approval`.

pub mod approver;
pub mod signer;

use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rudder_runtime::controller::Action;
use rudder_runtime::informer::Store;
use rudder_runtime::{Change, WorkQueue};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use self::signer::Signer;
use crate::{Context, Error, api_error};

/// The cluster CA that signs issued certificates (upstream's
/// `--cluster-signing-cert-file` and `--cluster-signing-key-file`).
#[derive(Clone)]
pub struct SigningCa {
    /// The CA certificate, PEM.
    pub cert_pem: String,
    /// Its private key, PEM.
    pub key_pem: String,
}

impl std::fmt::Debug for SigningCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("SigningCa").finish_non_exhaustive()
    }
}

/// Whether the request has a condition of `type_` (any status: upstream
/// reads Approved and Denied so).
pub fn has_condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    conditions(csr).iter().any(|c| c.type_ == type_)
}

/// Whether the request has a True condition of `type_`.
pub fn has_true_condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    conditions(csr)
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

fn conditions(csr: &CertificateSigningRequest) -> &[CertificateSigningRequestCondition] {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

/// Whether a certificate has been issued.
pub fn issued(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
}

/// The request's usages.
pub fn usages(csr: &CertificateSigningRequest) -> &[String] {
    csr.spec.usages.as_deref().unwrap_or_default()
}

/// The request's PEM (`spec.request`), as text.
pub fn request_pem(csr: &CertificateSigningRequest) -> Result<&str, String> {
    std::str::from_utf8(&csr.spec.request.0)
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_string())
}

/// A True condition of `type_`, updated and transitioned `now`.
pub(crate) fn condition(
    type_: &str,
    reason: &str,
    message: &str,
    now: SystemTime,
) -> CertificateSigningRequestCondition {
    let at = Time(
        k8s_openapi::jiff::Timestamp::try_from(now)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    );
    CertificateSigningRequestCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_update_time: Some(at.clone()),
        last_transition_time: Some(at),
    }
}

/// What a handler decided for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Nothing to write.
    Nothing,
    /// Write this status (a certificate, a `Failed` condition).
    Status(Box<CertificateSigningRequest>),
    /// Append this condition through the `approval` subresource.
    Approve(Box<CertificateSigningRequestCondition>),
}

/// One request's handler: the request (not yet issued), the time now.
type Handle<H> = fn(&H, &CertificateSigningRequest, SystemTime) -> Result<Outcome, Error>;

struct Controller<H> {
    ctx: Arc<Context>,
    requests: Store<CertificateSigningRequest>,
    queue: WorkQueue<String>,
    handler: H,
    handle: Handle<H>,
}

/// Runs one certificate controller (upstream's `CertificateController`)
/// until `stop` fires: every request not yet issued goes to `handle`.
async fn run_with<H: Send + Sync + 'static>(
    ctx: Arc<Context>,
    stop: CancellationToken,
    name: &'static str,
    handler: H,
    handle: Handle<H>,
) {
    let requests = ctx.informers.typed::<CertificateSigningRequest>();
    let mut changes = requests.subscribe();
    let c = Arc::new(Controller {
        requests: requests.store(),
        queue: WorkQueue::new(ctx.clock.clone()),
        ctx: ctx.clone(),
        handler,
        handle,
    });
    requests.wait_synced().await;
    let enqueue_all = {
        let c = c.clone();
        move || {
            for csr in c.requests.list() {
                c.queue.add(csr.name_any());
            }
        }
    };
    enqueue_all();
    let watch = {
        let (c, stop) = (c.clone(), stop.clone());
        async move {
            while let Some(change) = changes.next_until(&stop).await {
                match change {
                    Change::Applied { new, .. } => c.queue.add(new.name_any()),
                    Change::Deleted(_) => {}
                    Change::Resync => enqueue_all(),
                }
            }
        }
    };
    crate::serve(
        name,
        c.clone(),
        c.queue.clone(),
        1,
        None,
        watch,
        stop,
        |c, key| async move { c.sync(&key).await },
    )
    .await;
}

impl<H> Controller<H> {
    async fn sync(&self, name: &str) -> Result<Action, Error> {
        let Some(csr) = self.requests.get(name) else {
            return Ok(Action::Done);
        };
        if issued(&csr) {
            return Ok(Action::Done);
        }
        let api: Api<CertificateSigningRequest> = Api::all(self.ctx.client.clone());
        let result = match (self.handle)(&self.handler, &csr, self.ctx.clock.now())? {
            Outcome::Nothing => return Ok(Action::Done),
            Outcome::Status(updated) => api
                .replace_status(name, &PostParams::default(), &updated)
                .await
                .map(drop),
            Outcome::Approve(condition) => {
                // The conditions as read, guarded by their resourceVersion.
                let mut conditions = conditions(&csr).to_vec();
                conditions.push(*condition);
                let patch = json!({
                    "metadata": {"resourceVersion": csr.resource_version()},
                    "status": {"conditions": conditions},
                });
                api.patch_approval(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map(drop)
            }
        };
        match result {
            Ok(()) => Ok(Action::Done),
            // Gone, or changed since read: the next change brings it back.
            Err(e) if crate::is_status(&e, 404) || crate::is_status(&e, 409) => Ok(Action::Done),
            Err(e) => Err(api_error(format!(
                "updating certificate signing request {name}"
            ))(e)),
        }
    }
}

/// Runs the signer (`certificatesigningrequest-signing-controller`) until
/// `stop` fires; nothing without a signing CA.
pub async fn run_signer(ctx: Arc<Context>, stop: CancellationToken) {
    let Some(ca) = ctx.options.signing_ca.clone() else {
        return;
    };
    let signer = match Signer::new(&ca, ctx.options.cluster_signing_duration) {
        Ok(signer) => signer,
        Err(e) => {
            tracing::error!(error = %e, "the signing CA cannot be used: no certificates will be issued");
            return;
        }
    };
    run_with(ctx, stop, "csrsigning", signer, Signer::handle).await
}

/// Runs the approver (`certificatesigningrequest-approving-controller`)
/// until `stop` fires.
pub async fn run_approver(ctx: Arc<Context>, stop: CancellationToken) {
    run_with(ctx, stop, "csrapproving", (), |_, csr, now| {
        approver::handle(csr, now)
    })
    .await
}
