//! Retention in the journal file ([`sallyport_kernel::journal::retention`]): the anchor that
//! stands for the pruned records, and the prune itself.
//!
//! One row per pruned shard in `anchors` (created at every open like the checkpoints
//! table): the last pruned record's position and hash, and the Merkle frontier after it as
//! a JSON array of hex hashes. The anchor is read from these columns, so editing any of
//! them is what `verify_signed` checks against the signed checkpoints. This file holds only
//! the default shard.
//!
//! A prune runs on a connection of its own in one `BEGIN IMMEDIATE` transaction (which
//! holds against the journal's writer and other processes): it reads the anchors, the
//! chain and the checkpoints, lets [`plan_prune`] check the anchor against them, then
//! deletes the records and the attempt rows they alone closed, stores the anchor, and marks
//! the file as format 2 (`PRAGMA user_version`), which builds that know no anchors refuse
//! to open instead of restarting the chain. With `secure_delete` on, the deleted records'
//! bytes are overwritten in the file.

use std::path::Path;
use std::time::Duration;

use rusqlite::types::Type;
use rusqlite::{Connection, OpenFlags, params};

use sallyport_kernel::journal::JournalError;
use sallyport_kernel::journal::checkpoint::DEFAULT_SHARD;
use sallyport_kernel::journal::retention::{Anchor, plan_prune};

use super::open::PRUNED_FORMAT_VERSION;
use super::statements::chain_rows;

/// The table.
pub(crate) const ANCHORS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS anchors (
    shard    TEXT PRIMARY KEY,
    seq      INTEGER NOT NULL,
    hash     TEXT NOT NULL,
    frontier TEXT NOT NULL
);
";

/// Every stored anchor (none in a file whose table is missing, which an open creates).
pub(crate) fn list(conn: &Connection) -> rusqlite::Result<Vec<Anchor>> {
    let exists: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'anchors'",
        [],
        |r| r.get(0),
    )?;
    if exists == 0 {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare("SELECT shard, seq, hash, frontier FROM anchors ORDER BY shard")?;
    let rows = stmt
        .query_map([], |r| {
            let shard: String = r.get(0)?;
            let frontier: String = r.get(3)?;
            let frontier: Vec<String> = serde_json::from_str(&frontier).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(
                    3,
                    Type::Text,
                    format!("the anchor of shard `{shard}` has no readable frontier: {e}").into(),
                )
            })?;
            let mut anchor = Anchor::genesis(shard);
            anchor.seq = u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0);
            anchor.hash = r.get(2)?;
            anchor.frontier = frontier;
            Ok(anchor)
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Prunes the records `anchor` seals from the file at `path`, on a connection of its own;
/// returns how many went.
pub(crate) fn prune(
    path: &Path,
    busy_timeout: Duration,
    anchor: &Anchor,
) -> Result<u64, JournalError> {
    if anchor.shard != DEFAULT_SHARD {
        return Err(JournalError::PruneRefused {
            reason: format!(
                "this journal holds only shard `{DEFAULT_SHARD}`, not `{}`",
                anchor.shard
            ),
        });
    }
    let failed = |e: rusqlite::Error| JournalError::Write(Box::new(e));
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(failed)?;
    conn.busy_timeout(busy_timeout).map_err(failed)?;
    conn.pragma_update(None, "secure_delete", "ON")
        .map_err(failed)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(failed)?;
    conn.execute_batch(ANCHORS_SCHEMA).map_err(failed)?;
    conn.execute_batch("BEGIN IMMEDIATE").map_err(failed)?;
    let done = (|| {
        let anchors = list(&conn).map_err(failed)?;
        let rows = chain_rows(&conn).map_err(failed)?;
        let checkpoints = super::checkpoints::list(&conn).map_err(failed)?;
        let plan = plan_prune(&anchors, &rows, &checkpoints, anchor)?;
        let upto = i64::try_from(anchor.seq).unwrap_or(i64::MAX);
        let deleted = conn
            .execute("DELETE FROM audit WHERE seq <= ?1", [upto])
            .map_err(failed)?;
        for attempt in &plan.attempts {
            conn.execute("DELETE FROM attempts WHERE attempt_id = ?1", [attempt])
                .map_err(failed)?;
        }
        let frontier = serde_json::to_string(&anchor.frontier)
            .map_err(|e| JournalError::Write(Box::new(e)))?;
        conn.execute(
            "INSERT OR REPLACE INTO anchors (shard, seq, hash, frontier) VALUES (?1, ?2, ?3, ?4)",
            params![anchor.shard, upto, anchor.hash, frontier],
        )
        .map_err(failed)?;
        // A build that knows no anchors must not open the file (see the constant).
        conn.pragma_update(None, "user_version", PRUNED_FORMAT_VERSION)
            .map_err(failed)?;
        if deleted as u64 != plan.records {
            return Err(JournalError::PruneRefused {
                reason: format!(
                    "{deleted} records matched, {} expected: the file changed meanwhile",
                    plan.records
                ),
            });
        }
        Ok(plan.records)
    })();
    match done {
        Ok(n) => {
            conn.execute_batch("COMMIT").map_err(failed)?;
            Ok(n)
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}
