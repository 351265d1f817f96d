//! JSON Schemas of the document → Rust types: the input side (strict: typed fields,
//! constraints as schemars attributes, enums as Rust enums, nested objects as structs that
//! refuse unknown fields) and the result side (lenient: the scalar fields of the answer).

mod result;

use serde_json::Value;

use crate::text::{field_ident, literal, pascal, plain};

/// Deepest nesting of input objects the generator writes as structs.
const MAX_DEPTH: usize = 4;

/// Longest `$ref` chain followed.
const MAX_HOPS: usize = 32;

/// The Rust items generated so far (structs and enums), in the order they were first made;
/// one definition per name, identical definitions shared.
#[derive(Debug, Default)]
pub(crate) struct Types {
    items: Vec<(String, String)>,
}

impl Types {
    /// Adds the item `code(name)` under `base` (or `base2`, `base3`, … when `base` already
    /// names a different item) and returns the name used.
    pub(crate) fn add(&mut self, base: &str, code: impl Fn(&str) -> String) -> String {
        for n in 1.. {
            let name = if n == 1 {
                base.to_owned()
            } else {
                format!("{base}{n}")
            };
            let text = code(&name);
            match self.items.iter().find(|(existing, _)| *existing == name) {
                Some((_, existing)) if *existing == text => return name,
                Some(_) => {}
                None => {
                    self.items.push((name.clone(), text));
                    return name;
                }
            }
        }
        unreachable!("the loop returns")
    }

    /// Reserves a name (`base`, or `base2`, … when taken) for an item whose code comes
    /// later ([`Types::set`]), so the item keeps its place before the types it uses.
    pub(crate) fn reserve(&mut self, base: &str) -> String {
        let mut name = base.to_owned();
        let mut n = 1;
        while self.items.iter().any(|(existing, _)| *existing == name) {
            n += 1;
            name = format!("{base}{n}");
        }
        self.items.push((name.clone(), String::new()));
        name
    }

    /// Sets the code of a reserved item.
    pub(crate) fn set(&mut self, name: &str, code: String) {
        if let Some(item) = self.items.iter_mut().find(|(n, _)| n == name) {
            item.1 = code;
        }
    }

    /// How many items there are (to drop what a failed operation added).
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Drops every item made after the first `len`.
    pub(crate) fn truncate(&mut self, len: usize) {
        self.items.truncate(len);
    }

    /// The items' code, in order.
    pub(crate) fn code(&self) -> impl Iterator<Item = &str> {
        self.items.iter().map(|(_, code)| code.as_str())
    }
}

/// The document and the generator's state while mapping schemas.
#[derive(Debug)]
pub(crate) struct Cx<'a> {
    pub(crate) root: &'a Value,
    pub(crate) types: &'a mut Types,
    /// `$ref` targets being mapped now (a schema that contains itself is not expressible).
    stack: Vec<String>,
}

/// A schema with its `$ref` chain followed, and the component name it was found under.
pub(crate) struct Resolved<'a> {
    pub(crate) schema: &'a Value,
    pub(crate) name: Option<String>,
    pub(crate) pointer: Option<String>,
}

/// A Rust type for a schema, with the schemars attributes of its constraints.
#[derive(Debug)]
pub(crate) struct Mapped {
    pub(crate) ty: String,
    pub(crate) attrs: Vec<String>,
    /// The schema admits `null`.
    pub(crate) nullable: bool,
    /// Something the generator narrowed, for a comment.
    pub(crate) note: Option<String>,
}

impl<'a> Cx<'a> {
    pub(crate) fn new(root: &'a Value, types: &'a mut Types) -> Self {
        Self {
            root,
            types,
            stack: Vec::new(),
        }
    }

