//! The call as the stages have established it so far: one flat view every stage from 4 on
//! reads (`call.spec()`, `call.scrubber()`, `call.credential()`), in place of a walk down
//! the stage values that came before.
//!
//! Stage 4 makes a [`Call`] from the validated arguments and the request its channel
//! prepared; stage 6 binds the resolved credential into it and gives it the scrubber that
//! knows that credential. Every later stage's value owns it, and which stage value holds it
//! still proves which stages ran: a `Call` is only ever read through one of them.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::policy::PolicyCheck;
use super::validate::Validated;
use crate::action::{ActionSpec, ScopedValue};
use crate::catalog::Entry;
use crate::channel::{Channel, PreparedRequest, RequestSummary, ResolvedName};
use crate::outcome::Refusal;
use crate::scrub::Scrubber;
use crate::vault::Credential;

/// What stages 1–4 established about one call, and from stage 6 on its bound credential.
/// Made only by stage 4 ([`super::authorize`]) and read through the stage values that own it.
pub(crate) struct Call {
    /// Stages 1–3: the catalog entry, the arguments as validated and decoded, the objects
    /// they name, the agent's note, the divergences the drift guard let through.
    validated: Validated,
    /// Stage 4: the channel that will send the request.
    channel: Arc<dyn Channel>,
    /// Stage 4: the prepared request, exactly as it will be sent (bound at stage 6).
    request: Box<dyn PreparedRequest>,
    /// The request's summary, rendered once when the request was prepared and again only
    /// when binding a credential changed the request.
    summary: RequestSummary,
    /// Stage 4: what the host's policy decided.
    policy: PolicyCheck,
    /// Stage 6: the resolved credential, when the action binds one (`None` before).
    credential: Option<Credential>,
    /// The call's scrubber: the vault's when the call began, replaced at stage 6 by one that
    /// also knows the resolved credential.
    scrubber: Arc<Scrubber>,
}

impl fmt::Debug for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("validated", &self.validated)
            .field("channel", &self.channel.name())
            .field("request", &self.request)
            .field("policy", &self.policy)
            .field(
                "credential",
                &self.credential.as_ref().map(|c| &c.meta().name),
            )
            .finish_non_exhaustive()
    }
}

impl Call {
    /// Stage 4's call: the validated arguments, the channel and the request it prepared,
    /// the policy's decision, and the scrubber the call began with.
    pub(super) fn new(
        validated: Validated,
        channel: Arc<dyn Channel>,
        request: Box<dyn PreparedRequest>,
        policy: PolicyCheck,
        scrubber: Arc<Scrubber>,
    ) -> Self {
        Self {
            validated,
            channel,
            summary: request.summary(),
            request,
            policy,
            credential: None,
            scrubber,
        }
    }

    /// The catalog entry.
    pub(crate) fn entry(&self) -> &Entry {
        self.validated.entry()
    }

    /// The action card.
    pub(crate) fn spec(&self) -> &ActionSpec {
        self.validated.entry().spec()
    }

    /// The action's definition hash.
    pub(crate) fn definition_hash(&self) -> &str {
        self.validated.entry().definition_hash()
    }

    /// The arguments as validated (in warn and shadow modes, as the drift guard left them).
    pub(crate) fn arguments(&self) -> &Value {
        self.validated.arguments()
    }

    /// The decoded input, shared (a precondition takes it).
    pub(crate) fn input_arc(&self) -> Arc<dyn Any + Send + Sync> {
        self.validated.input_arc()
    }

    /// The scoped objects the call names.
    pub(crate) fn objects(&self) -> &[ScopedValue] {
        self.validated.objects()
    }

    /// The agent's note, scrubbed, cut only with a visible count of what is not shown.
    pub(crate) fn note(&self) -> Option<&str> {
        self.validated.note()
    }

    /// The channel that will send the request.
    pub(crate) fn channel(&self) -> &Arc<dyn Channel> {
        &self.channel
    }

    /// The prepared request, exactly as it will be sent.
    pub(crate) fn request(&self) -> &dyn PreparedRequest {
        self.request.as_ref()
    }

    /// The request's summary now (after stage 6 bound the credential, with the real
    /// destination, as the human and the audit record see it).
    pub(crate) fn summary(&self) -> &RequestSummary {
        &self.summary
    }

    /// What the host's policy decided (nothing without a policy).
    pub(crate) fn policy(&self) -> &PolicyCheck {
        &self.policy
    }

    /// The resolved credential, when the action binds one (from stage 6 on).
    pub(crate) fn credential(&self) -> Option<&Credential> {
        self.credential.as_ref()
    }

    /// The name and version of the resolved credential.
    pub(crate) fn resolved(&self) -> Option<ResolvedName> {
        self.credential.as_ref().map(|c| ResolvedName {
            name: c.meta().name.clone(),
            version: c.meta().version,
        })
    }

    /// The call's scrubber: from stage 6 on, every secret the vault knew then and the
    /// resolved credential.
    pub(crate) fn scrubber(&self) -> &Arc<Scrubber> {
        &self.scrubber
    }

    /// Stage 6: binds `credential` to the prepared request and keeps it.
    pub(super) fn bind(&mut self, credential: Credential) -> Result<(), Refusal> {
        self.request.bind(&credential)?;
        self.summary = self.request.summary();
        self.credential = Some(credential);
        Ok(())
    }

    /// Stage 6: the call's scrubber from here on.
    pub(super) fn scrub_with(&mut self, scrubber: Arc<Scrubber>) {
        self.scrubber = scrubber;
    }
}
