//! The token endpoint: the client credentials grant (RFC 6749 section 4.4).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use tessera_proto::token::TokenType;
use tessera_proto::{ErrorCode, GrantType, ScopeSet, TokenRequest, TokenResponse};
use tessera_store::{DpopPolicy, Plan, RateLimit};
use tessera_verify::dpop::DpopError;

use crate::audit::{self, Subject};
use crate::error::{rate_limit_fields, OAuthError, NO_STORE};
use crate::limits::Decision;
use crate::metrics::NO_PLAN;
use crate::reuse::Kept;
use crate::routes::{authenticate_client, client_ip, read_form, split};
use crate::{secrets, AppState};
use tessera_verify::dpop::proof_header;

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/connect/token", post(token))
}

/// A token request as it is handled: what the audit trail, the metrics and metering learn
/// of it, step by step, whatever the outcome.
#[derive(Default)]
struct Attempt {
    /// The client id presented (empty until one is read).
    client_id: String,
    /// The client's plan, once the client is identified.
    plan: Option<Arc<Plan>>,
    /// The scope requested.
    scope: String,
    /// The plan's rate and the limiter's decision, when the request was allowed under one.
    allowed_under: Option<(RateLimit, Decision)>,
    /// The trust policy and external identity, for a federated client.
    federated: Option<crate::assertion::Federated>,
}

/// The claims of RFC 9068 section 2.2 as signed: the fields of [`AccessTokenClaims`],
/// borrowed, so that issuing a token copies none of them (a test holds the two together).
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
    /// Workload identity federation: the external subject the client's token came from
    /// (not RFC 8693 `act`, which names a party acting for the subject: here the workload
    /// is the client itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    federated_sub: Option<&'a str>,
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
/// but the issuer itself, whose admin API accepts them (`routes/admin`).
struct Audiences<'a> {
    scopes: &'a ScopeSet,
    issuer: &'a str,
}

impl serde::Serialize for Audiences<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut issuer_named = false;
        serializer.collect_seq(self.scopes.iter().filter_map(|s| {
            if !tessera_proto::scope::is_admin_scope(s.as_str()) {
                Some(s.as_str())
            } else if !std::mem::replace(&mut issuer_named, true) {
                Some(self.issuer)
            } else {
                None
            }
        }))
    }
}

/// The body of RFC 6749 section 5.1, written directly rather than through a JSON encoder:
/// the token is base64url and dots, and scopes are scope-tokens (RFC 6749 section 3.3: no
/// `"`, no `\`, no control characters), so nothing in it needs escaping.
fn response_body(response: &TokenResponse) -> String {
    format!(
        r#"{{"access_token":"{}","token_type":"{}","expires_in":{},"scope":"{}"}}"#,
        response.access_token,
        response.token_type.as_str(),
        response.expires_in,
        response.scope
    )
}

/// What was issued.
struct Issued {
    response: TokenResponse,
    jti: Arc<str>,
    reused: bool,
}

