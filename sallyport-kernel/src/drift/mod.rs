//! Drift guards.
//!
//! *Payload drift* asks "is this call shaped like the schema?" ([`PayloadGuard`], and
//! `sallyport-openapi` for outgoing HTTP requests against an upstream OpenAPI operation); *definition
//! drift* asks "is this still the action we approved?" ([`baseline`]: a lockfile of approved
//! canonical definitions, compared once at start-up into one [`DriftDecision`] per action and
//! enforced at stage 5). [`probe`] catches a credential that gained power while no definition
//! changed; the `baseline diff` / `baseline approve` commands an application's own `main`
//! can call are in `sallyport-cli` (`sallyport_cli::baseline`).

pub mod baseline;
pub mod probe;

pub use self::baseline::{Baseline, BaselineEntry, BaselineError, BaselineGuard};
pub use crate::drift_model::{
    CanonicalError, CoreDisposition, DECISION_SCHEMA_VERSION, DefinitionChange, Divergence,
    DivergenceKind, DriftDecision, DriftMode, DriftStatus, MAX_CANONICAL_DEPTH, MAX_DEPTH,
    MAX_EXACT_INTEGER, PartnerDecision, PayloadDecision, PayloadGuard, ReasonCode,
    RecommendedAction, SCORING_TABLE, ScoringRule, Severity, Verdict, canonical_hash,
    canonical_json, compare_definitions, describe_serde_error, try_canonical_hash,
    try_canonical_json,
};
#[doc(hidden)]
pub use crate::drift_model::{json_type, push_divergences};

/// Decides whether a live definition may be called (stage 5 of the executor). The baseline
/// guard ([`BaselineGuard`]) implements it; without one, every registered action is
/// callable.
pub trait DefinitionGuard: Send + Sync + 'static {
    /// Checks `action`'s live definition hash.
    ///
    /// # Errors
    ///
    /// A refusal (`definition_drift`, `review_required`) when the call must not go ahead.
    fn check(&self, action: &str, live_hash: &str) -> Result<(), crate::outcome::Refusal>;
}
