//! A client whose token requests and API calls join its OpenTelemetry traces
//! (docs/tracing.md): the kit's `otel` feature, and a subscriber with the
//! `tracing-opentelemetry` layer exporting over OTLP/HTTP to `OTEL_EXPORTER_OTLP_ENDPOINT`.
use opentelemetry::trace::TracerProvider as _;
use tessera_client::{ClientId, ClientSecret, Environment, ScopeSet, TokenClient};
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The endpoint, headers and timeout come from the standard OTEL_ variables.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()?;
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .build();
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("my-app"))),
    )?;

    let client_id = std::env::var("TESSERA_CLIENT_ID")?;
    let tokens = TokenClient::builder()
        .environment(Environment::Production)
        .from_env()
        .client_id(ClientId::parse(&client_id).ok_or("TESSERA_CLIENT_ID is not a client id")?)
        .client_secret(ClientSecret::new(std::env::var("TESSERA_CLIENT_SECRET")?))
        .scopes(ScopeSet::parse("market-data-api")?)
        .build()?;
    // The token request is a span below this one, and Tessera's span and the API's are
    // below those: each request carries `traceparent`.
    let quotes = async {
        tokens
            .send_authorized(
                reqwest::Client::new().get("https://api.example.com/market-data/v1/quotes"),
            )
            .await
    }
    .instrument(tracing::info_span!("fetch quotes"))
    .await?;
    println!("quotes: {}", quotes.status());
    // Sends the spans still queued.
    provider.shutdown()?;
    Ok(())
}
