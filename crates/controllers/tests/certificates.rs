//! CertificateSigningRequests end to end on the in-process control plane:
//! the API server's rules for each way of writing one, the approver
//! approving node client requests from the node itself, and the signer
//! issuing approved ones from the cluster CA (or failing them).

mod support;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rudder_harness::Identity;
use serde_json::{Value, json};
use support::{cluster, signing_ca, until};

/// A request (PEM) for `cn` in `org`.
fn request_pem(cn: &str, org: Option<&str>) -> String {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    if let Some(org) = org {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, org);
    }
    params
        .serialize_request(&key)
        .expect("csr")
        .pem()
        .expect("pem")
}

async fn create(
    client: &Client,
    name: &str,
    signer: &str,
    pem: &str,
    usages: &[&str],
    extra: Value,
) -> Result<CertificateSigningRequest, kube::Error> {
    let request =
        serde_json::to_value(k8s_openapi::ByteString(pem.as_bytes().to_vec())).expect("base64");
    let mut object = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": request,
            "signerName": signer,
            "usages": usages,
        },
    });
    if let (Some(spec), Some(extra)) = (object["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    let csr: CertificateSigningRequest = serde_json::from_value(object).expect("csr");
    Api::all(client.clone())
        .create(&PostParams::default(), &csr)
        .await
}

fn conditions(csr: &CertificateSigningRequest) -> Vec<(String, String, String)> {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            (
                c.type_,
                c.reason.unwrap_or_default(),
                c.message.unwrap_or_default(),
            )
        })
        .collect()
}

fn certificate(csr: &CertificateSigningRequest) -> Option<String> {
    let bytes = csr.status.as_ref()?.certificate.as_ref()?.0.clone();
    String::from_utf8(bytes).ok()
}

