//! The client credentials grant (RFC 6749 section 4.4) as a domain call: a parsed token
//! request and the credentials the caller presented go in; the issued token, or a
//! [`Refusal`] in domain words, comes out, with what was decided on the way ([`Decided`]:
//! the client, its plan, the rate it was allowed under, the federated identity) for the
//! caller to record. No HTTP here: `routes/token.rs` reads the request and writes the answer,
//! and `error/` turns a refusal into the RFC 6749 section 5.2 body.
//!
//! The steps, in order: authenticate the client (`client_auth.rs`; RFC 6749 section 2.3,
//! RFC 8705 section 2, RFC 7523 section 2.2 and workload identity federation), its plan's
//! rate, the grant type, DPoP (`dpop.rs`, RFC 9449 section 5), the scopes and the resources
//! (RFC 6749 section 3.3, RFC 8707 section 2), then a token kept for reuse or a new one
//! signed (RFC 9068).
//!
//! - `client_auth.rs`: which credentials a request presents, and whether they hold;
//!   brute-force protection per source address; the store read for a client id not known yet.
//! - `assertion.rs`: `private_key_jwt` and federated platform tokens; `key_sets.rs` the keys
//!   they are checked with when registered by URL.
//! - `dpop.rs`: DPoP proofs at the token endpoint and nonces; `replay.rs` the memory of
//!   proofs and assertions seen, shared through Redis when limits are counted there.

use std::net::IpAddr;
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use tessera_proto::scope::names_issuer;
use tessera_proto::token::TokenType;
use tessera_proto::{GrantType, ScopeSet, TokenRequest, TokenResponse};
use tessera_store::{DpopPolicy, Plan, RateLimit, Timestamp};
use tessera_verify::dpop::DpopError;

use crate::keys::LoadedKey;
use crate::limits::redis::RedisLimiter;
use crate::limits::{AuthThrottle, Decision, Limiter, Slot};
use crate::registry::{Live, Registry};
use crate::reuse::{Kept, ReuseCache};
use crate::secrets::Secrets;
use crate::store_watch::WatchedStore;
use crate::{Config, Runtime};

pub(crate) mod assertion;
pub(crate) mod client_auth;
pub(crate) mod dpop;
pub(crate) mod key_sets;
mod replay;

pub(crate) use assertion::Federated;
pub(crate) use client_auth::{
    Assertion, AuthFailure, Authenticated, Authentication, Authorization, Credentials,
    CredentialsError,
};

/// What the grant works with, borrowed from the server's state for one request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grantor<'a> {
    /// The settings: the sync interval, the realm, trusted proxies.
    pub(crate) config: &'a Config,
    /// The issuer, the clock, the client CA in force.
    pub(crate) runtime: &'a Runtime,
    /// Clients, plans and keys, kept fresh from the store; revocations.
    pub(crate) live: &'a Arc<Live>,
    /// The store, for a client's trust policies and the read for an unknown client id.
    pub(crate) store: &'a Arc<WatchedStore>,
    /// Secret hashing.
    pub(crate) secrets: &'a Arc<Secrets>,
    /// The plans' rate limits.
    pub(crate) limiter: &'a dyn Limiter,
    /// Failed authentications per source address.
    pub(crate) throttle: &'a AuthThrottle,
    /// Redis, when limits are counted there: replay memory shared by every instance.
    pub(crate) redis: Option<&'a RedisLimiter>,
    /// Tokens kept for reuse.
    pub(crate) reuse: &'a ReuseCache,
    /// DPoP proofs seen, and nonces.
    pub(crate) dpop: &'a dpop::Dpop,
    /// Assertions seen, keys fetched, trust policies read.
    pub(crate) assertions: &'a assertion::Assertions,
}