    /// Follows `schema`'s `$ref` chain.
    ///
    /// # Errors
    ///
    /// A reference outside the document or to nothing.
    pub(crate) fn resolve<'v>(&self, schema: &'v Value) -> Result<Resolved<'v>, String>
    where
        'a: 'v,
    {
        let mut current = schema;
        let mut name = None;
        let mut pointer = None;
        for _ in 0..MAX_HOPS {
            let Some(reference) = current.get("$ref").and_then(Value::as_str) else {
                return Ok(Resolved {
                    schema: current,
                    name,
                    pointer,
                });
            };
            let target = reference
                .strip_prefix('#')
                .ok_or_else(|| format!("`$ref` {reference} points outside the document"))?;
            current = self
                .root
                .pointer(target)
                .ok_or_else(|| format!("`$ref` {reference} points to nothing"))?;
            if let Some(component) = target.strip_prefix("/components/schemas/") {
                name = Some(component.replace("~1", "/").replace("~0", "~"));
            }
            pointer = Some(target.to_owned());
        }
        Err("a chain of `$ref`s too long to follow".to_owned())
    }

    /// The input type of `schema`; `hint` names a generated item when the schema has no
    /// component name.
    ///
    /// # Errors
    ///
    /// Why the schema cannot be offered as a narrow input (the field is left out).
    pub(crate) fn input(
        &mut self,
        schema: &Value,
        hint: &str,
        depth: usize,
    ) -> Result<Mapped, String> {
        let resolved = self.resolve(schema)?;
        let schema = resolved.schema;
        if let Some(pointer) = &resolved.pointer
            && self.stack.contains(pointer)
        {
            return Err("it contains itself (a recursive schema)".to_owned());
        }
        let (types, nullable) = types_of(schema);
        let hint = resolved
            .name
            .as_deref()
            .map_or_else(|| hint.to_owned(), pascal);
        if let Some(pointer) = resolved.pointer.clone() {
            self.stack.push(pointer);
        }
        let mapped = self.input_resolved(schema, &types, &hint, depth);
        if resolved.pointer.is_some() {
            self.stack.pop();
        }
        let mut mapped = mapped?;
        mapped.nullable |= nullable;
        Ok(mapped)
    }

    fn input_resolved(
        &mut self,
        schema: &Value,
        types: &[String],
        hint: &str,
        depth: usize,
    ) -> Result<Mapped, String> {
        match types {
            [] => self.untyped(schema, hint, depth),
            [one] => self.typed(schema, one, hint, depth),
            several => Err(format!(
                "it may be any of {}: not one Rust type",
                several.join(", ")
            )),
        }
    }

    /// A schema without `type`: `allOf`, `oneOf`/`anyOf`, a bare `enum` or `properties`.
    fn untyped(&mut self, schema: &Value, hint: &str, depth: usize) -> Result<Mapped, String> {
        if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
            return match parts.as_slice() {
                [one] => self.input(one, hint, depth),
                _ => self.object(schema, hint, depth),
            };
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(parts) = schema.get(key).and_then(Value::as_array) {
                return self.alternatives(key, parts, hint, depth);
            }
        }
        if schema.get("enum").is_some() {
            return self.typed(schema, "string", hint, depth);
        }
        if schema.get("properties").is_some() {
            return self.typed(schema, "object", hint, depth);
        }
        Err("it has no type: a free-form value a narrow action should not expose".to_owned())
    }

    /// `oneOf` / `anyOf`: one alternative after `null` is dropped, or the plain string
    /// alternative (the narrowest form most APIs accept), else not expressible.
    fn alternatives(
        &mut self,
        key: &str,
        parts: &[Value],
        hint: &str,
        depth: usize,
    ) -> Result<Mapped, String> {
        let mut kept = Vec::new();
        let mut nullable = false;
        for part in parts {
            let resolved = self.resolve(part)?;
            let (types, _) = types_of(resolved.schema);
            if types.is_empty() && resolved.schema.get("type").is_some() {
                nullable = true;
                continue;
            }
            kept.push((part, types));
        }
        let mut mapped = match kept.as_slice() {
            [(one, _)] => self.input(one, hint, depth)?,
            _ => {
                let string = kept.iter().find(|(part, types)| {
                    types == &["string".to_owned()]
                        && self
                            .resolve(part)
                            .is_ok_and(|r| r.schema.get("enum").is_none())
                });
                let Some((part, _)) = string else {
                    return Err(format!(
                        "it is a `{key}` of several shapes: not one Rust type"
                    ));
                };
                let mut mapped = self.input(part, hint, depth)?;
                mapped.note = Some(format!(
                    "narrowed from a `{key}` of {} forms to its string form",
                    kept.len()
                ));
                mapped
            }
        };
        mapped.nullable |= nullable;
        Ok(mapped)
    }

    fn typed(
        &mut self,
        schema: &Value,
        ty: &str,
        hint: &str,
        depth: usize,
    ) -> Result<Mapped, String> {
        let mut attrs = Vec::new();
        let rust = match ty {
            "string" => {
                if let Some(values) = schema.get("enum").and_then(Value::as_array) {
                    return self.string_enum(schema, values, hint);
                }
                match schema.get("format").and_then(Value::as_str) {
                    Some("uri" | "url" | "uri-reference" | "iri") => {
                        return Err("it is a URL: a narrow action should not let the agent \
                                    choose where something points"
                            .to_owned());
                    }
                    Some("binary") => return Err("it is binary content".to_owned()),
                    _ => {}
                }
                if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
                    attrs.push(format!(
                        "#[schemars(regex(pattern = {}))]",
                        literal(pattern)
                    ));
                }
                if let Some(length) = bounds(schema, "minLength", "maxLength") {
                    attrs.push(format!("#[schemars(length({length}))]"));
                }
                "String".to_owned()
            }
            "integer" => {
                if let Some(range) = integer_range(schema) {
                    attrs.push(format!("#[schemars(range({range}))]"));
                }
                "i64".to_owned()
            }
            "number" => {
                if let Some(range) = number_range(schema) {
                    attrs.push(format!("#[schemars(range({range}))]"));
                }
                "f64".to_owned()
            }
            "boolean" => "bool".to_owned(),
            "array" => {
                let items = schema.get("items").unwrap_or(&Value::Null);
                if items.is_null() {
                    return Err("it is a list of free-form values".to_owned());
                }
                let item = self
                    .input(items, &format!("{hint}Item"), depth + 1)
                    .map_err(|reason| format!("its items cannot be expressed: {reason}"))?;
                if item.nullable {
                    return Err("its items may be null".to_owned());
                }
                if let Some(length) = bounds(schema, "minItems", "maxItems") {
                    attrs.push(format!("#[schemars(length({length}))]"));
                }
                format!("Vec<{}>", item.ty)
            }
            "object" => return self.object(schema, hint, depth),
            other => return Err(format!("its type `{other}` has no Rust form")),
        };
        Ok(Mapped {
            ty: rust,
            attrs,
            nullable: false,
            note: None,
        })
    }

    /// A Rust enum of a string enum's values.
    fn string_enum(
        &mut self,
        schema: &Value,
        values: &[Value],
        hint: &str,
    ) -> Result<Mapped, String> {
        let mut variants: Vec<(String, String)> = Vec::new();
        let mut nullable = false;
        for value in values {
            match value {
                Value::String(text) => {
                    let mut name = pascal(text);
                    if variants.iter().any(|(n, _)| *n == name) {
                        name = format!("{name}{}", variants.len() + 1);
                    }
                    variants.push((name, text.clone()));
                }
                Value::Null => nullable = true,
                _ => return Err("its enum holds values that are not strings".to_owned()),
            }
        }
        if variants.is_empty() {
            return Err("its enum admits no string".to_owned());
        }
        let description = schema
            .get("description")
            .and_then(Value::as_str)
            .map(|d| plain(d, 1))
            .and_then(|p| p.into_iter().next());
        let name = self.types.add(hint, |name| {
            let mut code = String::new();
            match &description {
                Some(d) => code.push_str(&format!("/// {d}\n")),
                None => code.push_str(&format!("/// The values `{name}` admits.\n")),
            }
            code.push_str(
                "#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]\n",
            );
            code.push_str(&format!("pub enum {name} {{\n"));
            for (variant, value) in &variants {
                code.push_str(&format!(
                    "    /// `{value}`\n    #[serde(rename = {})]\n    {variant},\n",
                    literal(value)
                ));
            }
            code.push_str("}\n");
            code
        });
        Ok(Mapped {
            ty: name,
            attrs: Vec::new(),
            nullable,
            note: None,
        })
    }

    /// A nested struct of an object schema's declared properties.
    fn object(&mut self, schema: &Value, hint: &str, depth: usize) -> Result<Mapped, String> {
        if depth >= MAX_DEPTH {
            return Err("it is nested too deeply for a narrow action".to_owned());
        }
        let shape = self.shape(schema)?;
        if shape.open {
            return Err(
                "it has `additionalProperties: true`: a free-form object a narrow \
                        action should not expose"
                    .to_owned(),
            );
        }
        if shape.properties.is_empty() {
            return Err("it is a free-form object a narrow action should not expose".to_owned());
        }
        let mut fields = Vec::new();
        for (json, property) in &shape.properties {
            let required = shape.required.contains(json);
            match self.field(
                json,
                property,
                required,
                &format!("{hint}{}", pascal(json)),
                depth + 1,
            ) {
                Ok(field) => fields.push(field),
                Err(reason) if required => {
                    return Err(format!(
                        "its required field `{json}` cannot be expressed: {reason}"
                    ));
                }
                Err(reason) => fields.push(Field::skipped(json, &reason)),
            }
        }
        let description = schema
            .get("description")
            .and_then(Value::as_str)
            .map(|d| plain(d, 1))
            .and_then(|p| p.into_iter().next());
        let name = self.types.add(hint, |name| {
            let mut code = String::new();
            match &description {
                Some(d) => code.push_str(&format!("/// {d}\n")),
                None => code.push_str(&format!("/// The `{name}` object.\n")),
            }
            code.push_str(
                "#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]\n#[serde(deny_unknown_fields)]\n",
            );
            code.push_str(&format!("pub struct {name} {{\n"));
            for field in &fields {
                code.push_str(&field.code);
            }
            code.push_str("}\n");
            code
        });
        Ok(Mapped {
            ty: name,
            attrs: Vec::new(),
            nullable: false,
            note: None,
        })
    }

    /// One field of an input struct: doc comment, serde and schemars attributes, type.
    ///
    /// # Errors
    ///
    /// Why the field is left out.
    pub(crate) fn field(
        &mut self,
        json: &str,
        schema: &Value,
        required: bool,
        hint: &str,
        depth: usize,
    ) -> Result<Field, String> {
        let mapped = self.input(schema, hint, depth)?;
        let description = self
            .resolve(schema)
            .ok()
            .and_then(|r| {
                r.schema
                    .get("description")
                    .or_else(|| schema.get("description"))
            })
            .and_then(Value::as_str)
            .map(|d| plain(d, 1))
            .and_then(|p| p.into_iter().next());
        Ok(Field::new(
            json,
            &mapped,
            required,
            description.as_deref(),
            "    ",
        ))
    }

    /// Properties, required names and openness of an object schema, `allOf` parts merged.
    pub(crate) fn shape(&self, schema: &Value) -> Result<Shape, String> {
        let mut shape = Shape::default();
        let mut stack = vec![schema];
        let mut visited = 0;
        while let Some(part) = stack.pop() {
            visited += 1;
            if visited > 256 {
                return Err("its `allOf` parts never end".to_owned());
            }
            let part = self.resolve(part)?.schema;
            if let Some(props) = part.get("properties").and_then(Value::as_object) {
                for (name, prop) in sorted(props) {
                    if !shape.properties.iter().any(|(n, _)| n == name) {
                        shape.properties.push((name.clone(), prop.clone()));
                    }
                }
            }
            if let Some(req) = part.get("required").and_then(Value::as_array) {
                shape
                    .required
                    .extend(req.iter().filter_map(Value::as_str).map(str::to_owned));
            }
            if part.get("additionalProperties") == Some(&Value::Bool(true)) {
                shape.open = true;
            }
            for key in ["oneOf", "anyOf"] {
                if part.get(key).is_some() {
                    return Err(format!("it is a `{key}` of several object shapes"));
                }
            }
            if let Some(parts) = part.get("allOf").and_then(Value::as_array) {
                stack.extend(parts.iter().rev());
            }
        }
        Ok(shape)
    }
}

