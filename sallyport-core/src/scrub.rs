//! The scrubber: removes unlocked secret values, in their common encodings, from every string
//! that leaves the executor.

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use zeroize::Zeroizing;

/// What a scrubbed secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Shortest secret the scrubber looks for in encoded forms; shorter values are matched raw
/// only (a 2-byte base64 fragment would redact ordinary text).
const MIN_ENCODED_LEN: usize = 4;

/// Finds secret values in text, raw or encoded (base64 at each alignment, standard and
/// URL-safe, URL-encoded, JSON-escaped, hex), and replaces them with [`REDACTED`].
///
/// ```
/// use sallyport_core::scrub::Scrubber;
/// let s = Scrubber::new(["hunter2-canary"]);
/// assert_eq!(s.scrub("token=hunter2-canary"), "token=[REDACTED]");
/// assert_eq!(s.scrub("aHVudGVyMi1jYW5hcnk="), "[REDACTED]=");
/// assert!(!s.scrub("68756e746572322d63616e617279").contains("6e746572"));
/// ```
pub struct Scrubber {
    matcher: Option<AhoCorasick>,
    patterns: usize,
}

impl Scrubber {
    /// A scrubber that knows no secrets.
    pub fn empty() -> Self {
        Self {
            matcher: None,
            patterns: 0,
        }
    }

    /// A scrubber for these secret values.
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let mut patterns: Vec<Zeroizing<String>> = Vec::new();
        for secret in secrets {
            if secret.is_empty() {
                continue;
            }
            encodings(secret, &mut patterns);
        }
        patterns.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        patterns.dedup_by(|a, b| a.as_str() == b.as_str());
        if patterns.is_empty() {
            return Self::empty();
        }
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(patterns.iter().map(|p| p.as_bytes()))
            .ok();
        Self {
            patterns: patterns.len(),
            matcher,
        }
    }

    /// How many encoded patterns the scrubber searches for.
    pub fn pattern_count(&self) -> usize {
        self.patterns
    }

    /// `text` with every known secret replaced by [`REDACTED`].
    pub fn scrub<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let Some(matcher) = &self.matcher else {
            return Cow::Borrowed(text);
        };
        if !matcher.is_match(text) {
            return Cow::Borrowed(text);
        }
        Cow::Owned(matcher.replace_all(text, &[REDACTED].repeat(self.patterns)))
    }

    /// Scrubs every string (keys and values) inside a JSON value in place.
    pub fn scrub_json(&self, value: &mut serde_json::Value) {
        if self.matcher.is_none() {
            return;
        }
        match value {
            serde_json::Value::String(s) => {
                if let Cow::Owned(clean) = self.scrub(s) {
                    *s = clean;
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| self.scrub_json(v)),
            serde_json::Value::Object(map) => {
                let dirty: Vec<String> = map
                    .keys()
                    .filter(|k| matches!(self.scrub(k), Cow::Owned(_)))
                    .cloned()
                    .collect();
                for key in dirty {
                    if let Some(v) = map.remove(&key) {
                        map.insert(self.scrub(&key).into_owned(), v);
                    }
                }
                map.values_mut().for_each(|v| self.scrub_json(v));
            }
            _ => {}
        }
    }
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrubber")
            .field("patterns", &self.patterns)
            .finish_non_exhaustive()
    }
}

fn encodings(secret: &str, out: &mut Vec<Zeroizing<String>>) {
    out.push(Zeroizing::new(secret.to_owned()));
    if secret.len() < MIN_ENCODED_LEN {
        return;
    }
    let bytes = secret.as_bytes();
    // JSON-escaped (quotes, backslashes, control characters, non-ASCII as written by
    // serde_json, and the \uXXXX form some encoders use for everything non-ASCII).
    if let Ok(json) = serde_json::to_string(secret) {
        out.push(Zeroizing::new(json[1..json.len() - 1].to_owned()));
    }
    let ascii_escaped: String = secret
        .chars()
        .map(|c| {
            if c.is_ascii() && !c.is_ascii_control() && c != '"' && c != '\\' {
                c.to_string()
            } else {
                let mut buf = [0u16; 2];
                c.encode_utf16(&mut buf)
                    .iter()
                    .map(|u| format!("\\u{u:04x}"))
                    .collect()
            }
        })
        .collect();
    out.push(Zeroizing::new(ascii_escaped));
    // URL-encoded, both strict (every non-alphanumeric) and form-style.
    let strict: String =
        percent_encoding::utf8_percent_encode(secret, percent_encoding::NON_ALPHANUMERIC).collect();
    out.push(Zeroizing::new(strict.clone()));
    out.push(Zeroizing::new(strict.to_ascii_lowercase()));
    out.push(Zeroizing::new(strict.replace("%20", "+")));
    // Hex, both cases.
    out.push(Zeroizing::new(hex::encode(bytes)));
    out.push(Zeroizing::new(hex::encode_upper(bytes)));
    // Base64 at each of the three alignments the secret can sit at inside a longer value
    // (e.g. `user:password` in a Basic header), standard and URL-safe alphabets. Only the
    // characters determined by the secret's bytes alone are kept.
    for offset in 0..3usize {
        let mut buf = Zeroizing::new(vec![0u8; offset]);
        buf.extend_from_slice(bytes);
        let total_bits = buf.len() * 8;
        let skip = match offset {
            0 => 0,
            1 => 2,
            _ => 3,
        };
        let keep_until = total_bits / 6;
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let encoded = Zeroizing::new(engine.encode(&*buf));
            if keep_until > skip + 2 {
                out.push(Zeroizing::new(encoded[skip..keep_until].to_owned()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD;

    const CANARY: &str = "CANARY-s3cr3t/value+x";

    #[test]
    fn every_encoding_is_redacted() {
        let s = Scrubber::new([CANARY]);
        let forms = [
            CANARY.to_owned(),
            STANDARD.encode(CANARY),
            URL_SAFE_NO_PAD.encode(CANARY),
            STANDARD.encode(format!("user:{CANARY}")),
            STANDARD.encode(format!("ab:{CANARY}")),
            STANDARD.encode(format!("a{CANARY}")),
            percent_encoding::utf8_percent_encode(CANARY, percent_encoding::NON_ALPHANUMERIC)
                .to_string(),
            serde_json::to_string(CANARY).unwrap_or_default(),
            hex::encode(CANARY),
            hex::encode_upper(CANARY),
        ];
        for form in forms {
            let text = format!("before {form} after");
            let out = s.scrub(&text);
            assert!(out.contains(REDACTED), "{form} was not redacted: {out}");
            assert!(!out.contains(CANARY), "{out}");
            assert!(
                out.starts_with("before ") && out.ends_with(" after"),
                "{out}"
            );
        }
    }

    #[test]
    fn text_without_secrets_is_borrowed_unchanged() {
        let s = Scrubber::new([CANARY]);
        assert!(matches!(
            s.scrub("nothing here"),
            Cow::Borrowed("nothing here")
        ));
    }

    #[test]
    fn json_keys_and_values_are_scrubbed() {
        let s = Scrubber::new([CANARY]);
        let mut v = serde_json::json!({ CANARY: [format!("x{CANARY}")], "ok": 1 });
        s.scrub_json(&mut v);
        let text = v.to_string();
        assert!(!text.contains(CANARY), "{text}");
        assert_eq!(v["ok"], 1);
    }
}
