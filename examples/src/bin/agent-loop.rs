//! A minimal custom agent loop: tool calls as JSON lines on stdin, results as JSON lines on
//! stdout. Build your own agent on top of the executor this way.
//!
//! ```text
//! cargo run -q --bin agent-loop
//! {"tool": "list_builds", "arguments": {"project_id": "proj_42"}}
//! {"tool": "list_builds", "arguments": {"project_id": "proj_999"}}
//! ```
//!
//! The first line printed (on stderr) is the tool list a model would be given (Anthropic
//! format here; `Catalog::openai_tools` and `Catalog::mcp_tools` give the others). Consent:
//! with no human attached, calls that need consent are denied (`DenyAll`); pass
//! `--auto-approve` to open the danger door for a demo.

use std::io::BufRead;

use sallyport_core::consent::DenyAll;
use sallyport_core::{Executor, Session};
use sallyport_examples::catalog::demo_catalog;
use sallyport_examples::setup::Demo;
use sallyport_http::HttpChannel;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCall {
    tool: String,
    #[serde(default)]
    arguments: Value,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let auto_approve = std::env::args().any(|a| a == "--auto-approve");
    let demo = Demo::start("agent-loop").await?;
    let catalog = demo_catalog()?;
    eprintln!("{}", catalog.anthropic_tools());
    let mut builder = Executor::builder(catalog)
        .journal_arc(demo.journal.clone())
        .vault(demo.vault)
        .channel(HttpChannel::builder().build()?)
        .consent(DenyAll);
    if auto_approve {
        builder = builder.dangerous().auto_approve_consent().done();
    }
    let executor = builder.build()?;
    let session = Session::new("agent-loop")
        .allow("project", ["proj_42"])
        .allow("customer", ["cus_7"]);

    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let answer = match serde_json::from_str::<ToolCall>(&line) {
            Ok(call) => {
                serde_json::to_value(executor.call(&call.tool, call.arguments, &session).await)?
            }
            Err(_) => json!({
                "status": "rejected",
                "origin": "executor",
                "code": "malformed_call",
                "reason": "each line must be {\"tool\": NAME, \"arguments\": {…}}"
            }),
        };
        println!("{answer}");
    }
    Ok(())
}
