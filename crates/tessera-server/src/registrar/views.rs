//! The registry's objects as the admin contract shows them ([`tessera_proto::admin`]): one
//! mapping from the store's rows, for the admin API's answers and for the CLI's commands on
//! the database, so that both print the same objects.

use tessera_proto::admin as api;
use tessera_proto::clock::Timestamp;
use tessera_proto::ClientSecret;
use tessera_store::{
    ApiLimit, AuthMethod, CertificateMatch, Client, Credential, DpopPolicy, KeySource, Plan,
    RateLimit, SigningKey,
};

use super::{RegistrarError, TrustPolicyInput, MAX_TOKEN_TTL};

/// A plan with `clients` on it.
pub fn plan(plan: &Plan, clients: u64) -> api::Plan {
    api::Plan {
        name: plan.name.clone(),
        scopes: plan.scopes.iter().map(|s| s.to_string()).collect(),
        token_ttl: plan.token_ttl,
        token_rate: plan.token_rate.map(rate),
        reuse_percent: plan.reuse_percent,
        introspect_any: plan.introspect_any,
        limit_per: (plan.limit_per == tessera_store::LimitPer::Org).then(|| "org".to_owned()),
        dpop: dpop(plan.dpop),
        api_limits: plan
            .api_limits
            .iter()
            .map(|(api, limit)| (api.clone(), api_limit(limit)))
            .collect(),
        clients,
        created_at: plan.created_at,
        updated_at: plan.updated_at,
    }
}

/// An organization with `clients` clients, its scopes those of its plan among `plans`.
pub fn org<'p>(
    org: &tessera_store::Org,
    clients: u64,
    plans: impl IntoIterator<Item = &'p Plan>,
) -> api::Org {
    let scopes = plans
        .into_iter()
        .find(|p| p.name == org.plan)
        .map(|p| p.scopes.iter().map(|s| s.to_string()).collect())
        .unwrap_or_default();
    api::Org {
        id: org.id.clone(),
        name: org.name.clone(),
        plan: org.plan.clone(),
        scopes,
        enabled: org.enabled,
        clients,
        created_at: org.created_at,
        updated_at: org.updated_at,
    }
}

/// A rate as the contract writes it.
pub fn rate(rate: RateLimit) -> api::Rate {
    api::Rate {
        count: rate.count,
        period_secs: rate.period_secs,
        burst: rate.burst,
    }
}

/// The rate a contract's rate stands for.
pub fn rate_limit(rate: api::Rate) -> RateLimit {
    RateLimit {
        count: rate.count,
        period_secs: rate.period_secs,
        burst: rate.burst,
    }
}

/// A plan's DPoP policy as the contract names it.
pub fn dpop(policy: DpopPolicy) -> api::Dpop {
    match policy {
        DpopPolicy::Required => api::Dpop::Required,
        DpopPolicy::Allowed => api::Dpop::Allowed,
        DpopPolicy::Off => api::Dpop::Off,
    }
}

/// The policy a contract's DPoP setting names.
pub fn dpop_policy(dpop: api::Dpop) -> DpopPolicy {
    match dpop {
        api::Dpop::Required => DpopPolicy::Required,
        api::Dpop::Allowed => DpopPolicy::Allowed,
        api::Dpop::Off => DpopPolicy::Off,
    }
}

