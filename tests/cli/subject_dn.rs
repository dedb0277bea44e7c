//! `tls_client_auth` by subject DN (RFC 8705 section 2.1.2) through the real server:
//! certificates whose subjects are built to collide with registered DNs (a comma inside a
//! value, `+` multi-valued RDNs, escapes, string types, case and spaces, RDN order), over
//! the TLS connection and through a trusted proxy's header; and DNs that do not parse
//! refused at `client create`.

use std::path::Path;

use super::tls::{certificate, mtls_token, presenting, start_tls, trusting, write_pair, Pki};
use super::{fails, ok};

/// DER: a tag and its content.
fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    match content.len() {
        n if n < 0x80 => out.push(n as u8),
        n if n < 0x100 => out.extend([0x81, n as u8]),
        n => out.extend([0x82, (n >> 8) as u8, n as u8]),
    }
    out.extend_from_slice(content);
    out
}

/// The length of the header, and of the whole, of the DER element at the start of `der`.
fn lengths(der: &[u8]) -> (usize, usize) {
    if der[1] < 0x80 {
        return (2, 2 + usize::from(der[1]));
    }
    let n = usize::from(der[1] & 0x7f);
    let len = der[2..2 + n]
        .iter()
        .fold(0, |len, &b| len << 8 | usize::from(b));
    (2 + n, 2 + n + len)
}

/// The elements inside the DER SEQUENCE at the start of `der`.
fn elements(der: &[u8]) -> Vec<&[u8]> {
    let (header, whole) = lengths(der);
    let mut rest = &der[header..whole];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (_, len) = lengths(rest);
        out.push(&rest[..len]);
        rest = &rest[len..];
    }
    out
}

const UTF8: u8 = 0x0c;
const PRINTABLE: u8 = 0x13;
const BMP: u8 = 0x1e;
const CN: &[u8] = &[0x55, 4, 3];
const O: &[u8] = &[0x55, 4, 10];
const OU: &[u8] = &[0x55, 4, 11];

/// An attribute type and value.
fn pair(oid: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
    tlv(0x30, &[tlv(0x06, oid), tlv(tag, value)].concat())
}

fn utf8(oid: &[u8], value: &str) -> Vec<u8> {
    pair(oid, UTF8, value.as_bytes())
}

/// An X.501 name: RDNs in ASN.1 order (most general first), each a set of pairs.
fn name(rdns: &[&[Vec<u8>]]) -> Vec<u8> {
    let rdns: Vec<u8> = rdns
        .iter()
        .flat_map(|pairs| tlv(0x31, &pairs.concat()))
        .collect();
    tlv(0x30, &rdns)
}

impl Pki {
    /// A client certificate signed by the CA whose subject is `subject` (a DER name): rcgen
    /// makes the certificate, then its subject is replaced and it is signed again, since
    /// rcgen writes one pair per RDN and one value per type. PEM of certificate and key.
    fn client_named(&self, subject: &[u8]) -> (String, String) {
        use aws_lc_rs::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
        use base64::Engine;
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let made = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let der = made.der().to_vec();
        let certificate = elements(&der);
        // TBSCertificate: version, serial, signature, issuer, validity, subject, ...
        let mut fields = elements(certificate[0]);
        fields[5] = subject;
        let tbs = tlv(0x30, &fields.concat());
        let signer = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_ASN1_SIGNING,
            &self.ca_key.serialize_der(),
        )
        .unwrap();
        let signature = signer
            .sign(&aws_lc_rs::rand::SystemRandom::new(), &tbs)
            .unwrap();
        let der = tlv(
            0x30,
            &[
                tbs.as_slice(),
                certificate[1],
                &tlv(0x03, &[&[0], signature.as_ref()].concat()),
            ]
            .concat(),
        );
        let body = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = body
            .as_bytes()
            .chunks(64)
            .map(|line| std::str::from_utf8(line).unwrap())
            .collect();
        let pem = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            lines.join("\n")
        );
        (pem, key.serialize_pem())
    }
}

