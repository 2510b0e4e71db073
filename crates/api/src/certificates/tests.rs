use base64::Engine;
use serde_json::{Value, json};

use super::*;

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A request whose PEM framing is right (an empty DER SEQUENCE: the API
/// server does not look inside).
fn csr() -> Value {
    let pem = "-----BEGIN CERTIFICATE REQUEST-----\nMAA=\n-----END CERTIFICATE REQUEST-----\n";
    json!({
        "metadata": {"name": "c"},
        "spec": {
            "request": b64(pem),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": ["client auth"],
        },
    })
}

fn causes(csr: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    validate(csr, &mut causes);
    causes
        .into_iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect()
}

fn condition(kind: &str) -> Value {
    json!({
        "type": kind,
        "status": "True",
        "reason": "R",
        "lastUpdateTime": "2025-01-01T00:00:00Z",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    })
}

#[test]
fn a_well_formed_request_is_valid() {
    assert!(causes(&csr()).is_empty(), "{:?}", causes(&csr()));
}

#[test]
fn request_must_be_a_pem_certificate_request() {
    let mut c = csr();
    c["spec"]["request"] = json!(b64(
        "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n"
    ));
    assert_eq!(
        causes(&c),
        [
            "spec.request: Invalid value: \"<request data>\": PEM block type must be CERTIFICATE REQUEST"
        ]
    );
    c["spec"]["request"] = json!(b64("not pem"));
    assert_eq!(causes(&c).len(), 1);
}

#[test]
fn signer_usages_and_expiration_are_checked() {
    let mut c = csr();
    c["spec"]["signerName"] = json!("");
    c["spec"]["usages"] = json!(["client auth", "flying", "client auth"]);
    c["spec"]["expirationSeconds"] = json!(599);
    let found = causes(&c);
    assert_eq!(found.len(), 4, "{found:?}");
    assert_eq!(
        found[0],
        "spec.usages[1]: Unsupported value: \"flying\": supported values: \"any\", \"cert sign\", \"client auth\", \"code signing\", \"content commitment\", \"crl sign\", \"data encipherment\", \"decipher only\", \"digital signature\", \"email protection\", \"encipher only\", \"ipsec end system\", \"ipsec tunnel\", \"ipsec user\", \"key agreement\", \"key encipherment\", \"microsoft sgc\", \"netscape sgc\", \"ocsp signing\", \"s/mime\", \"server auth\", \"signing\", \"timestamping\""
    );
    assert_eq!(found[1], "spec.usages[2]: Duplicate value: \"client auth\"");
    assert_eq!(found[2], "spec.signerName: Required value");
    assert!(found[3].starts_with("spec.expirationSeconds: Invalid value: 599"));
    for bad in ["example.com", "a/b/c", "nodots/x", "Example.com/x"] {
        c = csr();
        c["spec"]["signerName"] = json!(bad);
        assert_eq!(causes(&c).len(), 1, "{bad}: {:?}", causes(&c));
    }
    c["spec"]["signerName"] = json!(LEGACY_UNKNOWN_SIGNER);
    assert_eq!(
        causes(&c),
        [
            "spec.signerName: Invalid value: \"kubernetes.io/legacy-unknown\": the legacy signerName is not allowed via this API version"
        ]
    );
    c["spec"]["signerName"] = json!("example.com/my-signer");
    assert!(causes(&c).is_empty());
}

#[test]
fn approved_and_denied_are_exclusive() {
    let mut c = csr();
    c["status"] =
        json!({"conditions": [condition("Approved"), condition("Denied"), condition("Approved")]});
    assert_eq!(
        causes(&c),
        [
            "status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive",
            "status.conditions[2].type: Invalid value: \"Approved\": Approved and Denied conditions are mutually exclusive",
            "status.conditions[2].type: Duplicate value: \"Approved\"",
        ]
    );
    c["status"] = json!({"conditions": [{"type": "Failed", "status": "False"}]});
    assert_eq!(
        causes(&c),
        ["status.conditions[0].status: Unsupported value: \"False\": supported values: \"True\""]
    );
}

#[test]
fn the_certificate_must_be_pem_certificates() {
    let mut c = csr();
    c["status"] = json!({"certificate": b64("-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n")});
    assert!(causes(&c).is_empty());
    c["status"] = json!({"certificate": b64("junk")});
    assert_eq!(
        causes(&c),
        [
            "status.certificate: Invalid value: \"<certificate data>\": must contain at least one CERTIFICATE PEM block"
        ]
    );
}

#[test]
fn the_requester_replaces_what_the_client_wrote() {
    let mut c = csr();
    c["spec"]["username"] = json!("mallory");
    c["spec"]["uid"] = json!("1");
    c["spec"]["extra"] = json!({"a": ["b"]});
    set_requester(
        &mut c,
        "alice",
        &["dev".into(), "system:authenticated".into()],
    );
    assert_eq!(c["spec"]["username"], "alice");
    assert_eq!(c["spec"]["groups"], json!(["dev", "system:authenticated"]));
    assert!(c["spec"].get("uid").is_none() && c["spec"].get("extra").is_none());
}

const NOW: &str = "2025-06-01T00:00:00Z";

#[test]
fn approval_writes_the_conditions_alone() {
    let mut old = csr();
    old["status"] =
        json!({"certificate": "Y2VydA==", "conditions": [{"type": "Failed", "status": "True"}]});
    let mut new = old.clone();
    new["status"] = json!({"conditions": [
        {"type": "Failed", "status": "True"},
        {"type": "Approved", "status": "True", "reason": "KubectlApprove"},
    ]});
    assert!(update_subresource("approval", &mut new, &old, NOW).is_empty());
    assert_eq!(new["status"]["certificate"], "Y2VydA==", "kept");
    let approved = &new["status"]["conditions"][1];
    assert_eq!(approved["lastUpdateTime"], NOW);
    assert_eq!(approved["lastTransitionTime"], NOW);
    // Removing a condition is refused.
    let mut removed = old.clone();
    removed["status"] = json!({"conditions": []});
    let refused = update_subresource("approval", &mut removed, &old, NOW);
    assert_eq!(
        refused[0].message,
        "Forbidden: updates may not remove a condition of type \"Failed\""
    );
}

#[test]
fn status_keeps_the_approval_and_sets_the_certificate_once() {
    let mut old = csr();
    old["status"] = json!({"conditions": [condition("Approved")]});
    let mut new = old.clone();
    new["status"] = json!({
        "certificate": "Y2VydA==",
        "conditions": [{"type": "Approved", "status": "True", "reason": "Changed"}],
    });
    assert!(update_subresource("status", &mut new, &old, NOW).is_empty());
    assert_eq!(
        new["status"]["conditions"][0],
        condition("Approved"),
        "kept"
    );
    // Adding an approval through status is refused.
    let mut denied = new.clone();
    denied["status"]["conditions"]
        .as_array_mut()
        .expect("conditions")
        .push(condition("Denied"));
    let refused = update_subresource("status", &mut denied, &new, NOW);
    assert_eq!(
        refused[0].message,
        "Forbidden: updates may not add a condition of type \"Denied\""
    );
    // A certificate once issued stays.
    let mut reissued = new.clone();
    reissued["status"]["certificate"] = json!("b3RoZXI=");
    let refused = update_subresource("status", &mut reissued, &new, NOW);
    assert_eq!(
        refused[0].message,
        "Forbidden: updates may not modify existing certificate content"
    );
}

#[test]
fn a_condition_keeps_its_transition_time_while_its_status_stays() {
    let mut old = csr();
    old["status"] = json!({"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]});
    let mut new = old.clone();
    new["status"]["conditions"][0]
        .as_object_mut()
        .expect("condition")
        .remove("lastTransitionTime");
    update_subresource("status", &mut new, &old, NOW);
    let ready = &new["status"]["conditions"][0];
    assert_eq!(ready["lastTransitionTime"], "2024-01-01T00:00:00Z");
    assert_eq!(ready["lastUpdateTime"], NOW);
}
