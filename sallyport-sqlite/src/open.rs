//! Opening a journal file: permissions, the schema and its migrations, the connection's
//! settings.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use sallyport_kernel::journal::JournalError;

/// The journal format this build writes (`PRAGMA user_version`).
const FORMAT_VERSION: i64 = 1;

/// The format of a file whose oldest records were pruned (it holds an anchor, see
/// `anchors.rs`), set by the prune. A build that knows no anchors would find the chain
/// "deleted" up to the anchor, and with every record pruned would start it again at record
/// 1 from the genesis; it refuses this version as newer than it reads, and leaves the file
/// untouched. This build reads both.
pub(crate) const PRUNED_FORMAT_VERSION: i64 = 2;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS attempts (
    attempt_id      TEXT PRIMARY KEY,
    action          TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    fingerprint     TEXT NOT NULL,
    definition_hash TEXT NOT NULL,
    effect          TEXT NOT NULL,
    arguments       TEXT NOT NULL,
    phase           TEXT NOT NULL,
    dispatches      INTEGER NOT NULL DEFAULT 0,
    status          TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);
-- No index on phase: every call would write one more page twice (the row enters it at the
-- intent and moves at the outcome), and only `unresolved()`, a recovery query, reads by phase.
DROP INDEX IF EXISTS attempts_phase;
CREATE TABLE IF NOT EXISTS audit (
    seq        INTEGER PRIMARY KEY,
    receipt_id TEXT NOT NULL,
    attempt_id TEXT NOT NULL,
    prev_hash  TEXT NOT NULL,
    hash       TEXT NOT NULL,
    event      TEXT NOT NULL
);
";

/// The approval store (see `crate::approval`): one row per parked call. The columns are what
/// the compare-and-sets test; `approval` holds the whole [`sallyport_kernel::approval::Approval`] as
/// JSON, rewritten with the columns on every change. Created at every open (after the format
/// check), so a journal written before approvals existed gains the table and keeps format 1:
/// a build without approvals opens such a file and never looks at the table.
const APPROVALS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS approvals (
    approval_id    TEXT PRIMARY KEY,
    attempt_id     TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    fingerprint    TEXT NOT NULL,
    state          TEXT NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    expires_at_ms  INTEGER NOT NULL,
    claim_owner    TEXT,
    claim_epoch    INTEGER NOT NULL DEFAULT 0,
    claim_until_ms INTEGER,
    execution      TEXT,
    approval       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_state ON approvals (state, created_at_ms);
CREATE INDEX IF NOT EXISTS approvals_session_fingerprint ON approvals (session_id, fingerprint);
";

/// One row per signed head: the chain's record count and last hash when a batch committed,
/// signed with the journal's Ed25519 key (see `journal::signing`). Created when a journal is
/// first opened with a key, so a journal without one keeps its layout; a build that does not
/// sign simply adds no heads, and `verify_signed` reports its records as unsigned.
const HEADS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS heads (
    count     INTEGER PRIMARY KEY,
    hash      TEXT NOT NULL,
    key_id    TEXT NOT NULL,
    signature TEXT NOT NULL,
    signed_at TEXT NOT NULL
);
";

/// What a journal is opened with.
pub(super) struct OpenOptions<'a> {
    pub(super) path: &'a Path,
    pub(super) busy_timeout: Duration,
    pub(super) max_size: Option<u64>,
    /// Whether heads are signed (the `heads` table is then created).
    pub(super) signing: bool,
}