/// A token request as the grant takes it: parsed, with what the caller presented.
#[derive(Debug)]
pub(crate) struct TokenGrant<'a> {
    /// The parameters of the request (RFC 6749 section 4.4.2, RFC 8707 section 2).
    pub(crate) request: &'a TokenRequest,
    /// The client's credentials, wherever the request carried them.
    pub(crate) credentials: Credentials<'a>,
    /// The request's `DPoP` header: a proof, none, or why it could not be read (RFC 9449
    /// section 4.3 step 1).
    pub(crate) dpop_proof: Result<Option<&'a str>, DpopError>,
    /// The caller's address, for brute-force protection.
    pub(crate) source: Option<IpAddr>,
}

/// A token request decided: what was learned of it, whatever the outcome, and the outcome.
#[derive(Debug)]
pub(crate) struct Grant {
    /// What the audit trail, the metrics and metering record.
    pub(crate) decided: Decided,
    /// The token, or why none.
    pub(crate) result: Result<Issued, Refusal>,
}

/// What a token request was found to be, as far as it got.
#[derive(Debug, Default)]
pub(crate) struct Decided {
    /// The client id presented: empty when none could be read, a digest when it names no
    /// client (it may be a secret sent in the wrong field).
    pub(crate) client_id: String,
    /// The client's plan, once the client is authenticated.
    pub(crate) plan: Option<Arc<Plan>>,
    /// The scope requested, as sent.
    pub(crate) scope: String,
    /// The plan's rate and the limiter's decision, when the request was allowed under one.
    pub(crate) allowed_under: Option<(RateLimit, Decision)>,
    /// The trust policy and external identity, for a federated client.
    pub(crate) federated: Option<Federated>,
    /// The client proved itself but is disabled: its refusal is counted and listed for the
    /// operator as an identified client's are (issue 29), though it has no plan here.
    pub(crate) disabled: bool,
}

/// A token issued (RFC 6749 section 5.1).
#[derive(Debug)]
pub(crate) struct Issued {
    /// The answer's fields.
    pub(crate) response: TokenResponse,
    /// The token's `jti`.
    pub(crate) jti: Arc<str>,
    /// Whether it is a token kept from an earlier request.
    pub(crate) reused: bool,
    /// The DPoP nonce for the client's next proof, when nonces are on (RFC 9449 section 8.2).
    pub(crate) dpop_nonce: Option<String>,
}

/// Why no token was issued, in the grant's words; `error/` gives each its RFC 6749
/// section 5.2 answer.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The credentials could not be read (RFC 6749 sections 2.3 and 3.2).
    Credentials(CredentialsError),
    /// The credentials were checked and refused (or the request found no in-flight slot
    /// after waiting: [`AuthFailure::Overloaded`]).
    Client(AuthFailure),
    /// Too many failed authentications from the caller's address.
    Throttled {
        /// The allowance.
        rate: RateLimit,
        /// Seconds until the next attempt may succeed.
        retry_after_secs: u64,
    },
    /// The client is over its plan's rate.
    OverPlanRate {
        /// The plan's rate.
        rate: RateLimit,
        /// Seconds until the next request may succeed.
        retry_after_secs: u64,
    },
    /// A `grant_type` other than `client_credentials`.
    UnsupportedGrantType,
    /// The DPoP proof was refused (RFC 9449 section 5), with the nonce the next one must
    /// carry when nonces are on.
    Dpop {
        /// Why.
        error: DpopError,
        /// The nonce to send in `DPoP-Nonce`.
        nonce: Option<String>,
    },
    /// The scope is malformed, missing, or outside the plan.
    Scope(ScopeRefusal),
    /// A resource is malformed or not covered by the plan (RFC 8707 section 2).
    Target(TargetRefusal),
    /// No signing key is active.
    NoSigningKey,
}

/// Why the scope was refused (RFC 6749 section 3.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScopeRefusal {
    /// Not scope names separated by single spaces.
    Malformed,
    /// Neither a scope nor a resource names any.
    Missing,
    /// Scopes outside the client's plan: those some plan grants, by name, and how many
    /// others (never named: a caller may have typed a secret into the field).
    OutsidePlan {
        /// Outside the plan, known to some plan.
        named: Vec<String>,
        /// Outside the plan, known to none.
        unknown: usize,
    },
}

