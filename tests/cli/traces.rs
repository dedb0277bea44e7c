//! OpenTelemetry traces (issue 30 item 5): `serve` with the standard `OTEL_` variables
//! exports its spans over OTLP/HTTP to a collector this test runs, and the kits' spans (the
//! client kit's token request, the resource-server kit's check and key fetches, exported by
//! this process) join the same traces through `traceparent`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig as _;
use serde_json::Value;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

use super::*;

/// What the collector received: each body with its `Content-Type`.
type Bodies = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// An OTLP/HTTP receiver (`POST /v1/traces`) on a thread and runtime of its own, so that an
/// exporter that blocks the test's thread while it flushes still reaches it. Keeps every
/// body as it came.
struct Collector {
    url: String,
    bodies: Bodies,
    /// Counts the bodies received; the test waits on its changes.
    received: tokio::sync::watch::Receiver<usize>,
}

impl Collector {
    fn start() -> Self {
        use axum::routing::post;
        let bodies: Bodies = Arc::default();
        let (count, received) = tokio::sync::watch::channel(0usize);
        let (bound, address) = std::sync::mpsc::channel();
        let kept = bodies.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                bound.send(listener.local_addr().unwrap()).unwrap();
                let app = axum::Router::new().route(
                    "/v1/traces",
                    post(
                        move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                            let kind = headers
                                .get("content-type")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_owned();
                            kept.lock().unwrap().push((kind.clone(), body.to_vec()));
                            count.send_modify(|n| *n += 1);
                            async move {
                                // An empty ExportTraceServiceResponse, in the request's encoding.
                                let body = if kind.contains("json") { "{}" } else { "" };
                                ([("content-type", kind)], body)
                            }
                        },
                    ),
                );
                axum::serve(listener, app).await.unwrap();
            });
        });
        let address = address.recv().unwrap();
        Self {
            url: format!("http://{address}"),
            bodies,
            received,
        }
    }

    /// Every span received so far, decoded from OTLP/JSON, with its service's name.
    fn spans(&self) -> Vec<Span> {
        let mut spans = Vec::new();
        for (kind, body) in self.bodies.lock().unwrap().iter() {
            assert!(kind.starts_with("application/json"), "{kind}");
            let request: Value = serde_json::from_slice(body).unwrap();
            for resource in request["resourceSpans"].as_array().unwrap() {
                let service =
                    attributes(&resource["resource"]["attributes"])["service.name"].clone();
                for scope in resource["scopeSpans"].as_array().unwrap() {
                    for span in scope["spans"].as_array().unwrap() {
                        spans.push(Span::of(&service, span));
                    }
                }
            }
        }
        spans
    }

    /// Every body received so far, as text.
    fn text(&self) -> String {
        self.bodies
            .lock()
            .unwrap()
            .iter()
            .map(|(_, body)| String::from_utf8_lossy(body).into_owned())
            .collect()
    }

    /// Waits until `done` holds of the spans received, 30 s at most; returns them.
    async fn until(&self, what: &str, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let mut received = self.received.clone();
        let waited = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let spans = self.spans();
                if done(&spans) {
                    return spans;
                }
                received.changed().await.unwrap();
            }
        })
        .await;
        waited.unwrap_or_else(|_| panic!("{what}: not received in 30 s: {:#?}", self.spans()))
    }
}

/// A span as OTLP/JSON carries it.
#[derive(Debug, Clone)]
struct Span {
    service: String,
    name: String,
    trace: String,
    id: String,
    parent: String,
    /// 1 internal, 2 server, 3 client (OTLP's SpanKind).
    kind: u64,
    attributes: HashMap<String, String>,
    /// 2 for an error (OTLP's StatusCode).
    status: u64,
}

impl Span {
    fn of(service: &str, span: &Value) -> Self {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        Self {
            service: service.to_owned(),
            name: text(&span["name"]),
            trace: text(&span["traceId"]),
            id: text(&span["spanId"]),
            parent: text(&span["parentSpanId"]),
            kind: span["kind"].as_u64().unwrap_or(0),
            attributes: attributes(&span["attributes"]),
            status: span["status"]["code"].as_u64().unwrap_or(0),
        }
    }
}

/// OTLP/JSON attributes (`[{"key":..,"value":{"stringValue":..}}]`) as text by key.
fn attributes(list: &Value) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for attribute in list.as_array().into_iter().flatten() {
        let value = &attribute["value"];
        let text = match (
            &value["stringValue"],
            &value["intValue"],
            &value["boolValue"],
        ) {
            (Value::String(s), _, _) => s.clone(),
            (_, Value::String(n), _) => n.clone(),
            (_, Value::Number(n), _) => n.to_string(),
            (_, _, Value::Bool(b)) => b.to_string(),
            _ => value.to_string(),
        };
        out.insert(attribute["key"].as_str().unwrap().to_owned(), text);
    }
    out
}

fn one<'a>(spans: &'a [Span], what: &str, matches: impl Fn(&Span) -> bool) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| matches(s)).collect();
    assert_eq!(found.len(), 1, "{what}: {found:#?}\nof {spans:#?}");
    found[0]
}

