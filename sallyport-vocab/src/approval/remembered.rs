//! Remembered approvals: an approver's "approve and remember" on a parked call, which lets
//! later calls of the same action go out without asking, within an explicit scope.
//!
//! A [`RememberedApproval`] is bound to the action's definition hash when it was made: a
//! definition that changed since (drift) is never covered by it, and the executor revokes it
//! when a call first meets the changed definition. It lives until it is
//! revoked ([`RememberedApproval::revoke`]) or until its expiry, at most
//! [`MAX_REMEMBER`] after it was made. The rules here are the one statement every backend
//! applies; the executor decides with [`RememberedApproval::covers`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Approval, Decider, clean};
use crate::action::EffectClass;
use crate::clock::rfc3339;
use crate::ids::ApprovalId;
pub use crate::ids::RememberedId;

/// The longest a remembered approval lives: 30 days. A time window is capped at it, and an
/// approval remembered for exact arguments or a session expires after it too, so nothing
/// remembered outlives a month without an approver renewing it.
pub const MAX_REMEMBER: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// What an approver asks to be remembered, before it is bound to a parked call
/// ([`RememberScope::for_approval`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RememberChoice {
    /// The same prepared request again (same arguments, same destination), from any
    /// session.
    ExactArguments,
    /// Any arguments, in the parked call's session.
    Session,
    /// Any arguments, in any session, for this long (at most [`MAX_REMEMBER`]).
    Window(Duration),
}

/// Which later calls a remembered approval covers, bound to the parked call it was made on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RememberScope {
    /// Calls whose prepared request has this fingerprint (SHA-256 over the action, the
    /// definition hash and the prepared request: the same arguments and destination).
    ExactArguments {
        /// The parked call's fingerprint.
        fingerprint: String,
    },
    /// Calls made in this session.
    Session {
        /// The parked call's session id.
        session_id: String,
    },
    /// Any call until this time (Unix milliseconds).
    Window {
        /// The window's end.
        until_ms: u64,
    },
}

/// Why an approval cannot be remembered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotRememberable {
    /// The action's effect is `irreversible_or_broad`: every such call is asked.
    #[error(
        "`{action}` is irreversible_or_broad: every call of it needs its own approval, so it cannot be remembered; approve this one call without --remember"
    )]
    IrreversibleOrBroad {
        /// The action.
        action: String,
    },
    /// The call needs several approvers (a quorum); one approver's standing consent cannot
    /// stand in for them.
    #[error(
        "this call needs {required} distinct approvers; one approver cannot remember an approval that needs a quorum; approve it without --remember"
    )]
    Quorum {
        /// How many approvers the call needs.
        required: u32,
    },
    /// The window is empty or longer than [`MAX_REMEMBER`].
    #[error(
        "a remembered window must be longer than 0 s and at most 30 days (asked for {asked_s} s)"
    )]
    Window {
        /// The window asked for, in seconds.
        asked_s: u64,
    },
}

impl RememberScope {
    /// The scope `choice` makes of `approval` at `now_ms`, and the expiry of what is
    /// remembered; refused for an `irreversible_or_broad` action, a quorum, and a window that
    /// is empty or longer than [`MAX_REMEMBER`].
    ///
    /// # Errors
    ///
    /// [`NotRememberable`], saying why.
    pub fn for_approval(
        choice: RememberChoice,
        approval: &Approval,
        now_ms: u64,
    ) -> Result<(Self, u64), NotRememberable> {
        if approval.effect == EffectClass::IrreversibleOrBroad {
            return Err(NotRememberable::IrreversibleOrBroad {
                action: clean(&approval.action, 128),
            });
        }
        if approval.required_approvals > 1 {
            return Err(NotRememberable::Quorum {
                required: approval.required_approvals,
            });
        }
        let longest = now_ms.saturating_add(millis(MAX_REMEMBER));
        Ok(match choice {
            RememberChoice::ExactArguments => (
                Self::ExactArguments {
                    fingerprint: approval.fingerprint.clone(),
                },
                longest,
            ),
            RememberChoice::Session => (
                Self::Session {
                    session_id: approval.session.id().as_str().to_owned(),
                },
                longest,
            ),
            RememberChoice::Window(window) => {
                if window.is_zero() || window > MAX_REMEMBER {
                    return Err(NotRememberable::Window {
                        asked_s: window.as_secs(),
                    });
                }
                let until_ms = now_ms.saturating_add(millis(window));
                (Self::Window { until_ms }, until_ms)
            }
        })
    }

