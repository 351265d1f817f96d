//! A rig agent using the demo catalog through `sallyport-rig`, offline.
//!
//! ```text
//! cargo run -q --bin rig-agent
//! ```
//!
//! rig's scripted `MockCompletionModel` plays the model, so this runs without a network or an
//! API key; swap in any rig completion model and the rest stays as it is. The model calls
//! the demo actions as an agent might (a read, a deployment, an unknown field, another
//! project, a deployment the human refuses, an invoice whose answer is lost, the reconcile
//! read) and the program prints every tool call, what the model was told after it, and how
//! many requests the demo upstream had received by then. The session (which project and
//! customer this agent may touch) rides in rig's host-only tool context; the model never sees
//! it.

use std::sync::{Arc, Mutex, PoisonError};

use rig_agent::AgentBuilder;
use rig_agent::agent::{AgentHook, HookContext, OutcomeAction, OutcomeEvent};
use rig_core::completion::Message;
use rig_core::message::{AssistantContent, ToolResultContent, UserContent};
use rig_core::test_utils::{MockCompletionModel, MockTurn};
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::Journal;
use sallyport_core::{Executor, Session};
use sallyport_examples::catalog::demo_catalog;
use sallyport_examples::setup::Demo;
use sallyport_examples::upstream::DemoUpstream;
use sallyport_http::HttpChannel;
use sallyport_rig::{RigTools, tool_context};
use serde_json::json;

/// Counts the upstream's requests after each tool call.
struct Counter {
    upstream: Arc<DemoUpstream>,
    after: Arc<Mutex<Vec<u64>>>,
}

impl AgentHook for Counter {
    async fn on_outcome(&self, _ctx: &HookContext, event: OutcomeEvent<'_>) -> OutcomeAction {
        if event.tool_name().is_some() {
            self.after
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(self.upstream.requests());
        }
        OutcomeAction::proceed()
    }
}

/// The model's script: seven tool calls, then its answer.
fn script() -> Vec<MockTurn> {
    let call = |id: &str, name: &str, args| MockTurn::tool_call(id, name, args);
    vec![
        call("call_1", "list_builds", json!({"project_id": "proj_42"})),
        call(
            "call_2",
            "create_preview_deployment",
            json!({"project_id": "proj_42", "build_id": "build_101", "reason": "preview the tested fix"}),
        ),
        call(
            "call_3",
            "create_preview_deployment",
            json!({"project_id": "proj_42", "build_id": "build_101", "reason": "preview it now", "force": true}),
        ),
        call("call_4", "list_builds", json!({"project_id": "proj_999"})),
        call(
            "call_5",
            "create_preview_deployment",
            json!({"project_id": "proj_42", "build_id": "build_102", "reason": "ship the failing build on Friday"}),
        ),
        call(
            "call_6",
            "create_invoice",
            json!({"customer_id": "cus_7", "amount_cents": 4200, "reference": "drop-inv-rig-1", "reason": "November usage for cus_7"}),
        ),
        call(
            "call_7",
            "get_invoice",
            json!({"customer_id": "cus_7", "reference": "drop-inv-rig-1"}),
        ),
        MockTurn::text(
            "build_101 is queued for preview (dep_2388). The invoice's answer was lost; \
             get_invoice shows exactly one invoice, so I did not create another.",
        ),
    ]
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Demo {
        upstream,
        vault,
        journal,
        ..
    } = Demo::start("rig-agent").await?;
    let upstream = Arc::new(upstream);
    let executor = Executor::builder(demo_catalog()?)
        .journal_arc(journal.clone())
        .vault(vault)
        .channel(HttpChannel::builder().build()?)
        // A real host asks a human; this one approves everything but a Friday deployment.
        .consent(FnConsent::new(|request| async move {
            let friday = request
                .note
                .as_deref()
                .is_some_and(|n| n.contains("Friday"));
            if friday {
                ConsentDecision::Deny {
                    reason: Some("not on a Friday".into()),
                }
            } else {
                ConsentDecision::Approve
            }
        }))
        .build()?;

    let model = MockCompletionModel::from_turns(script());
    let agent = AgentBuilder::new(model.clone())
        .preamble("You deploy previews and bill customers with the tools you are given.")
        .dynamic_tools(RigTools::new(executor.clone()).tools())
        .build();
    let session = Session::new("rig-agent-demo")
        .allow("project", ["proj_42"])
        .allow("customer", ["cus_7"]);
    let after = Arc::new(Mutex::new(Vec::new()));
    let answer = agent
        .prompt("Put build_101 of proj_42 on preview and bill cus_7 for November.")
        .tool_context(tool_context(session)?)
        .add_hook(Counter {
            upstream: Arc::clone(&upstream),
            after: Arc::clone(&after),
        })
        .max_turns(10)
        .await?;

    // The whole conversation as the model saw it on its last turn.
    let requests = model.requests();
    let history = requests
        .last()
        .map(|r| r.chat_history.clone())
        .unwrap_or_default();
    let after = after.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let mut calls = 0;
    for message in &history {
        match message {
            Message::Assistant(turn) => {
                for content in &turn.content {
                    if let AssistantContent::ToolCall(call) = content {
                        println!(
                            "model called {} {}",
                            call.function.name,
                            serde_json::Value::Object(call.function.arguments.clone())
                        );
                    }
                }
            }
            Message::User { content } => {
                for content in content {
                    if let UserContent::ToolResult(result) = content {
                        let label = if result.is_error {
                            "tool error"
                        } else {
                            "tool result"
                        };
                        for block in &result.content {
                            let text = match block {
                                ToolResultContent::Json { value } => value.to_string(),
                                ToolResultContent::Text(text) => text.text.clone(),
                                ToolResultContent::Image(_) => "<image>".to_owned(),
                            };
                            println!("model was told ({label}): {text}");
                        }
                        let count = after.get(calls).copied().unwrap_or_default();
                        println!("upstream requests so far: {count}");
                        calls += 1;
                    }
                }
            }
            Message::System { .. } => {}
        }
    }
    println!("model answered: {}", answer.output());
    println!(
        "invoices with reference drop-inv-rig-1: {}",
        upstream.invoices_with_reference("drop-inv-rig-1")
    );
    let report = journal.verify().await?;
    println!(
        "audit chain: {} records, intact: {}",
        report.records,
        report.is_intact()
    );
    if !report.is_intact() || calls != 7 {
        return Err("the agent loop misbehaved".into());
    }
    Ok(())
}
