//! The HTTP request template carried in an action card.
//!
//! Everything here is plain data, hashed into the action's canonical definition: changing a
//! path, a status mapping, a timeout or a body cap is definition drift. `sallyport-http`
//! interprets it.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use super::ResultShape;
use crate::outcome::Status;
use sallyport_vocab::string_enum;

string_enum! {
    /// An HTTP method. Never used to infer the effect class.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum HttpMethod {
        /// `DELETE`
        Delete => "DELETE",
        /// `GET`
        Get => "GET",
        /// `PATCH`
        Patch => "PATCH",
        /// `POST`
        Post => "POST",
        /// `PUT`
        Put => "PUT",
    }
}

impl HttpMethod {
    /// Whether requests with this method carry a JSON body by default (`POST`, `PUT`,
    /// `PATCH`).
    pub fn has_body(self) -> bool {
        matches!(self, Self::Patch | Self::Post | Self::Put)
    }

    /// Whether the method is meant to change state (`POST`, `PUT`, `PATCH`, `DELETE`).
    /// Never used to infer an effect class: only to refuse an `observe` action on such a
    /// method unless its author gave a reviewed reason
    /// ([`ActionSpec::method_override`](crate::action::ActionSpec::method_override)).
    pub fn changes_state(self) -> bool {
        self != Self::Get
    }
}

/// How one upstream status code maps to an action status, and what the response's body
/// means for the result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StatusRule {
    /// The HTTP status code.
    pub code: u16,
    /// The action status it means.
    #[serde(serialize_with = "serialize_status")]
    pub status: Status,
    /// Where the result's data comes from. Left out of the definition when it is the
    /// default (the body), so definitions written before it existed hash as they did.
    #[serde(skip_serializing_if = "StatusResult::is_body")]
    pub result: StatusResult,
}

/// Where the result's data comes from when the upstream answers with one status code.
///
/// The body of most answers *is* the result, read as the declared result type. Some
/// answers carry no body (GitHub's `204 No Content` for a workflow dispatch), and for some
/// the status code itself is the answer (`404` from "is this pull request merged?" means
/// "no"); an action says so per status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusResult {
    /// The response body, read as the declared result type.
    #[default]
    Body,
    /// The status carries no body: the result is JSON `null` read as the declared result
    /// type (so the type must accept `null`: `()`, an `Option`). The body is not read.
    Empty,
    /// The status is the answer: the result is this constant JSON value, read as the
    /// declared result type. The body is not read.
    Value(Value),
}

impl StatusResult {
    /// Whether the result is the response body (the default).
    pub fn is_body(&self) -> bool {
        *self == Self::Body
    }

    /// The constant JSON this status stands for, when the body is not read: `null` for
    /// [`Empty`](Self::Empty), the value for [`Value`](Self::Value).
    pub fn constant(&self) -> Option<&Value> {
        match self {
            Self::Body => None,
            Self::Empty => Some(&Value::Null),
            Self::Value(value) => Some(value),
        }
    }
}

fn serialize_status<S: serde::Serializer>(status: &Status, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(super::status_name(*status))
}

/// A body predicate: when the JSON value at `pointer` in a response body equals `equals`,
/// the call has `status` (and `code`), whatever the HTTP status said. This is how a
/// `{"state":"rejected"}` inside a `200` becomes `rejected`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BodyRule {
    /// An RFC 6901 JSON pointer into the response body, e.g. `/state`.
    pub pointer: Cow<'static, str>,
    /// The value that triggers the rule.
    pub equals: Value,
    /// The action status it means. A body rule never makes an error status `completed`.
    #[serde(serialize_with = "serialize_status")]
    pub status: Status,
    /// The machine-readable code reported with it (defaults to `business_rejected` for
    /// `rejected`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<Cow<'static, str>>,
}

