//! Sample values from the JSON Schemas schemars writes: a result body the upstream can
//! answer with, and a first guess at an action's arguments when the author gave none.
//!
//! The guess is deliberately plain (the first enum value, a minimum, a short string, a
//! string from a pattern of literals and character classes): a schema it does not satisfy
//! refuses it, and the bench then asks the author for an example instead of inventing one.

use serde_json::{Map, Value, json};

/// Deepest nesting followed (recursive types stop here with `null`).
const MAX_DEPTH: usize = 8;

/// A value that has the shape of `schema`, resolving `$ref`s against `schema` itself.
pub(crate) fn sample(schema: &Value) -> Value {
    sample_at(schema, schema, 0)
}

/// A value of `schema`'s shape, whose every free string is `text` (enum and const strings
/// keep their values).
pub(crate) fn sample_with_strings(schema: &Value, text: &str) -> Value {
    let mut value = sample(schema);
    replace_free_strings(schema, schema, &mut value, text, 0);
    value
}

fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let mut current = schema;
    for _ in 0..MAX_DEPTH {
        let Some(reference) = current.get("$ref").and_then(Value::as_str) else {
            return current;
        };
        let Some(target) = reference
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer))
        else {
            return current;
        };
        current = target;
    }
    current
}

/// The first non-null alternative of `anyOf` / `oneOf`, or `allOf`'s first part.
fn alternative(schema: &Value) -> Option<&Value> {
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            return options
                .iter()
                .find(|o| o.get("type").and_then(Value::as_str) != Some("null"))
                .or_else(|| options.first());
        }
    }
    None
}

fn type_of(schema: &Value) -> Option<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => Some(t),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .or(Some("null")),
        _ if schema.get("properties").is_some() => Some("object"),
        _ => None,
    }
}

fn sample_at(root: &Value, schema: &Value, depth: usize) -> Value {
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    let schema = resolve(root, schema);
    if let Some(value) = schema.get("const") {
        return value.clone();
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|v| v.first())
    {
        return first.clone();
    }
    if let Some(option) = alternative(schema) {
        return sample_at(root, option, depth + 1);
    }
    match type_of(schema) {
        Some("object") => {
            let mut object = Map::new();
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    object.insert(name.clone(), sample_at(root, property, depth + 1));
                }
            }
            Value::Object(object)
        }
        Some("array") => {
            let item = schema
                .get("items")
                .map_or(Value::Null, |items| sample_at(root, items, depth + 1));
            json!([item])
        }
        Some("string") => {
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
                return Value::String(
                    sample_pattern(pattern).unwrap_or_else(|| "sample".to_owned()),
                );
            }
            if let Some(text) = schema
                .get("format")
                .and_then(Value::as_str)
                .and_then(sample_format)
            {
                return Value::String(text.to_owned());
            }
            let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0);
            let mut text = String::from("sample");
            while (text.len() as u64) < min {
                text.push('x');
            }
            Value::String(text)
        }
        Some("integer") => json!(bound(schema).unwrap_or(1.0) as i64),
        Some("number") => json!(bound(schema).unwrap_or(1.0)),
        Some("boolean") => Value::Bool(true),
        _ => Value::Null,
    }
}

/// A value of a common string format.
fn sample_format(format: &str) -> Option<&'static str> {
    Some(match format {
        "date-time" => "2026-01-01T00:00:00Z",
        "date" => "2026-01-01",
        "email" => "agent@example.com",
        "uri" | "url" => "https://example.com/",
        "uuid" => "00000000-0000-4000-8000-000000000000",
        _ => return None,
    })
}

