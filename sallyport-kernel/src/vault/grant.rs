//! OAuth 2.0 grants: the tokens a credential of kind `oauth_client_credentials` or
//! `oauth_refresh` holds beyond its client secret, and the [`GrantStore`] that keeps them.
//!
//! A credential's [`CredentialMeta`](super::CredentialMeta) (client id, token endpoint,
//! scopes, binding) and client secret change only when a human changes them; its grant
//! changes on every token refresh. So a grant has a version of its own, and a store replaces
//! it only when the caller read the current version ([`GrantStore::replace`]): the
//! compare-and-set that keeps a rotated refresh token from being presented twice. The
//! credential's own version stays as it is across refreshes, so a call in flight is not
//! refused as "replaced during the call" when another call refreshed the token.
//!
//! How an update changes a grant is written once, here ([`Grant::apply`]); every store
//! applies it the same way.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::{CredentialKind, Secret, VaultError, retire};
use crate::scrub::Scrubber;

/// Which grant: a credential's shared one, or the one a subject (end user) granted for a
/// credential held for each subject ([`OAuthClient::per_subject`](super::OAuthClient::per_subject)).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub struct GrantKey {
    /// The credential name actions bind to.
    pub credential: String,
    /// The end user the grant belongs to; `None` for the credential's one shared grant.
    pub subject: Option<String>,
}

impl GrantKey {
    /// The one grant of credential `name`, shared by every caller.
    pub fn shared(name: impl Into<String>) -> Self {
        Self {
            credential: name.into(),
            subject: None,
        }
    }

    /// The grant `subject` gave for credential `name` (a credential held for each subject).
    pub fn for_subject(name: impl Into<String>, subject: impl Into<String>) -> Self {
        Self {
            credential: name.into(),
            subject: Some(subject.into()),
        }
    }
}

/// What a store tells about one grant: names, scopes, versions and times, never a token.
/// What `list` returns, for `sallyport credentials list` and a host's "connected accounts"
/// page.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct GrantSummary {
    /// The credential.
    pub credential: String,
    /// The end user; `None` for a shared grant.
    pub subject: Option<String>,
    /// The scopes the provider granted, when the store recorded them (an account connected
    /// through [`GrantUpdate::Authorized`]); else the scopes the credential asks the provider
    /// for (its configuration; empty for the client's defaults).
    pub scopes: Vec<String>,
    /// Whether [`scopes`](Self::scopes) are the scopes the provider granted (`true`) or the
    /// credential's configuration (`false`, a grant stored without them).
    pub scopes_granted: bool,
    /// The grant's version (incremented by every stored update).
    pub version: u64,
    /// When the current access token expires, in milliseconds since the Unix epoch; `None`
    /// without one.
    pub expires_at_ms: Option<u64>,
    /// Whether a refresh token is held.
    pub refresh_token: bool,
    /// Why the account must be connected again, if so.
    pub reconnect: Option<String>,
}

impl GrantSummary {
    /// A summary from what a store keeps beside a sealed grant (for stores that list grants
    /// without opening them): `expires_at_ms` is `None` without an access token.
    pub fn new(
        key: &GrantKey,
        scopes: Vec<String>,
        version: u64,
        expires_at_ms: Option<u64>,
        refresh_token: bool,
        reconnect: Option<String>,
    ) -> Self {
        Self {
            credential: key.credential.clone(),
            subject: key.subject.clone(),
            scopes,
            scopes_granted: false,
            version,
            expires_at_ms,
            refresh_token,
            reconnect,
        }
    }

    /// The summary with the scopes the provider granted, as a store recorded them beside
    /// the grant.
    #[must_use]
    pub fn with_granted_scopes(mut self, scopes: Vec<String>) -> Self {
        self.scopes = scopes;
        self.scopes_granted = true;
        self
    }

    /// The summary of `grant`, the grant of `key` for a credential asking for `scopes`: the
    /// scopes the grant recorded as granted, else `scopes`.
    pub fn of(key: &GrantKey, scopes: &[String], grant: &Grant) -> Self {
        Self {
            credential: key.credential.clone(),
            subject: key.subject.clone(),
            scopes: grant.scopes().unwrap_or(scopes).to_vec(),
            scopes_granted: grant.scopes().is_some(),
            version: grant.version(),
            expires_at_ms: grant.access_token().map(|_| grant.expires_at_ms()),
            refresh_token: grant.refresh_token().is_some(),
            reconnect: grant.reconnect_reason().map(str::to_owned),
        }
    }
}