/// Which input fields make up a request's JSON body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "fields", rename_all = "snake_case")]
pub enum HttpBody {
    /// `POST`, `PUT` and `PATCH`: a JSON object of every field not used in the path, the
    /// query or a header (and not omitted). Other methods: no body.
    #[default]
    Auto,
    /// No body.
    Empty,
    /// A JSON object of exactly these fields (absent and `null` fields are left out).
    Fields(Vec<Cow<'static, str>>),
}

/// An HTTP request template: method, path with `{field}` placeholders, where the other fields
/// go, how responses map to statuses, and the per-action limits.
///
/// The agent never supplies a URL, a host, a header name or a raw body: the base URL comes
/// from the channel's configuration or the credential's binding, and every name here is the
/// author's.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct HttpTarget {
    /// The method.
    pub method: HttpMethod,
    /// Path template relative to the channel's base URL, e.g. `/v1/projects/{project_id}`.
    pub path: Cow<'static, str>,
    /// Fields sent as query parameters.
    pub query: Vec<Cow<'static, str>>,
    /// Fields sent as headers: `(header name, field)`.
    pub headers: Vec<(Cow<'static, str>, Cow<'static, str>)>,
    /// Declared status-code mappings (beyond the conservative defaults).
    pub statuses: Vec<StatusRule>,
    /// The declared result type.
    pub result: Option<ResultShape>,
    /// Which fields form the JSON body.
    #[serde(skip_serializing_if = "is_auto")]
    pub body: HttpBody,
    /// Fields never sent upstream (an audit note, say).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub omit: Vec<Cow<'static, str>>,
    /// Body predicates, checked in order before the status-code mapping.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub body_rules: Vec<BodyRule>,
    /// JSON pointer to the one field of an error body that may be shown (truncated and
    /// filtered); without it, error bodies are never shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_field: Option<Cow<'static, str>>,
    /// Connect timeout in milliseconds (the channel's default when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_timeout_ms: Option<u64>,
    /// Total timeout of one request, response body included, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_timeout_ms: Option<u64>,
    /// Largest response body read, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<u64>,
    /// Longest `Retry-After` the channel waits for, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retry_after_s: Option<u64>,
    /// Most requests one attempt may send (capped by the channel's hard limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// The request is built by a hand-written builder registered with the channel under the
    /// action's name, instead of from `query`, `headers` and `body`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub custom_request: bool,
}

fn is_auto(body: &HttpBody) -> bool {
    *body == HttpBody::Auto
}

impl HttpTarget {
    /// A template for `method` on `path`.
    pub fn new(method: HttpMethod, path: impl Into<Cow<'static, str>>) -> Self {
        Self {
            method,
            path: path.into(),
            query: Vec::new(),
            headers: Vec::new(),
            statuses: Vec::new(),
            result: None,
            body: HttpBody::Auto,
            omit: Vec::new(),
            body_rules: Vec::new(),
            message_field: None,
            connect_timeout_ms: None,
            total_timeout_ms: None,
            max_response_bytes: None,
            max_retry_after_s: None,
            max_attempts: None,
            custom_request: false,
        }
    }

    /// Sends `field` as a query parameter.
    #[must_use]
    pub fn with_query(mut self, field: impl Into<Cow<'static, str>>) -> Self {
        self.query.push(field.into());
        self
    }

    /// Sends `field` in header `name`.
    #[must_use]
    pub fn with_header(
        mut self,
        name: impl Into<Cow<'static, str>>,
        field: impl Into<Cow<'static, str>>,
    ) -> Self {
        self.headers.push((name.into(), field.into()));
        self
    }

    /// Maps status `code` to `status`; the response body is the result.
    #[must_use]
    pub fn with_status(self, code: u16, status: Status) -> Self {
        self.with_status_result(code, status, StatusResult::Body)
    }

    /// Maps status `code` to `status`, with the result taken from where `result` says: the
    /// body, nothing (`null`), or a constant value. [`ActionSpec::check`] refuses a constant
    /// the declared result type cannot read.
    ///
    /// [`ActionSpec::check`]: crate::action::ActionSpec::check
    #[must_use]
    pub fn with_status_result(mut self, code: u16, status: Status, result: StatusResult) -> Self {
        self.statuses.push(StatusRule {
            code,
            status,
            result,
        });
        self
    }

    /// Declares the result type.
    #[must_use]
    pub fn with_result(mut self, shape: ResultShape) -> Self {
        self.result = Some(shape);
        self
    }

    /// Chooses which fields form the JSON body.
    #[must_use]
    pub fn with_body(mut self, body: HttpBody) -> Self {
        self.body = body;
        self
    }

