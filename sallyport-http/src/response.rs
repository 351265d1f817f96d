//! Reading the upstream: `Retry-After`, filtered error messages, and the mapping from
//! status codes and body predicates to the five statuses.

mod codes;

use std::time::{Duration, SystemTime};

use reqwest::header::{DATE, HeaderMap, RETRY_AFTER};
use sallyport_core::action::{ActionSpec, EffectClass, RetryRule};
use sallyport_core::after_send::AfterSend;
use sallyport_core::channel::ChannelOutcome;
use sallyport_core::code::{Code, UpstreamCode};
use sallyport_core::outcome::{Origin, Status};
use sallyport_core::scrub::Scrubber;
use sallyport_core::target::HttpTarget;
use serde_json::Value;

use self::codes::Reading;
use crate::exchange::Answer;

/// Longest upstream message shown to the agent.
pub(crate) const MAX_MESSAGE: usize = 200;

/// What a `Retry-After` header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RetryAfter {
    /// No header.
    Missing,
    /// A delay (seconds, or an HTTP date relative to the response's `Date`).
    Delay(Duration),
    /// Present but unusable: negative, garbled, or several values.
    Invalid,
}

/// Parses `Retry-After`: delay-seconds, or an HTTP date measured from the response's own
/// `Date` header (so clock skew between us and the server does not matter) or, without
/// one, from our clock. A date in the past means no wait.
pub(crate) fn retry_after(headers: &HeaderMap) -> RetryAfter {
    let mut values = headers.get_all(RETRY_AFTER).iter();
    let Some(value) = values.next() else {
        return RetryAfter::Missing;
    };
    if values.next().is_some() {
        return RetryAfter::Invalid;
    }
    let Ok(text) = value.to_str() else {
        return RetryAfter::Invalid;
    };
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // A huge number saturates: it is then simply over any cap.
        return RetryAfter::Delay(Duration::from_secs(text.parse::<u64>().unwrap_or(u64::MAX)));
    }
    let Ok(at) = httpdate::parse_http_date(text) else {
        return RetryAfter::Invalid;
    };
    let now = headers
        .get(DATE)
        .and_then(|d| d.to_str().ok())
        .and_then(|d| httpdate::parse_http_date(d).ok())
        .unwrap_or_else(SystemTime::now);
    RetryAfter::Delay(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// An upstream-supplied request id, if it is a plain token (for the human's lookup).
pub(crate) fn correlation_id(headers: &HeaderMap) -> Option<String> {
    [
        "x-request-id",
        "x-correlation-id",
        "request-id",
        "x-amzn-requestid",
    ]
    .iter()
    .filter_map(|name| headers.get(*name))
    .filter_map(|v| v.to_str().ok())
    .map(str::trim)
    .find(|v| {
        !v.is_empty()
            && v.len() <= 64
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
    })
    .map(str::to_owned)
}

/// The declared message field of an error body, filtered: first line only, URLs, paths,
/// authorization material and stack-trace markers removed, control characters dropped,
/// truncated (scrubbed of the call's secrets first, so a cut cannot leave part of one).
/// Nothing at all when the action declares no message field.
pub(crate) fn message(call: &Call<'_>, body: Option<&[u8]>) -> Option<String> {
    let pointer = call.target.message_field.as_deref()?;
    let json: Value = serde_json::from_slice(body?).ok()?;
    let text = json.pointer(pointer)?.as_str()?;
    let filtered = filter_scrubbed_message(text, call.scrubber);
    (!filtered.is_empty()).then_some(filtered)
}

/// Filters one upstream message for the agent (no secrets known).
#[cfg(test)]
pub(crate) fn filter_message(text: &str) -> String {
    filter_scrubbed_message(text, &Scrubber::empty())
}

/// Filters one upstream message for the agent: the call's secrets are scrubbed before the
/// filter and the cut, and a fragment of one left at the cut is redacted.
pub(crate) fn filter_scrubbed_message(text: &str, scrubber: &Scrubber) -> String {
    let text = scrubber.scrub(text);
    let first = text.split(['\n', '\r']).next().unwrap_or_default();
    // Stack traces and exception dumps: keep what precedes them.
    let mut cut = first.len();
    for marker in [
        "Traceback",
        " at ",
        "Exception",
        "panicked",
        "stack",
        "Stack",
        "\tat ",
        ".java:",
        ".py\"",
        ".rs:",
        ".go:",
        ".js:",
    ] {
        if let Some(i) = first.find(marker) {
            cut = cut.min(i);
        }
    }
    let head = &first[..cut];
    let mut out: Vec<String> = Vec::new();
    let mut redact_next = false;
    for word in head.split_whitespace() {
        let lower = word.to_ascii_lowercase();
        if redact_next {
            redact_next = false;
            out.push("[redacted]".to_owned());
            continue;
        }
        if lower == "bearer" || lower == "basic" || lower.starts_with("authorization") {
            redact_next = !lower.contains(':') || lower.ends_with(':');
            out.push("[redacted]".to_owned());
            continue;
        }
        if lower.contains("://") || lower.starts_with("www.") {
            out.push("[url]".to_owned());
            continue;
        }
        if word.matches('/').count() >= 2 || word.contains('\\') {
            out.push("[path]".to_owned());
            continue;
        }
        if [
            "token=",
            "key=",
            "secret=",
            "password=",
            "apikey=",
            "api_key=",
            "cookie",
        ]
        .iter()
        .any(|k| lower.contains(k))
        {
            out.push("[redacted]".to_owned());
            continue;
        }
        out.push(word.chars().filter(|c| !c.is_control()).collect());
    }
    let joined = out.join(" ");
    let trimmed = joined.trim_end_matches([':', ' ', '-', '(']);
    scrubber.bounded(trimmed, MAX_MESSAGE)
}

/// Whether a body mentions idempotency (the IETF draft's error documents do).
fn mentions_idempotency(body: Option<&[u8]>) -> bool {
    body.is_some_and(|b| {
        let text = String::from_utf8_lossy(&b[..b.len().min(4096)]).to_ascii_lowercase();
        text.contains("idempoten")
    })
}

/// What the channel does with one answer.
#[derive(Debug)]
pub(crate) enum Step {
    /// The call is decided.
    Done(ChannelOutcome),
    /// Resend after `wait` (or the backoff when `None`); `exhausted` when no resend is left.
    Resend {
        wait: Option<Duration>,
        exhausted: ChannelOutcome,
    },
}

/// What the mapping needs to know about the call.
pub(crate) struct Call<'a> {
    pub(crate) spec: &'a ActionSpec,
    pub(crate) target: &'a HttpTarget,
    pub(crate) max_retry_after: Duration,
    /// A request of this attempt was already sent before this one.
    pub(crate) resend: bool,
    pub(crate) credential_attached: bool,
    pub(crate) idempotency_header: &'a str,
    pub(crate) attempt_id: &'a str,
    /// The call's scrubber: messages are scrubbed before they are cut.
    pub(crate) scrubber: &'a Scrubber,
}

