//! Where the policy's call counts live: the [`CallStore`] a backend shared by several
//! executor processes implements, so that a limit holds for the fleet and not per process.
//!
//! The executor asks a store once per call that passed the static checks of stage 4
//! ([`CallStore::decide_and_count`]): the store takes a lock that every process on the
//! backend respects, reads the session's counts and recent calls, runs the policy's decision
//! on them (synchronously, on the caller's task), records the call when the decision lets it
//! through, and lets go. Four processes racing for the last slot therefore see 4, then 5: one
//! of them gets it. When the call ends, [`CallStore::settle`] writes its status.
//!
//! The SQLite journal (`sallyport-sqlite`) and the PostgreSQL journal (`sallyport-postgres`)
//! offer one ([`Journal::call_store`](crate::journal::Journal::call_store)); without one the
//! executor counts in memory. A backend keeps a day of calls and forgets older ones as it
//! goes, so its table does not grow with time.
//!
//! A store decides the counts one way (every backend must agree):
//!
//! * counted: the calls of the session within the last day that the policy let through
//!   (not `query.except`), by the time they were let through, `query.now_ms` minus the call's
//!   time below 60 s, 3,600 s and 86,400 s;
//! * [`CallCounts`] for calls of `query.action`, [`EffectCounts`](super::EffectCounts) by
//!   each call's effect, [`SessionCalls::recent`] the newest `query.recent` of them, newest
//!   first, and [`SessionCalls::complete`] when none was left off;
//! * when `query.record` names an attempt and the decision is not a deny, the call is
//!   recorded at `query.now_ms` with no status, before anyone else reads the counts.

use async_trait::async_trait;

use super::{CallCounts, PolicyDecision, SessionCalls};
use crate::action::{EffectClass, ScopedValue};
use crate::outcome::Status;
use sallyport_vocab::journal::{AttemptId, JournalError};

/// The policy's decision, taken on the counts it is given: the executor's closure around
/// [`Policy::decide`](super::Policy::decide). Synchronous: it runs while the store holds its
/// lock.
pub type Decide<'a> = dyn FnMut(CallCounts, &SessionCalls) -> PolicyDecision + Send + 'a;

/// One call to decide and, when let through, to count.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CallQuery<'a> {
    /// The session's id.
    pub session: &'a str,
    /// The action's name.
    pub action: &'a str,
    /// The action's effect class.
    pub effect: EffectClass,
    /// The objects the call names.
    pub objects: &'a [ScopedValue],
    /// Now, in Unix milliseconds: the time the call is counted at and the windows end at.
    pub now_ms: u64,
    /// The attempt to record when the decision lets the call through (`None`: decide only).
    pub record: Option<&'a AttemptId>,
    /// An attempt left out of the counts and the recent calls: a parked call decided again
    /// when it resumes, counted when it was first let through.
    pub except: Option<&'a AttemptId>,
    /// How many recent calls to read at most.
    pub recent: usize,
}

impl<'a> CallQuery<'a> {
    /// A query for a call of `action` (`effect`, naming `objects`) in `session` at `now_ms`
    /// that records nothing, leaves nothing out and reads no recent calls.
    pub fn new(
        session: &'a str,
        action: &'a str,
        effect: EffectClass,
        objects: &'a [ScopedValue],
        now_ms: u64,
    ) -> Self {
        Self {
            session,
            action,
            effect,
            objects,
            now_ms,
            record: None,
            except: None,
            recent: 0,
        }
    }

    /// Records the call as `attempt` when the decision lets it through.
    #[must_use]
    pub fn recording(mut self, attempt: &'a AttemptId) -> Self {
        self.record = Some(attempt);
        self
    }

    /// Leaves `attempt` out of the counts and the recent calls.
    #[must_use]
    pub fn except(mut self, attempt: &'a AttemptId) -> Self {
        self.except = Some(attempt);
        self
    }

    /// Reads up to `recent` recent calls.
    #[must_use]
    pub fn with_recent(mut self, recent: usize) -> Self {
        self.recent = recent;
        self
    }
}

/// Keeps the policy's call counts where several executor processes see them. See the
/// [module](self) docs.
#[async_trait]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a sallyport call store",
    note = "the SQLite and PostgreSQL journals offer one through `Journal::call_store`"
)]
pub trait CallStore: Send + Sync + 'static {
    /// Reads the counts and recent calls for `query`, runs `decide` on them and, when the
    /// decision lets the call through and `query.record` names an attempt, records the call:
    /// one atomic step for every process on the store. Returns the decision.
    ///
    /// # Errors
    ///
    /// The store cannot be read or written: the executor then refuses the call
    /// (`journal_unavailable`) and sends nothing. A call recorded before an error is still
    /// counted (a limit fails closed).
    async fn decide_and_count(
        &self,
        query: &CallQuery<'_>,
        decide: &mut Decide<'_>,
    ) -> Result<PolicyDecision, JournalError>;

    /// Writes how a recorded call ended (`attempt`, in `session`). A call the store does not
    /// hold (not let through, or forgotten) is left alone.
    ///
    /// # Errors
    ///
    /// The store cannot be written; the call's status then stays unknown to policies.
    async fn settle(
        &self,
        session: &str,
        attempt: &AttemptId,
        status: Status,
    ) -> Result<(), JournalError>;
}
