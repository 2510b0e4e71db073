//! CertificateSigningRequests as every installed kubectl drives them
//! against `rudder server`: a client certificate asked for, `kubectl
//! certificate approve`d, issued by the signer from the cluster CA (right
//! subject, usages and expiry), and then good for logging in; another
//! `kubectl certificate deny`d and never issued.

mod common;

use std::time::{Duration, Instant};

use base64::Engine;
use common::{Kubectl, each_version};

/// A new key and a request for `cn` in `org`: (request PEM, key PEM).
fn request(cn: &str, org: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, org);
    let csr = params.serialize_request(&key).expect("csr");
    (csr.pem().expect("pem"), key.serialize_pem())
}

fn manifest(name: &str, pem: &str) -> String {
    let request = base64::engine::general_purpose::STANDARD.encode(pem);
    format!(
        "apiVersion: certificates.k8s.io/v1\n\
         kind: CertificateSigningRequest\n\
         metadata:\n  name: {name}\n\
         spec:\n  request: {request}\n  signerName: kubernetes.io/kube-apiserver-client\n  \
         expirationSeconds: 3600\n  usages: [client auth]\n"
    )
}

/// The issued certificate (PEM) of `name`, once there is one (30 s).
fn issued(k: &Kubectl<'_>, name: &str) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out) = k.run(
            &["get", "csr", name, "-o", "jsonpath={.status.certificate}"],
            None,
        );
        if ok && !out.trim().is_empty() {
            let pem = base64::engine::general_purpose::STANDARD
                .decode(out.trim())
                .ok()?;
            return String::from_utf8(pem).ok();
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What is wrong with `pem` as the certificate issued for `cn`/`org` by
/// the CA `ca_pem`, if anything.
fn check_certificate(pem: &str, ca_pem: &str, cn: &str, org: &str) -> Option<String> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = block.parse_x509().ok()?;
    let (_, ca_block) = x509_parser::pem::parse_x509_pem(ca_pem.as_bytes()).ok()?;
    let ca = ca_block.parse_x509().ok()?;
    if let Err(e) = cert.verify_signature(Some(ca.public_key())) {
        return Some(format!("not signed by the cluster CA: {e}"));
    }
    let subject = cert.subject().to_string();
    if subject != format!("CN={cn}, O={org}") {
        return Some(format!("subject {subject}"));
    }
    let life = cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
    if life != 3600 + 300 {
        return Some(format!(
            "valid for {life} s, not an hour backdated five minutes"
        ));
    }
    let eku = cert.extended_key_usage().ok().flatten().map(|e| e.value);
    if !eku.is_some_and(|e| e.client_auth && !e.server_auth) {
        return Some("not a client certificate".into());
    }
    if cert.is_ca() {
        return Some("a CA certificate".into());
    }
    None
}

/// The cluster CA (PEM) a kubeconfig trusts.
fn cluster_ca(k: &Kubectl<'_>) -> String {
    let config = std::fs::read_to_string(k.kubeconfig.as_path()).expect("the kubeconfig");
    let data = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data:"))
        .expect("certificate-authority-data");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .expect("base64");
    String::from_utf8(pem).expect("PEM")
}

/// `k`'s kubeconfig with `certificate` and `key` as its user's.
fn as_user(k: &Kubectl<'_>, certificate: &str, key: &str) -> String {
    let config = std::fs::read_to_string(k.kubeconfig.as_path()).expect("the kubeconfig");
    let encode = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    config
        .lines()
        .map(|line| {
            let indent = &line[..line.len() - line.trim_start().len()];
            match line.trim_start().split_once(':') {
                Some(("client-certificate-data", _)) => {
                    format!("{indent}client-certificate-data: {}", encode(certificate))
                }
                Some(("client-key-data", _)) => format!("{indent}client-key-data: {}", encode(key)),
                _ => line.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn certificates_are_approved_issued_and_denied() {
    each_version(
        |tag| format!("csr-{tag}"),
        |k, tag, failures| {
            let ca = cluster_ca(k);
            let (name, cn) = (format!("client-{tag}"), format!("user-{tag}"));
            let (pem, key) = request(&cn, "system:masters");
            k.expect(
                failures,
                "create the request",
                &["create", "-f", "-"],
                Some(&manifest(&name, &pem)),
                "created",
            );
            k.expect(failures, "pending", &["get", "csr", &name], None, "Pending");
            k.expect(
                failures,
                "approve",
                &["certificate", "approve", &name],
                None,
                &format!("certificatesigningrequest.certificates.k8s.io/{name} approved"),
            );
            match issued(k, &name) {
                None => failures.push(format!("{name} was never issued")),
                Some(certificate) => {
                    if let Some(problem) =
                        check_certificate(&certificate, &ca, &cn, "system:masters")
                    {
                        failures.push(format!("{name}: {problem}"));
                    }
                    k.expect(
                        failures,
                        "approved and issued",
                        &["get", "csr", &name],
                        None,
                        "Approved,Issued",
                    );
                    // The certificate logs in.
                    let files = tempfile::tempdir().expect("tempdir");
                    let user = Kubectl {
                        binary: k.binary,
                        kubeconfig: files.path().join("kubeconfig.yaml"),
                        cache: k.cache.clone(),
                        namespace: k.namespace.clone(),
                    };
                    std::fs::write(&user.kubeconfig, as_user(k, &certificate, &key))
                        .expect("write");
                    user.expect(
                        failures,
                        "log in with the issued certificate",
                        &["get", "csr", &name, "-o", "name"],
                        None,
                        &format!("certificatesigningrequest.certificates.k8s.io/{name}"),
                    );
                }
            }

            let denied = format!("denied-{tag}");
            let (pem, _) = request(&format!("nobody-{tag}"), "dev");
            k.expect(
                failures,
                "create another",
                &["create", "-f", "-"],
                Some(&manifest(&denied, &pem)),
                "created",
            );
            k.expect(
                failures,
                "deny",
                &["certificate", "deny", &denied],
                None,
                &format!("certificatesigningrequest.certificates.k8s.io/{denied} denied"),
            );
            k.expect(failures, "denied", &["get", "csr", &denied], None, "Denied");
            std::thread::sleep(Duration::from_millis(300));
            let (_, certificate) = k.run(
                &[
                    "get",
                    "csr",
                    &denied,
                    "-o",
                    "jsonpath={.status.certificate}",
                ],
                None,
            );
            if !certificate.trim().is_empty() {
                failures.push(format!("{denied} was issued"));
            }
        },
    );
}
