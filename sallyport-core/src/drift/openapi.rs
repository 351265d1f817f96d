//! Payload drift against an upstream OpenAPI 3.0 / 3.1 document.
//!
//! An [`OpenApi`] document (JSON or YAML) is attached to an HTTP channel. For each action the
//! channel compiles an [`OperationGuard`] once ([`OpenApi::operation`], by `operationId` or by
//! method and path template); before sending, it checks the outgoing request (path, query and
//! header parameters, JSON body) with [`OperationGuard::check`] in the executor's
//! [`DriftMode`]. Divergences are the payload guard's: `missing_required`, `unknown_field`
//! (honouring `additionalProperties`, also inside `$ref`s and `allOf`), `type_mismatch` and
//! `constraint_violation`, each with a JSON pointer rooted at `/path`, `/query`, `/header` or
//! `/body`, and the observed JSON type, never the value.
//!
//! `$ref`s are resolved by the JSON Schema validator against the whole document (local,
//! nested and cyclic references work); OpenAPI 3.0's `nullable` and boolean
//! `exclusiveMinimum`/`exclusiveMaximum` are rewritten to their JSON Schema 2020-12 forms first.
//!
//! [`check_catalog`] compares every HTTP action's request shape with the operation it targets
//! and reports what would fail: a field the upstream now requires that the action never sends,
//! a field the action sends that the upstream no longer declares, a type change. The document's
//! [`OpenApi::hash`] belongs in the catalog's provenance
//! ([`crate::catalog::CatalogBuilder::upstream_spec`]), so a changed upstream spec shows as
//! `provenance_changed`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::payload::{json_type, push_divergences};
use super::{Divergence, DivergenceKind, DriftMode, PayloadDecision, Verdict, canonical_hash};
use crate::catalog::{Catalog, Entry};
use crate::target::{HttpBody, HttpTarget, Target};

/// Why a document or an operation could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenApiError {
    /// The text is neither JSON nor YAML.
    #[error("the OpenAPI document does not parse: {0}")]
    Parse(String),
    /// The document is not OpenAPI 3.0 or 3.1.
    #[error("not an OpenAPI 3.0 or 3.1 document (openapi: {0})")]
    Version(String),
    /// No operation matches.
    #[error("no operation {0} in the OpenAPI document")]
    NoOperation(String),
    /// A schema of the operation does not compile.
    #[error("the schema at {pointer} does not compile: {reason}")]
    Schema {
        /// JSON pointer into the document.
        pointer: String,
        /// What the validator said.
        reason: String,
    },
    /// A `$ref` points nowhere (or outside the document).
    #[error("unresolvable $ref {0}")]
    Ref(String),
}

/// Which operation to check against.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OperationSelector {
    /// By `operationId`.
    Id(String),
    /// By method and path template (`POST`, `/v1/projects/{project_id}/deployments`);
    /// placeholder names need not match.
    Route {
        /// The HTTP method.
        method: String,
        /// The path template.
        path: String,
    },
}

impl OperationSelector {
    /// By `operationId`.
    pub fn id(id: impl Into<String>) -> Self {
        Self::Id(id.into())
    }

    /// By method and path template.
    pub fn route(method: impl Into<String>, path: impl Into<String>) -> Self {
        Self::Route {
            method: method.into(),
            path: path.into(),
        }
    }
}

impl fmt::Display for OperationSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Id(id) => write!(f, "operationId `{id}`"),
            Self::Route { method, path } => write!(f, "{} {path}", method.to_uppercase()),
        }
    }
}

/// Characters a JSON pointer must percent-encode inside a URI fragment.
const FRAGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
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

/// An OpenAPI 3.0 or 3.1 document.
#[derive(Clone)]
pub struct OpenApi {
    doc: Value,
    hash: String,
    version: String,
}

impl fmt::Debug for OpenApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenApi")
            .field("version", &self.version)
            .field("hash", &self.hash)
            .finish_non_exhaustive()
    }
}

