//! Drift guards.
//!
//! *Payload drift* asks "is this call shaped like the schema?" ([`PayloadGuard`]); *definition
//! drift* asks "is this still the action we approved?" (the baseline module).

mod canonical;
mod payload;

pub use self::canonical::{canonical_hash, canonical_json};

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
