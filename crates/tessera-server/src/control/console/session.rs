//! Console sessions, held in this process's memory: a signed-in browser holds only a
//! random session id in a cookie; the admin token it stands for never leaves the server.
//! The store is bounded in size ([`MAX_SESSIONS`], and [`MAX_PER_CLIENT`] for each admin
//! client, so that one admin signing in again and again replaces only its own sessions,
//! never another's) and every session in lifetime (the token's, at most [`MAX_LIFETIME`]).
//! A restart signs everyone out, and an instance behind a load balancer knows only its own
//! sessions (sticky sessions needed there).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_lc_rs::digest::{digest, SHA256};
use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use axum::http::{header, Extensions, HeaderMap, HeaderValue};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use tessera_store::Timestamp;

use crate::control::admin::auth::Person;
use zeroize::Zeroizing;

/// The most sessions kept at once. When they are all live and none is the signing-in
/// client's, the sign-in is refused (503) rather than ending someone else's session.
pub(super) const MAX_SESSIONS: usize = 1024;
/// The most sessions one admin client keeps at once (a few browsers, a few people sharing
/// it); its next sign-in ends its own oldest.
pub(super) const MAX_PER_CLIENT: usize = 8;
/// The longest a session lasts, whatever its token's lifetime: a working day.
pub(super) const MAX_LIFETIME: u64 = 8 * 3600;

/// The session cookie's name.
pub(super) const COOKIE: &str = "tessera_console";
/// The sign-in form's own CSRF cookie (double submit: there is no session yet).
pub(super) const SIGN_IN_COOKIE: &str = "tessera_console_signin";

/// What a session calls the admin API as.
#[derive(Clone)]
pub(super) enum Credential {
    /// The admin access token an admin client's id and secret got.
    Token(Zeroizing<String>),
    /// A person signed in through the console's OpenID Connect provider.
    Person(Arc<Person>),
}

/// One signed-in browser.
#[derive(Clone)]
pub(super) struct Session {
    /// What the console calls the admin API with.
    pub(super) credential: Credential,
    /// The synchronizer token every form of this session carries.
    pub(super) csrf: String,
    /// Who signed in: the admin client's id, or the person's [`Person::actor`]; a share of
    /// the store ([`MAX_PER_CLIENT`]) is per value.
    pub(super) client_id: String,
    /// Whether the token holds `tessera-admin` or `tessera-org-admin` (else
    /// `tessera-admin-read`).
    pub(super) write: bool,
    /// For an organization's own admin (`tessera-org-admin`, issue 28), its organization:
    /// the console is then that organization's developer portal, and shows nothing else.
    pub(super) org: Option<String>,
    /// When the session ends (the clock's seconds).
    pub(super) expires_at: Timestamp,
    /// A message for the next page shown (after a redirect), and whether it is an error.
    pub(super) flash: Option<(String, bool)>,
    /// Where the request being answered came from (not kept between requests): the admin
    /// API's calls carry it, so that its audit trail names the browser's address.
    pub(super) origin: Origin,
}

/// Where a request came from, as the admin API reads it (`routes::client_ip`): the peer's
/// address and the forwarding headers a trusted proxy wrote.
#[derive(Debug, Clone, Default)]
pub(super) struct Origin {
    pub(super) peer: Option<ConnectInfo<SocketAddr>>,
    pub(super) forwarded: Vec<HeaderValue>,
}

impl Origin {
    /// The origin of a request with these `extensions` and `headers`.
    pub(super) fn of(extensions: &Extensions, headers: &HeaderMap) -> Self {
        Self {
            peer: extensions.get::<ConnectInfo<SocketAddr>>().copied(),
            forwarded: headers.get_all("x-forwarded-for").iter().cloned().collect(),
        }
    }
}