impl OpenApi {
    /// Parses JSON or YAML text.
    ///
    /// # Errors
    ///
    /// [`OpenApiError::Parse`] or [`OpenApiError::Version`].
    pub fn parse(text: &str) -> Result<Self, OpenApiError> {
        let doc: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(_) => {
                serde_norway::from_str(text).map_err(|e| OpenApiError::Parse(e.to_string()))?
            }
        };
        Self::from_value(doc)
    }

    /// Uses an already parsed document.
    ///
    /// # Errors
    ///
    /// [`OpenApiError::Version`] when `openapi` is not 3.0.x or 3.1.x.
    pub fn from_value(doc: Value) -> Result<Self, OpenApiError> {
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
        Ok(Self { doc, hash, version })
    }

    /// SHA-256 of the document's canonical JSON (the same document in JSON or YAML has the
    /// same hash). Put it in the catalog's provenance.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The `openapi` version string.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Finds an operation: `(method, path template, pointer to the operation object)`.
    fn find(&self, selector: &OperationSelector) -> Option<(String, String, String)> {
        let paths = self.doc.get("paths")?.as_object()?;
        for (path, item) in paths {
            for method in METHODS {
                let Some(op) = item.get(*method) else {
                    continue;
                };
                let hit = match selector {
                    OperationSelector::Id(id) => {
                        op.get("operationId").and_then(Value::as_str) == Some(id.as_str())
                    }
                    OperationSelector::Route { method: m, path: p } => {
                        m.eq_ignore_ascii_case(method) && same_template(p, path)
                    }
                };
                if hit {
                    return Some((
                        (*method).to_owned(),
                        path.clone(),
                        format!("/paths/{}/{method}", escape(path)),
                    ));
                }
            }
        }
        None
    }

    /// Compiles the guard for one operation.
    ///
    /// # Errors
    ///
    /// [`OpenApiError::NoOperation`], [`OpenApiError::Ref`] or [`OpenApiError::Schema`].
    pub fn operation(&self, selector: &OperationSelector) -> Result<OperationGuard, OpenApiError> {
        let (method, path, pointer) = self
            .find(selector)
            .ok_or_else(|| OpenApiError::NoOperation(selector.to_string()))?;
        let op = self.doc.pointer(&pointer).unwrap_or(&Value::Null);
        let mut params = Vec::new();
        for (name, location, param_pointer) in self.parameters(&path, &pointer)? {
            let param = self.doc.pointer(&param_pointer).unwrap_or(&Value::Null);
            let schema_pointer = format!("{param_pointer}/schema");
            let schema = self
                .doc
                .pointer(&schema_pointer)
                .cloned()
                .unwrap_or(Value::Bool(true));
            params.push(ParamCheck {
                required: location == "path"
                    || param.get("required").and_then(Value::as_bool) == Some(true),
                explode: param
                    .get("explode")
                    .and_then(Value::as_bool)
                    .unwrap_or(location == "query"),
                kind: self.schema_type(&schema),
                item_kind: self
                    .resolve(&schema)
                    .get("items")
                    .map(|i| self.schema_type(i)),
                validator: match self.doc.pointer(&schema_pointer) {
                    Some(_) => Some(self.validator(&schema_pointer)?),
                    // A `content`-described parameter: presence is all that is checked.
                    None => None,
                },
                name,
                location,
            });
        }
        let mut body = None;
        if let Some(request_body) = op.get("requestBody") {
            let rb_pointer = self.ref_pointer(request_body, &format!("{pointer}/requestBody"))?;
            let rb = self.doc.pointer(&rb_pointer).unwrap_or(&Value::Null);
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
                    validator: self.validator(&schema_pointer)?,
                });
            }
        }
        Ok(OperationGuard {
            method: method.to_uppercase(),
            path,
            operation_id: op
                .get("operationId")
                .and_then(Value::as_str)
                .map(str::to_owned),
            params,
            body,
            root: self.doc.clone(),
        })
    }

    /// The parameters of an operation (path-item level, overridden by operation level):
    /// `(name, location, pointer to the resolved parameter object)`.
    fn parameters(
        &self,
        path: &str,
        op_pointer: &str,
    ) -> Result<Vec<(String, String, String)>, OpenApiError> {
        let mut out: BTreeMap<(String, String), String> = BTreeMap::new();
        let item_pointer = format!("/paths/{}", escape(path));
        for base in [item_pointer, op_pointer.to_owned()] {
            let list = format!("{base}/parameters");
            let Some(items) = self.doc.pointer(&list).and_then(Value::as_array) else {
                continue;
            };
            for (i, p) in items.iter().enumerate() {
                let pointer = self.ref_pointer(p, &format!("{list}/{i}"))?;
                let param = self.doc.pointer(&pointer).unwrap_or(&Value::Null);
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
    fn ref_pointer(&self, value: &Value, at: &str) -> Result<String, OpenApiError> {
        let mut pointer = at.to_owned();
        let mut current = value;
        for _ in 0..32 {
            match current.get("$ref").and_then(Value::as_str) {
                Some(r) => {
                    let target = r
                        .strip_prefix('#')
                        .ok_or_else(|| OpenApiError::Ref(r.to_owned()))?;
                    current = self
                        .doc
                        .pointer(target)
                        .ok_or_else(|| OpenApiError::Ref(r.to_owned()))?;
                    pointer = target.to_owned();
                }
                None => return Ok(pointer),
            }
        }
        Err(OpenApiError::Ref(pointer))
    }

    /// `schema` with its `$ref` chain followed (cycle-safe).
    fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        let mut current = schema;
        for _ in 0..32 {
            match current
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix('#'))
                .and_then(|p| self.doc.pointer(p))
            {
                Some(next) => current = next,
                None => return current,
            }
        }
        current
    }

    /// The primary JSON type of a schema (through `$ref` and `allOf`), if it names one.
    fn schema_type(&self, schema: &Value) -> Option<String> {
        let schema = self.resolve(schema);
        match schema.get("type") {
            Some(Value::String(t)) => Some(t.clone()),
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .find(|t| *t != "null")
                .map(str::to_owned),
            _ => schema
                .get("allOf")
                .and_then(Value::as_array)
                .and_then(|parts| parts.iter().find_map(|p| self.schema_type(p))),
        }
    }

    /// A validator for the schema at `pointer`, resolving `$ref`s against the whole document.
    fn validator(&self, pointer: &str) -> Result<jsonschema::Validator, OpenApiError> {
        let mut root = self.doc.clone();
        if let Value::Object(map) = &mut root {
            let fragment = percent_encoding::utf8_percent_encode(pointer, FRAGMENT);
            map.insert("$ref".to_owned(), Value::String(format!("#{fragment}")));
            map.insert(
                "$schema".to_owned(),
                Value::String("https://json-schema.org/draft/2020-12/schema".to_owned()),
            );
        }
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(&root)
            .map_err(|e| OpenApiError::Schema {
                pointer: pointer.to_owned(),
                reason: e.to_string(),
            })
    }

    /// Properties, required names and closedness of an object schema, through `$ref` and
    /// `allOf` (cycle-safe).
    fn object_shape(&self, schema: &Value, depth: usize) -> ObjectShape {
        let mut shape = ObjectShape::default();
        if depth > 16 {
            return shape;
        }
        let schema = self.resolve(schema);
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
            for part in parts {
                let inner = self.object_shape(part, depth + 1);
                shape.properties.extend(inner.properties);
                shape.required.extend(inner.required);
                shape.closed |= inner.closed;
            }
        }
        shape
    }
}