/// Why the resources were refused (RFC 8707 section 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TargetRefusal {
    /// A resource the plan does not cover: named when some plan grants it.
    NotCovered(Option<String>),
    /// The resources name no scope at all.
    NoneCovered,
    /// None of the requested scopes is for the requested resources.
    NoScopeForThem,
}

/// The claims of RFC 9068 section 2.2 as signed: the fields of
/// [`tessera_proto::AccessTokenClaims`], borrowed, so that issuing a token copies none of
/// them (a test holds the two together).
#[derive(serde::Serialize)]
struct SignedClaims<'a> {
    iss: &'a str,
    sub: &'a str,
    client_id: &'a str,
    aud: Audiences<'a>,
    scope: &'a str,
    iat: u64,
    exp: u64,
    jti: &'a str,
    app_only: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    cnf: Option<Cnf<'a>>,
    /// The plan the client is on (Tessera's claim, issue 27): an API looks up the plan's
    /// request limits in `GET /api-limits/{api}`. Borrowed from the registry's plan.
    plan: &'a str,
    /// The client's organization (Tessera's claim, issue 28), if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    org_id: Option<&'a str>,
    /// Workload identity federation: the external subject the client's token came from
    /// (not RFC 8693 `act`, which names a party acting for the subject: here the workload
    /// is the client itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    federated_sub: Option<&'a str>,
}

impl SignedClaims<'_> {
    /// The claims as JSON (RFC 9068 section 2.2, RFC 7519 section 7.1 step 1), written
    /// directly: the very bytes the `Serialize` derive writes (a test holds the two
    /// together), without serde's generic path, which cost a token about 4,800 instructions
    /// (BENCHMARKS.md, issue 31).
    fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(320);
        let mut number = itoa::Buffer::new();
        out.extend_from_slice(b"{\"iss\":");
        json_string(&mut out, self.iss);
        out.extend_from_slice(b",\"sub\":");
        json_string(&mut out, self.sub);
        out.extend_from_slice(b",\"client_id\":");
        json_string(&mut out, self.client_id);
        out.extend_from_slice(b",\"aud\":[");
        for (i, name) in self.aud.names().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            json_string(&mut out, name);
        }
        out.extend_from_slice(b"],\"scope\":");
        json_string(&mut out, self.scope);
        out.extend_from_slice(b",\"iat\":");
        out.extend_from_slice(number.format(self.iat).as_bytes());
        out.extend_from_slice(b",\"exp\":");
        out.extend_from_slice(number.format(self.exp).as_bytes());
        out.extend_from_slice(b",\"jti\":");
        json_string(&mut out, self.jti);
        out.extend_from_slice(if self.app_only {
            b",\"app_only\":true"
        } else {
            b",\"app_only\":false"
        });
        if let Some(cnf) = &self.cnf {
            out.extend_from_slice(b",\"cnf\":{");
            let mut first = true;
            for (name, value) in [("x5t#S256", cnf.certificate), ("jkt", cnf.jkt)] {
                if let Some(value) = value {
                    if !std::mem::take(&mut first) {
                        out.push(b',');
                    }
                    json_string(&mut out, name);
                    out.push(b':');
                    json_string(&mut out, value);
                }
            }
            out.push(b'}');
        }
        out.extend_from_slice(b",\"plan\":");
        json_string(&mut out, self.plan);
        for (name, value) in [
            ("org_id", self.org_id),
            ("federated_sub", self.federated_sub),
        ] {
            if let Some(value) = value {
                out.push(b',');
                json_string(&mut out, name);
                out.push(b':');
                json_string(&mut out, value);
            }
        }
        out.push(b'}');
        out
    }
}