fn register(dir: &Path, dn: &str) -> String {
    let created = ok(
        dir,
        &[
            "client",
            "create",
            "--plan",
            "pro",
            "--auth-method",
            "tls_client_auth",
            "--tls-subject-dn",
            dn,
            "--json",
        ],
    );
    let created: serde_json::Value = serde_json::from_str(created.trim()).unwrap();
    created["client_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn subject_dns_match_as_parsed_rdns_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pki = Pki::new("Acme Clients CA");
    let ca = d.join("clients-ca.pem");
    std::fs::write(&ca, pki.ca.pem()).unwrap();
    let server_pair = certificate();
    let (cert_path, key_path) = write_pair(d, &server_pair);
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);

    // A DN that does not parse is refused at registration, saying where and why.
    for (dn, why) in [
        (
            "CN=billing;O=Acme",
            "at character 11: ';' in a value must be escaped",
        ),
        (
            "CN=billing,O=Acme+",
            "at character 19: expected an attribute type",
        ),
        ("CN=billing,ORG=Acme", "unknown attribute type \"ORG\""),
        ("CN=a\\b", "at character 5: '\\' must be followed by"),
        ("CN=", "the value of CN is empty"),
    ] {
        let err = fails(
            d,
            &[
                "client",
                "create",
                "--plan",
                "pro",
                "--auth-method",
                "tls_client_auth",
                "--tls-subject-dn",
                dn,
            ],
        );
        assert!(
            err.contains("not an RFC 4514 distinguished name") && err.contains(why),
            "{dn}: {err}"
        );
    }

    // As the review registered it, and as the README used to show it.
    let billing = register(d, "CN=billing, O=Acme");
    let comma = register(d, "CN=a\\,b,O=Acme");
    let multi = register(d, "CN=billing+OU=ops,O=Acme");
    let three = register(d, "CN=billing,OU=ops,O=Acme");

    let server = start_tls(
        d,
        &cert_path,
        &key_path,
        &[
            "--client-ca",
            ca.to_str().unwrap(),
            "--client-cert-header",
            "X-Client-Cert",
            "--trusted-proxy",
            "127.0.0.1",
        ],
    );
    let base = server.base.as_str();
    let bmp = |s: &str| -> Vec<u8> { s.encode_utf16().flat_map(u16::to_be_bytes).collect() };
    let cases = vec![
        (
            "one CN reading like two RDNs (the review's certificate)",
            name(&[&[utf8(CN, "billing, O=Acme")]]),
            vec![("billing", &billing, 401)],
        ),
        (
            "O=Acme then CN=billing, the RFC 4514 string's reverse",
            name(&[&[utf8(O, "Acme")], &[utf8(CN, "billing")]]),
            vec![("billing", &billing, 200), ("comma", &comma, 401)],
        ),
        (
            "CN=billing then O=Acme, exactly the string's order",
            name(&[&[utf8(CN, "billing")], &[utf8(O, "Acme")]]),
            vec![("billing", &billing, 200)],
        ),
        (
            "PrintableString and BMPString, other case and spaces",
            name(&[
                &[pair(O, PRINTABLE, b"  ACME ")],
                &[pair(CN, BMP, &bmp("Billing"))],
            ]),
            vec![("billing", &billing, 200)],
        ),
        (
            "another organization",
            name(&[&[utf8(O, "Acme Evil")], &[utf8(CN, "billing")]]),
            vec![("billing", &billing, 401)],
        ),
        (
            "a comma inside the CN, registered escaped",
            name(&[&[utf8(O, "Acme")], &[utf8(CN, "a,b")]]),
            vec![("comma", &comma, 200), ("billing", &billing, 401)],
        ),
        (
            "a backslash and a comma inside the CN",
            name(&[&[utf8(O, "Acme")], &[utf8(CN, "a\\,b")]]),
            vec![("comma", &comma, 401)],
        ),
        (
            "CN and OU in one RDN, listed in another order",
            name(&[&[utf8(O, "Acme")], &[utf8(OU, "ops"), utf8(CN, "billing")]]),
            vec![("multi", &multi, 200), ("three", &three, 401)],
        ),
        (
            "CN and OU in RDNs of their own",
            name(&[
                &[utf8(O, "Acme")],
                &[utf8(OU, "ops")],
                &[utf8(CN, "billing")],
            ]),
            vec![("multi", &multi, 401), ("three", &three, 200)],
        ),
        (
            "the same three RDNs permuted",
            name(&[
                &[utf8(OU, "ops")],
                &[utf8(O, "Acme")],
                &[utf8(CN, "billing")],
            ]),
            vec![("three", &three, 401), ("billing", &billing, 401)],
        ),
        (
            "the three RDNs exactly reversed",
            name(&[
                &[utf8(CN, "billing")],
                &[utf8(OU, "ops")],
                &[utf8(O, "Acme")],
            ]),
            vec![("three", &three, 200)],
        ),
    ];
    for (what, subject, expected) in cases {
        let (cert, key) = pki.client_named(&subject);
        let http = presenting(&server_pair.0, (&cert, &key));
        for (client, id, want) in expected {
            let (status, body) = mtls_token(&http, base, id).await;
            assert_eq!(status, want, "{what}, client {client}: {body}");
            if want == 401 {
                assert_eq!(body["error"], "invalid_client", "{what}: {body}");
            }
        }
    }

    // Through a trusted proxy's header (no certificate on the connection), the same rule.
    let by_header = |subject: &[u8]| {
        let (cert, _) = pki.client_named(subject);
        tessera_testkit::escaped_pem(&cert)
    };
    for (subject, want) in [
        (name(&[&[utf8(CN, "billing, O=Acme")]]), 401),
        (name(&[&[utf8(O, "Acme")], &[utf8(CN, "billing")]]), 200),
    ] {
        let answer = trusting(&server_pair.0)
            .post(format!("{base}/connect/token"))
            .header("x-client-cert", by_header(&subject))
            .form(&[
                ("grant_type", "client_credentials"),
                ("scope", "news-api"),
                ("client_id", &billing),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), want);
    }
}
