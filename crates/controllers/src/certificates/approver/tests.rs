use std::time::SystemTime;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec, CertificateSigningRequestStatus,
};
use rcgen::{CertificateParams, DnType, KeyPair};

use super::*;
use crate::certificates::condition;

/// A PEM request for `cn` in `system:nodes` with `names` as SANs.
fn request_pem(cn: &str, names: &[&str]) -> String {
    let key = KeyPair::generate().expect("key");
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names).expect("params");
    params.distinguished_name.push(DnType::CommonName, cn);
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:nodes");
    params
        .serialize_request(&key)
        .expect("csr")
        .pem()
        .expect("pem")
}

fn node_client(cn: &str, requester: &str, groups: &[&str]) -> CertificateSigningRequest {
    let pem = request_pem(cn, &[]);
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

/// A serving request for `cn` (with a DNS and an IP name) by `requester`.
fn node_serving(cn: &str, requester: &str, groups: &[&str]) -> CertificateSigningRequest {
    let pem = request_pem(cn, &["n1", "192.0.2.7"]);
    let mut csr = node_client(cn, requester, groups);
    csr.spec.request = ByteString(pem.into_bytes());
    csr.spec.signer_name = KUBELET_SERVING.into();
    csr.spec.usages = Some(vec!["digital signature".into(), "server auth".into()]);
    csr
}

#[test]
fn a_node_asking_for_its_own_serving_certificate_is_approved_another_is_not() {
    let own = node_serving("system:node:n1", "system:node:n1", &["system:nodes"]);
    assert_eq!(
        approval(&own).as_deref(),
        Some("Auto approving self kubelet serving certificate: the requesting node's own name.")
    );
    let other = node_serving("system:node:n2", "system:node:n1", &["system:nodes"]);
    assert_eq!(approval(&other), None, "another node's name");
    let bootstrapper = node_serving(
        "system:node:n1",
        "system:node:n1",
        &["system:bootstrappers"],
    );
    assert_eq!(approval(&bootstrapper), None, "not a node");
}