/// What an object schema declares, `allOf` parts merged.
#[derive(Debug, Default)]
pub(crate) struct Shape {
    pub(crate) properties: Vec<(String, Value)>,
    pub(crate) required: Vec<String>,
    pub(crate) open: bool,
}

/// One generated struct field, or the comment saying why it was left out.
#[derive(Debug)]
pub(crate) struct Field {
    pub(crate) code: String,
}

impl Field {
    /// An input field.
    pub(crate) fn new(
        json: &str,
        mapped: &Mapped,
        required: bool,
        description: Option<&str>,
        indent: &str,
    ) -> Self {
        let ident = field_ident(json);
        let mut code = String::new();
        doc_lines(&mut code, indent, description, json);
        if let Some(note) = &mapped.note {
            code.push_str(&format!("{indent}// sallyport scaffold: {note}.\n"));
        }
        if ident != json {
            code.push_str(&format!("{indent}#[serde(rename = {})]\n", literal(json)));
        }
        // A required field that admits null is offered non-null: the narrower form.
        let optional = !required;
        if optional {
            code.push_str(&format!(
                "{indent}#[serde(default, skip_serializing_if = \"Option::is_none\")]\n"
            ));
        }
        for attr in &mapped.attrs {
            code.push_str(&format!("{indent}{attr}\n"));
        }
        let ty = if optional {
            format!("Option<{}>", mapped.ty)
        } else {
            mapped.ty.clone()
        };
        code.push_str(&format!("{indent}pub {ident}: {ty},\n"));
        Self { code }
    }

