use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose, SanType};
use x509_parser::prelude::FromDer;

use super::*;
use crate::certificates::condition;

/// A CA made for the test.
fn ca() -> SigningCa {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "test-ca");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(&key).expect("self-signed");
    SigningCa {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// A request (PEM) for `cn` in `orgs` with `sans`.
fn request_pem(cn: &str, orgs: &[&str], sans: Vec<SanType>) -> String {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, cn);
    for org in orgs {
        params
            .distinguished_name
            .push(DnType::OrganizationName, *org);
    }
    params.subject_alt_names = sans;
    params
        .serialize_request(&key)
        .expect("csr")
        .pem()
        .expect("pem")
}

fn csr(signer: &str, pem: &str, usages: &[&str]) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: kube::api::ObjectMeta {
            name: Some("c".into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.as_bytes().to_vec()),
            signer_name: signer.into(),
            usages: Some(usages.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        status: None,
    }
}

fn with_condition(mut csr: CertificateSigningRequest, type_: &str) -> CertificateSigningRequest {
    csr.status
        .get_or_insert_with(CertificateSigningRequestStatus::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(condition(type_, "R", "", SystemTime::now()));
    csr
}

fn approved(csr: CertificateSigningRequest) -> CertificateSigningRequest {
    with_condition(csr, "Approved")
}

fn usages(list: &[&str]) -> Vec<String> {
    list.iter().map(|u| u.to_string()).collect()
}

fn node_request() -> Request {
    Request {
        common_name: "system:node:n1".into(),
        organizations: vec!["system:nodes".into()],
        ..Request::default()
    }
}

#[test]
fn only_approved_unfailed_requests_for_our_signers_are_signed() {
    let pem = request_pem("alice", &[], vec![]);
    let pending = csr(KUBE_APISERVER_CLIENT, &pem, &["client auth"]);
    assert!(!wants_signing(&pending), "not approved");
    assert!(wants_signing(&approved(pending.clone())));
    let denied = with_condition(approved(pending.clone()), "Denied");
    assert!(!wants_signing(&denied));
    let failed = with_condition(approved(pending.clone()), "Failed");
    assert!(!wants_signing(&failed));
    for other in [
        "kubernetes.io/legacy-unknown",
        "example.com/mine",
        "kubernetes.io/kube-apiserver-client-x",
    ] {
        assert!(
            !wants_signing(&approved(csr(other, &pem, &["client auth"]))),
            "{other}"
        );
    }
    assert!(signs_for(KUBE_APISERVER_CLIENT_KUBELET) && signs_for(KUBELET_SERVING));
}

#[test]
fn client_signer_usages() {
    let any = Request::default();
    assert_eq!(
        validate(KUBE_APISERVER_CLIENT, &any, &usages(&["client auth"])),
        Ok(())
    );
    assert_eq!(
        validate(
            KUBE_APISERVER_CLIENT,
            &any,
            &usages(&["digital signature", "key encipherment", "client auth"])
        ),
        Ok(())
    );
    assert_eq!(
        validate(
            KUBE_APISERVER_CLIENT,
            &any,
            &usages(&["client auth", "server auth"])
        ),
        Err("invalid usage for client certificate: server auth".into())
    );
    assert_eq!(
        validate(KUBE_APISERVER_CLIENT, &any, &usages(&["digital signature"])),
        Err("missing required usage for client certificate: client auth".into())
    );
}

#[test]
fn kubelet_client_subject_and_usages() {
    let good = node_request();
    let rsa = usages(&["digital signature", "key encipherment", "client auth"]);
    let ecdsa = usages(&["client auth", "digital signature"]);
    assert_eq!(validate(KUBE_APISERVER_CLIENT_KUBELET, &good, &rsa), Ok(()));
    assert_eq!(
        validate(KUBE_APISERVER_CLIENT_KUBELET, &good, &ecdsa),
        Ok(())
    );
    let bad = |request: Request, usages: &[String]| {
        validate(KUBE_APISERVER_CLIENT_KUBELET, &request, usages).expect_err("refused")
    };
    assert_eq!(
        bad(node_request(), &usages(&["client auth"])),
        "usages did not match [client auth digital signature key encipherment]"
    );
    assert_eq!(
        bad(
            node_request(),
            &usages(&["digital signature", "client auth", "server auth"])
        ),
        "usages did not match [client auth digital signature key encipherment]"
    );
    let mut other_org = node_request();
    other_org.organizations = vec!["system:nodes".into(), "system:masters".into()];
    assert_eq!(
        bad(other_org, &rsa),
        "subject organization is not system:nodes"
    );
    let mut not_a_node = node_request();
    not_a_node.common_name = "alice".into();
    assert_eq!(
        bad(not_a_node, &rsa),
        "subject common name does not begin with system:node:"
    );
    let mut with_dns = node_request();
    with_dns.dns_names = vec!["n1".into()];
    assert_eq!(bad(with_dns, &rsa), "DNS subjectAltNames are not allowed");
    let mut with_ip = node_request();
    with_ip.ip_addresses = vec!["10.0.0.1".parse().expect("ip")];
    assert_eq!(bad(with_ip, &rsa), "IP subjectAltNames are not allowed");
}

#[test]
fn kubelet_serving_needs_a_san() {
    let serving = usages(&["digital signature", "key encipherment", "server auth"]);
    assert_eq!(
        validate(KUBELET_SERVING, &node_request(), &serving),
        Err("DNS or IP subjectAltName is required".into())
    );
    let mut with_dns = node_request();
    with_dns.dns_names = vec!["n1".into()];
    assert_eq!(validate(KUBELET_SERVING, &with_dns, &serving), Ok(()));
}

#[test]
fn durations_are_clamped_as_upstream() {
    let max = DEFAULT_DURATION;
    assert_eq!(duration(None, max), max);
    assert_eq!(duration(Some(600), max), Duration::from_secs(600));
    assert_eq!(duration(Some(3600), max), Duration::from_secs(3600));
    assert_eq!(
        duration(Some(1), max),
        Duration::from_secs(600),
        "at least 10 minutes"
    );
    assert_eq!(duration(Some(i32::MAX), max), max, "at most the max");
    let short_max = Duration::from_secs(3600);
    assert_eq!(duration(Some(7200), short_max), short_max);
}

#[test]
fn validity_is_backdated_and_bounded_by_the_ca() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let ca_end = now + Duration::from_secs(10 * 365 * 86400);
    let minute = Duration::from_secs(60);
    let (start, end) = validity(now, Duration::from_secs(3600), ca_end).expect("valid");
    assert_eq!(start, now - 5 * minute);
    assert_eq!(end, now + Duration::from_secs(3600), "short: not backdated");
    let (_, end) = validity(now, DEFAULT_DURATION, ca_end).expect("valid");
    assert_eq!(end, now + DEFAULT_DURATION - 5 * minute);
    let (_, end) = validity(now, DEFAULT_DURATION, now + minute).expect("valid");
    assert_eq!(end, now + minute, "never past the CA");
    assert!(
        validity(now, DEFAULT_DURATION, now).is_err(),
        "an expired CA"
    );
}

