//! The payload drift guard: every call's arguments against the action's JSON Schema.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use sallyport_vocab::drift::{Divergence, DivergenceKind};
use sallyport_vocab::string_enum;

string_enum! {
    /// How a divergence from the schema is handled.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub enum DriftMode {
        /// Deny the call (the default).
        #[default]
        Strict => "strict",
        /// Allow it, strip unknown fields, log a warning through `tracing`.
        Warn => "warn",
        /// Allow it, strip unknown fields, record the divergences on the decision only.
        Shadow => "shadow",
    }
}

string_enum! {
    /// The guard's verdict.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Verdict {
        /// No divergence.
        Clean => "clean",
        /// Divergences found; the call is denied (strict mode).
        Denied => "denied",
        /// Divergences found; the call is allowed and a warning was logged.
        Warned => "warned",
        /// Divergences found; the call is allowed and they are recorded on the decision only.
        Shadowed => "shadowed",
    }
}

/// The decision of the payload drift guard for one call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadDecision {
    /// Whether the call may proceed.
    pub allowed: bool,
    /// The verdict.
    pub verdict: Verdict,
    /// One sentence for the agent.
    pub detail: String,
    /// The action checked.
    pub action: String,
    /// The divergences found.
    pub divergences: Vec<Divergence>,
}

/// Arguments nested deeper than this are refused before validation.
pub const MAX_DEPTH: usize = 32;

/// A compiled validator for one action's input schema (compiled once, at catalog build).
pub struct PayloadGuard {
    action: String,
    schema: Value,
    validator: jsonschema::Validator,
}

impl fmt::Debug for PayloadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PayloadGuard")
            .field("action", &self.action)
            .finish_non_exhaustive()
    }
}

impl PayloadGuard {
    /// Compiles the guard for `schema`.
    ///
    /// # Errors
    ///
    /// A message when the schema itself is not valid JSON Schema.
    pub fn new(action: impl Into<String>, schema: Value) -> Result<Self, String> {
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&schema)
            .map_err(|e| format!("invalid input schema: {e}"))?;
        Ok(Self {
            action: action.into(),
            schema,
            validator,
        })
    }

    /// The schema this guard checks against.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Whether `args` match the schema, as [`check`](Self::check) would find them, without
    /// building a decision (the executor's path for a call with nothing to report).
    pub(crate) fn is_clean(&self, args: &Value) -> bool {
        !depth_exceeds(args, MAX_DEPTH) && self.validator.is_valid(args)
    }

    /// Checks `args` in `mode`. In `warn` and `shadow` modes unknown fields are removed from
    /// `args`, so the call can decode.
    pub fn check(&self, mode: DriftMode, args: &mut Value) -> PayloadDecision {
        if depth_exceeds(args, MAX_DEPTH) {
            return PayloadDecision {
                allowed: false,
                verdict: Verdict::Denied,
                detail: format!("arguments are nested deeper than {MAX_DEPTH} levels"),
                action: self.action.clone(),
                divergences: vec![Divergence {
                    kind: DivergenceKind::ConstraintViolation,
                    path: String::new(),
                    expected: format!("at most {MAX_DEPTH} levels of nesting"),
                    observed: json_type(args).to_owned(),
                }],
            };
        }
        if self.validator.is_valid(args) {
            return PayloadDecision {
                allowed: true,
                verdict: Verdict::Clean,
                detail: "arguments match the schema".to_owned(),
                action: self.action.clone(),
                divergences: Vec::new(),
            };
        }
        let mut divergences = Vec::new();
        for error in self.validator.iter_errors(args) {
            push_divergences(&self.schema, "", &error, &mut divergences);
        }
        divergences.sort_by(|a, b| {
            a.path
                .cmp(&b.path)
                .then(a.kind.as_str().cmp(b.kind.as_str()))
        });
        divergences.dedup();
        let detail = summarize(&divergences);
        match mode {
            DriftMode::Strict => PayloadDecision {
                allowed: false,
                verdict: Verdict::Denied,
                detail,
                action: self.action.clone(),
                divergences,
            },
            DriftMode::Warn | DriftMode::Shadow => {
                for d in divergences
                    .iter()
                    .filter(|d| d.kind == DivergenceKind::UnknownField)
                {
                    remove_pointer(args, &d.path);
                }
                let verdict = if mode == DriftMode::Warn {
                    tracing::warn!(
                        action = %self.action,
                        divergences = %detail,
                        "payload drift allowed in warn mode"
                    );
                    Verdict::Warned
                } else {
                    Verdict::Shadowed
                };
                PayloadDecision {
                    allowed: true,
                    verdict,
                    detail,
                    action: self.action.clone(),
                    divergences,
                }
            }
        }
    }
}

