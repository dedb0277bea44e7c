//! The audit trail: one structured event per token issued, refused or revoked, on the
//! tracing target `tessera::audit`, and one per change made through the admin API
//! (`event` `admin`, see [`Change`], which the store keeps too, in the change's transaction). Fields of the token events: `event` (`token_issued`, `token_refused` or
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
        source = subject.source.map(|ip| tracing::field::display(Address(ip))),
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
        source = subject.source.map(|ip| tracing::field::display(Address(ip))),
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
        source = subject.source.map(|ip| tracing::field::display(Address(ip))),
    );
}

/// An admin change about to be made through the admin API (or the console, which calls
/// it): its audit event, and the store handle that keeps the event in the transaction of the
/// change ([`tessera_store::Store::audited`]), so that no change is made without its record
/// and no record is kept of a change that failed (issue 29). `object` is what changes
/// (`plan:NAME`, `client:ID`, `key:KID`, or empty for a new key, which the store names,
/// `trust-policy:NAME`, `org:ID`), `change` what is done. The caller is the admin client or
/// the person signed in to the console, with its address and channel. Never a secret: a
/// new or rotated secret is named as such, not shown.
///
/// Make the change through [`Change::registrar`] or [`Change::store`], then call
/// [`Change::made`].
pub(crate) fn change<R>(
    state: &crate::AppState,
    caller: &crate::control::admin::auth::Caller<R>,
    object: &str,
    change: &str,
) -> Change {
    let event = tessera_store::AuditEvent {
        id: 0,
        at: state.clock().now(),
        actor: caller.client_id.clone(),
        action: truncate(change, 512).to_owned(),
        object: truncate(object, 512).to_owned(),
        source: caller.source.map(|ip| ip.to_string()).unwrap_or_default(),
        channel: caller.channel.to_owned(),
    };
    Change::new(state.store(), event)
}

/// A change and its audit event, as `change` makes them, or the CLI for a change made
/// straight on the database.
pub struct Change {
    event: tessera_store::AuditEvent,
    store: std::sync::Arc<dyn tessera_store::Store>,
}

impl std::fmt::Debug for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Change")
            .field("event", &self.event)
            .finish_non_exhaustive()
    }
}

impl Change {
    /// `event`, to be kept by `store` with the change.
    pub fn new(store: &dyn tessera_store::Store, event: tessera_store::AuditEvent) -> Self {
        Self {
            store: store.audited(event.clone()),
            event,
        }
    }

    /// The store to make the change on.
    pub fn store(&self) -> &dyn tessera_store::Store {
        self.store.as_ref()
    }

    /// The registrar to make the change with, dated by `clock`.
    pub fn registrar<'a>(
        &'a self,
        clock: &'a crate::clock::Clock,
    ) -> crate::registrar::Registrar<'a> {
        crate::registrar::Registrar::new(self.store.as_ref(), clock)
    }

    /// The change went through: its log line, on the tracing target `tessera::audit`
    /// (`event` `admin`). Should no write have kept the event (a change the store made
    /// without one), it is kept now, apart, and an error logged if even that fails: the
    /// log line is then its record.
    pub async fn made(self) {
        let object = self.event.object.clone();
        self.made_as(&object).await;
    }

    /// [`made`](Self::made), for a change whose object was named only once made (a new
    /// key's id): the log line names `object`.
    pub async fn made_as(self, object: &str) {
        let event = &self.event;
        tracing::info!(
            target: "tessera::audit",
            event = "admin",
            client_id = event.actor,
            object,
            change = event.action,
            source = event.source,
            channel = event.channel,
        );
        let Some(unkept) = self.store.unkept_audit() else {
            return;
        };
        if let Err(error) = self.store.add_audit_event(&unkept).await {
            tracing::error!(
                target: "tessera::audit",
                %error,
                client_id = event.actor,
                object,
                "the change is made but the store did not keep its audit event: this log is its record"
            );
        }
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

/// A requested scope as logged: the names `known` accepts as they are, others as digests;
/// no scope as none, not as the digest of nothing.
pub(crate) fn scope_for_log(scope: &str, known: impl Fn(&str) -> bool) -> String {
    if scope.is_empty() {
        return String::new();
    }
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

/// An address as `IpAddr`'s `Display` writes it. An IPv4 address, the usual case, is
/// written digit by digit: `Ipv4Addr`'s `Display` goes through `fmt` four times, which cost
/// each audit line about 900 instructions (BENCHMARKS.md, issue 31).
struct Address(IpAddr);

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let IpAddr::V4(v4) = self.0 else {
            return self.0.fmt(f);
        };
        let mut text = [0u8; 15];
        let mut len = 0;
        for (i, octet) in v4.octets().into_iter().enumerate() {
            if i > 0 {
                text[len] = b'.';
                len += 1;
            }
            let mut digits = itoa::Buffer::new();
            let digits = digits.format(octet).as_bytes();
            text[len..len + digits.len()].copy_from_slice(digits);
            len += digits.len();
        }
        f.write_str(std::str::from_utf8(&text[..len]).map_err(|_| std::fmt::Error)?)
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_written_as_ip_addr_writes_it() {
        for ip in [
            "0.0.0.0",
            "127.0.0.1",
            "10.200.3.45",
            "255.255.255.255",
            "::1",
            "2001:db8::8a2e:370:7334",
            "::ffff:192.0.2.1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(Address(ip).to_string(), ip.to_string());
        }
    }

    #[test]
    fn a_scope_is_logged_by_its_known_names_and_digests_of_the_rest() {
        let known = |name: &str| name == "news-api";
        assert_eq!(scope_for_log("", known), "");
        assert_eq!(scope_for_log("news-api", known), "news-api");
        assert_eq!(
            scope_for_log("news-api tcs_secret", known),
            format!("news-api {}", unregistered("tcs_secret"))
        );
        assert!(!scope_for_log("tcs_secret", known).contains("tcs_secret"));
    }
}
