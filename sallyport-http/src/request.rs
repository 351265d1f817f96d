//! Turning a validated call into a request plan, with every static check the channel makes
//! before consent: values that would change the path, CR/LF and other control characters
//! in headers, headers the executor owns.

use std::any::Any;
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use reqwest::header::{HeaderName, HeaderValue};
use sallyport_core::Action;
use sallyport_core::action::ActionSpec;
use sallyport_core::code::RefusalCode;
use sallyport_core::outcome::Refusal;
use sallyport_core::target::{HttpBody, HttpMethod, HttpTarget};
use serde_json::{Map, Value};

/// Characters left as they are in a path segment: RFC 3986 unreserved. Everything else,
/// `%` included, is percent-encoded, so an agent's value is always exactly one segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Header names no template or builder may set: the executor and the transport own them.
const OWNED_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
];

/// The parts of a request a hand-written builder supplies. The method comes from the
/// action's `HttpTarget` and the base URL from the channel: a builder names path pieces,
/// query parameters, headers and a JSON body, and the channel checks and encodes each one
/// exactly as it does for a template.
///
/// ```
/// use sallyport_http::RequestParts;
/// let parts = RequestParts::new()
///     .literal("/v1/projects/")
///     .segment("proj_1")
///     .literal("/deployments")
///     .query("dry_run", "true")
///     .json_body(serde_json::json!({"build_id": "build_7"}));
/// # let _ = parts;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[must_use]
pub struct RequestParts {
    path: Vec<PathPart>,
    query: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    body: Option<Value>,
}

#[derive(Clone, Debug, PartialEq)]
enum PathPart {
    Literal(&'static str),
    Segment(String),
}

impl RequestParts {
    /// Empty parts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a fixed piece of path written by the author (may contain `/`).
    pub fn literal(mut self, piece: &'static str) -> Self {
        self.path.push(PathPart::Literal(piece));
        self
    }

    /// Appends one path segment from a value; it is checked (no `/`, `..`, encoded
    /// variants or control characters) and percent-encoded.
    pub fn segment(mut self, value: impl Into<String>) -> Self {
        self.path.push(PathPart::Segment(value.into()));
        self
    }

    /// Adds a query parameter.
    pub fn query(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.query.push((name.into(), value.into()));
        self
    }

    /// Adds a header (never one the executor owns, such as `Authorization`).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the JSON body.
    pub fn json_body(mut self, body: Value) -> Self {
        self.body = Some(body);
        self
    }
}

/// Builds the request of an action whose `HttpTarget` says `custom_request`, from the call.
/// Register one with [`HttpChannelBuilder::request_builder`](crate::HttpChannelBuilder::request_builder)
/// or, typed, [`HttpChannelBuilder::request_for`](crate::HttpChannelBuilder::request_for).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot build HTTP requests",
    note = "implement `sallyport_http::BuildRequest`, or implement `sallyport_http::HttpRequest` for the action and register it with `.request_for::<Action>()`"
)]
pub trait BuildRequest: Send + Sync + 'static {
    /// The parts of the request for this call.
    ///
    /// # Errors
    ///
    /// A [`Refusal`] for a call that must not be sent; it reaches the agent before consent.
    fn build(
        &self,
        input: &(dyn Any + Send + Sync),
        arguments: &Value,
    ) -> Result<RequestParts, Refusal>;
}

/// A hand-written request for an action type: the typed form of [`BuildRequest`].
pub trait HttpRequest: Action {
    /// The parts of the request for this input.
    ///
    /// # Errors
    ///
    /// A [`Refusal`] for a call that must not be sent.
    fn request(&self) -> Result<RequestParts, Refusal>;
}

pub(crate) struct Typed<A>(PhantomData<fn() -> A>);

impl<A> Typed<A> {
    pub(crate) fn new() -> Self {
        Self(PhantomData)
    }
}

