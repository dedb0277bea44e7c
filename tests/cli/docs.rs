//! The book's pages about the binary, held to it: the quick start's shell commands run as
//! written against the real binary (`docs/quick-start.md`), and the command-line summary
//! (`docs/cli.md`) names only flags the commands take.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use super::{BIN, TESSERA};

const QUICK_START: &str = include_str!("../../docs/quick-start.md");
const CLI: &str = include_str!("../../docs/cli.md");

/// The address and demo credentials as the quick start prints them; the test puts the real
/// ones in their place.
const PAGE_BASE: &str = "http://127.0.0.1:8080";

/// A fenced block of a page: its info string's language and its text.
#[derive(Debug)]
struct Block {
    lang: String,
    text: String,
}

/// Every fenced block of `page`, in order.
fn blocks(page: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<(String, Vec<&str>)> = None;
    for line in page.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => {
                let lang = info.split([',', ' ']).next().unwrap_or("").to_owned();
                open = Some((lang, Vec::new()));
            }
            (Some(_), Some("")) => {
                let (lang, lines) = open.take().unwrap();
                found.push(Block {
                    lang,
                    text: lines.join("\n"),
                });
            }
            (Some((_, lines)), _) => lines.push(line),
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "a block is not closed");
    found
}

/// `expected` with each `…` standing for any text: does `actual` match it?
fn matches(expected: &str, actual: &str) -> bool {
    let parts: Vec<&str> = expected.split('…').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return actual == expected;
    }
    let Some(mut rest) = actual.strip_prefix(first) else {
        return false;
    };
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// The values after `label` in `lines` (`  client_id:     tc_…`), in order.
fn values<'a>(lines: impl Iterator<Item = &'a str>, label: &str) -> Vec<String> {
    lines
        .filter_map(|l| l.trim_start().strip_prefix(label))
        .map(|v| v.trim().to_owned())
        .collect()
}

