//! The HTTP backend: the operations sent to a Tessera's admin API (docs/admin-api.md), for
//! `tessera --admin-url URL`.
//!
//! The bearer token is `--admin-token` (`TESSERA_ADMIN_TOKEN`), or one fetched from
//! `{URL}/connect/token` with the client credentials `--admin-client-id` and
//! `--admin-client-secret` (`TESSERA_CLIENT_ID`, `TESSERA_CLIENT_SECRET`) through the client
//! kit ([`TokenClient`]), for scope `tessera-admin`, or `tessera-admin-read` when the
//! client's plan grants only that (then only the commands that read work). Errors are RFC
//! 9457 problem documents; their `detail` becomes the command's error.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
use reqwest::header::{HeaderValue, ETAG, IF_MATCH};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use tessera_client::{ClientId, ClientSecret, Environment, ErrorCode, ScopeSet, TokenClient, Url};
use tessera_proto::admin::{
    self as api, Client, ClientInput, ClientPatch, ClientWithSecret, Key, Plan, TrustPolicy,
    UsageDay,
};
use tessera_proto::scope::{ADMIN_READ_SCOPE, ADMIN_SCOPE};
use tessera_proto::Algorithm;
use tessera_server::registrar::{views, PlanSettings, RegistrarError};
use tokio::sync::OnceCell;

use super::progress::Progress;
use super::{created_before, OnCreated, Operations};
use crate::help;

/// Requests a create is sent at most, with the same `Idempotency-Key`, when the answer is
/// lost or the server is briefly unavailable.
const CREATE_ATTEMPTS: u32 = 3;

/// Where the admin commands go instead of the database, and with what credentials: the
/// global options of `plan`, `client`, `keys` and `trust`. The credentials are best given
/// as variables: a flag's value is visible to other users in the process list.
#[derive(Debug, clap::Args)]
pub(crate) struct AdminArgs {
    /// Send `plan`, `client`, `keys` and `trust` commands to the admin API of the Tessera
    /// at this base URL instead of the database. The token comes from TESSERA_ADMIN_TOKEN,
    /// or is fetched from URL/connect/token with TESSERA_CLIENT_ID and
    /// TESSERA_CLIENT_SECRET.
    #[arg(
        long,
        global = true,
        env = "TESSERA_ADMIN_URL",
        value_name = "URL",
        help_heading = help::GLOBAL
    )]
    pub(crate) admin_url: Option<String>,
    /// With --admin-url: the admin API's bearer token, used as it is.
    #[arg(
        long,
        global = true,
        env = "TESSERA_ADMIN_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        help_heading = help::GLOBAL
    )]
    pub(crate) admin_token: Option<String>,
    /// With --admin-url and no token: the id of a client whose plan grants tessera-admin (or
    /// tessera-admin-read, for the commands that only read).
    #[arg(
        long,
        global = true,
        env = "TESSERA_CLIENT_ID",
        value_name = "ID",
        help_heading = help::GLOBAL
    )]
    pub(crate) admin_client_id: Option<String>,
    /// With --admin-client-id: its secret.
    #[arg(
        long,
        global = true,
        env = "TESSERA_CLIENT_SECRET",
        hide_env_values = true,
        value_name = "SECRET",
        help_heading = help::GLOBAL
    )]
    pub(crate) admin_client_secret: Option<String>,
}

/// The admin API of the Tessera at one base URL.
#[derive(Debug)]
pub(crate) struct Http {
    /// The base URL: the admin API is under `{base}/admin/v1`, the token endpoint at
    /// `{base}/connect/token`.
    base: Url,
    /// Follows no redirect: a request carries an admin token.
    http: reqwest::Client,
    auth: Auth,
}

/// Where the bearer token comes from.
#[derive(Debug)]
enum Auth {
    /// `TESSERA_ADMIN_TOKEN`, as it is.
    Token(ClientSecret),
    /// Fetched with client credentials on the first request, and cached for the command.
    Client {
        id: ClientId,
        secret: ClientSecret,
        tokens: Box<OnceCell<TokenClient>>,
    },
}