#[derive(Debug, Default)]
struct ObjectShape {
    properties: BTreeMap<String, Value>,
    required: BTreeSet<String>,
    closed: bool,
}

/// OpenAPI 3.0 schema dialect → JSON Schema 2020-12: `nullable: true` adds `null` to the
/// type; boolean `exclusiveMinimum`/`exclusiveMaximum` become numbers.
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

fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// Whether two path templates are the same route (placeholder names may differ).
fn same_template(a: &str, b: &str) -> bool {
    normalize_template(a) == normalize_template(b)
}

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

/// One parameter check.
struct ParamCheck {
    name: String,
    location: String,
    required: bool,
    explode: bool,
    kind: Option<String>,
    item_kind: Option<Option<String>>,
    validator: Option<jsonschema::Validator>,
}

struct BodyCheck {
    required: bool,
    validator: jsonschema::Validator,
}

/// An outgoing HTTP request, as the channel is about to send it.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct OutgoingRequest<'a> {
    /// The method (`POST`).
    pub method: &'a str,
    /// The concrete path, without query string (`/v1/projects/proj_1/deployments`).
    pub path: &'a str,
    /// Query parameters in order (a repeated name is an exploded array).
    pub query: &'a [(String, String)],
    /// Headers the action sets (credential headers need not be included).
    pub headers: &'a [(String, String)],
    /// The JSON body, if any.
    pub body: Option<&'a Value>,
}

