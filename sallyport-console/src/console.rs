//! [`Console`], its builder, and serving it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use axum::routing::{get, post};
use sallyport_core::Executor;
use sallyport_core::journal::HeadVerifyingKey;
use sallyport_core::journal::Journal;
use sallyport_core::journal::{ApprovalStore, JournalError};
use sallyport_core::scrub::Scrubber;

use crate::auth::{LoginToken, Sessions};
use crate::connect::store::{CONNECT_TTL, Connects};
use crate::connect::{AccountConnector, Connector};
use crate::throttle::{DEFAULT_LOGIN_FAILURES, DEFAULT_LOGIN_WINDOW, LoginThrottle};

/// The session cookie's name.
pub const COOKIE_NAME: &str = "sallyport_console";

/// How long an idle session lasts unless told otherwise: 8 hours.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

/// The longest form body accepted.
const MAX_BODY_BYTES: usize = 16 * 1024;

/// What the console decides and reads through.
#[derive(Clone)]
pub(crate) enum Backend {
    /// Decides and carries approved calls out.
    Executor(Executor),
    /// Records decisions only.
    Journal(Arc<dyn ApprovalStore>),
}

impl Backend {
    pub(crate) fn journal(&self) -> &dyn Journal {
        match self {
            Self::Executor(e) => e.journal().as_ref(),
            Self::Journal(j) => j.as_ref(),
        }
    }

    /// The approval store; an executor whose journal stores no approvals has none (its
    /// pages then say the journal cannot be used).
    pub(crate) fn approval_store(&self) -> Result<&dyn ApprovalStore, JournalError> {
        match self {
            Self::Executor(e) => e
                .approval_store()
                .map(|s| s.as_ref())
                .ok_or(JournalError::Unsupported("approvals")),
            Self::Journal(j) => Ok(j.as_ref()),
        }
    }

    pub(crate) fn carries_out(&self) -> bool {
        matches!(self, Self::Executor(_))
    }
}

/// Why a console could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No user was given and no OpenID Connect login: no one could log in.
    #[error("no console user: give at least one user and login token, or an OpenID Connect login")]
    NoUser,
    /// Two users have the same name or the same token.
    #[error("two console users share a name or a login token")]
    DuplicateUser,
    /// A user name is empty or longer than 128 characters, or has control characters.
    #[error("a console user name is 1 to 128 printable characters")]
    InvalidUser,
    /// The OpenID Connect login cannot be used (the reason says why: an issuer or public
    /// URL that is neither `https://` nor loopback `http://`, an empty client id, a scope
    /// that is not a scope token, or an HTTP client that could not be built).
    #[cfg(feature = "oidc")]
    #[error("the console's OpenID Connect login cannot be used: {0}")]
    Oidc(String),
}

/// Why [`Console::serve`] refused or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The listener is bound to an address other than loopback and the console is not
    /// behind TLS: its login token and session cookie would cross the network in clear.
    #[error(
        "refusing to serve the console on {0} without TLS: bind a loopback address, or serve it behind TLS"
    )]
    NotLoopback(SocketAddr),
    /// The listener failed.
    #[error("the console's listener failed")]
    Io(#[from] std::io::Error),
}

/// Refuses `addr` unless it is loopback or `tls` says the console is served over TLS.
///
/// # Errors
///
/// [`ServeError::NotLoopback`].
pub fn check_listen(addr: SocketAddr, tls: bool) -> Result<(), ServeError> {
    if addr.ip().is_loopback() || tls {
        Ok(())
    } else {
        Err(ServeError::NotLoopback(addr))
    }
}

/// Builds a [`Console`]. Setters never fail; [`ConsoleBuilder::build`] reports what is
/// wrong.
#[must_use]
#[derive(Debug)]
pub struct ConsoleBuilder {
    backend: Backend,
    users: Vec<(String, LoginToken)>,
    tls: bool,
    session_ttl: Duration,
    scrubber: Option<Arc<Scrubber>>,
    head_key: Option<HeadVerifyingKey>,
    login_failures: u32,
    login_window: Duration,
    connector: Option<Connector>,
    #[cfg(feature = "oidc")]
    oidc: Option<crate::oidc::OidcLogin>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Executor(_) => "Executor",
            Self::Journal(_) => "JournalOnly",
        })
    }
}