/// A client, never its secret: with what its certificate or assertions must match, in the
/// field of the contract it was registered with.
pub fn client(c: &Client) -> api::Client {
    let mut view = api::Client {
        client_id: c.id.clone(),
        plan: c.plan.clone(),
        org: c.org.clone(),
        name: c.label.clone(),
        enabled: c.enabled,
        token_endpoint_auth_method: c.auth_method.as_str().to_owned(),
        previous_secret_valid_until: c.credential.previous_secret_until(),
        created_at: c.created_at,
        updated_at: c.updated_at,
        tls_client_auth_subject_dn: None,
        tls_client_auth_san_dns: None,
        tls_client_auth_san_uri: None,
        jwks: None,
        jwks_uri: None,
    };
    let jwks = |text: &str| serde_json::from_str(text).ok();
    match &c.credential {
        Credential::Secret { .. } => {}
        Credential::Certificate(CertificateMatch::SubjectDn(v)) => {
            view.tls_client_auth_subject_dn = Some(v.clone());
        }
        Credential::Certificate(CertificateMatch::SanDns(v)) => {
            view.tls_client_auth_san_dns = Some(v.clone());
        }
        Credential::Certificate(CertificateMatch::SanUri(v)) => {
            view.tls_client_auth_san_uri = Some(v.clone());
        }
        Credential::Certificate(CertificateMatch::Jwks(v))
        | Credential::Keys(KeySource::Jwks(v)) => {
            view.jwks = jwks(v);
        }
        Credential::Keys(KeySource::JwksUri(v)) => view.jwks_uri = Some(v.clone()),
    }
    view
}

/// A client with the secret it was just given (none for a keyed client).
pub fn with_secret(c: &Client, secret: Option<ClientSecret>) -> api::ClientWithSecret {
    api::ClientWithSecret {
        client: client(c),
        client_secret: secret,
    }
}

/// What a client to register with `method` proves itself with, when it gave what its
/// certificate or assertions must match: at most one of the five fields, as RFC 8705 section
/// 2.1.2 asks. `jwks` is the keys a self-signed certificate may carry, or, for
/// `private_key_jwt`, the keys its assertions are signed with.
pub fn credential(
    input: &api::ClientInput,
    method: AuthMethod,
) -> Result<Option<Credential>, RegistrarError> {
    let mut given = Vec::new();
    if let Some(v) = &input.tls_client_auth_subject_dn {
        given.push(Credential::Certificate(CertificateMatch::SubjectDn(
            v.clone(),
        )));
    }
    if let Some(v) = &input.tls_client_auth_san_dns {
        given.push(Credential::Certificate(CertificateMatch::SanDns(v.clone())));
    }
    if let Some(v) = &input.tls_client_auth_san_uri {
        given.push(Credential::Certificate(CertificateMatch::SanUri(v.clone())));
    }
    if let Some(v) = &input.jwks {
        given.push(match method {
            AuthMethod::PrivateKeyJwt => Credential::Keys(KeySource::Jwks(v.to_string())),
            _ => Credential::Certificate(CertificateMatch::Jwks(v.to_string())),
        });
    }
    if let Some(v) = &input.jwks_uri {
        given.push(Credential::Keys(KeySource::JwksUri(v.clone())));
    }
    if given.len() > 1 {
        return Err(RegistrarError::ManyMatches);
    }
    Ok(given.pop())
}

/// The signing keys with what each does at `now`: the newest active one signs, those not
/// yet active are next, the rest retired; each retires when the next activates and leaves
/// the JWK Set when the last token it signed has expired. `keys` are in order of
/// activation, as the store lists them.
pub fn keys(keys: &[SigningKey], now: Timestamp) -> Vec<api::Key> {
    let signing = keys.iter().rposition(|k| k.activates_at <= now);
    let keep = i64::from(MAX_TOKEN_TTL);
    keys.iter()
        .enumerate()
        .map(|(i, k)| {
            let retires = keys.get(i + 1).map(|next| next.activates_at);
            api::Key {
                kid: k.kid.clone(),
                alg: k.alg,
                status: if Some(i) == signing {
                    api::KeyStatus::Signing
                } else if k.activates_at > now {
                    api::KeyStatus::Next
                } else {
                    api::KeyStatus::Retired
                },
                created_at: k.created_at,
                activates_at: k.activates_at,
                retires_at: retires,
                unpublished_at: retires.map(|t| t + keep),
            }
        })
        .collect()
}

/// A trust policy.
pub fn trust_policy(policy: &tessera_store::TrustPolicy) -> api::TrustPolicy {
    api::TrustPolicy {
        name: policy.name.clone(),
        client_id: policy.client_id.to_string(),
        issuer: policy.issuer.clone(),
        jwks_uri: policy.jwks_uri.clone(),
        audience: policy.audience.clone(),
        subject: policy.subject.clone(),
        claims: serde_json::from_str(&policy.claims).unwrap_or_default(),
        max_assertion_ttl: policy.max_assertion_ttl,
        created_at: policy.created_at,
    }
}

