//! `#[http(...)]`: the path template and its fixed text, query and header fields, the
//! result type, the limits and the status rules.

use std::collections::BTreeMap;

use proc_macro2::Span;
use syn::Error;

use crate::attr::{self, CodeRule, Errors, HttpAttr, Keyword, RuleResult, Status};

use super::check_codes;
use super::names::{FieldNames, check_note_not_sent, check_template, resolve_ref};

/// The fixed text of a path template (mirrors `HttpTarget::check_path`): no backslash or
/// control character, and no segment without a placeholder that is `.` or `..`, plainly or
/// percent-encoded at any depth. The error is the rest of a message that starts with
/// "the path `…` ".
fn check_fixed_path(path: &str) -> Result<(), String> {
    if path.contains('\\') {
        return Err("contains a backslash, which URL parsers read as `/`; use `/`".to_owned());
    }
    if path.chars().any(char::is_control) {
        return Err("contains a control character".to_owned());
    }
    for segment in path.split('/') {
        if !segment.contains('{') && is_dot_segment(segment) {
            return Err(format!(
                "has the dot segment `{segment}`, which a URL parser resolves to another path \
                 (and would carry the action's credential there); write the path it means"
            ));
        }
    }
    Ok(())
}

/// `.` or `..`, itself or after up to three percent-decodings.
fn is_dot_segment(segment: &str) -> bool {
    let mut current = segment.to_owned();
    for _ in 0..4 {
        if current == "." || current == ".." {
            return true;
        }
        let decoded = percent_decode(&current);
        if decoded == current {
            return false;
        }
        current = decoded;
    }
    current == "." || current == ".."
}

/// One round of percent-decoding; invalid escapes stay as they are.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            // Two hex digits are at most 0xff.
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'%'));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Headers the executor or the transport sets; an agent field must not fill them.
const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "connection",
    "content-length",
    "content-type",
    "cookie",
    "host",
    "idempotency-key",
    "proxy-authorization",
    "transfer-encoding",
];

pub(super) fn check_http(
    http: &HttpAttr,
    path: &syn::Path,
    fields: &FieldNames,
    errs: &mut Errors,
) {
    // Where each field goes, to catch a field sent twice.
    let mut used: BTreeMap<String, (&'static str, Span)> = BTreeMap::new();
    let mut send = |name: &str, place: &'static str, span: Span, errs: &mut Errors| {
        if let Some((first, _)) = used.get(name) {
            errs.at(
                span,
                format!("field `{name}` is already sent in the {first}; send each field once"),
            );
        } else {
            used.insert(name.to_owned(), (place, span));
        }
    };
    match http.method.get() {
        Some((_, template)) => {
            if !template.value().starts_with('/') {
                errs.at(
                    template.span(),
                    format!(
                        "the path `{}` must start with `/`; it is relative to the channel's \
                         base URL",
                        template.value()
                    ),
                );
            }
            if let Err(reason) = check_fixed_path(&template.value()) {
                errs.at(
                    template.span(),
                    format!("the path `{}` {reason}", template.value()),
                );
            }
            for (name, _) in check_template(template, "path", fields, errs) {
                send(&name, "path", template.span(), errs);
            }
        }
        None if http.method.key.is_none() => errs.push(Error::new_spanned(
            path,
            format!(
                "missing method in #[http]; add the method and path, as in `post = \"/v1/…\"`, \
                 with {}",
                attr::one_of(attr::Method::NAMES)
            ),
        )),
        None => {}
    }
    for query in &http.query {
        if resolve_ref(query, "query field", fields, errs) {
            send(&query.name, "query", query.span, errs);
        }
    }
    let mut header_names: Vec<String> = Vec::new();
    for header in &http.headers {
        let name = header.name.value();
        let lower = name.to_ascii_lowercase();
        if name.is_empty() || !name.bytes().all(is_header_token_byte) {
            errs.at(
                header.name.span(),
                format!("`{name}` is not a valid HTTP header name"),
            );
        } else if RESERVED_HEADERS.contains(&lower.as_str()) {
            errs.at(
                header.name.span(),
                format!(
                    "header `{name}` is set by the executor or the transport, never from an \
                     agent's input"
                ),
            );
        } else if header_names.contains(&lower) {
            errs.at(
                header.name.span(),
                format!("header `{name}` is listed twice"),
            );
        } else {
            header_names.push(lower);
        }
        if resolve_ref(&header.field, "header field", fields, errs) {
            send(&header.field.name, "header", header.field.span, errs);
        }
    }
    for (name, (place, span)) in &used {
        check_note_not_sent(name, place, *span, fields, errs);
    }
    check_result_and_limits(http, path, errs);
    check_codes(&http.statuses, "status", errs);
    let unit_result = http.result.get().is_some_and(is_unit);
    for rule in &http.statuses {
        check_status_rule(rule, unit_result, errs);
    }
}

