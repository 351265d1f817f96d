//! Writing one action's code: the comments above it, its doc comment, its `#[action]` and
//! `#[http]` attributes.

use serde_json::Value;

use sallyport_openapi::OperationLocation;

use super::responses::Answers;
use super::{Place, attr_name};
use crate::Decision;
use crate::text::{literal, plain};

/// The `#[action]` lines of the three decisions, and those left `choose`: each is taken
/// from the operation's `x-sallyport-…` extension when it names one of the choices.
pub(super) fn decisions(op: &Value) -> (String, Vec<Decision>) {
    let mut open = Vec::new();
    let mut decisions = String::new();
    decisions.push_str(
        "    // sallyport scaffold never guesses consequences: choose each `choose` below (an\n    // `x-sallyport-effect`, `-consent` or `-retry` in the document fills it in).\n",
    );
    for decision in [Decision::Effect, Decision::Consent, Decision::Retry] {
        let extension = format!("x-sallyport-{}", decision.as_str());
        let given = op.get(&extension).and_then(Value::as_str);
        decisions.push_str(&format!(
            "    // {}: {}\n",
            decision.as_str(),
            decision.help()
        ));
        match given {
            Some(value) if decision.choices().contains(&value) => {
                decisions.push_str(&format!(
                    "    {} = {value}, // from the document's {extension}\n",
                    decision.as_str()
                ));
            }
            other => {
                if let Some(value) = other {
                    decisions.push_str(&format!(
                        "    // (the document's {extension} `{}` is not one of these)\n",
                        value.escape_debug()
                    ));
                }
                decisions.push_str(&format!("    {} = choose,\n", decision.as_str()));
                open.push(decision);
            }
        }
    }
    (decisions, open)
}

/// The comments above the action: the operation it comes from, and whether it has a
/// server of its own or is deprecated.
pub(super) fn notes(id: &str, location: &OperationLocation, op: &Value) -> String {
    let mut code = String::new();
    code.push_str(&format!(
        "// `{}` {} {}\n",
        id.escape_debug(),
        location.method.to_uppercase(),
        location.path
    ));
    if let Some(url) = op
        .get("servers")
        .and_then(Value::as_array)
        .and_then(|s| s.first())
        .and_then(|s| s.get("url"))
        .and_then(Value::as_str)
    {
        code.push_str(&format!(
            "// Served from {} (the operation's own server): give it a channel of its own.\n",
            url.escape_debug()
        ));
    }
    if op.get("deprecated") == Some(&Value::Bool(true)) {
        code.push_str("// The document marks this operation deprecated.\n");
    }
    code
}

/// The action's doc comment: the operation's summary as a sentence, then its description,
/// or else its method and path.
pub(super) fn doc(op: &Value, location: &OperationLocation) -> String {
    let summary = op
        .get("summary")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let description = op
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut doc = plain(summary, 1);
    if let Some(first) = doc.first_mut()
        && !first.ends_with(['.', '!', '?'])
    {
        first.push('.');
    }
    doc.extend(plain(description, 2));
    if doc.is_empty() {
        doc.push(format!(
            "`{} {}`.",
            location.method.to_uppercase(),
            location.path
        ));
    }
    let mut code = String::new();
    for (i, paragraph) in doc.iter().enumerate() {
        if i > 0 {
            code.push_str("///\n");
        }
        for line in crate::text::wrap(paragraph, 96) {
            code.push_str(&format!("/// {line}\n"));
        }
    }
    code
}

/// The derive and the `#[action(…)]` attribute: the name, the decisions and the credential
/// (or a note that the document names none).
pub(super) fn action_attributes(action: &str, decisions: &str, credential: Option<&str>) -> String {
    let mut code = String::new();
    code.push_str("#[derive(Debug, sallyport_core::Action, Deserialize, Serialize, JsonSchema)]\n");
    code.push_str("#[action(\n");
    code.push_str(&format!("    name = {},\n", literal(action)));
    code.push_str(decisions);
    match credential {
        Some(name) => code.push_str(&format!("    credential = {},\n", literal(name))),
        None => code.push_str(
            "    // The document names no security scheme: add `credential = \"…\"` if the API needs one.\n",
        ),
    }
    code.push_str(")]\n");
    code
}

/// The `#[http(…)]` attribute: the method and path, the query and header fields, the
/// `status(…)` rules, and the result type (with a note on it when there is one).
pub(super) fn http_attribute(
    location: &OperationLocation,
    fields: &[(String, Place, String)],
    answers: &Answers,
) -> String {
    let mut code = String::new();
    code.push_str("#[http(\n");
    code.push_str(&format!(
        "    {} = {},\n",
        location.method,
        literal(&location.path)
    ));
    let query: Vec<String> = fields
        .iter()
        .filter(|(_, p, _)| matches!(p, Place::Query))
        .map(|(json, _, _)| attr_name(json))
        .collect();
    if !query.is_empty() {
        code.push_str(&format!("    query({}),\n", query.join(", ")));
    }
    let headers: Vec<String> = fields
        .iter()
        .filter_map(|(json, p, _)| match p {
            Place::Header(name) => Some(format!("{} = {}", literal(name), attr_name(json))),
            _ => None,
        })
        .collect();
    if !headers.is_empty() {
        code.push_str(&format!("    header({}),\n", headers.join(", ")));
    }
    code.push_str(&answers.statuses);
    code.push_str(&answers.note);
    code.push_str(&format!("    result = {},\n", answers.result));
    code.push_str(")]\n");
    code
}
