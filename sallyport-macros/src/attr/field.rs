//! The attributes on a field: `#[scope(kind)]`, `#[audit_note]`, `#[policy]`,
//! `#[ssh(allow_leading_dash)]` and the serde renames that decide the name the agent sends.

use syn::ext::IdentExt as _;
use syn::parse::ParseStream;
use syn::spanned::Spanned as _;
use syn::{Attribute, Error, Ident, LitStr, Meta, Token};

use super::ast::Field;
use super::case::RenameRule;
use super::errors::{Errors, unknown_key};
use super::parse::{parse_list, path_name};
use super::serde::parse_serde_field;
use super::ssh::SSH_KEYS;

pub(super) fn parse_field<'a>(
    ident: &'a Ident,
    field: &'a syn::Field,
    rename_all: RenameRule,
    errs: &mut Errors,
) -> Field<'a> {
    let mut parsed = Field {
        ident,
        ty: &field.ty,
        json_name: rename_all.apply_to_field(&ident.unraw().to_string()),
        deserialized: true,
        flatten: false,
        scope: None,
        audit_note: None,
        policy: None,
        allow_leading_dash: None,
    };
    let mut renamed = None;
    for attr in &field.attrs {
        let path = attr.path();
        if path.is_ident("scope") {
            let kind = match &attr.meta {
                Meta::List(_) => attr.parse_args_with(|input: ParseStream| {
                    if input.peek(LitStr) {
                        let lit: LitStr = input.parse()?;
                        return Err(Error::new(
                            lit.span(),
                            format!(
                                "write the scope kind without quotes: `#[scope({})]`",
                                lit.value()
                            ),
                        ));
                    }
                    input.call(Ident::parse_any).map_err(|e| {
                        Error::new(
                            e.span(),
                            "expected one scope kind, as in `#[scope(project)]`",
                        )
                    })
                }),
                _ => Err(Error::new_spanned(
                    attr,
                    "`#[scope]` needs the kind of object the field names, as in `#[scope(project)]`",
                )),
            };
            match kind {
                Ok(_) if parsed.scope.is_some() => errs.push(Error::new_spanned(
                    attr,
                    format!(
                        "field `{ident}` already has a scope tag; a field names one kind of object"
                    ),
                )),
                Ok(kind) => parsed.scope = Some(kind),
                Err(error) => errs.push(error),
            }
        } else if path.is_ident("audit_note") {
            if !matches!(attr.meta, Meta::Path(_)) {
                errs.push(Error::new_spanned(
                    attr,
                    "`#[audit_note]` takes no arguments",
                ));
            } else if parsed.audit_note.is_some() {
                errs.push(Error::new_spanned(
                    attr,
                    "duplicate `#[audit_note]` on this field",
                ));
            } else {
                parsed.audit_note = Some(path.span());
            }
        } else if path.is_ident("policy") {
            if !matches!(attr.meta, Meta::Path(_)) {
                errs.push(Error::new_spanned(
                    attr,
                    "`#[policy]` takes no arguments: it shows the field to the host's policy",
                ));
            } else if parsed.policy.is_some() {
                errs.push(Error::new_spanned(
                    attr,
                    "duplicate `#[policy]` on this field",
                ));
            } else {
                parsed.policy = Some(path.span());
            }
        } else if path.is_ident("ssh") {
            parse_ssh_field(attr, &mut parsed, errs);
        } else if ["action", "http", "channel"]
            .iter()
            .any(|name| path.is_ident(name))
        {
            errs.push(Error::new_spanned(
                attr,
                format!(
                    "`#[{}]` goes on the struct, not on a field",
                    path_name(path)
                ),
            ));
        } else if path.is_ident("serde") {
            parse_serde_field(attr, &mut renamed, &mut parsed);
        }
    }
    if let Some(renamed) = renamed {
        parsed.json_name = renamed;
    }
    parsed
}

/// Keys of `#[ssh(...)]` on a field.
const SSH_FIELD_KEYS: &[&str] = &["allow_leading_dash"];

/// `#[ssh(allow_leading_dash)]` on a field. The struct's keys (`host`, `argv`, `exit`) are
/// refused here with a pointer to the struct.
fn parse_ssh_field(attr: &Attribute, field: &mut Field, errs: &mut Errors) {
    if !matches!(attr.meta, Meta::List(_)) {
        errs.push(Error::new_spanned(
            attr,
            "`#[ssh]` on a field takes `allow_leading_dash`, as in `#[ssh(allow_leading_dash)]`",
        ));
        return;
    }
    parse_list(attr, errs, |key, input| {
        match key.unraw().to_string().as_str() {
            "allow_leading_dash" if !input.is_empty() && !input.peek(Token![,]) => Err(Error::new(
                key.span(),
                "`allow_leading_dash` takes no value: write `#[ssh(allow_leading_dash)]`",
            )),
            "allow_leading_dash" if field.allow_leading_dash.is_some() => Err(Error::new(
                key.span(),
                "duplicate `allow_leading_dash` on this field",
            )),
            "allow_leading_dash" => {
                field.allow_leading_dash = Some(key.span());
                Ok(())
            }
            name if SSH_KEYS.contains(&name) => Err(Error::new(
                key.span(),
                format!("`{name}` goes in the struct's `#[ssh(...)]`, not on a field"),
            )),
            _ => Err(unknown_key(&key, "ssh", SSH_FIELD_KEYS)),
        }
    });
}
