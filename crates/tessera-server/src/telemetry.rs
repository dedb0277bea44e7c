//! OpenTelemetry traces: `serve` exports spans over OTLP/HTTP when the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, and does
//! nothing at all otherwise.
//!
//! One span per request, a server span named `METHOD ROUTE` (`http.request.method`,
//! `http.route`, `http.response.status_code`, `tessera.client_id` once the caller is known;
//! never the path's query, a header, a secret or a token), the child of an incoming W3C
//! `traceparent` ([W3C Trace Context] section 3.2); below it a span for each store call
//! (`store_watch.rs`), each Redis command (`limits/redis.rs`) and each outbound key fetch
//! (`fetch.rs`, which sends `traceparent` on). Work outside a request (the registry sync,
//! the housekeeping) makes no trace.
//!
//! Spans are `tracing` spans of the target [`TARGET`], which the bridge
//! (`tracing-opentelemetry`) turns into OpenTelemetry spans; beside each request span a
//! second span of the target [`LOG_TARGET`], holding only `trace_id`, is what the log
//! sees, so that every log line and audit event written inside a request carries its trace
//! id (`logging.rs`).
//!
//! With no `OTEL_` endpoint the subscriber disables every span at its callsite, so a span
//! macro costs a cached load and a branch; the request layer is not even in the router
//! (`on()`).
//!
//! [W3C Trace Context]: https://www.w3.org/TR/trace-context/

use std::time::Duration;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The target of the spans exported.
pub const TARGET: &str = "tessera::trace";

/// The target of the span, beside each request's, through which log lines carry the trace
/// id.
pub const LOG_TARGET: &str = "tessera::trace_id";

/// Whether spans are recorded: the process's subscriber was installed with [`Telemetry`]
/// (`logging::init`). Reads the callsite's cached interest: a load and a branch.
pub(crate) fn on() -> bool {
    tracing::span_enabled!(target: TARGET, tracing::Level::INFO)
}

/// A span for a call made on behalf of the request in progress (a store call, a Redis
/// command, a fetch): disabled when spans are off, and when no request span is current, so
/// that background work makes no trace of its own.
macro_rules! child_span {
    ($name:expr, $($fields:tt)*) => {
        if $crate::telemetry::on() && !tracing::Span::current().is_none() {
            tracing::info_span!(target: "tessera::trace", $name, $($fields)*)
        } else {
            tracing::Span::none()
        }
    };
}
pub(crate) use child_span;

/// Why tracing could not be set up from the environment.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` names a protocol this build does not speak.
    #[error(
        "{variable}={value}: Tessera exports traces over OTLP/HTTP only; set it to \
         http/protobuf (the default) or http/json"
    )]
    Protocol {
        /// The variable that said it.
        variable: &'static str,
        /// What it said.
        value: String,
    },
    /// The exporter refused its settings (an endpoint that is not a URL...).
    #[error("cannot export traces: {0}")]
    Exporter(String),
}

/// The tracer provider: the SDK's batch processor and OTLP/HTTP exporter, on a thread of
/// their own. Flushed and stopped by [`Telemetry::shutdown`] (or when dropped).
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
    /// Where spans go, for the banner.
    endpoint: String,
    protocol: &'static str,
}

/// The variables read, in the order the OpenTelemetry specification gives them weight.
const ENDPOINTS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];
const PROTOCOLS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
];

impl Telemetry {
    /// Tracing as the environment asks: `None` unless an OTLP endpoint is set (and
    /// `OTEL_SDK_DISABLED` is not `true`, nor `OTEL_TRACES_EXPORTER` `none`). The exporter
    /// and the SDK read the rest of the standard variables themselves: the endpoint's
    /// headers and timeout (`OTEL_EXPORTER_OTLP_HEADERS`, `..._TIMEOUT`), the sampler
    /// (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`), the batch processor
    /// (`OTEL_BSP_SCHEDULE_DELAY`...) and the resource (`OTEL_SERVICE_NAME`,
    /// `OTEL_RESOURCE_ATTRIBUTES`; the service name is `tessera` unless they name one).
    pub fn from_env() -> Result<Option<Self>, TelemetryError> {
        Self::from_vars(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, TelemetryError> {
        let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim() == "true")
            || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none");
        let endpoint = ENDPOINTS.iter().find_map(|name| {
            var(name).map(|value| {
                if *name == ENDPOINTS[1] {
                    // The generic endpoint is a base: traces go to its /v1/traces.
                    format!("{}/v1/traces", value.trim_end_matches('/'))
                } else {
                    value
                }
            })
        });
        let Some(endpoint) = endpoint.filter(|_| !disabled) else {
            return Ok(None);
        };
        let protocol = match PROTOCOLS
            .iter()
            .find_map(|name| var(name).map(|value| (*name, value)))
        {
            None => opentelemetry_otlp::Protocol::HttpBinary,
            Some((_, value)) if value.trim() == "http/protobuf" => {
                opentelemetry_otlp::Protocol::HttpBinary
            }
            Some((_, value)) if value.trim() == "http/json" => {
                opentelemetry_otlp::Protocol::HttpJson
            }
            Some((variable, value)) => return Err(TelemetryError::Protocol { variable, value }),
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            // Resolved above as the specification says (the exporter would do the same, but
            // the banner names it).
            .with_endpoint(&endpoint)
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let mut resource = opentelemetry_sdk::Resource::builder().with_attribute(
            opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        );
        let named = var("OTEL_SERVICE_NAME").is_some()
            || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|v| v.contains("service.name="));
        if !named {
            resource = resource.with_service_name("tessera");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        Ok(Some(Self {
            provider,
            endpoint,
            protocol: match protocol {
                opentelemetry_otlp::Protocol::HttpJson => "http/json",
                _ => "http/protobuf",
            },
        }))
    }

    /// Where spans are sent, and in what: `URL (http/protobuf)`.
    pub fn destination(&self) -> String {
        format!("{} ({})", self.endpoint, self.protocol)
    }

    /// The layer that turns the spans of [`TARGET`] into OpenTelemetry spans.
    pub(crate) fn layer<S>(&self) -> impl tracing_subscriber::Layer<S>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_subscriber::Layer as _;
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("tessera"))
            // Neither source locations nor thread names: a span says what, not where.
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            // Spans only: log lines stay in the log (and carry the trace id there).
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.is_span() && meta.target() == TARGET
            }))
    }

    /// Exports what is buffered (waiting up to the exporter's timeout) and stops.
    pub fn shutdown(&self) {
        if let Err(error) = self.provider.shutdown_with_timeout(Duration::from_secs(5)) {
            eprintln!("traces: the last spans were not all exported: {error}");
        }
    }
}

