//! Connecting an account: the OAuth 2.0 authorization code grant (RFC 6749 §4.1) with PKCE
//! S256 (RFC 7636) and a `state`, for a credential of kind `oauth_refresh`.
//!
//! [`HttpChannel::connect`] checks the credential and makes a [`PendingConnect`]: a random
//! `state` (256 bits), a PKCE verifier (256 bits) held as a [`Secret`], and the
//! authorization URL a human opens in a browser. The host keeps the pending connect, sends
//! the human to [`PendingConnect::authorization_url`], and hands the query of the redirect
//! that comes back to [`HttpChannel::finish_connect`], which consumes the pending connect
//! (so it finishes once):
//!
//! 1. a `state` that is missing or not the one sent (compared in constant time) refuses the
//!    redirect before anything else is read ([`ConnectError::StateMismatch`]);
//! 2. an error answer (`error=access_denied`, …) refuses it with the provider's error code
//!    and description, bounded and reduced to plain characters ([`ConnectError::Refused`]);
//! 3. the code is exchanged at the token endpoint with the verifier, authenticated as every
//!    token request of the channel is; any refusal or fault of the provider stores nothing;
//! 4. the tokens and the scopes granted are stored as the grant of the pending connect's key
//!    ([`GrantUpdate::Authorized`]), under the grant's refresh hold, so no refresh runs
//!    meanwhile (in this process, or another sharing the store).
//!
//! Neither the verifier nor the code, nor a token, appears in an error, a `Debug` output or
//! a log line.
//!
//! A connect that asks for the `offline_access` scope (OpenID Connect's way to a refresh
//! token) also sends `prompt=consent`, as OpenID Connect Core §11 asks.
//!
//! The redirect URI is `http://` on a loopback address (`127.0.0.1` or `[::1]`, any port, as
//! RFC 8252 §7.3 asks of native apps), or `https://`; the authorization endpoint is the
//! credential's configuration ([`OAuthClient::authorization_endpoint`]).

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use base64::Engine as _;
use sallyport_core::vault::{
    CredentialKind, GrantKey, GrantUpdate, OAuthClient, Replaced, Secret, Vault, VaultError,
};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::revoke::{configured_endpoint, describe};
use super::{HttpChannel, TokenFailure, hold_refresh_off_runtime};

/// Random bytes in the `state` and in the PKCE verifier (43 characters of base64url each).
const RANDOM_BYTES: usize = 32;

/// The longest redirect query read.
const MAX_CALLBACK_QUERY: usize = 8 * 1024;

/// The longest OAuth error code quoted from a redirect.
const MAX_ERROR_CODE: usize = 64;

/// The longest error description quoted from a redirect (longer ones are cut, and say so).
const MAX_ERROR_DESCRIPTION: usize = 200;

/// How many times the store is asked again when another writer changed the grant between
/// its read and the write of the connected account.
const STORE_ATTEMPTS: usize = 8;

/// A request to connect one account: which grant, where the provider sends the human back,
/// which scopes to ask for. Start it with [`HttpChannel::connect`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Connect {
    key: GrantKey,
    redirect_uri: Option<String>,
    scopes: Option<Vec<String>>,
    login_hint: Option<String>,
}

impl Connect {
    /// Connects the one grant of credential `credential`, shared by every caller.
    pub fn shared(credential: impl Into<String>) -> Self {
        Self::new(GrantKey::shared(credential))
    }

    /// Connects the account of `subject` (an end user) for credential `credential`, held for
    /// each subject.
    pub fn subject(credential: impl Into<String>, subject: impl Into<String>) -> Self {
        Self::new(GrantKey::for_subject(credential, subject))
    }

    fn new(key: GrantKey) -> Self {
        Self {
            key,
            redirect_uri: None,
            scopes: None,
            login_hint: None,
        }
    }

    /// Where the provider sends the human back: `http://127.0.0.1:PORT/…` or
    /// `http://[::1]:PORT/…` (a loopback listener, RFC 8252 §7.3), or `https://…`; without
    /// a fragment. Required; checked by [`HttpChannel::connect`].
    pub fn redirect_uri(mut self, uri: impl Into<String>) -> Self {
        self.redirect_uri = Some(uri.into());
        self
    }

