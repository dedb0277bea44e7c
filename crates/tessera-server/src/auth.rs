//! Client authentication at the token endpoint (RFC 6749 section 2.3.1).
//!
//! An unknown client, a wrong secret, an expired previous secret, a disabled client and a
//! client using a method it is not registered for all get the same `invalid_client`. An
//! unknown client is checked against a dummy hash so that it takes as long as a wrong secret.

use std::sync::Arc;

use axum::http::{header, HeaderMap};
use tessera_proto::client::BasicError;
use tessera_proto::{BasicCredentials, ClientId, ClientSecret};
use tessera_store::{AuthMethod, Plan, Timestamp};

use rustls::pki_types::UnixTime;
use rustls::server::danger::ClientCertVerifier;

use crate::mtls::{self, PeerCertificate};
use crate::registry::{Clients, Registry};
use crate::secrets::Secrets;

/// The credentials a request presents, and how.
#[derive(Debug)]
pub(crate) struct Presented {
    /// Who the caller claims to be.
    pub client_id: ClientId,
    proof: Proof,
}

/// What proves the caller is the client.
#[derive(Debug)]
enum Proof {
    /// A secret, by Basic or in the body.
    Secret {
        secret: ClientSecret,
        method: AuthMethod,
    },
    /// The client certificate of the TLS connection (RFC 8705 section 2), with `client_id`
    /// in the body.
    Certificate(PeerCertificate),
    /// A JWT signed by the client's key (`private_key_jwt`, RFC 7523 section 2.2), checked
    /// by [`crate::assertion`] before [`authenticate`].
    Assertion(String),
}

impl Presented {
    /// The certificate the client authenticated with, when it did so (RFC 8705): what its
    /// token is bound to.
    pub(crate) fn certificate(&self) -> Option<&PeerCertificate> {
        match &self.proof {
            Proof::Certificate(certificate) => Some(certificate),
            Proof::Secret { .. } | Proof::Assertion(_) => None,
        }
    }

    /// The client assertion, when the client authenticated with one (`private_key_jwt`).
    pub(crate) fn assertion(&self) -> Option<&str> {
        match &self.proof {
            Proof::Assertion(assertion) => Some(assertion),
            _ => None,
        }
    }
}

/// Why a request's credentials could not even be read (RFC 6749 2.3 and 3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CredentialsError {
    /// No credentials at all: the client may be waiting for the challenge.
    Missing,
    /// An `Authorization` scheme other than Basic.
    NotBasic,
    /// Two `Authorization` headers.
    RepeatedHeader,
    /// Both a header and a `client_secret` in the body.
    TwoMethods,
    /// An `Authorization` header that is not visible ASCII.
    MalformedHeader,
    /// Basic credentials that do not decode.
    MalformedBasic,
    /// A `client_id` in the body that differs from the header's.
    ConflictingId,
    /// A `client_assertion_type` other than the JWT bearer type (RFC 7523 section 2.2).
    AssertionType,
    /// A `client_assertion` without `client_id` whose `sub` cannot be read.
    AssertionWithoutClient,
}

/// Why presented credentials were refused. The answer is `invalid_client` for each but the
/// last, with the same words for the first two, so that it tells an attacker nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthFailure {
    /// No such client (checked against a dummy hash all the same).
    Unknown,
    /// The secret is neither the current one nor a previous one within its grace period.
    WrongSecret,
    /// The right secret, presented with a method the client is not registered for.
    WrongMethod(AuthMethod),
    /// The right secret of a disabled client.
    Disabled,
    /// A client assertion that failed (RFC 7523 section 3): said, since the client proved
    /// nothing by it that the answer could help an attacker with.
    Assertion(crate::assertion::AssertionError),
    /// Not a refusal: the request waited without its in-flight slot (on a key fetch, on a
    /// read of the store for an unknown id) and found none free after; answered 503 like
    /// a request over the cap.
    Overloaded,
}

impl From<crate::assertion::AssertionError> for AuthFailure {
    fn from(error: crate::assertion::AssertionError) -> Self {
        match error {
            crate::assertion::AssertionError::Overloaded => Self::Overloaded,
            error => Self::Assertion(error),
        }
    }
}

