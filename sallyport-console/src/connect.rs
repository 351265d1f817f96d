//! Connecting an account from the console: the [`AccountConnector`] a host configures with
//! [`ConsoleBuilder::connect_accounts`](crate::ConsoleBuilder::connect_accounts), and what
//! crosses it.
//!
//! The console runs the browser's part of an OAuth 2.0 authorization-code connect: it lists
//! the accounts a person may connect, starts a connect when they press "Connect", keeps what
//! the connector must get back (the PKCE verifier, the `state`) on the server, keyed by the
//! `state`, sends the browser to the provider, and hands the provider's redirect back to the
//! connector, which checks it, exchanges the code and stores the grant. The connector does
//! the OAuth; the console never sees a code verifier, a token or a client secret, and shows
//! none: what comes back is a [`ConnectedAccount`] (names, scopes, expiry) or a
//! [`ConnectFailure`] (sentences).
//!
//! With the `connect` feature, `HttpConnector` is the connector for
//! `sallyport-http`'s OAuth credentials.

#[cfg(feature = "connect")]
pub(crate) mod http;
pub(crate) mod store;

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// What the console connects accounts through: lists the accounts that can be connected,
/// starts a connect and finishes it with the provider's redirect.
///
/// The console calls [`AccountConnector::start`] for a signed-in person's `POST /connect`
/// (CSRF-checked), keeps the returned [`StartedConnect::pending`] server-side under its
/// `state` (at most 64 at once, for 10 minutes), and calls [`AccountConnector::finish`] with
/// it at most once, when the browser comes back to `GET /connect/callback` with that `state`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot connect accounts for the console",
    note = "use `sallyport_console::HttpConnector` (feature `connect`), or implement `AccountConnector`"
)]
pub trait AccountConnector: Send + Sync + 'static {
    /// What a started connect must get back to finish (its PKCE verifier and `state`).
    type Pending: Send + 'static;

    /// The accounts a person may connect from the console, in the order shown.
    ///
    /// # Errors
    ///
    /// A [`ConnectFailure`] when they cannot be listed (a locked vault): the page says so.
    fn accounts(
        &self,
    ) -> impl Future<Output = Result<Vec<ConnectableAccount>, ConnectFailure>> + Send;

    /// Starts connecting `request.credential` (for `request.subject`), with the provider
    /// redirecting back to `request.redirect_uri`.
    ///
    /// # Errors
    ///
    /// A [`ConnectFailure`] saying why nothing was started.
    fn start(
        &self,
        request: ConnectRequest,
    ) -> impl Future<Output = Result<StartedConnect<Self::Pending>, ConnectFailure>> + Send;

    /// Finishes a started connect with the query of the provider's redirect (`state=…&code=…`,
    /// or `error=…`): checks it, exchanges the code and stores the grant.
    ///
    /// # Errors
    ///
    /// A [`ConnectFailure`] when nothing was stored (a provider error, a wrong `state`, a
    /// refused exchange).
    fn finish(
        &self,
        pending: Self::Pending,
        callback_query: &str,
    ) -> impl Future<Output = Result<ConnectedAccount, ConnectFailure>> + Send;
}

/// One account a person may connect: a credential name, and whether it is held for each
/// subject (the page then asks whose account it is).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectableAccount {
    /// The credential name actions bind to.
    pub credential: String,
    /// Whether a grant is held for each subject (end user): the page asks for the subject.
    pub per_subject: bool,
    /// The scopes the credential asks the provider for (shown; empty for the client's
    /// defaults).
    pub scopes: Vec<String>,
    /// The provider's authorization endpoint the browser is sent to. Its origin is allowed
    /// as a form target on the connect page (`Content-Security-Policy: form-action`), or the
    /// browser would refuse the redirect.
    pub authorization_endpoint: String,
}

impl ConnectableAccount {
    /// Credential `credential` with one shared grant, authorized at `authorization_endpoint`.
    pub fn new(credential: impl Into<String>, authorization_endpoint: impl Into<String>) -> Self {
        Self {
            credential: credential.into(),
            per_subject: false,
            scopes: Vec::new(),
            authorization_endpoint: authorization_endpoint.into(),
        }
    }

    /// Held for each subject: the page asks whose account it is.
    #[must_use]
    pub fn per_subject(mut self) -> Self {
        self.per_subject = true;
        self
    }

    /// The scopes it asks for.
    #[must_use]
    pub fn with_scopes<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }
}

/// What a person asked to connect.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectRequest {
    /// The credential, one of [`AccountConnector::accounts`].
    pub credential: String,
    /// The subject (end user), for a credential held for each subject; `None` for a shared
    /// grant.
    pub subject: Option<String>,
    /// Where the provider sends the browser back: `http(s)://<console>/connect/callback`.
    pub redirect_uri: String,
}

impl ConnectRequest {
    /// Connect `credential` for `subject`, coming back to `redirect_uri`.
    pub fn new(
        credential: impl Into<String>,
        subject: Option<String>,
        redirect_uri: impl Into<String>,
    ) -> Self {
        Self {
            credential: credential.into(),
            subject,
            redirect_uri: redirect_uri.into(),
        }
    }
}

/// A started connect: where to send the browser, and what to keep until it comes back.
#[non_exhaustive]
pub struct StartedConnect<P> {
    /// The provider's authorization URL (with `state` and the PKCE challenge).
    pub authorization_url: String,
    /// The `state` the provider echoes back: the key the console keeps `pending` under.
    pub state: String,
    /// What [`AccountConnector::finish`] gets back.
    pub pending: P,
}

