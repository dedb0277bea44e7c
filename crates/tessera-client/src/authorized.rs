//! Presenting the token to an API: as a bearer token (RFC 6750 section 2.1), or as a DPoP
//! token with a proof for the request (RFC 9449 section 7.1); one retry when the API asks for
//! a DPoP nonce (section 9), and one after it says the token is invalid (RFC 6750 section
//! 3.1, `error="invalid_token"`).

use std::sync::Arc;

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, WWW_AUTHENTICATE};
use reqwest::{Request, RequestBuilder, Response, StatusCode};
use tessera_proto::token::TokenType;

use crate::cache::AccessToken;
use crate::client::TokenClient;
use crate::dpop::{NONCE_HEADER, PROOF_HEADER};
use crate::error::Error;

impl TokenClient {
    /// Sends `request` with the client's token: `Authorization: Bearer <token>`, or, for a
    /// token bound to the client's [DPoP key](crate::TokenClientBuilder::dpop),
    /// `Authorization: DPoP <token>` and a `DPoP` proof for this request's method and URL
    /// that carries the token's hash (`ath`) and the API's last nonce (RFC 9449 section 7.1).
    ///
    /// Two answers are worth sending the request again, each at most once:
    ///
    /// - 401 with a `DPoP` challenge carrying `error="use_dpop_nonce"` and a `DPoP-Nonce`
    ///   header (RFC 9449 section 9): sent again at once with a proof carrying that nonce,
    ///   which is also put in later proofs to the same origin.
    /// - 401 with a challenge of the token's scheme carrying `error="invalid_token"`
    ///   (RFC 6750 section 3.1; a token revoked or signed with a retired key, say): the token
    ///   is dropped from the cache, a new one is fetched, and the request is sent again. At
    ///   most one token is dropped this way per 30 s, so an API that refuses every token (a
    ///   wrong audience, say) does not turn each call into a token request.
    ///
    /// A request whose body cannot be cloned (a stream) is not sent again: its first answer
    /// is returned. Any other answer is returned as it is.
    pub async fn send_authorized(&self, request: RequestBuilder) -> Result<Response, Error> {
        let (http, request) = request.build_split();
        let mut request = request.map_err(api_error)?;
        let mut token = self.token().await?;
        let (mut nonce_retried, mut refreshed) = (false, false);
        loop {
            let again = request.try_clone();
            let response = self.present(&http, request, &token).await?;
            let Some(again) = again else {
                return Ok(response);
            };
            if response.status() != StatusCode::UNAUTHORIZED {
                return Ok(response);
            }
            let scheme = token.token_type().as_str();
            let headers = response.headers();
            // The nonce itself was kept by `present`.
            if !nonce_retried
                && token.token_type() == TokenType::DPoP
                && has_error(headers, scheme, "use_dpop_nonce")
                && headers.contains_key(NONCE_HEADER)
            {
                nonce_retried = true;
            } else if !refreshed && has_error(headers, scheme, "invalid_token") {
                refreshed = true;
                self.invalidate(&token);
                token = self.token().await?;
            } else {
                return Ok(response);
            }
            request = again;
        }
    }

    /// Sends `request` once with `token`, as its type says; keeps the nonce of a DPoP answer.
    async fn present(
        &self,
        http: &reqwest::Client,
        mut request: Request,
        token: &AccessToken,
    ) -> Result<Response, Error> {
        let scheme = token.token_type().as_str();
        let mut authorization = HeaderValue::from_str(&format!("{scheme} {}", token.expose()))
            .expect("an access token is visible ASCII, as checked when it was received");
        authorization.set_sensitive(true);
        request.headers_mut().insert(AUTHORIZATION, authorization);
        let dpop = self
            .dpop
            .as_ref()
            .filter(|_| token.token_type() == TokenType::DPoP);
        let server = origin(request.url());
        if let Some(dpop) = dpop {
            let nonce = dpop.nonce(&server);
            let proof = dpop.key.proof_at(
                self.clock.now(),
                request.method().as_str(),
                request.url().as_str(),
                Some(token.expose()),
                nonce.as_deref(),
            );
            let proof = HeaderValue::from_str(&proof).expect("a JWS is visible ASCII");
            request.headers_mut().insert(PROOF_HEADER, proof);
        }
        #[cfg(feature = "otel")]
        crate::otel::inject(request.headers_mut());
        let response = http.execute(request).await.map_err(api_error)?;
        if let Some(dpop) = dpop {
            // RFC 9449 section 9: an API may give the next nonce with any answer.
            dpop.remember(&server, response.headers());
        }
        Ok(response)
    }
}

fn api_error(e: reqwest::Error) -> Error {
    Error::Api(Arc::new(e))
}

/// The server a nonce is kept for: the URL's origin (RFC 6454), `scheme://host[:port]`.
fn origin(url: &reqwest::Url) -> String {
    url.origin().ascii_serialization()
}

/// Whether a `WWW-Authenticate` challenge of `scheme` has `error="<error>"`.
fn has_error(headers: &HeaderMap, scheme: &str, error: &str) -> bool {
    headers
        .get_all(WWW_AUTHENTICATE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| {
            challenges(value).iter().any(|(name, params)| {
                name.eq_ignore_ascii_case(scheme)
                    && params
                        .iter()
                        .any(|(name, value)| name.eq_ignore_ascii_case("error") && value == error)
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
            assert!(
                has_error(&headers(&[value]), "Bearer", "invalid_token"),
                "{value}"
            );
        }
        assert!(has_error(
            &headers(&[r#"Basic realm="x""#, r#"Bearer error="invalid_token""#]),
            "Bearer",
            "invalid_token"
        ));
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
            assert!(
                !has_error(&headers(&[value]), "Bearer", "invalid_token"),
                "{value}"
            );
        }
        assert!(!has_error(&HeaderMap::new(), "Bearer", "invalid_token"));
    }

    #[test]
    fn finds_the_errors_of_a_dpop_challenge() {
        // RFC 9449 sections 7.1 and 9.
        let nonce = headers(&[
            r#"DPoP error="use_dpop_nonce", error_description="Resource server requires nonce in DPoP proof""#,
        ]);
        assert!(has_error(&nonce, "DPoP", "use_dpop_nonce"));
        assert!(!has_error(&nonce, "Bearer", "use_dpop_nonce"));
        assert!(!has_error(&nonce, "DPoP", "invalid_token"));
        let both =
            headers(&[r#"Bearer realm="api", DPoP algs="EdDSA ES256", error="invalid_token""#]);
        assert!(has_error(&both, "dpop", "invalid_token"));
        assert!(!has_error(&both, "Bearer", "invalid_token"));
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