impl<'a> OutgoingRequest<'a> {
    /// A request with no query, headers or body.
    pub fn new(method: &'a str, path: &'a str) -> Self {
        Self {
            method,
            path,
            query: &[],
            headers: &[],
            body: None,
        }
    }

    /// Sets the query parameters.
    #[must_use]
    pub fn with_query(mut self, query: &'a [(String, String)]) -> Self {
        self.query = query;
        self
    }

    /// Sets the headers.
    #[must_use]
    pub fn with_headers(mut self, headers: &'a [(String, String)]) -> Self {
        self.headers = headers;
        self
    }

    /// Sets the JSON body.
    #[must_use]
    pub fn with_body(mut self, body: &'a Value) -> Self {
        self.body = Some(body);
        self
    }
}

/// The compiled checks for one operation. Compile once per action; check every request.
pub struct OperationGuard {
    method: String,
    path: String,
    operation_id: Option<String>,
    params: Vec<ParamCheck>,
    body: Option<BodyCheck>,
    root: Value,
}

impl fmt::Debug for OperationGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperationGuard")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("operation_id", &self.operation_id)
            .finish_non_exhaustive()
    }
}

impl OperationGuard {
    /// The operation's method, uppercase.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The operation's path template.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The operation's `operationId`, if any.
    pub fn operation_id(&self) -> Option<&str> {
        self.operation_id.as_deref()
    }

