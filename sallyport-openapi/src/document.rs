//! The parsed document: its operations indexed once, the whole document as one shared JSON
//! Schema resource, and the read-only lookups the guard compiler and the compatibility check
//! share (parameters, `$ref` chains, a schema's type and object shape).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use crate::OpenApiError;
use crate::OperationSelector;
use sallyport_core::drift::canonical_hash;

/// The URI the document is registered under as a JSON Schema resource. It names nothing
/// outside this process: no `$ref` can make the validator fetch anything.
pub(super) const BASE_URI: &str = "urn:sallyport:openapi";

/// Characters a JSON pointer must percent-encode inside a URI fragment.
pub(super) const FRAGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Longest `$ref` chain followed before giving up (a chain of `$ref`s to `$ref`s).
const MAX_REF_HOPS: usize = 32;

/// One operation of the document.
#[derive(Debug)]
pub(super) struct Operation {
    /// Lowercase, as the document spells it.
    pub(super) method: &'static str,
    /// The path template, as the document spells it.
    pub(super) path: String,
    /// JSON pointer to the operation object.
    pub(super) pointer: String,
}

/// A parsed, upgraded and indexed OpenAPI document.
pub(super) struct Document {
    /// The document (OpenAPI 3.0 keywords already rewritten to JSON Schema 2020-12), shared by
    /// the schema registry and every guard.
    pub(super) root: Arc<Value>,
    pub(super) hash: String,
    pub(super) version: String,
    /// The document as one JSON Schema resource at [`BASE_URI`]: validators resolve their
    /// `$ref`s here instead of each taking a copy of the document.
    pub(super) registry: jsonschema::Registry<'static>,
    operations: Vec<Operation>,
    by_id: HashMap<String, usize>,
    /// `(lowercase method, template with placeholder names removed)`.
    by_route: HashMap<(String, String), usize>,
}

impl Document {
    pub(super) fn new(doc: Value) -> Result<Self, OpenApiError> {
        let version = doc
            .get("openapi")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if !(version.starts_with("3.0") || version.starts_with("3.1")) {
            return Err(OpenApiError::Version(version));
        }
        let hash = canonical_hash(&doc);
        let mut doc = doc;
        if version.starts_with("3.0") {
            upgrade_30(&mut doc, 0);
        }
        let root = Arc::new(doc);
        let registry = jsonschema::Registry::new()
            .draft(jsonschema::Draft::Draft202012)
            .retrieve_known_draft_meta_schemas(false)
            .add(BASE_URI, Arc::clone(&root))
            .and_then(jsonschema::RegistryBuilder::prepare)
            .map_err(|e| OpenApiError::Schema {
                pointer: String::new(),
                reason: e.to_string(),
            })?;
        let mut operations = Vec::new();
        let mut by_id = HashMap::new();
        let mut by_route = HashMap::new();
        if let Some(paths) = root.get("paths").and_then(Value::as_object) {
            for (path, item) in paths {
                for method in METHODS {
                    let Some(op) = item.get(*method) else {
                        continue;
                    };
                    let index = operations.len();
                    operations.push(Operation {
                        method,
                        path: path.clone(),
                        pointer: format!("/paths/{}/{method}", escape(path)),
                    });
                    // The first of two operations with one id (or one route) wins, as a
                    // search in document order would find it.
                    if let Some(id) = op.get("operationId").and_then(Value::as_str) {
                        by_id.entry(id.to_owned()).or_insert(index);
                    }
                    by_route
                        .entry(((*method).to_owned(), normalize_template(path)))
                        .or_insert(index);
                }
            }
        }
        Ok(Self {
            root,
            hash,
            version,
            registry,
            operations,
            by_id,
            by_route,
        })
    }

    pub(super) fn operation_count(&self) -> usize {
        self.operations.len()
    }

    /// Finds an operation by id or by route.
    pub(super) fn find(&self, selector: &OperationSelector) -> Option<&Operation> {
        let index = match selector {
            OperationSelector::Id(id) => self.by_id.get(id)?,
            OperationSelector::Route { method, path } => self
                .by_route
                .get(&(method.to_ascii_lowercase(), normalize_template(path)))?,
        };
        self.operations.get(*index)
    }

    /// The value at a JSON pointer (`Null` when there is none).
    pub(super) fn at(&self, pointer: &str) -> &Value {
        self.root.pointer(pointer).unwrap_or(&Value::Null)
    }

