//! `#[http(...)]` on the struct.

use syn::ext::IdentExt as _;
use syn::punctuated::Punctuated;
use syn::{Attribute, Error, Token, Type};

use super::ast::{FieldRef, Header, HttpAttr};
use super::errors::{Errors, unknown_key};
use super::keyword::{Keyword as _, Method};
use super::parse::{
    expect_eq, parenthesized_after, parse_code, parse_field_ref, parse_list, parse_str,
};

const HTTP_KEYS: &[&str] = &[
    "get", "post", "put", "patch", "delete", "query", "header", "status", "result",
];

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
