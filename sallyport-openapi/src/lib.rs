//! Payload drift against an upstream OpenAPI 3.0 / 3.1 document.
//!
//! An [`OpenApi`] document (JSON or YAML) is attached to an HTTP channel. For each action the
//! channel compiles an [`OperationGuard`] once ([`OpenApi::operation`], by `operationId` or by
//! method and path template); before sending, it checks the outgoing request (path, query and
//! header parameters, JSON body) with [`OperationGuard::check`] in the executor's
//! [`DriftMode`](sallyport_core::drift::DriftMode). Divergences are the payload guard's: `missing_required`,
//! `unknown_field` (honouring `additionalProperties`, also inside `$ref`s and `allOf`),
//! `type_mismatch` and `constraint_violation`, each with a JSON pointer rooted at `/path`,
//! `/query`, `/header` or `/body`, and the observed JSON type, never the value.
//!
//! The document is parsed and indexed once: its operations by `operationId` and by route, and
//! the document itself as one shared JSON Schema resource. Compiling an operation compiles only
//! the schemas its parameters and request body reach through `$ref`s (local, nested and
//! recursive references work); no guard copies or re-walks the whole document, and every guard
//! shares the one parsed copy. A schema that reaches itself again without descending into the
//! value (`allOf` → `$ref` to itself, `A` → `anyOf` → `B` → `$ref` `A`, …) could never be
//! checked: compiling an operation that uses one fails with [`OpenApiError::Cycle`]. OpenAPI
//! 3.0's `nullable` and boolean `exclusiveMinimum`/`exclusiveMaximum` are rewritten to their
//! JSON Schema 2020-12 forms first. `nullable: true` adds `null` only to a `type` in the same
//! schema object; without one it changes nothing (OAS 3.0.3), so `{nullable: true}` accepts
//! anything and `{nullable: true, allOf: […]}` accepts `null` only if the `allOf` does.
//!
//! [`check_catalog`] compares every HTTP action's request shape with the operation it targets
//! and reports what would fail: a field the upstream now requires that the action never sends,
//! a field the action sends that the upstream no longer declares, a type change. The document's
//! [`OpenApi::hash`] belongs in the catalog's provenance
//! ([`sallyport_core::catalog::CatalogBuilder::upstream_spec`]), so a changed upstream spec shows as
//! `provenance_changed`.

mod compat;
mod compile;
mod document;
mod guard;

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

pub use self::compat::{
    CompatibilityIssue, CompatibilityKind, CompatibilityReport, check_action, check_catalog,
};
pub use self::guard::{OperationGuard, OutgoingRequest};

use self::document::Document;

/// Why a document or an operation could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenApiError {
    /// The text is neither JSON nor YAML.
    #[error("the OpenAPI document does not parse: {0}")]
    Parse(String),
    /// The document is not OpenAPI 3.0 or 3.1.
    #[error("not an OpenAPI 3.0 or 3.1 document (openapi: {0})")]
    Version(String),
    /// No operation matches.
    #[error("no operation {0} in the OpenAPI document")]
    NoOperation(String),
    /// A schema of the operation does not compile.
    #[error("the schema at {pointer} does not compile: {reason}")]
    Schema {
        /// JSON pointer into the document.
        pointer: String,
        /// What the validator said.
        reason: String,
    },
    /// A `$ref` points nowhere (or outside the document).
    #[error("unresolvable $ref {0}")]
    Ref(String),
    /// A schema of the operation reaches itself again without descending into the value
    /// (`allOf` → `$ref` to itself, or a longer loop through `$ref`, `allOf`, `anyOf`, `oneOf`,
    /// `not`, `if`/`then`/`else` or `dependentSchemas`): checking a value against it would
    /// never end.
    #[error(
        "the schema at {pointer} cannot be checked: it refers back to itself without descending into the value ({})",
        cycle.join(" -> ")
    )]
    Cycle {
        /// JSON pointer of the operation's schema being compiled.
        pointer: String,
        /// The loop, as JSON pointers into the document: the first entry again at the end.
        cycle: Vec<String>,
    },
}

