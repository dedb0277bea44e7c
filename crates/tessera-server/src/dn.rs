//! Distinguished names: the string form an operator registers for a `tls_client_auth` client
//! (RFC 4514, the form RFC 8705 section 2.1.2 names) and `distinguishedNameMatch` (RFC 4517
//! section 4.2.15), which compares it with a certificate's subject.
//!
//! Both sides become the same structure, a sequence of RDNs, each a set of attribute type
//! (an OID) and value pairs, and are compared as that, never as text: a comma inside a value
//! is a character of the value, not a separator.
//!
//! Values of the directory string types are compared by `caseIgnoreMatch` (RFC 4517 section
//! 4.2.11) after RFC 4518 preparation: control and format characters removed, other spaces
//! mapped to SPACE, case folded, NFKC, and insignificant spaces (leading, trailing, the
//! width of inner runs) ignored. Values of other types, and strings that cannot be decoded,
//! compare by their encoding; a registered name gives such a value as `#` and its BER in hex.

use unicode_normalization::UnicodeNormalization;
use x509_parser::asn1_rs::{Any, Class, FromBer, Oid, Tag};
use x509_parser::x509::X509Name;

/// A distinguished name, its RDNs in the order of the ASN.1 `RDNSequence` (most general
/// first: `C`, `O`, …, `CN`), which is the reverse of the RFC 4514 string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dn(Vec<Rdn>);

/// A relative distinguished name: its pairs sorted, so that two RDNs with the same pairs in
/// another order are equal (RFC 4517 section 4.2.15 compares an RDN's pairs as a set).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rdn(Vec<Ava>);

/// An attribute type and value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Ava {
    /// The attribute type: the content octets of its OID.
    oid: Vec<u8>,
    value: Value,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Value {
    /// A directory string, prepared for `caseIgnoreMatch` (see [`prepare`]), so that equal
    /// values are equal strings.
    Text(String),
    /// Any other value, or a string that could not be decoded and prepared: its tag and
    /// content octets. It never equals a [`Value::Text`].
    Encoded {
        class: u8,
        constructed: bool,
        tag: u32,
        content: Vec<u8>,
    },
}

/// Why a string is not an RFC 4514 distinguished name: where (the position of a character,
/// counted from 1) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at character {at}: {what}")]
pub(crate) struct DnError {
    at: usize,
    what: String,
}

/// The attribute type names taken (compared without case): RFC 4514 section 3's, their
/// RFC 4519 long forms, and a few more that certificates carry, with their OIDs. Any other
/// type is given as its dotted OID.
const NAMES: &[(&str, &str)] = &[
    ("CN", "2.5.4.3"),
    ("commonName", "2.5.4.3"),
    ("L", "2.5.4.7"),
    ("localityName", "2.5.4.7"),
    ("ST", "2.5.4.8"),
    ("stateOrProvinceName", "2.5.4.8"),
    ("O", "2.5.4.10"),
    ("organizationName", "2.5.4.10"),
    ("OU", "2.5.4.11"),
    ("organizationalUnitName", "2.5.4.11"),
    ("C", "2.5.4.6"),
    ("countryName", "2.5.4.6"),
    ("STREET", "2.5.4.9"),
    ("streetAddress", "2.5.4.9"),
    ("DC", "0.9.2342.19200300.100.1.25"),
    ("domainComponent", "0.9.2342.19200300.100.1.25"),
    ("UID", "0.9.2342.19200300.100.1.1"),
    ("userId", "0.9.2342.19200300.100.1.1"),
    ("SN", "2.5.4.4"),
    ("surname", "2.5.4.4"),
    ("GN", "2.5.4.42"),
    ("givenName", "2.5.4.42"),
    ("serialNumber", "2.5.4.5"),
    ("title", "2.5.4.12"),
    ("postalCode", "2.5.4.17"),
    ("initials", "2.5.4.43"),
    ("generationQualifier", "2.5.4.44"),
    ("dnQualifier", "2.5.4.46"),
    ("pseudonym", "2.5.4.65"),
    ("organizationIdentifier", "2.5.4.97"),
    ("emailAddress", "1.2.840.113549.1.9.1"),
];

