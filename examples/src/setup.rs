//! The embedded defaults the examples share: a demo upstream, a file vault holding its token,
//! and a SQLite journal, in a fresh directory.

use std::path::PathBuf;
use std::sync::Arc;

use sallyport_core::journal::SqliteJournal;
use sallyport_core::vault::{
    Binding, CredentialKind, CredentialMeta, FileVault, KdfParams, Secret, VaultAdmin,
};

use crate::catalog::CREDENTIAL;
use crate::upstream::DemoUpstream;

pub use crate::upstream::DEMO_TOKEN;

/// A demo environment.
#[derive(Debug)]
pub struct Demo {
    /// The running upstream.
    pub upstream: DemoUpstream,
    /// The fresh directory holding the vault and the journal.
    pub dir: PathBuf,
    /// The unlocked file vault.
    pub vault: FileVault,
    /// The journal.
    pub journal: Arc<SqliteJournal>,
}

impl Demo {
    /// Starts the upstream and creates the vault and journal under a fresh directory named
    /// after `name` in the system temp directory.
    ///
    /// # Errors
    ///
    /// When the port, the directory, the vault or the journal cannot be created.
    pub async fn start(name: &str) -> Result<Self, Box<dyn std::error::Error>> {
        let upstream = DemoUpstream::start(DEMO_TOKEN).await?;
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos();
        let dir = std::env::temp_dir().join(format!("sallyport-{name}-{stamp}"));
        std::fs::create_dir_all(&dir)?;
        // Light Argon2id settings so the demo starts instantly; real vaults keep the defaults.
        let vault = FileVault::create(
            dir.join("vault.sallyport"),
            "demo passphrase",
            KdfParams::new(8 * 1024, 1, 1),
        )?;
        vault.set(
            CredentialMeta::new(
                CREDENTIAL,
                CredentialKind::Bearer,
                Binding::url(upstream.base_url()),
            ),
            Secret::new(DEMO_TOKEN),
        )?;
        let journal = Arc::new(SqliteJournal::open(dir.join("journal.db"))?);
        Ok(Self {
            upstream,
            dir,
            vault,
            journal,
        })
    }
}
