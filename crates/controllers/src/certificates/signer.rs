//! The signer (upstream's `pkg/controller/certificates/signer` and
//! `authority`): an approved request for one of the signers below, not
//! failed and not yet issued, is checked against what its signer allows and
//! then signed by the cluster CA — or marked `Failed`
//! (`SignerValidationFailure`) when it asks for what the signer does not
//! give.
//!
//! | signer | what it signs |
//! |---|---|
//! | `kubernetes.io/kube-apiserver-client` | any subject; usages client auth, optionally digital signature and key encipherment |
//! | `kubernetes.io/kube-apiserver-client-kubelet` | `O=system:nodes`, `CN=system:node:<name>`, no SANs; digital signature and client auth, optionally key encipherment |
//! | `kubernetes.io/kubelet-serving` | `O=system:nodes`, `CN=system:node:<name>`, a DNS or IP SAN and no others; digital signature and server auth, optionally key encipherment |
//!
//! `kubernetes.io/legacy-unknown` (and every other signer) is left alone.
//! Certificates last `spec.expirationSeconds` (at least 10 minutes) or
//! the cluster's signing duration, whichever is shorter, start 5 minutes
//! in the past, and never outlive the CA.

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestStatus,
};
use rcgen::{
    CertificateSigningRequestParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

use super::{
    Outcome, SigningCa, condition, has_condition, has_true_condition, request_pem, usages,
};
use crate::Error;

pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";

/// Upstream's default `--cluster-signing-duration`: a year.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);
/// The shortest certificate issued, whatever is asked.
const MIN_DURATION: Duration = Duration::from_secs(600);
/// How far in the past a certificate starts (clock skew).
const BACKDATE: Duration = Duration::from_secs(5 * 60);
/// Certificates shorter than this end exactly when asked (not backdated).
const SHORT: Duration = Duration::from_secs(8 * 3600);

const FAILURE_REASON: &str = "SignerValidationFailure";

/// What the signers look at in a request: its subject and SANs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub emails: Vec<String>,
    pub uris: Vec<String>,
    /// Attribute types the subject names more than once (`O` twice): a
    /// subject the signer cannot copy whole.
    pub repeated_attributes: bool,
}

