//! Deferred consent: parking a call, deciding it, and driving an approved call to its end
//! exactly once (see [`crate::approval`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::Executor;
use crate::action::EffectClass;
use crate::approval::{
    self, ApprovalError, ApprovalFilter, ApprovalId, ApprovalState, ConsentMode, Decided, Decider,
    DecisionPolicy, Verdict,
};
use crate::outcome::ActionResult;
use crate::session::{Session, SessionId};

/// Looks a session up when its parked call resumes.
pub(crate) type SessionLookup = Arc<dyn Fn(&SessionId) -> Option<Session> + Send + Sync>;

/// The executor's deferred-consent settings.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) mode: ConsentMode,
    pub(crate) per_action: HashMap<String, ConsentMode>,
    pub(crate) expiry: Duration,
    /// Per-action expiry; `None` never expires.
    pub(crate) expiry_for: HashMap<String, Option<Duration>>,
    /// Distinct approvals needed, per action (over the effect class's).
    pub(crate) quorum_for: HashMap<String, u32>,
    /// Distinct approvals needed, per effect class.
    pub(crate) quorum_for_effect: HashMap<EffectClass, u32>,
    /// Who may decide which approvals.
    pub(crate) decision_policy: Option<Arc<dyn DecisionPolicy>>,
    pub(crate) lease: Duration,
    pub(crate) instance: String,
    pub(crate) sessions: Option<SessionLookup>,
    /// Told of every call parked.
    pub(crate) notifiers: Vec<Arc<dyn crate::approval::notify::ParkNotifier>>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            mode: ConsentMode::Blocking,
            per_action: HashMap::new(),
            expiry: approval::DEFAULT_EXPIRY,
            expiry_for: HashMap::new(),
            quorum_for: HashMap::new(),
            quorum_for_effect: HashMap::new(),
            decision_policy: None,
            lease: Duration::from_secs(60),
            instance: format!("exe_{}", uuid::Uuid::now_v7().simple()),
            sessions: None,
            notifiers: Vec::new(),
        }
    }
}

impl Settings {
    /// The mode for `action`.
    pub(crate) fn mode_for(&self, action: &str) -> ConsentMode {
        self.per_action.get(action).copied().unwrap_or(self.mode)
    }

    /// How many distinct approvals `action` (of `effect`) needs: the action's own setting,
    /// else its effect class's, else 1.
    pub(crate) fn quorum_for(&self, action: &str, effect: EffectClass) -> u32 {
        self.quorum_for
            .get(action)
            .or_else(|| self.quorum_for_effect.get(&effect))
            .copied()
            .unwrap_or(1)
            .max(1)
    }

    /// When an approval of `action` parked at `now_ms` expires.
    pub(crate) fn expires_at_ms(&self, action: &str, now_ms: u64) -> u64 {
        match self.expiry_for.get(action) {
            Some(None) => approval::NEVER_EXPIRES,
            Some(Some(expiry)) => now_ms.saturating_add(millis(*expiry)),
            None => now_ms.saturating_add(millis(self.expiry)),
        }
    }

    /// Whether any action may be deferred (then `check_approval` is offered).
    pub(crate) fn any_deferred(&self) -> bool {
        self.mode == ConsentMode::Deferred
            || self
                .per_action
                .values()
                .any(|m| *m == ConsentMode::Deferred)
    }
}

