//! `tessera`: the one binary. It parses the command line and calls into the crates:
//! `serve` runs the server, `config check` shows the settings it would run with, `plan`,
//! `client` and `keys` administer the registry (in the database, or with `--admin-url`
//! through a server's admin API), `backup` copies it (also while a server runs on the same
//! database), `token` gets a token as a client, `completions` prints shell completions and
//! `man` writes the manual pages.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use tessera_proto::Algorithm;
use tessera_server::secrets::{load_master_key, MasterKeyChoice, MasterKeyOrigin, Secrets};

mod backup;
mod client_key;
mod help;
mod manage;
mod master_key;
mod serve;
mod token;

use manage::ManageCommand;

#[derive(Debug, Parser)]
#[command(
    name = "tessera",
    version,
    about = "OAuth 2.0 client credentials token service"
)]
struct Cli {
    #[command(flatten)]
    data: DataArgs,
    #[command(flatten)]
    admin: manage::AdminArgs,
    #[command(subcommand)]
    command: Command,
}

/// Where the registry lives and how its secrets are keyed; shared by every command, and
/// settings of `serve` (keys of its `--config` file) too.
#[derive(Debug, clap::Args, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
struct DataArgs {
    /// A TOML file of settings, keyed by `serve`'s long flag names (`max-staleness = 300`):
    /// `serve` takes every setting from it, the other commands the database and the master
    /// key. Flags and TESSERA_* variables override what it says.
    #[arg(
        long,
        global = true,
        env = "TESSERA_CONFIG",
        value_name = "PATH",
        help_heading = help::GLOBAL
    )]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// Database URL: sqlite://PATH (or a file path), or postgres://USER:PASSWORD@HOST/DB.
    #[arg(
        long,
        global = true,
        env = "TESSERA_DATABASE_URL",
        default_value = "sqlite://tessera.db",
        help_heading = help::GLOBAL
    )]
    database: String,
    /// File holding the master key (base64url, 32 bytes). Default: the SQLite file's path
    /// with `.key` appended, generated on first use. --master-key overrides both.
    #[arg(
        long,
        global = true,
        env = "TESSERA_MASTER_KEY_FILE",
        help_heading = help::GLOBAL
    )]
    master_key_file: Option<PathBuf>,
    /// The master key itself (base64url, 32 bytes). Prefer TESSERA_MASTER_KEY or
    /// --master-key-file: a flag's value is visible to other users in the process list.
    #[arg(
        long,
        global = true,
        env = "TESSERA_MASTER_KEY",
        hide_env_values = true,
        value_name = "KEY",
        help_heading = help::GLOBAL
    )]
    master_key: Option<String>,
    /// Start a new, empty SQLite database although the default master key file beside it
    /// exists. Without it, `serve` and the commands that write refuse a missing or empty
    /// database beside a key file, which says that a database was there and was moved or lost.
    #[arg(long, global = true, help_heading = help::GLOBAL)]
    #[serde(skip)]
    init: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the token service.
    Serve(serve::ServeArgs),
    /// Check the settings of `serve`.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Manage plans: the scopes a client may request and its token lifetime.
    #[command(subcommand)]
    Plan(manage::PlanCommand),
    /// Manage clients.
    #[command(subcommand)]
    Client(manage::ClientCommand),
    /// Manage organizations: customers whose clients share one plan.
    #[command(subcommand)]
    Org(manage::OrgCommand),
    /// Manage signing keys; make a client's key.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Manage trust policies: which external identities (Kubernetes service accounts,
    /// GitHub Actions jobs, SPIFFE IDs) may act as which client, with no secret.
    #[command(subcommand)]
    Trust(manage::TrustCommand),
    /// Copy the SQLite database into a new file, consistently, also while `serve` runs.
    ///
    /// The master key is not in the copy: back it up apart, once.
    Backup(backup::BackupArgs),
    /// Get an access token as a client (cached on disk for its lifetime).
    Token(token::TokenArgs),
    /// Print shell completions, e.g. `tessera completions bash > /etc/bash_completion.d/tessera`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (roff), one per command, into a directory, e.g.
    /// `tessera man /usr/local/share/man/man1`.
    Man(help::ManArgs),
}

/// `config`: the settings of `serve`.
#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print the settings `serve` would run with these flags, this environment and this
    /// --config file, each with where it came from (default, file, env or flag), secrets
    /// redacted; fail, naming the key, on a setting that is wrong.
    Check(serve::ServeArgs),
}

