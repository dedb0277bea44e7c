//! Console sessions, held in this process's memory: a signed-in browser holds only a
//! random session id in a cookie; the admin token it stands for never leaves the server.
//! The store is bounded in size ([`MAX_SESSIONS`]) and every session in lifetime (the
//! token's, at most [`MAX_LIFETIME`]). A restart signs everyone out, and an instance
//! behind a load balancer knows only its own sessions (sticky sessions needed there).

use std::collections::HashMap;
use std::sync::Mutex;

use aws_lc_rs::digest::{digest, SHA256};
use axum::http::{header, HeaderMap};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use tessera_store::Timestamp;
use zeroize::Zeroizing;

/// The most sessions kept at once; a new sign-in past it evicts the session closest to its
/// end.
pub(super) const MAX_SESSIONS: usize = 1024;
/// The longest a session lasts, whatever its token's lifetime: a working day.
pub(super) const MAX_LIFETIME: u64 = 8 * 3600;

/// The session cookie's name.
pub(super) const COOKIE: &str = "tessera_console";
/// The sign-in form's own CSRF cookie (double submit: there is no session yet).
pub(super) const SIGN_IN_COOKIE: &str = "tessera_console_signin";

/// One signed-in browser.
#[derive(Clone)]
pub(super) struct Session {
    /// The admin access token the console calls the admin API with.
    pub(super) token: Zeroizing<String>,
    /// The synchronizer token every form of this session carries.
    pub(super) csrf: String,
    /// The admin client signed in.
    pub(super) client_id: String,
    /// Whether the token holds `tessera-admin` (else `tessera-admin-read`).
    pub(super) write: bool,
    /// When the session ends (the clock's seconds).
    pub(super) expires_at: Timestamp,
    /// A message for the next page shown (after a redirect), and whether it is an error.
    pub(super) flash: Option<(String, bool)>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("token", &"[redacted]")
            .field("client_id", &self.client_id)
            .field("write", &self.write)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// The sessions, by the SHA-256 of their id: a lookup never compares the id itself.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    by_id: Mutex<HashMap<[u8; 32], Session>>,
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
    format!(
        "{name}={value}; Path=/console/; Max-Age={max_age}; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    )
}

impl Sessions {
    /// Starts a session; returns its id, for the cookie.
    pub(super) fn start(&self, session: Session, now: Timestamp) -> String {
        let id = random_token();
        let mut map = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, s| s.expires_at > now);
        if map.len() >= MAX_SESSIONS {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.expires_at)
                .map(|(k, _)| *k)
            {
                map.remove(&oldest);
            }
        }
        map.insert(key(&id), session);
        id
    }

    /// The live session the request's cookie names, with its flash message taken.
    pub(super) fn get(&self, headers: &HeaderMap, now: Timestamp) -> Option<Session> {
        let id = cookie(headers, COOKIE)?;
        let mut map = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        let k = key(id);
        match map.get_mut(&k) {
            Some(s) if s.expires_at > now => {
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

    /// Leaves a message for the next page of the request's session.
    pub(super) fn flash(&self, headers: &HeaderMap, message: String, error: bool) {
        if let Some(id) = cookie(headers, COOKIE) {
            let mut map = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(s) = map.get_mut(&key(id)) {
                s.flash = Some((message, error));
            }
        }
    }

    /// Ends the request's session.
    pub(super) fn end(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers, COOKIE) {
            let mut map = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
            map.remove(&key(id));
        }
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
        Session {
            token: Zeroizing::new("t".into()),
            csrf: "c".into(),
            client_id: "tc_x".into(),
            write: true,
            expires_at,
            flash: None,
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
    fn sessions_end_with_their_lifetime_and_the_store_stays_bounded() {
        let sessions = Sessions::default();
        let id = sessions.start(session(100), 0);
        assert!(sessions.get(&with_cookie(&id), 99).is_some());
        assert!(sessions.get(&with_cookie(&id), 100).is_none());
        assert_eq!(sessions.len(), 0, "an expired session is dropped when met");
        for i in 0..MAX_SESSIONS + 10 {
            sessions.start(session(1_000 + i as Timestamp), 0);
        }
        assert_eq!(sessions.len(), MAX_SESSIONS);
        let last = sessions.start(session(5_000), 0);
        assert!(sessions.get(&with_cookie(&last), 1).is_some());
    }

    #[test]
    fn the_token_is_not_printed() {
        let printed = format!("{:?}", session(1));
        assert!(!printed.contains("\"t\""), "{printed}");
        assert!(printed.contains("[redacted]"));
    }
}