impl Dn {
    /// Parses the string form of RFC 4514 section 3: RDNs separated by `,` (the last RDN of
    /// the sequence first), the pairs of a multi-valued RDN by `+`, each `type=value` with
    /// the type a name of [`NAMES`] or a dotted OID and the value either a string (with
    /// `\` escapes of special characters and `\XX` hex pairs of UTF-8) or `#` and the hex
    /// of a BER value. Spaces around `,`, `+` and `=` are ignored (RFC 4514 has none there,
    /// but names are often written so). An empty name or value is refused: it would match
    /// certificates that name no one.
    pub(crate) fn parse(text: &str) -> Result<Self, DnError> {
        Parser { text, pos: 0 }.dn()
    }

    /// A certificate's subject (or any X.501 name) in this form.
    pub(crate) fn of_name(name: &X509Name<'_>) -> Self {
        Dn(name
            .iter()
            .map(|rdn| {
                let mut avas: Vec<Ava> = rdn
                    .iter()
                    .map(|ava| Ava {
                        oid: ava.attr_type().as_bytes().to_vec(),
                        value: Value::of(ava.attr_value()),
                    })
                    .collect();
                avas.sort();
                Rdn(avas)
            })
            .collect())
    }

    /// The same RDNs in the opposite order.
    pub(crate) fn reversed(&self) -> Self {
        Dn(self.0.iter().rev().cloned().collect())
    }

    /// RFC 4517 section 4.2.15 `distinguishedNameMatch`: as many RDNs, in the same order,
    /// each with the same set of types and values (values compared as [`Value`] says).
    pub(crate) fn matches(&self, other: &Self) -> bool {
        self == other
    }
}

impl Value {
    /// A value as a certificate (or a registered `#` value) encodes it: a string type
    /// decoded and prepared, anything else kept encoded.
    fn of(any: &Any<'_>) -> Self {
        let header = &any.header;
        if header.class() == Class::Universal && header.is_primitive() {
            if let Some(text) = decode_string(header.tag(), any.data).and_then(|s| prepare(&s)) {
                return Value::Text(text);
            }
        }
        Value::Encoded {
            class: header.class() as u8,
            constructed: header.is_constructed(),
            tag: header.tag().0,
            content: any.data.to_vec(),
        }
    }
}

/// The text of a string type: UTF8String, PrintableString, IA5String, VisibleString,
/// NumericString, BMPString (UTF-16), UniversalString (UTF-32), and TeletexString when it
/// holds only the PrintableString characters, where T.61 and ASCII agree. `None` for other
/// types and for bytes outside the type's repertoire.
fn decode_string(tag: Tag, bytes: &[u8]) -> Option<String> {
    let ascii = |allowed: fn(&u8) -> bool| {
        bytes
            .iter()
            .all(allowed)
            .then(|| bytes.iter().map(|&b| char::from(b)).collect())
    };
    let printable = |b: &u8| b.is_ascii_alphanumeric() || b" '()+,-./:=?".contains(b);
    match tag {
        Tag::Utf8String => std::str::from_utf8(bytes).ok().map(str::to_owned),
        // Many CAs put `*`, `@` or `&` in a PrintableString; any visible ASCII is unambiguous.
        Tag::PrintableString | Tag::VisibleString => ascii(|b| (0x20..0x7f).contains(b)),
        Tag::Ia5String => ascii(u8::is_ascii),
        Tag::NumericString => ascii(|b| b.is_ascii_digit() || *b == b' '),
        Tag::TeletexString => ascii(printable),
        Tag::BmpString if bytes.len() % 2 == 0 => char::decode_utf16(
            bytes
                .chunks_exact(2)
                .map(|pair| u16::from_be_bytes([pair[0], pair[1]])),
        )
        .collect::<Result<String, _>>()
        .ok(),
        Tag::UniversalString if bytes.len() % 4 == 0 => bytes
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        _ => None,
    }
}

