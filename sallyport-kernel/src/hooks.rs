//! The host's own hooks: checks of the host's that every call passes through, at two fixed
//! places of the pipeline, each audited by name.
//!
//! - A [`PreDispatchHook`] runs after consent and before the intent is written and anything
//!   is sent. It sees the action, its effect class, the session, the validated arguments and
//!   objects, and the request summary the human approved (or that needed no one), and
//!   answers [`PreDispatchDecision::Allow`] or [`PreDispatchDecision::Deny`] with a reason.
//!   It cannot change the request: the request sent is still the one approved. A denial is
//!   `rejected` / `hook_denied` with the hook's reason (scrubbed and bounded like every
//!   reason), and nothing is sent.
//! - A [`PostResultHook`] runs after the executor's own filtering of the upstream's answer
//!   (declared fields kept, the vault's secrets scrubbed, the answer guards of
//!   [`crate::inspect`] applied) and before the record. It sees the [`ActionResult`] and
//!   answers [`PostResultDecision::Keep`], [`PostResultDecision::Mask`] with an edited
//!   result (the executor takes its `data`, `reason` and `next` only, and scrubs them again
//!   with the call's scrubber; status, code, ids and findings stay the executor's), or
//!   [`PostResultDecision::Refuse`]: the answer is withheld with `hook_refused` and none of
//!   its data. The request was sent: the record says so (`dispatches`). As with
//!   `secret_in_answer`, a read becomes `rejected`; an action that changes state keeps the
//!   status the upstream gave, so the agent is never told that an effect that happened did
//!   not.
//!
//! Hooks are registered on the builder by name, in the order they run
//! ([`ExecutorBuilder::pre_dispatch_hook`], [`ExecutorBuilder::post_result_hook`]). Each has
//! a timeout (2 s unless [`ExecutorBuilder::hook_timeout`] or the hook's
//! [`HookSettings::with_timeout`] says otherwise). A hook that times out or panics **fails
//! closed**: a pre-dispatch hook's call is refused with nothing sent, a post-result hook's
//! answer is withheld. [`HookSettings::fail_open`] lets one hook's failure pass instead.
//! The first hook that denies or refuses ends the run; a later one is not asked.
//!
//! Every record of a call a hook ran on lists each run in `hooks`
//! (`{name, stage, outcome, reason}`: `allowed`, `denied`, `masked`, `refused`, `timeout`,
//! `panic` or `failed_open`), never the data the hook saw. Executors without hooks write
//! records exactly as before.
//!
//! ```
//! use std::time::Duration;
//! use sallyport_core::hooks::{
//!     HookSettings, PostResultDecision, PostResultHook, PostResultRequest, PreDispatchDecision,
//!     PreDispatchHook, PreDispatchRequest,
//! };
//! use sallyport_core::{Catalog, EffectClass, Executor};
//!
//! /// Nothing irreversible outside office hours.
//! struct OfficeHours;
//!
//! #[async_trait::async_trait]
//! impl PreDispatchHook for OfficeHours {
//!     async fn check(&self, call: &PreDispatchRequest<'_>) -> PreDispatchDecision {
//!         match call.effect {
//!             EffectClass::IrreversibleOrBroad => PreDispatchDecision::deny("not outside office hours"),
//!             _ => PreDispatchDecision::Allow,
//!         }
//!     }
//! }
//!
//! /// Drops an `owner_email` field from every answer.
//! struct DropEmails;
//!
//! #[async_trait::async_trait]
//! impl PostResultHook for DropEmails {
//!     async fn check(&self, call: &PostResultRequest<'_>) -> PostResultDecision {
//!         let mut edited = call.result.clone();
//!         let fields = edited.data.as_mut().and_then(|d| d.as_object_mut());
//!         match fields.and_then(|f| f.remove("owner_email")) {
//!             Some(_) => PostResultDecision::Mask(Box::new(edited)),
//!             None => PostResultDecision::Keep,
//!         }
//!     }
//! }
//!
//! # fn build(catalog: Catalog, journal: sallyport_core::journal::SqliteJournal) -> Result<(), Box<dyn std::error::Error>> {
//! let executor = Executor::builder(catalog)
//!     .journal(journal)
//!     .pre_dispatch_hook("office-hours", OfficeHours)
//!     .post_result_hook_with(
//!         "drop-emails",
//!         DropEmails,
//!         HookSettings::new().with_timeout(Duration::from_millis(200)),
//!     )
//!     .build()?;
//! # Ok(()) }
//! ```
//!
//! [`ExecutorBuilder::pre_dispatch_hook`]: crate::executor::ExecutorBuilder::pre_dispatch_hook
//! [`ExecutorBuilder::post_result_hook`]: crate::executor::ExecutorBuilder::post_result_hook
//! [`ExecutorBuilder::hook_timeout`]: crate::executor::ExecutorBuilder::hook_timeout

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::action::{EffectClass, ScopedValue};
use crate::code::ConsentOutcome;
use crate::journal::AttemptId;
use crate::outcome::ActionResult;
use crate::session::Session;

