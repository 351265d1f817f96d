//! The SQL every part of the journal runs, in one place.

/// A fresh intent's attempt row, leased to its owner at epoch 1. A taken attempt id or key
/// inserts nothing (and so returns no row) instead of aborting the batch's transaction.
pub(crate) const INSERT_INTENT: &str = "
INSERT INTO sallyport_attempts (attempt_id, action, session_id, idempotency_key, fingerprint,
    definition_hash, effect, arguments, phase, created_at, updated_at, owner, lease_until, epoch)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'intent_written', $9, $9, $10,
    now() + $11::BIGINT * interval '1 millisecond', 1)
ON CONFLICT DO NOTHING
RETURNING epoch";

/// An observe call's attempt row, written already closed with its outcome.
pub(crate) const INSERT_CLOSED: &str = "
INSERT INTO sallyport_attempts (attempt_id, action, session_id, idempotency_key, fingerprint,
    definition_hash, effect, arguments, phase, dispatches, status, created_at, updated_at,
    owner, lease_until, epoch)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, $13, now(), 1)
ON CONFLICT DO NOTHING
RETURNING epoch";

/// Request number `$2` of an open attempt, by the holder of epoch `$4` (any, when null).
pub(crate) const NOTE_DISPATCH: &str = "
UPDATE sallyport_attempts
SET phase = CASE WHEN phase = 'intent_written' THEN 'dispatched' ELSE phase END,
    dispatches = greatest(dispatches, $2), updated_at = $3
WHERE attempt_id = $1 AND status IS NULL AND ($4::BIGINT IS NULL OR epoch = $4)";

/// Closes an attempt with its outcome; with an epoch `$6`, only while it is still that
/// epoch and still open (a row taken over since returns nothing: the append is fenced; so
/// does a row already closed, by a batch whose commit was not confirmed before the
/// connection broke, which the executor writes again: one attempt never gets two records).
pub(crate) const CLOSE_ATTEMPT: &str = "
UPDATE sallyport_attempts
SET phase = $2, status = $3, dispatches = greatest(dispatches, $4), updated_at = $5
WHERE attempt_id = $1 AND ($6::BIGINT IS NULL OR (epoch = $6 AND status IS NULL))
RETURNING epoch";

/// Closes an attempt for the reconciler, whoever holds it, only while no record closes it:
/// the row lock orders two reconcilers, and the second finds `status` set and gets no row.
/// The epoch is raised, so the old owner, should it wake up, is fenced.
pub(crate) const SETTLE_ATTEMPT: &str = "
UPDATE sallyport_attempts a
SET phase = $2, status = $3, dispatches = greatest(a.dispatches, $4), updated_at = $5,
    epoch = a.epoch + 1
WHERE a.attempt_id = $1 AND a.status IS NULL
  AND NOT EXISTS (SELECT 1 FROM sallyport_audit r WHERE r.attempt_id = a.attempt_id)
RETURNING a.epoch";

/// The head of the journal's shard `$1`, locked until the batch's transaction ends: every
/// append to the shard passes through this one row (appends to other shards do not).
pub(crate) const LOCK_HEAD: &str =
    "SELECT seq, hash FROM sallyport_chain_head WHERE shard = $1 FOR UPDATE";

/// The head row of shard `$1` at its genesis `$2`, unless the shard has one.
pub(crate) const ADD_SHARD: &str = "
INSERT INTO sallyport_chain_head (shard, seq, hash) VALUES ($1, 0, $2)
ON CONFLICT (shard) DO NOTHING";

/// [`CLOSE_ATTEMPT`] for a batch sent in one flight, whose record is already on its way:
/// a close fenced since (no open row at epoch `$6`) fails with `22012` (division by zero),
/// which aborts the transaction, so the record is never committed.
pub(crate) const CLOSE_ATTEMPT_OR_ABORT: &str = "
WITH closed AS (
    UPDATE sallyport_attempts
    SET phase = $2, status = $3, dispatches = greatest(dispatches, $4), updated_at = $5
    WHERE attempt_id = $1 AND epoch = $6 AND status IS NULL
    RETURNING 1
)
SELECT 1 / count(*) FROM closed";

