//! Trace context across the kits, behind the `otel` feature: each token request is a span
//! (`tessera_client token`), and it and every request of
//! [`TokenClient::send_authorized`](crate::TokenClient::send_authorized) carry the
//! `traceparent` (and `tracestate`) of the current span ([W3C Trace Context] section 3), so
//! that Tessera's and the API's spans join the caller's trace.
//!
//! The spans are `tracing` spans; they become OpenTelemetry spans, and the current span has
//! an OpenTelemetry context, when the application's subscriber has the
//! `tracing-opentelemetry` 0.32 layer (OpenTelemetry 0.31). Without it no header is sent.
//!
//! [W3C Trace Context]: https://www.w3.org/TR/trace-context/

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The header of W3C Trace Context section 3.2.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// The header of W3C Trace Context section 3.3.
pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The `traceparent` value of `context` (section 3.2.2: version `00`, the trace id, the
/// parent (span) id, the flags, lowercase hex), or `None` for a context that is not valid.
pub fn traceparent(context: &SpanContext) -> Option<String> {
    context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        )
    })
}

/// The remote span context a `traceparent` (and `tracestate`) names, or `None` when the
/// value does not follow section 3.2.2: two lowercase hex digits of version (not `ff`), 32
/// of trace id and 16 of parent id (neither all zeros), two of flags; a later version may
/// carry more after a dash, which is ignored (section 4.3).
pub fn parse_traceparent(value: &str, state: Option<&str>) -> Option<SpanContext> {
    let hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let version = value.get(..2)?;
    if !hex(version) || version == "ff" {
        return None;
    }
    let fixed = value.get(..55)?;
    let rest = &value[55..];
    if (version == "00" && !rest.is_empty()) || (!rest.is_empty() && !rest.starts_with('-')) {
        return None;
    }
    let mut parts = fixed.split('-');
    let (_, trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if trace.len() != 32 || parent.len() != 16 || flags.len() != 2 {
        return None;
    }
    if !(hex(trace) && hex(parent) && hex(flags)) {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let parent = SpanId::from_hex(parent).ok()?;
    if trace == TraceId::INVALID || parent == SpanId::INVALID {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let state = state
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    Some(SpanContext::new(
        trace,
        parent,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
        true,
        state,
    ))
}

/// Adds the current span's `traceparent` and `tracestate` to `headers`, when it has a valid
/// OpenTelemetry context.
pub fn inject(headers: &mut HeaderMap) {
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    let Some(parent) = traceparent(span_context) else {
        return;
    };
    if let Ok(value) = HeaderValue::from_str(&parent) {
        headers.insert(TRACEPARENT, value);
    }
    let state = span_context.trace_state().header();
    if !state.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&state) {
            headers.insert(TRACESTATE, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The examples of W3C Trace Context section 3.2.2 read and write back alike; malformed
    /// values are refused as the section says.
    #[test]
    fn traceparent_reads_and_writes_as_the_recommendation_says() {
        let value = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = parse_traceparent(value, Some("congo=t61rcWkgMzE")).unwrap();
        assert!(context.is_remote() && context.is_sampled());
        assert_eq!(traceparent(&context).unwrap(), value);
        assert_eq!(context.trace_state().header(), "congo=t61rcWkgMzE");
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert!(!parse_traceparent(unsampled, None).unwrap().is_sampled());
        // A later version may add fields after a dash.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what";
        assert!(parse_traceparent(later, None).is_some());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        ] {
            assert!(parse_traceparent(bad, None).is_none(), "{bad}");
        }
        assert!(traceparent(&SpanContext::empty_context()).is_none());
    }
}
