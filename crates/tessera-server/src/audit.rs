//! The audit trail: one structured event per token issued, refused or revoked, on the
//! tracing target `tessera::audit`, and one per change made through the admin API
//! (`event` `admin`, see [`admin_change`], which the store keeps too). Fields of the token events: `event` (`token_issued`, `token_refused` or
//! `token_revoked`), `client_id`, `plan`, `scope`, `outcome` (`issued`, `reused`, the OAuth
//! error code, or `revoked`), `jti` (issued and revoked only) and `source` (the caller's
//! address, see `routes::client_ip`). Never a secret or a token: what a caller presents is
//! logged only when it names something registered (a client id, a scope some plan grants);
//! anything else appears as a short digest (`unregistered:…`), since a caller who puts its
//! secret in the wrong field would otherwise have it written to the log.

use std::net::IpAddr;

use tessera_proto::ErrorCode;

/// What an audit event is about.
#[derive(Debug, Default)]
pub(crate) struct Subject<'a> {
    /// The client id presented or authenticated; empty when none.
    pub client_id: &'a str,
    /// Its plan, once known.
    pub plan: &'a str,
    /// The scope requested.
    pub scope: &'a str,
    /// The peer.
    pub source: Option<IpAddr>,
}

/// A token was issued.
/// A federated client's token names the trust policy and the external identity.
pub(crate) fn issued(
    subject: &Subject<'_>,
    jti: &str,
    reused: bool,
    federated: Option<&crate::grant::Federated>,
) {
    tracing::info!(
        target: "tessera::audit",
        event = "token_issued",
        client_id = subject.client_id,
        plan = subject.plan,
        scope = subject.scope,
        outcome = if reused { "reused" } else { "issued" },
        jti,
        source = subject.source.map(tracing::field::display),
        trust_policy = federated.map(|f| f.policy.as_str()),
        federated_iss = federated.map(|f| truncate(&f.issuer, 256)),
        federated_sub = federated.map(|f| truncate(&f.subject, 256)),
    );
}

/// A token request was refused.
pub(crate) fn refused(subject: &Subject<'_>, error: ErrorCode) {
    tracing::info!(
        target: "tessera::audit",
        event = "token_refused",
        // Bounded, since an unauthenticated caller chooses it.
        client_id = truncate(subject.client_id, 64),
        plan = subject.plan,
        scope = truncate(subject.scope, 256),
        outcome = error.as_str(),
        source = subject.source.map(tracing::field::display),
    );
}

/// A client revoked one of its tokens (RFC 7009); `scope` is the token's.
pub(crate) fn revoked(subject: &Subject<'_>, jti: &str) {
    tracing::info!(
        target: "tessera::audit",
        event = "token_revoked",
        client_id = subject.client_id,
        plan = subject.plan,
        scope = subject.scope,
        outcome = "revoked",
        jti,
        source = subject.source.map(tracing::field::display),
    );
}

/// An admin changed the registry through the admin API (or the console, which calls it):
/// `caller` is the admin client, with its address and channel; `object` what changed
/// (`plan:NAME`, `client:ID`, `key:KID`, `trust-policy:NAME`), `change` what was done.
/// Logged, and kept by the store for the activity page and `GET /admin/v1/audit-events`
/// (issue 29). Never a secret: a new or rotated secret is named as such, not shown.
///
/// Written once the change is made, not in its transaction: a store that takes the change
/// and then fails this write leaves the log line (and an error saying so) as the record.
pub(crate) async fn admin_change<R>(
    state: &crate::AppState,
    caller: &crate::control::admin::auth::Caller<R>,
    object: &str,
    change: &str,
) {
    let source = caller.source.map(|ip| ip.to_string()).unwrap_or_default();
    tracing::info!(
        target: "tessera::audit",
        event = "admin",
        client_id = caller.client_id,
        object,
        change,
        source,
        channel = caller.channel,
    );
    let event = tessera_store::AuditEvent {
        id: 0,
        at: state.clock().now(),
        actor: caller.client_id.clone(),
        action: truncate(change, 512).to_owned(),
        object: truncate(object, 512).to_owned(),
        source,
        channel: caller.channel.to_owned(),
    };
    if let Err(error) = state.store().add_audit_event(&event).await {
        tracing::error!(
            target: "tessera::audit",
            %error,
            client_id = caller.client_id,
            object,
            "the change is made but the store did not keep its audit event: this log is its record"
        );
    }
}

/// How an unregistered value a caller presented appears in the log: a digest that tells
/// equal values apart without revealing them (6 bytes of SHA-256).
pub(crate) fn unregistered(value: &str) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, value.as_bytes());
    let hex: String = digest.as_ref()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("unregistered:{hex}")
}

/// A requested scope as logged: the names `known` accepts as they are, others as digests.
pub(crate) fn scope_for_log(scope: &str, known: impl Fn(&str) -> bool) -> String {
    scope
        .split(' ')
        .map(|name| {
            if known(name) {
                name.to_owned()
            } else {
                unregistered(name)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