impl Request {
    /// Reads a PKCS#10 request (DER).
    pub fn parse(der: &[u8]) -> Result<Request, String> {
        let (_, csr) = x509_parser::certification_request::X509CertificationRequest::from_der(der)
            .map_err(|e| format!("unable to parse certificate request: {e}"))?;
        let subject = &csr.certification_request_info.subject;
        let text = |a: &x509_parser::x509::AttributeTypeAndValue<'_>| {
            a.as_str().map(str::to_string).unwrap_or_default()
        };
        let mut request = Request {
            common_name: subject
                .iter_common_name()
                .next()
                .map(text)
                .unwrap_or_default(),
            organizations: subject.iter_organization().map(text).collect(),
            ..Request::default()
        };
        let mut types = Vec::new();
        for attribute in subject.iter_attributes() {
            let oid = attribute.attr_type().to_id_string();
            request.repeated_attributes |= types.contains(&oid);
            types.push(oid);
        }
        request.repeated_attributes |= subject.iter().any(|rdn| rdn.iter().count() > 1);
        for extension in csr.requested_extensions().into_iter().flatten() {
            let ParsedExtension::SubjectAlternativeName(san) = extension else {
                continue;
            };
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(d) => request.dns_names.push(d.to_string()),
                    GeneralName::RFC822Name(e) => request.emails.push(e.to_string()),
                    GeneralName::URI(u) => request.uris.push(u.to_string()),
                    GeneralName::IPAddress(bytes) => {
                        if let Some(ip) = ip_of(bytes) {
                            request.ip_addresses.push(ip);
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(request)
    }
}

fn ip_of(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}

/// Whether `signer` is one this controller signs for.
pub fn signs_for(signer: &str) -> bool {
    [
        KUBE_APISERVER_CLIENT,
        KUBE_APISERVER_CLIENT_KUBELET,
        KUBELET_SERVING,
    ]
    .contains(&signer)
}

/// Whether the request is for this controller now: approved and not
/// denied, not failed, for one of its signers (issued ones never come).
pub fn wants_signing(csr: &CertificateSigningRequest) -> bool {
    has_condition(csr, "Approved")
        && !has_condition(csr, "Denied")
        && !has_true_condition(csr, "Failed")
        && signs_for(&csr.spec.signer_name)
}

fn same_usages(usages: &[String], wanted: &[&str]) -> bool {
    let mut given: Vec<&str> = usages.iter().map(String::as_str).collect();
    given.sort_unstable();
    given.dedup();
    let mut wanted = wanted.to_vec();
    wanted.sort_unstable();
    given == wanted
}

/// Upstream's error for usages other than `required` (Go's `%v` of a
/// sorted list).
fn usages_mismatch(required: &[&str]) -> String {
    let mut sorted = required.to_vec();
    sorted.sort_unstable();
    format!("usages did not match [{}]", sorted.join(" "))
}

/// The checks shared by the node signers: `O=system:nodes` exactly, a
/// `system:node:` common name.
fn node_subject(request: &Request) -> Result<(), String> {
    if request.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    Ok(())
}

fn node_common_name(request: &Request) -> Result<(), String> {
    if !request.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    Ok(())
}

/// Why `signer` will not sign `request` with `usages` (upstream's
/// `ValidateKubeletClientCSR`, `ValidateKubeletServingCSR` and
/// `validAPIServerClientUsages`, in their order).
pub fn validate(signer: &str, request: &Request, usages: &[String]) -> Result<(), String> {
    match signer {
        KUBE_APISERVER_CLIENT => {
            for usage in usages {
                match usage.as_str() {
                    "digital signature" | "key encipherment" | "client auth" => {}
                    other => return Err(format!("invalid usage for client certificate: {other}")),
                }
            }
            if !usages.iter().any(|u| u == "client auth") {
                return Err("missing required usage for client certificate: client auth".into());
            }
            Ok(())
        }
        KUBE_APISERVER_CLIENT_KUBELET => {
            node_subject(request)?;
            if !request.dns_names.is_empty() {
                return Err("DNS subjectAltNames are not allowed".into());
            }
            if !request.emails.is_empty() {
                return Err("Email subjectAltNames are not allowed".into());
            }
            if !request.ip_addresses.is_empty() {
                return Err("IP subjectAltNames are not allowed".into());
            }
            if !request.uris.is_empty() {
                return Err("URI subjectAltNames are not allowed".into());
            }
            node_common_name(request)?;
            let required = ["digital signature", "key encipherment", "client auth"];
            if !same_usages(usages, &required)
                && !same_usages(usages, &["digital signature", "client auth"])
            {
                return Err(usages_mismatch(&required));
            }
            Ok(())
        }
        KUBELET_SERVING => {
            node_subject(request)?;
            if request.dns_names.is_empty() && request.ip_addresses.is_empty() {
                return Err("DNS or IP subjectAltName is required".into());
            }
            if !request.emails.is_empty() {
                return Err("Email subjectAltNames are not allowed".into());
            }
            if !request.uris.is_empty() {
                return Err("URI subjectAltNames are not allowed".into());
            }
            let required = ["digital signature", "key encipherment", "server auth"];
            if !same_usages(usages, &required)
                && !same_usages(usages, &["digital signature", "server auth"])
            {
                return Err(usages_mismatch(&required));
            }
            node_common_name(request)
        }
        other => Err(format!("unrecognized signerName: {other:?}")),
    }
}

/// How long a certificate lasts: what the request asks, within
/// [10 minutes, `max`] (upstream's `duration`).
pub fn duration(expiration_seconds: Option<i32>, max: Duration) -> Duration {
    match expiration_seconds {
        None => max,
        Some(seconds) => Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
            .clamp(MIN_DURATION.min(max), max),
    }
}

/// The validity of a certificate issued `now` for `ttl` by a CA valid
/// until `ca_not_after` (upstream's `PermissiveSigningPolicy`).
pub fn validity(
    now: SystemTime,
    ttl: Duration,
    ca_not_after: SystemTime,
) -> Result<(SystemTime, SystemTime), String> {
    let not_before = now - BACKDATE;
    let end = if ttl < SHORT {
        now + ttl
    } else {
        now + ttl - BACKDATE
    };
    if not_before >= ca_not_after {
        return Err("the signer has expired".into());
    }
    if now >= ca_not_after {
        return Err("refusing to sign a certificate that expired in the past".into());
    }
    Ok((not_before, end.min(ca_not_after)))
}

/// The key usages and extended key usages `usages` name (upstream's
/// `keyUsagesFromStrings`).
pub fn key_usages(
    usages: &[String],
) -> Result<(Vec<KeyUsagePurpose>, Vec<ExtendedKeyUsagePurpose>), String> {
    let (mut key, mut extended, mut unknown) = (Vec::new(), Vec::new(), Vec::new());
    for usage in usages {
        let purpose = match usage.as_str() {
            "signing" | "digital signature" => Some(KeyUsagePurpose::DigitalSignature),
            "content commitment" => Some(KeyUsagePurpose::ContentCommitment),
            "key encipherment" => Some(KeyUsagePurpose::KeyEncipherment),
            "key agreement" => Some(KeyUsagePurpose::KeyAgreement),
            "data encipherment" => Some(KeyUsagePurpose::DataEncipherment),
            "cert sign" => Some(KeyUsagePurpose::KeyCertSign),
            "crl sign" => Some(KeyUsagePurpose::CrlSign),
            "encipher only" => Some(KeyUsagePurpose::EncipherOnly),
            "decipher only" => Some(KeyUsagePurpose::DecipherOnly),
            _ => None,
        };
        let extended_purpose = match usage.as_str() {
            "any" => Some(ExtendedKeyUsagePurpose::Any),
            "server auth" => Some(ExtendedKeyUsagePurpose::ServerAuth),
            "client auth" => Some(ExtendedKeyUsagePurpose::ClientAuth),
            "code signing" => Some(ExtendedKeyUsagePurpose::CodeSigning),
            "email protection" | "s/mime" => Some(ExtendedKeyUsagePurpose::EmailProtection),
            "timestamping" => Some(ExtendedKeyUsagePurpose::TimeStamping),
            "ocsp signing" => Some(ExtendedKeyUsagePurpose::OcspSigning),
            "ipsec end system" => Some(ExtendedKeyUsagePurpose::Other(vec![
                1, 3, 6, 1, 5, 5, 7, 3, 5,
            ])),
            "ipsec tunnel" => Some(ExtendedKeyUsagePurpose::Other(vec![
                1, 3, 6, 1, 5, 5, 7, 3, 6,
            ])),
            "ipsec user" => Some(ExtendedKeyUsagePurpose::Other(vec![
                1, 3, 6, 1, 5, 5, 7, 3, 7,
            ])),
            "microsoft sgc" => Some(ExtendedKeyUsagePurpose::Other(vec![
                1, 3, 6, 1, 4, 1, 311, 10, 3, 3,
            ])),
            "netscape sgc" => Some(ExtendedKeyUsagePurpose::Other(vec![
                2, 16, 840, 1, 113730, 4, 1,
            ])),
            _ => None,
        };
        match (purpose, extended_purpose) {
            (Some(p), _) if !key.contains(&p) => key.push(p),
            (Some(_), _) => {}
            (None, Some(p)) if !extended.contains(&p) => extended.push(p),
            (None, Some(_)) => {}
            (None, None) => unknown.push(format!("{usage:?}")),
        }
    }
    if !unknown.is_empty() {
        return Err(format!(
            "unrecognized usage values: [{}]",
            unknown.join(" ")
        ));
    }
    Ok((key, extended))
}

/// The signer: the cluster CA and the longest certificate it issues.
pub struct Signer {
    issuer: Issuer<'static, KeyPair>,
    ca_not_after: SystemTime,
    max_duration: Duration,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("ca_not_after", &self.ca_not_after)
            .field("max_duration", &self.max_duration)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A signer with `ca`, issuing certificates of at most `max_duration`.
    pub fn new(ca: &SigningCa, max_duration: Duration) -> Result<Signer, Error> {
        let failed = |what: &str, e: &dyn std::fmt::Display| Error::Failed(format!("{what}: {e}"));
        let key = KeyPair::from_pem(&ca.key_pem).map_err(|e| failed("reading the CA key", &e))?;
        let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, key)
            .map_err(|e| failed("reading the CA certificate", &e))?;
        let (_, pem) = x509_parser::pem::parse_x509_pem(ca.cert_pem.as_bytes())
            .map_err(|e| failed("reading the CA certificate", &e))?;
        let cert = pem
            .parse_x509()
            .map_err(|e| failed("reading the CA certificate", &e))?;
        let not_after = cert.validity().not_after.timestamp();
        let ca_not_after =
            SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(not_after).unwrap_or(0));
        Ok(Signer {
            issuer,
            ca_not_after,
            max_duration,
        })
    }

