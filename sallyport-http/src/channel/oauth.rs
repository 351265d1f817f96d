//! OAuth 2.0 access tokens at send time: read the grant from the vault's grant store, use
//! its access token while it is valid beyond the refresh margin, else ask the credential's
//! token endpoint for a new one and store it by compare-and-set on the grant's version.
//!
//! A credential held for each subject resolves (in the executor) for the session's subject:
//! its grant is that subject's ([`Credential::grant_key`]), refreshed, marked for
//! reconnection and refused on its own; a refusal names the account the host must have the
//! user connect ([`ConnectNeeded`]), never a URL.
//!
//! One refresh at a time per grant, across processes too: within a process a lock per
//! grant (credential and subject), and across the processes that share the vault its
//! [`GrantStore::hold_refresh`] (the file vault locks `<path>.refresh`), held across the
//! token request and the write of its answer. The grant is read again under both, so a
//! process that waited uses the token another one just stored. Providers that rotate
//! refresh tokens with reuse detection (a refresh token presented twice revokes the grant)
//! therefore see each refresh token once.
//!
//! # Disconnecting an account
//!
//! [`HttpChannel::disconnect`] revokes a grant at the credential's revocation endpoint
//! (RFC 7009) and removes it from the store ([`Disconnect`], [`Disconnected`]); a provider
//! that does not revoke leaves the grant in place unless the disconnect is forced.
//!
//! # Connecting an account
//!
//! [`HttpChannel::connect`] starts the authorization code grant with PKCE S256 and a
//! `state` ([`Connect`], [`PendingConnect`]); [`HttpChannel::finish_connect`] checks the
//! redirect, exchanges the code and stores the grant ([`Connected`]).
//!
//! # Documented defaults
//!
//! - **Refresh margin**: a token is refreshed when less than [`REFRESH_MARGIN`] (30 s) of
//!   its life is left, or less than a third of the lifetime it was issued with, whichever is
//!   shorter (so tokens of a few seconds are not refreshed on every call).
//! - **Whole seconds**: `expires_in` counts whole seconds, and providers count a token's
//!   expiry from their own whole-second clock (oidc-provider, a JWT's `exp`): a token issued
//!   at 10.9 s with `expires_in: 2` is refused from 12.0 s on, 1.1 s later. So a token is
//!   taken to expire [`EXPIRY_ROUNDING`] (1 s) before `expires_in` says (half its lifetime
//!   for a token of one second), and the refresh margin applies to what is left.
//! - **No `expires_in`**: a token issued without one is taken to live
//!   [`DEFAULT_LIFETIME`] (5 minutes); an upstream's `401` before then makes the next use
//!   refresh it.
//! - **No new refresh token**: a refresh answered without a `refresh_token` keeps the old
//!   one (RFC 6749 §6 lets the provider keep it).
//! - **Token endpoint timeout**: [`HttpChannelBuilder::token_timeout`](super::HttpChannelBuilder::token_timeout),
//!   10 s by default.
//!
//! # Refusals
//!
//! Nothing is sent upstream without a valid token. A provider that refuses the grant for
//! good (`invalid_grant`, `invalid_client`, `unauthorized_client`) marks the grant as
//! needing reconnection ([`GrantUpdate::Reconnect`]): every later call is refused at once
//! with `credential_unavailable`, without asking the provider again, until a human
//! connects the account (or replaces a client-credentials secret). Anything else that goes
//! wrong (the endpoint down, slow, answering garbage or HTML) refuses this call only.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use sallyport_core::code::RefusalCode;
use sallyport_core::outcome::{ConnectNeeded, Refusal};
use sallyport_core::vault::{
    Credential, CredentialKind, Grant, GrantKey, GrantStore, GrantUpdate, OAuthClient, RefreshHold,
    Replaced, Secret, VaultError,
};
use serde::Deserialize;

use super::HttpChannel;

mod connect;
mod revoke;