impl Call<'_> {
    /// Whether the channel may resend after a request left.
    pub(crate) fn may_resend_after_send(&self) -> bool {
        match self.spec.retry {
            RetryRule::IdempotencyKey => true,
            RetryRule::Safe => self.spec.effect == EffectClass::Observe,
            RetryRule::Never => false,
        }
    }

    fn mutating(&self) -> bool {
        self.spec.effect.is_mutating()
    }

    fn reference(&self, headers: &HeaderMap) -> String {
        correlation_id(headers).unwrap_or_else(|| self.attempt_id.to_owned())
    }

    /// The failure rules every channel shares, for this call.
    pub(crate) fn after_send(&self) -> AfterSend<'_> {
        AfterSend::new(self.spec)
    }

    /// An outcome for something after send that may or may not have taken effect:
    /// `unknown` for a mutating action, `rejected` (nothing changes anyway) for an observe.
    pub(crate) fn uncertain(&self, code: impl Into<Code>, what: &str) -> ChannelOutcome {
        self.after_send().uncertain(code, what)
    }
}

/// Maps one answer: the codes with a rule of their own first (authentication, rate limits,
/// the Idempotency-Key draft's answers), then a status the action declares to be an answer
/// in itself (its result a constant: the body is not read), then a success-range body's
/// predicates, then the status the action declares for the code, then the default mapping.
pub(crate) fn classify(call: &Call<'_>, answer: &Answer) -> Step {
    let reading = Reading::new(call, answer);
    let rule = call.target.declared_rule(reading.code);
    if let Some(step) = reading.own_rule(rule.map(|rule| rule.status)) {
        return step;
    }
    if let Some(rule) = rule
        && let Some(constant) = rule.result.constant()
    {
        return Step::Done(reading.constant_answer(rule.status, constant));
    }
    if answer.status.is_success()
        && let Some(outcome) = reading.success_predicates()
    {
        return Step::Done(outcome);
    }
    match rule {
        Some(rule) => Step::Done(declared_outcome(
            call,
            rule.status,
            reading.code,
            reading.body,
            &reading.reference,
            answer.too_large(),
        )),
        None => reading.by_code(),
    }
}

