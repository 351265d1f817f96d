//! The SQL: every statement the journal runs, and the mapping between rows and the
//! journal's types. Each function runs inside whatever transaction its caller holds.

use std::collections::HashSet;

use rusqlite::{Connection, OptionalExtension, params};

use super::combine::Failure;
use sallyport_kernel::clock::now;
use sallyport_kernel::journal::batch::Chained;
use sallyport_kernel::journal::chain::{AttemptRow, ChainCheck, ChainRow};
use sallyport_kernel::journal::signing::SignedHead;
use sallyport_kernel::journal::{
    AttemptId, AuditEvent, AuditRecord, GENESIS_HASH, IdempotencyKey, Intent, UnresolvedAttempt,
    chain_hash,
};

/// The chain's last position and hash, as a batch extends it.
pub(super) type Head = (u64, String);

thread_local! {
    /// The buffer each thread serializes a row's JSON into: grown once to the size rows
    /// take, it is not allocated again (and regrown) for every row.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Serializes `value` as JSON into this thread's scratch buffer and hands `f` the text.
fn with_json<T: serde::Serialize + ?Sized, R>(
    value: &T,
    f: impl FnOnce(&str) -> rusqlite::Result<R>,
) -> rusqlite::Result<R> {
    SCRATCH.with(|scratch| {
        // `f` only runs a statement: nothing borrows the buffer again meanwhile.
        let mut buf = scratch.borrow_mut();
        buf.clear();
        serde_json::to_writer(&mut *buf, value)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        // serde_json writes only UTF-8.
        let text = std::str::from_utf8(&buf)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        f(text)
    })
}

/// Runs one statement through the connection's statement cache (each is parsed once).
pub(super) fn exec(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute(params)
}

/// The attempt row of a fresh intent.
pub(super) fn insert_intent(conn: &Connection, intent: &Intent) -> rusqlite::Result<()> {
    let at = now();
    with_json(&intent.arguments, |arguments| {
        exec(
            conn,
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
                arguments,
                at,
            ],
        )
    })
    .map(drop)
}

/// The attempt row of `intent`, written already closed with `event`'s outcome (an observe
/// call journaled once, after its response).
pub(super) fn insert_closed_attempt(
    conn: &Connection,
    intent: &Intent,
    event: &AuditEvent,
) -> rusqlite::Result<()> {
    let at = now();
    with_json(&intent.arguments, |arguments| {
        exec(
            conn,
            "INSERT INTO attempts (attempt_id, action, session_id, idempotency_key, fingerprint, definition_hash, effect, arguments, phase, dispatches, status, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12)",
            params![
                intent.attempt_id.as_str(),
                intent.action,
                intent.session_id,
                intent.idempotency_key.as_str(),
                intent.fingerprint,
                intent.definition_hash,
                intent.effect.as_str(),
                arguments,
                event.phase.as_str(),
                event.dispatches,
                event.status.as_str(),
                at,
            ],
        )
    })
    .map(drop)
}

/// Appends `event` and closes its attempt if the attempt has a row and no audit record
/// closes it yet (the reconciler's compare-and-set); returns whether it did. Runs inside the
/// batch's transaction, so no other writer can close the attempt in between.
pub(super) fn settle_unresolved(
    conn: &Connection,
    attempt: &AttemptId,
    event: &AuditEvent,
    head: &mut Head,
) -> rusqlite::Result<bool> {
    let open: bool = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM attempts WHERE attempt_id = ?1)
               AND NOT EXISTS (SELECT 1 FROM audit WHERE attempt_id = ?1)",
        )?
        .query_row([attempt.as_str()], |r| r.get(0))?;
    if !open || event.attempt_id != *attempt {
        return Ok(false);
    }
    insert_record(conn, event, head)?;
    close_attempt(conn, event)?;
    Ok(true)
}

/// Notes request number `n` of an attempt.
pub(super) fn note_dispatch(
    conn: &Connection,
    attempt: &AttemptId,
    n: u32,
) -> rusqlite::Result<()> {
    exec(
        conn,
        "UPDATE attempts SET phase = 'dispatched', dispatches = max(dispatches, ?2), updated_at = ?3 WHERE attempt_id = ?1",
        params![attempt.as_str(), n, now()],
    )
    .map(drop)
}

/// Where one appended record sits in the chain: its record, less the event it was made from
/// (the batch hands the event itself to the caller once the batch is committed, so it is not
/// copied).
#[derive(Debug)]
pub(super) struct Link {
    pub(super) seq: u64,
    pub(super) prev_hash: String,
    pub(super) hash: String,
}

impl Chained for Link {
    /// The record this link and `event` make.
    fn into_record(self, event: AuditEvent) -> AuditRecord {
        AuditRecord {
            shard: sallyport_kernel::journal::checkpoint::DEFAULT_SHARD.to_owned(),
            seq: self.seq,
            prev_hash: self.prev_hash,
            hash: self.hash,
            event,
        }
    }
}

/// Appends `event` after `head` and moves `head` on to it.
pub(super) fn insert_record(
    conn: &Connection,
    event: &AuditEvent,
    head: &mut Head,
) -> rusqlite::Result<Link> {
    let seq = head.0 + 1;
    let hash = with_json(event, |json| {
        let hash = chain_hash(&head.1, seq, json);
        exec(
            conn,
            "INSERT INTO audit (seq, receipt_id, attempt_id, prev_hash, hash, event) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                seq,
                event.receipt_id.as_str(),
                event.attempt_id.as_str(),
                head.1,
                hash,
                json
            ],
        )?;
        Ok(hash)
    })?;
    let link = Link {
        seq,
        prev_hash: std::mem::replace(&mut head.1, hash.clone()),
        hash,
    };
    head.0 = seq;
    Ok(link)
}