impl Http {
    /// The admin API at `url`, authenticated with `admin`'s token or client credentials.
    /// Plain `http` is refused except to loopback, as the client kit refuses it for the
    /// token request: an admin token must not travel in the clear.
    pub(crate) fn connect(url: &str, admin: &AdminArgs) -> Result<Self> {
        let base = Url::parse(url.trim()).with_context(|| format!("--admin-url {url:?}"))?;
        if base.cannot_be_a_base() || base.query().is_some() || base.fragment().is_some() {
            bail!("--admin-url {url:?} must be a base URL such as https://auth.example.com");
        }
        match base.scheme() {
            "https" => {}
            "http" if is_loopback(&base) => {}
            "http" => bail!("--admin-url {base} is not https; an admin token must travel over TLS"),
            _ => bail!("--admin-url {base} must be an https URL"),
        }
        let given = |value: &Option<String>| value.clone().filter(|v| !v.is_empty());
        let auth = if let Some(token) = given(&admin.admin_token) {
            Auth::Token(ClientSecret::new(token))
        } else if let (Some(id), Some(secret)) = (
            given(&admin.admin_client_id),
            given(&admin.admin_client_secret),
        ) {
            Auth::Client {
                id: ClientId::parse(&id).ok_or_else(|| anyhow!("TESSERA_CLIENT_ID is empty"))?,
                secret: ClientSecret::new(secret),
                tokens: Box::default(),
            }
        } else {
            bail!(
                "--admin-url needs a token: set TESSERA_ADMIN_TOKEN, or TESSERA_CLIENT_ID and \
                 TESSERA_CLIENT_SECRET of a client whose plan grants tessera-admin"
            );
        };
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(5))
            .user_agent(concat!("tessera/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { base, http, auth })
    }

    /// `{base}/admin/v1/{segments...}`, each segment percent-encoded.
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("checked in connect: a base URL")
            .pop_if_empty()
            .extend(["admin", "v1"])
            .extend(segments);
        url
    }

    fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        self.http.request(method, self.url(segments))
    }

    /// Sends `request` with the bearer token and returns a successful answer; an error
    /// answer becomes an error naming the problem's `detail`.
    async fn send(&self, request: RequestBuilder) -> Result<Response> {
        let sent = match &self.auth {
            Auth::Token(token) => request
                .bearer_auth(token.expose())
                .send()
                .await
                .map_err(anyhow::Error::from),
            Auth::Client { id, secret, tokens } => {
                // A failure to get the token says so itself; only the request is "reaching".
                let tokens = tokens
                    .get_or_try_init(|| admin_tokens(&self.base, id, secret))
                    .await?;
                tokens.send_authorized(request).await.map_err(Into::into)
            }
        };
        let response =
            sent.with_context(|| format!("cannot reach the admin API at {}", self.base))?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(problem(response).await)
        }
    }

    /// `send`, then the JSON body.
    async fn json<T: DeserializeOwned>(&self, request: RequestBuilder) -> Result<T> {
        let response = self.send(request).await?;
        let url = response.url().clone();
        response
            .json()
            .await
            .with_context(|| format!("unexpected answer from {url}"))
    }

    /// `GET`, then the JSON body and the `ETag`.
    async fn get_tagged<T: DeserializeOwned>(
        &self,
        segments: &[&str],
    ) -> Result<(T, Option<HeaderValue>)> {
        let response = self.send(self.request(Method::GET, segments)).await?;
        let etag = response.headers().get(ETAG).cloned();
        let url = response.url().clone();
        let body = response
            .json()
            .await
            .with_context(|| format!("unexpected answer from {url}"))?;
        Ok((body, etag))
    }

    /// One `POST /clients`, sent again with the same `Idempotency-Key` when no answer came
    /// or the server was unavailable: the server then answers with the client the first
    /// request made, if it made one, instead of making a second.
    async fn create_one(&self, new: &ClientInput) -> Result<ClientWithSecret> {
        let key = idempotency_key();
        let mut attempt = 1;
        loop {
            let request = self
                .request(Method::POST, &["clients"])
                .header("idempotency-key", &key)
                .json(new);
            match self.json(request).await {
                Err(e) if attempt < CREATE_ATTEMPTS && worth_retrying(&e) => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    attempt += 1;
                }
                outcome => return outcome,
            }
        }
    }
}

