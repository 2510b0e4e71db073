use std::time::SystemTime;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec, CertificateSigningRequestStatus,
};
use rcgen::{CertificateParams, DnType, KeyPair};

use super::*;
use crate::certificates::condition;

fn node_client(cn: &str, requester: &str, groups: &[&str]) -> CertificateSigningRequest {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, cn);
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:nodes");
    let pem = params
        .serialize_request(&key)
        .expect("csr")
        .pem()
        .expect("pem");
    CertificateSigningRequest {
        metadata: kube::api::ObjectMeta {
            name: Some("node-csr".into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.into_bytes()),
            signer_name: KUBE_APISERVER_CLIENT_KUBELET.into(),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            username: Some(requester.into()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            ..Default::default()
        },
        status: None,
    }
}

fn approval(csr: &CertificateSigningRequest) -> Option<String> {
    match handle(csr, SystemTime::now()).expect("handled") {
        Outcome::Approve(c) => {
            assert_eq!((c.type_.as_str(), c.status.as_str()), ("Approved", "True"));
            assert_eq!(c.reason.as_deref(), Some(REASON));
            c.message
        }
        Outcome::Nothing => None,
        Outcome::Status(_) => panic!("the approver writes no status"),
    }
}

#[test]
fn a_node_renewing_its_own_certificate_is_approved() {
    let csr = node_client(
        "system:node:n1",
        "system:node:n1",
        &["system:nodes", "system:authenticated"],
    );
    assert_eq!(
        approval(&csr).as_deref(),
        Some("Auto approving self kubelet client certificate after SubjectAccessReview.")
    );
}

#[test]
fn a_node_asking_for_another_nodes_certificate_is_not() {
    let csr = node_client("system:node:n2", "system:node:n1", &["system:nodes"]);
    assert_eq!(approval(&csr), None);
}

#[test]
fn a_bootstrapper_and_an_admin_are_approved() {
    let bootstrap = node_client(
        "system:node:n1",
        "system:bootstrap:abcdef",
        &[
            "system:bootstrappers",
            "system:bootstrappers:kubeadm:default-node-token",
        ],
    );
    assert_eq!(
        approval(&bootstrap).as_deref(),
        Some("Auto approving kubelet client certificate after SubjectAccessReview.")
    );
    let admin = node_client("system:node:n1", "admin", &["system:masters"]);
    assert!(approval(&admin).is_some());
}

#[test]
fn anyone_else_and_other_requests_are_left_alone() {
    let someone = node_client("system:node:n1", "alice", &["system:authenticated"]);
    assert_eq!(approval(&someone), None);
    let mut client = node_client("system:node:n1", "system:node:n1", &["system:nodes"]);
    client.spec.signer_name = "kubernetes.io/kube-apiserver-client".into();
    assert_eq!(approval(&client), None, "not a node client signer");
    let mut serving = node_client("system:node:n1", "system:node:n1", &["system:nodes"]);
    serving.spec.usages = Some(vec!["digital signature".into(), "server auth".into()]);
    assert_eq!(approval(&serving), None, "not client usages");
    let mut denied = node_client("system:node:n1", "system:node:n1", &["system:nodes"]);
    denied.status = Some(CertificateSigningRequestStatus {
        conditions: Some(vec![condition(
            "Denied",
            "KubectlDeny",
            "",
            SystemTime::now(),
        )]),
        ..Default::default()
    });
    assert_eq!(approval(&denied), None, "already decided");
}

#[test]
fn recognition_follows_upstreams_order() {
    let csr = node_client("system:node:n1", "system:node:n1", &[]);
    let der = rudder_api::certificates::request_der(&csr.spec.request.0).expect("der");
    let request = Request::parse(&der).expect("parse");
    assert_eq!(
        recognize(&csr, &request),
        [Recognized::SelfNodeClient, Recognized::NodeClient]
    );
    assert_eq!(decide(&csr, &request), None, "no group grants it");
}
