//! `#[http(...)]` on the struct.

use syn::ext::IdentExt as _;
use syn::parse::ParseStream;
use syn::punctuated::Punctuated;
use syn::{Attribute, Error, Ident, Token, Type};

use super::ast::{FieldRef, Header, HttpAttr};
use super::errors::{Errors, unknown_key};
use super::keyword::{Keyword as _, Method};
use super::parse::{
    expect_eq, parenthesized_after, parse_code, parse_duration, parse_field_ref, parse_list,
    parse_number, parse_str,
};

const HTTP_KEYS: &[&str] = &[
    "get",
    "post",
    "put",
    "patch",
    "delete",
    "query",
    "header",
    "status",
    "result",
    "timeout",
    "connect_timeout",
    "max_attempts",
    "max_retry_after",
    "max_response_bytes",
    "message_field",
];

/// The HTTP channel's hard limit on requests per attempt (`sallyport_http`'s
/// `HARD_MAX_ATTEMPTS`): it clamps any larger value, so a larger one is refused here.
const HARD_MAX_ATTEMPTS: u64 = 5;

pub(super) fn parse_http(attr: &Attribute, errs: &mut Errors) -> HttpAttr {
    let mut http = HttpAttr::default();
    parse_list(attr, errs, |key, input| {
        let name = key.unraw().to_string();
        if let Some(method) = Method::from_name(&name) {
            let usage = format!("{name} = \"/path\"");
            expect_eq(input, &key, &usage)?;
            let path = parse_str(input, &usage)?;
            if let Some(first) = &http.method.key {
                return Err(Error::new(
                    key.span(),
                    format!(
                        "an HTTP target has one method, and `{first}` is already set; \
                         remove one of the two"
                    ),
                ));
            }
            return http.method.set(key, "http", Ok((method, path)));
        }
        match name.as_str() {
            "query" => {
                let content = parenthesized_after(input, &key, "query(field, …)")?;
                let fields = Punctuated::<FieldRef, Token![,]>::parse_terminated_with(
                    &content,
                    parse_field_ref,
                )?;
                http.query.extend(fields);
                Ok(())
            }
            "header" => {
                let content = parenthesized_after(input, &key, "header(\"Header-Name\" = field)")?;
                let headers =
                    Punctuated::<Header, Token![,]>::parse_terminated_with(&content, |input| {
                        let name = parse_str(input, "header(\"Header-Name\" = field)")?;
                        if !input.peek(Token![=]) {
                            return Err(input.error(
                                "expected `= field` after the header name: \
                                 `header(\"Header-Name\" = field)`",
                            ));
                        }
                        input.parse::<Token![=]>()?;
                        let field = parse_field_ref(input)?;
                        Ok(Header { name, field })
                    })?;
                http.headers.extend(headers);
                Ok(())
            }
            "status" => {
                let rule = parse_code(
                    input,
                    &key,
                    "status(202) = pending",
                    100..=599,
                    "HTTP status code",
                )?;
                http.statuses.push(rule);
                Ok(())
            }
            "result" => {
                expect_eq(input, &key, "result = ResultType")?;
                let value = input.parse::<Type>();
                http.result.set(key, "http", value)
            }
            "timeout" | "connect_timeout" | "max_retry_after" | "max_attempts"
            | "max_response_bytes" | "message_field" => parse_limit(&mut http, key, input),
            "credential" => Err(Error::new(
                key.span(),
                "the credential binding belongs to the action, not the channel: move it to \
                 `#[action(credential = \"…\")]`",
            )),
            _ => Err(unknown_key(&key, "http", HTTP_KEYS)),
        }
    });
    http
}

/// One of the per-action limits: `timeout`, `connect_timeout`, `max_retry_after`,
/// `max_attempts`, `max_response_bytes`, `message_field`.
fn parse_limit(http: &mut HttpAttr, key: Ident, input: ParseStream) -> syn::Result<()> {
    match key.unraw().to_string().as_str() {
        "timeout" => {
            let value = parse_duration(input, &key, "5s", 1, false);
            http.timeout.set(key, "http", value)
        }
        "connect_timeout" => {
            let value = parse_duration(input, &key, "2s", 1, false);
            http.connect_timeout.set(key, "http", value)
        }
        "max_retry_after" => {
            let value = parse_duration(input, &key, "30s", 0, true);
            http.max_retry_after.set(key, "http", value)
        }
        "max_attempts" => {
            let value = parse_number(
                input,
                &key,
                "3",
                1..=HARD_MAX_ATTEMPTS,
                " (the HTTP channel never sends more than 5 requests per attempt)",
            );
            http.max_attempts.set(key, "http", value)
        }
        "max_response_bytes" => {
            let value = parse_number(input, &key, "65536", 1..=u64::MAX, "");
            http.max_response_bytes.set(key, "http", value)
        }
        "message_field" => {
            let usage = "message_field = \"/error/message\"";
            expect_eq(input, &key, usage)?;
            let value = parse_str(input, usage).and_then(|lit| {
                if lit.value().starts_with('/') {
                    Ok(lit)
                } else {
                    Err(Error::new(
                        lit.span(),
                        format!(
                            "`message_field` is a JSON pointer into the error body and \
                             starts with `/`, as in `{usage}`"
                        ),
                    ))
                }
            });
            http.message_field.set(key, "http", value)
        }
        _ => Err(unknown_key(&key, "http", HTTP_KEYS)),
    }
}