/// The token client for the client credentials: for `tessera-admin`, or for
/// `tessera-admin-read` when the server refuses the first with `invalid_scope`. It fetches
/// the token here, so that the scope is settled before the first request.
async fn admin_tokens(base: &Url, id: &ClientId, secret: &ClientSecret) -> Result<TokenClient> {
    let mut refused = None;
    // The full scope first; the read-only one when the client's plan does not grant it.
    for scope in [ADMIN_SCOPE, ADMIN_READ_SCOPE] {
        let client = TokenClient::builder()
            .environment(Environment::Custom(base.clone()))
            .client_id(id.clone())
            .client_secret(secret.clone())
            .scopes(ScopeSet::parse(scope).expect("a valid scope"))
            .build()?;
        match client.token().await {
            Ok(_) => return Ok(client),
            Err(e) if e.code() == Some(ErrorCode::InvalidScope) => refused = Some(e),
            Err(e) => {
                let endpoint = client.token_endpoint().clone();
                return Err(anyhow::Error::new(e)
                    .context(format!("cannot get an admin token from {endpoint}")));
            }
        }
    }
    Err(
        anyhow::Error::new(refused.expect("both scopes were refused"))
            .context("the client's plan grants neither tessera-admin nor tessera-admin-read"),
    )
}

/// An answer of the admin API that is not a success.
#[derive(Debug)]
struct Refused {
    status: StatusCode,
    /// The problem's `detail` (or its `title`), or the body when it is no problem document.
    message: String,
    /// The field at fault, when the problem names one.
    field: Option<String>,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (admin API: {}", self.message, self.status)?;
        match &self.field {
            Some(field) => write!(f, ", field {field})"),
            None => f.write_str(")"),
        }
    }
}

impl std::error::Error for Refused {}

/// The status of an answer that was not a success, if `error` is one.
fn refused_with(error: &anyhow::Error) -> Option<StatusCode> {
    error.downcast_ref::<Refused>().map(|r| r.status)
}

/// The error of an answer that is not a success (RFC 9457).
async fn problem(response: Response) -> anyhow::Error {
    let status = response.status();
    let url = response.url().clone();
    let body = response.bytes().await.unwrap_or_default();
    let (message, field) = match serde_json::from_slice::<api::Problem>(&body) {
        Ok(p) if !p.detail.is_empty() || !p.title.is_empty() => {
            let message = if p.detail.is_empty() {
                p.title
            } else {
                p.detail
            };
            (message, p.field)
        }
        _ => {
            let text = String::from_utf8_lossy(&body);
            let text: String = text.trim().chars().take(200).collect();
            let message = if text.is_empty() {
                format!("{url} answered {status}")
            } else {
                format!("{url} answered {status}: {text}")
            };
            (message, None)
        }
    };
    Refused {
        status,
        message,
        field,
    }
    .into()
}

/// Whether a create that failed so may have gone unanswered or unserved: no answer, or a
/// 408 (a proxy's or an older server's timeout, which may have cut it after it was made),
/// 502, 503 or 504. The retry carries the same `Idempotency-Key`: a client the first try
/// made is answered again, not made twice.
fn worth_retrying(error: &anyhow::Error) -> bool {
    let unanswered = error.chain().any(|e| {
        e.downcast_ref::<reqwest::Error>().is_some()
            || matches!(
                e.downcast_ref::<tessera_client::Error>(),
                Some(tessera_client::Error::Api(_))
            )
    });
    unanswered
        || refused_with(error).is_some_and(|s| {
            [
                StatusCode::REQUEST_TIMEOUT,
                StatusCode::BAD_GATEWAY,
                StatusCode::SERVICE_UNAVAILABLE,
                StatusCode::GATEWAY_TIMEOUT,
            ]
            .contains(&s)
        })
}