    /// A result field: `Option` with a default unless required and not nullable.
    fn result(json: &str, mapped: &Mapped, required: bool, description: Option<&str>) -> Self {
        let ident = field_ident(json);
        let mut code = String::new();
        doc_lines(&mut code, "    ", description, json);
        if ident != json {
            code.push_str(&format!("    #[serde(rename = {})]\n", literal(json)));
        }
        let ty = if required && !mapped.nullable {
            mapped.ty.clone()
        } else {
            code.push_str("    #[serde(default)]\n");
            format!("Option<{}>", mapped.ty)
        };
        code.push_str(&format!("    pub {ident}: {ty},\n"));
        Self { code }
    }

    /// The comment left where a field was not generated.
    pub(crate) fn skipped(json: &str, reason: &str) -> Self {
        let mut code = String::new();
        for line in crate::text::wrap(&format!("Left out `{json}`: {reason}."), 92) {
            code.push_str(&format!("    // {line}\n"));
        }
        Self { code }
    }
}

/// A field's doc comment, wrapped (`` `json`. `` when the document describes nothing).
fn doc_lines(code: &mut String, indent: &str, description: Option<&str>, json: &str) {
    match description {
        Some(d) => {
            for line in crate::text::wrap(d, 96 - indent.len()) {
                code.push_str(&format!("{indent}/// {line}\n"));
            }
        }
        None => code.push_str(&format!("{indent}/// `{json}`.\n")),
    }
}

