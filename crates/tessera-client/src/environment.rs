//! Where the token endpoint is: `{auth_url}/connect/token` in production and
//! `{auth_url_stage}/connect/token` in staging. Neither address is built in; each comes from
//! the builder or, with its `from_env`, from the environment.

use std::fmt;
use std::net::IpAddr;

use reqwest::Url;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::BuildError;

/// The variable holding the production base URL, `{auth_url}`.
pub const PRODUCTION_URL_VAR: &str = "TESSERA_AUTH_URL";
/// The variable holding the staging base URL, `{auth_url_stage}`.
pub const STAGING_URL_VAR: &str = "TESSERA_AUTH_URL_STAGE";

/// Which Tessera deployment to ask for tokens. Credentials of one are unknown to the other,
/// and tokens are cached apart (see [`CacheKey`](crate::CacheKey)).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Environment {
    /// `{auth_url}`: from the builder's `production_url` or (`from_env`) [`PRODUCTION_URL_VAR`].
    Production,
    /// `{auth_url_stage}`: from the builder's `staging_url` or (`from_env`) [`STAGING_URL_VAR`].
    Staging,
    /// Any other deployment, by its base URL (the token endpoint is `{url}/connect/token`).
    Custom(Url),
}

impl fmt::Display for Environment {
    /// `production`, `staging`, or the custom base URL.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Production => f.write_str("production"),
            Self::Staging => f.write_str("staging"),
            Self::Custom(url) => f.write_str(url.as_str()),
        }
    }
}

