//! The refusals every admin read or write may meet, as the OpenAPI document lists them for
//! each operation (`responses(..., ReadErrors)` in the handlers' `utoipa::path`).

use tessera_proto::admin::Problem;
use utoipa::IntoResponses;

/// The refusals every admin read may meet.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub(crate) enum ReadErrors {
    /// No token, or not one this server accepts (RFC 6750 section 3.1 `invalid_token`).
    #[response(status = 401, content_type = "application/problem+json")]
    Unauthorized(Problem),
    /// The token lacks the scope (`insufficient_scope`).
    #[response(status = 403, content_type = "application/problem+json")]
    Forbidden(Problem),
    /// A bad query or path parameter.
    #[response(status = 400, content_type = "application/problem+json")]
    BadRequest(Problem),
    /// The store does not answer.
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// The refusals every admin write may meet.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub(crate) enum WriteErrors {
    /// Malformed JSON, an unknown field, or a value out of range; `field` names it.
    #[response(status = 400, content_type = "application/problem+json")]
    BadRequest(Problem),
    /// No token, or not one this server accepts (RFC 6750 section 3.1 `invalid_token`).
    #[response(status = 401, content_type = "application/problem+json")]
    Unauthorized(Problem),
    /// The token lacks `tessera-admin` (`insufficient_scope`).
    #[response(status = 403, content_type = "application/problem+json")]
    Forbidden(Problem),
    /// A conflict with the stored state.
    #[response(status = 409, content_type = "application/problem+json")]
    Conflict(Problem),
    /// `If-Match` names an older version.
    #[response(status = 412, content_type = "application/problem+json")]
    PreconditionFailed(Problem),
    /// The request was not done within the server's request timeout (10 s by default), as
    /// when it is sent too slowly; never once it has sent its write, which is answered with
    /// its outcome.
    #[response(status = 408)]
    Timeout,
    /// Body over 64 KiB.
    #[response(status = 413, content_type = "application/problem+json")]
    TooLarge(Problem),
    /// Body not `application/json`.
    #[response(status = 415, content_type = "application/problem+json")]
    UnsupportedMediaType(Problem),
    /// The store does not answer, failed the write, or gave up waiting 3 s for a lock
    /// another database session holds (`detail` says which): nothing was changed.
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}
