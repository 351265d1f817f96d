//! How attributes name fields: the input's fields by the JSON name the agent sends, the
//! `{field}` placeholders of templates, and the audit note that no template may place.

use std::collections::BTreeMap;

use proc_macro2::Span;
use syn::LitStr;

use crate::attr::{self, Errors, Field, FieldRef};

/// The input's fields by the JSON name the agent sends.
pub(super) struct FieldNames<'f, 'a> {
    by_json: BTreeMap<&'f str, &'f Field<'a>>,
    all: &'f [Field<'a>],
    /// A `#[serde(flatten)]` field inlines names that cannot be known here.
    open: bool,
}

impl<'f, 'a> FieldNames<'f, 'a> {
    pub(super) fn new(fields: &'f [Field<'a>]) -> Self {
        Self {
            by_json: fields
                .iter()
                .filter(|f| f.deserialized && !f.flatten)
                .map(|f| (f.json_name.as_str(), f))
                .collect(),
            all: fields,
            open: fields.iter().any(|f| f.flatten && f.deserialized),
        }
    }

    /// The field the agent sends as `name`, or an error naming `what` referred to it. With a
    /// flattened field an unknown name may be one of its fields: `Ok(None)`.
    fn resolve(&self, name: &str, what: &str) -> Result<Option<&'f Field<'a>>, String> {
        if let Some(field) = self.by_json.get(name) {
            return Ok(Some(field));
        }
        let mut message = format!("{what} names no input field");
        if let Some(field) = self
            .all
            .iter()
            .find(|f| f.ident == name || f.json_name == name)
        {
            if !field.deserialized {
                message = format!(
                    "{what} names field `{}`, which serde skips, so the agent never sends it",
                    field.ident
                );
            } else if field.flatten {
                message = format!(
                    "{what} names field `{}`, which is `#[serde(flatten)]`; name one of the \
                     fields inside it",
                    field.ident
                );
            } else {
                message = format!(
                    "{message}; field `{}` is sent as `{}`",
                    field.ident, field.json_name
                );
            }
            return Err(message);
        }
        if self.open {
            return Ok(None);
        }
        if let Some(close) = attr::closest(name, self.by_json.keys().copied()) {
            message = format!("{message}; did you mean `{close}`?");
        } else if self.by_json.is_empty() {
            message.push_str("; the action has no input fields");
        } else {
            let names: Vec<String> = self
                .by_json
                .keys()
                .map(|name| format!("`{name}`"))
                .collect();
            message = format!("{message}; the fields are {}", names.join(", "));
        }
        Err(message)
    }
}

/// The `{field}` placeholders of a template, or what is wrong with its braces.
pub(super) fn placeholders(template: &str) -> Result<Vec<&str>, String> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err(format!("`{template}` has a `}}` without a `{{`"));
        }
        let after = &rest[open + 1..];
        let Some(close) = after
            .find(['{', '}'])
            .filter(|&i| after[i..].starts_with('}'))
        else {
            return Err(format!("`{template}` has a `{{` without a `}}`"));
        };
        let name = &after[..close];
        if name.trim().is_empty() {
            return Err(format!("`{template}` has an empty placeholder `{{}}`"));
        }
        names.push(name);
        rest = &after[close + 1..];
    }
    Ok(names)
}

/// Resolves each placeholder of a template literal, recording errors at the literal.
pub(super) fn check_template<'f, 'a>(
    template: &LitStr,
    what: &str,
    fields: &FieldNames<'f, 'a>,
    errs: &mut Errors,
) -> Vec<(String, Option<&'f Field<'a>>)> {
    let value = template.value();
    match placeholders(&value) {
        Ok(names) => names
            .into_iter()
            .filter_map(|name| {
                match fields.resolve(name, &format!("{what} placeholder `{{{name}}}`")) {
                    Ok(field) => Some((name.to_owned(), field)),
                    Err(message) => {
                        errs.at(template.span(), message);
                        None
                    }
                }
            })
            .collect(),
        Err(message) => {
            errs.at(template.span(), message);
            Vec::new()
        }
    }
}

/// The audit note is stored and shown to the human, never sent: a template that places it
/// is refused.
pub(super) fn check_note_not_sent(
    name: &str,
    place: &str,
    span: Span,
    fields: &FieldNames,
    errs: &mut Errors,
) {
    if let Some(field) = fields.by_json.get(name)
        && field.audit_note.is_some()
    {
        errs.at(
            span,
            format!(
                "field `{}` is the audit note, which is stored and shown to the human but never \
                 sent upstream; remove it from the {place}, or send another field",
                field.ident
            ),
        );
    }
}

/// Resolves a field named in an attribute; `false` (and an error, if any) when it names none.
pub(super) fn resolve_ref(
    field: &FieldRef,
    what: &str,
    fields: &FieldNames,
    errs: &mut Errors,
) -> bool {
    match fields.resolve(&field.name, &format!("{what} `{}`", field.name)) {
        Ok(_) => true,
        Err(message) => {
            errs.at(field.span, message);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use syn::{DeriveInput, parse_quote};

    use super::*;
    use crate::valid::tests::errors;

    #[test]
    fn placeholders_are_parsed_and_bad_braces_refused() {
        assert_eq!(placeholders("/v1/{a}/b/{c}"), Ok(vec!["a", "c"]));
        assert_eq!(placeholders("/plain"), Ok(vec![]));
        assert!(placeholders("/v1/{a").is_err());
        assert!(placeholders("/v1/a}").is_err());
        assert!(placeholders("/v1/{}").is_err());
        assert!(placeholders("/v1/{{a}}").is_err());
    }

    #[test]
    fn a_flattened_field_may_hold_unknown_placeholders() {
        let input: DeriveInput = parse_quote! {
            /// Read one thing.
            #[action(name = "read_thing", effect = observe)]
            #[http(get = "/things/{thing_id}", result = ())]
            struct ReadThing { #[serde(flatten)] ids: Ids }
        };
        assert_eq!(errors(&input), Vec::<String>::new());
    }

    #[test]
    fn the_audit_note_is_never_placed_in_a_template() {
        let input: DeriveInput = parse_quote! {
            /// Queue one build.
            #[action(name = "deploy", effect = reversible_change)]
            #[http(post = "/v1/{reason}", query(why), result = ())]
            struct Deploy {
                #[audit_note] reason: String,
                #[audit_note] #[serde(rename = "why")] other: String,
            }
        };
        let found = errors(&input);
        assert!(
            found.contains(
                &"field `reason` is the audit note, which is stored and shown to the human but \
                  never sent upstream; remove it from the path, or send another field"
                    .to_owned()
            ),
            "{found:?}"
        );
        let input: DeriveInput = parse_quote! {
            /// Restart a unit.
            #[action(name = "restart_unit", effect = reversible_change)]
            #[ssh(host = "web1", argv = ["logger", "{why}"])]
            struct RestartUnit { #[audit_note] why: String }
        };
        assert_eq!(
            errors(&input),
            [
                "field `why` is the audit note, which is stored and shown to the human but never \
              sent upstream; remove it from the argv, or send another field"
            ]
        );
    }
}
