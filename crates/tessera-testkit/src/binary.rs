//! The `tessera` binary as an operator runs it, for the tests of the binary: commands in a
//! folder of the test's with none of the test process's `TESSERA_*` variables, and `serve`
//! as a process on port 0 ([`spawn_binary`]) whose output is read line by line. The in-process
//! servers of [`crate::spawn_with`] run the same lifecycle; this one adds the process: its
//! flags, environment and configuration file, its signals and its exit.
//!
//! ```no_run
//! # async fn example() {
//! use tessera_testkit::binary::{spawn_binary, Tessera};
//! const TESSERA: Tessera = Tessera::new("target/debug/tessera"); // env!("CARGO_BIN_EXE_tessera")
//! let dir = tempfile::tempdir().unwrap();
//! TESSERA.ok(dir.path(), &[], &["plan", "set", "pro", "--scopes", "news-api"]);
//! let server = spawn_binary(TESSERA, dir.path(), &[], &["serve", "--listen", "127.0.0.1:0"]);
//! let ready = reqwest::get(format!("{}/readyz", server.base)).await.unwrap();
//! assert_eq!(ready.status(), 200);
//! assert!(server.terminate().await.success());
//! # }
//! ```

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The binary under test, by its path (`env!("CARGO_BIN_EXE_tessera")` in the package's
/// own tests).
#[derive(Debug, Clone, Copy)]
pub struct Tessera(&'static str);

impl Tessera {
    /// The binary at `path`.
    pub const fn new(path: &'static str) -> Self {
        Self(path)
    }

    /// `tessera` in `dir` with none of the test's own `TESSERA_*` variables: each test sets
    /// the ones it means.
    pub fn command(self, dir: &Path) -> Command {
        let mut command = Command::new(self.0);
        command.current_dir(dir);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("TESSERA_") {
                command.env_remove(name);
            }
        }
        command
    }

    /// Runs `tessera ARGS` in `dir` with the variables in `env`, to its end.
    pub fn output(self, dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
        self.command(dir)
            .args(args)
            .envs(env.iter().copied())
            .output()
            .expect("the binary runs")
    }

    /// [`Self::output`], which must succeed; its stdout.
    pub fn ok(self, dir: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
        let out = self.output(dir, env, args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8 on stdout")
    }

    /// [`Self::output`], which must fail; its stderr.
    pub fn fails(self, dir: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
        let out = self.output(dir, env, args);
        assert!(!out.status.success(), "{args:?} should fail");
        String::from_utf8(out.stderr).expect("UTF-8 on stderr")
    }

    /// A client of `plan`, created with the variables in `env` and `args` added; its id and
    /// secret.
    pub fn create_client(
        self,
        dir: &Path,
        env: &[(&str, &str)],
        args: &[&str],
        plan: &str,
    ) -> (String, String) {
        let create = [
            "client", "create", "--plan", plan, "--name", "app", "--json",
        ];
        let out = self.ok(dir, env, &[&create[..], args].concat());
        let json: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON");
        assert_eq!(json["plan"], plan);
        (
            json["client_id"].as_str().expect("an id").to_owned(),
            json["client_secret"].as_str().expect("a secret").to_owned(),
        )
    }

    /// Runs `tessera ARGS`, a `serve` that must fail to start, with the variables in `env`:
    /// it must exit unsuccessfully within 10 s. Returns what it wrote to stderr.
    pub async fn refused_start(self, dir: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
        let mut refused = self
            .command(dir)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = refused.try_wait().expect("a child") {
                break status;
            }
            if started.elapsed() > Duration::from_secs(10) {
                let _ = refused.kill();
                panic!("{args:?} still starting after 10 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut refused.stderr.take().expect("piped"), &mut err)
            .expect("stderr read");
        assert!(!status.success(), "{args:?} should fail");
        err
    }
}

/// `serve` running as a process; killed when dropped.
#[derive(Debug)]
pub struct BinaryServer {
    tessera: Tessera,
    child: Child,
    /// Its base URL, as its first line says: `http://127.0.0.1:PORT` (or `https://`).
    pub base: String,
    /// What it wrote to stderr so far, line by line.
    stderr: Arc<Mutex<Vec<String>>>,
    /// What it wrote to stdout after its first line so far, line by line.
    stdout: Arc<Mutex<Vec<String>>>,
}

/// Starts `tessera ARGS` (a `serve` command) in `dir` with the variables in `env` only, and
/// waits for its first line, `tessera listening on URL`.
pub fn spawn_binary(
    tessera: Tessera,
    dir: &Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> BinaryServer {
    let mut child = tessera
        .command(dir)
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let (lines, sink) = (
        BufReader::new(child.stderr.take().expect("piped")),
        stderr.clone(),
    );
    std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            sink.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
    });
    let mut lines = BufReader::new(child.stdout.take().expect("piped"));
    let mut first = String::new();
    lines.read_line(&mut first).expect("stdout read");
    let base = first
        .trim()
        .strip_prefix("tessera listening on ")
        .unwrap_or_else(|| {
            panic!(
                "unexpected first line {first:?}; stderr: {:?}",
                stderr.lock().unwrap_or_else(|p| p.into_inner())
            )
        })
        .to_owned();
    // Keep draining stdout, kept line by line, so the server never blocks on a full pipe.
    let stdout = Arc::new(Mutex::new(Vec::new()));
    let sink = stdout.clone();
    std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            sink.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
    });
    BinaryServer {
        tessera,
        child,
        base,
        stderr,
        stdout,
    }
}

impl BinaryServer {
    /// Sends `signal` (`-TERM`, `-HUP`, `-KILL`…) with `kill`.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal}");
    }

    /// Stops the server with SIGTERM and waits (10 s at most) for it to exit.
    pub async fn terminate(self) -> ExitStatus {
        self.signal("-TERM");
        self.exited().await
    }

    /// Waits (10 s at most) for the server to exit, say after a signal.
    pub async fn exited(mut self) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("a child") {
                return status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "still running after 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every line it wrote to stderr so far.
    pub fn stderr(&self) -> Vec<String> {
        self.stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The first stdout line after `tessera listening on` that `wanted` accepts, waited
    /// for 10 s at most (the demo prints its credentials and commands there).
    pub async fn stdout_line(&self, wanted: impl Fn(&str) -> bool) -> String {
        let lines = || {
            self.stdout
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        };
        let started = Instant::now();
        loop {
            if let Some(line) = lines().into_iter().find(|l| wanted(l)) {
                return line;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no such stdout line within 10 s: {:?}",
                lines()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The first stderr line that `wanted` accepts, waited for 10 s at most.
    pub async fn log_line(&self, wanted: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            if let Some(line) = self.stderr().into_iter().find(|l| wanted(l)) {
                return line;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no such log line within 10 s: {:?}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (10 s at most) until the server has loaded every change made so far to the
    /// database in `dir` by the CLI (run with `env`): a plan written now with a scope of its
    /// own shows in the metadata once the server has polled, and it reloads the registry
    /// whole, so everything written before shows with it. Checking through the metadata
    /// costs no token request and no failed authentication.
    pub async fn sees_changes(&self, dir: &Path, env: &[(&str, &str)]) {
        static BARRIER: AtomicUsize = AtomicUsize::new(0);
        let scope = format!("sync-{}-api", BARRIER.fetch_add(1, Ordering::Relaxed));
        self.tessera
            .ok(dir, env, &["plan", "set", &scope, "--scopes", &scope]);
        let started = Instant::now();
        loop {
            let metadata: serde_json::Value = reqwest::get(format!(
                "{}/.well-known/oauth-authorization-server",
                self.base
            ))
            .await
            .expect("the server answers")
            .json()
            .await
            .expect("JSON metadata");
            let scopes = metadata["scopes_supported"].as_array().expect("scopes");
            if scopes.iter().any(|s| *s == scope.as_str()) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "change not seen within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for BinaryServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A token request to the server at `base` with HTTP Basic credentials (RFC 6749 section
/// 2.3.1) for `scope`.
pub async fn token(base: &str, id: &str, secret: &str, scope: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/connect/token"))
        .basic_auth(id, Some(secret))
        .form(&[("grant_type", "client_credentials"), ("scope", scope)])
        .send()
        .await
        .expect("the server answers")
}

/// A token request with the credentials in the form body (`client_secret_post`).
pub async fn token_post(base: &str, id: &str, secret: &str, scope: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/connect/token"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", scope),
            ("client_id", id),
            ("client_secret", secret),
        ])
        .send()
        .await
        .expect("the server answers")
}

/// The status and JSON body of an answer.
pub async fn answer(response: reqwest::Response) -> (u16, serde_json::Value) {
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}
