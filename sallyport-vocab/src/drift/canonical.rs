//! Canonical JSON (RFC 8785 / JCS) for hashing definitions.

use serde_json::Value;

/// Writes `value` as canonical JSON: object keys sorted by their UTF-16 code units, no
/// whitespace, strings escaped as JCS prescribes, numbers in their shortest round-trip form
/// (integers without a fraction; other numbers as ECMAScript prints them).
pub fn canonical_json(value: &Value) -> String {
    // Most values hashed per call (an action's arguments) fit: one allocation, no regrowth.
    let mut out = String::with_capacity(256);
    write_value(value, &mut out);
    out
}

/// The length in bytes of [`canonical_json`]`(value)`, counted without writing it (the
/// executor's argument-size limit, checked on every call).
pub fn canonical_len(value: &Value) -> usize {
    let mut len = Len(0);
    write_value(value, &mut len);
    len.0
}

/// Where canonical JSON goes: a `String`, or a count of its bytes.
trait Sink: std::fmt::Write {
    /// Whether object keys must be written in canonical order (a count does not care).
    const ORDERED: bool;
    fn text(&mut self, s: &str);
    fn char(&mut self, c: char);
}

impl Sink for String {
    const ORDERED: bool = true;
    fn text(&mut self, s: &str) {
        self.push_str(s);
    }
    fn char(&mut self, c: char) {
        self.push(c);
    }
}

/// Counts the bytes it is given.
struct Len(usize);

impl std::fmt::Write for Len {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

impl Sink for Len {
    const ORDERED: bool = false;
    fn text(&mut self, s: &str) {
        self.0 += s.len();
    }
    fn char(&mut self, c: char) {
        self.0 += c.len_utf8();
    }
}

fn write_value<S: Sink>(value: &Value, out: &mut S) {
    match value {
        Value::Null => out.text("null"),
        Value::Bool(b) => out.text(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.char('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.char(',');
                }
                write_value(item, out);
            }
            out.char(']');
        }
        Value::Object(map) => {
            out.char('{');
            let mut write_entry = |i: usize, key: &String, value: &Value| {
                if i > 0 {
                    out.char(',');
                }
                write_string(key, out);
                out.char(':');
                write_value(value, out);
            };
            if S::ORDERED {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
                for (i, key) in keys.into_iter().enumerate() {
                    write_entry(i, key, &map[key]);
                }
            } else {
                for (i, (key, value)) in map.iter().enumerate() {
                    write_entry(i, key, value);
                }
            }
            out.char('}');
        }
    }
}

fn write_number(n: &serde_json::Number, out: &mut impl Sink) {
    // Writing to a `String` or a count cannot fail.
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(f) = n.as_f64() {
        out.text(&ecmascript_number(f));
    }
}

/// ECMAScript `Number.prototype.toString` for finite doubles.
fn ecmascript_number(f: f64) -> String {
    if f == 0.0 {
        return "0".to_owned();
    }
    if f.fract() == 0.0 && f.abs() < 1e21 {
        return format!("{f:.0}");
    }
    // Shortest round-trip digits from Rust's formatter, laid out per ECMAScript.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let k = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let n = exp + 1;
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n(
            '0',
            usize::try_from(n - k).unwrap_or(0),
        ));
    } else if 0 < n && n <= 21 {
        let split = usize::try_from(n).unwrap_or(0);
        out.push_str(&digits[..split]);
        out.push('.');
        out.push_str(&digits[split..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', usize::try_from(-n).unwrap_or(0)));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        out.push_str(&(n - 1).abs().to_string());
    }
    out
}

fn write_string(s: &str, out: &mut impl Sink) {
    out.char('"');
    for c in s.chars() {
        match c {
            '"' => out.text("\\\""),
            '\\' => out.text("\\\\"),
            '\u{08}' => out.text("\\b"),
            '\u{0c}' => out.text("\\f"),
            '\n' => out.text("\\n"),
            '\r' => out.text("\\r"),
            '\t' => out.text("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.char(c),
        }
    }
    out.char('"');
}

/// SHA-256 (hex) of the canonical form of `value`.
pub fn canonical_hash(value: &Value) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(canonical_json(value).as_bytes()))
}

/// Largest integer magnitude RFC 8785 can represent exactly (2^53): JCS numbers are IEEE-754
/// doubles, so a larger integer would hash like its rounded neighbour.
pub const MAX_EXACT_INTEGER: u64 = 1 << 53;

/// Deepest nesting [`try_canonical_json`] accepts.
pub const MAX_CANONICAL_DEPTH: usize = 128;

