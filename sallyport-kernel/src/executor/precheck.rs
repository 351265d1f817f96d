//! Stage 7, precheck: the action's own read-only preconditions hold, else
//! `precondition_failed`.

use std::fmt;

use super::call::Call;
use super::vault::Unlocked;
use crate::code::RefusalCode;
use crate::outcome::Refusal;
use sallyport_vocab::MAX_REASON;

/// A call whose preconditions hold. Only this stage's `precheck` makes one.
pub(crate) struct Checked {
    call: Call,
}

impl fmt::Debug for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checked").field("call", &self.call).finish()
    }
}

impl Checked {
    /// The call as stages 1–7 established it.
    pub(crate) fn call(&self) -> &Call {
        &self.call
    }

    /// The call alone, for stage 8 to carry on.
    pub(super) fn into_call(self) -> Call {
        self.call
    }
}

/// Runs the action's precondition, when it has one.
///
/// Not an `async fn`: one keeps its by-value argument twice in its future; the block
/// captures the call it takes out, once.
pub(super) fn precheck(unlocked: Unlocked) -> impl Future<Output = Result<Checked, Refusal>> {
    let call = unlocked.into_call();
    async move {
        if call.entry().has_precondition() {
            call.entry()
                .precheck(call.input_arc())
                .await
                .map_err(|reason| {
                    Refusal::new(
                        RefusalCode::PreconditionFailed,
                        call.scrubber().bounded(&reason, MAX_REASON),
                    )
                })?;
        }
        Ok(Checked { call })
    }
}
