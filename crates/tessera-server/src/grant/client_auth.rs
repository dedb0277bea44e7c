//! Client authentication (RFC 6749 section 2.3) at the token, introspection and revocation
//! endpoints: a secret (section 2.3.1), a client certificate (RFC 8705 section 2), a signed
//! assertion (`private_key_jwt`, RFC 7523 section 2.2) or a platform's token under a trust
//! policy (workload identity federation).
//!
//! An unknown client, a wrong secret, an expired previous secret, a disabled client and a
//! client using a method it is not registered for all get the same `invalid_client`. An
//! unknown client is checked against a dummy hash so that it takes as long as a wrong secret.
//! Failures count against the caller's address (brute-force protection).

use std::net::IpAddr;
use std::sync::Arc;

use tessera_proto::client::BasicError;
use tessera_proto::{BasicCredentials, ClientId, ClientSecret};
use tessera_store::{AuthMethod, Plan, Timestamp};

use rustls::pki_types::UnixTime;
use rustls::server::danger::ClientCertVerifier;

use super::assertion::{self, AssertionError, Federated};
use super::key_sets::Outbound;
use super::{Grantor, Refusal};
use crate::audit;
use crate::limits::{Busy, Slot};
use crate::mtls::{self, PeerCertificate};
use crate::registry::{Clients, HeldCredential, Registry, Trigger};
use crate::secrets::{self, Secrets};

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
    /// A JWT signed by the client's key (`private_key_jwt`, RFC 7523 section 2.2), or a
    /// platform's token; checked by `assertion.rs` before [`check_presented`].
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
    Assertion(AssertionError),
    /// Not a refusal: the request waited without its in-flight slot (on a key fetch, on a
    /// read of the store for an unknown id) and found none free after; answered 503 like
    /// a request over the cap.
    Overloaded,
}

impl From<AssertionError> for AuthFailure {
    fn from(error: AssertionError) -> Self {
        match error {
            AssertionError::Overloaded => Self::Overloaded,
            error => Self::Assertion(error),
        }
    }
}

/// The request's `Authorization` header, as the edge read it (RFC 9110 section 11.6.2).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) enum Authorization<'a> {
    /// None was sent.
    #[default]
    Absent,
    /// One, of visible ASCII.
    Value(&'a str),
    /// One that is not visible ASCII.
    NotAscii,
    /// More than one.
    Repeated,
}

/// The credentials a request carries, wherever it carries them (RFC 6749 section 2.3.1,
/// RFC 7521 section 4.2, RFC 8705 section 2), read at the edge.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Credentials<'a> {
    /// The `Authorization` header.
    pub authorization: Authorization<'a>,
    /// `client_id` of the body.
    pub client_id: Option<&'a ClientId>,
    /// `client_secret` of the body.
    pub client_secret: Option<&'a ClientSecret>,
    /// `client_assertion` with its type.
    pub assertion: Option<Assertion<'a>>,
    /// The client certificate of the connection, or the one a trusted proxy passed on.
    pub certificate: Option<&'a PeerCertificate>,
}

