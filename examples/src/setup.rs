//! The embedded defaults the examples share: a demo upstream, a file vault holding its token,
//! and a SQLite journal, in a fresh directory ([`Demo`]); and, for a first program, the
//! upstream with an in-memory vault and a scratch directory removed on drop ([`Sandbox`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sallyport_core::journal::SqliteJournal;
use sallyport_core::vault::{FileVault, KdfParams, MemoryVault, Secret, VaultAdmin};

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
        let dir = fresh_dir(name)?;
        // Light Argon2id settings so the demo starts instantly; real vaults keep the defaults.
        let vault = FileVault::create(
            dir.join("vault.sallyport"),
            "demo passphrase",
            KdfParams::new(8 * 1024, 1, 1),
        )?;
        vault.set(upstream.credential(CREDENTIAL), Secret::new(DEMO_TOKEN))?;
        let journal = Arc::new(SqliteJournal::open(dir.join("journal.db"))?);
        Ok(Self {
            upstream,
            dir,
            vault,
            journal,
        })
    }
}

/// A throwaway setup for a first program: the demo upstream, an in-memory vault holding its
/// token, and a scratch directory for the program's journal. Dropping it stops the server and
/// removes the directory, journal included, so a run leaves nothing behind. Bind it before
/// the executor that uses it: locals drop in reverse order, so the journal closes first.
#[derive(Debug)]
pub struct Sandbox {
    /// The running server.
    pub upstream: DemoUpstream,
    /// A [`MemoryVault`] holding [`DEMO_TOKEN`] as the bearer credential named at
    /// [`Sandbox::start`], bound to the server's base URL.
    pub vault: MemoryVault,
    /// `journal.db` in the scratch directory: where the program opens its SQLite journal.
    pub journal_path: PathBuf,
    /// Held only to be dropped: removes the directory.
    _scratch: ScratchDir,
}

impl Sandbox {
    /// Starts the server with [`DEMO_TOKEN`], stores that token in a fresh [`MemoryVault`] as
    /// the bearer credential `credential` (the name the program's actions give in
    /// `credential = "…"`), and creates a fresh scratch directory in the system temp directory.
    ///
    /// # Errors
    ///
    /// When no loopback port can be bound or the directory cannot be created.
    pub async fn start(credential: &str) -> std::io::Result<Self> {
        let upstream = DemoUpstream::start(DEMO_TOKEN).await?;
        let vault = MemoryVault::new();
        vault.set(upstream.credential(credential), Secret::new(DEMO_TOKEN));
        let scratch = ScratchDir(fresh_dir("sandbox")?);
        Ok(Self {
            upstream,
            vault,
            journal_path: scratch.0.join("journal.db"),
            _scratch: scratch,
        })
    }
}

/// A directory of its own under the system temp directory, removed with its contents on drop.
#[derive(Debug)]
struct ScratchDir(PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        // A drop cannot report; a temp directory left behind harms nothing.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A directory of its own, `sallyport-{name}-…`, created under the system temp directory.
/// `create_dir`, not `create_dir_all`: a directory that already exists is someone else's,
/// and its vault or journal is not ours to reuse.
fn fresh_dir(name: &str) -> std::io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "sallyport-{name}-{}-{stamp}-{n}",
        std::process::id()
    ));
    std::fs::create_dir(&dir)?;
    Ok(dir)
}
