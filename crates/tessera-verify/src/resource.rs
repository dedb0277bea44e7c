//! Protected resource metadata (RFC 9728): how an API tells a client which authorization
//! server issues its tokens, which scopes it needs, and how tokens are sent, so that a client
//! that only knows the API's URL can find where to get a token.
//!
//! [`Verifier::protected_resource_router`] serves the document at the well-known URI of the
//! API's resource URL (section 3.1), and every challenge of the verifier's extractors names
//! that URI in `resource_metadata` (section 5.1).

use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::Verifier;

/// The well-known suffix of RFC 9728 section 3.
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The metadata document of RFC 9728 section 2, with the members Tessera's APIs fill in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtectedResourceMetadata {
    /// The resource identifier: the API's URL.
    pub resource: String,
    /// The issuers whose tokens the API accepts (their RFC 8414 identifiers).
    pub authorization_servers: Vec<String>,
    /// The scopes the API's endpoints need.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes_supported: Vec<String>,
    /// How tokens are sent: `header` only (RFC 6750 section 2.1; the query is refused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bearer_methods_supported: Vec<String>,
    /// The algorithms DPoP proofs may use (RFC 9449 section 5.1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dpop_signing_alg_values_supported: Vec<String>,
}

/// The path of the metadata of `resource` (an absolute URL in `htu` form): the well-known
/// suffix inserted between the host and the resource's path (RFC 9728 section 3.1), the
/// path's trailing `/` dropped.
pub fn well_known_path(resource: &str) -> String {
    let (_, path) = split_origin(resource);
    format!("{WELL_KNOWN}{}", path.trim_end_matches('/'))
}

/// The URL of the metadata of `resource` (in `htu` form).
pub(crate) fn metadata_url(resource: &str) -> String {
    format!("{}{}", split_origin(resource).0, well_known_path(resource))
}

/// `scheme://authority` and the path (`/` when there is none) of an absolute URL.
pub(crate) fn split_origin(url: &str) -> (&str, &str) {
    let origin_len = url.split_once("://").map_or(url.len(), |(scheme, rest)| {
        scheme.len() + 3 + rest.find('/').unwrap_or(rest.len())
    });
    match url.split_at(origin_len) {
        (origin, "") => (origin, "/"),
        split => split,
    }
}

impl Verifier {
    /// The API's protected resource metadata, when it has a resource URL: this verifier's
    /// issuer as the authorization server, `scopes` as the scopes its endpoints need.
    pub fn protected_resource_metadata(
        &self,
        scopes: &[&str],
    ) -> Option<ProtectedResourceMetadata> {
        let resource = self.resource_url()?;
        Some(ProtectedResourceMetadata {
            resource: resource.to_owned(),
            authorization_servers: vec![self.issuer().to_owned()],
            scopes_supported: scopes.iter().map(|s| (*s).to_owned()).collect(),
            bearer_methods_supported: vec!["header".to_owned()],
            dpop_signing_alg_values_supported: tessera_proto::dpop::ALGORITHMS
                .iter()
                .map(|a| a.as_str().to_owned())
                .collect(),
        })
    }

    /// A router serving [`Verifier::protected_resource_metadata`] at its well-known path
    /// (RFC 9728 section 3), to merge into the API's router; empty without a resource URL.
    pub fn protected_resource_router<S>(&self, scopes: &[&str]) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        let Some(metadata) = self.protected_resource_metadata(scopes) else {
            return Router::new();
        };
        let path = well_known_path(&metadata.resource);
        Router::new().route(path.as_str(), get(move || async move { Json(metadata) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_well_known_uri_goes_between_host_and_path() {
        for (resource, url) in [
            (
                "https://api.example.com/",
                "https://api.example.com/.well-known/oauth-protected-resource",
            ),
            (
                "https://api.example.com/market/",
                "https://api.example.com/.well-known/oauth-protected-resource/market",
            ),
            (
                "http://127.0.0.1:8081/market/v1",
                "http://127.0.0.1:8081/.well-known/oauth-protected-resource/market/v1",
            ),
        ] {
            assert_eq!(metadata_url(resource), url, "{resource}");
        }
    }
}
