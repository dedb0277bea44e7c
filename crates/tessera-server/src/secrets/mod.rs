//! The operator's master key and what derives from it, and generated client credentials.
//!
//! - From the master key (32 bytes), HKDF-SHA-256 (RFC 5869) derives three independent keys:
//!   the pepper that keys the HMAC of client secrets, the key that seals signing keys at rest
//!   (AES-256-GCM), and the key that authenticates DPoP nonces (RFC 9449 section 8), so that
//!   instances sharing the master key accept each other's nonces. That is this module.
//! - Where the master key comes from and how it is kept (`TESSERA_MASTER_KEY`, a file the
//!   operator keeps, or a 0600 file generated beside the embedded database), and the check
//!   that ties a database to its key: [`custody`].
//! - Client ids and secrets, generated: [`credentials`]. Client secrets are 256 random bits
//!   in base64url, so that no client library mis-encodes them (RFC 6749 2.3.1), and are
//!   stored only as HMAC-SHA-256 under the pepper. A generated secret has full entropy, so a
//!   slow password hash would add cost and no safety.

use std::fmt;
use std::path::PathBuf;

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use aws_lc_rs::{hkdf, hmac, rand};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use tessera_proto::ClientSecret;
use thiserror::Error;
use zeroize::Zeroizing;

pub mod credentials;
pub mod custody;

pub use credentials::{is_generated_client_id, new_client_id, new_client_secret, random_token};
pub use custody::{
    key_file_beside, load_master_key, ExistingKeyFile, MasterKeyChoice, MasterKeyError,
    MasterKeyOrigin, MasterKeySource,
};

/// Length of the master key in bytes.
pub const MASTER_KEY_LEN: usize = 32;

/// Why the master key could not be had, or a sealed value not opened.
#[derive(Debug, Error)]
pub enum SecretsError {
    /// The key is not 32 bytes of base64url.
    #[error("master key must be {MASTER_KEY_LEN} bytes in base64url ({0})")]
    BadMasterKey(String),
    /// Reading or writing the key file failed.
    #[error("master key file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The key file is not a regular file, or others than its owner could read it.
    #[error(
        "master key file {path}: {reason}; make it a regular file of the user the server runs \
         as, readable by that user only (chmod 600)"
    )]
    Exposed {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A sealed value did not open: a different master key, or a damaged value.
    #[error("cannot decrypt a signing key: wrong master key or damaged data")]
    Unseal,
}

/// The keys derived from the operator's master key.
pub struct Secrets {
    pepper: hmac::Key,
    sealing: LessSafeKey,
    /// Authenticates DPoP nonces, so that every instance sharing the master key accepts the
    /// nonces of the others (`crate::grant::dpop`).
    nonces: hmac::Key,
    /// Derives the secrets of `serve --demo`'s clients ([`Secrets::demo_secret`]).
    demo: hmac::Key,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secrets([redacted])")
    }
}

impl Secrets {
    /// Derives the keys from an encoded master key.
    pub fn from_encoded(encoded: &str) -> Result<Self, SecretsError> {
        let raw = Zeroizing::new(
            URL_SAFE_NO_PAD
                .decode(encoded.trim_end_matches('='))
                .map_err(|e| SecretsError::BadMasterKey(e.to_string()))?,
        );
        let mut key = Zeroizing::new([0u8; MASTER_KEY_LEN]);
        if raw.len() != MASTER_KEY_LEN {
            return Err(SecretsError::BadMasterKey(format!(
                "got {} bytes",
                raw.len()
            )));
        }
        key.copy_from_slice(&raw);
        Ok(Self::from_bytes(&key))
    }

