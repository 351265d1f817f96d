//! Consent: asking a human before a call that needs it.
//!
//! The executor asks only after every static check has passed and before anything is sent.
//! The request shows the action, its effect, the concrete objects, the agent's audit note and
//! the channel's summary of the exact request (never a secret).
//!
//! Every field a human reads is escaped first ([`escape`], [`ConsentDisplay`]): what the agent
//! wrote cannot move the cursor, add a line, reorder text or hide characters. Nothing is cut:
//! a request too long to show in full ([`MAX_SHOWN_BYTES`]) is refused before anyone is asked.

mod display;
mod grants;
mod providers;

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

pub use self::display::{ConsentDisplay, DisplayedObject, MAX_SHOWN_BYTES, escape};
pub use self::grants::SessionGrants;
pub use self::providers::{
    DenyAll, FnConsent, PendingConsent, QueueConsent, QueueConsentReceiver, TerminalConsent,
};
use crate::action::{ConsentRule, EffectClass, Externality, ScopedValue};

/// What a human is asked about.
///
/// The fields are the raw values (scrubbed of secrets, not escaped), for programs: match on
/// them, store them, compare them. A human is shown only [`ConsentRequest::display`] (or
/// [`ConsentRequest::render`], which is made from it).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ConsentRequest {
    /// The attempt this request is for.
    pub attempt_id: String,
    /// The session asking.
    pub session_id: String,
    /// The action.
    pub action: String,
    /// Its summary.
    pub summary: String,
    /// The effect class.
    pub effect: EffectClass,
    /// Internal or external.
    pub externality: Externality,
    /// The rule that made this request.
    pub rule: ConsentRule,
    /// The objects the call names.
    pub objects: Vec<ScopedValue>,
    /// The agent's stated reason (free text, never parsed).
    pub note: Option<String>,
    /// The channel's summary of the exact request (`POST /v1/…`, `web1: systemctl restart x`).
    pub request: String,
    /// The action's definition hash (a session grant is bound to it).
    pub definition_hash: String,
    /// The same fields escaped for a human to read ([`escape`]), none of them cut.
    pub display: ConsentDisplay,
}

impl ConsentRequest {
    /// Computes [`ConsentRequest::display`] from the raw fields as they are now (after the
    /// executor has scrubbed them).
    pub(crate) fn with_display(mut self) -> Self {
        self.display = ConsentDisplay::of(&self);
        self
    }

    /// The request as text for a terminal prompt, made from [`ConsentRequest::display`]:
    /// one line per field, whatever the agent wrote.
    pub fn render(&self) -> String {
        let d = &self.display;
        let mut out = format!(
            "Action: {} ({}, {})\n{}\nRequest: {}\n",
            d.action,
            self.effect,
            self.externality.as_str(),
            d.summary,
            d.request
        );
        for object in &d.objects {
            out.push_str(&format!("Object: {} {}\n", object.kind, object.value));
        }
        if let Some(note) = &d.note {
            out.push_str(&format!("Agent's reason: {note}\n"));
        }
        out
    }
}

/// A human's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsentDecision {
    /// Approve this call only.
    Approve,
    /// Approve this call and, for `session` actions, later calls of the same definition in
    /// this session until `ttl` passes (per-call actions still ask every time).
    ApproveForSession {
        /// How long the grant lasts.
        ttl: Duration,
    },
    /// Deny, with an optional reason that is shown to the agent.
    Deny {
        /// Why.
        reason: Option<String>,
    },
    /// Nobody can be asked (no terminal, no UI attached).
    Unavailable,
}

/// Asks a human whether a call may go ahead.
#[async_trait]
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot ask a human for consent",
    note = "implement `sallyport_core::consent::ConsentProvider`, or use `FnConsent`, `QueueConsent`, `TerminalConsent` or `DenyAll`"
)]
pub trait ConsentProvider: Send + Sync + 'static {
    /// Asks, and waits for the answer. The executor applies its own timeout around this.
    async fn ask(&self, request: &ConsentRequest) -> ConsentDecision;

    /// The front end's name, as the audit record of a deferred call's decision names it
    /// (`terminal`, `queue`, `mcp_elicitation`, …).
    fn channel(&self) -> &str {
        "consent_provider"
    }
}