impl<P> StartedConnect<P> {
    /// A connect started at `authorization_url` with `state`, keeping `pending`.
    pub fn new(authorization_url: impl Into<String>, state: impl Into<String>, pending: P) -> Self {
        Self {
            authorization_url: authorization_url.into(),
            state: state.into(),
            pending,
        }
    }
}

impl<P> fmt::Debug for StartedConnect<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The state is a one-time secret of the connect; the URL carries it.
        f.debug_struct("StartedConnect").finish_non_exhaustive()
    }
}

/// A connected account: which grant was stored, never a token.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectedAccount {
    /// The credential.
    pub credential: String,
    /// The subject whose grant it is; `None` for a shared grant.
    pub subject: Option<String>,
    /// The scopes the provider granted (empty when it did not say).
    pub scopes: Vec<String>,
    /// When the access token obtained expires, in milliseconds since the Unix epoch.
    pub expires_at_ms: Option<u64>,
}

impl ConnectedAccount {
    /// Credential `credential` connected for `subject`.
    pub fn new(credential: impl Into<String>, subject: Option<String>) -> Self {
        Self {
            credential: credential.into(),
            subject,
            scopes: Vec::new(),
            expires_at_ms: None,
        }
    }

    /// The scopes granted.
    #[must_use]
    pub fn with_scopes<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// When the access token expires (ms since the Unix epoch).
    #[must_use]
    pub fn with_expiry(mut self, expires_at_ms: u64) -> Self {
        self.expires_at_ms = Some(expires_at_ms);
        self
    }
}

/// Why a connect did not start or finish: a sentence for the person, and the provider's
/// error when the provider refused. Never carries a code, a verifier or a token.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectFailure {
    /// What happened, in a sentence.
    pub reason: String,
    /// The provider's `error` and `error_description`, when the provider refused (shown
    /// escaped, and cut with a note when long).
    pub provider_error: Option<(String, Option<String>)>,
}

impl ConnectFailure {
    /// A failure saying `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            provider_error: None,
        }
    }

    /// The provider's error code (`access_denied`) and description.
    #[must_use]
    pub fn with_provider_error(
        mut self,
        code: impl Into<String>,
        description: Option<String>,
    ) -> Self {
        self.provider_error = Some((code.into(), description));
        self
    }
}

impl fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for ConnectFailure {}

/// A boxed future of the object-safe connector.
type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the console keeps of a started connect: the connector's pending, type-erased.
pub(crate) type ErasedPending = Box<dyn Any + Send>;

/// [`AccountConnector`] made object-safe, for the console's shared state.
pub(crate) trait DynConnector: Send + Sync {
    fn accounts(&self) -> Boxed<'_, Result<Vec<ConnectableAccount>, ConnectFailure>>;
    fn start(
        &self,
        request: ConnectRequest,
    ) -> Boxed<'_, Result<StartedConnect<ErasedPending>, ConnectFailure>>;
    fn finish<'a>(
        &'a self,
        pending: ErasedPending,
        query: &'a str,
    ) -> Boxed<'a, Result<ConnectedAccount, ConnectFailure>>;
}

impl<C: AccountConnector> DynConnector for C {
    fn accounts(&self) -> Boxed<'_, Result<Vec<ConnectableAccount>, ConnectFailure>> {
        Box::pin(AccountConnector::accounts(self))
    }

    fn start(
        &self,
        request: ConnectRequest,
    ) -> Boxed<'_, Result<StartedConnect<ErasedPending>, ConnectFailure>> {
        Box::pin(async move {
            let started = AccountConnector::start(self, request).await?;
            Ok(StartedConnect {
                authorization_url: started.authorization_url,
                state: started.state,
                pending: Box::new(started.pending) as ErasedPending,
            })
        })
    }

    fn finish<'a>(
        &'a self,
        pending: ErasedPending,
        query: &'a str,
    ) -> Boxed<'a, Result<ConnectedAccount, ConnectFailure>> {
        Box::pin(async move {
            // The console keeps one connector's pendings only, so the type always matches;
            // a mismatch finishes nothing.
            let Ok(pending) = pending.downcast::<C::Pending>() else {
                return Err(ConnectFailure::new(
                    "This connect cannot be finished here; nothing was stored. Start again.",
                ));
            };
            AccountConnector::finish(self, *pending, query).await
        })
    }
}

/// The connector a console was given.
#[derive(Clone)]
pub(crate) struct Connector(pub(crate) Arc<dyn DynConnector>);

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccountConnector")
    }
}

/// The origin (`scheme://host[:port]`) of an `http(s)` URL, for a CSP source; `None` for
/// anything else (user info, other schemes, characters a CSP source cannot hold).
pub(crate) fn origin(url: &str) -> Option<String> {
    let uri: axum::http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?;
    if scheme != "https" && scheme != "http" {
        return None;
    }
    let authority = uri.authority()?.as_str();
    let clean = !authority.is_empty()
        && authority
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    clean.then(|| format!("{scheme}://{authority}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_scheme_host_and_port_only() {
        assert_eq!(
            origin("https://id.example.com/authorize?x=1").as_deref(),
            Some("https://id.example.com")
        );
        assert_eq!(
            origin("http://127.0.0.1:4411/auth").as_deref(),
            Some("http://127.0.0.1:4411")
        );
        assert_eq!(origin("https://user@id.example.com/a"), None);
        assert_eq!(origin("javascript:alert(1)"), None);
        assert_eq!(origin("ftp://id.example.com/"), None);
        assert_eq!(origin("/relative"), None);
    }
}
