//! What the payload guard reports: one [`Divergence`] per way a call's arguments differ from
//! the action's schema. Results, refusals and audit records carry them.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::string_enum;

string_enum! {
    /// The kind of one divergence.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum DivergenceKind {
        /// A value violates a pattern, enum, length, range or format.
        ConstraintViolation => "constraint_violation",
        /// A required field is absent.
        MissingRequired => "missing_required",
        /// A value has the wrong JSON type.
        TypeMismatch => "type_mismatch",
        /// A field the schema does not declare.
        UnknownField => "unknown_field",
    }
}

/// One way a call diverges from its schema. Carries the observed JSON *type*, never the value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// The kind.
    pub kind: DivergenceKind,
    /// JSON pointer to the offending place (`/project_id`).
    pub path: String,
    /// What the schema expects, in words.
    pub expected: String,
    /// The JSON type found (`string`, `object`, `absent`, …).
    pub observed: String,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(
            f,
            "{} at {path}: expected {}, found {}",
            self.kind.as_str(),
            self.expected,
            self.observed
        )
    }
}
