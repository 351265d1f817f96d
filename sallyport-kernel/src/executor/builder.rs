//! Building an [`Executor`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::{Executor, Inner};
use crate::approval::ConsentMode;
use crate::catalog::Catalog;
use crate::channel::Channel;
use crate::consent::{ConsentProvider, SessionGrants};
use crate::danger::AutoApprove;
use crate::drift::DefinitionGuard;
use crate::drift::DriftMode;
use crate::journal::{ApprovalStore, Journal};
use crate::policy::calls::CallStore;
use crate::vault::Vault;

/// Why an executor could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No journal: nothing could be recorded, so nothing may be sent.
    #[error("no journal configured: add `.journal(SqliteJournal::open(path)?)`")]
    MissingJournal,
    /// An action targets a channel that was not added.
    #[error(
        "action `{action}` targets channel `{channel}`, which was not added with `.channel(…)`"
    )]
    MissingChannel {
        /// The action.
        action: String,
        /// The channel it needs.
        channel: String,
    },
    /// The baseline lockfile named with [`ExecutorBuilder::baseline_lockfile`] cannot be used.
    #[error("the baseline lockfile cannot be used")]
    Baseline(#[source] crate::drift::BaselineError),
    /// Deferred consent adds the built-in `check_approval` action, and the catalog already
    /// has an action of that name.
    #[error(
        "deferred consent adds the built-in action `check_approval`, and the catalog already has one; rename yours"
    )]
    BuiltinNameTaken,
    /// Deferred consent ([`ExecutorBuilder::consent_mode`] or
    /// [`ExecutorBuilder::consent_mode_for`]) parks calls in an approval store, and the
    /// journal is not one.
    #[error(
        "deferred consent needs an approval store, and the journal is not one: use a journal that stores approvals (`SqliteJournal`, `PostgresJournal`, `MemoryJournal`), pass yours with `.journal_with_approvals(…)`, or keep consent blocking"
    )]
    MissingApprovalStore,
    /// A candidate policy was added in shadow ([`ExecutorBuilder::shadow_policy`]) without
    /// an enforced policy to run beside.
    #[error(
        "a shadow policy runs beside the enforced policy, and none was added: add one with `.policy(…)` (a policy that allows every call keeps today's behaviour)"
    )]
    ShadowWithoutPolicy,
    /// An action binds a credential but no vault was added.
    #[error(
        "action `{action}` binds credential `{credential}`, but no vault was added with `.vault(…)`"
    )]
    MissingVault {
        /// The action.
        action: String,
        /// The credential.
        credential: String,
    },
}

/// Builds an [`Executor`]. Setters never fail; [`ExecutorBuilder::build`] reports what is
/// missing.
#[must_use]
pub struct ExecutorBuilder {
    catalog: Catalog,
    channels: HashMap<String, Arc<dyn Channel>>,
    vault: Option<Arc<dyn Vault>>,
    journal: Option<Arc<dyn Journal>>,
    approval_store: Option<Arc<dyn ApprovalStore>>,
    consent: Option<Arc<dyn ConsentProvider>>,
    consent_timeout: Duration,
    session_grant_ttl: Duration,
    drift_mode: DriftMode,
    max_argument_bytes: usize,
    definition_guard: Option<Arc<dyn DefinitionGuard>>,
    baseline_lockfile: Option<std::path::PathBuf>,
    approvals: super::approvals::Settings,
    policy: Option<Arc<dyn crate::policy::Policy>>,
    /// A candidate policy in shadow.
    shadow: Option<crate::policy::ShadowPolicy>,
    /// The call store the journal offers.
    journal_call_store: Option<Arc<dyn CallStore>>,
    /// Where the policy's call counts are kept.
    call_counts: CallCounts,
    /// How many recent calls of the session a policy sees.
    recent_calls: usize,
    secret_scanner: Option<Arc<dyn crate::inspect::SecretScanner>>,
    kept_records_for: Duration,
    hooks: super::hooks::Hooks,
}

/// Where the policy's call counts are kept.
enum CallCounts {
    /// The journal's store when it offers one, else in memory.
    Journal,
    /// In memory, per process.
    Local,
    /// The host's store.
    Store(Arc<dyn CallStore>),
}

