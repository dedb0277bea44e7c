//! The [`Verifier`], its builder, and the validation steps of RFC 9068 section 4 in order.

use std::sync::Arc;
use std::time::Duration;

use tessera_proto::{jws, AccessTokenClaims, Algorithm, Clock, JwkSet};

use crate::error::{ConfigError, KeySourceError, VerifyError};
use crate::jwks::{self, KeyCache, KeySet, Remote, Transport};
use crate::limits::{Limits, LimitsConfig, LimitsHealth, UsageError};
use crate::rejection::Challenge;
use crate::replay::ReplayCache;
use crate::token_cache::{Entry, TokenCache, TokenCacheStats};
use crate::validate::{self, Expected};

/// The defaults, each small enough to be safe and large enough not to get in the way.
pub mod defaults {
    use std::time::Duration;

    /// Clock skew tolerated on `exp` and `nbf`: 30 s. Tessera's tokens live minutes, so this
    /// is a small share of their life, and hosts on NTP stay well within it.
    pub const LEEWAY: Duration = Duration::from_secs(30);
    /// The longest token read: 8 KiB. A Tessera token is well under 1 KiB; anything longer is
    /// refused before it is decoded.
    pub const MAX_TOKEN_SIZE: usize = 8 * 1024;
    /// The least time between two JWKS fetches: 30 s. A flood of unknown `kid`s costs the
    /// issuer at most one request per interval from each verifier.
    pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(30);
    /// How long fetched keys are used before a background refresh: 5 minutes, the
    /// `max-age` Tessera serves its key set with.
    pub const CACHE_LIFETIME: Duration = Duration::from_secs(300);
    /// The whole-request timeout of a metadata or JWKS fetch: 5 s.
    pub const HTTP_TIMEOUT: Duration = Duration::from_secs(5);
    /// Verified tokens remembered: 10,000, about 11 MB at most for 500-byte tokens (see
    /// [`VerifierBuilder::token_cache_capacity`](super::VerifierBuilder::token_cache_capacity)).
    /// A client keeps its token for its whole life, so this covers 10,000 clients calling
    /// at once; an API with more callers raises it.
    pub const TOKEN_CACHE_CAPACITY: usize = 10_000;
}

/// The largest leeway the builder takes.
const MAX_LEEWAY: Duration = Duration::from_secs(300);

/// Where the keys come from.
#[derive(Debug)]
enum KeysFrom {
    /// Discovery: metadata (RFC 8414), then its `jwks_uri`.
    Discovery,
    /// A known JWKS URL; no metadata fetch.
    JwksUri(String),
    /// A fixed set, never refreshed: tests and offline use.
    Static(JwkSet),
}

/// Builds a [`Verifier`]. Start from [`Verifier::builder`].
#[derive(Debug)]
pub struct VerifierBuilder {
    issuer: String,
    audience: String,
    realm: Option<String>,
    algorithms: Vec<Algorithm>,
    leeway: Duration,
    max_token_size: usize,
    min_refresh_interval: Duration,
    cache_lifetime: Duration,
    http_timeout: Duration,
    keys: KeysFrom,
    clock: Clock,
    allow_insecure_http: bool,
    resource_url: Option<String>,
    dpop_replay_capacity: usize,
    token_cache_capacity: usize,
    limits: LimitsConfig,
}

impl VerifierBuilder {
    /// Enforces the request limits of each token's plan for this API (issue 27), learned from
    /// `GET {issuer}/api-limits/{audience}` and refreshed every 30 s: [`Verifier::verify_request`]
    /// and the extractors count every request they accept and refuse one over a limit with
    /// 429 (see [`crate::limits`] for the answers, and for tokens without a known plan).
    /// Counted in this process's memory, or across instances with [`redis_url`](Self::redis_url).
    /// The issuer must be fetchable on the same terms as the keys (https, loopback, or
    /// [`allow_insecure_http`](Self::allow_insecure_http)).
    pub fn plan_limits(mut self) -> Self {
        self.limits.enforce = true;
        self
    }

