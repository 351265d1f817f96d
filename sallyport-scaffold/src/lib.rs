//! Generates sallyport actions from the operations of an OpenAPI 3.0 / 3.1 document (JSON or
//! YAML): the mechanical half of writing a catalog, and none of its judgement.
//!
//! Per operation, [`Scaffold::generate`] writes:
//!
//! - an input struct with typed fields from the path, query and header parameters and the
//!   JSON body: required fields as `T`, optional ones as `Option<T>`; `pattern` as
//!   `#[schemars(regex(…))]`, `minLength`/`maxLength`/`minItems`/`maxItems` as
//!   `#[schemars(length(…))]`, `minimum`/`maximum` as `#[schemars(range(…))]`; string enums as
//!   Rust enums; nested objects as structs that refuse unknown fields; `$ref`s followed;
//! - the `#[http(…)]` template (method, path, `query(…)`, `header(…)`, `result = …`; the
//!   channel's default mapping already reads a `202` as `pending`);
//! - a result struct from the success response (its scalar fields; nested objects are listed
//!   in a comment, for the author to add if the agent needs them), read from every success
//!   response the operation lists: one without a body (a `204`) is `status(204) =
//!   completed(empty)`, and the result `Option<…>` when another has one;
//! - for an answer of several forms (`oneOf` / `anyOf`), an enum of them: tagged by the
//!   document's discriminator when it can tag every form, else untagged, each object form's
//!   one-value properties (`type: file`) typed so a form fits only its own answers; a
//!   comment above `result = …` says which it chose and why (an answer with a form of no
//!   Rust type, e.g. a free-form object, returns no data, and the comment says why);
//! - the doc comment from the summary and description (links and HTML made plain);
//! - `credential = "…"` from the operation's (or the document's) security requirement, or
//!   the name given with [`Scaffold::credential`].
//!
//! # It never guesses consequences
//!
//! The effect class, consent rule and retry rule are the author's decisions. The generator
//! writes `effect = choose`, `consent = choose` and `retry = choose`, each under a comment
//! listing the choices, and `#[derive(Action)]` refuses to compile until each is replaced:
//!
//! ```text
//! error: choose the effect class of this action: replace `effect = choose` with one of
//!        `observe`, `reversible_change`, `external_commitment`, `irreversible_or_broad`;
//!        sallyport never guesses what an action does to the world
//! ```
//!
//! An operation may state them in the document: `x-sallyport-effect`,
//! `x-sallyport-consent` and `x-sallyport-retry` (same words as the attributes) fill them in.
//!
//! What a `404` means is the author's decision too when the document describes it as an
//! answer to a read ("Not Found if pull request has not been merged"): the generator writes
//! `status(404) = choose` under a comment quoting the document, to be replaced with
//! `completed(value = r#"…"#)` (the result that status means) or `rejected` (the default
//! mapping, `not_found`), and lists [`Decision::NotFound`] among the open decisions.
//!
//! # Narrowing
//!
//! A narrow action offers what the agent must choose, nothing more. Optional fields that are
//! free-form objects, objects with `additionalProperties: true`, URLs (`format: uri`) and
//! optional headers are left out, each with a comment saying why; a `oneOf`/`anyOf` that
//! offers a plain string form is narrowed to it. A *required* field that cannot be offered
//! makes the operation unsupported.
//!
//! # What it cannot express
//!
//! Operations it cannot turn into an action are reported in [`Generated::unsupported`] with
//! the reason, and the others are still generated: a body that is not JSON (multipart, form,
//! binary), callbacks, a method other than GET/POST/PUT/PATCH/DELETE, a JSON body that is not
//! an object, a required field of no single Rust type, a security requirement that needs two
//! credentials at once. The `sallyport scaffold` command prints them and exits non-zero only
//! when nothing could be generated.
//!
//! # Example
//!
//! ```
//! let document = sallyport_openapi::OpenApi::parse(r#"
//! openapi: 3.1.0
//! info: {title: Notes, version: "1"}
//! paths:
//!   /notes/{note_id}:
//!     get:
//!       operationId: getNote
//!       summary: Read one note
//!       x-sallyport-effect: observe
//!       parameters:
//!         - {name: note_id, in: path, required: true, schema: {type: string, pattern: "^n_[0-9]+$"}}
//!       responses:
//!         "200":
//!           description: the note
//!           content:
//!             application/json:
//!               schema: {type: object, required: [text], properties: {text: {type: string}}}
//! "#)?;
//! let generated = sallyport_scaffold::Scaffold::new(&document)
//!     .operation("getNote")
//!     .generate();
//! assert!(generated.unsupported.is_empty());
//! assert_eq!(generated.actions[0].action, "get_note");
//! assert!(generated.code.contains("effect = observe, // from the document's x-sallyport-effect"));
//! assert!(generated.code.contains("consent = choose,"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod operation;
mod schema;
mod text;

use std::fmt;

use sallyport_openapi::OpenApi;

sallyport_vocab::string_enum! {
    /// A decision the generator leaves to the author. Its name is the attribute key (for
    /// effect, consent and retry also the suffix of its `x-sallyport-…` extension).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    #[non_exhaustive]
    pub enum Decision {
        /// The consent rule (`consent = …`).
        Consent => "consent",
        /// The effect class (`effect = …`).
        Effect => "effect",
        /// What a `404` means (`status(404) = …`), asked when the document describes it as an
        /// answer ("Not Found if the pull request has not been merged"): a result
        /// (`completed(value = …)`) or an error (`rejected`).
        NotFound => "status(404)",
        /// The retry rule (`retry = …`).
        Retry => "retry",
    }
}