    /// Asks for these scopes instead of the credential's configured ones
    /// ([`OAuthClient::scopes`]).
    pub fn scopes<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        self.scopes = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// Tells the provider who is expected to log in (OpenID Connect's `login_hint`, often
    /// an e-mail address); not sent unless given.
    pub fn login_hint(mut self, hint: impl Into<String>) -> Self {
        self.login_hint = Some(hint.into());
        self
    }

    /// The grant to connect.
    pub fn key(&self) -> &GrantKey {
        &self.key
    }
}

/// A connect waiting for the human: the authorization URL to send them to, and what
/// [`HttpChannel::finish_connect`] checks the redirect against. Finished once: finishing
/// consumes it.
///
/// `Debug` prints the key, the redirect URI and the scopes; never the verifier nor the
/// `state`.
#[must_use]
pub struct PendingConnect {
    key: GrantKey,
    authorization_url: String,
    state: String,
    verifier: Secret,
    redirect_uri: String,
    scopes: Vec<String>,
}

impl fmt::Debug for PendingConnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingConnect")
            .field("key", &self.key)
            .field("redirect_uri", &self.redirect_uri)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl PendingConnect {
    /// The URL to open in the human's browser (the provider's authorization endpoint with
    /// `response_type=code`, the client id, the redirect URI, the scopes, the `state` and the
    /// PKCE challenge; `prompt=consent` with the `offline_access` scope). It holds no secret: the verifier stays here.
    pub fn authorization_url(&self) -> &str {
        &self.authorization_url
    }

    /// The `state` sent (256 random bits, base64url): a host that serves several pending
    /// connects finds the one a redirect belongs to by it.
    pub fn state(&self) -> &str {
        &self.state
    }

    /// The grant this connect stores.
    pub fn key(&self) -> &GrantKey {
        &self.key
    }

    /// The redirect URI the provider sends the human back to.
    pub fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }

    /// The scopes asked for.
    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }
}

/// A connected account: the grant is stored. Names, scopes and the expiry only, never a
/// token.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Connected {
    /// The grant stored.
    pub key: GrantKey,
    /// The scopes the provider granted (its answer's `scope`, else the scopes asked for).
    pub scopes: Vec<String>,
    /// When the first access token expires.
    pub expires_at: SystemTime,
}

impl fmt::Display for Connected {
    /// One sentence for the human who connected, never a token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "connected {}", describe(&self.key))?;
        if self.scopes.is_empty() {
            f.write_str(" with the client's default scopes")
        } else {
            write!(f, " with scopes `{}`", self.scopes.join(" "))
        }
    }
}

