//! The embedded SQLite journal: one file, WAL mode, one connection, writes combined into
//! batches.
//!
//! Writes queue up and whoever holds the connection applies everything queued (up to
//! [`MAX_BATCH`] operations a transaction) and commits once, so 64 concurrent calls share one
//! commit instead of taking turns.
//!
//! * A write the caller waits for that needs no fsync (an observe call's intent, every audit
//!   record) is applied on the calling task when the connection is free: a `synchronous=NORMAL`
//!   WAL commit, tens of microseconds of blocking I/O, and no hand-off to another thread. When
//!   the connection is busy, its holder applies the write before letting go (flat combining).
//!   SQLite's automatic checkpoint (every 1,000 WAL pages, a few hundred calls) runs inside
//!   whichever commit crosses it, so about one such write in a few hundred takes milliseconds.
//! * A durable intent (a mutating call's, before anything is sent) goes to the journal
//!   thread, whose batch commits with `synchronous=FULL`: the WAL is fsynced before any caller
//!   is answered, and the fsync never blocks an async worker.
//! * Writes nobody waits for (dispatch notes, the record of a dropped call) and reads go to
//!   the journal thread too. Writes are applied in the order they were queued.
//!
//! `synchronous=NORMAL` survives a process crash but not a power loss; FULL survives both.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use tokio::sync::oneshot;

use super::attempts::{AttemptRow, Closed, check_attempts};
use super::signing::{HeadSigningKey, HeadVerifyingKey, SignedHead, check_signed_heads};
use super::{
    AttemptId, AuditEvent, AuditRecord, BreakKind, ChainBreak, ChainHead, GENESIS_HASH,
    IdempotencyKey, Intent, Journal, JournalError, Phase, UnresolvedAttempt, VerifyReport,
    chain_hash,
};

/// Most operations applied in one transaction.
pub const MAX_BATCH: usize = 512;

/// The journal format this build writes (`PRAGMA user_version`).
const FORMAT_VERSION: i64 = 1;

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

/// Configures a [`SqliteJournal`].
#[derive(Debug)]
#[must_use]
pub struct SqliteJournalBuilder {
    path: PathBuf,
    busy_timeout: Duration,
    max_size: Option<u64>,
    signing_key: Option<HeadSigningKey>,
}

impl SqliteJournalBuilder {
    /// Caps the journal's database file at about `bytes` (rounded down to whole pages; no
    /// cap by default). When the journal is full, writes fail as they would on a full disk:
    /// calls are refused with `journal_unavailable` and nothing is sent. The WAL file can
    /// briefly hold more until it is checkpointed. A cap below the file's current size keeps
    /// the current size.
    pub fn max_size(mut self, bytes: u64) -> Self {
        self.max_size = Some(bytes);
        self
    }

    /// How long a write waits for another connection's lock before failing (default 5 s).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Signs the chain head with `key` in every batch of writes that appends a record (the
    /// signature is stored in the journal's `heads` table, beside the chain). With a key,
    /// `sallyport audit verify --public-key` (or [`Journal::verify_signed`]) proves that no
    /// record up to the last signed head was rewritten by someone who could write the file
    /// but did not hold the key. Costs one Ed25519 signature and one row per batch, and
    /// nothing when no key is given.
    pub fn signing_key(mut self, key: HeadSigningKey) -> Self {
        self.signing_key = Some(key);
        self
    }

