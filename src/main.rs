//! `tessera`: the one binary. It parses the command line and calls into the crates:
//! `serve` runs the server, `plan`, `client` and `keys` administer the registry (also while
//! a server runs on the same database).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use tessera_proto::Algorithm;
use tessera_server::secrets::{load_master_key, MasterKeyChoice, MasterKeyOrigin, Secrets};

mod admin;
mod serve;
mod token;

#[derive(Debug, Parser)]
#[command(
    name = "tessera",
    version,
    about = "OAuth 2.0 client credentials token service"
)]
struct Cli {
    #[command(flatten)]
    data: DataArgs,
    #[command(subcommand)]
    command: Command,
}

/// Where the registry lives and how its secrets are keyed; shared by every command.
#[derive(Debug, clap::Args)]
struct DataArgs {
    /// Database URL: sqlite://PATH (or a file path).
    #[arg(
        long,
        global = true,
        env = "TESSERA_DATABASE_URL",
        default_value = "sqlite://tessera.db"
    )]
    database: String,
    /// File holding the master key (base64url, 32 bytes). Default: the SQLite file's path
    /// with `.key` appended, generated on first use. TESSERA_MASTER_KEY overrides both.
    #[arg(long, global = true, env = "TESSERA_MASTER_KEY_FILE")]
    master_key_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the token service.
    Serve(serve::ServeArgs),
    /// Manage plans: the scopes a client may request and its token lifetime.
    #[command(subcommand)]
    Plan(admin::PlanCommand),
    /// Manage clients.
    #[command(subcommand)]
    Client(admin::ClientCommand),
    /// Manage signing keys.
    #[command(subcommand)]
    Keys(admin::KeysCommand),
    /// Get an access token as a client (cached on disk for its lifetime).
    Token(token::TokenArgs),
}

/// What a command does with the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Only reads: the database must exist.
    Read,
    /// Writes (or serves): the database is created when missing.
    Write,
}

/// Parses `EdDSA` or `ES256`.
fn parse_alg(s: &str) -> Result<Algorithm, String> {
    s.parse()
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Serve(args) => serve::run(&cli.data, args).await,
        Command::Plan(cmd) => admin::plan(&cli.data, cmd).await,
        Command::Client(cmd) => admin::client(&cli.data, cmd).await,
        Command::Keys(cmd) => admin::keys(&cli.data, cmd).await,
        Command::Token(args) => token::run(args).await,
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

impl DataArgs {
    /// The SQLite file the URL names, if it names one.
    fn sqlite_path(&self) -> Option<PathBuf> {
        let url = self.database.as_str();
        if url.contains("://") && !url.starts_with("sqlite://") {
            return None;
        }
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .unwrap_or(url);
        Some(PathBuf::from(path.split('?').next().unwrap_or(path)))
    }

    /// Opens the store. For a command that writes, creating and migrating it when needed;
    /// one that only reads needs an existing database, so that a mistyped path creates
    /// nothing.
    async fn store(&self, access: Access) -> Result<std::sync::Arc<dyn tessera_store::Store>> {
        let opened = match access {
            Access::Read => tessera_store::open_existing(&self.database).await,
            Access::Write => tessera_store::open(&self.database).await,
        };
        opened.map_err(|e| {
            anyhow::anyhow!("cannot open database {}: {e}", redact_url(&self.database))
        })
    }

    /// Loads the master key by the server's policy ([`load_master_key`]).
    async fn secrets(
        &self,
        store: &dyn tessera_store::Store,
    ) -> Result<(std::sync::Arc<Secrets>, MasterKeyOrigin)> {
        let choice = if let Ok(value) = std::env::var("TESSERA_MASTER_KEY") {
            MasterKeyChoice::Value(tessera_proto::ClientSecret::new(value))
        } else if let Some(path) = &self.master_key_file {
            MasterKeyChoice::File(path.clone())
        } else {
            MasterKeyChoice::BesideDatabase(self.sqlite_path())
        };
        let (secrets, origin) = load_master_key(choice, store).await?;
        Ok((std::sync::Arc::new(secrets), origin))
    }
}

/// A URL without its password, for printing.
pub(crate) fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:[redacted]{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_not_printed() {
        assert_eq!(
            super::redact_url("postgres://app:s3cret@db:5432/tessera"),
            "postgres://app:[redacted]@db:5432/tessera"
        );
        assert_eq!(
            super::redact_url("postgres://app@db/t"),
            "postgres://app@db/t"
        );
        assert_eq!(
            super::redact_url("sqlite://tessera.db"),
            "sqlite://tessera.db"
        );
    }
}