    /// Validates an outgoing request. Strict mode denies on any divergence; warn mode allows
    /// and logs; shadow mode allows and only records.
    pub fn check(&self, mode: DriftMode, request: &OutgoingRequest<'_>) -> PayloadDecision {
        let mut out = Vec::new();
        if !request.method.eq_ignore_ascii_case(&self.method) {
            out.push(Divergence {
                kind: DivergenceKind::ConstraintViolation,
                path: "/method".to_owned(),
                expected: format!("method {}", self.method),
                observed: "string".to_owned(),
            });
        }
        let path_matched = match_path(&self.path, request.path);
        let path_values = match path_matched.clone() {
            Some(values) => values,
            None => {
                out.push(Divergence {
                    kind: DivergenceKind::ConstraintViolation,
                    path: "/path".to_owned(),
                    expected: format!("a path matching {}", self.path),
                    observed: "string".to_owned(),
                });
                BTreeMap::new()
            }
        };
        let mut declared_query = BTreeSet::new();
        for param in &self.params {
            let raw: Vec<&str> = match param.location.as_str() {
                "path" => path_values
                    .get(&param.name)
                    .map(String::as_str)
                    .into_iter()
                    .collect(),
                "query" => {
                    declared_query.insert(param.name.as_str());
                    request
                        .query
                        .iter()
                        .filter(|(k, _)| *k == param.name)
                        .map(|(_, v)| v.as_str())
                        .collect()
                }
                "header" => request
                    .headers
                    .iter()
                    .filter(|(k, _)| k.eq_ignore_ascii_case(&param.name))
                    .map(|(_, v)| v.as_str())
                    .collect(),
                _ => Vec::new(),
            };
            let pointer = format!("/{}/{}", param.location, escape(&param.name));
            if param.location == "path" && path_matched.is_none() {
                // Already reported as a path that does not match the template.
                continue;
            }
            if raw.is_empty() {
                if param.required {
                    out.push(Divergence {
                        kind: DivergenceKind::MissingRequired,
                        path: pointer,
                        expected: "a value (the parameter is required)".to_owned(),
                        observed: "absent".to_owned(),
                    });
                }
                continue;
            }
            let value = match coerce(param, &raw) {
                Ok(v) => v,
                Err(expected) => {
                    out.push(Divergence {
                        kind: DivergenceKind::TypeMismatch,
                        path: pointer,
                        expected,
                        observed: "string".to_owned(),
                    });
                    continue;
                }
            };
            if let Some(validator) = &param.validator {
                for error in validator.iter_errors(&value) {
                    push_divergences(&self.root, &pointer, &error, &mut out);
                }
            }
        }
        for (name, _) in request.query {
            if !declared_query.contains(name.as_str()) {
                out.push(Divergence {
                    kind: DivergenceKind::UnknownField,
                    path: format!("/query/{}", escape(name)),
                    expected: "no such query parameter".to_owned(),
                    observed: "string".to_owned(),
                });
            }
        }
        match (&self.body, request.body) {
            (Some(body), Some(value)) => {
                for error in body.validator.iter_errors(value) {
                    push_divergences(&self.root, "/body", &error, &mut out);
                }
            }
            (Some(body), None) if body.required => out.push(Divergence {
                kind: DivergenceKind::MissingRequired,
                path: "/body".to_owned(),
                expected: "a JSON body (the request body is required)".to_owned(),
                observed: "absent".to_owned(),
            }),
            (None, Some(value)) => out.push(Divergence {
                kind: DivergenceKind::UnknownField,
                path: "/body".to_owned(),
                expected: "no request body".to_owned(),
                observed: json_type(value).to_owned(),
            }),
            _ => {}
        }
        out.sort_by(|a, b| {
            a.path
                .cmp(&b.path)
                .then(a.kind.as_str().cmp(b.kind.as_str()))
        });
        out.dedup();
        drop_shadowed_unknowns(&mut out);
        decide(mode, &self.method, &self.path, out)
    }
}

/// `unevaluatedProperties` forgets the properties a failing subschema evaluated, so a
/// declared field with an invalid value is also reported as unknown. Keep the specific
/// divergence: drop an `unknown_field` at a path that has another divergence at or below it.
fn drop_shadowed_unknowns(out: &mut Vec<Divergence>) {
    let specific: Vec<String> = out
        .iter()
        .filter(|d| d.kind != DivergenceKind::UnknownField)
        .map(|d| d.path.clone())
        .collect();
    let unknown: Vec<String> = out
        .iter()
        .filter(|d| d.kind == DivergenceKind::UnknownField)
        .map(|d| d.path.clone())
        .collect();
    out.retain(|d| {
        d.kind != DivergenceKind::UnknownField
            || !specific
                .iter()
                .chain(unknown.iter().filter(|p| **p != d.path))
                .any(|p| *p == d.path || p.starts_with(&format!("{}/", d.path)))
    });
}