/// The trust policy named `name` that a contract's input describes.
pub fn trust_policy_input(name: &str, input: api::TrustPolicyInput) -> TrustPolicyInput {
    TrustPolicyInput {
        name: name.to_owned(),
        client_id: input.client_id,
        issuer: input.issuer,
        jwks_uri: input.jwks_uri,
        audience: input.audience,
        subject: input.subject,
        claims: input.claims.into_iter().collect(),
        max_assertion_ttl: input.max_assertion_ttl,
        allow_mutable_subject: input.allow_mutable_subject,
        allow_admin: input.allow_admin,
    }
}

/// Usage rows as the contract's days: token requests, and beside them the API requests
/// reported for the same day (a day with either is shown), oldest first.
pub fn usage_days(
    usage: Vec<tessera_store::Usage>,
    api_usage: Vec<tessera_store::ApiUsage>,
) -> Vec<api::UsageDay> {
    let mut days: std::collections::BTreeMap<String, api::UsageDay> = usage
        .into_iter()
        .map(|u| {
            let day = api::UsageDay {
                day: u.day.clone(),
                issued: u.issued,
                refused: u.refused,
                apis: Default::default(),
            };
            (u.day, day)
        })
        .collect();
    for u in api_usage {
        let day = days.entry(u.day.clone()).or_insert_with(|| api::UsageDay {
            day: u.day,
            issued: 0,
            refused: 0,
            apis: Default::default(),
        });
        let requests = day.apis.entry(u.api).or_default();
        requests.requests += u.requests;
        requests.refused += u.refused;
    }
    days.into_values().collect()
}

/// Whether `day` is within `from` and `to` (each bound, if given, included).
pub fn within((from, to): (&Option<String>, &Option<String>), day: &str) -> bool {
    from.as_deref().is_none_or(|f| day >= f) && to.as_deref().is_none_or(|t| day <= t)
}

/// Organization `org`'s usage within `range`: each of `clients` (its clients now) with its
/// days, and the total per day.
pub fn org_usage(
    org: &str,
    range: (Option<String>, Option<String>),
    clients: &[Client],
    usage: Vec<tessera_store::Usage>,
    api_usage: Vec<tessera_store::ApiUsage>,
) -> api::OrgUsage {
    use std::collections::BTreeMap;
    let inside = |day: &str| within((&range.0, &range.1), day);
    let mut by_client: BTreeMap<String, (Vec<_>, Vec<_>)> = BTreeMap::new();
    for u in usage.into_iter().filter(|u| inside(&u.day)) {
        by_client.entry(u.client_id.clone()).or_default().0.push(u);
    }
    for u in api_usage.into_iter().filter(|u| inside(&u.day)) {
        by_client.entry(u.client_id.clone()).or_default().1.push(u);
    }
    let mut total: BTreeMap<String, api::UsageDay> = BTreeMap::new();
    let clients = by_client
        .into_iter()
        .map(|(client_id, (usage, api_usage))| {
            let days = usage_days(usage, api_usage);
            for day in &days {
                let sum = total
                    .entry(day.day.clone())
                    .or_insert_with(|| api::UsageDay {
                        day: day.day.clone(),
                        issued: 0,
                        refused: 0,
                        apis: BTreeMap::new(),
                    });
                sum.issued += day.issued;
                sum.refused += day.refused;
                for (name, n) in &day.apis {
                    let requests = sum.apis.entry(name.clone()).or_default();
                    requests.requests += n.requests;
                    requests.refused += n.refused;
                }
            }
            let name = clients
                .iter()
                .find(|c| c.id.as_str() == client_id)
                .map(|c| c.label.clone())
                .unwrap_or_default();
            api::ClientUsage {
                client_id,
                name,
                days,
            }
        })
        .collect();
    api::OrgUsage {
        org: org.to_owned(),
        from: range.0,
        to: range.1,
        clients,
        total: total.into_values().collect(),
    }
}

