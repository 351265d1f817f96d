//! The syntax shared by every attribute parser: `key = value` lists, string literals,
//! keywords, field references and `code(n) = status` rules.

use proc_macro2::{Span, TokenTree};
use syn::ext::IdentExt as _;
use syn::parse::ParseStream;
use syn::{Attribute, Error, Ident, LitInt, LitStr, Meta, Token, parenthesized, token};

use super::ast::{CodeRule, FieldRef, Kw, Millis, Number, RuleResult};
use super::errors::{Errors, one_of};
use super::keyword::{Keyword, Status};

pub(super) fn path_name(path: &syn::Path) -> String {
    path.get_ident()
        .map_or_else(|| "?".to_owned(), ToString::to_string)
}

/// Parses the entries of `#[name(key = value, key(...) = value, …)]`, calling `entry` with
/// each key and the stream positioned after it. An entry that fails is recorded and skipped
/// up to the next comma.
pub(super) fn parse_list(
    attr: &Attribute,
    errs: &mut Errors,
    mut entry: impl FnMut(Ident, ParseStream) -> syn::Result<()>,
) {
    let name = path_name(attr.path());
    if !matches!(attr.meta, Meta::List(_)) {
        errs.push(Error::new_spanned(
            attr,
            format!("expected `#[{name}(key = value, …)]`"),
        ));
        return;
    }
    let parsed = attr.parse_args_with(|input: ParseStream| {
        while !input.is_empty() {
            match input.call(Ident::parse_any) {
                Ok(key) => {
                    if let Err(error) = entry(key, input) {
                        errs.push(error);
                        skip_entry(input);
                    }
                }
                Err(error) => {
                    errs.push(Error::new(
                        error.span(),
                        format!("expected a key, as in `#[{name}(key = value)]`"),
                    ));
                    skip_entry(input);
                }
            }
            if input.is_empty() {
                break;
            }
            if let Err(error) = input.parse::<Token![,]>() {
                errs.push(error);
                skip_entry(input);
                let _: Option<Token![,]> = input.parse()?;
            }
        }
        Ok(())
    });
    if let Err(error) = parsed {
        errs.push(error);
    }
}

pub(super) fn skip_entry(input: ParseStream) {
    while !input.is_empty() && !input.peek(Token![,]) {
        if input.parse::<TokenTree>().is_err() {
            break;
        }
    }
}

/// `=` after `key`, or an error showing the expected form.
pub(super) fn expect_eq(input: ParseStream, key: &Ident, usage: &str) -> syn::Result<()> {
    if input.peek(Token![=]) {
        input.parse::<Token![=]>()?;
        Ok(())
    } else {
        Err(Error::new(key.span(), format!("expected `{usage}`")))
    }
}

pub(super) fn parse_str(input: ParseStream, usage: &str) -> syn::Result<LitStr> {
    if input.peek(LitStr) {
        input.parse()
    } else {
        Err(input.error(format!("expected a string literal: `{usage}`")))
    }
}

/// The placeholder `sallyport scaffold` writes for a decision it leaves to the author.
const CHOOSE: &str = "choose";

pub(super) fn parse_keyword<K: Keyword>(input: ParseStream, key: &Ident) -> syn::Result<Kw<K>> {
    let unknown = |span: Span, text: &str| {
        Error::new(
            span,
            format!(
                "unknown {} `{text}`; expected {}",
                K::WHAT,
                one_of(K::NAMES)
            ),
        )
    };
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        let text = lit.value();
        return Err(if K::from_name(&text).is_some() {
            Error::new(lit.span(), format!("write `{key} = {text}` without quotes"))
        } else {
            unknown(lit.span(), &text)
        });
    }
    let ident = input
        .call(Ident::parse_any)
        .map_err(|e| Error::new(e.span(), format!("expected {}", one_of(K::NAMES))))?;
    let text = ident.unraw().to_string();
    match K::from_name(&text) {
        Some(value) => Ok(Kw { value, ident }),
        // `sallyport scaffold` writes `choose` where only the author can decide.
        None if text == CHOOSE => Err(Error::new(
            ident.span(),
            format!(
                "choose the {} of this action: replace `{key} = choose` with {}; sallyport never \
                 guesses what an action does to the world",
                K::WHAT,
                one_of(K::NAMES)
            ),
        )),
        None => Err(unknown(ident.span(), &text)),
    }
}

pub(super) fn parse_field_ref(input: ParseStream) -> syn::Result<FieldRef> {
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        Ok(FieldRef {
            name: lit.value(),
            span: lit.span(),
        })
    } else {
        let ident = input
            .call(Ident::parse_any)
            .map_err(|e| Error::new(e.span(), "expected a field name"))?;
        Ok(FieldRef {
            name: ident.unraw().to_string(),
            span: ident.span(),
        })
    }
}

pub(super) fn parenthesized_after<'p>(
    input: ParseStream<'p>,
    key: &Ident,
    usage: &str,
) -> syn::Result<syn::parse::ParseBuffer<'p>> {
    if !input.peek(token::Paren) {
        return Err(Error::new(key.span(), format!("expected `{usage}`")));
    }
    let content;
    parenthesized!(content in input);
    Ok(content)
}

