//! Phase 2: the rules that relate several attributes and fields.
//!
//! [`check`] turns a parsed [`Input`] into a [`Checked`] one whose required parts are present,
//! so `expand.rs` never has to unwrap ("parse, don't validate").

use std::collections::BTreeMap;

use proc_macro2::Span;
use syn::{Error, LitStr};

use crate::attr::{
    self, ChannelAttr, CodeRule, Doc, Effect, Errors, Field, FieldRef, HttpAttr, Input, Keyword,
    Retry, SshAttr, Status, TargetKind,
};

/// An input whose required parts are present and whose rules all hold.
pub(crate) struct Checked<'i, 'a> {
    pub(crate) input: &'i Input<'a>,
    pub(crate) name: &'i LitStr,
    pub(crate) effect: Effect,
    pub(crate) doc: &'i Doc,
}

/// Checks every rule, recording each broken one in `errs`. `Some` only when none is broken.
pub(crate) fn check<'i, 'a>(input: &'i Input<'a>, errs: &mut Errors) -> Option<Checked<'i, 'a>> {
    let mut local = Errors::default();
    let required = check_required(input, &mut local);
    check_action(input, &mut local);
    let fields = FieldNames::new(&input.fields);
    check_fields(input, &mut local);
    if let Some(target) = &input.target {
        match &target.kind {
            TargetKind::Http(http) => check_http(http, &target.path, &fields, &mut local),
            TargetKind::Ssh(ssh) => check_ssh(ssh, &target.path, &fields, &mut local),
            TargetKind::Channel(channel) => check_channel(channel, &target.path, &mut local),
        }
    }
    check_leading_dash(input, &mut local);
    match local.finish() {
        Ok(()) => required,
        Err(error) => {
            errs.push(error);
            None
        }
    }
}

/// The description, `#[action]`, `name` and `effect`.
fn check_required<'i, 'a>(input: &'i Input<'a>, errs: &mut Errors) -> Option<Checked<'i, 'a>> {
    let ident = input.ident;
    let doc = input.doc.as_ref();
    if doc.is_none() {
        errs.at(
            ident.span(),
            format!(
                "`{ident}` has no doc comment, and an action's doc comment is the description \
                 the agent reads; add `/// <what this action does>` above the struct"
            ),
        );
    }
    let action = &input.action;
    let Some(attr) = &action.attr else {
        errs.at(
            ident.span(),
            format!(
                "`{ident}` has no #[action] attribute; add `#[action(name = \"{}\", effect = …)]`",
                snake_case(&ident.to_string())
            ),
        );
        return None;
    };
    if action.name.key.is_none() && !action.misspelled.contains(&"name") {
        errs.push(Error::new_spanned(
            attr.path(),
            format!(
                "missing `name` in #[action]; add `name = \"{}\"` (the name the agent calls)",
                snake_case(&ident.to_string())
            ),
        ));
    }
    if action.effect.key.is_none() && !action.misspelled.contains(&"effect") {
        errs.push(Error::new_spanned(
            attr.path(),
            format!(
                "missing `effect` in #[action]; every action declares what it does to the world, \
                 it is never inferred: add `effect = …` with {}",
                attr::one_of(Effect::NAMES)
            ),
        ));
    }
    Some(Checked {
        input,
        name: action.name.get()?,
        effect: action.effect.get()?.value,
        doc: doc?,
    })
}

