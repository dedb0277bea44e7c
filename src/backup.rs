//! `tessera backup`: a consistent copy of the SQLite database, taken while `serve` may run.
//! The master key is not in it: the operator keeps that apart, once.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use tessera_server::secrets::{key_file_beside, MasterKeyChoice};

use crate::DataArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct BackupArgs {
    /// The new file to copy the database into (mode 0600); an existing one is never
    /// overwritten.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

pub(crate) async fn run(data: &DataArgs, args: BackupArgs) -> Result<()> {
    let Some(database) = data.sqlite_path() else {
        bail!("tessera backup copies an SQLite database; back up PostgreSQL with pg_dump");
    };
    data.reads_only()?;
    let store = tessera_store::sqlite::SqliteStore::open_existing(&data.database)
        .await
        .map_err(|e| data.opening_error(e))?;
    store
        .backup_into(&args.out)
        .await
        .with_context(|| format!("cannot back up {}", database.display()))?;
    let key = match data.master_key_choice() {
        MasterKeyChoice::Value(_) => "TESSERA_MASTER_KEY".to_owned(),
        MasterKeyChoice::File(path) => path.display().to_string(),
        MasterKeyChoice::BesideDatabase(_) => key_file_beside(&database).display().to_string(),
    };
    let said = format!(
        "backed up {} into {}\nthe master key ({key}) is not in the backup, and the backup is \
         useless without it: keep a copy of the key apart\n",
        database.display(),
        args.out.display()
    );
    std::io::Write::write_all(&mut std::io::stdout(), said.as_bytes())?;
    Ok(())
}