/// Turns one validation error into divergences, with `prefix` before every instance path.
/// `root` is the schema the validator was built from (to name the known fields).
///
/// Shared with `sallyport-openapi`'s request guard; not a stable API.
#[doc(hidden)]
pub fn push_divergences(
    root: &Value,
    prefix: &str,
    error: &jsonschema::ValidationError<'_>,
    out: &mut Vec<Divergence>,
) {
    let path = format!("{prefix}{}", error.instance_path().as_str());
    let instance = error.instance();
    let observed = json_type(instance).to_owned();
    let (kind, expected) = match error.kind() {
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            let allowed = allowed_fields(root, error.schema_path().as_str());
            for name in unexpected {
                out.push(Divergence {
                    kind: DivergenceKind::UnknownField,
                    path: crate::pointer::child(&path, name),
                    expected: allowed.clone(),
                    observed: instance.get(name).map_or("absent", json_type).to_owned(),
                });
            }
            return;
        }
        ValidationErrorKind::FalseSchema => {
            (DivergenceKind::UnknownField, "no value here".to_owned())
        }
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            out.push(Divergence {
                kind: DivergenceKind::MissingRequired,
                path: crate::pointer::child(&path, name),
                expected: "a value (the field is required)".to_owned(),
                observed: "absent".to_owned(),
            });
            return;
        }
        ValidationErrorKind::Type { kind } => (DivergenceKind::TypeMismatch, type_words(kind)),
        ValidationErrorKind::Enum { options } => (
            DivergenceKind::ConstraintViolation,
            format!("one of {options}"),
        ),
        ValidationErrorKind::Constant { expected_value } => (
            DivergenceKind::ConstraintViolation,
            format!("exactly {expected_value}"),
        ),
        ValidationErrorKind::Pattern { pattern } => (
            DivergenceKind::ConstraintViolation,
            format!("a string matching {pattern}"),
        ),
        ValidationErrorKind::MinLength { limit } => (
            DivergenceKind::ConstraintViolation,
            format!("at least {limit} characters"),
        ),
        ValidationErrorKind::MaxLength { limit } => (
            DivergenceKind::ConstraintViolation,
            format!("at most {limit} characters"),
        ),
        ValidationErrorKind::Minimum { limit } => (
            DivergenceKind::ConstraintViolation,
            format!("a number >= {limit}"),
        ),
        ValidationErrorKind::Maximum { limit } => (
            DivergenceKind::ConstraintViolation,
            format!("a number <= {limit}"),
        ),
        ValidationErrorKind::ExclusiveMinimum { limit } => (
            DivergenceKind::ConstraintViolation,
            format!("a number > {limit}"),
        ),
        ValidationErrorKind::ExclusiveMaximum { limit } => (
            DivergenceKind::ConstraintViolation,
            format!("a number < {limit}"),
        ),
        ValidationErrorKind::MinItems { limit } => (
            DivergenceKind::ConstraintViolation,
            format!("at least {limit} items"),
        ),
        ValidationErrorKind::MaxItems { limit } => (
            DivergenceKind::ConstraintViolation,
            format!("at most {limit} items"),
        ),
        ValidationErrorKind::MinProperties { limit } => (
            DivergenceKind::ConstraintViolation,
            format!("at least {limit} fields"),
        ),
        ValidationErrorKind::MaxProperties { limit } => (
            DivergenceKind::ConstraintViolation,
            format!("at most {limit} fields"),
        ),
        ValidationErrorKind::Format { format } => (
            DivergenceKind::ConstraintViolation,
            format!("a string in `{format}` format"),
        ),
        ValidationErrorKind::UniqueItems => (
            DivergenceKind::ConstraintViolation,
            "items without duplicates".to_owned(),
        ),
        ValidationErrorKind::MultipleOf { .. } => (
            DivergenceKind::ConstraintViolation,
            "a multiple of the declared step".to_owned(),
        ),
        ValidationErrorKind::AnyOf { .. }
        | ValidationErrorKind::OneOfNotValid { .. }
        | ValidationErrorKind::OneOfMultipleValid { .. } => (
            DivergenceKind::ConstraintViolation,
            "a value matching exactly one of the allowed shapes".to_owned(),
        ),
        _ => (
            DivergenceKind::ConstraintViolation,
            "a value the schema allows".to_owned(),
        ),
    };
    out.push(Divergence {
        kind,
        path,
        expected,
        observed,
    });
}

