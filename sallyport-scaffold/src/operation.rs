//! One operation → one action: its input struct, `#[action]` and `#[http]` attributes, and
//! its result type.

use serde_json::Value;

use sallyport_openapi::{OpenApi, OperationSelector};

use crate::schema::{Cx, Field, Types, types_of};
use crate::text::{action_name, field_ident, is_plain_ident, literal, pascal, plain};
use crate::{Decision, ScaffoldedAction};

/// Headers the executor or the channel owns; an operation's parameter of that name is never
/// offered to the agent.
const OWNED_HEADERS: &[&str] = &[
    "accept",
    "authorization",
    "content-length",
    "content-type",
    "cookie",
    "host",
    "idempotency-key",
    "user-agent",
];

/// The methods `#[http]` writes.
const METHODS: &[&str] = &["get", "post", "put", "patch", "delete"];

/// Generates the action of operation `id` into `types`.
///
/// # Errors
///
/// Why the operation cannot be expressed as an action (nothing is added to `types`).
pub(crate) fn generate(
    api: &OpenApi,
    types: &mut Types,
    id: &str,
    credential: Option<&str>,
) -> Result<ScaffoldedAction, String> {
    let before = types.len();
    let result = generate_inner(api, types, id, credential);
    if result.is_err() {
        types.truncate(before);
    }
    result
}

/// One input field's place in the request.
enum Place {
    Path,
    Query,
    Header(String),
    Body,
}