/// The schema's types other than `null`, and whether `null` is one of them.
pub(crate) fn types_of(schema: &Value) -> (Vec<String>, bool) {
    match schema.get("type") {
        Some(Value::String(t)) if t == "null" => (Vec::new(), true),
        Some(Value::String(t)) => (vec![t.clone()], false),
        Some(Value::Array(ts)) => {
            let names: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
            (
                names
                    .iter()
                    .filter(|t| **t != "null")
                    .map(|t| (*t).to_owned())
                    .collect(),
                names.contains(&"null"),
            )
        }
        _ => (Vec::new(), false),
    }
}

/// `min = …, max = …` from two non-negative integer keywords.
fn bounds(schema: &Value, min: &str, max: &str) -> Option<String> {
    let min = schema.get(min).and_then(Value::as_u64);
    let max = schema.get(max).and_then(Value::as_u64);
    join_bounds(min.map(|m| m.to_string()), max.map(|m| m.to_string()))
}

fn join_bounds(min: Option<String>, max: Option<String>) -> Option<String> {
    match (min, max) {
        (None, None) => None,
        (Some(min), None) => Some(format!("min = {min}")),
        (None, Some(max)) => Some(format!("max = {max}")),
        (Some(min), Some(max)) => Some(format!("min = {min}, max = {max}")),
    }
}

/// An integer's inclusive bounds (JSON Schema 2020-12: numeric exclusive bounds).
fn integer_range(schema: &Value) -> Option<String> {
    let bound = |inclusive: &str, exclusive: &str, step: i64| {
        let inclusive = schema.get(inclusive).and_then(as_integer);
        let exclusive = schema
            .get(exclusive)
            .and_then(as_integer)
            .map(|e| e.saturating_add(step));
        match (inclusive, exclusive) {
            (Some(a), Some(b)) if step > 0 => Some(a.max(b)),
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    };
    join_bounds(
        bound("minimum", "exclusiveMinimum", 1).map(|v| v.to_string()),
        bound("maximum", "exclusiveMaximum", -1).map(|v| v.to_string()),
    )
}

fn as_integer(value: &Value) -> Option<i64> {
    value.as_i64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
            .map(|f| f as i64)
    })
}

/// A number's inclusive bounds (an exclusive bound is written as the inclusive one: schemars
/// has no exclusive form; the upstream's own guard still refuses the bound itself).
fn number_range(schema: &Value) -> Option<String> {
    let float = |key: &str| {
        schema.get(key).and_then(Value::as_f64).map(|f| {
            if f.fract() == 0.0 {
                format!("{f:.1}")
            } else {
                f.to_string()
            }
        })
    };
    join_bounds(
        float("minimum").or_else(|| float("exclusiveMinimum")),
        float("maximum").or_else(|| float("exclusiveMaximum")),
    )
}

/// A JSON object's entries sorted by key: what is generated must not depend on whether
/// serde_json keeps document order (its `preserve_order` feature, which any crate in the
/// build can turn on) or sorts.
pub(crate) fn sorted(map: &serde_json::Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries
}
