//! The scope grammar of RFC 6749 section 3.3 (`ScopeSet::parse`, what a client sends) and the
//! stricter plan names an operator writes (`ScopeSet::parse_names`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_proto::{Scope, ScopeSet};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(set) = ScopeSet::parse(value) {
        assert!(!set.is_empty());
        for scope in set.iter() {
            assert!(value.split(' ').any(|token| token == scope.as_str()));
            assert_eq!(Scope::parse(scope.as_str()).as_ref(), Ok(scope));
        }
        // The canonical rendering parses to the same set.
        assert_eq!(ScopeSet::parse(&set.to_string()).as_ref(), Ok(&set));
    }
    if let Ok(names) = ScopeSet::parse_names(value) {
        // A plan's scope is always one a client can ask for.
        assert_eq!(ScopeSet::parse(&names.to_string()).as_ref(), Ok(&names));
    }
    let _ = serde_json::from_slice::<ScopeSet>(data);
});
