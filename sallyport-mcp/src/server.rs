//! The MCP server: one [`Connection`] per MCP connection, one sallyport session each.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, CustomRequest,
    CustomResult, ErrorCode, GetTaskParams, GetTaskResult, Implementation, InitializeRequestParams,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
    ServerConfig, TASKS_EXTENSION_ID, UpdateTaskParams,
};
use rmcp::service::{ElicitationMode, NotificationContext, RequestContext, RoleServer};
use rmcp::task_manager::TaskManager;
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use sallyport_core::drift::{BaselineGuard, CoreDisposition};
use sallyport_core::outcome::Status;
use sallyport_core::session::SessionId;
use sallyport_core::{Executor, Session};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::consent::ConsentRouter;
use crate::render::tool_result;
use crate::tools::{output_schema_with_approvals, tool, tool_with};

/// The newest protocol revision this server speaks: 2026-07-28, where each request carries
/// its client's version and capabilities in `_meta` and `server/discover` replaces the
/// `initialize` handshake. Every older revision rmcp knows is served too; a client of one
/// of those (through `initialize`) is served as before, up to [`HANDSHAKE_PROTOCOL_VERSION`].
pub const PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V_2026_07_28;

/// The newest revision with an `initialize` handshake (2025-11-25): what an `initialize`
/// asking for a later one is answered with. Elicitation (consent asked of the client's
/// user, a server-to-client request) is offered only on these revisions; 2026-07-28 forbids
/// such requests.
pub const HANDSHAKE_PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// JSON-RPC code of the error answering a cancelled request (no compliant client reads it).
pub const REQUEST_CANCELLED: ErrorCode = ErrorCode(-32800);

type SessionFactory = dyn Fn(SessionId) -> Session + Send + Sync;

