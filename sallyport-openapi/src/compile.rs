//! Compiling one operation's guard: a small validator per parameter schema and for the JSON
//! request body, each a `$ref` into the document's shared schema registry, so only the schemas
//! the operation reaches are compiled. Before a schema is compiled, the schemas it reaches are
//! walked once (iteratively) and a loop that never descends into the value is refused.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::document::{BASE_URI, Document, FRAGMENT, escape, local_pointer};
use crate::guard::{BodyCheck, OperationGuard, ParamCheck};
use crate::{OpenApiError, OperationSelector};

/// Compiles the guard of the operation `selector` names.
pub(super) fn operation(
    doc: &Document,
    selector: &OperationSelector,
) -> Result<OperationGuard, OpenApiError> {
    let found = doc
        .find(selector)
        .ok_or_else(|| OpenApiError::NoOperation(selector.to_string()))?;
    let pointer = found.pointer.as_str();
    let op = doc.at(pointer);
    let mut params = Vec::new();
    for (name, location, param_pointer) in doc.parameters(&found.path, pointer)? {
        let param = doc.at(&param_pointer);
        let schema_pointer = format!("{param_pointer}/schema");
        let schema = doc.root.pointer(&schema_pointer);
        params.push(ParamCheck {
            required: location == "path"
                || param.get("required").and_then(Value::as_bool) == Some(true),
            explode: param
                .get("explode")
                .and_then(Value::as_bool)
                .unwrap_or(location == "query"),
            kind: schema.and_then(|s| doc.schema_type(s)),
            item_kind: schema
                .and_then(|s| doc.resolve(s).get("items"))
                .map(|items| doc.schema_type(items)),
            validator: match schema {
                Some(_) => Some(validator(doc, &schema_pointer)?),
                // A `content`-described parameter: presence is all that is checked.
                None => None,
            },
            name,
            location,
        });
    }
    let mut body = None;
    if let Some(request_body) = op.get("requestBody") {
        let rb_pointer = doc.ref_pointer(request_body, &format!("{pointer}/requestBody"))?;
        let rb = doc.at(&rb_pointer);
        let media = rb.get("content").and_then(Value::as_object).and_then(|c| {
            c.keys()
                .find(|k| k.as_str() == "application/json")
                .or_else(|| c.keys().find(|k| k.ends_with("+json")))
                .cloned()
        });
        if let Some(media) = media {
            let schema_pointer = format!("{rb_pointer}/content/{}/schema", escape(&media));
            body = Some(BodyCheck {
                required: rb.get("required").and_then(Value::as_bool) == Some(true),
                validator: validator(doc, &schema_pointer)?,
            });
        }
    }
    Ok(OperationGuard {
        method: found.method.to_uppercase(),
        path: found.path.clone(),
        operation_id: op
            .get("operationId")
            .and_then(Value::as_str)
            .map(str::to_owned),
        params,
        body,
        root: Arc::clone(&doc.root),
    })
}

/// A validator for the schema at `pointer`: a one-keyword schema (`$ref` to the pointer) over
/// the document's registry, so the document is neither copied nor walked again, and only what
/// the schema reaches is compiled.
fn validator(doc: &Document, pointer: &str) -> Result<jsonschema::Validator, OpenApiError> {
    refuse_loops(doc, pointer)?;
    let fragment = percent_encoding::utf8_percent_encode(pointer, FRAGMENT);
    let schema = json!({ "$ref": format!("{BASE_URI}#{fragment}") });
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .with_registry(&doc.registry)
        .build(&schema)
        .map_err(|e| OpenApiError::Schema {
            pointer: pointer.to_owned(),
            reason: e.to_string(),
        })
}

/// Keywords whose subschemas apply to the very value their schema applies to: a loop through
/// these (and `$ref`) never ends.
const IN_PLACE: &[&str] = &[
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
];