impl<A: HttpRequest> BuildRequest for Typed<A> {
    fn build(
        &self,
        input: &(dyn Any + Send + Sync),
        _arguments: &Value,
    ) -> Result<RequestParts, Refusal> {
        let input = input.downcast_ref::<A>().ok_or_else(|| {
            Refusal::new(
                RefusalCode::InvalidRequest,
                "the request builder was registered for another action type",
            )
        })?;
        input.request()
    }
}

/// The registered hand-written builders, by action name.
pub(crate) type Builders = std::collections::HashMap<String, Arc<dyn BuildRequest>>;

/// A request ready to send (minus base URL, credential and idempotency key).
#[derive(Clone)]
pub(crate) struct RequestPlan {
    pub(crate) method: reqwest::Method,
    /// Encoded path, starting with `/`.
    pub(crate) path: String,
    pub(crate) query: Vec<(String, String)>,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) body: Option<Bytes>,
}

impl fmt::Debug for RequestPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestPlan")
            .field("method", &self.method)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl RequestPlan {
    /// `METHOD /path?query [headers: name: "value", …] [body: …]`, for the consent prompt
    /// and audit.
    ///
    /// Every header the action or the agent sets is shown with its value, so a human never
    /// approves a value they did not see; each value is written as a JSON string, so a value
    /// holding `, other: "x"` cannot pass for a second header. The credential the vault
    /// attaches at dispatch is not among them: it is added to the prepared request's
    /// headers, never to the plan (as are the fixed `Accept`, `User-Agent` and
    /// `Content-Type`, and the idempotency key).
    ///
    /// Never cut: a cut here would hide every field after it from the human (and would cut
    /// before the executor scrubs). The body is as long as the agent's arguments allow; the
    /// executor escapes the summary for display and refuses to ask a human about one too long
    /// to show in full.
    /// `origin` is written as its pieces in order (the base's origin, then its path prefix).
    pub(crate) fn summary(&self, origin: [&str; 2]) -> String {
        let [origin, prefix] = origin;
        let mut out = format!("{} {origin}{prefix}{}", self.method, self.path);
        if !self.query.is_empty() {
            let mut q = url::form_urlencoded::Serializer::new(String::new());
            for (k, v) in &self.query {
                q.append_pair(k, v);
            }
            out.push('?');
            out.push_str(&q.finish());
        }
        if !self.headers.is_empty() {
            out.push_str(" headers: ");
            for (i, (name, value)) in self.headers.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(name.as_str());
                out.push_str(": ");
                // `header_value` let only visible ASCII, spaces and tabs through, so the
                // value is text; written as a JSON string, its quotes and backslashes are
                // escaped and it reads as one value.
                let text = String::from_utf8_lossy(value.as_bytes());
                out.push_str(&Value::from(text.as_ref()).to_string());
            }
        }
        if let Some(body) = &self.body {
            out.push_str(" body: ");
            out.push_str(&String::from_utf8_lossy(body));
        }
        out
    }
}

fn refuse(reason: impl Into<String>) -> Refusal {
    Refusal::new(RefusalCode::InvalidRequest, reason)
}

/// Builds the plan for a call: from the template, or from the registered hand-written
/// builder.
pub(crate) fn plan(
    spec: &ActionSpec,
    target: &HttpTarget,
    arguments: &Value,
    input: &(dyn Any + Send + Sync),
    builders: &Builders,
    extra_owned: &[HeaderName],
) -> Result<RequestPlan, Refusal> {
    let method = method(target.method);
    if target.custom_request {
        let builder = builders.get(spec.name.as_ref()).ok_or_else(|| {
            Refusal::new(
                RefusalCode::ChannelUnavailable,
                format!(
                    "action `{}` needs a hand-written request builder and none is registered with the HTTP channel",
                    spec.name
                ),
            )
        })?;
        let parts = builder.build(input, arguments)?;
        let plan = from_parts(method, parts, extra_owned)?;
        check_final_path(&plan.path)?;
        return Ok(plan);
    }
    let plan = from_template(
        method,
        target,
        arguments,
        spec.audit_note_field.as_deref(),
        extra_owned,
    )?;
    check_final_path(&plan.path)?;
    Ok(plan)
}

