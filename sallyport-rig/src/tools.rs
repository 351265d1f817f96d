//! [`RigTools`]: an executor's catalog as rig [`DynamicTool`]s.

use std::sync::Arc;

use rig_core::message::ToolName;
use rig_core::tool::{DynamicTool, ToolContext, ToolExecutionError, ToolOutput};
use rig_core::wasm_compat::WasmBoxedFuture;
use sallyport_core::catalog::Entry;
use sallyport_core::drift::{BaselineGuard, CoreDisposition};
use sallyport_core::{Executor, Session};
use serde_json::Value;

use crate::context::{CallResult, SessionContext};
use crate::result::tool_output;

/// The code of the tool error a call gets when no session reaches the tool.
pub const NO_SESSION: &str = "no_session";

/// An executor's catalog as rig tools: one [`DynamicTool`] per action, each running
/// [`Executor::call_json`] under the run's [`Session`].
///
/// The model sees each action's name, its description with the card's consequence lines
/// ([`Entry::tool_description`]) and its input JSON Schema ([`Entry::input_schema`]): the
/// same export `sallyport-mcp` lists. The session comes from the run's host-only
/// [`ToolContext`] ([`SessionContext`]), or else from the one bound with
/// [`RigTools::session`]; never from the arguments or the description, so nothing the model
/// writes can choose it. A call with neither is refused without reaching the executor.
///
/// ```no_run
/// # async fn demo(executor: sallyport_core::Executor,
/// #     model: rig_core::DynModel<rig_core::operation::Completion>) -> Result<(), Box<dyn std::error::Error>> {
/// use sallyport_core::Session;
/// use sallyport_rig::{RigTools, tool_context};
///
/// let agent = rig_agent::AgentBuilder::new(model)
///     .dynamic_tools(RigTools::new(executor).tools())
///     .build();
/// let session = Session::new("chat-17").allow("project", ["proj_42"]);
/// let answer = agent
///     .prompt("Deploy build_101 of proj_42 to preview")
///     .tool_context(tool_context(session)?)
///     .max_turns(8)
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct RigTools {
    executor: Executor,
    guard: Option<Arc<BaselineGuard>>,
    session: Option<Session>,
}

impl RigTools {
    /// Tools over every action of `executor`'s catalog.
    pub fn new(executor: Executor) -> Self {
        Self {
            executor,
            guard: None,
            session: None,
        }
    }

    /// Offers only the actions `guard` allows now (as `sallyport-mcp` lists them): an action
    /// the baseline has not approved or has quarantined is not offered. The executor
    /// enforces the baseline on every call regardless (give it the same guard with
    /// `ExecutorBuilder::definition_guard`), so a change after [`RigTools::tools`] ran is
    /// still refused at stage 5.
    pub fn baseline(mut self, guard: Arc<BaselineGuard>) -> Self {
        self.guard = Some(guard);
        self
    }

    /// Binds `session` into the tools themselves, for a host that runs one session per
    /// agent. A [`SessionContext`] in the run's tool context still takes precedence.
    pub fn session(mut self, session: Session) -> Self {
        self.session = Some(session);
        self
    }

    /// The executor the tools call.
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// Whether `name` is offered: in the catalog, and allowed by the baseline if one is set.
    pub fn offers(&self, name: &str) -> bool {
        self.executor.catalog().get(name).is_some()
            && match &self.guard {
                None => true,
                Some(guard) => guard
                    .decision(name)
                    .is_some_and(|d| d.core_disposition == CoreDisposition::Allowed),
            }
    }

    /// One tool per offered action, in catalog order; for `AgentBuilder::dynamic_tools`.
    pub fn tools(&self) -> Vec<DynamicTool> {
        self.executor
            .catalog()
            .entries()
            .filter(|entry| self.offers(&entry.spec().name))
            .filter_map(|entry| self.build(entry))
            .collect()
    }

    /// The tool for action `name`, if it is offered.
    pub fn tool(&self, name: &str) -> Option<DynamicTool> {
        if !self.offers(name) {
            return None;
        }
        self.executor
            .catalog()
            .get(name)
            .and_then(|entry| self.build(entry))
    }

    fn build(&self, entry: &Entry) -> Option<DynamicTool> {
        let name = entry.spec().name.to_string();
        let tool_name = match ToolName::new(name.clone()) {
            Ok(tool_name) => tool_name,
            // The catalog refuses empty names; an action rig cannot name is not offered.
            Err(error) => {
                tracing::warn!(%error, action = %name, "action not offered as a rig tool");
                return None;
            }
        };
        let call = Arc::new(Call {
            executor: self.executor.clone(),
            action: name,
            session: self.session.clone(),
        });
        Some(DynamicTool::new_with_context(
            tool_name,
            entry.tool_description(),
            entry.input_schema().clone(),
            callback(move |context, arguments| {
                let call = Arc::clone(&call);
                Box::pin(async move { call.run(context, arguments).await })
            }),
        ))
    }
}

/// Pins the closure to rig's higher-ranked callback signature (the future borrows the
/// dispatch's context).
fn callback<F>(f: F) -> F
where
    F: for<'a> Fn(
            &'a mut ToolContext,
            Value,
        ) -> WasmBoxedFuture<'a, Result<ToolOutput, ToolExecutionError>>
        + Send
        + Sync
        + 'static,
{
    f
}

/// One action's tool body.
struct Call {
    executor: Executor,
    action: String,
    session: Option<Session>,
}

impl Call {
    async fn run(
        &self,
        context: &mut ToolContext,
        arguments: Value,
    ) -> Result<ToolOutput, ToolExecutionError> {
        let session = match context.get::<SessionContext>() {
            Ok(Some(found)) => found.into_session(),
            Ok(None) => match &self.session {
                Some(session) => session.clone(),
                None => return Err(no_session(&self.action, "no session was given")),
            },
            // A session slot that does not decode is not replaced by a guess.
            Err(error) => {
                tracing::warn!(%error, action = %self.action, "the run's sallyport session does not decode");
                return Err(no_session(&self.action, "the session does not decode"));
            }
        };
        // Back to text so the executor's size limit applies before anything else
        // (`call_json` refuses oversized arguments unparsed, audited).
        let text = arguments.to_string();
        let result = self.executor.call_json(&self.action, &text, &session).await;
        if let Err(error) = context.insert_result(CallResult(result.clone())) {
            tracing::warn!(%error, action = %self.action, "call result not published to the tool context");
        }
        tool_output(&result)
    }
}

fn no_session(action: &str, why: &str) -> ToolExecutionError {
    ToolExecutionError::refused(format!(
        "{action}: the host gave this tool no sallyport session ({why})"
    ))
    .with_model_feedback(format!(
        "{action}: rejected (no_session). Nothing was sent: the application has not set up \
         a session for this tool. Do not retry; tell the user."
    ))
    .with_code(NO_SESSION)
    .with_retryable(false)
}
