//! Offer a sallyport catalog to a [rig](https://docs.rs/rig-core/0.44.0) agent.
//!
//! [`RigTools`] turns an [`Executor`](sallyport_core::Executor) into rig
//! [`DynamicTool`](rig_core::tool::DynamicTool)s, one per action: the action's name, its
//! description with the card's consequence lines and its input JSON Schema, the same export
//! `sallyport-mcp` lists. Every tool call runs the executor's fixed pipeline (scope, drift,
//! vault, consent, durable intent, dispatch, normalization, scrubbing, audit) under the
//! run's [`Session`](sallyport_core::Session).
//!
//! # The session travels beside the call, never in it
//!
//! rig 0.44 carries host-only values to tools in a [`ToolContext`](rig_core::tool::ToolContext):
//! the host sets it per run (`agent.prompt(…).tool_context(…)`), rig clones it into every
//! tool dispatch, and none of it is sent to the model. The session goes there, as a
//! [`SessionContext`] ([`tool_context`] builds one). A host that runs one session per agent
//! may bind it into the tools instead ([`RigTools::session`]). Either way the model sees
//! only the action's arguments and description: it cannot name, widen or swap its scope.
//!
//! # What the model reads
//!
//! rig returns a tool's output to the model as the tool-result message, and a tool's error
//! as the same message marked as an error, its text the error's model feedback; an error
//! does not end the run. [`tool_output`] maps each status:
//!
//! | status | the model reads |
//! |---|---|
//! | `completed` | the result JSON |
//! | `pending`, `already_in_desired_state` | the result JSON, with `next` (what to call to check) |
//! | `rejected` | a tool error: `action: rejected (code) — reason.`, what to do instead (`Nothing was sent. …`), then the result JSON |
//! | `unknown` | a tool error: it may or may not have been applied, `Not retryable: do not call … again; call <next> with {…} to find out.`, then the result JSON |
//!
//! The executor's whole answer is also published to the host as result metadata
//! ([`CallResult`], read by hooks through the dispatch's tool context), so a host can log
//! attempt and receipt ids without parsing what the model was told.
//!
//! # Example
//!
//! An offline agent loop: rig's scripted `MockCompletionModel` (feature `test-utils` of
//! rig-core) plays the model, calling one action in scope and one outside it.
//!
//! ```
//! use rig_core::completion::Message;
//! use rig_core::message::{ToolResultContent, UserContent};
//! use rig_core::test_utils::{MockCompletionModel, MockTurn};
//! use sallyport_core::channel::{CallView, Channel, ChannelOutcome, DescribedRequest, Dispatch, PreparedRequest};
//! use sallyport_core::journal::SqliteJournal;
//! use sallyport_core::outcome::{Refusal, Status};
//! use sallyport_core::{Action, Catalog, Executor, Session};
//! use sallyport_rig::{RigTools, tool_context};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use serde_json::json;
//!
//! /// Read the state of one worker of a project.
//! #[derive(Action, Deserialize, JsonSchema)]
//! #[action(name = "get_worker", effect = observe)]
//! #[channel(name = "workers")]
//! #[serde(deny_unknown_fields)]
//! struct GetWorker {
//!     #[scope(project)]
//!     project_id: String,
//!     worker: String,
//! }
//!
//! /// The application's own channel (sallyport-http and sallyport-ssh provide real ones).
//! struct Workers;
//!
//! #[async_trait::async_trait]
//! impl Channel for Workers {
//!     fn name(&self) -> &str {
//!         "workers"
//!     }
//!     fn prepare(&self, call: &CallView<'_>) -> Result<Box<dyn PreparedRequest>, Refusal> {
//!         let worker = call.arguments["worker"].clone();
//!         Ok(Box::new(DescribedRequest::new(format!("read {worker}"), worker)))
//!     }
//!     async fn dispatch(&self, call: Dispatch<'_>) -> ChannelOutcome {
//!         let permit = match call.context.permit().await {
//!             Ok(permit) => permit,
//!             Err(refused) => return refused,
//!         };
//!         permit.sending();
//!         ChannelOutcome::completed(json!({"state": "running"}))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let catalog = Catalog::builder().action::<GetWorker>().build()?;
//! let executor = Executor::builder(catalog)
//!     .journal(SqliteJournal::open(dir.path().join("journal.db"))?)
//!     .channel(Workers)
//!     .build()?;
//!
//! // The scripted model: two tool calls, then its final answer.
//! let model = MockCompletionModel::from_turns([
//!     MockTurn::tool_call("call_1", "get_worker", json!({"project_id": "proj_1", "worker": "w3"})),
//!     MockTurn::tool_call("call_2", "get_worker", json!({"project_id": "proj_9", "worker": "w3"})),
//!     MockTurn::text("w3 is running; proj_9 is not mine to read."),
//! ]);
//! let agent = rig_agent::AgentBuilder::new(model.clone())
//!     .dynamic_tools(RigTools::new(executor.clone()).tools())
//!     .build();
//!
//! // The session rides in the run's host-only tool context.
//! let session = Session::new("chat-7").allow("project", ["proj_1"]);
//! let answer = agent
//!     .prompt("How is worker w3?")
//!     .tool_context(tool_context(session)?)
//!     .max_turns(5)
//!     .await?;
//! assert_eq!(answer.output(), "w3 is running; proj_9 is not mine to read.");
//!
//! // What the model was told after each call: the last message of its next request.
//! let told = |request: usize| -> Option<(String, bool)> {
//!     let requests = model.requests();
//!     let Some(Message::User { content }) = requests.get(request)?.chat_history.last() else {
//!         return None;
//!     };
//!     let Some(UserContent::ToolResult(result)) = content.first() else { return None };
//!     let text = match result.content.first()? {
//!         ToolResultContent::Json { value } => value.to_string(),
//!         ToolResultContent::Text(text) => text.text.clone(),
//!         _ => return None,
//!     };
//!     Some((text, result.is_error))
//! };
//! let (first, is_error) = told(1).ok_or("no tool result")?;
//! assert!(!is_error && first.contains(r#""status":"completed""#));
//! let (second, is_error) = told(2).ok_or("no tool result")?;
//! assert!(is_error);
//! assert!(second.starts_with(
//!     "get_worker: rejected (out_of_scope) — project proj_9 is outside this session's scope. \
//!      Nothing was sent."
//! ));
//! assert!(executor.journal().verify().await?.is_intact());
//! # Ok(()) }
//! ```

mod context;
mod result;
mod tools;

pub use self::context::{CallResult, SessionContext, tool_context};
pub use self::result::tool_output;
pub use self::tools::{NO_SESSION, RigTools};
pub use rig_core;
