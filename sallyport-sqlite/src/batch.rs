//! The writing connection: one transaction per batch of writes, with a savepoint pass when
//! one write fails, the head signed inside the batch, and the sync level the batch needs.

use std::cell::Cell;
use std::ffi::c_int;

use rusqlite::Connection;
use rusqlite::hooks::Wal;

use super::approvals;
use super::combine::{Done, Failure, Read, fail_all, failed, reply_all};
use super::statements::{self as sql, Head, exec, key_failure};
use sallyport_kernel::clock::now;
use sallyport_kernel::journal::batch::{ApprovalWrite, Write};
use sallyport_kernel::journal::signing::HeadSigningKey;
use sallyport_kernel::journal::{ChainHead, GENESIS_HASH, JournalError};

/// Most operations applied in one transaction.
pub const MAX_BATCH: usize = 512;

/// WAL pages after which a commit asks the journal thread for a checkpoint: SQLite's own
/// automatic checkpoint threshold.
const CHECKPOINT_PAGES: c_int = 1000;

thread_local! {
    /// The WAL's size in pages after the last commit on this thread, as SQLite's WAL hook
    /// reports it (the hook runs inside `COMMIT`, on the committing thread).
    static WAL_PAGES: Cell<c_int> = const { Cell::new(0) };
}

/// The writer's WAL hook. Registering it replaces SQLite's automatic checkpoint, which would
/// otherwise run inside whichever commit crosses the threshold: one call in a few hundred
/// would copy a thousand pages back into the database (and, on a disk, fsync twice) before
/// its answer.
#[allow(
    clippy::unnecessary_wraps,
    reason = "the hook's signature is rusqlite's"
)]
fn note_wal_pages(_wal: &Wal, pages: c_int) -> rusqlite::Result<()> {
    WAL_PAGES.set(pages);
    Ok(())
}

/// The one connection that writes, and what it needs to write batches.
pub(super) struct Writer {
    pub(super) conn: Connection,
    full_sync: bool,
    /// Signs the head at the end of every batch that appends.
    signing_key: Option<HeadSigningKey>,
    /// Whether checkpoints are left to the journal thread (see [`Writer::new`]).
    checkpoints_apart: bool,
    /// Set by a commit that left the WAL at [`CHECKPOINT_PAGES`] or more; taken by
    /// [`Writer::take_checkpoint_ask`].
    checkpoint_asked: bool,
}

impl Writer {
    /// With `checkpoints_apart`, commits never checkpoint: a commit that leaves the WAL past
    /// [`CHECKPOINT_PAGES`] asks for one instead, which the journal thread makes on a
    /// connection of its own, beside this connection's writes (see `Shared::run`). Without
    /// it, SQLite checkpoints inside commits, as by default.
    pub(super) fn new(
        conn: Connection,
        signing_key: Option<HeadSigningKey>,
        checkpoints_apart: bool,
    ) -> Self {
        if checkpoints_apart {
            conn.wal_hook(Some(note_wal_pages));
        }
        Self {
            conn,
            full_sync: false,
            signing_key,
            checkpoints_apart,
            checkpoint_asked: false,
        }
    }

    /// Whether a commit since the last call asked for a checkpoint.
    pub(super) fn take_checkpoint_ask(&mut self) -> bool {
        std::mem::take(&mut self.checkpoint_asked)
    }

    /// Commits the open transaction, noting whether the WAL now needs a checkpoint.
    fn commit(&mut self) -> rusqlite::Result<()> {
        exec(&self.conn, "COMMIT", [])?;
        if self.checkpoints_apart && WAL_PAGES.replace(0) >= CHECKPOINT_PAGES {
            self.checkpoint_asked = true;
        }
        Ok(())
    }

    /// Applies writes in transactions of at most [`MAX_BATCH`] operations.
    pub(super) fn write_all(&mut self, mut ops: Vec<Write>) {
        while ops.len() > MAX_BATCH {
            let rest = ops.split_off(MAX_BATCH);
            self.write_batch(ops);
            ops = rest;
        }
        if !ops.is_empty() {
            self.write_batch(ops);
        }
    }

    fn set_sync(&mut self, full: bool) -> rusqlite::Result<()> {
        if self.full_sync != full {
            self.conn
                .pragma_update(None, "synchronous", if full { "FULL" } else { "NORMAL" })?;
            self.full_sync = full;
        }
        Ok(())
    }