pub use self::connect::{
    Connect, ConnectError, Connected, PendingConnect, code_challenge, random_token,
};
pub use self::revoke::{Disconnect, DisconnectError, Disconnected, Revocation};

/// A token is refreshed when less than this is left of its life (or less than a third of
/// its issued lifetime, whichever is shorter).
pub const REFRESH_MARGIN: Duration = Duration::from_secs(30);

/// The lifetime assumed for an access token issued without `expires_in`.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);

/// How much earlier than its `expires_in` says a token is taken to expire: a provider counts
/// the lifetime from its own clock's whole second, so the token may be refused up to a
/// second before `issued_at + expires_in` (a token of one second is taken to live half of
/// it).
pub const EXPIRY_ROUNDING: Duration = Duration::from_secs(1);

/// The lifetime a token issued with `expires_in` seconds is used for: [`EXPIRY_ROUNDING`]
/// less, and at least half of it.
fn provider_lifetime(expires_in: u64) -> Duration {
    let stated = Duration::from_secs(expires_in);
    stated.saturating_sub(EXPIRY_ROUNDING).max(stated / 2)
}

/// The largest token endpoint answer read.
const MAX_TOKEN_RESPONSE: usize = 64 * 1024;

/// One refresh at a time per grant in this process: grant → its refresh lock.
pub(super) type RefreshLocks = std::sync::Mutex<HashMap<GrantKey, Arc<tokio::sync::Mutex<()>>>>;

/// An access token to attach, and the grant version it belongs to.
pub(crate) struct AccessToken {
    pub(crate) header: HeaderValue,
    pub(crate) token: Secret,
    pub(crate) version: u64,
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessToken")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

fn unavailable(reason: String) -> Refusal {
    Refusal::new(RefusalCode::CredentialUnavailable, reason)
}

/// The margin before expiry at which `grant`'s token is refreshed.
pub(crate) fn margin(grant: &Grant) -> Duration {
    REFRESH_MARGIN.min(grant.lifetime() / 3)
}

fn vault_refusal(key: &GrantKey, e: &VaultError) -> Refusal {
    let name = key.credential.as_str();
    match e {
        VaultError::Locked => Refusal::new(
            RefusalCode::VaultLocked,
            "the credential vault is locked; nothing was sent",
        ),
        VaultError::NotFound(_) if key.subject.is_some() => unavailable(format!(
            "the user has not connected their `{name}` account; nothing was sent; ask them to connect it"
        ))
        .with_connect(ConnectNeeded::new(name, key.subject.clone(), false)),
        VaultError::NotFound(_) => unavailable(format!(
            "credential `{name}` has no OAuth grant in the vault; nothing was sent"
        )),
        _ => unavailable(format!(
            "the OAuth grant of credential `{name}` could not be read or stored; nothing was sent"
        )),
    }
}

fn reconnect_refusal(key: &GrantKey, reason: &str) -> Refusal {
    let name = key.credential.as_str();
    match &key.subject {
        Some(subject) => unavailable(format!(
            "the user's `{name}` account must be connected again ({reason}); nothing was sent; ask them to reconnect it"
        ))
        .with_connect(ConnectNeeded::new(name, Some(subject.clone()), true)),
        None => unavailable(format!(
            "credential `{name}` needs reconnecting: {reason}; a human must connect the account again (or replace the client secret); nothing was sent"
        )),
    }
}

fn bearer(token: &Secret) -> Result<HeaderValue, ()> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(drop)?;
    value.set_sensitive(true);
    Ok(value)
}

/// The grant's access token, if it is valid beyond the refresh margin and not of version
/// `stale`.
fn usable(
    key: &GrantKey,
    grant: &Grant,
    stale: Option<u64>,
) -> Result<Option<AccessToken>, Refusal> {
    usable_for(key, grant, stale, margin(grant))
}

