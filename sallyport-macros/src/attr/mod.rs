//! Phase 1: parse the input struct and its attributes into plain data.
//!
//! Parsing checks syntax and the domain of each single value (a known effect class, a status
//! code in range). Rules that relate several values live in `valid/`. Errors go to
//! [`Errors`] and parsing carries on after each one, so the author sees every mistake at once.
//!
//! One file per concern, as `serde_derive`'s `internals/`: [`ast`] holds the parsed data,
//! [`errors`] the error accumulation, [`keyword`] the vocabularies, [`case`] serde's case rules,
//! [`parse`] the shared syntax, and one parser per attribute ([`action`], [`http`], [`ssh`],
//! [`channel`], [`field`]), with the doc comment in [`doc`] and serde's attributes in
//! [`serde`].

mod action;
mod ast;
mod case;
mod channel;
mod doc;
mod errors;
mod field;
mod http;
mod keyword;
mod parse;
mod serde;
mod ssh;

use syn::{Attribute, Data, DeriveInput, Error, Fields};

use self::action::parse_action;
use self::channel::parse_channel;
use self::doc::parse_doc;
use self::field::parse_field;
use self::http::parse_http;
use self::serde::parse_serde_container;
pub(crate) use self::serde::{side_name, skip_serde_value};
use self::ssh::parse_ssh;

pub(crate) use self::ast::{
    ActionAttr, ChannelAttr, CodeRule, Doc, Field, FieldRef, HttpAttr, Input, RuleResult, SshAttr,
    TargetAttr, TargetKind,
};
pub(crate) use self::case::RenameRule;
pub(crate) use self::errors::{Errors, closest, one_of};
pub(crate) use self::keyword::{Effect, Keyword, Method, Personal, Retry, Status};
use self::parse::path_name;

impl<'a> Input<'a> {
    /// Parses the struct, recording every mistake in `errs`. `None` when the input is not a
    /// struct with named fields, since nothing else can be checked then.
    pub(crate) fn from_syn(input: &'a DeriveInput, errs: &mut Errors) -> Option<Self> {
        let ident = &input.ident;
        let fields = match &input.data {
            Data::Struct(data) => match &data.fields {
                Fields::Named(fields) => fields,
                Fields::Unnamed(fields) => {
                    errs.push(Error::new_spanned(
                        fields,
                        format!(
                            "#[derive(Action)] needs named fields, but `{ident}` is a tuple \
                             struct; the field names are the argument names the agent sends: \
                             `struct {ident} {{ … }}`"
                        ),
                    ));
                    return None;
                }
                Fields::Unit => {
                    errs.at(
                        ident.span(),
                        format!(
                            "`{ident}` is a unit struct, but the agent sends a JSON object; \
                             write an action without inputs as `struct {ident} {{}}`"
                        ),
                    );
                    return None;
                }
            },
            Data::Enum(data) => {
                errs.at(
                    data.enum_token.span,
                    format!(
                        "#[derive(Action)] works on structs, and `{ident}` is an enum; an action \
                         takes one JSON object of named arguments, so write one struct per action"
                    ),
                );
                return None;
            }
            Data::Union(data) => {
                errs.at(
                    data.union_token.span,
                    format!(
                        "#[derive(Action)] works on structs, and `{ident}` is a union; write a \
                         struct with named fields"
                    ),
                );
                return None;
            }
        };
        if !input.generics.params.is_empty() {
            errs.push(Error::new_spanned(
                &input.generics,
                format!(
                    "an action is one concrete type, so `{ident}` cannot have generic \
                     parameters; every instantiation would share one action name"
                ),
            ));
        }

        let (action, target, rename_all) = parse_container_attrs(&input.attrs, errs);
        let fields = fields
            .named
            .iter()
            .filter_map(|field| Some(parse_field(field.ident.as_ref()?, field, rename_all, errs)))
            .collect();
        Some(Self {
            ident,
            doc: parse_doc(&input.attrs, errs),
            action,
            target,
            fields,
        })
    }
}

/// Reads `#[action]`, the target attribute and serde's `rename_all` from the struct.
fn parse_container_attrs(
    attrs: &[Attribute],
    errs: &mut Errors,
) -> (ActionAttr, Option<TargetAttr>, RenameRule) {
    let mut action = ActionAttr::default();
    let mut target: Option<TargetAttr> = None;
    let mut rename_all = RenameRule::None;
    for attr in attrs {
        let path = attr.path();
        if path.is_ident("action") {
            if action.attr.is_none() {
                action.attr = Some(attr.clone());
            }
            parse_action(attr, &mut action, errs);
        } else if path.is_ident("http") || path.is_ident("ssh") || path.is_ident("channel") {
            if let Some(first) = &target {
                errs.push(Error::new_spanned(
                    attr,
                    format!(
                        "an action has one channel target, and `#[{}]` is already set; \
                         remove one of the two",
                        path_name(&first.path)
                    ),
                ));
                continue;
            }
            let kind = if path.is_ident("http") {
                TargetKind::Http(parse_http(attr, errs))
            } else if path.is_ident("ssh") {
                TargetKind::Ssh(parse_ssh(attr, errs))
            } else {
                TargetKind::Channel(parse_channel(attr, errs))
            };
            target = Some(TargetAttr {
                path: path.clone(),
                kind,
            });
        } else if path.is_ident("scope") || path.is_ident("audit_note") {
            errs.push(Error::new_spanned(
                attr,
                format!(
                    "`#[{}]` goes on a field, not on the struct",
                    path_name(path)
                ),
            ));
        } else if path.is_ident("serde") {
            parse_serde_container(attr, &mut rename_all);
        }
    }
    (action, target, rename_all)
}