/// 128 random bits, base64url: a fresh `Idempotency-Key`.
fn idempotency_key() -> String {
    let mut bytes = [0u8; 16];
    aws_lc_rs::rand::fill(&mut bytes).expect("the system CSPRNG");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `localhost` or a loopback address (the client kit's rule for its token request).
fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl Operations for Http {
    /// `GET` the plan, apply the settings given to it as the database backend does (a
    /// setting not named keeps its value), then `PUT` it with `If-Match`, so that a change
    /// made by someone else in between is refused (412) rather than overwritten.
    async fn set_plan(
        &self,
        name: &str,
        scopes: Option<&str>,
        settings: &PlanSettings,
    ) -> Result<Plan> {
        let (plan, etag) = match self.get_tagged::<Plan>(&["plans", name]).await {
            Ok((plan, etag)) => (Some(plan), etag),
            Err(e) if refused_with(&e) == Some(StatusCode::NOT_FOUND) => (None, None),
            Err(e) => return Err(e),
        };
        let scopes: Vec<String> = match (scopes, &plan) {
            (Some(scopes), _) => scopes.split_whitespace().map(str::to_owned).collect(),
            (None, Some(plan)) => plan.scopes.clone(),
            (None, None) => return Err(super::new_plan_needs_scopes(name)),
        };
        // The limits as the database backend changes them, from those read.
        let current = plan
            .as_ref()
            .map(|p| {
                p.api_limits
                    .iter()
                    .map(|(api, l)| Ok((api.clone(), views::api_limit_of(api, l)?)))
                    .collect::<Result<_, RegistrarError>>()
            })
            .transpose()?
            .unwrap_or_default();
        let granted = tessera_proto::ScopeSet::parse_names(&scopes.join(" "))?;
        let api_limits = settings
            .api_limits
            .apply(&current, &granted)?
            .iter()
            .map(|(api, limit)| (api.clone(), views::api_limit(limit)))
            .collect();
        // PUT replaces, so every setting is sent.
        let input = api::PlanInput {
            limit_per: settings.limit_per.map(|p| p.as_str().to_owned()),
            api_limits,
            scopes,
            token_ttl: settings.token_ttl.or(plan.as_ref().map(|p| p.token_ttl)),
            token_rate: settings
                .token_rate
                .apply(
                    plan.as_ref()
                        .and_then(|p| p.token_rate.map(views::rate_limit)),
                )
                .map(|r| views::rate(r).into()),
            reuse_percent: settings
                .reuse_percent
                .apply(plan.as_ref().and_then(|p| p.reuse_percent)),
            introspect_any: Some(
                settings
                    .introspect_any
                    .or(plan.as_ref().map(|p| p.introspect_any))
                    .unwrap_or(false),
            ),
            dpop: Some(settings.dpop.map_or_else(
                || plan.as_ref().map_or(api::Dpop::Allowed, |p| p.dpop),
                views::dpop,
            )),
        };
        let mut request = self.request(Method::PUT, &["plans", name]).json(&input);
        if let Some(etag) = etag {
            request = request.header(IF_MATCH, etag);
        }
        self.json(request).await
    }

    async fn list_plans(&self) -> Result<Vec<Plan>> {
        let list: api::PlanList = self.json(self.request(Method::GET, &["plans"])).await?;
        Ok(list.plans)
    }

    /// One `POST` per client, each with an `Idempotency-Key` of its own: not all or none
    /// as in the database, so each client is handed on as soon as it exists, and a failure
    /// says how many were made before it.
    async fn create_clients(
        &self,
        new: &ClientInput,
        count: u32,
        progress: &Progress,
        on_created: &mut OnCreated<'_>,
    ) -> Result<()> {
        for made in 0..count {
            let created = self
                .create_one(new)
                .await
                .with_context(|| created_before(made, count))?;
            progress.advance(1);
            on_created(&mut std::iter::once(created))?;
        }
        Ok(())
    }

    /// Every page, by the API's cursor.
    async fn list_clients(&self) -> Result<Vec<Client>> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut request = self
                .request(Method::GET, &["clients"])
                .query(&[("limit", "1000")]);
            if let Some(cursor) = &cursor {
                request = request.query(&[("cursor", cursor)]);
            }
            let page: api::ClientPage = self.json(request).await?;
            all.extend(page.clients);
            match page.next_cursor {
                Some(next) if Some(&next) != cursor.as_ref() => cursor = Some(next),
                _ => return Ok(all),
            }
        }
    }

    async fn show_client(&self, id: &str) -> Result<Client> {
        self.json(self.request(Method::GET, &["clients", id])).await
    }

    async fn update_client(&self, id: &str, patch: &ClientPatch) -> Result<Client> {
        self.json(self.request(Method::PATCH, &["clients", id]).json(patch))
            .await
    }

    async fn rotate_secret(&self, id: &str, grace_secs: i64) -> Result<ClientWithSecret> {
        let body = api::Rotation {
            grace_secs: Some(grace_secs),
        };
        let request = self
            .request(Method::POST, &["clients", id, "rotate-secret"])
            .json(&body);
        self.json(request).await
    }

    /// `GET`, then `DELETE` with its `If-Match`: what is printed is what was deleted.
    async fn delete_client(&self, id: &str) -> Result<Client> {
        let (client, etag) = self.get_tagged::<Client>(&["clients", id]).await?;
        let mut request = self.request(Method::DELETE, &["clients", id]);
        if let Some(etag) = etag {
            request = request.header(IF_MATCH, etag);
        }
        self.send(request).await?;
        Ok(client)
    }

    async fn usage(&self, id: &str) -> Result<Vec<UsageDay>> {
        let usage: api::Usage = self
            .json(self.request(Method::GET, &["clients", id, "usage"]))
            .await?;
        Ok(usage.days)
    }

    async fn put_trust_policy(
        &self,
        name: &str,
        input: &api::TrustPolicyInput,
    ) -> Result<TrustPolicy> {
        self.json(
            self.request(Method::PUT, &["trust-policies", name])
                .json(input),
        )
        .await
    }

    async fn list_trust_policies(&self) -> Result<Vec<TrustPolicy>> {
        let all: api::TrustPolicyList = self
            .json(self.request(Method::GET, &["trust-policies"]))
            .await?;
        Ok(all.trust_policies)
    }

    async fn remove_trust_policy(&self, name: &str) -> Result<()> {
        self.send(self.request(Method::DELETE, &["trust-policies", name]))
            .await?;
        Ok(())
    }

    async fn create_org(&self, new: &api::OrgInput) -> Result<api::Org> {
        self.json(self.request(Method::POST, &["orgs"]).json(new))
            .await
    }

    async fn list_orgs(&self) -> Result<Vec<api::Org>> {
        let list: api::OrgList = self.json(self.request(Method::GET, &["orgs"])).await?;
        Ok(list.orgs)
    }

    async fn show_org(&self, id: &str) -> Result<api::Org> {
        self.json(self.request(Method::GET, &["orgs", id])).await
    }

    async fn update_org(&self, id: &str, patch: &api::OrgPatch) -> Result<api::Org> {
        self.json(self.request(Method::PATCH, &["orgs", id]).json(patch))
            .await
    }

    async fn org_usage(
        &self,
        id: &str,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<api::OrgUsage> {
        let mut request = self.request(Method::GET, &["orgs", id, "usage"]);
        for (name, day) in [("from", from), ("to", to)] {
            if let Some(day) = day {
                request = request.query(&[(name, day)]);
            }
        }
        self.json(request).await
    }

    /// `GET`, then `DELETE` with its `If-Match`: what is printed is what was deleted.
    async fn delete_org(&self, id: &str, with_clients: bool) -> Result<api::Org> {
        let (org, etag) = self.get_tagged::<api::Org>(&["orgs", id]).await?;
        let mut request = self.request(Method::DELETE, &["orgs", id]);
        if with_clients {
            request = request.query(&[("with_clients", "true")]);
        }
        if let Some(etag) = etag {
            request = request.header(IF_MATCH, etag);
        }
        self.send(request).await?;
        Ok(org)
    }

    async fn list_keys(&self) -> Result<Vec<Key>> {
        let keys: api::KeyList = self.json(self.request(Method::GET, &["keys"])).await?;
        Ok(keys.keys)
    }

    async fn rotate_keys(&self, alg: Algorithm, activate_in_secs: i64) -> Result<Key> {
        let body = api::KeyRotation {
            activate_in_secs: Some(activate_in_secs),
            alg: Some(alg.as_str().to_owned()),
        };
        self.json(self.request(Method::POST, &["keys", "rotate"]).json(&body))
            .await
    }
}