fn body_rules(
    call: &Call<'_>,
    body: Option<&[u8]>,
    code: u16,
    reference: &str,
) -> Option<ChannelOutcome> {
    if call.target.body_rules.is_empty() {
        return None;
    }
    let upstream = |o: ChannelOutcome| o.with_upstream_status(i64::from(code));
    // The rules cannot be read off a body that is not JSON (a BOM, `NaN`, trailing bytes,
    // no body at all): that is no evidence of success.
    let Some(json) = body.and_then(|b| serde_json::from_slice::<Value>(b).ok()) else {
        return Some(upstream(call.uncertain(
            UpstreamCode::UnparseableBody,
            &format!(
                "the upstream answered HTTP {code} with a body that is not valid JSON, so this action's body rules could not be checked; correlation id {reference}"
            ),
        )));
    };
    let rule = call.target.body_rules.iter().find(|r| {
        json.pointer(&r.pointer)
            .is_some_and(|found| same_value(found, &r.equals))
    })?;
    Some(match rule.status {
        Status::Rejected => {
            let what = "the upstream declined the request";
            let reason = match message(call, body) {
                Some(m) => format!("{what}: {m}; correlation id {reference}"),
                None => format!("{what}; correlation id {reference}"),
            };
            upstream(
                ChannelOutcome::new(Status::Rejected)
                    .with_code(
                        rule.code
                            .clone()
                            .map_or(Code::Upstream(UpstreamCode::BusinessRejected), Code::from),
                    )
                    .with_reason(reason),
            )
        }
        Status::Completed => upstream(success(call, body)),
        Status::Unknown => upstream(
            call.uncertain(
                rule.code
                    .clone()
                    .map_or(Code::Upstream(UpstreamCode::UnknownState), Code::from),
                "the upstream reported an undetermined state",
            ),
        ),
        status => {
            let mut o = project_optional(call, status, body);
            if let Some(c) = &rule.code {
                o = o.with_code(c.clone());
            }
            upstream(o)
        }
    })
}

/// JSON equality with numbers compared as numbers: `1`, `1.0` and `1e0` are equal. An
/// integer equals a float only when the float is integral and exactly that integer (no
/// rounding through `f64`, so 2^53 + 1 does not equal 2^53).
pub(crate) fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => same_number(x, y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}

fn same_number(x: &serde_json::Number, y: &serde_json::Number) -> bool {
    let integer = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (integer(x), integer(y)) {
        (Some(i), Some(j)) => i == j,
        (Some(i), None) => y.as_f64().is_some_and(|f| float_is_integer(f, i)),
        (None, Some(j)) => x.as_f64().is_some_and(|f| float_is_integer(f, j)),
        (None, None) => x.as_f64().is_some() && x.as_f64() == y.as_f64(),
    }
}

/// Whether `f` is exactly the integer `i`.
fn float_is_integer(f: f64, i: i128) -> bool {
    // Every integer in ±2^63..2^64 range is within i128; the casts below are exact for
    // integral floats of that size and saturate outside it, where no i64/u64 can match.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_precision_loss,
        reason = "checked by the round trip: equal only when both casts are exact"
    )]
    let exact = f.fract() == 0.0 && (f as i128) == i && (i as f64) == f;
    exact
}

fn declared_outcome(
    call: &Call<'_>,
    status: Status,
    code: u16,
    body: Option<&[u8]>,
    reference: &str,
    too_large: bool,
) -> ChannelOutcome {
    let upstream = |o: ChannelOutcome| o.with_upstream_status(i64::from(code));
    match status {
        // A declaration never turns an error code into success.
        Status::Completed if code >= 400 => upstream(call.uncertain(
            UpstreamCode::UnexpectedResponse,
            &format!("the upstream answered HTTP {code}"),
        )),
        Status::Completed if too_large => upstream(call.uncertain(
            UpstreamCode::ResponseTooLarge,
            "the response body is larger than this action reads",
        )),
        Status::Completed => upstream(success(call, body)),
        Status::Rejected => {
            let what = "the upstream declined the request";
            let reason = match message(call, body) {
                Some(m) => format!("{what} (HTTP {code}): {m}; correlation id {reference}"),
                None => format!("{what} (HTTP {code}); correlation id {reference}"),
            };
            upstream(
                ChannelOutcome::new(Status::Rejected)
                    .with_code(UpstreamCode::UpstreamRejected)
                    .with_reason(reason),
            )
        }
        Status::Unknown => upstream(call.uncertain(
            UpstreamCode::Undetermined,
            &format!("the upstream answered HTTP {code}, which this action treats as undetermined"),
        )),
        other => upstream(project_optional(call, other, body)),
    }
}