/// `keys`: the server's signing keys (admin commands), and a client's own key (local).
#[derive(Debug, Subcommand)]
enum KeysCommand {
    #[command(flatten)]
    Signing(manage::KeysCommand),
    /// Write a new Ed25519 private key for a private_key_jwt client (PKCS #8 PEM, mode 0600)
    /// and print its public JWK Set, for `client create --auth-method private_key_jwt
    /// --jwks-file`.
    GenerateClientKey(client_key::GenerateClientKeyArgs),
    /// Make a new master key (32 random bytes, base64url) for TESSERA_MASTER_KEY or
    /// --master-key-file, as a PostgreSQL deployment needs one: printed, or written to a new
    /// file of mode 0600 with --out.
    GenerateMasterKey(master_key::GenerateMasterKeyArgs),
}

/// What a command does with the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Only reads: the database must exist.
    Read,
    /// Writes (or serves): the database is created when missing.
    Write,
}

/// Prints the completion script for `shell`. Written whole at the end, so that a closed pipe
/// is an error rather than a panic inside the generator.
fn completions(shell: clap_complete::Shell) -> Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(
        shell,
        &mut Cli::command_with_defaults(),
        "tessera",
        &mut script,
    );
    std::io::Write::write_all(&mut std::io::stdout(), &script)?;
    Ok(())
}

/// Parses `EdDSA`, `ES256`, `RS256` or `PS256`.
fn parse_alg(s: &str) -> Result<Algorithm, tessera_proto::jwk::UnknownAlgorithm> {
    s.parse()
}

impl Cli {
    /// The command tree, with `serve`'s defaults in its help ([`serve::with_defaults`]) and
    /// each command's help showing only the global options it uses ([`help::tidy`]).
    fn command_with_defaults() -> clap::Command {
        help::tidy(serve::with_defaults(Self::command()))
    }
}

