//! The scrubber: removes unlocked secret values, in their common encodings, from every string
//! that leaves the executor.
//!
//! The vault builds one [`Scrubber`] over every unlocked value (and SSH key passphrase, and
//! the values replaced or removed since it was unlocked) and caches it until a credential
//! changes or the vault locks. Each call takes the vault's scrubber once, when it resolves its
//! credential (stage 6), extended with that credential if the vault's does not know it, and
//! uses it for every string of that call: the consent request, the journal's arguments, the
//! result, the audit record, the record of a cancelled call, and the channel's own cut texts
//! (through [`DispatchContext::scrubber`](crate::channel::DispatchContext::scrubber)). Locking
//! the vault or rotating the credential during the call cannot empty it.
//!
//! Text is scrubbed before it is cut ([`Scrubber::bounded`], [`Scrubber::bounded_tail`]), and
//! a fragment of a secret form left at a cut ([`Scrubber::scrub_head`],
//! [`Scrubber::scrub_tail`]) is redacted.
//!
//! Tracing output is kept secret-free by construction rather than by scrubbing: the executor
//! and the vaults log attempt ids, action names, paths and error kinds only — never argument
//! values, credential values, request or response bodies. `tests/tests/canary.rs` captures every
//! tracing line at TRACE level across the executor scenarios and checks that a canary
//! credential appears in none of them, in any encoding.
//!
//! Matching hashes every 4-byte window into a 32 KiB bit set of the patterns' first four bytes
//! and runs one anchored Aho-Corasick DFA only where the set hits, so the cost per byte barely
//! grows with the number of secrets (benchmark `tests/benches/scrub.rs`: 50 secrets, target at most
//! 2 µs per KiB).

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, AhoCorasickKind, Anchored, Input, MatchKind, StartKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use zeroize::Zeroizing;

/// What a scrubbed secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// What marks a cut in a bounded text ([`Scrubber::bounded`], [`Scrubber::bounded_tail`]).
pub const CUT: &str = "…";

/// Shortest fragment of a secret form left at a cut that is redacted: a text cut in the
/// middle of a secret keeps its first (or, for a tail, its last) bytes, which no pattern
/// matches whole; a fragment of this many bytes or more that begins (or ends) a known form is
/// replaced by [`REDACTED`].
pub const MIN_CUT_FRAGMENT: usize = 8;

/// Shortest secret the scrubber looks for in encoded forms; shorter values are matched raw
/// only (a 2-byte base64 fragment would redact ordinary text).
const MIN_ENCODED_LEN: usize = 4;

/// How far back from a cut a fragment is looked for (longer forms are caught by their
/// inner patterns: lines of a key, base64 fragments).
const MAX_CUT_LOOKBACK: usize = 4096;

/// Form-urlencoded (WHATWG `application/x-www-form-urlencoded`, what `reqwest` and
/// `url::form_urlencoded` send for a query API key): `*-._` stay bare, space becomes `+`.
const FORM: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'*')
    .remove(b'-')
    .remove(b'.')
    .remove(b'_');
/// RFC 3986 unreserved characters stay bare (`-._~`): most URL libraries' path and query encoders.
const RFC3986: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');
/// JavaScript's `encodeURIComponent`: also `!*'()` bare.
const URI_COMPONENT: &AsciiSet = &RFC3986
    .remove(b'!')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');
/// Python's `urllib.parse.quote` with its default `safe="/"`.
const PY_QUOTE: &AsciiSet = &RFC3986.remove(b'/');

