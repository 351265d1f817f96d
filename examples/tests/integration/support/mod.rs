//! The MCP test client shared by the `mcp-demo` tests (stdio and Streamable HTTP): it records
//! what the server elicits and answers as the test says.
#![allow(dead_code, reason = "each test file uses part of this module")]

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, JsonObject,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use rmcp::{ClientHandler, ErrorData as McpError};
use serde_json::Value;
use tokio::sync::Notify;

/// What the test client's user answers when the server elicits consent.
#[derive(Clone, Copy)]
pub(crate) enum Answer {
    Accept,
    Decline,
    /// Never answers (the test cancels the call meanwhile).
    Hold,
}

#[derive(Clone)]
pub(crate) struct TestClient {
    elicitation: bool,
    answer: Answer,
    pub(crate) elicited: Arc<Mutex<Vec<String>>>,
    pub(crate) elicitation_seen: Arc<Notify>,
    pub(crate) list_changed: Arc<Notify>,
}

impl TestClient {
    pub(crate) fn new(elicitation: bool, answer: Answer) -> Self {
        Self {
            elicitation,
            answer,
            elicited: Arc::default(),
            elicitation_seen: Arc::default(),
            list_changed: Arc::default(),
        }
    }
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        let capabilities = if self.elicitation {
            ClientCapabilities::builder().enable_elicitation().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(capabilities, Implementation::new("mcp-stdio-test", "1.0.0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.elicited.lock().expect("lock").push(message);
        }
        self.elicitation_seen.notify_one();
        match self.answer {
            Answer::Accept => Ok(ElicitResult::new(ElicitationAction::Accept)),
            Answer::Decline => Ok(ElicitResult::new(ElicitationAction::Decline)),
            Answer::Hold => std::future::pending().await,
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }
}

pub(crate) fn params(name: &str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(map) = arguments else {
        panic!("arguments must be an object");
    };
    CallToolRequestParams::new(name.to_owned()).with_arguments(JsonObject::from_iter(map))
}

pub(crate) fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn structured(result: &CallToolResult) -> Value {
    result
        .structured_content
        .clone()
        .expect("structuredContent")
}
