//! CertificateSigningRequests as upstream's registry and validation treat
//! them (`pkg/registry/certificates/certificates/strategy.go`,
//! `pkg/apis/certificates/validation`): who asked is recorded at create,
//! the request must be a PEM `CERTIFICATE REQUEST` for a well-formed
//! signer, and each way of writing the object changes its own part — the
//! main resource nothing of spec and status, `status` the certificate and
//! conditions but not the Approved/Denied ones, `approval` the conditions
//! alone.
//!
//! The API server checks the PEM framing of the request, not its
//! signature: the signer verifies that before it signs (and marks the
//! request Failed when it does not hold).

use base64::Engine;
use serde_json::{Value, json};

use crate::Cause;
use crate::validation::dns1123_label;

/// The signer name v1 refuses for new requests.
pub const LEGACY_UNKNOWN_SIGNER: &str = "kubernetes.io/legacy-unknown";

/// Every usage a request may name (upstream's `allValidUsages`).
pub const USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

/// The condition types that may only be True.
const TRUE_ONLY: &[&str] = &["Approved", "Denied", "Failed"];

/// The blocks of a PEM text: (label, headers present, DER contents).
/// `None` where the text is not PEM at all (a block without its end, a body
/// that is not base64).
pub fn pem_blocks(text: &str) -> Option<Vec<(String, bool, Vec<u8>)>> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().map(str::trim);
    while let Some(line) = lines.next() {
        let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        let end = format!("-----END {label}-----");
        let (mut body, mut headers) = (String::new(), false);
        loop {
            let line = lines.next()?;
            if line == end {
                break;
            }
            if line.contains(':') {
                headers = true;
            } else {
                body.push_str(line);
            }
        }
        let der = base64::engine::general_purpose::STANDARD
            .decode(body.as_bytes())
            .ok()?;
        blocks.push((label.to_string(), headers, der));
    }
    Some(blocks)
}

/// The bytes of a base64 field (`spec.request`, `status.certificate`).
fn bytes_at(csr: &Value, pointer: &str) -> Option<Vec<u8>> {
    let text = csr.pointer(pointer)?.as_str()?;
    base64::engine::general_purpose::STANDARD
        .decode(text.as_bytes())
        .ok()
}

/// The DER of the request's first PEM block, which must be a
/// `CERTIFICATE REQUEST` (upstream's `ParseCSR`).
pub fn request_der(pem: &[u8]) -> Result<Vec<u8>, String> {
    const WRONG: &str = "PEM block type must be CERTIFICATE REQUEST";
    let text = std::str::from_utf8(pem).map_err(|_| WRONG.to_string())?;
    match pem_blocks(text).and_then(|b| b.into_iter().next()) {
        // A DER SEQUENCE, as every PKCS#10 request is.
        Some((label, _, der)) if label == "CERTIFICATE REQUEST" && der.first() == Some(&0x30) => {
            Ok(der)
        }
        Some((label, _, _)) if label == "CERTIFICATE REQUEST" => {
            Err("asn1: structure error: tags don't match".into())
        }
        _ => Err(WRONG.into()),
    }
}

/// Why `pem` is not a certificate chain upstream accepts in
/// `status.certificate`; `None` when it is (or is empty).
fn certificate_problem(pem: &[u8]) -> Option<&'static str> {
    if pem.is_empty() {
        return None;
    }
    let blocks = std::str::from_utf8(pem).ok().and_then(pem_blocks);
    let Some(blocks) = blocks.filter(|b| !b.is_empty()) else {
        return Some("must contain at least one CERTIFICATE PEM block");
    };
    for (label, headers, der) in blocks {
        if label != "CERTIFICATE" {
            return Some("only CERTIFICATE PEM blocks are allowed");
        }
        if headers {
            return Some("no PEM block headers are permitted");
        }
        if der.first() != Some(&0x30) {
            return Some("found CERTIFICATE PEM block containing 0 certificates");
        }
    }
    None
}

