//! `#[action(...)]`.

use syn::ext::IdentExt as _;
use syn::parse::ParseStream;
use syn::punctuated::Punctuated;
use syn::{Attribute, Error, Ident, LitStr, Token, bracketed, token};

use super::ast::ActionAttr;
use super::errors::{Errors, closest, unknown_key};
use super::parse::{expect_eq, parse_keyword, parse_list, parse_str};

pub(super) const ACTION_KEYS: &[&str] = &[
    "name",
    "effect",
    "consent",
    "retry",
    "reconcile",
    "credential",
    "data",
    "externality",
    "scope",
    "returns",
    "summary",
    "idempotent",
    "method_override",
    "secrets",
    "instructions",
    "personal_data",
];

pub(super) fn parse_action(attr: &Attribute, action: &mut ActionAttr, errs: &mut Errors) {
    parse_list(attr, errs, |key, input| {
        let name = key.unraw().to_string();
        match name.as_str() {
            "name" => {
                expect_eq(input, &key, "name = \"snake_case_name\"")?;
                let value = parse_str(input, "name = \"snake_case_name\"");
                action.name.set(key, "action", value)
            }
            "effect" => {
                expect_eq(input, &key, "effect = observe")?;
                let value = parse_keyword(input, &key);
                action.effect.set(key, "action", value)
            }
            "consent" => {
                expect_eq(input, &key, "consent = per_call")?;
                let value = parse_keyword(input, &key);
                action.consent.set(key, "action", value)
            }
            "retry" => {
                expect_eq(input, &key, "retry = never")?;
                let value = parse_keyword(input, &key);
                action.retry.set(key, "action", value)
            }
            "reconcile" => {
                expect_eq(input, &key, "reconcile = \"get_status_action\"")?;
                let value = parse_str(input, "reconcile = \"get_status_action\"");
                action.reconcile.set(key, "action", value)
            }
            "credential" => {
                expect_eq(input, &key, "credential = \"vault-name\"")?;
                let value = parse_str(input, "credential = \"vault-name\"");
                action.credential.set(key, "action", value)
            }
            "data" => {
                expect_eq(input, &key, "data = [pii, financial]")?;
                let value = parse_data(input);
                action.data.set(key, "action", value)
            }
            "externality" => {
                expect_eq(input, &key, "externality = internal")?;
                let value = parse_keyword(input, &key);
                action.externality.set(key, "action", value)
            }
            "secrets" => {
                expect_eq(input, &key, "secrets = mask")?;
                let value = parse_keyword(input, &key);
                action.secrets.set(key, "action", value)
            }
            "instructions" => {
                expect_eq(input, &key, "instructions = flag")?;
                let value = parse_keyword(input, &key);
                action.instructions.set(key, "action", value)
            }
            "personal_data" => {
                expect_eq(input, &key, "personal_data = [email, card]")?;
                let value = parse_kinds(input);
                action.personal_data.set(key, "action", value)
            }
            "scope" => {
                expect_eq(input, &key, "scope = \"One project.\"")?;
                let value = parse_str(input, "scope = \"One project.\"");
                action.scope.set(key, "action", value)
            }
            "returns" => {
                expect_eq(input, &key, "returns = \"The new state.\"")?;
                let value = parse_str(input, "returns = \"The new state.\"");
                action.returns.set(key, "action", value)
            }
            "summary" => {
                expect_eq(input, &key, "summary = \"One line.\"")?;
                let value = parse_str(input, "summary = \"One line.\"");
                action.summary.set(key, "action", value)
            }
            "method_override" => {
                let usage = "method_override = \"why this DELETE only reads\"";
                expect_eq(input, &key, usage)?;
                let value = parse_str(input, usage);
                action.method_override.set(key, "action", value)
            }
            "idempotent" => {
                if input.peek(Token![=]) {
                    return Err(Error::new(
                        key.span(),
                        "`idempotent` is a flag: write `idempotent` alone to declare that \
                         repeating a call with the same arguments changes nothing more, or \
                         leave it out",
                    ));
                }
                action.idempotent.set(key, "action", Ok(()))
            }
            _ => {
                if let Some(close) = closest(&name, ACTION_KEYS.iter().copied()) {
                    action.misspelled.push(close);
                }
                Err(unknown_key(&key, "action", ACTION_KEYS))
            }
        }
    });
}

fn parse_kinds(input: ParseStream) -> syn::Result<Vec<Ident>> {
    if !input.peek(token::Bracket) {
        return Err(input
            .error("expected a list of kinds of personal data: `personal_data = [email, card]`"));
    }
    let content;
    bracketed!(content in input);
    let kinds = Punctuated::<Ident, Token![,]>::parse_terminated_with(&content, |input| {
        input.call(Ident::parse_any).map_err(|e| {
            Error::new(
                e.span(),
                "expected a kind of personal data, such as `email`",
            )
        })
    })?;
    Ok(kinds.into_iter().collect())
}

fn parse_data(input: ParseStream) -> syn::Result<Vec<Ident>> {
    if !input.peek(token::Bracket) {
        return Err(input.error("expected a list of data classes: `data = [pii, financial]`"));
    }
    let content;
    bracketed!(content in input);
    let classes = Punctuated::<Ident, Token![,]>::parse_terminated_with(&content, |input| {
        if input.peek(LitStr) {
            let lit: LitStr = input.parse()?;
            return Err(Error::new(
                lit.span(),
                format!("write the data class `{}` without quotes", lit.value()),
            ));
        }
        input
            .call(Ident::parse_any)
            .map_err(|e| Error::new(e.span(), "expected a data class, such as `pii`"))
    })?;
    Ok(classes.into_iter().collect())
}