impl ConsoleBuilder {
    /// A person who may log in with `token`; decisions are recorded as decided by `name`
    /// through channel `console`.
    pub fn user(mut self, name: impl Into<String>, token: LoginToken) -> Self {
        self.users.push((name.into(), token));
        self
    }

    /// Whether the console is served over TLS (terminated by the host or a proxy in front
    /// of it): the cookie is then `Secure`, and [`Console::serve`] accepts a non-loopback
    /// listener. Default `false`.
    pub fn behind_tls(mut self, tls: bool) -> Self {
        self.tls = tls;
        self
    }

    /// How long an idle session lasts (default [`DEFAULT_SESSION_TTL`]).
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = ttl;
        self
    }

    /// How many failed logins a client may make within `window` before its attempts are
    /// refused until the oldest failure is `window` old (default
    /// [`DEFAULT_LOGIN_FAILURES`] within [`DEFAULT_LOGIN_WINDOW`]; a limit of 0 is taken as
    /// 1). See [the rule](crate#security).
    pub fn login_throttle(mut self, failures: u32, window: Duration) -> Self {
        self.login_failures = failures;
        self.login_window = window;
        self
    }

    /// The scrubber every shown text passes through, for a console without an executor
    /// (with one, the executor's vault scrubber is used, as it stands at each request).
    pub fn scrubber(mut self, scrubber: Arc<Scrubber>) -> Self {
        self.scrubber = Some(scrubber);
        self
    }

    /// The public key the journal's chain heads are signed with: the chain page then
    /// checks the signatures ([`sallyport_core::journal::Journal::verify_signed`]) and says how far
    /// the chain is signed. Without it the page shows the newest signed head unchecked.
    pub fn head_key(mut self, key: HeadVerifyingKey) -> Self {
        self.head_key = Some(key);
        self
    }

    /// Offers "Connect an account": a page listing `connector`'s accounts, each with a
    /// Connect button that sends the browser to the provider and back to
    /// `/connect/callback`, where the connector stores the grant
    /// ([how it works](crate#connecting-an-account)). Without it the page is not linked
    /// and its routes answer `404`.
    pub fn connect_accounts(mut self, connector: impl AccountConnector) -> Self {
        self.connector = Some(Connector(Arc::new(connector)));
        self
    }

    /// Approvers sign in with OpenID Connect at `login`'s provider (a "Sign in with …"
    /// button on the login page; [how it works](crate#sign-in-with-openid-connect)). The
    /// shared login tokens of [`ConsoleBuilder::user`] still work beside it, when any are
    /// given; with this, none are needed.
    #[cfg(feature = "oidc")]
    pub fn oidc_login(mut self, login: crate::oidc::OidcLogin) -> Self {
        self.oidc = Some(login);
        self
    }

    /// Builds the console.
    ///
    /// # Errors
    ///
    /// [`BuildError::NoUser`], [`BuildError::DuplicateUser`], [`BuildError::InvalidUser`],
    /// and with the `oidc` feature `BuildError::Oidc`.
    pub fn build(self) -> Result<Console, BuildError> {
        #[cfg(feature = "oidc")]
        let oidc = match self.oidc {
            Some(login) => Some(crate::oidc::OidcState::new(login).map_err(BuildError::Oidc)?),
            None => None,
        };
        #[cfg(feature = "oidc")]
        let signs_in = oidc.is_some();
        #[cfg(not(feature = "oidc"))]
        let signs_in = false;
        if self.users.is_empty() && !signs_in {
            return Err(BuildError::NoUser);
        }
        for (i, (name, token)) in self.users.iter().enumerate() {
            if name.is_empty() || name.chars().count() > 128 || name.chars().any(char::is_control) {
                return Err(BuildError::InvalidUser);
            }
            if self.users[..i]
                .iter()
                .any(|(n, t)| n == name || t.matches(token.expose()))
            {
                return Err(BuildError::DuplicateUser);
            }
        }
        Ok(Console {
            shared: Arc::new(Shared {
                backend: self.backend,
                users: self.users,
                tls: self.tls,
                sessions: Sessions::new(self.session_ttl),
                logins: LoginThrottle::new(self.login_failures, self.login_window),
                scrubber: self.scrubber,
                head_key: self.head_key,
                connect: self.connector.map(|connector| ConnectState {
                    connector,
                    connects: Connects::new(CONNECT_TTL),
                }),
                #[cfg(feature = "oidc")]
                oidc,
            }),
        })
    }
}