/// Finds secret values in text, raw or encoded, and replaces them with [`REDACTED`].
///
/// The forms: raw; JSON-escaped (as serde_json writes it, with every non-ASCII character as
/// `\uXXXX`, and either with `/` written `\/`); percent-encoded as the common encoders write
/// it (every non-alphanumeric byte, form-urlencoded with `+` for space, RFC 3986,
/// `encodeURIComponent`, Python's `quote()`); hex; and base64 at each of the three alignments,
/// standard and URL-safe, with or without padding. Matching ignores ASCII case, so
/// lowercase percent-hex and both hex cases are found (a value differing from a secret only
/// in letter case is redacted too: the scrubber errs towards removing).
///
/// ```
/// use sallyport_core::scrub::Scrubber;
/// let s = Scrubber::new(["hunter2-canary"]);
/// assert_eq!(s.scrub("token=hunter2-canary"), "token=[REDACTED]");
/// // Base64: the characters fixed by the secret's bytes alone are removed.
/// assert_eq!(s.scrub("aHVudGVyMi1jYW5hcnk="), "[REDACTED]k=");
/// assert!(!s.scrub("68756e746572322d63616e617279").contains("6e746572"));
/// // Scrubbed first, then cut: a cut never splits the marker.
/// assert_eq!(s.bounded("token=hunter2-canary and more", 20), "token=[REDACTED] and…");
/// // A text someone else cut in the middle of the secret: the fragment is redacted too.
/// assert_eq!(s.scrub_head("token=hunter2-ca"), "token=[REDACTED]");
/// ```
pub struct Scrubber {
    matcher: Option<AhoCorasick>,
    /// A bit set over a hash of every pattern's first four bytes, in every ASCII case; present
    /// when every pattern is at least four bytes long. A text position whose four bytes miss
    /// it cannot start a match, so the automaton only runs (anchored) where the filter hits.
    filter: Option<Box<[u64]>>,
    /// Every form, ASCII-lowercased, sorted: the automaton's patterns, kept to find a
    /// fragment at a cut and to extend the scrubber.
    forms: Box<[Zeroizing<Vec<u8>>]>,
    /// Every form reversed, sorted: to find the end of a form at the start of a tail.
    reversed: Box<[Zeroizing<Vec<u8>>]>,
    longest: usize,
}

/// log2 of the filter's size in bits: 2^18 bits = 32 KiB, which stays in the L1/L2 cache.
const FILTER_BITS: u32 = 18;

fn filter_slot(window: u32) -> usize {
    (window.wrapping_mul(0x9E37_79B1) >> (32 - FILTER_BITS)) as usize
}

impl Scrubber {
    /// A scrubber that knows no secrets.
    pub fn empty() -> Self {
        Self {
            matcher: None,
            filter: None,
            forms: Box::new([]),
            reversed: Box::new([]),
            longest: 0,
        }
    }

    /// A scrubber for these secret values.
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Self {
        Self::from_forms(forms_of(secrets))
    }

