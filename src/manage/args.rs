//! The command lines of `plan`, `client`, `keys` and `trust`: what each takes, and how its
//! values are read.

use clap::Subcommand;
use tessera_proto::Algorithm;
use tessera_server::registrar::Change;
use tessera_store::{AuthMethod, Quota, RateLimit};

#[derive(Debug, Subcommand)]
pub(crate) enum PlanCommand {
    /// Create a plan or change its scopes and token lifetime.
    Set {
        /// Plan name.
        name: String,
        /// Space-separated scope names, each naming one API. Required for a new plan; a
        /// plan that exists keeps its scopes without it.
        #[arg(long)]
        scopes: Option<String>,
        /// Token lifetime in seconds (default 3600 for a new plan).
        #[arg(long)]
        token_ttl: Option<u32>,
        /// Token requests per client: COUNT/UNIT with UNIT sec, min, hour or day
        /// (e.g. 60/min), or "none" for no limit.
        #[arg(long)]
        token_rate: Option<String>,
        /// Requests a client may make at once after a quiet spell (default: the rate's COUNT).
        #[arg(long, requires = "token_rate")]
        token_burst: Option<u32>,
        /// Token reuse: while a client's last token for the same scopes has more than this
        /// percentage of its lifetime left, return it again; 0 turns reuse off.
        #[arg(long)]
        reuse_percent: Option<u8>,
        /// Let the plan's clients introspect tokens issued to other clients (an API that
        /// checks the tokens it receives); `--introspect-any=false` turns it off. Without
        /// it a client learns the state of its own tokens only (RFC 7662 section 4).
        #[arg(long, num_args = 0..=1, default_missing_value = "true")]
        introspect_any: Option<bool>,
        /// DPoP (RFC 9449) for the plan's clients: `required` refuses a token request
        /// without a DPoP proof, `allowed` (the default) binds the token to the proof's key
        /// when one comes, `off` ignores proofs and issues Bearer tokens only.
        #[arg(long, value_parser = ["required", "allowed", "off"])]
        dpop: Option<String>,
        /// Whose allowance --token-rate and the API limits count: `client` (the default),
        /// each client its own; `org`, one shared by all the clients of an organization, so
        /// that more clients add no allowance.
        #[arg(long, value_name = "client|org", value_parser = parse_limit_per)]
        limit_per: Option<tessera_store::LimitPer>,
        /// A limit on each client's requests to one API the plan grants, enforced by the
        /// API: API=COUNT/UNIT with UNIT sec, min, hour or day (e.g. news-api=5/min), or
        /// API=none to remove it. Repeat for each API.
        #[arg(long, value_name = "API=RATE", value_parser = parse_api_rate)]
        api_rate: Vec<(String, Change<RateLimit>)>,
        /// Requests a client may make to the API at once after a quiet spell: API=N
        /// (default: the rate's COUNT). Repeat for each API.
        #[arg(long, value_name = "API=N", value_parser = parse_api_burst)]
        api_burst: Vec<(String, u32)>,
        /// A hard count of each client's requests to one API per calendar period in UTC,
        /// reset at its start: API=COUNT/day or API=COUNT/month (e.g. news-api=1000/day),
        /// or API=none. Repeat for each API.
        #[arg(long, value_name = "API=QUOTA", value_parser = parse_api_quota)]
        api_quota: Vec<(String, Change<Quota>)>,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List plans.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ClientCommand {
    /// Register a client; prints its secret once.
    Create {
        /// The plan deciding its scopes.
        #[arg(long, required_unless_present = "org", conflicts_with = "org")]
        plan: Option<String>,
        /// The organization it belongs to: its plan is then the organization's (so --plan
        /// is refused with it).
        #[arg(long)]
        org: Option<String>,
        /// A label for people.
        #[arg(long, default_value = "")]
        name: String,
        /// client_secret_basic (default), client_secret_post; with a certificate
        /// (RFC 8705): tls_client_auth (with --tls-subject-dn, --tls-san-dns or
        /// --tls-san-uri) or self_signed_tls_client_auth (with --jwks-file); with signed
        /// assertions (RFC 7523): private_key_jwt (with --jwks-file or --jwks-uri).
        #[arg(long, default_value = "client_secret_basic", value_parser = parse_method)]
        auth_method: AuthMethod,
        /// tls_client_auth: the subject DN its certificate must carry, in RFC 4514 form as
        /// `openssl x509 -noout -subject -nameopt RFC2253` prints it (CN=billing,O=Acme).
        #[arg(long, group = "certificate")]
        tls_subject_dn: Option<String>,
        /// tls_client_auth: a DNS name its certificate must carry as a SAN.
        #[arg(long, group = "certificate")]
        tls_san_dns: Option<String>,
        /// tls_client_auth: a URI its certificate must carry as a SAN (a SPIFFE ID).
        #[arg(long, group = "certificate")]
        tls_san_uri: Option<String>,
        /// self_signed_tls_client_auth: a JWK Set file with the certificate's public key;
        /// private_key_jwt: with the public keys its assertions are signed with.
        #[arg(long, group = "certificate")]
        jwks_file: Option<std::path::PathBuf>,
        /// private_key_jwt: the https URL where the client publishes its JWK Set (fetched
        /// when needed, so a key rollover there needs no admin action).
        #[arg(long, group = "certificate")]
        jwks_uri: Option<String>,
        /// How many clients to create: in one transaction, or over --admin-url one request
        /// each.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        count: u32,
        /// Print one JSON object per client, one per line.
        #[arg(long)]
        json: bool,
    },
    /// List clients.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one client.
    Show {
        /// Client id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Refuse tokens to a client.
    Disable {
        /// Client id.
        id: String,
        /// Print the client as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Allow tokens to a client again.
    Enable {
        /// Client id.
        id: String,
        /// Print the client as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Move a client to another plan; applies to its next token request.
    SetPlan {
        /// Client id.
        id: String,
        /// The new plan.
        plan: String,
        /// Print the client as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Give a client a new secret; the old one works for --grace seconds more.
    RotateSecret {
        /// Client id.
        id: String,
        /// Seconds the old secret stays valid.
        #[arg(long, default_value_t = 86_400, value_parser = clap::value_parser!(i64).range(0..=MAX_DELAY))]
        grace: i64,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Remove a client.
    Delete {
        /// Client id.
        id: String,
        /// Print the deleted client as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Token requests per UTC day, for metering (written by the server every 30 s and on
    /// shutdown).
    Usage {
        /// Client id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum OrgCommand {
    /// Create an organization: a customer whose clients all share its plan.
    Create {
        /// Its id: 1 to 64 of a-z, A-Z, 0-9, '_' and '-' (e.g. acme).
        id: String,
        /// The plan of all its clients.
        #[arg(long)]
        plan: String,
        /// A name for people (e.g. "Acme Trading").
        #[arg(long, default_value = "")]
        name: String,
        /// Print the organization as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List organizations.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one organization.
    Show {
        /// Organization id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Change an organization's plan (and so all its clients' plan) or name.
    Set {
        /// Organization id.
        id: String,
        /// The plan to move it and all its clients to.
        #[arg(long)]
        plan: Option<String>,
        /// A name for people.
        #[arg(long)]
        name: Option<String>,
        /// Print the organization as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Refuse tokens to all the organization's clients.
    Disable {
        /// Organization id.
        id: String,
        /// Print the organization as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Allow tokens to the organization's clients again.
    Enable {
        /// Organization id.
        id: String,
        /// Print the organization as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Token and API requests of the organization's clients per UTC day: each client's and
    /// the total (written by the server every 30 s and on shutdown).
    Usage {
        /// Organization id.
        id: String,
        /// Only the days of this month, YYYY-MM (e.g. 2026-11), for billing.
        #[arg(long, value_parser = parse_month)]
        month: Option<String>,
        /// Print CSV: one row per client and day, then the day's total.
        #[arg(long, conflicts_with = "json")]
        csv: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove an organization; refused while it has clients, unless --with-clients.
    Delete {
        /// Organization id.
        id: String,
        /// Delete its clients with it.
        #[arg(long)]
        with_clients: bool,
        /// Print the deleted organization as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// List signing keys.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add a key that is published now and signs after --activate-in seconds.
    Rotate {
        /// Seconds between publication and first signature, so verifiers learn the key first.
        #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(i64).range(0..=MAX_DELAY))]
        activate_in: i64,
        /// EdDSA, ES256, RS256 or PS256 (RSA for gateways that accept only RSA).
        #[arg(long, default_value = "EdDSA", value_parser = crate::parse_alg)]
        alg: Algorithm,
        /// Print the new key as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TrustCommand {
    /// Let tokens of an external issuer (a Kubernetes cluster, GitHub Actions, a SPIFFE
    /// trust domain) act as a client: workload identity federation.
    Add {
        /// Policy name.
        name: String,
        /// The client the workload acts as.
        #[arg(long)]
        client: String,
        /// The external issuer, as its tokens name it in `iss` (an https URL).
        #[arg(long)]
        issuer: String,
        /// Where the issuer's keys are; by default found through its OpenID Connect
        /// discovery document.
        #[arg(long)]
        jwks_uri: Option<String>,
        /// A value the token's `aud` must hold.
        #[arg(long)]
        audience: String,
        /// The token's `sub`: exact, or a prefix ending in `:` or `/` followed by `*`
        /// (e.g. `system:serviceaccount:payments:*`); `*` alone is refused.
        #[arg(long)]
        subject: String,
        /// A claim the token must carry with this value (repeatable), e.g.
        /// `--claim repository_id=123456 --claim ref=refs/heads/main`. GitHub Actions'
        /// issuer needs `repository_id` or `repository_owner_id` among them.
        #[arg(long = "claim", value_parser = parse_claim)]
        claims: Vec<(String, String)>,
        /// The longest life an accepted token may have, in seconds (tokens must then
        /// carry `iat`).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        max_assertion_ttl: Option<u32>,
        /// For GitHub Actions' issuer: accept a policy without a `repository_id` or
        /// `repository_owner_id` claim, trusting repository names, which can change hands.
        #[arg(long)]
        allow_mutable_subject: bool,
        /// Accept a policy on a client whose plan grants tessera-admin or
        /// tessera-admin-read: tokens from outside could then administer Tessera.
        #[arg(long)]
        allow_admin: bool,
        /// Print the policy as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List trust policies.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a trust policy.
    Remove {
        /// Policy name.
        name: String,
    },
}

fn parse_limit_per(s: &str) -> Result<tessera_store::LimitPer, String> {
    tessera_store::LimitPer::from_name(s).ok_or_else(|| format!("{s:?} is not client or org"))
}

/// `YYYY-MM`, a month of the calendar.
fn parse_month(s: &str) -> Result<String, String> {
    let month = s
        .split_once('-')
        .filter(|(y, m)| y.len() == 4 && m.len() == 2)
        .and_then(|(y, m)| Some((y.parse::<u16>().ok()?, m.parse::<u8>().ok()?)));
    match month {
        Some((_, 1..=12)) if s.bytes().all(|b| b.is_ascii_digit() || b == b'-') => Ok(s.to_owned()),
        _ => Err(format!("{s:?} is not a month as YYYY-MM, e.g. 2026-11")),
    }
}

/// `API=VALUE`, both sides non-empty.
fn api_pair(s: &str) -> Result<(String, &str), String> {
    match s.split_once('=') {
        Some((api, value)) if !api.is_empty() && !value.is_empty() => Ok((api.to_owned(), value)),
        _ => Err(format!("{s:?} is not API=VALUE")),
    }
}

fn parse_api_rate(s: &str) -> Result<(String, Change<RateLimit>), String> {
    let (api, spec) = api_pair(s)?;
    if spec == "none" {
        return Ok((api, Change::Clear));
    }
    let rate = RateLimit::parse(spec)
        .ok_or_else(|| format!("bad rate {spec:?}: use COUNT/UNIT, e.g. news-api=5/min"))?;
    Ok((api, Change::Set(rate)))
}

fn parse_api_burst(s: &str) -> Result<(String, u32), String> {
    let (api, n) = api_pair(s)?;
    let burst = n
        .parse()
        .ok()
        .filter(|b| *b > 0)
        .ok_or_else(|| format!("bad burst {n:?}: a count of at least 1"))?;
    Ok((api, burst))
}

fn parse_api_quota(s: &str) -> Result<(String, Change<Quota>), String> {
    let (api, spec) = api_pair(s)?;
    if spec == "none" {
        return Ok((api, Change::Clear));
    }
    let quota = tessera_store::parse_quota(spec).ok_or_else(|| {
        format!("bad quota {spec:?}: use COUNT/day or COUNT/month, e.g. news-api=1000/day")
    })?;
    Ok((api, Change::Set(quota)))
}

fn parse_claim(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("{s:?} is not NAME=VALUE")),
    }
}

/// The longest grace period or activation delay: a year.
const MAX_DELAY: i64 = 365 * 86_400;

fn parse_method(s: &str) -> Result<AuthMethod, String> {
    AuthMethod::parse(s).ok_or_else(|| {
        format!(
            "unknown method {s:?}: use client_secret_basic, client_secret_post, \
             private_key_jwt, tls_client_auth or self_signed_tls_client_auth"
        )
    })
}
