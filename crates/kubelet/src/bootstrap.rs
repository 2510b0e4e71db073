//! Joining a cluster (k3s's `agent --server --token`, upstream's kubelet
//! TLS bootstrap): the join token names the cluster CA by its SHA-256 and
//! carries a bootstrap token. The agent fetches the CA from the server's
//! `/cacerts` without trusting it yet, keeps it only if its hash is the
//! token's, then — as `system:bootstrap:<id>` over TLS verified with that
//! CA — asks for a node client certificate (`system:node:<name>`, O
//! `system:nodes`, signer `kubernetes.io/kube-apiserver-client-kubelet`)
//! with a CertificateSigningRequest, which the server's approver and signer
//! grant. The key and certificate go into `kubelet.kubeconfig` under the
//! agent's data directory (0600); an agent started again with a
//! certificate that is still good for the same CA uses it and asks for
//! nothing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::api::{Api, PostParams};

/// The signer of node client certificates.
pub const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// How long the agent waits for its certificate.
const ISSUE_TIMEOUT: Duration = Duration::from_secs(120);
/// A certificate closer than this to its end is asked for again.
const RENEW_BEFORE: Duration = Duration::from_secs(60 * 60);

/// A failed join.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "the join token is not K10<sha256 of the CA>::<id>.<secret> (`rudder token` on the server prints it)"
    )]
    Token,
    #[error("fetch the cluster CA from {server}/cacerts: {source}")]
    FetchCa {
        server: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "the server's CA (sha256 {found}) is not the one the join token names ({wanted}): refusing to trust it"
    )]
    CaMismatch { found: String, wanted: String },
    #[error("connect to {server}: {source}")]
    Connect {
        server: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("make the node key and request: {0}")]
    Key(#[from] rcgen::Error),
    #[error("ask for the node certificate: {0}")]
    Request(#[source] kube::Error),
    #[error("the node certificate request {name} was {outcome}")]
    Refused { name: String, outcome: String },
    #[error("no node certificate was issued for {name} within {ISSUE_TIMEOUT:?}")]
    Timeout { name: String },
    #[error("write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A join token: the CA's hash and the bootstrap token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinToken {
    /// Lower-case hex SHA-256 of the CA certificate file (PEM).
    pub ca_hash: String,
    /// `<id>.<secret>`.
    pub bootstrap: String,
}

impl JoinToken {
    /// k3s's secure form, `K10<ca hash>::<credentials>`, with a bootstrap
    /// token (`<6>.<16>` of `[a-z0-9]`) as credentials.
    pub fn parse(text: &str) -> Result<JoinToken, Error> {
        let rest = text.trim().strip_prefix("K10").ok_or(Error::Token)?;
        let (hash, credentials) = rest.split_once("::").ok_or(Error::Token)?;
        let hex = hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit());
        let (id, secret) = credentials.split_once('.').ok_or(Error::Token)?;
        let part = |p: &str, n: usize| {
            p.len() == n
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        if !(hex && part(id, 6) && part(secret, 16)) {
            return Err(Error::Token);
        }
        Ok(JoinToken {
            ca_hash: hash.to_ascii_lowercase(),
            bootstrap: credentials.to_string(),
        })
    }

    /// The token for a CA (PEM bytes) and a bootstrap token.
    pub fn new(ca_pem: &[u8], bootstrap: &str) -> JoinToken {
        JoinToken {
            ca_hash: ca_hash(ca_pem),
            bootstrap: bootstrap.to_string(),
        }
    }
}

impl std::fmt::Display for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "K10{}::{}", self.ca_hash, self.bootstrap)
    }
}

/// k3s's CA hash: SHA-256 of the CA file's bytes, lower-case hex.
pub fn ca_hash(ca_pem: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, ca_pem)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The cluster CA (PEM) of the kubeconfig kept in `agent_dir`.
pub fn cluster_ca(agent_dir: &Path) -> Option<String> {
    let yaml = std::fs::read_to_string(kubeconfig_path(agent_dir)).ok()?;
    let data = yaml
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data:"))?;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .ok()?;
    String::from_utf8(pem).ok()
}

