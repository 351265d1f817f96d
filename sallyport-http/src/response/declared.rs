//! What a success-range body and a declared status make of an answer: the body predicates
//! (with JSON numbers compared as numbers), the status the action declares for the code, and
//! the result projected through the declared result type.

use sallyport_core::channel::ChannelOutcome;
use sallyport_core::code::{Code, UpstreamCode};
use sallyport_core::outcome::{Origin, Status};
use serde_json::Value;

use super::Call;
use super::message::message;

pub(super) fn body_rules(
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
pub(super) fn same_value(a: &Value, b: &Value) -> bool {
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

pub(super) fn declared_outcome(
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
pub(super) fn success(call: &Call<'_>, body: Option<&[u8]>) -> ChannelOutcome {
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
pub(super) fn project_optional(
    call: &Call<'_>,
    status: Status,
    body: Option<&[u8]>,
) -> ChannelOutcome {
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
}
