//! DPoP at the token endpoint (RFC 9449 section 5): the proof of a token request checked
//! against this server's token endpoint URL, proofs remembered against replay (in this
//! process, and in Redis when rate limits are counted there, so that a proof replayed at
//! another instance is refused too), and the optional server nonce (section 8).

use aws_lc_rs::{constant_time, hmac};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use tessera_verify::dpop::{check_proof, DpopError, NonceCheck, ProofRequest};
use tessera_verify::replay::ReplayCache;

use super::replay::Replay;
use crate::limits::redis::RedisLimiter;

/// How far a proof's `iat` may be from the server's clock, either way (section 11.1).
pub(crate) const WINDOW_SECS: i64 = 60;

/// A nonce is good for the period it was made in and the next one.
const NONCE_PERIOD_SECS: i64 = 300;

/// Proofs remembered per generation (two minutes) in this process without Redis: over 8,000
/// proofs a second sustained, in at most about 70 MB. One client may fill a sixteenth of it
/// (about 500 proofs a second), so that one client cannot refuse every other one's proofs.
const REPLAY_CAPACITY: usize = 1_000_000;

/// The DPoP state of one server.
pub(crate) struct Dpop {
    /// The proofs seen.
    replay: Replay,
    /// With `--dpop-nonce`: the key nonces are authenticated with.
    nonces: Option<hmac::Key>,
}

impl std::fmt::Debug for Dpop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dpop")
            .field("nonces", &self.nonces.is_some())
            .finish_non_exhaustive()
    }
}

impl Dpop {
    /// DPoP state; nonces are required of every proof when `nonce_key` is given.
    pub(crate) fn new(nonce_key: Option<hmac::Key>) -> Self {
        Self {
            replay: Replay::new("", ReplayCache::new(WINDOW_SECS, REPLAY_CAPACITY)),
            nonces: nonce_key,
        }
    }

    /// The nonce to send in `DPoP-Nonce` now, when nonces are on.
    pub(crate) fn nonce(&self, now: i64) -> Option<String> {
        let key = self.nonces.as_ref()?;
        Some(nonce_for(key, now.div_euclid(NONCE_PERIOD_SECS)))
    }

    /// Whether `nonce` was made by a server with this master key in this period or the
    /// one before (constant-time comparison of the tag).
    fn is_current(&self, nonce: &str, now: i64) -> bool {
        let Some(key) = &self.nonces else {
            return true;
        };
        let period = now.div_euclid(NONCE_PERIOD_SECS);
        [period, period - 1].into_iter().any(|p| {
            let expected = nonce_for(key, p);
            expected.len() == nonce.len()
                && constant_time::verify_slices_are_equal(expected.as_bytes(), nonce.as_bytes())
                    .is_ok()
        })
    }

    /// Checks the proof of a token request (section 4.3) made by `client_id` to
    /// `token_endpoint` at `now` and records it, in the client's share of the replay memory
    /// (in `redis` when limits are counted there, so that every instance shares it); the
    /// key's thumbprint for `cnf.jkt` (section 6.1), or why the proof was refused.
    pub(crate) async fn check(
        &self,
        redis: Option<&RedisLimiter>,
        client_id: &str,
        proof: &str,
        token_endpoint: &str,
        now: i64,
    ) -> Result<String, DpopError> {
        let is_current = |nonce: &str| self.is_current(nonce, now);
        let request = ProofRequest {
            method: "POST",
            htu: token_endpoint,
            access_token: None,
            nonce: self.nonces.is_some().then_some(NonceCheck(&is_current)),
            window_secs: WINDOW_SECS,
        };
        let checked = check_proof(proof, &request, now)?;
        // Remembered as long as a proof with an `iat` at the window's far edge stays good.
        let ttl = (2 * WINDOW_SECS + 1) as u64;
        self.replay
            .first_use(redis, client_id, &checked.jkt, &checked.jti, now, ttl)
            .await?;
        Ok(checked.jkt)
    }
}

/// `base64url(period as 8 bytes big-endian || first 16 bytes of HMAC-SHA256(key, period))`.
fn nonce_for(key: &hmac::Key, period: i64) -> String {
    let period = period.to_be_bytes();
    let tag = hmac::sign(key, &period);
    let mut nonce = period.to_vec();
    nonce.extend_from_slice(&tag.as_ref()[..16]);
    URL_SAFE_NO_PAD.encode(nonce)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, &[byte; 32])
    }

    #[test]
    fn a_nonce_lasts_its_period_and_the_next() {
        let dpop = Dpop::new(Some(key(1)));
        let nonce = dpop.nonce(1_000).unwrap();
        assert!(dpop.is_current(&nonce, 1_000));
        assert!(dpop.is_current(&nonce, 1_000 + NONCE_PERIOD_SECS));
        assert!(!dpop.is_current(&nonce, 1_000 + 2 * NONCE_PERIOD_SECS));
        // Made with another master key: never current.
        let other = Dpop::new(Some(key(2))).nonce(1_000).unwrap();
        assert!(!dpop.is_current(&other, 1_000));
        assert!(!dpop.is_current("", 1_000));
        // Without nonces, none is asked for.
        assert_eq!(Dpop::new(None).nonce(1_000), None);
        // Debug says whether nonces are on, and never prints the key.
        assert_eq!(
            format!("{:?}", Dpop::new(None)),
            "Dpop { nonces: false, .. }"
        );
        assert_eq!(format!("{:?}", dpop), "Dpop { nonces: true, .. }");
    }
}
