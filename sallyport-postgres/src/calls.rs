//! The policy's call counts in the database, shared by every executor process on it
//! ([`sallyport_core::policy::calls`]).
//!
//! One row per call a policy let through (`sallyport_policy_calls`, migration 3). Deciding
//! is one transaction that first takes a transaction-scoped advisory lock on the session
//! (`pg_advisory_xact_lock(class, hashtext(session_id))`): every process deciding a call of
//! that session waits for it, reads the counts only once it holds it, and sees every call
//! counted before (the previous holder's row is committed when its lock is let go). The lock
//! is per session, not per (session, action), so a rule across actions ("3 commitments an
//! hour", "read before delete") is as exact as a limit on one action; sessions never wait on
//! each other (two sessions whose ids hash alike share a lock, and only wait).
//!
//! The transaction costs three round trips: `BEGIN`; the lock, the counts and the recent
//! calls, pipelined; the insert, the deletion of rows a day old and `COMMIT`, pipelined.
//! The lock is held from the second to the end of the third. Its commit does not wait for
//! the server's WAL flush (`synchronous_commit` off, unlike the journal's records): other
//! processes see it at once; a crash of the server itself may forget the last calls counted
//! (within three WAL-writer delays, 600 ms by default), never a call's journal record.

use std::sync::Arc;

use async_trait::async_trait;
use sallyport_core::action::{EffectClass, ScopedValue};
use sallyport_core::journal::{AttemptId, JournalError};
use sallyport_core::outcome::Status;
use sallyport_core::policy::calls::{CallQuery, CallStore, Decide};
use sallyport_core::policy::{
    CallCounts, EffectCounts, PolicyDecision, PolicyVerdict, RecentCall, SessionCalls,
};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::shared::Shared;

/// The first key of the session locks (`'calls'` in ASCII), so they never meet another
/// advisory lock of the application's.
const LOCK_CLASS: i32 = 0x63_61_6c_6c;

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 86_400_000;

const BEGIN: &str = "BEGIN; SET LOCAL synchronous_commit TO off";

const LOCK: &str = "SELECT pg_advisory_xact_lock($1, hashtext($2))";

/// The counts of the session's calls within the day, by (same action, effect).
const COUNTS: &str = "
SELECT action = $2, effect,
       count(*) FILTER (WHERE at_ms > $3), count(*) FILTER (WHERE at_ms > $4), count(*)
FROM sallyport_policy_calls
WHERE session_id = $1 AND at_ms > $5 AND attempt_id <> $6
GROUP BY 1, 2";

/// The session's newest calls within the day.
const RECENT: &str = "
SELECT attempt_id, action, effect, objects, status, at_ms
FROM sallyport_policy_calls
WHERE session_id = $1 AND at_ms > $2 AND attempt_id <> $3
ORDER BY at_ms DESC, attempt_id DESC
LIMIT $4";

const INSERT: &str = "
INSERT INTO sallyport_policy_calls (attempt_id, session_id, action, effect, objects, at_ms)
VALUES ($1, $2, $3, $4, $5, $6)";

/// Rows a day old or older.
const FORGET: &str = "DELETE FROM sallyport_policy_calls WHERE at_ms <= $1";

const SETTLE: &str = "UPDATE sallyport_policy_calls SET status = $2 WHERE attempt_id = $1";

/// The journal's call store.
pub(crate) struct PgCallStore {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for PgCallStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCallStore")
            .field("target", &self.shared.target)
            .finish_non_exhaustive()
    }
}

impl PgCallStore {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn failed(&self, e: &tokio_postgres::Error) -> JournalError {
        JournalError::Read(Box::new(self.shared.redactor.postgres(e)))
    }
}

/// Milliseconds as the table stores them.
fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn add(to: &mut CallCounts, more: CallCounts) {
    to.minute += more.minute;
    to.hour += more.hour;
    to.day += more.day;
}

/// A stored effect; one no build writes counts as the most dangerous class.
fn effect(name: &str) -> EffectClass {
    EffectClass::parse(name).unwrap_or(EffectClass::IrreversibleOrBroad)
}

/// One row of [`RECENT`].
fn recent_call(row: &Row) -> RecentCall {
    let objects: Vec<ScopedValue> = serde_json::from_str(row.get::<_, &str>(3)).unwrap_or_default();
    let call = RecentCall::new(
        AttemptId::from_stored(row.get::<_, String>(0)),
        row.get::<_, String>(1),
        effect(row.get::<_, &str>(2)),
        objects,
        row.get::<_, i64>(5).unsigned_abs(),
    );
    match row.get::<_, Option<&str>>(4).and_then(Status::parse) {
        Some(status) => call.with_status(status),
        None => call,
    }
}