/// The tokens of one grant, with its version. Not `Serialize`; `Debug` prints the version,
/// the expiry and whether each token is present, never a value.
#[derive(Clone, Default)]
pub struct Grant {
    version: u64,
    access_token: Option<Secret>,
    issued_at_ms: u64,
    expires_at_ms: u64,
    refresh_token: Option<Secret>,
    reconnect: Option<String>,
    scopes: Option<Vec<String>>,
}

impl fmt::Debug for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("Grant");
        out.field("version", &self.version)
            .field("access_token", &self.access_token.is_some())
            .field("expires_at_ms", &self.expires_at_ms)
            .field("refresh_token", &self.refresh_token.is_some())
            .field("reconnect", &self.reconnect);
        // Only when recorded, so a grant without them prints as it always did.
        if let Some(scopes) = &self.scopes {
            out.field("scopes", scopes);
        }
        out.finish_non_exhaustive()
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

impl Grant {
    /// An empty grant at version 0: no access token, no refresh token.
    pub fn new() -> Self {
        Self::default()
    }

    /// A grant as a store read it back (for store implementations): `expires_at_ms` and
    /// `issued_at_ms` are milliseconds since the Unix epoch, 0 without an access token.
    pub fn from_parts(
        version: u64,
        access_token: Option<Secret>,
        issued_at_ms: u64,
        expires_at_ms: u64,
        refresh_token: Option<Secret>,
        reconnect: Option<String>,
    ) -> Self {
        Self {
            version,
            access_token,
            issued_at_ms,
            expires_at_ms,
            refresh_token,
            reconnect,
            scopes: None,
        }
    }

    /// The grant with the scopes the provider granted, as a store read them back (for store
    /// implementations; `None` for a grant stored without them).
    #[must_use]
    pub fn with_scopes(mut self, scopes: Option<Vec<String>>) -> Self {
        self.scopes = scopes;
        self
    }

    /// The scopes the provider granted, when recorded (an account connected through
    /// [`GrantUpdate::Authorized`]); `None` for grants stored without them.
    pub fn scopes(&self) -> Option<&[String]> {
        self.scopes.as_deref()
    }

    /// Incremented by every stored update; 0 for a credential that never had one.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The current access token, if one was issued (it may have expired).
    pub fn access_token(&self) -> Option<&Secret> {
        self.access_token.as_ref()
    }

    /// The refresh token, for `oauth_refresh` credentials.
    pub fn refresh_token(&self) -> Option<&Secret> {
        self.refresh_token.as_ref()
    }

    /// When the access token was issued, in milliseconds since the Unix epoch (0 without one).
    pub fn issued_at_ms(&self) -> u64 {
        self.issued_at_ms
    }

    /// When the access token expires, in milliseconds since the Unix epoch (0 without one).
    pub fn expires_at_ms(&self) -> u64 {
        self.expires_at_ms
    }

    /// When the access token expires; `None` without one.
    pub fn expires_at(&self) -> Option<SystemTime> {
        self.access_token
            .as_ref()
            .map(|_| from_unix_ms(self.expires_at_ms))
    }

    /// The lifetime the access token was issued with.
    pub fn lifetime(&self) -> Duration {
        Duration::from_millis(self.expires_at_ms.saturating_sub(self.issued_at_ms))
    }

    /// Why a human must connect the account again (a refresh was refused for good), if so.
    /// While set, nothing asks the token endpoint and every call is refused.
    pub fn reconnect_reason(&self) -> Option<&str> {
        self.reconnect.as_deref()
    }

    /// Whether the access token is present and still valid `margin` from `now`.
    pub fn fresh_at(&self, now: SystemTime, margin: Duration) -> bool {
        self.access_token.is_some()
            && self.reconnect.is_none()
            && unix_ms(now).saturating_add(u64::try_from(margin.as_millis()).unwrap_or(u64::MAX))
                < self.expires_at_ms
    }