    /// Counts the plan limits in Redis (`redis://host:port/db`), so that every instance of
    /// the API shares them: a 10/min plan lets 10 through in all. Each call is bounded by
    /// [`redis_timeout`](Self::redis_timeout); when Redis fails, each instance counts in
    /// memory at its share (1/N of each limit, at least one request), logs a warning, shows
    /// it in [`Verifier::limits_health`], and goes back to Redis when it answers again.
    pub fn redis_url(mut self, url: impl Into<String>) -> Self {
        self.limits.redis_url = Some(url.into());
        self
    }

    /// The prefix of the kit's keys in Redis; default [`crate::limits::REDIS_PREFIX`]. APIs
    /// of one deployment share it; another deployment on the same Redis takes its own.
    pub fn redis_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.limits.redis_prefix = Some(prefix.into());
        self
    }

    /// The bound on each call to Redis; default [`crate::limits::REDIS_TIMEOUT`] (50 ms).
    pub fn redis_timeout(mut self, timeout: Duration) -> Self {
        self.limits.redis_timeout = Some(timeout);
        self
    }

    /// A floor under the N of the share each instance counts while Redis fails (N is
    /// otherwise the instances counted through Redis), for a fleet about to grow.
    pub fn expected_instances(mut self, instances: u32) -> Self {
        self.limits.expected_instances = instances;
        self
    }

    /// Reports the requests each client made to this API per UTC day to
    /// `POST {issuer}/api-usage`, with tokens from `client` (the API's own client, on a plan
    /// granting `tessera-usage`), every [`usage_interval`](Self::usage_interval). Failed
    /// reports keep their counts and are sent again with the same batch id (see
    /// `crate::limits` and [`Verifier::flush_usage`]).
    pub fn report_usage(mut self, client: tessera_client::TokenClient) -> Self {
        self.limits.usage = Some(client);
        self
    }

    /// How often usage is reported; default [`crate::limits::USAGE_INTERVAL`] (60 s).
    pub fn usage_interval(mut self, interval: Duration) -> Self {
        self.limits.usage_interval = Some(interval);
        self
    }

    /// The URL clients call this API at, such as `https://api.example.com/market`: its
    /// resource identifier (RFC 9728 section 1.2). DPoP proofs must name it plus the
    /// request's path in `htu` (RFC 9449 section 4.3 step 9), the API can serve its
    /// protected resource metadata ([`Verifier::protected_resource_router`]), and every
    /// challenge points there (`resource_metadata`, RFC 9728 section 5.1).
    ///
    /// Without it, DPoP-bound tokens are refused ([`crate::dpop::DpopError::NoResourceUrl`],
    /// with a warning in the log): the request's own `Host` is the caller's to choose, so a
    /// proof made for another API could pass. Set it on every API that takes DPoP tokens.
    pub fn resource_url(mut self, url: impl Into<String>) -> Self {
        self.resource_url = Some(url.into());
        self
    }

    /// How many DPoP proofs are remembered against replay per two-minute generation
    /// (default 1,000,000, about 8,000 proofs a second sustained, at most about 70 MB;
    /// RFC 9449 section 11.1). Past it, new proofs are refused until the generation turns
    /// over, rather than replays let through. One key may fill at most a sixteenth of it, so
    /// that one token holder cannot lock every other one out.
    pub fn dpop_replay_capacity(mut self, proofs: usize) -> Self {
        self.dpop_replay_capacity = proofs;
        self
    }

    /// How many verified tokens are remembered, so that the same token again costs a lookup
    /// instead of a signature check (default [`defaults::TOKEN_CACHE_CAPACITY`]; 0 or 1 turns
    /// the cache off). Rounded down to a multiple of 64 from 4,096 up.
    ///
    /// An entry holds the whole token (compared byte for byte on a lookup), its claims and a
    /// reference to its key: about 1.1 KB for a 500-byte token (measured as resident memory
    /// with the cache full), so 100,000 entries take about 110 MB. Only tokens that passed
    /// every check are remembered, and each is used again only while its key is published
    /// and, by this verifier's clock, within its `exp` and `nbf`; the audience is checked at
    /// each use too.
    pub fn token_cache_capacity(mut self, tokens: usize) -> Self {
        self.token_cache_capacity = tokens;
        self
    }

    /// Fetch the keys from this URL instead of discovering it from the issuer's metadata.
    pub fn jwks_uri(mut self, uri: impl Into<String>) -> Self {
        self.keys = KeysFrom::JwksUri(uri.into());
        self
    }

    /// Use these keys and never fetch any: for tests and offline use.
    pub fn static_keys(mut self, jwks: JwkSet) -> Self {
        self.keys = KeysFrom::Static(jwks);
        self
    }

    /// The `realm` of the `WWW-Authenticate` challenge (RFC 6750 section 3); defaults to the
    /// audience. `"` and `\` become `?`, as they cannot appear in the quoted string.
    pub fn realm(mut self, realm: impl Into<String>) -> Self {
        self.realm = Some(realm.into());
        self
    }

    /// The algorithms accepted; default `EdDSA`, `ES256`, `RS256` and `PS256` (a key still
    /// verifies only the one algorithm its JWK names).
    pub fn algorithms(mut self, algorithms: &[Algorithm]) -> Self {
        self.algorithms = algorithms.to_vec();
        self
    }

    /// Clock skew tolerated on `exp` and `nbf`; default [`defaults::LEEWAY`], at most 300 s.
    pub fn leeway(mut self, leeway: Duration) -> Self {
        self.leeway = leeway;
        self
    }

    /// The longest token read, in bytes; default [`defaults::MAX_TOKEN_SIZE`].
    pub fn max_token_size(mut self, bytes: usize) -> Self {
        self.max_token_size = bytes;
        self
    }

    /// The least time between two key fetches; default [`defaults::MIN_REFRESH_INTERVAL`].
    pub fn min_refresh_interval(mut self, interval: Duration) -> Self {
        self.min_refresh_interval = interval;
        self
    }

    /// How long fetched keys are used before a background refresh; default
    /// [`defaults::CACHE_LIFETIME`]. Keys are kept past it while the issuer is unreachable.
    pub fn cache_lifetime(mut self, lifetime: Duration) -> Self {
        self.cache_lifetime = lifetime;
        self
    }

    /// The timeout of one metadata or key fetch; default [`defaults::HTTP_TIMEOUT`].
    pub fn http_timeout(mut self, timeout: Duration) -> Self {
        self.http_timeout = timeout;
        self
    }

    /// The clock that expiry and the key refresh interval are measured by: the system clock
    /// by default; a [`tessera_proto::ManualClock`] in tests, which then set the time
    /// instead of sleeping.
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = clock.into();
        self
    }

    /// Allows the metadata and keys to be fetched over plain `http://` from any host.
    ///
    /// Off by default, because every signature is checked against those keys: over plain HTTP
    /// anyone on the path (a shared network, a proxy, a poisoned DNS answer) can hand this
    /// verifier keys of their own and forge tokens it accepts. Without it,
    /// [`build`](Self::build) refuses a plain-http URL it would fetch from (the issuer, whose
    /// metadata is read, or the [`jwks_uri`](Self::jwks_uri) when one is given) unless its
    /// host is loopback (`localhost`, 127.0.0.0/8 or `::1`), as for a local setup or a test;
    /// and a `jwks_uri` learned from the metadata is held to the same rule when it is read.
    /// An `https://` issuer may never name a plain-http `jwks_uri`, with or without this.
    /// Static keys fetch nothing, so the rule does not apply to them.
    ///
    /// Use it only where the network between the API and the issuer is trusted end to end,
    /// such as a service mesh that encrypts between sidecars.
    pub fn allow_insecure_http(mut self) -> Self {
        self.allow_insecure_http = true;
        self
    }

    /// Checks the configuration and builds the verifier. Nothing is fetched yet: the first
    /// token does it, or [`Verifier::refresh_keys`] for a start that fails fast.
    pub fn build(self) -> Result<Verifier, ConfigError> {
        if jwks::transport(&self.issuer) == Transport::NotHttp {
            return Err(ConfigError::Issuer);
        }
        // What is fetched must come over https, or over plain http only to this machine
        // unless allowed. Refused here, before any connection is made.
        let fetched = match &self.keys {
            KeysFrom::Discovery => Some(&self.issuer),
            KeysFrom::JwksUri(uri) => Some(uri),
            KeysFrom::Static(_) => None,
        };
        // The limits document comes from the issuer, on the same terms as the keys: a forged
        // one could lift every limit.
        let limits_from =
            (self.limits.enforce || self.limits.usage.is_some()).then_some(&self.issuer);
        for url in fetched.into_iter().chain(limits_from) {
            match jwks::transport(url) {
                Transport::Https | Transport::LoopbackHttp => {}
                Transport::RemoteHttp if self.allow_insecure_http => {}
                Transport::RemoteHttp => {
                    return Err(ConfigError::InsecureHttp { url: url.clone() })
                }
                Transport::NotHttp => return Err(ConfigError::JwksUri),
            }
        }
        if self.audience.is_empty() {
            return Err(ConfigError::Audience);
        }
        if self.algorithms.is_empty() {
            return Err(ConfigError::NoAlgorithms);
        }
        if self.leeway > MAX_LEEWAY {
            return Err(ConfigError::Leeway);
        }
        let resource = match &self.resource_url {
            None => None,
            Some(url) if url.contains(['?', '#']) => return Err(ConfigError::ResourceUrl),
            Some(url) => Some(
                tessera_proto::dpop::htu(url)
                    .filter(|u| !u.contains('"'))
                    .ok_or(ConfigError::ResourceUrl)?,
            ),
        };
        let client = reqwest::Client::builder()
            // A redirect could send us to keys the issuer never published.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.http_timeout)
            .connect_timeout(self.http_timeout)
            // Fetches are minutes apart; an idle connection would be stale by then.
            .pool_max_idle_per_host(0)
            .user_agent(concat!("tessera-verify/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(ConfigError::Http)?;
        let limits = Limits::new(
            self.limits,
            &self.issuer,
            &self.audience,
            &client,
            &self.clock,
        )
        .map_err(ConfigError::Limits)?;
        let cache = match self.keys {
            KeysFrom::Static(jwks) => {
                let keys = KeySet::new(&jwks.keys);
                if keys.is_empty() {
                    return Err(ConfigError::NoUsableKeys);
                }
                KeyCache::fixed(keys)
            }
            KeysFrom::Discovery | KeysFrom::JwksUri(_) => KeyCache::remote(Remote {
                client,
                issuer: self.issuer.clone(),
                jwks_uri: match self.keys {
                    KeysFrom::JwksUri(uri) => Some(uri),
                    _ => None,
                },
                min_refresh_interval: self.min_refresh_interval,
                cache_lifetime: self.cache_lifetime,
                clock: self.clock.clone(),
                allow_insecure_http: self.allow_insecure_http,
            }),
        };
        let realm = self
            .realm
            .unwrap_or_else(|| self.audience.clone())
            .chars()
            .map(|c| match c {
                ' '..='~' if c != '"' && c != '\\' => c,
                _ => '?',
            })
            .collect::<String>();
        let challenge = Challenge {
            realm: realm.into(),
            resource_metadata: resource
                .as_deref()
                .map(|r| crate::resource::metadata_url(r).into()),
        };
        Ok(Verifier {
            inner: Arc::new(Inner {
                issuer: self.issuer,
                audience: self.audience,
                challenge,
                resource,
                replay: ReplayCache::new(
                    crate::dpop::DEFAULT_WINDOW_SECS,
                    self.dpop_replay_capacity,
                ),
                algorithms: self.algorithms,
                leeway: self.leeway.as_secs(),
                max_token_size: self.max_token_size,
                cache: Arc::new(cache),
                tokens: TokenCache::new(self.token_cache_capacity),
                clock: self.clock,
                limits,
            }),
        })
    }
}

/// Validates Tessera access tokens for one API. Cheap to clone (one `Arc`): put it in the
/// router state and let the extractors find it with `FromRef` (see [`crate::extract`]).
#[derive(Debug, Clone)]
pub struct Verifier {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Compared exactly with `iss` (RFC 9068 section 4 step 3).
    issuer: String,
    /// Must be among `aud` (RFC 9068 section 4 step 4).
    audience: String,
    /// For the `WWW-Authenticate` challenges.
    challenge: Challenge,
    /// The API's URL in `htu` form (RFC 9449 section 4.3), when configured.
    resource: Option<String>,
    /// DPoP proofs seen (RFC 9449 section 11.1).
    replay: ReplayCache,
    algorithms: Vec<Algorithm>,
    /// Seconds.
    leeway: u64,
    max_token_size: usize,
    cache: Arc<KeyCache>,
    /// Tokens that passed, kept whole: a repeat costs a lookup (`crate::token_cache`).
    tokens: TokenCache,
    clock: Clock,
    /// The plan limits and usage reporting, when asked for (`crate::limits`).
    limits: Option<Limits>,
}

impl Verifier {
    /// A builder for tokens from `issuer` (compared exactly, so spell it as the server's
    /// metadata does) meant for `audience`, the API's own name.
    pub fn builder(issuer: impl Into<String>, audience: impl Into<String>) -> VerifierBuilder {
        VerifierBuilder {
            issuer: issuer.into(),
            audience: audience.into(),
            realm: None,
            algorithms: vec![
                Algorithm::EdDSA,
                Algorithm::ES256,
                Algorithm::RS256,
                Algorithm::PS256,
            ],
            leeway: defaults::LEEWAY,
            max_token_size: defaults::MAX_TOKEN_SIZE,
            min_refresh_interval: defaults::MIN_REFRESH_INTERVAL,
            cache_lifetime: defaults::CACHE_LIFETIME,
            http_timeout: defaults::HTTP_TIMEOUT,
            keys: KeysFrom::Discovery,
            clock: Clock::system(),
            allow_insecure_http: false,
            resource_url: None,
            dpop_replay_capacity: 1_000_000,
            token_cache_capacity: defaults::TOKEN_CACHE_CAPACITY,
            limits: LimitsConfig::default(),
        }
    }

    /// A verifier with a fixed key set and the defaults otherwise: for tests and offline use.
    pub fn with_static_keys(
        issuer: impl Into<String>,
        audience: impl Into<String>,
        jwks: JwkSet,
    ) -> Result<Self, ConfigError> {
        Self::builder(issuer, audience).static_keys(jwks).build()
    }

    /// Validates `token` (the bare JWS, without `Bearer `) as RFC 9068 section 4 and RFC 8725
    /// describe, and returns its claims:
    ///
    /// 1. size bound, three base64url parts without padding, the JOSE header (no crypto yet);
    /// 2. the key named by `kid`, from the cache only; an unknown `kid` refreshes the cache
    ///    when the rate limit allows;
    /// 3. `alg` matches the key, and the signature verifies;
    /// 4. the claims: `iss`, `aud`, `exp`, `nbf`.
    ///
    /// A token that passed is remembered (see
    /// [`VerifierBuilder::token_cache_capacity`]): the same bytes again skip steps 1 to 3 and
    /// the `iss` check, as long as the key that verified them is still published under their
    /// `kid`; `aud`, `exp` and `nbf` are checked every time.
    ///
    /// Call it within a Tokio runtime: a refresh of stale keys is spawned on it.
    ///
    /// A token bound to a DPoP key or a client certificate (`cnf`, RFC 9449 section 6 and
    /// RFC 8705 section 3) is refused here ([`VerifyError::DpopBound`],
    /// [`VerifyError::CertificateMismatch`]): this method sees no proof and no certificate.
    /// Accept bound tokens with [`Verifier::verify_request`], which checks them.
    pub async fn verify(&self, token: &str) -> Result<AccessTokenClaims, VerifyError> {
        let claims = self.verify_token(token, Some(&self.inner.audience)).await?;
        match &claims.cnf {
            Some(cnf) if cnf.jkt.is_some() => Err(VerifyError::DpopBound),
            Some(cnf) if cnf.x5t_s256.is_some() => Err(VerifyError::CertificateMismatch),
            _ => Ok(Arc::unwrap_or_clone(claims)),
        }
    }

    /// The token's signature and claims, without its binding (which
    /// [`Verifier::verify_request`] checks after this), and with the audience check left out
    /// when `audience` is `None`: a scoped check looks at the scope first, so that an
    /// authentic token for other APIs gets 403 `insufficient_scope` naming the scope it lacks,
    /// then checks the audience itself. The claims are shared with the cache of verified
    /// tokens: a repeated token costs no copy of them.
    pub(crate) async fn verify_token(
        &self,
        token: &str,
        audience: Option<&str>,
    ) -> Result<Arc<AccessTokenClaims>, VerifyError> {
        let inner = &*self.inner;
        // Longer tokens go the long way, to be refused before they are looked up.
        let cacheable = inner.tokens.is_enabled() && token.len() <= inner.max_token_size;
        if cacheable {
            let still_published = |entry: &Entry| {
                let keys = inner.cache.current();
                keys.get(&entry.key.kid)
                    .is_some_and(|key| key.same_as(&entry.key))
            };
            if let Some(entry) = inner.tokens.get(token, still_published) {
                validate::check_current(&entry.claims, self.expected(audience))?;
                return Ok(Arc::clone(&entry.claims));
            }
        }
        let jws = jws::parse(token, inner.max_token_size, &inner.algorithms)?;
        let mut keys = inner.cache.current();
        if keys.get(&jws.kid).is_none() {
            // Boxed: a fetch is rare, and its future inline would make every verification's
            // future larger, and so longer to move (issue 31 item 4).
            keys = Box::pin(inner.cache.after_unknown_kid()).await;
        }
        let key = keys.get(&jws.kid).ok_or(VerifyError::UnknownKey)?;
        if key.alg != jws.alg {
            return Err(VerifyError::KeyMismatch);
        }
        if !key.verify(jws.signing_input, &jws.signature) {
            return Err(VerifyError::BadSignature);
        }
        let claims = Arc::new(validate::check_claims(
            &jws.payload,
            self.expected(audience),
        )?);
        if cacheable {
            inner.tokens.insert(Entry {
                token: token.into(),
                claims: Arc::clone(&claims),
                key: Arc::clone(key),
            });
        }
        Ok(claims)
    }

    /// What the claims are checked against now, by the verifier's clock.
    fn expected<'a>(&'a self, audience: Option<&'a str>) -> Expected<'a> {
        Expected {
            issuer: &self.inner.issuer,
            audience,
            leeway: self.inner.leeway,
            now: u64::try_from(self.inner.clock.now()).unwrap_or(0),
        }
    }

    /// What the cache of verified tokens has done so far: hits, misses and entries.
    pub fn token_cache_stats(&self) -> TokenCacheStats {
        self.inner.tokens.stats()
    }

    /// Fetches the keys now, whatever the rate limit. Call it at start-up to fail fast when the
    /// issuer is unreachable; on error the cached keys (if any) stay. A no-op for static keys.
    pub async fn refresh_keys(&self) -> Result<(), KeySourceError> {
        self.inner.cache.refresh(true).await
    }

    /// Fetches the plan limits document now, whatever the refresh interval, and connects to
    /// Redis if one is configured (2 s at most): call it at start-up to fail fast. `Ok(false)`
    /// when Redis did not answer (counting goes on in memory at this instance's share until
    /// it does); an error when the document could not be fetched. A no-op without
    /// [`VerifierBuilder::plan_limits`].
    pub async fn refresh_limits(&self) -> Result<bool, KeySourceError> {
        match &self.inner.limits {
            Some(limits) => limits.refresh().await,
            None => Ok(true),
        }
    }

    /// Sends the usage counted so far to Tessera now ([`VerifierBuilder::report_usage`]),
    /// as at shutdown; on error the counts are kept for the next attempt.
    pub async fn flush_usage(&self) -> Result<(), UsageError> {
        match &self.inner.limits {
            Some(limits) => limits.flush_usage().await,
            None => Ok(()),
        }
    }

    /// What the plan limits have done so far (`None` without them): Redis's state, the
    /// documents fetched, usage reports sent and pending.
    pub fn limits_health(&self) -> Option<LimitsHealth> {
        self.inner.limits.as_ref().map(Limits::health)
    }

    pub(crate) fn limits(&self) -> Option<&Limits> {
        self.inner.limits.as_ref()
    }

    /// The issuer tokens must come from.
    pub fn issuer(&self) -> &str {
        &self.inner.issuer
    }

    /// The audience tokens must name.
    pub fn audience(&self) -> &str {
        &self.inner.audience
    }

    /// The `realm` of the `WWW-Authenticate` challenge.
    pub fn realm(&self) -> &str {
        &self.inner.challenge.realm
    }

    /// The API's resource URL ([`VerifierBuilder::resource_url`]), normalised.
    pub fn resource_url(&self) -> Option<&str> {
        self.inner.resource.as_deref()
    }

    /// Now, by the verifier's clock, in seconds since the epoch.
    pub(crate) fn now(&self) -> i64 {
        self.inner.clock.now()
    }

    pub(crate) fn replay(&self) -> &ReplayCache {
        &self.inner.replay
    }

    /// Whether `other` is a clone of this verifier.
    pub(crate) fn same_as(&self, other: &Verifier) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn challenge(&self) -> Challenge {
        self.inner.challenge.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `.dpop_replay_capacity(n)`: "1,000,000 per two minutes by default". Filled
    /// directly (signing a million proofs would take minutes): sixteen keys take their
    /// shares, 62,500 proofs each, and then nothing more is remembered, nor forgotten,
    /// until two minutes have passed.
    #[test]
    fn the_replay_memory_holds_1_000_000_proofs_per_two_minutes_by_default() {
        use crate::replay::ReplayError;
        let v = Verifier::builder("https://auth.example", "api")
            .build()
            .unwrap();
        let replay = &v.inner.replay;
        let start = 1_800_000_000;
        for key in 0..16 {
            let key = format!("key-{key}");
            for jti in 0..62_500 {
                replay.first_use(&key, &jti.to_string(), start).unwrap();
            }
            assert_eq!(
                replay.first_use(&key, "one more", start),
                Err(ReplayError::Busy),
                "{key}'s share is 62,500"
            );
        }
        assert_eq!(
            replay.first_use("key-16", "0", start + 119),
            Err(ReplayError::Busy),
            "1,000,000 proofs fill the memory until the two minutes are over"
        );
        assert_eq!(replay.first_use("key-16", "0", start + 120), Ok(()));
        assert_eq!(
            replay.first_use("key-0", "0", start + 120),
            Err(ReplayError::Replayed),
            "still remembered"
        );
    }

    #[test]
    fn the_builder_refuses_unsafe_settings() {
        let b = || Verifier::builder("https://auth.example", "api");
        assert!(matches!(
            Verifier::builder("auth.example", "api").build(),
            Err(ConfigError::Issuer)
        ));
        assert!(matches!(
            Verifier::builder("https://auth.example", "").build(),
            Err(ConfigError::Audience)
        ));
        assert!(matches!(
            b().algorithms(&[]).build(),
            Err(ConfigError::NoAlgorithms)
        ));
        assert!(matches!(
            b().leeway(Duration::from_secs(301)).build(),
            Err(ConfigError::Leeway)
        ));
        assert!(matches!(
            b().static_keys(JwkSet::default()).build(),
            Err(ConfigError::NoUsableKeys)
        ));
        assert!(matches!(
            b().jwks_uri("/jwks.json").build(),
            Err(ConfigError::JwksUri)
        ));
        let v = b().realm("a \"quoted\" realm").build().unwrap();
        assert_eq!(v.realm(), "a ?quoted? realm");
        assert_eq!(b().build().unwrap().realm(), "api");
        // Five minutes of leeway is the most, and still fine.
        assert!(b().leeway(Duration::from_secs(300)).build().is_ok());
        // A resource URL is an origin and path: no query, no fragment.
        for url in [
            "https://api.example/x?q=1",
            "https://api.example/x#f",
            "api.example",
        ] {
            assert!(
                matches!(b().resource_url(url).build(), Err(ConfigError::ResourceUrl)),
                "{url}"
            );
        }
        let v = b()
            .resource_url("HTTPS://API.example:443/x")
            .build()
            .unwrap();
        assert_eq!(v.resource_url(), Some("https://api.example/x"));
        assert_eq!(v.issuer(), "https://auth.example");
        assert_eq!(v.audience(), "api");
    }
}
