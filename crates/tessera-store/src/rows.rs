//! Rows to domain types, once for every backend: each schema gives the same column names and
//! the same SQL types (64-bit integers, text, bytes, booleans), so one generic mapping serves.

use std::str::FromStr;

use sqlx::{ColumnIndex, Decode, Row, Type};
use tessera_proto::{Algorithm, ClientId, ScopeSet};

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::{
    ApiLimit, ApiUsage, AuthMethod, CertificateMatch, Client, Credential, KeySource, Org, Period,
    Plan, Quota, RateLimit, Revoked, SigningKey, StoreError, Timestamp, Usage,
};

/// Reads column `name` as `T`.
pub(crate) fn get<'r, R, T>(row: &'r R, name: &str) -> Result<T, StoreError>
where
    R: Row,
    for<'n> &'n str: ColumnIndex<R>,
    T: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(row.try_get(name)?)
}

/// Reads an integer column that must fit in `T` (an `u32` count, an `u8` percentage).
fn get_small<'r, R, T>(row: &'r R, name: &str) -> Result<Option<T>, StoreError>
where
    R: Row,
    for<'n> &'n str: ColumnIndex<R>,
    Option<i64>: Decode<'r, R::Database> + Type<R::Database>,
    T: TryFrom<i64>,
{
    get::<R, Option<i64>>(row, name)?
        .map(|v| T::try_from(v).map_err(|_| corrupt(name, v)))
        .transpose()
}

pub(crate) fn plan<R>(row: &R) -> Result<Plan, StoreError>
where
    R: Row,
    for<'n> &'n str: ColumnIndex<R>,
    String: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    i64: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    Option<i64>: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    bool: for<'r> Decode<'r, R::Database> + Type<R::Database>,
{
    let scopes: String = get(row, "scopes")?;
    let dpop: String = get(row, "dpop")?;
    let api_limits: String = get(row, "api_limits")?;
    let rate = (
        get_small::<R, u32>(row, "rate_count")?,
        get_small::<R, u32>(row, "rate_period")?,
        get_small::<R, u32>(row, "rate_burst")?,
    );
    Ok(Plan {
        name: get(row, "name")?,
        scopes: ScopeSet::parse_names(&scopes).map_err(|e| corrupt("plans.scopes", e))?,
        token_ttl: get_small::<R, u32>(row, "token_ttl")?
            .ok_or_else(|| corrupt("plans.token_ttl", "null"))?,
        token_rate: match rate {
            (Some(count), Some(period_secs), Some(burst)) => Some(RateLimit {
                count,
                period_secs,
                burst,
            }),
            _ => None,
        },
        reuse_percent: get_small::<R, u8>(row, "reuse_percent")?,
        introspect_any: get(row, "introspect_any")?,
        dpop: dpop
            .parse()
            .map_err(|e: crate::UnknownDpopPolicy| corrupt("plans.dpop", e))?,
        api_limits: api_limits_of(&api_limits)
            .ok_or_else(|| corrupt("plans.api_limits", &api_limits))?,
        limit_per: {
            let per: String = get(row, "limit_per")?;
            crate::LimitPer::from_name(&per).ok_or_else(|| corrupt("plans.limit_per", &per))?
        },
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
    })
}

pub(crate) fn client<R>(row: &R) -> Result<Client, StoreError>
where
    R: Row,
    for<'n> &'n str: ColumnIndex<R>,
    String: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    i64: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    Option<i64>: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    Vec<u8>: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    Option<Vec<u8>>: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    Option<String>: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    bool: for<'r> Decode<'r, R::Database> + Type<R::Database>,
{
    let mut keys: [Option<String>; 5] = Default::default();
    for (key, column) in keys.iter_mut().zip(KEY_COLUMNS) {
        *key = get(row, column)?;
    }
    client_of(ClientColumns {
        id: get(row, "id")?,
        plan: get(row, "plan")?,
        label: get(row, "label")?,
        secret_hash: get(row, "secret_hash")?,
        previous_hash: get(row, "previous_secret_hash")?,
        previous_until: get(row, "previous_secret_expires_at")?,
        auth_method: get(row, "auth_method")?,
        enabled: get(row, "enabled")?,
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
        keys,
        org: get(row, "org_id")?,
        org_enabled: get(row, "org_enabled")?,
    })
}

