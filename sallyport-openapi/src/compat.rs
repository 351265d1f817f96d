//! The compatibility of a catalog's HTTP actions with the upstream's operations: what would
//! fail before a single request is made.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::document::{Document, escape};
use crate::{OpenApi, OperationSelector};
use sallyport_core::catalog::{Catalog, Entry};
use sallyport_core::target::{HttpBody, HttpTarget, Target};

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
    let doc = &*spec.document;
    let Some(found) = doc.find(selector) else {
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
    let (method, path, pointer) = (found.method, found.path.as_str(), found.pointer.as_str());
    let mut issues = Vec::new();
    let input = entry.input_schema();
    let props = input
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let sent = sent_fields(target, &props);
    let op = doc.at(pointer);

    // Parameters.
    let params = doc.parameters(path, pointer).unwrap_or_default();
    let action_path_fields = target.path_fields();
    let upstream_path_names: Vec<String> = normalize_names(path);
    for (name, location, param_pointer) in &params {
        let param = doc.at(param_pointer);
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
                let upstream = doc.schema_type(param.get("schema").unwrap_or(&Value::Null));
                type_issue(&mut issues, &location_pointer, props.get(&field), upstream.as_deref(), doc);
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
        .and_then(|rb| doc.ref_pointer(rb, &format!("{pointer}/requestBody")).ok())
        .and_then(|p| doc.root.pointer(&p))
        .and_then(|rb| rb.get("content"))
        .and_then(|c| c.get("application/json"))
        .and_then(|m| m.get("schema"));
    match body_schema {
        Some(schema) => {
            let shape = doc.object_shape(schema);
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
                        let upstream = doc.schema_type(upstream);
                        type_issue(&mut issues, &format!("/body/{}", escape(field)), props.get(field), upstream.as_deref(), doc);
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
    doc: &Document,
) {
    let (Some(action_schema), Some(upstream)) = (action_schema, upstream) else {
        return;
    };
    let Some(action) = doc.schema_type(action_schema) else {
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
