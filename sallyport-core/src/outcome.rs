//! What the agent gets back: [`ActionResult`] and its [`Status`].

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::code::Code;
pub use crate::code::RefusalCode;
use crate::ids::{AttemptId, ReceiptId};
pub use crate::ids::{Origin, Status};

/// The follow-up call the agent should make (a status check or a reconcile).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Next {
    /// The action to call.
    pub action: String,
    /// Its arguments.
    pub arguments: Value,
}

/// The compact, truthful answer to one tool call.
///
/// Serializes as the JSON object in DESIGN.md; fields that do not apply are omitted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ActionResult {
    /// The status.
    pub status: Status,
    /// The action the agent called (as it spelled it).
    pub action: String,
    /// Who decided, for `rejected` and `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// A machine-readable code (`out_of_scope`, `timeout_after_send`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<Code>,
    /// A short reason the agent can act on; safe to show.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Evidence of the new state, projected to the declared result fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// The follow-up call to make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<Next>,
    /// Details of a payload drift refusal or warning.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub divergences: Vec<crate::drift_model::Divergence>,
    /// The definition drift decision (partner form) of a `definition_drift` or
    /// `review_required` refusal; the full decision is in the audit record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<crate::drift_model::PartnerDecision>,
    /// The attempt this call created.
    pub attempt_id: AttemptId,
    /// The audit record of this call; a human can look it up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt_id: Option<ReceiptId>,
    /// The approval a parked call waits for (`awaiting_approval`); `next` checks it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<crate::ids::ApprovalId>,
}

impl ActionResult {
    pub(crate) fn new(status: Status, action: &str, attempt_id: AttemptId) -> Self {
        Self {
            status,
            action: action.to_owned(),
            origin: None,
            code: None,
            reason: None,
            data: None,
            next: None,
            divergences: Vec::new(),
            drift: None,
            attempt_id,
            receipt_id: None,
            approval_id: None,
        }
    }

    /// The code as its wire string (`"out_of_scope"`, …), if there is one.
    pub fn code_str(&self) -> Option<&str> {
        self.code.as_ref().map(Code::as_str)
    }

    /// Whether the agent should treat the call as failed (`rejected` or `unknown`).
    pub fn is_error(&self) -> bool {
        matches!(self.status, Status::Rejected | Status::Unknown)
    }

    /// The result as one line of JSON.
    pub fn to_json(&self) -> String {
        // Serializing this type cannot fail: every field is a plain value or a `Value`.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{\"status\":\"unknown\"}"))
    }

    /// A short plain-text rendering for a model or a log line.
    pub fn summary(&self) -> String {
        let mut out = format!("{}: {}", self.action, self.status);
        if let Some(code) = &self.code {
            out.push_str(&format!(" ({code})"));
        }
        if let Some(reason) = &self.reason {
            out.push_str(&format!(" — {reason}"));
        }
        if let Some(next) = &self.next {
            out.push_str(&format!(
                "; next: call {} with {}",
                next.action, next.arguments
            ));
        }
        out
    }
}

/// The executor declined a call before sending anything.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Refusal {
    /// The code.
    pub code: RefusalCode,
    /// A short reason, safe to show the agent.
    pub reason: String,
    /// Payload divergences, for `invalid_arguments`.
    pub divergences: Vec<crate::drift_model::Divergence>,
    /// The definition drift decision, for `definition_drift` and `review_required`. The
    /// executor sets its `receipt_id` to the refusal's audit record.
    pub decision: Option<Box<crate::drift_model::DriftDecision>>,
    /// The host policy's decision, for `policy_denied`: the audit record names it.
    pub policy: Option<Box<crate::policy_model::PolicyNote>>,
}

impl Refusal {
    /// A refusal with `code` and `reason`.
    pub fn new(code: RefusalCode, reason: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.into(),
            divergences: Vec::new(),
            decision: None,
            policy: None,
        }
    }

    /// Attaches the host policy's decision behind a `policy_denied` refusal.
    #[must_use]
    pub fn with_policy(mut self, note: crate::policy_model::PolicyNote) -> Self {
        self.policy = Some(Box::new(note));
        self
    }

    /// Attaches the definition drift decision behind a `definition_drift` or
    /// `review_required` refusal.
    #[must_use]
    pub fn with_decision(mut self, decision: crate::drift_model::DriftDecision) -> Self {
        self.decision = Some(Box::new(decision));
        self
    }

    /// Attaches payload divergences.
    #[must_use]
    pub fn with_divergences(mut self, divergences: Vec<crate::drift_model::Divergence>) -> Self {
        self.divergences = divergences;
        self
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.reason)
    }
}

impl std::error::Error for Refusal {}