    /// Opens the batch's transaction and reads the chain head it extends.
    fn begin(&self, ops: &[Write]) -> rusqlite::Result<Head> {
        exec(&self.conn, "BEGIN IMMEDIATE", [])?;
        // Only appends extend the chain; a batch of intents does not need its head.
        if ops.iter().any(Write::appends) {
            sql::head(&self.conn).inspect_err(|_| {
                let _ = exec(&self.conn, "ROLLBACK", []);
            })
        } else {
            Ok((0, GENESIS_HASH.to_owned()))
        }
    }

    /// One transaction for the whole batch.
    ///
    /// The batch first runs as plain statements: two fewer statements an operation than a
    /// savepoint around each. If an operation fails (rare: a duplicate key, a full disk), the
    /// transaction is rolled back and the batch runs again with a savepoint around each
    /// operation, so one bad operation does not take the others down. A batch of one never
    /// needs the second pass: its failure rolls back the transaction. If SQLite rolls the
    /// transaction back by itself (it may on a full disk or an I/O error), every operation of
    /// the batch is answered as failed, which is what the file then holds.
    pub(super) fn write_batch(&mut self, ops: Vec<Write>) {
        let durable = ops.iter().any(Write::has_durable_intent);
        let begun = self.set_sync(durable).and_then(|()| self.begin(&ops));
        let mut head = match begun {
            Ok(head) => head,
            Err(e) => {
                fail_all(ops, &e.into());
                return;
            }
        };
        let mut start = head.0;
        // First pass: plain statements, stopping at the first failure.
        let mut done: Vec<Done> = Vec::with_capacity(ops.len());
        for op in &ops {
            let outcome = self.apply(op, &mut head);
            let failed = outcome.failed();
            done.push(outcome);
            if failed {
                break;
            }
        }
        if done.last().is_some_and(Done::failed) {
            self.rollback();
            if ops.len() == 1 {
                reply_all(ops, done);
                return;
            }
            // The rollback undid the first pass, so the head read again is the batch's start.
            head = match self.begin(&ops) {
                Ok(head) => head,
                Err(e) => {
                    fail_all(ops, &e.into());
                    return;
                }
            };
            start = head.0;
            done.clear();
            for op in &ops {
                let outcome = self.apply_isolated(op, &mut head);
                if outcome.failed() && self.conn.is_autocommit() {
                    // SQLite rolled the whole transaction back itself (it may, on a full disk
                    // or an I/O error), so nothing of this batch is written, and a further
                    // statement would commit on its own. Every operation fails.
                    let cause = outcome.cause();
                    fail_all(ops, &cause);
                    return;
                }
                done.push(outcome);
            }
        }
        // The batch's records are signed in its own transaction: no commit leaves a record
        // the key should have signed unsigned.
        if head.0 > start
            && let Err(e) = self.sign_head(&head)
        {
            self.rollback();
            fail_all(ops, &e.into());
            return;
        }
        if let Err(e) = self.commit() {
            self.rollback();
            fail_all(ops, &e.into());
            return;
        }
        reply_all(ops, done);
    }

    /// Stores the head signed with the journal's key, if it has one.
    fn sign_head(&self, head: &Head) -> rusqlite::Result<()> {
        let Some(key) = &self.signing_key else {
            return Ok(());
        };
        let signed = key.sign(
            &ChainHead {
                count: head.0,
                hash: head.1.clone(),
            },
            now(),
        );
        sql::insert_head(&self.conn, &signed)
    }

    /// Rolls back the open transaction, if SQLite has not already done so.
    fn rollback(&self) {
        if !self.conn.is_autocommit() {
            let _ = exec(&self.conn, "ROLLBACK", []);
        }
    }

    /// Applies one write inside a savepoint, so its failure leaves the rest of the batch.
    fn apply_isolated(&self, op: &Write, head: &mut Head) -> Done {
        if let Err(e) = exec(&self.conn, "SAVEPOINT op", []) {
            return failed(op, &e.into());
        }
        let before = head.clone();
        let outcome = self.apply(op, head);
        if outcome.failed() {
            let _ = exec(&self.conn, "ROLLBACK TO op", []);
            *head = before;
        }
        let _ = exec(&self.conn, "RELEASE op", []);
        outcome
    }

