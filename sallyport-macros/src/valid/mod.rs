//! Phase 2: the rules that relate several attributes and fields.
//!
//! [`check`] turns a parsed [`Input`] into a [`Checked`] one whose required parts are present,
//! so `expand.rs` never has to unwrap ("parse, don't validate").
//!
//! One file per concern, as `attr/`: [`action`] the rules inside `#[action]`, [`fields`] the
//! field attributes, [`names`] how attributes name fields (by JSON name and `{placeholder}`),
//! and one file per channel target ([`http`], [`ssh`], [`channel`]).

mod action;
mod channel;
mod fields;
mod http;
mod names;
mod ssh;

use syn::{Error, LitStr};

use self::action::{check_action, snake_case};
use self::channel::check_channel;
use self::fields::check_fields;
use self::http::check_http;
use self::names::FieldNames;
use self::ssh::{check_leading_dash, check_ssh};
use crate::attr::{self, CodeRule, Doc, Effect, Errors, Input, Keyword, TargetKind};

/// An input whose required parts are present and whose rules all hold.
pub(crate) struct Checked<'i, 'a> {
    pub(crate) input: &'i Input<'a>,
    pub(crate) name: &'i LitStr,
    pub(crate) effect: Effect,
    pub(crate) doc: &'i Doc,
}

/// Checks every rule, recording each broken one in `errs`. `Some` only when none is broken.
pub(crate) fn check<'i, 'a>(input: &'i Input<'a>, errs: &mut Errors) -> Option<Checked<'i, 'a>> {
    let mut local = Errors::default();
    let required = check_required(input, &mut local);
    check_action(input, &mut local);
    let fields = FieldNames::new(&input.fields);
    check_fields(input, &mut local);
    if let Some(target) = &input.target {
        match &target.kind {
            TargetKind::Http(http) => check_http(http, &target.path, &fields, &mut local),
            TargetKind::Ssh(ssh) => check_ssh(ssh, &target.path, &fields, &mut local),
            TargetKind::Channel(channel) => check_channel(channel, &target.path, &mut local),
        }
    }
    check_leading_dash(input, &mut local);
    match local.finish() {
        Ok(()) => required,
        Err(error) => {
            errs.push(error);
            None
        }
    }
}

/// The description, `#[action]`, `name` and `effect`.
fn check_required<'i, 'a>(input: &'i Input<'a>, errs: &mut Errors) -> Option<Checked<'i, 'a>> {
    let ident = input.ident;
    let doc = input.doc.as_ref();
    if doc.is_none() {
        errs.at(
            ident.span(),
            format!(
                "`{ident}` has no doc comment, and an action's doc comment is the description \
                 the agent reads; add `/// <what this action does>` above the struct"
            ),
        );
    }
    let action = &input.action;
    let Some(attr) = &action.attr else {
        errs.at(
            ident.span(),
            format!(
                "`{ident}` has no #[action] attribute; add `#[action(name = \"{}\", effect = …)]`",
                snake_case(&ident.to_string())
            ),
        );
        return None;
    };
    if action.name.key.is_none() && !action.misspelled.contains(&"name") {
        errs.push(Error::new_spanned(
            attr.path(),
            format!(
                "missing `name` in #[action]; add `name = \"{}\"` (the name the agent calls)",
                snake_case(&ident.to_string())
            ),
        ));
    }
    if action.effect.key.is_none() && !action.misspelled.contains(&"effect") {
        errs.push(Error::new_spanned(
            attr.path(),
            format!(
                "missing `effect` in #[action]; every action declares what it does to the world, \
                 it is never inferred: add `effect = …` with {}",
                attr::one_of(Effect::NAMES)
            ),
        ));
    }
    Some(Checked {
        input,
        name: action.name.get()?,
        effect: action.effect.get()?.value,
        doc: doc?,
    })
}