    /// Every secret value the grant holds, for the scrubber.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.access_token
            .iter()
            .chain(&self.refresh_token)
            .map(Secret::expose)
    }

    /// The grant after `update`, at the next version, and the secret values it replaced
    /// (which the store keeps known to its scrubber). The rule every store applies.
    pub fn apply(&self, update: GrantUpdate) -> (Grant, Vec<Secret>) {
        let mut next = self.clone();
        next.version = self.version + 1;
        let mut retired = Vec::new();
        match update {
            GrantUpdate::Issued {
                access_token,
                issued_at,
                expires_at,
                refresh_token,
            } => {
                retired.extend(next.access_token.replace(access_token));
                next.issued_at_ms = unix_ms(issued_at);
                next.expires_at_ms = unix_ms(expires_at);
                // A refresh that returns no new refresh token keeps the old one (RFC 6749
                // §6: the server *may* issue a new one).
                if let Some(refresh) = refresh_token {
                    retired.extend(next.refresh_token.replace(refresh));
                }
                next.reconnect = None;
            }
            GrantUpdate::Expired => {
                next.expires_at_ms = next.issued_at_ms.min(next.expires_at_ms);
            }
            GrantUpdate::Reconnect { reason } => {
                retired.extend(next.access_token.take());
                next.issued_at_ms = 0;
                next.expires_at_ms = 0;
                next.reconnect = Some(reason);
            }
            GrantUpdate::Connected { refresh_token } => {
                retired.extend(next.access_token.take());
                retired.extend(next.refresh_token.replace(refresh_token));
                next.issued_at_ms = 0;
                next.expires_at_ms = 0;
                next.reconnect = None;
                next.scopes = None;
            }
            GrantUpdate::Authorized {
                refresh_token,
                access_token,
                issued_at,
                expires_at,
                scopes,
            } => {
                retired.extend(next.access_token.replace(access_token));
                retired.extend(next.refresh_token.replace(refresh_token));
                next.issued_at_ms = unix_ms(issued_at);
                next.expires_at_ms = unix_ms(expires_at);
                next.reconnect = None;
                next.scopes = Some(scopes);
            }
        }
        (next, retired)
    }
}

/// A change to a grant.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum GrantUpdate {
    /// The token endpoint issued an access token (and perhaps a new refresh token; `None`
    /// keeps the old one).
    Issued {
        /// The new access token.
        access_token: Secret,
        /// When it was issued.
        issued_at: SystemTime,
        /// When it expires.
        expires_at: SystemTime,
        /// The rotated refresh token, when the provider sent one.
        refresh_token: Option<Secret>,
    },
    /// An upstream refused the access token before its expiry: the next call refreshes.
    Expired,
    /// The provider refused the grant for good (`invalid_grant`, revoked): every call is
    /// refused until a human connects the account again.
    Reconnect {
        /// Why, in a sentence the host can show.
        reason: String,
    },
    /// A human connected the account: a new refresh token, no access token yet.
    Connected {
        /// The refresh token the authorization code was exchanged for.
        refresh_token: Secret,
    },
    /// A human connected the account and the authorization code was exchanged: the tokens
    /// the provider issued and the scopes it granted (what `list` then shows).
    Authorized {
        /// The refresh token.
        refresh_token: Secret,
        /// The first access token.
        access_token: Secret,
        /// When it was issued.
        issued_at: SystemTime,
        /// When it expires.
        expires_at: SystemTime,
        /// The scopes granted: the token answer's `scope`, else the scopes asked for
        /// (RFC 6749 §5.1).
        scopes: Vec<String>,
    },
}

/// What [`GrantStore::replace`] did.
#[derive(Debug)]
#[non_exhaustive]
pub enum Replaced {
    /// The update was stored; the grant as it is now.
    Stored(Grant),
    /// Someone else changed the grant since the caller read it; nothing was stored. The
    /// grant as it is now, to use instead.
    Changed(Grant),
}

