//! Certificate-bound tokens (RFC 8705 section 3): a token whose `cnf` names a client
//! certificate's thumbprint (`x5t#S256`) is accepted only on a request that presented that
//! certificate. The API puts the certificate in the request's extensions as a
//! [`ClientCertificate`]: from its own TLS acceptor, or, behind a TLS-terminating proxy,
//! from the header the proxy sets ([`ClientCertificate::from_header`]; only from the proxy:
//! anyone else could send the header).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// The DER client certificate a request presented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate(pub Vec<u8>);

impl ClientCertificate {
    /// `x5t#S256`: base64url SHA-256 of the DER certificate.
    pub fn thumbprint(&self) -> String {
        tessera_jose::sha256_b64(&self.0)
    }

    /// Reads a proxy's header: a PEM certificate, URL-escaped as nginx's
    /// `$ssl_client_escaped_cert` writes it (or plain). `None` when it holds none.
    pub fn from_header(value: &str) -> Option<Self> {
        let pem = percent_decode(value)?;
        let body = pem
            .split("-----BEGIN CERTIFICATE-----")
            .nth(1)?
            .split("-----END CERTIFICATE-----")
            .next()?;
        let base64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
        STANDARD
            .decode(base64)
            .ok()
            .filter(|der| !der.is_empty())
            .map(Self)
    }
}

/// `%XX` escapes decoded; `None` on a malformed escape or bytes that are not UTF-8.
fn percent_decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_header_reads_back_as_the_certificate() {
        let der = vec![0x30, 0x03, 0x02, 0x01, 0x01];
        let pem = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            STANDARD.encode(&der)
        );
        let escaped: String = pem
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        assert_eq!(
            ClientCertificate::from_header(&escaped),
            Some(ClientCertificate(der.clone()))
        );
        assert_eq!(
            ClientCertificate::from_header(&pem),
            Some(ClientCertificate(der))
        );
        assert_eq!(ClientCertificate::from_header("%ZZ"), None);
        assert_eq!(ClientCertificate::from_header("no pem"), None);
    }
}