/// Why an account was not connected. Whatever the variant, nothing was stored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The redirect is not an authorization answer: no code, a parameter given twice, or
    /// too long. Nothing was exchanged.
    #[error("the redirect is not an authorization answer: {reason}; nothing was stored")]
    BadCallback {
        /// Why, in a sentence of sallyport's.
        reason: String,
    },
    /// The token endpoint refused the code (a code used already or expired, a verifier or
    /// redirect URI that does not match, a refused client). Connect again.
    #[error(
        "the provider refused to exchange the code for {} ({reason}); nothing was stored; connect again",
        describe(key)
    )]
    CodeRefused {
        /// The grant.
        key: GrantKey,
        /// Why, in a sentence of sallyport's.
        reason: String,
    },
    /// The token endpoint could not be used: down, slow, answering garbage or HTML, or
    /// issuing no refresh token. Connect again later.
    #[error(
        "the code for {} was not exchanged: {reason}; nothing was stored",
        describe(key)
    )]
    Exchange {
        /// The grant.
        key: GrantKey,
        /// Why, in a sentence of sallyport's.
        reason: String,
    },
    /// The connect request cannot be made: a redirect URI that is not loopback `http://` or
    /// `https://`, or scopes that are not RFC 6749 scope tokens.
    #[error("the connect request is invalid: {reason}")]
    Invalid {
        /// Why, in a sentence of sallyport's.
        reason: String,
    },
    /// The credential cannot be connected: not an OAuth authorization-code credential
    /// (`oauth_refresh`), not held the way the key says (for each subject, or shared), or
    /// without a usable authorization endpoint.
    #[error("{} cannot be connected: {reason}", describe(key))]
    NotConnectable {
        /// The grant.
        key: GrantKey,
        /// Why, in a sentence of sallyport's.
        reason: String,
    },
    /// The provider (or the human) refused the authorization: its `error` code and
    /// `error_description`, reduced to plain characters and bounded.
    #[error(
        "the provider refused the authorization: `{error}`{}; nothing was stored",
        description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default()
    )]
    Refused {
        /// The OAuth error code (`access_denied`, …), or `unreadable` when it was not one.
        error: String,
        /// The provider's description, if any.
        description: Option<String>,
    },
    /// The random source failed; nothing was started.
    #[error("the connect could not be started: no random source")]
    Random(#[source] getrandom::Error),
    /// The redirect's `state` is missing or not the one this connect sent: it does not
    /// answer this connect (or was forged). Nothing was exchanged.
    #[error("the redirect's state does not match this connect; nothing was exchanged or stored")]
    StateMismatch,
    /// The vault or its grant store failed (locked, keeps no grants, a failed write).
    #[error("the grant store failed; nothing was stored")]
    Vault(#[source] VaultError),
}

/// 256 random bits from the OS as 43 characters of base64url (no padding): a `state`, an
/// OpenID Connect `nonce` or a PKCE verifier (RFC 7636 §4.1), as [`HttpChannel::connect`]
/// makes them. Shared with other authorization-code flows (the console's OpenID Connect
/// login) so there is one way to make them.
///
/// # Errors
///
/// When the OS's random source fails.
pub fn random_token() -> Result<String, getrandom::Error> {
    let mut bytes = zeroize::Zeroizing::new([0u8; RANDOM_BYTES]);
    getrandom::fill(bytes.as_mut_slice())?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes.as_slice()))
}

/// The S256 code challenge of a PKCE `verifier` (RFC 7636 §4.2): base64url (no padding) of
/// its SHA-256.
pub fn code_challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// The redirect URI, if a provider may send a code to it: `http://` on a loopback address
/// (RFC 8252 §7.3; `localhost` is refused as §8.3 advises), or `https://`; no user info or
/// fragment.
fn check_redirect_uri(uri: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(uri).map_err(|_| "the redirect URI is not a URL".to_owned())?;
    match (url.scheme(), url.host()) {
        ("https", Some(_)) => {}
        ("http", Some(url::Host::Ipv4(ip))) if ip.is_loopback() => {}
        ("http", Some(url::Host::Ipv6(ip))) if ip.is_loopback() => {}
        _ => {
            return Err(
                "the redirect URI is neither http:// on a loopback address (127.0.0.1 or [::1]) nor https://"
                    .to_owned(),
            );
        }
    }
    if !url.username().is_empty() || url.password().is_some() || url.fragment().is_some() {
        return Err("the redirect URI has user info or a fragment".to_owned());
    }
    Ok(url.to_string())
}

/// Whether `scope` is an RFC 6749 §3.3 scope token.
fn is_scope_token(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .chars()
            .all(|c| c == '!' || ('#'..='[').contains(&c) || (']'..='~').contains(&c))
}

/// `text` with every character outside RFC 6749's error text set (`%x20-21 / %x23-5B /
/// %x5D-7E`) replaced by `?`, cut at `max` characters with a note when longer.
fn plain(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .take(max)
        .map(|c| {
            if c == ' ' || c == '!' || ('#'..='[').contains(&c) || (']'..='~').contains(&c) {
                c
            } else {
                '?'
            }
        })
        .collect();
    if text.chars().count() > max {
        out.push_str("… (cut)");
    }
    out
}