/// Keeps OAuth grants and replaces them by compare-and-set on their version.
///
/// Implemented by `MemoryVault` and `FileVault` for their own credentials (the file vault
/// writes the file atomically under its lock, so a crash never loses it); a vault hands its
/// store to the channel with every OAuth credential it resolves
/// ([`Credential::grants`](super::Credential::grants)).
#[async_trait]
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not keep OAuth grants",
    note = "implement `sallyport_core::vault::GrantStore`, or use `MemoryVault` or `FileVault`"
)]
pub trait GrantStore: Send + Sync + fmt::Debug + 'static {
    /// The grant as it is now (version 0 and empty when none was stored yet).
    ///
    /// # Errors
    ///
    /// [`VaultError::Locked`], [`VaultError::NotFound`] (no such OAuth credential, or a
    /// subject this store does not keep), or a backend failure.
    async fn current(&self, key: &GrantKey) -> Result<Grant, VaultError>;

    /// Applies `update` ([`Grant::apply`]) if the grant is still at `expected_version`;
    /// otherwise stores nothing and returns the current grant. A subject's grant that does
    /// not exist yet is at version 0: `replace(key, 0, …)` creates it (how a connected
    /// account is stored).
    ///
    /// # Errors
    ///
    /// As [`GrantStore::current`] (`NotFound` also for a subject's grant removed since it
    /// was read); a failed write leaves the stored grant as it was.
    async fn replace(
        &self,
        key: &GrantKey,
        expected_version: u64,
        update: GrantUpdate,
    ) -> Result<Replaced, VaultError>;

    /// Takes the right to refresh `key` against every other process that shares this store,
    /// waiting while another one holds it, and returns the grant as the store holds it now
    /// (read under the hold, so a refresh another process finished meanwhile is seen).
    ///
    /// Providers that rotate refresh tokens revoke the whole grant when an old one is
    /// presented again, so processes sharing a grant must never refresh it at the same
    /// time: the HTTP channel holds this across the token request and the
    /// [`GrantStore::replace`] that stores its answer. It may block (the channel calls it on
    /// tokio's blocking pool). `None` (the default) means the store is not shared between
    /// processes (`MemoryVault`): one process's own lock is enough.
    ///
    /// # Errors
    ///
    /// As [`GrantStore::current`], or the hold cannot be taken.
    fn hold_refresh(&self, key: &GrantKey) -> Result<Option<(Grant, RefreshHold)>, VaultError> {
        let _ = key;
        Ok(None)
    }

    /// Stores `update` whatever version the grant is at now (creating a subject's grant
    /// that does not exist yet), and returns the grant as stored: what a human's "connect
    /// the account" stores, and what a test or a host puts in.
    ///
    /// # Errors
    ///
    /// As [`GrantStore::replace`], or [`VaultError::Backend`] when other writers changed
    /// the grant eight times in a row while this one tried.
    async fn put(&self, key: &GrantKey, update: GrantUpdate) -> Result<Grant, VaultError> {
        for _ in 0..8 {
            let version = match self.current(key).await {
                Ok(grant) => grant.version(),
                Err(VaultError::NotFound(_)) if key.subject.is_some() => 0,
                Err(e) => return Err(e),
            };
            match self.replace(key, version, update.clone()).await {
                Ok(Replaced::Stored(grant)) => return Ok(grant),
                // Changed meanwhile, or a subject's grant removed meanwhile: read again.
                // (`NotFound` at version 0 means the credential takes no such grant.)
                Ok(_) => {}
                Err(VaultError::NotFound(_)) if version != 0 => {}
                Err(e) => return Err(e),
            }
        }
        Err(VaultError::Backend(
            "the grant kept changing while it was being stored".into(),
        ))
    }

    /// Removes the grant of `key` (a subject's, or a credential's shared one); the
    /// credential stays. The built-in stores keep its tokens known to the scrubber.
    ///
    /// # Errors
    ///
    /// [`VaultError::NotFound`] when there is no such grant, [`VaultError::Locked`], or a
    /// backend failure; [`VaultError::Backend`] from a store that cannot remove grants (the
    /// default).
    async fn remove(&self, key: &GrantKey) -> Result<(), VaultError> {
        let _ = key;
        Err(VaultError::Backend(
            "this grant store cannot remove grants".into(),
        ))
    }

    /// Every grant the store holds, of `credential` only when given, sorted by credential
    /// and subject: subjects, scopes and expiry, never a token.
    ///
    /// # Errors
    ///
    /// [`VaultError::Locked`] or a backend failure; [`VaultError::Backend`] from a store
    /// that cannot list grants (the default).
    async fn list(&self, credential: Option<&str>) -> Result<Vec<GrantSummary>, VaultError> {
        let _ = credential;
        Err(VaultError::Backend(
            "this grant store cannot list grants".into(),
        ))
    }

    /// The tokens this store read or wrote in this process, for the scrubber of a vault
    /// that keeps its grants here ([`HostedGrants`]): `None` (the default) for a vault's own
    /// store, whose vault knows its grants itself.
    fn secrets(&self) -> Option<&GrantSecrets> {
        None
    }
}