/// The grant's access token, if it is valid `margin` from now and not of version `stale`.
fn usable_for(
    key: &GrantKey,
    grant: &Grant,
    stale: Option<u64>,
    margin: Duration,
) -> Result<Option<AccessToken>, Refusal> {
    let name = key.credential.as_str();
    if let Some(reason) = grant.reconnect_reason() {
        return Err(reconnect_refusal(key, reason));
    }
    if stale == Some(grant.version()) || !grant.fresh_at(SystemTime::now(), margin) {
        return Ok(None);
    }
    let Some(token) = grant.access_token() else {
        return Ok(None);
    };
    let header = bearer(token).map_err(|()| {
        unavailable(format!(
            "credential `{name}` holds an access token that cannot be sent in a header; nothing was sent"
        ))
    })?;
    Ok(Some(AccessToken {
        header,
        token: token.clone(),
        version: grant.version(),
    }))
}

/// Why the token endpoint gave no token.
enum TokenFailure {
    /// The provider refused the grant or the client for good: reconnect.
    Refused(String),
    /// Anything else: this call is refused, the next one asks again.
    Failed(String),
}

/// A token endpoint's successful answer (RFC 6749 §5.1).
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    token_type: String,
    #[serde(default)]
    expires_in: Option<serde_json::Value>,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    scope: Option<String>,
}

/// A token endpoint's error answer (RFC 6749 §5.2).
#[derive(Deserialize)]
struct TokenError {
    error: String,
}

