//! The Cedar schema of a catalog: the entity types, the actions and their contexts that the
//! policies are validated against when they are loaded.
//!
//! ```text
//! entity Session = { "requester"?: String } tags String;   // the host's session attributes
//! entity Unscoped;                                          // the resource of a call naming no object
//! entity customer;                                          // one entity type per scope kind
//! action "create_invoice" appliesTo {
//!   principal: [Session],
//!   resource: [customer, Unscoped],
//!   context: {
//!     effect: String, externality: String, consent: String, data_classes: Set<String>,
//!     calls: { minute: Long, hour: Long, day: Long },
//!     session_calls: {
//!       by_effect: { observe: Counts, reversible_change: Counts,      // Counts = the record
//!                    external_commitment: Counts, irreversible_or_broad: Counts },  // of `calls`
//!       recent: Set<{ action: String, effect: String, objects: Set<String>,
//!                     age_seconds: Long, status?: String }>,
//!       complete: Bool,
//!       completed_on_resource: Set<String>,
//!     },
//!     args: { amount: Long, currency?: String },          // the #[policy] fields
//!   }
//! };
//! ```

use std::collections::{BTreeMap, BTreeSet};

use sallyport_core::Catalog;
use sallyport_core::catalog::Entry;
use serde_json::{Map, Value, json};

use crate::error::CedarError;

/// The entity type of the principal.
pub(crate) const SESSION: &str = "Session";
/// The entity type of the resource of a call that names no scoped object.
pub(crate) const UNSCOPED: &str = "Unscoped";

/// Words Cedar reserves, which cannot name an entity type.
const RESERVED: &[&str] = &[
    "true", "false", "if", "then", "else", "in", "is", "like", "has", "__cedar",
];

/// The record of a minute's, an hour's and a day's counts.
fn counts_type() -> Value {
    json!({"type": "Record", "attributes": {
        "minute": {"type": "Long"},
        "hour": {"type": "Long"},
        "day": {"type": "Long"},
    }})
}

/// `context.session_calls`: what the session did lately, whatever the action.
fn session_calls_type() -> Value {
    json!({"type": "Record", "attributes": {
        "by_effect": {"type": "Record", "attributes": {
            "observe": counts_type(),
            "reversible_change": counts_type(),
            "external_commitment": counts_type(),
            "irreversible_or_broad": counts_type(),
        }},
        "recent": {"type": "Set", "element": {"type": "Record", "attributes": {
            "action": {"type": "String"},
            "effect": {"type": "String"},
            "objects": {"type": "Set", "element": {"type": "String"}},
            "age_seconds": {"type": "Long"},
            "status": {"type": "String", "required": false},
        }}},
        "complete": {"type": "Boolean"},
        "completed_on_resource": {"type": "Set", "element": {"type": "String"}},
    }})
}

/// The Cedar JSON schema of `catalog` (the empty namespace).
///
/// # Errors
///
/// [`CedarError::Schema`] for a scope kind Cedar cannot name, and
/// [`CedarError::UnsupportedField`] for a `#[policy]` field whose JSON type has no Cedar
/// type.
pub fn schema_json(catalog: &Catalog) -> Result<Value, CedarError> {
    let mut kinds = BTreeSet::new();
    let mut actions = Map::new();
    for entry in catalog.entries() {
        let spec = entry.spec();
        let mut resources: Vec<String> = Vec::new();
        for tag in &spec.scope_tags {
            let kind = tag.kind.to_string();
            if RESERVED.contains(&kind.as_str()) || kind == SESSION || kind == UNSCOPED {
                return Err(CedarError::Schema(format!(
                    "scope kind `{kind}` of action `{}` cannot name a Cedar entity type",
                    spec.name
                )));
            }
            if !resources.contains(&kind) {
                resources.push(kind.clone());
            }
            kinds.insert(kind);
        }
        resources.push(UNSCOPED.to_owned());
        let context = json!({
            "type": "Record",
            "attributes": {
                "effect": {"type": "String"},
                "externality": {"type": "String"},
                "consent": {"type": "String"},
                "data_classes": {"type": "Set", "element": {"type": "String"}},
                "calls": counts_type(),
                "session_calls": session_calls_type(),
                "args": {"type": "Record", "attributes": args_of(entry)?},
            },
        });
        actions.insert(
            spec.name.to_string(),
            json!({"appliesTo": {
                "principalTypes": [SESSION],
                "resourceTypes": resources,
                "context": context,
            }}),
        );
    }
    let mut entity_types = Map::new();
    entity_types.insert(
        SESSION.to_owned(),
        json!({
            "shape": {"type": "Record", "attributes": {
                "requester": {"type": "String", "required": false},
            }},
            "tags": {"type": "String"},
        }),
    );
    entity_types.insert(UNSCOPED.to_owned(), json!({}));
    for kind in kinds {
        entity_types.insert(kind, json!({}));
    }
    Ok(json!({"": {"entityTypes": entity_types, "actions": actions}}))
}

