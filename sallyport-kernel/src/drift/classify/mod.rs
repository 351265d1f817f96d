//! Classifying a definition change: which fields changed, what each change means, and the
//! scoring table that turns meanings into a status, a severity and a risk score.
//!
//! The rules and how they combine are documented on [`SCORING_TABLE`]. This file compares two
//! definitions field by field; `scoring.rs` holds the table and the verdict it yields, and
//! `schema.rs` reads which way an input schema moved.

mod schema;
mod scoring;

use std::collections::BTreeSet;

use serde_json::Value;

use self::schema::classify_schema;
pub(crate) use self::scoring::{
    CANONICALIZATION, PERMISSION_EXPANSION, TOOL_ADDED, TOOL_REMOVED, UNKNOWN_FIELD, Verdict,
};
use self::scoring::{
    CONSENT_STRONGER, CONSENT_WEAKER, CRATE_VERSION, CREDENTIAL, DATA_ADDED, DATA_REMOVED,
    DESCRIPTION, EFFECT_DOWN, EFFECT_UP, EFFECT_UP_IRREVERSIBLE, EXTERNAL, INTERNAL, RECONCILE,
    RESULT_MAPPING, RETRY_LOOSER, RETRY_TIGHTER, SCOPE_ADDED, SCOPE_REMOVED, TARGET, UPSTREAM_SPEC,
};
pub use self::scoring::{SCORING_TABLE, ScoringRule};
use sallyport_vocab::drift::DefinitionChange;

/// Compares an approved definition with a live one (both canonical-definition JSON objects,
/// as [`crate::catalog::definition_of`] builds them) and returns the changes and the scoring
/// rules they match. Equal definitions match nothing.
pub fn compare_definitions(
    before: &Value,
    after: &Value,
) -> (Vec<DefinitionChange>, Vec<ScoringRule>) {
    let mut changes = Vec::new();
    diff(before, after, &mut String::new(), &mut changes);
    let mut rules = Vec::new();
    let empty = serde_json::Map::new();
    let b = before.as_object().unwrap_or(&empty);
    let a = after.as_object().unwrap_or(&empty);
    let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    for key in keys {
        let (bv, av) = (
            b.get(key).unwrap_or(&Value::Null),
            a.get(key).unwrap_or(&Value::Null),
        );
        if bv == av {
            continue;
        }
        match key.as_str() {
            "summary" | "description" => rules.push(DESCRIPTION),
            "input_schema" => classify_schema(bv, av, &mut rules),
            "effect" => {
                let (x, y) = (effect_rank(bv), effect_rank(av));
                match (x, y) {
                    (Some(x), Some(y)) if y > x && y == 3 => rules.push(EFFECT_UP_IRREVERSIBLE),
                    (Some(x), Some(y)) if y > x => rules.push(EFFECT_UP),
                    (Some(x), Some(y)) if y < x => rules.push(EFFECT_DOWN),
                    _ => rules.push(UNKNOWN_FIELD),
                }
            }
            "consent" => match (consent_rank(bv), consent_rank(av)) {
                (Some(x), Some(y)) if y > x => rules.push(CONSENT_STRONGER),
                (Some(x), Some(y)) if y < x => rules.push(CONSENT_WEAKER),
                _ => rules.push(UNKNOWN_FIELD),
            },
            "retry" => match (retry_rank(bv), retry_rank(av)) {
                (Some(x), Some(y)) if y < x => rules.push(RETRY_TIGHTER),
                (Some(x), Some(y)) if y > x => rules.push(RETRY_LOOSER),
                _ => rules.push(UNKNOWN_FIELD),
            },
            "externality" => match av.as_str() {
                Some("external") => rules.push(EXTERNAL),
                Some("internal") => rules.push(INTERNAL),
                _ => rules.push(UNKNOWN_FIELD),
            },
            "data_classes" => {
                let (x, y) = (string_set(bv), string_set(av));
                if y.difference(&x).next().is_some() {
                    rules.push(DATA_ADDED);
                }
                if x.difference(&y).next().is_some() {
                    rules.push(DATA_REMOVED);
                }
                if x == y {
                    // Same classes in another order: nothing about the data changed, but the
                    // definition did; a reviewer should confirm.
                    rules.push(UNKNOWN_FIELD);
                }
            }
            "scope_tags" => {
                let (x, y) = (value_set(bv), value_set(av));
                if x.difference(&y).next().is_some() {
                    rules.push(SCOPE_REMOVED);
                } else if y.difference(&x).next().is_some() {
                    rules.push(SCOPE_ADDED);
                } else {
                    rules.push(UNKNOWN_FIELD);
                }
            }
            "credential" => rules.push(CREDENTIAL),
            // Which field is the audit note decides which field the channel keeps out of the
            // request, like a template's `omit`: a change of what is sent.
            "audit_note" => rules.push(TARGET),
            "reconcile" => rules.push(RECONCILE),
            "target" => classify_target(bv, av, &mut rules),
            "provenance" => {
                if bv.get("crate_version") != av.get("crate_version") {
                    rules.push(CRATE_VERSION);
                }
                if bv.get("upstream_spec_hash") != av.get("upstream_spec_hash") {
                    rules.push(UPSTREAM_SPEC);
                }
            }
            _ => rules.push(UNKNOWN_FIELD),
        }
    }
    (changes, rules)
}