    /// This scrubber plus `secrets`: the forms of both in one automaton.
    pub fn extended<'a>(&self, secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let mut forms = forms_of(secrets);
        forms.extend(self.forms.iter().cloned());
        Self::from_forms(forms)
    }

    /// Whether `secret` is one of the values this scrubber was built from.
    pub fn covers(&self, secret: &str) -> bool {
        secret.is_empty() || self.scrub(secret) == REDACTED
    }

    fn from_forms(mut forms: Vec<Zeroizing<Vec<u8>>>) -> Self {
        forms.sort_unstable_by(|a, b| a.as_slice().cmp(b.as_slice()));
        forms.dedup_by(|a, b| a.as_slice() == b.as_slice());
        if forms.is_empty() {
            return Self::empty();
        }
        // A full DFA scans at memory speed whatever the pattern count (token alphabets defeat
        // the prefilters); fall back to the automatic choice if it would be too large.
        let build = |kind: Option<AhoCorasickKind>| {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .start_kind(StartKind::Both)
                .ascii_case_insensitive(true)
                .kind(kind)
                .byte_classes(true)
                .build(forms.iter().map(|p| p.as_slice()))
                .ok()
        };
        let matcher = build(Some(AhoCorasickKind::DFA)).or_else(|| build(None));
        let filter = forms.iter().all(|p| p.len() >= 4).then(|| {
            let mut bits = vec![0u64; (1usize << FILTER_BITS) / 64].into_boxed_slice();
            // Every ASCII case variant of each pattern's first four bytes, so the scan tests
            // the text's bytes as they are (the automaton itself ignores case).
            for p in &forms {
                for variant in 0..16u8 {
                    let mut head = [p[0], p[1], p[2], p[3]];
                    for (i, b) in head.iter_mut().enumerate() {
                        if variant & (1 << i) != 0 {
                            *b = b.to_ascii_uppercase();
                        }
                    }
                    let slot = filter_slot(u32::from_le_bytes(head));
                    bits[slot >> 6] |= 1 << (slot & 63);
                }
            }
            bits
        });
        let mut reversed: Vec<Zeroizing<Vec<u8>>> = forms
            .iter()
            .map(|f| Zeroizing::new(f.iter().rev().copied().collect()))
            .collect();
        reversed.sort_unstable_by(|a, b| a.as_slice().cmp(b.as_slice()));
        Self {
            longest: forms.iter().map(|f| f.len()).max().unwrap_or(0),
            matcher,
            filter,
            forms: forms.into_boxed_slice(),
            reversed: reversed.into_boxed_slice(),
        }
    }

    /// How many encoded patterns the scrubber searches for.
    pub fn pattern_count(&self) -> usize {
        self.forms.len()
    }

    /// `text` with every known secret replaced by [`REDACTED`].
    pub fn scrub<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let Some(matcher) = &self.matcher else {
            return Cow::Borrowed(text);
        };
        let Some((start, end)) = self.find_from(matcher, text.as_bytes(), 0) else {
            return Cow::Borrowed(text);
        };
        // Patterns are whole UTF-8 strings and case folding touches ASCII letters only, so
        // match bounds fall on character boundaries.
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
            let slot = filter_slot(u32::from_le_bytes([
                window[0], window[1], window[2], window[3],
            ]));
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

    /// `text` scrubbed first, then cut to at most `max` bytes on a character boundary and
    /// marked with [`CUT`]. A cut never splits a [`REDACTED`] marker, and a fragment of at
    /// least [`MIN_CUT_FRAGMENT`] bytes left at the cut that begins a known secret form is
    /// redacted too (the result, without the mark, stays within `max`).
    pub fn bounded(&self, text: &str, max: usize) -> String {
        let clean = self.scrub(text);
        if clean.len() <= max {
            return clean.into_owned();
        }
        let mut out = self.head_within(&clean, max);
        out.push_str(CUT);
        out
    }

    /// The last `max` bytes of `text`, scrubbed first, marked with a leading [`CUT`]; a
    /// leading fragment that ends a known secret form is redacted (see
    /// [`Scrubber::bounded`]).
    pub fn bounded_tail(&self, text: &str, max: usize) -> String {
        let clean = self.scrub(text);
        if clean.len() <= max {
            return clean.into_owned();
        }
        let mut start = clean.len() - max;
        while !clean.is_char_boundary(start) {
            start += 1;
        }
        // Do not start inside a marker.
        let before = start.saturating_sub(REDACTED.len() - 1);
        if let Some(i) = clean[before..].find(REDACTED).map(|i| before + i)
            && i < start
        {
            start = i + REDACTED.len();
        }
        let mut out = String::from(CUT);
        out.push_str(&self.tail_clean(&clean[start..]));
        out
    }

    /// A text cut off at its end by someone else (the capped head of a stream): scrubbed,
    /// and a trailing fragment of a secret form redacted.
    pub fn scrub_head(&self, text: &str) -> String {
        self.head_within(&self.scrub(text), usize::MAX)
    }

    /// A text whose beginning was cut off (the tail of a stream): scrubbed, and a leading
    /// fragment of a secret form redacted.
    pub fn scrub_tail(&self, text: &str) -> String {
        let clean = self.scrub(text);
        self.tail_clean(&clean)
    }

    /// At most `max` bytes of the start of the scrubbed `clean`, with a trailing fragment
    /// redacted.
    fn head_within(&self, clean: &str, max: usize) -> String {
        let mut limit = max;
        loop {
            let mut end = limit.min(clean.len());
            while !clean.is_char_boundary(end) {
                end -= 1;
            }
            // Do not split a marker.
            let before = end.saturating_sub(REDACTED.len() - 1);
            if let Some(i) = clean[before..].find('[').map(|i| before + i)
                && clean[i..].starts_with(REDACTED)
                && i + REDACTED.len() > end
            {
                end = i;
            }
            let head = &clean[..end];
            let Some(at) = self.fragment_at_end(head) else {
                return head.to_owned();
            };
            if at + REDACTED.len() <= max {
                return format!("{}{REDACTED}", &head[..at]);
            }
            // No room for the marker: cut before the fragment and look again.
            match max.checked_sub(REDACTED.len()) {
                Some(l) if l < limit => limit = l.min(at),
                _ => return String::new(),
            }
        }
    }

    /// `clean` with a leading fragment of a secret form redacted.
    fn tail_clean(&self, clean: &str) -> String {
        match self.fragment_at_start(clean) {
            Some(end) => format!("{REDACTED}{}", &clean[end..]),
            None => clean.to_owned(),
        }
    }

    /// Where the longest suffix of `text` (at least [`MIN_CUT_FRAGMENT`] bytes) that is a
    /// proper prefix of a form starts.
    fn fragment_at_end(&self, text: &str) -> Option<usize> {
        let bytes = text.as_bytes();
        let reach = self.longest.saturating_sub(1).min(MAX_CUT_LOOKBACK);
        let first = bytes.len().saturating_sub(reach);
        let last = bytes.len().checked_sub(MIN_CUT_FRAGMENT)?;
        (first..=last).find(|&s| {
            text.is_char_boundary(s)
                && begins_a_form(&self.forms, bytes[s..].iter().map(u8::to_ascii_lowercase))
        })
    }

    /// Where the longest prefix of `text` (at least [`MIN_CUT_FRAGMENT`] bytes) that is a
    /// proper suffix of a form ends.
    fn fragment_at_start(&self, text: &str) -> Option<usize> {
        let bytes = text.as_bytes();
        let reach = self
            .longest
            .saturating_sub(1)
            .min(MAX_CUT_LOOKBACK)
            .min(bytes.len());
        (MIN_CUT_FRAGMENT..=reach).rev().find(|&e| {
            text.is_char_boundary(e)
                && begins_a_form(
                    &self.reversed,
                    bytes[..e].iter().rev().map(u8::to_ascii_lowercase),
                )
        })
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

/// Whether the byte string `fragment` is a proper prefix of one of the sorted `forms`.
fn begins_a_form(
    forms: &[Zeroizing<Vec<u8>>],
    mut fragment: impl Iterator<Item = u8> + Clone,
) -> bool {
    // The smallest form not below the fragment starts with it, if any form does.
    let at = forms.partition_point(|f| f.iter().copied().cmp(fragment.clone()).is_lt());
    forms.get(at).is_some_and(|f| {
        let mut form = f.iter().copied();
        fragment.all(|b| form.next() == Some(b)) && form.next().is_some()
    })
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrubber")
            .field("patterns", &self.forms.len())
            .finish_non_exhaustive()
    }
}

