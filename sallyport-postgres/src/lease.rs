//! Leases and fencing: the heartbeat that keeps this journal's in-flight attempts leased,
//! and the takeover of attempts whose owner stopped renewing.
//!
//! Every attempt row names its `owner`, a `lease_until` (the server's clock, so processes
//! on machines whose clocks differ agree) and a fencing `epoch`, 1 when the intent is
//! written. A journal closes an attempt only at the epoch it holds it at; taking an
//! expired attempt over raises the epoch, so the old owner, should it wake up, is refused
//! with [`JournalError::Fenced`] and its outcome never enters the chain.

use std::sync::{Arc, Weak};
use std::time::Duration;

use sallyport_core::journal::{JournalError, UnresolvedAttempt};

use crate::reads::unresolved_attempt;
use crate::shared::Shared;
use crate::sql;

/// An unresolved attempt taken over by [`crate::PostgresJournal::claim_expired`]: the
/// claiming journal now holds its lease and may close it (with the reconcile action's
/// evidence); its previous owner may not.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ClaimedAttempt {
    /// The attempt, as [`sallyport_core::journal::Journal::unresolved`] lists it.
    pub attempt: UnresolvedAttempt,
    /// The fencing epoch the claim raised it to.
    pub epoch: u64,
    /// The owner whose lease had expired.
    pub previous_owner: String,
}

/// Renews this journal's leases every `every` until the journal is dropped.
pub(crate) async fn heartbeat(shared: Weak<Shared>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if let Err(e) = renew(&shared).await {
            tracing::warn!(owner = %shared.owner, error = %e, "lease renewal failed");
        }
    }
}

/// Renews the lease of every attempt this journal holds; returns how many rows it renewed.
pub(crate) async fn renew(shared: &Shared) -> Result<u64, JournalError> {
    let ids = shared.in_flight();
    if ids.is_empty() {
        return Ok(0);
    }
    let client = shared
        .pool
        .get()
        .await
        .map_err(|e| JournalError::Write(Box::new(shared.redactor.other(&e))))?;
    client
        .execute(
            sql::RENEW_LEASES,
            &[&shared.owner, &shared.lease_ms(), &ids],
        )
        .await
        .map_err(|e| JournalError::Write(Box::new(shared.redactor.postgres(&e))))
}

/// Ends this journal's lease on `attempt` (held at `epoch`) at once, if the attempt is still
/// open; returns whether a row changed.
pub(crate) async fn release(
    shared: &Shared,
    attempt: &str,
    epoch: i64,
) -> Result<bool, JournalError> {
    let client = shared
        .pool
        .get()
        .await
        .map_err(|e| JournalError::Write(Box::new(shared.redactor.other(&e))))?;
    let released = client
        .execute(sql::RELEASE_LEASE, &[&attempt, &shared.owner, &epoch])
        .await
        .map_err(|e| JournalError::Write(Box::new(shared.redactor.postgres(&e))))?;
    Ok(released > 0)
}

/// Takes over up to `limit` expired attempts for this journal.
pub(crate) async fn claim_expired(
    shared: &Arc<Shared>,
    limit: usize,
) -> Result<Vec<ClaimedAttempt>, JournalError> {
    let write_failed = |e| JournalError::Write(Box::new(e));
    let client = shared
        .pool
        .get()
        .await
        .map_err(|e| write_failed(shared.redactor.other(&e)))?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = client
        .query(
            sql::CLAIM_EXPIRED,
            &[&shared.owner, &shared.lease_ms(), &limit],
        )
        .await
        .map_err(|e| write_failed(shared.redactor.postgres(&e)))?;
    let claimed: Vec<ClaimedAttempt> = rows
        .iter()
        .map(|row| ClaimedAttempt {
            attempt: unresolved_attempt(row),
            epoch: u64::try_from(row.get::<_, i64>(8)).unwrap_or(0),
            previous_owner: row.get(9),
        })
        .collect();
    shared.update_epochs(
        claimed
            .iter()
            .map(|c| {
                (
                    c.attempt.attempt_id.as_str().to_owned(),
                    Some(c.epoch.cast_signed()),
                )
            })
            .collect(),
    );
    Ok(claimed)
}
