//! Serve a sallyport catalog to any agent over the Model Context Protocol.
//!
//! One function call turns an [`Executor`](sallyport_core::Executor) into an MCP server that
//! Claude, an IDE agent or any MCP client can use, with sallyport's guarantees intact: every
//! `tools/call` runs the executor's fixed pipeline, and one MCP connection is one sallyport
//! [`Session`](sallyport_core::Session).
//!
//! | MCP | sallyport |
//! |---|---|
//! | `tools/list` | the catalog's MCP export ([`Entry::mcp_tool`](sallyport_core::catalog::Entry::mcp_tool)): description with the card's consequence lines, `inputSchema`, annotations from the card; `outputSchema` is the result envelope ([`tools::output_schema`]; on an executor with deferred consent, [`tools::output_schema_with_approvals`], which admits the approval's status as `data`). Actions the baseline has not approved or has quarantined are left out. |
//! | `notifications/tools/list_changed` | sent when the [`BaselineGuard`](sallyport_core::drift::BaselineGuard) changes (see [`watch_lockfile`]) |
//! | `tools/call` result | `structuredContent` = the `ActionResult` (with its `findings`); text = [`render`]; `isError` for `rejected` and `unknown`; `_meta` [`UPSTREAM_META`] marks upstream text as data ([`upstream_meta`]) |
//! | unknown tool name | JSON-RPC error `-32602` (`invalid_params`) |
//! | invalid or oversized arguments | a tool result with `isError` (`invalid_arguments`, `arguments_too_large`), audited, so the model can correct itself |
//! | `notifications/cancelled` | the call's future is dropped: journaled `cancelled_before_send`, or `unknown` if bytes may have left |
//! | protocol revision | 2026-07-28 ([`PROTOCOL_VERSION`]: per-request `_meta`, `server/discover`) and every older one through `initialize`, up to [`HANDSHAKE_PROTOCOL_VERSION`]; a handshake client is served as before |
//! | a call parked for approval (deferred consent) | `pending` naming `check_approval`; for a 2026-07-28 client that declared the Tasks extension (SEP-2663), a task instead: `working` while a human has not decided, then `completed` with what `check_approval` answers (`isError` when denied or expired), `cancelled` when `tasks/cancel` withdrew it (the approval is then denied); `_meta` [`APPROVAL_META`] names the approval |
//! | `elicitation/create` | consent from the client's user only where the host enabled it ([`Elicitation`]), the client declared the capability and speaks a handshake revision (2026-07-28 forbids server-to-client requests) (accept → approve; decline, cancel → deny); by default the host's own provider answers; with no one to ask, `consent_unavailable` |
//!
//! ```no_run
//! use std::sync::Arc;
//! use sallyport_core::{Catalog, Executor, Session};
//! use sallyport_core::consent::TerminalConsent;
//! use sallyport_core::drift::{Baseline, BaselineGuard};
//! use sallyport_core::journal::SqliteJournal;
//! use sallyport_mcp::{ConsentRouter, McpServer};
//! # use sallyport_core::Action;
//! # use serde::Deserialize; use schemars::JsonSchema;
//! # /// Read one thing.
//! # #[derive(Action, Deserialize, JsonSchema)]
//! # #[action(name = "get_thing", effect = observe)]
//! # #[channel(name = "demo")]
//! # struct GetThing { id: String }
//!
//! # async fn demo(channel: impl sallyport_core::Channel) -> Result<(), Box<dyn std::error::Error>> {
//! let catalog = Catalog::builder().action::<GetThing>().build()?;
//! let guard = Arc::new(BaselineGuard::from_lockfile(&catalog, "sallyport.baseline.json")?);
//! // The host's terminal answers consent; a client's `elicitation` capability is ignored
//! // unless the host enables it (`ConsentRouter::builder().elicitation(…)`). With no
//! // terminal, consent-requiring calls are refused (`consent_unavailable`).
//! let consent = ConsentRouter::with_provider(Arc::new(TerminalConsent::new()));
//! let executor = Executor::builder(catalog)
//!     .journal(SqliteJournal::open("journal.db")?)
//!     .channel(channel)
//!     .consent_arc(consent.clone())
//!     .definition_guard(guard.clone())
//!     .build()?;
//! McpServer::new(executor, consent)
//!     .baseline(guard)
//!     .session(|id| Session::new(id.as_str()).allow("project", ["proj_42"]))
//!     .serve_stdio()
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! With the `http` feature, `McpServer::serve_http` serves Streamable HTTP on a loopback
//! address. Every HTTP request must carry `Authorization: Bearer <token>` (`BearerToken`:
//! given by the host with `McpServer::http_token`, or generated at start and printed once to
//! stderr); any other is answered `401` and runs nothing. A handshake client (up to
//! 2025-11-25) gets an MCP session, which is one sallyport session, and elicitation, where
//! enabled, reaches it over the request's event stream. A 2026-07-28 request carries no
//! session (SEP-2567): every such request is served in the server's one stateless session
//! (every holder of the bearer token is the same client), and its tasks are kept in one list,
//! so a task started by `tools/call` is found by a later `tasks/get` or `tasks/cancel`, and
//! `check_approval` finds the calls of earlier requests. `mcp-demo --http 127.0.0.1:0` in `examples/`
//! serves it, and `examples/tests/integration/mcp_http.rs` drives it with the rmcp HTTP client.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod consent;
#[cfg(feature = "http")]
mod http;
mod render;
mod server;
mod tasks;
pub mod tools;
mod watch;

pub use self::consent::{ConsentRouter, ConsentRouterBuilder, Elicitation};
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use self::http::{BearerToken, MIN_TOKEN_LEN, bind_http};
pub use self::render::{UPSTREAM_META, render, upstream_meta};
pub use self::server::{
    Connection, HANDSHAKE_PROTOCOL_VERSION, McpServer, PROTOCOL_VERSION, REQUEST_CANCELLED,
    ServeError,
};
pub use self::tasks::APPROVAL_META;
pub use self::watch::watch_lockfile;
pub use rmcp;
