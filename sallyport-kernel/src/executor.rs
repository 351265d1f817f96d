//! The executor: one fixed pipeline for every call.
//!
//! ```text
//!  1 resolve     the action is in the catalog                           else unknown_action
//!  2 validate    payload drift check against the action's JSON Schema   else invalid_arguments
//!  3 decode      JSON -> typed input struct                             else invalid_arguments
//!  4 authorize   every scoped field is inside the session's scope;      else out_of_scope
//!                the channel's static checks on the concrete request    else invalid_request
//!                the host's policy lets the call through                else policy_denied
//!  5 definition  the live definition matches the approved baseline      else definition_drift | review_required
//!  6 vault       vault unlocked, credential resolvable and usable       else vault_locked | credential_unavailable
//!  7 precheck    the action's own read-only preconditions               else precondition_failed
//!  8 consent     per the rule; the human sees object, effect and reason else consent_denied | consent_timeout | consent_unavailable
//!    hooks       the host's pre-dispatch hooks allow the call           else hook_denied
//!  9 intent      attempt + idempotency key durably written              else journal_unavailable
//! 10 dispatch    the channel sends (and resends only as the rule allows, with the same key)
//! 11 normalize   the channel's outcome -> status, `next` from the reconcile action
//! 12 filter      secrets scrubbed from everything outgoing; the answer guards;
//!                the host's post-result hooks keep, mask or withhold    withheld: hook_refused
//! 13 record      outcome appended to the audit chain; receipt id returned
//! ```
//!
//! Each stage lives in the module named after it and returns the next stage's typed value
//! or a [`Refusal`]. Each value can be read anywhere but made only inside its own module,
//! from the previous stage's value, so no stage can be skipped. From stage 4 on, each value
//! owns the call's flat context (`call::Call`: the entry and its card, the validated
//! arguments, objects and note, the channel and its prepared request, the policy's decision,
//! and from stage 6 the bound credential and the call's scrubber), which stages read through
//! `call()`; a stage adds what only it establishes beside it (the consent decision, the
//! intent). The request a channel prepares at stage 4 is the one the human approves at
//! stage 8 and the one sent at stage 10.
//!
//! The host's own hooks ([`crate::hooks`]) run at two fixed places: its pre-dispatch hooks
//! after consent and before the intent (a hook sees the approved request and cannot change
//! it; a denial, a timeout or a panic refuses the call with nothing sent), its post-result
//! hooks last in stage 12, on the answer the executor filtered. Each run is bounded by a
//! timeout, guarded against a panic, and named on the call's record.
//!
//! # No stage can be skipped
//!
//! The stage modules and their values are private to the executor: code outside it cannot
//! name a stage's value, let alone build one. Inside, each value's fields are private to its
//! stage's module, so only that stage makes it, from the previous stage's value. Each of these
//! fails to compile (E0603, private), one per stage:
//!
//! ```compile_fail,E0603
//! // an action the catalog never looked up
//! use sallyport_kernel::executor::resolve::Resolved;
//! ```
//!
//! ```compile_fail,E0603
//! // arguments no schema checked
//! use sallyport_kernel::executor::validate::Validated;
//! ```
//!
//! ```compile_fail,E0603
//! // a call no scope or policy let through
//! use sallyport_kernel::executor::authorize::Authorized;
//! ```
//!
//! ```compile_fail,E0603
//! // a definition no baseline matched
//! use sallyport_kernel::executor::definition::Approved;
//! ```
//!
//! ```compile_fail,E0603
//! // a credential the vault never resolved
//! use sallyport_kernel::executor::vault::Unlocked;
//! ```
//!
//! ```compile_fail,E0603
//! // preconditions nobody checked
//! use sallyport_kernel::executor::precheck::Checked;
//! ```
//!
//! ```compile_fail,E0603
//! // consent nobody gave
//! use sallyport_kernel::executor::consent::Consented;
//! ```
//!
//! ```compile_fail,E0603
//! // a call context assembled outside the stages
//! use sallyport_kernel::executor::call::Call;
//! ```
//!
//! ```compile_fail,E0603
//! // an intent never written
//! use sallyport_kernel::executor::intent::Intended;
//! ```
//!
//! ```compile_fail,E0603
//! // a send that never happened
//! use sallyport_kernel::executor::dispatch::Dispatched;
//! ```
//!
//! ```compile_fail,E0603
//! // an outcome nobody read
//! use sallyport_kernel::executor::normalize::Normalized;
//! ```
//!
//! ```compile_fail,E0603
//! // an answer never scrubbed
//! use sallyport_kernel::executor::filter::Filtered;
//! ```
//!
//! ```compile_fail,E0603
//! // a record the executor did not start
//! use sallyport_kernel::executor::record::CallRecord;
//! ```

