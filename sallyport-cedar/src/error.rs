//! Why policies could not be loaded.

/// Why a Cedar policy set could not be loaded (at start-up, or on a reload, which then keeps
/// the last good set). Each message carries Cedar's own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CedarError {
    /// The policy file could not be read.
    #[error("cannot read policy file {path}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The text is not Cedar.
    #[error("policies in {name} do not parse: {message}")]
    Parse {
        /// The file (or the name given to the text).
        name: String,
        /// What Cedar's parser said.
        message: String,
    },
    /// The policies do not validate against the schema generated from the catalog (an
    /// unknown action, an attribute the context does not have, a type error).
    #[error("policies in {name} do not validate against the catalog's schema: {message}")]
    Validation {
        /// The file (or the name given to the text).
        name: String,
        /// What Cedar's validator said, one error per line.
        message: String,
    },
    /// A policy's annotations break a rule of this crate (`@id` twice, `@consent` with
    /// another value than `"required"` or on a `forbid`, a template).
    #[error("policy `{policy}` in {name}: {message}")]
    Annotation {
        /// The file (or the name given to the text).
        name: String,
        /// The policy's id.
        policy: String,
        /// What is wrong.
        message: String,
    },
    /// The catalog cannot be described as a Cedar schema.
    #[error("the catalog cannot be described as a Cedar schema: {0}")]
    Schema(String),
    /// A `#[policy]` field has a JSON type with no Cedar type (a float, an object).
    #[error(
        "field `{field}` of action `{action}` is marked #[policy] but cannot be shown to Cedar: {reason}"
    )]
    UnsupportedField {
        /// The action.
        action: String,
        /// The field.
        field: String,
        /// Why.
        reason: String,
    },
}
