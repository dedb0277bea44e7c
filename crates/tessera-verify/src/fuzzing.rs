//! Entry points for the fuzz targets in `fuzz/`: the verifier's readers of untrusted
//! documents, without the network. Not part of the API: hidden from the docs, and free to
//! change with the code they reach.

use crate::error::KeySourceError;
use crate::jwks;

/// Reads a JWK Set document as a refresh does, and returns how many keys are usable.
pub fn read_jwks(body: &[u8]) -> Result<usize, KeySourceError> {
    jwks::read_jwks("fuzz://jwks", body).map(|keys| keys.len())
}

/// Reads a metadata document of `issuer` as discovery does, and returns its `jwks_uri`.
pub fn read_metadata(
    body: &[u8],
    issuer: &str,
    allow_insecure_http: bool,
) -> Result<String, KeySourceError> {
    jwks::read_metadata("fuzz://metadata", body, issuer, allow_insecure_http)
}
