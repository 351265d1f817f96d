//! What a policy decided, as results and audit records carry it. `sallyport-kernel`'s
//! `policy` module re-exports these beside the `Policy` trait that decides.

use crate::string_enum;
use serde::{Deserialize, Serialize};

string_enum! {
    /// A policy's verdict on one call.
    ///
    /// Not `#[non_exhaustive]`: the executor must decide what each verdict does, and a new one
    /// must be a compile error there rather than a wildcard arm.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum PolicyVerdict {
        /// The call goes on under the action's own consent rule.
        Allow => "allow",
        /// The call is refused (`policy_denied`); nothing is sent.
        Deny => "deny",
        /// The call goes on, and a human must approve this one call.
        RequireConsent => "require_consent",
    }
}

/// A policy's answer: the verdict, a reason, and the rules that decided.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyDecision {
    /// The verdict.
    pub verdict: PolicyVerdict,
    /// Why, in words the agent may read (a deny's reason is the refusal's reason). Never
    /// put a secret here; it is scrubbed like every text that leaves the executor.
    pub reason: Option<String>,
    /// The rules that decided, by id (a Cedar policy's `@id`), for the audit record.
    pub rules: Vec<String>,
}

impl PolicyDecision {
    /// Allows the call.
    pub fn allow() -> Self {
        Self {
            verdict: PolicyVerdict::Allow,
            reason: None,
            rules: Vec::new(),
        }
    }

    /// Denies the call, with a reason the agent may read.
    pub fn deny(reason: impl Into<String>) -> Self {
        Self {
            verdict: PolicyVerdict::Deny,
            reason: Some(reason.into()),
            rules: Vec::new(),
        }
    }

    /// Lets the call go on only if a human approves this one call.
    pub fn require_consent(reason: impl Into<String>) -> Self {
        Self {
            verdict: PolicyVerdict::RequireConsent,
            reason: Some(reason.into()),
            rules: Vec::new(),
        }
    }

    /// Names a rule that decided.
    #[must_use]
    pub fn with_rule(mut self, rule: impl Into<String>) -> Self {
        self.rules.push(rule.into());
        self
    }

    /// Sets the reason.
    #[must_use]
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// The audit record's account of a policy decision: `policy: {name, decision, reason,
/// rules}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PolicyNote {
    /// The policy's `Policy::name`.
    pub name: String,
    /// Its verdict.
    pub decision: PolicyVerdict,
    /// Its reason (scrubbed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The rules that decided.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
}

impl PolicyNote {
    /// The note of `decision` by the policy named `name`.
    pub fn new(name: impl Into<String>, decision: &PolicyDecision) -> Self {
        Self {
            name: name.into(),
            decision: decision.verdict,
            reason: decision.reason.clone(),
            rules: decision.rules.clone(),
        }
    }
}