/// Opens (or creates) the journal file and returns its connection, ready to write.
///
/// Safe when several processes open one new file at once: the schema is created in one
/// transaction that takes the write lock first, and a process that finds the lock held
/// waits (up to the busy timeout) instead of reading a half-made schema.
pub(super) fn open_connection(options: &OpenOptions<'_>) -> Result<Connection, JournalError> {
    let path_text = options.path.display().to_string();
    let open_failed = |source: rusqlite::Error| JournalError::Open {
        path: path_text.clone(),
        source: Box::new(source),
    };
    create_private(options.path);
    let conn = Connection::open_with_flags(
        options.path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(open_failed)?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(open_failed)?;
    let deadline = Instant::now() + options.busy_timeout;
    // Check and create in one write-locked transaction: another process creating the
    // schema at the same moment is either done (we see all of it) or waited for.
    retry_busy(deadline, || migrate(&conn)).map_err(|e| match e {
        OpenFailure::Foreign => JournalError::Corrupt {
            path: path_text.clone(),
            source: "the file holds tables but no sallyport journal format".into(),
        },
        OpenFailure::Newer(found) => JournalError::NewerFormat {
            found,
            supported: PRUNED_FORMAT_VERSION,
        },
        OpenFailure::Sqlite(source) if is_corrupt(&source) => JournalError::Corrupt {
            path: path_text.clone(),
            source: Box::new(source),
        },
        OpenFailure::Sqlite(source) => open_failed(source),
    })?;
    if options.signing {
        retry_busy(deadline, || {
            conn.execute_batch(HEADS_SCHEMA)
                .map_err(OpenFailure::Sqlite)
        })
        .map_err(|e| open_failed(e.into_sqlite()))?;
    }
    // Only now, with the file known to be a journal, may anything change its header.
    retry_busy(deadline, || {
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(OpenFailure::Sqlite)
    })
    .map_err(|e| open_failed(e.into_sqlite()))?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(open_failed)?;
    if let Some(bytes) = options.max_size {
        let page_size: u64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .map_err(open_failed)?;
        let pages = (bytes / page_size.max(1)).max(1);
        conn.pragma_update(None, "max_page_count", pages)
            .map_err(open_failed)?;
    }
    // Reading once in WAL mode makes SQLite create `-wal` and `-shm` (with the database
    // file's mode, now 0600); files left by an older build get the same mode here.
    conn.query_row("SELECT count(*) FROM audit", [], |r| r.get::<_, i64>(0))
        .map_err(open_failed)?;
    restrict_permissions(options.path);
    Ok(conn)
}

/// A second connection to the journal file, for the journal thread's checkpoints; `None`
/// when it cannot be opened, and commits then checkpoint as SQLite does by default.
pub(super) fn open_checkpointer(path: &Path) -> Option<Connection> {
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .inspect_err(|e| {
        tracing::warn!(error = %e, "no checkpoint connection; commits checkpoint the journal");
    })
    .ok()
}

/// Why [`migrate`] did not finish.
enum OpenFailure {
    /// An SQLite database that is not a journal.
    Foreign,
    /// A journal of a newer format.
    Newer(i64),
    /// What SQLite said.
    Sqlite(rusqlite::Error),
}

impl OpenFailure {
    fn into_sqlite(self) -> rusqlite::Error {
        match self {
            Self::Sqlite(e) => e,
            Self::Foreign | Self::Newer(_) => rusqlite::Error::InvalidQuery,
        }
    }
}

/// Checks the file and creates or upgrades the schema, in one transaction that takes the
/// write lock before reading anything. A foreign or newer file is rolled back untouched.
fn migrate(conn: &Connection) -> Result<(), OpenFailure> {
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(OpenFailure::Sqlite)?;
    let checked = (|| {
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(OpenFailure::Sqlite)?;
        let tables: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
                [],
                |r| r.get(0),
            )
            .map_err(OpenFailure::Sqlite)?;
        if tables > 0 && version == 0 {
            return Err(OpenFailure::Foreign);
        }
        if version > PRUNED_FORMAT_VERSION {
            return Err(OpenFailure::Newer(version));
        }
        if version < FORMAT_VERSION {
            conn.execute_batch(SCHEMA).map_err(OpenFailure::Sqlite)?;
            conn.pragma_update(None, "user_version", FORMAT_VERSION)
                .map_err(OpenFailure::Sqlite)?;
        }
        // Also for files of format 1 made before approvals existed.
        conn.execute_batch(APPROVALS_SCHEMA)
            .map_err(OpenFailure::Sqlite)?;
        // And for files made before the policy's shared call counts.
        conn.execute_batch(crate::calls::CALLS_SCHEMA)
            .map_err(OpenFailure::Sqlite)?;
        // And for files made before remembered approvals.
        conn.execute_batch(crate::remembered::REMEMBERED_SCHEMA)
            .map_err(OpenFailure::Sqlite)?;
        // And for files made before signed checkpoints.
        conn.execute_batch(crate::checkpoints::CHECKPOINTS_SCHEMA)
            .map_err(OpenFailure::Sqlite)?;
        // And for files made before retention.
        conn.execute_batch(crate::anchors::ANCHORS_SCHEMA)
            .map_err(OpenFailure::Sqlite)?;
        Ok(())
    })();
    match checked {
        Ok(()) => conn.execute_batch("COMMIT").map_err(|e| {
            let _ = conn.execute_batch("ROLLBACK");
            OpenFailure::Sqlite(e)
        }),
        Err(e) => {
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            Err(e)
        }
    }
}

/// Whether SQLite says the file itself is damaged or not a database (as opposed to busy,
/// unreadable or full).
fn is_corrupt(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt)
    )
}

/// Runs `step` again while SQLite answers busy or locked (the busy handler does not cover
/// every lock, e.g. a change of journal mode), until `deadline`.
fn retry_busy<T>(
    deadline: Instant,
    mut step: impl FnMut() -> Result<T, OpenFailure>,
) -> Result<T, OpenFailure> {
    loop {
        match step() {
            Err(OpenFailure::Sqlite(rusqlite::Error::SqliteFailure(f, msg)))
                if matches!(
                    f.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) =>
            {
                if Instant::now() >= deadline {
                    return Err(OpenFailure::Sqlite(rusqlite::Error::SqliteFailure(f, msg)));
                }
                thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

/// Creates a missing journal file with mode 0600 before SQLite opens it, so the `-wal` and
/// `-shm` files SQLite derives from it are 0600 too. An existing file is not opened here.
#[cfg(unix)]
fn create_private(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    // Best effort: if this fails, SQLite's own open reports the reason.
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
}

#[cfg(not(unix))]
fn create_private(_path: &Path) {}

/// The journal file and its `-wal` and `-shm` companions, mode 0600.
#[cfg(unix)]
fn restrict_permissions(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    // Best effort: the journal holds arguments and audit notes, not secrets.
    let mut companions = vec![path.to_path_buf()];
    for suffix in ["-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        companions.push(PathBuf::from(name));
    }
    for file in companions {
        let _ = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600));
    }
}

#[cfg(not(unix))]
fn restrict_permissions(_path: &Path) {}