/// Why a value has no faithful RFC 8785 form.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CanonicalError {
    /// An integer outside ±2^53 would lose precision as an IEEE-754 double.
    #[error("the integer at {path} is outside ±2^53 and has no exact RFC 8785 form")]
    InexactInteger {
        /// JSON pointer to the number.
        path: String,
    },
    /// The value nests deeper than [`MAX_CANONICAL_DEPTH`].
    #[error("the value nests deeper than {MAX_CANONICAL_DEPTH} levels at {path}")]
    TooDeep {
        /// JSON pointer to where the limit was crossed.
        path: String,
    },
}

/// Like [`canonical_json`], but refuses values RFC 8785 cannot represent faithfully instead
/// of hashing a lossy form: integers beyond ±2^53 and nesting deeper than
/// [`MAX_CANONICAL_DEPTH`].
///
/// # Errors
///
/// The first [`CanonicalError`] found, with its JSON pointer.
pub fn try_canonical_json(value: &Value) -> Result<String, CanonicalError> {
    check_canonicalizable(value, &mut String::new(), 0)?;
    Ok(canonical_json(value))
}

/// Like [`canonical_hash`], but through [`try_canonical_json`].
///
/// # Errors
///
/// The first [`CanonicalError`] found.
pub fn try_canonical_hash(value: &Value) -> Result<String, CanonicalError> {
    use sha2::{Digest, Sha256};
    Ok(hex::encode(Sha256::digest(
        try_canonical_json(value)?.as_bytes(),
    )))
}