/// The rules inside `#[action]`.
fn check_action(input: &Input, errs: &mut Errors) {
    let action = &input.action;
    if let Some(name) = action.name.get()
        && let Err(reason) = check_action_name(&name.value())
    {
        errs.at(name.span(), format!("invalid action name {reason}"));
    }
    let effect = action.effect.get().map(|kw| kw.value);
    if let (Some(effect), Some(consent)) = (effect, action.consent.get()) {
        let floor = effect.consent_floor();
        if consent.value < floor {
            errs.at(
                consent.ident.span(),
                format!(
                    "consent `{}` is below the floor for `{}` actions; use `consent = {}` or \
                     leave `consent` out to get it by default",
                    consent.value.name(),
                    effect.name(),
                    floor.name()
                ),
            );
        }
    }
    if let (Some(effect), Some(retry)) = (effect, action.retry.get())
        && retry.value == Retry::Safe
        && effect != Effect::Observe
    {
        errs.at(
            retry.ident.span(),
            format!(
                "`retry = safe` is only for `observe` actions, and this one is `{}`; use \
                 `retry = idempotency_key` if the server honours idempotency keys, or leave \
                 `retry` out (`never`)",
                effect.name()
            ),
        );
    }
    if let Some(reconcile) = action.reconcile.get() {
        let value = reconcile.value();
        if let Err(reason) = check_action_name(&value) {
            errs.at(
                reconcile.span(),
                format!("`reconcile` must name an action: invalid action name {reason}"),
            );
        } else if action.name.get().is_some_and(|name| name.value() == value) {
            errs.at(
                reconcile.span(),
                format!(
                    "`reconcile = \"{value}\"` names this action itself; name the read-only \
                     action that tells whether a call took effect"
                ),
            );
        }
    }
    if let Some(credential) = action.credential.get() {
        let value = credential.value();
        if value.trim().is_empty() || value.trim() != value {
            errs.at(
                credential.span(),
                "the credential name must be non-empty, without surrounding spaces; it is the \
                 name of a credential in the vault",
            );
        }
    }
    if let Some(classes) = action.data.get() {
        let mut seen = Vec::new();
        for class in classes {
            let name = class.to_string();
            if seen.contains(&name) {
                errs.at(class.span(), format!("data class `{name}` is listed twice"));
            } else {
                seen.push(name);
            }
        }
    }
    if let Some(summary) = action.summary.get() {
        let value = summary.value();
        if value.trim().is_empty() || value.contains('\n') {
            errs.at(summary.span(), "the summary must be one non-empty line");
        }
    }
    for (key, text) in [("scope", &action.scope), ("returns", &action.returns)] {
        if let Some(text) = text.get()
            && text.value().trim().is_empty()
        {
            errs.at(
                text.span(),
                format!("`{key}` must not be empty; leave it out instead"),
            );
        }
    }
}

/// Action names: lowercase snake case, starting with a letter, at most 64 characters, no
/// trailing or doubled `_` (mirrors `sallyport_core::action::is_valid_action_name`). The
/// error is the rest of a message that starts with "invalid action name ".
fn check_action_name(name: &str) -> Result<(), String> {
    let problem = if name.is_empty() {
        Some("it is empty".to_owned())
    } else if name.len() > 64 {
        Some(format!("it has {} characters", name.len()))
    } else if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        Some(format!(
            "it starts with `{}`",
            name.chars().next().unwrap_or_default()
        ))
    } else if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_'))
    {
        Some(format!("it contains `{bad}`"))
    } else if name.contains("__") {
        Some("it contains `__`".to_owned())
    } else if name.ends_with('_') {
        Some("it ends with `_`".to_owned())
    } else {
        None
    };
    let Some(problem) = problem else {
        return Ok(());
    };
    let mut message = format!(
        "`{name}`: {problem}; action names are lowercase snake case, start with a letter and \
         have at most 64 characters"
    );
    let suggestion = snake_case(name);
    if suggestion != name && check_action_name(&suggestion).is_ok() {
        message = format!("{message}, such as `{suggestion}`");
    }
    Err(message)
}

/// `CreateDeployment` and `create-deployment` → `create_deployment`.
fn snake_case(name: &str) -> String {
    let mut out = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            if c.is_ascii_uppercase() && previous_lower {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
            previous_lower = false;
        }
    }
    let trimmed = out.trim_matches('_');
    trimmed
        .get(..64)
        .unwrap_or(trimmed)
        .trim_end_matches('_')
        .to_owned()
}