/// The kubeconfig the agent keeps its identity in.
pub fn kubeconfig_path(agent_dir: &Path) -> PathBuf {
    agent_dir.join("kubelet.kubeconfig")
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn kubeconfig(server: &str, ca_pem: &[u8], user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: rudder\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: node\n  user:\n{user}contexts:\n- name: rudder\n  context:\n    cluster: rudder\n    user: node\ncurrent-context: rudder\n",
        b64(ca_pem)
    )
}

async fn client_from(yaml: &str, server: &str) -> Result<kube::Client, Error> {
    let connect = |e: Box<dyn std::error::Error + Send + Sync>| Error::Connect {
        server: server.to_string(),
        source: e,
    };
    let parsed = kube::config::Kubeconfig::from_yaml(yaml).map_err(|e| connect(e.into()))?;
    let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default())
        .await
        .map_err(|e| connect(e.into()))?;
    kube::Client::try_from(config).map_err(|e| connect(e.into()))
}

/// The client of a kubeconfig written before, if its certificate is good
/// for a while yet and its CA is the token's.
async fn existing(path: &Path, server: &str, token: &JoinToken) -> Option<kube::Client> {
    let yaml = std::fs::read_to_string(path).ok()?;
    let field = |name: &str| {
        yaml.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .map(|v| v.trim().to_string())
    };
    let decode = |v: String| base64::engine::general_purpose::STANDARD.decode(v).ok();
    let ca = decode(field("certificate-authority-data:")?)?;
    if ca_hash(&ca) != token.ca_hash || field("server:")?.as_str() != server {
        return None;
    }
    let cert = decode(field("client-certificate-data:")?)?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&cert).ok()?;
    let parsed = pem.parse_x509().ok()?;
    let left = parsed.validity().time_to_expiration()?;
    if left.whole_seconds() < RENEW_BEFORE.as_secs() as i64 {
        return None;
    }
    client_from(&yaml, server).await.ok()
}

/// A client of `server` as `system:node:<node>`: from the kubeconfig kept
/// in `agent_dir`, or after joining with `token`.
pub async fn node_client(
    server: &str,
    token: &JoinToken,
    node: &str,
    agent_dir: &Path,
) -> Result<kube::Client, Error> {
    let server = server.trim_end_matches('/');
    let path = kubeconfig_path(agent_dir);
    if let Some(client) = existing(&path, server, token).await {
        tracing::info!(kubeconfig = %path.display(), "using the node certificate issued before");
        return Ok(client);
    }
    let ca = fetch_ca(server, token).await?;
    let bootstrap = client_from(
        &kubeconfig(server, &ca, &format!("    token: {}\n", token.bootstrap)),
        server,
    )
    .await?;
    let (certificate, key) = request_certificate(bootstrap, node).await?;
    let yaml = kubeconfig(
        server,
        &ca,
        &format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(certificate.as_bytes()),
            b64(key.as_bytes())
        ),
    );
    write_private(&path, &yaml)?;
    tracing::info!(node, kubeconfig = %path.display(), "joined: node certificate issued");
    client_from(&yaml, server).await
}

/// The server's CA, trusted only when its hash is the token's.
async fn fetch_ca(server: &str, token: &JoinToken) -> Result<Vec<u8>, Error> {
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"
    );
    let insecure = client_from(&yaml, server).await?;
    let request = http::Request::get("/cacerts")
        .body(Vec::new())
        .map_err(|e| Error::Connect {
            server: server.to_string(),
            source: e.into(),
        })?;
    let pem = insecure
        .request_text(request)
        .await
        .map_err(|source| Error::FetchCa {
            server: server.to_string(),
            source,
        })?;
    let found = ca_hash(pem.as_bytes());
    if found != token.ca_hash {
        return Err(Error::CaMismatch {
            found,
            wanted: token.ca_hash.clone(),
        });
    }
    Ok(pem.into_bytes())
}

