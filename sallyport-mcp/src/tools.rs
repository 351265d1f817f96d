//! `tools/list`: the catalog's MCP export, filtered by the baseline.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool};
use sallyport_core::catalog::Entry;
use serde_json::{Map, Value, json};

/// The `outputSchema` of an action: the [`ActionResult`](sallyport_core::outcome::ActionResult)
/// envelope (what `structuredContent` carries), with `data` described by the action's
/// declared result type. `$defs` of the result type are hoisted to the root so their
/// `$ref`s still resolve.
pub fn output_schema(entry: &Entry) -> Value {
    let mut defs = Map::new();
    let data = match entry.output_schema() {
        Some(Value::Object(schema)) => {
            let mut schema = schema.clone();
            schema.remove("$schema");
            if let Some(Value::Object(inner)) = schema.remove("$defs") {
                defs.extend(inner);
            }
            Value::Object(schema)
        }
        _ => json!({}),
    };
    let mut envelope = json!({
        "type": "object",
        "required": ["status", "action", "attempt_id"],
        "properties": {
            "status": {
                "type": "string",
                "enum": ["completed", "pending", "already_in_desired_state", "rejected", "unknown"]
            },
            "action": {"type": "string"},
            "origin": {"type": "string", "enum": ["executor", "upstream"]},
            "code": {"type": "string"},
            "reason": {"type": "string"},
            "data": data,
            "next": {
                "type": "object",
                "required": ["action", "arguments"],
                "properties": {"action": {"type": "string"}, "arguments": {"type": "object"}}
            },
            "divergences": {"type": "array"},
            "drift": {"type": "object"},
            "attempt_id": {"type": "string"},
            "receipt_id": {"type": "string"}
        }
    });
    if !defs.is_empty() {
        envelope["$defs"] = Value::Object(defs);
    }
    envelope
}

/// The MCP tool for `entry`: [`Entry::mcp_tool`] (name, title, description with the card's
/// consequence lines, input schema, annotations) with the result envelope of
/// [`output_schema`] as `outputSchema`.
pub fn tool(entry: &Entry) -> Tool {
    let mut value = entry.mcp_tool();
    if let Value::Object(map) = &mut value {
        map.insert("outputSchema".into(), output_schema(entry));
    }
    match serde_json::from_value::<Tool>(value) {
        Ok(tool) => tool,
        // `mcp_tool` always produces an object with a name and an object input schema;
        // should that ever change, the tool is still listed, with what can be carried over.
        Err(error) => {
            tracing::warn!(%error, action = %entry.spec().name, "MCP tool export did not parse");
            let schema: JsonObject = match entry.input_schema() {
                Value::Object(map) => map.clone(),
                _ => JsonObject::new(),
            };
            Tool::new(
                entry.spec().name.to_string(),
                entry.tool_description(),
                Arc::new(schema),
            )
        }
    }
}