/// Why a server stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The client never completed the `initialize` handshake.
    #[error("the MCP handshake failed")]
    Handshake(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The connection task ended abnormally.
    #[error("the MCP connection task failed")]
    Task(#[source] tokio::task::JoinError),
    /// The HTTP listener could not be bound or served.
    #[error("the MCP HTTP listener failed")]
    Io(#[source] std::io::Error),
    /// The HTTP address is not a loopback address.
    #[error("refusing to serve MCP over HTTP on {0}: only loopback addresses are allowed")]
    NotLoopback(std::net::SocketAddr),
    /// No bearer token could be generated for the HTTP transport.
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    #[error("no bearer token could be generated for the MCP HTTP transport")]
    Random(#[source] getrandom::Error),
    /// The host's bearer token for the HTTP transport is not acceptable.
    #[error("the MCP HTTP bearer token is not acceptable: {0}")]
    InvalidToken(&'static str),
}

/// Serves an [`Executor`]'s catalog over MCP. Cheap to clone.
///
/// * `tools/list` lists the catalog at run time, leaving out actions the baseline has not
///   approved or has quarantined; when the baseline changes, each connection is sent
///   `notifications/tools/list_changed`.
/// * `tools/call` runs [`Executor::call_json`]: `structuredContent` is the
///   [`ActionResult`](sallyport_core::outcome::ActionResult), the text content says what to do next,
///   and `isError` is true for `rejected` and `unknown`. A tool name the catalog does not
///   hold is an `invalid_params` protocol error; `notifications/cancelled` drops the call, and
///   the journal records it as `cancelled_before_send` (or `unknown` after a send).
/// * Consent goes through the [`ConsentRouter`] the executor was built with.
#[derive(Clone)]
#[must_use]
pub struct McpServer {
    executor: Executor,
    router: Arc<ConsentRouter>,
    guard: Option<Arc<BaselineGuard>>,
    session: Arc<SessionFactory>,
    implementation: Implementation,
    instructions: Option<String>,
    #[cfg(feature = "http")]
    http_token: Option<Arc<crate::http::BearerToken>>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("executor", &self.executor)
            .field("baseline", &self.guard.is_some())
            .field("name", &self.implementation.name)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// A server over `executor`, which must have been built with `router` as its consent
    /// provider ([`ExecutorBuilder::consent_arc`](sallyport_core::executor::ExecutorBuilder::consent_arc))
    /// for elicitation to reach the client. Sessions have no scope until
    /// [`McpServer::session`] says otherwise, so scoped actions are refused.
    pub fn new(executor: Executor, router: Arc<ConsentRouter>) -> Self {
        Self {
            executor,
            router,
            guard: None,
            session: Arc::new(|id: SessionId| Session::new(id.as_str())),
            implementation: Implementation::new("sallyport", env!("CARGO_PKG_VERSION")),
            instructions: None,
            #[cfg(feature = "http")]
            http_token: None,
        }
    }

    /// The bearer token every Streamable HTTP request must carry (feature `http`). Without
    /// one, [`McpServer::serve_http_on`] generates a token and prints it once to stderr.
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn http_token(mut self, token: crate::http::BearerToken) -> Self {
        self.http_token = Some(Arc::new(token));
        self
    }

    #[cfg(feature = "http")]
    pub(crate) fn configured_http_token(&self) -> Option<&Arc<crate::http::BearerToken>> {
        self.http_token.as_ref()
    }

    /// The baseline guard the executor enforces at stage 5: only actions it allows are
    /// listed, and a change of its decisions is announced with `list_changed`.
    pub fn baseline(mut self, guard: Arc<BaselineGuard>) -> Self {
        self.guard = Some(guard);
        self
    }

    /// Makes the session of each new connection (its scope) from a fresh session id.
    pub fn session(mut self, f: impl Fn(SessionId) -> Session + Send + Sync + 'static) -> Self {
        self.session = Arc::new(f);
        self
    }

    /// The name and version announced in `initialize` (default `sallyport` and this crate's
    /// version).
    pub fn server_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.implementation = Implementation::new(name.into(), version.into());
        self
    }

    /// Instructions announced to the client in `initialize`.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }

    /// The executor served.
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// A handler for one new MCP connection, with a fresh session.
    pub fn connection(&self) -> Connection {
        self.connection_up_to(PROTOCOL_VERSION)
    }

    /// [`McpServer::connection`] serving revisions up to `newest` only.
    pub(crate) fn connection_up_to(&self, newest: ProtocolVersion) -> Connection {
        Connection {
            server: self.clone(),
            session: self.new_session(),
            stop: CancellationToken::new(),
            tasks: TaskManager::new(),
            stateless: None,
            newest,
        }
    }

    /// A session for a new connection, from a fresh session id.
    pub(crate) fn new_session(&self) -> Session {
        (self.session)(SessionId::new(format!(
            "mcp-{}",
            uuid::Uuid::now_v7().simple()
        )))
    }

    /// A handler for one Streamable HTTP connection or stateless request: every revision, and
    /// `stateless` for the requests of 2026-07-28 and later, which carry no session (a new
    /// handler each): their calls are made in its one session and their tasks kept in its one
    /// task list, so a task started by one request is found by the next.
    #[cfg(feature = "http")]
    pub(crate) fn http_connection(&self, stateless: &Stateless) -> Connection {
        let mut connection = self.connection_up_to(PROTOCOL_VERSION);
        connection.stateless = Some(stateless.clone());
        connection
    }

    /// Serves one connection over `transport` until the client goes away.
    ///
    /// # Errors
    ///
    /// [`ServeError::Handshake`] when initialization fails, [`ServeError::Task`] when the
    /// connection task panicked.
    pub async fn serve<T, E, A>(&self, transport: T) -> Result<(), ServeError>
    where
        T: rmcp::transport::IntoTransport<RoleServer, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let running = self
            .connection()
            .serve(transport)
            .await
            .map_err(|e| ServeError::Handshake(Box::new(e)))?;
        running.waiting().await.map_err(ServeError::Task)?;
        Ok(())
    }

    /// Serves one connection over this process's stdin and stdout. Nothing else may write
    /// to stdout while it runs.
    ///
    /// One connection is served, so a current-thread runtime (`#[tokio::main(flavor =
    /// "current_thread")]`) suits it: every hop of a call between the pipe, rmcp's tasks and
    /// the executor then stays on one thread instead of waking another worker, which on a
    /// busy host cost more than rmcp's own work (BENCHMARKS.md, MCP). The journal's writer
    /// and the blocking pool keep their own threads.
    ///
    /// # Errors
    ///
    /// As [`McpServer::serve`].
    pub async fn serve_stdio(&self) -> Result<(), ServeError> {
        self.serve(rmcp::transport::io::stdio_pipes()).await
    }

    fn listed(&self, name: &str) -> bool {
        match &self.guard {
            None => true,
            Some(guard) => guard
                .decision(name)
                .is_some_and(|d| d.core_disposition == CoreDisposition::Allowed),
        }
    }

    /// The tools listed now: every action the baseline allows, in catalog order. On an
    /// executor that may park calls for approval (it offers `check_approval`), each
    /// `outputSchema` also admits the approval's status as `data`
    /// ([`output_schema_with_approvals`](crate::tools::output_schema_with_approvals)).
    pub fn tools(&self) -> Vec<rmcp::model::Tool> {
        let catalog = self.executor.catalog();
        let approvals = catalog
            .get(sallyport_core::approval::CHECK_APPROVAL)
            .is_some();
        catalog
            .entries()
            .filter(|e| self.listed(&e.spec().name))
            .map(|e| {
                if approvals {
                    tool_with(e, output_schema_with_approvals(e))
                } else {
                    tool(e)
                }
            })
            .collect()
    }
}

/// The handler of one MCP connection: one sallyport session. Made by
/// [`McpServer::connection`]; dropping it (when the connection ends) unregisters its
/// elicitation route and revokes its session consent grants.
pub struct Connection {
    server: McpServer,
    session: Session,
    stop: CancellationToken,
    /// This connection's tasks: calls parked for approval, followed until they end.
    tasks: TaskManager,
    /// Over Streamable HTTP, the session and tasks of the stateless (2026-07-28) requests.
    stateless: Option<Stateless>,
    /// The newest revision served on this connection.
    newest: ProtocolVersion,
}

/// The one session and task list of a Streamable HTTP server's stateless requests (revision
/// 2026-07-28 and later): each such request is served by a new [`Connection`], and every
/// request that carries the server's bearer token is the same client.
#[derive(Clone)]
#[cfg_attr(
    not(feature = "http"),
    allow(dead_code, reason = "made only by the Streamable HTTP server")
)]
pub(crate) struct Stateless {
    session: Session,
    tasks: TaskManager,
}

