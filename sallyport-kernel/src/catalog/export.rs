//! Tool exports: plain JSON Schema, MCP tools, OpenAI and Anthropic function calling.

use serde_json::{Map, Value, json};

use super::{Catalog, Entry};
use crate::action::{EffectClass, Externality};
use crate::target::Target;

impl Entry {
    /// The description an agent reads: the author's description plus the consequence lines
    /// of the card (consent, whether a repeated call changes nothing more, what a `pending` or
    /// `unknown` answer means and what to call). The idempotency line is how the OpenAI and
    /// Anthropic formats, which have no annotations, learn what MCP's `idempotentHint` says.
    pub fn tool_description(&self) -> String {
        let spec = self.spec();
        let mut text = spec.description.trim().to_owned();
        if text.is_empty() {
            text = spec.summary.to_string();
        }
        let mut lines = Vec::new();
        lines.push(format!(
            "Effect: {} ({}).",
            spec.effect,
            spec.externality.as_str()
        ));
        match spec.consent {
            crate::action::ConsentRule::None => {}
            crate::action::ConsentRule::Session => {
                lines.push("A human approves this action once per session.".to_owned());
            }
            crate::action::ConsentRule::PerCall => {
                lines.push("A human approves every call.".to_owned());
            }
        }
        if spec.naturally_idempotent && spec.effect.is_mutating() {
            lines.push(
                "Idempotent: calling again with the same arguments changes nothing more."
                    .to_owned(),
            );
        }
        if let Some(reconcile) = &spec.reconcile {
            lines.push(format!(
                "May return pending or unknown; check with {reconcile}. Never retry an unknown result."
            ));
        }
        format!("{text}\n\n{}", lines.join(" "))
    }

    /// The declared result schema, when the action declares a result type.
    pub fn output_schema(&self) -> Option<&Value> {
        match &self.spec().target {
            Target::Http(http) => http.result.as_ref().map(|r| &r.schema),
            _ => None,
        }
    }

    /// MCP tool annotations derived from the card.
    ///
    /// `idempotentHint` says whether a repeated call with the same arguments adds nothing:
    /// true for `observe` actions and for actions declared naturally idempotent
    /// ([`ActionSpec::with_naturally_idempotent`](crate::ActionSpec::with_naturally_idempotent)).
    /// `retry = idempotency_key` does not count: the executor's key is per attempt, so two
    /// identical calls are two attempts and may make two invoices.
    pub fn mcp_annotations(&self) -> Value {
        let spec = self.spec();
        json!({
            "title": title_of(&spec.name),
            "readOnlyHint": spec.effect == EffectClass::Observe,
            "destructiveHint": spec.effect == EffectClass::IrreversibleOrBroad,
            "idempotentHint": spec.is_idempotent(),
            "openWorldHint": spec.externality == Externality::External,
        })
    }

    /// The action as an MCP tool (`tools/list` entry).
    pub fn mcp_tool(&self) -> Value {
        let mut tool = Map::new();
        tool.insert("name".into(), json!(self.spec().name));
        tool.insert("title".into(), json!(title_of(&self.spec().name)));
        tool.insert("description".into(), json!(self.tool_description()));
        tool.insert("inputSchema".into(), self.input_schema().clone());
        if let Some(output) = self.output_schema() {
            let mut output = output.clone();
            if let Value::Object(map) = &mut output {
                map.remove("$schema");
            }
            tool.insert("outputSchema".into(), output);
        }
        tool.insert("annotations".into(), self.mcp_annotations());
        Value::Object(tool)
    }
}

impl Catalog {
    /// Every action as `{name, description, input_schema}` with plain JSON Schema.
    pub fn json_schema_tools(&self) -> Value {
        Value::Array(
            self.entries()
                .map(|e| {
                    json!({
                        "name": e.spec().name,
                        "description": e.tool_description(),
                        "input_schema": e.input_schema(),
                    })
                })
                .collect(),
        )
    }

    /// Every action as an MCP tool.
    pub fn mcp_tools(&self) -> Value {
        Value::Array(self.entries().map(|e| e.mcp_tool()).collect())
    }

    /// Every action in the OpenAI function-calling format.
    pub fn openai_tools(&self) -> Value {
        Value::Array(
            self.entries()
                .map(|e| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": e.spec().name,
                            "description": e.tool_description(),
                            "parameters": e.input_schema(),
                        }
                    })
                })
                .collect(),
        )
    }

    /// Every action in the Anthropic tool-use format.
    pub fn anthropic_tools(&self) -> Value {
        Value::Array(
            self.entries()
                .map(|e| {
                    json!({
                        "name": e.spec().name,
                        "description": e.tool_description(),
                        "input_schema": e.input_schema(),
                    })
                })
                .collect(),
        )
    }
}

/// `create_preview_deployment` → `Create preview deployment`.
fn title_of(name: &str) -> String {
    let words = name.replace('_', " ");
    let mut chars = words.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
