//! An in-memory vault for tests and ephemeral use.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use super::{
    Credential, CredentialKind, CredentialMeta, Grant, GrantKey, GrantStore, GrantSummary,
    GrantUpdate, HostedGrants, Replaced, Secret, Vault, VaultAdmin, VaultError, VaultState,
    check_meta, retire, scrubber_with_grants,
};
use crate::scrub::Scrubber;

/// An in-memory vault. Starts unlocked; [`MemoryVault::lock`] and [`MemoryVault::unlock`]
/// switch its state (to test refusals).
///
/// It keeps the OAuth grants of its credentials too ([`Vault::grants`]): one shared grant per
/// OAuth credential, or one per subject for a credential held for each subject; or, with
/// [`MemoryVault::with_grant_store`], in a store of the host's choosing.
#[derive(Default)]
pub struct MemoryVault {
    inner: Arc<Mutex<Inner>>,
    /// The store the grants live in instead of this vault, if the host gave one.
    hosted: Option<Arc<dyn GrantStore>>,
}

#[derive(Default)]
struct Inner {
    locked: bool,
    entries: BTreeMap<String, Credential>,
    /// The OAuth grants: a credential's shared one, or one per subject.
    grants: BTreeMap<GrantKey, Grant>,
    /// Values replaced or removed, still known to the scrubber.
    retired: Vec<Secret>,
    scrubber: Option<Arc<Scrubber>>,
}

impl Inner {
    /// Stores `credential`, retiring the value it replaces.
    fn put(&mut self, credential: Credential) {
        let name = credential.meta().name.clone();
        // A grant survives a new client secret only for `oauth_refresh` (the refresh token
        // stays valid), and only grants of the kind the credential now keeps (shared or per
        // subject); a client-credentials grant starts again with the new secret.
        let keeps_grant = matches!(credential.meta().kind, CredentialKind::OAuthRefresh(_));
        let per_subject = credential.meta().kind.per_subject();
        self.drop_grants(&name, |key| {
            !keeps_grant || key.subject.is_some() != per_subject
        });
        if let Some(old) = self.entries.insert(name, credential) {
            retire(&mut self.retired, old.secret().clone());
        }
        self.scrubber = None;
    }

    /// Removes the grants of credential `name` that `drop` picks, retiring their tokens.
    fn drop_grants(&mut self, name: &str, drop: impl Fn(&GrantKey) -> bool) {
        let keys: Vec<GrantKey> = self
            .grants
            .keys()
            .filter(|k| k.credential == name && drop(k))
            .cloned()
            .collect();
        for key in keys {
            if let Some(grant) = self.grants.remove(&key) {
                for secret in grant.secrets() {
                    retire(&mut self.retired, Secret::new(secret));
                }
            }
        }
    }

    /// Removes `name`, retiring its value.
    fn take(&mut self, name: &str) -> bool {
        self.scrubber = None;
        self.drop_grants(name, |_| true);
        match self.entries.remove(name) {
            Some(old) => {
                retire(&mut self.retired, old.secret().clone());
                true
            }
            None => false,
        }
    }
}

impl MemoryVault {
    /// An empty, unlocked vault.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps the OAuth grants of this vault's credentials in `store` (a store the fleet
    /// shares, such as `sallyport_postgres::PgGrantStore`) while the vault keeps the
    /// credentials and their client secrets: [`Vault::grants`] and every OAuth credential
    /// [`Vault::resolve`] returns hand out `store`, checked against this vault's credentials
    /// ([`HostedGrants`]), and the vault's scrubber knows the tokens read from it. Grants
    /// this vault held itself are no longer used; a credential replaced or removed leaves its
    /// grants in `store` (remove them there).
    #[must_use]
    pub fn with_grant_store(mut self, store: Arc<dyn GrantStore>) -> Self {
        self.hosted = Some(store);
        self
    }

    /// The grant store handed out: the host's, checked against this vault's credentials, or
    /// the vault's own.
    fn grant_store(&self) -> Arc<dyn GrantStore> {
        match &self.hosted {
            Some(store) => {
                let inner = Arc::clone(&self.inner);
                Arc::new(HostedGrants::new(Arc::clone(store), move |name| {
                    let inner = inner.lock().unwrap_or_else(PoisonError::into_inner);
                    if inner.locked {
                        return Err(VaultError::Locked);
                    }
                    Ok(inner.entries.get(name).map(|c| c.meta().kind.clone()))
                }))
            }
            None => Arc::new(MemoryGrants {
                inner: Arc::clone(&self.inner),
            }),
        }
    }