/// The served API: one route guarded by the resource-server kit.
async fn api(verifier: tessera_verify::Verifier) -> String {
    async fn quotes(token: tessera_verify::VerifiedToken) -> String {
        format!("quotes for {}", token.claims().client_id)
    }
    let app = axum::Router::new()
        .route("/quotes", axum::routing::get(quotes))
        .with_state(verifier);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

/// `serve` with `OTEL_EXPORTER_OTLP_ENDPOINT` (JSON, a short batch delay) and Redis: a
/// token asked for through the client kit inside a span of this test is a server span,
/// child of the kit's token span, with a Redis child; the API's check is the child of the
/// `traceparent` the kit sent it, and the keys it fetches from Tessera are Tessera spans
/// under the kit's fetch spans; a revocation sent with a `traceparent` of our own continues
/// that trace, with the store's write below it. The audit lines carry the trace ids. No
/// secret and no token reaches the collector.
#[tokio::test]
async fn serve_exports_request_spans_that_join_the_kits_traces() {
    let collector = Collector::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &[
            "plan",
            "set",
            "traced",
            "--scopes",
            "news-api",
            "--token-rate",
            "100/min",
        ],
    );
    let (id, secret) = create_client(d, "traced");
    let redis = tessera_testkit::redis_url();
    let prefix = tessera_testkit::unique_redis_prefix("traces");
    let server = spawn(
        d,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_SERVICE_NAME", "tessera-under-test"),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--log-json",
            "--redis-url",
            &redis,
            "--redis-prefix",
            &prefix,
        ],
    );
    let banner = printed(&server, "traces").await;
    assert_eq!(
        banner,
        format!("OTLP/HTTP to {}/v1/traces (http/json)", collector.url)
    );

    // This process's spans, to the same collector.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpJson)
        .with_endpoint(format!("{}/v1/traces", collector.url))
        .build()
        .unwrap();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("kits")
                .build(),
        )
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("kits")));
    let _default = tracing::subscriber::set_default(subscriber);

    let tokens = tessera_client::TokenClient::builder()
        .environment(tessera_client::Environment::Custom(
            server.base.parse().unwrap(),
        ))
        .client_id(tessera_proto::ClientId::parse(&id).unwrap())
        .client_secret(tessera_proto::ClientSecret::new(secret.clone()))
        .scopes(tessera_proto::ScopeSet::parse("news-api").unwrap())
        .build()
        .unwrap();
    let verifier = tessera_verify::Verifier::builder(server.base.clone(), "news-api")
        .allow_insecure_http()
        .build()
        .unwrap();
    let api = api(verifier).await;
    let root = tracing::info_span!("caller");
    let root_trace = root.context().span().span_context().trace_id().to_string();
    let root_id = root.context().span().span_context().span_id().to_string();
    let access_token = async {
        let token = tokens.token().await.unwrap();
        let answer = tokens
            .send_authorized(reqwest::Client::new().get(format!("{api}/quotes")))
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.text().await.unwrap(), format!("quotes for {id}"));
        token.expose().to_owned()
    }
    .instrument(root.clone())
    .await;
    drop(root);

    // A revocation that comes with a trace of its own.
    let (trace, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let revoked = reqwest::Client::new()
        .post(format!("{}/connect/revocation", server.base))
        .basic_auth(&id, Some(&secret))
        .header("traceparent", format!("00-{trace}-{parent}-01"))
        .form(&[("token", access_token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
    provider.force_flush().unwrap();

    let spans = collector
        .until("every span", |spans| {
            let named = |name: &str| spans.iter().any(|s| s.name == name);
            named("tessera_client token")
                && named("tessera_verify check")
                && named("caller")
                && named("POST /connect/token")
                && named("GET /.well-known/jwks.json")
                && named("redis rate limit")
                && named("store revocation")
                && named("POST /connect/revocation")
        })
        .await;

    let caller = one(&spans, "the test's span", |s| s.name == "caller");
    assert_eq!(
        (caller.trace.as_str(), caller.id.as_str()),
        (root_trace.as_str(), root_id.as_str())
    );
    let kit_token = one(&spans, "the client kit's span", |s| {
        s.name == "tessera_client token"
    });
    assert_eq!(kit_token.service, "kits");
    assert_eq!(
        (&kit_token.trace, &kit_token.parent),
        (&root_trace, &root_id)
    );
    assert_eq!(kit_token.attributes["tessera.client_id"], id);
    assert_eq!(kit_token.attributes["http.response.status_code"], "200");

    let token_span = one(&spans, "the token request", |s| {
        s.name == "POST /connect/token"
    });
    assert_eq!(token_span.service, "tessera-under-test");
    assert_eq!(token_span.kind, 2, "a server span");
    assert_eq!(
        (&token_span.trace, &token_span.parent),
        (&root_trace, &kit_token.id)
    );
    assert_eq!(token_span.attributes["http.route"], "/connect/token");
    assert_eq!(token_span.attributes["http.request.method"], "POST");
    assert_eq!(token_span.attributes["http.response.status_code"], "200");
    assert_eq!(token_span.attributes["tessera.client_id"], id);
    assert_ne!(token_span.status, 2);
    let limit = one(&spans, "the Redis call", |s| s.name == "redis rate limit");
    assert_eq!((&limit.trace, &limit.parent), (&root_trace, &token_span.id));
    assert_eq!(limit.kind, 3, "a client span");
    assert_eq!(limit.attributes["db.system.name"], "redis");

    let check = one(&spans, "the API's check", |s| {
        s.name == "tessera_verify check"
    });
    assert_eq!((&check.trace, &check.parent), (&root_trace, &root_id));
    assert_eq!(check.attributes["tessera.client_id"], id);
    let keys = one(&spans, "the keys Tessera served", |s| {
        s.name == "GET /.well-known/jwks.json"
    });
    let fetch = one(&spans, "the kit's fetch of the keys", |s| {
        s.id == keys.parent
    });
    assert_eq!(fetch.name, "tessera_verify GET");
    assert_eq!(fetch.trace, root_trace);
    assert_eq!(fetch.parent, check.id, "fetched for the check");

    let revocation = one(&spans, "the revocation", |s| {
        s.name == "POST /connect/revocation"
    });
    assert_eq!(
        (revocation.trace.as_str(), revocation.parent.as_str()),
        (trace, parent)
    );
    assert_eq!(revocation.attributes["tessera.client_id"], id);
    let write = one(&spans, "the store's write", |s| {
        s.name == "store revocation"
    });
    assert_eq!(
        (&write.trace, &write.parent),
        (&revocation.trace, &revocation.id)
    );
    assert_eq!(write.attributes["db.operation.name"], "revocation");

    // Background work (the registry sync, every 250 ms) makes no trace of its own.
    assert!(
        spans
            .iter()
            .all(|s| s.service != "tessera-under-test" || !s.parent.is_empty() || s.kind == 2),
        "{spans:#?}"
    );
    let sent = collector.text();
    for secret_thing in [secret.as_str(), access_token.as_str()] {
        assert!(
            !sent.contains(secret_thing),
            "a secret or token was exported"
        );
    }

    // The audit trail names the traces.
    let issued = server.log_line(|l| l.contains("\"token_issued\"")).await;
    let issued: Value = serde_json::from_str(&issued).unwrap();
    assert_eq!(
        issued["fields"]["trace_id"],
        root_trace.as_str(),
        "{issued}"
    );
    let revoked = server.log_line(|l| l.contains("\"token_revoked\"")).await;
    let revoked: Value = serde_json::from_str(&revoked).unwrap();
    assert_eq!(revoked["fields"]["trace_id"], trace, "{revoked}");
    provider.shutdown().unwrap();
    server.terminate().await;
}

/// The default protocol, http/protobuf, reaches the collector as protobuf; without an
/// `OTEL_` endpoint nothing is sent and no trace id is logged; gRPC is refused at start.
#[tokio::test]
async fn protobuf_by_default_nothing_without_an_endpoint_and_no_grpc() {
    let collector = Collector::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "traced", "--scopes", "news-api"]);
    let (id, secret) = create_client(d, "traced");

    let quiet = serve(d, &["--log-json"]);
    assert_eq!(
        token(&quiet.base, &id, &secret, "news-api").await.status(),
        200
    );
    let issued = quiet.log_line(|l| l.contains("\"token_issued\"")).await;
    assert!(!issued.contains("trace_id"), "{issued}");
    // The start-up lines name no traces (that line would come before the master key's).
    let line = quiet
        .stdout_line(|l| l.contains("traces:") || l.contains("master key:"))
        .await;
    assert!(line.contains("master key:"), "{line}");
    quiet.terminate().await;

    let endpoint = format!("{}/v1/traces", collector.url);
    let traced = spawn(
        d,
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
        &["serve", "--listen", "127.0.0.1:0"],
    );
    assert_eq!(
        token(&traced.base, &id, &secret, "news-api").await.status(),
        200
    );
    let mut received = collector.received.clone();
    tokio::time::timeout(Duration::from_secs(30), received.wait_for(|n| *n > 0))
        .await
        .expect("spans within 30 s")
        .unwrap();
    let (kind, body) = collector.bodies.lock().unwrap()[0].clone();
    assert_eq!(kind, "application/x-protobuf");
    // Protobuf keeps strings as they are: the route and the service's default name.
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains("/connect/token") && text.contains("tessera"),
        "{text}"
    );
    assert!(!text.contains(&secret));
    // The text log names the trace on the request's lines.
    let issued = traced.log_line(|l| l.contains("token_issued")).await;
    assert!(issued.contains("trace_id="), "{issued}");
    traced.terminate().await;

    let refused = refused_start(
        d,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
        &["serve", "--listen", "127.0.0.1:0"],
    )
    .await;
    assert!(
        refused.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc") && refused.contains("http/protobuf"),
        "{refused}"
    );
}