#[tokio::test]
async fn the_quick_start_runs_as_written() {
    let page = blocks(QUICK_START);
    let mut rest = page.iter().filter(|b| b.lang != "toml").peekable();

    // Install: the test runs the binary cargo built for it, which is what that installs.
    let install = rest.next().unwrap();
    assert_eq!(
        (install.lang.as_str(), install.text.as_str()),
        ("sh", "cargo install --path . --locked")
    );

    // Start: the page's command, on a free port; its banner as the page shows it.
    let start = rest.next().unwrap();
    assert_eq!(
        (start.lang.as_str(), start.text.as_str()),
        ("sh", "tessera serve --demo")
    );
    let dir = tempfile::tempdir().unwrap();
    let mut args: Vec<&str> = start.text.split(' ').skip(1).collect();
    args.extend(["--listen", "127.0.0.1:0"]);
    let mut server = TESSERA
        .command(dir.path())
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(server.stdout.take().unwrap());
    let mut banner = Vec::new();
    // Up to the admin client's secret: the last line the page shows before "…".
    while values(banner.iter().map(String::as_str), "client_secret:").len() < 2 {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "banner: {banner:?}"
        );
        banner.push(line.trim_end().to_owned());
    }
    std::thread::spawn(move || for _ in reader.lines() {});
    let base = banner[0]
        .strip_prefix("tessera listening on ")
        .unwrap()
        .to_owned();

    let shown = rest.next().unwrap();
    assert_eq!(shown.lang, "text");
    let mut replace = vec![(base, PAGE_BASE.to_owned())];
    for label in ["client_id:", "client_secret:"] {
        let real = values(banner.iter().map(String::as_str), label);
        let page = values(shown.text.lines(), label);
        assert_eq!(real.len(), page.len(), "{label} in {banner:#?}");
        replace.extend(real.into_iter().zip(page));
    }
    let as_shown = |line: &str| {
        replace
            .iter()
            .fold(line.to_owned(), |l, (real, page)| l.replace(real, page))
    };
    let shown_lines: Vec<&str> = shown.text.lines().take_while(|l| *l != "…").collect();
    let real_lines: Vec<String> = banner.iter().map(|l| as_shown(l)).collect();
    assert_eq!(
        shown_lines,
        real_lines[..shown_lines.len()],
        "the banner as the page shows it"
    );

    // Every other command, in one shell as a reader types them, with the real address
    // and secrets; each block's output checked against the `text` block after it.
    let mut script = String::from("set -euo pipefail\n");
    let mut expected = Vec::new();
    while let Some(block) = rest.next() {
        assert_eq!(block.lang, "sh", "a {} block after a command", block.lang);
        let text = replace
            .iter()
            .fold(block.text.clone(), |t, (real, page)| t.replace(page, real));
        script.push_str(&text);
        script.push_str("\nprintf '\\n@@end\\n'\n");
        let output = rest.next_if(|b| b.lang == "text").map(|b| b.text.clone());
        expected.push((block.text.clone(), output));
    }
    let path = format!(
        "{}:{}",
        Path::new(BIN).parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let home = dir.path().join("home");
    let run = Command::new("bash")
        .args(["-c", &script])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", path)
        .env("HOME", &home)
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .output()
        .unwrap();
    let stdout = String::from_utf8(run.stdout).unwrap();
    assert!(
        run.status.success(),
        "the quick start's commands failed:\n{script}\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let outputs: Vec<&str> = stdout.split("\n@@end\n").collect();
    assert_eq!(outputs.len(), expected.len() + 1, "{stdout}");
    for ((command, wanted), output) in expected.iter().zip(&outputs) {
        if let Some(wanted) = wanted {
            let output = as_shown(output.trim_end());
            assert!(
                matches(wanted, &output),
                "`{command}` printed\n{output}\nnot as the page shows it:\n{wanted}"
            );
        }
    }
    // The page's last commands made a plan and a client, on the database the server uses.
    assert!(
        outputs.iter().any(|o| o.contains("tcs_")),
        "client create printed no secret: {stdout}"
    );

    server.kill().unwrap();
    server.wait().unwrap();
}

/// The command a summary line is about (`plan set`), and the flags it names.
fn summary(cli: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let block = blocks(cli)
        .into_iter()
        .find(|b| b.lang == "sh")
        .expect("the summary");
    let mut commands: Vec<(Vec<String>, String)> = Vec::new();
    for line in block.text.lines() {
        match line.strip_prefix("tessera ") {
            Some(rest) => {
                let path = rest
                    .split(' ')
                    .take_while(|w| {
                        w.starts_with(|c: char| c.is_ascii_lowercase())
                            && w.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                    })
                    .take(2)
                    .map(str::to_owned)
                    .collect();
                commands.push((path, rest.to_owned()));
            }
            None => commands
                .last_mut()
                .expect("a command first")
                .1
                .push_str(line),
        }
    }
    commands
        .into_iter()
        .map(|(path, text)| {
            let flags = text
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .filter(|w| w.starts_with("--") && w.len() > 2)
                .map(str::to_owned)
                .collect();
            (path, flags)
        })
        .collect()
}

#[test]
fn the_command_line_summary_names_only_flags_the_commands_take() {
    let dir = tempfile::tempdir().unwrap();
    let global = TESSERA.ok(dir.path(), &[], &["--help"]);
    let mut helps: HashMap<Vec<String>, String> = HashMap::new();
    let lines = summary(CLI);
    assert!(lines.len() >= 15, "{lines:?}");
    for (path, flags) in lines {
        let help = helps.entry(path.clone()).or_insert_with(|| {
            let args: Vec<&str> = path.iter().map(String::as_str).chain(["--help"]).collect();
            TESSERA.ok(dir.path(), &[], &args)
        });
        for flag in flags {
            let listed = |h: &str| {
                h.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                    .any(|w| w == flag)
            };
            assert!(
                listed(help) || listed(&global),
                "docs/cli.md: `tessera {}` has no {flag}",
                path.join(" ")
            );
        }
    }
}

const README: &str = include_str!("../../README.md");

/// README, "Customers: organizations": its commands run as written on a new database, and
/// do what the text after them says: the organization holds the admin client on the plan
/// that grants `tessera-org-admin`, counted per organization, and the month's CSV comes out.
#[test]
fn the_readmes_organization_commands_run_as_written() {
    let section = README
        .split("## Customers: organizations")
        .nth(1)
        .expect("the README has the section");
    let block = blocks(section)
        .into_iter()
        .next()
        .expect("the section has a block");
    assert_eq!(block.lang, "sh");
    let dir = tempfile::tempdir().unwrap();
    let path = format!(
        "{}:{}",
        Path::new(BIN).parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = Command::new("bash")
        .args(["-c", &format!("set -euo pipefail\n{}", block.text)])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8(run.stdout).unwrap();
    assert!(
        run.status.success(),
        "the README's commands failed:\n{}\nstdout:\n{stdout}\nstderr:\n{}",
        block.text,
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.contains("tcs_"),
        "no secret for acme-admin: {stdout}"
    );
    assert!(
        stdout.ends_with(
            "day,client_id,client_name,tokens_issued,tokens_refused,api_requests,api_refused\r\n"
        ),
        "the CSV (RFC 4180 line ends), its header alone: {stdout}"
    );

    let show = |args: &[&str]| -> serde_json::Value {
        let out = TESSERA.command(dir.path()).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let org = show(&["org", "show", "acme", "--json"]);
    assert_eq!(
        (&org["plan"], &org["clients"], &org["name"]),
        (&"pro".into(), &1.into(), &"Acme Trading".into())
    );
    let plans = show(&["plan", "list", "--json"]);
    let plan = &plans[0];
    assert_eq!(plan["name"], "pro", "{plans}");
    assert!(
        plan["scopes"]
            .as_array()
            .unwrap()
            .contains(&"tessera-org-admin".into()),
        "the plan grants the org admin's scope: {plan}"
    );
    assert_eq!(
        (&plan["limit_per"], &plan["token_rate"]["count"]),
        (&"org".into(), &600.into()),
        "{plan}"
    );
}