/// Validates a request (upstream's `validateCertificateSigningRequest`).
pub(crate) fn validate(csr: &Value, causes: &mut Vec<Cause>) {
    let request = bytes_at(csr, "/spec/request").unwrap_or_default();
    if let Err(why) = request_der(&request) {
        causes.push(Cause::invalid(
            "spec.request",
            &json!("<request data>"),
            &why,
        ));
    }
    let usages: Vec<&str> = csr
        .pointer("/spec/usages")
        .and_then(Value::as_array)
        .map(|u| u.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if usages.is_empty() {
        causes.push(Cause::required("spec.usages"));
    }
    for (i, usage) in usages.iter().enumerate() {
        if !USAGES.contains(usage) {
            let mut supported = USAGES.to_vec();
            supported.sort_unstable();
            causes.push(Cause::not_supported(
                format!("spec.usages[{i}]"),
                &json!(usage),
                &supported,
            ));
        }
        if usages[..i].contains(usage) {
            causes.push(Cause::duplicate(format!("spec.usages[{i}]"), &json!(usage)));
        }
    }
    let signer = csr
        .pointer("/spec/signerName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if signer == LEGACY_UNKNOWN_SIGNER {
        causes.push(Cause::invalid(
            "spec.signerName",
            &json!(signer),
            "the legacy signerName is not allowed via this API version",
        ));
    } else {
        signer_name(signer, causes);
    }
    if let Some(seconds) = csr
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        && seconds < 600
    {
        causes.push(Cause::invalid(
            "spec.expirationSeconds",
            &json!(seconds),
            "may not specify a duration less than 600 seconds (10 minutes)",
        ));
    }
    conditions(csr, causes);
    let certificate = bytes_at(csr, "/status/certificate").unwrap_or_default();
    if let Some(why) = certificate_problem(&certificate) {
        causes.push(Cause::invalid(
            "status.certificate",
            &json!("<certificate data>"),
            why,
        ));
    }
}

/// A signer name: `<domain>/<path>` (upstream's `ValidateSignerName`).
fn signer_name(signer: &str, causes: &mut Vec<Cause>) {
    const FIELD: &str = "spec.signerName";
    if signer.is_empty() {
        causes.push(Cause::required(FIELD));
        return;
    }
    let Some((domain, path)) = signer.split_once('/').filter(|(_, p)| !p.contains('/')) else {
        causes.push(Cause::invalid(
            FIELD,
            &json!(signer),
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ));
        return;
    };
    if domain.len() > 253 {
        causes.push(Cause::new(
            "FieldValueTooLong",
            FIELD,
            "Too long: may not be more than 253 bytes",
        ));
    }
    let labels: Vec<&str> = domain.split('.').collect();
    if let Some((label, why)) = labels
        .iter()
        .find_map(|l| dns1123_label(l).err().map(|why| (l, why)))
    {
        causes.push(Cause::invalid(
            FIELD,
            &json!(domain),
            &format!("validating label {label:?}: {why}"),
        ));
    }
    if labels.len() < 2 {
        causes.push(Cause::invalid(
            FIELD,
            &json!(domain),
            "should be a domain with at least two segments separated by dots",
        ));
    }
    if path.len() > 253 + 63 + 1 {
        causes.push(Cause::new(
            "FieldValueTooLong",
            FIELD,
            "Too long: may not be more than 317 bytes",
        ));
    }
    if let Some((part, why)) = path.split('.').find_map(|p| {
        crate::validation::dns1123_subdomain(p)
            .err()
            .map(|why| (p, why))
    }) {
        causes.push(Cause::invalid(
            FIELD,
            &json!(path),
            &format!("validating component {part:?}: {why}"),
        ));
    }
}

fn conditions_of(csr: &Value) -> &[Value] {
    csr.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn type_of(condition: &Value) -> &str {
    condition
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The conditions' types and statuses (upstream's `validateConditions`).
fn conditions(csr: &Value, causes: &mut Vec<Cause>) {
    let mut seen: Vec<&str> = Vec::new();
    for (i, condition) in conditions_of(csr).iter().enumerate() {
        let field = |leaf: &str| format!("status.conditions[{i}].{leaf}");
        let kind = type_of(condition);
        if kind.is_empty() {
            causes.push(Cause::required(field("type")));
        }
        let status = condition
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let allowed: &[&str] = if TRUE_ONLY.contains(&kind) {
            &["True"]
        } else {
            &["False", "True", "Unknown"]
        };
        if status.is_empty() {
            causes.push(Cause::required(field("status")));
        } else if !allowed.contains(&status) {
            causes.push(Cause::not_supported(
                field("status"),
                &json!(status),
                allowed,
            ));
        }
        let opposite = match kind {
            "Approved" => Some("Denied"),
            "Denied" => Some("Approved"),
            _ => None,
        };
        if opposite.is_some_and(|o| seen.contains(&o)) {
            causes.push(Cause::invalid(
                field("type"),
                &json!(kind),
                "Approved and Denied conditions are mutually exclusive",
            ));
        }
        if seen.contains(&kind) {
            causes.push(Cause::duplicate(field("type"), &json!(kind)));
        }
        seen.push(kind);
    }
}

/// Records the requesting user in a new request (upstream's
/// `PrepareForCreate`): whatever the client wrote there is replaced.
pub(crate) fn set_requester(csr: &mut Value, user: &str, groups: &[String]) {
    if !csr.get("spec").is_some_and(Value::is_object) {
        csr["spec"] = json!({});
    }
    let spec = &mut csr["spec"];
    spec["username"] = json!(user);
    spec["groups"] = json!(groups);
    if let Some(spec) = spec.as_object_mut() {
        spec.remove("uid");
        spec.remove("extra");
    }
}

/// Prepares and validates an update through a subresource (upstream's
/// status and approval strategies): `status` keeps the stored Approved and
/// Denied conditions and may set, never change, the certificate;
/// `approval` writes the conditions alone. Conditions get the times they
/// lack (`now` as their update, and as their transition unless the stored
/// object had the same type and status). Returns the causes refusing it.
pub(crate) fn update_subresource(
    subresource: &str,
    new: &mut Value,
    old: &Value,
    now: &str,
) -> Vec<Cause> {
    let mut causes = Vec::new();
    match subresource {
        "status" => {
            for kind in ["Approved", "Denied"] {
                preserve_instances(new, old, kind);
            }
            stamp_conditions(new, old, now);
            let (before, after) = (
                bytes_at(old, "/status/certificate").unwrap_or_default(),
                bytes_at(new, "/status/certificate").unwrap_or_default(),
            );
            if before != after && !before.is_empty() {
                causes.push(Cause::forbidden(
                    "status.certificate",
                    "updates may not modify existing certificate content",
                ));
            }
            approval_unchanged(new, old, &mut causes);
        }
        "approval" => {
            stamp_conditions(new, old, now);
            let conditions = new.pointer("/status/conditions").cloned();
            let mut status = old.get("status").cloned().unwrap_or_else(|| json!({}));
            match conditions {
                Some(c) => status["conditions"] = c,
                None => {
                    if let Some(s) = status.as_object_mut() {
                        s.remove("conditions");
                    }
                }
            }
            new["status"] = status;
        }
        _ => return causes,
    }
    for kind in ["Approved", "Denied", "Failed"] {
        if count(new, kind) < count(old, kind) {
            causes.push(Cause::forbidden(
                "status.conditions",
                &format!("updates may not remove a condition of type {kind:?}"),
            ));
        }
    }
    causes
}

fn count(csr: &Value, kind: &str) -> usize {
    conditions_of(csr)
        .iter()
        .filter(|c| type_of(c) == kind)
        .count()
}

/// Puts the stored conditions of `kind` back in place of the new ones,
/// where there are as many (upstream's `preserveConditionInstances`).
fn preserve_instances(new: &mut Value, old: &Value, kind: &str) {
    let stored: Vec<Value> = conditions_of(old)
        .iter()
        .filter(|c| type_of(c) == kind)
        .cloned()
        .collect();
    if count(new, kind) != stored.len() {
        return;
    }
    let Some(conditions) = new
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    let mut stored = stored.into_iter();
    for condition in conditions.iter_mut().filter(|c| type_of(c) == kind) {
        if let Some(kept) = stored.next() {
            *condition = kept;
        }
    }
}

/// The status subresource may not add, remove or change Approved or
/// Denied conditions.
fn approval_unchanged(new: &Value, old: &Value, causes: &mut Vec<Cause>) {
    for kind in ["Approved", "Denied"] {
        let of = |csr: &Value| -> Vec<Value> {
            conditions_of(csr)
                .iter()
                .filter(|c| type_of(c) == kind)
                .cloned()
                .collect()
        };
        let (before, after) = (of(old), of(new));
        if after.len() > before.len() {
            causes.push(Cause::forbidden(
                "status.conditions",
                &format!("updates may not add a condition of type {kind:?}"),
            ));
        } else if after.len() == before.len() && after != before {
            causes.push(Cause::forbidden(
                "status.conditions",
                &format!("updates may not modify a condition of type {kind:?}"),
            ));
        }
    }
}

/// Gives every condition the times it lacks (upstream's
/// `populateConditionTimestamps`).
fn stamp_conditions(new: &mut Value, old: &Value, now: &str) {
    let stored = conditions_of(old).to_vec();
    let Some(conditions) = new
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for condition in conditions.iter_mut().filter(|c| c.is_object()) {
        let missing = |c: &Value, key: &str| c.get(key).is_none_or(Value::is_null);
        if missing(condition, "lastUpdateTime") {
            condition["lastUpdateTime"] = json!(now);
        }
        if missing(condition, "lastTransitionTime") {
            let same = |c: &&Value| {
                type_of(c) == type_of(condition)
                    && c.get("status") == condition.get("status")
                    && !missing(c, "lastTransitionTime")
            };
            let since = stored
                .iter()
                .find(same)
                .and_then(|c| c.get("lastTransitionTime").cloned())
                .unwrap_or_else(|| json!(now));
            condition["lastTransitionTime"] = since;
        }
    }
}

#[cfg(test)]
mod tests;