/// Finds the credentials in the `Authorization` header or the body (`client_id` and
/// `client_secret` form parameters), never both; or, with only a `client_id` in the body,
/// the connection's client certificate (RFC 8705 section 2).
pub(crate) fn presented(
    headers: &HeaderMap,
    body: FromBody<'_>,
    certificate: Option<&PeerCertificate>,
) -> Result<Presented, CredentialsError> {
    let FromBody {
        client_id: body_id,
        client_secret: body_secret,
        assertion,
    } = body;
    let mut authorization = headers.get_all(header::AUTHORIZATION).iter();
    let first = authorization.next();
    if authorization.next().is_some() {
        return Err(CredentialsError::RepeatedHeader);
    }
    // RFC 7521 section 4.2: the assertion is the only credential of the request.
    if let Some(assertion) = assertion {
        if first.is_some() || body_secret.is_some() {
            return Err(CredentialsError::TwoMethods);
        }
        if assertion.kind != Some(crate::assertion::JWT_BEARER) {
            return Err(CredentialsError::AssertionType);
        }
        let client_id = match body_id {
            Some(id) => id.clone(),
            None => crate::assertion::claimed_client(assertion.jwt)
                .and_then(|sub| ClientId::parse(&sub))
                .ok_or(CredentialsError::AssertionWithoutClient)?,
        };
        return Ok(Presented {
            client_id,
            proof: Proof::Assertion(assertion.jwt.to_owned()),
        });
    }
    let Some(value) = first else {
        return match (body_id, body_secret, certificate) {
            (Some(id), Some(secret), _) => Ok(Presented {
                client_id: id.clone(),
                proof: Proof::Secret {
                    secret: secret.clone(),
                    method: AuthMethod::ClientSecretPost,
                },
            }),
            (Some(id), None, Some(certificate)) => Ok(Presented {
                client_id: id.clone(),
                proof: Proof::Certificate(certificate.clone()),
            }),
            _ => Err(CredentialsError::Missing),
        };
    };
    if body_secret.is_some() {
        return Err(CredentialsError::TwoMethods);
    }
    let value = value
        .to_str()
        .map_err(|_| CredentialsError::MalformedHeader)?;
    let basic = BasicCredentials::from_header(value).map_err(|e| match e {
        BasicError::NotBasic => CredentialsError::NotBasic,
        BasicError::Malformed => CredentialsError::MalformedBasic,
    })?;
    // A client_id in the body is tolerated alongside Basic only when it agrees.
    if body_id.is_some_and(|id| *id != basic.client_id) {
        return Err(CredentialsError::ConflictingId);
    }
    Ok(Presented {
        client_id: basic.client_id,
        proof: Proof::Secret {
            secret: basic.client_secret,
            method: AuthMethod::ClientSecretBasic,
        },
    })
}

/// The credentials a request body may carry (RFC 6749 section 2.3.1, RFC 7521 section 4.2).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FromBody<'a> {
    /// `client_id`.
    pub client_id: Option<&'a ClientId>,
    /// `client_secret`.
    pub client_secret: Option<&'a ClientSecret>,
    /// `client_assertion` with its type.
    pub assertion: Option<Assertion<'a>>,
}

/// `client_assertion` and `client_assertion_type` of a request body (RFC 7521 section 4.2).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Assertion<'a> {
    /// `client_assertion_type`, when sent.
    pub kind: Option<&'a str>,
    /// `client_assertion`.
    pub jwt: &'a str,
}

/// A dummy hash to check unknown clients against, so that they cost the same.
const DUMMY_HASH: [u8; 32] = [0; 32];

/// Checks presented credentials against the clients at time `now`, and gives the client's
/// plan from `registry`.
pub(crate) fn authenticate(
    registry: &Registry,
    clients: &Clients,
    secrets: &Secrets,
    presented: &Presented,
    now: Timestamp,
    client_ca: Option<&dyn ClientCertVerifier>,
    federated: bool,
) -> Result<Arc<Plan>, AuthFailure> {
    let checked = clients.with(presented.client_id.as_str(), |client| {
        match &presented.proof {
            Proof::Secret { secret, method } => {
                let current = secrets.verify_secret(secret, client.secret_hash());
                let previous = client.previous_secret().is_some_and(|(hash, until)| {
                    now < until && secrets.verify_secret(secret, hash)
                });
                if !(current || previous) {
                    return Err(AuthFailure::WrongSecret);
                }
                if client.auth_method != *method {
                    return Err(AuthFailure::WrongMethod(client.auth_method));
                }
            }
            // The signature and claims were checked by `crate::assertion` already; a
            // platform's token under a trust policy serves a client of any method.
            Proof::Assertion(_) => {
                if client.auth_method != AuthMethod::PrivateKeyJwt && !federated {
                    return Err(AuthFailure::WrongMethod(client.auth_method));
                }
            }
            Proof::Certificate(certificate) => {
                if !client.auth_method.is_mtls() {
                    return Err(AuthFailure::WrongMethod(client.auth_method));
                }
                let when = UnixTime::since_unix_epoch(std::time::Duration::from_secs(
                    u64::try_from(now).unwrap_or(0),
                ));
                let matches = mtls::decode_match(client.secret_hash()).is_some_and(|expected| {
                    mtls::authenticates(
                        client_ca,
                        &certificate.0,
                        client.auth_method,
                        &expected,
                        when,
                    )
                });
                if !matches {
                    return Err(AuthFailure::WrongSecret);
                }
            }
        }
        if !client.enabled {
            return Err(AuthFailure::Disabled);
        }
        // A client whose plan this snapshot does not have yet is not known yet.
        registry
            .plan(client.plan)
            .cloned()
            .ok_or(AuthFailure::Unknown)
    });
    checked.unwrap_or_else(|| {
        if let Proof::Secret { secret, .. } = &presented.proof {
            let _ = secrets.verify_secret(secret, &DUMMY_HASH);
        }
        Err(AuthFailure::Unknown)
    })
}