fn generate_inner(
    api: &OpenApi,
    types: &mut Types,
    id: &str,
    credential: Option<&str>,
) -> Result<ScaffoldedAction, String> {
    let root = api.document();
    let location = api
        .locate(&OperationSelector::id(id))
        .ok_or_else(|| "the document has no operation with this operationId".to_owned())?;
    let method = location.method.as_str();
    if !METHODS.contains(&method) {
        return Err(format!(
            "its method {} is not one an action sends (GET, POST, PUT, PATCH, DELETE)",
            method.to_uppercase()
        ));
    }
    let op = root.pointer(&location.pointer).unwrap_or(&Value::Null);
    if op
        .get("callbacks")
        .is_some_and(|c| c.as_object().is_some_and(|c| !c.is_empty()))
    {
        return Err(
            "it declares callbacks: an action is one request and its answer, and \
                    sallyport does not receive the upstream's later calls"
                .to_owned(),
        );
    }

    let type_name = types.reserve(&pascal(id));
    let mut cx = Cx::new(root, types);
    let mut fields: Vec<(String, Place, String)> = Vec::new(); // (json, place, code)
    let mut skipped: Vec<String> = Vec::new();

    // Parameters: the path item's, overridden by the operation's of the same name and place.
    let mut params: Vec<(String, String, Value)> = Vec::new();
    let item_pointer = location
        .pointer
        .rsplit_once('/')
        .map_or("", |(item, _)| item)
        .to_owned();
    for list in [
        format!("{item_pointer}/parameters"),
        format!("{}/parameters", location.pointer),
    ] {
        for param in root
            .pointer(&list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let param = cx.resolve(param)?.schema;
            let name = param
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let place = param
                .get("in")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            params.retain(|(n, p, _)| !(n == &name && p == &place));
            params.push((name, place, param.clone()));
        }
    }
    for (name, place, param) in &params {
        let required = place == "path" || param.get("required") == Some(&Value::Bool(true));
        let refuse = |reason: String| -> Result<(), String> {
            if required {
                Err(format!(
                    "its required {place} parameter `{name}` cannot be offered: {reason}"
                ))
            } else {
                Ok(())
            }
        };
        let where_ = match place.as_str() {
            "path" => Place::Path,
            "query" => Place::Query,
            "header" => {
                if OWNED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                    refuse("the channel owns this header".to_owned())?;
                    skipped.push(Field::skipped(name, "the channel owns this header").code);
                    continue;
                }
                if !required {
                    skipped.push(
                        Field::skipped(
                            name,
                            "an optional header; a narrow action should not let the agent set headers",
                        )
                        .code,
                    );
                    continue;
                }
                Place::Header(name.clone())
            }
            other => {
                let reason = format!("a {other} parameter, which an action does not send");
                refuse(reason.clone())?;
                skipped.push(Field::skipped(name, &reason).code);
                continue;
            }
        };
        let Some(schema) = param.get("schema") else {
            let reason = "it is described by `content`, not a schema".to_owned();
            refuse(reason.clone())?;
            skipped.push(Field::skipped(name, &reason).code);
            continue;
        };
        if matches!(where_, Place::Query)
            && types_of(cx.resolve(schema)?.schema).0 == ["array"]
            && param.get("explode") == Some(&Value::Bool(false))
        {
            let reason = "a comma-joined list (`explode: false`); the HTTP channel sends a list as repeated parameters".to_owned();
            refuse(reason.clone())?;
            skipped.push(Field::skipped(name, &reason).code);
            continue;
        }
        let hint = format!("{type_name}{}", pascal(name));
        // A header's field has a snake-case name (`X-Request-Tag` → `x_request_tag`): the
        // agent sends a field, the channel writes the header.
        let json = match where_ {
            Place::Header(_) => crate::text::snake(name),
            _ => name.clone(),
        };
        match cx.field(&json, schema, required, &hint, 1) {
            Ok(field) => {
                let mut code = field.code;
                // The parameter's own description says more than its schema's.
                if let Some(first) = param
                    .get("description")
                    .and_then(Value::as_str)
                    .and_then(|d| plain(d, 1).into_iter().next())
                {
                    code = replace_doc(&code, &first);
                }
                if matches!(where_, Place::Path) {
                    if code.contains("pub ") && code.contains(": Vec<") {
                        return Err(format!("its path parameter `{name}` is a list"));
                    }
                    code.insert_str(
                        0,
                        "    // Tag with #[scope(kind)] if a session should be limited to some values.\n",
                    );
                }
                fields.push((json, where_, code));
            }
            Err(reason) => {
                refuse(reason.clone())?;
                skipped.push(Field::skipped(name, &reason).code);
            }
        }
    }

    // The JSON body's fields.
    if let Some(body) = op.get("requestBody") {
        let body = cx.resolve(body)?.schema.clone();
        let required = body.get("required") == Some(&Value::Bool(true));
        let content = body.get("content").and_then(Value::as_object);
        let json = content.and_then(|c| {
            crate::schema::sorted(c)
                .into_iter()
                .find(|(media, _)| is_json(media))
                .map(|(_, v)| v.get("schema").cloned().unwrap_or(Value::Null))
        });
        match json {
            None => {
                let media: Vec<&str> = content
                    .map(|c| {
                        crate::schema::sorted(c)
                            .into_iter()
                            .map(|(k, _)| k.as_str())
                            .collect()
                    })
                    .unwrap_or_default();
                if media.is_empty() && !required {
                    skipped.push("    // Left out the request body: the document declares no media type for it.\n".to_owned());
                } else {
                    return Err(format!(
                        "its request body is {}, not JSON; the HTTP channel sends JSON bodies",
                        if media.is_empty() {
                            "undeclared".to_owned()
                        } else {
                            media.join(" or ")
                        }
                    ));
                }
            }
            Some(schema) => {
                if method == "get" {
                    return Err("it sends a body with GET".to_owned());
                }
                let resolved = cx.resolve(&schema)?.schema;
                let (body_types, _) = types_of(resolved);
                if !(body_types.is_empty() || body_types == ["object"]) {
                    return Err(format!(
                        "its JSON body is {}, not an object of fields",
                        body_types.join(" or ")
                    ));
                }
                let shape = cx
                    .shape(&schema)
                    .map_err(|r| format!("its JSON body: {r}"))?;
                if shape.properties.is_empty() {
                    let reason =
                        "its JSON body is a free-form object a narrow action should not expose";
                    if required {
                        return Err(reason.to_owned());
                    }
                    skipped.push(format!("    // Left out the request body: {reason}.\n"));
                }
                if shape.open {
                    skipped.push(
                        "    // Left out: the body's `additionalProperties: true` (free-form fields a narrow\n    // action should not expose).\n"
                            .to_owned(),
                    );
                }
                for (json, property) in &shape.properties {
                    if fields.iter().any(|(n, _, _)| n == json) {
                        return Err(format!(
                            "its body field `{json}` has the name of one of its parameters"
                        ));
                    }
                    let field_required = shape.required.contains(json);
                    let hint = format!("{type_name}{}", pascal(json));
                    match cx.field(json, property, field_required, &hint, 1) {
                        Ok(field) => fields.push((json.clone(), Place::Body, field.code)),
                        Err(reason) if field_required => {
                            return Err(format!(
                                "its required body field `{json}` cannot be offered: {reason}"
                            ));
                        }
                        Err(reason) => skipped.push(Field::skipped(json, &reason).code),
                    }
                }
            }
        }
    }
    let idents: Vec<String> = fields
        .iter()
        .map(|(json, _, _)| field_ident(json))
        .collect();
    for (i, ident) in idents.iter().enumerate() {
        if idents[..i].contains(ident) {
            return Err(format!(
                "two of its fields are both named `{ident}` in Rust"
            ));
        }
    }

    // The result.
    let (result, result_note) = success(&mut cx, op, &type_name)?;

    // The credential.
    let credential = match credential {
        Some(name) => Some(name.to_owned()),
        None => security(root, op)?,
    };

    // Decisions.
    let action = action_name(id);
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

    // The code.
    let mut code = String::new();
    code.push_str(&format!(
        "// `{}` {} {}\n",
        id.escape_debug(),
        method.to_uppercase(),
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
        doc.push(format!("`{} {}`.", method.to_uppercase(), location.path));
    }
    for (i, paragraph) in doc.iter().enumerate() {
        if i > 0 {
            code.push_str("///\n");
        }
        for line in crate::text::wrap(paragraph, 96) {
            code.push_str(&format!("/// {line}\n"));
        }
    }
    code.push_str("#[derive(Debug, sallyport_core::Action, Deserialize, Serialize, JsonSchema)]\n");
    code.push_str("#[action(\n");
    code.push_str(&format!("    name = {},\n", literal(&action)));
    code.push_str(&decisions);
    match &credential {
        Some(name) => code.push_str(&format!("    credential = {},\n", literal(name))),
        None => code.push_str(
            "    // The document names no security scheme: add `credential = \"…\"` if the API needs one.\n",
        ),
    }
    code.push_str(")]\n");
    code.push_str("#[http(\n");
    code.push_str(&format!("    {method} = {},\n", literal(&location.path)));
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
    if let Some(note) = result_note {
        code.push_str(&format!("    // {note}\n"));
    }
    code.push_str(&format!("    result = {result},\n"));
    code.push_str(")]\n");
    code.push_str("#[serde(deny_unknown_fields)]\n");
    code.push_str(&format!("pub struct {type_name} {{\n"));
    for (_, _, field) in &fields {
        code.push_str(field);
    }
    for line in &skipped {
        code.push_str(line);
    }
    code.push_str("}\n");
    types.set(&type_name, code);
    Ok(ScaffoldedAction {
        operation_id: id.to_owned(),
        action,
        type_name,
        open_decisions: open,
    })
}