/// `completed` with the projected result; a body that does not have the declared shape is
/// not evidence of success.
fn success(call: &Call<'_>, body: Option<&[u8]>) -> ChannelOutcome {
    let Some(shape) = &call.target.result else {
        return ChannelOutcome::new(Status::Completed);
    };
    match body
        .filter(|b| !b.is_empty())
        .map(|b| shape.project_slice(b))
    {
        Some(Ok(data)) => ChannelOutcome::completed(data),
        _ => call.uncertain(
            UpstreamCode::UnexpectedResponse,
            "the upstream answered success with a body that does not match the declared result",
        ),
    }
}

/// `status` with the projected result when the body has the declared shape, else no data.
fn project_optional(call: &Call<'_>, status: Status, body: Option<&[u8]>) -> ChannelOutcome {
    let data = call
        .target
        .result
        .as_ref()
        .and_then(|shape| shape.project_slice(body?).ok());
    let o = ChannelOutcome::new(status).with_origin(Origin::Upstream);
    match data {
        Some(d) => o.with_data(d),
        None => o,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn retry_after_reads_seconds_dates_and_refuses_the_rest() {
        assert_eq!(retry_after(&headers(&[])), RetryAfter::Missing);
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7")])),
            RetryAfter::Delay(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(&headers(&[
                ("retry-after", "Sun, 06 Nov 1994 08:49:42 GMT"),
                ("date", "Sun, 06 Nov 1994 08:49:37 GMT")
            ])),
            RetryAfter::Delay(Duration::from_secs(5))
        );
        assert_eq!(
            retry_after(&headers(&[
                ("retry-after", "Sun, 06 Nov 1994 08:49:30 GMT"),
                ("date", "Sun, 06 Nov 1994 08:49:37 GMT")
            ])),
            RetryAfter::Delay(Duration::ZERO)
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "-5")])),
            RetryAfter::Invalid
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "soon")])),
            RetryAfter::Invalid
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "99999999999999999999999")])),
            RetryAfter::Delay(Duration::from_secs(u64::MAX))
        );
    }

    #[test]
    fn messages_lose_urls_paths_traces_and_authorization() {
        assert_eq!(
            filter_message("build failed: see https://internal.corp/x for details"),
            "build failed: see [url] for details"
        );
        assert_eq!(
            filter_message("bad token Bearer abc.def.ghi rejected"),
            "bad token [redacted] [redacted] rejected"
        );
        assert_eq!(
            filter_message("NullPointerException at com.corp.Svc(Svc.java:42)\n\tat x"),
            "NullPointer"
        );
        assert_eq!(
            filter_message("quota exceeded\nTraceback..."),
            "quota exceeded"
        );
        assert_eq!(
            filter_message("cannot read /srv/app/config.yml"),
            "cannot read [path]"
        );
        assert_eq!(
            filter_message(&"x".repeat(500)).len(),
            MAX_MESSAGE + "…".len()
        );
    }

    #[test]
    fn numbers_compare_as_numbers_and_nothing_else_changes() {
        use serde_json::json;
        assert!(same_value(&json!(1), &json!(1.0)));
        assert!(same_value(&json!(1.0), &json!(1)));
        assert!(same_value(&json!(-3), &json!(-3.0)));
        assert!(same_value(&json!(u64::MAX), &json!(u64::MAX)));
        assert!(!same_value(&json!(1), &json!(1.5)));
        assert!(!same_value(
            &json!(9_007_199_254_740_993_u64),
            &json!(9_007_199_254_740_992.0)
        ));
        assert!(same_value(&json!({"a": [1, 2.0]}), &json!({"a": [1.0, 2]})));
        assert!(!same_value(&json!("1"), &json!(1)));
        assert!(!same_value(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
    }

    #[test]
    fn correlation_ids_must_be_plain_tokens() {
        assert_eq!(
            correlation_id(&headers(&[("x-request-id", "req_123")])).as_deref(),
            Some("req_123")
        );
        assert_eq!(
            correlation_id(&headers(&[("x-request-id", "a b <script>")])),
            None
        );
    }
}