fn decide(
    mode: DriftMode,
    method: &str,
    path: &str,
    divergences: Vec<Divergence>,
) -> PayloadDecision {
    let action = format!("{method} {path}");
    if divergences.is_empty() {
        return PayloadDecision {
            allowed: true,
            verdict: Verdict::Clean,
            detail: "the request matches the upstream operation".to_owned(),
            action,
            divergences,
        };
    }
    let parts: Vec<String> = divergences
        .iter()
        .take(5)
        .map(ToString::to_string)
        .collect();
    let mut detail = format!(
        "the request does not match the upstream operation: {}",
        parts.join("; ")
    );
    if divergences.len() > 5 {
        detail.push_str(&format!(" (and {} more)", divergences.len() - 5));
    }
    let (allowed, verdict) = match mode {
        DriftMode::Strict => (false, Verdict::Denied),
        DriftMode::Warn => {
            tracing::warn!(operation = %action, divergences = %detail, "upstream payload drift allowed in warn mode");
            (true, Verdict::Warned)
        }
        DriftMode::Shadow => (true, Verdict::Shadowed),
    };
    PayloadDecision {
        allowed,
        verdict,
        detail,
        action,
        divergences,
    }
}

/// Extracts placeholder values from a concrete path; `None` when it does not match.
fn match_path(template: &str, path: &str) -> Option<BTreeMap<String, String>> {
    let t: Vec<&str> = template.trim_end_matches('/').split('/').collect();
    let p: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    if t.len() != p.len() {
        return None;
    }
    let mut values = BTreeMap::new();
    for (ts, ps) in t.iter().zip(&p) {
        match (ts.find('{'), ts.find('}')) {
            (Some(open), Some(close)) if open < close => {
                let (prefix, suffix) = (&ts[..open], &ts[close + 1..]);
                let inner = ps.strip_prefix(prefix)?.strip_suffix(suffix)?;
                let decoded = percent_encoding::percent_decode_str(inner)
                    .decode_utf8()
                    .ok()?
                    .into_owned();
                values.insert(ts[open + 1..close].to_owned(), decoded);
            }
            _ if ts == ps => {}
            _ => return None,
        }
    }
    Some(values)
}

/// Turns parameter strings into the JSON value their schema describes.
fn coerce(param: &ParamCheck, raw: &[&str]) -> Result<Value, String> {
    if param.kind.as_deref() == Some("array") {
        let parts: Vec<&str> = if raw.len() == 1 && !param.explode {
            raw[0].split(',').collect()
        } else {
            raw.to_vec()
        };
        let item_kind = param.item_kind.clone().flatten();
        return parts
            .into_iter()
            .map(|p| scalar(item_kind.as_deref(), p))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array);
    }
    scalar(param.kind.as_deref(), raw[0])
}

fn scalar(kind: Option<&str>, raw: &str) -> Result<Value, String> {
    match kind {
        Some("integer") => raw
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| "integer".to_owned()),
        Some("number") => raw
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| "number".to_owned()),
        Some("boolean") => match raw {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err("boolean".to_owned()),
        },
        _ => Ok(Value::String(raw.to_owned())),
    }
}

/// What would fail between an action and the upstream operation it targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CompatibilityKind {
    /// The upstream has no operation for the action's method and path.
    OperationMissing,
    /// The upstream requires a field (or parameter) the action never sends.
    UpstreamRequiresField,
    /// The action sends a field (or parameter) the upstream does not declare.
    UpstreamRemovedField,
    /// The action's field type differs from the upstream's.
    TypeChanged,
}

/// One incompatibility.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CompatibilityIssue {
    /// What would fail.
    pub kind: CompatibilityKind,
    /// `/body/<field>`, `/query/<name>`, `/header/<name>`, `/path/<name>` or `/`.
    pub location: String,
    /// A sentence for a human.
    pub detail: String,
}