    /// The parameters of an operation (path-item level, overridden by operation level):
    /// `(name, location, pointer to the resolved parameter object)`.
    pub(super) fn parameters(
        &self,
        path: &str,
        op_pointer: &str,
    ) -> Result<Vec<(String, String, String)>, OpenApiError> {
        let mut out: BTreeMap<(String, String), String> = BTreeMap::new();
        let item_pointer = format!("/paths/{}", escape(path));
        for base in [item_pointer, op_pointer.to_owned()] {
            let list = format!("{base}/parameters");
            let Some(items) = self.root.pointer(&list).and_then(Value::as_array) else {
                continue;
            };
            for (i, p) in items.iter().enumerate() {
                let pointer = self.ref_pointer(p, &format!("{list}/{i}"))?;
                let param = self.at(&pointer);
                let name = param
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let location = param.get("in").and_then(Value::as_str).unwrap_or_default();
                if location == "cookie" {
                    continue;
                }
                out.insert((name.to_owned(), location.to_owned()), pointer);
            }
        }
        Ok(out
            .into_iter()
            .map(|((name, location), pointer)| (name, location, pointer))
            .collect())
    }

    /// Follows `$ref`s from the object at `at` to the pointer of the object it names.
    pub(super) fn ref_pointer(&self, value: &Value, at: &str) -> Result<String, OpenApiError> {
        let mut pointer = at.to_owned();
        let mut current = value;
        for _ in 0..MAX_REF_HOPS {
            match current.get("$ref").and_then(Value::as_str) {
                Some(r) => {
                    let target = local_pointer(r).ok_or_else(|| OpenApiError::Ref(r.to_owned()))?;
                    current = self
                        .root
                        .pointer(&target)
                        .ok_or_else(|| OpenApiError::Ref(r.to_owned()))?;
                    pointer = target;
                }
                None => return Ok(pointer),
            }
        }
        Err(OpenApiError::Ref(pointer))
    }

    /// `schema` with its `$ref` chain followed (bounded, so a `$ref` loop ends).
    pub(super) fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        let mut current = schema;
        for _ in 0..MAX_REF_HOPS {
            match current
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(local_pointer)
                .and_then(|p| self.root.pointer(&p))
            {
                Some(next) => current = next,
                None => return current,
            }
        }
        current
    }

    /// The primary JSON type of a schema (through `$ref` and `allOf`, depth first), if it
    /// names one. Iterative and visiting each schema once, so neither a loop nor a long chain
    /// of schemas can exhaust the stack.
    pub(super) fn schema_type(&self, schema: &Value) -> Option<String> {
        let mut seen: HashSet<*const Value> = HashSet::new();
        let mut stack = vec![schema];
        while let Some(schema) = stack.pop() {
            let schema = self.resolve(schema);
            if !seen.insert(std::ptr::from_ref(schema)) {
                continue;
            }
            match schema.get("type") {
                Some(Value::String(t)) => return Some(t.clone()),
                Some(Value::Array(ts)) => {
                    if let Some(t) = ts.iter().filter_map(Value::as_str).find(|t| *t != "null") {
                        return Some(t.to_owned());
                    }
                }
                _ => {
                    if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
                        stack.extend(parts.iter().rev());
                    }
                }
            }
        }
        None
    }

    /// Properties, required names and closedness of an object schema, through `$ref` and
    /// `allOf` (each schema visited once: a loop ends, and a later `allOf` part overrides an
    /// earlier one's property of the same name).
    pub(super) fn object_shape(&self, schema: &Value) -> ObjectShape {
        let mut shape = ObjectShape::default();
        let mut seen: HashSet<*const Value> = HashSet::new();
        let mut stack = vec![schema];
        while let Some(schema) = stack.pop() {
            let schema = self.resolve(schema);
            if !seen.insert(std::ptr::from_ref(schema)) {
                continue;
            }
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, prop) in props {
                    shape.properties.insert(name.clone(), prop.clone());
                }
            }
            if let Some(req) = schema.get("required").and_then(Value::as_array) {
                shape
                    .required
                    .extend(req.iter().filter_map(Value::as_str).map(str::to_owned));
            }
            if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
                shape.closed = true;
            }
            if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
                stack.extend(parts.iter().rev());
            }
        }
        shape
    }
}