fn method(m: HttpMethod) -> reqwest::Method {
    match m {
        HttpMethod::Delete => reqwest::Method::DELETE,
        HttpMethod::Get => reqwest::Method::GET,
        HttpMethod::Patch => reqwest::Method::PATCH,
        HttpMethod::Post => reqwest::Method::POST,
        HttpMethod::Put => reqwest::Method::PUT,
    }
}

fn from_template(
    method: reqwest::Method,
    target: &HttpTarget,
    arguments: &Value,
    audit_note: Option<&str>,
    extra_owned: &[HeaderName],
) -> Result<RequestPlan, Refusal> {
    let empty = Map::new();
    let args = arguments.as_object().unwrap_or(&empty);
    let mut used: BTreeSet<&str> = BTreeSet::new();

    // Path: literal text with `{field}` placeholders, each replaced by one encoded segment.
    // `raw` is the same path with the values as the agent wrote them: a segment made of
    // several placeholders (`/{a}{b}`), or of a placeholder and fixed text, is checked whole
    // in both forms, since values that pass alone can form `..` or an encoded slash together.
    let mut path = String::with_capacity(target.path.len() + 16);
    let mut raw = String::with_capacity(target.path.len() + 16);
    let mut placed: Vec<(usize, &str)> = Vec::new();
    let mut rest = target.path.as_ref();
    while let Some(open) = rest.find('{') {
        path.push_str(&rest[..open]);
        raw.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(|| {
            refuse("the action's path template has an unclosed `{`; fix the action definition")
        })?;
        let field = &after[..close];
        used.insert(field);
        let value = args.get(field).ok_or_else(|| {
            refuse(format!(
                "`{field}` is required: it is part of the request path"
            ))
        })?;
        let text = scalar_text(field, value, "a path segment")?;
        push_segment(&mut path, field, &text)?;
        placed.push((raw.matches('/').count(), field));
        raw.push_str(&text);
        rest = &after[close + 1..];
    }
    path.push_str(rest);
    raw.push_str(rest);
    check_combined_segments(&path, &raw, &placed)?;
    if !path.starts_with('/') {
        path.insert(0, '/');
    }

    // Query.
    let mut query = Vec::new();
    for field in &target.query {
        used.insert(field);
        match args.get(field.as_ref()) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for item in items {
                    query.push((
                        field.to_string(),
                        scalar_text(field, item, "a query value")?,
                    ));
                }
            }
            Some(value) => query.push((
                field.to_string(),
                scalar_text(field, value, "a query value")?,
            )),
        }
    }

    // Headers.
    let mut headers = Vec::new();
    for (name, field) in &target.headers {
        used.insert(field);
        let name = header_name(name, extra_owned)?;
        match args.get(field.as_ref()) {
            None | Some(Value::Null) => {}
            Some(value) => {
                let text = scalar_text(field, value, "a header value")?;
                headers.push((name, header_value(field, &text)?));
            }
        }
    }

    for field in &target.omit {
        used.insert(field);
    }
    // The agent's audit note stays in the audit record: it goes upstream only where the
    // template names it explicitly (path, query, header, or an explicit body field list).
    if let Some(note) = audit_note {
        used.insert(note);
    }

    // Body.
    let body_object = match &target.body {
        HttpBody::Empty => None,
        HttpBody::Auto if !target.method.has_body() => None,
        HttpBody::Auto => Some(
            args.iter()
                .filter(|(k, _)| !used.contains(k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<Map<String, Value>>(),
        ),
        HttpBody::Fields(fields) => Some(
            fields
                .iter()
                .filter(|f| !target.omit.contains(f))
                .filter_map(|f| {
                    args.get(f.as_ref())
                        .filter(|v| !v.is_null())
                        .map(|v| (f.to_string(), v.clone()))
                })
                .collect::<Map<String, Value>>(),
        ),
    };
    let body = match body_object {
        Some(object) => Some(encode_body(Value::Object(object))?),
        None => None,
    };
    Ok(RequestPlan {
        method,
        path,
        query,
        headers,
        body,
    })
}

fn from_parts(
    method: reqwest::Method,
    parts: RequestParts,
    extra_owned: &[HeaderName],
) -> Result<RequestPlan, Refusal> {
    let mut path = String::new();
    for part in &parts.path {
        match part {
            PathPart::Literal(text) => {
                if text.chars().any(char::is_control) || text.contains(['?', '#']) {
                    return Err(refuse(
                        "the hand-written request builder produced an invalid path literal",
                    ));
                }
                path.push_str(text);
            }
            PathPart::Segment(value) => {
                if !path.ends_with('/') {
                    path.push('/');
                }
                push_segment(&mut path, "path segment", value)?;
            }
        }
    }
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    for (name, value) in &parts.query {
        if name.is_empty() || name.chars().any(char::is_control) || value.contains('\0') {
            return Err(refuse(format!(
                "query parameter `{}` is not allowed",
                bounded(name, 40)
            )));
        }
    }
    let mut headers = Vec::new();
    for (name, value) in &parts.headers {
        let name = header_name(name, extra_owned)?;
        let value = header_value(name.as_str(), value)?;
        headers.push((name, value));
    }
    let body = match parts.body {
        Some(body) => Some(encode_body(body)?),
        None => None,
    };
    Ok(RequestPlan {
        method,
        path,
        query: parts.query,
        headers,
        body,
    })
}

/// The body's bytes, with every object's keys in sorted order (numbers and strings exactly
/// as serde_json writes them).
///
/// Sorted whatever the build: serde_json keeps maps in insertion order when its
/// `preserve_order` feature is on, and any crate in a build can turn it on (rig-core and
/// cedar-policy do). Without sorting, the same call would be prepared as different bytes by
/// two builds, so an approval parked by one process and resumed by another would be refused
/// as `request_changed` although nothing changed.
fn encode_body(mut body: Value) -> Result<Bytes, Refusal> {
    body.sort_all_objects();
    serde_json::to_vec(&body)
        .map(Bytes::from)
        .map_err(|_| refuse("the request body could not be encoded as JSON"))
}

/// A JSON scalar as text. Objects, arrays and `null` cannot be one value.
fn scalar_text(field: &str, value: &Value, place: &str) -> Result<String, Refusal> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => Err(refuse(format!(
            "`{field}` must be a string, number or boolean to be sent as {place}"
        ))),
    }
}