/// The right to refresh one grant, held against every process that shares the store (see
/// [`GrantStore::hold_refresh`]); let go when dropped, and by the operating system when the
/// process dies, so a crash mid-refresh never leaves it held.
pub struct RefreshHold {
    _held: Box<dyn Send + Sync>,
}

impl RefreshHold {
    /// A hold that lasts as long as `held` does (a locked file, a database transaction's
    /// connection, …).
    pub fn new(held: impl Send + Sync + 'static) -> Self {
        Self {
            _held: Box::new(held),
        }
    }
}

impl fmt::Debug for RefreshHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RefreshHold")
    }
}

/// The token values a grant store kept outside the vault (PostgreSQL) read or wrote in this
/// process: the current ones of each grant it handed out, and the last
/// [`RETIRED_VALUES`](super::RETIRED_VALUES) it replaced or removed. A vault that keeps its
/// grants in such a store extends its scrubber with them ([`GrantSecrets::scrubber_over`]),
/// so a token read back from the store is redacted like one the vault holds itself.
///
/// `Debug` prints how many values it knows, never one.
#[derive(Default)]
pub struct GrantSecrets {
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    current: BTreeMap<GrantKey, Vec<Secret>>,
    retired: Vec<Secret>,
    /// The last scrubber made: the vault's base, and it extended with every value here.
    made: Option<(Arc<Scrubber>, Arc<Scrubber>)>,
}

impl fmt::Debug for GrantSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("GrantSecrets")
            .field("grants", &seen.current.len())
            .field("retired", &seen.retired.len())
            .finish_non_exhaustive()
    }
}

impl GrantSecrets {
    /// Knows no value yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Notes `grant` as the grant of `key` now: its tokens become known, and the ones it
    /// replaced stay known as retired values.
    pub fn saw(&self, key: &GrantKey, grant: &Grant) {
        let now: Vec<&str> = grant.secrets().collect();
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let unchanged = seen
            .current
            .get(key)
            .is_some_and(|old| old.iter().map(Secret::expose).eq(now.iter().copied()));
        if unchanged {
            return;
        }
        let fresh = now.iter().map(|v| Secret::new(*v)).collect();
        if let Some(old) = seen.current.insert(key.clone(), fresh) {
            for value in old {
                if !now.contains(&value.expose()) {
                    retire(&mut seen.retired, value);
                }
            }
        }
        seen.made = None;
    }

    /// Notes that the grant of `key` was removed: its tokens stay known as retired values.
    pub fn removed(&self, key: &GrantKey) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = seen.current.remove(key) {
            for value in old {
                retire(&mut seen.retired, value);
            }
            seen.made = None;
        }
    }

    /// Whether `value` is one of the tokens known here (current or retired).
    pub fn knows(&self, value: &str) -> bool {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.current
            .values()
            .flatten()
            .chain(&seen.retired)
            .any(|s| s.expose() == value)
    }

    /// `base` (the vault's own scrubber) extended with every value known here; made again
    /// only when `base` or the values changed.
    pub fn scrubber_over(&self, base: Arc<Scrubber>) -> Arc<Scrubber> {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.current.values().all(Vec::is_empty) && seen.retired.is_empty() {
            return base;
        }
        if let Some((made_from, made)) = &seen.made
            && Arc::ptr_eq(made_from, &base)
        {
            return Arc::clone(made);
        }
        let made = Arc::new(
            base.extended(
                seen.current
                    .values()
                    .flatten()
                    .chain(&seen.retired)
                    .map(Secret::expose),
            ),
        );
        seen.made = Some((base, Arc::clone(&made)));
        made
    }
}

/// A grant store kept outside the vault, as the vault hands it out: every key is checked
/// against the vault's credentials first (an OAuth credential of that name, held for each
/// subject when the key names one, shared when it does not; [`VaultError::NotFound`]
/// otherwise), and [`GrantStore::list`] shows the scopes granted where the store recorded
/// them, else the scopes the vault's credential asks for. So a vault keeps its client secrets while the grants live where the fleet shares them
/// (`sallyport_postgres::PgGrantStore`), and the channel's refresh path is the same.
pub struct HostedGrants {
    store: Arc<dyn GrantStore>,
    kind_of: CredentialLookup,
}

/// How [`HostedGrants`] asks the vault for a credential's kind: `Ok(None)` when there is no
/// such credential, [`VaultError::Locked`] while the vault is locked.
type CredentialLookup =
    Arc<dyn Fn(&str) -> Result<Option<CredentialKind>, VaultError> + Send + Sync>;