/// The compatibility of one HTTP action with its upstream operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CompatibilityReport {
    /// The action.
    pub action: String,
    /// `METHOD /template` of the operation found, if any.
    pub operation: Option<String>,
    /// What would fail, sorted by location.
    pub issues: Vec<CompatibilityIssue>,
}

impl CompatibilityReport {
    /// Whether nothing would fail.
    pub fn is_compatible(&self) -> bool {
        self.issues.is_empty()
    }
}

/// Compares every HTTP action of `catalog` with the operation of `spec` that has its method
/// and path template. Non-HTTP actions are skipped.
pub fn check_catalog(spec: &OpenApi, catalog: &Catalog) -> Vec<CompatibilityReport> {
    catalog
        .entries()
        .filter_map(|entry| match &entry.spec().target {
            Target::Http(target) => Some(check_action(
                spec,
                entry,
                &OperationSelector::route(target.method.as_str(), target.path.as_ref()),
            )),
            _ => None,
        })
        .collect()
}

/// Compares one HTTP action with the operation `selector` names (use an `operationId` when
/// the action's path differs from the upstream's).
pub fn check_action(
    spec: &OpenApi,
    entry: &Entry,
    selector: &OperationSelector,
) -> CompatibilityReport {
    let action = entry.spec().name.to_string();
    let Target::Http(target) = &entry.spec().target else {
        return CompatibilityReport {
            action,
            operation: None,
            issues: vec![CompatibilityIssue {
                kind: CompatibilityKind::OperationMissing,
                location: "/".to_owned(),
                detail: "the action is not an HTTP action".to_owned(),
            }],
        };
    };
    let Some((method, path, pointer)) = spec.find(selector) else {
        return CompatibilityReport {
            action,
            operation: None,
            issues: vec![CompatibilityIssue {
                kind: CompatibilityKind::OperationMissing,
                location: "/".to_owned(),
                detail: format!("the upstream has no operation {selector}"),
            }],
        };
    };
    let mut issues = Vec::new();
    let input = entry.input_schema();
    let props = input
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let sent = sent_fields(target, &props);
    let op = spec.doc.pointer(&pointer).unwrap_or(&Value::Null);

    // Parameters.
    let params = spec.parameters(&path, &pointer).unwrap_or_default();
    let action_path_fields = target.path_fields();
    let upstream_path_names: Vec<String> = normalize_names(&path);
    for (name, location, param_pointer) in &params {
        let param = spec.doc.pointer(param_pointer).unwrap_or(&Value::Null);
        let required =
            location == "path" || param.get("required").and_then(Value::as_bool) == Some(true);
        let field = match location.as_str() {
            // Path placeholders map by position.
            "path" => upstream_path_names
                .iter()
                .position(|n| n == name)
                .and_then(|i| action_path_fields.get(i))
                .map(|f| (*f).to_owned()),
            "query" => target
                .query
                .iter()
                .find(|q| q.as_ref() == name)
                .map(|q| q.to_string()),
            "header" => target
                .headers
                .iter()
                .find(|(h, _)| h.eq_ignore_ascii_case(name))
                .map(|(_, f)| f.to_string()),
            _ => None,
        };
        let location_pointer = format!("/{location}/{}", escape(name));
        match field {
            None if required => issues.push(CompatibilityIssue {
                kind: CompatibilityKind::UpstreamRequiresField,
                location: location_pointer,
                detail: format!("the upstream requires {location} parameter `{name}`, which the action never sends"),
            }),
            None => {}
            Some(field) => {
                let upstream = spec.schema_type(param.get("schema").unwrap_or(&Value::Null));
                type_issue(&mut issues, &location_pointer, props.get(&field), upstream.as_deref(), spec);
            }
        }
    }
    for q in &target.query {
        if !params
            .iter()
            .any(|(n, l, _)| l == "query" && n == q.as_ref())
        {
            issues.push(CompatibilityIssue {
                kind: CompatibilityKind::UpstreamRemovedField,
                location: format!("/query/{}", escape(q)),
                detail: format!(
                    "the action sends query parameter `{q}`, which the upstream does not declare"
                ),
            });
        }
    }

    // Body.
    let body_schema = op
        .get("requestBody")
        .and_then(|rb| spec.ref_pointer(rb, &format!("{pointer}/requestBody")).ok())
        .and_then(|p| spec.doc.pointer(&p))
        .and_then(|rb| rb.get("content"))
        .and_then(|c| c.get("application/json"))
        .and_then(|m| m.get("schema"));
    match body_schema {
        Some(schema) => {
            let shape = spec.object_shape(schema, 0);
            for required in &shape.required {
                if !sent.contains(required) {
                    issues.push(CompatibilityIssue {
                        kind: CompatibilityKind::UpstreamRequiresField,
                        location: format!("/body/{}", escape(required)),
                        detail: format!("the upstream requires body field `{required}`, which the action never sends"),
                    });
                }
            }
            for field in &sent {
                match shape.properties.get(field) {
                    None if !shape.properties.is_empty() || shape.closed => issues.push(CompatibilityIssue {
                        kind: CompatibilityKind::UpstreamRemovedField,
                        location: format!("/body/{}", escape(field)),
                        detail: format!("the action sends body field `{field}`, which the upstream does not declare"),
                    }),
                    None => {}
                    Some(upstream) => {
                        let upstream = spec.schema_type(upstream);
                        type_issue(&mut issues, &format!("/body/{}", escape(field)), props.get(field), upstream.as_deref(), spec);
                    }
                }
            }
        }
        None if !sent.is_empty() => issues.push(CompatibilityIssue {
            kind: CompatibilityKind::UpstreamRemovedField,
            location: "/body".to_owned(),
            detail: "the action sends a JSON body; the upstream operation takes none".to_owned(),
        }),
        None => {}
    }
    issues.sort_by(|a, b| a.location.cmp(&b.location));
    CompatibilityReport {
        action,
        operation: Some(format!("{} {path}", method.to_uppercase())),
        issues,
    }
}

