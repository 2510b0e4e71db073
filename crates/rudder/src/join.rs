//! The server's side of joining (k3s's join token): at every start the
//! server makes sure its join token exists — `DATA_DIR/token` (0600),
//! `K10<sha256 of the CA certificate>::<id>.<secret>` — and that the
//! bootstrap token it carries is a Secret `kube-system/bootstrap-token-<id>`
//! the API server authenticates (`system:bootstrap:<id>`, in
//! `system:bootstrappers` and `system:bootstrappers:rudder:default-node-token`).
//! The token never expires; deleting its Secret revokes it until the next
//! start, which writes it again.

use std::path::{Path, PathBuf};

use anyhow::Context;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rudder_apiserver::authn::bootstrap::{self, Token};
use rudder_kubelet::bootstrap::JoinToken;

/// The group of every node joining with the server's token.
const GROUP: &str = "system:bootstrappers:rudder:default-node-token";

/// Where the server keeps its join token.
pub fn token_path(data_dir: &Path) -> PathBuf {
    data_dir.join("token")
}

/// The server's join token, made if it has none (or one for another CA),
/// and its Secret in the API.
pub async fn ensure(data_dir: &Path, admin: kube::Client) -> anyhow::Result<JoinToken> {
    let ca_path = rudder_apiserver::tls::TlsFiles::new(data_dir).ca_cert();
    let ca = std::fs::read(&ca_path).with_context(|| format!("read {}", ca_path.display()))?;
    let path = token_path(data_dir);
    let kept = std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| JoinToken::parse(&text).ok())
        .filter(|token| token.ca_hash == rudder_kubelet::bootstrap::ca_hash(&ca));
    let join = match kept {
        Some(token) => token,
        None => {
            let token = JoinToken::new(&ca, &Token::generate().to_string());
            rudder_apiserver::tls::write_private(&path, &format!("{token}\n"))?;
            token
        }
    };
    let bootstrap = Token::parse(&join.bootstrap).context("the join token's bootstrap token")?;
    let secret: Secret = serde_json::from_value(bootstrap::secret(
        &bootstrap,
        "the join token of rudder agents (rudder token)",
        &[GROUP],
    ))?;
    let secrets: Api<Secret> = Api::namespaced(admin, bootstrap::NAMESPACE);
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {
            // Written again as the token says (someone may have changed it).
            secrets
                .patch(
                    &bootstrap.secret_name(),
                    &PatchParams::default(),
                    &Patch::Merge(&secret),
                )
                .await
                .context("update the join token's Secret")?;
        }
        Err(error) => return Err(error).context("create the join token's Secret"),
    }
    Ok(join)
}
