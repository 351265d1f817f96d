//! Which way an input schema moved: narrowed, widened, required parameters changed, only
//! annotations changed, or a change the classifier cannot read.

use std::collections::BTreeSet;

use serde_json::Value;

use super::scoring::{
    DESCRIPTION, REQUIRED, SCHEMA_NARROWED, SCHEMA_UNREADABLE, SCHEMA_WIDENED, ScoringRule,
};
use super::{string_set, value_set};

/// Which way a schema moved.
#[derive(Debug, Default)]
struct SchemaFlags {
    narrowed: bool,
    widened: bool,
    unreadable: bool,
    required: bool,
    annotation: bool,
}

pub(super) fn classify_schema(before: &Value, after: &Value, rules: &mut Vec<ScoringRule>) {
    let mut flags = SchemaFlags::default();
    schema_cmp(before, after, &mut flags, 0);
    if flags.annotation {
        rules.push(DESCRIPTION);
    }
    if flags.narrowed {
        rules.push(SCHEMA_NARROWED);
    }
    if flags.widened {
        rules.push(SCHEMA_WIDENED);
    }
    if flags.required {
        rules.push(REQUIRED);
    }
    if flags.unreadable {
        rules.push(SCHEMA_UNREADABLE);
    }
}

const LOWER_BOUNDS: &[&str] = &[
    "minLength",
    "minimum",
    "exclusiveMinimum",
    "minItems",
    "minProperties",
    "minContains",
];
const UPPER_BOUNDS: &[&str] = &[
    "maxLength",
    "maximum",
    "exclusiveMaximum",
    "maxItems",
    "maxProperties",
    "maxContains",
    "multipleOf",
];
const ANNOTATIONS: &[&str] = &[
    "description",
    "title",
    "examples",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
];
const ALL_TYPES: &[&str] = &[
    "array", "boolean", "integer", "null", "number", "object", "string",
];

fn schema_cmp(before: &Value, after: &Value, flags: &mut SchemaFlags, depth: usize) {
    if before == after {
        return;
    }
    if depth > 64 {
        flags.unreadable = true;
        return;
    }
    let (b, a) = match (before, after) {
        (Value::Object(b), Value::Object(a)) => (b, a),
        (Value::Bool(true), _) | (_, Value::Bool(false)) => {
            flags.narrowed = true;
            return;
        }
        (Value::Bool(false), _) | (_, Value::Bool(true)) => {
            flags.widened = true;
            return;
        }
        _ => {
            flags.unreadable = true;
            return;
        }
    };
    let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    for key in keys {
        let (bv, av) = (b.get(key), a.get(key));
        if bv == av {
            continue;
        }
        let k = key.as_str();
        match k {
            _ if ANNOTATIONS.contains(&k) => flags.annotation = true,
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                let empty = serde_json::Map::new();
                let bm = bv.and_then(Value::as_object).unwrap_or(&empty);
                let am = av.and_then(Value::as_object).unwrap_or(&empty);
                let names: BTreeSet<&String> = bm.keys().chain(am.keys()).collect();
                let defs = k == "$defs" || k == "definitions";
                for name in names {
                    match (bm.get(name), am.get(name)) {
                        (Some(x), Some(y)) => schema_cmp(x, y, flags, depth + 1),
                        // An unreferenced definition is inert; a new `$ref` shows elsewhere.
                        _ if defs => {}
                        (None, Some(_)) => flags.widened = true,
                        (Some(_), None) => flags.narrowed = true,
                        (None, None) => {}
                    }
                }
            }
            "required" => flags.required = true,
            "type" => {
                let (x, y) = (type_set(bv), type_set(av));
                set_direction(&x, &y, flags);
            }
            "enum" => match (bv, av) {
                (None, Some(_)) => flags.narrowed = true,
                (Some(_), None) => flags.widened = true,
                (Some(x), Some(y)) => {
                    let (x, y) = (value_set(x), value_set(y));
                    set_direction(&x, &y, flags);
                }
                (None, None) => {}
            },
            "const" | "pattern" | "format" | "contentMediaType" | "contentEncoding" => {
                match (bv, av) {
                    (None, Some(_)) => flags.narrowed = true,
                    (Some(_), None) => flags.widened = true,
                    _ => flags.unreadable = true,
                }
            }
            _ if LOWER_BOUNDS.contains(&k) || UPPER_BOUNDS.contains(&k) => {
                let lower = LOWER_BOUNDS.contains(&k);
                let (x, y) = (bv.and_then(Value::as_f64), av.and_then(Value::as_f64));
                let tighter = match (x, y) {
                    (None, Some(_)) => Some(true),
                    (Some(_), None) => Some(false),
                    (Some(x), Some(y)) if k == "multipleOf" => {
                        // A multiple of a multiple is tighter; anything else cannot be told.
                        if y > x && (y / x).fract() == 0.0 {
                            Some(true)
                        } else if x > y && (x / y).fract() == 0.0 {
                            Some(false)
                        } else {
                            None
                        }
                    }
                    (Some(x), Some(y)) => Some(if lower { y > x } else { y < x }),
                    (None, None) => None,
                };
                match tighter {
                    Some(true) => flags.narrowed = true,
                    Some(false) => flags.widened = true,
                    None => flags.unreadable = true,
                }
            }
            "uniqueItems" => {
                if av == Some(&Value::Bool(true)) {
                    flags.narrowed = true;
                } else {
                    flags.widened = true;
                }
            }
            "additionalProperties"
            | "unevaluatedProperties"
            | "items"
            | "additionalItems"
            | "contains"
            | "propertyNames" => {
                // Absent means "anything".
                let any = Value::Bool(true);
                schema_cmp(bv.unwrap_or(&any), av.unwrap_or(&any), flags, depth + 1);
            }
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                match (bv.and_then(Value::as_array), av.and_then(Value::as_array)) {
                    (Some(x), Some(y)) if x.len() == y.len() => {
                        for (p, q) in x.iter().zip(y) {
                            schema_cmp(p, q, flags, depth + 1);
                        }
                    }
                    _ => flags.unreadable = true,
                }
            }
            _ => flags.unreadable = true,
        }
    }
}

