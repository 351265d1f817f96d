//! The policy's call counts in the journal file, shared by every process that opens it
//! ([`sallyport_kernel::policy::calls`]).
//!
//! One row per call the policy let through (`policy_calls`, created with the journal's
//! schema), on a connection of its own. Deciding is one `BEGIN IMMEDIATE` transaction: it
//! takes the file's write lock, which every process's writers respect, so reading the counts,
//! the policy's decision and the new row are one step for all of them; rows older than a day
//! are deleted in the same transaction, so the table holds one day of calls. The transaction
//! runs on the calling task (like the journal's own non-durable writes): the lock is held for
//! two indexed reads, the decision, one insert and one indexed delete, then a
//! `synchronous=NORMAL` commit (no fsync).

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags, params};
use tokio::sync::Mutex;

use sallyport_kernel::action::{EffectClass, ScopedValue};
use sallyport_kernel::journal::{AttemptId, JournalError};
use sallyport_kernel::outcome::Status;
use sallyport_kernel::policy::calls::{CallQuery, CallStore, Decide};
use sallyport_kernel::policy::{
    CallCounts, EffectCounts, PolicyDecision, PolicyVerdict, RecentCall, SessionCalls,
};

/// The table and its indexes; created at every open, like the approvals table, so a journal
/// made before it gains it and keeps its format (existing rows are untouched).
pub(crate) const CALLS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS policy_calls (
    attempt_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    action     TEXT NOT NULL,
    effect     TEXT NOT NULL,
    objects    TEXT NOT NULL,
    status     TEXT,
    at_ms      INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS policy_calls_session ON policy_calls (session_id, at_ms);
CREATE INDEX IF NOT EXISTS policy_calls_at ON policy_calls (at_ms);
";

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 86_400_000;

/// The counts of the session's calls within the day, by (same action, effect).
const COUNTS: &str = "
SELECT action = ?2, effect, sum(at_ms > ?3), sum(at_ms > ?4), count(*)
FROM policy_calls
WHERE session_id = ?1 AND at_ms > ?5 AND attempt_id <> ?6
GROUP BY 1, 2";

/// The session's newest calls within the day.
const RECENT: &str = "
SELECT attempt_id, action, effect, objects, status, at_ms
FROM policy_calls
WHERE session_id = ?1 AND at_ms > ?2 AND attempt_id <> ?3
ORDER BY at_ms DESC, attempt_id DESC
LIMIT ?4";

const INSERT: &str = "
INSERT INTO policy_calls (attempt_id, session_id, action, effect, objects, at_ms)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// Rows a day old or older.
const FORGET: &str = "DELETE FROM policy_calls WHERE at_ms <= ?1";

const SETTLE: &str = "UPDATE policy_calls SET status = ?2 WHERE attempt_id = ?1";

/// The call store of one journal file: its own connection, opened on first use.
pub(crate) struct SqliteCallStore {
    path: PathBuf,
    busy_timeout: Duration,
    conn: Mutex<Option<Connection>>,
}

impl std::fmt::Debug for SqliteCallStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteCallStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteCallStore {
    /// The store in the journal file at `path` (whose schema is made), waiting up to
    /// `busy_timeout` for another process's lock.
    pub(crate) fn new(path: PathBuf, busy_timeout: Duration) -> Self {
        Self {
            path,
            busy_timeout,
            conn: Mutex::new(None),
        }
    }

    fn open(&self) -> Result<Connection, rusqlite::Error> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(self.busy_timeout)?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        Ok(conn)
    }
}

/// SQLite's error as the journal reports a failed read.
fn read_failed(e: rusqlite::Error) -> JournalError {
    JournalError::Read(Box::new(e))
}