/// The result type of the operation's success response, and a note on what it is.
fn success(
    cx: &mut Cx<'_>,
    op: &Value,
    type_name: &str,
) -> Result<(String, Option<String>), String> {
    let Some(responses) = op.get("responses").and_then(Value::as_object) else {
        return Ok((
            "()".to_owned(),
            Some("The document declares no responses.".to_owned()),
        ));
    };
    let mut codes: Vec<&String> = responses
        .keys()
        .filter(|code| code.starts_with('2'))
        .collect();
    codes.sort();
    let Some(code) = codes.first() else {
        return Ok((
            "()".to_owned(),
            Some("The document declares no success response.".to_owned()),
        ));
    };
    let response = cx.resolve(&responses[code.as_str()])?.schema.clone();
    let Some(content) = response.get("content").and_then(Value::as_object) else {
        return Ok(("()".to_owned(), None));
    };
    let Some(schema) = crate::schema::sorted(content)
        .into_iter()
        .find(|(m, _)| is_json(m))
        .and_then(|(_, v)| v.get("schema"))
    else {
        return Ok((
            "()".to_owned(),
            Some(format!(
                "The success response ({code}) is not JSON: the action returns no data."
            )),
        ));
    };
    match cx.result(schema, &format!("{type_name}Result")) {
        Ok(ty) => Ok((ty, None)),
        Err(reason) => Ok((
            "()".to_owned(),
            Some(format!("{reason}; the action returns no data.")),
        )),
    }
}

/// The credential named by the operation's (or the document's) security requirement.
fn security(root: &Value, op: &Value) -> Result<Option<String>, String> {
    let requirements = op
        .get("security")
        .or_else(|| root.get("security"))
        .and_then(Value::as_array);
    let Some(requirements) = requirements else {
        return Ok(None);
    };
    for requirement in requirements {
        let Some(schemes) = requirement.as_object() else {
            continue;
        };
        match schemes.len() {
            0 => {}
            1 => return Ok(schemes.keys().next().cloned()),
            _ => {
                return Err(format!(
                    "its security requirement needs {} credentials at once ({}); an action attaches one",
                    schemes.len(),
                    crate::schema::sorted(schemes)
                        .into_iter()
                        .map(|(k, _)| k.as_str())
                        .collect::<Vec<_>>()
                        .join(" and ")
                ));
            }
        }
    }
    Ok(None)
}

/// A JSON media type (`application/json`, `application/vnd.x+json`, with parameters).
fn is_json(media: &str) -> bool {
    let essence = media.split(';').next().unwrap_or_default().trim();
    essence == "application/json" || essence.ends_with("+json")
}

/// A field's JSON name in `query(…)` / `header(… = …)`: bare when it can be.
fn attr_name(json: &str) -> String {
    if is_plain_ident(json) {
        json.to_owned()
    } else {
        literal(json)
    }
}

/// `code` with its first `///` line replaced by `/// {doc}`.
fn replace_doc(code: &str, doc: &str) -> String {
    let mut out = String::new();
    let mut done = false;
    for line in code.lines() {
        if !done && line.trim_start().starts_with("///") {
            out.push_str(&format!("    /// {doc}\n"));
            done = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
