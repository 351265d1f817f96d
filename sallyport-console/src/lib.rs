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
//! - **Connect an account**, when the host offers it ([below](#connecting-an-account)).
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
//!   (`decided_by`, channel `console`), or signs in with OpenID Connect
//!   ([below](#sign-in-with-openid-connect)).
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
//! # Connecting an account
//!
//! With [`ConsoleBuilder::connect_accounts`], the console has a page **Connect an account**
//! (`/connect`): the accounts a person may connect, each with a Connect button (and, for a
//! credential held for each end user, a field for the subject). Connecting is OAuth 2.0's
//! authorization code grant with PKCE and a `state`, done by an [`AccountConnector`]
//! (`HttpConnector` with the `connect` feature): the console starts it with the redirect
//! URI `http(s)://<the console's host>/connect/callback`, sends the browser to the provider
//! (`303`), and when the provider sends it back, hands the redirect to the connector, which
//! exchanges the code and stores the grant in the vault. The page then says "Connected
//! *credential* for *subject*" with the scopes granted and the token's expiry; no code,
//! verifier, token or client secret is ever shown.
//!
//! - A started connect is kept on the server under its `state` (at most 64 at once, for 10
//!   minutes) and finished at most once: an unknown, expired or used `state` stores nothing.
//! - It finishes only in the browser that started it (a `SameSite=Lax` cookie on the
//!   callback path binds it: the `Strict` session cookie is not sent on a provider's
//!   cross-site redirect) and while the session that started it is still signed in.
//! - A provider's error answer (`access_denied`, …) is shown, escaped and cut at 300
//!   characters with a count; nothing is stored.
//! - The connect page's `Content-Security-Policy` names the providers' origins as form
//!   targets (a browser checks the redirect a form's answer makes).
//!
//! Without a connector the page is not linked and `/connect` answers `404`.
//!
//! # Sign in with OpenID Connect
//!
//! With the `oidc` feature and `ConsoleBuilder::oidc_login`, approvers sign in at the
//! organization's OpenID Connect provider, and every decision records who they are: the ID
//! token's subject as the decider (`decided_by`), its display name and its groups (which a
//! decision policy reads), through channel `console`, in the approval and in the audit
//! chain. Register the redirect URI `{public_url}/login/oidc/callback` with the provider:
//!
//! ```ignore
//! use sallyport_console::{Console, OidcLogin};
//! let console = Console::builder(executor)
//!     .oidc_login(
//!         OidcLogin::new(
//!             "https://id.example.com/realms/ops", // the issuer, as `iss` names it
//!             "sallyport-console",                 // the client id
//!             "https://console.example.com",       // where browsers reach the console
//!         )
//!         .client_secret(secret_from_your_store)   // never shown, logged or in `Debug`
//!         .provider_name("Example ID"),             // "Sign in with Example ID"
//!     )
//!     .behind_tls(true)
//!     .build()?;
//! ```
//!
//! - The provider is found at `{issuer}/.well-known/openid-configuration` (read on the first
//!   sign-in, and again until it is read once); it must name the same issuer, and its
//!   endpoints must be `https://` (or `http://` on a loopback address).
//! - "Sign in with …" (`GET /login/oidc`) sends the browser to the provider with the
//!   authorization code grant, PKCE S256, a `state` and a `nonce` (256 random bits each).
//!   The started sign-in is kept on the server under its `state` (at most 64 at once, for 10
//!   minutes), bound to the browser by a `SameSite=Lax` cookie on the callback path, and
//!   finished at most once.
//! - The callback (`GET /login/oidc/callback`) refuses a missing or unknown `state`, another
//!   browser, a replay and the provider's error answer; it exchanges the code with the PKCE
//!   verifier (the client secret by HTTP Basic), and accepts the ID token only when its
//!   signature verifies with the provider's published keys (RS256 or ES256), its issuer is
//!   the configured one, its audience is the client id, it has not expired (60 s of clock
//!   difference allowed) and its nonce is this sign-in's. Any failure shows a page saying
//!   why, and signs nobody in.
//! - The display name is the first of the claims `name`, `preferred_username`, `email`
//!   (else the subject); the groups are the `groups` claim. `OidcLogin` changes the claims
//!   and the scopes (default `openid profile groups`).
//! - Neither the client secret, the code, the PKCE verifier, the nonce nor a token appears
//!   in a page, a log line, an error or a `Debug` output.
//!
//! The shared login token of [`ConsoleBuilder::user`] keeps working beside it; the login
//! page says it is the single shared login meant for a console one person uses.
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `connect` | `HttpConnector`: connect `sallyport-http`'s OAuth credentials (pulls `sallyport-http`) |
//! | `oidc` | `OidcLogin` and `ConsoleBuilder::oidc_login`: approvers sign in with OpenID Connect (pulls `sallyport-http` and `ring`) |
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
#[cfg(feature = "oidc")]
mod oidc;
mod pages;
mod render;
mod throttle;

pub use self::auth::{LoginToken, MIN_TOKEN_BYTES, TokenError};
#[cfg(feature = "connect")]
pub use self::connect::http::HttpConnector;
pub use self::connect::{
    AccountConnector, ConnectFailure, ConnectRequest, ConnectableAccount, ConnectedAccount,
    StartedConnect,
};
pub use self::console::{
    BuildError, COOKIE_NAME, Console, ConsoleBuilder, DEFAULT_SESSION_TTL, ServeError, check_listen,
};
#[cfg(feature = "oidc")]
pub use self::oidc::OidcLogin;
pub use self::throttle::{DEFAULT_LOGIN_FAILURES, DEFAULT_LOGIN_WINDOW};