impl HttpChannel {
    fn refresh_lock(&self, key: &GrantKey) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .inner
            .refreshing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Arc::clone(locks.entry(key.clone()).or_default())
    }

    /// The access token to attach for `credential`: the stored one while valid beyond the
    /// margin and not of grant version `stale` (the version whose token an upstream just
    /// refused), else a new one from the token endpoint.
    pub(crate) async fn access_token(
        &self,
        credential: &Credential,
        stale: Option<u64>,
    ) -> Result<AccessToken, Refusal> {
        let meta = credential.meta();
        let name = meta.name.as_str();
        let store = credential.grants().ok_or_else(|| {
            unavailable(format!(
                "credential `{name}` is an OAuth credential, and its vault keeps no OAuth grants; nothing was sent"
            ))
        })?;
        let key = credential.grant_key();
        let grant = store
            .current(&key)
            .await
            .map_err(|e| vault_refusal(&key, &e))?;
        if let Some(token) = usable(&key, &grant, stale)? {
            return Ok(token);
        }
        let lock = self.refresh_lock(&key);
        let _refreshing = lock.lock().await;
        // Other processes on the same store refresh one at a time too: the store's hold is
        // kept across the token request and the write of its answer. Under it, the grant is
        // read again: another call, here or in another process, may have refreshed while
        // this one waited.
        let held = hold_refresh_off_runtime(store, &key)
            .await
            .ok_or_else(|| {
                unavailable(format!(
                    "the refresh of credential `{name}` could not wait for other processes; nothing was sent"
                ))
            })?
            .map_err(|e| vault_refusal(&key, &e))?;
        let (grant, _hold) = match held {
            Some((grant, hold)) => (grant, Some(hold)),
            None => (
                store
                    .current(&key)
                    .await
                    .map_err(|e| vault_refusal(&key, &e))?,
                None,
            ),
        };
        if let Some(token) = usable(&key, &grant, stale)? {
            return Ok(token);
        }
        self.refresh(credential, store.as_ref(), &key, &grant).await
    }

    async fn refresh(
        &self,
        credential: &Credential,
        store: &dyn GrantStore,
        key: &GrantKey,
        grant: &Grant,
    ) -> Result<AccessToken, Refusal> {
        let name = credential.meta().name.as_str();
        let issued_at = SystemTime::now();
        match self.request_token(credential, grant).await {
            Ok((access_token, lifetime, refresh_token)) => {
                tracing::debug!(
                    credential = name,
                    lifetime_s = lifetime.as_secs(),
                    rotated = refresh_token.is_some(),
                    "OAuth access token issued"
                );
                let update = GrantUpdate::Issued {
                    access_token,
                    issued_at,
                    expires_at: issued_at + lifetime,
                    refresh_token,
                };
                let now = store_issued(store, key, grant, update)
                    .await
                    .map_err(|e| vault_refusal(key, &e))?
                    .ok_or_else(|| {
                        unavailable(format!(
                            "the OAuth grant of credential `{name}` could not be stored; nothing was sent"
                        ))
                    })?;
                // The token just issued is used for this call while it is valid at all: the
                // margin says when to refresh ahead of expiry, and a refresh that took most
                // of a short lifetime (the provider or the store slow under load) has just
                // done that. Its life was counted from before the request was sent.
                usable_for(key, &now, None, Duration::ZERO)?.ok_or_else(|| {
                    unavailable(format!(
                        "the token endpoint of credential `{name}` issued a token that expired before it could be used; nothing was sent"
                    ))
                })
            }
            Err(TokenFailure::Refused(reason)) => {
                tracing::warn!(
                    credential = name,
                    subject = key.subject.as_deref(),
                    "OAuth grant refused by the provider; reconnection needed"
                );
                // Marked even when another writer changed the grant meanwhile only if it
                // still is the grant that was refused.
                let _ = store
                    .replace(
                        key,
                        grant.version(),
                        GrantUpdate::Reconnect {
                            reason: reason.clone(),
                        },
                    )
                    .await;
                Err(reconnect_refusal(key, &reason))
            }
            Err(TokenFailure::Failed(reason)) => {
                tracing::info!(credential = name, "OAuth token endpoint failed");
                Err(unavailable(format!(
                    "no access token for credential `{name}`: {reason}; nothing was sent; the call may be made again later"
                )))
            }
        }
    }

    /// Marks the token of grant `version` as refused by an upstream, so the next call
    /// refreshes it. Failures are ignored: the next call then finds the token refused again.
    pub(crate) async fn token_refused(&self, credential: &Credential, version: u64) {
        if let Some(store) = credential.grants() {
            let key = credential.grant_key();
            let _ = store.replace(&key, version, GrantUpdate::Expired).await;
        }
    }

    /// One request to the token endpoint.
    async fn request_token(
        &self,
        credential: &Credential,
        grant: &Grant,
    ) -> Result<(Secret, Duration, Option<Secret>), TokenFailure> {
        let meta = credential.meta();
        let (client, refresh) = match &meta.kind {
            CredentialKind::OAuthClientCredentials(c) => (c, false),
            CredentialKind::OAuthRefresh(c) => (c, true),
            _ => return Err(TokenFailure::Failed("not an OAuth credential".into())),
        };
        let secret = credential.secret().expose();
        let body = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            if refresh {
                let Some(refresh_token) = grant.refresh_token() else {
                    return Err(TokenFailure::Refused(
                        "the grant holds no refresh token".into(),
                    ));
                };
                form.append_pair("grant_type", "refresh_token");
                form.append_pair("refresh_token", refresh_token.expose());
            } else {
                form.append_pair("grant_type", "client_credentials");
            }
            if !client.scopes.is_empty() {
                form.append_pair("scope", &client.scopes.join(" "));
            }
            if secret.is_empty() {
                // A public client identifies itself in the body (RFC 6749 §2.3, §3.2.1).
                form.append_pair("client_id", &client.client_id);
            }
            zeroize::Zeroizing::new(form.finish())
        };
        let issued = self.post_token(client, secret, &body).await?;
        let refresh_token = issued.refresh_token.filter(|_| refresh);
        Ok((issued.access_token, issued.lifetime, refresh_token))
    }

    /// Posts `body` (a form) to `client`'s token endpoint, authenticated as the client
    /// ([`client_authorization`]), and reads the token answer: what a refresh, a client
    /// credentials grant and a connect's code exchange share.
    async fn post_token(
        &self,
        client: &OAuthClient,
        secret: &str,
        body: &str,
    ) -> Result<IssuedToken, TokenFailure> {
        let url = reqwest::Url::parse(&client.token_endpoint)
            .map_err(|_| TokenFailure::Failed("the token endpoint is not a URL".into()))?;
        let http = self
            .client(self.inner.limits.connect_timeout)
            .map_err(|_| TokenFailure::Failed("the HTTP client could not be set up".into()))?;
        let mut request = http
            .post(url)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json")
            .timeout(self.inner.token_timeout)
            .body(body.to_owned());
        if let Some(value) = client_authorization(&client.client_id, secret)
            .map_err(|()| TokenFailure::Failed("the client secret cannot be sent".into()))?
        {
            request = request.header(AUTHORIZATION, value);
        }
        let response = request.send().await.map_err(|e| {
            TokenFailure::Failed(if e.is_timeout() {
                format!(
                    "the token endpoint did not answer within {} ms",
                    self.inner.token_timeout.as_millis()
                )
            } else {
                "the token endpoint could not be reached".into()
            })
        })?;
        let status = response.status();
        let bytes = read_capped(response).await.map_err(|timeout| {
            TokenFailure::Failed(if timeout {
                format!(
                    "the token endpoint did not answer within {} ms",
                    self.inner.token_timeout.as_millis()
                )
            } else {
                "the token endpoint's answer was cut off or too large".into()
            })
        })?;
        if !status.is_success() {
            let error = serde_json::from_slice::<TokenError>(&bytes).ok();
            return Err(match error.as_ref().map(|e| e.error.as_str()) {
                Some(code @ ("invalid_grant" | "invalid_client" | "unauthorized_client")) => {
                    TokenFailure::Refused(format!("the provider answered `{code}`"))
                }
                Some(_) => TokenFailure::Failed(format!(
                    "the token endpoint refused the request (HTTP {})",
                    status.as_u16()
                )),
                None => TokenFailure::Failed(format!(
                    "the token endpoint answered HTTP {} without an OAuth error",
                    status.as_u16()
                )),
            });
        }
        let answer: TokenAnswer = serde_json::from_slice(&bytes).map_err(|_| {
            TokenFailure::Failed(
                "the token endpoint's answer is not an OAuth token response".into(),
            )
        })?;
        let access_token = Secret::new(answer.access_token);
        if access_token.expose().is_empty() || bearer(&access_token).is_err() {
            return Err(TokenFailure::Failed(
                "the token endpoint issued an access token that cannot be sent in a header".into(),
            ));
        }
        if !answer.token_type.eq_ignore_ascii_case("bearer") {
            return Err(TokenFailure::Failed(
                "the token endpoint issued a token that is not a bearer token".into(),
            ));
        }
        let lifetime = match answer.expires_in {
            None | Some(serde_json::Value::Null) => DEFAULT_LIFETIME,
            Some(serde_json::Value::Number(n)) if n.as_u64().is_some() => {
                provider_lifetime(n.as_u64().unwrap_or_default())
            }
            Some(serde_json::Value::String(s)) if s.parse::<u64>().is_ok() => {
                provider_lifetime(s.parse::<u64>().unwrap_or_default())
            }
            Some(_) => {
                return Err(TokenFailure::Failed(
                    "the token endpoint's `expires_in` is not a number of seconds".into(),
                ));
            }
        };
        let refresh_token = answer
            .refresh_token
            .filter(|t| !t.is_empty())
            .map(Secret::new);
        Ok(IssuedToken {
            access_token,
            lifetime,
            refresh_token,
            scope: answer.scope,
        })
    }
}