fn normalize_names(template: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else { break };
        names.push(after[..close].to_owned());
        rest = &after[close + 1..];
    }
    names
}

/// The input fields an HTTP action sends in its JSON body.
fn sent_fields(target: &HttpTarget, props: &Map<String, Value>) -> BTreeSet<String> {
    match &target.body {
        HttpBody::Empty => BTreeSet::new(),
        HttpBody::Fields(fields) => fields.iter().map(|f| f.to_string()).collect(),
        HttpBody::Auto if !target.method.has_body() => BTreeSet::new(),
        _ => {
            let path_fields = target.path_fields();
            props
                .keys()
                .filter(|k| {
                    !path_fields.contains(&k.as_str())
                        && !target.query.iter().any(|q| q == k.as_str())
                        && !target.headers.iter().any(|(_, f)| f == k.as_str())
                        && !target.omit.iter().any(|o| o == k.as_str())
                })
                .cloned()
                .collect()
        }
    }
}

fn type_issue(
    issues: &mut Vec<CompatibilityIssue>,
    location: &str,
    action_schema: Option<&Value>,
    upstream: Option<&str>,
    spec: &OpenApi,
) {
    let (Some(action_schema), Some(upstream)) = (action_schema, upstream) else {
        return;
    };
    let Some(action) = spec.schema_type(action_schema) else {
        return;
    };
    let compatible = action == upstream || (action == "integer" && upstream == "number");
    if !compatible {
        issues.push(CompatibilityIssue {
            kind: CompatibilityKind::TypeChanged,
            location: location.to_owned(),
            detail: format!("the action sends {action}; the upstream expects {upstream}"),
        });
    }
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
        let values = match_path("/files/{name}.json", "/files/a%20b.json").expect("matches");
        assert_eq!(values["name"], "a b");
        assert_eq!(match_path("/a/{x}", "/b/1"), None);
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
}
