//! The `#[derive(Action)]` macro for [sallyport](https://example.invalid/sallyport).
//!
//! Use it through `sallyport-core`, which re-exports it (as serde re-exports `serde_derive`);
//! the generated code names only `::sallyport_core::__private`, so a crate that depends on
//! `sallyport-core` alone can derive actions.
//!
//! The macro runs in three phases, as thiserror's does: `attr/` parses the struct and its
//! attributes into plain data, `valid/` checks the rules that span several attributes and
//! fields, and `expand.rs` writes the `Action` impl. Every mistake found by the first two
//! phases is collected and reported with a span on the author's token; when there is any,
//! `fallback.rs` emits a stub impl so the author sees those errors and nothing else.

#![warn(clippy::pedantic)]
// `attr::Input`, `attr::Field`, … are named as the phase's own types, as in thiserror's `ast`.
#![allow(clippy::module_name_repetitions)]

mod attr;
mod expand;
mod fallback;
mod sensitive;
mod valid;

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

/// Derives `sallyport_core::Action` for an input struct: the action card comes from the
/// struct's doc comment and attributes, the scope values from its `#[scope(kind)]` fields and
/// the audit note from its `#[audit_note]` field.
///
/// The struct must also derive (or implement) `serde::Deserialize` and
/// `schemars::JsonSchema`: they are `Action`'s supertraits, the payload decoder and the
/// payload contract.
///
/// # Example
///
/// ```ignore
/// use sallyport_core::Action;
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// /// Queue one tested build for the preview environment.
/// ///
/// /// The build must have passed CI; the deployment starts within a minute.
/// #[derive(Action, Deserialize, JsonSchema)]
/// #[action(
///     name = "create_preview_deployment",
///     effect = external_commitment,
///     retry = idempotency_key,
///     reconcile = "get_deployment_status",
///     credential = "deploy-api",
///     scope = "One project and one build ID.",
///     returns = "Deployment id and its queue status.",
/// )]
/// #[http(
///     post = "/v1/projects/{project_id}/deployments",
///     status(202) = pending,
///     status(409) = already_in_desired_state,
///     result = DeploymentAccepted,
///     timeout = "10s",
/// )]
/// #[serde(deny_unknown_fields)]
/// struct CreatePreviewDeployment {
///     #[scope(project)]
///     project_id: String,
///     build_id: String,
///     /// Why the agent wants this.
///     #[audit_note]
///     reason: String,
/// }
///
/// #[derive(Deserialize, Serialize, JsonSchema)]
/// struct DeploymentAccepted {
///     deployment_id: String,
///     operation_status: String,
/// }
/// ```
///
/// # The description
///
/// The struct's doc comment is the action's description, shown to the agent; it is required.
/// Its first sentence (of the first paragraph) is the card's one-line summary unless
/// `summary = "…"` overrides it.
///
/// # `#[action(...)]` (required)
///
/// | key | value | meaning |
/// |---|---|---|
/// | `name` | `"snake_case"` | **required**; lowercase snake case, starts with a letter, at most 64 characters, no trailing or doubled `_` |
/// | `effect` | `observe` \| `reversible_change` \| `external_commitment` \| `irreversible_or_broad` | **required**; never inferred |
/// | `consent` | `none` \| `session` \| `per_call` | defaults from the effect; `per_call` is the floor for `external_commitment` and `irreversible_or_broad` |
/// | `retry` | `never` \| `safe` \| `idempotency_key` | defaults from the effect; `safe` only for `observe` |
/// | `reconcile` | `"action_name"` | the read-only action that tells whether an uncertain call took effect |
/// | `credential` | `"name"` | the vault credential the channel attaches |
/// | `data` | `[pii, financial, …]` | data classes read or returned |
/// | `externality` | `internal` \| `external` | defaults to `external` for `external_commitment`, else `internal` |
/// | `scope` | `"…"` | the card's `Scope:` sentence |
/// | `returns` | `"…"` | the card's `Result:` sentence |
/// | `summary` | `"…"` | one line, overriding the doc comment's first sentence |
/// | `secrets` | `mask` \| `refuse` \| `allow` | a credential-shaped value the vault does not know in an answer: masked (the default), the answer withheld (`secret_in_answer`), or left (an explicit opt-out shown on the card); see `sallyport_core::inspect` |
/// | `instructions` | `flag` \| `strip` \| `refuse` | instruction-shaped text in an answer: flagged in `findings` (the default), invisible characters removed, or the answer withheld (`instructions_in_answer`) |
/// | `idempotent` | (a bare flag) | the author declares the operation naturally idempotent: repeating a call with the same arguments changes nothing more (a `PUT` of a whole state, "set the label to X"). Only this, or `observe`, makes the exports say `idempotentHint: true`; `retry = idempotency_key` does not (its key is per attempt). It is part of the canonical definition and never allows a resend |
///
/// Keys may be split over several `#[action]` attributes; each may appear once.
///
/// # The channel target (at most one; none means the action has no channel yet)
///
/// `#[http(...)]`:
///
/// - exactly one of `get`, `post`, `put`, `patch`, `delete` `= "/path/{field}"`; each
///   `{field}` names an input field by its JSON name; the fixed text may hold no dot
///   segment (`.`, `..`, or either percent-encoded) and no backslash, since a URL parser
///   would resolve it to another path;
/// - `query(field, …)`: fields sent as query parameters;
/// - `header("Header-Name" = field, …)`: fields sent as headers (never the headers the
///   executor owns, such as `Authorization` or `Idempotency-Key`);
/// - `status(code) = completed | pending | already_in_desired_state | rejected | unknown`,
///   repeatable, `code` in `100..=599`; an error code (4xx, 5xx) cannot mean `completed`;
/// - `result = Type`: **required**; the declared result, a `Deserialize + Serialize +
///   JsonSchema` type; only its fields reach the agent, and `Executor::run` returns it typed
///   (`Action::Output`). Write `result = ()` for an action that returns no data;
/// - the per-action limits, each part of the definition (a changed limit is a changed
///   action): `timeout = "5s"` (the total time of one request, body included),
///   `connect_timeout = "2s"`, `max_attempts = 3` (`1..=5`, the channel's hard limit),
///   `max_retry_after = "30s"` (whole seconds), `max_response_bytes = 65536` and
///   `message_field = "/error/message"` (the JSON pointer of the one error-body field that
///   may be shown, filtered). Durations are a whole number followed by `ms`, `s` or `m`.
///
/// The `#[audit_note]` field is never sent: it is left out of the body (the card lists it as
/// omitted), and a path, query or header that names it is a compile error.
///
/// `#[ssh(...)]`:
///
/// - `host = "inventory-name"`, or `host = "{field}"` to take the host from a field tagged
///   `#[scope(...)]`;
/// - `argv = ["program", "arg", "{field}", …]`: each element is one remote argument; the
///   program (`argv[0]`) is fixed;
/// - `exit(code) = status`, repeatable, `code` in `0..=255` (exit 0 is `completed`);
/// - `timeout = "30s"`: how long the command may run; `output_cap = 65536`: bytes kept per
///   output stream.
///
/// Its `Action::Output` is `sallyport_core::target::CommandOutput`; an argv that names the
/// `#[audit_note]` field is a compile error.
///
/// `#[channel(name = "custom")]`: a channel of the application's own, by name.
///
/// Field names given as identifiers (`query(page)`) or strings (`query("per-page")`) and
/// `{placeholders}` are the JSON names the agent sends, after `#[serde(rename = "…")]` and
/// `#[serde(rename_all = "…")]`.
///
/// # Field attributes
///
/// - `#[scope(kind)]`: the field names an object of scope kind `kind` (`project`, `host`, …);
///   the executor checks it against the session's scope before consent. The field's type
///   must hold identifiers: `String`, an integer, or an `Option` or `Vec` of them.
/// - `#[audit_note]`: at most one `String` or `Option<String>` field, the agent's free-text
///   reason, stored and shown to the human, never parsed.
/// - `#[policy]`: the host's policy (`sallyport_core::policy`) sees the field's value
///   (in Cedar, as `context.args.<name>`). Fields without it are never shown to the policy.
///   The field must be one the agent sends (not `#[serde(skip)]` or `#[serde(flatten)]`).
/// - `#[ssh(allow_leading_dash)]`: on an `#[ssh]` action, the field's value may begin with
///   `-` where the remote program would read it as an option. Without it the SSH channel
///   refuses such a value before consent (`--checkpoint-action=exec=sh` is an option to `tar`,
///   however it is quoted) unless the argv template puts a literal `"--"` before the field.
///   Give an opted-in field an `enum` or `pattern` that admits only the options you mean.
///   The field must be a placeholder in `argv`.
///
/// # Compile-time errors
///
/// Every rule above is checked at compile time and reported at the token that breaks it,
/// all at once: unknown or duplicate keys, unknown keywords, consent below the floor,
/// `retry = safe` on a mutating action, invalid names, placeholders naming no field, two
/// channel targets, status codes out of range, a second `#[audit_note]`, a scope tag on a
/// type that cannot hold an identifier, a missing doc comment, enums, tuple structs and
/// generic structs, and `#[ssh(allow_leading_dash)]` on a field outside an `#[ssh]` action's
/// argv.
#[proc_macro_derive(
    Action,
    attributes(action, http, ssh, channel, scope, audit_note, policy)
)]
pub fn derive_action(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive(&input)
        .unwrap_or_else(|error| fallback::expand(&input, &error))
        .into()
}

