//! Turning stored text into text a person may be shown.

use std::sync::Arc;

use sallyport_core::action::{EffectClass, Externality};
use sallyport_core::scrub::Scrubber;

/// Renders stored texts for display: scrubbed of every secret the vault knows, then with
/// control and bidi characters made visible. HTML escaping is maud's, on every
/// interpolation.
pub(crate) struct Text {
    scrubber: Arc<Scrubber>,
}

impl Text {
    pub(crate) fn new(scrubber: Arc<Scrubber>) -> Self {
        Self { scrubber }
    }

    /// `text` as it may be shown.
    pub(crate) fn show(&self, text: &str) -> String {
        sallyport_core::consent::escape(&self.scrubber.scrub(text)).into_owned()
    }

    /// `text` scrubbed, layout kept (for an export).
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.scrubber.scrub(text).into_owned()
    }

    /// Pretty-printed JSON as it may be shown in a `<pre>`: scrubbed, and every character
    /// [`Text::show`] escapes made visible the same way (`\u{202e}`), except the newlines
    /// that lay the JSON out. JSON writes a newline inside a string as `\n`, so every raw
    /// newline in `json` is layout, and no text the agent wrote can add a line.
    pub(crate) fn json(&self, json: &str) -> String {
        let scrubbed = self.scrubber.scrub(json);
        scrubbed
            .split('\n')
            .map(sallyport_core::consent::escape)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The effect class in words.
pub(crate) fn effect_words(effect: EffectClass) -> &'static str {
    match effect {
        EffectClass::Observe => "Reads only; changes nothing.",
        EffectClass::ReversibleChange => "A change with a practical undo.",
        EffectClass::ExternalCommitment => {
            "Sends, pays, publishes or changes what customers see; it cannot be taken back quietly."
        }
        EffectClass::IrreversibleOrBroad => {
            "Permanent, or touches many objects at once: it cannot be undone."
        }
    }
}

/// Internal or external, in words.
pub(crate) fn externality_words(externality: Externality) -> &'static str {
    match externality {
        Externality::Internal => "Internal: visible only inside the organisation.",
        Externality::External => "External: visible to customers, partners or the public.",
    }
}

/// `ms` from now, in words: `in 23 h 59 min`, `in 42 s`, `3 min ago`.
pub(crate) fn countdown(target_ms: u64, now_ms: u64) -> String {
    let (secs, future) = if target_ms >= now_ms {
        ((target_ms - now_ms) / 1000, true)
    } else {
        ((now_ms - target_ms) / 1000, false)
    };
    let words = if secs >= 3600 {
        format!("{} h {} min", secs / 3600, (secs % 3600) / 60)
    } else if secs >= 60 {
        format!("{} min {} s", secs / 60, secs % 60)
    } else {
        format!("{secs} s")
    };
    if future {
        format!("in {words}")
    } else {
        format!("{words} ago")
    }
}

/// The snake-case wire name of a serializable enum.
pub(crate) fn wire<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::from("?"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn countdowns_read_as_words() {
        assert_eq!(countdown(90_000 + 3_600_000, 0), "in 1 h 1 min");
        assert_eq!(countdown(61_000, 0), "in 1 min 1 s");
        assert_eq!(countdown(0, 42_000), "42 s ago");
    }

    #[test]
    fn json_keeps_its_lines_and_makes_bidi_and_tag_characters_visible() {
        let text = Text::new(Arc::new(Scrubber::new(["hunter2-canary-value"])));
        let record = serde_json::json!({
            "note": "pay \u{202e}fdp.exe\u{e0041}\u{e0042}\u{200b} hunter2-canary-value",
            "reason": "two\nlines",
        });
        let pretty = serde_json::to_string_pretty(&record).expect("json");
        // serde_json leaves bidi and tag characters raw: a browser would reverse the line.
        assert!(pretty.contains('\u{202e}'));
        let shown = text.json(&pretty);
        assert_eq!(
            shown,
            "{\n  \"note\": \"pay \\u{202e}fdp.exe\\u{e0041}\\u{e0042}\\u{200b} [REDACTED]\",\n  \"reason\": \"two\\nlines\"\n}"
        );
        assert!(
            !shown.chars().any(|c| c == '\u{202e}'
                || c == '\u{200b}'
                || ('\u{e0000}'..='\u{e0fff}').contains(&c)),
            "{shown}"
        );
    }

    #[test]
    fn shown_text_is_scrubbed_and_bidi_made_visible() {
        let text = Text::new(Arc::new(Scrubber::new(["hunter2-canary-value"])));
        let shown = text.show("token hunter2-canary-value \u{202e}evil");
        assert!(!shown.contains("hunter2-canary-value"), "{shown}");
        assert!(!shown.contains('\u{202e}'), "{shown}");
        assert!(shown.contains("\\u{202e}"), "{shown}");
    }
}
