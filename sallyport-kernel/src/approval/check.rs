//! The built-in `check_approval` action and the channel that answers it from the journal.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Approval, ApprovalId, ApprovalState, CHECK_APPROVAL};
use crate::action::{Action, ActionSpec, EffectClass};
use crate::channel::{
    CallView, Channel, ChannelOutcome, DescribedRequest, Dispatch, PreparedRequest,
};
use crate::code::RefusalCode;
use crate::journal::ApprovalStore;
use crate::outcome::{Next, Origin, Refusal, Status};
use crate::target::Target;

/// The channel name of the built-in action.
pub(crate) const CHANNEL: &str = "sallyport.approvals";

/// Tells where a call parked for a human's approval stands: `pending` while it awaits a
/// decision, `rejected` when denied or expired, and once approved and carried out, the
/// executed call's status with its result under `data.result`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckApproval {
    /// The `approval_id` of the parked call (`apr_…`).
    #[schemars(length(min = 5, max = 80), regex(pattern = r"^apr_[0-9a-f]+$"))]
    pub approval_id: String,
}

impl Action for CheckApproval {
    const NAME: &'static str = CHECK_APPROVAL;
    type Output = Value;

    fn spec() -> ActionSpec {
        ActionSpec::new(CHECK_APPROVAL, EffectClass::Observe)
            .with_description(
                "Tells where a call parked for a human's approval stands: awaiting, denied, expired, or the executed call's result. Read-only; call it with the approval_id a pending result named.",
            )
            .with_result_text(
                "data.state (awaiting, approved, executing, denied, expired, finished), data.expires_at, and data.result (the executed call's result) once finished",
            )
            .with_target(Target::custom(CHANNEL, json!({"builtin": CHECK_APPROVAL})))
    }
}

/// Answers `check_approval` from the journal; an approved call not yet carried out is
/// carried out first, by the executor that answers.
pub(crate) struct ApprovalsChannel {
    host: OnceLock<Arc<dyn ApprovalHost>>,
}

/// What `check_approval` needs of the executor it belongs to. A trait, so this module does
/// not import the executor, which sits above it (the executor implements it on a weak
/// reference to itself: the channel does not keep its executor alive).
#[async_trait]
pub(crate) trait ApprovalHost: Send + Sync {
    /// The executor's approval store; `None` once the executor is gone (or when it has no
    /// store, which deferred consent, the only way to this channel, rules out).
    fn journal(&self) -> Option<Arc<dyn ApprovalStore>>;
    /// Carries out approval `id` if it is approved and not yet carried out (what came of it
    /// is in the journal).
    async fn resume(&self, id: &ApprovalId);
}

impl std::fmt::Debug for ApprovalsChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalsChannel").finish_non_exhaustive()
    }
}

impl ApprovalsChannel {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            host: OnceLock::new(),
        })
    }

    /// Connects the channel to the executor it belongs to (once, when it is built).
    pub(crate) fn attach(&self, host: Arc<dyn ApprovalHost>) {
        let _ = self.host.set(host);
    }
}

#[async_trait]
impl Channel for ApprovalsChannel {
    fn name(&self) -> &str {
        CHANNEL
    }

    fn prepare(&self, call: &CallView<'_>) -> Result<Box<dyn PreparedRequest>, Refusal> {
        let id = call
            .arguments
            .get("approval_id")
            .and_then(Value::as_str)
            .ok_or_else(|| Refusal::new(RefusalCode::InvalidArguments, "approval_id is missing"))?;
        Ok(Box::new(DescribedRequest::new(
            format!("read approval {id}"),
            json!({ "approval_id": id }),
        )))
    }