/// Fields of a channel target that say where the call goes and what it carries; the others
/// map the answer.
const TARGET_WHERE: &[&str] = &[
    "channel",
    "method",
    "path",
    "query",
    "headers",
    "body",
    "omit",
    "custom_request",
    "host",
    "argv",
    "name",
    "definition",
];

fn classify_target(before: &Value, after: &Value, rules: &mut Vec<ScoringRule>) {
    let (Some(b), Some(a)) = (before.as_object(), after.as_object()) else {
        rules.push(TARGET);
        return;
    };
    let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    for key in keys {
        if b.get(key) == a.get(key) {
            continue;
        }
        if TARGET_WHERE.contains(&key.as_str()) {
            rules.push(TARGET);
        } else {
            rules.push(RESULT_MAPPING);
        }
    }
}

fn effect_rank(v: &Value) -> Option<u8> {
    Some(match v.as_str()? {
        "observe" => 0,
        "reversible_change" => 1,
        "external_commitment" => 2,
        "irreversible_or_broad" => 3,
        _ => return None,
    })
}

fn consent_rank(v: &Value) -> Option<u8> {
    Some(match v.as_str()? {
        "none" => 0,
        "session" => 1,
        "per_call" => 2,
        _ => return None,
    })
}

/// Looseness: how freely the executor may resend.
fn retry_rank(v: &Value) -> Option<u8> {
    Some(match v.as_str()? {
        "never" => 0,
        "idempotency_key" => 1,
        "safe" => 2,
        _ => return None,
    })
}

fn string_set(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn value_set(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .map(|items| items.iter().map(super::canonical_json).collect())
        .unwrap_or_default()
}

/// Leaf-level differences, as JSON pointers with before/after (`null` when absent).
pub(crate) fn diff(
    before: &Value,
    after: &Value,
    path: &mut String,
    out: &mut Vec<DefinitionChange>,
) {
    if before == after {
        return;
    }
    if let (Value::Object(b), Value::Object(a)) = (before, after) {
        let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
        for key in keys {
            let len = path.len();
            crate::pointer::push_key(path, key);
            diff(
                b.get(key).unwrap_or(&Value::Null),
                a.get(key).unwrap_or(&Value::Null),
                path,
                out,
            );
            path.truncate(len);
        }
        return;
    }
    out.push(DefinitionChange {
        field: path.clone(),
        before: before.clone(),
        after: after.clone(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(super) fn reasons(before: &Value, after: &Value) -> Vec<&'static str> {
        let (_, rules) = compare_definitions(before, after);
        let mut names: Vec<&str> = rules.iter().map(|r| r.rule).collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    #[test]
    fn target_fields_split_into_where_and_mapping() {
        let before =
            json!({"target": {"channel": "http", "method": "GET", "path": "/a", "statuses": []}});
        let path =
            json!({"target": {"channel": "http", "method": "GET", "path": "/b", "statuses": []}});
        let mapping = json!({"target": {"channel": "http", "method": "GET", "path": "/a",
            "statuses": [{"code": 409, "status": "already_in_desired_state"}]}});
        assert_eq!(reasons(&before, &path), ["target_changed"]);
        assert_eq!(reasons(&before, &mapping), ["result_mapping_changed"]);
    }

    #[test]
    fn moving_adding_or_dropping_the_audit_note_is_a_target_change() {
        let none = json!({"name": "a"});
        let reason = json!({"name": "a", "audit_note": "reason"});
        let other = json!({"name": "a", "audit_note": "justification"});
        assert_eq!(reasons(&none, &reason), ["target_changed"]);
        assert_eq!(reasons(&reason, &other), ["target_changed"]);
        assert_eq!(reasons(&reason, &none), ["target_changed"]);
    }
}
