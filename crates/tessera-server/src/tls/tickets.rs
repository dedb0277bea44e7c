//! Session tickets under keys that several instances share, so that a client resumes its
//! TLS session (RFC 8446 section 2.2, RFC 5077 for TLS 1.2) on whichever instance a load
//! balancer sends it to.
//!
//! rustls' own `Ticketer` draws its keys at random and never shows them: each instance
//! then has its own, and a ticket from one is refused by the others (the client falls back
//! to a full handshake). Here the keys come from a file that the instances share. Its
//! lines are keys, 32 random bytes in hex each (`openssl rand -hex 32`); blank lines and
//! lines starting with `#` are skipped. The first key seals new tickets; every key opens
//! them, so that rotating is writing a new first line and keeping the previous one for as
//! long as its tickets should still resume.
//!
//! A ticket is the key's name (8 bytes of a SHA-256 of the key, so that instances agree on
//! it without a registry), a random 96-bit nonce and the session state sealed with
//! AES-256-GCM (RFC 5116), with the name as additional data.

use std::path::Path;

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use aws_lc_rs::digest;
use rustls::server::ProducesTickets;

/// Bytes of a key in the file.
const KEY_LEN: usize = 32;
/// Bytes of a key's name at the start of each ticket.
const NAME_LEN: usize = 8;
/// How long a client is told its ticket may resume (RFC 8446 section 4.6.1): the file is
/// expected to be rotated every 6 hours, with the previous key kept, as rustls rotates
/// its own keys; an older ticket simply fails over to a full handshake.
const LIFETIME_SECONDS: u32 = 12 * 60 * 60;

/// Seals tickets with the first key of a shared file and opens them with any of its keys.
pub(crate) struct SharedTicketer {
    /// In the file's order: the first one seals.
    keys: Vec<TicketKey>,
}

struct TicketKey {
    name: [u8; NAME_LEN],
    key: LessSafeKey,
}

impl std::fmt::Debug for SharedTicketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedTicketer")
            .field("keys", &format_args!("[redacted; {}]", self.keys.len()))
            .finish()
    }
}

impl SharedTicketer {
    /// Reads the keys from `path`. The error says what is wrong, never a key.
    pub(crate) fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        Self::parse(&text)
    }

    fn parse(text: &str) -> Result<Self, String> {
        let mut keys = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bytes = hex32(line).ok_or_else(|| {
                format!(
                    "line {}: not a ticket key (64 hex digits, 32 random bytes, as \
                     `openssl rand -hex 32` writes)",
                    number + 1
                )
            })?;
            keys.push(TicketKey::new(&bytes)?);
        }
        if keys.is_empty() {
            return Err("no ticket key in it (64 hex digits per line)".into());
        }
        Ok(Self { keys })
    }
}

impl TicketKey {
    fn new(bytes: &[u8; KEY_LEN]) -> Result<Self, String> {
        let mut hashed = b"tessera tls ticket key name\0".to_vec();
        hashed.extend_from_slice(bytes);
        let digest = digest::digest(&digest::SHA256, &hashed);
        let mut name = [0; NAME_LEN];
        name.copy_from_slice(&digest.as_ref()[..NAME_LEN]);
        let key = UnboundKey::new(&AES_256_GCM, bytes).map_err(|_| "unusable key".to_owned())?;
        Ok(Self {
            name,
            key: LessSafeKey::new(key),
        })
    }
}

/// 64 hex digits as 32 bytes.
fn hex32(text: &str) -> Option<[u8; KEY_LEN]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * KEY_LEN {
        return None;
    }
    let value = |d: u8| (d as char).to_digit(16);
    let mut bytes = [0; KEY_LEN];
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = u8::try_from(value(pair[0])? * 16 + value(pair[1])?).ok()?;
    }
    Some(bytes)
}

