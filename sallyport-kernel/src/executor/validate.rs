//! Stages 2 and 3, validate and decode: the arguments pass the payload drift check against
//! the action's JSON Schema and decode into its input type, else `invalid_arguments` (or
//! `arguments_too_large`).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::resolve::Resolved;
use crate::action::ScopedValue;
use crate::catalog::Entry;
use crate::code::RefusalCode;
use crate::drift::canonical_len;
use crate::drift::{DriftMode, Verdict};
use crate::outcome::Refusal;
use crate::scrub::Scrubber;

/// Longest agent's note kept for the human and the audit record.
const MAX_NOTE: usize = 2_000;

/// Arguments that match the schema, decoded; with the objects they name and the agent's
/// note. Only this stage's `validate` makes one.
pub(crate) struct Validated {
    entry: Arc<Entry>,
    arguments: Value,
    input: Arc<dyn Any + Send + Sync>,
    objects: Vec<ScopedValue>,
    note: Option<String>,
    divergences: Vec<crate::drift::Divergence>,
}

impl fmt::Debug for Validated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Validated")
            .field("action", &self.entry.spec().name)
            .field("objects", &self.objects)
            .finish_non_exhaustive()
    }
}

impl Validated {
    /// The catalog entry.
    pub(crate) fn entry(&self) -> &Arc<Entry> {
        &self.entry
    }

    /// The arguments as validated (in warn and shadow modes, as the drift guard left them).
    pub(crate) fn arguments(&self) -> &Value {
        &self.arguments
    }

    /// The decoded input.
    pub(crate) fn input(&self) -> &(dyn Any + Send + Sync) {
        self.input.as_ref()
    }

    pub(super) fn input_arc(&self) -> Arc<dyn Any + Send + Sync> {
        Arc::clone(&self.input)
    }

    /// The scoped objects the call names.
    pub(crate) fn objects(&self) -> &[ScopedValue] {
        &self.objects
    }

    /// The agent's note, scrubbed, cut only with a visible count of what is not shown.
    pub(crate) fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// Divergences the drift guard let through (warn and shadow modes).
    pub(crate) fn divergences(&self) -> &[crate::drift::Divergence] {
        &self.divergences
    }
}

/// The limits stage 2 applies.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub(super) drift_mode: DriftMode,
    pub(super) max_argument_bytes: usize,
}

/// Checks and decodes `arguments` for the resolved action.
pub(super) fn validate(
    limits: Limits,
    scrubber: &Scrubber,
    resolved: Resolved,
    mut arguments: Value,
) -> Result<Validated, Refusal> {
    let entry = resolved.into_entry();
    let size = canonical_len(&arguments);
    if size > limits.max_argument_bytes {
        return Err(Refusal::new(
            RefusalCode::ArgumentsTooLarge,
            format!(
                "arguments are {size} bytes; the limit is {}",
                limits.max_argument_bytes
            ),
        ));
    }
    let divergences = if entry.guard.is_clean(&arguments) {
        Vec::new()
    } else {
        let decision = entry.guard.check(limits.drift_mode, &mut arguments);
        if !decision.allowed {
            return Err(Refusal::new(RefusalCode::InvalidArguments, decision.detail)
                .with_divergences(decision.divergences));
        }
        if matches!(decision.verdict, Verdict::Warned | Verdict::Shadowed) {
            decision.divergences
        } else {
            Vec::new()
        }
    };
    let decoded = entry.decode(&arguments).map_err(|e| {
        Refusal::new(
            RefusalCode::InvalidArguments,
            format!(
                "arguments do not decode: {}",
                crate::drift::describe_serde_error(&e)
            ),
        )
        .with_divergences(divergences.clone())
    })?;
    Ok(Validated {
        entry,
        arguments,
        input: decoded.input,
        objects: decoded.objects,
        note: decoded.note.map(|n| shown_note(scrubber, &n)),
        divergences,
    })
}

/// The agent's note, scrubbed, and cut only with a visible count of what is not shown: the
/// human must never read a cut note as the whole of it.
fn shown_note(scrubber: &Scrubber, note: &str) -> String {
    let whole = scrubber.scrub(note).len();
    let shown = scrubber.bounded(note, MAX_NOTE);
    if whole <= MAX_NOTE {
        return shown;
    }
    let kept = shown.len().saturating_sub(crate::scrub::CUT.len());
    format!(
        "{shown} ({} more bytes not shown)",
        whole.saturating_sub(kept)
    )
}