/// How soon the approval worker lists again after a listing failed.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// `duration` in milliseconds (the largest when it does not fit).
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Executor {
    /// The decision policy this executor decides under, if the host set one
    /// ([`crate::executor::ExecutorBuilder::decision_policy`]); front ends that decide
    /// through [`approval::decide_under`] themselves pass it.
    pub fn decision_policy(&self) -> Option<&Arc<dyn DecisionPolicy>> {
        self.inner.approvals.decision_policy.as_ref()
    }

    /// Decides approval `id` through [`approval::decide_under`] (with this executor's
    /// decision policy) and, when this decision approved
    /// it, drives the call to its end here (if this executor holds the action and no other
    /// executor claimed it first). Double, late and racing deliveries send one request: the
    /// losers get [`Decided::AlreadyDecided`].
    ///
    /// # Errors
    ///
    /// [`ApprovalError::NotFound`], or the journal's failure (nothing was decided). Once the
    /// decision is recorded the answer is [`Decided::Recorded`], even if carrying the call out
    /// failed (it then stays approved for [`Executor::resume_approvals`]).
    pub async fn decide(
        &self,
        id: &ApprovalId,
        verdict: Verdict,
        decider: &Decider,
        reason: Option<&str>,
    ) -> Result<Decided, ApprovalError> {
        let decided = approval::decide_under(
            self.inner.approval_store()?,
            self.decision_policy().map(AsRef::as_ref),
            id,
            verdict,
            decider,
            reason,
        )
        .await?;
        if !matches!(&decided, Decided::Recorded(a) if a.state == ApprovalState::Approved) {
            return Ok(decided);
        }
        // The decision stands whatever happens next: a failure to carry the call out here
        // leaves it approved for `resume_approvals`, and the answer is still `Recorded`.
        if let Err(e) = self.resume_approval(id).await {
            tracing::warn!(approval = %id, error = %e, "approved, but not carried out here; it stays approved");
        }
        match self.inner.approval_store()?.approval(id).await {
            Ok(Some(now)) => Ok(Decided::Recorded(now)),
            _ => Ok(decided),
        }
    }

    /// Drives approved call `id` to its end if it is approved and unclaimed (or its claim's
    /// lease ended): claims it, checks scope, definition, vault, credential, preconditions
    /// and expiry again, prepares the request again and compares it with the approved one,
    /// writes the intent and sends. Returns the call's result, or `None` when there was
    /// nothing for this executor to do (not approved, claimed by another executor, already
    /// finished).
    ///
    /// # Errors
    ///
    /// [`ApprovalError::NotFound`], or the journal's failure before anything was sent.
    pub async fn resume_approval(
        &self,
        id: &ApprovalId,
    ) -> Result<Option<ActionResult>, ApprovalError> {
        super::resume::resume(self, id, super::resume::Trace::OwnSpan).await
    }

    /// [`Executor::resume_approval`] for every approved call not yet carried out: run it when
    /// the executor starts (a crash between an approval and its send leaves the call
    /// `approved`), and periodically to pick up decisions made by other processes.
    ///
    /// # Errors
    ///
    /// The journal's failure to list approvals.
    pub async fn resume_approvals(&self) -> Result<Vec<ActionResult>, ApprovalError> {
        let approved = self
            .inner
            .approval_store()?
            .approvals(&ApprovalFilter::states([ApprovalState::Approved]))
            .await?;
        let mut results = Vec::new();
        for a in approved {
            if let Some(result) = self.resume_approval(&a.approval_id).await? {
                results.push(result);
            }
        }
        Ok(results)
    }

    /// Carries out approved calls as their decisions arrive, forever: spawn it beside the
    /// executor so that calls approved from another process (the CLI, a webhook served
    /// elsewhere, a console) are carried out without waiting for the agent's
    /// `check_approval`. It runs [`Executor::resume_approvals`], then waits for the next
    /// decision the store reports ([`ApprovalStore::watch_decisions`]), at most
    /// `interval`, and runs it again. A failure to read the store is logged and tried again
    /// after the next wake-up or a second (or `interval`, if shorter), whichever comes
    /// first.
    ///
    /// How a decision made elsewhere reaches it, per store:
    ///
    /// * **PostgreSQL** (`PostgresJournal`): each decision's transaction notifies channel
    ///   `sallyport_approvals`, and the journal listens on a connection of its own, so the
    ///   worker wakes when the decision commits. After the connection is lost it reconnects
    ///   and lists everything, so nothing decided meanwhile is missed.
    /// * **SQLite** (`SqliteJournal`): a connection of its own reads `PRAGMA data_version`
    ///   every few milliseconds (5 by default), and on a change looks for newly approved
    ///   calls.
    /// * **Memory** ([`MemoryJournal`](crate::journal::MemoryJournal)): in process, at once.
    /// * **Any other store** keeps the default, which never wakes: the worker lists every
    ///   `interval`, as it did before stores could tell.
    ///
    /// `interval` is the fallback: it still bounds how long a call waits when a
    /// notification is lost, and how soon a claim whose holder died is taken over after its
    /// lease. With a store that wakes it, minutes are fine; with one that does not, it is
    /// the polling period (the example uses 500 ms).
    ///
    /// Approved calls are carried out one after another: a decision that arrives while one
    /// is being sent is taken up right after it.
    ///
    /// [`ApprovalStore::watch_decisions`]: crate::journal::ApprovalStore::watch_decisions
    pub async fn run_approval_worker(&self, interval: Duration) {
        // Watching starts before the first listing, so a decision stored between the two
        // wakes the first wait.
        let mut decisions = self.inner.approval_store().map_or_else(
            |_| crate::journal::DecisionWatch::sleeping(),
            |store| store.watch_decisions(),
        );
        loop {
            let wait = match self.resume_approvals().await {
                Ok(_) => interval,
                Err(e) => {
                    tracing::warn!(error = %e, "approved calls could not be listed; trying again");
                    // What woke it may not wake it again: try again soon, whatever the
                    // fallback.
                    interval.min(RETRY_AFTER_FAILURE)
                }
            };
            decisions.wait(wait).await;
        }
    }
}

/// The executor as `check_approval`'s channel sees it: a weak reference, so the channel
/// (which the executor holds) does not keep the executor alive.
pub(super) struct Host(std::sync::Weak<super::Inner>);

impl Host {
    pub(super) fn new(inner: &Arc<super::Inner>) -> Self {
        Self(Arc::downgrade(inner))
    }
}

#[async_trait::async_trait]
impl crate::approval::ApprovalHost for Host {
    fn journal(&self) -> Option<Arc<dyn crate::journal::ApprovalStore>> {
        self.0
            .upgrade()
            .and_then(|inner| inner.approval_store.clone())
    }

    async fn resume(&self, id: &ApprovalId) {
        if let Some(inner) = self.0.upgrade() {
            let _ = Executor::from_inner(inner).resume_approval(id).await;
        }
    }
}
