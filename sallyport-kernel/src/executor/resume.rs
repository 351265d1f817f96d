//! Resuming an approved call: claim it, then run the pipeline's resume path under the claim.

use super::{Executor, pipeline, spans};
use crate::approval::{ApprovalError, ApprovalId, ApprovalState, Transition};
use crate::code::RefusalCode;
use crate::outcome::ActionResult;
use crate::outcome::Refusal;

/// Where a resumed call's telemetry goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Trace {
    /// An `execute_tool` span of its own ([`Executor::resume_approval`] from a front end, a
    /// worker or `check_approval`).
    OwnSpan,
    /// The current call's span: the call a consent provider approved at once, carried out
    /// inside the agent's call.
    InCall,
}

/// See [`Executor::resume_approval`].
pub(super) async fn resume(
    executor: &Executor,
    id: &ApprovalId,
    trace: Trace,
) -> Result<Option<ActionResult>, ApprovalError> {
    let inner = &executor.inner;
    let journal = inner.approval_store()?;
    let Some(current) = journal.approval(id).await? else {
        return Err(ApprovalError::NotFound(id.clone()));
    };
    // Only an executor holding the action carries it out; another leaves it for one that
    // does (it must not void an approval meant for another process's catalog).
    if current.state != ApprovalState::Approved || inner.catalog.get(&current.action).is_none() {
        return Ok(None);
    }
    let settings = &inner.approvals;
    let lease = u64::try_from(settings.lease.as_millis()).unwrap_or(u64::MAX);
    let approval = match journal
        .claim_approval(id, &settings.instance, crate::clock::now_ms(), lease)
        .await?
    {
        Transition::Applied(a) => a,
        Transition::Unchanged(_) => return Ok(None),
        Transition::NotFound => return Err(ApprovalError::NotFound(id.clone())),
    };
    let Some(claim) = approval.claim.clone() else {
        return Ok(None);
    };
    let run = async {
        // The scope checked again is the session's scope now, when the host can say; a
        // session the host no longer knows refuses the call.
        let (session, gone) = match &settings.sessions {
            Some(lookup) => match lookup(approval.session.id()) {
                Some(session) => (session, false),
                None => (approval.session.clone(), true),
            },
            None => (approval.session.clone(), false),
        };
        let mut guard = executor.guard(&approval.action, &session);
        let result = if gone {
            guard.record_mut().settle = Some((id.clone(), claim));
            let refusal = Refusal::new(
                RefusalCode::OutOfScope,
                "the session this call was made in has ended; the approval is void; nothing was sent",
            );
            Some(pipeline::refuse(inner, &guard, refusal).await)
        } else {
            pipeline::resume(inner, &mut guard, &session, &approval, &claim).await
        };
        guard.disarm();
        result
    };
    // With the `otel` feature, a resumed call is an `execute_tool` span of its own, or runs
    // in the agent's call span when it is carried out inside that call.
    let result = match trace {
        Trace::OwnSpan => spans::resumed(inner, &approval, &settings.instance, run).await,
        Trace::InCall => {
            spans::resumed_in_call(&approval.approval_id, &settings.instance);
            run.await
        }
    };
    // The parked call was counted under its own attempt when it was first let through.
    if let Some(result) = &result
        && inner.policy.is_some()
    {
        let session = approval.session.id().as_str();
        super::policy::settle(&inner.calls, session, &approval.attempt_id, result.status).await;
    }
    Ok(result)
}
