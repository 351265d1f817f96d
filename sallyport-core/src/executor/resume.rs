//! Resuming an approved call: claim, re-check stages 1–7, compare the request, intent,
//! dispatch, settle.

use super::Executor;
use crate::approval::{ApprovalError, ApprovalId};
use crate::outcome::ActionResult;

/// See [`Executor::resume_approval`].
pub(super) async fn resume(
    executor: &Executor,
    id: &ApprovalId,
) -> Result<Option<ActionResult>, ApprovalError> {
    let _ = (executor, id);
    // Filled in by the resume path (in progress).
    Ok(None)
}