    /// The scope in words: `exact arguments`, `session s1`, `any arguments until …`.
    pub fn describe(&self) -> String {
        match self {
            Self::ExactArguments { .. } => "exact arguments".to_owned(),
            Self::Session { session_id } => format!("session {session_id}"),
            Self::Window { until_ms } => format!("any arguments until {}", rfc3339(*until_ms)),
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Who revoked a remembered approval, and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Revocation {
    /// The person or system that revoked it, and through which front end.
    pub by: Decider,
    /// When, in Unix milliseconds.
    pub at_ms: u64,
}

impl Revocation {
    /// A revocation by `by` at `at_ms`.
    pub fn new(by: Decider, at_ms: u64) -> Self {
        Self { by, at_ms }
    }
}

/// An approver's standing approval of later calls of one action, as the approval store
/// keeps it.
///
/// Not `#[non_exhaustive]`: a backend reads it back whole, and a field added here must be
/// a compile error where one is built.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RememberedApproval {
    /// The remembered approval (`rem_…`).
    pub remembered_id: RememberedId,
    /// The parked call it was made on (that call was approved by the same decision).
    pub source: ApprovalId,
    /// The action it covers.
    pub action: String,
    /// The action's definition hash when it was made: a call under another definition is
    /// never covered (drift revokes it).
    pub definition_hash: String,
    /// Which calls it covers.
    pub scope: RememberScope,
    /// The approver who remembered it.
    pub created_by: Decider,
    /// When (Unix milliseconds).
    pub created_at_ms: u64,
    /// When it stops covering calls (Unix milliseconds).
    pub expires_at_ms: u64,
    /// Who revoked it and when, once revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked: Option<Revocation>,
}

/// The call a remembered approval is asked to cover (see [`RememberedApproval::covers`]).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CoveredCall<'a> {
    /// The action.
    pub action: &'a str,
    /// The action's definition hash now.
    pub definition_hash: &'a str,
    /// The call's session id.
    pub session_id: &'a str,
    /// The principal that requested the call, if the session names one.
    pub requester: Option<&'a str>,
    /// The fingerprint of the prepared request.
    pub fingerprint: &'a str,
    /// Now (Unix milliseconds).
    pub now_ms: u64,
}

impl<'a> CoveredCall<'a> {
    /// The call of `action` under `definition_hash`, in `session_id`, with the prepared
    /// request's `fingerprint`, at `now_ms`.
    pub fn new(
        action: &'a str,
        definition_hash: &'a str,
        session_id: &'a str,
        fingerprint: &'a str,
        now_ms: u64,
    ) -> Self {
        Self {
            action,
            definition_hash,
            session_id,
            requester: None,
            fingerprint,
            now_ms,
        }
    }

    /// Requested by this principal.
    #[must_use]
    pub fn requested_by(mut self, requester: Option<&'a str>) -> Self {
        self.requester = requester;
        self
    }
}

impl RememberedApproval {
    /// Whether it still covers calls at `now_ms`: not revoked, not expired (and, for a
    /// window, inside it).
    pub fn is_live_at(&self, now_ms: u64) -> bool {
        let window_open = match self.scope {
            RememberScope::Window { until_ms } => now_ms < until_ms,
            _ => true,
        };
        self.revoked.is_none() && now_ms < self.expires_at_ms && window_open
    }

    /// Whether it lets `call` go without asking: live, the same action under the same
    /// definition hash (a changed definition is never covered), inside its scope, and not
    /// requested by the approver who remembered it (separation of duties holds for
    /// remembered approvals too).
    pub fn covers(&self, call: &CoveredCall<'_>) -> bool {
        let in_scope = match &self.scope {
            RememberScope::ExactArguments { fingerprint } => fingerprint == call.fingerprint,
            RememberScope::Session { session_id } => session_id == call.session_id,
            RememberScope::Window { .. } => true,
        };
        let own = call
            .requester
            .is_some_and(|r| r.trim() == self.created_by.by.trim());
        self.is_live_at(call.now_ms)
            && self.action == call.action
            && self.definition_hash == call.definition_hash
            && in_scope
            && !own
    }

    /// Revokes it if it is not revoked yet. Returns whether it changed. The one statement
    /// of the rule: every backend applies it to the row it loaded.
    pub fn revoke(&mut self, revocation: &Revocation) -> bool {
        if self.revoked.is_some() {
            return false;
        }
        self.revoked = Some(revocation.clone());
        true
    }

    /// Where it stands at `now_ms`: `live`, `revoked` or `expired`.
    pub fn standing(&self, now_ms: u64) -> &'static str {
        if self.revoked.is_some() {
            "revoked"
        } else if self.is_live_at(now_ms) {
            "live"
        } else {
            "expired"
        }
    }

    /// The expiry as RFC 3339.
    pub fn expires_at(&self) -> String {
        rfc3339(self.expires_at_ms)
    }

    /// Why a call went out without asking, in words: `approved by remembered approval rem_…
    /// by alice (cli), scope exact arguments`.
    pub fn reason(&self) -> String {
        format!(
            "approved by remembered approval {} by {} ({}), scope {}",
            self.remembered_id,
            self.created_by.by,
            self.created_by.channel,
            self.scope.describe()
        )
    }
}