/// A plan's request limits on one API as the contract writes them.
pub fn api_limit(limit: &ApiLimit) -> api::ApiLimit {
    api::ApiLimit {
        rate: limit.rate.map(|r| r.spec()),
        burst: limit.rate.map(|r| r.burst),
        quota: limit.quota.map(tessera_store::quota_spec),
    }
}

/// The limits a contract's limits on `api` stand for; a rate or quota that does not read
/// is refused, naming the part.
pub fn api_limit_of(api: &str, limit: &api::ApiLimit) -> Result<ApiLimit, RegistrarError> {
    let bad = |part, why| RegistrarError::BadApiLimit {
        api: api.to_owned(),
        part,
        why,
    };
    let mut rate = limit
        .rate
        .as_deref()
        .map(|spec| {
            RateLimit::parse(spec)
                .ok_or_else(|| bad("rate", "use COUNT/UNIT with UNIT sec, min, hour or day"))
        })
        .transpose()?;
    if let Some(burst) = limit.burst {
        let rate = rate
            .as_mut()
            .ok_or_else(|| bad("burst", "a burst needs a rate"))?;
        rate.burst = burst;
    }
    let quota = limit
        .quota
        .as_deref()
        .map(|spec| {
            tessera_store::parse_quota(spec)
                .ok_or_else(|| bad("quota", "use COUNT/day or COUNT/month"))
        })
        .transpose()?;
    Ok(ApiLimit { rate, quota })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::Algorithm;

    fn key(kid: &str, activates_at: Timestamp) -> SigningKey {
        SigningKey {
            kid: kid.into(),
            alg: Algorithm::EdDSA,
            public_jwk: String::new(),
            private_sealed: Vec::new(),
            created_at: activates_at - 600,
            activates_at,
        }
    }

    #[test]
    fn the_newest_active_key_signs_and_each_retires_when_the_next_activates() {
        let all = [key("a", 1000), key("b", 2000), key("c", 3000)];
        let views = keys(&all, 2500);
        let status: Vec<_> = views.iter().map(|k| k.status).collect();
        use api::KeyStatus::*;
        assert_eq!(status, [Retired, Signing, Next]);
        assert_eq!(views[0].retires_at, Some(2000));
        assert_eq!(
            views[0].unpublished_at,
            Some(2000 + i64::from(MAX_TOKEN_TTL))
        );
        assert_eq!((views[2].retires_at, views[2].unpublished_at), (None, None));
        assert_eq!(
            keys(&all, 500).iter().filter(|k| k.status == Next).count(),
            3
        );
    }

    #[test]
    fn one_certificate_match_at_most() {
        let mut input = api::ClientInput {
            jwks_uri: Some("https://keys.example/jwks".into()),
            ..Default::default()
        };
        assert_eq!(
            credential(&input, AuthMethod::PrivateKeyJwt).unwrap(),
            Some(Credential::Keys(KeySource::JwksUri(
                "https://keys.example/jwks".into()
            )))
        );
        input.tls_client_auth_san_dns = Some("billing.example".into());
        assert!(matches!(
            credential(&input, AuthMethod::PrivateKeyJwt),
            Err(RegistrarError::ManyMatches)
        ));
        assert_eq!(
            credential(&api::ClientInput::default(), AuthMethod::TlsClientAuth).unwrap(),
            None
        );
    }

    /// A JWK Set is a certificate's keys, or, for `private_key_jwt`, the assertions' keys.
    #[test]
    fn a_jwk_set_is_named_by_the_method() {
        let input = api::ClientInput {
            jwks: Some(serde_json::json!({"keys": []})),
            ..Default::default()
        };
        assert_eq!(
            credential(&input, AuthMethod::SelfSignedTlsClientAuth).unwrap(),
            Some(Credential::Certificate(CertificateMatch::Jwks(
                r#"{"keys":[]}"#.into()
            )))
        );
        assert_eq!(
            credential(&input, AuthMethod::PrivateKeyJwt).unwrap(),
            Some(Credential::Keys(KeySource::Jwks(r#"{"keys":[]}"#.into())))
        );
    }
}
