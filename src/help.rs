//! What the binary says about itself: each command's help with only the global options it
//! uses, grouped under their own heading; the manual pages, written from the same command
//! tree; and an error as one line, each cause once.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Arg, Command};

/// The help heading of the options every command takes.
pub(crate) const GLOBAL: &str = "Global options";

/// The global options that send an admin command to a server instead of the database.
const ADMIN: &[&str] = &[
    "admin_url",
    "admin_token",
    "admin_client_id",
    "admin_client_secret",
];
/// Every global option: where the registry is, how it is keyed, and `--admin-url`.
const ALL: &[&str] = &[
    "config",
    "database",
    "master_key_file",
    "master_key",
    "init",
    "admin_url",
    "admin_token",
    "admin_client_id",
    "admin_client_secret",
];

/// Hides from each command's help the global options it does not use: `--admin-url`
/// outside the admin commands (`plan`, `client`, `keys`, `trust`), and the database and
/// master key options where no database is opened. Such a command gets a hidden copy of the
/// option, which clap then does not copy over it; the option is still accepted, as before.
pub(crate) fn tidy(command: Command) -> Command {
    let hidden: Vec<Arg> = command
        .get_arguments()
        .filter(|arg| arg.is_global_set())
        .map(|arg| arg.clone().hide(true))
        .collect();
    let without = |ids: &'static [&'static str]| {
        let copies: Vec<Arg> = hidden
            .iter()
            .filter(|arg| ids.contains(&arg.get_id().as_str()))
            .cloned()
            .collect();
        move |sub: Command| sub.args(copies)
    };
    command
        .mut_subcommand("serve", without(ADMIN))
        .mut_subcommand("config", without(ADMIN))
        .mut_subcommand("backup", without(ADMIN))
        .mut_subcommand("token", without(ALL))
        .mut_subcommand("completions", without(ALL))
        .mut_subcommand("man", without(ALL))
        .mut_subcommand("keys", |keys| {
            keys.mut_subcommand("generate-client-key", without(ALL))
                .mut_subcommand("generate-master-key", without(ALL))
        })
}

/// `tessera man`.
#[derive(Debug, clap::Args)]
pub(crate) struct ManArgs {
    /// The directory to write `tessera.1`, `tessera-serve.1`, `tessera-plan-set.1`… into
    /// (created when missing; pages there are replaced).
    dir: PathBuf,
}

/// Writes one manual page per command of `command` (built by [`tidy`]) into the
/// directory, and says how many. Written by the binary itself, as the completions are, so
/// that the pages a package ships are those of the binary beside them.
pub(crate) fn man(command: &Command, args: &ManArgs) -> Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    // Built, so that each command has its full name (`tessera-plan-set`).
    let mut command = command.clone();
    command.build();
    let mut written = Vec::new();
    pages(&command, &args.dir, &mut written)?;
    let out = format!(
        "wrote {} manual pages into {}\n",
        written.len(),
        args.dir.display()
    );
    std::io::Write::write_all(&mut std::io::stdout(), out.as_bytes())?;
    Ok(())
}

/// The page of `command` (`tessera-plan-set.1` for `tessera plan set`), then its
/// subcommands' pages; not `help`'s.
fn pages(command: &Command, dir: &Path, written: &mut Vec<PathBuf>) -> Result<()> {
    let name = command
        .get_display_name()
        .unwrap_or_else(|| command.get_name());
    let path = dir.join(format!("{name}.1"));
    let mut roff = Vec::new();
    clap_mangen::Man::new(command.clone()).render(&mut roff)?;
    std::fs::write(&path, roff).with_context(|| format!("cannot write {}", path.display()))?;
    written.push(path);
    for sub in command.get_subcommands() {
        if sub.get_name() != "help" && !sub.is_hide_set() {
            pages(sub, dir, written)?;
        }
    }
    Ok(())
}

/// The error and its causes on one line, each said once: a cause whose words the line
/// already holds (a wrapper that prints its source, as sqlx's and redis's errors do) is
/// left out.
pub(crate) fn message(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// Whether the error is a write to a pipe whose reader has gone (`tessera … | head`).
pub(crate) fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_the_line_already_says_is_left_out() {
        let inner = anyhow::anyhow!("Connection refused (os error 111)");
        let error = inner
            .context("cannot use Redis at redis://x: Connection refused (os error 111)")
            .context("rate limiter");
        assert_eq!(
            message(&error),
            "rate limiter: cannot use Redis at redis://x: Connection refused (os error 111)"
        );
        let plain = anyhow::anyhow!("no such file").context("cannot read x.toml");
        assert_eq!(message(&plain), "cannot read x.toml: no such file");
    }
}
