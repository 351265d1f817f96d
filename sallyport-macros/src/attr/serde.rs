//! What the derive reads of serde's attributes: `rename_all`, `rename`, `skip` and `flatten`.
//! Mistakes in them are serde's to report.

use proc_macro2::TokenTree;
use syn::{Attribute, LitStr, Token, token};

use super::ast::Field;
use super::case::RenameRule;
use super::parse::skip_entry;

/// Reads `#[serde(rename_all = "…")]` (or its `deserialize` half); anything else, including
/// mistakes, is serde's to report.
pub(super) fn parse_serde_container(attr: &Attribute, rename_all: &mut RenameRule) {
    let _ignored_serde_reports_it = attr.parse_nested_meta(|meta| {
        if meta.path.is_ident("rename_all") {
            if let Some(rule) = deserialize_name(&meta)?
                .as_deref()
                .and_then(RenameRule::from_str)
            {
                *rename_all = rule;
            }
        } else {
            skip_serde_value(&meta)?;
        }
        Ok(())
    });
}

/// Reads `rename`, `skip`, `skip_deserializing` and `flatten` from a field's `#[serde]`.
pub(super) fn parse_serde_field(attr: &Attribute, renamed: &mut Option<String>, field: &mut Field) {
    let _ignored_serde_reports_it = attr.parse_nested_meta(|meta| {
        if meta.path.is_ident("rename") {
            if let Some(name) = deserialize_name(&meta)? {
                *renamed = Some(name);
            }
        } else if meta.path.is_ident("skip") || meta.path.is_ident("skip_deserializing") {
            field.deserialized = false;
        } else if meta.path.is_ident("flatten") {
            field.flatten = true;
        } else {
            skip_serde_value(&meta)?;
        }
        Ok(())
    });
}

/// The name from `key = "name"` or `key(deserialize = "name")`.
fn deserialize_name(meta: &syn::meta::ParseNestedMeta) -> syn::Result<Option<String>> {
    side_name(meta, "deserialize")
}

/// The name from `key = "name"` or `key(<side> = "name")`, `side` being `serialize` or
/// `deserialize`.
pub(crate) fn side_name(
    meta: &syn::meta::ParseNestedMeta,
    side: &str,
) -> syn::Result<Option<String>> {
    if meta.input.peek(Token![=]) {
        let lit: LitStr = meta.value()?.parse()?;
        return Ok(Some(lit.value()));
    }
    let mut name = None;
    meta.parse_nested_meta(|inner| {
        if inner.path.is_ident(side) {
            let lit: LitStr = inner.value()?.parse()?;
            name = Some(lit.value());
        } else {
            skip_serde_value(&inner)?;
        }
        Ok(())
    })?;
    Ok(name)
}

/// Steps over a serde attribute entry this crate does not read (`key = value` or `key(…)`).
pub(crate) fn skip_serde_value(meta: &syn::meta::ParseNestedMeta) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        let value = meta.value()?;
        skip_entry(value);
    } else if meta.input.peek(token::Paren) {
        meta.input.parse::<TokenTree>()?;
    }
    Ok(())
}
