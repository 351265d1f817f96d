//! The approval store's SQL. Every change loads the approval's row inside the batch's
//! `BEGIN IMMEDIATE` transaction, applies the transition rule of [`Approval`] (the rules
//! every backend applies), and writes the row back, followed by its audit record in the same
//! transaction. SQLite's single writer makes the load and the write one step: no other
//! connection writes between them, so of two changes racing for one approval the second
//! finds the first's result. A change the rule refuses writes nothing. The columns are what
//! reads filter and order by; the `approval` column holds the whole [`Approval`] as JSON and
//! is rewritten with them on every change.

use rusqlite::types::{ToSql, Type};
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

use super::combine::Failure;
use super::statements::{self as sql, Head, Link, exec, key_failure};
use sallyport_kernel::approval::{
    Approval, ApprovalDecision, ApprovalFilter, ApprovalId, Claim, Transition,
};
use sallyport_kernel::journal::batch::ClaimRequest;
use sallyport_kernel::journal::{AuditEvent, Intent};
use sallyport_kernel::outcome::ActionResult;

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

/// Writes `next`, the approval a rule made of a row loaded in this transaction, over that
/// row (`epoch` is the claim epoch the row held, kept when `next` has no claim).
fn store(conn: &Connection, next: &Approval, epoch: u64) -> rusqlite::Result<()> {
    let json = to_json(next)?;
    let claim = next.claim.as_ref();
    conn.prepare_cached(
        "UPDATE approvals SET state = ?2, claim_owner = ?3, claim_epoch = ?4, \
         claim_until_ms = ?5, execution = ?6, approval = ?7 WHERE approval_id = ?1",
    )?
    .execute(params![
        next.approval_id.as_str(),
        next.state.as_str(),
        claim.map(|c| c.owner.as_str()),
        ms(claim.map_or(epoch, |c| c.epoch)),
        claim.map(|c| ms(c.until_ms)),
        next.execution.as_ref().map(|a| a.as_str()),
        json,
    ])?;
    Ok(())
}

/// Loads the approval `id`, applies `rule` to it and, if the rule changed it, stores it:
/// `Applied` with the approval as it is now, else `Unchanged` with it as it was.
fn transition(
    conn: &Connection,
    id: &ApprovalId,
    rule: impl FnOnce(&mut Approval) -> bool,
) -> rusqlite::Result<Transition> {
    let Some(Stored { approval, epoch }) = load(conn, id)? else {
        return Ok(Transition::NotFound);
    };
    let mut next = approval.clone();
    if !rule(&mut next) {
        return Ok(Transition::Unchanged(approval));
    }
    store(conn, &next, epoch)?;
    Ok(Transition::Applied(next))
}

/// Loads the approval `id` and applies `rule` to it; stores it when the rule changed it.
/// `Fenced` when there is no such approval or the rule refused (the claim was taken over).
fn fenced_change(
    conn: &Connection,
    id: &ApprovalId,
    rule: impl FnOnce(&mut Approval) -> bool,
) -> Result<(), Failure> {
    match transition(conn, id, rule)? {
        Transition::Applied(_) => Ok(()),
        _ => Err(Failure::Fenced),
    }
}

/// Appends `event` after `head` and closes its attempt (if it has a row), as `append` does.
fn append(conn: &Connection, event: &AuditEvent, head: &mut Head) -> rusqlite::Result<Link> {
    let record = sql::insert_record(conn, event, head)?;
    sql::close_attempt(conn, event)?;
    Ok(record)
}

/// Stores `approval` as parked ([`Approval::park`]: `awaiting`, whatever state it came with),
/// then appends the parked call's record.
pub(super) fn park(
    conn: &Connection,
    approval: &Approval,
    event: &AuditEvent,
    head: &mut Head,
) -> Result<Link, Failure> {
    let mut stored = approval.clone();
    stored.park();
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

/// Records `decision` as [`Approval::decide`] allows, and appends its record if it did.
pub(super) fn decide(
    conn: &Connection,
    id: &ApprovalId,
    decision: &ApprovalDecision,
    event: &AuditEvent,
    head: &mut Head,
) -> rusqlite::Result<Transition> {
    let transition = transition(conn, id, |a| a.decide(decision))?;
    if let Transition::Applied(_) = transition {
        append(conn, event, head)?;
    }
    Ok(transition)
}

/// Marks the approval expired as [`Approval::expire`] allows at `now_ms`, and appends its
/// record if it did.
pub(super) fn expire(
    conn: &Connection,
    id: &ApprovalId,
    now_ms: u64,
    event: &AuditEvent,
    head: &mut Head,
) -> rusqlite::Result<Transition> {
    let transition = transition(conn, id, |a| a.expire(now_ms))?;
    if let Transition::Applied(_) = transition {
        append(conn, event, head)?;
    }
    Ok(transition)
}

/// Claims the approval as [`Approval::take_claim`] allows (not audited).
pub(super) fn claim(conn: &Connection, request: &ClaimRequest) -> rusqlite::Result<Transition> {
    transition(conn, &request.id, |a| {
        a.take_claim(&request.owner, request.now_ms, request.lease_ms)
    })
}

/// Moves the approval held under `claim` to executing ([`Approval::begin_execution`]) and
/// writes its intent; `Fenced` if the claim was taken over.
pub(super) fn begin(
    conn: &Connection,
    id: &ApprovalId,
    claim: &Claim,
    intent: &Intent,
) -> Result<(), Failure> {
    fenced_change(conn, id, |a| a.begin_execution(claim, &intent.attempt_id))?;
    sql::insert_intent(conn, intent).map_err(key_failure)
}

/// Moves the approval held under `claim` to finished with `result` ([`Approval::settle`])
/// and appends the execution's record; `Fenced` if the claim was taken over.
pub(super) fn settle(
    conn: &Connection,
    id: &ApprovalId,
    claim: &Claim,
    result: &ActionResult,
    event: &AuditEvent,
    head: &mut Head,
) -> Result<Link, Failure> {
    fenced_change(conn, id, |a| a.settle(claim, result))?;
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
