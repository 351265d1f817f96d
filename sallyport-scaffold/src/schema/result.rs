//! The result side: what the agent reads back from a success response. Lenient: the scalar
//! fields of the answer, nested objects listed in a comment; an answer of several forms
//! (`oneOf` / `anyOf`) becomes an enum of them.

use serde_json::Value;

use super::{Cx, Field, Mapped, types_of};
use crate::text::{literal, pascal, plain};

/// A result type, and a note on how it was chosen (the comment above `result = …`).
#[derive(Debug)]
pub(crate) struct ResultType {
    pub(crate) ty: String,
    pub(crate) note: Option<String>,
}

/// How a result struct is written.
#[derive(Clone, Copy)]
enum Form<'t> {
    /// The answer itself (or an item of a list of them).
    Plain,
    /// A form of an enum tagged by this property: the tag is the enum's, not the struct's.
    Tagged(&'t str),
    /// A form of an untagged enum: a property that admits one value only is typed by that
    /// value, so the form fits only an answer that carries it.
    Untagged,
}

/// One form of an answer of several: its variant name, the tag that names it (tagged
/// enums), its payload type and its doc line.
struct Variant {
    ident: String,
    tag: Option<String>,
    ty: String,
    doc: String,
}

impl Cx<'_> {
    /// The result type of a success response's schema: a `oneOf` / `anyOf` of several
    /// forms as an enum (tagged by the document's discriminator when it can tag every form,
    /// else untagged); anything else as [`Cx::result_single`] maps it.
    ///
    /// # Errors
    ///
    /// Why the answer has no Rust form (a form of it has none): the action returns no data.
    pub(crate) fn result(&mut self, schema: &Value, hint: &str) -> Result<ResultType, String> {
        let resolved = self.resolve(schema)?;
        let (types, _) = types_of(resolved.schema);
        if types.is_empty() {
            for key in ["oneOf", "anyOf"] {
                if let Some(parts) = resolved.schema.get(key).and_then(Value::as_array) {
                    let hint = resolved
                        .name
                        .as_deref()
                        .map_or_else(|| hint.to_owned(), pascal);
                    return self.result_forms(resolved.schema, key, parts, &hint);
                }
            }
        }
        Ok(ResultType {
            ty: self.result_single(schema, hint)?,
            note: None,
        })
    }

    /// An answer that is a `key` (`oneOf` / `anyOf`) of `parts`.
    fn result_forms(
        &mut self,
        schema: &Value,
        key: &str,
        parts: &[Value],
        hint: &str,
    ) -> Result<ResultType, String> {
        let mut forms: Vec<(&Value, Option<String>, Vec<String>)> = Vec::new();
        for part in parts {
            let resolved = self.resolve(part)?;
            let (types, nullable) = types_of(resolved.schema);
            if types.is_empty() && nullable {
                continue;
            }
            if types.is_empty()
                && ["oneOf", "anyOf"]
                    .iter()
                    .any(|k| resolved.schema.get(*k).is_some())
            {
                return Err(format!(
                    "the success response is a `{key}` with a `oneOf` / `anyOf` inside"
                ));
            }
            forms.push((part, resolved.name.clone(), types));
        }
        let count = forms.len();
        match forms.as_slice() {
            [] => return Err(format!("the success response is a `{key}` of no form")),
            [(one, _, _)] => {
                return Ok(ResultType {
                    ty: self.result_single(one, hint)?,
                    note: None,
                });
            }
            _ => {}
        }
        let discriminator = schema
            .pointer("/discriminator/propertyName")
            .and_then(Value::as_str);
        let mut untagged_because = None;
        let tags = match discriminator {
            Some(tag) => match self.tags(schema, tag, &forms) {
                Ok(tags) => Some((tag, tags)),
                Err(why) => {
                    untagged_because = Some(format!("its discriminator `{tag}` cannot tag {why}"));
                    None
                }
            },
            None => {
                untagged_because = Some("it declares no discriminator".to_owned());
                None
            }
        };
        let mut variants: Vec<Variant> = Vec::new();
        for (i, (part, name, types)) in forms.iter().enumerate() {
            let mut ident = name
                .as_deref()
                .map_or_else(|| format!("Form{}", i + 1), pascal);
            if variants.iter().any(|v| v.ident == ident) {
                ident = format!("{ident}{}", i + 1);
            }
            let resolved = self.resolve(part)?;
            let payload_hint = name.as_deref().map_or_else(
                || format!("{hint}{ident}"),
                |n| format!("{}Summary", pascal(n)),
            );
            let form = match &tags {
                Some((tag, _)) => Form::Tagged(tag),
                None => Form::Untagged,
            };
            let object = types.is_empty() || types == &["object".to_owned()];
            let ty = if object {
                self.result_struct(resolved.schema, &payload_hint, form)
            } else {
                self.result_single(part, &payload_hint)
            };
            let ty = ty
                .map_err(|reason| format!("one form of its `{key}` has no Rust type ({reason})"))?;
            let doc = describe(resolved.schema).unwrap_or_else(|| {
                name.as_deref()
                    .map_or_else(|| format!("Form {}.", i + 1), |n| format!("`{n}`."))
            });
            variants.push(Variant {
                ident,
                tag: tags.as_ref().map(|(_, t)| t[i].clone()),
                ty,
                doc,
            });
        }
        shorten(&mut variants);
        let doc = describe(schema).unwrap_or_else(|| "The forms of the answer.".to_owned());
        let tag_attr = match &tags {
            Some((tag, _)) => format!("#[serde(tag = {})]\n", literal(tag)),
            None => "#[serde(untagged)]\n".to_owned(),
        };
        let ty = self.types.add(hint, |name| {
            let mut code = format!("/// {doc}\n");
            code.push_str("#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]\n");
            code.push_str(&tag_attr);
            code.push_str(&format!("pub enum {name} {{\n"));
            for variant in &variants {
                for line in crate::text::wrap(&variant.doc, 92) {
                    code.push_str(&format!("    /// {line}\n"));
                }
                if let Some(tag) = &variant.tag {
                    code.push_str(&format!("    #[serde(rename = {})]\n", literal(tag)));
                }
                code.push_str(&format!("    {}({}),\n", variant.ident, variant.ty));
            }
            code.push_str("}\n");
            code
        });
        let note = match (&tags, untagged_because) {
            (Some((tag, _)), _) => format!(
                "The success response is a `{key}` of {count} forms: an enum tagged by `{tag}`, the document's discriminator."
            ),
            (None, because) => format!(
                "The success response is a `{key}` of {count} forms: an untagged enum, since {}; serde reads the first form the answer fits, in the document's order.",
                because.unwrap_or_default()
            ),
        };
        Ok(ResultType {
            ty,
            note: Some(note),
        })
    }

    /// The tag of each form: the discriminator's mapping entry that names it, else the one
    /// value its tag property admits; why not, when a form is not an object or names no
    /// single tag, or two forms share one.
    fn tags(
        &self,
        schema: &Value,
        tag: &str,
        forms: &[(&Value, Option<String>, Vec<String>)],
    ) -> Result<Vec<String>, String> {
        let mapping = schema
            .pointer("/discriminator/mapping")
            .and_then(Value::as_object);
        let mut tags: Vec<String> = Vec::new();
        for (i, (part, name, types)) in forms.iter().enumerate() {
            let label = name
                .as_deref()
                .map_or_else(|| format!("form {}", i + 1), |n| format!("`{n}`"));
            if !(types.is_empty() || types == &["object".to_owned()]) {
                return Err(format!(
                    "{label}, whose type is `{}`, not `object`",
                    types.join("` or `")
                ));
            }
            let shape = self.shape(part)?;
            let Some((_, property)) = shape.properties.iter().find(|(n, _)| n == tag) else {
                return Err(format!("{label}, which has no `{tag}` property"));
            };
            let reference = part.get("$ref").and_then(Value::as_str);
            let mapped = mapping.and_then(|m| {
                m.iter()
                    .find(|(_, target)| reference.is_some() && target.as_str() == reference)
                    .map(|(value, _)| value.clone())
            });
            let Some(value) = mapped.or_else(|| {
                self.resolve(property)
                    .ok()
                    .and_then(|r| single_value(r.schema))
            }) else {
                return Err(format!("{label}, whose `{tag}` is not one value"));
            };
            if tags.contains(&value) {
                return Err(format!("two forms, both tagged `{value}`"));
            }
            tags.push(value);
        }
        Ok(tags)
    }

    /// For an untagged form: the one value `property` admits (`const`, or an `enum` of
    /// one string), as an enum of that value.
    fn constant(&mut self, property: &Value, hint: &str) -> Result<Option<String>, String> {
        let resolved = self.resolve(property)?.schema.clone();
        if single_value(&resolved).is_none() {
            return Ok(None);
        }
        let values = match resolved.get("const") {
            Some(value) => vec![value.clone()],
            None => resolved
                .get("enum")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        };
        Ok(Some(self.string_enum(&resolved, &values, hint)?.ty))
    }

    /// The result type of one form of answer (an object, a list, a scalar).
    fn result_single(&mut self, schema: &Value, hint: &str) -> Result<String, String> {
        let resolved = self.resolve(schema)?;
        let (types, _) = types_of(resolved.schema);
        let hint = resolved
            .name
            .as_deref()
            .map_or_else(|| hint.to_owned(), |n| format!("{}Summary", pascal(n)));
        match types.first().map(String::as_str) {
            Some("array") => {
                let items = resolved.schema.get("items").unwrap_or(&Value::Null);
                let item = self.resolve(items)?;
                let item_hint = item.name.as_deref().map_or_else(
                    || format!("{hint}Item"),
                    |n| format!("{}Summary", pascal(n)),
                );
                if let Some(scalar) = self.result_scalar(item.schema) {
                    return Ok(format!("Vec<{scalar}>"));
                }
                Ok(format!(
                    "Vec<{}>",
                    self.result_struct(item.schema, &item_hint, Form::Plain)?
                ))
            }
            Some("object") | None => self.result_struct(resolved.schema, &hint, Form::Plain),
            Some(_) => self
                .result_scalar(resolved.schema)
                .ok_or_else(|| "the success response has no Rust form".to_owned()),
        }
    }

    /// A result struct of an object's scalar properties (nested objects are listed in a
    /// comment, not followed), written as `form` needs it.
    fn result_struct(
        &mut self,
        schema: &Value,
        hint: &str,
        form: Form<'_>,
    ) -> Result<String, String> {
        let shape = self.shape(schema)?;
        if shape.properties.is_empty() {
            return Err("the success response is a free-form object".to_owned());
        }
        let mut fields = String::new();
        let mut left_out = Vec::new();
        for (json, property) in &shape.properties {
            if matches!(form, Form::Tagged(tag) if tag == json) {
                continue;
            }
            let constant = match form {
                Form::Untagged => self.constant(property, &format!("{hint}{}", pascal(json)))?,
                _ => None,
            };
            let Some(ty) = constant.or_else(|| self.result_scalar(property)) else {
                left_out.push(format!("`{json}`"));
                continue;
            };
            let resolved = self.resolve(property)?;
            let (_, nullable) = types_of(resolved.schema);
            let description = resolved
                .schema
                .get("description")
                .and_then(Value::as_str)
                .map(|d| plain(d, 1))
                .and_then(|p| p.into_iter().next());
            let mapped = Mapped {
                ty,
                attrs: Vec::new(),
                nullable,
                note: None,
            };
            let required = shape.required.contains(json);
            fields.push_str(&Field::result(json, &mapped, required, description.as_deref()).code);
        }
        let description = schema
            .get("description")
            .and_then(Value::as_str)
            .map(|d| plain(d, 1))
            .and_then(|p| p.into_iter().next());
        Ok(self.types.add(hint, |name| {
            let mut code = String::new();
            match &description {
                Some(d) => code.push_str(&format!("/// {d}\n")),
                None => code.push_str(&format!("/// What `{name}` keeps of the answer.\n")),
            }
            code.push_str("#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]\n");
            code.push_str(&format!("pub struct {name} {{\n"));
            code.push_str(&fields);
            if !left_out.is_empty() {
                let text = format!(
                    "Left out (nested objects and lists of them; add a struct for one the agent needs): {}.",
                    left_out.join(", ")
                );
                for line in crate::text::wrap(&text, 92) {
                    code.push_str(&format!("    // {line}\n"));
                }
            }
            code.push_str("}\n");
            code
        }))
    }

    /// A result field's scalar type (string, enum as string, integer, number, boolean, or a
    /// list of those), `None` for anything nested.
    fn result_scalar(&self, schema: &Value) -> Option<String> {
        let resolved = self.resolve(schema).ok()?;
        let (types, _) = types_of(resolved.schema);
        let ty = match types.as_slice() {
            [one] => one.as_str(),
            [] if resolved.schema.get("enum").is_some() => "string",
            _ => return None,
        };
        Some(
            match ty {
                "string" => "String",
                "integer" => "i64",
                "number" => "f64",
                "boolean" => "bool",
                "array" => {
                    let items = resolved.schema.get("items")?;
                    let item = self.result_scalar(items)?;
                    let (_, nullable) = types_of(self.resolve(items).ok()?.schema);
                    if nullable {
                        return None;
                    }
                    return Some(format!("Vec<{item}>"));
                }
                _ => return None,
            }
            .to_owned(),
        )
    }
}

