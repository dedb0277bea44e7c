//! The admin API under `/admin/v1` (docs/admin-api.md): plans, clients, usage and signing
//! keys as JSON resources, for a platform team's own tooling. It is one more client of the
//! same operations as the CLI ([`crate::registrar::Registrar`]), guarded by Tessera's own tokens
//! (`auth.rs`), with RFC 9457 problem documents for every refusal.
//!
//! - `auth.rs`: the bearer token (RFC 6750), verified with `tessera-verify`.
//! - `plans.rs`, `clients.rs`, `keys.rs`: the resources.
//! - here: what they share: JSON bodies, `ETag` and `If-Match` (RFC 9110 sections 8.8.3
//!   and 13.1.1), and the step every change ends with.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::de::DeserializeOwned;
use serde::Serialize;

use tessera_proto::admin as api;

use crate::error::problem::Problem;
use crate::registrar::views;
use crate::AppState;

mod auth;
pub(crate) mod clients;
pub(crate) mod keys;
pub(crate) mod plans;
pub(crate) mod trust;

/// The largest request body the admin API reads.
pub(crate) const MAX_BODY: usize = 64 * 1024;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .merge(plans::router())
        .merge(clients::router())
        .merge(keys::router())
        .merge(trust::router())
        .fallback(|| async { Problem::not_found("no such admin resource") })
        .method_not_allowed_fallback(|| async { Problem::method_not_allowed() })
}

/// Reads a JSON body of at most [`MAX_BODY`] bytes, refusing unknown fields, and names the
/// field at fault when one is. An empty body reads as `{}` where `empty_is_default`.
pub(crate) async fn read_json<T: DeserializeOwned + Default>(
    headers: &HeaderMap,
    body: Body,
    empty_is_default: bool,
) -> Result<T, Problem> {
    let bytes = read_body(body).await?;
    if bytes.is_empty() && empty_is_default {
        return Ok(T::default());
    }
    parse_json(headers, &bytes)
}

/// Parses a body read by [`read_body`] as [`read_json`] does.
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

/// Reads a body of at most [`MAX_BODY`] bytes.
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

/// A strong entity tag of an object's stored state (RFC 9110 section 8.8.3): 128 bits of
/// SHA-256 over what `state` prints, so any change to the object changes it.
pub(crate) fn etag(state: &impl std::fmt::Debug) -> String {
    let digest =
        aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, format!("{state:?}").as_bytes());
    format!("\"{}\"", URL_SAFE_NO_PAD.encode(&digest.as_ref()[..16]))
}

/// RFC 9110 section 13.1.1: with `If-Match`, go on only if it names the current version
/// (`*`: any existing one). Strong comparison: a weak tag never matches.
pub(crate) fn if_match(headers: &HeaderMap, current: Option<&str>) -> Result<(), Problem> {
    let mut values = headers.get_all(header::IF_MATCH).iter().peekable();
    if values.peek().is_none() {
        return Ok(());
    }
    let matches = values
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|tag| match current {
            Some(current) => tag == "*" || tag == current,
            None => false,
        });
    if matches {
        Ok(())
    } else {
        Err(Problem::precondition_failed())
    }
}

/// A JSON answer with its `ETag`.
pub(crate) fn json(status: StatusCode, body: &impl Serialize, etag: Option<&str>) -> Response {
    let mut response = (
        status,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        serde_json::to_vec(body).unwrap_or_default(),
    )
        .into_response();
    if let Some(tag) = etag.and_then(|t| HeaderValue::from_str(t).ok()) {
        response.headers_mut().insert(header::ETAG, tag);
    }
    response
}

/// Ends every change: brings this instance's registry up to date before the answer is
/// sent, so the change is in force here at once (others see it at their next poll).
pub(crate) async fn in_force(state: &AppState) {
    if let Err(error) = state.sync().await {
        tracing::warn!(%error, "the change is stored; reading it back failed, the next poll will");
    }
}

/// A query string's parameters; a malformed one is 400.
pub(crate) fn query(raw: Option<&str>) -> Result<Vec<(String, String)>, Problem> {
    tessera_proto::form::parse(raw.unwrap_or_default())
        .map_err(|e| Problem::invalid_parameter("query", e.to_string()))
}

/// The single value of query parameter `name` ([`tessera_proto::form::single`]); a repeat
/// is a problem naming it.
pub(crate) fn param<'a>(
    pairs: &'a [(String, String)],
    name: &str,
) -> Result<Option<&'a str>, Problem> {
    tessera_proto::form::single(pairs, name)
        .map_err(|repeated| Problem::invalid_parameter(name, repeated.to_string()))
}

/// A whole-number query parameter within `range`, `default` when absent.
pub(crate) fn number_param<T>(
    pairs: &[(String, String)],
    name: &str,
    default: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, Problem>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
{
    match param(pairs, name)? {
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

/// `from` and `to` of a usage query: UTC days, inclusive.
pub(crate) fn day_range(raw: Option<&str>) -> Result<(Option<String>, Option<String>), Problem> {
    let pairs = query(raw)?;
    let day = |name: &str| -> Result<Option<String>, Problem> {
        match param(&pairs, name)? {
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

/// The answer of a handler body: its response or its problem.
pub(crate) async fn run(
    handler: impl std::future::Future<Output = Result<Response, Problem>>,
) -> Response {
    handler.await.unwrap_or_else(IntoResponse::into_response)
}

/// A path parameter; one that does not decode is 400.
pub(crate) fn path(
    path: Result<axum::extract::Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<String, Problem> {
    path.map(|axum::extract::Path(p)| p)
        .map_err(|e| Problem::invalid_parameter("path", e.body_text()))
}

/// Usage over days, as the usage endpoints answer: the days within `from` and `to`.
pub(crate) fn usage_within(
    (from, to): (Option<String>, Option<String>),
    usage: Vec<tessera_store::Usage>,
) -> api::Usage {
    let days = usage
        .into_iter()
        .filter(|u| from.as_ref().is_none_or(|f| u.day >= *f))
        .filter(|u| to.as_ref().is_none_or(|t| u.day <= *t))
        .collect();
    api::Usage {
        from,
        to,
        days: views::usage_days(days),
    }
}
