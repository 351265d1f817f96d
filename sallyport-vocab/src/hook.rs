//! What the host's own hooks did to a call, as its audit record names it ([`HookNote`]):
//! the hook's name, the stage it runs at ([`HookStage`]) and how it ended
//! ([`HookOutcome`]), with its reason. Never the data the hook saw.
//!
//! This module imports nothing of the crate but the vocabulary's macro.

use serde::{Deserialize, Serialize};

use crate::string_enum;

string_enum! {
    /// Where in the pipeline a hook runs.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum HookStage {
        /// After the executor filtered the upstream's answer, before the record (stage 12).
        PostResult => "post_result",
        /// After consent, before the intent is written and anything is sent (between
        /// stages 8 and 9).
        PreDispatch => "pre_dispatch",
    }
}

string_enum! {
    /// How one hook's run ended.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum HookOutcome {
        /// The hook let the call (or the answer, unchanged) through.
        Allowed => "allowed",
        /// A pre-dispatch hook denied the call: nothing was sent.
        Denied => "denied",
        /// The hook failed (it timed out or panicked) and is configured to fail open: the
        /// call went on as if it had allowed it. The note's reason says how it failed.
        FailedOpen => "failed_open",
        /// A post-result hook masked part of the answer.
        Masked => "masked",
        /// The hook panicked; the call failed closed.
        Panic => "panic",
        /// A post-result hook refused the answer: the agent got none of its data.
        Refused => "refused",
        /// The hook did not answer within its timeout; the call failed closed.
        Timeout => "timeout",
    }
}

/// One hook's run on one call: which hook, at which stage, how it ended and why. The reason
/// is the hook's own (scrubbed and bounded like every reason) or the executor's account of a
/// failure.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HookNote {
    /// The name the hook was registered under.
    pub name: String,
    /// Where it ran.
    pub stage: HookStage,
    /// How it ended.
    pub outcome: HookOutcome,
    /// Why, when there is more to say than the outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl HookNote {
    /// A note that hook `name` at `stage` ended with `outcome`, for `reason`.
    pub fn new(
        name: impl Into<String>,
        stage: HookStage,
        outcome: HookOutcome,
        reason: Option<String>,
    ) -> Self {
        Self {
            name: name.into(),
            stage,
            outcome,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The wire names through `as_str`, `Display`, `FromStr`, `parse` and serde.
    crate::__string_enum_tests! {
        hook_stages_round_trip_to_the_wire_strings: HookStage = ["post_result", "pre_dispatch"];
        hook_outcomes_round_trip_to_the_wire_strings: HookOutcome = [
            "allowed", "denied", "failed_open", "masked", "panic", "refused", "timeout",
        ];
    }

    #[test]
    fn a_note_serializes_its_reason_only_when_it_has_one() {
        let note = HookNote::new(
            "ticket-check",
            HookStage::PreDispatch,
            HookOutcome::Allowed,
            None,
        );
        assert_eq!(
            serde_json::to_string(&note).unwrap(),
            r#"{"name":"ticket-check","stage":"pre_dispatch","outcome":"allowed"}"#
        );
        let note = HookNote::new(
            "pii",
            HookStage::PostResult,
            HookOutcome::Timeout,
            Some("no answer within 2s".to_owned()),
        );
        let json = serde_json::to_string(&note).unwrap();
        assert_eq!(
            json,
            r#"{"name":"pii","stage":"post_result","outcome":"timeout","reason":"no answer within 2s"}"#
        );
        assert_eq!(serde_json::from_str::<HookNote>(&json).unwrap(), note);
    }
}