/// What every handler shares.
pub(crate) struct Shared {
    pub(crate) backend: Backend,
    pub(crate) users: Vec<(String, LoginToken)>,
    pub(crate) tls: bool,
    pub(crate) sessions: Sessions,
    pub(crate) logins: LoginThrottle,
    scrubber: Option<Arc<Scrubber>>,
    pub(crate) head_key: Option<HeadVerifyingKey>,
    pub(crate) connect: Option<ConnectState>,
    /// The OpenID Connect login, when configured.
    #[cfg(feature = "oidc")]
    pub(crate) oidc: Option<crate::oidc::OidcState>,
}

/// "Connect an account": the connector and the connects in flight.
pub(crate) struct ConnectState {
    pub(crate) connector: Connector,
    pub(crate) connects: Connects,
}

impl Shared {
    /// The scrubber as it stands now.
    pub(crate) fn scrubber(&self) -> Arc<Scrubber> {
        match (&self.backend, &self.scrubber) {
            (Backend::Executor(e), _) if e.vault().is_some() => e
                .vault()
                .map_or_else(|| Arc::new(Scrubber::empty()), |v| v.scrubber()),
            (_, Some(s)) => Arc::clone(s),
            _ => Arc::new(Scrubber::empty()),
        }
    }
}

/// The web console: a router to mount, or serve on its own.
///
/// Cheap to clone; clones share their sessions. Mount the router at the root of a host's
/// server (`Router::merge`): its links are absolute.
#[derive(Clone)]
pub struct Console {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("backend", &self.shared.backend)
            .field(
                "users",
                &self.shared.users.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("behind_tls", &self.shared.tls)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// A console deciding approvals through `executor`, which carries approved calls out at
    /// once.
    pub fn builder(executor: Executor) -> ConsoleBuilder {
        Self::with_backend(Backend::Executor(executor))
    }

    /// A console over a journal alone: it records decisions, and an executor holding the
    /// action carries approved calls out later. The journal must store approvals (the
    /// SQLite and PostgreSQL journals do).
    pub fn journal_only(journal: Arc<dyn ApprovalStore>) -> ConsoleBuilder {
        Self::with_backend(Backend::Journal(journal))
    }

    fn with_backend(backend: Backend) -> ConsoleBuilder {
        ConsoleBuilder {
            backend,
            users: Vec::new(),
            tls: false,
            session_ttl: DEFAULT_SESSION_TTL,
            scrubber: None,
            head_key: None,
            login_failures: DEFAULT_LOGIN_FAILURES,
            login_window: DEFAULT_LOGIN_WINDOW,
            connector: None,
            #[cfg(feature = "oidc")]
            oidc: None,
        }
    }

    /// The console's routes: `/` (to the approvals), `/login`, `/logout`, `/approvals`,
    /// `/approvals/{id}`, `/approvals/{id}/decide`, `/approvals/{id}/remember`, `/remembered`,
    /// `/remembered/{id}/revoke`, `/calls`, `/calls/{receipt}`, `/chain`, `/chain/export`,
    /// `/style.css`, with [`ConsoleBuilder::connect_accounts`] `/connect` and
    /// `/connect/callback`, and with an OpenID Connect login (feature `oidc`) `/login/oidc`
    /// and `/login/oidc/callback`. Every response carries the security headers.
    ///
    /// Login attempts are throttled per client address: serve the router with
    /// `into_make_service_with_connect_info::<SocketAddr>()` (as [`Console::serve`] does),
    /// or every client shares one budget.
    pub fn router(&self) -> Router {
        use crate::handlers as h;
        let mut router = Router::new();
        if self.shared.connect.is_some() {
            router = router
                .route("/connect", get(h::connect::page).post(h::connect::start))
                .route(h::connect::CALLBACK_PATH, get(h::connect::callback));
        }
        #[cfg(feature = "oidc")]
        if self.shared.oidc.is_some() {
            router = router
                .route("/login/oidc", get(h::oidc::start))
                .route(crate::oidc::CALLBACK_PATH, get(h::oidc::callback));
        }
        router
            .route("/", get(h::index))
            .route("/login", get(h::login_page).post(h::login))
            .route("/logout", post(h::logout))
            .route("/approvals", get(h::approvals))
            .route("/approvals/{id}", get(h::approval))
            .route("/approvals/{id}/decide", post(h::decide))
            .route("/approvals/{id}/remember", post(h::remembered::remember))
            .route("/remembered", get(h::remembered::page))
            .route("/remembered/{id}/revoke", post(h::remembered::revoke))
            .route("/calls", get(h::calls))
            .route("/calls/{receipt}", get(h::call))
            .route("/chain", get(h::chain))
            .route("/chain/export", get(h::export))
            .route("/style.css", get(h::style))
            .with_state(Arc::clone(&self.shared))
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
            .layer(axum::middleware::map_response(security_headers))
    }

    /// Serves the router on `listener` until it fails.
    ///
    /// # Errors
    ///
    /// [`ServeError::NotLoopback`] before serving anything when the listener is not on
    /// loopback and the console is not behind TLS; [`ServeError::Io`].
    pub async fn serve(&self, listener: tokio::net::TcpListener) -> Result<(), ServeError> {
        check_listen(listener.local_addr()?, self.shared.tls)?;
        let service = self
            .router()
            .into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, service).await?;
        Ok(())
    }
}