mod approvals;
mod builder;
mod cancel;
mod kept;
mod options;
mod pipeline;
mod resume;
pub(crate) mod spans;
mod typed;

mod authorize;
mod call;
mod consent;
mod definition;
mod dispatch;
mod filter;
mod hooks;
mod intent;
mod normalize;
mod policy;
mod precheck;
mod reconcile;
mod record;
mod resolve;
mod validate;
mod vault;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

pub use self::builder::{BuildError, DangerousExecutorBuilder, ExecutorBuilder};
use self::cancel::CallGuard;
pub use self::options::CallOptions;
pub use self::reconcile::{
    RECONCILE_SESSION, ReconcileError, ReconcileOptions, ReconcileOutcome, Reconciled,
};
pub use self::typed::{DataMismatch, TypedResult};
use crate::action::Action;
use crate::catalog::Catalog;
use crate::channel::Channel;
use crate::code::RefusalCode;
use crate::consent::{ConsentProvider, SessionGrants};
use crate::drift::DefinitionGuard;
use crate::drift::DriftMode;
use crate::journal::{AttemptId, Journal};
use crate::outcome::{ActionResult, Refusal};
use crate::scrub::Scrubber;
use crate::session::Session;
use crate::vault::Vault;

/// Runs agent calls through the pipeline. Cheap to clone; share one per process.
///
/// ```no_run
/// # use sallyport_core::{Action, Catalog, Executor, Session};
/// # use sallyport_core::journal::SqliteJournal;
/// # use serde::Deserialize; use schemars::JsonSchema;
/// # /// Read one thing.
/// # #[derive(Action, Deserialize, JsonSchema)]
/// # #[action(name = "get_thing", effect = observe)]
/// # #[channel(name = "demo")]
/// # struct GetThing { id: String }
/// # async fn demo(channel: impl sallyport_core::Channel) -> Result<(), Box<dyn std::error::Error>> {
/// let catalog = Catalog::builder().action::<GetThing>().build()?;
/// let executor = Executor::builder(catalog)
///     .journal(SqliteJournal::open("journal.db")?)
///     .channel(channel)
///     .build()?;
/// let session = Session::new("chat-1");
/// let result = executor.call("get_thing", serde_json::json!({"id": "t1"}), &session).await;
/// println!("{}", result.to_json());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Executor {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("actions", &self.inner.catalog.len())
            .field("channels", &self.inner.channels.keys().collect::<Vec<_>>())
            .field("drift_mode", &self.inner.drift_mode)
            .field("policy", &self.inner.policy.as_ref().map(|p| p.name()))
            .field(
                "shadow_policy",
                &self.inner.shadow.as_ref().map(|p| p.name()),
            )
            .field("shared_call_counts", &self.inner.calls.is_shared())
            .field("hooks", &self.inner.hooks.names())
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pub(crate) catalog: Catalog,
    pub(crate) channels: HashMap<String, Arc<dyn Channel>>,
    pub(crate) vault: Option<Arc<dyn Vault>>,
    pub(crate) journal: Arc<dyn Journal>,
    /// The journal as an approval store, when it is one (always, with deferred consent).
    pub(crate) approval_store: Option<Arc<dyn crate::journal::ApprovalStore>>,
    pub(crate) consent: Option<Arc<dyn ConsentProvider>>,
    pub(crate) consent_timeout: Duration,
    pub(crate) session_grant_ttl: Duration,
    pub(crate) grants: SessionGrants,
    pub(crate) drift_mode: DriftMode,
    pub(crate) max_argument_bytes: usize,
    pub(crate) definition_guard: Option<Arc<dyn DefinitionGuard>>,
    /// Credentials an upstream rejected: name -> version. Refused locally until rotated.
    pub(crate) unusable: vault::Unusable,
    /// The last journal write failed: observe calls write their attempt before sending
    /// until a write succeeds again, so a known-unwritable journal refuses reads unsent.
    pub(crate) journal_unwritable: std::sync::atomic::AtomicBool,
    /// Deferred consent: modes, expiry, lease, this instance's name.
    pub(crate) approvals: approvals::Settings,
    /// The host's policy, asked at stage 4.
    pub(crate) policy: Option<Arc<dyn crate::policy::Policy>>,
    /// A candidate policy run in shadow beside `policy`: recorded, never enforced.
    pub(crate) shadow: Option<crate::policy::ShadowPolicy>,
    /// The policy's call counts: shared by the fleet, or in memory.
    pub(crate) calls: policy::CallCounting,
    /// Finds credential-shaped values the vault does not know in answers (stage 12).
    pub(crate) secret_scanner: Option<Arc<dyn crate::inspect::SecretScanner>>,
    /// Calls' last records the journal could not take, written when it is back.
    pub(crate) kept: kept::KeptRecords,
    /// The host's hooks: before dispatch (after stage 8) and on the answer (stage 12).
    pub(crate) hooks: hooks::Hooks,
}