impl fmt::Debug for HostedGrants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostedGrants")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl HostedGrants {
    /// `store`, checked against the credentials `kind_of` looks up by name (`Ok(None)` for
    /// no such credential).
    pub fn new(
        store: Arc<dyn GrantStore>,
        kind_of: impl Fn(&str) -> Result<Option<CredentialKind>, VaultError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            store,
            kind_of: Arc::new(kind_of),
        }
    }

    /// The store behind the check.
    pub fn store(&self) -> &Arc<dyn GrantStore> {
        &self.store
    }

    /// The scopes of the OAuth credential `key` names, when it takes a grant of that key.
    fn check(&self, key: &GrantKey) -> Result<Vec<String>, VaultError> {
        match (self.kind_of)(&key.credential)? {
            Some(kind) if kind.per_subject() == key.subject.is_some() => kind
                .oauth()
                .map(|client| client.scopes.clone())
                .ok_or_else(|| VaultError::NotFound(key.credential.clone())),
            _ => Err(VaultError::NotFound(key.credential.clone())),
        }
    }
}

#[async_trait]
impl GrantStore for HostedGrants {
    async fn current(&self, key: &GrantKey) -> Result<Grant, VaultError> {
        self.check(key)?;
        self.store.current(key).await
    }

    async fn replace(
        &self,
        key: &GrantKey,
        expected_version: u64,
        update: GrantUpdate,
    ) -> Result<Replaced, VaultError> {
        self.check(key)?;
        self.store.replace(key, expected_version, update).await
    }

    fn hold_refresh(&self, key: &GrantKey) -> Result<Option<(Grant, RefreshHold)>, VaultError> {
        self.check(key)?;
        self.store.hold_refresh(key)
    }

    async fn put(&self, key: &GrantKey, update: GrantUpdate) -> Result<Grant, VaultError> {
        self.check(key)?;
        self.store.put(key, update).await
    }

    async fn remove(&self, key: &GrantKey) -> Result<(), VaultError> {
        self.check(key)?;
        self.store.remove(key).await
    }

