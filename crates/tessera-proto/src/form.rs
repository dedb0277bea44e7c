//! A strict decoder for `application/x-www-form-urlencoded` bodies (RFC 6749 Appendix B,
//! WHATWG URL "application/x-www-form-urlencoded parsing").
//!
//! Unlike lenient decoders, a malformed percent escape or a byte sequence that is not UTF-8 is
//! an error here: an authorization server must not guess what a client meant (RFC 6749 3.2
//! requires `invalid_request` for a malformed request).

use std::borrow::Cow;

use thiserror::Error;

/// Why a form body or a form-encoded value could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FormError {
    /// A `%` not followed by two hexadecimal digits.
    #[error("malformed percent-encoding")]
    BadEscape,
    /// The decoded bytes are not UTF-8.
    #[error("form value is not UTF-8")]
    NotUtf8,
}

/// Decodes one form-encoded component: `+` is a space and `%XX` a byte.
pub fn decode_component(input: &str) -> Result<String, FormError> {
    decode(input).map(Cow::into_owned)
}

/// [`decode_component`], borrowing `input` when there is nothing to decode, as in most ids,
/// secrets, grant types and scopes of one name: no copy, no byte-by-byte pass and no UTF-8
/// check (issue 31).
pub fn decode(input: &str) -> Result<Cow<'_, str>, FormError> {
    let bytes = input.as_bytes();
    if !bytes.iter().any(|&b| b == b'+' || b == b'%') {
        return Ok(Cow::Borrowed(input));
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hi = bytes.get(i + 1).and_then(|b| hex(*b));
                let lo = bytes.get(i + 2).and_then(|b| hex(*b));
                match (hi, lo) {
                    (Some(hi), Some(lo)) => out.push(hi << 4 | lo),
                    _ => return Err(FormError::BadEscape),
                }
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out)
        .map(Cow::Owned)
        .map_err(|_| FormError::NotUtf8)
}

/// Encodes one component the way RFC 6749 Appendix B asks before HTTP Basic encoding: every
/// byte outside the unreserved set is percent-encoded and a space becomes `+`.
pub fn encode_component(input: &str) -> String {
    let mut out = String::with_capacity(input.len());
    for &b in input.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => {
                out.push('%');
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        }
    }
    out
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Decodes a whole body into its name-value pairs, in order, repeats included.
///
/// Empty sequences between `&` are skipped, and a pair without `=` has an empty value, as the
/// WHATWG algorithm says.
pub fn parse(body: &str) -> Result<Vec<(String, String)>, FormError> {
    parse_borrowed(body).map(|pairs| {
        pairs
            .into_iter()
            .map(|(name, value)| (name.into_owned(), value.into_owned()))
            .collect()
    })
}

/// A form's name-value pairs, in order, each borrowed from the body when it has nothing to
/// decode.
pub type Pairs<'a> = Vec<(Cow<'a, str>, Cow<'a, str>)>;

/// [`parse`], each name and value borrowed from `body` when it has nothing to decode.
pub fn parse_borrowed(body: &str) -> Result<Pairs<'_>, FormError> {
    body.split('&')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            Ok((decode(name)?, decode(value)?))
        })
        .collect()
}

/// A parameter sent more than once where it may appear once (RFC 6749 section 3.2).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("parameter {0} is repeated")]
pub struct Repeated(pub String);

/// The single value of parameter `name` among decoded `pairs`, as sent (an empty value is
/// returned as it is: whether it counts as absent is the caller's rule); [`Repeated`] when
/// it appears more than once.
pub fn single<'a, N, V>(pairs: &'a [(N, V)], name: &str) -> Result<Option<&'a str>, Repeated>
where
    N: AsRef<str>,
    V: AsRef<str>,
{
    let mut found = pairs
        .iter()
        .filter(|(n, _)| n.as_ref() == name)
        .map(|(_, v)| v.as_ref());
    let first = found.next();
    if found.next().is_some() {
        return Err(Repeated(name.to_owned()));
    }
    Ok(first)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_with_nothing_to_decode_are_borrowed_and_the_rest_decoded() {
        let pairs = parse_borrowed("grant_type=client_credentials&scope=a%20b+c&x").unwrap();
        let values: Vec<(&str, &str)> = pairs.iter().map(|(n, v)| (&**n, &**v)).collect();
        assert_eq!(
            values,
            [
                ("grant_type", "client_credentials"),
                ("scope", "a b c"),
                ("x", "")
            ]
        );
        assert!(matches!(pairs[0].1, Cow::Borrowed(_)));
        assert!(matches!(pairs[1].1, Cow::Owned(_)));
        assert_eq!(parse_borrowed("a=%zz"), Err(FormError::BadEscape));
        assert_eq!(parse_borrowed("a=%ff"), Err(FormError::NotUtf8));
    }

    #[test]
    fn decodes_plus_and_escapes() {
        assert_eq!(decode_component("a+b%20c%2Bd").unwrap(), "a b c+d");
        // Nothing to decode: as it is.
        assert_eq!(decode_component("tc_app.é-~*").unwrap(), "tc_app.é-~*");
        assert_eq!(decode_component("").unwrap(), "");
        // Plus signs alone: no other byte to send the value down the decoding path.
        assert_eq!(decode_component("++").unwrap(), "  ");
        assert_eq!(decode_component("%C3%A9").unwrap(), "é");
        // Hexadecimal digits in either case (RFC 3986 section 2.1).
        assert_eq!(decode_component("%c3%a9%2b%3a%3A%0f").unwrap(), "é+::\u{f}");
    }

    #[test]
    fn rejects_bad_escapes_and_bad_utf8() {
        assert_eq!(decode_component("%"), Err(FormError::BadEscape));
        assert_eq!(decode_component("%2"), Err(FormError::BadEscape));
        assert_eq!(decode_component("%zz"), Err(FormError::BadEscape));
        assert_eq!(decode_component("%FF"), Err(FormError::NotUtf8));
    }

    #[test]
    fn parses_pairs_in_order_with_repeats() {
        let pairs = parse("a=1&&b&a=2").unwrap();
        assert_eq!(
            pairs,
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "".into()),
                ("a".into(), "2".into())
            ]
        );
    }

    #[test]
    fn a_single_value_is_found_and_a_repeat_refused() {
        let pairs = parse("a=1&b=&c=2&c=3").unwrap();
        assert_eq!(single(&pairs, "a"), Ok(Some("1")));
        assert_eq!(single(&pairs, "b"), Ok(Some("")));
        assert_eq!(single(&pairs, "z"), Ok(None));
        assert_eq!(single(&pairs, "c"), Err(Repeated("c".into())));
        assert_eq!(Repeated("c".into()).to_string(), "parameter c is repeated");
    }

    #[test]
    fn encoding_round_trips() {
        let raw = "id:with spaces/and+plus%é";
        assert_eq!(decode_component(&encode_component(raw)).unwrap(), raw);
        assert_eq!(encode_component("a b:c"), "a+b%3Ac");
    }
}