/// The store's refresh hold on `key` ([`GrantStore::hold_refresh`]), waited for off the async
/// runtime: it may block on another process's file lock or advisory lock. `None` when that
/// wait was abandoned (its blocking task did not finish). The refresh, a connect and a
/// disconnect all take it, after this process's refresh lock.
pub(super) async fn hold_refresh_off_runtime(
    store: &Arc<dyn GrantStore>,
    key: &GrantKey,
) -> Option<Result<Option<(Grant, RefreshHold)>, VaultError>> {
    let (store, key) = (Arc::clone(store), key.clone());
    tokio::task::spawn_blocking(move || store.hold_refresh(&key))
        .await
        .ok()
}

/// What a token endpoint issued.
struct IssuedToken {
    access_token: Secret,
    lifetime: Duration,
    refresh_token: Option<Secret>,
    /// The scopes granted, when the answer names them (RFC 6749 §5.1).
    scope: Option<String>,
}

/// Stores the tokens a refresh of `grant` bought, and returns the grant as stored (`None`
/// when the store answered neither stored nor changed).
///
/// The refresh ran under the grant's hold, but one writer does not take it: a call whose
/// token an upstream refused marks that token expired (`HttpChannel::token_refused`),
/// which moves the grant's version on while the token request is out. The provider has
/// already rotated the refresh token by then; dropping its answer would leave the store
/// holding the one just presented, and the next refresh would present it again (a reuse
/// the provider answers by revoking the grant). So while the grant still holds the refresh
/// token that was presented (and is not marked for reconnection), the answer is stored on
/// top of the change. A grant connected anew or marked meanwhile is left as it is.
async fn store_issued(
    store: &dyn GrantStore,
    key: &GrantKey,
    grant: &Grant,
    update: GrantUpdate,
) -> Result<Option<Grant>, VaultError> {
    let presented = grant.refresh_token().map(Secret::expose);
    let mut expected = grant.version();
    // A few marks at most can land during one token request; the bound only keeps a store
    // that never settles from looping.
    for _ in 0..8 {
        match store.replace(key, expected, update.clone()).await? {
            Replaced::Stored(now) => return Ok(Some(now)),
            Replaced::Changed(now)
                if now.reconnect_reason().is_none()
                    && now.refresh_token().map(Secret::expose) == presented =>
            {
                expected = now.version();
            }
            Replaced::Changed(now) => return Ok(Some(now)),
            _ => return Ok(None),
        }
    }
    Ok(None)
}

