//! The audit trail: one structured event per token issued, refused or revoked, on the
//! tracing target `tessera::audit`. Fields: `event` (`token_issued`, `token_refused` or
//! `token_revoked`), `client_id`, `plan`, `scope`, `outcome` (`issued`, `reused`, the OAuth
//! error code, or `revoked`), `jti` (issued and revoked only) and `source` (the caller's
//! address, see `routes::client_ip`). Never a secret or a token.

use std::net::IpAddr;

use tessera_proto::ErrorCode;

/// What an audit event is about.
#[derive(Debug, Default)]
pub struct Subject<'a> {
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
pub fn issued(subject: &Subject<'_>, jti: &str, reused: bool) {
    tracing::info!(
        target: "tessera::audit",
        event = "token_issued",
        client_id = subject.client_id,
        plan = subject.plan,
        scope = subject.scope,
        outcome = if reused { "reused" } else { "issued" },
        jti,
        source = subject.source.map(tracing::field::display),
    );
}

/// A token request was refused.
pub fn refused(subject: &Subject<'_>, error: ErrorCode) {
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
pub fn revoked(subject: &Subject<'_>, jti: &str) {
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

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