pub(crate) fn org<R>(row: &R) -> Result<Org, StoreError>
where
    R: Row,
    for<'n> &'n str: ColumnIndex<R>,
    String: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    i64: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    bool: for<'r> Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(Org {
        id: get(row, "id")?,
        name: get(row, "name")?,
        plan: get(row, "plan")?,
        enabled: get(row, "enabled")?,
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
    })
}

/// The key columns of `clients`: what a certificate must match, or where a `private_key_jwt`
/// client's keys are; at most one is set.
const KEY_COLUMNS: [&str; 5] = [
    "tls_subject_dn",
    "tls_san_dns",
    "tls_san_uri",
    "jwks",
    "jwks_uri",
];

/// A row of `clients` as read, before what needs parsing is parsed.
struct ClientColumns {
    id: String,
    plan: String,
    label: String,
    secret_hash: Vec<u8>,
    previous_hash: Option<Vec<u8>>,
    previous_until: Option<i64>,
    auth_method: String,
    enabled: bool,
    created_at: i64,
    updated_at: i64,
    /// In the order of [`KEY_COLUMNS`].
    keys: [Option<String>; 5],
    org: Option<String>,
    org_enabled: bool,
}

/// The client of one row, however it was read (a row of the driver, or a packed page).
fn client_of(c: ClientColumns) -> Result<Client, StoreError> {
    let auth_method = AuthMethod::parse(&c.auth_method)
        .ok_or_else(|| corrupt("clients.auth_method", &c.auth_method))?;
    let [dn, dns, uri, jwks, jwks_uri] = c.keys;
    let certificate = match (dn, dns, uri, jwks) {
        (Some(v), ..) => Some(CertificateMatch::SubjectDn(v)),
        (_, Some(v), ..) => Some(CertificateMatch::SanDns(v)),
        (_, _, Some(v), _) => Some(CertificateMatch::SanUri(v)),
        (.., Some(v)) => Some(CertificateMatch::Jwks(v)),
        _ => None,
    };
    // The method says which the key columns are. A client of a keyed method is written with
    // one of them (the registrar refuses it otherwise); its `secret_hash` is filler that no
    // secret matches, as is a secret client's only without one.
    let credential = match (auth_method, certificate, jwks_uri) {
        (AuthMethod::PrivateKeyJwt, Some(CertificateMatch::Jwks(jwks)), _) => {
            Credential::Keys(KeySource::Jwks(jwks))
        }
        (AuthMethod::PrivateKeyJwt, None, Some(uri)) => Credential::Keys(KeySource::JwksUri(uri)),
        (method, Some(certificate), _) if method.is_mtls() => Credential::Certificate(certificate),
        _ => Credential::Secret {
            hash: c.secret_hash,
            previous: c.previous_hash.zip(c.previous_until),
        },
    };
    Ok(Client {
        id: ClientId::parse(&c.id).ok_or_else(|| corrupt("clients.id", "empty"))?,
        plan: c.plan,
        label: c.label,
        auth_method,
        credential,
        enabled: c.enabled,
        org: c.org,
        org_enabled: c.org_enabled,
        created_at: c.created_at,
        updated_at: c.updated_at,
    })
}

/// One client of a packed page (see `Dialect::PACKED_CLIENTS`), its columns in this order:
/// id, plan, label, secret_hash (hex), previous_secret_hash (hex or null),
/// previous_secret_expires_at, auth_method, enabled (0 or 1), created_at, updated_at, then
/// the five key columns in the order of [`KEY_COLUMNS`], then `[org_id, org_enabled]`.
type Packed = (
    String,
    String,
    String,
    String,
    Option<String>,
    Option<i64>,
    String,
    i64,
    i64,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    (Option<String>, i64),
);

/// The clients of a packed page: a JSON array of [`Packed`] arrays.
pub(crate) fn packed_clients(json: &str) -> Result<Vec<Client>, StoreError> {
    let packed: Vec<Packed> =
        serde_json::from_str(json).map_err(|e| corrupt("clients (packed page)", e))?;
    packed.into_iter().map(packed_client).collect()
}