/// Checks each path segment that holds a value as a whole, in its raw and its encoded form:
/// values that each name one segment must not form a dot segment, a slash or a control
/// character together or with the template's fixed text.
fn check_combined_segments(path: &str, raw: &str, placed: &[(usize, &str)]) -> Result<(), Refusal> {
    // No value holds a `/` (each passed `check_segment`), so both split alike.
    for (index, (wire, raw)) in path.split('/').zip(raw.split('/')).enumerate() {
        if !placed.iter().any(|(i, _)| *i == index) {
            continue;
        }
        // Named only in a refusal, so written only for one.
        let subject = || {
            let fields: Vec<String> = placed
                .iter()
                .filter(|(i, _)| *i == index)
                .map(|(_, f)| format!("`{f}`"))
                .collect();
            if fields.len() > 1 {
                format!("{} together", fields.join(" and "))
            } else {
                fields.concat()
            }
        };
        for form in [raw, wire] {
            check_segment_as(&subject, form)?;
        }
    }
    Ok(())
}

/// The final path, whatever built it, holds no dot segment (in any encoding): a URL parser
/// would resolve it and send the request somewhere else.
pub(crate) fn check_final_path(path: &str) -> Result<(), Refusal> {
    if path.contains('\\') {
        return Err(refuse(
            "the request path holds a backslash, which URL parsers read as `/`; it would change the request path",
        ));
    }
    if let Some(segment) = path.split('/').find(|s| HttpTarget::is_dot_segment(s)) {
        return Err(refuse(format!(
            "the request path holds the dot segment `{}`, which would change the request path",
            bounded(segment, 40)
        )));
    }
    Ok(())
}

