//! The wave-1 scrubber (sallyport-core/src/scrub.rs at a4951c6), kept only as the baseline the
//! scrub bench measures the current scrubber against in the same run. Not used anywhere else.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "a frozen copy; the bench calls `new` and `scrub` only"
)]

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, AhoCorasickKind, Anchored, Input, MatchKind, StartKind};
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
/// // Base64: the characters fixed by the secret's bytes alone are removed.
/// assert_eq!(s.scrub("aHVudGVyMi1jYW5hcnk="), "[REDACTED]k=");
/// assert!(!s.scrub("68756e746572322d63616e617279").contains("6e746572"));
/// ```
pub struct Scrubber {
    matcher: Option<AhoCorasick>,
    /// A bit set over a hash of every pattern's first four bytes; present when every pattern
    /// is at least four bytes long. A text position whose four bytes miss it cannot start a
    /// match, so the automaton only runs (anchored) where the filter hits.
    filter: Option<Box<[u64]>>,
    patterns: usize,
}

/// log2 of the filter's size in bits: 2^18 bits = 32 KiB, which stays in the L1/L2 cache.
const FILTER_BITS: u32 = 18;

fn filter_slot(window: [u8; 4]) -> usize {
    (u32::from_le_bytes(window).wrapping_mul(0x9E37_79B1) >> (32 - FILTER_BITS)) as usize
}

impl Scrubber {
    /// A scrubber that knows no secrets.
    pub fn empty() -> Self {
        Self {
            matcher: None,
            filter: None,
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
        // A full DFA scans at memory speed whatever the pattern count (token alphabets defeat
        // the prefilters); fall back to the automatic choice if it would be too large.
        let build = |kind: Option<AhoCorasickKind>| {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .start_kind(StartKind::Both)
                .kind(kind)
                .byte_classes(true)
                .build(patterns.iter().map(|p| p.as_bytes()))
                .ok()
        };
        let matcher = build(Some(AhoCorasickKind::DFA)).or_else(|| build(None));
        let filter = patterns.iter().all(|p| p.len() >= 4).then(|| {
            let mut bits = vec![0u64; (1usize << FILTER_BITS) / 64].into_boxed_slice();
            for p in &patterns {
                let b = p.as_bytes();
                let slot = filter_slot([b[0], b[1], b[2], b[3]]);
                bits[slot >> 6] |= 1 << (slot & 63);
            }
            bits
        });
        Self {
            patterns: patterns.len(),
            matcher,
            filter,
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
        let Some((start, end)) = self.find_from(matcher, text.as_bytes(), 0) else {
            return Cow::Borrowed(text);
        };
        // Patterns are whole UTF-8 strings, so match bounds fall on character boundaries.
        let mut out = String::with_capacity(text.len());
        out.push_str(&text[..start]);
        out.push_str(REDACTED);
        let mut at = end;
        while let Some((start, end)) = self.find_from(matcher, text.as_bytes(), at) {
            out.push_str(&text[at..start]);
            out.push_str(REDACTED);
            at = end;
        }
        out.push_str(&text[at..]);
        Cow::Owned(out)
    }

    /// The leftmost-longest match starting at or after `from`.
    fn find_from(&self, matcher: &AhoCorasick, text: &[u8], from: usize) -> Option<(usize, usize)> {
        let Some(filter) = &self.filter else {
            return matcher
                .find(Input::new(text).span(from..text.len()))
                .map(|m| (m.start(), m.end()));
        };
        let rest = text.get(from..)?;
        for (offset, window) in rest.windows(4).enumerate() {
            let slot = filter_slot([window[0], window[1], window[2], window[3]]);
            if filter[slot >> 6] & (1 << (slot & 63)) == 0 {
                continue;
            }
            let at = from + offset;
            let input = Input::new(text)
                .span(at..text.len())
                .anchored(Anchored::Yes);
            if let Some(m) = matcher.find(input) {
                return Some((m.start(), m.end()));
            }
        }
        None
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

/// Shortest line of a multi-line secret (a PEM private key) that is matched on its own.
const MIN_LINE_LEN: usize = 16;

fn encodings(secret: &str, out: &mut Vec<Zeroizing<String>>) {
    out.push(Zeroizing::new(secret.to_owned()));
    // A multi-line secret (an SSH private key) can leak one line at a time, or with other
    // line endings: every long line is a pattern of its own. `-----BEGIN …` / `-----END …`
    // armour lines are public and skipped.
    if secret.contains('\n') {
        for line in secret.lines().map(str::trim) {
            if line.len() >= MIN_LINE_LEN && !line.starts_with("-----") {
                out.push(Zeroizing::new(line.to_owned()));
            }
        }
    }
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
