//! What a caller may say about one call beyond its action, arguments and session.

/// Options of one call, for [`Executor::call_with`](crate::Executor::call_with) and
/// [`Executor::call_json_with`](crate::Executor::call_json_with). They describe the call; none
/// of them changes what the pipeline decides.
///
/// ```
/// use sallyport_core::executor::CallOptions;
///
/// // The id the model gave this tool call (OpenAI's `call_…`, Anthropic's `toolu_…`).
/// let options = CallOptions::new().with_tool_call_id("toolu_01A9");
/// assert_eq!(options.tool_call_id(), Some("toolu_01A9"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallOptions {
    tool_call_id: Option<String>,
}

impl CallOptions {
    /// No options: what [`Executor::call`](crate::Executor::call) uses.
    pub fn new() -> Self {
        Self::default()
    }

    /// The model's id for this tool call. With the `otel` feature it is the call span's
    /// `gen_ai.tool.call.id` ([`crate::telemetry`]), bounded and scrubbed; it is not part of
    /// the audit record.
    #[must_use]
    pub fn with_tool_call_id(mut self, id: impl Into<String>) -> Self {
        self.tool_call_id = Some(id.into());
        self
    }

    /// The model's id for this tool call, if the caller gave it.
    pub fn tool_call_id(&self) -> Option<&str> {
        self.tool_call_id.as_deref()
    }
}