    /// What to do with `csr` at `now`: nothing, a certificate, or a
    /// `Failed` condition.
    pub fn handle(
        &self,
        csr: &CertificateSigningRequest,
        now: SystemTime,
    ) -> Result<Outcome, Error> {
        if !wants_signing(csr) {
            return Ok(Outcome::Nothing);
        }
        let signed = request_pem(csr).and_then(|pem| {
            let der = rudder_api::certificates::request_der(pem.as_bytes())?;
            let request = Request::parse(&der)?;
            validate(&csr.spec.signer_name, &request, usages(csr))?;
            if request.repeated_attributes {
                return Err(
                    "subject names an attribute type more than once, which this signer cannot copy"
                        .into(),
                );
            }
            Ok(pem)
        });
        let pem = match signed {
            Ok(pem) => pem,
            Err(why) => return Ok(failed(csr, &why, now)),
        };
        let certificate = match self.sign(pem, usages(csr), csr.spec.expiration_seconds, now) {
            Ok(certificate) => certificate,
            // The request itself is at fault (its signature, an extension
            // the signer cannot read): it will not get better.
            Err(SignError::Request(why)) => return Ok(failed(csr, &why, now)),
            Err(SignError::Signer(why)) => {
                return Err(Error::Failed(format!(
                    "error auto signing csr {}: {why}",
                    csr.metadata.name.as_deref().unwrap_or_default()
                )));
            }
        };
        let mut updated = csr.clone();
        updated
            .status
            .get_or_insert_with(CertificateSigningRequestStatus::default)
            .certificate = Some(ByteString(certificate.into_bytes()));
        Ok(Outcome::Status(Box::new(updated)))
    }

