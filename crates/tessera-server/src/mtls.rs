//! Mutual-TLS client authentication and certificate-bound tokens (RFC 8705).
//!
//! With `serve --client-ca FILE`, the TLS handshake asks for a client certificate (never
//! requires one: most clients authenticate otherwise) and checks only that the client holds
//! its private key. Who the certificate names is decided per client at the token endpoint:
//!
//! - `tls_client_auth` (section 2.1): the chain leads to the configured CA, the certificate
//!   is within its validity period, and it carries the registered subject DN (compared as
//!   parsed RDNs, `crate::dn`), DNS SAN or URI SAN (a SPIFFE ID, say) — exactly one of them,
//!   as section 2.1.2 requires.
//! - `self_signed_tls_client_auth` (section 2.2): the certificate's public key is one of
//!   the client's registered JWKs; no chain is involved.
//!
//! A token issued to a client that authenticated with its certificate is bound to it: claim
//! `cnf` with `x5t#S256`, the SHA-256 thumbprint of the DER certificate (section 3.1).

use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::public_key::PublicKey;
use x509_parser::x509::X509Name;

use tessera_store::{AuthMethod, CertificateMatch};

use crate::dn::Dn;

/// The certificate chain a client presented on its connection (or a trusted proxy passed
/// on), end entity first; in the request's extensions.
#[derive(Debug, Clone)]
pub(crate) struct PeerCertificate(pub Arc<[CertificateDer<'static>]>);

impl PeerCertificate {
    /// The end-entity certificate.
    pub(crate) fn end_entity(&self) -> Option<&CertificateDer<'static>> {
        self.0.first()
    }

    /// RFC 8705 section 3.1: `x5t#S256`, base64url SHA-256 of the DER certificate.
    pub(crate) fn thumbprint(&self) -> Option<String> {
        self.end_entity().map(|cert| thumbprint(cert))
    }
}

/// `x5t#S256` of a DER certificate.
pub(crate) fn thumbprint(cert: &[u8]) -> String {
    tessera_jose::sha256_b64(cert)
}

/// Whether `chain` authenticates a client registered with `method` and `expected`: for
/// `tls_client_auth`, the chain leads to the client CA (`ca`), is valid at `now` and names
/// what was registered; for `self_signed_tls_client_auth`, its key is a registered one.
pub(crate) fn authenticates(
    ca: Option<&dyn ClientCertVerifier>,
    chain: &[CertificateDer<'static>],
    method: AuthMethod,
    expected: &CertificateMatch,
    now: UnixTime,
) -> bool {
    match (method, expected) {
        (AuthMethod::SelfSignedTlsClientAuth, CertificateMatch::Jwks(jwks)) => {
            serde_json::from_str(jwks).is_ok_and(|jwks| key_matches(chain, &jwks))
        }
        (AuthMethod::TlsClientAuth, expected) => {
            ca.is_some_and(|ca| names_match(ca, chain, expected, now))
        }
        _ => false,
    }
}

/// Checks the chain against the client CA and the name; `now` decides validity.
fn names_match(
    ca: &dyn ClientCertVerifier,
    chain: &[CertificateDer<'static>],
    expected: &CertificateMatch,
    now: UnixTime,
) -> bool {
    let Some((end_entity, intermediates)) = chain.split_first() else {
        return false;
    };
    if ca
        .verify_client_cert(end_entity, intermediates, now)
        .is_err()
    {
        return false;
    }
    let Ok((_, cert)) = X509Certificate::from_der(end_entity) else {
        return false;
    };
    match expected {
        CertificateMatch::SubjectDn(dn) => subject_matches(cert.subject(), dn),
        CertificateMatch::SanDns(name) => sans(&cert)
            .any(|san| matches!(san, GeneralName::DNSName(d) if d.eq_ignore_ascii_case(name))),
        CertificateMatch::SanUri(uri) => {
            sans(&cert).any(|san| matches!(san, GeneralName::URI(u) if *u == uri.as_str()))
        }
        CertificateMatch::Jwks(_) => false,
    }
}

fn sans<'a>(cert: &'a X509Certificate<'a>) -> impl Iterator<Item = &'a GeneralName<'a>> {
    cert.subject_alternative_name()
        .ok()
        .flatten()
        .into_iter()
        .flat_map(|ext| ext.value.general_names.iter())
}

/// RFC 8705 section 2.1.2: whether the certificate's subject is the registered DN (an
/// RFC 4514 string), by `distinguishedNameMatch` (RFC 4517 section 4.2.15, see [`Dn`]).
/// RFC 4514 writes the last RDN first; the same RDNs written in the certificate's own order
/// (as this project's README once showed them) are taken too, but only as exactly that
/// reversal, never in another order. A registered DN that does not parse matches nothing.
fn subject_matches(subject: &X509Name<'_>, registered: &str) -> bool {
    let Ok(registered) = Dn::parse(registered) else {
        return false;
    };
    let subject = Dn::of_name(subject);
    registered.matches(&subject) || registered.reversed().matches(&subject)
}

/// RFC 8705 section 2.2: whether the certificate's public key is one of `jwks` (a JWK Set
/// as JSON: OKP Ed25519, EC P-256 or RSA keys).
fn key_matches(chain: &[CertificateDer<'static>], jwks: &serde_json::Value) -> bool {
    let Some(end_entity) = chain.first() else {
        return false;
    };
    let Ok((_, cert)) = X509Certificate::from_der(end_entity) else {
        return false;
    };
    let spki = cert.public_key();
    let b64 = |v: &serde_json::Value| v.as_str().and_then(|s| URL_SAFE_NO_PAD.decode(s).ok());
    let keys = jwks["keys"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    keys.iter()
        .any(|jwk| match (jwk["kty"].as_str(), spki.parsed()) {
            (Some("OKP"), _) if jwk["crv"] == "Ed25519" => {
                spki.algorithm.algorithm.to_id_string() == "1.3.101.112"
                    && b64(&jwk["x"]).as_deref() == Some(spki.subject_public_key.data.as_ref())
            }
            (Some("EC"), Ok(PublicKey::EC(point))) if jwk["crv"] == "P-256" => {
                match (b64(&jwk["x"]), b64(&jwk["y"])) {
                    (Some(x), Some(y)) => point.data() == [&[4u8][..], &x, &y].concat().as_slice(),
                    _ => false,
                }
            }
            (Some("RSA"), Ok(PublicKey::RSA(rsa))) => {
                let trim = |b: &[u8]| {
                    b.iter()
                        .skip_while(|&&x| x == 0)
                        .copied()
                        .collect::<Vec<u8>>()
                };
                b64(&jwk["n"]).is_some_and(|n| trim(&n) == trim(rsa.modulus))
                    && b64(&jwk["e"]).is_some_and(|e| trim(&e) == trim(rsa.exponent))
            }
            _ => false,
        })
}

/// The handshake's side of client certificates: any certificate is taken, provided the
/// client proves it holds the key (the handshake signature); whether it names a client is
/// the token endpoint's decision, per client method. Never required.
#[derive(Debug)]
pub(crate) struct OfferedCertificate {
    provider: Arc<rustls::crypto::CryptoProvider>,
    hints: Vec<DistinguishedName>,
}

impl OfferedCertificate {
    pub(crate) fn new(
        provider: Arc<rustls::crypto::CryptoProvider>,
        hints: Vec<DistinguishedName>,
    ) -> Self {
        Self { provider, hints }
    }
}

impl ClientCertVerifier for OfferedCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The client certificate of the request (RFC 8705): the TLS connection's, or, from a
/// trusted proxy only, the one in its `--client-cert-header`. From anyone else that header
/// is ignored: it would let a caller claim any certificate.
pub(crate) fn peer_certificate(
    state: &crate::AppState,
    parts: &axum::http::request::Parts,
) -> Option<PeerCertificate> {
    if let Some(certificate) = parts.extensions.get::<PeerCertificate>() {
        return Some(certificate.clone());
    }
    let name = state.config().client_cert_header.as_ref()?;
    let peer = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|axum::extract::ConnectInfo(addr)| crate::limits::canonical(addr.ip()))?;
    let trusted = state
        .config()
        .trusted_proxies
        .iter()
        .any(|proxy| crate::limits::canonical(*proxy) == peer);
    if !trusted {
        return None;
    }
    let mut values = parts.headers.get_all(name).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let der = tessera_verify::ClientCertificate::from_header(value.to_str().ok()?)?;
    Some(PeerCertificate(vec![CertificateDer::from(der.0)].into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate for a key of `alg`, and the key's public JWK members.
    fn certificate(
        alg: &'static rcgen::SignatureAlgorithm,
    ) -> (CertificateDer<'static>, serde_json::Value) {
        let key = rcgen::KeyPair::generate_for(alg).unwrap();
        let params = rcgen::CertificateParams::new(vec!["client".to_owned()]).unwrap();
        let der = params.self_signed(&key).unwrap().der().clone();
        let (_, cert) = X509Certificate::from_der(&der).unwrap();
        let b64 = |b: &[u8]| serde_json::Value::from(URL_SAFE_NO_PAD.encode(b));
        let jwk = match cert.public_key().parsed().unwrap() {
            PublicKey::EC(point) => serde_json::json!({"kty": "EC", "crv": "P-256",
                "x": b64(&point.data()[1..33]), "y": b64(&point.data()[33..65])}),
            // RFC 7518 section 6.3.1: unsigned, without the DER integer's leading zero.
            PublicKey::RSA(rsa) => serde_json::json!({"kty": "RSA",
                "n": b64(rsa.modulus.strip_prefix(&[0]).unwrap_or(rsa.modulus)),
                "e": b64(rsa.exponent)}),
            _ => serde_json::json!({"kty": "OKP", "crv": "Ed25519",
                "x": b64(&cert.public_key().subject_public_key.data)}),
        };
        (der, jwk)
    }

    /// RFC 8705 section 2.2: a self-signed certificate matches a registered JWK of the same
    /// public key, of the same type and curve, and nothing else.
    #[test]
    fn a_self_signed_certificate_matches_only_its_own_key() {
        let set = |jwk: &serde_json::Value| serde_json::json!({ "keys": [jwk] });
        for alg in [
            &rcgen::PKCS_ED25519,
            &rcgen::PKCS_ECDSA_P256_SHA256,
            &rcgen::PKCS_RSA_SHA256,
        ] {
            let (cert, jwk) = certificate(alg);
            let (_, other) = certificate(alg);
            let chain = [cert];
            assert!(key_matches(&chain, &set(&jwk)), "{jwk}");
            assert!(!key_matches(&chain, &set(&other)), "{other}");
            assert!(!key_matches(&[], &set(&jwk)));
            let mut wrong_curve = jwk.clone();
            match jwk["kty"].as_str() {
                Some("OKP") => wrong_curve["crv"] = "X25519".into(),
                Some("EC") => wrong_curve["crv"] = "P-384".into(),
                _ => wrong_curve["e"] = "AQAB".into(),
            }
            if jwk["e"] != "AQAB" {
                assert!(!key_matches(&chain, &set(&wrong_curve)), "{wrong_curve}");
            }
            let mut wrong_modulus = jwk.clone();
            if jwk["kty"] == "RSA" {
                wrong_modulus["n"] = other["n"].clone();
                assert!(!key_matches(&chain, &set(&wrong_modulus)));
                let mut wrong_exponent = jwk.clone();
                wrong_exponent["e"] = "Aw".into();
                assert!(!key_matches(&chain, &set(&wrong_exponent)));
            }
        }
    }

    #[test]
    fn a_subject_matches_in_rfc_4514_order_or_exactly_reversed() {
        // SEQUENCE { SET { O=Acme }, SET { OU=ops }, SET { CN=billing } }, UTF8Strings.
        let ava = |oid: u8, value: &str| {
            let mut out = vec![0x31, 9 + value.len() as u8, 0x30, 7 + value.len() as u8];
            out.extend([0x06, 3, 0x55, 4, oid, 0x0c, value.len() as u8]);
            out.extend(value.as_bytes());
            out
        };
        let rdns = [ava(10, "Acme"), ava(11, "ops"), ava(3, "billing")].concat();
        let der = [&[0x30, rdns.len() as u8][..], &rdns].concat();
        let (_, subject) = X509Name::from_der(&der).unwrap();
        assert!(subject_matches(&subject, "CN=billing,OU=ops,O=Acme"));
        assert!(subject_matches(&subject, "O=Acme, OU=ops, CN=billing"));
        for refused in [
            "OU=ops,CN=billing,O=Acme",
            "CN=billing,O=Acme,OU=ops",
            "O=Acme,CN=billing,OU=ops",
            "CN=billing+OU=ops,O=Acme",
            "CN=billing,O=Acme",
            "CN=billing;OU=ops;O=Acme",
        ] {
            assert!(!subject_matches(&subject, refused), "{refused}");
        }
    }
}
