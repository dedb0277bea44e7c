//! Spans of the kit, behind the `otel` feature: one per token check (`tessera_verify
//! check`), the child of the current span or, when the application traces nothing of the
//! request, of its W3C `traceparent` ([W3C Trace Context] section 3.2); one per document
//! fetched from Tessera (`tessera_verify GET`), which sends `traceparent` on. They name the
//! client (`tessera.client_id`) and the refusal's error code, never the token.
//!
//! They become OpenTelemetry spans when the application's subscriber has the
//! `tracing-opentelemetry` 0.32 layer (OpenTelemetry 0.31).
//!
//! [W3C Trace Context]: https://www.w3.org/TR/trace-context/

use axum::http::HeaderMap;
use opentelemetry::trace::TraceContextExt as _;
use tessera_client::otel::{parse_traceparent, TRACEPARENT, TRACESTATE};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::extract::VerifiedToken;
use crate::rejection::AuthRejection;

/// The span of one token check of a request with `headers`.
pub(crate) fn check_span(headers: &HeaderMap) -> tracing::Span {
    let span = tracing::info_span!(
        target: "tessera_verify",
        "check",
        otel.name = "tessera_verify check",
        tessera.client_id = tracing::field::Empty,
        tessera.refusal = tracing::field::Empty,
    );
    let traced = tracing::Span::current()
        .context()
        .span()
        .span_context()
        .is_valid();
    if !traced {
        let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
        if let Some(remote) =
            header(TRACEPARENT).and_then(|p| parse_traceparent(p, header(TRACESTATE)))
        {
            let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
        }
    }
    span
}

/// Records on `span` what the check found: the client, or why the token was refused.
pub(crate) fn checked(span: &tracing::Span, checked: &Result<VerifiedToken, AuthRejection>) {
    match checked {
        Ok(token) => {
            span.record("tessera.client_id", token.claims().client_id.as_str());
        }
        Err(rejection) => {
            let code = rejection
                .error()
                .code()
                .map_or("limited_or_missing", |c| c.as_str());
            span.record("tessera.refusal", code);
        }
    }
}

/// The span of a GET of `url` (Tessera's metadata, keys or limits document).
pub(crate) fn fetch_span(url: &str) -> tracing::Span {
    tracing::info_span!(
        target: "tessera_verify",
        "fetch",
        otel.name = "tessera_verify GET",
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        http.request.method = "GET",
        url.full = url,
        http.response.status_code = tracing::field::Empty,
    )
}