#[test]
fn unknown_usages_are_refused() {
    let (key, extended) =
        key_usages(&usages(&["digital signature", "signing", "client auth"])).expect("known");
    assert_eq!(key, [KeyUsagePurpose::DigitalSignature]);
    assert_eq!(extended, [ExtendedKeyUsagePurpose::ClientAuth]);
    assert_eq!(
        key_usages(&usages(&["flying"])),
        Err("unrecognized usage values: [\"flying\"]".into())
    );
}

#[test]
fn requests_are_read_with_their_subject_and_names() {
    let pem = request_pem(
        "system:node:n1",
        &["system:nodes"],
        vec![
            SanType::DnsName("n1.example".try_into().expect("dns")),
            SanType::IpAddress("10.1.2.3".parse().expect("ip")),
        ],
    );
    let der = rudder_api::certificates::request_der(pem.as_bytes()).expect("der");
    let request = Request::parse(&der).expect("parse");
    assert_eq!(request.common_name, "system:node:n1");
    assert_eq!(request.organizations, ["system:nodes"]);
    assert_eq!(request.dns_names, ["n1.example"]);
    assert_eq!(
        request.ip_addresses,
        ["10.1.2.3".parse::<std::net::IpAddr>().expect("ip")]
    );
    assert!(!request.repeated_attributes);
}

