//! What the answer's headers say: how long `Retry-After` asks to wait, and the upstream's
//! request id for the human's lookup.

use std::time::{Duration, SystemTime};

use reqwest::header::{DATE, HeaderMap, RETRY_AFTER};

/// What a `Retry-After` header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RetryAfter {
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
pub(super) fn retry_after(headers: &HeaderMap) -> RetryAfter {
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
pub(super) fn correlation_id(headers: &HeaderMap) -> Option<String> {
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