/// The one string a schema admits: its `const`, or an `enum` of one string.
fn single_value(schema: &Value) -> Option<String> {
    if let Some(value) = schema.get("const") {
        return value.as_str().map(str::to_owned);
    }
    match schema.get("enum").and_then(Value::as_array)?.as_slice() {
        [Value::String(one)] => Some(one.clone()),
        _ => None,
    }
}

/// A schema's description (else its title), first paragraph, plain.
fn describe(schema: &Value) -> Option<String> {
    schema
        .get("description")
        .or_else(|| schema.get("title"))
        .and_then(Value::as_str)
        .map(|d| plain(d, 1))
        .and_then(|p| p.into_iter().next())
}

/// The variants' names without the words they all begin or end with (`ContentFile`,
/// `ContentSymlink` → `File`, `Symlink`), as clippy's `enum_variant_names` asks of the
/// author's code; unchanged when that would leave a name empty.
fn shorten(variants: &mut [Variant]) {
    let words: Vec<Vec<String>> = variants.iter().map(|v| camel_words(&v.ident)).collect();
    let shortest = words.iter().map(Vec::len).min().unwrap_or_default();
    let shared = |nth: &dyn Fn(&Vec<String>, usize) -> String| {
        (0..shortest)
            .take_while(|&i| words.iter().all(|w| nth(w, i) == nth(&words[0], i)))
            .count()
    };
    let front = shared(&|w, i| w[i].clone());
    let back = shared(&|w, i| w[w.len() - 1 - i].clone());
    if front + back >= shortest {
        return;
    }
    for (variant, words) in variants.iter_mut().zip(&words) {
        variant.ident = words[front..words.len() - back].concat();
    }
}

/// A PascalCase name's words (`ContentFile` → `Content`, `File`).
fn camel_words(name: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for c in name.chars() {
        match words.last_mut() {
            Some(word) if !c.is_ascii_uppercase() => word.push(c),
            _ => words.push(c.to_string()),
        }
    }
    words
}
