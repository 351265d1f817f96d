//! The one clock: every timestamp the crate writes (audit records, attempt rows, signed
//! heads, drift baselines) is an RFC 3339 UTC time from [`now`].

/// The current UTC time in RFC 3339 (`2026-01-01T12:00:00.123456789Z`).
pub(crate) fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_an_rfc3339_utc_time_that_parses_back() {
        let text = now();
        let parsed =
            time::OffsetDateTime::parse(&text, &time::format_description::well_known::Rfc3339)
                .expect("RFC 3339");
        assert_eq!(parsed.offset(), time::UtcOffset::UTC);
        assert!(text.ends_with('Z'), "{text}");
        let age = time::OffsetDateTime::now_utc() - parsed;
        assert!(
            age >= time::Duration::ZERO && age < time::Duration::seconds(5),
            "{age}"
        );
    }
}
