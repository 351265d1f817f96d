//! The approval store's SQL: every change is a compare-and-set (`UPDATE … WHERE` the state
//! it needs, the change count checked) made inside the batch's `BEGIN IMMEDIATE`
//! transaction, followed by its audit record in the same transaction. A change whose
//! condition fails writes nothing. The columns are what the conditions test; the `approval`
//! column holds the whole [`Approval`] as JSON and is rewritten with them on every change.

use rusqlite::types::{ToSql, Type};
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

use super::combine::Failure;
use super::statements::{self as sql, Head, Link, exec, key_failure};
use sallyport_kernel::approval::{
    Approval, ApprovalDecision, ApprovalFilter, ApprovalId, ApprovalState, Claim, Transition,
    Verdict,
};
use sallyport_kernel::journal::{AuditEvent, Intent};
use sallyport_kernel::outcome::ActionResult;

/// Every column a change may move, then the compare-and-set's condition (`?1` is the id,
/// `?2`–`?7` the new values, the condition's own parameters start at `?8`).
macro_rules! update_where {
    ($condition:literal) => {
        concat!(
            "UPDATE approvals SET state = ?2, claim_owner = ?3, claim_epoch = ?4, ",
            "claim_until_ms = ?5, execution = ?6, approval = ?7 ",
            "WHERE approval_id = ?1 AND ",
            $condition
        )
    };
}

/// Unix milliseconds as SQLite stores them (a time past 2^63 ms is kept as the largest).
fn ms(at: u64) -> i64 {
    i64::try_from(at).unwrap_or(i64::MAX)
}

fn to_json(approval: &Approval) -> rusqlite::Result<String> {
    serde_json::to_string(approval)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

fn from_json(column: usize, text: &str) -> rusqlite::Result<Approval> {
    serde_json::from_str(text)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(column, Type::Text, Box::new(e)))
}

/// An approval as stored, with the claim epoch its row holds (kept when a claim is cleared).
struct Stored {
    approval: Approval,
    epoch: u64,
}

fn load(conn: &Connection, id: &ApprovalId) -> rusqlite::Result<Option<Stored>> {
    let row = conn
        .prepare_cached("SELECT approval, claim_epoch FROM approvals WHERE approval_id = ?1")?
        .query_row([id.as_str()], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })
        .optional()?;
    row.map(|(json, epoch)| {
        Ok(Stored {
            approval: from_json(0, &json)?,
            epoch: u64::try_from(epoch).unwrap_or(0),
        })
    })
    .transpose()
}

/// Rewrites the row of `next` if `condition` (a statement from [`update_where!`]) holds with
/// `extra` as its parameters; returns whether it did.
fn rewrite(
    conn: &Connection,
    statement: &str,
    next: &Approval,
    epoch: u64,
    extra: &[&dyn ToSql],
) -> rusqlite::Result<bool> {
    let json = to_json(next)?;
    let id = next.approval_id.as_str();
    let state = next.state.as_str();
    let claim = next.claim.as_ref();
    let owner = claim.map(|c| c.owner.as_str());
    let claim_epoch = ms(claim.map_or(epoch, |c| c.epoch));
    let until = claim.map(|c| ms(c.until_ms));
    let execution = next.execution.as_ref().map(|a| a.as_str());
    let mut values: Vec<&dyn ToSql> =
        vec![&id, &state, &owner, &claim_epoch, &until, &execution, &json];
    values.extend_from_slice(extra);
    Ok(conn
        .prepare_cached(statement)?
        .execute(params_from_iter(values))?
        == 1)
}

/// Appends `event` after `head` and closes its attempt (if it has a row), as `append` does.
fn append(conn: &Connection, event: &AuditEvent, head: &mut Head) -> rusqlite::Result<Link> {
    let record = sql::insert_record(conn, event, head)?;
    sql::close_attempt(conn, event)?;
    Ok(record)
}

/// Stores `approval` as `awaiting` (whatever state it came with, and with no decision, claim,
/// execution or result), then appends the parked call's record.
pub(super) fn park(
    conn: &Connection,
    approval: &Approval,
    event: &AuditEvent,
    head: &mut Head,
) -> Result<Link, Failure> {
    let mut stored = approval.clone();
    stored.state = ApprovalState::Awaiting;
    stored.decision = None;
    stored.claim = None;
    stored.execution = None;
    stored.result = None;
    exec(
        conn,
        "INSERT INTO approvals (approval_id, attempt_id, session_id, fingerprint, state, created_at_ms, expires_at_ms, approval)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            stored.approval_id.as_str(),
            stored.attempt_id.as_str(),
            stored.session.id().as_str(),
            stored.fingerprint,
            stored.state.as_str(),
            ms(stored.created_at_ms),
            ms(stored.expires_at_ms),
            to_json(&stored)?,
        ],
    )
    .map_err(key_failure)?;
    Ok(append(conn, event, head)?)
}

/// Records `decision` while the approval is awaiting and `decision.at_ms` is before its
/// expiry.
pub(super) fn decide(
    conn: &Connection,
    id: &ApprovalId,
    decision: &ApprovalDecision,
    event: &AuditEvent,
    head: &mut Head,
) -> rusqlite::Result<Transition> {
    let Some(Stored { approval, epoch }) = load(conn, id)? else {
        return Ok(Transition::NotFound);
    };
    let mut next = approval.clone();
    next.state = match decision.verdict {
        Verdict::Approve => ApprovalState::Approved,
        Verdict::Deny => ApprovalState::Denied,
    };
    next.decision = Some(decision.clone());
    let statement = update_where!("state = 'awaiting' AND expires_at_ms > ?8");
    if !rewrite(conn, statement, &next, epoch, &[&ms(decision.at_ms)])? {
        return Ok(Transition::Unchanged(approval));
    }
    append(conn, event, head)?;
    Ok(Transition::Applied(next))
}

