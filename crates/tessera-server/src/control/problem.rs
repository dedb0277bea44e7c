//! RFC 9457 problem details: how the admin API says no. One [`Problem`] per failure: the
//! contract's document ([`tessera_proto::admin::Problem`]), with a `type` URI from a short
//! fixed list (`urn:tessera:problem:…`, see docs/admin-api.md), the HTTP status, a `detail`
//! for people and, when one field of the request is at fault, its name in the extension
//! member `field`; and the headers that go with it: the bearer token failures of RFC 6750
//! section 3 add their `WWW-Authenticate` challenge.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tessera_proto::admin::{self as api, PROBLEM_JSON};
use tessera_verify::AuthRejection;

use crate::registrar::RegistrarError;

/// A problem document and the headers that go with it.
#[derive(Debug, Clone)]
pub(crate) struct Problem {
    body: api::Problem,
    /// `WWW-Authenticate`, `Retry-After`; boxed, since most problems carry none.
    headers: Option<Box<HeaderMap>>,
}

impl Problem {
    pub(crate) fn new(
        status: StatusCode,
        kind: &str,
        title: &str,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            body: api::Problem {
                kind: format!("urn:tessera:problem:{kind}"),
                title: title.to_owned(),
                status: status.as_u16(),
                detail: detail.into(),
                field: None,
            },
            headers: None,
        }
    }

    fn header(mut self, name: header::HeaderName, value: &str) -> Self {
        if let Ok(value) = HeaderValue::from_str(value) {
            self.headers
                .get_or_insert_with(Default::default)
                .insert(name, value);
        }
        self
    }

    fn append_header(mut self, name: header::HeaderName, value: &str) -> Self {
        if let Ok(value) = HeaderValue::from_str(value) {
            self.headers
                .get_or_insert_with(Default::default)
                .append(name, value);
        }
        self
    }

    /// Names the request field at fault.
    pub(crate) fn field(mut self, field: impl Into<String>) -> Self {
        self.body.field = Some(field.into());
        self
    }

    /// 400: the body is not the JSON expected (syntax, type, unknown or missing field).
    pub(crate) fn invalid_body(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid-body",
            "Invalid body",
            detail,
        )
    }

    /// 400: a value of the body out of range.
    pub(crate) fn invalid_field(field: &str, detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid-field",
            "Invalid field",
            detail,
        )
        .field(field)
    }

    /// 400: a bad query or path parameter.
    pub(crate) fn invalid_parameter(name: &str, detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid-parameter",
            "Invalid parameter",
            detail,
        )
        .field(name)
    }

    /// 401 (RFC 6750 section 3): no token (`error` `None`, the bare challenge), or
    /// `invalid_token`.
    pub(crate) fn unauthorized(
        realm: &str,
        error: Option<&str>,
        detail: impl Into<String>,
    ) -> Self {
        let detail = detail.into();
        let mut challenge = format!("Bearer realm=\"{realm}\"");
        if let Some(error) = error {
            challenge.push_str(&format!(
                ", error=\"{error}\", error_description=\"{}\"",
                quotable(&detail)
            ));
        }
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Unauthorized",
            detail,
        )
        .header(header::WWW_AUTHENTICATE, &challenge)
    }

    /// A token the verify kit refused ([`tessera_verify::Verifier::verify_request`]), as a
    /// problem with the challenge of RFC 6750 section 3 or RFC 9449 section 7.1:
    /// - no token: 401 with two bare challenges, `Bearer` then `DPoP`, the schemes accepted;
    /// - a malformed `Authorization` header: 400 `invalid_request`;
    /// - a token or proof that fails: 401 `invalid_token` or `invalid_dpop_proof`, challenged
    ///   with `DPoP` when the token or the request was DPoP's.
    pub(crate) fn refused_token(realm: &str, rejection: &AuthRejection) -> Self {
        use tessera_verify::dpop::ALGS as DPOP_ALGS;
        let error = rejection.error();
        let detail = rejection.to_string();
        let Some(code) = error.code() else {
            return Self::unauthorized(realm, None, "an access token is required").append_header(
                header::WWW_AUTHENTICATE,
                &format!("DPoP realm=\"{realm}\", algs=\"{DPOP_ALGS}\""),
            );
        };
        let (scheme, algs) = if error.challenges_dpop() {
            ("DPoP", format!(", algs=\"{DPOP_ALGS}\""))
        } else {
            ("Bearer", String::new())
        };
        let challenge = format!(
            "{scheme} realm=\"{realm}\", error=\"{code}\", error_description=\"{}\"{algs}",
            quotable(&detail)
        );
        let problem = if error.status() == StatusCode::BAD_REQUEST {
            Self::invalid_parameter("Authorization", detail)
        } else {
            Self::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Unauthorized",
                detail,
            )
        };
        problem.header(header::WWW_AUTHENTICATE, &challenge)
    }

    /// 403 `insufficient_scope` (RFC 6750 section 3.1): the token lacks `scope`.
    pub(crate) fn insufficient_scope(realm: &str, scope: &str) -> Self {
        let detail = format!("this operation needs a token with the scope {scope}");
        let challenge = format!(
            "Bearer realm=\"{realm}\", error=\"insufficient_scope\", \
             error_description=\"{detail}\", scope=\"{scope}\""
        );
        Self::new(StatusCode::FORBIDDEN, "forbidden", "Forbidden", detail)
            .header(header::WWW_AUTHENTICATE, &challenge)
    }

    /// 404.
    pub(crate) fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-found", "Not found", detail)
    }

    /// 405, with the methods the resource has.
    pub(crate) fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method not allowed",
            "this resource does not answer to that method",
        )
    }

    /// 409: the change conflicts with the state of the resource.
    pub(crate) fn conflict(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", "Conflict", detail)
    }

    /// 412: `If-Match` names another version (RFC 9110 section 13.1.1).
    pub(crate) fn precondition_failed() -> Self {
        Self::new(
            StatusCode::PRECONDITION_FAILED,
            "precondition-failed",
            "Precondition failed",
            "the object changed since the ETag given in If-Match was read; read it again",
        )
    }

    /// 413.
    pub(crate) fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "Body too large",
            format!("the request body is over {limit} bytes"),
        )
    }

    /// 415.
    pub(crate) fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "Unsupported media type",
            "the request body must be application/json",
        )
    }

    /// 422: an `Idempotency-Key` used before for another request.
    pub(crate) fn idempotency_key_reused() -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency-key-reused",
            "Idempotency key reused",
            "this Idempotency-Key was used for another request; use a new key per request",
        )
        .field("Idempotency-Key")
    }

    /// 503 for a cause the store's watch does not see (a remembered answer that cannot be
    /// opened, a verifier that cannot be built). The cause is logged, not sent.
    pub(crate) fn unavailable(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "an admin request failed in the store");
        Self::store_failed()
    }

    /// 503: the store failed the request. Its cause was logged by the store's watch
    /// (`store_watch.rs`), once per episode rather than once per request.
    pub(crate) fn store_failed() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Unavailable",
            "the store does not answer; retry later",
        )
        .header(header::RETRY_AFTER, "1")
    }

    /// 503: the store gave up a write that waited for a lock another database session
    /// holds, or cancelled it (`detail` says which); nothing was written. Retry after as
    /// long as the write waited: a long write will have moved on, a stuck session not.
    pub(crate) fn write_gave_up(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Unavailable",
            detail,
        )
        .header(
            header::RETRY_AFTER,
            &tessera_store::WRITE_LOCK_TIMEOUT.as_secs().to_string(),
        )
    }

    /// The status.
    pub(crate) fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.body.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

