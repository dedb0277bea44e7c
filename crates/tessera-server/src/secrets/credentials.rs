//! Generated client credentials: ids of a documented shape, and secrets of 256 random bits
//! in base64url (RFC 6749 2.3.1: characters no client library mis-encodes).

use aws_lc_rs::rand;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use tessera_proto::{ClientId, ClientSecret};

/// `n` random bytes in base64url without padding.
pub fn random_token(n: usize) -> String {
    let mut buf = vec![0u8; n];
    rand::fill(&mut buf).expect("system random source");
    URL_SAFE_NO_PAD.encode(buf)
}

/// A new client identifier: `tc_` and 128 random bits.
pub fn new_client_id() -> ClientId {
    ClientId::parse(&format!("tc_{}", random_token(16))).expect("non-empty id")
}

/// Whether `id` has the shape [`new_client_id`] gives: `tc_` and 22 base64url characters.
pub fn is_generated_client_id(id: &str) -> bool {
    id.strip_prefix("tc_").is_some_and(|rest| {
        rest.len() == 22
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// A new client secret: `tcs_` and 256 random bits, all URL-safe characters.
pub fn new_client_secret() -> ClientSecret {
    ClientSecret::new(format!("tcs_{}", random_token(32)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_credentials_are_url_safe_and_long() {
        let secret = new_client_secret();
        let body = secret.expose().strip_prefix("tcs_").unwrap();
        assert_eq!(URL_SAFE_NO_PAD.decode(body).unwrap().len(), 32);
        assert!(secret
            .expose()
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_ne!(new_client_id(), new_client_id());
    }

    #[test]
    fn generated_ids_have_the_generated_shape_and_others_do_not() {
        for _ in 0..100 {
            assert!(is_generated_client_id(new_client_id().as_str()));
        }
        let id = new_client_id();
        let id = id.as_str();
        for other in [
            "tc_nobody",
            &id[1..],
            &format!("{id}A"),
            &format!("xx_{}", &id[3..]),
            &format!("{}%", &id[..id.len() - 1]),
        ] {
            assert!(!is_generated_client_id(other), "{other}");
        }
    }
}