/// The answer of a revocation.
///
/// Not `#[non_exhaustive]`: every caller must handle each answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Revoked {
    /// Revoked now (and audited): as it is now.
    Applied(RememberedApproval),
    /// It was already revoked: as it is.
    Unchanged(RememberedApproval),
    /// No remembered approval has that id.
    NotFound,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::tests::awaiting;

    fn remembered(choice: RememberChoice) -> RememberedApproval {
        let approval = awaiting();
        let (scope, expires_at_ms) =
            RememberScope::for_approval(choice, &approval, 1_000).expect("rememberable");
        RememberedApproval {
            remembered_id: RememberedId::generate(),
            source: approval.approval_id,
            action: approval.action,
            definition_hash: approval.definition_hash,
            scope,
            created_by: Decider::new("alice", "cli"),
            created_at_ms: 1_000,
            expires_at_ms,
            revoked: None,
        }
    }

    fn call<'a>(fingerprint: &'a str, session: &'a str, now_ms: u64) -> CoveredCall<'a> {
        CoveredCall::new("pay_invoice", "ddd", session, fingerprint, now_ms)
    }

    #[test]
    fn exact_arguments_cover_only_the_same_request_under_the_same_definition() {
        let mut r = remembered(RememberChoice::ExactArguments);
        r.definition_hash = "ddd".into();
        let fp = "f".repeat(64);
        assert!(r.covers(&call(&fp, "other-session", 2_000)));
        assert!(!r.covers(&call("another", "s1", 2_000)));
        let mut drifted = call(&fp, "s1", 2_000);
        drifted.definition_hash = "eee";
        assert!(!r.covers(&drifted), "a changed definition is never covered");
        let mut other = call(&fp, "s1", 2_000);
        other.action = "refund";
        assert!(!r.covers(&other));
        assert!(!r.covers(&call(&fp, "s1", 2_000).requested_by(Some("alice"))));
        assert!(r.covers(&call(&fp, "s1", 2_000).requested_by(Some("rita"))));
    }

    #[test]
    fn a_session_scope_covers_only_its_session_and_a_window_ends() {
        let mut s = remembered(RememberChoice::Session);
        s.definition_hash = "ddd".into();
        assert!(s.covers(&call("any", "s1", 2_000)));
        assert!(!s.covers(&call("any", "s2", 2_000)));
        let mut w = remembered(RememberChoice::Window(Duration::from_secs(1)));
        w.definition_hash = "ddd".into();
        assert_eq!(w.scope, RememberScope::Window { until_ms: 2_000 });
        assert!(w.covers(&call("any", "s9", 1_999)));
        assert!(!w.covers(&call("any", "s9", 2_000)));
        assert_eq!(w.standing(2_000), "expired");
    }

    #[test]
    fn a_revoked_approval_covers_nothing_and_is_revoked_once() {
        let mut r = remembered(RememberChoice::Session);
        r.definition_hash = "ddd".into();
        let revocation = Revocation::new(Decider::new("bob", "console"), 1_500);
        assert!(r.revoke(&revocation));
        assert!(!r.revoke(&Revocation::new(Decider::new("carol", "cli"), 1_600)));
        assert_eq!(r.revoked.as_ref().map(|v| v.by.by.as_str()), Some("bob"));
        assert!(!r.covers(&call("any", "s1", 2_000)));
        assert_eq!(r.standing(2_000), "revoked");
    }

    #[test]
    fn irreversible_quorum_and_overlong_windows_are_not_rememberable() {
        let mut broad = awaiting();
        broad.effect = EffectClass::IrreversibleOrBroad;
        let refused = RememberScope::for_approval(RememberChoice::ExactArguments, &broad, 0)
            .expect_err("refused");
        assert!(matches!(
            refused,
            NotRememberable::IrreversibleOrBroad { .. }
        ));
        assert!(
            refused.to_string().contains("irreversible_or_broad"),
            "{refused}"
        );
        let mut quorum = awaiting();
        quorum.required_approvals = 2;
        assert_eq!(
            RememberScope::for_approval(RememberChoice::Session, &quorum, 0),
            Err(NotRememberable::Quorum { required: 2 })
        );
        let long = MAX_REMEMBER + Duration::from_secs(1);
        assert!(matches!(
            RememberScope::for_approval(RememberChoice::Window(long), &awaiting(), 0),
            Err(NotRememberable::Window { .. })
        ));
        assert!(matches!(
            RememberScope::for_approval(RememberChoice::Window(Duration::ZERO), &awaiting(), 0),
            Err(NotRememberable::Window { .. })
        ));
        let (_, expiry) =
            RememberScope::for_approval(RememberChoice::ExactArguments, &awaiting(), 0)
                .expect("ok");
        assert_eq!(expiry, 30 * 24 * 3_600_000);
    }

    #[test]
    fn a_remembered_approval_round_trips_through_json() {
        let r = remembered(RememberChoice::Window(Duration::from_secs(60)));
        let json = serde_json::to_value(&r).expect("json");
        assert_eq!(json["scope"]["kind"], "window");
        let back: RememberedApproval = serde_json::from_value(json).expect("back");
        assert_eq!(back, r);
    }
}