fn main() -> std::process::ExitCode {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let runtime = workers(std::env::var_os("TOKIO_WORKER_THREADS"), cores)
        .and_then(|workers| runtime(workers).map_err(|e| e.to_string()));
    match runtime {
        Ok(runtime) => runtime.block_on(run()),
        Err(error) => {
            eprintln!("error: could not start the async runtime: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The async runtime's worker threads: `TOKIO_WORKER_THREADS` when set (the variable tokio
/// itself reads), else one per core this process may use (`taskset`, a container's CPU set).
fn workers(variable: Option<std::ffi::OsString>, cores: usize) -> Result<usize, String> {
    let Some(value) = variable else {
        return Ok(cores.max(1));
    };
    value
        .to_str()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("TOKIO_WORKER_THREADS must be a number above 0, not {value:?}"))
}

/// Tokio's work-stealing scheduler with `workers` threads, or, with one, the current-thread
/// scheduler: the same work on one thread without the cross-thread queues and wake-ups
/// (about 2,800 fewer instructions per token: BENCHMARKS.md, issue 31).
fn runtime(workers: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(workers);
        builder
    };
    builder.enable_all().build()
}

async fn run() -> std::process::ExitCode {
    let matches = Cli::command_with_defaults().get_matches();
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    let admin = &cli.admin;
    let opens_database = matches!(
        cli.command,
        Command::Plan(_)
            | Command::Client(_)
            | Command::Keys(KeysCommand::Signing(_))
            | Command::Trust(_)
            | Command::Backup(_)
    );
    if opens_database {
        if let Err(error) = cli.data.take_config_file(&matches) {
            eprintln!("error: {}", help::message(&error));
            return std::process::ExitCode::FAILURE;
        }
    }
    let outcome = match cli.command {
        Command::Serve(args) => {
            let matches = matches.subcommand_matches("serve").expect("serve");
            serve::run(&cli.data, &args, matches).await
        }
        Command::Config(ConfigCommand::Check(args)) => {
            let matches = matches
                .subcommand_matches("config")
                .and_then(|m| m.subcommand_matches("check"))
                .expect("config check");
            serve::check(&cli.data, &args, matches)
        }
        Command::Plan(cmd) => manage::run(&cli.data, admin, ManageCommand::Plan(cmd)).await,
        Command::Client(cmd) => manage::run(&cli.data, admin, ManageCommand::Client(cmd)).await,
        Command::Org(cmd) => manage::run(&cli.data, admin, ManageCommand::Org(cmd)).await,
        Command::Keys(KeysCommand::Signing(cmd)) => {
            manage::run(&cli.data, admin, ManageCommand::Keys(cmd)).await
        }
        Command::Keys(KeysCommand::GenerateClientKey(args)) => client_key::generate(args),
        Command::Keys(KeysCommand::GenerateMasterKey(args)) => master_key::generate(&args),
        Command::Trust(cmd) => manage::run(&cli.data, admin, ManageCommand::Trust(cmd)).await,
        Command::Backup(args) => backup::run(&cli.data, args).await,
        Command::Token(args) => token::run(args).await,
        Command::Completions { shell } => completions(shell),
        Command::Man(args) => help::man(&Cli::command_with_defaults(), &args),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // A reader that stopped reading (`tessera client list | head`) is not an error of
        // ours: stop quietly, as ripgrep does.
        Err(error) if help::is_broken_pipe(&error) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", help::message(&error));
            if error.downcast_ref::<manage::BadUsage>().is_some() {
                std::process::ExitCode::from(2)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}

impl DataArgs {
    /// The database and master key settings of the `--config` file, where no flag or
    /// variable gave them: a command that opens the database opens the one `serve` with the
    /// same file serves.
    fn take_config_file(&mut self, matches: &clap::ArgMatches) -> Result<()> {
        let Some(path) = &self.config else {
            return Ok(());
        };
        let file = serve::read_file(path)?;
        let from_file = |id: &str, key: &str| {
            let given = matches!(
                matches.value_source(id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            );
            let value = file.get(key).and_then(|value| value.as_str());
            value.filter(|_| !given).map(str::to_owned)
        };
        if let Some(database) = from_file("database", "database") {
            self.database = database;
        }
        if let Some(path) = from_file("master_key_file", "master-key-file") {
            self.master_key_file = Some(PathBuf::from(path));
        }
        if let Some(key) = from_file("master_key", "master-key") {
            self.master_key = Some(key);
        }
        Ok(())
    }

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
    ///
    /// A write is refused, unless `--init` is given, when the default master key file lies
    /// beside a missing or empty SQLite database (the master-key policy:
    /// [`tessera_server::secrets::ExistingKeyFile`]).
    async fn store(&self, access: Access) -> Result<std::sync::Arc<dyn tessera_store::Store>> {
        if access == Access::Read {
            self.reads_only()?;
            return tessera_store::open_existing(&self.database)
                .await
                .map_err(|e| self.opening_error(e));
        }
        let key_file = if self.init {
            None
        } else {
            self.master_key_choice().existing_key_file()
        };
        if let Some(key_file) = &key_file {
            key_file.refuse_missing_database()?;
        }
        let store = tessera_store::open(&self.database)
            .await
            .map_err(|e| self.opening_error(e))?;
        if let Some(key_file) = &key_file {
            key_file.refuse_empty_database(store.as_ref()).await?;
        }
        Ok(store)
    }

    /// Refuses `--init` to a command that only reads.
    fn reads_only(&self) -> Result<()> {
        if self.init {
            bail!("--init is for `serve` and the commands that write");
        }
        Ok(())
    }

    /// Why the database could not be opened, with its URL (less any password).
    fn opening_error(&self, error: tessera_store::StoreError) -> anyhow::Error {
        anyhow::Error::new(error).context(format!(
            "cannot open database {}",
            tessera_server::redact_url(&self.database)
        ))
    }

    /// Where the master key comes from: `--master-key` (`TESSERA_MASTER_KEY`),
    /// `--master-key-file`, or the default file beside an SQLite database.
    fn master_key_choice(&self) -> MasterKeyChoice {
        if let Some(value) = &self.master_key {
            MasterKeyChoice::Value(tessera_proto::ClientSecret::new(value.clone()))
        } else if let Some(path) = &self.master_key_file {
            MasterKeyChoice::File(path.clone())
        } else {
            MasterKeyChoice::BesideDatabase(self.sqlite_path())
        }
    }

    /// Loads the master key by the server's policy ([`load_master_key`]).
    async fn secrets(
        &self,
        store: &dyn tessera_store::Store,
    ) -> Result<(std::sync::Arc<Secrets>, MasterKeyOrigin)> {
        let (secrets, origin) = load_master_key(self.master_key_choice(), store).await?;
        Ok((std::sync::Arc::new(secrets), origin))
    }
}

#[cfg(test)]
mod tests {
    use super::workers;

    #[test]
    fn workers_follow_the_variable_else_the_cores() {
        assert_eq!(workers(None, 4), Ok(4));
        assert_eq!(workers(None, 1), Ok(1));
        assert_eq!(workers(None, 0), Ok(1));
        assert_eq!(workers(Some("1".into()), 8), Ok(1));
        assert_eq!(workers(Some("3".into()), 1), Ok(3));
        for junk in ["0", "", "two", "-1"] {
            let error = workers(Some(junk.into()), 4).unwrap_err();
            assert!(error.contains("TOKIO_WORKER_THREADS"), "{error}");
        }
    }
}