impl Serialize for Environment {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Environment {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        match s.as_str() {
            "production" => Ok(Self::Production),
            "staging" => Ok(Self::Staging),
            url => Url::parse(url)
                .map(Self::Custom)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// The base URLs the builder was given; an absent one is read with `lookup`.
#[derive(Debug, Default, Clone)]
pub(crate) struct BaseUrls {
    pub(crate) production: Option<Url>,
    pub(crate) staging: Option<Url>,
    /// Plain `http` to hosts other than loopback.
    pub(crate) allow_http: bool,
}

impl BaseUrls {
    /// The token endpoint of `environment` (the seed's `{auth_url}/connect/token`).
    #[cfg(test)]
    pub(crate) fn token_endpoint(
        &self,
        environment: &Environment,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Url, BuildError> {
        self.base(environment, lookup)
            .map(|base| token_endpoint(&base))
    }

    /// The base URL of `environment`, `{auth_url}`, checked.
    pub(crate) fn base(
        &self,
        environment: &Environment,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Url, BuildError> {
        let (configured, variable) = match environment {
            Environment::Custom(url) => (Some(url.clone()), None),
            Environment::Production => (self.production.clone(), Some(PRODUCTION_URL_VAR)),
            Environment::Staging => (self.staging.clone(), Some(STAGING_URL_VAR)),
        };
        let base = match (configured, variable) {
            (Some(url), _) => url,
            (None, Some(variable)) => {
                let raw = lookup(variable)
                    .filter(|v| !v.trim().is_empty())
                    .ok_or_else(|| BuildError::MissingBaseUrl {
                        environment: environment.to_string(),
                        variable,
                    })?;
                Url::parse(raw.trim()).map_err(|e| BuildError::InvalidBaseUrl {
                    url: raw.clone(),
                    reason: e.to_string(),
                })?
            }
            (None, None) => unreachable!("a custom environment carries its URL"),
        };
        self.check(&base)?;
        Ok(base)
    }

    /// The token request carries the client secret, so it goes over TLS (RFC 6749 section
    /// 2.3.1); plain `http` is accepted for loopback, where tests and local servers live.
    fn check(&self, base: &Url) -> Result<(), BuildError> {
        let invalid = |reason: &str| BuildError::InvalidBaseUrl {
            url: base.to_string(),
            reason: reason.to_owned(),
        };
        if base.query().is_some() || base.fragment().is_some() {
            return Err(invalid("a base URL has no query or fragment"));
        }
        match base.scheme() {
            "https" => Ok(()),
            "http" if self.allow_http || is_loopback(base) => Ok(()),
            "http" => Err(BuildError::InsecureUrl {
                url: base.to_string(),
            }),
            _ => Err(invalid("the scheme must be https")),
        }
    }
}

/// The token endpoint of the deployment at `base`: `{base}/connect/token`.
pub(crate) fn token_endpoint(base: &Url) -> Url {
    let mut endpoint = base.clone();
    endpoint.set_path(&format!(
        "{}/connect/token",
        base.path().trim_end_matches('/')
    ));
    endpoint
}

/// The issuer identifier (RFC 8414 section 2) of the deployment at `base`: the base URL
/// without a trailing slash, as Tessera names itself in its tokens and its metadata.
pub(crate) fn issuer(base: &Url) -> String {
    base.as_str().trim_end_matches('/').to_owned()
}

fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn builder_urls_win_over_the_environment() {
        let urls = BaseUrls {
            production: Some(url("https://auth.example.com/")),
            staging: Some(url("https://auth-stage.example.com/tenant/")),
            allow_http: false,
        };
        let env = |_: &str| Some("https://elsewhere.example.com".to_owned());
        let prod = urls.token_endpoint(&Environment::Production, env).unwrap();
        assert_eq!(prod.as_str(), "https://auth.example.com/connect/token");
        let stage = urls.token_endpoint(&Environment::Staging, env).unwrap();
        assert_eq!(
            stage.as_str(),
            "https://auth-stage.example.com/tenant/connect/token"
        );
    }

    #[test]
    fn each_environment_reads_its_own_variable() {
        let env = |name: &str| match name {
            PRODUCTION_URL_VAR => Some("https://auth.example.com".to_owned()),
            STAGING_URL_VAR => Some("https://auth-stage.example.com".to_owned()),
            _ => None,
        };
        let urls = BaseUrls::default();
        let prod = urls.token_endpoint(&Environment::Production, env).unwrap();
        let stage = urls.token_endpoint(&Environment::Staging, env).unwrap();
        assert_eq!(prod.host_str(), Some("auth.example.com"));
        assert_eq!(stage.host_str(), Some("auth-stage.example.com"));
    }

    #[test]
    fn a_missing_base_url_names_its_variable() {
        let err = BaseUrls::default()
            .token_endpoint(&Environment::Staging, no_env)
            .unwrap_err();
        assert!(matches!(
            err,
            BuildError::MissingBaseUrl {
                variable: STAGING_URL_VAR,
                ..
            }
        ));
        assert!(err.to_string().contains(STAGING_URL_VAR));
        let bad = |_: &str| Some("not a url".to_owned());
        assert!(matches!(
            BaseUrls::default().token_endpoint(&Environment::Production, bad),
            Err(BuildError::InvalidBaseUrl { .. })
        ));
    }

    #[test]
    fn plain_http_only_to_loopback_unless_allowed() {
        let urls = BaseUrls::default();
        for ok in [
            "http://127.0.0.1:8080",
            "http://localhost",
            "http://[::1]:9/",
        ] {
            let env = Environment::Custom(url(ok));
            assert!(urls.token_endpoint(&env, no_env).is_ok(), "{ok}");
        }
        let remote = Environment::Custom(url("http://auth.example.com"));
        assert!(matches!(
            urls.token_endpoint(&remote, no_env),
            Err(BuildError::InsecureUrl { .. })
        ));
        let allowed = BaseUrls {
            allow_http: true,
            ..BaseUrls::default()
        };
        assert!(allowed.token_endpoint(&remote, no_env).is_ok());
        let ftp = Environment::Custom(url("ftp://auth.example.com"));
        assert!(urls.token_endpoint(&ftp, no_env).is_err());
        let query = Environment::Custom(url("https://auth.example.com/?a=b"));
        assert!(urls.token_endpoint(&query, no_env).is_err());
    }

    #[test]
    fn environments_round_trip_as_strings() {
        for env in [
            Environment::Production,
            Environment::Staging,
            Environment::Custom(url("https://auth.example.com/x")),
        ] {
            let json = serde_json::to_string(&env).unwrap();
            assert_eq!(serde_json::from_str::<Environment>(&json).unwrap(), env);
        }
        assert_eq!(
            serde_json::to_string(&Environment::Staging).unwrap(),
            "\"staging\""
        );
    }
}
