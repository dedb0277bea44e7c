//! Scopes (RFC 6749 section 3.3). In Tessera each scope names one API, and a token's
//! audience is the set of APIs its scopes name.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The scope of Tessera's own admin API that allows everything (docs/admin-api.md).
pub const ADMIN_SCOPE: &str = "tessera-admin";
/// The scope of Tessera's own admin API that allows reads (`GET`) only.
pub const ADMIN_READ_SCOPE: &str = "tessera-admin-read";

/// The scope of an organization's own admin (issue 28): a client of an organization whose
/// plan grants it manages that organization's clients, and reads its usage, under
/// `/admin/v1/orgs/{its org}/`; nothing else.
pub const ORG_ADMIN_SCOPE: &str = "tessera-org-admin";

/// Whether `scope` is one of the two reserved admin scopes: they name no API, and a token
/// that carries one has the issuer itself as its audience.
pub fn is_admin_scope(scope: &str) -> bool {
    scope == ADMIN_SCOPE || scope == ADMIN_READ_SCOPE
}

/// Whether `scope` is one of Tessera's own: the admin scopes, [`ORG_ADMIN_SCOPE`] and
/// [`USAGE_SCOPE`](crate::api_limits::USAGE_SCOPE), with which an API reports its usage.
/// They name no API, and a token that carries one has the issuer itself as its audience.
pub fn names_issuer(scope: &str) -> bool {
    is_admin_scope(scope) || scope == ORG_ADMIN_SCOPE || scope == crate::api_limits::USAGE_SCOPE
}

/// Why a scope string was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScopeError {
    /// The string is empty: the scope parameter is required here.
    #[error("scope is empty")]
    Empty,
    /// Not `scope-token *( SP scope-token )`: a doubled, leading or trailing space, or a
    /// character outside `%x21 / %x23-5B / %x5D-7E`.
    #[error("scope does not match the grammar of RFC 6749 section 3.3")]
    Grammar,
    /// A name that a plan may not define: see [`Scope::parse_name`].
    #[error(
        "scope name {} must be 1 to 128 characters of a-z, A-Z, 0-9, '.', '_', ':', '/' or '-'",
        Quoted(.0)
    )]
    BadName(String),
}

/// A name as a message quotes it: between “ and ”, as it is but for control characters,
/// which are escaped (`\n`, `\u{1b}`), so that a message shows what was sent, escaped
/// no more than the place it is shown in escapes it.
#[derive(Debug, Clone, Copy)]
pub struct Quoted<'a>(pub &'a str);

impl std::fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("“")?;
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        f.write_str("”")
    }
}

/// One scope token: `1*( %x21 / %x23-5B / %x5D-7E )` (RFC 6749 section 3.3).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Scope(String);

impl Scope {
    /// Parses a scope token as a client may send it (RFC 6749 section 3.3).
    pub fn parse(token: &str) -> Result<Self, ScopeError> {
        if token.is_empty() {
            return Err(ScopeError::Empty);
        }
        let ok = token
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b));
        if ok {
            Ok(Self(token.to_owned()))
        } else {
            Err(ScopeError::Grammar)
        }
    }

    /// Parses a scope name that an operator defines in a plan. Stricter than the RFC grammar,
    /// so that a scope name is also a safe audience value and a safe label.
    pub fn parse_name(name: &str) -> Result<Self, ScopeError> {
        let ok = (1..=128).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._:/-".contains(&b));
        if ok {
            Ok(Self(name.to_owned()))
        } else {
            Err(ScopeError::BadName(name.to_owned()))
        }
    }

    /// The scope as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Scope {
    type Error = ScopeError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<Scope> for String {
    fn from(scope: Scope) -> Self {
        scope.0
    }
}

/// A set of scopes, kept sorted so that equal sets render equally.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopeSet(BTreeSet<Scope>);

impl ScopeSet {
    /// Parses `scope-token *( SP scope-token )` (RFC 6749 section 3.3). Repeated tokens are
    /// kept once; an empty string is [`ScopeError::Empty`].
    pub fn parse(value: &str) -> Result<Self, ScopeError> {
        if value.is_empty() {
            return Err(ScopeError::Empty);
        }
        value
            .split(' ')
            .map(|token| Scope::parse(token).map_err(|_| ScopeError::Grammar))
            .collect::<Result<BTreeSet<_>, _>>()
            .map(Self)
    }

    /// Parses the space-separated scope names of a plan definition (see [`Scope::parse_name`]).
    /// Any run of whitespace separates names here, since an operator types them.
    pub fn parse_names(value: &str) -> Result<Self, ScopeError> {
        let set = value
            .split_whitespace()
            .map(Scope::parse_name)
            .collect::<Result<BTreeSet<_>, _>>()?;
        if set.is_empty() {
            return Err(ScopeError::Empty);
        }
        Ok(Self(set))
    }

    /// The scopes of `self` that `allowed` does not contain.
    pub fn outside<'a>(&'a self, allowed: &'a ScopeSet) -> Vec<&'a Scope> {
        self.0.difference(&allowed.0).collect()
    }