    /// Stores (or replaces, with a new version) a credential.
    pub fn set(&self, mut meta: CredentialMeta, secret: Secret) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = inner.entries.get(&meta.name) {
            meta.version = old.meta().version + 1;
        }
        inner.put(Credential::new(meta, secret));
    }

    /// Removes a credential.
    pub fn remove(&self, name: &str) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.take(name)
    }

    /// The metadata of every credential.
    pub fn list(&self) -> Vec<CredentialMeta> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.entries.values().map(|c| c.meta().clone()).collect()
    }

    /// Locks the vault.
    pub fn lock(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.locked = true;
    }

    /// Unlocks the vault.
    pub fn unlock(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.locked = false;
    }
}

impl std::fmt::Debug for MemoryVault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("MemoryVault")
            .field("locked", &inner.locked)
            .field("names", &inner.entries.keys().collect::<Vec<_>>())
            .field("grant_store", &self.hosted)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Vault for MemoryVault {
    fn state(&self) -> VaultState {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.locked {
            VaultState::Locked
        } else {
            VaultState::Unlocked
        }
    }

    async fn resolve(&self, name: &str) -> Result<Credential, VaultError> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.locked {
            return Err(VaultError::Locked);
        }
        let credential = inner
            .entries
            .get(name)
            .cloned()
            .ok_or_else(|| VaultError::NotFound(name.to_owned()))?;
        drop(inner);
        Ok(if credential.meta().kind.oauth().is_some() {
            credential.with_grants(self.grant_store())
        } else {
            credential
        })
    }

    fn grants(&self) -> Option<Arc<dyn GrantStore>> {
        Some(self.grant_store())
    }

    fn scrubber(&self) -> Arc<Scrubber> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.locked {
            return Arc::new(Scrubber::empty());
        }
        let base = match &inner.scrubber {
            Some(s) => Arc::clone(s),
            None => {
                let scrubber = Arc::new(scrubber_with_grants(
                    inner.entries.values(),
                    inner.grants.values(),
                    &inner.retired,
                ));
                inner.scrubber = Some(Arc::clone(&scrubber));
                scrubber
            }
        };
        drop(inner);
        // The tokens read from a host's grant store are known too.
        match self.hosted.as_ref().and_then(|s| s.secrets()) {
            Some(seen) => seen.scrubber_over(base),
            None => base,
        }
    }
}

impl VaultAdmin for MemoryVault {
    fn add(&self, mut meta: CredentialMeta, secret: Secret) -> Result<CredentialMeta, VaultError> {
        check_meta(&meta)?;
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.entries.contains_key(&meta.name) {
            return Err(VaultError::AlreadyExists(meta.name));
        }
        meta.version = 1;
        inner.put(Credential::new(meta.clone(), secret));
        Ok(meta)
    }

    fn set(&self, mut meta: CredentialMeta, secret: Secret) -> Result<CredentialMeta, VaultError> {
        check_meta(&meta)?;
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        meta.version = inner
            .entries
            .get(&meta.name)
            .map_or(1, |old| old.meta().version + 1);
        inner.put(Credential::new(meta.clone(), secret));
        Ok(meta)
    }

    fn rotate(&self, name: &str, secret: Secret) -> Result<CredentialMeta, VaultError> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut meta = inner
            .entries
            .get(name)
            .map(|c| c.meta().clone())
            .ok_or_else(|| VaultError::NotFound(name.to_owned()))?;
        meta.version += 1;
        inner.put(Credential::new(meta.clone(), secret));
        Ok(meta)
    }

    fn remove(&self, name: &str) -> Result<(), VaultError> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.take(name) {
            Ok(())
        } else {
            Err(VaultError::NotFound(name.to_owned()))
        }
    }

    fn list(&self) -> Result<Vec<CredentialMeta>, VaultError> {
        Ok(MemoryVault::list(self))
    }
}

/// The grants of a [`MemoryVault`], shared with the credentials it resolves.
struct MemoryGrants {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for MemoryGrants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryGrants").finish_non_exhaustive()
    }
}

