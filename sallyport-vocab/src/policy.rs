//! What a policy decided, as results and audit records carry it. `sallyport-kernel`'s
//! `policy` module re-exports these beside the `Policy` trait that decides.
//!
//! [`PolicyNote`] is the enforced policy's decision (`policy: {…}` on an audit record);
//! [`ShadowNote`] is what a candidate policy running in shadow would have decided about the
//! same call (`shadow: {…}`), and whether that differs (`flip`).

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

/// The audit record's account of a candidate policy run in shadow beside the enforced one
/// (`shadow: {name, decision, reason, rules, flip}`): what it would have decided about the
/// call, on the same request and counts, and whether that differs from the enforced
/// decision. It never changed the call.
///
/// A candidate that failed (it panicked) has no `decision`, says why in `failed`, and is
/// never a flip.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ShadowNote {
    /// The candidate's name (the name it was added under, else its `Policy::name`).
    pub name: String,
    /// Its verdict; absent when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<PolicyVerdict>,
    /// Its reason (scrubbed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The rules that decided.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
    /// Whether its verdict differs from the enforced policy's (`false` when it failed).
    pub flip: bool,
    /// Why it has no decision (`panicked: …`, scrubbed); absent when it decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

impl ShadowNote {
    /// The note of `decision` by the candidate named `name`, beside the enforced verdict
    /// `enforced`.
    pub fn decided(
        name: impl Into<String>,
        decision: &PolicyDecision,
        enforced: PolicyVerdict,
    ) -> Self {
        Self {
            name: name.into(),
            decision: Some(decision.verdict),
            reason: decision.reason.clone(),
            rules: decision.rules.clone(),
            flip: decision.verdict != enforced,
            failed: None,
        }
    }

    /// The note of a candidate named `name` that could not decide, and why.
    pub fn failed(name: impl Into<String>, why: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            decision: None,
            reason: None,
            rules: Vec::new(),
            flip: false,
            failed: Some(why.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shadow_note_flips_only_when_the_verdicts_differ_and_serializes_to_the_audit_shape() {
        let deny = PolicyDecision::deny("no deletes").with_rule("no-delete");
        let flip = ShadowNote::decided("candidate", &deny, PolicyVerdict::Allow);
        assert!(flip.flip);
        assert_eq!(
            serde_json::to_string(&flip).unwrap(),
            r#"{"name":"candidate","decision":"deny","reason":"no deletes","rules":["no-delete"],"flip":true}"#
        );
        assert_eq!(
            serde_json::from_str::<ShadowNote>(&serde_json::to_string(&flip).unwrap()).unwrap(),
            flip
        );
        let same = ShadowNote::decided("candidate", &PolicyDecision::allow(), PolicyVerdict::Allow);
        assert_eq!(
            serde_json::to_string(&same).unwrap(),
            r#"{"name":"candidate","decision":"allow","flip":false}"#
        );
        let failed = ShadowNote::failed("candidate", "panicked: boom");
        assert_eq!(
            serde_json::to_string(&failed).unwrap(),
            r#"{"name":"candidate","flip":false,"failed":"panicked: boom"}"#
        );
    }
}