    /// The store's grants of credentials this vault holds with a kind that takes them, with
    /// the scopes granted where the store recorded them, else the scopes the vault's
    /// credential asks for.
    async fn list(&self, credential: Option<&str>) -> Result<Vec<GrantSummary>, VaultError> {
        let mut listed = self.store.list(credential).await?;
        let mut kept = Vec::with_capacity(listed.len());
        for mut summary in listed.drain(..) {
            let key = GrantKey {
                credential: summary.credential.clone(),
                subject: summary.subject.clone(),
            };
            match self.check(&key) {
                Ok(scopes) => {
                    // The scopes granted stay; a grant stored without them shows what this
                    // vault's credential asks for.
                    if !summary.scopes_granted {
                        summary.scopes = scopes;
                    }
                    kept.push(summary);
                }
                Err(VaultError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(kept)
    }

    fn secrets(&self) -> Option<&GrantSecrets> {
        self.store.secrets()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issued(access: &str, refresh: Option<&str>, lifetime_s: u64) -> GrantUpdate {
        let now = SystemTime::now();
        GrantUpdate::Issued {
            access_token: Secret::new(access),
            issued_at: now,
            expires_at: now + Duration::from_secs(lifetime_s),
            refresh_token: refresh.map(Secret::new),
        }
    }

    #[test]
    fn a_refresh_without_a_new_refresh_token_keeps_the_old_one() {
        let (g, _) = Grant::new().apply(GrantUpdate::Connected {
            refresh_token: Secret::new("rt-1"),
        });
        let (g, retired) = g.apply(issued("at-1", None, 60));
        assert_eq!(g.version(), 2);
        assert_eq!(g.refresh_token().map(Secret::expose), Some("rt-1"));
        assert!(retired.is_empty());
        let (g, retired) = g.apply(issued("at-2", Some("rt-2"), 60));
        assert_eq!(g.refresh_token().map(Secret::expose), Some("rt-2"));
        let old: Vec<&str> = retired.iter().map(Secret::expose).collect();
        assert_eq!(old, ["at-1", "rt-1"]);
    }

    #[test]
    fn freshness_counts_the_margin_and_an_expired_mark() {
        let (g, _) = Grant::new().apply(issued("at", None, 60));
        let now = SystemTime::now();
        assert!(g.fresh_at(now, Duration::from_secs(30)));
        assert!(!g.fresh_at(now, Duration::from_secs(61)));
        let (g, _) = g.apply(GrantUpdate::Expired);
        assert!(!g.fresh_at(now, Duration::ZERO));
        let (g, _) = g.apply(GrantUpdate::Reconnect {
            reason: "revoked".into(),
        });
        assert_eq!(g.reconnect_reason(), Some("revoked"));
        assert!(g.access_token().is_none());
    }

    #[test]
    fn grant_secrets_keep_current_and_replaced_tokens_and_remake_the_scrubber_only_on_change() {
        let seen = GrantSecrets::new();
        let base = Arc::new(Scrubber::new(["client-secret"]));
        assert!(Arc::ptr_eq(&seen.scrubber_over(Arc::clone(&base)), &base));
        let alice = GrantKey::for_subject("github", "alice");
        let (g1, _) = Grant::new().apply(issued("at-1", Some("rt-1"), 60));
        seen.saw(&alice, &g1);
        let made = seen.scrubber_over(Arc::clone(&base));
        assert!(made.covers("at-1") && made.covers("rt-1") && made.covers("client-secret"));
        // The same grant again: the same scrubber.
        seen.saw(&alice, &g1);
        assert!(Arc::ptr_eq(&seen.scrubber_over(Arc::clone(&base)), &made));
        // A refresh: the new tokens and the replaced ones.
        let (g2, _) = g1.apply(issued("at-2", None, 60));
        seen.saw(&alice, &g2);
        let remade = seen.scrubber_over(Arc::clone(&base));
        assert!(!Arc::ptr_eq(&remade, &made));
        for token in ["at-1", "at-2", "rt-1"] {
            assert!(remade.covers(token), "{token}");
        }
        seen.removed(&alice);
        assert!(seen.knows("at-2") && seen.knows("rt-1"));
        let debug = format!("{seen:?}");
        assert!(!debug.contains("at-") && !debug.contains("rt-"), "{debug}");
    }

    #[test]
    fn an_authorized_connect_holds_both_tokens_and_the_granted_scopes_until_a_plain_connect() {
        let (g, _) = Grant::new().apply(issued("at-0", Some("rt-0"), 60));
        assert_eq!(g.scopes(), None);
        let now = SystemTime::now();
        let (g, retired) = g.apply(GrantUpdate::Authorized {
            refresh_token: Secret::new("rt-1"),
            access_token: Secret::new("at-1"),
            issued_at: now,
            expires_at: now + Duration::from_secs(60),
            scopes: vec!["openid".into(), "api:read".into()],
        });
        assert_eq!(g.version(), 2);
        assert_eq!(g.access_token().map(Secret::expose), Some("at-1"));
        assert_eq!(g.refresh_token().map(Secret::expose), Some("rt-1"));
        assert!(g.fresh_at(now, Duration::from_secs(30)));
        assert_eq!(
            g.scopes(),
            Some(&["openid".to_owned(), "api:read".to_owned()][..])
        );
        let old: Vec<&str> = retired.iter().map(Secret::expose).collect();
        assert_eq!(old, ["at-0", "rt-0"]);
        let key = GrantKey::for_subject("github", "alice");
        let configured = vec!["api:write".to_owned()];
        assert_eq!(
            GrantSummary::of(&key, &configured, &g).scopes,
            ["openid", "api:read"]
        );
        // A refresh keeps the scopes granted.
        let (g, _) = g.apply(issued("at-2", Some("rt-2"), 60));
        assert_eq!(g.scopes().map(<[String]>::len), Some(2));
        // A connect that says nothing of scopes: the configured ones are listed again.
        let (g, _) = g.apply(GrantUpdate::Connected {
            refresh_token: Secret::new("rt-3"),
        });
        assert_eq!(g.scopes(), None);
        assert_eq!(
            GrantSummary::of(&key, &configured, &g).scopes,
            ["api:write"]
        );
    }

    #[test]
    fn debug_prints_no_token() {
        let (g, _) = Grant::new().apply(issued("at-canary-123", Some("rt-canary-456"), 60));
        let text = format!("{g:?}");
        assert!(!text.contains("canary"), "{text}");
        assert!(text.contains("version: 1"), "{text}");
    }
}