pub(super) fn parse_code<C: TryFrom<u64>>(
    input: ParseStream,
    key: &Ident,
    usage: &str,
    range: std::ops::RangeInclusive<u64>,
    what: &str,
) -> syn::Result<CodeRule<C>> {
    let content = parenthesized_after(input, key, usage)?;
    let code_lit: LitInt = content
        .parse()
        .map_err(|e| Error::new(e.span(), format!("expected {what}: `{usage}`")))?;
    if !content.is_empty() {
        return Err(content.error(format!("expected one {what}: `{usage}`")));
    }
    let code = code_lit
        .base10_parse::<u64>()
        .ok()
        .filter(|code| range.contains(code))
        .and_then(|code| C::try_from(code).ok())
        .ok_or_else(|| {
            Error::new(
                code_lit.span(),
                format!(
                    "{what} `{}` is out of range; expected {}..={}",
                    code_lit,
                    range.start(),
                    range.end()
                ),
            )
        })?;
    expect_eq(input, key, usage)?;
    let status = parse_keyword::<Status>(input, key)?;
    let result = if input.peek(token::Paren) {
        Some(parse_rule_result(input, &status)?)
    } else {
        None
    };
    Ok(CodeRule {
        code,
        code_lit,
        status,
        result,
    })
}

/// `(empty)` or `(value = "…")` after a rule's status: where the result comes from when
/// the body is not it. The value must be JSON.
fn parse_rule_result(input: ParseStream, status: &Kw<Status>) -> syn::Result<RuleResult> {
    let name = status.value.name();
    let usage = format!(
        "{name}(empty)` for an answer with no body, or `{name}(value = r#\"{{\"merged\": false}}\"#)` \
         for a status that is itself the answer"
    );
    let content;
    parenthesized!(content in input);
    let form = content
        .call(Ident::parse_any)
        .map_err(|e| Error::new(e.span(), format!("expected `{usage}")))?;
    let result = match form.to_string().as_str() {
        "empty" => RuleResult::Empty(form),
        "value" => {
            if !content.peek(Token![=]) {
                return Err(Error::new(form.span(), format!("expected `{usage}")));
            }
            content.parse::<Token![=]>()?;
            let lit = parse_str(&content, &usage)?;
            if let Err(error) = serde_json::from_str::<serde_json::Value>(&lit.value()) {
                return Err(Error::new(
                    lit.span(),
                    format!(
                        "the value is not JSON ({error}); write it as JSON text, as in `{usage}"
                    ),
                ));
            }
            RuleResult::Value(lit)
        }
        other => {
            return Err(Error::new(
                form.span(),
                format!("unknown result form `{other}`; expected `{usage}"),
            ));
        }
    };
    if !content.is_empty() {
        return Err(content.error(format!("expected one result form: `{usage}")));
    }
    Ok(result)
}

/// `key = "400ms"`: a whole number of `ms`, `s` or `m`, at least `min_ms`. With `whole_seconds`
/// the value must be a whole number of seconds (the field it sets counts seconds).
pub(super) fn parse_duration(
    input: ParseStream,
    key: &Ident,
    example: &str,
    min_ms: u64,
    whole_seconds: bool,
) -> syn::Result<Millis> {
    let usage = format!("{key} = \"{example}\"");
    expect_eq(input, key, &usage)?;
    if input.peek(LitInt) {
        let int: LitInt = input.parse()?;
        return Err(Error::new(
            int.span(),
            format!("write the duration with its unit, as a string: `{usage}`"),
        ));
    }
    let lit = parse_str(input, &usage)?;
    let text = lit.value();
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    let scale = match unit {
        "ms" => Some(1),
        "s" => Some(1_000),
        "m" => Some(60_000),
        _ => None,
    };
    let ms = scale.and_then(|scale| {
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse::<u64>().ok()?.checked_mul(scale)
    });
    let Some(ms) = ms else {
        return Err(Error::new(
            lit.span(),
            format!(
                "`{text}` is not a duration; write a whole number followed by `ms`, `s` or `m`, \
                 as in `{usage}`"
            ),
        ));
    };
    if ms < min_ms {
        return Err(Error::new(
            lit.span(),
            format!("`{key}` must be at least {min_ms} ms, and `{text}` is less"),
        ));
    }
    if whole_seconds && ms % 1_000 != 0 {
        return Err(Error::new(
            lit.span(),
            format!("`{key}` counts whole seconds, and `{text}` is not; write `s` or `m`"),
        ));
    }
    Ok(Millis { ms, lit })
}

/// `key = 65536`: a whole number in `range`.
pub(super) fn parse_number<N: TryFrom<u64>>(
    input: ParseStream,
    key: &Ident,
    example: &str,
    range: std::ops::RangeInclusive<u64>,
    why: &str,
) -> syn::Result<Number<N>> {
    let usage = format!("{key} = {example}");
    expect_eq(input, key, &usage)?;
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        return Err(Error::new(
            lit.span(),
            format!("write `{key}` as a number without quotes: `{usage}`"),
        ));
    }
    let lit: LitInt = input
        .parse()
        .map_err(|e| Error::new(e.span(), format!("expected a whole number: `{usage}`")))?;
    let value = lit
        .base10_parse::<u64>()
        .ok()
        .filter(|value| range.contains(value))
        .and_then(|value| N::try_from(value).ok())
        .ok_or_else(|| {
            let expected = if *range.end() >= u64::from(u32::MAX) {
                format!("at least {}", range.start())
            } else {
                format!("{}..={}", range.start(), range.end())
            };
            Error::new(
                lit.span(),
                format!("`{key} = {lit}` is out of range; expected {expected}{why}"),
            )
        })?;
    Ok(Number { value })
}