impl Inner {
    /// The approval store. Deferred consent cannot be built without one, so `Unsupported`
    /// reaches only a caller of [`Executor::decide`], [`Executor::resume_approval`] and the
    /// like on an executor with blocking consent over a journal that stores no approvals.
    pub(crate) fn approval_store(
        &self,
    ) -> Result<&dyn crate::journal::ApprovalStore, crate::journal::JournalError> {
        self.approval_store
            .as_deref()
            .ok_or(crate::journal::JournalError::Unsupported("approvals"))
    }

    /// The vault's scrubber now (empty without a vault or while it is locked); a call
    /// replaces it with its own at stage 6.
    pub(crate) fn current_scrubber(&self) -> Arc<Scrubber> {
        self.vault
            .as_ref()
            .map_or_else(|| Arc::new(Scrubber::empty()), |v| v.scrubber())
    }
}

/// Statistics about an executor's configuration, for diagnostics.
#[derive(Clone, Debug, Serialize)]
pub struct ExecutorInfo {
    /// Action names.
    pub actions: Vec<String>,
    /// Channel names.
    pub channels: Vec<String>,
    /// The payload drift mode.
    pub drift_mode: DriftMode,
}

impl Executor {
    pub(crate) fn from_inner(inner: Arc<Inner>) -> Self {
        Self { inner }
    }

    /// A builder over `catalog`.
    pub fn builder(catalog: Catalog) -> ExecutorBuilder {
        ExecutorBuilder::new(catalog)
    }

    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    /// The journal.
    pub fn journal(&self) -> &Arc<dyn Journal> {
        &self.inner.journal
    }

    /// The approval store deferred consent parks calls in: the journal, when it is one
    /// ([`Journal::approval_store`]).
    pub fn approval_store(&self) -> Option<&Arc<dyn crate::journal::ApprovalStore>> {
        self.inner.approval_store.as_ref()
    }

    /// The vault, if the executor has one: for front ends that keep their own secrets in it
    /// (a webhook receiver's shared secret), resolved per use so a rotation applies at once.
    pub fn vault(&self) -> Option<&Arc<dyn Vault>> {
        self.inner.vault.as_ref()
    }

