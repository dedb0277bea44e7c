//! Client authentication at the token endpoint (RFC 6749 section 2.3.1).
//!
//! An unknown client, a wrong secret, an expired previous secret, a disabled client and a
//! client using a method it is not registered for all get the same `invalid_client`. An
//! unknown client is checked against a dummy hash so that it takes as long as a wrong secret.

use axum::http::{header, HeaderMap};
use tessera_proto::{BasicCredentials, ClientId, ClientSecret};
use tessera_store::{AuthMethod, Timestamp};

use crate::error::OAuthError;
use crate::registry::{ClientEntry, Registry};
use crate::secrets::Secrets;

/// The credentials a request presents, and how.
#[derive(Debug)]
pub struct Presented {
    /// Who the caller claims to be.
    pub client_id: ClientId,
    secret: ClientSecret,
    method: AuthMethod,
}

/// Same text for every failure, so the answer tells an attacker nothing.
const FAILED: &str = "client authentication failed";

/// Finds the credentials in the `Authorization` header or the body (`client_id` and
/// `client_secret` form parameters), never both.
pub fn presented(
    headers: &HeaderMap,
    body_id: Option<&ClientId>,
    body_secret: Option<&ClientSecret>,
    realm: &str,
) -> Result<Presented, OAuthError> {
    let mut authorization = headers.get_all(header::AUTHORIZATION).iter();
    let first = authorization.next();
    if authorization.next().is_some() {
        return Err(OAuthError::invalid_request(
            "more than one Authorization header",
        ));
    }
    match first {
        Some(value) => {
            if body_secret.is_some() {
                return Err(OAuthError::invalid_request(
                    "client credentials sent both in the Authorization header and in the body",
                ));
            }
            let value = value
                .to_str()
                .map_err(|_| OAuthError::invalid_request("malformed Authorization header"))?;
            let basic = BasicCredentials::from_header(value).map_err(|e| match e {
                tessera_proto::client::BasicError::NotBasic => {
                    OAuthError::invalid_client(realm, "use HTTP Basic client authentication")
                }
                tessera_proto::client::BasicError::Malformed => {
                    OAuthError::invalid_request("malformed Basic credentials")
                }
            })?;
            // A client_id in the body is tolerated alongside Basic only when it agrees.
            if body_id.is_some_and(|id| *id != basic.client_id) {
                return Err(OAuthError::invalid_request(
                    "client_id in the body differs from the Authorization header",
                ));
            }
            Ok(Presented {
                client_id: basic.client_id,
                secret: basic.client_secret,
                method: AuthMethod::ClientSecretBasic,
            })
        }
        None => match (body_id, body_secret) {
            (Some(id), Some(secret)) => Ok(Presented {
                client_id: id.clone(),
                secret: secret.clone(),
                method: AuthMethod::ClientSecretPost,
            }),
            _ => Err(OAuthError::invalid_client(
                realm,
                "client authentication required",
            )),
        },
    }
}

/// A dummy hash to check unknown clients against, so that they cost the same.
const DUMMY_HASH: [u8; 32] = [0; 32];

/// Checks presented credentials against the registry.
pub fn authenticate<'r>(
    registry: &'r Registry,
    secrets: &Secrets,
    presented: &Presented,
    now: Timestamp,
    realm: &str,
) -> Result<&'r ClientEntry, OAuthError> {
    let fail = || OAuthError::invalid_client(realm, FAILED);
    let Some(client) = registry.clients.get(presented.client_id.as_str()) else {
        let _ = secrets.verify_secret(&presented.secret, &DUMMY_HASH);
        return Err(fail());
    };
    let current = secrets.verify_secret(&presented.secret, &client.secret_hash);
    let previous = client
        .previous_secret
        .as_ref()
        .is_some_and(|(hash, until)| {
            now < *until && secrets.verify_secret(&presented.secret, hash)
        });
    if !(current || previous) {
        return Err(fail());
    }
    if client.auth_method != presented.method {
        return Err(OAuthError::invalid_client(
            realm,
            format!(
                "this client must authenticate with {}",
                client.auth_method.as_str()
            ),
        ));
    }
    if !client.enabled {
        return Err(OAuthError::invalid_client(realm, "client is disabled"));
    }
    Ok(client)
}