/// A new key and its CertificateSigningRequest for `node`, approved and
/// signed by the server: (certificate PEM, key PEM).
async fn request_certificate(client: kube::Client, node: &str) -> Result<(String, String), Error> {
    let kind = Kind {
        signer: SIGNER,
        usage: "client auth",
        names: &[],
    };
    request(client, node, &kind).await
}

/// What certificate a node asks for.
struct Kind<'a> {
    signer: &'a str,
    /// `client auth` or `server auth` (with `digital signature`).
    usage: &'a str,
    /// Subject alternative names (DNS names or IP addresses).
    names: &'a [String],
}

/// The signer of node serving certificates.
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// The agent's serving certificate for `names` (its node name and
/// addresses), kept as `kubelet-serving.pem` (certificate and key, 0600)
/// in `agent_dir` and reused while it is good for more than an hour and
/// names the same; otherwise asked for as the node itself
/// (`kubernetes.io/kubelet-serving`, which the server approves for a
/// node's own name): (certificate PEM, key PEM).
pub async fn serving_certificate(
    client: kube::Client,
    node: &str,
    names: &[String],
    agent_dir: &Path,
) -> Result<(String, String), Error> {
    let path = agent_dir.join("kubelet-serving.pem");
    if let Some(kept) = std::fs::read_to_string(&path)
        .ok()
        .and_then(|pem| kept_serving(&pem, names))
    {
        return Ok(kept);
    }
    let kind = Kind {
        signer: SERVING_SIGNER,
        usage: "server auth",
        names,
    };
    let (certificate, key) = request(client, node, &kind).await?;
    write_private(&path, &format!("{certificate}{key}"))?;
    Ok((certificate, key))
}

