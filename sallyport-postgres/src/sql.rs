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

/// A batch's fresh intents, one row per array element (`$1`–`$8`, in the batch's order),
/// all leased to owner `$10` at epoch 1. A taken attempt id or key inserts nothing for that
/// row; the ids returned are the rows written. No attempt id appears twice in one call.
pub(crate) const INSERT_INTENTS: &str = "
INSERT INTO sallyport_attempts (attempt_id, action, session_id, idempotency_key, fingerprint,
    definition_hash, effect, arguments, phase, created_at, updated_at, owner, lease_until, epoch)
SELECT r.attempt_id, r.action, r.session_id, r.idempotency_key, r.fingerprint,
    r.definition_hash, r.effect, r.arguments, 'intent_written', $9, $9, $10,
    now() + $11::BIGINT * interval '1 millisecond', 1
FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[], $7::TEXT[],
    $8::TEXT[]) WITH ORDINALITY
    AS r(attempt_id, action, session_id, idempotency_key, fingerprint, definition_hash, effect,
         arguments, n)
ORDER BY r.n
ON CONFLICT DO NOTHING
RETURNING attempt_id";

/// A batch's observe calls' attempt rows, written already closed with their outcomes
/// (`$9`–`$11`) and no lease, as [`INSERT_INTENTS`] writes intents.
pub(crate) const INSERT_CLOSED_ROWS: &str = "
INSERT INTO sallyport_attempts (attempt_id, action, session_id, idempotency_key, fingerprint,
    definition_hash, effect, arguments, phase, dispatches, status, created_at, updated_at,
    owner, lease_until, epoch)
SELECT r.attempt_id, r.action, r.session_id, r.idempotency_key, r.fingerprint,
    r.definition_hash, r.effect, r.arguments, r.phase, r.dispatches, r.status, $12, $12, $13,
    now(), 1
FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[], $7::TEXT[],
    $8::TEXT[], $9::TEXT[], $10::BIGINT[], $11::TEXT[]) WITH ORDINALITY
    AS r(attempt_id, action, session_id, idempotency_key, fingerprint, definition_hash, effect,
         arguments, phase, dispatches, status, n)
ORDER BY r.n
ON CONFLICT DO NOTHING
RETURNING attempt_id";

/// A batch's dispatch notes, one per attempt: its highest request number `$2`, noted only
/// on an open attempt and by the holder of epoch `$3` (any, when null).
pub(crate) const NOTE_DISPATCHES: &str = "
UPDATE sallyport_attempts a
SET phase = CASE WHEN a.phase = 'intent_written' THEN 'dispatched' ELSE a.phase END,
    dispatches = greatest(a.dispatches, d.n), updated_at = $4
FROM unnest($1::TEXT[], $2::BIGINT[], $3::BIGINT[]) AS d(attempt_id, n, epoch)
WHERE a.attempt_id = d.attempt_id AND a.status IS NULL AND (d.epoch IS NULL OR a.epoch = d.epoch)";

/// A batch's attempt closes, as [`CLOSE_ATTEMPT`] closes one (fenced by epoch `$5`, when
/// not null); the ids returned are the rows closed. No attempt id appears twice in one call.
pub(crate) const CLOSE_ATTEMPTS: &str = "
UPDATE sallyport_attempts a
SET phase = c.phase, status = c.status, dispatches = greatest(a.dispatches, c.dispatches),
    updated_at = $6
FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::BIGINT[])
    AS c(attempt_id, phase, status, dispatches, epoch)
WHERE a.attempt_id = c.attempt_id AND (c.epoch IS NULL OR a.epoch = c.epoch)
RETURNING a.attempt_id";

/// A batch's reconciler closes, whoever holds each attempt, only while no record closes it:
/// the row lock orders two reconcilers, and the second finds `status` set and gets no row.
/// The epoch is raised, so the old owner, should it wake up, is fenced. The ids returned are
/// the rows settled. No attempt id appears twice in one call.
pub(crate) const SETTLE_ATTEMPTS: &str = "
UPDATE sallyport_attempts a
SET phase = s.phase, status = s.status, dispatches = greatest(a.dispatches, s.dispatches),
    updated_at = $5, epoch = a.epoch + 1
FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[])
    AS s(attempt_id, phase, status, dispatches)
WHERE a.attempt_id = s.attempt_id AND a.status IS NULL
  AND NOT EXISTS (SELECT 1 FROM sallyport_audit r WHERE r.attempt_id = a.attempt_id)
RETURNING a.attempt_id";

/// A batch's audit records, one row per array element.
pub(crate) const INSERT_RECORDS: &str = "
INSERT INTO sallyport_audit (seq, receipt_id, attempt_id, prev_hash, hash, event)
SELECT * FROM unnest($1::BIGINT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[])";

/// Closes an attempt with its outcome; with an epoch `$6`, only while it is still that
/// epoch (a row taken over since returns nothing: the append is fenced).
pub(crate) const CLOSE_ATTEMPT: &str = "
UPDATE sallyport_attempts
SET phase = $2, status = $3, dispatches = greatest(dispatches, $4), updated_at = $5
WHERE attempt_id = $1 AND ($6::BIGINT IS NULL OR epoch = $6)
RETURNING epoch";

/// The chain's head, locked until the batch's transaction ends: every process's appends
/// pass through this one row.
pub(crate) const LOCK_HEAD: &str =
    "SELECT seq, hash FROM sallyport_chain_head WHERE id = 1 FOR UPDATE";

/// Moves the chain's head.
pub(crate) const SET_HEAD: &str =
    "UPDATE sallyport_chain_head SET seq = $1, hash = $2 WHERE id = 1";

/// A signed head (replacing one at the same position).
pub(crate) const INSERT_SIGNED_HEAD: &str = "
INSERT INTO sallyport_heads (count, hash, key_id, signature, signed_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (count) DO UPDATE SET hash = excluded.hash, key_id = excluded.key_id,
    signature = excluded.signature, signed_at = excluded.signed_at";

/// Every audit row, in stored sequence order.
pub(crate) const CHAIN_ROWS: &str =
    "SELECT seq, prev_hash, hash, event FROM sallyport_audit ORDER BY seq";

/// Every attempt row's checked columns, oldest first.
pub(crate) const ATTEMPT_ROWS: &str =
    "SELECT attempt_id, phase, status FROM sallyport_attempts ORDER BY created_at, attempt_id";

/// The signed heads, oldest first.
pub(crate) const HEADS: &str =
    "SELECT count, hash, key_id, signature, signed_at FROM sallyport_heads ORDER BY count";

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