impl Session {
    /// How the page header names who is signed in.
    pub(super) fn shown(&self) -> &str {
        match &self.credential {
            Credential::Token(_) => &self.client_id,
            Credential::Person(person) => person.shown(),
        }
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("token", &"[redacted]")
            .field("client_id", &self.client_id)
            .field("write", &self.write)
            .field("org", &self.org)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// The sessions, by the SHA-256 of their id: a lookup never compares the id itself.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    /// Each session with the serial number of its start, so that a client's oldest is
    /// known whatever the lifetimes.
    by_id: Mutex<HashMap<[u8; 32], (u64, Session)>>,
    /// The serial number of the next session started.
    started: std::sync::atomic::AtomicU64,
}

fn key(id: &str) -> [u8; 32] {
    let mut key = [0; 32];
    key.copy_from_slice(digest(&SHA256, id.as_bytes()).as_ref());
    key
}

/// 256 random bits, base64url.
pub(super) fn random_token() -> String {
    let mut bytes = [0u8; 32];
    aws_lc_rs::rand::fill(&mut bytes).expect("system random source");
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether two tokens are equal, in time independent of where they differ.
pub(super) fn same(a: &str, b: &str) -> bool {
    aws_lc_rs::constant_time::verify_slices_are_equal(a.as_bytes(), b.as_bytes()).is_ok()
}

/// The value of cookie `name` in the request.
pub(super) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

/// A `Set-Cookie` value: host-only, for the console's paths, not readable by scripts,
/// never sent on cross-site requests, `Secure` when the console is served over https.
pub(super) fn set_cookie(name: &str, value: &str, max_age: u64, secure: bool) -> String {
    set_cookie_with(name, value, max_age, secure, "Strict")
}

/// [`set_cookie`] with another `SameSite` value: `Lax` for the single sign-on's `state`,
/// which must come back with the provider's redirect.
pub(super) fn set_cookie_with(
    name: &str,
    value: &str,
    max_age: u64,
    secure: bool,
    same_site: &str,
) -> String {
    format!(
        "{name}={value}; Path=/console/; Max-Age={max_age}; HttpOnly; SameSite={same_site}{}",
        if secure { "; Secure" } else { "" }
    )
}

impl Sessions {
    /// Starts a session; returns its id, for the cookie. Expired sessions are dropped
    /// first; past [`MAX_PER_CLIENT`] the client's own oldest session gives way. `None` when the store is full of other clients' live sessions: no one is
    /// signed out to make room.
    pub(super) fn start(&self, session: Session, now: Timestamp) -> Option<String> {
        let mut map = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, (_, s)| s.expires_at > now);
        let own = map
            .iter()
            .filter(|(_, (_, s))| s.client_id == session.client_id);
        if own.clone().count() >= MAX_PER_CLIENT {
            if let Some(oldest) = own.min_by_key(|(_, (serial, _))| *serial).map(|(k, _)| *k) {
                map.remove(&oldest);
            }
        }
        if map.len() >= MAX_SESSIONS {
            return None;
        }
        let id = random_token();
        let serial = self
            .started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        map.insert(key(&id), (serial, session));
        Some(id)
    }

    /// The live session the request's cookie names, with its flash message taken.
    pub(super) fn get(&self, headers: &HeaderMap, now: Timestamp) -> Option<Session> {
        let id = cookie(headers, COOKIE)?;
        let mut map = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        let k = key(id);
        match map.get_mut(&k) {
            Some((_, s)) if s.expires_at > now => {
                let found = s.clone();
                s.flash = None;
                Some(found)
            }
            Some(_) => {
                map.remove(&k);
                None
            }
            None => None,
        }
    }

    /// The organization of the live session the request's cookie names, for an
    /// organization's admin; its flash message stays for the page.
    pub(super) fn org(&self, headers: &HeaderMap, now: Timestamp) -> Option<String> {
        let id = cookie(headers, COOKIE)?;
        let map = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&key(id))
            .filter(|(_, s)| s.expires_at > now)
            .and_then(|(_, s)| s.org.clone())
    }

