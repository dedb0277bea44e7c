//! What an admin handler takes, as extractors whose rejection is a [`Problem`] (as axum's
//! `customize-extractor-error` example does): a JSON body ([`ApiJson`], [`JsonOrDefault`]),
//! path parameters ([`ApiPath`]), the query string ([`Query`]) and `If-Match` ([`IfMatch`]).
//! The caller and its right are [`super::auth::Caller`]. So a handler's signature says what
//! it reads, and its body starts with the operation.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use serde::de::DeserializeOwned;

use crate::control::problem::Problem;

/// The largest request body the admin API reads.
pub(crate) const MAX_BODY: usize = 64 * 1024;

/// A JSON body (`application/json`) of at most [`MAX_BODY`] bytes, unknown fields refused,
/// the field at fault named when one is. An empty body is refused as invalid.
#[derive(Debug)]
pub(crate) struct ApiJson<T>(pub(crate) T);

/// [`ApiJson`] where an empty body takes the defaults (an optional body).
#[derive(Debug)]
pub(crate) struct JsonOrDefault<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = Problem;

    async fn from_request(request: Request, _: &S) -> Result<Self, Problem> {
        let (parts, body) = request.into_parts();
        let bytes = read_body(body).await?;
        parse_json(&parts.headers, &bytes).map(Self)
    }
}

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for JsonOrDefault<T> {
    type Rejection = Problem;

    async fn from_request(request: Request, _: &S) -> Result<Self, Problem> {
        let (parts, body) = request.into_parts();
        let bytes = read_body(body).await?;
        if bytes.is_empty() {
            return Ok(Self(T::default()));
        }
        parse_json(&parts.headers, &bytes).map(Self)
    }
}

/// Reads a body of at most [`MAX_BODY`] bytes: 413 past it.
pub(crate) async fn read_body(body: Body) -> Result<Bytes, Problem> {
    use http_body_util::{BodyExt, LengthLimitError, Limited};
    match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(Problem::too_large(MAX_BODY))
        }
        Err(_) => Err(Problem::invalid_body("could not read the request body")),
    }
}

/// Parses a body read by [`read_body`]: 415 unless `application/json`, 400 naming the field
/// at fault for JSON that is not the `T` expected.
pub(crate) fn parse_json<T: DeserializeOwned>(
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<T, Problem> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(Problem::unsupported_media_type());
    }
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut reader).map_err(|e| {
        let field = e.path().to_string();
        let problem = Problem::invalid_body(e.inner().to_string());
        if field == "." {
            problem
        } else {
            problem.field(field)
        }
    })?;
    reader
        .end()
        .map_err(|e| Problem::invalid_body(e.to_string()))?;
    Ok(value)
}

/// Path parameters; one that does not decode is 400 naming `path`.
#[derive(Debug)]
pub(crate) struct ApiPath<T>(pub(crate) T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| Self(value))
            .map_err(|e| Problem::invalid_parameter("path", e.body_text()))
    }
}

/// The query string's parameters, decoded strictly ([`tessera_proto::form::parse`]); a
/// malformed one is 400 naming `query`.
#[derive(Debug)]
pub(crate) struct Query(Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for Query {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        tessera_proto::form::parse(parts.uri.query().unwrap_or_default())
            .map(Self)
            .map_err(|e| Problem::invalid_parameter("query", e.to_string()))
    }
}

impl Query {
    /// The single value of parameter `name` ([`tessera_proto::form::single`]); a repeat is
    /// a problem naming it.
    pub(crate) fn single(&self, name: &str) -> Result<Option<&str>, Problem> {
        tessera_proto::form::single(&self.0, name)
            .map_err(|repeated| Problem::invalid_parameter(name, repeated.to_string()))
    }

    /// A whole-number parameter within `range`, `default` when absent.
    pub(crate) fn number<T>(
        &self,
        name: &str,
        default: T,
        range: std::ops::RangeInclusive<T>,
    ) -> Result<T, Problem>
    where
        T: std::str::FromStr + PartialOrd + std::fmt::Display,
    {
        match self.single(name)? {
            None => Ok(default),
            Some(value) => value
                .parse::<T>()
                .ok()
                .filter(|n| range.contains(n))
                .ok_or_else(|| {
                    Problem::invalid_parameter(
                        name,
                        format!(
                            "{name} must be a whole number from {} to {}",
                            range.start(),
                            range.end()
                        ),
                    )
                }),
        }
    }

    /// `from` and `to` of a usage query: UTC days (`YYYY-MM-DD`), inclusive.
    pub(crate) fn day_range(&self) -> Result<(Option<String>, Option<String>), Problem> {
        let day = |name: &str| -> Result<Option<String>, Problem> {
            match self.single(name)? {
                None => Ok(None),
                Some(day) if tessera_proto::clock::is_day(day) => Ok(Some(day.to_owned())),
                Some(_) => Err(Problem::invalid_parameter(
                    name,
                    format!("{name} must be a day as YYYY-MM-DD"),
                )),
            }
        };
        Ok((day("from")?, day("to")?))
    }
}

/// The `If-Match` values of a request (RFC 9110 section 13.1.1), checked by
/// [`IfMatch::check`] once the current version is known.
#[derive(Debug)]
pub(crate) struct IfMatch(Option<Vec<String>>);

impl<S: Send + Sync> FromRequestParts<S> for IfMatch {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        let mut values = parts.headers.get_all(header::IF_MATCH).iter().peekable();
        if values.peek().is_none() {
            return Ok(Self(None));
        }
        let tags = values
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|tag| tag.trim().to_owned())
            .collect();
        Ok(Self(Some(tags)))
    }
}

impl IfMatch {
    /// Goes on without `If-Match`, or if it names `current` (`*`: any existing version).
    /// Strong comparison: a weak tag never matches. 412 otherwise.
    pub(crate) fn check(&self, current: Option<&str>) -> Result<(), Problem> {
        let Some(tags) = &self.0 else {
            return Ok(());
        };
        let matches = tags.iter().any(|tag| match current {
            Some(current) => tag == "*" || tag == current,
            None => false,
        });
        if matches {
            Ok(())
        } else {
            Err(Problem::precondition_failed())
        }
    }
}
