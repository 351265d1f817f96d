//! Canonical JSON (RFC 8785 / JCS) for hashing definitions.

use serde_json::Value;

/// Writes `value` as canonical JSON: object keys sorted by their UTF-16 code units, no
/// whitespace, strings escaped as JCS prescribes, numbers in their shortest round-trip form
/// (integers without a fraction; other numbers as ECMAScript prints them).
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(value, &mut out);
    out
}

fn write_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_value(&map[key], out);
            }
            out.push('}');
        }
    }
}

fn write_number(n: &serde_json::Number, out: &mut String) {
    if let Some(i) = n.as_i64() {
        out.push_str(&i.to_string());
    } else if let Some(u) = n.as_u64() {
        out.push_str(&u.to_string());
    } else if let Some(f) = n.as_f64() {
        out.push_str(&ecmascript_number(f));
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
        out.push(if n - 1 >= 0 { '+' } else { '-' });
        out.push_str(&(n - 1).abs().to_string());
    }
    out
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// SHA-256 (hex) of the canonical form of `value`.
pub fn canonical_hash(value: &Value) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(canonical_json(value).as_bytes()))
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
}
