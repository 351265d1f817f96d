//! Field-level rules: `#[audit_note]`, `#[scope(kind)]` and `#[policy]`.

use crate::attr::{Errors, Field, Input};

use super::action::check_action_name;

/// Field-level rules: one `#[audit_note]`, and scope tags and `#[policy]` on fields the
/// agent sends.
pub(super) fn check_fields(input: &Input, errs: &mut Errors) {
    let mut audit_note: Option<&Field> = None;
    for field in &input.fields {
        if let Some(span) = field.policy {
            let ident = field.ident;
            if !field.deserialized {
                errs.at(
                    span,
                    format!(
                        "field `{ident}` is skipped by serde, so the agent never sends it and the \
                         policy would never see it"
                    ),
                );
            }
            if field.flatten {
                errs.at(
                    span,
                    format!(
                        "field `{ident}` is `#[serde(flatten)]`; mark the fields inside it \
                         `#[policy]` instead"
                    ),
                );
            }
        }
        if let Some(span) = field.audit_note {
            if let Some(first) = audit_note {
                errs.at(
                    span,
                    format!(
                        "a second `#[audit_note]`; field `{}` already holds the audit note, and \
                         an action has one",
                        first.ident
                    ),
                );
            } else {
                audit_note = Some(field);
            }
        }
        let Some(kind) = &field.scope else { continue };
        let ident = field.ident;
        if field.audit_note.is_some() {
            errs.at(
                kind.span(),
                format!(
                    "field `{ident}` is the audit note, free text that is never parsed, so it \
                     cannot name a scoped object"
                ),
            );
        }
        if !field.deserialized {
            errs.at(
                kind.span(),
                format!(
                    "field `{ident}` is skipped by serde, so the agent never sends it and there \
                     is nothing to check against the scope"
                ),
            );
        }
        if field.flatten {
            errs.at(
                kind.span(),
                format!(
                    "field `{ident}` is `#[serde(flatten)]`; tag the identifier fields inside \
                     it instead"
                ),
            );
        }
        if check_action_name(&kind.to_string()).is_err() {
            errs.at(
                kind.span(),
                format!(
                    "invalid scope kind `{kind}`; scope kinds are lowercase snake case, as in \
                     `#[scope(project)]`"
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use syn::{DeriveInput, parse_quote};

    use crate::valid::tests::errors;

    #[test]
    fn policy_fields_must_be_sent_by_the_agent() {
        let input: DeriveInput = parse_quote! {
            /// Create one invoice.
            #[action(name = "create_invoice", effect = reversible_change)]
            struct CreateInvoice {
                #[policy] amount_cents: u64,
                #[policy] #[serde(skip)] internal: u32,
                #[policy] #[serde(flatten)] extra: Extra,
                #[policy(amount)] currency: String,
                #[policy] #[policy] twice: String,
            }
        };
        assert_eq!(
            errors(&input),
            [
                "`#[policy]` takes no arguments: it shows the field to the host's policy",
                "duplicate `#[policy]` on this field",
                "field `internal` is skipped by serde, so the agent never sends it and the \
                 policy would never see it",
                "field `extra` is `#[serde(flatten)]`; mark the fields inside it `#[policy]` \
                 instead",
            ]
        );
    }
}