impl std::fmt::Debug for ExecutorBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorBuilder")
            .field("actions", &self.catalog.len())
            .finish_non_exhaustive()
    }
}

impl ExecutorBuilder {
    pub(crate) fn new(catalog: Catalog) -> Self {
        Self {
            catalog,
            channels: HashMap::new(),
            vault: None,
            journal: None,
            approval_store: None,
            consent: None,
            consent_timeout: Duration::from_secs(120),
            session_grant_ttl: Duration::from_secs(3600),
            drift_mode: DriftMode::Strict,
            max_argument_bytes: 64 * 1024,
            definition_guard: None,
            baseline_lockfile: None,
            approvals: super::approvals::Settings::default(),
            policy: None,
            shadow: None,
            journal_call_store: None,
            call_counts: CallCounts::Journal,
            recent_calls: super::policy::DEFAULT_RECENT,
            secret_scanner: crate::inspect::default_scanner(),
            kept_records_for: super::kept::DEFAULT_KEEP_FOR,
            hooks: super::hooks::Hooks::default(),
        }
    }

    /// The journal (required). When it is also an approval store (it says so through
    /// [`Journal::approval_store`], as the SQLite, PostgreSQL and in-memory journals do),
    /// deferred consent keeps its approvals there.
    pub fn journal(self, journal: impl Journal) -> Self {
        self.journal_arc(Arc::new(journal))
    }

    /// The journal, shared; its approval store, when it is one, with it.
    pub fn journal_arc(mut self, journal: Arc<dyn Journal>) -> Self {
        self.approval_store = Arc::clone(&journal).approval_store();
        self.journal_call_store = Arc::clone(&journal).call_store();
        self.journal = Some(journal);
        self
    }

    /// The journal, and the same journal as the approval store deferred consent parks calls
    /// in (for a store whose [`Journal::approval_store`] does not say it is one).
    pub fn journal_with_approvals(self, journal: impl ApprovalStore) -> Self {
        self.journal_with_approvals_arc(Arc::new(journal))
    }

    /// [`ExecutorBuilder::journal_with_approvals`], shared.
    pub fn journal_with_approvals_arc(mut self, journal: Arc<dyn ApprovalStore>) -> Self {
        let as_journal = Arc::clone(&journal) as Arc<dyn Journal>;
        self.journal_call_store = Arc::clone(&as_journal).call_store();
        self.journal = Some(as_journal);
        self.approval_store = Some(journal);
        self
    }

    /// Adds a channel, under its [`Channel::name`].
    pub fn channel(self, channel: impl Channel) -> Self {
        self.channel_arc(Arc::new(channel))
    }

    /// Adds a shared channel.
    pub fn channel_arc(mut self, channel: Arc<dyn Channel>) -> Self {
        self.channels.insert(channel.name().to_owned(), channel);
        self
    }

    /// The vault credentials come from. While it is locked, every call is refused.
    pub fn vault(self, vault: impl Vault) -> Self {
        self.vault_arc(Arc::new(vault))
    }

    /// The vault, shared.
    pub fn vault_arc(mut self, vault: Arc<dyn Vault>) -> Self {
        self.vault = Some(vault);
        self
    }

    /// Who asks a human. Without one, calls that need consent are refused
    /// (`consent_unavailable`) — unless consent is deferred ([`ExecutorBuilder::consent_mode`]):
    /// then they are parked for a decision from another front end, and a provider, when
    /// there is one, is asked as one front end among others (a provider that cannot ask
    /// leaves the call parked).
    pub fn consent(self, provider: impl ConsentProvider) -> Self {
        self.consent_arc(Arc::new(provider))
    }

    /// The consent provider, shared.
    pub fn consent_arc(mut self, provider: Arc<dyn ConsentProvider>) -> Self {
        self.consent = Some(provider);
        self
    }

    /// How long a consent request may stay unanswered (default 120 s).
    pub fn consent_timeout(mut self, timeout: Duration) -> Self {
        self.consent_timeout = timeout;
        self
    }

    /// How long a session consent grant lasts when the human does not say (default 1 h).
    pub fn session_grant_ttl(mut self, ttl: Duration) -> Self {
        self.session_grant_ttl = ttl;
        self
    }