/// Shortest line of a multi-line secret (a PEM private key) that is matched on its own.
const MIN_LINE_LEN: usize = 16;

/// Every form of every secret, ASCII-lowercased.
fn forms_of<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Vec<Zeroizing<Vec<u8>>> {
    let mut patterns: Vec<Zeroizing<String>> = Vec::new();
    for secret in secrets {
        if secret.is_empty() {
            continue;
        }
        encodings(secret, &mut patterns);
    }
    patterns
        .iter()
        .map(|p| Zeroizing::new(p.as_bytes().to_ascii_lowercase()))
        .collect()
}

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
    // serde_json, and the \uXXXX form some encoders use for everything non-ASCII), each also
    // with `/` escaped as `\/` (PHP's json_encode, some Java encoders).
    let mut json_forms = Vec::new();
    if let Ok(json) = serde_json::to_string(secret) {
        json_forms.push(Zeroizing::new(json[1..json.len() - 1].to_owned()));
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
    json_forms.push(Zeroizing::new(ascii_escaped));
    if secret.contains('/') {
        let slashed: Vec<Zeroizing<String>> = json_forms
            .iter()
            .map(|j| Zeroizing::new(j.replace('/', "\\/")))
            .collect();
        json_forms.extend(slashed);
    }
    out.extend(json_forms);
    // Percent-encoded the ways common encoders write it (hex case does not matter: the
    // matcher ignores ASCII case). Space is `%20` or `+`.
    for set in [NON_ALPHANUMERIC, FORM, RFC3986, URI_COMPONENT, PY_QUOTE] {
        let encoded = Zeroizing::new(utf8_percent_encode(secret, set).collect::<String>());
        if secret.contains(' ') {
            out.push(Zeroizing::new(encoded.replace("%20", "+")));
        }
        out.push(encoded);
    }
    // Hex (either case: the matcher ignores ASCII case).
    out.push(Zeroizing::new(hex::encode(bytes)));
    // Base64 at each of the three alignments the secret can sit at inside a longer value
    // (e.g. `user:password` in a Basic header), standard and URL-safe alphabets. Only the
    // characters determined by the secret's bytes alone are kept, so the pattern matches with
    // or without padding.
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

    #[test]
    fn fifty_secrets_are_found_at_every_position_including_the_ends() {
        let secrets: Vec<String> = (0..50).map(|i| format!("sec{i:02}-Zq9/x+y")).collect();
        let s = Scrubber::new(secrets.iter().map(String::as_str));
        assert!(s.filter.is_some());
        for secret in &secrets {
            for text in [
                secret.clone(),
                format!("{secret}tail"),
                format!("head{secret}"),
                format!("é{secret}é{secret}"),
                format!("{}{secret}", "x".repeat(1000)),
            ] {
                let out = s.scrub(&text);
                assert!(!out.contains(secret.as_str()), "{out}");
                assert!(out.contains(REDACTED), "{out}");
            }
        }
        assert_eq!(s.scrub("sec0"), "sec0");
        assert_eq!(
            s.scrub("a sec07-Zq9/x+ysec08-Zq9/x+y b"),
            "a [REDACTED][REDACTED] b"
        );
    }

    /// The issue's canary: every character an URL encoder treats differently.
    const URLISH: &str = "sk-live/Ab+12=x.y_z~Q";

    /// Percent-encodes every byte except ASCII alphanumerics and `bare`, with `hex` digits.
    fn percent(secret: &str, bare: &str, upper: bool) -> String {
        secret
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || bare.as_bytes().contains(&b) {
                    (b as char).to_string()
                } else if upper {
                    format!("%{b:02X}")
                } else {
                    format!("%{b:02x}")
                }
            })
            .collect()
    }

    #[test]
    fn a_secret_with_url_special_characters_is_redacted_as_every_encoder_writes_it() {
        let s = Scrubber::new([URLISH]);
        let json = serde_json::to_string(URLISH).unwrap_or_default();
        let json = &json[1..json.len() - 1];
        let mut forms = vec![
            URLISH.to_owned(),
            // form-urlencoded (WHATWG, reqwest's query): `*-._` bare.
            percent(URLISH, "*-._", true),
            // RFC 3986 unreserved / most path encoders.
            percent(URLISH, "-._~", true),
            // encodeURIComponent.
            percent(URLISH, "-_.!~*'()", true),
            // Python quote() with safe="/".
            percent(URLISH, "-._~/", true),
            // Every non-alphanumeric, both hex cases, and mixed.
            percent(URLISH, "", true),
            percent(URLISH, "", false),
            percent(URLISH, "-._~", false),
            "sk-live%2fAb%2B12%3dx.y_z~Q".to_owned(),
            // JSON, with and without `\/`.
            json.to_owned(),
            json.replace('/', "\\/"),
            hex::encode(URLISH),
            hex::encode_upper(URLISH),
        ];
        for prefix in ["", "u:", "ab:"] {
            let bytes = format!("{prefix}{URLISH}");
            forms.push(STANDARD.encode(&bytes));
            forms.push(STANDARD_NO_PAD.encode(&bytes));
            forms.push(URL_SAFE_NO_PAD.encode(&bytes));
            forms.push(base64::engine::general_purpose::URL_SAFE.encode(&bytes));
        }
        for form in forms {
            let text = format!("echo: {form} end");
            let out = s.scrub(&text);
            assert!(out.contains(REDACTED), "{form} was not redacted: {out}");
            // What is left of the form is at most the few characters made of other bytes.
            let left = out.len() - "echo:  end".len() - REDACTED.len();
            assert!(left <= 5, "{form} left {left} bytes: {out}");
        }
    }

    #[test]
    fn a_text_cut_inside_a_secret_keeps_no_fragment_of_eight_bytes_or_more() {
        let s = Scrubber::new([URLISH]);
        let forms = [
            URLISH.to_owned(),
            percent(URLISH, "*-._", true),
            percent(URLISH, "", false),
            hex::encode(URLISH),
        ];
        for form in &forms {
            for k in MIN_CUT_FRAGMENT..form.len() {
                // A head cut after k bytes of the form, and a tail starting k bytes before its end.
                let head = format!("status: {}", &form[..k]);
                assert_eq!(s.scrub_head(&head), "status: [REDACTED]", "{head}");
                let tail = format!("{} failed", &form[form.len() - k..]);
                assert_eq!(s.scrub_tail(&tail), "[REDACTED] failed", "{tail}");
            }
        }
        // Seven bytes are not enough to tell a secret from ordinary text.
        assert_eq!(s.scrub_head("status: sk-live"), "status: sk-live");
        // Only at the cut: the same bytes elsewhere are left alone.
        assert_eq!(s.scrub_head("sk-live/A is it"), "sk-live/A is it");
    }

    #[test]
    fn bounded_text_is_scrubbed_before_the_cut_and_never_splits_a_marker() {
        let s = Scrubber::new([URLISH]);
        let text = format!("{}{URLISH}{}", "a".repeat(490), "b".repeat(100));
        // The marker ends at byte 500: kept whole; one byte less and it is dropped whole.
        assert_eq!(
            s.bounded(&text, 500),
            format!("{}[REDACTED]…", "a".repeat(490))
        );
        assert_eq!(s.bounded(&text, 499), format!("{}…", "a".repeat(490)));
        assert_eq!(
            s.bounded(&text, 505),
            format!("{}[REDACTED]bbbbb…", "a".repeat(490))
        );
        // The upstream had already cut its echo 12 bytes into the secret; our cut lands
        // right after it: the fragment is redacted and the result stays within the limit.
        let precut = format!("{}{}{}", "a".repeat(485), &URLISH[..12], "z".repeat(40));
        let out = s.bounded(&precut, 497);
        assert_eq!(out, format!("{}[REDACTED]…", "a".repeat(485)));
        // No room for the marker: the cut moves before the fragment.
        let out = s.bounded(&precut, 494);
        assert_eq!(out, format!("{}…", "a".repeat(484)));
        // Seven bytes of it are left as they are (see `MIN_CUT_FRAGMENT`).
        let out = s.bounded(&precut, 492);
        assert_eq!(out, format!("{}sk-live…", "a".repeat(485)));
        // Tails: the cut falls inside the secret's marker; no fragment, no split marker.
        let text = format!("{}{URLISH} tail", "x".repeat(50));
        assert_eq!(s.bounded_tail(&text, 12), "… tail");
        let cut = format!("{} tail", &URLISH[5..]);
        assert_eq!(s.scrub_tail(&cut), "[REDACTED] tail");
        assert_eq!(
            s.bounded_tail(&format!("zz{cut}"), cut.len()),
            "…[REDACTED] tail"
        );
        // Without secrets the cut is a plain cut on a character boundary.
        assert_eq!(Scrubber::empty().bounded("ééé", 3), "é…");
    }

    #[test]
    fn an_extended_scrubber_knows_both_sets_and_covers_reports_membership() {
        let vault = Scrubber::new(["first-secret-1"]);
        assert!(vault.covers("first-secret-1"));
        assert!(!vault.covers("second-secret-2"));
        let call = vault.extended(["second-secret-2"]);
        assert_eq!(
            call.scrub("first-secret-1 second-secret-2"),
            "[REDACTED] [REDACTED]"
        );
        assert!(call.covers("second-secret-2"));
        assert_eq!(
            call.pattern_count(),
            vault.pattern_count() + Scrubber::new(["second-secret-2"]).pattern_count()
        );
    }

    #[test]
    fn a_secret_written_in_any_letter_case_passes_the_filter_and_is_redacted() {
        // The filter holds every case variant of each pattern's first four bytes; the
        // automaton ignores case: hex and percent-hex come in either case.
        let s = Scrubber::new(["abCD-secret-9f"]);
        for text in [
            "x ABCD-SECRET-9F y",
            "x abcd-secret-9f y",
            "x AbCd-SeCrEt-9F y",
        ] {
            assert_eq!(s.scrub(text), "x [REDACTED] y", "{text}");
        }
        let hex_upper = hex::encode_upper("abCD-secret-9f");
        assert_eq!(s.scrub(&format!("<{hex_upper}>")), "<[REDACTED]>");
    }

    #[test]
    fn a_secret_shorter_than_four_bytes_is_matched_raw_without_the_filter() {
        let s = Scrubber::new(["abc", "longer-secret-1"]);
        assert!(s.filter.is_none());
        assert_eq!(s.scrub("xabcx longer-secret-1"), "x[REDACTED]x [REDACTED]");
    }
}