/// Milliseconds as SQLite stores them (a time past 2262 is held at the largest).
fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Reads the counts and recent calls, decides, and counts the call: the body of the
/// transaction.
fn decide_in(
    conn: &Connection,
    query: &CallQuery<'_>,
    decide: &mut Decide<'_>,
) -> Result<PolicyDecision, rusqlite::Error> {
    let now = ms(query.now_ms);
    let except = query.except.map_or("", AttemptId::as_str);
    let mut counts = CallCounts::default();
    let mut by_effect = EffectCounts::default();
    let mut total: u64 = 0;
    let mut statement = conn.prepare_cached(COUNTS)?;
    let mut rows = statement.query(params![
        query.session,
        query.action,
        now - MINUTE_MS,
        now - HOUR_MS,
        now - DAY_MS,
        except,
    ])?;
    while let Some(row) = rows.next()? {
        let same_action: bool = row.get(0)?;
        let effect: String = row.get(1)?;
        let tally = CallCounts::new(
            row.get::<_, i64>(2)?.unsigned_abs(),
            row.get::<_, i64>(3)?.unsigned_abs(),
            row.get::<_, i64>(4)?.unsigned_abs(),
        );
        total += tally.day;
        if same_action {
            add(&mut counts, tally);
        }
        // A row no build of this crate writes is counted as the most dangerous class.
        let effect = EffectClass::parse(&effect).unwrap_or(EffectClass::IrreversibleOrBroad);
        add(by_effect.of_mut(effect), tally);
    }
    drop(rows);
    let mut recent = Vec::new();
    if query.recent > 0 {
        let mut statement = conn.prepare_cached(RECENT)?;
        let limit = i64::try_from(query.recent).unwrap_or(i64::MAX);
        let mut rows = statement.query(params![query.session, now - DAY_MS, except, limit])?;
        while let Some(row) = rows.next()? {
            recent.push(recent_call(row)?);
        }
    }
    let complete = total <= u64::try_from(recent.len()).unwrap_or(u64::MAX);
    let session_calls = SessionCalls::new(by_effect, recent, complete);
    let decision = decide(counts, &session_calls);
    if let Some(attempt) = query.record
        && decision.verdict != PolicyVerdict::Deny
    {
        let objects = serde_json::to_string(query.objects)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        conn.prepare_cached(INSERT)?.execute(params![
            attempt.as_str(),
            query.session,
            query.action,
            query.effect.as_str(),
            objects,
            now,
        ])?;
        conn.prepare_cached(FORGET)?
            .execute(params![now - DAY_MS])?;
    }
    Ok(decision)
}

fn add(to: &mut CallCounts, more: CallCounts) {
    to.minute += more.minute;
    to.hour += more.hour;
    to.day += more.day;
}

/// One row of [`RECENT`].
fn recent_call(row: &rusqlite::Row<'_>) -> Result<RecentCall, rusqlite::Error> {
    let attempt: String = row.get(0)?;
    let action: String = row.get(1)?;
    let effect: String = row.get(2)?;
    let objects: String = row.get(3)?;
    let status: Option<String> = row.get(4)?;
    let at_ms: i64 = row.get(5)?;
    let effect = EffectClass::parse(&effect).unwrap_or(EffectClass::IrreversibleOrBroad);
    // Objects this crate wrote; anything else reads as none (a rule that needs them denies).
    let objects: Vec<ScopedValue> = serde_json::from_str(&objects).unwrap_or_default();
    let mut call = RecentCall::new(
        AttemptId::from_stored(attempt),
        action,
        effect,
        objects,
        at_ms.unsigned_abs(),
    );
    if let Some(status) = status.as_deref().and_then(Status::parse) {
        call = call.with_status(status);
    }
    Ok(call)
}

#[async_trait]
impl CallStore for SqliteCallStore {
    async fn decide_and_count(
        &self,
        query: &CallQuery<'_>,
        decide: &mut Decide<'_>,
    ) -> Result<PolicyDecision, JournalError> {
        let mut conn = self.conn.lock().await;
        if conn.is_none() {
            *conn = Some(self.open().map_err(read_failed)?);
        }
        let Some(conn) = conn.as_mut() else {
            return Err(JournalError::Stopped);
        };
        // The write lock first: every process's reads of these counts wait for this decision.
        conn.execute_batch("BEGIN IMMEDIATE").map_err(read_failed)?;
        let decided = decide_in(conn, query, decide).and_then(|decision| {
            conn.execute_batch("COMMIT")?;
            Ok(decision)
        });
        if decided.is_err() && !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        decided.map_err(read_failed)
    }

    async fn settle(
        &self,
        _session: &str,
        attempt: &AttemptId,
        status: Status,
    ) -> Result<(), JournalError> {
        let mut conn = self.conn.lock().await;
        if conn.is_none() {
            *conn = Some(self.open().map_err(read_failed)?);
        }
        let Some(conn) = conn.as_mut() else {
            return Err(JournalError::Stopped);
        };
        conn.prepare_cached(SETTLE)
            .and_then(|mut s| s.execute(params![attempt.as_str(), status.as_str()]))
            .map(drop)
            .map_err(|e| JournalError::Write(Box::new(e)))
    }
}
