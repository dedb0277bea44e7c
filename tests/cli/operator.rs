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
    for word in ["rotate-secret", "--token-rate", "--admin-url"] {
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

/// Whether `text` is an RFC 3339 UTC timestamp as Tessera writes them:
/// `YYYY-MM-DDTHH:MM:SSZ`.
fn is_rfc3339(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// Parses `out` as one JSON value, naming the command when it is not.
fn json(args: &[&str], out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {out}"))
}

/// Checks that `created_at` of `object` is an RFC 3339 string, and each of `fields` one or
/// null.
fn assert_times(object: &serde_json::Value, fields: &[&str]) {
    for field in fields {
        let value = &object[field];
        assert!(
            value.as_str().is_some_and(is_rfc3339) || value.is_null(),
            "{field} is not RFC 3339: {object}"
        );
    }
    assert!(
        object["created_at"].as_str().is_some_and(is_rfc3339),
        "{object}"
    );
}

/// Every list and show command, and every command that changes one object, prints JSON
/// with `--json`: the admin API's objects, timestamps as RFC 3339 strings.
#[test]
fn every_admin_command_prints_json_with_rfc3339_times() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = |args: &[&str]| json(args, &ok(d, args));

    let plan = run(&[
        "plan",
        "set",
        "pro",
        "--scopes",
        "news-api oms-api",
        "--token-rate",
        "60/min",
        "--json",
    ]);
    assert_eq!(plan["name"], "pro");
    assert_eq!(plan["scopes"], serde_json::json!(["news-api", "oms-api"]));
    assert_eq!(
        plan["token_rate"],
        serde_json::json!({"count": 60, "period_secs": 60, "burst": 60})
    );
    assert_eq!(plan["clients"], 0);
    assert_times(&plan, &["updated_at"]);
    run(&["plan", "set", "other", "--scopes", "news-api", "--json"]);

    let created = run(&["client", "create", "--plan", "pro", "--json"]);
    let id = created["client_id"].as_str().unwrap().to_owned();
    assert!(created["client_secret"]
        .as_str()
        .unwrap()
        .starts_with("tcs_"));
    assert_times(&created, &["updated_at", "previous_secret_valid_until"]);

    let plans = run(&["plan", "list", "--json"]);
    let pro = plans
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "pro");
    assert_eq!(pro.unwrap()["clients"], 1, "{plans}");

    let clients = run(&["client", "list", "--json"]);
    assert_eq!(clients.as_array().unwrap().len(), 1);
    assert_times(&clients[0], &["updated_at"]);
    let shown = run(&["client", "show", &id, "--json"]);
    assert_eq!(shown["client_id"], id.as_str());
    assert!(shown.get("client_secret").is_none(), "{shown}");

    let disabled = run(&["client", "disable", &id, "--json"]);
    assert_eq!(disabled["enabled"], false);
    let enabled = run(&["client", "enable", &id, "--json"]);
    assert_eq!(enabled["enabled"], true);
    let moved = run(&["client", "set-plan", &id, "other", "--json"]);
    assert_eq!(moved["plan"], "other");

    let rotated = run(&["client", "rotate-secret", &id, "--grace", "3600", "--json"]);
    assert_ne!(rotated["client_secret"], created["client_secret"]);
    assert_times(&rotated, &["previous_secret_valid_until"]);
    let until = rotated["previous_secret_valid_until"].as_str().unwrap();
    let table = ok(d, &["client", "rotate-secret", &id, "--grace", "60"]);
    assert!(
        table
            .lines()
            .any(|l| l.contains("valid until") && l.contains('Z')),
        "{table}"
    );
    // The human show is indented JSON, with the same RFC 3339 strings.
    let show = ok(d, &["client", "show", &id]);
    assert!(
        show.contains("\"previous_secret_valid_until\": \"20"),
        "{show}"
    );
    assert!(
        !show.contains(until),
        "a later rotation replaced the deadline"
    );

    assert_eq!(
        run(&["client", "usage", &id, "--json"]),
        serde_json::json!([])
    );

    let key = run(&["keys", "rotate", "--activate-in", "0", "--json"]);
    assert_eq!(
        (&key["status"], &key["alg"]),
        (&"signing".into(), &"EdDSA".into())
    );
    assert_times(&key, &["activates_at"]);
    let next = run(&["keys", "rotate", "--json"]);
    assert_eq!(next["status"], "next");
    let keys = run(&["keys", "list", "--json"]);
    assert_eq!(keys.as_array().unwrap().len(), 2);
    assert_eq!(keys[1]["kid"], next["kid"]);

    let deleted = run(&["client", "delete", &id, "--json"]);
    assert_eq!(deleted["client_id"], id.as_str());
    assert_eq!(run(&["client", "list", "--json"]), serde_json::json!([]));
}

/// What people read shows times as RFC 3339, UTC: `keys list`, `keys rotate`.
#[test]
fn keys_print_rfc3339_times() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rotated = ok(d, &["keys", "rotate", "--activate-in", "600"]);
    let keys: Vec<serde_json::Value> =
        serde_json::from_str(&ok(d, &["keys", "list", "--json"])).unwrap();
    let activates_at = keys[0]["activates_at"].as_str().unwrap();
    assert!(is_rfc3339(activates_at), "{activates_at}");
    assert!(
        rotated.contains(&format!("signs from {activates_at} (in 600 s)")),
        "{rotated}"
    );
    let table = ok(d, &["keys", "list"]);
    let row = table.lines().nth(1).unwrap();
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        [
            keys[0]["kid"].as_str().unwrap(),
            "EdDSA",
            "next",
            activates_at
        ],
        "{table}"
    );
    // And it is the time the key was given: 600 s after it was made.
    let created = tessera_proto::clock::parse_rfc3339(keys[0]["created_at"].as_str().unwrap());
    let activates = tessera_proto::clock::parse_rfc3339(activates_at);
    assert_eq!(activates.zip(created).map(|(a, c)| a - c), Some(600));
}