/// The redirect's parameters, each at most once.
struct Callback {
    pairs: Vec<(String, zeroize::Zeroizing<String>)>,
}

impl Callback {
    fn parse(query: &str) -> Result<Self, ConnectError> {
        let query = query.strip_prefix('?').unwrap_or(query);
        if query.len() > MAX_CALLBACK_QUERY {
            return Err(ConnectError::BadCallback {
                reason: format!("its query is longer than {MAX_CALLBACK_QUERY} bytes"),
            });
        }
        let mut pairs: Vec<(String, zeroize::Zeroizing<String>)> = Vec::new();
        for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
            if pairs.iter().any(|(n, _)| *n == name) {
                return Err(ConnectError::BadCallback {
                    reason: format!(
                        "the parameter `{}` is given more than once",
                        plain(&name, MAX_ERROR_CODE)
                    ),
                });
            }
            pairs.push((
                name.into_owned(),
                zeroize::Zeroizing::new(value.into_owned()),
            ));
        }
        Ok(Self { pairs })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl HttpChannel {
    /// Starts connecting an account: checks that the credential is an OAuth
    /// authorization-code credential (`oauth_refresh`) with an authorization endpoint, held
    /// as `connect`'s key says (for each subject, or shared), and makes the `state`, the PKCE
    /// verifier and the authorization URL. Nothing is sent and nothing is stored yet.
    ///
    /// # Errors
    ///
    /// - [`ConnectError::NotConnectable`] for a credential that cannot be connected (no such
    ///   credential, another kind, held otherwise, no or an unusable authorization endpoint);
    /// - [`ConnectError::Invalid`] for a missing or unusable redirect URI, or scopes that
    ///   are not scope tokens;
    /// - [`ConnectError::Vault`] when the vault is locked or keeps no grants;
    /// - [`ConnectError::Random`] when the OS's random source fails.
    pub async fn connect(
        &self,
        vault: &dyn Vault,
        connect: Connect,
    ) -> Result<PendingConnect, ConnectError> {
        let Connect {
            key,
            redirect_uri,
            scopes,
            login_hint,
        } = connect;
        let client = connectable(vault, &key).await?.0;
        let Some(endpoint) = client.authorization_endpoint.as_deref() else {
            return Err(ConnectError::NotConnectable {
                key,
                reason: "the credential has no authorization endpoint configured".into(),
            });
        };
        let mut url = match configured_endpoint(
            endpoint,
            "authorization endpoint",
            "the human's browser would reach it in the clear",
        ) {
            Ok(url) => url,
            Err(reason) => return Err(ConnectError::NotConnectable { key, reason }),
        };
        let redirect_uri =
            check_redirect_uri(
                redirect_uri
                    .as_deref()
                    .ok_or_else(|| ConnectError::Invalid {
                        reason: "no redirect URI was given".into(),
                    })?,
            )
            .map_err(|reason| ConnectError::Invalid { reason })?;
        let scopes = scopes.unwrap_or_else(|| client.scopes.clone());
        if let Some(bad) = scopes.iter().find(|s| !is_scope_token(s)) {
            return Err(ConnectError::Invalid {
                reason: format!(
                    "`{}` is not an OAuth scope token",
                    plain(bad, MAX_ERROR_CODE)
                ),
            });
        }
        let state = random_token().map_err(ConnectError::Random)?;
        let verifier = Secret::new(random_token().map_err(ConnectError::Random)?);
        {
            let mut query = url.query_pairs_mut();
            query
                .append_pair("response_type", "code")
                .append_pair("client_id", &client.client_id)
                .append_pair("redirect_uri", &redirect_uri);
            if !scopes.is_empty() {
                query.append_pair("scope", &scopes.join(" "));
            }
            query
                .append_pair("state", &state)
                .append_pair("code_challenge", &code_challenge(verifier.expose()))
                .append_pair("code_challenge_method", "S256");
            // OpenID Connect Core §11: a request for offline access (a refresh token) asks
            // for the user's consent, or the provider drops the scope.
            if scopes.iter().any(|s| s == "offline_access") {
                query.append_pair("prompt", "consent");
            }
            if let Some(hint) = &login_hint {
                query.append_pair("login_hint", hint);
            }
        }
        tracing::debug!(
            credential = key.credential.as_str(),
            subject = key.subject.as_deref(),
            "OAuth connect started"
        );
        Ok(PendingConnect {
            key,
            authorization_url: url.into(),
            state,
            verifier,
            redirect_uri,
            scopes,
        })
    }

    /// Finishes a connect with the query of the redirect that came back
    /// (`code=…&state=…`, with or without the leading `?`): checks the `state`, exchanges the
    /// code at the credential's token endpoint (with the PKCE verifier, authenticated as the
    /// channel's refresh requests are) and stores the grant: its refresh token, its first
    /// access token and the scopes granted ([`GrantUpdate::Authorized`]), replacing any grant
    /// the key held. No refresh of the grant runs while it is stored, in this process or
    /// another sharing the store.
    ///
    /// The request goes through this channel's trusted roots and clients, with its token
    /// endpoint timeout ([`HttpChannelBuilder::token_timeout`](crate::HttpChannelBuilder::token_timeout)).
    ///
    /// # Errors
    ///
    /// Nothing is stored on any error.
    ///
    /// - [`ConnectError::StateMismatch`] when the `state` is missing or not this connect's
    ///   (nothing is exchanged);
    /// - [`ConnectError::Refused`] for the provider's error answer (`access_denied`, …);
    /// - [`ConnectError::BadCallback`] for a redirect without a code, or malformed;
    /// - [`ConnectError::CodeRefused`] when the token endpoint refuses the code (used
    ///   already, expired, …);
    /// - [`ConnectError::Exchange`] when the token endpoint is down, slow, answers garbage,
    ///   or issues no refresh token;
    /// - [`ConnectError::NotConnectable`] when the credential changed meanwhile so it cannot
    ///   be connected;
    /// - [`ConnectError::Vault`] when the vault is locked or the grant cannot be stored.
    pub async fn finish_connect(
        &self,
        vault: &dyn Vault,
        pending: PendingConnect,
        callback_query: &str,
    ) -> Result<Connected, ConnectError> {
        let PendingConnect {
            key,
            state,
            verifier,
            redirect_uri,
            scopes: asked,
            ..
        } = pending;
        let callback = Callback::parse(callback_query)?;
        let state_matches = callback
            .get("state")
            .is_some_and(|got| bool::from(got.as_bytes().ct_eq(state.as_bytes())));
        if !state_matches {
            tracing::warn!(
                credential = key.credential.as_str(),
                subject = key.subject.as_deref(),
                "OAuth connect redirect with a state that does not match; refused"
            );
            return Err(ConnectError::StateMismatch);
        }
        if let Some(error) = callback.get("error") {
            let code = if !error.is_empty()
                && error.len() <= MAX_ERROR_CODE
                && error
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
            {
                error.to_owned()
            } else {
                "unreadable".to_owned()
            };
            let description = callback
                .get("error_description")
                .map(|d| plain(d, MAX_ERROR_DESCRIPTION));
            tracing::info!(
                credential = key.credential.as_str(),
                subject = key.subject.as_deref(),
                error = code.as_str(),
                "OAuth connect refused by the provider"
            );
            return Err(ConnectError::Refused {
                error: code,
                description,
            });
        }
        let code = match callback.get("code") {
            Some(code) if !code.is_empty() => code,
            _ => {
                return Err(ConnectError::BadCallback {
                    reason: "it carries neither a code nor an error".into(),
                });
            }
        };
        let (client, credential) = connectable(vault, &key).await?;
        let secret = credential.secret().expose();
        let body = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("grant_type", "authorization_code")
                .append_pair("code", code)
                .append_pair("redirect_uri", &redirect_uri)
                .append_pair("code_verifier", verifier.expose());
            if secret.is_empty() {
                // A public client identifies itself in the body (RFC 6749 §4.1.3).
                form.append_pair("client_id", &client.client_id);
            }
            zeroize::Zeroizing::new(form.finish())
        };
        let issued_at = SystemTime::now();
        let issued = match self.post_token(&client, secret, &body).await {
            Ok(issued) => issued,
            Err(TokenFailure::Refused(reason)) => {
                tracing::info!(
                    credential = key.credential.as_str(),
                    subject = key.subject.as_deref(),
                    "OAuth connect: the code was refused"
                );
                return Err(ConnectError::CodeRefused { key, reason });
            }
            Err(TokenFailure::Failed(reason)) => {
                tracing::info!(
                    credential = key.credential.as_str(),
                    subject = key.subject.as_deref(),
                    "OAuth connect: the token endpoint failed"
                );
                return Err(ConnectError::Exchange { key, reason });
            }
        };
        let Some(refresh_token) = issued.refresh_token else {
            return Err(ConnectError::Exchange {
                key,
                reason: "the provider issued no refresh token (does the client need a scope such as `offline_access`?)".into(),
            });
        };
        let scopes = match issued.scope.as_deref() {
            Some(granted) if granted.split_whitespace().all(is_scope_token) => {
                granted.split_whitespace().map(str::to_owned).collect()
            }
            _ => asked,
        };
        let expires_at = issued_at + issued.lifetime;
        let update = GrantUpdate::Authorized {
            refresh_token,
            access_token: issued.access_token,
            issued_at,
            expires_at,
            scopes: scopes.clone(),
        };
        let store = Arc::clone(credential.grants().ok_or_else(no_grants)?);
        // No refresh of the grant runs while it is replaced: this process's refresh lock,
        // and the store's hold for the processes that share it.
        let lock = self.refresh_lock(&key);
        let _refreshing = lock.lock().await;
        let held = hold_refresh_off_runtime(&store, &key)
            .await
            .ok_or_else(|| {
                ConnectError::Vault(VaultError::Backend(
                    "the wait for other processes' refreshes was abandoned".into(),
                ))
            })?;
        let (mut version, _hold) = match held {
            Ok(Some((grant, hold))) => (Some(grant.version()), Some(hold)),
            Ok(None) => (None, None),
            // A subject's first grant: nothing to refresh yet, so nothing to hold.
            Err(VaultError::NotFound(_)) if key.subject.is_some() => (Some(0), None),
            Err(e) => return Err(ConnectError::Vault(e)),
        };
        for _ in 0..STORE_ATTEMPTS {
            let expected = match version.take() {
                Some(v) => v,
                None => match store.current(&key).await {
                    Ok(grant) => grant.version(),
                    Err(VaultError::NotFound(_)) if key.subject.is_some() => 0,
                    Err(e) => return Err(ConnectError::Vault(e)),
                },
            };
            match store.replace(&key, expected, update.clone()).await {
                Ok(Replaced::Stored(_)) => {
                    tracing::info!(
                        credential = key.credential.as_str(),
                        subject = key.subject.as_deref(),
                        "OAuth account connected"
                    );
                    return Ok(Connected {
                        key,
                        scopes,
                        expires_at,
                    });
                }
                // Another writer (an upstream's 401 marking the token expired) changed it
                // meanwhile: read it again.
                Ok(_) => {}
                Err(e) => return Err(ConnectError::Vault(e)),
            }
        }
        Err(ConnectError::Vault(VaultError::Backend(
            "the grant kept changing while the connected account was being stored".into(),
        )))
    }
}

