//! `tessera keys generate-client-key`: a new Ed25519 key for a `private_key_jwt` client
//! (RFC 7523 section 2.2). The private key goes to a file of the client's, mode 0600, and
//! never to the server; the public key is printed as the JWK Set (RFC 7517 section 5) to
//! register with `tessera client create --auth-method private_key_jwt --jwks-file`.
//!
//! A local command: it opens no database and calls no server.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use aws_lc_rs::signature::Ed25519KeyPair;
use serde_json::{json, Value};
use tessera_client::ClientKey;

#[derive(Debug, clap::Args)]
pub(crate) struct GenerateClientKeyArgs {
    /// Where to write the private key: unencrypted PKCS #8 PEM, mode 0600. An existing file
    /// is never overwritten.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// The key's `kid` in the JWK Set. Default: its RFC 7638 thumbprint.
    #[arg(long)]
    kid: Option<String>,
}

/// Writes the key and prints its public JWK Set.
pub(crate) fn generate(args: GenerateClientKeyArgs) -> Result<()> {
    let pair = Ed25519KeyPair::generate().map_err(|_| anyhow!("no random source"))?;
    // PKCS #8 v1 (RFC 5208): the form every library reads; v2 adds only the public key.
    let pkcs8 = pair
        .to_pkcs8v1()
        .map_err(|_| anyhow!("cannot encode the key"))?;
    let key = ClientKey::from_pkcs8(pkcs8.as_ref())?;
    write_new(&args.out, pem("PRIVATE KEY", pkcs8.as_ref()).as_bytes())
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    let kid = args.kid.unwrap_or_else(|| key.thumbprint().to_owned());
    let text = serde_json::to_string_pretty(&jwks(&key, &kid))? + "\n";
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(())
}

/// The JWK Set of `key`'s public half under `kid`, for signatures with `EdDSA` only.
fn jwks(key: &ClientKey, kid: &str) -> Value {
    let mut jwk = key.public_jwk().clone();
    jwk["kid"] = json!(kid);
    jwk["alg"] = json!(key.algorithm().as_str());
    jwk["use"] = json!("sig");
    json!({ "keys": [jwk] })
}

/// PEM (RFC 7468): base64 in lines of 64 between the `label`'s boundaries.
fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Creates `path` with `contents`, readable by its owner only; fails if it exists (it may
/// be another client's key).
pub(crate) fn write_new(path: &Path, contents: &[u8]) -> Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => anyhow!("it exists; a key is never overwritten"),
        _ => e.into(),
    })?;
    file.write_all(contents)?;
    file.sync_all()?;
    Ok(())
}

/// Reads a client's private key: PKCS #8, PEM or DER, Ed25519, P-256 or RSA.
pub(crate) fn read(path: &Path) -> Result<ClientKey> {
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read the key {}", path.display()))?;
    let key = match std::str::from_utf8(&bytes) {
        Ok(text) if text.contains("-----BEGIN") => {
            let key = ClientKey::from_pkcs8_pem(text);
            if key.is_err() && !text.contains("-----BEGIN PRIVATE KEY-----") {
                return Err(anyhow!(
                    "{} is not an unencrypted PKCS #8 key (-----BEGIN PRIVATE KEY-----); \
                     convert it with `openssl pkcs8 -topk8 -nocrypt -in {0} -out key.pem`",
                    path.display()
                ));
            }
            key
        }
        _ => ClientKey::from_pkcs8(&bytes),
    };
    key.with_context(|| format!("cannot use the key {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_key_reads_back_as_the_same_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.pem");
        let pair = Ed25519KeyPair::generate().unwrap();
        let pkcs8 = pair.to_pkcs8v1().unwrap();
        write_new(&path, pem("PRIVATE KEY", pkcs8.as_ref()).as_bytes()).unwrap();
        let key = read(&path).unwrap();
        assert_eq!(
            key.thumbprint(),
            ClientKey::from_pkcs8(pkcs8.as_ref()).unwrap().thumbprint()
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.lines().all(|l| l.len() <= 64), "{text}");
        // DER reads too.
        let der = dir.path().join("client.der");
        write_new(&der, pkcs8.as_ref()).unwrap();
        assert_eq!(read(&der).unwrap().thumbprint(), key.thumbprint());
        // Never over an existing file.
        let again = write_new(&path, b"x").unwrap_err();
        assert!(again.to_string().contains("never overwritten"), "{again}");
        // A SEC1 or PKCS #1 PEM is named, with the way to convert it.
        let sec1 = dir.path().join("ec.pem");
        std::fs::write(
            &sec1,
            "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n",
        )
        .unwrap();
        let refused = read(&sec1).unwrap_err();
        assert!(
            format!("{refused:#}").contains("openssl pkcs8 -topk8"),
            "{refused:#}"
        );
    }
}
