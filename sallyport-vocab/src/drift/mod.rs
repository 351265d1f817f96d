//! What the drift guards and the audit trail speak of: canonical JSON and its hash, the
//! payload guard's [`Divergence`]s, and the Drift Decision Object with its statuses,
//! severities and reason codes.
//!
//! The guards that compare and enforce (the payload guard, the baseline guard and its scoring
//! table, the probe) are in `sallyport-kernel`'s `drift` module, which re-exports everything
//! here.

mod canonical;
mod decision;
mod divergence;

pub use self::canonical::{
    CanonicalError, MAX_CANONICAL_DEPTH, MAX_EXACT_INTEGER, canonical_hash, canonical_json,
    canonical_len, try_canonical_hash, try_canonical_json,
};
pub use self::decision::{
    CoreDisposition, DECISION_SCHEMA_VERSION, DefinitionChange, DriftDecision, DriftStatus,
    PartnerDecision, ReasonCode, RecommendedAction, Severity,
};
pub use self::divergence::{Divergence, DivergenceKind};

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