impl ProducesTickets for SharedTicketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        LIFETIME_SECONDS
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let sealing = self.keys.first()?;
        let mut nonce = [0; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).ok()?;
        let mut sealed = plain.to_vec();
        sealing
            .key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(sealing.name),
                &mut sealed,
            )
            .ok()?;
        let mut ticket = Vec::with_capacity(NAME_LEN + NONCE_LEN + sealed.len());
        ticket.extend_from_slice(&sealing.name);
        ticket.extend_from_slice(&nonce);
        ticket.extend_from_slice(&sealed);
        Some(ticket)
    }

    /// `ticket` comes from the network: any length, any bytes; `None` unless it opens.
    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        let (name, rest) = ticket.split_at_checked(NAME_LEN)?;
        let (nonce, sealed) = rest.split_at_checked(NONCE_LEN)?;
        let opening = self.keys.iter().find(|k| k.name == name)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut in_out = sealed.to_vec();
        let plain = opening
            .key
            .open_in_place(nonce, Aad::from(opening.name), &mut in_out)
            .ok()?;
        let length = plain.len();
        in_out.truncate(length);
        Some(in_out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const B: &str = "ffeeddccbbaa99887766554433221100FFEEDDCCBBAA99887766554433221100";

    #[test]
    fn a_ticket_opens_under_any_key_of_the_file_and_nothing_else() {
        let old = SharedTicketer::parse(&format!("{A}\n")).unwrap();
        let rotated = SharedTicketer::parse(&format!("# rotated\n{B}\n\n{A}\n")).unwrap();
        let other = SharedTicketer::parse(B).unwrap();

        let ticket = old.encrypt(b"session state").unwrap();
        assert_eq!(ticket.len(), NAME_LEN + NONCE_LEN + 13 + 16);
        assert_eq!(old.decrypt(&ticket).as_deref(), Some(&b"session state"[..]));
        // Kept as a second key after a rotation: still opens.
        assert_eq!(
            rotated.decrypt(&ticket).as_deref(),
            Some(&b"session state"[..])
        );
        // Not a key of the file: refused.
        assert_eq!(other.decrypt(&ticket), None);
        // The rotated file seals with its first key, which the old file does not hold.
        let new = rotated.encrypt(b"later").unwrap();
        assert_eq!(&new[..NAME_LEN], &other.keys[0].name);
        assert_eq!(old.decrypt(&new), None);
        assert_eq!(other.decrypt(&new).as_deref(), Some(&b"later"[..]));
        // Two tickets of the same state differ (a fresh nonce each).
        assert_ne!(old.encrypt(b"x"), old.encrypt(b"x"));
    }

    #[test]
    fn altered_or_short_tickets_are_refused_without_panic() {
        let ticketer = SharedTicketer::parse(A).unwrap();
        let ticket = ticketer.encrypt(b"session state").unwrap();
        for at in 0..ticket.len() {
            let mut altered = ticket.clone();
            altered[at] ^= 1;
            assert_eq!(ticketer.decrypt(&altered), None, "byte {at} altered");
        }
        for length in 0..ticket.len() {
            assert_eq!(ticketer.decrypt(&ticket[..length]), None, "cut at {length}");
        }
        let mut longer = ticket;
        longer.push(0);
        assert_eq!(ticketer.decrypt(&longer), None);
    }

    #[test]
    fn files_without_a_usable_key_are_refused_saying_which_line() {
        let error = SharedTicketer::parse(&format!("{A}\n{}\n", &B[..62])).unwrap_err();
        assert!(error.starts_with("line 2: not a ticket key"), "{error}");
        let error = SharedTicketer::parse(&format!("{}zz\n", &A[..62])).unwrap_err();
        assert!(error.starts_with("line 1: "), "{error}");
        let error = SharedTicketer::parse("# nothing yet\n\n").unwrap_err();
        assert!(error.starts_with("no ticket key"), "{error}");
        // A sign is not a digit, though from_str_radix would take it.
        let error = SharedTicketer::parse(&format!("+{}", &A[1..])).unwrap_err();
        assert!(error.starts_with("line 1: "), "{error}");
        // Neither the key nor the file's text is in the error or the Debug form.
        let ticketer = SharedTicketer::parse(A).unwrap();
        let debug = format!("{ticketer:?}");
        assert_eq!(debug, "SharedTicketer { keys: [redacted; 1] }");
        assert!(!error.contains(&A[1..]));
    }
}