/// The certificate and key of a kept `kubelet-serving.pem`, if it names
/// exactly `names` and has more than an hour left.
fn kept_serving(pem: &str, names: &[String]) -> Option<(String, String)> {
    let end = "-----END CERTIFICATE-----\n";
    let split = pem.find(end)? + end.len();
    let (certificate, key) = pem.split_at(split);
    let (_, block) = x509_parser::pem::parse_x509_pem(certificate.as_bytes()).ok()?;
    let parsed = block.parse_x509().ok()?;
    if parsed.validity().time_to_expiration()?.whole_seconds() < RENEW_BEFORE.as_secs() as i64 {
        return None;
    }
    let mut found: Vec<String> = parsed
        .subject_alternative_name()
        .ok()??
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            x509_parser::extensions::GeneralName::DNSName(dns) => Some(dns.to_string()),
            x509_parser::extensions::GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => <[u8; 4]>::try_from(*bytes)
                    .ok()
                    .map(|b| std::net::IpAddr::from(b).to_string()),
                16 => <[u8; 16]>::try_from(*bytes)
                    .ok()
                    .map(|b| std::net::IpAddr::from(b).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    let mut wanted = names.to_vec();
    found.sort();
    wanted.sort();
    (found == wanted && key.contains("PRIVATE KEY"))
        .then(|| (certificate.to_string(), key.to_string()))
}

async fn request(
    client: kube::Client,
    node: &str,
    kind: &Kind<'_>,
) -> Result<(String, String), Error> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(kind.names.to_vec())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    let request = params.serialize_request(&key)?;
    let name = format!("node-csr-{}", uuid_like());
    let csr = CertificateSigningRequest {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: k8s_openapi::ByteString(request.pem()?.into_bytes()),
            signer_name: kind.signer.into(),
            usages: Some(vec!["digital signature".into(), kind.usage.into()]),
            ..Default::default()
        },
        status: None,
    };
    let api: Api<CertificateSigningRequest> = Api::all(client);
    api.create(&PostParams::default(), &csr)
        .await
        .map_err(Error::Request)?;
    tracing::info!(csr = %name, node, signer = kind.signer, "asked for a node certificate");
    let deadline = tokio::time::Instant::now() + ISSUE_TIMEOUT;
    loop {
        let current = api.get(&name).await.map_err(Error::Request)?;
        let status = current.status.unwrap_or_default();
        if let Some(denied) = status
            .conditions
            .iter()
            .flatten()
            .find(|c| (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True")
        {
            return Err(Error::Refused {
                name,
                outcome: format!(
                    "{}: {}",
                    denied.type_,
                    denied.message.clone().unwrap_or_default()
                ),
            });
        }
        if let Some(certificate) = status.certificate.filter(|c| !c.0.is_empty()) {
            let pem = String::from_utf8_lossy(&certificate.0).into_owned();
            return Ok((pem, key.serialize_pem()));
        }
        if tokio::time::Instant::now() > deadline {
            return Err(Error::Timeout { name });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// 16 random lower-case hex digits.
fn uuid_like() -> String {
    let mut bytes = [0u8; 8];
    let rng = ring::rand::SystemRandom::new();
    let _ = ring::rand::SecureRandom::fill(&rng, &mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_private(path: &Path, contents: &str) -> Result<(), Error> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let failed = |source| Error::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(failed)?;
    }
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .map_err(failed)?;
    file.write_all(contents.as_bytes()).map_err(failed)?;
    file.sync_all().map_err(failed)?;
    std::fs::rename(&temporary, path).map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_tokens_parse_in_k3s_secure_form() {
        let ca = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let token = JoinToken::new(ca, "abcdef.0123456789abcdef");
        let text = token.to_string();
        assert!(text.starts_with("K10"));
        assert_eq!(text.len(), 3 + 64 + 2 + 23);
        assert_eq!(JoinToken::parse(&text).expect("parse"), token);
        assert_eq!(
            JoinToken::parse(&format!(" {text}\n")).expect("trimmed"),
            token
        );
        let hash = &token.ca_hash;
        for bad in [
            "abcdef.0123456789abcdef".to_string(),
            format!("K10{hash}:abcdef.0123456789abcdef"),
            format!("K10{}::abcdef.0123456789abcdef", &hash[1..]),
            format!("K10{hash}::server:secret"),
            format!("K10{hash}::ABCDEF.0123456789abcdef"),
            format!("K11{hash}::abcdef.0123456789abcdef"),
        ] {
            assert!(JoinToken::parse(&bad).is_err(), "{bad}");
        }
        // The hash is of the file's bytes, as `sha256sum ca.crt` prints it.
        assert_eq!(
            ca_hash(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_kept_serving_certificate_is_reused_only_for_the_same_names() {
        let key = rcgen::KeyPair::generate().expect("key");
        let names = vec!["n1".to_string(), "192.0.2.7".to_string()];
        let params = rcgen::CertificateParams::new(names.clone()).expect("params");
        let cert = params.self_signed(&key).expect("cert");
        let pem = format!("{}{}", cert.pem(), key.serialize_pem());
        let (certificate, kept_key) = kept_serving(&pem, &names).expect("kept");
        assert_eq!(certificate, cert.pem());
        assert_eq!(kept_key, key.serialize_pem());
        let reordered = vec!["192.0.2.7".to_string(), "n1".to_string()];
        assert!(kept_serving(&pem, &reordered).is_some());
        let moved = vec!["n1".to_string(), "192.0.2.8".to_string()];
        assert!(kept_serving(&pem, &moved).is_none(), "a new address");
        assert!(kept_serving("garbage", &names).is_none());
    }

    #[test]
    fn the_kubeconfig_is_private_and_names_the_server() {
        let dir = tempfile::tempdir().expect("dir");
        let path = kubeconfig_path(dir.path());
        let yaml = kubeconfig("https://10.0.0.1:6443", b"CA", "    token: x\n");
        write_private(&path, &yaml).expect("write");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let parsed = kube::config::Kubeconfig::read_from(&path).expect("a valid kubeconfig");
        assert_eq!(
            parsed.clusters[0]
                .cluster
                .as_ref()
                .expect("cluster")
                .server
                .as_deref(),
            Some("https://10.0.0.1:6443")
        );
    }
}