    /// A certificate (PEM) for the request `pem` with `usages`.
    pub fn sign(
        &self,
        pem: &str,
        usages: &[String],
        expiration_seconds: Option<i32>,
        now: SystemTime,
    ) -> Result<String, SignError> {
        let mut csr = CertificateSigningRequestParams::from_pem(pem).map_err(|e| {
            SignError::Request(format!("unable to verify certificate request: {e}"))
        })?;
        let ttl = duration(expiration_seconds, self.max_duration);
        let (not_before, not_after) =
            validity(now, ttl, self.ca_not_after).map_err(SignError::Signer)?;
        let (key_usages, extended) = key_usages(usages).map_err(SignError::Request)?;
        let epoch = rcgen::date_time_ymd(1970, 1, 1);
        let since_epoch =
            |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        let params = &mut csr.params;
        params.not_before = epoch + since_epoch(not_before);
        params.not_after = epoch + since_epoch(not_after);
        params.key_usages = key_usages;
        params.extended_key_usages = extended;
        params.is_ca = IsCa::ExplicitNoCa;
        params.custom_extensions.clear();
        params.use_authority_key_identifier_extension = true;
        let mut serial = *uuid::Uuid::new_v4().as_bytes();
        serial[0] &= 0x7f;
        params.serial_number = Some(SerialNumber::from_slice(&serial));
        let certificate = csr
            .signed_by(&self.issuer)
            .map_err(|e| SignError::Signer(format!("failed to sign certificate: {e}")))?;
        Ok(certificate.pem())
    }
}

/// Why a request was not signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignError {
    /// The request cannot be signed as it is.
    Request(String),
    /// The signer cannot sign now (an expired CA).
    Signer(String),
}

/// `csr` marked Failed for `why`.
fn failed(csr: &CertificateSigningRequest, why: &str, now: SystemTime) -> Outcome {
    let mut updated = csr.clone();
    updated
        .status
        .get_or_insert_with(CertificateSigningRequestStatus::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(condition("Failed", FAILURE_REASON, why, now));
    Outcome::Status(Box::new(updated))
}

#[cfg(test)]
mod tests;