    /// Derives the keys from raw master key bytes (RFC 5869).
    pub fn from_bytes(master: &[u8; MASTER_KEY_LEN]) -> Self {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"tessera").extract(master);
        let pepper: hmac::Key = prk
            .expand(&[b"client-secret-pepper-v1"], hmac::HMAC_SHA256)
            .expect("HKDF output of one hash length")
            .into();
        let sealing: UnboundKey = prk
            .expand(&[b"signing-key-sealing-v1"], &AES_256_GCM)
            .expect("HKDF output of one key length")
            .into();
        let nonces: hmac::Key = prk
            .expand(&[b"dpop-nonce-v1"], hmac::HMAC_SHA256)
            .expect("HKDF output of one hash length")
            .into();
        let demo: hmac::Key = prk
            .expand(&[b"demo-client-secret-v1"], hmac::HMAC_SHA256)
            .expect("HKDF output of one hash length")
            .into();
        Self {
            pepper,
            sealing: LessSafeKey::new(sealing),
            nonces,
            demo,
        }
    }

    /// The secret of the demo client `id` (`serve --demo`): `tcs_` and 256 bits derived
    /// from the master key and the id, so that every start with the same master key prints
    /// the same secret, and nothing but the master key has to be kept for it. Only the
    /// demo's clients get such a secret; every other one is random
    /// ([`credentials::new_client_secret`]).
    pub fn demo_secret(&self, id: &tessera_proto::ClientId) -> ClientSecret {
        let tag = hmac::sign(&self.demo, id.as_str().as_bytes());
        ClientSecret::new(format!("tcs_{}", URL_SAFE_NO_PAD.encode(tag.as_ref())))
    }

    /// The key DPoP nonces are authenticated with.
    pub(crate) fn nonce_key(&self) -> &hmac::Key {
        &self.nonces
    }

    /// A value that identifies the master key without revealing it: stored in the database
    /// on first use, so that a different key is refused instead of silently sealing keys and
    /// hashing secrets that no server can use.
    pub fn check_value(&self) -> Vec<u8> {
        hmac::sign(&self.pepper, b"tessera master key check v1")
            .as_ref()
            .to_vec()
    }

    /// The keyed hash stored for a client secret.
    pub fn hash_secret(&self, secret: &ClientSecret) -> Vec<u8> {
        hmac::sign(&self.pepper, secret.expose().as_bytes())
            .as_ref()
            .to_vec()
    }

    /// Whether `secret` matches `hash`, compared in constant time.
    pub fn verify_secret(&self, secret: &ClientSecret, hash: &[u8]) -> bool {
        hmac::verify(&self.pepper, secret.expose().as_bytes(), hash).is_ok()
    }

    /// Encrypts `plaintext` bound to `context` (AES-256-GCM, random 96-bit nonce in front).
    pub fn seal(&self, context: &str, plaintext: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::fill(&mut nonce).expect("system random source");
        let mut out = plaintext.to_vec();
        self.sealing
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(context.as_bytes()),
                &mut out,
            )
            .expect("AES-GCM sealing of a small value");
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&out);
        sealed
    }

    /// Decrypts what [`seal`](Self::seal) made with the same `context`.
    pub fn open(&self, context: &str, sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>, SecretsError> {
        if sealed.len() < NONCE_LEN {
            return Err(SecretsError::Unseal);
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SecretsError::Unseal)?;
        let mut buf = Zeroizing::new(body.to_vec());
        let plain_len = self
            .sealing
            .open_in_place(nonce, Aad::from(context.as_bytes()), &mut buf)
            .map_err(|_| SecretsError::Unseal)?
            .len();
        buf.truncate(plain_len);
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn secrets() -> Secrets {
        Secrets::from_bytes(&[7; MASTER_KEY_LEN])
    }

    #[test]
    fn secrets_hash_and_verify() {
        let s = secrets();
        let secret = new_client_secret();
        let hash = s.hash_secret(&secret);
        assert!(s.verify_secret(&secret, &hash));
        assert!(!s.verify_secret(&ClientSecret::new("other"), &hash));
        let other = Secrets::from_bytes(&[8; MASTER_KEY_LEN]);
        assert!(!other.verify_secret(&secret, &hash), "the pepper matters");
    }

    #[test]
    fn sealing_round_trips_and_binds_context() {
        let s = secrets();
        let sealed = s.seal("kid-1", b"private");
        assert_eq!(s.open("kid-1", &sealed).unwrap().as_slice(), b"private");
        assert!(s.open("kid-2", &sealed).is_err());
        assert!(Secrets::from_bytes(&[1; 32])
            .open("kid-1", &sealed)
            .is_err());
        assert!(s.open("kid-1", &sealed[..5]).is_err());
    }

    #[test]
    fn an_opened_key_is_exactly_the_sealed_plaintext() {
        let secrets = secrets();
        let sealed = secrets.seal("kid", b"private key bytes");
        assert_eq!(
            secrets.open("kid", &sealed).unwrap().as_slice(),
            b"private key bytes"
        );
    }
}