    /// Configuration summary.
    pub fn info(&self) -> ExecutorInfo {
        let mut channels: Vec<String> = self.inner.channels.keys().cloned().collect();
        channels.sort();
        ExecutorInfo {
            actions: self.inner.catalog.names().map(str::to_owned).collect(),
            channels,
            drift_mode: self.inner.drift_mode,
        }
    }

    /// Runs one agent call. Never panics on agent input and never returns an error the host
    /// must format: bad input becomes a `rejected` result with a reason the agent can act on.
    ///
    /// Dropping the returned future records the attempt as `cancelled_before_send`, or
    /// `unknown` if a request may have left.
    pub async fn call(&self, action: &str, arguments: Value, session: &Session) -> ActionResult {
        self.call_with(action, arguments, session, &CallOptions::new())
            .await
    }

    /// Runs one agent call as [`Executor::call`] does, with what the caller knows about it
    /// (the model's tool-call id, for the call's span: see [`crate::telemetry`]).
    pub async fn call_with(
        &self,
        action: &str,
        arguments: Value,
        session: &Session,
        options: &CallOptions,
    ) -> ActionResult {
        // The call's future is boxed here, so it is not copied again by every wrapper around
        // it (the span, the task-local) and by the caller's. Its rare paths (asking a human,
        // carrying out an approval) are boxed where they start, and the stages inside it are
        // boxed apart from the guard (`pipeline::run`), so each allocation stays under 1 KB
        // for a call that needs no one.
        let call = Box::pin(self.untraced_call(action, arguments, session));
        crate::executor::spans::traced(&self.inner, action, options, call).await
    }

    async fn untraced_call(
        &self,
        action: &str,
        arguments: Value,
        session: &Session,
    ) -> ActionResult {
        let mut guard = self.guard(action, session);
        let ended = pipeline::run(&self.inner, &mut guard, session, arguments).await;
        guard.disarm();
        if let pipeline::Ended::Answer(result) | pipeline::Ended::ApprovedNow(_, result) = &ended
            && guard.record().let_through_by_policy()
        {
            let attempt = &guard.record().attempt_id;
            policy::settle(
                &self.inner.calls,
                session.id().as_str(),
                attempt,
                result.status,
            )
            .await;
        }
        match ended {
            pipeline::Ended::Answer(result) => *result,
            // Approved at once by the consent provider: carried out here, unless another
            // executor claimed it first (then the answer is where it stands). Boxed: the
            // rare path's state is not carried by every call's future.
            pipeline::Ended::ApprovedNow(id, parked) => {
                match Box::pin(resume::resume(self, &id, resume::Trace::InCall)).await {
                    Ok(Some(result)) => result,
                    Ok(None) | Err(_) => *parked,
                }
            }
        }
    }

    /// Runs the static checks of stages 1–4 (resolve, validate, decode, authorize, and the
    /// channel's own checks as it prepares the request) without recording, asking or sending
    /// anything: the journal is not touched. Use it to tell an agent early that a call would
    /// be refused; [`Executor::call`] runs them again.
    ///
    /// # Errors
    ///
    /// The refusal the call would get.
    pub fn preflight(
        &self,
        action: &str,
        arguments: Value,
        session: &Session,
    ) -> Result<(), Refusal> {
        pipeline::preflight(&self.inner, action, session, arguments)
    }

    /// Runs one call from raw JSON text, refusing oversized text before parsing it.
    pub async fn call_json(
        &self,
        action: &str,
        arguments: &str,
        session: &Session,
    ) -> ActionResult {
        self.call_json_with(action, arguments, session, &CallOptions::new())
            .await
    }

    /// Runs one call from raw JSON text as [`Executor::call_json`] does, with what the caller
    /// knows about it (see [`Executor::call_with`]).
    pub async fn call_json_with(
        &self,
        action: &str,
        arguments: &str,
        session: &Session,
        options: &CallOptions,
    ) -> ActionResult {
        let call = self.untraced_json(action, arguments, session);
        crate::executor::spans::traced(&self.inner, action, options, call).await
    }