pub use sallyport_vocab::hook::{HookNote, HookOutcome, HookStage};

/// How long a hook may take when neither the builder nor the hook says otherwise.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(2);

/// A check of the host's that every call passes after consent and before anything is sent.
/// See the [module](self) docs.
#[async_trait]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a pre-dispatch hook",
    note = "implement `sallyport_core::hooks::PreDispatchHook` (`async fn check`) with `#[async_trait]`"
)]
pub trait PreDispatchHook: Send + Sync + 'static {
    /// Decides whether the call may be sent. Called once per call, within the hook's timeout;
    /// a panic or a timeout fails closed unless the hook was registered to fail open.
    async fn check(&self, call: &PreDispatchRequest<'_>) -> PreDispatchDecision;
}

/// A check of the host's on every answer, after the executor's own filtering and before the
/// record. See the [module](self) docs.
#[async_trait]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a post-result hook",
    note = "implement `sallyport_core::hooks::PostResultHook` (`async fn check`) with `#[async_trait]`"
)]
pub trait PostResultHook: Send + Sync + 'static {
    /// Keeps, masks or refuses the answer. Called once per call that reached the upstream,
    /// within the hook's timeout; a panic or a timeout withholds the answer unless the hook
    /// was registered to fail open.
    async fn check(&self, call: &PostResultRequest<'_>) -> PostResultDecision;
}

/// What a pre-dispatch hook sees of one call: what the human approved, nothing it could
/// change.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct PreDispatchRequest<'a> {
    /// The attempt.
    pub attempt_id: &'a AttemptId,
    /// The action's name.
    pub action: &'a str,
    /// The action's effect class.
    pub effect: EffectClass,
    /// The session: its id, requester and the attributes the host set.
    pub session: &'a Session,
    /// The arguments as validated.
    pub arguments: &'a Value,
    /// The objects the call names, each inside the session's scope.
    pub objects: &'a [ScopedValue],
    /// The summary of the request that will be sent (method and real URL, host and
    /// command), as the human saw it and the audit record names it.
    pub request: &'a str,
    /// How consent was given (`approved`, `approved_for_session`, `not_required`).
    pub consent: ConsentOutcome,
}

/// A pre-dispatch hook's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PreDispatchDecision {
    /// The call may be sent.
    Allow,
    /// The call is refused (`hook_denied`), with this reason for the agent and the record;
    /// nothing is sent.
    Deny(String),
}

impl PreDispatchDecision {
    /// Denies the call for `reason`.
    pub fn deny(reason: impl Into<String>) -> Self {
        Self::Deny(reason.into())
    }
}

/// What a post-result hook sees of one call: its answer as the agent would get it.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct PostResultRequest<'a> {
    /// The action's name.
    pub action: &'a str,
    /// The action's effect class.
    pub effect: EffectClass,
    /// The session.
    pub session: &'a Session,
    /// The answer, after the executor's own filtering.
    pub result: &'a ActionResult,
}

/// A post-result hook's answer.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum PostResultDecision {
    /// The answer goes to the agent as it is.
    Keep,
    /// The answer, edited: its `data`, `reason` and `next` replace the answer's (and are
    /// scrubbed again); everything else of it is ignored.
    Mask(Box<ActionResult>),
    /// The answer is withheld (`hook_refused`), with this reason; the agent gets none of its
    /// data.
    Refuse(String),
}

impl PostResultDecision {
    /// Refuses the answer for `reason`.
    pub fn refuse(reason: impl Into<String>) -> Self {
        Self::Refuse(reason.into())
    }
}

/// How one hook is run: its timeout, and whether its failure stops the call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HookSettings {
    /// How long the hook may take; `None` takes the builder's
    /// ([`ExecutorBuilder::hook_timeout`](crate::executor::ExecutorBuilder::hook_timeout),
    /// 2 s by default).
    pub timeout: Option<Duration>,
    /// Whether a timeout or a panic lets the call go on (`true`) instead of stopping it
    /// (`false`, the default). Either way the record says what happened.
    pub fail_open: bool,
}

impl HookSettings {
    /// The defaults: the builder's timeout, failing closed.
    pub fn new() -> Self {
        Self::default()
    }

    /// The hook's own timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// A timeout or a panic of this hook lets the call go on (recorded as `failed_open`).
    /// Weakens the check: use it for hooks that only observe.
    #[must_use]
    pub fn fail_open(mut self) -> Self {
        self.fail_open = true;
        self
    }
}
