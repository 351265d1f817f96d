//! Drift guards.
//!
//! *Payload drift* asks "is this call shaped like the schema?" ([`PayloadGuard`], and
//! [`openapi`] for outgoing HTTP requests against an upstream OpenAPI operation); *definition
//! drift* asks "is this still the action we approved?" ([`baseline`]: a lockfile of approved
//! canonical definitions, compared once at start-up into one [`DriftDecision`] per action and
//! enforced at stage 5). [`probe`] catches a credential that gained power while no definition
//! changed, and [`cli`] is the `baseline diff` / `baseline approve` entry point an
//! application's own `main` can call.

pub mod baseline;
mod canonical;
mod classify;
pub mod cli;
mod decision;
pub mod openapi;
mod payload;
pub mod probe;

pub use self::baseline::{Baseline, BaselineEntry, BaselineError, BaselineGuard};
pub use self::canonical::{
    CanonicalError, MAX_CANONICAL_DEPTH, MAX_EXACT_INTEGER, canonical_hash, canonical_json,
    try_canonical_hash, try_canonical_json,
};
pub use self::classify::{SCORING_TABLE, ScoringRule, compare_definitions};
pub use self::decision::{
    CoreDisposition, DECISION_SCHEMA_VERSION, DefinitionChange, DefinitionGuard, DriftDecision,
    DriftStatus, PartnerDecision, ReasonCode, RecommendedAction, Severity,
};

pub use self::payload::{
    Divergence, DivergenceKind, DriftMode, MAX_DEPTH, PayloadDecision, PayloadGuard, Verdict,
};

/// Describes a serde_json error without the observed value (which may be anything the agent
/// sent): quoted fragments are elided.
pub fn describe_serde_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let mut out = String::with_capacity(text.len());
    let mut in_quote = false;
    for c in text.chars() {
        match c {
            '"' => {
                if !in_quote {
                    out.push_str("\"…\"");
                }
                in_quote = !in_quote;
            }
            _ if in_quote => {}
            _ => out.push(c),
        }
    }
    // serde appends " at line L column C", which says nothing about a JSON value.
    match out.find(" at line ") {
        Some(i) => out[..i].to_owned(),
        None => out,
    }
}
