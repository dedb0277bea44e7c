//! `tessera keys generate-master-key`: a master key for a deployment that keeps it apart
//! from the database, as PostgreSQL deployments must (a key file is generated beside an
//! SQLite database only). 32 bytes from the system's random source, base64url, the form
//! TESSERA_MASTER_KEY and --master-key-file take.
//!
//! A local command: it opens no database and calls no server.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use zeroize::Zeroizing;

/// The master key's length in bytes.
const LEN: usize = 32;

#[derive(Debug, clap::Args)]
pub(crate) struct GenerateMasterKeyArgs {
    /// Write the key to this new file (mode 0600) for --master-key-file, instead of
    /// printing it. An existing file is never overwritten.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Prints a new key, or writes it to `--out`.
pub(crate) fn generate(args: &GenerateMasterKeyArgs) -> Result<()> {
    let mut raw = Zeroizing::new([0u8; LEN]);
    aws_lc_rs::rand::fill(raw.as_mut()).map_err(|_| anyhow!("no random source"))?;
    let line = Zeroizing::new(format!("{}\n", URL_SAFE_NO_PAD.encode(raw.as_ref())));
    match &args.out {
        Some(path) => {
            crate::client_key::write_new(path, line.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
            let said = format!(
                "wrote a new master key into {} (mode 0600): serve with --master-key-file {0}, \
                 and keep a copy apart from the database's backups\n",
                path.display()
            );
            std::io::stdout().write_all(said.as_bytes())?;
        }
        None => std::io::stdout().write_all(line.as_bytes())?,
    }
    Ok(())
}