    /// The payload drift mode (default `strict`).
    pub fn drift_mode(mut self, mode: DriftMode) -> Self {
        self.drift_mode = mode;
        self
    }

    /// How long the executor keeps a call's last record that the journal could not take
    /// after the call's request left (an outage), writing it again as soon as the journal
    /// is back (default 5 minutes). Past it the record is given up and its attempt released
    /// ([`Journal::release_lease`]) for [`Executor::reconcile`] to settle through the
    /// action's read-only check. See [`Executor::kept_records`].
    pub fn kept_records_for(mut self, keep_for: Duration) -> Self {
        self.kept_records_for = keep_for;
        self
    }

    /// Largest argument object accepted, in bytes of JSON (default 64 KiB).
    pub fn max_argument_bytes(mut self, bytes: usize) -> Self {
        self.max_argument_bytes = bytes;
        self
    }

    /// The definition guard for stage 5 (a baseline).
    pub fn definition_guard(mut self, guard: Arc<dyn DefinitionGuard>) -> Self {
        self.definition_guard = Some(guard);
        self
    }

    /// Compares the catalog with the baseline lockfile at `path` when the executor is built
    /// and enforces the decisions at stage 5 (a [`crate::drift::BaselineGuard`]). To replace
    /// the baseline at run time, build the guard yourself and pass it to
    /// [`ExecutorBuilder::definition_guard`], keeping a handle.
    pub fn baseline_lockfile(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.baseline_lockfile = Some(path.into());
        self
    }

    /// How every action's consent is asked (default [`ConsentMode::Blocking`]): with
    /// [`ConsentMode::Deferred`] a call that needs a human is parked in the journal and
    /// answered `pending` / `awaiting_approval` at once (see [`crate::approval`]), and the
    /// built-in `check_approval` action is offered.
    pub fn consent_mode(mut self, mode: ConsentMode) -> Self {
        self.approvals.mode = mode;
        self
    }

    /// How `action`'s consent is asked, overriding [`ExecutorBuilder::consent_mode`].
    pub fn consent_mode_for(mut self, action: impl Into<String>, mode: ConsentMode) -> Self {
        self.approvals.per_action.insert(action.into(), mode);
        self
    }

    /// How long a parked call waits for a decision (default 24 h).
    pub fn approval_expiry(mut self, expiry: Duration) -> Self {
        self.approvals.expiry = expiry;
        self
    }

    /// How long a parked call of `action` waits for a decision, overriding
    /// [`ExecutorBuilder::approval_expiry`]; `None` means it never expires (it waits until
    /// someone decides). An expired approval is reported as expired, never as a denial.
    pub fn approval_expiry_for(
        mut self,
        action: impl Into<String>,
        expiry: Option<Duration>,
    ) -> Self {
        self.approvals.expiry_for.insert(action.into(), expiry);
        self
    }

    /// How many distinct approvers must approve a parked call of `action` before it is sent
    /// (default 1; 0 is taken as 1). One denial ends it, and so does the expiry. Overrides
    /// [`ExecutorBuilder::approvals_required_for_effect`]. Definition hashes and cards do not
    /// change: the quorum is the host's, not the action's.
    pub fn approvals_required_for(mut self, action: impl Into<String>, approvals: u32) -> Self {
        self.approvals.quorum_for.insert(action.into(), approvals);
        self
    }

    /// How many distinct approvers must approve a parked call of any action of `effect`
    /// (default 1): for instance two for `irreversible_or_broad`.
    pub fn approvals_required_for_effect(
        mut self,
        effect: crate::action::EffectClass,
        approvals: u32,
    ) -> Self {
        self.approvals.quorum_for_effect.insert(effect, approvals);
        self
    }

    /// Who may decide which approvals (see [`crate::approval::DecisionPolicy`]); without one,
    /// any approver may decide any approval, except that the session's requester never
    /// approves its own call. Every decision through [`Executor::decide`] is checked against
    /// it; front ends that decide on the store directly pass [`Executor::decision_policy`].
    pub fn decision_policy(mut self, policy: Arc<dyn crate::approval::DecisionPolicy>) -> Self {
        self.approvals.decision_policy = Some(policy);
        self
    }