/// `value` as a JSON string (RFC 8259 section 7), as serde_json writes it: copied between
/// quotes when nothing in it needs escaping (no `"`, `\` or control character), as ids,
/// scopes, plan names and URLs do; otherwise escaped by serde_json itself.
fn json_string(out: &mut Vec<u8>, value: &str) {
    // Every byte looked at, without a branch per byte, so that the compiler vectorises the
    // check (issue 31).
    let plain = value.bytes().fold(true, |plain, b| {
        plain & (b >= 0x20) & (b != b'"') & (b != b'\\')
    });
    if plain {
        out.push(b'"');
        out.extend_from_slice(value.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(out, value).expect("a string writes to a Vec");
    }
}

/// The scopes granted (RFC 6749 section 3.3): the set, and the `scope` string of the
/// token and of the reuse cache's key.
struct Granted {
    scopes: ScopeSet,
    scope: String,
}

/// A token just signed: the compact JWS, its `jti` and its expiry.
struct Signed {
    access_token: String,
    jti: Arc<str>,
    exp: Timestamp,
}

/// The key the token is bound to (RFC 7800 section 3.1): the client certificate's
/// thumbprint (RFC 8705 section 3.1), the DPoP key's (RFC 9449 section 6.1), or both.
#[derive(serde::Serialize)]
struct Cnf<'a> {
    #[serde(rename = "x5t#S256", skip_serializing_if = "Option::is_none")]
    certificate: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jkt: Option<&'a str>,
}

/// The audience: one API per granted scope, as a JSON array. The admin scopes name no API
/// but the issuer itself, whose admin API accepts them (`control/admin`).
struct Audiences<'a> {
    scopes: &'a ScopeSet,
    issuer: &'a str,
}

impl<'a> Audiences<'a> {
    /// The names, in the order of the scopes, the issuer once however many admin scopes.
    fn names(&self) -> impl Iterator<Item = &'a str> + 'a {
        let (scopes, issuer) = (self.scopes, self.issuer);
        let mut issuer_named = false;
        scopes.iter().filter_map(move |s| {
            if !names_issuer(s.as_str()) {
                Some(s.as_str())
            } else if !std::mem::replace(&mut issuer_named, true) {
                Some(issuer)
            } else {
                None
            }
        })
    }
}

impl serde::Serialize for Audiences<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.names())
    }
}

