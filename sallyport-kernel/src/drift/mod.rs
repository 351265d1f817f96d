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
pub(crate) mod classify;

pub use self::classify::{SCORING_TABLE, ScoringRule, compare_definitions};
// The payload guard sits below the catalog, which compiles one per action; the baseline guard
// and the probe here sit above it. Its public path is this module.
pub use crate::payload::{DriftMode, MAX_DEPTH, PayloadDecision, PayloadGuard, Verdict};
#[doc(hidden)]
pub use crate::payload::{json_type, push_divergences};
pub use sallyport_vocab::drift::{
    CanonicalError, CoreDisposition, DECISION_SCHEMA_VERSION, DefinitionChange, Divergence,
    DivergenceKind, DriftDecision, DriftStatus, MAX_CANONICAL_DEPTH, MAX_EXACT_INTEGER,
    PartnerDecision, ReasonCode, RecommendedAction, Severity, canonical_hash, canonical_json,
    canonical_len, describe_serde_error, try_canonical_hash, try_canonical_json,
};

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
