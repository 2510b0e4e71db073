//! Signed JSON Web Tokens (RFC 7515/7519, compact form) with one ES256
//! key — P-256 ECDSA with SHA-256, which upstream's service account token
//! signer accepts beside RS256 — kept as a PKCS#8 PEM file under the data
//! directory (upstream's `--service-account-signing-key-file`) and made at
//! first start. The key id is upstream's: the unpadded base64url SHA-256 of
//! the public key's PKIX (SubjectPublicKeyInfo) DER, so the JWKS document
//! served at `/openid/v1/jwks` names the key as upstream's would.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair,
    UnparsedPublicKey,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The DER prefix of a P-256 SubjectPublicKeyInfo: the algorithm
/// (id-ecPublicKey, prime256v1) and the BIT STRING header of the 65-byte
/// uncompressed point that follows.
const P256_SPKI_PREFIX: &[u8] = &[
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// A token that is not a well-formed JWT of this key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("not a compact JWT")]
    Malformed,
    #[error("unsupported JWT header: {0}")]
    Header(String),
    #[error("invalid signature")]
    Signature,
    #[error("invalid claims: {0}")]
    Claims(String),
}

/// The signing key.
pub struct SigningKey {
    pair: EcdsaKeyPair,
    key_id: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

/// A failure to make or read the key file.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("read the service account key {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("write the service account key {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("the service account key {0} is not a PKCS#8 P-256 private key")]
    Invalid(String),
}

impl SigningKey {
    /// A new random key (its PKCS#8 DER with it).
    pub fn generate() -> Result<(SigningKey, Vec<u8>), KeyError> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| KeyError::Invalid("(generated)".into()))?;
        let der = pkcs8.as_ref().to_vec();
        let key =
            SigningKey::from_pkcs8(&der).ok_or_else(|| KeyError::Invalid("(generated)".into()))?;
        Ok((key, der))
    }

    /// The key of a PKCS#8 DER document.
    pub fn from_pkcs8(der: &[u8]) -> Option<SigningKey> {
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng).ok()?;
        let key_id = key_id(pair.public_key().as_ref());
        Some(SigningKey { pair, key_id, rng })
    }

    /// The key in `path`, made (mode 0600) if the file does not exist.
    pub fn load_or_create(path: &Path) -> Result<SigningKey, KeyError> {
        let shown = path.display().to_string();
        match std::fs::read(path) {
            Ok(pem) => {
                let der = match rustls_pemfile::private_key(&mut pem.as_slice()) {
                    Ok(Some(rustls::pki_types::PrivateKeyDer::Pkcs8(der))) => {
                        der.secret_pkcs8_der().to_vec()
                    }
                    _ => return Err(KeyError::Invalid(shown)),
                };
                SigningKey::from_pkcs8(&der).ok_or(KeyError::Invalid(shown))
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let (key, der) = SigningKey::generate()?;
                write_private(path, &pem("PRIVATE KEY", &der)).map_err(|source| {
                    KeyError::Write {
                        path: shown,
                        source,
                    }
                })?;
                Ok(key)
            }
            Err(source) => Err(KeyError::Read {
                path: shown,
                source,
            }),
        }
    }

    /// The key id (`kid`).
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The public half, as verifiers take it.
    pub fn verifier(&self) -> Verifier {
        Verifier {
            public: self.pair.public_key().as_ref().to_vec(),
            key_id: self.key_id.clone(),
        }
    }

    /// `claims` signed: `header.payload.signature`.
    pub fn sign<C: Serialize>(&self, claims: &C) -> Result<String, Error> {
        let header = json!({"alg": "ES256", "kid": self.key_id});
        let header = serde_json::to_vec(&header).map_err(|e| Error::Claims(e.to_string()))?;
        let header = URL_SAFE_NO_PAD.encode(header);
        let payload = serde_json::to_vec(claims).map_err(|e| Error::Claims(e.to_string()))?;
        let input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(payload));
        let signature = self
            .pair
            .sign(&self.rng, input.as_bytes())
            .map_err(|_| Error::Signature)?;
        Ok(format!(
            "{input}.{}",
            URL_SAFE_NO_PAD.encode(signature.as_ref())
        ))
    }
}