fn no_grants() -> ConnectError {
    ConnectError::Vault(VaultError::Backend(
        "this vault keeps no OAuth grants".into(),
    ))
}

/// The OAuth client of the credential `key` names, and the credential, if it can be
/// connected as `key` says.
async fn connectable(
    vault: &dyn Vault,
    key: &GrantKey,
) -> Result<(OAuthClient, sallyport_core::vault::Credential), ConnectError> {
    let not = |reason: &str| ConnectError::NotConnectable {
        key: key.clone(),
        reason: reason.to_owned(),
    };
    let credential = match vault.resolve(&key.credential).await {
        Ok(credential) => credential,
        Err(VaultError::NotFound(_)) => return Err(not("there is no such credential")),
        Err(e) => return Err(ConnectError::Vault(e)),
    };
    let client = match &credential.meta().kind {
        CredentialKind::OAuthRefresh(client) => client.clone(),
        _ => {
            return Err(not(
                "it is not an OAuth authorization-code credential (kind `oauth_refresh`)",
            ));
        }
    };
    match (client.per_subject, key.subject.is_some()) {
        (true, false) => return Err(not("it is held for each subject: name the subject")),
        (false, true) => {
            return Err(not(
                "it holds one shared grant, not one for each subject: connect it without a subject",
            ));
        }
        _ => {}
    }
    if credential.grants().is_none() {
        return Err(no_grants());
    }
    Ok((client, credential))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_is_rfc_7636_s256() {
        // RFC 7636 Appendix B.
        assert_eq!(
            code_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn state_and_verifier_are_256_random_bits_in_base64url() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_eq!(a.len(), 43);
        assert_ne!(a, b);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "{a}"
        );
    }

    #[test]
    fn redirect_uris_are_loopback_http_or_https() {
        assert_eq!(
            check_redirect_uri("http://127.0.0.1:49152/callback").as_deref(),
            Ok("http://127.0.0.1:49152/callback")
        );
        assert!(check_redirect_uri("http://[::1]:8080/connect/callback").is_ok());
        assert!(check_redirect_uri("https://app.example.com/connect/callback").is_ok());
        for bad in [
            "http://localhost:8080/callback",
            "http://app.example.com/callback",
            "http://10.0.0.1/callback",
            "https://user:pw@app.example.com/callback",
            "http://127.0.0.1:8080/callback#frag",
            "ftp://127.0.0.1/callback",
            "not a url",
        ] {
            assert!(check_redirect_uri(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn provider_text_is_reduced_to_plain_characters_and_cut_with_a_note() {
        assert_eq!(plain("The user said no", 200), "The user said no");
        assert_eq!(plain("a\"b\\c\n\u{1b}[31m", 200), "a?b?c??[31m");
        let long = "x".repeat(250);
        let cut = plain(&long, 200);
        assert!(
            cut.starts_with(&"x".repeat(200)) && cut.ends_with("… (cut)"),
            "{cut}"
        );
    }

    #[test]
    fn a_callback_parameter_given_twice_is_refused() {
        let err = Callback::parse("?code=a&state=s&code=b").err().unwrap();
        assert_eq!(
            err.to_string(),
            "the redirect is not an authorization answer: the parameter `code` is given more than once; nothing was stored"
        );
        let ok = Callback::parse("code=a%20b&state=s").ok().unwrap();
        assert_eq!(ok.get("code"), Some("a b"));
        assert_eq!(ok.get("state"), Some("s"));
        assert!(Callback::parse(&"a".repeat(MAX_CALLBACK_QUERY + 1)).is_err());
    }

    #[test]
    fn the_sentences_name_the_account_and_say_nothing_was_stored() {
        let connected = Connected {
            key: GrantKey::for_subject("github", "alice"),
            scopes: vec!["openid".into(), "api:read".into()],
            expires_at: SystemTime::UNIX_EPOCH,
        };
        assert_eq!(
            connected.to_string(),
            "connected the `github` account of subject `alice` with scopes `openid api:read`"
        );
        let refused = ConnectError::Refused {
            error: "access_denied".into(),
            description: Some("The user denied".into()),
        };
        assert_eq!(
            refused.to_string(),
            "the provider refused the authorization: `access_denied` (The user denied); nothing was stored"
        );
        let code = ConnectError::CodeRefused {
            key: GrantKey::shared("crm"),
            reason: "the provider answered `invalid_grant`".into(),
        };
        assert_eq!(
            code.to_string(),
            "the provider refused to exchange the code for the shared grant of `crm` (the provider answered `invalid_grant`); nothing was stored; connect again"
        );
    }
}
