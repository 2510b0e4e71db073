//! The cluster's certificates, made at first start under `<data-dir>/tls`
//! and reused after: a CA, the API server's serving certificate, and an
//! admin client certificate (`O=system:masters`), plus the admin
//! kubeconfig at `<data-dir>/kubeconfig.yaml`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// PEM files of the cluster's TLS material.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub dir: PathBuf,
}

impl TlsFiles {
    pub fn new(data_dir: &Path) -> Self {
        TlsFiles {
            dir: data_dir.join("tls"),
        }
    }
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    pub fn ca_key(&self) -> PathBuf {
        self.dir.join("ca.key")
    }
    pub fn server_cert(&self) -> PathBuf {
        self.dir.join("server.crt")
    }
    fn server_key(&self) -> PathBuf {
        self.dir.join("server.key")
    }
    /// The key ServiceAccount tokens are signed with (ES256).
    pub fn service_account_key(&self) -> PathBuf {
        self.dir.join("service-account.key")
    }
    pub fn admin_cert(&self) -> PathBuf {
        self.dir.join("admin.crt")
    }
    pub fn admin_key(&self) -> PathBuf {
        self.dir.join("admin.key")
    }
    /// The API server's client certificate for node agents.
    pub fn kubelet_client_cert(&self) -> PathBuf {
        self.dir.join("kubelet-client.crt")
    }
    pub fn kubelet_client_key(&self) -> PathBuf {
        self.dir.join("kubelet-client.key")
    }
}

/// Writes `contents` to `path`, readable by its owner only.
pub fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("write {}", path.display()))?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()?;
    Ok(())
}

