//! Client assertions for the `private_key_jwt` benchmark (`bench/run.sh --auth
//! private_key_jwt`): each `jti` is single-use, so the load generator needs one fresh
//! assertion per request, signed ahead of time so that the signing does not compete with it.
//!
//! ```sh
//! # A new Ed25519 key (PKCS#8) in KEY; prints the JWK Set to register the client with.
//! cargo run --release -p tessera-bench-floor --bin mint_assertions -- key KEY > jwks.json
//! # COUNT assertions, one per line, cycling over the client ids in CLIENTS (one a line):
//! # header {alg: EdDSA, kid: k1, typ: JWT}, iss = sub = the client id, aud = AUDIENCE (the
//! # server's issuer), iat now, exp now + LIFETIME seconds, jti 128 random bits.
//! cargo run --release -p tessera-bench-floor --bin mint_assertions -- mint KEY CLIENTS AUDIENCE COUNT LIFETIME > assertions.txt
//! ```

use std::io::{BufWriter, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rng = SystemRandom::new();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["key", path] => {
            let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng)?;
            std::fs::write(path, pkcs8.as_ref())?;
            let public = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref())?;
            let x = URL_SAFE_NO_PAD.encode(public.public_key().as_ref());
            println!(
                r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","x":"{x}","kid":"k1","alg":"EdDSA","use":"sig"}}]}}"#
            );
        }
        ["mint", key, clients, audience, count, lifetime] => {
            let key = Ed25519KeyPair::from_pkcs8(&std::fs::read(key)?)?;
            let clients = std::fs::read_to_string(clients)?;
            let clients: Vec<&str> = clients.lines().filter(|l| !l.is_empty()).collect();
            let count: usize = count.parse()?;
            let lifetime: u64 = lifetime.parse()?;
            let iat = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
            let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"EdDSA","kid":"k1","typ":"JWT"}"#);
            let mut out = BufWriter::new(std::io::stdout().lock());
            for client in clients.iter().cycle().take(count) {
                let mut jti = [0u8; 16];
                rng.fill(&mut jti)?;
                let claims = format!(
                    r#"{{"iss":"{client}","sub":"{client}","aud":"{audience}","iat":{iat},"exp":{},"jti":"{}"}}"#,
                    iat + lifetime,
                    URL_SAFE_NO_PAD.encode(jti)
                );
                let input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims));
                let signature = URL_SAFE_NO_PAD.encode(key.sign(input.as_bytes()));
                writeln!(out, "{input}.{signature}")?;
            }
            out.flush()?;
        }
        _ => {
            return Err(
                "usage: mint_assertions key KEY | mint KEY CLIENTS AUDIENCE COUNT LIFETIME".into(),
            )
        }
    }
    Ok(())
}