/// An error description that fits in a quoted-string: RFC 6749 section 5.2 allows
/// `%x20-21 / %x23-5B / %x5D-7E` only.
fn quotable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            ' '..='~' if c != '"' && c != '\\' => c,
            _ => '?',
        })
        .collect()
}

impl From<RegistrarError> for Problem {
    fn from(error: RegistrarError) -> Self {
        use tessera_store::StoreError;
        let detail = error.to_string();
        match error {
            RegistrarError::BadPlanName(_) => Problem::invalid_field("name", detail),
            RegistrarError::BadScopes(_) => Problem::invalid_field("scopes", detail),
            RegistrarError::BadTtl => Problem::invalid_field("token_ttl", detail),
            RegistrarError::BadRate => Problem::invalid_field("token_rate", detail),
            RegistrarError::BadReuse => Problem::invalid_field("reuse_percent", detail),
            RegistrarError::ApiNotGranted(ref api) => {
                Problem::invalid_field(&format!("api_limits.{api}"), detail)
            }
            RegistrarError::BadApiLimit { ref api, part, .. } => {
                Problem::invalid_field(&format!("api_limits.{api}.{part}"), detail)
            }
            RegistrarError::UnknownClient(_) | RegistrarError::UnknownOrg(_) => {
                Problem::not_found(detail)
            }
            RegistrarError::BadOrgId(_) => Problem::invalid_field("id", detail),
            RegistrarError::BadName => Problem::invalid_field("name", detail),
            RegistrarError::OrgHasClients(..) => Problem::conflict(detail),
            RegistrarError::PlanOfOrg(..) | RegistrarError::PlanAndOrg | RegistrarError::NoPlan => {
                Problem::invalid_field("plan", detail)
            }
            RegistrarError::NoSuchOrg(_) => Problem::invalid_field("org", detail),
            RegistrarError::NoSecret(_) => Problem::conflict(detail),
            RegistrarError::ManyMatches => {
                Problem::invalid_field("tls_client_auth_subject_dn", detail)
            }
            RegistrarError::BadTrustPolicy(field, _) => Problem::invalid_field(field, detail),
            RegistrarError::BadCertificate(_) => {
                Problem::invalid_field("token_endpoint_auth_method", detail)
            }
            RegistrarError::BadSubjectDn(_) => {
                Problem::invalid_field("tls_client_auth_subject_dn", detail)
            }
            RegistrarError::Store(StoreError::UnknownPlan(plan)) => {
                Problem::invalid_field("plan", format!("no plan named {plan:?}"))
            }
            RegistrarError::Store(StoreError::Duplicate(what)) => {
                Problem::conflict(format!("{what} already exists"))
            }
            RegistrarError::Store(error) if error.is_timeout() => {
                tracing::warn!(%error, "an admin write was not made");
                Problem::write_gave_up(detail)
            }
            RegistrarError::Store(other) => {
                tracing::debug!(error = %other, "an admin request failed in the store");
                Problem::store_failed()
            }
        }
    }
}

impl From<tessera_store::StoreError> for Problem {
    fn from(error: tessera_store::StoreError) -> Self {
        RegistrarError::Store(error).into()
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = serde_json::to_vec(&self.body).unwrap_or_default();
        let mut response = (
            status,
            [
                (header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON)),
                (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            ],
            body,
        )
            .into_response();
        if let Some(headers) = self.headers {
            response.headers_mut().extend(*headers);
        }
        response
    }
}
