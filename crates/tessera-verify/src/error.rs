//! Why a token, a configuration or a key fetch was refused. Nothing here knows HTTP: the
//! mapping to RFC 6750 responses lives in [`crate::rejection`].

pub use tessera_proto::jws::JwsError;
use thiserror::Error;

/// Why an access token was refused.
///
/// At the HTTP edge every variant is `invalid_token` (RFC 6750 section 3.1). The messages are
/// fixed text: they never repeat any part of the token, so they are safe to send back in
/// `error_description` and to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The compact form or the JOSE header failed the shared JWS parser, before any crypto
    /// (RFC 7515 section 7.1, RFC 8725 sections 3.1 and 3.11, RFC 9068 section 4): too
    /// long, encrypted, malformed, a key referenced by URL or embedded, `crit`, an `alg`
    /// outside the allow-list, a `typ` other than `at+jwt`, or a bad `kid`. One variant
    /// wrapping [`JwsError`] rather than a copy of its variants here, so that the parser's
    /// reasons and the verifier's cannot drift apart; the messages are the parser's.
    #[error(transparent)]
    Jws(#[from] JwsError),
    /// No key with this `kid`, even after refreshing the key set when allowed.
    #[error("the token was signed with an unknown key")]
    UnknownKey,
    /// `alg` does not match the key `kid` names (RFC 8725 section 3.1).
    #[error("the token algorithm does not match its key")]
    KeyMismatch,
    /// The signature does not verify.
    #[error("the token signature is invalid")]
    BadSignature,
    /// The claims are not the JSON object of RFC 9068 section 2.2 (a claim missing, of the
    /// wrong type, or repeated).
    #[error("the token claims are malformed")]
    MalformedClaims,
    /// `iss` is not exactly the configured issuer (RFC 9068 section 4).
    #[error("the token was issued by another issuer")]
    WrongIssuer,
    /// `aud` does not contain this API (RFC 9068 section 4).
    #[error("the token is not meant for this API")]
    WrongAudience,
    /// The token is bound to a client certificate (`cnf` `x5t#S256`, RFC 8705 section 3)
    /// and the request came without that certificate.
    #[error("the token is bound to a client certificate this request did not present")]
    CertificateMismatch,
    /// The token is bound to a DPoP key (RFC 9449 section 6) and came with the `Bearer`
    /// scheme: it must come as `DPoP` with a proof (section 7.1).
    #[error("the token is bound to a DPoP key; send it with the DPoP scheme and a proof")]
    DpopBound,
    /// The token came with the `DPoP` scheme but is not bound to a key (section 7.2).
    #[error("the token is not DPoP-bound; send it with the Bearer scheme")]
    NotDpopBound,
    /// `exp` has passed, leeway included (RFC 7519 section 4.1.4).
    #[error("the token has expired")]
    Expired,
    /// `nbf` is still ahead, leeway included (RFC 7519 section 4.1.5).
    #[error("the token is not valid yet")]
    NotYetValid,
}

/// Why a [`VerifierBuilder`](crate::VerifierBuilder) could not build.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The issuer is empty or not an `http(s)://` URL.
    #[error("the issuer must be an http or https URL")]
    Issuer,
    /// The audience is empty.
    #[error("the audience must not be empty")]
    Audience,
    /// No algorithm is allowed.
    #[error("at least one algorithm must be allowed")]
    NoAlgorithms,
    /// The leeway is larger than five minutes (RFC 7519 section 4.1.4 asks for a small one).
    #[error("the leeway must be at most 300 seconds")]
    Leeway,
    /// The configured `jwks_uri` is not an http or https URL.
    #[error("the jwks_uri must be an http or https URL")]
    JwksUri,
    /// The resource URL is not an absolute `http` or `https` URL without query or fragment.
    #[error("the resource URL must be an absolute http or https URL without query or fragment")]
    ResourceUrl,
    /// The issuer (when keys are discovered) or the `jwks_uri` is plain `http://` to a host
    /// that is not loopback, and
    /// [`allow_insecure_http`](crate::VerifierBuilder::allow_insecure_http) was not given:
    /// anyone on the path could substitute the keys.
    #[error(
        "refusing to fetch keys over plain http from {url}: anyone on the path could substitute \
         them; use https, a loopback host, or VerifierBuilder::allow_insecure_http"
    )]
    InsecureHttp {
        /// The URL refused.
        url: String,
    },
    /// The static key set has no usable key.
    #[error("the key set has no usable EdDSA, ES256, RS256 or PS256 signing key")]
    NoUsableKeys,
    /// The HTTP client could not be built.
    #[error("HTTP client: {0}")]
    Http(#[source] reqwest::Error),
    /// The plan limits could not be set up (a Redis URL that cannot be read).
    #[error(transparent)]
    Limits(#[from] crate::limits::LimitsConfigError),
}

/// Why the keys, or the plan limits (`crate::limits`), could not be fetched. The verifier
/// keeps what it had when this happens.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum KeySourceError {
    /// The request failed: connection, timeout or body.
    #[error("fetching {url}: {source}")]
    Http {
        /// The document.
        url: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// The answer was not 200; redirects are not followed.
    #[error("fetching {url}: HTTP status {status}")]
    Status {
        /// The document.
        url: String,
        /// The status received.
        status: u16,
    },
    /// The document is larger than the bound.
    #[error("fetching {url}: the document is larger than {limit} bytes")]
    TooLarge {
        /// The document.
        url: String,
        /// The bound.
        limit: usize,
    },
    /// The document is not the expected JSON.
    #[error("fetching {url}: {source}")]
    Json {
        /// The document.
        url: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The metadata names another issuer (RFC 8414 section 3.3: it must not be used).
    #[error("the metadata document names another issuer")]
    IssuerMismatch,
    /// The metadata's `jwks_uri` is not https (RFC 8414 section 2), and plain http is not
    /// allowed for it: the issuer is https, or its host is not loopback and
    /// [`allow_insecure_http`](crate::VerifierBuilder::allow_insecure_http) was not given.
    #[error("the metadata's jwks_uri must use https")]
    InsecureJwksUri,
    /// The key set has no key this verifier can use; the cached keys are kept.
    #[error("the key set has no usable EdDSA, ES256, RS256 or PS256 signing key")]
    NoUsableKeys,
    /// The plan limits document names another API than this verifier's audience; the last
    /// known limits are kept.
    #[error("fetching {url}: the limits document is for another API")]
    WrongApi {
        /// The document.
        url: String,
    },
}