    /// Opens (or creates) the journal and starts its writer thread.
    ///
    /// Safe when several processes open one new file at once: the schema is created in one
    /// transaction that takes the write lock first, and a process that finds the lock held
    /// waits (up to the busy timeout) instead of reading a half-made schema.
    ///
    /// # Errors
    ///
    /// [`JournalError::Corrupt`] for a file that is not a journal (left untouched),
    /// [`JournalError::NewerFormat`] for a newer format, [`JournalError::Open`] otherwise
    /// (including a lock still held by another process after the busy timeout).
    pub fn open(self) -> Result<SqliteJournal, JournalError> {
        let path_text = self.path.display().to_string();
        let open_failed = |source| JournalError::Open {
            path: path_text.clone(),
            source,
        };
        create_private(&self.path);
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(open_failed)?;
        conn.busy_timeout(self.busy_timeout).map_err(open_failed)?;
        let deadline = Instant::now() + self.busy_timeout;
        // Check and create in one write-locked transaction: another process creating the
        // schema at the same moment is either done (we see all of it) or waited for.
        retry_busy(deadline, || migrate(&conn)).map_err(|e| match e {
            OpenFailure::Foreign => JournalError::Corrupt {
                path: path_text.clone(),
                source: rusqlite::Error::InvalidQuery,
            },
            OpenFailure::Newer(found) => JournalError::NewerFormat {
                found,
                supported: FORMAT_VERSION,
            },
            OpenFailure::Sqlite(source) if is_corrupt(&source) => JournalError::Corrupt {
                path: path_text.clone(),
                source,
            },
            OpenFailure::Sqlite(source) => open_failed(source),
        })?;
        if self.signing_key.is_some() {
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
        if let Some(bytes) = self.max_size {
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
        restrict_permissions(&self.path);

        let shared = Arc::new(Shared {
            queued: Mutex::new(Vec::new()),
            thread_ops: Mutex::new(Vec::new()),
            writer: Mutex::new(Writer::new(conn, self.signing_key)),
        });
        let (wake, woken) = mpsc::channel::<()>();
        let for_thread = Arc::clone(&shared);
        let handle = thread::Builder::new()
            .name("sallyport-journal".into())
            .spawn(move || for_thread.run(&woken))
            .map_err(|e| JournalError::Open {
                path: path_text,
                source: rusqlite::Error::ToSqlConversionFailure(Box::new(e)),
            })?;
        Ok(SqliteJournal {
            shared,
            wake,
            path: self.path,
            _thread: handle,
        })
    }
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
        if version > FORMAT_VERSION {
            return Err(OpenFailure::Newer(version));
        }
        if version < FORMAT_VERSION {
            conn.execute_batch(SCHEMA).map_err(OpenFailure::Sqlite)?;
            conn.pragma_update(None, "user_version", FORMAT_VERSION)
                .map_err(OpenFailure::Sqlite)?;
        }
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

/// The embedded SQLite journal (the default).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use sallyport_core::journal::{Journal, SqliteJournal};
/// let journal = SqliteJournal::open("sallyport-journal.db")?;
/// let report = journal.verify().await?;
/// assert!(report.is_intact());
/// # Ok(()) }
/// ```
pub struct SqliteJournal {
    shared: Arc<Shared>,
    /// Wakes the journal thread; dropping it makes the thread finish the queue and exit.
    wake: mpsc::Sender<()>,
    path: PathBuf,
    _thread: thread::JoinHandle<()>,
}

impl std::fmt::Debug for SqliteJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteJournal")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteJournal {
    /// Opens (or creates) the journal at `path` with default settings.
    ///
    /// # Errors
    ///
    /// See [`SqliteJournalBuilder::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, JournalError> {
        Self::builder(path).open()
    }

    /// A builder for the journal at `path`.
    pub fn builder(path: impl AsRef<Path>) -> SqliteJournalBuilder {
        SqliteJournalBuilder {
            path: path.as_ref().to_path_buf(),
            busy_timeout: Duration::from_secs(5),
            max_size: None,
            signing_key: None,
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues `op` for the journal thread and wakes it.
    fn to_thread(&self, op: Op) {
        if op.is_write() && !op.is_durable() {
            lock(&self.shared.queued).push(op);
        } else {
            lock(&self.shared.thread_ops).push(op);
        }
        let _ = self.wake.send(());
    }

    /// Sends `op` to the journal thread and waits for its answer.
    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, JournalError>>) -> Op,
    ) -> Result<T, JournalError> {
        let (reply, rx) = oneshot::channel();
        self.to_thread(make(reply));
        rx.await.map_err(|_| JournalError::Stopped)?
    }

    /// Queues a write that needs no fsync and applies the queue on this task when the
    /// connection is free; otherwise the task holding the connection applies it.
    async fn write_here<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, JournalError>>) -> Op,
    ) -> Result<T, JournalError> {
        let (reply, rx) = oneshot::channel();
        lock(&self.shared.queued).push(make(reply));
        if !self.shared.combine() {
            let _ = self.wake.send(());
        }
        rx.await.map_err(|_| JournalError::Stopped)?
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the journal handle and its thread share.
struct Shared {
    /// Writes that need no fsync, in the order they were made.
    queued: Mutex<Vec<Op>>,
    /// Durable intents and reads, for the journal thread only.
    thread_ops: Mutex<Vec<Op>>,
    /// The one connection that writes.
    writer: Mutex<Writer>,
}

/// Most batches one task applies for others before it hands the rest to the journal thread.
const MAX_COMBINE_ROUNDS: usize = 4;

impl Shared {
    /// Flat combining: whoever holds the connection applies everything queued, then, after
    /// letting go, looks at the queue again. A write queued before a failed `try_lock` is
    /// therefore always applied: either by the holder's look after letting go (the push came
    /// first) or by a later holder (which took the lock after the push). Returns `false`
    /// when the queue was still busy after [`MAX_COMBINE_ROUNDS`] batches: the caller then
    /// wakes the journal thread rather than keep one async task writing for everyone.
    fn combine(&self) -> bool {
        for _ in 0..MAX_COMBINE_ROUNDS {
            match self.writer.try_lock() {
                Ok(mut writer) => self.apply_queued(&mut writer),
                Err(TryLockError::Poisoned(poisoned)) => {
                    self.apply_queued(&mut poisoned.into_inner());
                }
                Err(TryLockError::WouldBlock) => return true,
            }
            if lock(&self.queued).is_empty() {
                return true;
            }
        }
        false
    }

    /// Applies one batch of queued writes, if any.
    fn apply_queued(&self, writer: &mut Writer) {
        let ops = std::mem::take(&mut *lock(&self.queued));
        if !ops.is_empty() {
            writer.write_all(ops);
        }
    }

    /// The journal thread: woken for durable intents, reads, writes nobody waits for and
    /// writes the connection was too busy to take. Finishes the queues when the handle is
    /// dropped.
    fn run(&self, woken: &mpsc::Receiver<()>) {
        let mut stopping = false;
        loop {
            // Look at the queues before sleeping: writes queued while the connection was
            // held are this thread's to apply when it held it (see `combine`).
            if !self.has_work() {
                if stopping {
                    return;
                }
                stopping = woken.recv().is_err();
                while woken.try_recv().is_ok() {}
            }
            let mut writer = lock(&self.writer);
            loop {
                // Queued writes first: they were made before anything now in `thread_ops`
                // that depends on them.
                let mut writes = std::mem::take(&mut *lock(&self.queued));
                let (durable, reads): (Vec<Op>, Vec<Op>) =
                    std::mem::take(&mut *lock(&self.thread_ops))
                        .into_iter()
                        .partition(Op::is_write);
                if writes.is_empty() && durable.is_empty() && reads.is_empty() {
                    break;
                }
                writes.extend(durable);
                writer.write_all(writes);
                for op in reads {
                    writer.read(op);
                }
            }
            drop(writer);
        }
    }

    fn has_work(&self) -> bool {
        !lock(&self.queued).is_empty() || !lock(&self.thread_ops).is_empty()
    }
}

#[async_trait]
impl Journal for SqliteJournal {
    async fn write_intent(&self, intent: &Intent) -> Result<(), JournalError> {
        let intent = intent.clone();
        if intent.durable {
            self.ask(|reply| Op::Intent(Box::new(intent), reply)).await
        } else {
            self.write_here(|reply| Op::Intent(Box::new(intent), reply))
                .await
        }
    }

    fn note_dispatch(&self, attempt: &AttemptId, n: u32) {
        self.to_thread(Op::Dispatch(attempt.clone(), n));
    }

    async fn append(&self, event: AuditEvent) -> Result<AuditRecord, JournalError> {
        self.write_here(|reply| Op::Append(Box::new(event), Some(reply)))
            .await
    }

    fn append_detached(&self, event: AuditEvent) {
        self.to_thread(Op::Append(Box::new(event), None));
    }

    async fn verify(&self) -> Result<VerifyReport, JournalError> {
        self.ask(Op::Verify).await
    }

    async fn signed_heads(&self) -> Result<Vec<SignedHead>, JournalError> {
        self.ask(Op::Heads).await
    }

    async fn verify_signed(&self, key: &HeadVerifyingKey) -> Result<VerifyReport, JournalError> {
        let key = Box::new(*key);
        self.ask(|reply| Op::VerifySigned(key, reply)).await
    }

    async fn records(&self) -> Result<Vec<AuditRecord>, JournalError> {
        self.ask(Op::Records).await
    }

    async fn unresolved(&self) -> Result<Vec<UnresolvedAttempt>, JournalError> {
        self.ask(Op::Unresolved).await
    }
}

type Reply<T> = oneshot::Sender<Result<T, JournalError>>;

enum Op {
    Intent(Box<Intent>, Reply<()>),
    Dispatch(AttemptId, u32),
    Append(Box<AuditEvent>, Option<Reply<AuditRecord>>),
    Verify(Reply<VerifyReport>),
    VerifySigned(Box<HeadVerifyingKey>, Reply<VerifyReport>),
    Heads(Reply<Vec<SignedHead>>),
    Records(Reply<Vec<AuditRecord>>),
    Unresolved(Reply<Vec<UnresolvedAttempt>>),
}

impl Op {
    fn is_write(&self) -> bool {
        matches!(
            self,
            Self::Intent(..) | Self::Dispatch(..) | Self::Append(..)
        )
    }

    fn is_durable(&self) -> bool {
        matches!(self, Self::Intent(intent, _) if intent.durable)
    }
}

/// What one write produced, answered after the commit.
enum Done {
    Intent(Result<(), JournalError>),
    Append(Box<Result<AuditRecord, JournalError>>),
    Nothing(rusqlite::Result<()>),
}

impl Done {
    fn failed(&self) -> bool {
        match self {
            Self::Intent(r) => r.is_err(),
            Self::Append(r) => r.is_err(),
            Self::Nothing(r) => r.is_err(),
        }
    }

    /// The SQLite error behind a failed write, for answering the rest of its batch.
    fn cause(&self) -> rusqlite::Error {
        match self {
            Self::Intent(Err(JournalError::Write(e))) | Self::Nothing(Err(e)) => clone_err(e),
            Self::Append(r) => match r.as_ref() {
                Err(JournalError::Write(e)) => clone_err(e),
                _ => aborted(),
            },
            _ => aborted(),
        }
    }
}

/// The error for writes whose transaction SQLite rolled back on its own.
fn aborted() -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
        Some("the batch's transaction was rolled back after a failed write".to_owned()),
    )
}

