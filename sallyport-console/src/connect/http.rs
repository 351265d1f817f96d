//! [`HttpConnector`]: connecting `sallyport-http`'s OAuth credentials from the console.

use std::fmt;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use sallyport_core::vault::{CredentialKind, Vault, VaultError};
use sallyport_http::HttpChannel;
use sallyport_http::oauth::{Connect, ConnectError, Connected, PendingConnect};

use super::{
    AccountConnector, ConnectFailure, ConnectRequest, ConnectableAccount, ConnectedAccount,
    StartedConnect,
};

/// Connects the OAuth accounts of an [`HttpChannel`] and a vault from the console
/// ([`HttpChannel::connect`], then [`HttpChannel::finish_connect`], which stores the grant in
/// the vault's grant store).
///
/// The console offers the credentials named with [`HttpConnector::credential`], when they
/// are of kind `oauth_refresh` with an authorization endpoint
/// ([`OAuthClient::with_authorization_endpoint`](sallyport_core::vault::OAuthClient::with_authorization_endpoint));
/// a credential held for each subject asks whose account it is.
///
/// ```no_run
/// # fn demo(executor: sallyport_core::Executor, channel: sallyport_http::HttpChannel,
/// #         token: sallyport_console::LoginToken) -> Result<(), Box<dyn std::error::Error>> {
/// use sallyport_console::{Console, HttpConnector};
/// let vault = executor.vault().cloned().ok_or("no vault")?;
/// let console = Console::builder(executor)
///     .user("alice", token)
///     .connect_accounts(HttpConnector::new(channel, vault).credential("github"))
///     .build()?;
/// # Ok(()) }
/// ```
pub struct HttpConnector {
    channel: HttpChannel,
    vault: Arc<dyn Vault>,
    credentials: Vec<String>,
    login_hint: bool,
}

impl fmt::Debug for HttpConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConnector")
            .field("credentials", &self.credentials)
            .field("subject_as_login_hint", &self.login_hint)
            .finish_non_exhaustive()
    }
}

impl HttpConnector {
    /// Connects accounts through `channel`, storing grants in `vault` (the executor's).
    pub fn new(channel: HttpChannel, vault: Arc<dyn Vault>) -> Self {
        Self {
            channel,
            vault,
            credentials: Vec::new(),
            login_hint: false,
        }
    }

    /// Offers credential `name` on the console's connect page, in the order given.
    #[must_use]
    pub fn credential(mut self, name: impl Into<String>) -> Self {
        self.credentials.push(name.into());
        self
    }

    /// Sends the subject as OpenID Connect's `login_hint`, for providers where the subject
    /// is the login (an e-mail address). Off by default: a subject may be an id the
    /// provider should not see.
    #[must_use]
    pub fn subject_as_login_hint(mut self) -> Self {
        self.login_hint = true;
        self
    }
}

/// A connect error as a failure for the page: the provider's refusal with its error, any
/// other as the channel's sentence (which never holds a code, a verifier or a token).
fn failure(error: &ConnectError) -> ConnectFailure {
    if let ConnectError::Refused { error, description } = error {
        return ConnectFailure::new("The provider refused the authorization; nothing was stored.")
            .with_provider_error(error.clone(), description.clone());
    }
    let text = error.to_string();
    let mut chars = text.chars();
    let sentence = chars.next().map_or_else(String::new, |first| {
        format!("{}{}.", first.to_uppercase(), chars.as_str())
    });
    ConnectFailure::new(sentence)
}

fn connected(done: Connected) -> ConnectedAccount {
    let account =
        ConnectedAccount::new(done.key.credential, done.key.subject).with_scopes(done.scopes);
    match done.expires_at.duration_since(UNIX_EPOCH) {
        Ok(since) => account.with_expiry(u64::try_from(since.as_millis()).unwrap_or(u64::MAX)),
        Err(_) => account,
    }
}

impl AccountConnector for HttpConnector {
    type Pending = PendingConnect;

    async fn accounts(&self) -> Result<Vec<ConnectableAccount>, ConnectFailure> {
        let mut accounts = Vec::new();
        for name in &self.credentials {
            let credential = match self.vault.resolve(name).await {
                Ok(credential) => credential,
                Err(VaultError::Locked) => {
                    return Err(ConnectFailure::new(
                        "The vault is locked: no account can be connected until it is unlocked.",
                    ));
                }
                Err(e) => {
                    tracing::warn!(credential = %name, error = %e, "console connect: credential not offered");
                    continue;
                }
            };
            let CredentialKind::OAuthRefresh(client) = &credential.meta().kind else {
                tracing::warn!(credential = %name, "console connect: not an oauth_refresh credential; not offered");
                continue;
            };
            let Some(endpoint) = &client.authorization_endpoint else {
                tracing::warn!(credential = %name, "console connect: no authorization endpoint; not offered");
                continue;
            };
            let mut account = ConnectableAccount::new(name.clone(), endpoint.clone())
                .with_scopes(client.scopes.clone());
            if client.per_subject {
                account = account.per_subject();
            }
            accounts.push(account);
        }
        Ok(accounts)
    }

    async fn start(
        &self,
        request: ConnectRequest,
    ) -> Result<StartedConnect<PendingConnect>, ConnectFailure> {
        let mut connect = match &request.subject {
            Some(subject) => Connect::subject(request.credential, subject.clone()),
            None => Connect::shared(request.credential),
        }
        .redirect_uri(request.redirect_uri);
        if let (true, Some(subject)) = (self.login_hint, request.subject) {
            connect = connect.login_hint(subject);
        }
        let pending = self
            .channel
            .connect(self.vault.as_ref(), connect)
            .await
            .map_err(|e| failure(&e))?;
        let (url, state) = (
            pending.authorization_url().to_owned(),
            pending.state().to_owned(),
        );
        Ok(StartedConnect::new(url, state, pending))
    }

    async fn finish(
        &self,
        pending: PendingConnect,
        callback_query: &str,
    ) -> Result<ConnectedAccount, ConnectFailure> {
        self.channel
            .finish_connect(self.vault.as_ref(), pending, callback_query)
            .await
            .map(connected)
            .map_err(|e| failure(&e))
    }
}