    /// Tells `notifier` of every call this executor parks for approval, once its approval is
    /// stored (`sallyport_webhook::Notifier` posts a signed message with a link to decide).
    /// Several may be added; each is told in the order added. See
    /// [`ParkNotifier`](crate::approval::notify::ParkNotifier).
    pub fn park_notifier(mut self, notifier: impl crate::approval::notify::ParkNotifier) -> Self {
        self.approvals.notifiers.push(Arc::new(notifier));
        self
    }

    /// How long this executor's claim on an approved call lasts before another executor may
    /// take it over (default 60 s). Re-checking an approved call and writing its intent must
    /// fit in it; a claim taken over is void for its old holder (fencing).
    pub fn approval_lease(mut self, lease: Duration) -> Self {
        self.approvals.lease = lease;
        self
    }

    /// The name this executor claims approved calls under (default a fresh `exe_…` id):
    /// one per process, so a restarted process does not mistake a dead one's claim for its own.
    pub fn instance_name(mut self, name: impl Into<String>) -> Self {
        self.approvals.instance = name.into();
        self
    }

    /// Looks a session up by id when a parked call resumes, so the scope checked before
    /// sending is the session's scope now; `None` (the session is gone) refuses the call
    /// `out_of_scope`. Without it the scope the call was made under is checked again.
    pub fn session_lookup<F>(mut self, lookup: F) -> Self
    where
        F: Fn(&crate::session::SessionId) -> Option<crate::session::Session>
            + Send
            + Sync
            + 'static,
    {
        self.approvals.sessions = Some(Arc::new(lookup));
        self
    }

    /// The host's policy, asked at stage 4 for every call that passed the scope check: it
    /// allows, denies (`policy_denied`) or requires a human's approval of the one call
    /// whatever the action's consent rule. See [`crate::policy`].
    pub fn policy(self, policy: impl crate::policy::Policy) -> Self {
        self.policy_arc(Arc::new(policy))
    }

    /// The scanner that finds credential-shaped values the vault does not know in every
    /// answer (see [`crate::inspect`]). The default is Gitleaks' rule set with the
    /// `secret-rules` feature (a default of `sallyport-core`), none without it.
    pub fn secret_scanner(mut self, scanner: impl crate::inspect::SecretScanner) -> Self {
        self.secret_scanner = Some(Arc::new(scanner));
        self
    }

    /// The secret scanner, shared (the rule set of `sallyport-secrets` is one per process).
    pub fn secret_scanner_arc(mut self, scanner: Arc<dyn crate::inspect::SecretScanner>) -> Self {
        self.secret_scanner = Some(scanner);
        self
    }

    /// The policy, shared (keep a handle to reload it, as `sallyport-cedar` does).
    pub fn policy_arc(mut self, policy: Arc<dyn crate::policy::Policy>) -> Self {
        self.policy = Some(policy);
        self
    }

    /// A candidate policy run in shadow beside the enforced one ([`ExecutorBuilder::policy`],
    /// required: [`BuildError::ShadowWithoutPolicy`] otherwise): whenever the enforced policy
    /// is asked about a call, the candidate decides the same request with the same counts
    /// and recent calls, counts nothing, and changes nothing; each call's audit record
    /// carries its decision as `shadow: {name, decision, reason, rules, flip}`. Records name
    /// it by its [`Policy::name`](crate::policy::Policy::name). See [`crate::policy`].
    pub fn shadow_policy(self, policy: impl crate::policy::Policy) -> Self {
        self.shadow_policy_arc(None, Arc::new(policy))
    }

    /// [`ExecutorBuilder::shadow_policy`], with the name its records carry (to tell two
    /// versions of one Cedar file apart, say).
    pub fn shadow_policy_named(
        self,
        name: impl Into<String>,
        policy: impl crate::policy::Policy,
    ) -> Self {
        self.shadow_policy_arc(Some(name.into()), Arc::new(policy))
    }

    /// [`ExecutorBuilder::shadow_policy`], shared, under `name` (its own name when `None`).
    pub fn shadow_policy_arc(
        mut self,
        name: Option<String>,
        policy: Arc<dyn crate::policy::Policy>,
    ) -> Self {
        self.shadow = Some(crate::policy::ShadowPolicy::new(name, policy));
        self
    }

