//! Disconnecting an account: revoke its grant at the provider (RFC 7009), then remove it
//! from the vault's grant store.
//!
//! The revocation endpoint is the credential's configuration
//! ([`OAuthClient::revocation_endpoint`]), set by whoever stored the credential; no action
//! or agent names it. The request is authenticated as the token requests are
//! (`client_secret_basic`, or `client_id` in the body for a public client), and carries the
//! refresh token, then the access token, each with its `token_type_hint`.
//!
//! While it runs, the disconnect holds the grant's refresh right (in this process and, through
//! [`GrantStore::hold_refresh`], in every process sharing the store), so no refresh rotates
//! the refresh token between its revocation and the grant's removal.
//!
//! A provider that does not revoke (down, slow, an error answer) leaves the grant where it
//! is, unless the disconnect is [forced](Disconnect::force): then it is removed here anyway
//! and [`Disconnected::revocation`] says it was not revoked.

use std::fmt;
use std::sync::Arc;

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use sallyport_core::vault::{Grant, GrantKey, GrantStore, OAuthClient, Vault, VaultError};

use super::{HttpChannel, client_authorization, hold_refresh_off_runtime, read_capped};

/// A request to disconnect one account: which grant, and whether to remove it even when the
/// provider does not revoke it. Run it with [`HttpChannel::disconnect`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Disconnect {
    key: GrantKey,
    force: bool,
}

impl Disconnect {
    /// Disconnects the grant of `key` (a subject's, or a credential's shared one).
    pub fn new(key: GrantKey) -> Self {
        Self { key, force: false }
    }

    /// Disconnects the grant `subject` gave for credential `credential`.
    pub fn subject(credential: impl Into<String>, subject: impl Into<String>) -> Self {
        Self::new(GrantKey::for_subject(credential, subject))
    }

    /// Removes the grant here even when the provider could not revoke it (down, slow,
    /// refusing): its tokens may then stay valid at the provider until they expire or the
    /// user revokes the access there. The result says so
    /// ([`Revocation::Failed`]).
    pub fn force(mut self) -> Self {
        self.force = true;
        self
    }

    /// The grant to disconnect.
    pub fn key(&self) -> &GrantKey {
        &self.key
    }
}

/// What happened at the provider when a grant was disconnected.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revocation {
    /// The provider could not revoke the tokens; the grant was removed here anyway because
    /// the disconnect was forced. The tokens may stay valid at the provider.
    Failed {
        /// Why, in a sentence of sallyport's (never the provider's text).
        reason: String,
    },
    /// The grant held no token to revoke (it had been refused for good and held none).
    NothingHeld,
    /// The credential names no revocation endpoint: the grant was removed here only.
    NotConfigured,
    /// The provider answered `200` for every token the grant held (as it does, per RFC
    /// 7009, for a token it no longer knows).
    Revoked {
        /// How many tokens were revoked (the refresh token, and the access token if one
        /// was held).
        tokens: usize,
    },
}

/// A disconnected account: the grant is gone from the store.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Disconnected {
    /// The grant removed.
    pub key: GrantKey,
    /// What the provider did.
    pub revocation: Revocation,
}

impl fmt::Display for Disconnected {
    /// One sentence for the human who asked, never a token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "disconnected {}: ", describe(&self.key))?;
        match &self.revocation {
            Revocation::Revoked { .. } => {
                f.write_str("revoked at the provider and removed from the vault")
            }
            Revocation::NothingHeld => {
                f.write_str("removed from the vault; it held no token to revoke at the provider")
            }
            Revocation::NotConfigured => f.write_str(
                "removed from the vault; not revoked at the provider: no revocation endpoint configured",
            ),
            Revocation::Failed { reason } => write!(
                f,
                "removed from the vault because the removal was forced, but NOT revoked at the provider ({reason}); its tokens may stay valid there until they expire or the user revokes the access at the provider"
            ),
        }
    }
}