/// One `status(code) = …` rule: an error code means `completed` only when the status is
/// itself the answer (`completed(value = …)`), and a result form goes on a status that
/// carries data, with a result type that can hold it.
fn check_status_rule(rule: &CodeRule<u16>, unit_result: bool, errs: &mut Errors) {
    let (code, status) = (rule.code, rule.status.value);
    match &rule.result {
        None if code >= 400 && status == Status::Completed => errs.at(
            rule.status.ident.span(),
            format!(
                "a {code} response cannot mean `completed`; map it to `already_in_desired_state` \
                 if it means nothing needed doing, leave it to the conservative default, or, if \
                 this status is itself the answer, say what it means: \
                 `completed(value = r#\"…\"#)`"
            ),
        ),
        Some(_) if matches!(status, Status::Rejected | Status::Unknown) => errs.at(
            rule.status.ident.span(),
            format!(
                "a `{}` result carries no data; only `completed`, `already_in_desired_state` \
                 and `pending` take `(empty)` or `(value = …)`",
                status.name()
            ),
        ),
        Some(form) if code >= 500 => errs.at(
            form.span(),
            format!(
                "a {code} response is a server error, never an answer; leave it to the \
                 conservative default"
            ),
        ),
        Some(RuleResult::Empty(ident)) if code >= 400 => errs.at(
            ident.span(),
            format!(
                "a {code} response with no data is not an answer; if this status is itself the \
                 answer, say what it means: `{}(value = r#\"…\"#)`",
                status.name()
            ),
        ),
        Some(RuleResult::Value(lit)) if unit_result => errs.at(
            lit.span(),
            "`result = ()` returns no data, so this value would never reach the agent; declare \
             the result type it is read as, as in `result = Merged`",
        ),
        None | Some(_) => {}
    }
}

/// Whether `ty` is `()`: `result = ()` declares no data.
fn is_unit(ty: &syn::Type) -> bool {
    matches!(ty, syn::Type::Tuple(tuple) if tuple.elems.is_empty())
}

/// `result` is required (`result = ()` for no data), and the connect timeout fits in the
/// total timeout.
fn check_result_and_limits(http: &HttpAttr, path: &syn::Path, errs: &mut Errors) {
    if http.result.key.is_none() {
        errs.push(Error::new_spanned(
            path,
            "missing `result` in #[http]; name the type the agent gets back, as in \
             `result = Invoice` (a `Deserialize + Serialize + JsonSchema` type; only its fields \
             reach the agent), or write `result = ()` for \"no data\"",
        ));
    }
    if let (Some(connect), Some(total)) = (http.connect_timeout.get(), http.timeout.get())
        && connect.ms > total.ms
    {
        errs.at(
            connect.lit.span(),
            format!(
                "`connect_timeout = \"{}\"` is longer than `timeout = \"{}\"`, which bounds the \
                 whole request, connecting included",
                connect.lit.value(),
                total.lit.value()
            ),
        );
    }
}

/// RFC 9110 `tchar`.
fn is_header_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

#[cfg(test)]
mod tests {
    use syn::{DeriveInput, parse_quote};

    use crate::valid::tests::errors;

    #[test]
    fn a_connect_timeout_longer_than_the_total_timeout_is_refused() {
        let input: DeriveInput = parse_quote! {
            /// Read one thing.
            #[action(name = "read_thing", effect = observe)]
            #[http(get = "/things", result = (), timeout = "1s", connect_timeout = "2s")]
            struct ReadThing {}
        };
        assert_eq!(
            errors(&input),
            [
                "`connect_timeout = \"2s\"` is longer than `timeout = \"1s\"`, which bounds the \
              whole request, connecting included"
            ]
        );
    }

    #[test]
    fn statuses_that_are_answers_pass() {
        let input: DeriveInput = parse_quote! {
            /// Tell whether one pull request is merged.
            #[action(name = "check_if_merged", effect = observe)]
            #[http(get = "/pulls/{number}/merge",
                   status(204) = completed(value = r#"{"merged": true}"#),
                   status(404) = completed(value = r#"{"merged": false}"#),
                   status(202) = pending(empty),
                   result = Merged)]
            struct CheckIfMerged { number: u64 }
        };
        assert_eq!(errors(&input), Vec::<String>::new());
    }

    #[test]
    fn result_forms_that_cannot_hold_are_refused() {
        let input: DeriveInput = parse_quote! {
            /// Dispatch one workflow.
            #[action(name = "dispatch", effect = reversible_change)]
            #[http(post = "/dispatches",
                   status(204) = completed(value = "{not json"),
                   status(409) = rejected(empty),
                   status(404) = completed(empty),
                   status(503) = already_in_desired_state(value = "1"),
                   status(200) = completed(value = "true"),
                   status(201) = completed(nothing),
                   result = ())]
            struct Dispatch {}
        };
        assert_eq!(
            errors(&input),
            [
                "the value is not JSON (key must be a string at line 1 column 2); write it as \
                 JSON text, as in `completed(empty)` for an answer with no body, or \
                 `completed(value = r#\"{\"merged\": false}\"#)` for a status that is itself \
                 the answer",
                "unknown result form `nothing`; expected `completed(empty)` for an answer with \
                 no body, or `completed(value = r#\"{\"merged\": false}\"#)` for a status that \
                 is itself the answer",
                "a `rejected` result carries no data; only `completed`, \
                 `already_in_desired_state` and `pending` take `(empty)` or `(value = …)`",
                "a 404 response with no data is not an answer; if this status is itself the \
                 answer, say what it means: `completed(value = r#\"…\"#)`",
                "a 503 response is a server error, never an answer; leave it to the \
                 conservative default",
                "`result = ()` returns no data, so this value would never reach the agent; \
                 declare the result type it is read as, as in `result = Merged`",
            ]
        );
    }
}