fn type_set(v: Option<&Value>) -> BTreeSet<String> {
    match v {
        None => ALL_TYPES.iter().map(|t| (*t).to_owned()).collect(),
        Some(Value::String(s)) => std::iter::once(s.clone()).collect(),
        Some(other) => string_set(other),
    }
}

fn set_direction(before: &BTreeSet<String>, after: &BTreeSet<String>, flags: &mut SchemaFlags) {
    let added = after.difference(before).next().is_some();
    let removed = before.difference(after).next().is_some();
    if added {
        flags.widened = true;
    }
    if removed {
        flags.narrowed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::reasons;
    use super::*;
    use serde_json::json;

    fn schema(v: &Value) -> Value {
        json!({ "input_schema": v })
    }

    #[test]
    fn schema_directions_are_read_per_keyword() {
        let base = json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 10}},
            "required": ["a"], "additionalProperties": false});
        let cases = [
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5}},
                "required": ["a"], "additionalProperties": false}),
                vec!["schema_narrowed"],
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string"}},
                "required": ["a"], "additionalProperties": false}),
                vec!["schema_widened"],
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 10}, "b": {}},
                "required": ["a"], "additionalProperties": false}),
                vec!["schema_widened"],
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 10}},
                "required": ["a"], "additionalProperties": true}),
                vec!["schema_widened"],
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 10}},
                "required": [], "additionalProperties": false}),
                vec!["required_parameters_changed"],
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": ["string", "null"], "maxLength": 10}},
                "required": ["a"], "additionalProperties": false}),
                vec!["schema_widened"],
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 10, "description": "x"}},
                "required": ["a"], "additionalProperties": false}),
                vec!["description_changed"],
            ),
            (
                json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}},
                "required": ["a"], "additionalProperties": false}),
                vec!["schema_unreadable", "schema_widened"],
            ),
        ];
        for (after, expected) in cases {
            assert_eq!(
                reasons(&schema(&base), &schema(&after)),
                expected,
                "{after}"
            );
        }
    }
}