/// The request layer: one server span per request, the child of its `traceparent`, with
/// the log's span beside it. Only in the router when [`on`].
pub(crate) async fn trace_request(request: Request, next: Next) -> Response {
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |path| path.as_str())
        .to_owned();
    let span = tracing::info_span!(
        target: "tessera::trace",
        "request",
        otel.name = format!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = method,
        http.route = route,
        http.response.status_code = tracing::field::Empty,
        tessera.client_id = tracing::field::Empty,
    );
    let parent = TraceContextPropagator::new().extract(&Headers(request.headers()));
    // Refused only for a span the subscriber does not record: then there is no trace.
    let _ = span.set_parent(parent);
    let trace_id = span.context().span().span_context().trace_id();
    let log = tracing::info_span!(
        target: "tessera::trace_id",
        parent: &span,
        "request",
        trace_id = %trace_id,
    );
    let mut request = request;
    request.extensions_mut().insert(RequestSpan(span.clone()));
    let response = next
        .run(request)
        .instrument(log)
        .instrument(span.clone())
        .await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    // A server span is an error for a 5xx only: a 4xx is the caller's (OpenTelemetry's
    // semantic conventions for HTTP spans).
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
    response
}

/// The request's span, in its extensions, for a handler to name the client once known.
#[derive(Debug, Clone)]
pub(crate) struct RequestSpan(tracing::Span);

/// Names the authenticated (or presented) client on the request's span, if it is traced.
/// The caller checks [`on`] first, so that the token path pays a branch when off.
pub(crate) fn record_client(extensions: &axum::http::Extensions, client_id: &str) {
    if let Some(RequestSpan(span)) = extensions.get::<RequestSpan>() {
        span.record("tessera.client_id", client_id);
    }
}

/// Adds `traceparent` (and `tracestate`) of the current span to an outbound request.
pub(crate) fn inject(headers: &mut reqwest::header::HeaderMap) {
    if !on() {
        return;
    }
    let context = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&context, &mut HeadersMut(headers));
}

struct Headers<'a>(&'a axum::http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

struct HeadersMut<'a>(&'a mut reqwest::header::HeaderMap);

impl Injector for HeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            reqwest::header::HeaderName::from_bytes(key.as_bytes()),
            reqwest::header::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(set: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            set.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    /// No endpoint, or tracing switched off by the standard variables: nothing is set up.
    #[test]
    fn tracing_is_off_without_an_endpoint() {
        assert!(Telemetry::from_vars(vars(&[])).unwrap().is_none());
        assert!(Telemetry::from_vars(vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ]))
        .unwrap()
        .is_none());
        assert!(Telemetry::from_vars(vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ]))
        .unwrap()
        .is_none());
    }

    /// The generic endpoint is a base that gets `/v1/traces`; the traces endpoint is used
    /// as it is and wins; the protocol is protobuf unless JSON is asked for; gRPC is
    /// refused with a message that says what to set.
    #[tokio::test]
    async fn endpoints_and_protocols_as_the_specification_says() {
        let t = Telemetry::from_vars(vars(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://127.0.0.1:4318/",
        )]))
        .unwrap()
        .unwrap();
        assert_eq!(
            t.destination(),
            "http://127.0.0.1:4318/v1/traces (http/protobuf)"
        );
        t.shutdown();
        let t = Telemetry::from_vars(vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://wrong:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/t"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(t.destination(), "http://127.0.0.1:9/t (http/json)");
        t.shutdown();
        let error = Telemetry::from_vars(vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]))
        .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc"),
            "{error}"
        );
    }
}