/// The current grant of `key` in `inner`, `None` for a subject's grant not stored yet: an
/// OAuth credential of this vault, a shared grant of a shared credential or a subject's of
/// a credential held for each subject.
fn grant_of(inner: &Inner, key: &GrantKey) -> Result<Option<Grant>, VaultError> {
    if inner.locked {
        return Err(VaultError::Locked);
    }
    let kind = inner.entries.get(&key.credential).map(|c| &c.meta().kind);
    let fits =
        kind.is_some_and(|k| k.oauth().is_some() && k.per_subject() == key.subject.is_some());
    if !fits {
        return Err(VaultError::NotFound(key.credential.clone()));
    }
    let grant = inner.grants.get(key).cloned();
    Ok(match key.subject {
        Some(_) => grant,
        None => Some(grant.unwrap_or_default()),
    })
}

#[async_trait]
impl GrantStore for MemoryGrants {
    async fn current(&self, key: &GrantKey) -> Result<Grant, VaultError> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        grant_of(&inner, key)?.ok_or_else(|| VaultError::NotFound(key.credential.clone()))
    }

    async fn replace(
        &self,
        key: &GrantKey,
        expected_version: u64,
        update: GrantUpdate,
    ) -> Result<Replaced, VaultError> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let current = match grant_of(&inner, key)? {
            Some(grant) => grant,
            None if expected_version == 0 => Grant::new(),
            None => return Err(VaultError::NotFound(key.credential.clone())),
        };
        if current.version() != expected_version {
            return Ok(Replaced::Changed(current));
        }
        let (next, retired) = current.apply(update);
        for old in retired {
            retire(&mut inner.retired, old);
        }
        inner.grants.insert(key.clone(), next.clone());
        inner.scrubber = None;
        Ok(Replaced::Stored(next))
    }

    async fn remove(&self, key: &GrantKey) -> Result<(), VaultError> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.locked {
            return Err(VaultError::Locked);
        }
        let grant = inner
            .grants
            .remove(key)
            .ok_or_else(|| VaultError::NotFound(key.credential.clone()))?;
        for secret in grant.secrets() {
            retire(&mut inner.retired, Secret::new(secret));
        }
        inner.scrubber = None;
        Ok(())
    }

    async fn list(&self, credential: Option<&str>) -> Result<Vec<GrantSummary>, VaultError> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.locked {
            return Err(VaultError::Locked);
        }
        Ok(inner
            .grants
            .iter()
            .filter(|(k, _)| credential.is_none_or(|c| c == k.credential))
            .map(|(key, grant)| {
                let scopes = inner
                    .entries
                    .get(&key.credential)
                    .and_then(|c| c.meta().kind.oauth())
                    .map(|c| c.scopes.clone())
                    .unwrap_or_default();
                GrantSummary::of(key, &scopes, grant)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::vault::{Binding, OAuthClient};

    fn issued(access: &str) -> GrantUpdate {
        let now = SystemTime::now();
        GrantUpdate::Issued {
            access_token: Secret::new(access),
            issued_at: now,
            expires_at: now + Duration::from_secs(60),
            refresh_token: Some(Secret::new(format!("rt-of-{access}"))),
        }
    }

    fn vault_with(per_subject: bool) -> MemoryVault {
        let vault = MemoryVault::new();
        let mut client =
            OAuthClient::new("webapp", "https://login.example.com/token").with_scopes(["repo"]);
        if per_subject {
            client = client.per_subject();
        }
        vault.set(
            CredentialMeta::new(
                "github",
                CredentialKind::OAuthRefresh(client),
                Binding::url("https://api.example.com"),
            ),
            Secret::new("client-secret"),
        );
        vault
    }

    #[tokio::test]
    async fn subjects_keep_their_own_grants_and_list_shows_no_value() {
        let vault = vault_with(true);
        let store = vault.grants().expect("grants");
        let alice = GrantKey::for_subject("github", "alice");
        let bob = GrantKey::for_subject("github", "bob");
        assert!(matches!(
            store.current(&alice).await,
            Err(VaultError::NotFound(_))
        ));
        assert!(matches!(
            store.current(&GrantKey::shared("github")).await,
            Err(VaultError::NotFound(_))
        ));
        store.put(&alice, issued("at-alice")).await.expect("alice");
        store.put(&bob, issued("at-bob")).await.expect("bob");
        let a = store.current(&alice).await.expect("alice");
        let b = store.current(&bob).await.expect("bob");
        assert_eq!(a.access_token().map(Secret::expose), Some("at-alice"));
        assert_eq!(b.access_token().map(Secret::expose), Some("at-bob"));
        let listed = store.list(None).await.expect("list");
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].subject.as_deref(), Some("alice"));
        assert_eq!(listed[0].scopes, ["repo"]);
        let json = serde_json::to_string(&listed).expect("json");
        assert!(!json.contains("at-"), "{json}");
        assert!(vault.scrubber().covers("at-bob"));
        store.remove(&bob).await.expect("remove");
        assert!(matches!(
            store.current(&bob).await,
            Err(VaultError::NotFound(_))
        ));
        assert!(matches!(
            store.remove(&bob).await,
            Err(VaultError::NotFound(_))
        ));
        // Removed tokens stay known to the scrubber.
        assert!(vault.scrubber().covers("at-bob"));
    }

    #[tokio::test]
    async fn a_vault_with_a_grant_store_of_the_hosts_checks_its_own_credentials_and_scopes() {
        // The host's store: another vault's grants, holding `github` with other scopes.
        let elsewhere = vault_with(true);
        elsewhere.set(
            CredentialMeta::new(
                "gitlab",
                CredentialKind::OAuthRefresh(
                    OAuthClient::new("webapp", "https://login.example.com/token").per_subject(),
                ),
                Binding::url("https://api.example.com"),
            ),
            Secret::new("client-secret"),
        );
        let host_store = elsewhere.grants().expect("grants");
        let vault = MemoryVault::new().with_grant_store(Arc::clone(&host_store));
        let client = OAuthClient::new("webapp", "https://login.example.com/token")
            .with_scopes(["repo", "gist"])
            .per_subject();
        vault.set(
            CredentialMeta::new(
                "github",
                CredentialKind::OAuthRefresh(client),
                Binding::url("https://api.example.com"),
            ),
            Secret::new("client-secret"),
        );
        let store = vault.grants().expect("grants");
        let alice = GrantKey::for_subject("github", "alice");
        store.put(&alice, issued("at-hosted")).await.expect("put");
        // Stored in the host's store, not the vault's own.
        let there = host_store
            .current(&alice)
            .await
            .expect("in the host's store");
        assert_eq!(there.access_token().map(Secret::expose), Some("at-hosted"));
        // The resolved credential hands out the same store.
        let resolved = vault.resolve("github").await.expect("resolve");
        let via = resolved
            .grants()
            .expect("an OAuth credential carries its store");
        assert_eq!(
            via.current(&alice).await.expect("current").version(),
            there.version()
        );
        // `gitlab` is the host store's, not this vault's: refused here.
        host_store
            .put(&GrantKey::for_subject("gitlab", "alice"), issued("at-gl"))
            .await
            .expect("put elsewhere");
        assert!(matches!(
            store
                .current(&GrantKey::for_subject("gitlab", "alice"))
                .await,
            Err(VaultError::NotFound(_))
        ));
        assert!(matches!(
            store.current(&GrantKey::shared("github")).await,
            Err(VaultError::NotFound(_))
        ));
        // Listed with this vault's scopes, and only its own credentials' grants.
        let listed = store.list(None).await.expect("list");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].scopes, ["repo", "gist"]);
        vault.lock();
        assert!(matches!(
            store.current(&alice).await,
            Err(VaultError::Locked)
        ));
    }

    #[tokio::test]
    async fn a_shared_credential_keeps_no_subject_grant() {
        let vault = vault_with(false);
        let store = vault.grants().expect("grants");
        let err = store
            .put(&GrantKey::for_subject("github", "alice"), issued("at-a"))
            .await
            .expect_err("refused");
        assert!(matches!(err, VaultError::NotFound(_)));
        store
            .put(&GrantKey::shared("github"), issued("at-s"))
            .await
            .expect("shared");
        // Switching the credential to per-subject drops the shared grant.
        let vault2 = vault;
        vault2.set(
            CredentialMeta::new(
                "github",
                CredentialKind::OAuthRefresh(
                    OAuthClient::new("webapp", "https://login.example.com/token").per_subject(),
                ),
                Binding::url("https://api.example.com"),
            ),
            Secret::new("client-secret"),
        );
        assert!(store.list(None).await.expect("list").is_empty());
    }
}
