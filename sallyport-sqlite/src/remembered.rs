//! Remembered approvals in the journal file ([`sallyport_kernel::approval::remember_under`]).
//!
//! One row per remembered approval (`remembered_approvals`, created at every open like the
//! approvals table, so a journal made before it gains it and keeps its format). The columns
//! are what reads filter and order by; `remembered` holds the whole
//! [`RememberedApproval`] as JSON, rewritten with them on a revocation. The rows are written
//! on a connection of their own: a revocation loads the row, applies
//! [`RememberedApproval::revoke`] and writes it back inside one `BEGIN IMMEDIATE`
//! transaction, which takes the file's write lock, so of two processes revoking at once the
//! second finds it revoked.

use std::path::PathBuf;
use std::time::Duration;

use rusqlite::types::Type;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use tokio::sync::Mutex;

use sallyport_kernel::approval::{RememberedApproval, RememberedId, Revocation, Revoked};
use sallyport_kernel::journal::JournalError;

/// The table and its index.
pub(crate) const REMEMBERED_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS remembered_approvals (
    remembered_id TEXT PRIMARY KEY,
    action        TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    revoked       INTEGER NOT NULL DEFAULT 0,
    remembered    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS remembered_approvals_action
    ON remembered_approvals (action, created_at_ms);
";

/// The remembered approvals of one journal file: their own connection, opened on first use.
pub(crate) struct SqliteRemembered {
    path: PathBuf,
    busy_timeout: Duration,
    conn: Mutex<Option<Connection>>,
}

impl std::fmt::Debug for SqliteRemembered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteRemembered")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn ms(at: u64) -> i64 {
    i64::try_from(at).unwrap_or(i64::MAX)
}

fn to_json(r: &RememberedApproval) -> rusqlite::Result<String> {
    serde_json::to_string(r).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

fn from_json(text: &str) -> rusqlite::Result<RememberedApproval> {
    serde_json::from_str(text)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, Type::Text, Box::new(e)))
}

fn write_failed(e: rusqlite::Error) -> JournalError {
    if let rusqlite::Error::SqliteFailure(f, _) = &e
        && f.code == rusqlite::ErrorCode::ConstraintViolation
    {
        return JournalError::DuplicateKey;
    }
    JournalError::Write(Box::new(e))
}

fn read_failed(e: rusqlite::Error) -> JournalError {
    JournalError::Read(Box::new(e))
}

impl SqliteRemembered {
    /// The store in the journal file at `path` (whose schema is made).
    pub(crate) fn new(path: PathBuf, busy_timeout: Duration) -> Self {
        Self {
            path,
            busy_timeout,
            conn: Mutex::new(None),
        }
    }

    /// Runs `f` on the store's connection, opening it first if needed.
    async fn with<T>(
        &self,
        failed: fn(rusqlite::Error) -> JournalError,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, JournalError> {
        let mut conn = self.conn.lock().await;
        if conn.is_none() {
            let opened = Connection::open_with_flags(
                &self.path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .and_then(|c| {
                c.busy_timeout(self.busy_timeout)?;
                c.pragma_update(None, "synchronous", "NORMAL")?;
                Ok(c)
            })
            .map_err(read_failed)?;
            *conn = Some(opened);
        }
        let Some(conn) = conn.as_mut() else {
            return Err(JournalError::Stopped);
        };
        f(conn).map_err(failed)
    }

    pub(crate) async fn store(&self, r: &RememberedApproval) -> Result<(), JournalError> {
        self.with(write_failed, |conn| {
            conn.prepare_cached(
                "INSERT INTO remembered_approvals (remembered_id, action, created_at_ms, revoked, remembered) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                r.remembered_id.as_str(),
                r.action,
                ms(r.created_at_ms),
                i64::from(r.revoked.is_some()),
                to_json(r)?,
            ])
            .map(drop)
        })
        .await
    }

    pub(crate) async fn list(
        &self,
        action: Option<&str>,
    ) -> Result<Vec<RememberedApproval>, JournalError> {
        self.with(read_failed, |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT remembered FROM remembered_approvals WHERE ?1 IS NULL OR action = ?1 \
                 ORDER BY created_at_ms DESC, remembered_id DESC",
            )?;
            let mut rows = stmt.query(params![action])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                out.push(from_json(&row.get::<_, String>(0)?)?);
            }
            Ok(out)
        })
        .await
    }

    pub(crate) async fn revoke(
        &self,
        id: &RememberedId,
        revocation: &Revocation,
    ) -> Result<Revoked, JournalError> {
        self.with(write_failed, |conn| {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let found = tx
                .prepare_cached(
                    "SELECT remembered FROM remembered_approvals WHERE remembered_id = ?1",
                )?
                .query_row([id.as_str()], |r| r.get::<_, String>(0))
                .optional()?;
            let Some(json) = found else {
                return Ok(Revoked::NotFound);
            };
            let current = from_json(&json)?;
            let mut next = current.clone();
            if !next.revoke(revocation) {
                return Ok(Revoked::Unchanged(current));
            }
            tx.prepare_cached(
                "UPDATE remembered_approvals SET revoked = 1, remembered = ?2 WHERE remembered_id = ?1",
            )?
            .execute(params![id.as_str(), to_json(&next)?])?;
            tx.commit()?;
            Ok(Revoked::Applied(next))
        })
        .await
    }
}