    /// Keeps the policy's call counts in this process's memory even when the journal offers
    /// a store shared by the fleet ([`Journal::call_store`]). By default an executor counts
    /// in the journal's store when there is one, so a limit holds across every process on
    /// the journal; with this, each process counts its own calls from zero (a limit of 5 an
    /// hour lets 4 processes make 20). See [`crate::policy`].
    pub fn local_call_counts(mut self) -> Self {
        self.call_counts = CallCounts::Local;
        self
    }

    /// Keeps the policy's call counts in `store` (instead of the journal's, or memory).
    pub fn call_store(self, store: impl CallStore) -> Self {
        self.call_store_arc(Arc::new(store))
    }

    /// [`ExecutorBuilder::call_store`], shared.
    pub fn call_store_arc(mut self, store: Arc<dyn CallStore>) -> Self {
        self.call_counts = CallCounts::Store(store);
        self
    }

    /// How many of the session's recent calls a policy sees
    /// ([`SessionCalls::recent`](crate::policy::SessionCalls::recent); default 16; 0 reads
    /// none, and the counts by effect class are still there).
    pub fn policy_recent_calls(mut self, calls: usize) -> Self {
        self.recent_calls = calls;
        self
    }

    /// Adds a pre-dispatch hook under `name` (see [`crate::hooks`]): it runs on every call
    /// after consent and before anything is sent, after the hooks added before it, with the
    /// builder's timeout ([`ExecutorBuilder::hook_timeout`]), failing closed.
    pub fn pre_dispatch_hook(
        self,
        name: impl Into<String>,
        hook: impl crate::hooks::PreDispatchHook,
    ) -> Self {
        self.pre_dispatch_hook_with(name, hook, crate::hooks::HookSettings::new())
    }

    /// [`ExecutorBuilder::pre_dispatch_hook`] with the hook's own timeout or failure mode.
    pub fn pre_dispatch_hook_with(
        self,
        name: impl Into<String>,
        hook: impl crate::hooks::PreDispatchHook,
        settings: crate::hooks::HookSettings,
    ) -> Self {
        self.pre_dispatch_hook_arc(name, Arc::new(hook), settings)
    }

    /// [`ExecutorBuilder::pre_dispatch_hook_with`], shared.
    pub fn pre_dispatch_hook_arc(
        mut self,
        name: impl Into<String>,
        hook: Arc<dyn crate::hooks::PreDispatchHook>,
        settings: crate::hooks::HookSettings,
    ) -> Self {
        self.hooks.add_pre(name.into(), hook, settings);
        self
    }

    /// Adds a post-result hook under `name` (see [`crate::hooks`]): it runs on every answer
    /// after the executor's own filtering and before the record, after the hooks added
    /// before it, with the builder's timeout ([`ExecutorBuilder::hook_timeout`]), failing
    /// closed.
    pub fn post_result_hook(
        self,
        name: impl Into<String>,
        hook: impl crate::hooks::PostResultHook,
    ) -> Self {
        self.post_result_hook_with(name, hook, crate::hooks::HookSettings::new())
    }

    /// [`ExecutorBuilder::post_result_hook`] with the hook's own timeout or failure mode.
    pub fn post_result_hook_with(
        self,
        name: impl Into<String>,
        hook: impl crate::hooks::PostResultHook,
        settings: crate::hooks::HookSettings,
    ) -> Self {
        self.post_result_hook_arc(name, Arc::new(hook), settings)
    }

    /// [`ExecutorBuilder::post_result_hook_with`], shared.
    pub fn post_result_hook_arc(
        mut self,
        name: impl Into<String>,
        hook: Arc<dyn crate::hooks::PostResultHook>,
        settings: crate::hooks::HookSettings,
    ) -> Self {
        self.hooks.add_post(name.into(), hook, settings);
        self
    }

    /// How long a hook may take when it sets no timeout of its own (default 2 s,
    /// [`crate::hooks::DEFAULT_HOOK_TIMEOUT`]). A hook that takes longer fails closed
    /// unless it was added to fail open.
    pub fn hook_timeout(mut self, timeout: Duration) -> Self {
        self.hooks.set_timeout(timeout);
        self
    }

