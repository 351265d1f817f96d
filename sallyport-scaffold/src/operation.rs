//! One operation → one action: its input struct, `#[action]` and `#[http]` attributes, and
//! its result type.

mod responses;
mod write;

use serde_json::Value;

use sallyport_openapi::{OpenApi, OperationLocation, OperationSelector};

use crate::ScaffoldedAction;
use crate::schema::{Cx, Field, Types, types_of};
use crate::text::{action_name, field_ident, is_plain_ident, literal, pascal, plain};

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

/// The action of operation `id`, its input type set in `types`: the operation's checks,
/// its fields, its result, its credential and its decisions, then the code written.
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
    let op = expressible(root, &location)?;

    let type_name = types.reserve(&pascal(id));
    let mut cx = Cx::new(root, types);
    let mut input = Input::default();
    for (name, place, param) in &parameters(&cx, &location)? {
        input.parameter(&mut cx, &type_name, name, place, param)?;
    }
    input.body(&mut cx, op, method, &type_name)?;
    input.distinct_idents()?;

    // The result, and what each answer means.
    let answers = responses::answers(&mut cx, op, method, &type_name)?;

    // The credential.
    let credential = match credential {
        Some(name) => Some(name.to_owned()),
        None => security(root, op)?,
    };

    // Decisions.
    let action = action_name(id);
    let (decisions, mut open) = write::decisions(op);
    open.extend(answers.open.iter().copied());

    // The code.
    let mut code = write::notes(id, &location, op);
    code.push_str(&write::doc(op, &location));
    code.push_str(&write::action_attributes(
        &action,
        &decisions,
        credential.as_deref(),
    ));
    code.push_str(&write::http_attribute(&location, &input.fields, &answers));
    code.push_str(&input.code(&type_name));
    types.set(&type_name, code);
    Ok(ScaffoldedAction {
        operation_id: id.to_owned(),
        action,
        type_name,
        open_decisions: open,
    })
}

/// The operation object at `location`, if an action can express it: its method is one an
/// action sends, and it declares no callbacks.
fn expressible<'a>(root: &'a Value, location: &OperationLocation) -> Result<&'a Value, String> {
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
    Ok(op)
}

/// The operation's parameters as `(name, in, parameter)`, `$ref`s resolved: the path
/// item's, overridden by the operation's of the same name and place.
fn parameters(
    cx: &Cx<'_>,
    location: &OperationLocation,
) -> Result<Vec<(String, String, Value)>, String> {
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
        for param in cx
            .root
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
    Ok(params)
}

/// What becomes of one parameter or body field.
enum Offer {
    /// A field: its JSON name, its place in the request, and its code.
    Field(String, Place, String),
    /// Left out, for this reason (which refuses the operation when it is required).
    LeftOut(String),
}

/// The input struct as it is built: its fields, and a comment on each thing left out.
#[derive(Default)]
struct Input {
    /// `(json, place, code)` of each field, in the order they are written.
    fields: Vec<(String, Place, String)>,
    /// The comments on what was left out, and why.
    skipped: Vec<String>,
}

impl Input {
    /// Adds parameter `name` (in `place`) as a field, or a comment on why it is left out;
    /// an error when a required one cannot be offered.
    fn parameter(
        &mut self,
        cx: &mut Cx<'_>,
        type_name: &str,
        name: &str,
        place: &str,
        param: &Value,
    ) -> Result<(), String> {
        let required = place == "path" || param.get("required") == Some(&Value::Bool(true));
        match offer_parameter(cx, type_name, name, place, param, required)? {
            Offer::Field(json, where_, code) => self.fields.push((json, where_, code)),
            Offer::LeftOut(reason) if required => {
                return Err(format!(
                    "its required {place} parameter `{name}` cannot be offered: {reason}"
                ));
            }
            Offer::LeftOut(reason) => self.skipped.push(Field::skipped(name, &reason).code),
        }
        Ok(())
    }