impl Grantor<'_> {
    /// Decides a token request: authenticates the client, limits it, checks the grant
    /// type, the DPoP proof, the scopes and the resources, and issues a token (or hands
    /// back the one kept for reuse). The request's in-flight `slot` is lent back while it
    /// waits on a key fetch or a read of the store.
    pub(crate) async fn issue(&self, grant: TokenGrant<'_>, slot: &Slot) -> Grant {
        let scope = grant.request.scope.clone().unwrap_or_default();
        let Authentication {
            presented_id: client_id,
            outcome,
        } = self
            .authenticate(grant.credentials, grant.source, slot)
            .await;
        let client = match outcome {
            Ok(client) => client,
            Err(refusal) => {
                let decided = Decided {
                    client_id,
                    scope,
                    disabled: matches!(refusal, Refusal::Client(AuthFailure::Disabled)),
                    ..Decided::default()
                };
                return Grant {
                    decided,
                    result: Err(refusal),
                };
            }
        };
        let mut decided = Decided {
            plan: Some(client.plan.clone()),
            federated: client.federated.clone(),
            client_id,
            scope,
            allowed_under: None,
            disabled: false,
        };
        // Rate limits apply to every token request of an identified client.
        if let Some(rate) = client.plan.token_rate {
            // With limits per organization (issue 28), the organization's clients share one
            // allowance: its key names the organization (`/` is in no generated client id).
            let shared = match (client.plan.limit_per, client.org.as_deref()) {
                (tessera_store::LimitPer::Org, Some(org)) => Some(format!("org/{org}")),
                _ => None,
            };
            let key = shared.as_deref().unwrap_or(&decided.client_id);
            match self.limiter.check(key, rate).await {
                Decision::Limited { retry_after_secs } => {
                    let refusal = Refusal::OverPlanRate {
                        rate,
                        retry_after_secs,
                    };
                    return Grant {
                        decided,
                        result: Err(refusal),
                    };
                }
                allowed => decided.allowed_under = Some((rate, allowed)),
            }
        }
        let result = self.issue_to(&decided.client_id, &client, &grant).await;
        Grant { decided, result }
    }

    /// The rest of [`issue`](Self::issue), for an authenticated client within its rate:
    /// the grant type, the DPoP proof, the scopes, then the token kept for reuse or a new one.
    async fn issue_to(
        &self,
        client_id: &str,
        client: &Authenticated,
        grant: &TokenGrant<'_>,
    ) -> Result<Issued, Refusal> {
        if let GrantType::Other(_) = &grant.request.grant_type {
            return Err(Refusal::UnsupportedGrantType);
        }
        let plan = &client.plan;
        let now = self.runtime.clock.now();
        let jkt = self.dpop_key(client_id, plan, grant, now).await?;
        let registry = self.live.get();
        let scopes = self.scopes(grant.request, plan, &registry)?;
        let granted = Granted {
            scope: scopes.to_string(),
            scopes,
        };
        // A bound token is reused never: the next request may come with another key. Nor is
        // a federated one: another workload may act as the same client.
        let reusable = client.bound_to.is_none() && jkt.is_none() && client.federated.is_none();
        let reuse_percent = plan.reuse_percent.filter(|_| reusable);
        if let Some(percent) = reuse_percent {
            let kept = self.reuse.get(
                client_id,
                &granted.scope,
                now,
                plan.token_ttl,
                percent,
                |jti| self.live.is_revoked(jti),
            );
            if let Some(kept) = kept {
                let response = TokenResponse {
                    access_token: kept.token.to_string(),
                    token_type: TokenType::Bearer,
                    expires_in: (kept.exp - now) as u64,
                    scope: granted.scopes,
                };
                return Ok(self.answer(response, kept.jti, true));
            }
        }
        let key = registry
            .keys
            .signing_key(now)
            .ok_or(Refusal::NoSigningKey)?;
        let cnf = (!reusable).then_some(Cnf {
            certificate: client.bound_to.as_deref(),
            jkt: jkt.as_deref(),
        });
        let signed = self.sign(key, client_id, client, &granted, cnf, now);
        if reuse_percent.is_some() {
            let kept = Kept {
                token: signed.access_token.as_str().into(),
                jti: signed.jti.clone(),
                exp: signed.exp,
            };
            self.reuse.put(client_id, &granted.scope, kept);
        }
        let response = TokenResponse {
            access_token: signed.access_token,
            token_type: match jkt {
                Some(_) => TokenType::DPoP,
                None => TokenType::Bearer,
            },
            expires_in: u64::from(plan.token_ttl),
            scope: granted.scopes,
        };
        Ok(self.answer(response, signed.jti, false))
    }

    /// A new access token for the client (RFC 9068 section 2.2), signed with `key`: its
    /// claims, bound to `cnf` when given.
    fn sign(
        &self,
        key: &LoadedKey,
        client_id: &str,
        client: &Authenticated,
        granted: &Granted,
        cnf: Option<Cnf<'_>>,
        now: Timestamp,
    ) -> Signed {
        let issuer = self.runtime.issuer.as_str();
        let iat = now.max(0) as u64;
        let jti = new_jti();
        let claims = SignedClaims {
            iss: issuer,
            sub: client_id,
            client_id,
            aud: Audiences {
                scopes: &granted.scopes,
                issuer,
            },
            scope: &granted.scope,
            iat,
            exp: iat + u64::from(client.plan.token_ttl),
            jti: &jti,
            app_only: true,
            cnf,
            plan: &client.plan.name,
            org_id: client.org.as_deref(),
            federated_sub: client.federated.as_ref().map(|f| f.subject.as_str()),
        };
        Signed {
            access_token: key.sign_payload(&claims.to_json()),
            exp: claims.exp as Timestamp,
            jti,
        }
    }

    /// The answer for `response`, with a fresh DPoP nonce when nonces are in use.
    fn answer(&self, response: TokenResponse, jti: Arc<str>, reused: bool) -> Issued {
        Issued {
            response,
            jti,
            reused,
            dpop_nonce: self.dpop.nonce(self.runtime.clock.now()),
        }
    }

    /// The thumbprint of the DPoP key the token is bound to (RFC 9449 sections 5 and 6.1),
    /// when the request carries a valid proof and the plan takes one; a refusal when the
    /// proof is invalid, or missing where the plan requires one.
    async fn dpop_key(
        &self,
        client_id: &str,
        plan: &Plan,
        grant: &TokenGrant<'_>,
        now: Timestamp,
    ) -> Result<Option<String>, Refusal> {
        let proof = match (plan.dpop, grant.dpop_proof.clone()) {
            (DpopPolicy::Off, _) => return Ok(None),
            (_, Err(error)) => return Err(Refusal::Dpop { error, nonce: None }),
            (DpopPolicy::Required, Ok(None)) => {
                return Err(Refusal::Dpop {
                    error: DpopError::Missing,
                    nonce: self.dpop.nonce(now),
                })
            }
            (_, Ok(None)) => return Ok(None),
            (_, Ok(Some(proof))) => proof,
        };
        let issuer = self.runtime.issuer.trim_end_matches('/');
        let endpoint = format!("{issuer}/connect/token");
        let htu = tessera_proto::dpop::htu(&endpoint).unwrap_or(endpoint);
        self.dpop
            .check(self.redis, client_id, proof, &htu, now)
            .await
            .map(Some)
            .map_err(|error| Refusal::Dpop {
                error,
                nonce: self.dpop.nonce(now),
            })
    }

    /// The scopes to grant: those requested (or, without `scope`, those the resources name),
    /// all within the plan, narrowed to the resources named (RFC 8707 section 2).
    fn scopes(
        &self,
        request: &TokenRequest,
        plan: &Plan,
        registry: &Registry,
    ) -> Result<ScopeSet, Refusal> {
        let targets = resources(
            &request.resource,
            &plan.scopes,
            &self.runtime.issuer,
            registry,
        )?;
        let scopes = match (request.scope.as_deref(), &targets) {
            (Some(scope), _) => {
                ScopeSet::parse(scope).map_err(|_| Refusal::Scope(ScopeRefusal::Malformed))?
            }
            // Without scope, the resources name them.
            (None, Some(targets)) => targets.clone(),
            (None, None) => return Err(Refusal::Scope(ScopeRefusal::Missing)),
        };
        let refused = scopes.outside(&plan.scopes);
        if !refused.is_empty() {
            let (named, unknown): (Vec<&str>, Vec<&str>) = refused
                .iter()
                .map(|s| s.as_str())
                .partition(|name| registry.knows_scope(name));
            return Err(Refusal::Scope(ScopeRefusal::OutsidePlan {
                named: named.into_iter().map(str::to_owned).collect(),
                unknown: unknown.len(),
            }));
        }
        match targets {
            None => Ok(scopes),
            Some(targets) => {
                let narrowed = scopes.intersection(&targets);
                if narrowed.is_empty() {
                    return Err(Refusal::Target(TargetRefusal::NoScopeForThem));
                }
                Ok(narrowed)
            }
        }
    }
}

