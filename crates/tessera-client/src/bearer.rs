//! Presenting the token to an API (RFC 6750 section 2.1), and the one retry after the API
//! says the token is invalid (RFC 6750 section 3.1, `error="invalid_token"`).

use std::sync::Arc;

use reqwest::header::{HeaderMap, WWW_AUTHENTICATE};
use reqwest::{RequestBuilder, Response, StatusCode};

use crate::client::TokenClient;
use crate::error::Error;

impl TokenClient {
    /// Sends `request` with `Authorization: Bearer <token>`.
    ///
    /// If the API answers 401 with a `Bearer` challenge carrying `error="invalid_token"`
    /// (RFC 6750 section 3.1; a token revoked or signed with a retired key, say), the token is
    /// dropped from the cache, a new one is fetched, and the request is sent once more. A
    /// request whose body cannot be cloned (a stream) is not sent again: its first answer is
    /// returned. Any other answer, a second 401 included, is returned as it is. At most one
    /// token is dropped this way per 30 s, so an API that refuses every token (a wrong
    /// audience, say) does not turn each call into a token request.
    pub async fn send_authorized(&self, request: RequestBuilder) -> Result<Response, Error> {
        let again = request.try_clone();
        let token = self.token().await?;
        let response = send(request, token.expose()).await?;
        let Some(again) = again else {
            return Ok(response);
        };
        if response.status() != StatusCode::UNAUTHORIZED || !invalid_token(response.headers()) {
            return Ok(response);
        }
        self.invalidate(&token);
        let token = self.token().await?;
        send(again, token.expose()).await
    }
}

async fn send(request: RequestBuilder, token: &str) -> Result<Response, Error> {
    request
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| Error::Api(Arc::new(e)))
}

/// Whether a `WWW-Authenticate` challenge of the `Bearer` scheme has `error="invalid_token"`.
fn invalid_token(headers: &HeaderMap) -> bool {
    headers
        .get_all(WWW_AUTHENTICATE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| {
            challenges(value).iter().any(|(scheme, params)| {
                scheme.eq_ignore_ascii_case("bearer")
                    && params.iter().any(|(name, value)| {
                        name.eq_ignore_ascii_case("error") && value == "invalid_token"
                    })
            })
        })
}

/// Splits a `WWW-Authenticate` value into challenges and their parameters (RFC 9110 section
/// 11.6.1): `scheme [param *("," param)] *("," challenge)`, where a parameter value is a
/// token or a quoted string. A `token68` reads as a parameter with an odd name, which is
/// harmless here.
fn challenges(value: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for item in split_outside_quotes(value) {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let word_end = item.find([' ', '\t', '=']).unwrap_or(item.len());
        let rest = item[word_end..].trim_start();
        let param = if rest.starts_with('=') {
            // `name=value` or `name = value`: a parameter of the current challenge.
            Some(item)
        } else {
            out.push((item[..word_end].to_owned(), Vec::new()));
            (!rest.is_empty()).then_some(rest)
        };
        if let (Some(param), Some((_, params))) = (param, out.last_mut()) {
            if let Some((name, value)) = param.split_once('=') {
                params.push((name.trim().to_owned(), unquote(value.trim())));
            }
        }
    }
    out
}

/// Splits at commas that are not inside a quoted string.
fn split_outside_quotes(value: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in value.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                parts.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&value[start..]);
    parts
}

/// The value of a quoted string (RFC 9110 section 5.6.4), or a token as it is.
fn unquote(value: &str) -> String {
    let Some(inner) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        return value.to_owned();
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' {
            chars.next().unwrap_or(c)
        } else {
            c
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn headers(values: &[&'static str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append(WWW_AUTHENTICATE, HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn finds_invalid_token_in_a_bearer_challenge() {
        for value in [
            r#"Bearer realm="example", error="invalid_token", error_description="The access token expired""#,
            r#"Bearer error=invalid_token"#,
            r#"bearer realm = "a, b", error = "invalid_token""#,
            r#"Basic realm="x", Bearer realm="y", error="invalid_token""#,
        ] {
            assert!(invalid_token(&headers(&[value])), "{value}");
        }
        assert!(invalid_token(&headers(&[
            r#"Basic realm="x""#,
            r#"Bearer error="invalid_token""#
        ])));
    }

    #[test]
    fn other_challenges_are_not_invalid_token() {
        for value in [
            r#"Bearer realm="example""#,
            r#"Bearer error="insufficient_scope", scope="oms-api""#,
            r#"Basic realm="x", error="invalid_token""#,
            r#"Bearer error_description="error=\"invalid_token\"""#,
            r#"Bearer realm="error=invalid_token""#,
        ] {
            assert!(!invalid_token(&headers(&[value])), "{value}");
        }
        assert!(!invalid_token(&HeaderMap::new()));
    }

    #[test]
    fn parses_challenges_and_quoted_strings() {
        let parsed = challenges(
            r#"Newauth realm="apps", type=1, title="Login to \"apps\"", Basic realm="simple""#,
        );
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].0, "Newauth");
        assert_eq!(
            parsed[0].1,
            [
                ("realm".to_owned(), "apps".to_owned()),
                ("type".to_owned(), "1".to_owned()),
                ("title".to_owned(), "Login to \"apps\"".to_owned()),
            ]
        );
        assert_eq!(parsed[1].0, "Basic");
    }
}