/// Field-level rules: one `#[audit_note]`, and scope tags and `#[policy]` on fields the
/// agent sends.
fn check_fields(input: &Input, errs: &mut Errors) {
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

/// The input's fields by the JSON name the agent sends.
struct FieldNames<'f, 'a> {
    by_json: BTreeMap<&'f str, &'f Field<'a>>,
    all: &'f [Field<'a>],
    /// A `#[serde(flatten)]` field inlines names that cannot be known here.
    open: bool,
}

impl<'f, 'a> FieldNames<'f, 'a> {
    fn new(fields: &'f [Field<'a>]) -> Self {
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
fn placeholders(template: &str) -> Result<Vec<&str>, String> {
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
fn check_template<'f, 'a>(
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

fn check_http(http: &HttpAttr, path: &syn::Path, fields: &FieldNames, errs: &mut Errors) {
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
    for rule in &http.statuses {
        if rule.code >= 400 && rule.status.value == Status::Completed {
            errs.at(
                rule.status.ident.span(),
                format!(
                    "a {} response cannot mean `completed`; map it to `already_in_desired_state` \
                     if it means nothing needed doing, or leave it to the conservative default",
                    rule.code
                ),
            );
        }
    }
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

/// The audit note is stored and shown to the human, never sent: a template that places it
/// is refused.
fn check_note_not_sent(
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
fn resolve_ref(field: &FieldRef, what: &str, fields: &FieldNames, errs: &mut Errors) -> bool {
    match fields.resolve(&field.name, &format!("{what} `{}`", field.name)) {
        Ok(_) => true,
        Err(message) => {
            errs.at(field.span, message);
            false
        }
    }
}

/// RFC 9110 `tchar`.
fn is_header_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

fn check_codes<C: PartialEq + std::fmt::Display>(
    rules: &[CodeRule<C>],
    key: &str,
    errs: &mut Errors,
) {
    for (i, rule) in rules.iter().enumerate() {
        if rules[..i].iter().any(|earlier| earlier.code == rule.code) {
            errs.at(
                rule.code_lit.span(),
                format!("`{key}({})` is mapped twice", rule.code),
            );
        }
    }
}

fn check_ssh(ssh: &SshAttr, path: &syn::Path, fields: &FieldNames, errs: &mut Errors) {
    match ssh.host.get() {
        Some(host) => {
            let value = host.value();
            match placeholders(&value) {
                Ok(names) if names.is_empty() => {
                    if value.trim().is_empty() {
                        errs.at(host.span(), "the host must name an inventory host");
                    }
                }
                Ok(names) if names.len() == 1 && value == format!("{{{}}}", names[0]) => {
                    for (name, field) in check_template(host, "host", fields, errs) {
                        if field.is_some_and(|field| field.scope.is_none()) {
                            errs.at(
                                host.span(),
                                format!(
                                    "the host comes from field `{name}`, which has no scope \
                                     tag; add `#[scope(host)]` to it so the executor checks \
                                     it against the session's hosts"
                                ),
                            );
                        }
                    }
                }
                Ok(_) => errs.at(
                    host.span(),
                    format!(
                        "the host `{value}` mixes text and placeholders; write an inventory host \
                         name, or exactly one `{{field}}` tagged `#[scope(host)]`"
                    ),
                ),
                Err(message) => errs.at(host.span(), message),
            }
        }
        None if ssh.host.key.is_none() => errs.push(Error::new_spanned(
            path,
            "missing `host` in #[ssh]; add `host = \"inventory-name\"`",
        )),
        None => {}
    }
    match ssh.argv.get() {
        Some(argv) => match argv.first() {
            None => {
                if let Some(key) = &ssh.argv.key {
                    errs.at(
                        key.span(),
                        "`argv` is empty; it needs at least the program to run",
                    );
                }
            }
            Some(program) => {
                if placeholders(&program.value()).is_ok_and(|names| !names.is_empty()) {
                    errs.at(
                        program.span(),
                        "the program (`argv[0]`) must be fixed, never taken from the agent's input",
                    );
                }
                for arg in argv {
                    for (name, _) in check_template(arg, "argv", fields, errs) {
                        check_note_not_sent(&name, "argv", arg.span(), fields, errs);
                    }
                }
            }
        },
        None if ssh.argv.key.is_none() => errs.push(Error::new_spanned(
            path,
            "missing `argv` in #[ssh]; add `argv = [\"program\", \"arg\", …]`",
        )),
        None => {}
    }
    check_codes(&ssh.exits, "exit", errs);
}

/// `#[ssh(allow_leading_dash)]` fields: only on an `#[ssh]` action, and only on a field its
/// argv template places (anywhere else the attribute would promise something it cannot do).
fn check_leading_dash(input: &Input, errs: &mut Errors) {
    let Some(TargetKind::Ssh(ssh)) = input.target.as_ref().map(|target| &target.kind) else {
        for field in &input.fields {
            if let Some(span) = field.allow_leading_dash {
                errs.at(
                    span,
                    format!(
                        "`allow_leading_dash` on field `{}` applies only to an action with an \
                         `#[ssh(...)]` target, whose argv the value becomes part of",
                        field.ident
                    ),
                );
            }
        }
        return;
    };
    // Without an argv `check_ssh` has already reported it.
    let Some(argv) = ssh.argv.get() else { return };
    let mut placed: Vec<String> = Vec::new();
    for arg in argv {
        if let Ok(names) = placeholders(&arg.value()) {
            placed.extend(names.into_iter().map(str::to_owned));
        }
    }
    for field in &input.fields {
        let Some(span) = field.allow_leading_dash else {
            continue;
        };
        if !placed.contains(&field.json_name) {
            errs.at(
                span,
                format!(
                    "field `{}` is not a `{{{}}}` placeholder in the argv template, so \
                     `allow_leading_dash` would have no effect; remove it",
                    field.ident, field.json_name
                ),
            );
        }
    }
}

fn check_channel(channel: &ChannelAttr, path: &syn::Path, errs: &mut Errors) {
    match channel.name.get() {
        Some(name) => {
            let value = name.value();
            if value.trim().is_empty() {
                errs.at(name.span(), "the channel name must not be empty");
            } else if value == "http" || value == "ssh" {
                errs.at(
                    name.span(),
                    format!("`{value}` is a built-in channel; use `#[{value}(...)]` instead"),
                );
            }
        }
        None if channel.name.key.is_none() => errs.push(Error::new_spanned(
            path,
            "missing `name` in #[channel]; add `name = \"channel\"`",
        )),
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::{DeriveInput, parse_quote};

    fn errors(input: &DeriveInput) -> Vec<String> {
        let mut errs = Errors::default();
        if let Some(parsed) = Input::from_syn(input, &mut errs) {
            let checked = check(&parsed, &mut errs);
            let _ = checked.is_some();
        }
        match errs.finish() {
            Ok(()) => Vec::new(),
            Err(error) => error.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn a_complete_action_passes() {
        let input: DeriveInput = parse_quote! {
            /// Queue one build.
            #[action(name = "create_preview_deployment", effect = external_commitment,
                     retry = idempotency_key, reconcile = "get_deployment_status")]
            #[http(post = "/v1/projects/{project_id}/deployments", query(page),
                   header("X-Note" = note), status(202) = pending, result = Accepted)]
            struct CreatePreviewDeployment {
                #[scope(project)] project_id: String,
                page: u32,
                note: String,
                #[audit_note] reason: String,
            }
        };
        assert_eq!(errors(&input), Vec::<String>::new());
    }

    #[test]
    fn action_names_follow_the_core_rule() {
        for good in ["a", "get_invoice2", &"a".repeat(64)] {
            assert_eq!(check_action_name(good), Ok(()), "{good}");
        }
        assert_eq!(
            check_action_name("Create-Deployment"),
            Err(
                "`Create-Deployment`: it starts with `C`; action names are lowercase snake \
                 case, start with a letter and have at most 64 characters, such as \
                 `create_deployment`"
                    .to_owned()
            )
        );
        for bad in [
            "",
            "_x",
            "x_",
            "a__b",
            "9lives",
            "create-thing",
            &"a".repeat(65),
        ] {
            assert!(check_action_name(bad).is_err(), "{bad:?} should be invalid");
        }
    }

    #[test]
    fn struct_names_become_snake_case_suggestions() {
        assert_eq!(
            snake_case("CreatePreviewDeployment"),
            "create_preview_deployment"
        );
        assert_eq!(snake_case("create-thing"), "create_thing");
        assert_eq!(snake_case("_x"), "x");
        assert_eq!(snake_case("HTTPGet2"), "httpget2");
    }

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
    fn cross_field_mistakes_are_all_reported() {
        let input: DeriveInput = parse_quote! {
            /// Queue one build.
            #[action(name = "deploy", effect = irreversible_or_broad, consent = session,
                     retry = safe, reconcile = "deploy")]
            #[http(post = "/v1/{projct_id}", query(project_id),
                   header("Authorization" = project_id), status(404) = completed)]
            struct Deploy {
                #[scope(project)] #[serde(rename = "projectId")] project_id: String,
                #[audit_note] a: String,
                #[audit_note] b: String,
            }
        };
        assert_eq!(
            errors(&input),
            [
                "consent `session` is below the floor for `irreversible_or_broad` actions; use \
                 `consent = per_call` or leave `consent` out to get it by default",
                "`retry = safe` is only for `observe` actions, and this one is \
                 `irreversible_or_broad`; use `retry = idempotency_key` if the server honours \
                 idempotency keys, or leave `retry` out (`never`)",
                "`reconcile = \"deploy\"` names this action itself; name the read-only action \
                 that tells whether a call took effect",
                "a second `#[audit_note]`; field `a` already holds the audit note, and an action \
                 has one",
                "path placeholder `{projct_id}` names no input field; did you mean `projectId`?",
                "query field `project_id` names no input field; field `project_id` is sent as \
                 `projectId`",
                "header `Authorization` is set by the executor or the transport, never from an \
                 agent's input",
                "header field `project_id` names no input field; field `project_id` is sent as \
                 `projectId`",
                "missing `result` in #[http]; name the type the agent gets back, as in \
                 `result = Invoice` (a `Deserialize + Serialize + JsonSchema` type; only its \
                 fields reach the agent), or write `result = ()` for \"no data\"",
                "a 404 response cannot mean `completed`; map it to `already_in_desired_state` if \
                 it means nothing needed doing, or leave it to the conservative default",
            ]
        );
    }

    #[test]
    fn ssh_hosts_from_fields_must_be_scoped_and_the_program_fixed() {
        let input: DeriveInput = parse_quote! {
            /// Restart a unit.
            #[action(name = "restart_unit", effect = reversible_change)]
            #[ssh(host = "{server}", argv = ["{unit}", "restart"], exit(3) = pending, exit(3) = unknown)]
            struct RestartUnit { server: String, unit: String }
        };
        assert_eq!(
            errors(&input),
            [
                "the host comes from field `server`, which has no scope tag; add \
                 `#[scope(host)]` to it so the executor checks it against the session's hosts",
                "the program (`argv[0]`) must be fixed, never taken from the agent's input",
                "`exit(3)` is mapped twice",
            ]
        );
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
    fn missing_parts_are_named() {
        let input: DeriveInput = parse_quote! {
            #[action(consent = none)]
            struct ReadThing {}
        };
        assert_eq!(
            errors(&input),
            [
                "`ReadThing` has no doc comment, and an action's doc comment is the description \
                 the agent reads; add `/// <what this action does>` above the struct",
                "missing `name` in #[action]; add `name = \"read_thing\"` (the name the agent \
                 calls)",
                "missing `effect` in #[action]; every action declares what it does to the world, \
                 it is never inferred: add `effect = …` with one of `observe`, \
                 `reversible_change`, `external_commitment`, `irreversible_or_broad`",
            ]
        );
    }

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
