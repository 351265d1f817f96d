//! Stage 12, filter: every secret the call's scrubber knows is removed from everything the
//! agent will read (a vault locked meanwhile cannot empty the call's scrubber).

use std::fmt;

use super::cancel::{scrub_code, scrub_in_place};
use super::intent::Intended;
use super::normalize::Normalized;
use crate::outcome::ActionResult;
use crate::scrub::Scrubber;

/// The agent's answer, scrubbed. Only this stage's `filter` makes one.
pub struct Filtered {
    intended: Intended,
    sends: u32,
    result: ActionResult,
    upstream_status: Option<i64>,
}

impl fmt::Debug for Filtered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filtered")
            .field("intended", &self.intended)
            .field("status", &self.result.status)
            .finish_non_exhaustive()
    }
}

impl Filtered {
    /// The scrubbed answer.
    pub fn result(&self) -> &ActionResult {
        &self.result
    }

    pub(super) fn into_parts(self) -> (Intended, u32, ActionResult, Option<i64>) {
        (self.intended, self.sends, self.result, self.upstream_status)
    }
}

/// Scrubs the answer with the call's scrubber.
pub(super) fn filter(normalized: Normalized) -> Filtered {
    let (intended, sends, mut result, upstream_status) = normalized.into_parts();
    scrub_result(
        intended.consented().checked().unlocked().scrubber(),
        &mut result,
    );
    Filtered {
        intended,
        sends,
        result,
        upstream_status,
    }
}

/// Scrubs every text and value of `result`.
pub(super) fn scrub_result(scrubber: &Scrubber, result: &mut ActionResult) {
    if let Some(reason) = &mut result.reason {
        scrub_in_place(scrubber, reason);
    }
    scrub_code(scrubber, &mut result.code);
    if let Some(data) = &mut result.data {
        scrubber.scrub_json(data);
    }
    if let Some(next) = &mut result.next {
        scrubber.scrub_json(&mut next.arguments);
    }
}