impl Console {
    /// Checks `addr` ([`check_listen`]) before binding it, then serves the router there
    /// until it fails.
    ///
    /// # Errors
    ///
    /// [`ServeError::NotLoopback`] (nothing is bound), [`ServeError::Io`].
    pub async fn listen(&self, addr: SocketAddr) -> Result<(), ServeError> {
        check_listen(addr, self.shared.tls)?;
        let listener = tokio::net::TcpListener::bind(addr).await?;
        self.serve(listener).await
    }
}

/// The content security policy without its `form-action` directive.
pub(crate) const CSP_BASE: &str =
    "default-src 'none'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The content security policy: no scripts, no frames, styles and forms from here only.
/// The connect page names its providers as form targets too, and sets its own.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(CSP));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connect_pages_policy_is_the_consoles_with_more_form_targets() {
        // The connect page adds its providers to `form-action`; every other directive is
        // the console's own.
        assert_eq!(CSP.replace(" form-action 'self';", ""), CSP_BASE);
    }

    #[test]
    fn only_loopback_without_tls() {
        let lo: SocketAddr = "127.0.0.1:8080".parse().expect("addr");
        let lo6: SocketAddr = "[::1]:8080".parse().expect("addr");
        let any: SocketAddr = "0.0.0.0:8080".parse().expect("addr");
        assert!(check_listen(lo, false).is_ok());
        assert!(check_listen(lo6, false).is_ok());
        assert!(matches!(
            check_listen(any, false),
            Err(ServeError::NotLoopback(a)) if a == any
        ));
        assert!(check_listen(any, true).is_ok());
    }
}
