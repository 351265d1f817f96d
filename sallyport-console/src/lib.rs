//! A small web console for the person who decides sallyport approvals.
//!
//! A call parked for approval (deferred consent, see [`sallyport_core::approval`]) waits in
//! the journal until a human decides it. [`Console::router`] is an axum
//! [`Router`](axum::Router) with the pages that human keeps open in a tab:
//!
//! - **Pending approvals**, newest first: the action's card (summary, effect class in words,
//!   externality), the objects, the agent's reason (escaped and marked as the agent's words),
//!   the exact request as it will be sent (real host, every header with its value; never
//!   the credential the vault attaches when it is sent), the definition status, the expiry and
//!   the session; approve or deny with a reason, with a confirmation step for
//!   `irreversible_or_broad` actions. A decided approval shows who decided, when, through
//!   which channel, and the call's final result.
//! - **Recent calls** from the audit chain, filtered by status and action, each with a page
//!   showing its audit record.
//! - **The audit chain**: the verify result, the record count, the head hash, and an export
//!   as JSON lines.
//!
//! Pages are rendered on the server and work without JavaScript.
//!
//! ```no_run
//! use sallyport_console::{Console, LoginToken};
//! # async fn demo(executor: sallyport_core::Executor) -> Result<(), Box<dyn std::error::Error>> {
//! let token = LoginToken::generate()?;
//! println!("console login token (shown once): {}", token.expose());
//! let console = Console::builder(executor).user("alice", token).build()?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! console.serve(listener).await?;
//! # Ok(()) }
//! ```
//!
//! # Security
//!
//! - Every page but the login page and the stylesheet needs a session: a person logs in
//!   with a token ([`LoginToken`], generated and printed once, or read from a file; at
//!   least 32 bytes), which names the console user every decision is recorded with
//!   (`decided_by`, channel `console`).
//! - Login attempts are throttled per client: a client address (an IPv6 /64) may fail
//!   [`DEFAULT_LOGIN_FAILURES`] times within [`DEFAULT_LOGIN_WINDOW`]; after that each of its
//!   attempts is answered `429 Too Many Requests` with `Retry-After`, without the token
//!   being looked at, until its oldest failure leaves the window. A successful login
//!   clears its failures. Change the rule with [`ConsoleBuilder::login_throttle`].
//! - The session cookie is `HttpOnly; SameSite=Strict` (and `Secure` when
//!   [`ConsoleBuilder::behind_tls`] says the console is served over TLS). Every `POST`
//!   carries a CSRF token bound to the session; a `POST` without it changes nothing.
//! - Every response carries `Content-Security-Policy` (no scripts at all), `X-Frame-Options:
//!   DENY`, `Cache-Control: no-store`, `X-Content-Type-Options: nosniff` and
//!   `Referrer-Policy: no-referrer`.
//! - [`Console::serve`] binds loopback only, unless the console is behind TLS.
//! - Every text shown is scrubbed with the executor's vault scrubber, then escaped for
//!   display ([`sallyport_core::consent::escape`]: control and bidi characters become visible
//!   `\u{…}` escapes) and for HTML.
//!
//! # With and without an executor
//!
//! Built from an [`Executor`](sallyport_core::Executor) ([`Console::builder`]), an approval
//! is decided and carried out at once ([`Executor::decide`](sallyport_core::Executor::decide)).
//! Built from a journal alone ([`Console::journal_only`], as `sallyport console` in the CLI
//! does), the console records decisions ([`sallyport_core::approval::decide`]) but cannot
//! carry calls out: an executor that holds the action does that (its approval worker, or
//! the agent's `check_approval`). The pages say so.

mod auth;
mod connect;
mod console;
mod handlers;
mod pages;
mod render;
mod throttle;

pub use self::auth::{LoginToken, MIN_TOKEN_BYTES, TokenError};
pub use self::connect::{
    AccountConnector, ConnectFailure, ConnectRequest, ConnectableAccount, ConnectedAccount,
    StartedConnect,
};
pub use self::console::{
    BuildError, COOKIE_NAME, Console, ConsoleBuilder, DEFAULT_SESSION_TTL, ServeError, check_listen,
};
pub use self::throttle::{DEFAULT_LOGIN_FAILURES, DEFAULT_LOGIN_WINDOW};