struct Writer {
    conn: Connection,
    full_sync: bool,
    /// Signs the head at the end of every batch that appends.
    signing_key: Option<HeadSigningKey>,
}

impl Writer {
    fn new(conn: Connection, signing_key: Option<HeadSigningKey>) -> Self {
        Self {
            conn,
            full_sync: false,
            signing_key,
        }
    }

    /// Applies writes in transactions of at most [`MAX_BATCH`] operations.
    fn write_all(&mut self, mut ops: Vec<Op>) {
        while ops.len() > MAX_BATCH {
            let rest = ops.split_off(MAX_BATCH);
            self.write_batch(ops);
            ops = rest;
        }
        if !ops.is_empty() {
            self.write_batch(ops);
        }
    }

    /// Runs one statement through the connection's statement cache (each is parsed once).
    fn exec(&self, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<usize> {
        self.conn.prepare_cached(sql)?.execute(params)
    }

    fn set_sync(&mut self, full: bool) -> rusqlite::Result<()> {
        if self.full_sync != full {
            self.conn
                .pragma_update(None, "synchronous", if full { "FULL" } else { "NORMAL" })?;
            self.full_sync = full;
        }
        Ok(())
    }

    /// Opens the batch's transaction and reads the chain head it extends.
    fn begin(&self, ops: &[Op]) -> rusqlite::Result<(u64, String)> {
        self.exec("BEGIN IMMEDIATE", [])?;
        // Only appends extend the chain; a batch of intents does not need its head.
        if ops.iter().any(|op| matches!(op, Op::Append(..))) {
            self.head().inspect_err(|_| {
                let _ = self.exec("ROLLBACK", []);
            })
        } else {
            Ok((0, GENESIS_HASH.to_owned()))
        }
    }

    /// One transaction for the whole batch.
    ///
    /// The batch first runs as plain statements: two fewer statements an operation than a
    /// savepoint around each. If an operation fails (rare: a duplicate key, a full disk), the
    /// transaction is rolled back and the batch runs again with a savepoint around each
    /// operation, so one bad operation does not take the others down. A batch of one never
    /// needs the second pass: its failure rolls back the transaction. If SQLite rolls the
    /// transaction back by itself (it may on a full disk or an I/O error), every operation of
    /// the batch is answered as failed, which is what the file then holds.
    fn write_batch(&mut self, ops: Vec<Op>) {
        let durable = ops.iter().any(Op::is_durable);
        let begun = self.set_sync(durable).and_then(|()| self.begin(&ops));
        let mut head = match begun {
            Ok(head) => head,
            Err(e) => {
                fail_all(ops, &e);
                return;
            }
        };
        let mut start = head.0;
        // First pass: plain statements, stopping at the first failure.
        let mut done: Vec<Done> = Vec::with_capacity(ops.len());
        for op in &ops {
            let outcome = self.apply(op, &mut head);
            let failed = outcome.failed();
            done.push(outcome);
            if failed {
                break;
            }
        }
        if done.last().is_some_and(Done::failed) {
            self.rollback();
            if ops.len() == 1 {
                reply_all(ops, done);
                return;
            }
            // The rollback undid the first pass, so the head read again is the batch's start.
            head = match self.begin(&ops) {
                Ok(head) => head,
                Err(e) => {
                    fail_all(ops, &e);
                    return;
                }
            };
            start = head.0;
            done.clear();
            for op in &ops {
                let outcome = self.apply_isolated(op, &mut head);
                if outcome.failed() && self.conn.is_autocommit() {
                    // SQLite rolled the whole transaction back itself (it may, on a full disk
                    // or an I/O error), so nothing of this batch is written, and a further
                    // statement would commit on its own. Every operation fails.
                    let cause = outcome.cause();
                    fail_all(ops, &cause);
                    return;
                }
                done.push(outcome);
            }
        }
        // The batch's records are signed in its own transaction: no commit leaves a record
        // the key should have signed unsigned.
        if head.0 > start
            && let Err(e) = self.sign_head(&head)
        {
            self.rollback();
            fail_all(ops, &e);
            return;
        }
        if let Err(e) = self.exec("COMMIT", []) {
            self.rollback();
            fail_all(ops, &e);
            return;
        }
        reply_all(ops, done);
    }

    /// Stores the head signed with the journal's key, if it has one.
    fn sign_head(&self, head: &(u64, String)) -> rusqlite::Result<()> {
        let Some(key) = &self.signing_key else {
            return Ok(());
        };
        let signed = key.sign(
            &ChainHead {
                count: head.0,
                hash: head.1.clone(),
            },
            now(),
        );
        self.exec(
            "INSERT OR REPLACE INTO heads (count, hash, key_id, signature, signed_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![signed.count, signed.hash, signed.key_id, signed.signature, signed.signed_at],
        )
        .map(drop)
    }

    /// Rolls back the open transaction, if SQLite has not already done so.
    fn rollback(&self) {
        if !self.conn.is_autocommit() {
            let _ = self.exec("ROLLBACK", []);
        }
    }

    /// Applies one write inside a savepoint, so its failure leaves the rest of the batch.
    fn apply_isolated(&self, op: &Op, head: &mut (u64, String)) -> Done {
        if let Err(e) = self.exec("SAVEPOINT op", []) {
            return failed(op, &e);
        }
        let before = head.clone();
        let outcome = self.apply(op, head);
        if outcome.failed() {
            let _ = self.exec("ROLLBACK TO op", []);
            *head = before;
        }
        let _ = self.exec("RELEASE op", []);
        outcome
    }

    /// Applies one write to the open transaction.
    fn apply(&self, op: &Op, head: &mut (u64, String)) -> Done {
        match op {
            Op::Intent(intent, _) => Done::Intent(self.insert_intent(intent).map_err(|e| {
                match e {
                    rusqlite::Error::SqliteFailure(f, _)
                        if f.code == rusqlite::ErrorCode::ConstraintViolation =>
                    {
                        JournalError::DuplicateKey
                    }
                    other => JournalError::Write(other),
                }
            })),
            Op::Dispatch(attempt, n) => Done::Nothing(
                self.exec(
                    "UPDATE attempts SET phase = 'dispatched', dispatches = max(dispatches, ?2), updated_at = ?3 WHERE attempt_id = ?1",
                    params![attempt.as_str(), n, now()],
                )
                .map(drop),
            ),
            Op::Append(event, _) => Done::Append(Box::new(
                self.insert_audit(event, head).map_err(JournalError::Write),
            )),
            Op::Verify(_)
            | Op::VerifySigned(..)
            | Op::Heads(_)
            | Op::Records(_)
            | Op::Unresolved(_) => Done::Nothing(Ok(())),
        }
    }

    fn insert_intent(&self, intent: &Intent) -> rusqlite::Result<()> {
        let at = now();
        self.exec(
            "INSERT INTO attempts (attempt_id, action, session_id, idempotency_key, fingerprint, definition_hash, effect, arguments, phase, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'intent_written', ?9, ?9)",
            params![
                intent.attempt_id.as_str(),
                intent.action,
                intent.session_id,
                intent.idempotency_key.as_str(),
                intent.fingerprint,
                intent.definition_hash,
                intent.effect.as_str(),
                intent.arguments.to_string(),
                at,
            ],
        )?;
        Ok(())
    }

    fn insert_audit(
        &self,
        event: &AuditEvent,
        head: &mut (u64, String),
    ) -> rusqlite::Result<AuditRecord> {
        let seq = head.0 + 1;
        let json = serde_json::to_string(event)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        let hash = chain_hash(&head.1, seq, &json);
        self.exec(
            "INSERT INTO audit (seq, receipt_id, attempt_id, prev_hash, hash, event) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![seq, event.receipt_id.as_str(), event.attempt_id.as_str(), head.1, hash, json],
        )?;
        self.exec(
            "UPDATE attempts SET phase = ?2, status = ?3, dispatches = max(dispatches, ?4), updated_at = ?5 WHERE attempt_id = ?1",
            params![
                event.attempt_id.as_str(),
                event.phase.as_str(),
                event.status.as_str(),
                event.dispatches,
                now()
            ],
        )?;
        let record = AuditRecord {
            seq,
            prev_hash: std::mem::replace(&mut head.1, hash.clone()),
            hash,
            event: event.clone(),
        };
        head.0 = seq;
        Ok(record)
    }

    fn head(&self) -> rusqlite::Result<(u64, String)> {
        Ok(self
            .conn
            .prepare_cached("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")?
            .query_row([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .optional()?
            .map_or_else(
                || (0, GENESIS_HASH.to_owned()),
                |(seq, hash)| (u64::try_from(seq).unwrap_or(0), hash),
            ))
    }

    fn read(&self, op: Op) {
        match op {
            Op::Verify(reply) => {
                let _ = reply.send(self.snapshot(Self::verify).map_err(JournalError::Read));
            }
            Op::VerifySigned(key, reply) => {
                let _ = reply.send(
                    self.snapshot(|w| w.verify_signed(&key))
                        .map_err(JournalError::Read),
                );
            }
            Op::Heads(reply) => {
                let _ = reply.send(self.heads().map_err(JournalError::Read));
            }
            Op::Records(reply) => {
                let _ = reply.send(self.records().map_err(JournalError::Read));
            }
            Op::Unresolved(reply) => {
                let _ = reply.send(self.snapshot(Self::unresolved).map_err(JournalError::Read));
            }
            Op::Intent(..) | Op::Dispatch(..) | Op::Append(..) => {}
        }
    }

    fn rows(&self) -> rusqlite::Result<Vec<(i64, String, String, String)>> {
        let mut stmt = self
            .conn
            .prepare("SELECT seq, prev_hash, hash, event FROM audit ORDER BY seq")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Runs `read` in one read transaction, so a writer in another process cannot change the
    /// file between its queries.
    fn snapshot<T>(&self, read: impl FnOnce(&Self) -> rusqlite::Result<T>) -> rusqlite::Result<T> {
        self.exec("BEGIN", [])?;
        let out = read(self);
        self.rollback();
        out
    }

    fn verify(&self) -> rusqlite::Result<VerifyReport> {
        self.check_chain().map(|(report, _)| report)
    }

    fn verify_signed(&self, key: &HeadVerifyingKey) -> rusqlite::Result<VerifyReport> {
        let heads = self.heads()?;
        let (mut report, chain) = self.check_chain()?;
        check_signed_heads(&mut report, &chain, &heads, key);
        Ok(report)
    }

    fn heads(&self) -> rusqlite::Result<Vec<SignedHead>> {
        let exists: i64 = self.conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'heads'",
            [],
            |r| r.get(0),
        )?;
        if exists == 0 {
            // Never opened with a key: nothing is signed.
            return Ok(Vec::new());
        }
        let mut stmt = self.conn.prepare(
            "SELECT count, hash, key_id, signature, signed_at FROM heads ORDER BY count",
        )?;
        let rows = stmt
            .query_map([], |r| {
                Ok(SignedHead::from_stored(
                    u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn attempt_rows(&self) -> rusqlite::Result<Vec<AttemptRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT attempt_id, phase, status FROM attempts ORDER BY created_at, attempt_id",
        )?;
        let rows = stmt
            .query_map([], |r| {
                Ok(AttemptRow {
                    attempt_id: r.get(0)?,
                    phase: r.get(1)?,
                    status: r.get(2)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// The chain checked link by link, then the attempt rows against it; also the stored
    /// hashes of the records checked, for the signed heads.
    fn check_chain(&self) -> rusqlite::Result<(VerifyReport, Vec<String>)> {
        let rows = self.rows()?;
        let mut report = VerifyReport {
            records: rows.len() as u64,
            head: ChainHead {
                count: rows.len() as u64,
                hash: rows
                    .last()
                    .map_or_else(|| GENESIS_HASH.to_owned(), |r| r.2.clone()),
            },
            first_break: None,
            last_signed: None,
        };
        let stored_hashes: Vec<&str> = rows.iter().map(|r| r.2.as_str()).collect();
        let mut closed: HashMap<String, Closed> = HashMap::new();
        let mut prev_hash = GENESIS_HASH.to_owned();
        for (expected_seq, (seq, stored_prev, stored_hash, event)) in (1_i64..).zip(&rows) {
            let at = u64::try_from(*seq).unwrap_or(0);
            let brk = |kind, detail: String| ChainBreak {
                seq: at,
                kind,
                detail,
                attempt: None,
            };
            if *seq != expected_seq {
                let kind = if *seq > expected_seq {
                    BreakKind::Deleted
                } else {
                    BreakKind::Inserted
                };
                report.first_break = Some(brk(
                    kind,
                    format!("expected record {expected_seq}, found record {seq}"),
                ));
                break;
            }
            if *stored_prev != prev_hash {
                let kind = if stored_hashes.contains(&stored_prev.as_str()) {
                    BreakKind::Reordered
                } else {
                    BreakKind::Inserted
                };
                report.first_break = Some(brk(
                    kind,
                    format!("record {seq} does not link to record {}", seq - 1),
                ));
                break;
            }
            if chain_hash(&prev_hash, at, event) != *stored_hash {
                report.first_break = Some(brk(
                    BreakKind::Edited,
                    format!("record {seq} does not match its hash: its content was changed"),
                ));
                break;
            }
            let Ok(parsed) = serde_json::from_str::<AuditEvent>(event) else {
                report.first_break = Some(brk(
                    BreakKind::Malformed,
                    format!("record {seq} is not a readable audit event"),
                ));
                break;
            };
            closed.insert(
                parsed.attempt_id.as_str().to_owned(),
                Closed {
                    seq: at,
                    phase: parsed.phase,
                    status: parsed.status,
                },
            );
            prev_hash.clone_from(stored_hash);
        }
        if report.first_break.is_none() {
            report.first_break = check_attempts(&self.attempt_rows()?, &closed);
        }
        let chain = rows.into_iter().map(|r| r.2).collect();
        Ok((report, chain))
    }

    fn records(&self) -> rusqlite::Result<Vec<AuditRecord>> {
        self.rows()?
            .into_iter()
            .map(|(seq, prev_hash, hash, event)| {
                let event: AuditEvent = serde_json::from_str(&event).map_err(|e| {
                    rusqlite::Error::FromSqlConversionFailure(
                        5,
                        rusqlite::types::Type::Text,
                        Box::new(e),
                    )
                })?;
                Ok(AuditRecord {
                    seq: u64::try_from(seq).unwrap_or(0),
                    prev_hash,
                    hash,
                    event,
                })
            })
            .collect()
    }

    /// Attempts no audit record closes, whatever their own `phase` column says.
    fn unresolved(&self) -> rusqlite::Result<Vec<UnresolvedAttempt>> {
        let closed: HashSet<String> = self
            .conn
            .prepare("SELECT attempt_id FROM audit")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let mut stmt = self.conn.prepare(
            "SELECT attempt_id, action, session_id, idempotency_key, phase, dispatches, arguments, created_at
             FROM attempts ORDER BY created_at, attempt_id",
        )?;
        let mut open = Vec::new();
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let attempt_id: String = r.get(0)?;
            if closed.contains(&attempt_id) {
                continue;
            }
            let phase: String = r.get(4)?;
            let arguments: String = r.get(6)?;
            open.push(UnresolvedAttempt {
                attempt_id: AttemptId::from_stored(attempt_id),
                action: r.get(1)?,
                session_id: r.get(2)?,
                idempotency_key: IdempotencyKey::from_stored(r.get::<_, String>(3)?),
                // Fail closed: only a row that says so is taken as never sent.
                phase: if phase == Phase::IntentWritten.as_str() {
                    Phase::IntentWritten
                } else {
                    Phase::Dispatched
                },
                dispatches: r.get(5)?,
                arguments: serde_json::from_str(&arguments).unwrap_or_default(),
                created_at: r.get(7)?,
            });
        }
        Ok(open)
    }
}

/// Answers every operation of a batch that was not written.
fn fail_all(ops: Vec<Op>, e: &rusqlite::Error) {
    let done = ops.iter().map(|op| failed(op, e)).collect();
    reply_all(ops, done);
}

/// What `op` reports when its write failed with `e`.
fn failed(op: &Op, e: &rusqlite::Error) -> Done {
    match op {
        Op::Intent(..) => Done::Intent(Err(JournalError::Write(clone_err(e)))),
        Op::Append(..) => Done::Append(Box::new(Err(JournalError::Write(clone_err(e))))),
        _ => Done::Nothing(Err(clone_err(e))),
    }
}

/// Sends each operation its outcome, once the batch is committed (or has failed).
fn reply_all(ops: Vec<Op>, done: Vec<Done>) {
    for (op, done) in ops.into_iter().zip(done) {
        match (op, done) {
            (Op::Intent(_, reply), Done::Intent(r)) => {
                let _ = reply.send(r);
            }
            (Op::Append(_, Some(reply)), Done::Append(r)) => {
                let _ = reply.send(*r);
            }
            (Op::Append(event, None), Done::Append(r)) => {
                if let Err(e) = *r {
                    tracing::error!(attempt = %event.attempt_id, error = %e, "detached audit append failed");
                }
            }
            (Op::Dispatch(attempt, _), Done::Nothing(Err(e))) => {
                tracing::warn!(attempt = %attempt, error = %e, "dispatch note not written");
            }
            _ => {}
        }
    }
}

/// `rusqlite::Error` is not `Clone`; keep the SQLite code and message.
fn clone_err(e: &rusqlite::Error) -> rusqlite::Error {
    match e {
        rusqlite::Error::SqliteFailure(f, msg) => rusqlite::Error::SqliteFailure(*f, msg.clone()),
        other => rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(other.to_string()),
        ),
    }
}

pub(crate) fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;
    use crate::journal::{Phase, ReceiptId};

    fn event(attempt: &AttemptId) -> AuditEvent {
        AuditEvent {
            receipt_id: ReceiptId::generate(),
            attempt_id: attempt.clone(),
            at: now(),
            session_id: "s".to_owned(),
            action: "bench".to_owned(),
            definition_hash: None,
            phase: Phase::Finished,
            status: Status::Completed,
            origin: None,
            code: None,
            reason: None,
            objects: Vec::new(),
            note: None,
            request: None,
            consent: None,
            divergences: Vec::new(),
            drift_decision: None,
            dispatches: 1,
            upstream_status: None,
        }
    }

    /// Runs `ops` as one batch on the journal's connection, as a combining task would.
    fn batch(journal: &SqliteJournal, ops: Vec<Op>) {
        lock(&journal.shared.writer).write_all(ops);
    }

    #[tokio::test]
    async fn a_failing_write_is_redone_alone_and_leaves_its_batch_and_the_chain_intact() {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = SqliteJournal::open(dir.path().join("j.db")).expect("journal");
        let first = Intent::for_bench(false);
        let mut clash = Intent::for_bench(false);
        clash.idempotency_key = first.idempotency_key.clone();
        let doomed = Intent::for_bench(false);
        let last = Intent::for_bench(false);
        // The doomed append's second statement fails after its first has inserted the
        // audit row: only a savepoint takes that row back out.
        lock(&journal.shared.writer)
            .conn
            .execute_batch(&format!(
                "CREATE TEMP TRIGGER refuse BEFORE UPDATE ON attempts WHEN OLD.attempt_id = '{}' \
                 BEGIN SELECT RAISE(ABORT, 'refused'); END",
                doomed.attempt_id
            ))
            .expect("trigger");

        let (r1, a1) = oneshot::channel();
        let (r2, a2) = oneshot::channel();
        let (r3, a3) = oneshot::channel();
        let (r4, a4) = oneshot::channel();
        let (r5, a5) = oneshot::channel();
        let (r6, a6) = oneshot::channel();
        let (r7, a7) = oneshot::channel();
        batch(
            &journal,
            vec![
                Op::Intent(Box::new(first.clone()), r1),
                Op::Append(Box::new(event(&first.attempt_id)), Some(r2)),
                Op::Intent(Box::new(clash), r3),
                Op::Intent(Box::new(doomed.clone()), r4),
                Op::Append(Box::new(event(&doomed.attempt_id)), Some(r5)),
                Op::Intent(Box::new(last.clone()), r6),
                Op::Append(Box::new(event(&last.attempt_id)), Some(r7)),
            ],
        );
        a1.await.expect("answered").expect("first intent written");
        let one = a2.await.expect("answered").expect("first append written");
        assert!(matches!(
            a3.await.expect("answered"),
            Err(JournalError::DuplicateKey)
        ));
        a4.await.expect("answered").expect("doomed intent written");
        assert!(matches!(
            a5.await.expect("answered"),
            Err(JournalError::Write(_))
        ));
        a6.await.expect("answered").expect("last intent written");
        let two = a7.await.expect("answered").expect("last append written");
        // The redo rebuilt the chain from the batch's start: no gap, no fork, no orphan row.
        assert_eq!((one.seq, two.seq), (1, 2));
        assert_eq!(two.prev_hash, one.hash);
        let report = journal.verify().await.expect("verify");
        assert!(report.is_intact(), "{report:?}");
        assert_eq!(report.records, 2);
        let stored: i64 = Connection::open(journal.path())
            .expect("second connection")
            .query_row("SELECT count(*) FROM attempts", [], |r| r.get(0))
            .expect("count");
        assert_eq!(stored, 3, "every intent but the clashing one committed");
    }

    #[tokio::test]
    async fn when_the_journal_fills_mid_batch_every_answer_matches_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = SqliteJournal::builder(dir.path().join("j.db"))
            .max_size(64 * 1024)
            .open()
            .expect("journal");
        // Every intent and append of every batch, with the answers it was given.
        let mut calls = Vec::new();
        for round in 0..40 {
            let mut ops = Vec::new();
            for i in 0..8 {
                let mut intent = Intent::for_bench(round % 2 == 0);
                // Rows of growing size, so some need a new page and some still fit.
                intent.arguments = serde_json::json!({"pad": "x".repeat(200 * (i + 1))});
                let attempt = intent.attempt_id.clone();
                let (intent_reply, intent_answer) = oneshot::channel();
                let (append_reply, append_answer) = oneshot::channel();
                ops.push(Op::Intent(Box::new(intent), intent_reply));
                ops.push(Op::Append(Box::new(event(&attempt)), Some(append_reply)));
                calls.push((attempt, intent_answer, append_answer));
            }
            batch(&journal, ops);
        }
        let reader = Connection::open(journal.path()).expect("second connection");
        let rows = |table: &str, attempt: &AttemptId| -> i64 {
            reader
                .query_row(
                    &format!("SELECT count(*) FROM {table} WHERE attempt_id = ?1"),
                    [attempt.as_str()],
                    |r| r.get(0),
                )
                .expect("count")
        };
        let (mut refused, mut appended) = (0, 0);
        for (attempt, intent_answer, append_answer) in calls {
            let written = intent_answer.await.expect("answered").is_ok();
            assert_eq!(rows("attempts", &attempt) == 1, written, "{attempt}");
            let recorded = append_answer.await.expect("answered").is_ok();
            assert_eq!(rows("audit", &attempt) == 1, recorded, "{attempt}");
            refused += usize::from(!written);
            appended += usize::from(recorded);
        }
        assert!(refused > 0, "the cap was reached");
        let report = journal.verify().await.expect("a full journal still reads");
        assert!(report.is_intact(), "{report:?}");
        assert_eq!(report.records, appended as u64);
    }

    #[tokio::test]
    async fn a_failing_write_alone_in_its_batch_leaves_nothing_behind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = SqliteJournal::open(dir.path().join("j.db")).expect("journal");
        let first = Intent::for_bench(false);
        journal.write_intent(&first).await.expect("written");
        let mut clash = Intent::for_bench(false);
        clash.idempotency_key = first.idempotency_key.clone();
        assert!(matches!(
            journal.write_intent(&clash).await,
            Err(JournalError::DuplicateKey)
        ));
        // The journal goes on: the failed batch was rolled back, not left open.
        let after = Intent::for_bench(false);
        journal.write_intent(&after).await.expect("written after");
        let record = journal
            .append(event(&after.attempt_id))
            .await
            .expect("appended");
        assert_eq!(record.seq, 1);
        assert!(journal.verify().await.expect("verify").is_intact());
    }
}