/// Each code of the `status(code)` or `exit(code)` rules is mapped once.
fn check_codes<C: PartialEq + std::fmt::Display>(
    rules: &[CodeRule<C>],
    key: &str,
    errs: &mut Errors,
) {
    for (i, rule) in rules.iter().enumerate() {
        if rules[..i].iter().any(|earlier| earlier.code == rule.code) {
            errs.at(
                rule.code_lit.span(),
                format!("`{key}({})` is mapped twice", rule.code),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::{DeriveInput, parse_quote};

    /// The messages of every error the derive's first two phases report for `input`.
    pub(super) fn errors(input: &DeriveInput) -> Vec<String> {
        let mut errs = Errors::default();
        if let Some(parsed) = Input::from_syn(input, &mut errs) {
            let checked = check(&parsed, &mut errs);
            let _ = checked.is_some();
        }
        match errs.finish() {
            Ok(()) => Vec::new(),
            Err(error) => error.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn a_complete_action_passes() {
        let input: DeriveInput = parse_quote! {
            /// Queue one build.
            #[action(name = "create_preview_deployment", effect = external_commitment,
                     retry = idempotency_key, reconcile = "get_deployment_status")]
            #[http(post = "/v1/projects/{project_id}/deployments", query(page),
                   header("X-Note" = note), status(202) = pending, result = Accepted)]
            struct CreatePreviewDeployment {
                #[scope(project)] project_id: String,
                page: u32,
                note: String,
                #[audit_note] reason: String,
            }
        };
        assert_eq!(errors(&input), Vec::<String>::new());
    }

    #[test]
    fn cross_field_mistakes_are_all_reported() {
        let input: DeriveInput = parse_quote! {
            /// Queue one build.
            #[action(name = "deploy", effect = irreversible_or_broad, consent = session,
                     retry = safe, reconcile = "deploy")]
            #[http(post = "/v1/{projct_id}", query(project_id),
                   header("Authorization" = project_id), status(404) = completed)]
            struct Deploy {
                #[scope(project)] #[serde(rename = "projectId")] project_id: String,
                #[audit_note] a: String,
                #[audit_note] b: String,
            }
        };
        assert_eq!(
            errors(&input),
            [
                "consent `session` is below the floor for `irreversible_or_broad` actions; use \
                 `consent = per_call` or leave `consent` out to get it by default",
                "`retry = safe` is only for `observe` actions, and this one is \
                 `irreversible_or_broad`; use `retry = idempotency_key` if the server honours \
                 idempotency keys, or leave `retry` out (`never`)",
                "`reconcile = \"deploy\"` names this action itself; name the read-only action \
                 that tells whether a call took effect",
                "a second `#[audit_note]`; field `a` already holds the audit note, and an action \
                 has one",
                "path placeholder `{projct_id}` names no input field; did you mean `projectId`?",
                "query field `project_id` names no input field; field `project_id` is sent as \
                 `projectId`",
                "header `Authorization` is set by the executor or the transport, never from an \
                 agent's input",
                "header field `project_id` names no input field; field `project_id` is sent as \
                 `projectId`",
                "missing `result` in #[http]; name the type the agent gets back, as in \
                 `result = Invoice` (a `Deserialize + Serialize + JsonSchema` type; only its \
                 fields reach the agent), or write `result = ()` for \"no data\"",
                "a 404 response cannot mean `completed`; map it to `already_in_desired_state` if \
                 it means nothing needed doing, leave it to the conservative default, or, if this \
                 status is itself the answer, say what it means: `completed(value = r#\"…\"#)`",
            ]
        );
    }

    #[test]
    fn missing_parts_are_named() {
        let input: DeriveInput = parse_quote! {
            #[action(consent = none)]
            struct ReadThing {}
        };
        assert_eq!(
            errors(&input),
            [
                "`ReadThing` has no doc comment, and an action's doc comment is the description \
                 the agent reads; add `/// <what this action does>` above the struct",
                "missing `name` in #[action]; add `name = \"read_thing\"` (the name the agent \
                 calls)",
                "missing `effect` in #[action]; every action declares what it does to the world, \
                 it is never inferred: add `effect = …` with one of `observe`, \
                 `reversible_change`, `external_commitment`, `irreversible_or_broad`",
            ]
        );
    }
}
