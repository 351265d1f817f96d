//! The one clock: every time sallyport reads or writes comes from here. Timestamps it writes
//! (audit records, attempt rows, signed heads, drift baselines) are RFC 3339 UTC times from
//! [`now`]; times it compares (approval expiries, claims, leases) are Unix milliseconds from
//! [`now_ms`], shown to people with [`rfc3339`].

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The current UTC time in RFC 3339 (`2026-01-01T12:00:00.123456789Z`).
#[must_use]
pub fn now() -> String {
    now_utc().format(&Rfc3339).unwrap_or_default()
}

/// The current time in Unix milliseconds (0 if the system clock is before 1970).
#[must_use]
pub fn now_ms() -> u64 {
    unix_ms(now_utc())
}

/// Unix milliseconds as an RFC 3339 UTC time (`0` is `1970-01-01T00:00:00Z`); the number
/// itself, in decimal, if it is past the last time RFC 3339 can write.
#[must_use]
pub fn rfc3339(ms: u64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| ms.to_string())
}

/// The current UTC time, for the crate's own arithmetic on times (an attempt's age); what
/// [`now`] and [`now_ms`] read.
pub fn now_utc() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

/// Whole Unix milliseconds at `t`: 0 before 1970.
fn unix_ms(t: OffsetDateTime) -> u64 {
    u64::try_from(t.unix_timestamp_nanos().max(0) / 1_000_000).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_an_rfc3339_utc_time_that_parses_back() {
        let text = now();
        let parsed = OffsetDateTime::parse(&text, &Rfc3339).expect("RFC 3339");
        assert_eq!(parsed.offset(), time::UtcOffset::UTC);
        assert!(text.ends_with('Z'), "{text}");
        let age = OffsetDateTime::now_utc() - parsed;
        assert!(
            age >= time::Duration::ZERO && age < time::Duration::seconds(5),
            "{age}"
        );
    }

    #[test]
    fn now_ms_agrees_with_now_to_within_a_second() {
        let before = now_ms();
        let text = now();
        let after = now_ms();
        let parsed = OffsetDateTime::parse(&text, &Rfc3339).expect("RFC 3339");
        let at = parsed.unix_timestamp_nanos() / 1_000_000;
        let (before, after) = (i128::from(before), i128::from(after));
        assert!(before <= after, "{before} > {after}");
        assert!(
            before - 1_000 <= at && at <= after + 1_000,
            "{before} .. {at} .. {after}"
        );
        // A real time, not the 0 of a clock before 1970: after 2025-01-01.
        assert!(before > 1_735_689_600_000, "{before}");
    }

    #[test]
    fn rfc3339_of_now_ms_parses_back_to_the_same_millisecond() {
        let ms = now_ms();
        let text = rfc3339(ms);
        let parsed = OffsetDateTime::parse(&text, &Rfc3339).expect("RFC 3339");
        assert_eq!(parsed.offset(), time::UtcOffset::UTC);
        assert_eq!(
            parsed.unix_timestamp_nanos(),
            i128::from(ms) * 1_000_000,
            "{text}"
        );
    }

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_500), "1970-01-01T00:00:01.5Z");
        assert_eq!(rfc3339(u64::MAX), u64::MAX.to_string());
    }

    #[test]
    fn unix_ms_clamps_before_1970_to_zero() {
        let before = OffsetDateTime::from_unix_timestamp(-5).expect("time");
        assert_eq!(unix_ms(before), 0);
        assert_eq!(unix_ms(OffsetDateTime::UNIX_EPOCH), 0);
    }
}