/// Approves `name` through `approval`, as `kubectl certificate approve`.
async fn approve(api: &Api<CertificateSigningRequest>, name: &str) {
    let patch = json!({"status": {"conditions": [{
        "type": "Approved", "status": "True", "reason": "KubectlApprove",
        "message": "This CSR was approved by kubectl certificate approve.",
    }]}});
    api.patch_approval(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("approve");
}

async fn issued(api: &Api<CertificateSigningRequest>, name: &str) -> String {
    until(&format!("{name} is issued"), || async {
        certificate(&api.get(name).await.expect("get")).is_some()
    })
    .await;
    certificate(&api.get(name).await.expect("get")).expect("a certificate")
}

/// What a certificate says: subject, lifetime in seconds, client auth.
fn read_certificate(pem: &str) -> (String, i64, bool) {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).expect("pem");
    let cert = block.parse_x509().expect("x509");
    let (_, ca) = x509_parser::pem::parse_x509_pem(signing_ca().cert_pem.as_bytes()).expect("pem");
    let ca = ca.parse_x509().expect("ca");
    cert.verify_signature(Some(ca.public_key()))
        .expect("issued by the cluster CA");
    let life = cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
    let client_auth = cert
        .extended_key_usage()
        .ok()
        .flatten()
        .is_some_and(|e| e.value.client_auth);
    (cert.subject().to_string(), life, client_auth)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_client_request_is_issued_by_the_cluster_ca() {
    let c = cluster().await;
    let api: Api<CertificateSigningRequest> = Api::all(c.admin.clone());
    let pem = request_pem("alice", Some("dev"));
    let created = create(
        &c.admin,
        "alice",
        "kubernetes.io/kube-apiserver-client",
        &pem,
        &["client auth"],
        json!({"expirationSeconds": 3600, "username": "mallory"}),
    )
    .await
    .expect("create");
    assert_eq!(
        created.spec.username.as_deref(),
        Some("system:admin"),
        "who asked"
    );
    assert!(
        created
            .spec
            .groups
            .unwrap_or_default()
            .contains(&"system:masters".to_string())
    );
    // A request made after it and approved: the signer, one worker taking
    // requests in the order they came, has dealt with alice's once it has
    // issued this one.
    create(
        &c.admin,
        "probe",
        "kubernetes.io/kube-apiserver-client",
        &request_pem("probe", None),
        &["client auth"],
        json!({}),
    )
    .await
    .expect("create");
    approve(&api, "probe").await;
    issued(&api, "probe").await;
    assert_eq!(
        certificate(&api.get("alice").await.expect("get")),
        None,
        "pending"
    );

    approve(&api, "alice").await;
    let pem = issued(&api, "alice").await;
    let (subject, life, client_auth) = read_certificate(&pem);
    assert_eq!(subject, "CN=alice, O=dev");
    assert_eq!(life, 3600 + 300, "an hour, backdated five minutes");
    assert!(client_auth);
    let approved = api.get("alice").await.expect("get");
    assert_eq!(
        conditions(&approved)[0].0,
        "Approved",
        "the signer keeps the approval"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_gets_its_own_client_certificate_approved_and_issued() {
    let c = cluster().await;
    let node = c.plane.client(&Identity::node("n1"));
    let api: Api<CertificateSigningRequest> = Api::all(c.admin.clone());
    let usages = ["digital signature", "key encipherment", "client auth"];
    let signer = "kubernetes.io/kube-apiserver-client-kubelet";
    let own = request_pem("system:node:n1", Some("system:nodes"));
    create(&node, "node-csr-Own_1", signer, &own, &usages, json!({}))
        .await
        .expect("create");
    let other = request_pem("system:node:n2", Some("system:nodes"));
    create(&node, "node-csr-other", signer, &other, &usages, json!({}))
        .await
        .expect("create");

    let pem = issued(&api, "node-csr-Own_1").await;
    let (subject, life, client_auth) = read_certificate(&pem);
    assert_eq!(subject, "CN=system:node:n1, O=system:nodes");
    assert_eq!(life, 365 * 86400, "the signing duration");
    assert!(client_auth);
    assert_eq!(
        conditions(&api.get("node-csr-Own_1").await.expect("get"))[0],
        (
            "Approved".to_string(),
            "AutoApproved".to_string(),
            "Auto approving self kubelet client certificate after SubjectAccessReview.".to_string()
        )
    );
    // Another node's certificate is not the node's to ask for.
    let other = api.get("node-csr-other").await.expect("get");
    assert!(conditions(&other).is_empty(), "{:?}", conditions(&other));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrapper_gets_a_node_its_first_client_certificate() {
    let c = cluster().await;
    let bootstrapper = c.plane.client(&Identity {
        user: "system:bootstrap:abcdef".into(),
        groups: vec![
            "system:bootstrappers".into(),
            "system:bootstrappers:kubeadm:default-node-token".into(),
        ],
        agent: "kubelet".into(),
    });
    let pem = request_pem("system:node:n3", Some("system:nodes"));
    create(
        &bootstrapper,
        "node-csr-first",
        "kubernetes.io/kube-apiserver-client-kubelet",
        &pem,
        &["digital signature", "client auth"],
        json!({}),
    )
    .await
    .expect("a bootstrapper may ask");
    let mine: Api<CertificateSigningRequest> = Api::all(bootstrapper);
    let pem = issued(&mine, "node-csr-first").await;
    assert_eq!(
        read_certificate(&pem).0,
        "CN=system:node:n3, O=system:nodes"
    );
    let approved = mine.get("node-csr-first").await.expect("get");
    assert_eq!(
        conditions(&approved)[0].2,
        "Auto approving kubelet client certificate after SubjectAccessReview."
    );
    assert_eq!(
        approved.spec.username.as_deref(),
        Some("system:bootstrap:abcdef")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_its_signer_refuses_is_marked_failed() {
    let c = cluster().await;
    let api: Api<CertificateSigningRequest> = Api::all(c.admin.clone());
    let pem = request_pem("alice", None);
    create(
        &c.admin,
        "not-a-node",
        "kubernetes.io/kube-apiserver-client-kubelet",
        &pem,
        &["digital signature", "client auth"],
        json!({}),
    )
    .await
    .expect("create");
    approve(&api, "not-a-node").await;
    until("the request failed", || async {
        conditions(&api.get("not-a-node").await.expect("get"))
            .iter()
            .any(|(t, _, _)| t == "Failed")
    })
    .await;
    let failed = api.get("not-a-node").await.expect("get");
    assert_eq!(
        conditions(&failed)[1],
        (
            "Failed".to_string(),
            "SignerValidationFailure".to_string(),
            "subject organization is not system:nodes".to_string()
        )
    );
    assert_eq!(certificate(&failed), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_way_of_writing_a_request_changes_its_own_part() {
    let c = cluster().await;
    let api: Api<CertificateSigningRequest> = Api::all(c.admin.clone());
    let signer = "example.com/not-signed-here";
    // Validation.
    let refused = create(&c.admin, "bad", signer, "junk", &["client auth"], json!({}))
        .await
        .expect_err("not a request");
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 422 && s.message.contains("PEM block type must be CERTIFICATE REQUEST")),
        "{refused:?}"
    );
    let pem = request_pem("bob", None);
    let refused = create(&c.admin, "bad", "", &pem, &["flying"], json!({}))
        .await
        .expect_err("no signer, unknown usage");
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 422),
        "{refused:?}"
    );
    create(&c.admin, "bob", signer, &pem, &["client auth"], json!({}))
        .await
        .expect("create");

    // The main resource changes neither spec nor status.
    let patch = json!({
        "metadata": {"labels": {"a": "b"}},
        "spec": {"usages": ["server auth"]},
        "status": {"conditions": [{"type": "Approved", "status": "True"}]},
    });
    let patched = api
        .patch("bob", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("patch");
    assert_eq!(patched.spec.usages, Some(vec!["client auth".to_string()]));
    assert!(conditions(&patched).is_empty());
    assert_eq!(patched.metadata.labels.unwrap_or_default()["a"], "b");

    // Status may not approve.
    let status_approval =
        json!({"status": {"conditions": [{"type": "Approved", "status": "True"}]}});
    let refused = api
        .patch_status(
            "bob",
            &PatchParams::default(),
            &Patch::Merge(status_approval),
        )
        .await
        .expect_err("status cannot approve");
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 422 && s.message.contains("updates may not add a condition of type \"Approved\"")),
        "{refused:?}"
    );

    // Approval writes conditions only; the certificate it carries is dropped.
    let approval = json!({"status": {
        "certificate": "Y2VydA==",
        "conditions": [{"type": "Denied", "status": "True", "reason": "KubectlDeny"}],
    }});
    let denied = api
        .patch_approval("bob", &PatchParams::default(), &Patch::Merge(approval))
        .await
        .expect("deny");
    assert_eq!(certificate(&denied), None);
    let condition = denied
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().next())
        .expect("Denied");
    assert!(condition.last_update_time.is_some() && condition.last_transition_time.is_some());
    let both = json!({"status": {"conditions": [
        {"type": "Denied", "status": "True"},
        {"type": "Approved", "status": "True"},
    ]}});
    let refused = api
        .patch_approval("bob", &PatchParams::default(), &Patch::Merge(both))
        .await
        .expect_err("both");
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.message.contains("Approved and Denied conditions are mutually exclusive")),
        "{refused:?}"
    );
    let read = api.get_approval("bob").await.expect("get approval");
    assert_eq!(conditions(&read)[0].0, "Denied");
}