/// Checks one path value and appends it percent-encoded.
pub(crate) fn push_segment(path: &mut String, field: &str, value: &str) -> Result<(), Refusal> {
    check_segment(field, value)?;
    path.extend(utf8_percent_encode(value, SEGMENT));
    Ok(())
}

/// A path value must name one segment: not empty, no `/` or `\`, not `.` or `..`, no
/// control characters, and the same after percent-decoding (up to three times), so that no
/// proxy or server that decodes it again can see a different path.
fn check_segment(field: &str, value: &str) -> Result<(), Refusal> {
    check_segment_as(&|| format!("`{field}`"), value)
}

/// [`check_segment`] with the refusal's subject (`` `a` and `b` together``) written by
/// `subject`, which is called only for a refusal. A value with nothing percent-encoded in it
/// is checked where it lies, without a copy.
fn check_segment_as(subject: &dyn Fn() -> String, value: &str) -> Result<(), Refusal> {
    let refuse_path = |why: &str| {
        refuse(format!(
            "{} would change the request path ({why}); it must name exactly one object",
            subject()
        ))
    };
    if value.is_empty() {
        return Err(refuse_path("it is empty"));
    }
    let mut current = Cow::Borrowed(value);
    for _ in 0..4 {
        if current.chars().any(char::is_control) {
            return Err(refuse_path("it contains a control character"));
        }
        if current.contains('/') || current.contains('\\') {
            return Err(refuse_path("it contains a slash"));
        }
        if current == "." || current == ".." {
            return Err(refuse_path("it is a dot segment"));
        }
        // Borrowed: nothing was percent-encoded, so decoding again changes nothing.
        match percent_decode_str(&current).decode_utf8_lossy() {
            Cow::Borrowed(_) => break,
            Cow::Owned(decoded) if decoded == *current => break,
            Cow::Owned(decoded) => current = Cow::Owned(decoded),
        }
    }
    Ok(())
}

/// A header name from a template or builder: a valid token, and not one the executor owns.
pub(crate) fn header_name(name: &str, extra_owned: &[HeaderName]) -> Result<HeaderName, Refusal> {
    let parsed = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
        refuse(format!(
            "`{}` is not a valid header name",
            bounded(&name.escape_debug().to_string(), 40)
        ))
    })?;
    if OWNED_HEADERS.contains(&parsed.as_str()) || extra_owned.contains(&parsed) {
        return Err(refuse(format!(
            "header `{}` is set by the executor, never by an action or the agent",
            parsed.as_str()
        )));
    }
    Ok(parsed)
}

/// A header value: visible ASCII, spaces and tabs only; CR, LF, NUL and other control
/// characters are refused (they would split or smuggle headers).
pub(crate) fn header_value(field: &str, value: &str) -> Result<HeaderValue, Refusal> {
    if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(refuse(format!(
            "`{field}` contains a control character (CR, LF or similar) and would become a header"
        )));
    }
    if !value.is_ascii() {
        return Err(refuse(format!(
            "`{field}` must be ASCII to be sent as a header"
        )));
    }
    HeaderValue::from_str(value.trim())
        .map_err(|_| refuse(format!("`{field}` is not a valid header value")))
}