/// Finds the credentials in the `Authorization` header or the body (`client_id` and
/// `client_secret` form parameters), never both; or, with only a `client_id` in the body,
/// the connection's client certificate (RFC 8705 section 2).
pub(crate) fn presented(credentials: Credentials<'_>) -> Result<Presented, CredentialsError> {
    let Credentials {
        authorization,
        client_id: body_id,
        client_secret: body_secret,
        assertion,
        certificate,
    } = credentials;
    if let Authorization::Repeated = authorization {
        return Err(CredentialsError::RepeatedHeader);
    }
    let header_sent = !matches!(authorization, Authorization::Absent);
    // RFC 7521 section 4.2: the assertion is the only credential of the request.
    if let Some(assertion) = assertion {
        if header_sent || body_secret.is_some() {
            return Err(CredentialsError::TwoMethods);
        }
        if assertion.kind != Some(assertion::JWT_BEARER) {
            return Err(CredentialsError::AssertionType);
        }
        let client_id = match body_id {
            Some(id) => id.clone(),
            None => assertion::claimed_client(assertion.jwt)
                .and_then(|sub| ClientId::parse(&sub))
                .ok_or(CredentialsError::AssertionWithoutClient)?,
        };
        return Ok(Presented {
            client_id,
            proof: Proof::Assertion(assertion.jwt.to_owned()),
        });
    }
    if !header_sent {
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
    }
    if body_secret.is_some() {
        return Err(CredentialsError::TwoMethods);
    }
    let Authorization::Value(value) = authorization else {
        return Err(CredentialsError::MalformedHeader);
    };
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
/// plan from `registry`. An assertion's signature and claims were checked before, by
/// [`Grantor::check`].
fn check_presented(
    registry: &Registry,
    clients: &Clients,
    secrets: &Secrets,
    presented: &Presented,
    now: Timestamp,
    client_ca: Option<&dyn ClientCertVerifier>,
    federated: bool,
) -> Result<(Arc<Plan>, Option<Arc<str>>), AuthFailure> {
    let checked = clients.with(presented.client_id.as_str(), |client| {
        match &presented.proof {
            Proof::Secret { secret, method } => {
                let HeldCredential::Secret { hash, previous } = client.credential() else {
                    // A client without a secret: checked against the dummy hash all the
                    // same, so that it costs what a wrong secret costs.
                    let _ = secrets.verify_secret(secret, &DUMMY_HASH);
                    return Err(AuthFailure::WrongSecret);
                };
                let current = secrets.verify_secret(secret, hash);
                let previous = previous.is_some_and(|(hash, until)| {
                    now < until && secrets.verify_secret(secret, hash)
                });
                if !(current || previous) {
                    return Err(AuthFailure::WrongSecret);
                }
                if client.auth_method != *method {
                    return Err(AuthFailure::WrongMethod(client.auth_method));
                }
            }
            // The signature and claims were checked by `assertion.rs` already; a
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
                let matches = match client.credential() {
                    HeldCredential::Certificate(expected) => mtls::authenticates(
                        client_ca,
                        &certificate.0,
                        client.auth_method,
                        expected,
                        when,
                    ),
                    _ => false,
                };
                if !matches {
                    return Err(AuthFailure::WrongSecret);
                }
            }
        }
        if !client.enabled {
            return Err(AuthFailure::Disabled);
        }
        // A client whose plan this snapshot does not have yet is not known yet.
        let plan = registry
            .plan(client.plan)
            .cloned()
            .ok_or(AuthFailure::Unknown)?;
        Ok((plan, client.org().cloned()))
    });
    checked.unwrap_or_else(|| {
        if let Proof::Secret { secret, .. } = &presented.proof {
            let _ = secrets.verify_secret(secret, &DUMMY_HASH);
        }
        Err(AuthFailure::Unknown)
    })
}

/// A client authentication: the id presented, whatever the outcome, for the audit trail;
/// and the client, or why not.
#[derive(Debug)]
pub(crate) struct Authentication {
    /// The client id presented: empty when none could be read, a digest when it names no
    /// client (the caller's to choose: a secret swapped with the id, say).
    pub presented_id: String,
    /// The authenticated client, or the refusal.
    pub outcome: Result<Authenticated, Refusal>,
}

/// An authenticated client (RFC 6749 section 2.3).
#[derive(Debug)]
pub(crate) struct Authenticated {
    /// Its plan.
    pub plan: Arc<Plan>,
    /// Its organization, if any (issue 28).
    pub org: Option<Arc<str>>,
    /// `x5t#S256` of the certificate the client authenticated with (RFC 8705), if it did:
    /// its tokens are bound to it.
    pub bound_to: Option<String>,
    /// The trust policy and external identity, when a platform's token authenticated it.
    pub federated: Option<Federated>,
}

