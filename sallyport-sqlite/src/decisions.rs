//! Decisions reach a waiting worker within a few milliseconds
//! ([`ApprovalStore::watch_decisions`](sallyport_kernel::journal::ApprovalStore::watch_decisions)).
//!
//! While some worker watches, a thread with a connection of its own reads
//! `PRAGMA data_version` every poll interval (5 ms by default). SQLite changes that number
//! whenever another connection, in this process or another one, commits to the file, and
//! reading it touches only the WAL index in shared memory: no table is read while nothing
//! changes. When it changed, the thread reads the ids of the approved calls (one indexed
//! read) and wakes the watches if one of them is new: a decision that approved a call, not
//! every audit record or intent, costs the worker a listing. The first poll compares with
//! an empty set, so a call approved before the watch was made wakes it once.
//!
//! A file watch (inotify) was the other way: it needs a dependency, is told of every write
//! to the WAL (so it would read the approved calls just as often), and says nothing for a
//! file on a network filesystem, where the poll still works.
//!
//! The thread starts with the first watch and stops when no watch is left; a journal no
//! worker watches (the CLI's, a console's) polls nothing.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use sallyport_kernel::journal::{DecisionSignal, DecisionWatch};

/// The default poll interval of `SqliteJournalBuilder::decision_poll`.
pub(crate) const DEFAULT_POLL: Duration = Duration::from_millis(5);

/// The journal's watches and the thread that polls for them.
#[derive(Debug)]
pub(crate) struct DecisionPoller {
    path: PathBuf,
    every: Duration,
    busy_timeout: Duration,
    signal: DecisionSignal,
    /// Whether the polling thread runs; held while a watch is made and while the thread
    /// decides to stop, so a new watch never finds a thread about to stop.
    running: Mutex<bool>,
}

/// What the last poll saw.
#[derive(Default)]
struct Seen {
    /// `PRAGMA data_version` as last read (`None` before the first read on a connection).
    version: Option<i64>,
    /// The approved calls' ids as last read.
    approved: HashSet<String>,
}

impl DecisionPoller {
    pub(crate) fn new(path: PathBuf, every: Duration, busy_timeout: Duration) -> Self {
        Self {
            path,
            every: every.max(Duration::from_millis(1)),
            busy_timeout,
            signal: DecisionSignal::new(),
            running: Mutex::new(false),
        }
    }

    /// `running`; it holds one flag, so a poisoned lock is taken over.
    pub(crate) fn running(&self) -> MutexGuard<'_, bool> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new watch, starting the polling thread if it does not run. A thread that cannot
    /// be started leaves a watch that sleeps (the worker then polls at its interval).
    pub(crate) fn watch(self: &Arc<Self>) -> DecisionWatch {
        let mut running = self.running();
        let watch = self.signal.watch();
        if !*running {
            let poller = Arc::clone(self);
            match thread::Builder::new()
                .name("sallyport-decisions".into())
                .spawn(move || poller.run())
            {
                Ok(_) => *running = true,
                Err(e) => {
                    tracing::warn!(error = %e, "no decision poller; the approval worker polls at its interval");
                    return DecisionWatch::sleeping();
                }
            }
        }
        watch
    }

    /// Polls until no watch is left.
    fn run(&self) {
        let mut conn: Option<Connection> = None;
        let mut seen = Seen::default();
        let mut failing = false;
        loop {
            {
                let mut running = self.running();
                if self.signal.watchers() == 0 {
                    *running = false;
                    return;
                }
            }
            match self.poll(&mut conn, &mut seen) {
                Ok(new) => {
                    failing = false;
                    if new {
                        self.signal.notify();
                    }
                }
                Err(e) => {
                    // Opened again on the next poll; the approved set is kept, so a call
                    // approved meanwhile is still new then.
                    if !failing {
                        tracing::warn!(error = %e, "the decision poller cannot read the journal; trying again");
                    }
                    failing = true;
                    conn = None;
                    seen.version = None;
                }
            }
            thread::sleep(self.every);
        }
    }

    /// One poll: whether an approved call appeared since the last one.
    fn poll(&self, conn: &mut Option<Connection>, seen: &mut Seen) -> rusqlite::Result<bool> {
        let conn = match conn {
            Some(conn) => conn,
            None => conn.insert(self.open()?),
        };
        let version: i64 = conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?;
        if seen.version == Some(version) {
            return Ok(false);
        }
        let approved = approved_ids(conn)?;
        seen.version = Some(version);
        let new = approved.iter().any(|id| !seen.approved.contains(id));
        seen.approved = approved;
        Ok(new)
    }

    fn open(&self) -> rusqlite::Result<Connection> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(self.busy_timeout)?;
        Ok(conn)
    }
}

/// The ids of the approved calls (the `approvals_state` index).
fn approved_ids(conn: &Connection) -> rusqlite::Result<HashSet<String>> {
    let mut statement =
        conn.prepare_cached("SELECT approval_id FROM approvals WHERE state = 'approved'")?;
    let ids = statement.query_map([], |r| r.get::<_, String>(0))?;
    ids.collect()
}
