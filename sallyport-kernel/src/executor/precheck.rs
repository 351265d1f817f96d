//! Stage 7, precheck: the action's own read-only preconditions hold, else
//! `precondition_failed`.

use std::fmt;

use super::vault::Unlocked;
use crate::code::RefusalCode;
use crate::outcome::Refusal;
use sallyport_vocab::MAX_REASON;

/// A call whose preconditions hold. Only this stage's `precheck` makes one.
pub(crate) struct Checked {
    unlocked: Unlocked,
}

impl fmt::Debug for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checked")
            .field("unlocked", &self.unlocked)
            .finish()
    }
}

impl Checked {
    /// What stage 6 established.
    pub(crate) fn unlocked(&self) -> &Unlocked {
        &self.unlocked
    }
}

/// Runs the action's precondition, when it has one.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps its by-value argument twice in its future; a block uses the capture in place"
)]
pub(super) fn precheck(unlocked: Unlocked) -> impl Future<Output = Result<Checked, Refusal>> {
    async move {
        let validated = unlocked.approved().authorized().validated();
        let entry = validated.entry();
        if entry.has_precondition() {
            entry
                .precheck(validated.input_arc())
                .await
                .map_err(|reason| {
                    Refusal::new(
                        RefusalCode::PreconditionFailed,
                        unlocked.scrubber().bounded(&reason, MAX_REASON),
                    )
                })?;
        }
        Ok(Checked { unlocked })
    }
}
