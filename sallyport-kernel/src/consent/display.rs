//! What a human reads: every field of a consent request written so that it cannot rewrite the
//! rest of the prompt.
//!
//! The agent writes the note and most object values; the request summary carries the agent's
//! arguments. Written raw, a carriage return, a newline or an ANSI escape sequence can paint
//! a fake `Request:` line over the real one, a bidi override (U+202E) can reverse what a
//! reader sees, and zero-width or tag characters can hide text. [`escape`] writes each such
//! character as a visible escape (`\n`, `\r`, `\t`, `\u{1b}`, `\u{202e}`); everything else is
//! shown as it is.
//!
//! Nothing is cut: a prompt is shown in full or not at all. A request whose display form is
//! longer than [`MAX_SHOWN_BYTES`] is refused before anyone is asked (`arguments_too_large`),
//! so padding one field can never push a later one (`recipient`, `amount`) out of sight.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde::Serialize;

use super::ConsentRequest;

/// The longest display form (all fields together, after escaping) a consent prompt shows. A
/// longer request is refused with `arguments_too_large` before any provider is asked.
pub const MAX_SHOWN_BYTES: usize = 16 * 1024;

/// Whether `c` must be escaped before a human reads it: control characters (C0, DEL, C1,
/// which include ESC and so every ANSI sequence), bidi embeddings, overrides, isolates and
/// marks, line and paragraph separators, and invisible format characters (zero-width
/// characters, word joiners, the byte-order mark, interlinear annotations, variation
/// selectors, tag characters).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{061C}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{17B4}'
                | '\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E0FFF}'
        )
}

/// `text` with every character that could change how a prompt reads (see the module docs)
/// written as a visible escape. Borrowed when nothing needed escaping.
///
/// ```
/// use sallyport_core::consent::escape;
/// assert_eq!(escape("ship it"), "ship it");
/// assert_eq!(
///     escape("ok\r\nRequest: GET /harmless\u{1b}[2K"),
///     "ok\\r\\nRequest: GET /harmless\\u{1b}[2K"
/// );
/// assert_eq!(escape("invoice \u{202e}fdp.exe"), "invoice \\u{202e}fdp.exe");
/// ```
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                // Writing to a String cannot fail.
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// One object of a consent request, escaped for display.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct DisplayedObject {
    /// The scope kind.
    pub kind: String,
    /// The input field that names it.
    pub field: String,
    /// The identifier, escaped.
    pub value: String,
}

/// The display form of a [`ConsentRequest`]: every human-facing field passed through
/// [`escape`], nothing cut. The request's other fields stay raw (scrubbed of secrets, not
/// escaped) for programs; show a human only this.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ConsentDisplay {
    /// The action's name.
    pub action: String,
    /// The action's summary.
    pub summary: String,
    /// The channel's summary of the exact request.
    pub request: String,
    /// The objects the call names.
    pub objects: Vec<DisplayedObject>,
    /// The agent's stated reason.
    pub note: Option<String>,
}

impl ConsentDisplay {
    /// The display form of `request`'s raw fields.
    pub fn of(request: &ConsentRequest) -> Self {
        Self {
            action: escape(&request.action).into_owned(),
            summary: escape(&request.summary).into_owned(),
            request: escape(&request.request).into_owned(),
            objects: request
                .objects
                .iter()
                .map(|o| DisplayedObject {
                    kind: escape(&o.kind).into_owned(),
                    field: escape(&o.field).into_owned(),
                    value: escape(&o.value).into_owned(),
                })
                .collect(),
            note: request.note.as_deref().map(|n| escape(n).into_owned()),
        }
    }

    /// Bytes of text this display shows, all fields together (compared with
    /// [`MAX_SHOWN_BYTES`]).
    pub fn shown_bytes(&self) -> usize {
        self.action.len()
            + self.summary.len()
            + self.request.len()
            + self
                .objects
                .iter()
                .map(|o| o.kind.len() + o.field.len() + o.value.len())
                .sum::<usize>()
            + self.note.as_ref().map_or(0, String::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_breaks_ansi_and_bidi_characters_are_written_as_visible_escapes() {
        assert_eq!(
            escape("a\r\nRequest: GET /x\u{1b}[1A\u{1b}[2K\u{7}"),
            "a\\r\\nRequest: GET /x\\u{1b}[1A\\u{1b}[2K\\u{7}"
        );
        assert_eq!(
            escape("\u{202e}\u{2066}\u{200f}\u{061c}"),
            "\\u{202e}\\u{2066}\\u{200f}\\u{61c}"
        );
        assert_eq!(escape("\u{9b}31m"), "\\u{9b}31m", "C1 CSI");
        assert_eq!(escape("a\u{2028}b\u{2029}c"), "a\\u{2028}b\\u{2029}c");
        assert_eq!(escape("x\u{200b}y\u{feff}"), "x\\u{200b}y\\u{feff}");
        assert_eq!(escape("tag\u{e0041}"), "tag\\u{e0041}");
    }

    #[test]
    fn ordinary_text_including_non_latin_scripts_is_left_as_it_is() {
        for text in [
            "ship the fix",
            "Überweisung an Zoë",
            "請求書",
            "مرحبا",
            "a\\nb",
        ] {
            assert!(
                matches!(escape(text), Cow::Borrowed(t) if t == text),
                "{text}"
            );
        }
    }
}
