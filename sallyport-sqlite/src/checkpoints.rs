//! Signed checkpoints in the journal file ([`sallyport_kernel::journal::checkpoint`]).
//!
//! One row per checkpoint in `checkpoints` (created at every open like the approvals
//! table, so a journal made before checkpoints gains it and keeps its format and its
//! records): the default shard's size and the signing time, which reads order by, and the
//! whole [`Checkpoint`] as JSON. A checkpoint is stored on a connection of its own, opened
//! for the one insert; reads run on the journal thread with the chain's.

use std::path::Path;
use std::time::Duration;

use rusqlite::types::Type;
use rusqlite::{Connection, OpenFlags, params};

use sallyport_kernel::journal::JournalError;
use sallyport_kernel::journal::checkpoint::{Checkpoint, DEFAULT_SHARD};

/// The table.
pub(crate) const CHECKPOINTS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS checkpoints (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    size       INTEGER NOT NULL,
    signed_at  TEXT NOT NULL,
    checkpoint TEXT NOT NULL
);
";

/// Every stored checkpoint, oldest first (none in a file whose table is missing, which an
/// open creates).
pub(crate) fn list(conn: &Connection) -> rusqlite::Result<Vec<Checkpoint>> {
    let exists: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'checkpoints'",
        [],
        |r| r.get(0),
    )?;
    if exists == 0 {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare("SELECT id, checkpoint FROM checkpoints ORDER BY id")?;
    let rows = stmt
        .query_map([], |r| {
            let id: i64 = r.get(0)?;
            let text: String = r.get(1)?;
            serde_json::from_str::<Checkpoint>(&text).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(
                    1,
                    Type::Text,
                    format!("checkpoint {id} is not a readable checkpoint: {e}").into(),
                )
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Stores `checkpoint` in the file at `path`, on a connection of its own.
pub(crate) fn store(
    path: &Path,
    busy_timeout: Duration,
    checkpoint: &Checkpoint,
) -> Result<(), JournalError> {
    let failed = |e: rusqlite::Error| JournalError::Write(Box::new(e));
    let text = serde_json::to_string(checkpoint).map_err(|e| JournalError::Write(Box::new(e)))?;
    let size = checkpoint
        .shard(DEFAULT_SHARD)
        .map_or(0, |h| i64::try_from(h.size).unwrap_or(i64::MAX));
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(failed)?;
    conn.busy_timeout(busy_timeout).map_err(failed)?;
    conn.execute_batch(CHECKPOINTS_SCHEMA).map_err(failed)?;
    conn.execute(
        "INSERT INTO checkpoints (size, signed_at, checkpoint) VALUES (?1, ?2, ?3)",
        params![size, checkpoint.signed_at, text],
    )
    .map_err(failed)?;
    Ok(())
}