/// The names the serving certificate is valid for.
pub fn server_names(extra: &[String]) -> Vec<String> {
    let mut names: Vec<String> = [
        "localhost",
        "127.0.0.1",
        "::1",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "10.43.0.1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Ok(host) = std::fs::read_to_string("/etc/hostname") {
        let host = host.trim();
        if !host.is_empty() {
            names.push(host.to_string());
        }
    }
    for name in extra {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

fn sans(names: &[String]) -> anyhow::Result<Vec<SanType>> {
    names
        .iter()
        .map(|n| match n.parse::<IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => Ok(SanType::DnsName(n.clone().try_into().context("DNS name")?)),
        })
        .collect()
}

/// Makes whatever of the TLS material is missing; keeps what exists.
pub fn ensure(files: &TlsFiles, names: &[String]) -> anyhow::Result<()> {
    std::fs::create_dir_all(&files.dir)
        .with_context(|| format!("create {}", files.dir.display()))?;
    let (ca_params, ca_key) = if files.ca_cert().exists() && files.ca_key().exists() {
        let key = KeyPair::from_pem(&std::fs::read_to_string(files.ca_key())?)
            .context("read the CA key")?;
        (None, key)
    } else {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "rudder-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_after = rcgen::date_time_ymd(2036, 1, 1);
        let cert = params.self_signed(&key)?;
        write_private(&files.ca_key(), &key.serialize_pem())?;
        std::fs::write(files.ca_cert(), cert.pem())?;
        (Some(params), key)
    };
    let issuer = match ca_params {
        Some(params) => Issuer::new(params, &ca_key),
        None => Issuer::from_ca_cert_pem(&std::fs::read_to_string(files.ca_cert())?, &ca_key)
            .context("read the CA certificate")?,
    };
    if !(files.server_cert().exists() && files.server_key().exists()) {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.subject_alt_names = sans(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_after = rcgen::date_time_ymd(2036, 1, 1);
        let cert = params.signed_by(&key, &issuer)?;
        write_private(&files.server_key(), &key.serialize_pem())?;
        std::fs::write(files.server_cert(), cert.pem())?;
    }
    if !(files.admin_cert().exists() && files.admin_key().exists()) {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, "admin");
        params
            .distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.not_after = rcgen::date_time_ymd(2036, 1, 1);
        let cert = params.signed_by(&key, &issuer)?;
        write_private(&files.admin_key(), &key.serialize_pem())?;
        std::fs::write(files.admin_cert(), cert.pem())?;
    }
    if !(files.kubelet_client_cert().exists() && files.kubelet_client_key().exists()) {
        // Upstream's `apiserver-kubelet-client`: what node agents let in.
        let (cert, key) = issue(
            &issuer,
            "kube-apiserver-kubelet-client",
            "system:masters",
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        write_private(&files.kubelet_client_key(), &key)?;
        std::fs::write(files.kubelet_client_cert(), cert)?;
    }
    Ok(())
}

/// A certificate (PEM) and its new key (PEM) signed by the CA.
fn issue(
    issuer: &Issuer<'_, impl rcgen::SigningKey>,
    common_name: &str,
    organization: &str,
    names: &[String],
    usage: ExtendedKeyUsagePurpose,
) -> anyhow::Result<(String, String)> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.subject_alt_names = sans(names)?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params
        .distinguished_name
        .push(DnType::OrganizationName, organization);
    params.extended_key_usages = vec![usage];
    params.not_after = rcgen::date_time_ymd(2036, 1, 1);
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A serving certificate for the node agent of `node` (PEM certificate
/// and key), signed by the cluster CA as upstream's
/// `kubernetes.io/kubelet-serving` signer would: `system:node:<node>` in
/// `system:nodes`, valid for `names` (the node's name and addresses).
pub fn issue_kubelet_serving(
    files: &TlsFiles,
    node: &str,
    names: &[String],
) -> anyhow::Result<(String, String)> {
    let key =
        KeyPair::from_pem(&std::fs::read_to_string(files.ca_key())?).context("read the CA key")?;
    let issuer = Issuer::from_ca_cert_pem(&std::fs::read_to_string(files.ca_cert())?, &key)
        .context("read the CA certificate")?;
    issue(
        &issuer,
        &format!("system:node:{node}"),
        "system:nodes",
        names,
        ExtendedKeyUsagePurpose::ServerAuth,
    )
}

/// The rustls configuration the API server reaches node agents with: the
/// cluster CA for their serving certificates, its kubelet client
/// certificate for itself; HTTP/1.1 (streams are upgraded over it).
pub fn kubelet_client_config(files: &TlsFiles) -> anyhow::Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs(&files.ca_cert())? {
        roots.add(cert)?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(
            certs(&files.kubelet_client_cert())?,
            key(&files.kubelet_client_key())?,
        )?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<_, _>>()
        .with_context(|| format!("parse {}", path.display()))
}

fn key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    let pem = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    rustls_pemfile::private_key(&mut pem.as_slice())?
        .with_context(|| format!("no key in {}", path.display()))
}

/// The server's rustls configuration: its certificate, client certificates
/// verified against the CA when offered (anonymous otherwise), HTTP/2 and
/// HTTP/1.1.
pub fn server_config(files: &TlsFiles) -> anyhow::Result<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs(&files.ca_cert())? {
        roots.add(cert)?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(&files.server_cert())?, key(&files.server_key())?)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Writes the admin kubeconfig (certificates inline) for `server_url`.
pub fn write_kubeconfig(files: &TlsFiles, path: &Path, server_url: &str) -> anyhow::Result<()> {
    let b64 = |p: PathBuf| -> anyhow::Result<String> {
        Ok(base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(&p).with_context(|| format!("read {}", p.display()))?))
    };
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: rudder\n  cluster:\n    server: {server_url}\n    certificate-authority-data: {}\nusers:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: rudder\n  context:\n    cluster: rudder\n    user: admin\n    namespace: default\ncurrent-context: rudder\n",
        b64(files.ca_cert())?,
        b64(files.admin_cert())?,
        b64(files.admin_key())?,
    );
    write_private(path, &config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn material_is_made_once_and_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = TlsFiles::new(dir.path());
        ensure(&files, &server_names(&[])).expect("make");
        let first = std::fs::read(files.server_cert()).expect("cert");
        ensure(&files, &server_names(&[])).expect("reuse");
        assert_eq!(std::fs::read(files.server_cert()).expect("cert"), first);
        server_config(&files).expect("a valid rustls config");
        let kubeconfig = dir.path().join("kubeconfig.yaml");
        write_kubeconfig(&files, &kubeconfig, "https://127.0.0.1:6443").expect("kubeconfig");
        let text = std::fs::read_to_string(&kubeconfig).expect("read");
        assert!(text.contains("server: https://127.0.0.1:6443"));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&kubeconfig)
                .expect("meta")
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
    }
}