/// A string matching an anchored pattern made of literals, escapes (`\d`, `\w`) and
/// character classes, each with an optional quantifier: `^proj_[A-Za-z0-9]+$` gives
/// `proj_A`. Anything else (alternation, groups, negated classes) gives `None`.
pub(crate) fn sample_pattern(pattern: &str) -> Option<String> {
    let body = pattern.strip_prefix('^')?.strip_suffix('$')?;
    let mut chars = body.chars().peekable();
    let mut out = String::new();
    while let Some(c) = chars.next() {
        let atom = match c {
            '\\' => escaped(chars.next()?)?,
            '[' => class(&mut chars)?,
            '.' => 'a',
            '(' | ')' | '|' | '*' | '+' | '?' | '{' | '}' | '^' | '$' => return None,
            literal => literal,
        };
        let count = match chars.peek() {
            Some('+') => {
                chars.next();
                1
            }
            Some('*' | '?') => {
                chars.next();
                0
            }
            Some('{') => {
                chars.next();
                let mut spec = String::new();
                for k in chars.by_ref() {
                    if k == '}' {
                        break;
                    }
                    spec.push(k);
                }
                spec.split(',').next()?.trim().parse::<usize>().ok()?
            }
            _ => 1,
        };
        for _ in 0..count {
            out.push(atom);
        }
    }
    Some(out)
}

/// The first member of a character class whose `[` was just read; `None` for a negated or
/// unclosed class.
fn class(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<char> {
    let mut first = None;
    while let Some(k) = chars.next() {
        match k {
            '^' if first.is_none() => return None,
            ']' if first.is_some() => return first,
            '\\' => {
                let e = escaped(chars.next()?)?;
                first.get_or_insert(e);
            }
            other => {
                first.get_or_insert(other);
            }
        }
    }
    None
}

/// The character an escape stands for in a sample.
fn escaped(c: char) -> Option<char> {
    match c {
        'd' => Some('0'),
        'w' => Some('a'),
        's' => Some(' '),
        other if other.is_ascii_alphanumeric() => None,
        other => Some(other),
    }
}

/// The schema's lower bound, if it has one.
fn bound(schema: &Value) -> Option<f64> {
    schema
        .get("minimum")
        .and_then(Value::as_f64)
        .or_else(|| {
            schema
                .get("exclusiveMinimum")
                .and_then(Value::as_f64)
                .map(|m| m + 1.0)
        })
        .map(|m| m.max(1.0))
}

fn replace_free_strings(root: &Value, schema: &Value, value: &mut Value, text: &str, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let schema = resolve(root, schema);
    if schema.get("const").is_some() || schema.get("enum").is_some() {
        return;
    }
    if let Some(option) = alternative(schema) {
        replace_free_strings(root, option, value, text, depth + 1);
        return;
    }
    match value {
        Value::String(s) => *s = text.to_owned(),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    replace_free_strings(root, item_schema, item, text, depth + 1);
                }
            }
        }
        Value::Object(object) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    if let Some(field) = object.get_mut(name) {
                        replace_free_strings(root, property, field, text, depth + 1);
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build_list_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "builds": {"type": "array", "items": {"$ref": "#/$defs/Build"}},
                "next": {"type": ["string", "null"]},
                "state": {"type": "string", "enum": ["ok", "bad"]},
                "count": {"type": "integer", "minimum": 3}
            },
            "required": ["builds"],
            "$defs": {"Build": {"type": "object", "properties": {
                "build_id": {"type": "string", "minLength": 8}
            }}}
        })
    }

    #[test]
    fn samples_follow_refs_enums_bounds_and_lengths() {
        assert_eq!(
            sample(&build_list_schema()),
            json!({"builds": [{"build_id": "samplexx"}], "next": "sample", "state": "ok", "count": 3})
        );
    }

    #[test]
    fn simple_patterns_give_matching_strings_and_others_none() {
        assert_eq!(
            sample_pattern(r"^proj_[A-Za-z0-9]+$").as_deref(),
            Some("proj_A")
        );
        assert_eq!(sample_pattern(r"^[a-z0-9-]{3,40}$").as_deref(), Some("aaa"));
        assert_eq!(sample_pattern(r"^w\d{2}\.x?$").as_deref(), Some("w00."));
        assert_eq!(sample_pattern(r"^[\-a]+$").as_deref(), Some("-"));
        assert_eq!(sample_pattern(r"^(inv|cn)_\d+$"), None);
        assert_eq!(sample_pattern(r"^[^/]+$"), None);
        assert_eq!(sample_pattern(r"proj_[0-9]+"), None);
    }

    #[test]
    fn free_strings_are_replaced_and_enum_strings_kept() {
        assert_eq!(
            sample_with_strings(&build_list_schema(), "CANARY"),
            json!({"builds": [{"build_id": "CANARY"}], "next": "CANARY", "state": "ok", "count": 3})
        );
    }
}