/// What an object schema declares, `allOf` parts merged.
#[derive(Debug, Default)]
pub(super) struct ObjectShape {
    pub(super) properties: BTreeMap<String, Value>,
    pub(super) required: BTreeSet<String>,
    pub(super) closed: bool,
}

/// The JSON pointer a local `$ref` (`#/components/schemas/Pet`, percent-encoded or not)
/// names; `None` for a reference outside the document.
pub(super) fn local_pointer(reference: &str) -> Option<String> {
    let fragment = reference.strip_prefix('#')?;
    percent_encoding::percent_decode_str(fragment)
        .decode_utf8()
        .ok()
        .map(std::borrow::Cow::into_owned)
}

/// OpenAPI 3.0 schema dialect → JSON Schema 2020-12: `nullable: true` adds `null` to the
/// type; boolean `exclusiveMinimum`/`exclusiveMaximum` become numbers.
///
/// `nullable: true` without a `type` in the same schema object changes nothing, as OAS 3.0.3
/// says ("adds `null` to the allowed types specified by the `type` keyword, only if `type` is
/// explicitly defined within the same Schema Object"): such a schema already allows `null`
/// unless another of its keywords refuses it, and "other Schema Object constraints retain
/// their defined behavior". So `{nullable: true}` accepts `null` and everything else, while
/// `{nullable: true, allOf: [{type: string}]}` or `{nullable: true, enum: [a, b]}` refuse
/// `null`: the guard does not widen a `$ref`, `allOf` or `enum` it cannot see a type on.
/// (An `enum` beside `type` and `nullable` refuses `null` too unless it lists it, for the
/// same reason.)
fn upgrade_30(value: &mut Value, depth: usize) {
    if depth > 256 {
        return;
    }
    match value {
        Value::Object(map) => {
            if map.get("nullable") == Some(&Value::Bool(true)) {
                match map.get_mut("type") {
                    Some(Value::String(t)) => {
                        let t = t.clone();
                        map.insert("type".to_owned(), serde_json::json!([t, "null"]));
                    }
                    Some(Value::Array(ts)) if !ts.contains(&Value::from("null")) => {
                        ts.push(Value::from("null"));
                    }
                    _ => {}
                }
            }
            for (flag, bound) in [
                ("exclusiveMinimum", "minimum"),
                ("exclusiveMaximum", "maximum"),
            ] {
                if let Some(Value::Bool(b)) = map.get(flag).cloned() {
                    map.remove(flag);
                    if let (true, Some(limit)) = (b, map.remove(bound)) {
                        map.insert(flag.to_owned(), limit);
                    }
                }
            }
            for (key, v) in map.iter_mut() {
                if key != "example" && key != "examples" && key != "enum" && key != "default" {
                    upgrade_30(v, depth + 1);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| upgrade_30(v, depth + 1)),
        _ => {}
    }
}

/// Escapes one JSON pointer segment.
pub(super) fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// Whether two path templates are the same route (placeholder names may differ).
#[cfg(test)]
fn same_template(a: &str, b: &str) -> bool {
    normalize_template(a) == normalize_template(b)
}

/// A path template with its placeholder names removed (`/a/{}/b`), and no trailing `/`.
fn normalize_template(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_param = false;
    for c in path.trim_end_matches('/').chars() {
        match c {
            '{' => {
                in_param = true;
                out.push_str("{}");
            }
            '}' => in_param = false,
            _ if in_param => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_whatever_the_placeholder_names() {
        assert!(same_template(
            "/v1/projects/{project_id}",
            "/v1/projects/{projectId}"
        ));
        assert!(!same_template(
            "/v1/projects/{id}",
            "/v1/projects/{id}/builds"
        ));
    }

    #[test]
    fn openapi_30_nullable_and_boolean_exclusive_bounds_are_upgraded() {
        let mut v = serde_json::json!({"type": "string", "nullable": true,
            "properties": {"n": {"type": "integer", "minimum": 3, "exclusiveMinimum": true}}});
        upgrade_30(&mut v, 0);
        assert_eq!(v["type"], serde_json::json!(["string", "null"]));
        assert_eq!(
            v["properties"]["n"],
            serde_json::json!({"type": "integer", "exclusiveMinimum": 3})
        );
    }

    /// The guard of `POST /items` whose body is `schema`, in an OpenAPI 3.0.3 document.
    fn guard_30(schema: &serde_json::Value) -> crate::OperationGuard {
        let doc = serde_json::json!({
            "openapi": "3.0.3",
            "info": {"title": "t", "version": "1"},
            "paths": {"/items": {"post": {
                "operationId": "create",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                    "type": "object", "properties": {"v": schema}
                }}}},
                "responses": {"201": {"description": "ok"}}
            }}},
            "components": {"schemas": {"Name": {"type": "string"}}}
        });
        crate::OpenApi::from_value(doc)
            .expect("document")
            .operation(&crate::OperationSelector::id("create"))
            .expect("guard")
    }

    /// Whether the guard lets `{"v": value}` through in strict mode, and the divergence kinds.
    fn accepts(guard: &crate::OperationGuard, value: &serde_json::Value) -> Vec<String> {
        let body = serde_json::json!({ "v": value });
        let request = crate::OutgoingRequest::new("POST", "/items").with_body(&body);
        let decision = guard.check(sallyport_core::drift::DriftMode::Strict, &request);
        assert_eq!(decision.allowed, decision.divergences.is_empty());
        decision
            .divergences
            .iter()
            .map(|d| format!("{} {}", d.kind.as_str(), d.path))
            .collect()
    }

    #[test]
    fn nullable_without_a_type_changes_nothing_and_a_bare_schema_accepts_null() {
        let mut v = serde_json::json!({"nullable": true, "description": "anything"});
        upgrade_30(&mut v, 0);
        assert_eq!(
            v,
            serde_json::json!({"nullable": true, "description": "anything"})
        );
        let guard = guard_30(&serde_json::json!({"nullable": true}));
        for value in [
            serde_json::json!(null),
            serde_json::json!("x"),
            serde_json::json!(3),
        ] {
            assert_eq!(accepts(&guard, &value), Vec::<String>::new());
        }
    }

    #[test]
    fn nullable_without_a_type_does_not_widen_an_all_of_or_an_enum_to_null() {
        let guard = guard_30(&serde_json::json!({
            "nullable": true, "allOf": [{"$ref": "#/components/schemas/Name"}]
        }));
        assert_eq!(
            accepts(&guard, &serde_json::json!("x")),
            Vec::<String>::new()
        );
        assert_eq!(
            accepts(&guard, &serde_json::json!(null)),
            ["type_mismatch /body/v"]
        );
        let guard = guard_30(&serde_json::json!({"nullable": true, "enum": ["a", "b"]}));
        assert_eq!(
            accepts(&guard, &serde_json::json!("a")),
            Vec::<String>::new()
        );
        assert_eq!(
            accepts(&guard, &serde_json::json!(null)),
            ["constraint_violation /body/v"]
        );
    }

    #[test]
    fn nullable_beside_a_type_admits_null() {
        let guard = guard_30(&serde_json::json!({"type": "string", "nullable": true}));
        assert_eq!(
            accepts(&guard, &serde_json::json!(null)),
            Vec::<String>::new()
        );
        assert_eq!(
            accepts(&guard, &serde_json::json!(2)),
            ["type_mismatch /body/v"]
        );
        let guard = guard_30(&serde_json::json!({"type": "string"}));
        assert_eq!(
            accepts(&guard, &serde_json::json!(null)),
            ["type_mismatch /body/v"]
        );
    }

    #[test]
    fn a_type_or_shape_lookup_through_a_self_referencing_all_of_ends() {
        let doc = Document::new(serde_json::json!({
            "openapi": "3.1.0",
            "components": {"schemas": {
                "A": {"allOf": [{"$ref": "#/components/schemas/A"}, {"$ref": "#/components/schemas/B"}]},
                "B": {"allOf": [{"$ref": "#/components/schemas/A"}],
                      "properties": {"b": {"type": "string"}}, "required": ["b"]}
            }}
        }))
        .expect("document");
        let a = serde_json::json!({"$ref": "#/components/schemas/A"});
        assert_eq!(doc.schema_type(&a), None);
        let shape = doc.object_shape(&a);
        assert_eq!(shape.properties.keys().collect::<Vec<_>>(), ["b"]);
        assert_eq!(shape.required.iter().collect::<Vec<_>>(), ["b"]);
        assert!(!shape.closed);
    }
}