/// Moves the head of shard `$5` from `$1`, `$2` to `$3`, `$4`, for a batch that chained its
/// records on the head it last wrote: a head that has moved since (another process
/// appended) fails with `22012` (division by zero), which aborts the transaction. The row
/// lock orders it behind any batch holding the head, and the condition is checked again on
/// the row as that batch left it.
pub(crate) const MOVE_HEAD_FROM: &str = "
WITH moved AS (
    UPDATE sallyport_chain_head SET seq = $3, hash = $4
    WHERE shard = $5 AND seq = $1 AND hash = $2
    RETURNING 1
)
SELECT 1 / count(*) FROM moved";

/// The SQLSTATE of the two statements above failing on purpose.
pub(crate) const ABORTED_ON_PURPOSE: &str = "22012";

/// Moves the head of shard `$3`.
pub(crate) const SET_HEAD: &str =
    "UPDATE sallyport_chain_head SET seq = $1, hash = $2 WHERE shard = $3";

/// One audit record.
pub(crate) const INSERT_RECORD: &str = "
INSERT INTO sallyport_audit (seq, receipt_id, attempt_id, prev_hash, hash, event, shard)
VALUES ($1, $2, $3, $4, $5, $6, $7)";

/// A signed head (replacing one at the same position).
pub(crate) const INSERT_SIGNED_HEAD: &str = "
INSERT INTO sallyport_heads (count, hash, key_id, signature, signed_at, shard)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (shard, count) DO UPDATE SET hash = excluded.hash, key_id = excluded.key_id,
    signature = excluded.signature, signed_at = excluded.signed_at";

/// Every audit row, shard by shard (the default shard first), each in stored sequence order.
pub(crate) const CHAIN_ROWS: &str = "
SELECT seq, prev_hash, hash, event, shard FROM sallyport_audit
ORDER BY shard <> 'default', shard, seq";

/// Every attempt row's checked columns, oldest first.
pub(crate) const ATTEMPT_ROWS: &str =
    "SELECT attempt_id, phase, status FROM sallyport_attempts ORDER BY created_at, attempt_id";

/// The signed heads, oldest first.
/// Every signed checkpoint, oldest first.
pub(crate) const CHECKPOINTS: &str = "SELECT id, body FROM sallyport_checkpoints ORDER BY id";

/// Stores a signed checkpoint.
pub(crate) const INSERT_CHECKPOINT: &str =
    "INSERT INTO sallyport_checkpoints (size, signed_at, body) VALUES ($1, $2, $3)";

/// Every anchor of a pruned shard.
pub(crate) const ANCHORS: &str =
    "SELECT shard, seq, hash, frontier FROM sallyport_anchors ORDER BY shard";

/// Deletes the records of shard `$1` up to position `$2` (a sealed range being pruned).
pub(crate) const PRUNE_RECORDS: &str = "DELETE FROM sallyport_audit WHERE shard = $1 AND seq <= $2";

/// Deletes the attempt rows `$1` whose every record was pruned.
pub(crate) const PRUNE_ATTEMPTS: &str = "DELETE FROM sallyport_attempts WHERE attempt_id = ANY($1)";

/// Stores (or moves on) the anchor of shard `$1`.
pub(crate) const UPSERT_ANCHOR: &str = "
INSERT INTO sallyport_anchors (shard, seq, hash, frontier) VALUES ($1, $2, $3, $4)
ON CONFLICT (shard) DO UPDATE SET seq = excluded.seq, hash = excluded.hash,
    frontier = excluded.frontier";

/// Every signed head, oldest first.
pub(crate) const HEADS: &str = "SELECT count, hash, key_id, signature, signed_at, shard FROM sallyport_heads ORDER BY shard, count";

/// Attempts no audit record closes, whatever their own `phase` column says.
pub(crate) const UNRESOLVED: &str = "
SELECT a.attempt_id, a.action, a.session_id, a.idempotency_key, a.phase, a.dispatches,
    a.arguments, a.created_at, a.owner,
    (extract(epoch FROM (a.lease_until - now())) * 1000)::BIGINT AS lease_left_ms