#[async_trait]
impl CallStore for PgCallStore {
    async fn decide_and_count(
        &self,
        query: &CallQuery<'_>,
        decide: &mut Decide<'_>,
    ) -> Result<PolicyDecision, JournalError> {
        let shared = &self.shared;
        let client = shared
            .pool
            .get()
            .await
            .map_err(|e| JournalError::Read(Box::new(shared.redactor.other(&e))))?;
        let now = ms(query.now_ms);
        let except = query.except.map_or("", AttemptId::as_str);
        let limit = i64::try_from(query.recent).unwrap_or(i64::MAX);
        // Every statement prepared (cached per connection) before the lock is taken.
        let (lock, counts, recent, insert, forget) = futures_util::try_join!(
            client.prepare_cached(LOCK),
            client.prepare_cached(COUNTS),
            client.prepare_cached(RECENT),
            client.prepare_cached(INSERT),
            client.prepare_cached(FORGET),
        )
        .map_err(|e| self.failed(&e))?;
        client
            .batch_execute(BEGIN)
            .await
            .map_err(|e| self.failed(&e))?;
        // From here on, a failure leaves the transaction open: it is rolled back, and a
        // connection that cannot even do that is not put back in the pool.
        let (minute_ago, hour_ago, day_ago) = (now - MINUTE_MS, now - HOUR_MS, now - DAY_MS);
        let lock_params: [&(dyn ToSql + Sync); 2] = [&LOCK_CLASS, &query.session];
        let count_params: [&(dyn ToSql + Sync); 6] = [
            &query.session,
            &query.action,
            &minute_ago,
            &hour_ago,
            &day_ago,
            &except,
        ];
        let recent_params: [&(dyn ToSql + Sync); 4] = [&query.session, &day_ago, &except, &limit];
        let decided = async {
            let (_, count_rows, recent_rows) = futures_util::try_join!(
                client.execute(&lock, &lock_params),
                client.query(&counts, &count_params),
                async {
                    if limit > 0 {
                        client.query(&recent, &recent_params).await
                    } else {
                        Ok(Vec::new())
                    }
                },
            )?;
            let mut action = CallCounts::default();
            let mut by_effect = EffectCounts::default();
            let mut total: u64 = 0;
            for row in &count_rows {
                let tally = CallCounts::new(
                    row.get::<_, i64>(2).unsigned_abs(),
                    row.get::<_, i64>(3).unsigned_abs(),
                    row.get::<_, i64>(4).unsigned_abs(),
                );
                total += tally.day;
                if row.get::<_, bool>(0) {
                    add(&mut action, tally);
                }
                add(by_effect.of_mut(effect(row.get::<_, &str>(1))), tally);
            }
            let recent: Vec<RecentCall> = recent_rows.iter().map(recent_call).collect();
            let complete = total <= u64::try_from(recent.len()).unwrap_or(u64::MAX);
            let decision = decide(action, &SessionCalls::new(by_effect, recent, complete));
            match query.record {
                Some(attempt) if decision.verdict != PolicyVerdict::Deny => {
                    let objects = serde_json::to_string(query.objects).unwrap_or_default();
                    let (attempt, effect) = (attempt.as_str(), query.effect.as_str());
                    let insert_params: [&(dyn ToSql + Sync); 6] = [
                        &attempt,
                        &query.session,
                        &query.action,
                        &effect,
                        &objects,
                        &now,
                    ];
                    let forget_params: [&(dyn ToSql + Sync); 1] = [&day_ago];
                    futures_util::try_join!(
                        client.execute(&insert, &insert_params),
                        client.execute(&forget, &forget_params),
                        client.batch_execute("COMMIT"),
                    )?;
                }
                _ => client.batch_execute("COMMIT").await?,
            }
            Ok::<_, tokio_postgres::Error>(decision)
        }
        .await;
        match decided {
            Ok(decision) => Ok(decision),
            Err(e) => {
                if client.batch_execute("ROLLBACK").await.is_err() {
                    let _ = deadpool_postgres::Object::take(client);
                }
                Err(self.failed(&e))
            }
        }
    }

    async fn settle(
        &self,
        _session: &str,
        attempt: &AttemptId,
        status: Status,
    ) -> Result<(), JournalError> {
        let shared = &self.shared;
        let client = shared
            .pool
            .get()
            .await
            .map_err(|e| JournalError::Write(Box::new(shared.redactor.other(&e))))?;
        let write_failed = |e: tokio_postgres::Error| -> JournalError {
            JournalError::Write(Box::new(shared.redactor.postgres(&e)))
        };
        let statement = client.prepare_cached(SETTLE).await.map_err(write_failed)?;
        // One flight, committed without waiting for the WAL flush (as the counts are).
        let (attempt, status) = (attempt.as_str(), status.as_str());
        let params: [&(dyn ToSql + Sync); 2] = [&attempt, &status];
        let settled = futures_util::try_join!(
            client.batch_execute(BEGIN),
            client.execute(&statement, &params),
            client.batch_execute("COMMIT"),
        );
        if let Err(e) = settled {
            if client.batch_execute("ROLLBACK").await.is_err() {
                let _ = deadpool_postgres::Object::take(client);
            }
            return Err(write_failed(e));
        }
        Ok(())
    }
}