impl Stateless {
    /// A fresh session and an empty task list.
    #[cfg(feature = "http")]
    pub(crate) fn new(server: &McpServer) -> Self {
        Self {
            session: server.new_session(),
            tasks: TaskManager::new(),
        }
    }

    /// Stops following every task, and revokes the session's consent grants.
    #[cfg(feature = "http")]
    pub(crate) fn shutdown(&self, server: &McpServer) {
        self.tasks.shutdown();
        server.executor.revoke_session_consent(&self.session);
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("session", &self.session.id().as_str())
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// The connection's session.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The session and tasks of a request: the stateless ones' for a stateless request over
    /// Streamable HTTP (2026-07-28 and later), else this connection's.
    fn of(&self, context: &RequestContext<RoleServer>) -> (&Session, &TaskManager) {
        match &self.stateless {
            Some(stateless) if speaks_2026(context) => (&stateless.session, &stateless.tasks),
            _ => (&self.session, &self.tasks),
        }
    }
}

/// Whether a request speaks 2026-07-28 or later (over Streamable HTTP, such a request carries
/// no session).
fn speaks_2026(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.stop.cancel();
        // The tasks stop following their approvals; the approvals stay as they are (an
        // approved call is carried out by `resume_approvals` or `check_approval`).
        self.tasks.shutdown();
        self.server.router.unregister(self.session.id().as_str());
        self.server.executor.revoke_session_consent(&self.session);
    }
}