/// Marks the approval expired while it is awaiting and `now_ms` is at or past its expiry.
pub(super) fn expire(
    conn: &Connection,
    id: &ApprovalId,
    now_ms: u64,
    event: &AuditEvent,
    head: &mut Head,
) -> rusqlite::Result<Transition> {
    let Some(Stored { approval, epoch }) = load(conn, id)? else {
        return Ok(Transition::NotFound);
    };
    let mut next = approval.clone();
    next.state = ApprovalState::Expired;
    let statement = update_where!("state = 'awaiting' AND expires_at_ms <= ?8");
    if !rewrite(conn, statement, &next, epoch, &[&ms(now_ms)])? {
        return Ok(Transition::Unchanged(approval));
    }
    append(conn, event, head)?;
    Ok(Transition::Applied(next))
}

/// What a claim asks for.
pub(super) struct ClaimRequest {
    pub(super) id: ApprovalId,
    pub(super) owner: String,
    pub(super) now_ms: u64,
    pub(super) lease_ms: u64,
}

/// Claims an approved approval whose claim is absent or past its lease: epoch + 1.
pub(super) fn claim(conn: &Connection, request: &ClaimRequest) -> rusqlite::Result<Transition> {
    let Some(Stored { approval, epoch }) = load(conn, &request.id)? else {
        return Ok(Transition::NotFound);
    };
    let mut next = approval.clone();
    next.claim = Some(Claim {
        owner: request.owner.clone(),
        epoch: epoch.saturating_add(1),
        until_ms: request.now_ms.saturating_add(request.lease_ms),
    });
    let statement = update_where!(
        "state = 'approved' AND claim_epoch = ?8 AND (claim_owner IS NULL OR claim_until_ms <= ?9)"
    );
    let extra: [&dyn ToSql; 2] = [&ms(epoch), &ms(request.now_ms)];
    if !rewrite(conn, statement, &next, epoch, &extra)? {
        return Ok(Transition::Unchanged(approval));
    }
    Ok(Transition::Applied(next))
}

/// Moves an approved approval held under `claim` to executing and writes its intent.
pub(super) fn begin(
    conn: &Connection,
    id: &ApprovalId,
    claim: &Claim,
    intent: &Intent,
) -> Result<(), Failure> {
    let Some(Stored { approval, epoch }) = load(conn, id)? else {
        return Err(Failure::Fenced);
    };
    let mut next = approval;
    next.state = ApprovalState::Executing;
    next.execution = Some(intent.attempt_id.clone());
    let statement = update_where!("state = 'approved' AND claim_owner = ?8 AND claim_epoch = ?9");
    let extra: [&dyn ToSql; 2] = [&claim.owner, &ms(claim.epoch)];
    if !rewrite(conn, statement, &next, epoch, &extra)? {
        return Err(Failure::Fenced);
    }
    sql::insert_intent(conn, intent).map_err(key_failure)
}

/// Moves an approved or executing approval held under `claim` to finished with `result`,
/// and appends the execution's record.
pub(super) fn settle(
    conn: &Connection,
    id: &ApprovalId,
    claim: &Claim,
    result: &ActionResult,
    event: &AuditEvent,
    head: &mut Head,
) -> Result<Link, Failure> {
    let Some(Stored { approval, epoch }) = load(conn, id)? else {
        return Err(Failure::Fenced);
    };
    let mut next = approval;
    next.state = ApprovalState::Finished;
    next.result = Some(result.clone());
    let statement = update_where!(
        "state IN ('approved', 'executing') AND claim_owner = ?8 AND claim_epoch = ?9"
    );
    let extra: [&dyn ToSql; 2] = [&claim.owner, &ms(claim.epoch)];
    if !rewrite(conn, statement, &next, epoch, &extra)? {
        return Err(Failure::Fenced);
    }
    Ok(append(conn, event, head)?)
}

/// The approval with this id.
pub(super) fn get(conn: &Connection, id: &ApprovalId) -> rusqlite::Result<Option<Approval>> {
    Ok(load(conn, id)?.map(|s| s.approval))
}

/// The approvals `filter` selects, newest first (then by id, newest first).
pub(super) fn list(conn: &Connection, filter: &ApprovalFilter) -> rusqlite::Result<Vec<Approval>> {
    let mut conditions = Vec::new();
    let states: Vec<&str> = filter.states.iter().map(|s| s.as_str()).collect();
    let mut values: Vec<&dyn ToSql> = Vec::new();
    if !states.is_empty() {
        let marks = vec!["?"; states.len()].join(", ");
        conditions.push(format!("state IN ({marks})"));
        values.extend(states.iter().map(|s| s as &dyn ToSql));
    }
    if let Some(session) = &filter.session_id {
        conditions.push("session_id = ?".to_owned());
        values.push(session);
    }
    if let Some(fingerprint) = &filter.fingerprint {
        conditions.push("fingerprint = ?".to_owned());
        values.push(fingerprint);
    }
    let limit = filter
        .limit
        .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
    values.push(&limit);
    let mut statement = String::from("SELECT approval FROM approvals");
    if !conditions.is_empty() {
        statement.push_str(" WHERE ");
        statement.push_str(&conditions.join(" AND "));
    }
    statement.push_str(" ORDER BY created_at_ms DESC, approval_id DESC LIMIT ?");
    let mut stmt = conn.prepare_cached(&statement)?;
    let mut rows = stmt.query(params_from_iter(values))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(from_json(0, &row.get::<_, String>(0)?)?);
    }
    Ok(out)
}
