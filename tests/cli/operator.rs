//! Operator conveniences: shell completions, RFC 3339 timestamps in what people read, and
//! `--json` on every admin command.

use super::*;

/// `tessera completions SHELL` prints a script that completes the commands and flags.
#[test]
fn completions_for_each_shell() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bash = ok(d, &["completions", "bash"]);
    assert!(bash.contains("tessera"), "{bash}");
    assert!(bash.contains("complete -F _tessera"), "{bash}");
    for word in ["rotate-secret", "--token-rate"] {
        assert!(bash.contains(word), "bash completes {word}");
    }
    assert!(ok(d, &["completions", "zsh"]).starts_with("#compdef tessera"));
    assert!(ok(d, &["completions", "fish"]).contains("complete -c tessera"));
    let err = fails(d, &["completions", "tcsh"]);
    assert!(err.contains("invalid value 'tcsh'"), "{err}");
    assert_eq!(
        std::fs::read_dir(d).unwrap().count(),
        0,
        "no database opened"
    );
}