    /// Leaves a message for the next page of session `id`.
    pub(super) fn flash(&self, id: &str, message: String, error: bool) {
        let mut map = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, s)) = map.get_mut(&key(id)) {
            s.flash = Some((message, error));
        }
    }

    /// Ends session `id`.
    pub(super) fn end(&self, id: &str) {
        let mut map = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(&key(id));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(expires_at: Timestamp) -> Session {
        session_of("tc_x", expires_at)
    }

    fn session_of(client_id: &str, expires_at: Timestamp) -> Session {
        Session {
            credential: Credential::Token(Zeroizing::new("t".into())),
            csrf: "c".into(),
            client_id: client_id.into(),
            write: true,
            org: None,
            expires_at,
            flash: None,
            origin: Origin::default(),
        }
    }

    fn with_cookie(id: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            format!("other=1; {COOKIE}={id}").parse().unwrap(),
        );
        h
    }

    #[test]
    fn sessions_end_with_their_lifetime() {
        let sessions = Sessions::default();
        let id = sessions.start(session(100), 0).unwrap();
        assert!(sessions.get(&with_cookie(&id), 99).is_some());
        assert!(sessions.get(&with_cookie(&id), 100).is_none());
        assert_eq!(sessions.len(), 0, "an expired session is dropped when met");
    }

    /// One admin signing in again and again replaces its own oldest sessions, never
    /// another client's (issue 23, item 16).
    #[test]
    fn a_client_past_its_share_replaces_only_its_own_sessions() {
        let sessions = Sessions::default();
        let other = sessions.start(session_of("tc_other", 10), 0).unwrap();
        // Later sessions may end sooner (a token's lifetime): the oldest by start goes.
        let first = sessions.start(session_of("tc_x", 9_000), 0).unwrap();
        let mut last = String::new();
        for i in 0..MAX_SESSIONS * 2 {
            last = sessions
                .start(session_of("tc_x", 5_000 - i as Timestamp), 0)
                .expect("a client always has room in its own share");
        }
        assert_eq!(sessions.len(), 1 + MAX_PER_CLIENT);
        assert!(sessions.get(&with_cookie(&other), 1).is_some());
        assert!(sessions.get(&with_cookie(&last), 1).is_some());
        assert!(
            sessions.get(&with_cookie(&first), 1).is_none(),
            "its own oldest gave way"
        );
    }

    /// A store full of other clients' live sessions refuses a new one; expired ones make
    /// room, and a client with sessions of its own replaces one of them.
    #[test]
    fn a_full_store_refuses_rather_than_signing_anyone_out() {
        let sessions = Sessions::default();
        let mut ids = Vec::new();
        for i in 0..MAX_SESSIONS {
            let client = format!("tc_{}", i / MAX_PER_CLIENT);
            let expires_at = if i == 0 { 50 } else { 1_000 };
            ids.push(sessions.start(session_of(&client, expires_at), 0).unwrap());
        }
        assert_eq!(sessions.len(), MAX_SESSIONS);
        assert!(sessions.start(session_of("tc_new", 1_000), 10).is_none());
        assert_eq!(sessions.len(), MAX_SESSIONS, "no one was signed out");
        assert!(ids
            .iter()
            .all(|id| sessions.get(&with_cookie(id), 10).is_some()));
        // Once one has expired, its place is free.
        let new = sessions.start(session_of("tc_new", 1_000), 50).unwrap();
        assert!(sessions.get(&with_cookie(&new), 60).is_some());
        assert!(sessions.start(session_of("tc_newer", 1_000), 60).is_none());
        // A client at its share in a full store replaces its own oldest.
        let again = sessions.start(session_of("tc_1", 2_000), 60).unwrap();
        assert!(sessions.get(&with_cookie(&again), 60).is_some());
        assert_eq!(sessions.len(), MAX_SESSIONS);
    }

    #[test]
    fn the_token_is_not_printed() {
        let printed = format!("{:?}", session(1));
        assert!(!printed.contains("\"t\""), "{printed}");
        assert!(printed.contains("[redacted]"));
    }
}