    /// Adds the fields of the operation's JSON body, if it has one; an error for a body the
    /// HTTP channel cannot send or a narrow action should not expose when it is required.
    fn body(
        &mut self,
        cx: &mut Cx<'_>,
        op: &Value,
        method: &str,
        type_name: &str,
    ) -> Result<(), String> {
        let Some(body) = op.get("requestBody") else {
            return Ok(());
        };
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
            None => self.no_json_body(content, required),
            Some(schema) => {
                if method == "get" {
                    return Err("it sends a body with GET".to_owned());
                }
                self.json_body(cx, &schema, required, type_name)
            }
        }
    }

    /// A request body with no JSON media type: left out when it declares none and is
    /// optional, else an error (the HTTP channel sends JSON bodies only).
    fn no_json_body(
        &mut self,
        content: Option<&serde_json::Map<String, Value>>,
        required: bool,
    ) -> Result<(), String> {
        let media: Vec<&str> = content
            .map(|c| {
                crate::schema::sorted(c)
                    .into_iter()
                    .map(|(k, _)| k.as_str())
                    .collect()
            })
            .unwrap_or_default();
        if media.is_empty() && !required {
            self.skipped.push(
                "    // Left out the request body: the document declares no media type for it.\n"
                    .to_owned(),
            );
            Ok(())
        } else {
            Err(format!(
                "its request body is {}, not JSON; the HTTP channel sends JSON bodies",
                if media.is_empty() {
                    "undeclared".to_owned()
                } else {
                    media.join(" or ")
                }
            ))
        }
    }

    /// Adds the properties of JSON body `schema` as fields: it must be an object, and a
    /// free-form one (or its free-form part) is left out.
    fn json_body(
        &mut self,
        cx: &mut Cx<'_>,
        schema: &Value,
        required: bool,
        type_name: &str,
    ) -> Result<(), String> {
        let resolved = cx.resolve(schema)?.schema;
        let (body_types, _) = types_of(resolved);
        if !(body_types.is_empty() || body_types == ["object"]) {
            return Err(format!(
                "its JSON body is {}, not an object of fields",
                body_types.join(" or ")
            ));
        }
        let shape = cx
            .shape(schema)
            .map_err(|r| format!("its JSON body: {r}"))?;
        if shape.properties.is_empty() {
            let reason = "its JSON body is a free-form object a narrow action should not expose";
            if required {
                return Err(reason.to_owned());
            }
            self.skipped
                .push(format!("    // Left out the request body: {reason}.\n"));
        }
        if shape.open {
            self.skipped.push(
                "    // Left out: the body's `additionalProperties: true` (free-form fields a narrow\n    // action should not expose).\n"
                    .to_owned(),
            );
        }
        for (json, property) in &shape.properties {
            if self.fields.iter().any(|(n, _, _)| n == json) {
                return Err(format!(
                    "its body field `{json}` has the name of one of its parameters"
                ));
            }
            let field_required = shape.required.contains(json);
            let hint = format!("{type_name}{}", pascal(json));
            match cx.field(json, property, field_required, &hint, 1) {
                Ok(field) => self.fields.push((json.clone(), Place::Body, field.code)),
                Err(reason) if field_required => {
                    return Err(format!(
                        "its required body field `{json}` cannot be offered: {reason}"
                    ));
                }
                Err(reason) => self.skipped.push(Field::skipped(json, &reason).code),
            }
        }
        Ok(())
    }

    /// Refuses two fields whose JSON names become the same Rust identifier.
    fn distinct_idents(&self) -> Result<(), String> {
        let idents: Vec<String> = self
            .fields
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
        Ok(())
    }

    /// The input struct `type_name`: its fields, then the comments on what was left out.
    fn code(&self, type_name: &str) -> String {
        let mut code = String::new();
        code.push_str("#[serde(deny_unknown_fields)]\n");
        code.push_str(&format!("pub struct {type_name} {{\n"));
        for (_, _, field) in &self.fields {
            code.push_str(field);
        }
        for line in &self.skipped {
            code.push_str(line);
        }
        code.push_str("}\n");
        code
    }
}

/// Parameter `name` (in `place`) as a field, or why it is left out: a place an action does
/// not send, a header the channel owns or an optional one, a parameter described by
/// `content`, a comma-joined list, or a schema the field cannot express. An error for a
/// path parameter that is a list, or a `$ref` that does not resolve.
fn offer_parameter(
    cx: &mut Cx<'_>,
    type_name: &str,
    name: &str,
    place: &str,
    param: &Value,
    required: bool,
) -> Result<Offer, String> {
    let left_out = |reason: &str| Ok(Offer::LeftOut(reason.to_owned()));
    let where_ = match place {
        "path" => Place::Path,
        "query" => Place::Query,
        "header" if OWNED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) => {
            return left_out("the channel owns this header");
        }
        "header" if !required => {
            return left_out(
                "an optional header; a narrow action should not let the agent set headers",
            );
        }
        "header" => Place::Header(name.to_owned()),
        other => {
            return left_out(&format!(
                "a {other} parameter, which an action does not send"
            ));
        }
    };
    let Some(schema) = param.get("schema") else {
        return left_out("it is described by `content`, not a schema");
    };
    if matches!(where_, Place::Query)
        && types_of(cx.resolve(schema)?.schema).0 == ["array"]
        && param.get("explode") == Some(&Value::Bool(false))
    {
        return left_out(
            "a comma-joined list (`explode: false`); the HTTP channel sends a list as repeated parameters",
        );
    }
    let hint = format!("{type_name}{}", pascal(name));
    // A header's field has a snake-case name (`X-Request-Tag` → `x_request_tag`): the
    // agent sends a field, the channel writes the header.
    let json = match where_ {
        Place::Header(_) => crate::text::snake(name),
        _ => name.to_owned(),
    };
    let mut code = match cx.field(&json, schema, required, &hint, 1) {
        Ok(field) => field.code,
        Err(reason) => return Ok(Offer::LeftOut(reason)),
    };
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
    Ok(Offer::Field(json, where_, code))
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
