//! The compiled guard of one operation and the check of an outgoing request against it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::document::escape;
use sallyport_core::drift::{Divergence, DivergenceKind, DriftMode, PayloadDecision, Verdict};
use sallyport_core::drift::{json_type, push_divergences};

/// One parameter check.
pub(super) struct ParamCheck {
    pub(super) name: String,
    /// `path`, `query` or `header`.
    pub(super) location: String,
    pub(super) required: bool,
    /// Whether an array is sent as repeated `name=value` pairs rather than one comma list.
    pub(super) explode: bool,
    /// The schema's primary JSON type, which decides how the string is read.
    pub(super) kind: Option<String>,
    /// The primary JSON type of an array's items (`Some(None)`: items of no one type).
    pub(super) item_kind: Option<Option<String>>,
    /// `None` for a `content`-described parameter: presence is all that is checked.
    pub(super) validator: Option<jsonschema::Validator>,
}

/// The JSON request body check.
pub(super) struct BodyCheck {
    pub(super) required: bool,
    pub(super) validator: jsonschema::Validator,
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
///
/// A guard holds only the validators of its operation's own schemas (and what they reach
/// through `$ref`s) and shares the parsed document with every other guard of it.
pub struct OperationGuard {
    pub(super) method: String,
    pub(super) path: String,
    pub(super) operation_id: Option<String>,
    pub(super) params: Vec<ParamCheck>,
    pub(super) body: Option<BodyCheck>,
    /// The document the validators' schema locations point into (to name known fields).
    pub(super) root: Arc<Value>,
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
        let path_values = match_path(&self.path, request.path);
        if path_values.is_none() {
            out.push(Divergence {
                kind: DivergenceKind::ConstraintViolation,
                path: "/path".to_owned(),
                expected: format!("a path matching {}", self.path),
                observed: "string".to_owned(),
            });
        }
        for param in &self.params {
            let raw: Vec<&str> = match param.location.as_str() {
                "path" => match &path_values {
                    Some(values) => values
                        .get(&param.name)
                        .map(String::as_str)
                        .into_iter()
                        .collect(),
                    // Already reported as a path that does not match the template.
                    None => continue,
                },
                "query" => request
                    .query
                    .iter()
                    .filter(|(k, _)| *k == param.name)
                    .map(|(_, v)| v.as_str())
                    .collect(),
                "header" => request
                    .headers
                    .iter()
                    .filter(|(k, _)| k.eq_ignore_ascii_case(&param.name))
                    .map(|(_, v)| v.as_str())
                    .collect(),
                _ => Vec::new(),
            };
            let pointer = || format!("/{}/{}", param.location, escape(&param.name));
            if raw.is_empty() {
                if param.required {
                    out.push(Divergence {
                        kind: DivergenceKind::MissingRequired,
                        path: pointer(),
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
                        path: pointer(),
                        expected,
                        observed: "string".to_owned(),
                    });
                    continue;
                }
            };
            if let Some(validator) = &param.validator
                && !validator.is_valid(&value)
            {
                let pointer = pointer();
                for error in validator.iter_errors(&value) {
                    push_divergences(&self.root, &pointer, &error, &mut out);
                }
            }
        }
        for (name, _) in request.query {
            let declared = self
                .params
                .iter()
                .any(|p| p.location == "query" && p.name == *name);
            if !declared {
                out.push(Divergence {
                    kind: DivergenceKind::UnknownField,
                    path: format!("/query/{}", escape(name)),
                    expected: "no such query parameter".to_owned(),
                    observed: "string".to_owned(),
                });
            }
        }
        match (&self.body, request.body) {
            (Some(body), Some(value)) if !body.validator.is_valid(value) => {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_concrete_path_yields_its_decoded_placeholder_values() {
        let values = match_path("/files/{name}.json", "/files/a%20b.json").expect("matches");
        assert_eq!(values["name"], "a b");
        assert_eq!(match_path("/a/{x}", "/b/1"), None);
    }
}