/// Why an account was not disconnected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DisconnectError {
    /// The provider did not revoke the grant, and the disconnect was not forced: the grant
    /// was NOT removed, so a human can try again.
    #[error(
        "{} was not revoked at the provider ({reason}); the grant was NOT removed; disconnect again later, or force its removal",
        describe(key)
    )]
    NotRevoked {
        /// The grant.
        key: GrantKey,
        /// Why, in a sentence of sallyport's.
        reason: String,
    },
    /// There is no such grant to disconnect (the subject never connected the account, or
    /// it was disconnected already).
    #[error("{} is not connected; nothing to disconnect", describe(key))]
    NotConnected {
        /// The grant.
        key: GrantKey,
    },
    /// The credential is not an OAuth credential, or is not held the way the key says (for
    /// each subject, or shared).
    #[error("{}", not_oauth(key))]
    NotOAuth {
        /// The grant asked for.
        key: GrantKey,
    },
    /// The grant was revoked at the provider, but could not be removed from the store.
    #[error(
        "{} was revoked at the provider but could not be removed from the vault; disconnect again to remove it",
        describe(key)
    )]
    RevokedNotRemoved {
        /// The grant.
        key: GrantKey,
        /// The store's error.
        #[source]
        source: VaultError,
    },
    /// The vault or its grant store failed before anything was revoked; nothing changed.
    #[error("the grant store failed; nothing was revoked or removed")]
    Vault(#[source] VaultError),
}

/// `` `github` of subject `alice` `` or `` the shared grant of `github` ``.
pub(super) fn describe(key: &GrantKey) -> String {
    match &key.subject {
        Some(subject) => format!(
            "the `{}` account of subject `{}`",
            key.credential,
            sallyport_core::consent::escape(subject)
        ),
        None => format!("the shared grant of `{}`", key.credential),
    }
}

fn not_oauth(key: &GrantKey) -> String {
    match &key.subject {
        Some(_) => format!(
            "credential `{}` is not an OAuth credential held for each subject",
            key.credential
        ),
        None => format!(
            "credential `{}` is not an OAuth credential with a shared grant (name a subject for one held for each subject)",
            key.credential
        ),
    }
}

/// Which token a revocation request carries (`token_type_hint`, RFC 7009 §2.1).
#[derive(Clone, Copy)]
enum Hint {
    AccessToken,
    RefreshToken,
}

impl Hint {
    fn as_str(self) -> &'static str {
        match self {
            Self::AccessToken => "access_token",
            Self::RefreshToken => "refresh_token",
        }
    }
}

/// The largest OAuth error code quoted from a revocation endpoint's answer.
const MAX_ERROR_CODE: usize = 64;