/// Derives `sallyport_core::sensitive::Sensitive` for a result struct: which of its fields
/// hold personal data, and what the agent gets of each. `#[derive(Action)]` reads the
/// declarations of its `result = Type`, so the action needs nothing more.
///
/// ```ignore
/// #[derive(Sensitive, Serialize, Deserialize, JsonSchema)]
/// struct Customer {
///     id: String,
///     #[sensitive(email)]                 // masked: `j***@example.com`
///     email: String,
///     #[sensitive(card, drop)]            // removed (the field must read without it)
///     card: Option<String>,
///     #[sensitive(phone, keep)]           // handed over, listed on the card
///     phone: String,
///     #[sensitive(detect(email, card, iban))] // free text: what is found is masked
///     notes: String,
///     orders: Vec<Order>,                 // `Order`'s own declarations, under `/orders/*`
/// }
/// ```
///
/// Kinds: `email`, `phone`, `card`, `iban`, `national_id`, `ip_address`, `name`, `address`,
/// `birth_date` (the last three cannot be detected in free text). What the agent gets:
/// `mask` (the default), `drop` or `keep`. Field names follow serde's `rename` and
/// `rename_all`; a `#[serde(skip)]` field is left out, a `#[serde(flatten)]` field passes on
/// its type's declarations. A field without `#[sensitive]` passes on the declarations of its
/// type (through `Vec`, `Option` and `Box`) when that type derives `Sensitive`.
///
/// # Compile-time errors
///
/// An unknown kind, two kinds on one field (use `detect(…)` for free text), a kind that
/// cannot be detected inside `detect(…)`, `drop` on a field that is neither an `Option` nor
/// `#[serde(default)]` (the typed result would no longer read), a mask on a number or a
/// `bool`, and `#[sensitive]` on a field serde never serializes.
#[proc_macro_derive(Sensitive, attributes(sensitive))]
pub fn derive_sensitive(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    sensitive::derive(&input).into()
}
