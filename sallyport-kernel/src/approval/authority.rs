//! Who may decide which approvals: the host's decision policy, and the signature check.

use std::fmt;

use super::{Approval, Decider, Verdict};

/// Says whether an approver may decide an approval (Cedar's `sallyport_cedar::CedarDecisionPolicy`
/// implements it: principal the approver, action `decide`, resource the approval).
///
/// Without one, every approver may decide every approval, as before decision policies
/// existed. Separation of duties holds with or without one: the session's requester never
/// approves its own call ([`Approval::refusal`]).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a decision policy",
    note = "implement `sallyport_core::approval::DecisionPolicy` (or use `sallyport_cedar::CedarDecisionPolicy`)"
)]
pub trait DecisionPolicy: Send + Sync + fmt::Debug {
    /// Whether `request.decider` may give `request.verdict` on `request.approval`. Fail
    /// closed: a policy that cannot evaluate refuses.
    fn authorize(&self, request: &DecisionRequest<'_>) -> Authority;
}

/// What a decision policy is asked.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct DecisionRequest<'a> {
    /// The approval as it stands.
    pub approval: &'a Approval,
    /// The approver.
    pub decider: &'a Decider,
    /// Approve or deny.
    pub verdict: Verdict,
}

impl<'a> DecisionRequest<'a> {
    /// A request to decide `approval`.
    pub fn new(approval: &'a Approval, decider: &'a Decider, verdict: Verdict) -> Self {
        Self {
            approval,
            decider,
            verdict,
        }
    }
}

/// A decision policy's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Authority {
    /// The approver may decide.
    Allow,
    /// The approver may not; `reason` says which rule (shown to the approver and audited).
    Refuse {
        /// Why.
        reason: String,
    },
}

/// What [`check_signature`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignatureCheck {
    /// The decision carries no signature.
    Unsigned,
    /// The signature verifies over [`Decider::statement`] with the key it names.
    Valid,
    /// The signature, or the key it names, does not verify.
    Invalid,
}

/// Checks `decider`'s signature over its `verdict` on `approval` (Ed25519, strict).
pub fn check_signature(approval: &Approval, decider: &Decider, verdict: Verdict) -> SignatureCheck {
    use ed25519_dalek::{Signature, VerifyingKey};
    let Some(signed) = &decider.signature else {
        return SignatureCheck::Unsigned;
    };
    let key = hex::decode(&signed.public_key)
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .and_then(|b| VerifyingKey::from_bytes(&b).ok());
    let signature = hex::decode(&signed.signature)
        .ok()
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
        .map(|b| Signature::from_bytes(&b));
    match (key, signature) {
        (Some(key), Some(signature))
            if key
                .verify_strict(&decider.statement(approval, verdict), &signature)
                .is_ok() =>
        {
            SignatureCheck::Valid
        }
        _ => SignatureCheck::Invalid,
    }
}
