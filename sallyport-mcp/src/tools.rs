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

/// The `data` of a result answered through an approval: a parked call's `pending` result and
/// what `check_approval` answers (the approval's state, and once finished the executed call's
/// result under `result`).
fn approval_status_schema() -> Value {
    json!({
        "type": "object",
        "required": ["approval_id", "action", "state", "expires_at"],
        "properties": {
            "approval_id": {"type": "string"},
            "action": {"type": "string"},
            "state": {
                "type": "string",
                "enum": ["awaiting", "approved", "executing", "denied", "expired", "finished"]
            },
            "expires_at": {"type": "string"},
            "decided_by": {"type": "string"},
            "decided_via": {"type": "string"},
            "result": {"type": "object"}
        }
    })
}

/// The `outputSchema` of an action on an executor that may park calls for a human's approval
/// (deferred consent): [`output_schema`], with `data` either the declared result or the
/// approval's status (a `pending` result, and a result answered through `check_approval` or an
/// MCP task). A client that checks `structuredContent` against `outputSchema` (the official
/// Python SDK does) accepts both.
pub fn output_schema_with_approvals(entry: &Entry) -> Value {
    let mut envelope = output_schema(entry);
    let data = envelope["properties"]["data"].take();
    envelope["properties"]["data"] = json!({"anyOf": [data, approval_status_schema()]});
    envelope
}

/// The MCP tool for `entry`: [`Entry::mcp_tool`] (name, title, description with the card's
/// consequence lines, input schema, annotations) with the result envelope of
/// [`output_schema`] as `outputSchema`.
pub fn tool(entry: &Entry) -> Tool {
    tool_with(entry, output_schema(entry))
}

/// [`tool`] with `output` as `outputSchema`.
pub(crate) fn tool_with(entry: &Entry, output: Value) -> Tool {
    let mut value = entry.mcp_tool();
    if let Value::Object(map) = &mut value {
        map.insert("outputSchema".into(), output);
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