/// How a confidential client authenticates to the provider's endpoints:
/// `client_secret_basic`, both parts form-encoded first (RFC 6749 §2.3.1), marked sensitive;
/// `None` for a public client (empty secret), which names itself with `client_id` in the
/// body instead.
fn client_authorization(client_id: &str, secret: &str) -> Result<Option<HeaderValue>, ()> {
    if secret.is_empty() {
        return Ok(None);
    }
    let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let pair = zeroize::Zeroizing::new(format!("{}:{}", enc(client_id), enc(secret)));
    let mut value = HeaderValue::from_str(&format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair.as_bytes())
    ))
    .map_err(drop)?;
    value.set_sensitive(true);
    Ok(Some(value))
}

/// The body, up to [`MAX_TOKEN_RESPONSE`] bytes; `Err(true)` on a timeout, `Err(false)`
/// when cut off or too large.
async fn read_capped(mut response: reqwest::Response) -> Result<zeroize::Zeroizing<Vec<u8>>, bool> {
    let mut body = zeroize::Zeroizing::new(Vec::with_capacity(
        MAX_TOKEN_RESPONSE.min(
            response
                .content_length()
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(4096),
        ),
    ));
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_TOKEN_RESPONSE {
                    return Err(false);
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(e.is_timeout()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{EXPIRY_ROUNDING, provider_lifetime};

    #[test]
    fn a_stated_lifetime_is_used_a_second_short_of_what_it_says() {
        assert_eq!(EXPIRY_ROUNDING, Duration::from_secs(1));
        // A provider on whole seconds refuses a 2 s token issued at x.9 from x+2.0 on.
        assert_eq!(provider_lifetime(2), Duration::from_secs(1));
        assert_eq!(provider_lifetime(3600), Duration::from_secs(3599));
        // A one-second token is used for half of it; none at all stays none.
        assert_eq!(provider_lifetime(1), Duration::from_millis(500));
        assert_eq!(provider_lifetime(0), Duration::ZERO);
    }
}