    async fn untraced_json(
        &self,
        action: &str,
        arguments: &str,
        session: &Session,
    ) -> ActionResult {
        if arguments.len() > self.inner.max_argument_bytes {
            return self
                .refuse_unparsed(
                    action,
                    session,
                    Refusal::new(
                        RefusalCode::ArgumentsTooLarge,
                        format!(
                            "arguments are {} bytes; the limit is {}",
                            arguments.len(),
                            self.inner.max_argument_bytes
                        ),
                    ),
                )
                .await;
        }
        match serde_json::from_str::<Value>(arguments) {
            Ok(value) => self.untraced_call(action, value, session).await,
            Err(e) => {
                let reason = format!(
                    "arguments are not valid JSON: {}",
                    crate::drift::describe_serde_error(&e)
                );
                self.refuse_unparsed(
                    action,
                    session,
                    Refusal::new(RefusalCode::InvalidArguments, reason),
                )
                .await
            }
        }
    }

    /// Runs a typed call from Rust. The input goes through the same pipeline as an agent's
    /// JSON (serialized, validated, scoped, consented, journaled), under the name
    /// [`Action::NAME`]; the result's data is decoded as the action's declared
    /// [`Action::Output`]. See [`TypedResult`] for how each status comes back.
    ///
    /// ```no_run
    /// # use sallyport_core::{Action, Executor, Session};
    /// # use serde::{Deserialize, Serialize}; use schemars::JsonSchema;
    /// # /// Read one build.
    /// # #[derive(Action, Deserialize, Serialize, JsonSchema)]
    /// # #[action(name = "get_build", effect = observe)]
    /// # #[http(get = "/v1/builds/{build_id}", result = Build)]
    /// # struct GetBuild { build_id: String }
    /// # #[derive(Deserialize, Serialize, JsonSchema)]
    /// # struct Build { tests: String }
    /// # async fn demo(executor: Executor) {
    /// let call = GetBuild { build_id: "build_7".into() };
    /// let result = executor.run(&call, &Session::new("chat-1")).await;
    /// if let Some(build) = &result.data {
    ///     println!("{}: tests {}", result.status(), build.tests);
    /// }
    /// # }
    /// ```
    pub async fn run<A: Action + Serialize>(
        &self,
        input: &A,
        session: &Session,
    ) -> TypedResult<A::Output> {
        let result = match serde_json::to_value(input) {
            Ok(value) => self.call(A::NAME, value, session).await,
            Err(e) => {
                let refused = self.refuse_unparsed(
                    A::NAME,
                    session,
                    Refusal::new(
                        RefusalCode::InvalidArguments,
                        format!(
                            "input does not serialize: {}",
                            crate::drift::describe_serde_error(&e)
                        ),
                    ),
                );
                crate::executor::spans::traced(&self.inner, A::NAME, &CallOptions::new(), refused)
                    .await
            }
        };
        TypedResult::new(result)
    }

    async fn refuse_unparsed(
        &self,
        action: &str,
        session: &Session,
        refusal: Refusal,
    ) -> ActionResult {
        let mut guard = self.guard(action, session);
        let result = pipeline::refuse(&self.inner, &guard, refusal).await;
        guard.disarm();
        result
    }

    /// A new attempt's guard, with the vault's scrubber as it is now.
    fn guard(&self, action: &str, session: &Session) -> CallGuard {
        CallGuard::new(
            Arc::clone(&self.inner.journal),
            record::CallRecord::new(
                AttemptId::generate(),
                action,
                session,
                self.inner.current_scrubber(),
            ),
        )
    }

    /// Forgets that an upstream rejected credential `name`, so calls try it again (after
    /// the credential was replaced outside the vault's versioning).
    pub fn clear_credential_failure(&self, name: &str) {
        // A poisoned map is recovered here: clearing an entry can only make a human's
        // explicit decision take effect.
        let mut unusable = self
            .inner
            .unusable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        unusable.remove(name);
    }

    /// Revokes every session consent grant of `session`.
    pub fn revoke_session_consent(&self, session: &Session) {
        self.inner.grants.revoke_session(session.id().as_str());
    }
}