/// Closes the attempt of `event` with its outcome.
pub(super) fn close_attempt(conn: &Connection, event: &AuditEvent) -> rusqlite::Result<()> {
    exec(
        conn,
        "UPDATE attempts SET phase = ?2, status = ?3, dispatches = max(dispatches, ?4), updated_at = ?5 WHERE attempt_id = ?1",
        params![
            event.attempt_id.as_str(),
            event.phase.as_str(),
            event.status.as_str(),
            event.dispatches,
            now()
        ],
    )
    .map(drop)
}

/// Stores a signed head (replacing one at the same position).
pub(super) fn insert_head(conn: &Connection, signed: &SignedHead) -> rusqlite::Result<()> {
    exec(
        conn,
        "INSERT OR REPLACE INTO heads (count, hash, key_id, signature, signed_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![signed.count, signed.hash, signed.key_id, signed.signature, signed.signed_at],
    )
    .map(drop)
}

/// The chain's last position and hash: the last record's, or when every record was pruned,
/// the anchor's (the next record follows the pruned ones), or the genesis.
pub(super) fn head(conn: &Connection) -> rusqlite::Result<Head> {
    let last = conn
        .prepare_cached("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")?
        .query_row([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
        .optional()?;
    let last = match last {
        Some(found) => Some(found),
        None => conn
            .prepare_cached("SELECT seq, hash FROM anchors WHERE shard = 'default'")?
            .query_row([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .optional()?,
    };
    Ok(last.map_or_else(
        || (0, GENESIS_HASH.to_owned()),
        |(seq, hash)| (u64::try_from(seq).unwrap_or(0), hash),
    ))
}

/// Every audit row, in stored sequence order.
pub(super) fn chain_rows(conn: &Connection) -> rusqlite::Result<Vec<ChainRow>> {
    let mut stmt = conn.prepare("SELECT seq, prev_hash, hash, event FROM audit ORDER BY seq")?;
    let rows = stmt
        .query_map([], |r| {
            Ok(ChainRow::new(
                r.get(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Every attempt row's checked columns, oldest first.
pub(super) fn attempt_rows(conn: &Connection) -> rusqlite::Result<Vec<AttemptRow>> {
    let mut stmt = conn.prepare(
        "SELECT attempt_id, phase, status FROM attempts ORDER BY created_at, attempt_id",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok(AttemptRow::new(
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get(2)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The chain checked link by link (each shard from its anchor, where records were pruned),
/// then the attempt rows against it.
pub(super) fn check_chain(conn: &Connection) -> rusqlite::Result<ChainCheck> {
    let mut check = ChainCheck::with_anchors(super::anchors::list(conn)?, chain_rows(conn)?);
    if check.is_intact() {
        check.check_attempts(attempt_rows(conn)?);
    }
    Ok(check)
}

/// The signed heads, oldest first (none when the journal was never opened with a key).
pub(super) fn heads(conn: &Connection) -> rusqlite::Result<Vec<SignedHead>> {
    let exists: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'heads'",
        [],
        |r| r.get(0),
    )?;
    if exists == 0 {
        // Never opened with a key: nothing is signed.
        return Ok(Vec::new());
    }
    let mut stmt =
        conn.prepare("SELECT count, hash, key_id, signature, signed_at FROM heads ORDER BY count")?;
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

/// Every audit record, oldest first.
pub(super) fn records(conn: &Connection) -> rusqlite::Result<Vec<AuditRecord>> {
    chain_rows(conn)?
        .into_iter()
        .map(|row| {
            row.into_record().map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(
                    5,
                    rusqlite::types::Type::Text,
                    Box::new(e),
                )
            })
        })
        .collect()
}

/// Attempts no audit record closes, whatever their own `phase` column says.
pub(super) fn unresolved(conn: &Connection) -> rusqlite::Result<Vec<UnresolvedAttempt>> {
    let closed: HashSet<String> = conn
        .prepare("SELECT attempt_id FROM audit")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut stmt = conn.prepare(
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
        let row = AttemptRow::new(attempt_id, r.get::<_, String>(4)?, None);
        let arguments: String = r.get(6)?;
        open.push(UnresolvedAttempt {
            phase: row.unresolved_phase(),
            attempt_id: AttemptId::from_stored(row.attempt_id),
            action: r.get(1)?,
            session_id: r.get(2)?,
            idempotency_key: IdempotencyKey::from_stored(r.get::<_, String>(3)?),
            dispatches: r.get(5)?,
            arguments: serde_json::from_str(&arguments).unwrap_or_default(),
            created_at: r.get(7)?,
            // SQLite keeps no owner or lease: the reconciler goes by the attempt's age.
            owner: None,
            lease_until_ms: None,
        });
    }
    Ok(open)
}

/// A row refused for its key (an attempt id, an idempotency key, an approval id) is a
/// duplicate; anything else a write failure.
pub(super) fn key_failure(e: rusqlite::Error) -> Failure {
    if is_duplicate(&e) {
        Failure::DuplicateKey
    } else {
        Failure::from(e)
    }
}

/// Whether SQLite refused a row because its attempt id or idempotency key is taken.
fn is_duplicate(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation)
}