fn check_canonicalizable(
    value: &Value,
    path: &mut String,
    depth: usize,
) -> Result<(), CanonicalError> {
    if depth > MAX_CANONICAL_DEPTH {
        return Err(CanonicalError::TooDeep { path: path.clone() });
    }
    match value {
        Value::Number(n) => {
            let exact = match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => i.unsigned_abs() <= MAX_EXACT_INTEGER,
                (None, Some(u)) => u <= MAX_EXACT_INTEGER,
                (None, None) => true,
            };
            if exact {
                Ok(())
            } else {
                Err(CanonicalError::InexactInteger { path: path.clone() })
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                check_canonicalizable(item, path, depth + 1)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Object(map) => {
            for (key, item) in map {
                let len = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                check_canonicalizable(item, path, depth + 1)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rfc8785_examples() {
        assert_eq!(
            canonical_json(&json!({"b": 1, "a": [true, null, "x\n"]})),
            r#"{"a":[true,null,"x\n"],"b":1}"#
        );
        assert_eq!(ecmascript_number(1e21), "1e+21");
        assert_eq!(ecmascript_number(1e-7), "1e-7");
        assert_eq!(ecmascript_number(0.000001), "0.000001");
        assert_eq!(ecmascript_number(123.456), "123.456");
        assert_eq!(ecmascript_number(-1.5), "-1.5");
        assert_eq!(ecmascript_number(100.0), "100");
        assert_eq!(ecmascript_number(4.5e-300), "4.5e-300");
    }

    #[test]
    fn key_order_and_whitespace_do_not_change_the_hash() {
        let a: Value =
            serde_json::from_str(r#"{ "x": 1.0e2, "y": {"b": 2, "a": 1} }"#).expect("json");
        let b: Value = serde_json::from_str(r#"{"y":{"a":1,"b":2},"x":100}"#).expect("json");
        assert_eq!(canonical_hash(&a), canonical_hash(&b));
    }

    #[test]
    fn the_counted_length_covers_every_escape_and_number() {
        let v = json!({
            "k\u{1}é": ["\u{8}\u{c}\t\r\n\\\"\u{1f}", 1.5e300, 0.000_001, -7, u64::MAX, null, true],
            "a": {"z": [], "y": {}}
        });
        assert_eq!(canonical_len(&v), canonical_json(&v).len());
        assert_eq!(canonical_len(&json!("x")), 3);
    }

    #[test]
    fn a_float_read_back_from_its_canonical_form_is_the_same_float() {
        // Found by the fixed-point property below: without serde_json's `float_roundtrip`
        // this double's shortest spelling parses one unit off in the last place, so the
        // canonical text of the value read back was `-203300311769865.7`.
        let float = -203_300_311_769_865.66_f64;
        let once = canonical_json(&Value::from(float));
        assert_eq!(once, "-203300311769865.66");
        let again: Value = serde_json::from_str(&once).unwrap();
        assert_eq!(again.as_f64(), Some(float));
        assert_eq!(canonical_json(&again), once);
    }

    #[test]
    fn integers_beyond_two_to_the_53_have_no_canonical_form() {
        let big = json!({"a": [1, {"n": 9_007_199_254_740_993_u64}]});
        assert_eq!(
            try_canonical_json(&big),
            Err(CanonicalError::InexactInteger {
                path: "/a/1/n".to_owned()
            })
        );
        assert_eq!(
            try_canonical_json(&json!({"n": 9_007_199_254_740_992_u64})).as_deref(),
            Ok(r#"{"n":9007199254740992}"#)
        );
        let mut deep = json!(1);
        for _ in 0..=MAX_CANONICAL_DEPTH {
            deep = json!([deep]);
        }
        assert!(matches!(
            try_canonical_json(&deep),
            Err(CanonicalError::TooDeep { .. })
        ));
    }

    mod properties {
        use proptest::prelude::*;
        use serde_json::{Map, Number, Value};

        use super::super::*;

        fn leaf() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                (-(1_i64 << 53)..(1_i64 << 53)).prop_map(|i| Value::Number(i.into())),
                (-1.0e15_f64..1.0e15)
                    .prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
                "[a-zA-Z0-9 _\\-\"\n\u{e9}\u{1f600}]{0,12}".prop_map(Value::String),
            ]
        }

        fn json_value() -> impl Strategy<Value = Value> {
            leaf().prop_recursive(4, 48, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                    prop::collection::btree_map("[a-z\u{e9}A-Z_]{1,6}", inner, 0..6)
                        .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
                ]
            })
        }

        /// Writes `value` with object keys in reverse order, whitespace everywhere and
        /// integers that fit a double spelled as `1.0eN`-style floats where possible.
        fn reformat(value: &Value, out: &mut String) {
            match value {
                Value::Object(map) => {
                    out.push_str("{ \n");
                    let mut keys: Vec<&String> = map.keys().collect();
                    keys.reverse();
                    for (i, k) in keys.into_iter().enumerate() {
                        if i > 0 {
                            out.push_str(" ,\t");
                        }
                        out.push_str(&serde_json::to_string(k).expect("key"));
                        out.push_str(" : ");
                        reformat(&map[k], out);
                    }
                    out.push_str("\r\n}");
                }
                Value::Array(items) => {
                    out.push_str("[ ");
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            out.push_str(" , ");
                        }
                        reformat(item, out);
                    }
                    out.push_str(" ]");
                }
                Value::Number(n) => match n.as_i64() {
                    Some(i) if i != 0 && i.unsigned_abs() < (1 << 50) => {
                        out.push_str(&format!("{}E0", i));
                    }
                    _ => out.push_str(&n.to_string()),
                },
                Value::String(s) => {
                    // \u-escape every non-ASCII character: a different spelling of the same string.
                    out.push('"');
                    for c in s.chars() {
                        match c {
                            '"' => out.push_str("\\\""),
                            '\\' => out.push_str("\\\\"),
                            c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
                            c => {
                                let mut buf = [0_u16; 2];
                                for unit in c.encode_utf16(&mut buf) {
                                    out.push_str(&format!("\\u{unit:04X}"));
                                }
                            }
                        }
                    }
                    out.push('"');
                }
                other => out.push_str(&other.to_string()),
            }
        }

        proptest! {
            #[test]
            fn key_order_whitespace_and_number_spelling_do_not_change_the_hash(value in json_value()) {
                let mut text = String::new();
                reformat(&value, &mut text);
                let reparsed: Value = serde_json::from_str(&text).expect("reformatted JSON parses");
                prop_assert_eq!(canonical_hash(&reparsed), canonical_hash(&value));
                prop_assert_eq!(try_canonical_json(&reparsed), Ok(canonical_json(&value)));
            }

            #[test]
            fn canonical_output_is_a_fixed_point(value in json_value()) {
                let once = canonical_json(&value);
                let reparsed: Value = serde_json::from_str(&once).expect("canonical JSON parses");
                prop_assert_eq!(canonical_json(&reparsed), once);
            }

            #[test]
            fn the_counted_length_is_the_written_length(value in json_value()) {
                prop_assert_eq!(canonical_len(&value), canonical_json(&value).len());
            }

            #[test]
            fn changing_any_leaf_changes_the_hash(value in json_value(), pick in any::<prop::sample::Index>()) {
                let mut pointers = Vec::new();
                leaves(&value, String::new(), &mut pointers);
                let pointer = pick.get(&pointers).clone();
                let mut changed = value.clone();
                let slot = changed.pointer_mut(&pointer).expect("leaf exists");
                *slot = match slot.take() {
                    Value::Null => Value::Bool(false),
                    Value::Bool(b) => Value::Bool(!b),
                    Value::Number(n) => Value::String(n.to_string()),
                    Value::String(s) => Value::String(format!("{s}x")),
                    other => Value::Array(vec![other]),
                };
                prop_assert_ne!(canonical_hash(&changed), canonical_hash(&value));
            }
        }

        fn leaves(value: &Value, at: String, out: &mut Vec<String>) {
            match value {
                Value::Array(items) if !items.is_empty() => {
                    for (i, v) in items.iter().enumerate() {
                        leaves(v, format!("{at}/{i}"), out);
                    }
                }
                Value::Object(map) if !map.is_empty() => {
                    for (k, v) in map {
                        leaves(
                            v,
                            format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                            out,
                        );
                    }
                }
                _ => out.push(at),
            }
        }
    }
}