impl Decision {
    /// The words the author may write.
    pub fn choices(self) -> &'static [&'static str] {
        match self {
            Self::Consent => &["none", "session", "per_call"],
            Self::Effect => &[
                "observe",
                "reversible_change",
                "external_commitment",
                "irreversible_or_broad",
            ],
            Self::NotFound => &["completed(value = …)", "rejected"],
            Self::Retry => &["never", "safe", "idempotency_key"],
        }
    }

    /// The comment written above the decision.
    fn help(self) -> &'static str {
        match self {
            Self::Consent => {
                "none | session | per_call (per_call at least for external_commitment and irreversible_or_broad)"
            }
            Self::Effect => {
                "observe | reversible_change | external_commitment | irreversible_or_broad"
            }
            Self::NotFound => "completed(value = …) | rejected",
            Self::Retry => {
                "never | safe (observe only) | idempotency_key (only if the API honours an Idempotency-Key)"
            }
        }
    }
}

/// One generated action.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScaffoldedAction {
    /// The operation's `operationId`.
    pub operation_id: String,
    /// The action's name (`issues_create`).
    pub action: String,
    /// The input struct's name (`IssuesCreate`).
    pub type_name: String,
    /// The decisions still written as `choose` (the code does not compile until they are made).
    pub open_decisions: Vec<Decision>,
}

/// An operation that could not be generated, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unsupported {
    /// The `operationId` asked for.
    pub operation_id: String,
    /// Why it cannot be an action.
    pub reason: String,
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.operation_id, self.reason)
    }
}

/// What [`Scaffold::generate`] wrote.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Generated {
    /// The Rust module (its `//!` header, the actions, their types and a `catalog()`
    /// function), empty when no operation could be generated.
    pub code: String,
    /// The generated actions, in the order asked for.
    pub actions: Vec<ScaffoldedAction>,
    /// The operations that could not be generated.
    pub unsupported: Vec<Unsupported>,
}

/// Generates the actions of some operations of a document.
#[derive(Debug)]
#[must_use]
pub struct Scaffold<'d> {
    api: &'d OpenApi,
    operations: Vec<String>,
    credential: Option<String>,
}

impl<'d> Scaffold<'d> {
    /// A generator over `api`, with no operations yet.
    pub fn new(api: &'d OpenApi) -> Self {
        Self {
            api,
            operations: Vec::new(),
            credential: None,
        }
    }

    /// Adds an operation by `operationId` (an id asked for twice is generated once).
    pub fn operation(mut self, id: impl Into<String>) -> Self {
        let id = id.into();
        if !self.operations.contains(&id) {
            self.operations.push(id);
        }
        self
    }

    /// Adds several operations.
    pub fn operations<I, S>(mut self, ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for id in ids {
            self = self.operation(id);
        }
        self
    }

    /// Binds every action to the vault credential `name`, whatever the document's security
    /// requirements say (for a document that declares none, as GitHub's does not).
    pub fn credential(mut self, name: impl Into<String>) -> Self {
        self.credential = Some(name.into());
        self
    }

    /// Writes the module. Never fails as a whole: an operation it cannot express is listed in
    /// [`Generated::unsupported`] and the rest are generated.
    pub fn generate(&self) -> Generated {
        let mut types = schema::Types::default();
        let mut actions = Vec::new();
        let mut unsupported = Vec::new();
        for id in &self.operations {
            match operation::generate(self.api, &mut types, id, self.credential.as_deref()) {
                Ok(action) => actions.push(action),
                Err(reason) => unsupported.push(Unsupported {
                    operation_id: id.clone(),
                    reason,
                }),
            }
        }
        let code = if actions.is_empty() {
            String::new()
        } else {
            self.module(&types, &actions)
        };
        Generated {
            code,
            actions,
            unsupported,
        }
    }

    fn module(&self, types: &schema::Types, actions: &[ScaffoldedAction]) -> String {
        let root = self.api.document();
        let info = root.get("info");
        let title = info
            .and_then(|i| i.get("title"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or("the API");
        let version = info
            .and_then(|i| i.get("version"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or("?");
        let mut code = String::new();
        let header = format!(
            "Actions for {} {}, generated by `sallyport scaffold` from its OpenAPI {} description (document SHA-256 `{}`).",
            text::plain(title, 1).join(" "),
            text::plain(version, 1).join(" "),
            self.api.version(),
            self.api.hash()
        );
        for line in text::wrap(&header, 96) {
            code.push_str(&format!("//! {line}\n"));
        }
        code.push_str("//!\n");
        code.push_str(
            "//! Each `choose` is a decision only the author can make: what the action does to the world\n\
             //! (`effect`), when a human must agree (`consent`) and whether a lost answer may be resent\n\
             //! (`retry`). The module does not compile until every one is made. Fields a narrow action\n\
             //! should not offer are left out with a comment saying why.\n",
        );
        code.push('\n');
        code.push_str("use schemars::JsonSchema;\nuse serde::{Deserialize, Serialize};\n\n");
        for item in types.code() {
            code.push_str(item);
            code.push('\n');
        }
        code.push_str("/// The catalog of these actions.\n///\n/// # Errors\n///\n");
        code.push_str("/// When the catalog builder refuses an action (see `CatalogError`).\n");
        code.push_str(
            "pub fn catalog() -> Result<sallyport_core::Catalog, sallyport_core::catalog::CatalogError> {\n",
        );
        code.push_str("    sallyport_core::Catalog::builder()\n");
        for action in actions {
            code.push_str(&format!("        .action::<{}>()\n", action.type_name));
        }
        code.push_str("        .build()\n}\n");
        code
    }
}

#[cfg(test)]
mod string_enum_tests {
    use super::Decision;

    sallyport_vocab::__string_enum_tests! {
        decision: Decision = ["consent", "effect", "status(404)", "retry"];
    }
}