#[test]
fn an_approved_request_is_signed_with_its_subject_usages_and_expiry() {
    let ca = ca();
    let signer = Signer::new(&ca, DEFAULT_DURATION).expect("signer");
    let pem = request_pem("system:node:n1", &["system:nodes"], vec![]);
    let mut request = approved(csr(
        KUBE_APISERVER_CLIENT_KUBELET,
        &pem,
        &["digital signature", "client auth"],
    ));
    request.spec.expiration_seconds = Some(3600);
    let now = SystemTime::now();
    let Outcome::Status(signed) = signer.handle(&request, now).expect("handled") else {
        panic!("not signed");
    };
    let certificate = signed
        .status
        .and_then(|s| s.certificate)
        .expect("a certificate");
    let text = String::from_utf8(certificate.0).expect("utf-8");
    let (_, pem) = x509_parser::pem::parse_x509_pem(text.as_bytes()).expect("pem");
    let cert = pem.parse_x509().expect("x509");
    assert_eq!(
        cert.subject()
            .iter_common_name()
            .next()
            .and_then(|c| c.as_str().ok()),
        Some("system:node:n1")
    );
    assert_eq!(cert.issuer().to_string(), "CN=test-ca");
    let life = cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
    assert_eq!(life, 3600 + 300, "an hour, from five minutes ago");
    let eku = cert
        .extended_key_usage()
        .expect("eku")
        .expect("present")
        .value;
    assert!(eku.client_auth && !eku.server_auth);
    let ku = cert.key_usage().expect("ku").expect("present").value;
    assert!(ku.digital_signature() && !ku.key_encipherment());
    assert!(!cert.is_ca());
    // Its signature is the CA's.
    let (_, ca_pem) = x509_parser::pem::parse_x509_pem(ca.cert_pem.as_bytes()).expect("pem");
    let ca_cert = ca_pem.parse_x509().expect("ca");
    cert.verify_signature(Some(ca_cert.public_key()))
        .expect("signed by the CA");
    let _ = x509_parser::certificate::X509Certificate::from_der(&pem.contents).expect("der");
}

#[test]
fn an_invalid_request_is_marked_failed() {
    let signer = Signer::new(&ca(), DEFAULT_DURATION).expect("signer");
    let pem = request_pem("alice", &[], vec![]);
    let request = approved(csr(KUBE_APISERVER_CLIENT_KUBELET, &pem, &["client auth"]));
    let Outcome::Status(failed) = signer.handle(&request, SystemTime::now()).expect("handled")
    else {
        panic!("not failed");
    };
    let status = failed.status.expect("status");
    assert!(status.certificate.is_none());
    let failure = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Failed")
        .expect("Failed");
    assert_eq!(failure.status, "True");
    assert_eq!(failure.reason.as_deref(), Some("SignerValidationFailure"));
    assert_eq!(
        failure.message.as_deref(),
        Some("subject organization is not system:nodes")
    );
    // The same key usages for a user's client certificate are fine.
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, "bob");
    let key = KeyPair::generate().expect("key");
    let pem = params
        .serialize_request(&key)
        .expect("csr")
        .pem()
        .expect("pem");
    let fine = approved(csr(KUBE_APISERVER_CLIENT, &pem, &["client auth"]));
    assert!(matches!(
        signer.handle(&fine, SystemTime::now()).expect("handled"),
        Outcome::Status(s) if s.status.as_ref().and_then(|s| s.certificate.as_ref()).is_some()
    ));
}