    /// Settings that weaken safety, for tests and demos.
    pub fn dangerous(self) -> DangerousExecutorBuilder {
        DangerousExecutorBuilder { inner: self }
    }

    /// Builds the executor.
    ///
    /// # Errors
    ///
    /// [`BuildError::MissingJournal`], [`BuildError::MissingApprovalStore`] for deferred
    /// consent on a journal that stores no approvals, [`BuildError::MissingChannel`] for an
    /// action whose channel was not added, [`BuildError::MissingVault`] for a credential
    /// binding without a vault, [`BuildError::Baseline`] for a baseline lockfile that cannot
    /// be read, [`BuildError::ShadowWithoutPolicy`] for a shadow policy without an enforced
    /// one.
    pub fn build(mut self) -> Result<Executor, BuildError> {
        let journal = self.journal.ok_or(BuildError::MissingJournal)?;
        if self.shadow.is_some() && self.policy.is_none() {
            return Err(BuildError::ShadowWithoutPolicy);
        }
        if self.approvals.any_deferred() && self.approval_store.is_none() {
            return Err(BuildError::MissingApprovalStore);
        }
        if let Some(path) = &self.baseline_lockfile {
            let guard = crate::drift::BaselineGuard::from_lockfile(&self.catalog, path)
                .map_err(BuildError::Baseline)?;
            self.definition_guard = Some(Arc::new(guard));
        }
        let approvals_channel = if self.approvals.any_deferred() {
            self.catalog = self
                .catalog
                .with_builtin::<crate::approval::CheckApproval>()
                .map_err(|_| BuildError::BuiltinNameTaken)?;
            let channel = crate::approval::ApprovalsChannel::new();
            self.channels.insert(
                crate::approval::check::CHANNEL.to_owned(),
                Arc::clone(&channel) as Arc<dyn Channel>,
            );
            Some(channel)
        } else {
            None
        };
        for entry in self.catalog.entries() {
            let spec = entry.spec();
            if let Some(channel) = spec.target.channel_name()
                && !self.channels.contains_key(channel)
            {
                return Err(BuildError::MissingChannel {
                    action: spec.name.to_string(),
                    channel: channel.to_owned(),
                });
            }
            if let (Some(credential), None) = (&spec.credential, &self.vault) {
                return Err(BuildError::MissingVault {
                    action: spec.name.to_string(),
                    credential: credential.to_string(),
                });
            }
        }
        let kept = super::kept::KeptRecords::new(
            Arc::clone(&journal),
            self.approval_store.clone(),
            self.kept_records_for,
        );
        let inner = Arc::new(Inner {
            catalog: self.catalog,
            channels: self.channels,
            vault: self.vault,
            journal,
            approval_store: self.approval_store,
            consent: self.consent,
            consent_timeout: self.consent_timeout,
            session_grant_ttl: self.session_grant_ttl,
            grants: SessionGrants::new(),
            drift_mode: self.drift_mode,
            max_argument_bytes: self.max_argument_bytes,
            definition_guard: self.definition_guard,
            unusable: Default::default(),
            journal_unwritable: Default::default(),
            approvals: self.approvals,
            policy: self.policy,
            shadow: self.shadow,
            calls: super::policy::CallCounting::new(
                match self.call_counts {
                    CallCounts::Journal => self.journal_call_store,
                    CallCounts::Local => None,
                    CallCounts::Store(store) => Some(store),
                },
                self.recent_calls,
            ),
            secret_scanner: self.secret_scanner,
            kept,
            hooks: self.hooks,
        });
        if let Some(channel) = approvals_channel {
            channel.attach(Arc::new(super::approvals::Host::new(&inner)));
        }
        Ok(Executor { inner })
    }
}

/// The danger door: settings that weaken safety, named so they stand out in review.
#[must_use]
#[derive(Debug)]
pub struct DangerousExecutorBuilder {
    inner: ExecutorBuilder,
}

impl DangerousExecutorBuilder {
    /// Approves every consent request without asking a human. Tests and demos only.
    pub fn auto_approve_consent(mut self) -> Self {
        self.inner.consent = Some(Arc::new(AutoApprove::new()));
        self
    }

    /// Back to the safe builder.
    pub fn done(self) -> ExecutorBuilder {
        self.inner
    }
}