impl ServerHandler for Connection {
    fn get_info(&self) -> ServerConfig {
        let builder = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed();
        // Tasks are offered on 2026-07-28 (`speaks_tasks`), so only where it is served.
        let capabilities = if self.newest >= ProtocolVersion::V_2026_07_28 {
            builder.enable_tasks().build()
        } else {
            builder.build()
        };
        let mut config =
            ServerConfig::new(capabilities).with_server_info(self.server.implementation.clone());
        config.protocol_version = HANDSHAKE_PROTOCOL_VERSION;
        match &self.server.instructions {
            Some(text) => config.with_instructions(text.clone()),
            None => config,
        }
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&self.newest))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        if context
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
        {
            self.server
                .router
                .register(self.session.id().as_str(), context.peer);
        }
        let mut result = self.negotiate_initialize(&request)?;
        // Tasks are offered to 2026-07-28 clients only (`speaks_tasks`); a handshake client
        // is answered as before, without the extension.
        if let Some(extensions) = &mut result.capabilities.extensions {
            extensions.remove(TASKS_EXTENSION_ID);
            if extensions.is_empty() {
                result.capabilities.extensions = None;
            }
        }
        Ok(result)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let Some(guard) = &self.server.guard else {
            return;
        };
        let mut changes = guard.subscribe();
        changes.mark_unchanged();
        let peer = context.peer;
        let stop = self.stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    changed = changes.changed() => {
                        if changed.is_err() || peer.notify_tool_list_changed().await.is_err() {
                            break;
                        }
                    }
                }
            }
        });
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        // rmcp hands over a standard method whose params did not decode as a custom request;
        // for a method this server implements, that is a malformed request, not an unknown
        // method.
        match request.method.as_str() {
            "tools/call" | "tools/list" => Err(McpError::invalid_params(
                format!(
                    "malformed {} request: the params do not match the MCP schema",
                    request.method
                ),
                None,
            )),
            _ => Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                request.method,
                None,
            )),
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.server.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.as_ref();
        if self.server.executor.catalog().get(name).is_none() {
            return Err(McpError::invalid_params(
                format!("Unknown tool: {name}"),
                None,
            ));
        }
        let arguments = match &request.arguments {
            Some(map) => serde_json::to_string(map).map_err(|e| {
                McpError::invalid_params(format!("arguments do not serialize: {e}"), None)
            })?,
            None => "{}".to_owned(),
        };
        let (session, tasks) = self.of(&context);
        // Dropping the call future on `notifications/cancelled` is what makes the journal
        // record the attempt as cancelled.
        let result = tokio::select! {
            result = self.server.executor.call_json(name, &arguments, session) => result,
            () = context.ct.cancelled() => {
                return Err(McpError::new(REQUEST_CANCELLED, "request cancelled", None));
            }
        };
        if result.status == Status::Pending
            && let Some(id) = &result.approval_id
            && speaks_tasks(&context)
        {
            let task = crate::tasks::follow(tasks, &self.server.executor, session, id).await;
            let mut meta = rmcp::model::MetaObject::default();
            meta.insert(crate::tasks::APPROVAL_META.to_owned(), json!(id));
            return Ok(CallToolResponse::Task(
                CreateTaskResult::new(task).with_meta(meta),
            ));
        }
        Ok(tool_result(&result)?.into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        Ok(GetTaskResult::new(
            self.of(&context).1.get_task(&request.task_id)?,
        ))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        // A task here never asks its client for input; an answer to nothing is ignored, as
        // SEP-2663 asks for unknown keys (an unknown task is still `invalid_params`).
        self.of(&context)
            .1
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.of(&context).1.cancel_task(&request.task_id)
    }
}

/// Whether the client of this request gets tasks: it speaks 2026-07-28 or later and declared
/// the tasks extension in this request. A client on an older revision keeps `pending` and
/// `check_approval`, even if it named the extension at `initialize`.
fn speaks_tasks(context: &RequestContext<RoleServer>) -> bool {
    speaks_2026(context)
        && context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sallyport_core::Catalog;
    use sallyport_core::journal::MemoryJournal;

    fn server() -> McpServer {
        let catalog = Catalog::builder().build().expect("catalog");
        let executor = Executor::builder(catalog)
            .journal(MemoryJournal::new())
            .build()
            .expect("executor");
        McpServer::new(executor, ConsentRouter::new())
    }

    #[test]
    fn a_stdio_connection_serves_2026_07_28_and_every_older_revision_with_tasks() {
        let connection = server().connection();
        let versions = connection.supported_protocol_versions();
        assert_eq!(versions.as_ref(), ProtocolVersion::KNOWN_VERSIONS);
        assert!(versions.contains(&ProtocolVersion::V_2026_07_28));
        assert!(versions.contains(&ProtocolVersion::V_2025_11_25));
        assert!(connection.get_info().capabilities.supports_tasks());
        assert_eq!(
            connection.get_info().protocol_version,
            HANDSHAKE_PROTOCOL_VERSION
        );
    }

    #[cfg(feature = "http")]
    #[test]
    fn http_connections_share_the_stateless_session_and_tasks_and_keep_their_own() {
        let server = server();
        let stateless = Stateless::new(&server);
        let first = server.http_connection(&stateless);
        let second = server.http_connection(&stateless);
        // Each connection (a handshake client's MCP session) has its own session ...
        assert_ne!(first.session().id(), second.session().id());
        assert_ne!(first.session().id(), stateless.session.id());
        // ... and serves every revision, with tasks.
        let versions = first.supported_protocol_versions();
        assert!(versions.contains(&ProtocolVersion::V_2026_07_28));
        assert!(first.get_info().capabilities.supports_tasks());
        // Dropping a connection (a stateless request ends) keeps the shared task list.
        drop(first);
        assert!(
            second
                .stateless
                .as_ref()
                .is_some_and(|s| s.session.id() == stateless.session.id())
        );
    }
}
