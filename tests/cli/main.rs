//! The `tessera` binary as an operator uses it, one file per concern: the admin commands
//! (`commands`, `bulk`, `locks`, `operator`, `remote`), the keys (`keys`, `client_keys`), `serve`
//! (`serve`, `config`, `tls`, `subject_dn`, `signals`), the data it keeps (`data`,
//! `database`, `redis`), `token` (`token_command`), the traces `serve` exports (`traces`), the book's pages about the binary
//! (`docs`), the rough edges of a first hour (`first_hour`) and the deployment files of
//! `deploy/` against the binary (`deploy`). The process harness is the test kit's
//! ([`tessera_testkit::binary`]); here are the shortcuts to it and the helpers several files
//! share.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tessera_testkit::binary::{spawn_binary, BinaryServer, Tessera};
use tessera_testkit::{claims_of, header_of};

mod api_limits;
mod audit;
mod bulk;
mod client_keys;
mod commands;
mod config;
mod data;
mod database;
mod deploy;
mod docs;
mod first_hour;
mod keys;
mod locks;
mod operator;
mod orgs;
mod redis;
mod remote;
mod serve;
mod signals;
mod subject_dn;
mod tls;
mod token_command;
mod traces;

pub(crate) use tessera_testkit::binary::{answer, token, token_post};

const BIN: &str = env!("CARGO_BIN_EXE_tessera");

/// The binary under test.
const TESSERA: Tessera = Tessera::new(BIN);

/// `serve` running as a process.
type Server = BinaryServer;

/// `tessera` in `dir` with none of the test's own `TESSERA_*` variables.
fn command(dir: &Path) -> Command {
    TESSERA.command(dir)
}

fn tessera_with(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    TESSERA.output(dir, env, args)
}

/// A command that must be refused as a usage error: exit status 2; its stderr.
fn usage_error(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
    let out = tessera_with(dir, env, args);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    String::from_utf8(out.stderr).unwrap()
}

fn ok(dir: &Path, args: &[&str]) -> String {
    TESSERA.ok(dir, &[], args)
}

fn ok_with(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
    TESSERA.ok(dir, env, args)
}

fn fails(dir: &Path, args: &[&str]) -> String {
    TESSERA.fails(dir, &[], args)
}

fn fails_with(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
    TESSERA.fails(dir, env, args)
}

/// `tessera serve --listen 127.0.0.1:0 EXTRA`.
fn serve(dir: &Path, extra: &[&str]) -> Server {
    let args = [&["serve", "--listen", "127.0.0.1:0"], extra].concat();
    spawn_binary(TESSERA, dir, &[], &args)
}

/// `tessera ARGS` (a `serve` command) with the `TESSERA_*` variables in `env` only.
fn spawn(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Server {
    spawn_binary(TESSERA, dir, env, args)
}

/// A client of `plan`; its id and secret.
fn create_client(dir: &Path, plan: &str) -> (String, String) {
    TESSERA.create_client(dir, &[], &[], plan)
}

/// A client of `plan`, created with the `TESSERA_*` variables in `env` and `args` added.
fn create_client_with(
    dir: &Path,
    env: &[(&str, &str)],
    args: &[&str],
    plan: &str,
) -> (String, String) {
    TESSERA.create_client(dir, env, args, plan)
}

/// A `serve` that must fail to start, with the `TESSERA_*` variables in `env`; its stderr.
async fn refused_start(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
    TESSERA.refused_start(dir, env, args).await
}

async fn issued_total(base: &str) -> u64 {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("tessera_tokens_issued_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// `plan list --json`, by plan name.
fn plans(dir: &Path) -> std::collections::HashMap<String, serde_json::Value> {
    let list: Vec<serde_json::Value> =
        serde_json::from_str(&ok(dir, &["plan", "list", "--json"])).unwrap();
    list.into_iter()
        .map(|p| (p["name"].as_str().unwrap().to_owned(), p))
        .collect()
}

/// A fresh master key: 32 random bytes, base64url.
fn master_key() -> String {
    use base64::Engine;
    let mut key = [0u8; 32];
    aws_lc_rs::rand::fill(&mut key).unwrap();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key)
}

/// The access token of a successful answer.
async fn access_token(response: reqwest::Response) -> String {
    let (status, body) = answer(response).await;
    assert_eq!(status, 200, "{body}");
    body["access_token"].as_str().unwrap().to_owned()
}

/// The address a second listener of `server` bound, as its start-up lines print it
/// (`  LABEL:  SCHEME://ADDR/...`). Tests give such listeners port 0, so no port is picked
/// beforehand that another process could take in between.
async fn printed_address(server: &Server, label: &str) -> String {
    let url = printed(server, label).await;
    let (_, rest) = url.split_once("://").expect("a URL");
    rest.split(['/', ' ']).next().unwrap().to_owned()
}

/// What `server` printed after `LABEL:` in its start-up lines.
async fn printed(server: &Server, label: &str) -> String {
    let prefix = format!("{label}:");
    let line = server
        .stdout_line(|l| l.trim_start().starts_with(&prefix))
        .await;
    line.trim_start()[prefix.len()..].trim().to_owned()
}

/// Port 0 on loopback, for a second listener of `serve`: see [`printed_address`].
const ANY_PORT: &str = "127.0.0.1:0";