/// The public key tokens are verified with.
#[derive(Debug, Clone)]
pub struct Verifier {
    /// The uncompressed point (`04 || x || y`).
    public: Vec<u8>,
    key_id: String,
}

impl Verifier {
    /// The claims of `token` if this key signed it. Only the signature and
    /// the form are checked here; what the claims say is the caller's.
    pub fn verify<C: DeserializeOwned>(&self, token: &str) -> Result<C, Error> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Error::Malformed);
        };
        let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|_| Error::Malformed);
        let header: Value =
            serde_json::from_slice(&decode(header)?).map_err(|_| Error::Malformed)?;
        if header.get("alg").and_then(Value::as_str) != Some("ES256") {
            return Err(Error::Header(format!(
                "algorithm {} is not ES256",
                header.get("alg").unwrap_or(&Value::Null)
            )));
        }
        if let Some(kid) = header.get("kid").and_then(Value::as_str)
            && kid != self.key_id
        {
            return Err(Error::Header(format!("unknown key id {kid:?}")));
        }
        let signed = &token[..token.len() - signature.len() - 1];
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &self.public)
            .verify(signed.as_bytes(), &decode(signature)?)
            .map_err(|_| Error::Signature)?;
        serde_json::from_slice(&decode(payload)?).map_err(|e| Error::Claims(e.to_string()))
    }

    /// The key as a JSON Web Key (RFC 7517), for `/openid/v1/jwks`.
    pub fn jwk(&self) -> Value {
        let (x, y) = self.public[1..].split_at(32);
        json!({
            "use": "sig",
            "kty": "EC",
            "kid": self.key_id,
            "crv": "P-256",
            "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(x),
            "y": URL_SAFE_NO_PAD.encode(y),
        })
    }
}

/// Upstream's key id: base64url(SHA-256(PKIX DER of the public key)).
fn key_id(point: &[u8]) -> String {
    let mut spki = P256_SPKI_PREFIX.to_vec();
    spki.extend_from_slice(point);
    URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, &spki))
}

fn pem(label: &str, der: &[u8]) -> String {
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_token_verifies_and_a_tampered_one_does_not() {
        let (key, _) = SigningKey::generate().expect("key");
        let token = key.sign(&json!({"sub": "me", "n": 1})).expect("sign");
        assert_eq!(token.split('.').count(), 3);
        let claims: Value = key.verifier().verify(&token).expect("verify");
        assert_eq!(claims["sub"], "me");
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        parts[1] = URL_SAFE_NO_PAD.encode(br#"{"sub":"admin","n":1}"#);
        assert_eq!(
            key.verifier().verify::<Value>(&parts.join(".")),
            Err(Error::Signature)
        );
        let (other, _) = SigningKey::generate().expect("key");
        assert!(other.verifier().verify::<Value>(&token).is_err());
        assert_eq!(
            key.verifier().verify::<Value>("abc.def"),
            Err(Error::Malformed)
        );
        // "none" is never accepted.
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode(br#"{"sub":"me"}"#)
        );
        assert!(matches!(
            key.verifier().verify::<Value>(&none),
            Err(Error::Header(_))
        ));
    }

    #[test]
    fn the_key_is_kept_and_named_as_upstream_names_it() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("tls/service-account.key");
        let first = SigningKey::load_or_create(&path).expect("create");
        let again = SigningKey::load_or_create(&path).expect("load");
        assert_eq!(first.key_id(), again.key_id());
        assert_eq!(first.key_id().len(), 43, "unpadded base64 of 32 bytes");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let token = first.sign(&json!({"a": 1})).expect("sign");
        again.verifier().verify::<Value>(&token).expect("same key");
        let jwk = first.verifier().jwk();
        assert_eq!(jwk["kid"], first.key_id());
        assert_eq!(jwk["crv"], "P-256");
        // The kid is the hash of the SPKI rcgen (and Go's x509) would write.
        let spki = {
            let mut v = P256_SPKI_PREFIX.to_vec();
            v.extend_from_slice(&first.verifier().public);
            v
        };
        use x509_parser::prelude::FromDer;
        let parsed = x509_parser::x509::SubjectPublicKeyInfo::from_der(&spki);
        assert!(parsed.is_ok(), "a valid SubjectPublicKeyInfo");
        std::fs::write(&path, "not a key").expect("write");
        assert!(SigningKey::load_or_create(&path).is_err());
    }
}