    /// Never sends `field` upstream (it stays in the audit record).
    #[must_use]
    pub fn with_omitted(mut self, field: impl Into<Cow<'static, str>>) -> Self {
        self.omit.push(field.into());
        self
    }

    /// Adds a body predicate: the value at `pointer` equal to `equals` means `status`.
    #[must_use]
    pub fn with_body_rule(
        mut self,
        pointer: impl Into<Cow<'static, str>>,
        equals: Value,
        status: Status,
    ) -> Self {
        self.body_rules.push(BodyRule {
            pointer: pointer.into(),
            equals,
            status,
            code: None,
        });
        self
    }

    /// Adds a body predicate with its own code.
    #[must_use]
    pub fn with_body_rule_code(
        mut self,
        pointer: impl Into<Cow<'static, str>>,
        equals: Value,
        status: Status,
        code: impl Into<Cow<'static, str>>,
    ) -> Self {
        self.body_rules.push(BodyRule {
            pointer: pointer.into(),
            equals,
            status,
            code: Some(code.into()),
        });
        self
    }

    /// Names the error-body field (a JSON pointer, e.g. `/error/message`) whose text may be
    /// shown to the agent, truncated and filtered.
    #[must_use]
    pub fn with_message_field(mut self, pointer: impl Into<Cow<'static, str>>) -> Self {
        self.message_field = Some(pointer.into());
        self
    }

