//! The approval store: approvals as rows beside the chain, every change a compare-and-set
//! on the row locked `FOR UPDATE` (the new state decided by [`Approval`]'s transition
//! rules, the ones every backend applies), applied by the writer inside its batch so that the
//! change and its audit record commit together (or neither does), whichever process makes
//! it. Of two processes deciding one approval at once, the second finds it decided. Every
//! decision that changes an approval notifies channel `sallyport_approvals` in the same
//! transaction (`listen.rs` hears it).

use std::collections::HashMap;

use deadpool_postgres::Client;
use sallyport_core::approval::{Approval, ApprovalFilter, ApprovalId, Transition};
use sallyport_core::journal::JournalError;
use sallyport_core::journal::batch::{ApprovalWrite, ClaimRequest};

use crate::error::PostgresError;
use crate::shared::Shared;
use crate::sql;
use crate::writer::Done;

/// Why a change could not be applied (the batch then fails as a whole).
pub(crate) enum ApplyError {
    /// What PostgreSQL said.
    Postgres(tokio_postgres::Error),
    /// The approval could not be serialized.
    Serialize(serde_json::Error),
}

impl From<tokio_postgres::Error> for ApplyError {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Postgres(e)
    }
}

impl ApplyError {
    pub(crate) fn into_postgres(self, shared: &Shared) -> PostgresError {
        match self {
            Self::Postgres(e) => shared.redactor.postgres(&e),
            Self::Serialize(e) => PostgresError::own(format!("cannot serialize an approval: {e}")),
        }
    }
}

fn body(approval: &Approval) -> Result<String, ApplyError> {
    serde_json::to_string(approval).map_err(ApplyError::Serialize)
}

fn parse(body: &str) -> Option<Approval> {
    serde_json::from_str(body).ok()
}

/// The approval as it stands, locked for the rest of the batch's transaction.
async fn locked(tx: &Client, id: &ApprovalId) -> Result<Option<Approval>, tokio_postgres::Error> {
    Ok(tx
        .query_opt(sql::LOCK_APPROVAL, &[&id.as_str()])
        .await?
        .and_then(|row| parse(&row.get::<_, String>(0))))
}

async fn store(tx: &Client, approval: &Approval) -> Result<(), ApplyError> {
    tx.execute(
        sql::UPDATE_APPROVAL,
        &[
            &approval.approval_id.as_str(),
            &approval.state.as_str(),
            &body(approval)?,
        ],
    )
    .await?;
    Ok(())
}

/// Notifies the approval listeners that `id` was decided (see `listen.rs`).
async fn notify(tx: &Client, id: &ApprovalId) -> Result<(), tokio_postgres::Error> {
    let statement = tx.prepare_cached(sql::NOTIFY_DECISION).await?;
    tx.execute(&statement, &[&id.as_str()]).await?;
    Ok(())
}

fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Applies one change inside the batch's transaction.
pub(crate) async fn apply(
    shared: &Shared,
    tx: &Client,
    op: &ApprovalWrite,
    epochs: &HashMap<String, i64>,
    lease_ms: i64,
    at: &String,
) -> Result<Done, ApplyError> {
    let transition = |t: Transition, appends: bool| Done::Transition(Box::new(t), appends);
    match op {
        ApprovalWrite::Park(approval, ..) => {
            let mut approval = (**approval).clone();
            approval.park();
            let inserted = tx
                .query(
                    sql::INSERT_APPROVAL,
                    &[
                        &approval.approval_id.as_str(),
                        &approval.state.as_str(),
                        &approval.session.id().as_str(),
                        &approval.fingerprint,
                        &ms(approval.created_at_ms),
                        &body(&approval)?,
                    ],
                )
                .await?;
            Ok(if inserted.is_empty() {
                Done::Duplicate
            } else {
                transition(Transition::Applied(approval), true)
            })
        }
        ApprovalWrite::Decide(id, decision, ..) => {
            let Some(mut current) = locked(tx, id).await? else {
                return Ok(transition(Transition::NotFound, false));
            };
            if !current.decide(decision) {
                return Ok(transition(Transition::Unchanged(current), false));
            }
            // The row and the notification in one flight; the notification leaves with
            // the commit (and not at all if the batch rolls back).
            let (stored, notified) = futures_util::join!(store(tx, &current), notify(tx, id));
            stored?;
            notified?;
            Ok(transition(Transition::Applied(current), true))
        }
        ApprovalWrite::Expire(id, now_ms, ..) => {
            let Some(mut current) = locked(tx, id).await? else {
                return Ok(transition(Transition::NotFound, false));
            };
            if !current.expire(*now_ms) {
                return Ok(transition(Transition::Unchanged(current), false));
            }
            store(tx, &current).await?;
            Ok(transition(Transition::Applied(current), true))
        }
        ApprovalWrite::Claim(request, _) => {
            let ClaimRequest {
                id,
                owner,
                now_ms,
                lease_ms,
            } = &**request;
            let Some(mut current) = locked(tx, id).await? else {
                return Ok(transition(Transition::NotFound, false));
            };
            if !current.take_claim(owner, *now_ms, *lease_ms) {
                return Ok(transition(Transition::Unchanged(current), false));
            }
            store(tx, &current).await?;
            Ok(transition(Transition::Applied(current), false))
        }
        ApprovalWrite::Begin(id, claim, intent, _) => {
            let Some(mut current) = locked(tx, id).await? else {
                return Ok(Done::Fenced);
            };
            if !current.begin_execution(claim, &intent.attempt_id) {
                return Ok(Done::Fenced);
            }
            let inserted = tx
                .query(
                    sql::INSERT_INTENT,
                    &[
                        &intent.attempt_id.as_str(),
                        &intent.action,
                        &intent.session_id,
                        &intent.idempotency_key.as_str(),
                        &intent.fingerprint,
                        &intent.definition_hash,
                        &intent.effect.as_str(),
                        &intent.arguments.to_string(),
                        at,
                        &shared.owner,
                        &lease_ms,
                    ],
                )
                .await?;
            if inserted.is_empty() {
                return Ok(Done::Duplicate);
            }
            store(tx, &current).await?;
            Ok(Done::Written)
        }
        ApprovalWrite::Settle(id, claim, result, event, _) => {
            let Some(mut current) = locked(tx, id).await? else {
                return Ok(Done::Fenced);
            };
            if !current.settle(claim, result) {
                return Ok(Done::Fenced);
            }
            // The execution's attempt (if its intent was written) closes with the record,
            // fenced like any append.
            let epoch = epochs.get(event.attempt_id.as_str()).copied();
            let closed = tx
                .query(
                    sql::CLOSE_ATTEMPT,
                    &[
                        &event.attempt_id.as_str(),
                        &event.phase.as_str(),
                        &event.status.as_str(),
                        &i64::from(event.dispatches),
                        at,
                        &epoch,
                    ],
                )
                .await?;
            if closed.is_empty() && epoch.is_some() {
                return Ok(Done::Fenced);
            }
            store(tx, &current).await?;
            Ok(transition(Transition::Applied(current), true))
        }
    }
}

/// The approval with this id.
pub(crate) async fn approval(
    shared: &Shared,
    id: &ApprovalId,
) -> Result<Option<Approval>, JournalError> {
    let read_failed = |e| JournalError::Read(Box::new(e));
    let client = shared
        .pool
        .get()
        .await
        .map_err(|e| read_failed(shared.redactor.other(&e)))?;
    let row = client
        .query_opt(sql::APPROVAL, &[&id.as_str()])
        .await
        .map_err(|e| read_failed(shared.redactor.postgres(&e)))?;
    row.map(|row| {
        parse(&row.get::<_, String>(0)).ok_or_else(|| {
            read_failed(PostgresError::own(format!(
                "approval {id} is stored in a form this build cannot read"
            )))
        })
    })
    .transpose()
}

/// The approvals `filter` selects, newest first.
pub(crate) async fn approvals(
    shared: &Shared,
    filter: &ApprovalFilter,
) -> Result<Vec<Approval>, JournalError> {
    let read_failed = |e| JournalError::Read(Box::new(e));
    let client = shared
        .pool
        .get()
        .await
        .map_err(|e| read_failed(shared.redactor.other(&e)))?;
    let states: Vec<String> = filter
        .states
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect();
    let states = (!states.is_empty()).then_some(states);
    let limit = filter.limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
    let rows = client
        .query(
            sql::APPROVALS,
            &[&states, &filter.session_id, &filter.fingerprint, &limit],
        )
        .await
        .map_err(|e| read_failed(shared.redactor.postgres(&e)))?;
    rows.iter()
        .map(|row| {
            parse(&row.get::<_, String>(0)).ok_or_else(|| {
                read_failed(PostgresError::own(
                    "an approval is stored in a form this build cannot read",
                ))
            })
        })
        .collect()
}
