//! What the operation's answers mean for the action: the result type from every success
//! response the document lists, the `status(…)` rules for the empty ones, and the author's
//! decision on a `404` the document describes as an answer.

use serde_json::Value;

use super::is_json;
use crate::Decision;
use crate::schema::Cx;
use crate::text::plain;

/// The result of the action and the `status(…)` lines of its `#[http]` attribute.
#[derive(Debug)]
pub(super) struct Answers {
    /// The `result = …` type.
    pub(super) result: String,
    /// The comment on the result (its lines, each ending in a newline), written above
    /// `result = …`.
    pub(super) note: String,
    /// The `status(…)` lines (with their comments), in code order.
    pub(super) statuses: String,
    /// The decisions left `choose` in `statuses`.
    pub(super) open: Vec<Decision>,
}

impl Answers {
    /// `result = ()`, with a one-line note.
    fn unit(note: Option<String>) -> Self {
        Self {
            result: "()".to_owned(),
            note: note.map(|n| format!("    // {n}\n")).unwrap_or_default(),
            statuses: String::new(),
            open: Vec::new(),
        }
    }
}

/// One success response: a JSON body (its schema), no body at all, or a body that is not
/// JSON.
enum Success {
    Json(Value),
    Empty(String),
    NotJson,
}

/// The answers of `op` (sent with `method`): the result from the first success response
/// with a JSON body (`Option<T>` when another success response has no body, each of those
/// mapped to `completed(empty)`), and, for a read, a `choose` for a `404` the document
/// describes as an answer.
pub(super) fn answers(
    cx: &mut Cx<'_>,
    op: &Value,
    method: &str,
    type_name: &str,
) -> Result<Answers, String> {
    let Some(responses) = op.get("responses").and_then(Value::as_object) else {
        return Ok(Answers::unit(Some(
            "The document declares no responses.".to_owned(),
        )));
    };
    let mut codes: Vec<&String> = responses
        .keys()
        .filter(|code| code.starts_with('2'))
        .collect();
    codes.sort();
    if codes.is_empty() {
        return Ok(Answers::unit(Some(
            "The document declares no success response.".to_owned(),
        )));
    }
    let mut successes = Vec::new();
    for code in &codes {
        let response = cx.resolve(&responses[code.as_str()])?.schema.clone();
        successes.push((code.as_str(), success(&response)));
    }
    let mut answers = result(cx, &successes, type_name)?;
    // A 404 can answer a question (is it merged? is she a member?); a write that finds
    // nothing has not done its work, whatever the description says.
    if method == "get"
        && let Some(decision) = not_found(cx, responses)?
    {
        answers.statuses.push_str(&decision);
        answers.open.push(Decision::NotFound);
    }
    Ok(answers)
}

/// What one success response carries.
fn success(response: &Value) -> Success {
    let description = response
        .get("description")
        .and_then(Value::as_str)
        .map(|d| plain(d, 1).join(" "))
        .unwrap_or_default();
    let content = response
        .get("content")
        .and_then(Value::as_object)
        .filter(|c| !c.is_empty());
    let Some(content) = content else {
        return Success::Empty(description);
    };
    match crate::schema::sorted(content)
        .into_iter()
        .find(|(m, _)| is_json(m))
        .and_then(|(_, v)| v.get("schema"))
    {
        Some(schema) => Success::Json(schema.clone()),
        None => Success::NotJson,
    }
}

/// The result type from the success responses (in code order).
fn result(
    cx: &mut Cx<'_>,
    successes: &[(&str, Success)],
    type_name: &str,
) -> Result<Answers, String> {
    let Some((_, schema)) = successes.iter().find_map(|(code, s)| match s {
        Success::Json(schema) => Some((*code, schema)),
        _ => None,
    }) else {
        // No body to read: the action returns no data, whatever the status.
        return Ok(Answers::unit(match successes.first() {
            Some((code, Success::NotJson)) => Some(format!(
                "The success response ({code}) is not JSON: the action returns no data."
            )),
            _ => None,
        }));
    };
    let read = match cx.result(schema, &format!("{type_name}Result")) {
        Ok(read) => read,
        Err(reason) => {
            return Ok(Answers::unit(Some(format!(
                "{reason}; the action returns no data."
            ))));
        }
    };
    // A 202 keeps the channel's default mapping (`pending`, with the data when there is
    // any), so it needs no rule.
    let empty: Vec<(&str, &String)> = successes
        .iter()
        .filter_map(|(code, s)| match s {
            Success::Empty(description) if *code != "202" => Some((*code, description)),
            _ => None,
        })
        .collect();
    if empty.is_empty() {
        return Ok(Answers {
            result: read.ty,
            note: wrapped(read.note.as_deref()),
            statuses: String::new(),
            open: Vec::new(),
        });
    }
    let mut statuses = String::new();
    for (code, description) in &empty {
        let said = if description.is_empty() {
            String::new()
        } else {
            format!(" (\"{description}\")")
        };
        let text = format!("{code} has no body{said}: the result is `None` (`completed(empty)`).");
        for line in crate::text::wrap(&text, 92) {
            statuses.push_str(&format!("    // {line}\n"));
        }
        statuses.push_str(&format!("    status({code}) = completed(empty),\n"));
    }
    Ok(Answers {
        result: format!("Option<{}>", read.ty),
        note: wrapped(read.note.as_deref()),
        statuses,
        open: Vec::new(),
    })
}

/// The `status(404) = choose` lines when the document describes a `404` as an answer
/// ("Not Found if the pull request has not been merged"), quoting it: whether it is one
/// is the author's decision, as effect, consent and retry are.
fn not_found(
    cx: &Cx<'_>,
    responses: &serde_json::Map<String, Value>,
) -> Result<Option<String>, String> {
    let Some(response) = responses.get("404") else {
        return Ok(None);
    };
    let response = cx.resolve(response)?.schema;
    let description = response
        .get("description")
        .and_then(Value::as_str)
        .map(|d| plain(d, 1).join(" "))
        .unwrap_or_default();
    if !reads_like_an_answer(&description) {
        return Ok(None);
    }
    let mut code = String::new();
    let text = format!(
        "404, in the document's words: \"{description}\". An answer or an error? For an answer, \
         replace `choose` with `completed(value = r#\"…\"#)`, the result it means as JSON of the \
         result type; for an error, with `rejected` (what a 404 means without a rule: not_found)."
    );
    for line in crate::text::wrap(&text, 92) {
        code.push_str(&format!("    // {line}\n"));
    }
    code.push_str("    status(404) = choose,\n");
    Ok(Some(code))
}

/// Whether a `404`'s description states a condition ("Not Found if …", "… when the user is
/// not a member") rather than only naming the status ("Resource not found").
fn reads_like_an_answer(description: &str) -> bool {
    let words = format!(" {} ", description.to_ascii_lowercase());
    [" if ", " when ", " unless ", " whether "]
        .iter()
        .any(|marker| words.contains(marker))
}

/// A note as comment lines, wrapped.
fn wrapped(note: Option<&str>) -> String {
    let mut code = String::new();
    for line in note.map(|n| crate::text::wrap(n, 92)).unwrap_or_default() {
        code.push_str(&format!("    // {line}\n"));
    }
    code
}