/// The `args` record of one action: its `#[policy]` fields, typed from the input schema.
fn args_of(entry: &Entry) -> Result<Map<String, Value>, CedarError> {
    let spec = entry.spec();
    let schema = entry.input_schema();
    let properties = schema.get("properties").and_then(Value::as_object);
    let required: BTreeSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let defs = schema
        .get("$defs")
        .or_else(|| schema.get("definitions"))
        .and_then(Value::as_object);
    let mut args = Map::new();
    for field in &spec.policy_fields {
        let unsupported = |reason: &str| CedarError::UnsupportedField {
            action: spec.name.to_string(),
            field: field.to_string(),
            reason: reason.to_owned(),
        };
        let property = properties
            .and_then(|p| p.get(field.as_ref()))
            .ok_or_else(|| unsupported("the input schema has no such property"))?;
        let (ty, nullable) = cedar_type(property, defs, 0).map_err(|r| unsupported(&r))?;
        let mut ty = ty;
        if nullable || !required.contains(field.as_ref()) {
            ty["required"] = json!(false);
        }
        args.insert(field.to_string(), ty);
    }
    Ok(args)
}

/// The Cedar type of a JSON Schema, and whether it admits `null`.
fn cedar_type(
    schema: &Value,
    defs: Option<&Map<String, Value>>,
    depth: usize,
) -> Result<(Value, bool), String> {
    if depth > 8 {
        return Err("the schema nests too deeply".to_owned());
    }
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let name = reference
            .rsplit('/')
            .next()
            .ok_or_else(|| format!("unresolvable `$ref` {reference}"))?;
        let target = defs
            .and_then(|d| d.get(name))
            .ok_or_else(|| format!("unresolvable `$ref` {reference}"))?;
        return cedar_type(target, defs, depth + 1);
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            let mut nullable = false;
            let mut found: Option<Value> = None;
            for option in options {
                if option.get("type").and_then(Value::as_str) == Some("null") {
                    nullable = true;
                    continue;
                }
                let (ty, null) = cedar_type(option, defs, depth + 1)?;
                nullable |= null;
                match &found {
                    Some(seen) if *seen != ty => {
                        return Err("its alternatives have different types".to_owned());
                    }
                    _ => found = Some(ty),
                }
            }
            return found
                .map(|ty| (ty, nullable))
                .ok_or_else(|| "it admits only null".to_owned());
        }
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && schema.get("type").is_none()
    {
        let nullable = values.iter().any(Value::is_null);
        if values.iter().all(|v| v.is_string() || v.is_null()) {
            return Ok((json!({"type": "String"}), nullable));
        }
        return Err("an enum of other values than strings".to_owned());
    }
    if let Some(text) = schema.get("const")
        && schema.get("type").is_none()
    {
        return match text {
            Value::String(_) => Ok((json!({"type": "String"}), false)),
            _ => Err("a constant other than a string".to_owned()),
        };
    }
    let (types, nullable): (Vec<&str>, bool) = match schema.get("type") {
        Some(Value::String(t)) => (vec![t.as_str()], false),
        Some(Value::Array(ts)) => {
            let names: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
            let nullable = names.contains(&"null");
            (
                names.into_iter().filter(|t| *t != "null").collect(),
                nullable,
            )
        }
        _ => return Err("its schema names no type".to_owned()),
    };
    let [ty] = types.as_slice() else {
        return Err("it admits several JSON types".to_owned());
    };
    let cedar = match *ty {
        "string" => json!({"type": "String"}),
        "integer" => json!({"type": "Long"}),
        "boolean" => json!({"type": "Boolean"}),
        "array" => {
            let items = schema
                .get("items")
                .ok_or_else(|| "an array without `items`".to_owned())?;
            let (element, null) = cedar_type(items, defs, depth + 1)?;
            if null {
                return Err("an array that may hold null".to_owned());
            }
            json!({"type": "Set", "element": element})
        }
        "number" => {
            return Err(
                "a JSON number; Cedar has no floating point, use an integer (cents) or a string"
                    .to_owned(),
            );
        }
        other => return Err(format!("JSON type `{other}` has no Cedar type")),
    };
    Ok((cedar, nullable))
}

/// The Cedar values of the policy-visible arguments: `null` (an absent optional value) is
/// left out, as Cedar has none.
pub(crate) fn args_value(arguments: &Map<String, Value>) -> Value {
    let kept: BTreeMap<&String, &Value> = arguments.iter().filter(|(_, v)| !v.is_null()).collect();
    json!(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_schema_types_map_to_cedar_types() {
        let t = |schema: Value| cedar_type(&schema, None, 0);
        assert_eq!(
            t(json!({"type": "string"})),
            Ok((json!({"type": "String"}), false))
        );
        assert_eq!(
            t(json!({"type": ["integer", "null"], "format": "int64"})),
            Ok((json!({"type": "Long"}), true))
        );
        assert_eq!(
            t(json!({"type": "array", "items": {"type": "string"}})),
            Ok((json!({"type": "Set", "element": {"type": "String"}}), false))
        );
        assert_eq!(
            t(json!({"anyOf": [{"type": "boolean"}, {"type": "null"}]})),
            Ok((json!({"type": "Boolean"}), true))
        );
        assert_eq!(
            t(json!({"enum": ["EUR", "USD"]})),
            Ok((json!({"type": "String"}), false))
        );
        assert!(
            t(json!({"type": "number"}))
                .unwrap_err()
                .contains("floating point")
        );
        assert!(t(json!({"type": "object"})).is_err());
        let defs = json!({"Currency": {"type": "string", "enum": ["EUR"]}});
        assert_eq!(
            cedar_type(&json!({"$ref": "#/$defs/Currency"}), defs.as_object(), 0),
            Ok((json!({"type": "String"}), false))
        );
    }

    #[test]
    fn null_arguments_are_left_out() {
        let args = json!({"a": 1, "b": null, "c": "x"});
        assert_eq!(
            args_value(args.as_object().unwrap()),
            json!({"a": 1, "c": "x"})
        );
    }
}