/// An RFC 6749 error code, if `bytes` is a JSON error answer with one of plain characters.
fn error_code(bytes: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct ErrorAnswer {
        error: String,
    }
    let code = serde_json::from_slice::<ErrorAnswer>(bytes).ok()?.error;
    (!code.is_empty()
        && code.len() <= MAX_ERROR_CODE
        && code
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-'))
    .then_some(code)
}

/// The revocation endpoint as a URL, if it may receive the client secret: `https://`, or
/// `http://` on loopback, with a host and no user info or fragment.
fn endpoint_url(endpoint: &str) -> Result<reqwest::Url, String> {
    configured_endpoint(
        endpoint,
        "revocation endpoint",
        "it would receive the client secret",
    )
}

/// The configured `what` endpoint as a URL: `https://`, or `http://` on loopback (`why`
/// says why, for the refusal), with a host and no user info or fragment.
pub(super) fn configured_endpoint(
    endpoint: &str,
    what: &str,
    why: &str,
) -> Result<reqwest::Url, String> {
    let url =
        reqwest::Url::parse(endpoint).map_err(|_| format!("the configured {what} is not a URL"))?;
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => return Err(format!("the configured {what} has no host")),
    };
    let scheme_ok = url.scheme() == "https" || (url.scheme() == "http" && loopback);
    if !scheme_ok {
        return Err(format!(
            "the configured {what} is not https:// (plain http:// only on loopback); {why}"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() || url.fragment().is_some() {
        return Err(format!("the configured {what} has user info or a fragment"));
    }
    Ok(url)
}

impl HttpChannel {
    /// Disconnects an account: revokes its grant's tokens at the credential's revocation
    /// endpoint (RFC 7009), then removes the grant from `vault`'s grant store. A credential
    /// without a revocation endpoint has its grant removed here only
    /// ([`Revocation::NotConfigured`]).
    ///
    /// The request goes through this channel's trusted roots and clients, with its token
    /// endpoint timeout ([`HttpChannelBuilder::token_timeout`](crate::HttpChannelBuilder::token_timeout)).
    /// No refresh of the grant runs meanwhile, in this process or another sharing the store.
    ///
    /// # Errors
    ///
    /// - [`DisconnectError::NotRevoked`] when the provider is down, slow or answers an
    ///   error (the grant is NOT removed), unless the disconnect is
    ///   [forced](Disconnect::force);
    /// - [`DisconnectError::NotConnected`] when there is no such grant;
    /// - [`DisconnectError::NotOAuth`] when the credential is not an OAuth credential held
    ///   as the key says;
    /// - [`DisconnectError::RevokedNotRemoved`] when the store fails after the revocation;
    /// - [`DisconnectError::Vault`] when the vault is locked, keeps no grants or fails.
    pub async fn disconnect(
        &self,
        vault: &dyn Vault,
        disconnect: Disconnect,
    ) -> Result<Disconnected, DisconnectError> {
        let Disconnect { key, force } = disconnect;
        let credential = match vault.resolve(&key.credential).await {
            Ok(credential) => credential,
            Err(VaultError::NotFound(_)) => return Err(DisconnectError::NotOAuth { key }),
            Err(e) => return Err(DisconnectError::Vault(e)),
        };
        let Some(client) = credential.meta().kind.oauth().cloned() else {
            return Err(DisconnectError::NotOAuth { key });
        };
        if client.per_subject != key.subject.is_some() {
            return Err(DisconnectError::NotOAuth { key });
        }
        let store = Arc::clone(credential.grants().ok_or_else(|| {
            DisconnectError::Vault(VaultError::Backend(
                "this vault keeps no OAuth grants".into(),
            ))
        })?);
        // No refresh rotates the refresh token while it is revoked and the grant removed.
        let lock = self.refresh_lock(&key);
        let _refreshing = lock.lock().await;
        let held = hold_refresh_off_runtime(&store, &key)
            .await
            .ok_or_else(|| {
                DisconnectError::Vault(VaultError::Backend(
                    "the wait for other processes' refreshes was abandoned".into(),
                ))
            })?;
        let (grant, _hold) = match held {
            Ok(Some((grant, hold))) => (grant, Some(hold)),
            Ok(None) => (current(store.as_ref(), &key).await?, None),
            Err(e) => return Err(not_connected_or(key, e)),
        };
        if grant.version() == 0 && grant.refresh_token().is_none() {
            // A shared grant never stored: nothing to disconnect.
            return Err(DisconnectError::NotConnected { key });
        }
        let revocation = match &client.revocation_endpoint {
            None => Revocation::NotConfigured,
            Some(endpoint) => {
                match self
                    .revoke(&client, credential.secret().expose(), endpoint, &grant)
                    .await
                {
                    Ok(0) => Revocation::NothingHeld,
                    Ok(tokens) => Revocation::Revoked { tokens },
                    Err(reason) if force => Revocation::Failed { reason },
                    Err(reason) => {
                        tracing::warn!(
                            credential = key.credential.as_str(),
                            subject = key.subject.as_deref(),
                            "OAuth grant not revoked at the provider; kept"
                        );
                        return Err(DisconnectError::NotRevoked { key, reason });
                    }
                }
            }
        };
        match store.remove(&key).await {
            Ok(()) => {}
            Err(e) if matches!(revocation, Revocation::Revoked { .. }) => {
                return Err(DisconnectError::RevokedNotRemoved { key, source: e });
            }
            Err(e) => return Err(not_connected_or(key, e)),
        }
        tracing::info!(
            credential = key.credential.as_str(),
            subject = key.subject.as_deref(),
            revoked = matches!(revocation, Revocation::Revoked { .. }),
            "OAuth grant disconnected"
        );
        Ok(Disconnected { key, revocation })
    }

    /// Revokes the grant's refresh token, then its access token; how many were revoked.
    async fn revoke(
        &self,
        client: &OAuthClient,
        secret: &str,
        endpoint: &str,
        grant: &Grant,
    ) -> Result<usize, String> {
        let url = endpoint_url(endpoint)?;
        let mut revoked = 0;
        let tokens = [
            (Hint::RefreshToken, grant.refresh_token()),
            (Hint::AccessToken, grant.access_token()),
        ];
        for (hint, token) in tokens {
            let Some(token) = token else { continue };
            match self
                .revoke_one(client, secret, url.clone(), hint, token.expose())
                .await
            {
                Ok(()) => revoked += 1,
                Err(reason) if revoked > 0 => {
                    return Err(format!(
                        "the refresh token was revoked, the access token was not: {reason}"
                    ));
                }
                Err(reason) => return Err(reason),
            }
        }
        Ok(revoked)
    }

    /// One revocation request (RFC 7009 §2.1).
    async fn revoke_one(
        &self,
        client: &OAuthClient,
        secret: &str,
        url: reqwest::Url,
        hint: Hint,
        token: &str,
    ) -> Result<(), String> {
        let body = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("token", token);
            form.append_pair("token_type_hint", hint.as_str());
            if secret.is_empty() {
                form.append_pair("client_id", &client.client_id);
            }
            zeroize::Zeroizing::new(form.finish())
        };
        let http = self
            .client(self.inner.limits.connect_timeout)
            .map_err(|_| "the HTTP client could not be set up".to_owned())?;
        let mut request = http
            .post(url)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json")
            .timeout(self.inner.token_timeout)
            .body(body.as_str().to_owned());
        if let Some(value) = client_authorization(&client.client_id, secret)
            .map_err(|()| "the client secret cannot be sent".to_owned())?
        {
            request = request.header(AUTHORIZATION, value);
        }
        let timeout = || {
            format!(
                "the revocation endpoint did not answer within {} ms",
                self.inner.token_timeout.as_millis()
            )
        };
        let response = request.send().await.map_err(|e| {
            if e.is_timeout() {
                timeout()
            } else {
                "the revocation endpoint could not be reached".to_owned()
            }
        })?;
        let status = response.status();
        let bytes = read_capped(response).await.map_err(|timed_out| {
            if timed_out {
                timeout()
            } else {
                "the revocation endpoint's answer was cut off or too large".to_owned()
            }
        })?;
        if status.is_success() {
            return Ok(());
        }
        let code = error_code(&bytes);
        // A provider that revokes refresh tokens only (RFC 7009 §2.2.1): revoking the
        // refresh token revoked the grant's access tokens with it.
        if matches!(hint, Hint::AccessToken) && code.as_deref() == Some("unsupported_token_type") {
            return Ok(());
        }
        Err(match code {
            Some(code) => format!(
                "the revocation endpoint answered HTTP {} `{code}`",
                status.as_u16()
            ),
            None => format!(
                "the revocation endpoint answered HTTP {} without an OAuth error",
                status.as_u16()
            ),
        })
    }
}

async fn current(store: &dyn GrantStore, key: &GrantKey) -> Result<Grant, DisconnectError> {
    store
        .current(key)
        .await
        .map_err(|e| not_connected_or(key.clone(), e))
}

fn not_connected_or(key: GrantKey, e: VaultError) -> DisconnectError {
    match e {
        VaultError::NotFound(_) => DisconnectError::NotConnected { key },
        e => DisconnectError::Vault(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_error_codes_are_quoted() {
        assert_eq!(
            error_code(br#"{"error":"invalid_client"}"#).as_deref(),
            Some("invalid_client")
        );
        assert_eq!(error_code(br#"{"error":"<script>"}"#), None);
        assert_eq!(error_code(b"<html>down</html>"), None);
        assert_eq!(error_code(&[b'x'; 10]), None);
    }

    #[test]
    fn the_endpoint_is_https_or_loopback_http_without_user_info() {
        assert!(endpoint_url("https://id.example.com/revoke").is_ok());
        assert!(endpoint_url("http://127.0.0.1:8080/token/revocation").is_ok());
        assert!(endpoint_url("http://localhost/revoke").is_ok());
        assert!(endpoint_url("http://[::1]/revoke").is_ok());
        for bad in [
            "http://id.example.com/revoke",
            "https://user:pw@id.example.com/revoke",
            "https://id.example.com/revoke#x",
            "ftp://id.example.com/revoke",
            "not a url",
        ] {
            assert!(endpoint_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_sentences_say_whether_the_grant_was_removed_and_revoked() {
        let key = GrantKey::for_subject("github", "alice");
        let forced = Disconnected {
            key: key.clone(),
            revocation: Revocation::Failed {
                reason: "the revocation endpoint could not be reached".into(),
            },
        };
        assert_eq!(
            forced.to_string(),
            "disconnected the `github` account of subject `alice`: removed from the vault because the removal was forced, but NOT revoked at the provider (the revocation endpoint could not be reached); its tokens may stay valid there until they expire or the user revokes the access at the provider"
        );
        let unconfigured = Disconnected {
            key: GrantKey::shared("crm"),
            revocation: Revocation::NotConfigured,
        };
        assert_eq!(
            unconfigured.to_string(),
            "disconnected the shared grant of `crm`: removed from the vault; not revoked at the provider: no revocation endpoint configured"
        );
        let kept = DisconnectError::NotRevoked {
            key,
            reason: "the revocation endpoint could not be reached".into(),
        };
        assert_eq!(
            kept.to_string(),
            "the `github` account of subject `alice` was not revoked at the provider (the revocation endpoint could not be reached); the grant was NOT removed; disconnect again later, or force its removal"
        );
    }
}