    /// Sets the connect timeout.
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.connect_timeout_ms = Some(duration_ms(timeout));
        self
    }

    /// Sets the total timeout of one request (connect, send, response and body).
    #[must_use]
    pub fn with_total_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.total_timeout_ms = Some(duration_ms(timeout));
        self
    }

    /// Sets the largest response body read, in bytes.
    #[must_use]
    pub fn with_max_response_bytes(mut self, bytes: u64) -> Self {
        self.max_response_bytes = Some(bytes);
        self
    }

    /// Sets the longest `Retry-After` the channel waits for.
    #[must_use]
    pub fn with_max_retry_after(mut self, wait: std::time::Duration) -> Self {
        self.max_retry_after_s = Some(wait.as_secs());
        self
    }

    /// Sets the most requests one attempt may send (the channel caps it at its hard limit).
    #[must_use]
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// Builds the request with the hand-written builder registered with the channel under
    /// the action's name.
    #[must_use]
    pub fn with_custom_request(mut self) -> Self {
        self.custom_request = true;
        self
    }

    /// The status declared for `code`, if any.
    pub fn declared_status(&self, code: u16) -> Option<Status> {
        self.declared_rule(code).map(|rule| rule.status)
    }

    /// The rule declared for `code`, if any (the first, should there be several).
    pub fn declared_rule(&self, code: u16) -> Option<&StatusRule> {
        self.statuses.iter().find(|rule| rule.code == code)
    }

    /// Checks each status rule whose result is a constant (`empty`, or a value): the
    /// declared result type must read it, and only an answer the status itself is may turn
    /// an error code into success (a constant value on a 4xx; never a 5xx).
    ///
    /// # Errors
    ///
    /// The code of the first rule that fails, and why, as a sentence.
    pub fn check_status_results(&self) -> Result<(), (u16, String)> {
        for rule in &self.statuses {
            let Some(constant) = rule.result.constant() else {
                continue;
            };
            let code = rule.code;
            if !matches!(
                rule.status,
                Status::Completed | Status::AlreadyInDesiredState | Status::Pending
            ) {
                return Err((
                    code,
                    format!(
                        "a `{}` result carries no data; only `completed`, \
                         `already_in_desired_state` and `pending` take `empty` or a value",
                        rule.status.as_str()
                    ),
                ));
            }
            if code >= 500 {
                return Err((
                    code,
                    "a server error is never an answer; leave it to the conservative default"
                        .to_owned(),
                ));
            }
            if code >= 400 && rule.result == StatusResult::Empty {
                return Err((
                    code,
                    "an error code with no data is not an answer; declare the value it means, \
                     as in `completed(value = ...)`"
                        .to_owned(),
                ));
            }
            match (&self.result, &rule.result) {
                (Some(shape), _) => {
                    shape.project(constant.clone()).map_err(|reason| {
                        (
                            code,
                            format!("the declared result type cannot read {constant}: {reason}"),
                        )
                    })?;
                }
                (None, StatusResult::Value(value)) => {
                    return Err((
                        code,
                        format!(
                            "the action declares no result type, so the value {value} would \
                             never reach the agent; declare one that reads it"
                        ),
                    ));
                }
                (None, _) => {}
            }
        }
        Ok(())
    }

    /// Checks the path template's fixed text: no segment written
    /// without a placeholder may be a dot segment (`.`, `..`, or one of them percent-encoded,
    /// at any depth of encoding), nor may the fixed text hold a backslash (which URL parsers
    /// read as `/`) or a control character. A URL parser resolves dot segments, so such a
    /// template would send the request (and the credential bound to the template's prefix)
    /// somewhere other than the path it names. Segments with placeholders are checked on
    /// each call, with the values in place.
    ///
    /// # Errors
    ///
    /// What is wrong, as a sentence.
    pub fn check_path(&self) -> Result<(), String> {
        let path = self.path.as_ref();
        if path.contains('\\') {
            return Err("it contains a backslash, which URL parsers read as `/`".to_owned());
        }
        if path.chars().any(char::is_control) {
            return Err("it contains a control character".to_owned());
        }
        for segment in path.split('/') {
            if !segment.contains('{') && Self::is_dot_segment(segment) {
                return Err(format!(
                    "segment `{segment}` is a dot segment, which a URL parser resolves to \
                     another path"
                ));
            }
        }
        Ok(())
    }

    /// Whether one path segment means `.` or `..` to a URL parser or to a server that
    /// percent-decodes it again: the segment itself, or any of up to three successive
    /// percent-decodings of it (`%2e%2E`, `.%2e`, `%252e%252e`, …).
    pub fn is_dot_segment(segment: &str) -> bool {
        use std::borrow::Cow;
        let mut current = Cow::Borrowed(segment);
        for _ in 0..4 {
            if current == "." || current == ".." {
                return true;
            }
            // Borrowed: nothing was percent-encoded, so no decoding can change it.
            match percent_encoding::percent_decode_str(&current).decode_utf8_lossy() {
                Cow::Borrowed(_) => return false,
                Cow::Owned(decoded) if decoded == *current => return false,
                Cow::Owned(decoded) => current = Cow::Owned(decoded),
            }
        }
        current == "." || current == ".."
    }

    /// The `{field}` placeholders of the path template, in order.
    pub fn path_fields(&self) -> Vec<&str> {
        let mut fields = Vec::new();
        let mut rest = self.path.as_ref();
        while let Some(open) = rest.find('{') {
            let after = &rest[open + 1..];
            let Some(close) = after.find('}') else { break };
            fields.push(&after[..close]);
            rest = &after[close + 1..];
        }
        fields
    }
}

fn duration_ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_fields_are_listed_in_order() {
        let t = HttpTarget::new(HttpMethod::Get, "/v1/p/{project_id}/d/{deployment_id}");
        assert_eq!(t.path_fields(), ["project_id", "deployment_id"]);
    }

    #[test]
    fn dot_segments_in_the_fixed_path_are_refused_in_every_encoding() {
        for bad in [
            "/v1/../admin",
            "/v1/./x",
            "/v1/%2e%2e/admin",
            "/v1/.%2E/admin",
            "/v1/%252e%252e/admin",
            "/v1/..",
            "/v1\\..\\admin",
        ] {
            let t = HttpTarget::new(HttpMethod::Get, bad);
            assert!(t.check_path().is_err(), "{bad}");
        }
        for good in ["/v1/a..b/{id}", "/v1/{id}/...", "/", "/v1/.well-known/{id}"] {
            let t = HttpTarget::new(HttpMethod::Get, good);
            assert_eq!(t.check_path(), Ok(()), "{good}");
        }
    }

    #[test]
    fn defaults_serialize_as_before_the_limits_existed() {
        let t = HttpTarget::new(HttpMethod::Get, "/x");
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"method":"GET","path":"/x","query":[],"headers":[],"statuses":[],"result":null})
        );
    }
}