    async fn dispatch(&self, call: Dispatch<'_>) -> ChannelOutcome {
        let Some(request) = call.prepared::<DescribedRequest>() else {
            return ChannelOutcome::new(Status::Rejected)
                .with_origin(Origin::Executor)
                .with_code(RefusalCode::InvalidRequest)
                .with_reason("internal: a request prepared by another channel");
        };
        let id = ApprovalId::from_stored(
            request.arguments()["approval_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
        let Some(host) = self.host.get() else {
            return unavailable();
        };
        let Some(journal) = host.journal() else {
            return unavailable();
        };
        let permit = match call.context.permit().await {
            Ok(permit) => permit,
            Err(outcome) => return outcome,
        };
        permit.sending();
        let mut approval = match journal.approval(&id).await {
            // An agent learns only about its own session's calls.
            Ok(Some(a)) if a.session.id().as_str() == call.context.session_id() => a,
            Ok(_) => {
                return ChannelOutcome::new(Status::Rejected)
                    .with_origin(Origin::Executor)
                    .with_code(RefusalCode::ApprovalNotFound)
                    .with_reason(format!(
                        "no approval {id} is recorded; use the approval_id a pending result named"
                    ));
            }
            Err(_) => return unavailable(),
        };
        // An approved call waits for an executor that holds its action: this one, now.
        if approval.state == ApprovalState::Approved {
            host.resume(&id).await;
        }
        // An awaiting approval past its expiry is recorded as expired by whoever sees it.
        if approval.state == ApprovalState::Awaiting
            && approval.is_expired_at(crate::clock::now_ms())
            && let Ok(super::Transition::Applied(_)) =
                super::expire(journal.as_ref(), &approval, crate::clock::now_ms()).await
        {
            tracing::info!(approval = %id, "approval expired undecided");
        }
        match journal.approval(&id).await {
            Ok(Some(now)) => approval = now,
            Ok(None) | Err(_) => return unavailable(),
        }
        status_outcome(&approval)
    }
}

fn unavailable() -> ChannelOutcome {
    ChannelOutcome::new(Status::Rejected)
        .with_origin(Origin::Executor)
        .with_code(RefusalCode::JournalUnavailable)
        .with_reason("the approval store cannot be read now; nothing changed; check again later")
}

/// The answer `check_approval` gives for `approval` as it stands.
pub(crate) fn status_outcome(approval: &Approval) -> ChannelOutcome {
    let data = status_data(approval);
    let outcome = |status| ChannelOutcome::new(status).with_data(data.clone());
    match approval.state {
        ApprovalState::Executing
            if approval
                .claim
                .as_ref()
                .is_some_and(|c| c.until_ms <= crate::clock::now_ms()) =>
        {
            let attempt = approval
                .execution
                .as_ref()
                .map_or_else(String::new, |a| format!(" (attempt {a})"));
            outcome(Status::Unknown)
                .with_origin(Origin::Executor)
                .with_reason(format!(
                    "the executor carrying out this approved call stopped after recording its intent{attempt}; the request may have been sent; do not retry; the attempt is listed as unresolved for reconcile"
                ))
        }
        ApprovalState::Awaiting | ApprovalState::Approved | ApprovalState::Executing => {
            let reason = match approval.state {
                ApprovalState::Awaiting => format!(
                    "waiting for a human's decision until {}; nothing was sent yet",
                    approval.expires_at()
                ),
                ApprovalState::Approved => {
                    "approved; waiting for an executor to carry it out".to_owned()
                }
                _ => "approved and being carried out".to_owned(),
            };
            let mut o = outcome(Status::Pending)
                .with_origin(Origin::Executor)
                .with_code(RefusalCode::AwaitingApproval)
                .with_reason(reason);
            o.next = Some(check_next(&approval.approval_id));
            o
        }
        ApprovalState::Denied => {
            let reason = approval
                .decision
                .as_ref()
                .and_then(|d| d.reason.as_deref())
                .map_or_else(
                    || "a human denied this call; nothing was sent".to_owned(),
                    |r| format!("a human denied this call: {r}; nothing was sent"),
                );
            outcome(Status::Rejected)
                .with_origin(Origin::Executor)
                .with_code(RefusalCode::ConsentDenied)
                .with_reason(reason)
        }
        ApprovalState::Expired => outcome(Status::Rejected)
            .with_origin(Origin::Executor)
            .with_code(RefusalCode::ApprovalExpired)
            .with_reason("no one decided before the approval expired; nothing was sent"),
        ApprovalState::Finished => match &approval.result {
            Some(result) => {
                let mut o =
                    outcome(result.status).with_origin(result.origin.unwrap_or(Origin::Executor));
                o.code = result.code.clone();
                o.reason = result.reason.clone();
                o.next = result.next.clone();
                o
            }
            None => outcome(Status::Unknown)
                .with_origin(Origin::Executor)
                .with_reason(
                    "the approved call finished but its result is not recorded; do not retry",
                ),
        },
    }
}

fn status_data(approval: &Approval) -> Value {
    let mut data = json!({
        "approval_id": approval.approval_id,
        "action": approval.action,
        "state": approval.state.as_str(),
        "expires_at": approval.expires_at(),
    });
    if let Some(d) = &approval.decision {
        data["decided_by"] = json!(d.decider.by);
        data["decided_via"] = json!(d.decider.channel);
    }
    if let Some(result) = &approval.result {
        data["result"] = serde_json::to_value(result).unwrap_or(Value::Null);
    }
    data
}

/// The `next` of a parked call: check its approval.
pub(crate) fn check_next(id: &ApprovalId) -> Next {
    Next {
        action: CHECK_APPROVAL.to_owned(),
        arguments: json!({ "approval_id": id }),
    }
}