/// Keywords whose subschemas apply to a part of the value (a property, an item, a name): a
/// loop through one of these ends with the value.
const DESCENDING: &[&str] = &[
    "properties",
    "patternProperties",
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "items",
    "prefixItems",
    "additionalItems",
    "unevaluatedItems",
    "contains",
];

/// Keywords whose value is a map from names to subschemas.
const MAPS: &[&str] = &["properties", "patternProperties", "dependentSchemas"];

/// Refuses the schema at `root` when a schema it reaches reaches itself again through `$ref`s
/// and in-place keywords only. Walks the reachable schemas once, then looks for a loop among
/// the in-place edges; both iteratively, so a deep or long chain cannot exhaust the stack.
fn refuse_loops(doc: &Document, root: &str) -> Result<(), OpenApiError> {
    let mut pointers: Vec<String> = vec![root.to_owned()];
    let mut index: HashMap<String, usize> = HashMap::from([(root.to_owned(), 0)]);
    let mut in_place: Vec<Vec<usize>> = Vec::new();
    let mut next = 0;
    while next < pointers.len() {
        let pointer = pointers[next].clone();
        let mut edges = Vec::new();
        for (child, is_in_place) in children(doc, &pointer)? {
            let id = match index.get(&child) {
                Some(id) => *id,
                None => {
                    index.insert(child.clone(), pointers.len());
                    pointers.push(child);
                    pointers.len() - 1
                }
            };
            if is_in_place {
                edges.push(id);
            }
        }
        in_place.push(edges);
        next += 1;
    }

    // Depth-first search over the in-place edges: 0 unseen, 1 on the path, 2 finished.
    let mut state = vec![0_u8; pointers.len()];
    for start in 0..pointers.len() {
        if state[start] != 0 {
            continue;
        }
        state[start] = 1;
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        while let Some(top) = path.last_mut() {
            let (node, edge) = *top;
            let Some(&child) = in_place[node].get(edge) else {
                state[node] = 2;
                path.pop();
                continue;
            };
            top.1 += 1;
            match state[child] {
                0 => {
                    state[child] = 1;
                    path.push((child, 0));
                }
                1 => {
                    let from = path.iter().position(|(n, _)| *n == child).unwrap_or(0);
                    let mut cycle: Vec<String> = path[from..]
                        .iter()
                        .map(|(n, _)| pointers[*n].clone())
                        .collect();
                    cycle.push(pointers[child].clone());
                    return Err(OpenApiError::Cycle {
                        pointer: root.to_owned(),
                        cycle,
                    });
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// The subschemas the schema at `pointer` applies: `(pointer, applies in place)`. A `$ref`
/// counts as its target's pointer.
fn children(doc: &Document, pointer: &str) -> Result<Vec<(String, bool)>, OpenApiError> {
    let Some(Value::Object(schema)) = doc.root.pointer(pointer) else {
        // `true`, `false`, or not a schema at all: nothing below it.
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let target = local_pointer(reference)
            .filter(|target| doc.root.pointer(target).is_some())
            .ok_or_else(|| OpenApiError::Ref(reference.to_owned()))?;
        out.push((target, true));
    }
    for (keywords, is_in_place) in [(IN_PLACE, true), (DESCENDING, false)] {
        for keyword in keywords {
            let Some(value) = schema.get(*keyword) else {
                continue;
            };
            let at = format!("{pointer}/{keyword}");
            match value {
                Value::Array(items) => {
                    out.extend((0..items.len()).map(|i| (format!("{at}/{i}"), is_in_place)));
                }
                Value::Object(map) if MAPS.contains(keyword) => {
                    out.extend(
                        map.keys()
                            .map(|name| (format!("{at}/{}", escape(name)), is_in_place)),
                    );
                }
                Value::Object(_) => out.push((at, is_in_place)),
                _ => {}
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(schemas: &Value) -> Document {
        Document::new(json!({
            "openapi": "3.1.0",
            "paths": {"/things": {"post": {
                "operationId": "createThing",
                "requestBody": {"required": true, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Thing"}}}}
            }}},
            "components": {"schemas": schemas}
        }))
        .expect("document")
    }

    fn compile(doc: &Document) -> Result<OperationGuard, OpenApiError> {
        operation(doc, &OperationSelector::id("createThing"))
    }

    #[test]
    fn a_schema_whose_all_of_refers_to_itself_is_refused_with_the_loop() {
        let doc = document(&json!({
            "Thing": {"allOf": [{"$ref": "#/components/schemas/Thing"}], "type": "object"}
        }));
        let err = compile(&doc).expect_err("a self-referencing schema");
        match &err {
            OpenApiError::Cycle { pointer, cycle } => {
                assert_eq!(
                    pointer,
                    "/paths/~1things/post/requestBody/content/application~1json/schema"
                );
                assert_eq!(
                    cycle,
                    &[
                        "/components/schemas/Thing",
                        "/components/schemas/Thing/allOf/0",
                        "/components/schemas/Thing",
                    ]
                );
            }
            other => panic!("expected a cycle, got {other:?}"),
        }
        assert_eq!(
            err.to_string(),
            "the schema at /paths/~1things/post/requestBody/content/application~1json/schema \
             cannot be checked: it refers back to itself without descending into the value \
             (/components/schemas/Thing -> /components/schemas/Thing/allOf/0 -> /components/schemas/Thing)"
        );
    }

    #[test]
    fn longer_loops_through_any_of_not_and_plain_refs_are_refused() {
        for schemas in [
            json!({"Thing": {"anyOf": [{"$ref": "#/components/schemas/B"}]},
                   "B": {"oneOf": [{"type": "string"}, {"$ref": "#/components/schemas/Thing"}]}}),
            json!({"Thing": {"$ref": "#/components/schemas/B"},
                   "B": {"$ref": "#/components/schemas/Thing"}}),
            json!({"Thing": {"type": "object", "properties": {"x": {"$ref": "#/components/schemas/B"}}},
                   "B": {"not": {"$ref": "#/components/schemas/B"}}}),
            json!({"Thing": {"if": {"$ref": "#/components/schemas/Thing"}}}),
            json!({"Thing": {"dependentSchemas": {"a": {"$ref": "#/components/schemas/Thing"}}}}),
        ] {
            let err = compile(&document(&schemas)).expect_err("a loop");
            assert!(
                matches!(err, OpenApiError::Cycle { .. }),
                "{schemas}: {err:?}"
            );
        }
    }

    #[test]
    fn recursion_through_a_property_or_an_item_is_a_tree_and_compiles() {
        let doc = document(&json!({
            "Thing": {"type": "object", "additionalProperties": false,
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/components/schemas/Thing"}},
                    "parent": {"allOf": [{"$ref": "#/components/schemas/Thing"}]}
                }}
        }));
        let guard = compile(&doc).expect("a recursive tree compiles");
        let body = json!({"name": "a", "children": [{"name": "b", "children": [{"name": 3}]}],
            "parent": {"name": "p", "colour": "red"}});
        let request = crate::OutgoingRequest::new("POST", "/things").with_body(&body);
        let paths: Vec<String> = guard
            .check(sallyport_core::drift::DriftMode::Strict, &request)
            .divergences
            .into_iter()
            .map(|d| format!("{} {}", d.kind.as_str(), d.path))
            .collect();
        assert_eq!(
            paths,
            [
                "type_mismatch /body/children/0/children/0/name",
                "unknown_field /body/parent/colour"
            ]
        );
    }

    #[test]
    fn a_ref_outside_the_document_or_to_nothing_is_refused() {
        for (reference, expected) in [
            (
                "https://example.com/thing.json",
                "https://example.com/thing.json",
            ),
            (
                "#/components/schemas/Missing",
                "#/components/schemas/Missing",
            ),
        ] {
            let doc = document(&json!({"Thing": {"allOf": [{"$ref": reference}]}}));
            match compile(&doc) {
                Err(OpenApiError::Ref(r)) => assert_eq!(r, expected),
                other => panic!("{reference}: {other:?}"),
            }
        }
    }
}