/// Names the fields the schema object at `schema_path`'s parent declares.
fn allowed_fields(root: &Value, schema_path: &str) -> String {
    let parent = schema_path.rsplit_once('/').map_or("", |(p, _)| p);
    let mut names: Vec<&str> = root
        .pointer(parent)
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|props| props.keys().map(String::as_str).collect())
        .unwrap_or_default();
    // Sorted whatever the map's order (serde_json's `preserve_order` keeps document order).
    names.sort_unstable();
    if names.is_empty() {
        "no such field".to_owned()
    } else {
        format!("no such field; known fields: {}", names.join(", "))
    }
}

fn summarize(divergences: &[Divergence]) -> String {
    let parts: Vec<String> = divergences
        .iter()
        .take(5)
        .map(ToString::to_string)
        .collect();
    let more = divergences.len().saturating_sub(5);
    let mut text = format!("arguments do not match the schema: {}", parts.join("; "));
    if more > 0 {
        text.push_str(&format!("; and {more} more"));
    }
    text
}

fn type_words(kind: &TypeKind) -> String {
    match kind {
        TypeKind::Single(t) => t.to_string(),
        TypeKind::Multiple(set) => set
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(" or "),
    }
}

/// The JSON type name of a value.
///
/// Shared with `sallyport-openapi`'s request guard; not a stable API.
#[doc(hidden)]
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn remove_pointer(root: &mut Value, pointer: &str) {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return;
    };
    let key = crate::pointer::unescape(last);
    if let Some(Value::Object(map)) = root.pointer_mut(parent) {
        map.remove(&key);
    }
}

/// Whether `value` nests deeper than `max` (iteratively: a hostile value cannot overflow
/// the stack here).
fn depth_exceeds(value: &Value, max: usize) -> bool {
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        if depth > max {
            return true;
        }
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, depth + 1))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, depth + 1))),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn guard() -> PayloadGuard {
        PayloadGuard::new(
            "create_thing",
            json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["project_id", "count"],
                "properties": {
                    "project_id": {"type": "string", "pattern": "^proj_[a-z0-9]+$"},
                    "count": {"type": "integer", "minimum": 1, "maximum": 10},
                    "mode": {"enum": ["fast", "slow"]}
                }
            }),
        )
        .expect("schema compiles")
    }

    #[test]
    fn each_divergence_kind_has_path_expected_and_type_never_value() {
        let mut args = json!({"project_id": "PROJ-secretish", "count": "7", "extra": {"x": 1}, "mode": "warp"});
        let d = guard().check(DriftMode::Strict, &mut args);
        assert!(!d.allowed);
        assert_eq!(d.verdict, Verdict::Denied);
        let kinds: Vec<(&str, &str, &str)> = d
            .divergences
            .iter()
            .map(|d| (d.kind.as_str(), d.path.as_str(), d.observed.as_str()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("type_mismatch", "/count", "string"),
                ("unknown_field", "/extra", "object"),
                ("constraint_violation", "/mode", "string"),
                ("constraint_violation", "/project_id", "string"),
            ]
        );
        let text = serde_json::to_string(&d).expect("serializes");
        assert!(!text.contains("PROJ-secretish"), "{text}");
        assert!(!text.contains("warp"), "{text}");
        assert!(d.divergences[1].expected.contains("project_id"));
    }

    #[test]
    fn missing_required_names_the_field() {
        let mut args = json!({"project_id": "proj_1"});
        let d = guard().check(DriftMode::Strict, &mut args);
        assert_eq!(d.divergences.len(), 1);
        assert_eq!(d.divergences[0].kind, DivergenceKind::MissingRequired);
        assert_eq!(d.divergences[0].path, "/count");
        assert_eq!(d.divergences[0].observed, "absent");
    }

    #[test]
    fn warn_and_shadow_strip_unknown_fields_and_allow() {
        for (mode, verdict) in [
            (DriftMode::Warn, Verdict::Warned),
            (DriftMode::Shadow, Verdict::Shadowed),
        ] {
            let mut args = json!({"project_id": "proj_1", "count": 2, "extra": true});
            let d = guard().check(mode, &mut args);
            assert!(d.allowed);
            assert_eq!(d.verdict, verdict);
            assert_eq!(args, json!({"project_id": "proj_1", "count": 2}));
        }
    }

    #[test]
    fn deep_nesting_is_refused_without_recursion() {
        let mut v = json!(1);
        for _ in 0..100 {
            v = json!([v]);
        }
        let d = guard().check(DriftMode::Strict, &mut v);
        assert!(!d.allowed);
        assert!(d.detail.contains("nested deeper"));
    }
}
