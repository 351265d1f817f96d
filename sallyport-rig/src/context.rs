//! What travels beside a tool call in rig's host-only [`ToolContext`]: the session in, the
//! executor's answer out. The model never sees either.

use rig_core::tool::{ContextValue, ToolContext, ToolContextError};
use sallyport_core::Session;
use sallyport_core::outcome::ActionResult;
use serde::{Deserialize, Serialize};

/// The sallyport [`Session`] a run's tool calls execute under: its id and the objects it may
/// touch. The host puts it in the run's [`ToolContext`] ([`tool_context`], or
/// [`ToolContext::insert`]); rig clones it into every tool dispatch of the run and never
/// sends it to the model, so the model cannot name, widen or swap its own scope.
///
/// rig stores context values as JSON data (a run persisted by the host carries it); a
/// session holds ids and scope, never a secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionContext(Session);

impl SessionContext {
    /// The context value for `session`.
    pub fn new(session: Session) -> Self {
        Self(session)
    }

    /// The session.
    pub fn session(&self) -> &Session {
        &self.0
    }

    /// The session, by value.
    pub fn into_session(self) -> Session {
        self.0
    }
}

impl From<Session> for SessionContext {
    fn from(session: Session) -> Self {
        Self(session)
    }
}

impl ContextValue for SessionContext {
    const KEY: &'static str = "sallyport.session";
}

/// A [`ToolContext`] holding `session`, for `agent.prompt(…).tool_context(…)`.
///
/// # Errors
///
/// When rig cannot encode the session as JSON (a session is ids and strings; this does not
/// happen in practice, and the tools then refuse every call rather than guess a session).
pub fn tool_context(session: Session) -> Result<ToolContext, ToolContextError> {
    let mut context = ToolContext::new();
    context.insert(SessionContext::new(session))?;
    Ok(context)
}

/// The executor's full answer to one tool call, published as host-only result metadata
/// ([`ToolContext::insert_result`]): hooks and recorders read the attempt and receipt ids
/// and the status here, whatever the model was shown. It is the same scrubbed
/// [`ActionResult`] the model's text is made from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CallResult(pub ActionResult);

impl ContextValue for CallResult {
    const KEY: &'static str = "sallyport.result";
}