/// RFC 4518 section 2, string preparation for `caseIgnoreMatch`: map (2.2: controls and
/// format characters to nothing, the other spaces to SPACE, case folded), normalize (2.3:
/// NFKC), prohibit (2.4: `None` for private use, non-characters and U+FFFD; unassigned code
/// points are not checked), and insignificant space handling (2.6.1: no leading or trailing
/// spaces, inner runs as one).
fn prepare(text: &str) -> Option<String> {
    let mapped: String = text.chars().filter_map(map_character).collect();
    // Folded after NFKC too, for compatibility characters that normalize to capitals.
    let folded: String = mapped
        .nfkc()
        .flat_map(fold)
        .collect::<String>()
        .nfkc()
        .collect();
    if folded.chars().any(prohibited) {
        return None;
    }
    Some(
        folded
            .split(' ')
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// RFC 4518 section 2.2, the characters mapped to nothing or to SPACE.
fn map_character(c: char) -> Option<char> {
    match c {
        '\u{9}'..='\u{d}' | '\u{85}' => Some(' '),
        '\u{0}'..='\u{8}'
        | '\u{e}'..='\u{1f}'
        | '\u{7f}'..='\u{84}'
        | '\u{86}'..='\u{9f}'
        | '\u{ad}'
        | '\u{34f}'
        | '\u{6dd}'
        | '\u{70f}'
        | '\u{1806}'
        | '\u{180b}'..='\u{180e}'
        | '\u{200b}'..='\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2060}'..='\u{2063}'
        | '\u{206a}'..='\u{206f}'
        | '\u{fe00}'..='\u{fe0f}'
        | '\u{feff}'
        | '\u{fff9}'..='\u{fffc}'
        | '\u{1d173}'..='\u{1d17a}'
        | '\u{e0001}'
        | '\u{e0020}'..='\u{e007f}' => None,
        '\u{a0}'
        | '\u{1680}'
        | '\u{2000}'..='\u{200a}'
        | '\u{2028}'
        | '\u{2029}'
        | '\u{202f}'
        | '\u{205f}'
        | '\u{3000}' => Some(' '),
        c => Some(c),
    }
}

/// Case folding (RFC 4518 section 2.2, RFC 3454 table B.2), as upper then lower case: the
/// same on both sides, which is what a comparison needs (`ß` and `SS` fold alike).
fn fold(c: char) -> impl Iterator<Item = char> {
    c.to_uppercase().flat_map(char::to_lowercase)
}

/// RFC 4518 section 2.4: private use, non-characters and the replacement character.
fn prohibited(c: char) -> bool {
    matches!(c,
        '\u{e000}'..='\u{f8ff}'
        | '\u{f0000}'..='\u{ffffd}'
        | '\u{100000}'..='\u{10fffd}'
        | '\u{fdd0}'..='\u{fdef}'
        | '\u{fffd}')
        || (u32::from(c) & 0xfffe) == 0xfffe
}

/// A recursive-descent reader of RFC 4514 section 3's grammar over the string's bytes (its
/// special characters are all ASCII, and UTF-8 never uses ASCII bytes inside a character).
struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_spaces(&mut self) {
        while self.peek() == Some(b' ') {
            self.pos += 1;
        }
    }

    fn fail<T>(&self, at: usize, what: impl Into<String>) -> Result<T, DnError> {
        Err(DnError {
            at: self.text[..at].chars().count() + 1,
            what: what.into(),
        })
    }

    /// `distinguishedName = [ relativeDistinguishedName *( COMMA relativeDistinguishedName ) ]`
    fn dn(&mut self) -> Result<Dn, DnError> {
        self.skip_spaces();
        if self.peek().is_none() {
            return self.fail(self.pos, "the name is empty");
        }
        let mut rdns = vec![self.rdn()?];
        loop {
            self.skip_spaces();
            match self.peek() {
                None => break,
                Some(b',') => {
                    self.pos += 1;
                    self.skip_spaces();
                    rdns.push(self.rdn()?);
                }
                Some(_) => return self.fail(self.pos, "expected ',' or '+' before this"),
            }
        }
        // The string lists the last RDN of the sequence first.
        rdns.reverse();
        Ok(Dn(rdns))
    }

    /// `relativeDistinguishedName = attributeTypeAndValue *( PLUS attributeTypeAndValue )`
    fn rdn(&mut self) -> Result<Rdn, DnError> {
        let mut avas = vec![self.ava()?];
        loop {
            self.skip_spaces();
            if self.peek() != Some(b'+') {
                break;
            }
            self.pos += 1;
            self.skip_spaces();
            avas.push(self.ava()?);
        }
        avas.sort();
        Ok(Rdn(avas))
    }

    /// `attributeTypeAndValue = attributeType EQUALS attributeValue`
    fn ava(&mut self) -> Result<Ava, DnError> {
        let start = self.pos;
        let oid = self.attribute_type()?;
        let name = &self.text[start..self.pos];
        self.skip_spaces();
        if self.peek() != Some(b'=') {
            return self.fail(self.pos, format!("expected '=' after {name}"));
        }
        self.pos += 1;
        self.skip_spaces();
        let value_at = self.pos;
        let value = if self.peek() == Some(b'#') {
            self.hex_value()?
        } else {
            self.string_value()?
        };
        if value == Value::Text(String::new()) {
            return self.fail(value_at, format!("the value of {name} is empty"));
        }
        Ok(Ava { oid, value })
    }

    /// `attributeType = descr / numericoid` (RFC 4512 section 1.4), a name compared without
    /// case.
    fn attribute_type(&mut self) -> Result<Vec<u8>, DnError> {
        let start = self.pos;
        let first = self.peek();
        let more = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'.';
        while self.peek().is_some_and(more) {
            self.pos += 1;
        }
        let word = &self.text[start..self.pos];
        match first {
            Some(b) if b.is_ascii_alphabetic() => NAMES
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(word))
                .and_then(|(_, oid)| numeric_oid(oid))
                .map_or_else(
                    || {
                        self.fail(
                            start,
                            format!(
                                "unknown attribute type {word:?}: use CN, L, ST, O, OU, C, \
                                 STREET, DC, UID, emailAddress, serialNumber (or another \
                                 RFC 4519 name) or a dotted OID such as 2.5.4.3"
                            ),
                        )
                    },
                    Ok,
                ),
            Some(b) if b.is_ascii_digit() => numeric_oid(word).map_or_else(
                || {
                    self.fail(
                        start,
                        format!("{word:?} is not a dotted OID such as 2.5.4.3"),
                    )
                },
                Ok,
            ),
            _ => self.fail(
                start,
                "expected an attribute type such as CN, or a dotted OID",
            ),
        }
    }

    /// `hexstring = SHARP 1*hexpair`: the BER of one value.
    fn hex_value(&mut self) -> Result<Value, DnError> {
        let start = self.pos;
        self.pos += 1;
        let digits_at = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_hexdigit()) {
            self.pos += 1;
        }
        let bad = "'#' must be followed by the hex of one BER-encoded value";
        let Some(ber) = hex(&self.text[digits_at..self.pos]) else {
            return self.fail(start, bad);
        };
        match Any::from_ber(&ber) {
            Ok((rest, any)) if rest.is_empty() && any.header.length().is_definite() => {
                Ok(Value::of(&any))
            }
            _ => self.fail(start, bad),
        }
    }

    /// `string`: characters up to an unescaped `,` or `+`, with `\` escaping a special
    /// character (`\ " # + , ; < = >` and space) or starting a hex pair of UTF-8.
    fn string_value(&mut self) -> Result<Value, DnError> {
        let start = self.pos;
        let mut bytes = Vec::new();
        loop {
            match self.peek() {
                None | Some(b',' | b'+') => break,
                Some(b'\\') => {
                    let escape_at = self.pos;
                    self.pos += 1;
                    match self.peek() {
                        Some(
                            c @ (b'\\' | b'"' | b'#' | b'+' | b',' | b';' | b'<' | b'=' | b'>'
                            | b' '),
                        ) => {
                            bytes.push(c);
                            self.pos += 1;
                        }
                        _ => match self.text.get(self.pos..self.pos + 2).and_then(hex) {
                            Some(byte) => {
                                bytes.extend(byte);
                                self.pos += 2;
                            }
                            None => {
                                return self.fail(
                                    escape_at,
                                    "'\\' must be followed by one of \\ \" # + , ; < = > or \
                                     space, or by two hex digits",
                                )
                            }
                        },
                    }
                }
                Some(c @ (b'"' | b';' | b'<' | b'>' | 0)) => {
                    let shown = if c == 0 {
                        "NUL".to_owned()
                    } else {
                        format!("'{}'", char::from(c))
                    };
                    // RFC 1779 separated RDNs with ';' too; RFC 4514 only with ','.
                    let hint = if c == b';' {
                        " (RDNs are separated by ',')"
                    } else {
                        ""
                    };
                    return self.fail(
                        self.pos,
                        format!("{shown} in a value must be escaped as \\{c:02X}{hint}"),
                    );
                }
                Some(c) => {
                    bytes.push(c);
                    self.pos += 1;
                }
            }
        }
        let Ok(text) = String::from_utf8(bytes) else {
            return self.fail(start, "the escaped bytes of this value are not UTF-8");
        };
        match prepare(&text) {
            Some(prepared) => Ok(Value::Text(prepared)),
            None => self.fail(
                start,
                "this value has characters that RFC 4518 prohibits (private use, \
                 non-characters, U+FFFD)",
            ),
        }
    }
}