impl Grantor<'_> {
    /// Authenticates the caller (RFC 6749 2.3.1) with brute-force protection per source
    /// address `source`: wrong credentials count against the address, a request without any
    /// (a client waiting for the challenge) does not.
    ///
    /// Checking an assertion may fetch keys (`key_sets.rs`): only while the caller has
    /// failures left for the client, and with the request's in-flight `slot` lent back while
    /// it waits.
    pub(crate) async fn authenticate(
        &self,
        credentials: Credentials<'_>,
        source: Option<IpAddr>,
        slot: &Slot,
    ) -> Authentication {
        let throttle = self.throttle;
        let presented = match presented(credentials) {
            Ok(presented) => presented,
            Err(error) => {
                return Authentication {
                    presented_id: String::new(),
                    outcome: Err(Refusal::Credentials(error)),
                }
            }
        };
        // Only a certificate needs the CA: a secret's request takes no lock for it.
        let client_ca = presented
            .certificate()
            .and_then(|_| self.runtime.client_ca());
        let client_ca = client_ca.as_deref();
        let now = self.runtime.clock.now();
        let outbound = Outbound {
            throttle,
            source,
            client: presented.client_id.as_str(),
            slot,
        };
        // Before the lookup: a sync that begins after this and ends before a miss is
        // handled has read what the lookup could not see.
        let asked = self.live.syncs_begun();
        let registry = self.live.get();
        let mut result = self
            .check(&registry, &presented, now, client_ca, outbound)
            .await;
        // An id of the generated shape may name a client created a moment ago by the CLI or
        // another instance: the store is read (one read at a time, bounded, none while the
        // store does not answer) before it is refused. Client ids are not secret (RFC 6749
        // section 2.2), so that this answer may take longer than a wrong secret's tells
        // nothing that must be kept. The request waits without its in-flight slot, and takes
        // one again only for a client the read found: refusing the rest needs none.
        let id = presented.client_id.as_str();
        if matches!(result, Err(AuthFailure::Unknown)) && secrets::is_generated_client_id(id) {
            match slot
                .lend_then(self.refresh_for_unknown(id, asked), |found| *found)
                .await
            {
                Ok(true) => {
                    let registry = self.live.get();
                    result = self
                        .check(&registry, &presented, now, client_ca, outbound)
                        .await;
                }
                Ok(false) => {}
                Err(Busy) => result = Err(AuthFailure::Overloaded),
            }
        }
        // An id that names no client is the caller's to choose (a secret, swapped with the
        // id): it is logged as a digest only.
        let presented_id = if matches!(result, Err(AuthFailure::Unknown)) {
            audit::unregistered(id)
        } else {
            id.to_owned()
        };
        // Only failures are counted, after the check: correct credentials are never
        // throttled. A request that found no slot after a wait failed nothing.
        if let Some(failure) = result
            .as_ref()
            .err()
            .filter(|f| **f != AuthFailure::Overloaded)
        {
            let known = (*failure != AuthFailure::Unknown).then_some(id);
            if let Some(retry_after_secs) = throttle.failed(source, known).await {
                return Authentication {
                    presented_id,
                    outcome: Err(Refusal::Throttled {
                        rate: throttle.rate(),
                        retry_after_secs,
                    }),
                };
            }
        }
        let outcome = match result {
            Ok(((plan, org), federated)) => Ok(Authenticated {
                plan,
                org,
                bound_to: presented.certificate().and_then(|c| c.thumbprint()),
                federated,
            }),
            Err(failure) => Err(Refusal::Client(failure)),
        };
        Authentication {
            presented_id,
            outcome,
        }
    }

    /// Checks presented credentials: a client assertion first, with the client's registered
    /// keys (`private_key_jwt`, `assertion.rs`, which may fetch them) or, for a platform's
    /// token (its `iss` is not the client), with the client's trust policies (workload
    /// identity federation); then what every method shares ([`check_presented`]).
    async fn check(
        &self,
        registry: &Registry,
        presented: &Presented,
        now: Timestamp,
        client_ca: Option<&dyn ClientCertVerifier>,
        outbound: Outbound<'_>,
    ) -> Result<((Arc<Plan>, Option<Arc<str>>), Option<Federated>), AuthFailure> {
        let clients = self.live.clients();
        let mut federated = None;
        if let Some(token) = presented.assertion() {
            let id = presented.client_id.as_str();
            let registered = clients.with(id, |client| match client.credential() {
                HeldCredential::Keys(keys) if client.auth_method == AuthMethod::PrivateKeyJwt => {
                    Some(keys.clone())
                }
                _ => None,
            });
            let Some(keys) = registered else {
                return Err(AuthFailure::Unknown);
            };
            let checking = assertion::Checking {
                clock: &self.runtime.clock,
                issuer: &self.runtime.issuer,
                redis: self.redis,
                outbound,
            };
            let platform = assertion::unverified_claim(token, "iss").is_some_and(|iss| iss != id);
            let policies = if platform {
                self.assertions
                    .policies_of(
                        &self.runtime.clock,
                        self.store.as_ref(),
                        &presented.client_id,
                    )
                    .await
            } else {
                Arc::default()
            };
            if !policies.is_empty() {
                federated = Some(
                    self.assertions
                        .verify_federated(checking, &policies, token)
                        .await
                        .map_err(AuthFailure::from)?,
                );
            } else {
                match keys {
                    // Another method: said only once the client proved itself, as for a
                    // secret.
                    None => return Err(AuthFailure::WrongSecret),
                    Some(keys) => self
                        .assertions
                        .verify(checking, id, &keys, token)
                        .await
                        .map_err(AuthFailure::from)?,
                }
            }
        }
        let plan = check_presented(
            registry,
            clients,
            self.secrets,
            presented,
            now,
            client_ca,
            federated.is_some(),
        )?;
        Ok((plan, federated))
    }

    /// Reads the store for the client `id` the registry does not know, one read at a
    /// time, at most once per sync interval, and none while the store does not answer
    /// ([`Live::refresh_for_unknown`](crate::registry::Live::refresh_for_unknown)); says
    /// whether the client is known now.
    async fn refresh_for_unknown(&self, id: &str, asked: u64) -> bool {
        let (live, store, secrets) = (self.live.clone(), self.store.clone(), self.secrets.clone());
        let read = move || async move {
            live.sync(store.as_ref(), &secrets, Trigger::UnknownClient)
                .await
        };
        self.live
            .refresh_for_unknown(asked, self.config.sync_interval, read)
            .await
            && self.live.clients().with(id, |_| ()).is_some()
    }
}