/// Which operation to check against.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OperationSelector {
    /// By `operationId`.
    Id(String),
    /// By method and path template (`POST`, `/v1/projects/{project_id}/deployments`);
    /// placeholder names need not match.
    Route {
        /// The HTTP method.
        method: String,
        /// The path template.
        path: String,
    },
}

impl OperationSelector {
    /// By `operationId`.
    pub fn id(id: impl Into<String>) -> Self {
        Self::Id(id.into())
    }

    /// By method and path template.
    pub fn route(method: impl Into<String>, path: impl Into<String>) -> Self {
        Self::Route {
            method: method.into(),
            path: path.into(),
        }
    }
}

impl fmt::Display for OperationSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Id(id) => write!(f, "operationId `{id}`"),
            Self::Route { method, path } => write!(f, "{} {path}", method.to_uppercase()),
        }
    }
}

/// Where one operation sits in the document (what [`OpenApi::locate`] finds).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OperationLocation {
    /// The HTTP method, lowercase as the document spells it.
    pub method: String,
    /// The path template, as the document spells it.
    pub path: String,
    /// JSON pointer to the operation object in [`OpenApi::document`].
    pub pointer: String,
}

/// An OpenAPI 3.0 or 3.1 document, parsed and indexed once. Cheap to clone (clones share the
/// parsed document), and safe to share between threads.
#[derive(Clone)]
pub struct OpenApi {
    document: Arc<Document>,
}

impl fmt::Debug for OpenApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenApi")
            .field("version", &self.document.version)
            .field("hash", &self.document.hash)
            .field("operations", &self.document.operation_count())
            .finish_non_exhaustive()
    }
}

impl OpenApi {
    /// Parses JSON or YAML text.
    ///
    /// # Errors
    ///
    /// [`OpenApiError::Parse`] or [`OpenApiError::Version`].
    pub fn parse(text: &str) -> Result<Self, OpenApiError> {
        let doc: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(_) => {
                serde_norway::from_str(text).map_err(|e| OpenApiError::Parse(e.to_string()))?
            }
        };
        Self::from_value(doc)
    }

    /// Uses an already parsed document.
    ///
    /// # Errors
    ///
    /// [`OpenApiError::Version`] when `openapi` is not 3.0.x or 3.1.x;
    /// [`OpenApiError::Schema`] when the document cannot be used as a JSON Schema resource.
    pub fn from_value(doc: Value) -> Result<Self, OpenApiError> {
        Ok(Self {
            document: Arc::new(Document::new(doc)?),
        })
    }

    /// SHA-256 of the document's canonical JSON (the same document in JSON or YAML has the
    /// same hash). Put it in the catalog's provenance.
    pub fn hash(&self) -> &str {
        &self.document.hash
    }

    /// The `openapi` version string.
    pub fn version(&self) -> &str {
        &self.document.version
    }

    /// The document as the guards read it: an OpenAPI 3.0 document's `nullable` and boolean
    /// `exclusiveMinimum`/`exclusiveMaximum` already rewritten to their JSON Schema 2020-12
    /// forms. For tools that read the document (a code generator), without a second parse.
    pub fn document(&self) -> &Value {
        &self.document.root
    }

    /// Where the operation `selector` names sits in the document, if it has one.
    pub fn locate(&self, selector: &OperationSelector) -> Option<OperationLocation> {
        self.document.find(selector).map(|op| OperationLocation {
            method: op.method.to_owned(),
            path: op.path.clone(),
            pointer: op.pointer.clone(),
        })
    }

    /// Compiles the guard for one operation: only the schemas its parameters and request body
    /// reach are compiled, and the guard shares this document rather than copying it.
    ///
    /// # Errors
    ///
    /// [`OpenApiError::NoOperation`], [`OpenApiError::Ref`], [`OpenApiError::Cycle`] or
    /// [`OpenApiError::Schema`].
    pub fn operation(&self, selector: &OperationSelector) -> Result<OperationGuard, OpenApiError> {
        compile::operation(&self.document, selector)
    }
}