/// `numericoid = number 1*( DOT number )` (RFC 4512 section 1.4, no leading zeros) as the
/// content octets of its BER encoding.
fn numeric_oid(text: &str) -> Option<Vec<u8>> {
    let arcs = text
        .split('.')
        .map(|arc| {
            let canonical = !arc.is_empty()
                && arc.bytes().all(|b| b.is_ascii_digit())
                && (arc == "0" || !arc.starts_with('0'));
            canonical.then(|| arc.parse::<u64>().ok()).flatten()
        })
        .collect::<Option<Vec<u64>>>()?;
    if arcs.len() < 2 || arcs[0] > 2 || (arcs[0] < 2 && arcs[1] >= 40) {
        return None;
    }
    Oid::from(&arcs).ok().map(|oid| oid.as_bytes().to_vec())
}

/// Hex digits as bytes: an even number of at least two.
fn hex(digits: &str) -> Option<Vec<u8>> {
    if digits.is_empty() || digits.len() % 2 != 0 {
        return None;
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(digits.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::prelude::FromDer;

    /// DER: a tag and its content.
    fn der(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match content.len() {
            n if n < 0x80 => out.push(n as u8),
            n if n < 0x100 => out.extend([0x81, n as u8]),
            n => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend_from_slice(content);
        out
    }

    const UTF8: u8 = 0x0c;
    const PRINTABLE: u8 = 0x13;
    const TELETEX: u8 = 0x14;
    const IA5: u8 = 0x16;
    const BMP: u8 = 0x1e;
    const CN: &[u8] = &[0x55, 4, 3];
    const O: &[u8] = &[0x55, 4, 10];
    const OU: &[u8] = &[0x55, 4, 11];
    const C: &[u8] = &[0x55, 4, 6];

    fn ava(oid: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
        der(0x30, &[der(0x06, oid), der(tag, value)].concat())
    }

    /// An X.501 name from RDNs in ASN.1 order, each a list of pairs.
    fn name(rdns: &[&[Vec<u8>]]) -> Dn {
        let rdns: Vec<u8> = rdns
            .iter()
            .flat_map(|avas| der(0x31, &avas.concat()))
            .collect();
        let der = der(0x30, &rdns);
        let (rest, name) = X509Name::from_der(&der).unwrap();
        assert!(rest.is_empty());
        Dn::of_name(&name)
    }

    fn utf8(oid: &[u8], value: &str) -> Vec<u8> {
        ava(oid, UTF8, value.as_bytes())
    }

    fn parsed(text: &str) -> Dn {
        Dn::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn matches(registered: &str, subject: &Dn) -> bool {
        parsed(registered).matches(subject)
    }

    /// Dotted OIDs have at least two arcs, the first 0, 1 or 2, the second below 40 under 0
    /// and 1 only; a `#` value has at least one byte.
    #[test]
    fn dotted_oids_and_hex_values_are_checked() {
        assert!(matches("2.5.4.3=billing", &name(&[&[utf8(CN, "billing")]])));
        assert!(Dn::parse("1.39=x").is_ok());
        for bad in ["2=x", "1.40=x", "3.1=x", "CN=#"] {
            assert!(Dn::parse(bad).is_err(), "{bad}");
        }
    }

    /// BMPString is UTF-16 (two bytes a character) and UniversalString UTF-32 (four); a
    /// value of another length is not text.
    #[test]
    fn wide_string_types_decode_only_whole_characters() {
        const UNIVERSAL: u8 = 0x1c;
        let utf32: Vec<u8> = "abc"
            .chars()
            .flat_map(|c| (c as u32).to_be_bytes())
            .collect();
        assert!(matches("CN=ABC", &name(&[&[ava(CN, UNIVERSAL, &utf32)]])));
        assert!(!matches(
            "CN=abc",
            &name(&[&[ava(CN, UNIVERSAL, &utf32[..11])]])
        ));
        let utf16: Vec<u8> = "ab".encode_utf16().flat_map(u16::to_be_bytes).collect();
        assert!(matches("CN=ab", &name(&[&[ava(CN, BMP, &utf16)]])));
        assert!(!matches(
            "CN=ab",
            &name(&[&[ava(CN, BMP, &[0, b'a', 0, b'b', 0])]])
        ));
    }

    /// NumericString is a string type (digits and spaces); a context-specific or
    /// constructed value is never one, whatever its tag number reads as.
    #[test]
    fn only_universal_primitive_string_types_are_text() {
        const NUMERIC: u8 = 0x12;
        const SERIAL: &[u8] = &[0x55, 4, 5];
        let numeric = name(&[&[ava(SERIAL, NUMERIC, b"0042  17")]]);
        assert!(matches("serialNumber=0042 17", &numeric));
        let not_numeric = name(&[&[ava(SERIAL, NUMERIC, b"42a")]]);
        assert!(!matches("serialNumber=42a", &not_numeric));
        // [12] context-specific, primitive: the tag number of UTF8String, another type.
        let context = name(&[&[ava(CN, 0x8c, b"billing")]]);
        assert!(!matches("CN=billing", &context));
        assert!(matches("CN=#8c0762696c6c696e67", &context));
        // UTF8String's tag, constructed (0x2c): not a string value either.
        let constructed = name(&[&[ava(CN, 0x2c, &der(UTF8, b"billing"))]]);
        assert!(!matches("CN=billing", &constructed));
    }

    #[test]
    fn a_comma_inside_a_value_is_not_a_separator() {
        // One CN whose value reads like two RDNs (the review's certificate).
        let one_cn = name(&[&[utf8(CN, "billing, O=Acme")]]);
        assert!(!matches("CN=billing,O=Acme", &one_cn));
        assert!(!matches("CN=billing, O=Acme", &one_cn));
        assert!(!matches("O=Acme,CN=billing", &one_cn));
        assert!(matches("CN=billing\\, O=Acme", &one_cn));
        assert!(matches("CN=billing\\2C O\\3DAcme", &one_cn));
        let two = name(&[&[utf8(O, "Acme")], &[utf8(CN, "billing")]]);
        assert!(matches("CN=billing,O=Acme", &two));
        assert!(!matches("CN=billing\\, O=Acme", &two));
    }

    #[test]
    fn order_matters() {
        let subject = name(&[&[utf8(C, "DE")], &[utf8(O, "Acme")], &[utf8(CN, "billing")]]);
        assert!(matches("CN=billing,O=Acme,C=DE", &subject));
        for permuted in [
            "O=Acme,CN=billing,C=DE",
            "CN=billing,C=DE,O=Acme",
            "C=DE,CN=billing,O=Acme",
            "O=Acme,C=DE,CN=billing",
            "C=DE,O=Acme,CN=billing",
        ] {
            assert!(!matches(permuted, &subject), "{permuted}");
        }
        // Only this whole reversal is the certificate's own order.
        assert!(parsed("C=DE,O=Acme,CN=billing")
            .reversed()
            .matches(&subject));
        assert!(!matches("CN=billing,O=Acme", &subject), "an RDN fewer");
        assert!(
            !matches("CN=billing,OU=x,O=Acme,C=DE", &subject),
            "an RDN more"
        );
    }

    #[test]
    fn multi_valued_rdns_are_sets_within_one_rdn() {
        let multi = name(&[&[utf8(O, "Acme")], &[utf8(OU, "ops"), utf8(CN, "billing")]]);
        let separate = name(&[
            &[utf8(O, "Acme")],
            &[utf8(OU, "ops")],
            &[utf8(CN, "billing")],
        ]);
        assert!(matches("CN=billing+OU=ops,O=Acme", &multi));
        assert!(matches("OU=ops + CN=billing, O=Acme", &multi));
        assert!(!matches("CN=billing,OU=ops,O=Acme", &multi));
        assert!(!matches("CN=billing+OU=ops,O=Acme", &separate));
        assert!(matches("CN=billing,OU=ops,O=Acme", &separate));
        assert!(
            !matches("CN=billing+OU=ops+OU=ops,O=Acme", &multi),
            "a pair more"
        );
        assert!(!matches("CN=billing+O=Acme", &multi));
        // A `+` escaped is a character.
        let plus = name(&[&[utf8(CN, "a+OU=b")]]);
        assert!(matches("CN=a\\+OU=b", &plus));
        assert!(!matches("CN=a+OU=b", &plus));
    }

    #[test]
    fn strings_match_across_types_case_and_spaces() {
        let subject = name(&[&[ava(O, PRINTABLE, b"Acme  Corp ")], &[utf8(CN, "Billing")]]);
        assert!(matches("CN=billing,O=ACME Corp", &subject));
        assert!(matches("CN=  billing , O =  acme   corp", &subject));
        assert!(matches("cn=BILLING,o=acme\\20corp\\ ", &subject));
        assert!(
            !matches("CN=billing,O=AcmeCorp", &subject),
            "a space is not nothing"
        );
        assert!(!matches("CN=billings,O=Acme Corp", &subject));
        let bmp: Vec<u8> = "billing"
            .encode_utf16()
            .flat_map(u16::to_be_bytes)
            .collect();
        for (tag, value) in [
            (UTF8, b"billing".to_vec()),
            (PRINTABLE, b"billing".to_vec()),
            (IA5, b"billing".to_vec()),
            (TELETEX, b"billing".to_vec()),
            (BMP, bmp),
        ] {
            assert!(
                matches("CN=Billing", &name(&[&[ava(CN, tag, &value)]])),
                "{tag}"
            );
        }
        // Unicode: escaped UTF-8, folded case, compatibility forms, ignorable characters.
        let grusse = name(&[&[utf8(CN, "Grüße\u{ad} Ⅳ")]]);
        assert!(matches("CN=GRÜSSE iv", &grusse));
        assert!(matches("CN=Gr\\C3\\BC\\C3\\9Fe IV", &grusse));
        assert!(!matches("CN=Grusse IV", &grusse));
    }

    #[test]
    fn undecodable_strings_never_match_a_string() {
        // T.61 0xE9 is not é; BMP with a lone surrogate; UTF-8 that is not.
        for (tag, value) in [
            (TELETEX, b"caf\xe9".to_vec()),
            (BMP, vec![0xd8, 0x00]),
            (UTF8, b"caf\xc3".to_vec()),
        ] {
            let subject = name(&[&[ava(CN, tag, &value)]]);
            for registered in ["CN=café", "CN=caf", "CN=caf\\E9", "CN=caf\\C3"] {
                if let Ok(dn) = Dn::parse(registered) {
                    assert!(!dn.matches(&subject), "{registered} against tag {tag}");
                }
            }
            // Given as its encoding, it matches.
            let hex: String = der(tag, &value)
                .iter()
                .map(|b| format!("{b:02X}"))
                .collect();
            assert!(matches(&format!("CN=#{hex}"), &subject));
        }
    }

    #[test]
    fn hex_values_are_ber() {
        // #0C0762696C6C696E67 is UTF8String "billing": it matches as a string.
        let printable = name(&[&[ava(CN, PRINTABLE, b"BILLING")]]);
        assert!(matches("CN=#0C0762696C6C696E67", &printable));
        // A value of another type compares by its encoding.
        let integer = name(&[&[ava(&[0x55, 4, 5], 0x02, &[0x01, 0x00])]]);
        assert!(matches("2.5.4.5=#02020100", &integer));
        assert!(matches("serialNumber=#02020100", &integer));
        assert!(!matches("serialNumber=#02020101", &integer));
        assert!(!matches("serialNumber=256", &integer));
        // Its content octets escaped are control characters, which a string ignores.
        assert!(Dn::parse("serialNumber=\\02\\02\\01\\00").is_err());
    }

    #[test]
    fn types_are_names_or_oids() {
        let subject = name(&[
            &[utf8(
                &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19],
                "example",
            )],
            &[utf8(CN, "billing")],
        ]);
        assert!(matches("CN=billing,DC=example", &subject));
        assert!(matches(
            "commonName=billing,domainComponent=example",
            &subject
        ));
        assert!(matches(
            "2.5.4.3=billing,0.9.2342.19200300.100.1.25=example",
            &subject
        ));
        assert!(!matches("O=billing,DC=example", &subject));
        assert!(!matches("2.5.4.33=billing,DC=example", &subject));
    }

    #[test]
    fn escapes_of_every_special_character() {
        let subject = name(&[&[utf8(CN, " a,b+c\"d\\e<f>g;h=i#j ")]]);
        assert!(matches(
            "CN=\\ a\\,b\\+c\\\"d\\\\e\\<f\\>g\\;h\\=i\\#j\\ ",
            &subject
        ));
        assert!(matches(
            "CN=a\\,b\\+c\\22d\\5Ce\\3Cf\\3Eg\\3Bh=i#j",
            &subject
        ));
        assert!(!matches("CN=a\\\\\\,b", &name(&[&[utf8(CN, "a,b")]])));
    }

    #[test]
    fn malformed_names_are_refused_with_where_and_why() {
        let error = |text: &str| Dn::parse(text).unwrap_err().to_string();
        for (text, want) in [
            ("", "at character 1: the name is empty"),
            ("   ", "the name is empty"),
            ("CN=billing,", "at character 12: expected an attribute type"),
            (
                "CN=billing,,O=Acme",
                "at character 12: expected an attribute type",
            ),
            (
                "CN=billing;O=Acme",
                "at character 11: ';' in a value must be escaped as \\3B (RDNs",
            ),
            ("CN=billing+", "at character 12: expected an attribute type"),
            ("CN billing", "at character 4: expected '=' after CN"),
            ("=billing", "at character 1: expected an attribute type"),
            ("FOO=billing", "unknown attribute type \"FOO\""),
            (
                "OID.2.5.4.3=billing",
                "unknown attribute type \"OID.2.5.4.3\"",
            ),
            ("2.5.04.3=billing", "\"2.5.04.3\" is not a dotted OID"),
            ("2=billing", "is not a dotted OID"),
            ("CN=", "at character 4: the value of CN is empty"),
            ("CN=\\ ", "the value of CN is empty"),
            (
                "CN=a\"b",
                "at character 5: '\"' in a value must be escaped as \\22",
            ),
            ("CN=a<b", "'<' in a value must be escaped as \\3C"),
            ("CN=a\\xb", "at character 5: '\\' must be followed by"),
            ("CN=a\\4", "'\\' must be followed by"),
            (
                "CN=a\\FF",
                "at character 4: the escaped bytes of this value are not UTF-8",
            ),
            ("CN=#", "'#' must be followed by the hex"),
            ("CN=#0C", "'#' must be followed by the hex"),
            ("CN=#0C0162FF", "'#' must be followed by the hex"),
            ("CN=#0C01G", "'#' must be followed by the hex"),
            ("CN=#0C0162 x", "expected ',' or '+' before this"),
            ("CN=\u{e000}", "RFC 4518 prohibits"),
            ("Ω=1,CN=a", "at character 1: expected an attribute type"),
            ("CN=é,Ω=1", "at character 6: expected an attribute type"),
        ] {
            let got = error(text);
            assert!(got.contains(want), "{text:?}: {got}");
        }
    }

    #[test]
    fn rfc_4514_examples_parse() {
        for text in [
            "UID=jsmith,DC=example,DC=net",
            "OU=Sales+CN=J.  Smith,DC=example,DC=net",
            "CN=James \\\"Jim\\\" Smith\\, III,DC=example,DC=net",
            "CN=Before\\0dAfter,DC=example,DC=net",
            "1.3.6.1.4.1.1466.0=#04024869",
            "CN=Lu\\C4\\8Di\\C4\\87",
        ] {
            parsed(text);
        }
        assert!(matches(
            "CN=Lu\\C4\\8Di\\C4\\87",
            &name(&[&[utf8(CN, "Lučić")]])
        ));
    }
}