fn packed_client(row: Packed) -> Result<Client, StoreError> {
    let hex = |column: &str, hex: &str| unhex(hex).ok_or_else(|| corrupt(column, "not hex"));
    client_of(ClientColumns {
        secret_hash: hex("clients.secret_hash", &row.3)?,
        previous_hash: row
            .4
            .map(|h| hex("clients.previous_secret_hash", &h))
            .transpose()?,
        enabled: match row.7 {
            0 => false,
            1 => true,
            other => return Err(corrupt("clients.enabled", other)),
        },
        id: row.0,
        plan: row.1,
        label: row.2,
        previous_until: row.5,
        auth_method: row.6,
        created_at: row.8,
        updated_at: row.9,
        keys: [row.10, row.11, row.12, row.13, row.14],
        org: row.15 .0,
        org_enabled: row.15 .1 != 0,
    })
}

/// Bytes from hexadecimal digits (SQLite's `hex()` writes upper case).
fn unhex(hex: &str) -> Option<Vec<u8>> {
    let digit = |b: u8| {
        char::from(b)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    hex.as_bytes()
        .chunks(2)
        .map(|pair| match pair {
            [high, low] => Some(digit(*high)? << 4 | digit(*low)?),
            _ => None,
        })
        .collect()
}

/// The columns of a client's credential: `secret_hash`, the previous secret's hash and when
/// it stops working, and the five key columns in the order of [`KEY_COLUMNS`]. A keyed
/// client's `secret_hash` is empty: no secret's hash is.
pub(crate) struct CredentialColumns<'a> {
    pub(crate) secret_hash: &'a [u8],
    pub(crate) previous: Option<(&'a [u8], Timestamp)>,
    pub(crate) keys: [Option<&'a str>; 5],
}

/// The columns `client`'s credential is stored in.
pub(crate) fn credential_columns(client: &Client) -> CredentialColumns<'_> {
    let mut keys = [None; 5];
    let (secret_hash, previous): (&[u8], _) = match &client.credential {
        Credential::Secret { hash, previous } => (
            hash,
            previous
                .as_ref()
                .map(|(hash, until)| (hash.as_slice(), *until)),
        ),
        Credential::Certificate(certificate) => {
            let (column, value) = match certificate {
                CertificateMatch::SubjectDn(v) => (0, v),
                CertificateMatch::SanDns(v) => (1, v),
                CertificateMatch::SanUri(v) => (2, v),
                CertificateMatch::Jwks(v) => (3, v),
            };
            keys[column] = Some(value.as_str());
            (&[], None)
        }
        Credential::Keys(KeySource::Jwks(v)) => {
            keys[3] = Some(v.as_str());
            (&[], None)
        }
        Credential::Keys(KeySource::JwksUri(v)) => {
            keys[4] = Some(v.as_str());
            (&[], None)
        }
    };
    CredentialColumns {
        secret_hash,
        previous,
        keys,
    }
}

pub(crate) fn trust_policy<R>(row: &R) -> Result<crate::TrustPolicy, StoreError>
where
    R: Row,
    for<'n> &'n str: ColumnIndex<R>,
    String: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    Option<String>: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    i64: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    Option<i64>: for<'r> Decode<'r, R::Database> + Type<R::Database>,
{
    let client: String = get(row, "client_id")?;
    Ok(crate::TrustPolicy {
        name: get(row, "name")?,
        client_id: ClientId::parse(&client)
            .ok_or_else(|| corrupt("trust_policies.client_id", client.as_str()))?,
        issuer: get(row, "issuer")?,
        jwks_uri: get(row, "jwks_uri")?,
        audience: get(row, "audience")?,
        subject: get(row, "subject")?,
        claims: get(row, "claims")?,
        max_assertion_ttl: get_small::<R, u32>(row, "max_assertion_ttl")?,
        created_at: get(row, "created_at")?,
    })
}

pub(crate) fn key<R>(row: &R) -> Result<SigningKey, StoreError>
where
    R: Row,
    for<'n> &'n str: ColumnIndex<R>,
    String: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    i64: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    Vec<u8>: for<'r> Decode<'r, R::Database> + Type<R::Database>,
{
    let alg: String = get(row, "alg")?;
    Ok(SigningKey {
        kid: get(row, "kid")?,
        alg: Algorithm::from_str(&alg).map_err(|e| corrupt("signing_keys.alg", e))?,
        public_jwk: get(row, "public_jwk")?,
        private_sealed: get(row, "private_sealed")?,
        created_at: get(row, "created_at")?,
        activates_at: get(row, "activates_at")?,
    })
}

pub(crate) fn revoked<R>(row: &R) -> Result<Revoked, StoreError>
where
    R: Row,
    for<'n> &'n str: ColumnIndex<R>,
    String: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    i64: for<'r> Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(Revoked {
        jti: get(row, "jti")?,
        client_id: get(row, "client_id")?,
        exp: get(row, "exp")?,
    })
}