/// `POST /connect/token` (RFC 6749 sections 4.4.2 and 4.4.3).
async fn token(State(state): State<AppState>, request: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = split(request, state.config().body_limit).await;
    let slot = match state.in_flight().admit() {
        Ok(slot) => slot,
        Err(busy) => {
            state
                .metrics()
                .refused(NO_PLAN, ErrorCode::TemporarilyUnavailable);
            return OAuthError::from(busy).into_response();
        }
    };
    let source = client_ip(&state, &parts);
    let mut attempt = Attempt::default();
    let outcome = if state.too_stale() {
        // What the registry says of clients (disabled since?) and plans may no longer hold.
        Err(OAuthError::store_unavailable(
            "the registry is out of date: the store does not answer; retry later",
        ))
    } else {
        attempt.issue(&state, source, &parts, body, &slot).await
    };
    let plan = attempt.plan.as_ref().map_or(NO_PLAN, |p| p.name.as_str());
    // A refused request's scope may hold anything: only names some plan grants are logged.
    let scope = match &outcome {
        Ok(_) => std::borrow::Cow::Borrowed(attempt.scope.as_str()),
        Err(_) => {
            let registry = state.registry();
            audit::scope_for_log(&attempt.scope, |name| registry.knows_scope(name)).into()
        }
    };
    let subject = Subject {
        client_id: &attempt.client_id,
        plan,
        scope: &scope,
        source,
    };
    let rate_fields = attempt
        .allowed_under
        .map(|(rate, decision)| rate_limit_fields(rate, decision))
        .unwrap_or_default();
    let response = match outcome {
        Ok(issued) => {
            state.metrics().issued(plan, issued.reused);
            state.usage().count(&attempt.client_id, true);
            audit::issued(
                &subject,
                &issued.jti,
                issued.reused,
                attempt.federated.as_ref(),
            );
            let mut response = (
                StatusCode::OK,
                NO_STORE,
                [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
                rate_fields,
                response_body(&issued.response),
            )
                .into_response();
            // RFC 9449 section 8.2: the nonce for the client's next proof.
            if let Some(nonce) = state.dpop().nonce(state.clock().now()) {
                if let Ok(value) = HeaderValue::from_str(&nonce) {
                    response.headers_mut().insert("dpop-nonce", value);
                }
            }
            response
        }
        Err(error) => {
            state.metrics().refused(plan, error.code());
            if attempt.plan.is_some() {
                state.usage().count(&attempt.client_id, false);
                state
                    .refusals()
                    .record(&attempt.client_id, error.code(), state.clock().now());
            }
            audit::refused(&subject, error.code());
            error.with_headers(rate_fields).into_response()
        }
    };
    state.metrics().observe(started.elapsed());
    response
}

impl Attempt {
    /// Reads, authenticates, limits and answers one request, recording what it learns.
    async fn issue(
        &mut self,
        state: &AppState,
        source: Option<std::net::IpAddr>,
        parts: &Parts,
        body: Result<Bytes, OAuthError>,
        slot: &crate::limits::Slot,
    ) -> Result<Issued, OAuthError> {
        let config = state.config();
        let names = [
            "grant_type",
            "scope",
            "client_id",
            "client_secret",
            "client_assertion",
            "client_assertion_type",
        ];
        let pairs = read_form(parts, body, &names)?;
        let request = TokenRequest::from_form(&pairs).map_err(|e| {
            let description = e.error_description.unwrap_or_default();
            match e.error {
                ErrorCode::InvalidTarget => OAuthError::invalid_target(description),
                _ => OAuthError::invalid_request(description),
            }
        })?;
        if let Some(scope) = &request.scope {
            self.scope.clone_from(scope);
        }

        let assertion = crate::routes::single(&pairs, "client_assertion")?;
        let assertion_type = crate::routes::single(&pairs, "client_assertion_type")?;
        let registry = state.registry();
        let caller = authenticate_client(
            state,
            &registry,
            &parts.headers,
            source,
            crate::auth::FromBody {
                client_id: request.client_id.as_ref(),
                client_secret: request.client_secret.as_ref(),
                assertion: assertion.map(|jwt| crate::auth::Assertion {
                    kind: assertion_type,
                    jwt,
                }),
            },
            crate::routes::peer_certificate(state, parts).as_ref(),
            slot,
        )
        .await;
        self.client_id = caller.presented_id;
        self.federated = caller.federated;
        let bound_to = caller.bound_to;
        let plan = caller.plan?;
        self.plan = Some(plan.clone());

        // Rate limits apply to every token request of an identified client.
        if let Some(rate) = plan.token_rate {
            match state.limiter().check(&self.client_id, rate).await {
                Decision::Limited { retry_after_secs } => {
                    return Err(OAuthError::over_plan_rate(rate, retry_after_secs));
                }
                allowed => self.allowed_under = Some((rate, allowed)),
            }
        }

        if let GrantType::Other(_) = &request.grant_type {
            // Not echoed: the caller chose it, and it could be anything.
            return Err(OAuthError::unsupported_grant_type(
                "this grant_type is not supported; use client_credentials",
            ));
        }
        let now = state.clock().now();
        // RFC 9449 section 5: a valid proof binds the token to its key, per the plan.
        let jkt = match plan.dpop {
            DpopPolicy::Off => None,
            policy => match proof_header(&parts.headers).map_err(|e| OAuthError::dpop(&e, None))? {
                Some(proof) => {
                    let endpoint = format!("{}/connect/token", config.issuer.trim_end_matches('/'));
                    let htu = tessera_proto::dpop::htu(&endpoint).unwrap_or(endpoint);
                    Some(
                        state
                            .dpop()
                            .check(state, &self.client_id, proof, &htu, now)
                            .await?,
                    )
                }
                None if policy == DpopPolicy::Required => {
                    let nonce = state.dpop().nonce(now);
                    return Err(OAuthError::dpop(&DpopError::Missing, nonce.as_deref()));
                }
                None => None,
            },
        };

        // RFC 8707 section 2: the APIs the token is for, when named.
        let targets = resources(&request.resource, &plan.scopes, &config.issuer, &registry)?;
        let scopes = match (request.scope.as_deref(), &targets) {
            (Some(scope), _) => ScopeSet::parse(scope).map_err(|_| {
                OAuthError::invalid_scope("scope must be scope names separated by single spaces")
            })?,
            // Without scope, the resources name them.
            (None, Some(targets)) => targets.clone(),
            (None, None) => return Err(OAuthError::invalid_scope("scope is required")),
        };
        let refused = scopes.outside(&plan.scopes);
        if !refused.is_empty() {
            // Scopes some plan grants are named; anything else is only counted, so that
            // nothing a caller mistyped into the field (a secret) is echoed back.
            let (named, unknown): (Vec<&str>, Vec<&str>) = refused
                .iter()
                .map(|s| s.as_str())
                .partition(|name| registry.knows_scope(name));
            let mut parts: Vec<String> = named.iter().map(|name| (*name).to_owned()).collect();
            match unknown.len() {
                0 => {}
                1 => parts.push("1 scope no plan grants".to_owned()),
                n => parts.push(format!("{n} scopes no plan grants")),
            }
            let description = format!("not in the client's plan: {}", parts.join(", "));
            return Err(OAuthError::invalid_scope(description));
        }
        // RFC 8707 section 2: the token is narrowed to the scopes of the resources named.
        let scopes = match &targets {
            None => scopes,
            Some(targets) => {
                let narrowed = scopes.intersection(targets);
                if narrowed.is_empty() {
                    return Err(OAuthError::invalid_target(
                        "none of the requested scopes is for the requested resources",
                    ));
                }
                narrowed
            }
        };
        let scope = scopes.to_string();
        let client_id = self.client_id.as_str();
        let bound = bound_to.is_some() || jkt.is_some();
        let token_type = if jkt.is_some() {
            TokenType::DPoP
        } else {
            TokenType::Bearer
        };

        // A bound token is reused never: the next request may come with another key. Nor is
        // a federated one: another workload may act as the same client.
        let bound = bound || self.federated.is_some();
        if let Some(percent) = plan.reuse_percent.filter(|_| !bound) {
            let kept = state
                .reuse()
                .get(client_id, &scope, now, plan.token_ttl, percent, |jti| {
                    state.live().is_revoked(jti)
                });
            if let Some(kept) = kept {
                return Ok(Issued {
                    response: TokenResponse {
                        access_token: kept.token.to_string(),
                        token_type: TokenType::Bearer,
                        expires_in: (kept.exp - now) as u64,
                        scope: scopes,
                    },
                    jti: kept.jti,
                    reused: true,
                });
            }
        }

        let key = registry
            .keys
            .signing_key(now)
            .ok_or_else(|| OAuthError::unavailable("no active signing key"))?;
        let expires_in = u64::from(plan.token_ttl);
        let iat = now.max(0) as u64;
        let jti = secrets::random_token(16);
        let claims = SignedClaims {
            iss: &config.issuer,
            sub: client_id,
            client_id,
            aud: Audiences {
                scopes: &scopes,
                issuer: &config.issuer,
            },
            scope: &scope,
            iat,
            exp: iat + expires_in,
            jti: &jti,
            app_only: true,
            cnf: bound.then_some(Cnf {
                certificate: bound_to.as_deref(),
                jkt: jkt.as_deref(),
            }),
            federated_sub: self.federated.as_ref().map(|f| f.subject.as_str()),
        };
        let access_token = key.sign_jwt(&claims);
        let exp = claims.exp;
        let jti: Arc<str> = jti.into();
        if plan.reuse_percent.is_some() && !bound {
            let kept = Kept {
                token: access_token.as_str().into(),
                jti: jti.clone(),
                exp: exp as i64,
            };
            state.reuse().put(client_id, &scope, kept);
        }
        Ok(Issued {
            response: TokenResponse {
                access_token,
                token_type,
                expires_in,
                scope: scopes,
            },
            jti,
            reused: false,
        })
    }
}

/// The scopes of the `resource` values (RFC 8707 section 2), or `None` without any. A
/// resource is an API's identifier, the value its tokens carry in `aud`: the scope naming it,
/// or this issuer for the admin API. One the plan does not cover is `invalid_target`, named
/// only when some plan grants it (a mistyped value may be a secret).
fn resources(
    resource: &[String],
    plan_scopes: &ScopeSet,
    issuer: &str,
    registry: &crate::registry::Registry,
) -> Result<Option<ScopeSet>, OAuthError> {
    if resource.is_empty() {
        return Ok(None);
    }
    let issuer = issuer.trim_end_matches('/');
    let admin: Vec<&str> = plan_scopes
        .iter()
        .map(|s| s.as_str())
        .filter(|s| tessera_proto::scope::is_admin_scope(s))
        .collect();
    let mut names: Vec<&str> = Vec::new();
    for target in resource {
        if target.trim_end_matches('/') == issuer && !admin.is_empty() {
            names.extend(&admin);
        } else if plan_scopes.iter().any(|s| s.as_str() == target)
            && !tessera_proto::scope::is_admin_scope(target)
        {
            names.push(target);
        } else {
            return Err(OAuthError::invalid_target(
                if registry.knows_scope(target) {
                    format!("the client's plan does not cover the resource {target}")
                } else {
                    "a resource is not an API of the client's plan".to_owned()
                },
            ));
        }
    }
    ScopeSet::parse(&names.join(" "))
        .map(Some)
        .map_err(|_| OAuthError::invalid_target("the client's plan covers none of the resources"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::claims::Audience;
    use tessera_proto::AccessTokenClaims;

    #[test]
    fn the_written_body_is_the_json_of_the_response() {
        let response = TokenResponse {
            access_token: "eyJh.eyJz.c2ln-_".into(),
            token_type: TokenType::Bearer,
            expires_in: 3600,
            scope: ScopeSet::parse("news-api a!#$%&'()*+,-./:;<=>?@[]^_`{|}~").unwrap(),
        };
        let written: TokenResponse = serde_json::from_str(&response_body(&response)).unwrap();
        assert_eq!(written, response);
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
            }
        );
    }

    #[test]
    fn the_admin_scopes_name_the_issuer_once() {
        let scopes = ScopeSet::parse("tessera-admin news-api tessera-admin-read").unwrap();
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