/// The scopes of the `resource` values (RFC 8707 section 2), or `None` without any. A
/// resource is an API's identifier, the value its tokens carry in `aud`: the scope naming it,
/// or this issuer for the admin API. One the plan does not cover is refused, named only when
/// some plan grants it (a mistyped value may be a secret).
fn resources(
    resource: &[String],
    plan_scopes: &ScopeSet,
    issuer: &str,
    registry: &Registry,
) -> Result<Option<ScopeSet>, Refusal> {
    if resource.is_empty() {
        return Ok(None);
    }
    let issuer = issuer.trim_end_matches('/');
    let admin: Vec<&str> = plan_scopes
        .iter()
        .map(|s| s.as_str())
        .filter(|s| names_issuer(s))
        .collect();
    let mut names: Vec<&str> = Vec::new();
    for target in resource {
        if target.trim_end_matches('/') == issuer && !admin.is_empty() {
            names.extend(&admin);
        } else if plan_scopes.iter().any(|s| s.as_str() == target) && !names_issuer(target) {
            names.push(target);
        } else {
            let named = registry.knows_scope(target).then(|| target.clone());
            return Err(Refusal::Target(TargetRefusal::NotCovered(named)));
        }
    }
    ScopeSet::parse(&names.join(" "))
        .map(Some)
        .map_err(|_| Refusal::Target(TargetRefusal::NoneCovered))
}