    /// Applies one write to the open transaction.
    fn apply(&self, op: &Write, head: &mut Head) -> Done {
        let conn = &self.conn;
        match op {
            Write::Intent(intent, _) => {
                Done::Intent(sql::insert_intent(conn, intent).map_err(key_failure))
            }
            Write::Dispatch(attempt, n) => {
                Done::Nothing(sql::note_dispatch(conn, attempt, *n).map_err(Failure::from))
            }
            Write::Append(event, _) => Done::Record(Box::new(
                sql::insert_record(conn, event, head)
                    .and_then(|record| sql::close_attempt(conn, event).map(|()| record))
                    .map_err(Failure::from),
            )),
            // The attempt row goes in first: a clashing key fails before the chain moves.
            Write::Observe(intent, event, _) => Done::Record(Box::new(
                sql::insert_closed_attempt(conn, intent, event)
                    .map_err(key_failure)
                    .and_then(|()| sql::insert_record(conn, event, head).map_err(Failure::from)),
            )),
            Write::Approval(change) => self.change_approval(change, head),
            Write::SettleUnresolved(attempt, event, _) => Done::Settled(
                sql::settle_unresolved(conn, attempt, event, head).map_err(Failure::from),
            ),
        }
    }

    /// Applies one change to the approval store to the open transaction.
    fn change_approval(&self, change: &ApprovalWrite, head: &mut Head) -> Done {
        let conn = &self.conn;
        match change {
            ApprovalWrite::Park(approval, event, _) => {
                Done::Record(Box::new(approvals::park(conn, approval, event, head)))
            }
            ApprovalWrite::Decide(id, decision, event, _) => Done::Transition(Box::new(
                approvals::decide(conn, id, decision, event, head).map_err(Failure::from),
            )),
            ApprovalWrite::Expire(id, now_ms, event, _) => Done::Transition(Box::new(
                approvals::expire(conn, id, *now_ms, event, head).map_err(Failure::from),
            )),
            ApprovalWrite::Claim(request, _) => Done::Transition(Box::new(
                approvals::claim(conn, request).map_err(Failure::from),
            )),
            ApprovalWrite::Begin(id, claim, intent, _) => {
                Done::Intent(approvals::begin(conn, id, claim, intent))
            }
            ApprovalWrite::Settle(id, claim, result, event, _) => Done::Record(Box::new(
                approvals::settle(conn, id, claim, result, event, head),
            )),
        }
    }

    /// Answers a read (on the journal thread, between batches).
    pub(super) fn read(&self, op: Read) {
        let conn = &self.conn;
        match op {
            Read::Verify(reply) => {
                let report = self.snapshot(|| sql::check_chain(conn).map(|c| c.into_report()));
                let _ = reply.send(report.map_err(read_failed));
            }
            Read::VerifySigned(key, reply) => {
                let report = self.snapshot(|| {
                    let heads = sql::heads(conn)?;
                    let checkpoints = super::checkpoints::list(conn)?;
                    let mut check = sql::check_chain(conn)?;
                    check.check_signed(&heads, &checkpoints, &key);
                    Ok(check.into_report())
                });
                let _ = reply.send(report.map_err(read_failed));
            }
            Read::Heads(reply) => {
                let _ = reply.send(sql::heads(conn).map_err(read_failed));
            }
            Read::Records(reply) => {
                let _ = reply.send(sql::records(conn).map_err(read_failed));
            }
            Read::ChainRows(reply) => {
                let _ = reply.send(sql::chain_rows(conn).map_err(read_failed));
            }
            Read::Checkpoints(reply) => {
                let _ = reply.send(super::checkpoints::list(conn).map_err(read_failed));
            }
            Read::Anchors(reply) => {
                let _ = reply.send(super::anchors::list(conn).map_err(read_failed));
            }
            Read::Unresolved(reply) => {
                let open = self.snapshot(|| sql::unresolved(conn));
                let _ = reply.send(open.map_err(read_failed));
            }
            Read::Approval(id, reply) => {
                let found = approvals::get(conn, &id);
                let _ = reply.send(found.map_err(read_failed));
            }
            Read::Approvals(filter, reply) => {
                let listed = approvals::list(conn, &filter);
                let _ = reply.send(listed.map_err(read_failed));
            }
        }
    }

    /// Runs `read` in one read transaction, so a writer in another process cannot change the
    /// file between its queries.
    fn snapshot<T>(&self, read: impl FnOnce() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
        exec(&self.conn, "BEGIN", [])?;
        let out = read();
        self.rollback();
        out
    }
}

fn read_failed(e: rusqlite::Error) -> JournalError {
    JournalError::Read(Box::new(e))
}
