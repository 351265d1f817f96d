//! What of an error body the agent may see: the declared message field, filtered (first line,
//! no URLs, paths, authorization material or stack traces, the call's secrets scrubbed, cut
//! to length), and whether a body mentions idempotency.

use sallyport_core::scrub::Scrubber;
use serde_json::Value;

use super::Call;

/// Longest upstream message shown to the agent.
pub(super) const MAX_MESSAGE: usize = 200;

/// The declared message field of an error body, filtered: first line only, URLs, paths,
/// authorization material and stack-trace markers removed, control characters dropped,
/// truncated (scrubbed of the call's secrets first, so a cut cannot leave part of one).
/// Nothing at all when the action declares no message field.
pub(super) fn message(call: &Call<'_>, body: Option<&[u8]>) -> Option<String> {
    let pointer = call.target.message_field.as_deref()?;
    let json: Value = serde_json::from_slice(body?).ok()?;
    let text = json.pointer(pointer)?.as_str()?;
    let filtered = filter_scrubbed_message(text, call.scrubber);
    (!filtered.is_empty()).then_some(filtered)
}

/// Filters one upstream message for the agent (no secrets known).
#[cfg(test)]
pub(super) fn filter_message(text: &str) -> String {
    filter_scrubbed_message(text, &Scrubber::empty())
}

/// Filters one upstream message for the agent: the call's secrets are scrubbed before the
/// filter and the cut, and a fragment of one left at the cut is redacted.
pub(super) fn filter_scrubbed_message(text: &str, scrubber: &Scrubber) -> String {
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
pub(super) fn mentions_idempotency(body: Option<&[u8]>) -> bool {
    body.is_some_and(|b| {
        let text = String::from_utf8_lossy(&b[..b.len().min(4096)]).to_ascii_lowercase();
        text.contains("idempoten")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