FROM sallyport_attempts a
WHERE NOT EXISTS (SELECT 1 FROM sallyport_audit r WHERE r.attempt_id = a.attempt_id)
ORDER BY a.created_at, a.attempt_id";

/// Renews the leases of this owner's attempts still in flight. Rows a writer holds locked
/// (it is closing them, or noting a dispatch) are skipped, never waited for: the heartbeat
/// never joins a lock cycle with a batch, and the next tick renews what it skipped.
pub(crate) const RENEW_LEASES: &str = "
UPDATE sallyport_attempts SET lease_until = now() + $2::BIGINT * interval '1 millisecond'
WHERE attempt_id IN (
    SELECT attempt_id FROM sallyport_attempts
    WHERE owner = $1 AND status IS NULL AND attempt_id = ANY($3)
    FOR UPDATE SKIP LOCKED
) AND owner = $1";

/// Ends the lease of attempt `$1`, held by owner `$2` at epoch `$3`, at once, if it is still
/// open: its owner gave it up (its last record could not be written), so a reconciler may
/// take it over now instead of when the lease would have run out.
pub(crate) const RELEASE_LEASE: &str = "
UPDATE sallyport_attempts SET lease_until = least(lease_until, now())
WHERE attempt_id = $1 AND owner = $2 AND epoch = $3 AND status IS NULL";

/// Takes over up to `$3` unresolved attempts whose lease expired: the new owner `$1`, a new
/// lease of `$2` ms, the epoch raised. The outer conditions are checked again on the row
/// as locked, so an attempt its old owner closed (or renewed) meanwhile is left alone.
pub(crate) const CLAIM_EXPIRED: &str = "
WITH expired AS (
    SELECT a.attempt_id, a.owner AS previous_owner FROM sallyport_attempts a
    WHERE a.status IS NULL AND a.lease_until < now()
      AND NOT EXISTS (SELECT 1 FROM sallyport_audit r WHERE r.attempt_id = a.attempt_id)
    ORDER BY a.created_at, a.attempt_id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE sallyport_attempts a
SET owner = $1, epoch = a.epoch + 1,
    lease_until = now() + $2::BIGINT * interval '1 millisecond'
FROM expired c
WHERE a.attempt_id = c.attempt_id AND a.status IS NULL AND a.lease_until < now()
RETURNING a.attempt_id, a.action, a.session_id, a.idempotency_key, a.phase, a.dispatches,
    a.arguments, a.created_at, a.epoch, c.previous_owner";

/// A new approval; a taken id inserts nothing.
pub(crate) const INSERT_APPROVAL: &str = "
INSERT INTO sallyport_approvals (approval_id, state, session_id, fingerprint, created_at_ms, body)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT DO NOTHING
RETURNING approval_id";

/// An approval, locked until the batch's transaction ends.
pub(crate) const LOCK_APPROVAL: &str =
    "SELECT body FROM sallyport_approvals WHERE approval_id = $1 FOR UPDATE";

/// An approval's new state.
pub(crate) const UPDATE_APPROVAL: &str =
    "UPDATE sallyport_approvals SET state = $2, body = $3 WHERE approval_id = $1";

/// Tells the approval listeners of every process that approval `$1` was decided; the server
/// delivers it when the deciding transaction commits, and never if it rolls back.
pub(crate) const NOTIFY_DECISION: &str = "SELECT pg_notify('sallyport_approvals', $1)";

/// One approval.
pub(crate) const APPROVAL: &str = "SELECT body FROM sallyport_approvals WHERE approval_id = $1";

/// Approvals by state, session and fingerprint (each filter off when null), newest first.
pub(crate) const APPROVALS: &str = "
SELECT body FROM sallyport_approvals
WHERE ($1::TEXT[] IS NULL OR state = ANY($1))
  AND ($2::TEXT IS NULL OR session_id = $2)
  AND ($3::TEXT IS NULL OR fingerprint = $3)
ORDER BY created_at_ms DESC, approval_id DESC
LIMIT $4";