/// Random bytes for `jti`s, drawn from the system's generator a page at a time.
const JTI_POOL: usize = 4096;

thread_local! {
    /// This thread's unused random bytes for `jti`s and how many of them are used.
    static JTI_BYTES: std::cell::RefCell<([u8; JTI_POOL], usize)> =
        const { std::cell::RefCell::new(([0; JTI_POOL], JTI_POOL)) };
}

/// A new token's `jti` (RFC 7519 section 4.1.7; RFC 9068 section 2.2 requires it): 128
/// random bits in base64url. The bits come from aws-lc's generator, as every secret's do,
/// but 256 `jti`s' worth at a time into a per-thread pool: one call per token cost about
/// 2,400 instructions, most of them the generator's set-up rather than its output
/// (BENCHMARKS.md, issue 31). A `jti` must be unique, not secret, and each pool's bytes are
/// handed out once, to one thread.
fn new_jti() -> Arc<str> {
    let mut bits = [0u8; 16];
    JTI_BYTES.with_borrow_mut(|(pool, used)| {
        if *used == JTI_POOL {
            aws_lc_rs::rand::fill(pool).expect("system random source");
            *used = 0;
        }
        bits.copy_from_slice(&pool[*used..*used + 16]);
        *used += 16;
    });
    let mut text = [0u8; 22];
    let written = URL_SAFE_NO_PAD
        .encode_slice(bits, &mut text)
        .expect("16 bytes are 22 characters");
    Arc::from(std::str::from_utf8(&text[..written]).expect("base64url is ASCII"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::claims::Audience;
    use tessera_proto::AccessTokenClaims;

    #[test]
    fn jtis_are_128_bit_base64url_and_unique_across_pool_refills() {
        // Three pools' worth: every refill must give new bytes.
        let n = 3 * JTI_POOL / 16 + 5;
        let jtis: std::collections::HashSet<Arc<str>> = (0..n).map(|_| new_jti()).collect();
        assert_eq!(jtis.len(), n);
        for jti in &jtis {
            let bits = URL_SAFE_NO_PAD.decode(jti.as_bytes()).unwrap();
            assert_eq!(bits.len(), 16, "{jti}");
        }
        // Drawn on another thread, from that thread's own pool.
        let other: Vec<Arc<str>> = std::thread::spawn(|| (0..300).map(|_| new_jti()).collect())
            .join()
            .unwrap();
        assert!(other.iter().all(|jti| !jtis.contains(jti)));
    }

    #[test]
    fn signed_claims_read_back_as_access_token_claims() {
        let scopes = ScopeSet::parse("news-api market-data-api").unwrap();
        let claims = SignedClaims {
            iss: "https://issuer",
            sub: "tc_1",
            client_id: "tc_1",
            aud: Audiences {
                scopes: &scopes,
                issuer: "https://issuer",
            },
            scope: "market-data-api news-api",
            iat: 10,
            exp: 70,
            jti: "j",
            app_only: true,
            cnf: Some(Cnf {
                certificate: None,
                jkt: Some("k"),
            }),
            plan: "pro",
            org_id: Some("acme"),
            federated_sub: None,
        };
        let json = serde_json::to_vec(&claims).unwrap();
        let read: AccessTokenClaims = serde_json::from_slice(&json).unwrap();
        assert_eq!(
            read,
            AccessTokenClaims {
                iss: "https://issuer".into(),
                sub: "tc_1".into(),
                client_id: "tc_1".into(),
                aud: Audience::Many(vec!["market-data-api".into(), "news-api".into()]),
                scope: "market-data-api news-api".into(),
                iat: 10,
                exp: 70,
                nbf: None,
                jti: "j".into(),
                app_only: true,
                cnf: Some(tessera_proto::Confirmation {
                    x5t_s256: None,
                    jkt: Some("k".into()),
                }),
                plan: Some("pro".into()),
                org_id: Some("acme".into()),
            }
        );
    }

    /// The claims written by hand are byte for byte what serde_json writes for them, with
    /// and without the optional members, and with strings that need escaping.
    #[test]
    fn claims_written_directly_are_serde_json_s_bytes() {
        let scopes = ScopeSet::parse("tessera-admin news-api tessera-usage").unwrap();
        let cnfs = [
            None,
            Some(Cnf {
                certificate: Some("x5t"),
                jkt: None,
            }),
            Some(Cnf {
                certificate: None,
                jkt: Some("k"),
            }),
            Some(Cnf {
                certificate: Some("x5t"),
                jkt: Some("k"),
            }),
        ];
        let odd = "a\"b\\c\u{1}\n\t\u{7f}é \u{2028}😀/";
        // A quote alone and a backslash alone, with no control character beside them to
        // send the string to serde_json anyway (mutation testing, `json_string`'s
        // `&&` → `||`, grant/mod.rs:302).
        let (quote, backslash) = ("a\"b", "a\\b");
        // A control character amid plain ones, and strings of nothing but one kind: each
        // other change of `json_string`'s check (mutation testing on 158e2cf: its other
        // `&&`, its `>=`, either `!=`) copies one of these unescaped.
        let alone = ["a\u{1}b", "\n", "\"", "\\"];
        for cnf in cnfs {
            for (org_id, federated_sub) in [
                (None, None),
                (Some("acme"), Some(odd)),
                (Some(quote), Some(backslash)),
            ] {
                for issuer in [["https://issuer", odd, quote, backslash], alone].concat() {
                    let claims = SignedClaims {
                        iss: issuer,
                        sub: "tc_1",
                        client_id: "tc_1",
                        aud: Audiences {
                            scopes: &scopes,
                            issuer,
                        },
                        scope: "tessera-admin news-api tessera-usage",
                        iat: 0,
                        exp: u64::MAX,
                        jti: odd,
                        app_only: true,
                        cnf: cnf.as_ref().map(|c| Cnf {
                            certificate: c.certificate,
                            jkt: c.jkt,
                        }),
                        plan: "pro",
                        org_id,
                        federated_sub,
                    };
                    assert_eq!(
                        String::from_utf8(claims.to_json()).unwrap(),
                        serde_json::to_string(&claims).unwrap()
                    );
                }
            }
        }
    }

    #[test]
    fn the_admin_and_usage_scopes_name_the_issuer_once() {
        let scopes =
            ScopeSet::parse("tessera-admin news-api tessera-admin-read tessera-usage").unwrap();
        let aud = Audiences {
            scopes: &scopes,
            issuer: "https://issuer",
        };
        assert_eq!(
            serde_json::to_value(&aud).unwrap(),
            serde_json::json!(["news-api", "https://issuer"])
        );
    }
}