    /// The scopes in both sets.
    pub fn intersection(&self, other: &ScopeSet) -> ScopeSet {
        Self(self.0.intersection(&other.0).cloned().collect())
    }

    /// Whether every scope of `self` is in `other`.
    pub fn is_subset(&self, other: &ScopeSet) -> bool {
        self.0.is_subset(&other.0)
    }

    /// Whether the set holds `scope`.
    pub fn contains(&self, scope: &str) -> bool {
        self.0.iter().any(|s| s.as_str() == scope)
    }

    /// The scopes in order.
    pub fn iter(&self) -> impl Iterator<Item = &Scope> {
        self.0.iter()
    }

    /// How many scopes the set holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for ScopeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, scope) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            f.write_str(scope.as_str())?;
        }
        Ok(())
    }
}

impl FromStr for ScopeSet {
    type Err = ScopeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl FromIterator<Scope> for ScopeSet {
    fn from_iter<I: IntoIterator<Item = Scope>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl Serialize for ScopeSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ScopeSet {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_space_separated_tokens_sorted_and_deduplicated() {
        let set = ScopeSet::parse("news-api market-data-api news-api").unwrap();
        assert_eq!(set.to_string(), "market-data-api news-api");
        assert_eq!(set.len(), 2);
    }

    #[test]
    fn rejects_what_the_grammar_rejects() {
        assert_eq!(ScopeSet::parse(""), Err(ScopeError::Empty));
        for bad in [" a", "a ", "a  b", "a\"b", "a\\b", "a\tb", "é"] {
            assert_eq!(ScopeSet::parse(bad), Err(ScopeError::Grammar), "{bad:?}");
        }
    }

    #[test]
    fn plan_names_are_stricter() {
        assert!(ScopeSet::parse_names("oms-api  news-api").is_ok());
        assert!(matches!(
            ScopeSet::parse_names("oms-api bad!"),
            Err(ScopeError::BadName(_))
        ));
        assert_eq!(ScopeSet::parse_names("  "), Err(ScopeError::Empty));
    }

    #[test]
    fn set_queries_answer_for_what_the_set_holds() {
        let set: ScopeSet = "b a".parse().unwrap();
        assert_eq!(set.to_string(), "a b");
        assert!(set.contains("a") && set.contains("b") && !set.contains("c"));
        let names: Vec<&str> = set.iter().map(Scope::as_str).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(!set.is_empty());
        assert!(ScopeSet::default().is_empty());
        assert!(ScopeSet::parse("a").unwrap().is_subset(&set));
        assert!(set.is_subset(&set));
        let collected: ScopeSet = set.iter().cloned().collect();
        assert_eq!(collected, set);
        let other = ScopeSet::parse("b c").unwrap();
        assert_eq!(set.intersection(&other), ScopeSet::parse("b").unwrap());
        assert!("".parse::<ScopeSet>().is_err());
    }

    #[test]
    fn scopes_convert_and_serialize_as_strings() {
        let scope = Scope::try_from("news-api".to_owned()).unwrap();
        assert_eq!(scope.to_string(), "news-api");
        assert_eq!(String::from(scope), "news-api");
        assert_eq!(Scope::try_from("a b".to_owned()), Err(ScopeError::Grammar));
        let set: ScopeSet = serde_json::from_str(r#""news-api oms-api""#).unwrap();
        assert_eq!(set, ScopeSet::parse("oms-api news-api").unwrap());
        assert_eq!(
            serde_json::to_string(&set).unwrap(),
            r#""news-api oms-api""#
        );
        assert!(serde_json::from_str::<ScopeSet>(r#""a  b""#).is_err());
    }

    #[test]
    fn the_issuers_own_scopes_are_told_from_api_scopes() {
        for scope in [ADMIN_SCOPE, ADMIN_READ_SCOPE] {
            assert!(is_admin_scope(scope) && names_issuer(scope), "{scope}");
        }
        for scope in [ORG_ADMIN_SCOPE, crate::api_limits::USAGE_SCOPE] {
            assert!(!is_admin_scope(scope) && names_issuer(scope), "{scope}");
        }
        for scope in ["news-api", "tessera-admin-write", ""] {
            assert!(!is_admin_scope(scope) && !names_issuer(scope), "{scope}");
        }
    }

    #[test]
    fn a_refused_name_is_quoted_with_its_control_characters_escaped() {
        assert_eq!(Quoted("news api").to_string(), "“news api”");
        assert_eq!(Quoted("a\nb\u{1b}é").to_string(), "“a\\nb\\u{1b}é”");
        assert_eq!(
            ScopeError::BadName("bad!\n".to_owned()).to_string(),
            "scope name “bad!\\n” must be 1 to 128 characters of a-z, A-Z, 0-9, '.', '_', ':', \
             '/' or '-'"
        );
    }

    #[test]
    fn names_the_scopes_outside_a_plan() {
        let plan = ScopeSet::parse("a b").unwrap();
        let asked = ScopeSet::parse("a c d").unwrap();
        let outside: Vec<_> = asked.outside(&plan).iter().map(|s| s.as_str()).collect();
        assert_eq!(outside, ["c", "d"]);
        assert!(!asked.is_subset(&plan));
    }
}