#[cfg(test)]
mod tests {
    use super::action::ACTION_KEYS;
    use super::keyword::{Consent, Externality};
    use super::*;
    use syn::{LitStr, parse_quote};

    fn parse(input: &DeriveInput) -> (Option<Input<'_>>, Vec<String>) {
        let mut errs = Errors::default();
        let parsed = Input::from_syn(input, &mut errs);
        let messages = match errs.finish() {
            Ok(()) => Vec::new(),
            Err(error) => error.into_iter().map(|e| e.to_string()).collect(),
        };
        (parsed, messages)
    }

    #[test]
    fn parses_every_action_key() {
        let input: DeriveInput = parse_quote! {
            /// Does one thing.
            #[action(name = "do_it", effect = external_commitment, consent = per_call,
                     retry = idempotency_key, reconcile = "check_it", credential = "api",
                     data = [pii, financial], externality = internal, scope = "One thing.",
                     returns = "The thing.", summary = "Does it.")]
            struct DoIt { a: String }
        };
        let (parsed, errors) = parse(&input);
        assert_eq!(errors, Vec::<String>::new());
        let action = parsed.expect("a struct").action;
        assert_eq!(
            action.name.get().map(LitStr::value).as_deref(),
            Some("do_it")
        );
        assert_eq!(
            action.effect.get().map(|k| k.value),
            Some(Effect::ExternalCommitment)
        );
        assert_eq!(
            action.consent.get().map(|k| k.value),
            Some(Consent::PerCall)
        );
        assert_eq!(
            action.retry.get().map(|k| k.value),
            Some(Retry::IdempotencyKey)
        );
        assert_eq!(
            action.externality.get().map(|k| k.value),
            Some(Externality::Internal)
        );
        let data: Vec<String> = action
            .data
            .get()
            .expect("data")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(data, ["pii", "financial"]);
    }

    #[test]
    fn idempotent_is_a_bare_flag() {
        let input: DeriveInput = parse_quote! {
            /// Sets one thing.
            #[action(name = "set_it", effect = reversible_change, idempotent)]
            struct SetIt { a: String }
        };
        let (parsed, errors) = parse(&input);
        assert!(errors.is_empty(), "{errors:?}");
        assert!(parsed.expect("parsed").action.idempotent.get().is_some());
        let input: DeriveInput = parse_quote! {
            /// Sets one thing.
            #[action(name = "set_it", effect = reversible_change, idempotent = true)]
            struct SetIt { a: String }
        };
        let (_, errors) = parse(&input);
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("`idempotent` is a flag"),
            "{errors:?}"
        );
    }

    #[test]
    fn collects_every_error_instead_of_stopping_at_the_first() {
        let input: DeriveInput = parse_quote! {
            /// Does one thing.
            #[action(name = "do_it", efect = observe, effect = destroy, retry = "safe")]
            #[http(post = "/x", status(700) = pending, status(201) = done)]
            struct DoIt { a: String }
        };
        let (_, errors) = parse(&input);
        assert_eq!(
            errors,
            [
                "unknown key `efect` in #[action]; expected one of `name`, `effect`, `consent`, \
                 `retry`, `reconcile`, `credential`, `data`, `externality`, `scope`, `returns`, \
                 `summary`, `idempotent`, `method_override`, `secrets`, `instructions`, \
                 `personal_data` (did you mean `effect`?)",
                "unknown effect class `destroy`; expected one of `observe`, `reversible_change`, \
                 `external_commitment`, `irreversible_or_broad`",
                "write `retry = safe` without quotes",
                "HTTP status code `700` is out of range; expected 100..=599",
                "unknown status `done`; expected one of `completed`, `pending`, \
                 `already_in_desired_state`, `rejected`, `unknown`",
            ]
        );
    }

    #[test]
    fn a_key_that_is_set_twice_is_reported_once_at_the_second() {
        let input: DeriveInput = parse_quote! {
            /// Does one thing.
            #[action(name = "a", effect = observe)]
            #[action(name = "b")]
            struct DoIt {}
        };
        let (parsed, errors) = parse(&input);
        assert_eq!(
            errors,
            ["duplicate key `name` in #[action]; it is already set above"]
        );
        assert_eq!(
            parsed
                .expect("a struct")
                .action
                .name
                .get()
                .map(LitStr::value)
                .as_deref(),
            Some("a")
        );
    }

    #[test]
    fn json_names_follow_serde_renames() {
        let input: DeriveInput = parse_quote! {
            #[serde(rename_all = "camelCase")]
            struct DoIt {
                project_id: String,
                #[serde(rename = "the-build")] build_id: String,
                #[serde(rename(serialize = "x", deserialize = "y"))] other: String,
                #[serde(skip)] local: String,
                r#type: String,
            }
        };
        let (parsed, _) = parse(&input);
        let fields = parsed.expect("a struct").fields;
        let names: Vec<(&str, bool)> = fields
            .iter()
            .map(|f| (f.json_name.as_str(), f.deserialized))
            .collect();
        assert_eq!(
            names,
            [
                ("projectId", true),
                ("the-build", true),
                ("y", true),
                ("local", false),
                ("type", true)
            ]
        );
    }

    #[test]
    fn rename_rules_match_serde() {
        let cases = [
            (RenameRule::PascalCase, "PerPage"),
            (RenameRule::CamelCase, "perPage"),
            (RenameRule::ScreamingSnakeCase, "PER_PAGE"),
            (RenameRule::KebabCase, "per-page"),
            (RenameRule::ScreamingKebabCase, "PER-PAGE"),
            (RenameRule::LowerCase, "per_page"),
        ];
        for (rule, expected) in cases {
            assert_eq!(rule.apply_to_field("per_page"), expected);
        }
    }

    #[test]
    fn the_doc_comment_is_unindented_and_its_first_sentence_is_the_summary() {
        let input: DeriveInput = parse_quote! {
            /// Queue one tested build for the preview
            /// environment. It starts within a minute.
            ///
            ///     indented code
            struct DoIt {}
        };
        let (parsed, _) = parse(&input);
        let doc = parsed.expect("a struct").doc.expect("a doc comment");
        assert_eq!(
            doc.text,
            "Queue one tested build for the preview\nenvironment. It starts within a minute.\n\n    indented code"
        );
        assert_eq!(
            doc.summary,
            "Queue one tested build for the preview environment."
        );
    }

    #[test]
    fn a_blank_doc_comment_is_no_description() {
        let input: DeriveInput = parse_quote! {
            ///
            struct DoIt {}
        };
        assert!(parse(&input).0.expect("a struct").doc.is_none());
    }

    #[test]
    fn limits_parse_with_their_units_and_bad_values_are_named() {
        let input: DeriveInput = parse_quote! {
            /// Read one thing.
            #[action(name = "read_thing", effect = observe)]
            #[http(get = "/x", result = (), timeout = "400ms", connect_timeout = "2s",
                   max_retry_after = "1m", max_attempts = 5, max_response_bytes = 4096,
                   message_field = "/error/message")]
            struct ReadThing {}
        };
        let (parsed, errors) = parse(&input);
        assert_eq!(errors, Vec::<String>::new());
        let Some(TargetKind::Http(http)) = parsed.expect("a struct").target.map(|t| t.kind) else {
            panic!("an http target");
        };
        assert_eq!(http.timeout.get().map(|d| d.ms), Some(400));
        assert_eq!(http.connect_timeout.get().map(|d| d.ms), Some(2_000));
        assert_eq!(http.max_retry_after.get().map(|d| d.ms), Some(60_000));
        assert_eq!(http.max_attempts.get().map(|n| n.value), Some(5));
        assert_eq!(http.max_response_bytes.get().map(|n| n.value), Some(4096));

        let input: DeriveInput = parse_quote! {
            /// Read one thing.
            #[action(name = "read_thing", effect = observe)]
            #[http(get = "/x", result = (), timeout = "5 seconds", connect_timeout = 2,
                   max_retry_after = "1500ms", max_attempts = 6, max_response_bytes = 0,
                   message_field = "error.message")]
            struct ReadThing {}
        };
        let (_, errors) = parse(&input);
        assert_eq!(
            errors,
            [
                "`5 seconds` is not a duration; write a whole number followed by `ms`, `s` or \
                 `m`, as in `timeout = \"5s\"`",
                "write the duration with its unit, as a string: `connect_timeout = \"2s\"`",
                "`max_retry_after` counts whole seconds, and `1500ms` is not; write `s` or `m`",
                "`max_attempts = 6` is out of range; expected 1..=5 (the HTTP channel never sends \
                 more than 5 requests per attempt)",
                "`max_response_bytes = 0` is out of range; expected at least 1",
                "`message_field` is a JSON pointer into the error body and starts with `/`, as in \
                 `message_field = \"/error/message\"`",
            ]
        );
    }

    #[test]
    fn typos_find_their_key() {
        assert_eq!(
            closest("efect", ACTION_KEYS.iter().copied()),
            Some("effect")
        );
        assert_eq!(
            closest("reconcil", ACTION_KEYS.iter().copied()),
            Some("reconcile")
        );
        assert_eq!(closest("zzzzzz", ACTION_KEYS.iter().copied()), None);
    }
}