pub(crate) fn usage<R>(row: &R) -> Result<Usage, StoreError>
where
    R: Row,
    for<'n> &'n str: ColumnIndex<R>,
    String: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    i64: for<'r> Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(Usage {
        client_id: get(row, "client_id")?,
        day: get(row, "day")?,
        issued: count(row, "issued")?,
        refused: count(row, "refused")?,
    })
}

/// `plans.api_limits` as written: a JSON object by API, each with a `rate` of `[count,
/// period_secs, burst]` and a `quota` of `[count, "day" | "month"]`, both optional.
pub(crate) fn api_limits_column(limits: &BTreeMap<String, ApiLimit>) -> String {
    let object: serde_json::Map<String, Value> = limits
        .iter()
        .filter(|(_, limit)| !limit.is_unlimited())
        .map(|(api, limit)| {
            let mut parts = serde_json::Map::new();
            if let Some(r) = limit.rate {
                parts.insert("rate".into(), json!([r.count, r.period_secs, r.burst]));
            }
            if let Some(q) = limit.quota {
                parts.insert("quota".into(), json!([q.limit, q.period.as_str()]));
            }
            (api.clone(), Value::Object(parts))
        })
        .collect();
    Value::Object(object).to_string()
}

/// Reads `plans.api_limits` ([`api_limits_column`]); `None` if it is not of that shape.
fn api_limits_of(column: &str) -> Option<BTreeMap<String, ApiLimit>> {
    let Value::Object(object) = serde_json::from_str(column).ok()? else {
        return None;
    };
    let small = |v: &Value| {
        v.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0)
    };
    object
        .into_iter()
        .map(|(api, parts)| {
            let rate = match parts.get("rate") {
                None => None,
                Some(Value::Array(r)) if r.len() == 3 => Some(RateLimit {
                    count: small(&r[0])?,
                    period_secs: small(&r[1])?,
                    burst: small(&r[2])?,
                }),
                Some(_) => return None,
            };
            let quota = match parts.get("quota") {
                None => None,
                Some(Value::Array(q)) if q.len() == 2 => Some(Quota {
                    limit: q[0].as_u64().filter(|n| *n > 0)?,
                    period: Period::from_name(q[1].as_str()?)?,
                }),
                Some(_) => return None,
            };
            Some((api, ApiLimit { rate, quota }))
        })
        .collect()
}

pub(crate) fn api_usage<R>(row: &R) -> Result<ApiUsage, StoreError>
where
    R: Row,
    for<'n> &'n str: ColumnIndex<R>,
    String: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    i64: for<'r> Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(ApiUsage {
        day: get(row, "day")?,
        client_id: get(row, "client_id")?,
        api: get(row, "api")?,
        requests: count(row, "requests")?,
        refused: count(row, "refused")?,
    })
}

pub(crate) fn corrupt(column: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(sqlx::Error::Decode(
        format!("bad value in {column}: {detail}").into(),
    ))
}

/// Maps constraint failures to the domain's words.
pub(crate) fn constraint(err: sqlx::Error, what: &str, plan: &str) -> StoreError {
    if let sqlx::Error::Database(db) = &err {
        if db.is_unique_violation() {
            return StoreError::Duplicate(what.to_owned());
        }
        if db.is_foreign_key_violation() {
            return StoreError::UnknownPlan(plan.to_owned());
        }
    }
    err.into()
}

/// A count column: stored as a signed integer, never negative.
fn count<R>(row: &R, name: &str) -> Result<u64, StoreError>
where
    R: Row,
    for<'n> &'n str: ColumnIndex<R>,
    i64: for<'r> Decode<'r, R::Database> + Type<R::Database>,
{
    let v: i64 = get(row, name)?;
    u64::try_from(v).map_err(|_| corrupt(name, v))
}

pub(crate) fn audit_event<R>(row: &R) -> Result<crate::AuditEvent, StoreError>
where
    R: Row,
    for<'n> &'n str: ColumnIndex<R>,
    String: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    i64: for<'r> Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(crate::AuditEvent {
        id: get(row, "id")?,
        at: get(row, "at")?,
        actor: get(row, "actor")?,
        action: get(row, "action")?,
        object: get(row, "object")?,
        source: get(row, "source")?,
        channel: get(row, "channel")?,
    })
}