/// `text` cut to at most `max` bytes at a character boundary.
pub(crate) fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn path_of(value: &str) -> Result<String, Refusal> {
        let mut p = String::from("/p/");
        push_segment(&mut p, "id", value).map(|()| p)
    }

    #[test]
    fn values_that_would_change_the_path_are_refused() {
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a\\b",
            "%2e%2e",
            "%2E%2E",
            "%2f",
            "a%2Fb",
            "%252f",
            "%25252e%25252e",
            "a\r\nb",
            "a\0b",
            "%5c",
        ] {
            let err = path_of(bad).unwrap_err();
            assert_eq!(err.code, RefusalCode::InvalidRequest, "{bad:?}");
        }
    }

    #[test]
    fn adjacent_placeholders_are_checked_on_the_segment_they_form() {
        let target = HttpTarget::new(HttpMethod::Get, "/v1/files/{a}{b}");
        for (a, b) in [
            ("%2", "e%2e"),
            ("%2", "F"),
            ("%", "2e%2e"),
            ("%25", "2e%252e"),
        ] {
            let err = from_template(
                reqwest::Method::GET,
                &target,
                &json!({"a": a, "b": b}),
                None,
                &[],
            )
            .unwrap_err();
            assert_eq!(err.code, RefusalCode::InvalidRequest, "{a} {b}");
            assert!(
                err.reason
                    .starts_with("`a` and `b` together would change the request path"),
                "{}",
                err.reason
            );
        }
        let plan = from_template(
            reqwest::Method::GET,
            &target,
            &json!({"a": "report", "b": ".pdf"}),
            None,
            &[],
        )
        .unwrap();
        assert_eq!(plan.path, "/v1/files/report.pdf");
    }

    #[test]
    fn a_final_path_with_a_dot_segment_is_refused_whatever_built_it() {
        for bad in ["/v1/../admin", "/v1/%2E%2e/admin", "/v1/.", "/v1\\x"] {
            assert!(check_final_path(bad).is_err(), "{bad}");
        }
        assert!(check_final_path("/v1/a..b/.well-known").is_ok());
        let parts = RequestParts::new().literal("/v1/../admin/").segment("x");
        let plan = from_parts(reqwest::Method::GET, parts, &[]).unwrap();
        assert!(check_final_path(&plan.path).is_err());
    }

    #[test]
    fn ordinary_values_are_encoded_as_one_segment() {
        assert_eq!(path_of("proj_1").unwrap(), "/p/proj_1");
        assert_eq!(path_of("a b?c#d").unwrap(), "/p/a%20b%3Fc%23d");
        assert_eq!(path_of("user@evil.com").unwrap(), "/p/user%40evil.com");
        assert_eq!(path_of("a..b").unwrap(), "/p/a..b");
        assert_eq!(path_of("100%").unwrap(), "/p/100%25");
        assert_eq!(path_of("bücher").unwrap(), "/p/b%C3%BCcher");
    }

    #[test]
    fn owned_headers_and_control_characters_are_refused() {
        for name in [
            "Authorization",
            "cookie",
            "HOST",
            "Proxy-Authorization",
            "Content-Length",
        ] {
            assert!(header_name(name, &[]).is_err(), "{name}");
        }
        let idem = HeaderName::from_static("idempotency-key");
        assert!(header_name("Idempotency-Key", &[idem]).is_err());
        assert!(header_name("X-Note", &[]).is_ok());
        assert!(header_value("note", "a\r\nX-Evil: 1").is_err());
        assert!(header_value("note", "a\nb").is_err());
        assert!(header_value("note", "fine value").is_ok());
    }

    #[test]
    fn the_audit_note_is_not_sent_unless_the_template_names_it() {
        let args = json!({"build_id": "b1", "why": "because"});
        let auto = HttpTarget::new(HttpMethod::Post, "/d");
        let plan = from_template(reqwest::Method::POST, &auto, &args, Some("why"), &[]).unwrap();
        assert_eq!(plan.body.as_deref(), Some(&b"{\"build_id\":\"b1\"}"[..]));
        let explicit = HttpTarget::new(HttpMethod::Post, "/d")
            .with_body(HttpBody::Fields(vec!["build_id".into(), "why".into()]));
        let plan =
            from_template(reqwest::Method::POST, &explicit, &args, Some("why"), &[]).unwrap();
        assert_eq!(
            plan.body.as_deref(),
            Some(&b"{\"build_id\":\"b1\",\"why\":\"because\"}"[..])
        );
    }

    #[test]
    fn the_template_puts_fields_in_path_query_headers_and_body() {
        let target = HttpTarget::new(HttpMethod::Post, "/v1/projects/{project_id}/deployments")
            .with_query("dry_run")
            .with_header("X-Note", "note")
            .with_omitted("reason");
        let args = json!({"project_id":"proj 1","dry_run":true,"note":"hi","build_id":"b1","reason":"because"});
        let plan = from_template(reqwest::Method::POST, &target, &args, None, &[]).unwrap();
        assert_eq!(plan.path, "/v1/projects/proj%201/deployments");
        assert_eq!(plan.query, [("dry_run".to_owned(), "true".to_owned())]);
        assert_eq!(plan.headers[0].0.as_str(), "x-note");
        assert_eq!(plan.body.as_deref(), Some(&b"{\"build_id\":\"b1\"}"[..]));
    }

    #[test]
    fn the_summary_shows_every_header_with_its_value_quoted() {
        let target = HttpTarget::new(HttpMethod::Post, "/v1/refunds")
            .with_header("X-Refund-Reason", "why")
            .with_header("X-Approver-Hint", "hint");
        let args = json!({"why": "duplicate charge", "hint": "a\", x-admin: \"yes", "amount": 5});
        let plan = from_template(reqwest::Method::POST, &target, &args, None, &[]).unwrap();
        assert_eq!(
            plan.summary(["https://api.example", ""]),
            r#"POST https://api.example/v1/refunds headers: x-refund-reason: "duplicate charge", x-approver-hint: "a\", x-admin: \"yes" body: {"amount":5}"#
        );
        // A hand-written builder's headers are shown alike.
        let parts = RequestParts::new()
            .literal("/v1/ping")
            .header("X-Trace", "t-1\tend");
        let plan = from_parts(reqwest::Method::GET, parts, &[]).unwrap();
        assert_eq!(
            plan.summary(["http://127.0.0.1:9", "/base"]),
            r#"GET http://127.0.0.1:9/base/v1/ping headers: x-trace: "t-1\tend""#
        );
    }

    /// The workspace build has serde_json's `preserve_order` on (rig-core and cedar-policy
    /// turn it on), so `json!` keeps these keys in the order written and an unsorted
    /// encoding would send them so; a build without it sorts them anyway.
    #[test]
    fn a_body_is_encoded_with_sorted_keys_whatever_order_its_map_keeps() {
        let args = json!({
            "zeta": 1,
            "alpha": {"y": [{"b": 2, "a": 1}], "x": "s\"q"},
            "mid": 2.5,
            "big": 18_446_744_073_709_551_615_u64
        });
        let expected = br#"{"alpha":{"x":"s\"q","y":[{"a":1,"b":2}]},"big":18446744073709551615,"mid":2.5,"zeta":1}"#;
        let auto = HttpTarget::new(HttpMethod::Post, "/d");
        let plan = from_template(reqwest::Method::POST, &auto, &args, None, &[]).unwrap();
        assert_eq!(plan.body.as_deref(), Some(&expected[..]));
        let fields = HttpTarget::new(HttpMethod::Post, "/d").with_body(HttpBody::Fields(vec![
            "zeta".into(),
            "mid".into(),
            "big".into(),
            "alpha".into(),
        ]));
        let plan = from_template(reqwest::Method::POST, &fields, &args, None, &[]).unwrap();
        assert_eq!(plan.body.as_deref(), Some(&expected[..]));
        // And they decode to the arguments they came from.
        let reparsed: Value = serde_json::from_slice(plan.body.as_deref().unwrap()).unwrap();
        assert_eq!(reparsed, args);
    }
}
