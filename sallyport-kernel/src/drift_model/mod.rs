//! The leaves of drift: what the guards and the audit trail speak of, importing nothing
//! above them. Canonical JSON and its hash, the payload guard and its divergences, the Drift
//! Decision Object and the scoring table that fills it.
//!
//! The journal, results, the catalog, channels and targets use these; the services that
//! compare and enforce ([`crate::drift`]: the baseline guard, the probe, the CLI entry point,
//! the OpenAPI guard) sit above the catalog and the journal. Public paths stay under
//! [`crate::drift`], which re-exports everything here.

pub(crate) mod canonical;
pub(crate) mod classify;
pub(crate) mod decision;
pub(crate) mod payload;

pub use self::canonical::{
    CanonicalError, MAX_CANONICAL_DEPTH, MAX_EXACT_INTEGER, canonical_hash, canonical_json,
    try_canonical_hash, try_canonical_json,
};
pub use self::classify::{SCORING_TABLE, ScoringRule, compare_definitions};
pub use self::decision::{
    CoreDisposition, DECISION_SCHEMA_VERSION, DefinitionChange, DriftDecision, DriftStatus,
    PartnerDecision, ReasonCode, RecommendedAction, Severity,
};
pub use self::payload::{
    Divergence, DivergenceKind, DriftMode, MAX_DEPTH, PayloadDecision, PayloadGuard, Verdict,
};
#[doc(hidden)]
pub use self::payload::{json_type, push_divergences};

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
