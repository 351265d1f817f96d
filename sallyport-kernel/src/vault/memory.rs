//! An in-memory vault for tests and ephemeral use.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use super::{
    Credential, CredentialKind, CredentialMeta, Grant, GrantKey, GrantStore, GrantUpdate, Replaced,
    Secret, Vault, VaultAdmin, VaultError, VaultState, check_meta, retire, scrubber_with_grants,
};
use crate::scrub::Scrubber;

/// An in-memory vault. Starts unlocked; [`MemoryVault::lock`] and [`MemoryVault::unlock`]
/// switch its state (to test refusals).
///
/// It keeps the OAuth grants of its credentials too ([`Vault::grants`]).
#[derive(Default)]
pub struct MemoryVault {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    locked: bool,
    entries: BTreeMap<String, Credential>,
    /// The OAuth grant of each OAuth credential that has one.
    grants: BTreeMap<String, Grant>,
    /// Values replaced or removed, still known to the scrubber.
    retired: Vec<Secret>,
    scrubber: Option<Arc<Scrubber>>,
}

impl Inner {
    /// Stores `credential`, retiring the value it replaces.
    fn put(&mut self, credential: Credential) {
        let name = credential.meta().name.clone();
        // A grant survives a new client secret only for `oauth_refresh` (the refresh token
        // stays valid); a client-credentials grant starts again with the new secret.
        let keeps_grant = matches!(credential.meta().kind, CredentialKind::OAuthRefresh(_));
        if !keeps_grant && let Some(grant) = self.grants.remove(&name) {
            for secret in grant.secrets() {
                retire(&mut self.retired, Secret::new(secret));
            }
        }
        if let Some(old) = self.entries.insert(name, credential) {
            retire(&mut self.retired, old.secret().clone());
        }
        self.scrubber = None;
    }

    /// Removes `name`, retiring its value.
    fn take(&mut self, name: &str) -> bool {
        self.scrubber = None;
        if let Some(grant) = self.grants.remove(name) {
            for secret in grant.secrets() {
                retire(&mut self.retired, Secret::new(secret));
            }
        }
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
        Ok(if credential.meta().kind.oauth().is_some() {
            credential.with_grants(Arc::new(MemoryGrants {
                inner: Arc::clone(&self.inner),
            }))
        } else {
            credential
        })
    }

    fn grants(&self) -> Option<Arc<dyn GrantStore>> {
        Some(Arc::new(MemoryGrants {
            inner: Arc::clone(&self.inner),
        }))
    }

    fn scrubber(&self) -> Arc<Scrubber> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.locked {
            return Arc::new(Scrubber::empty());
        }
        if let Some(s) = &inner.scrubber {
            return Arc::clone(s);
        }
        let scrubber = Arc::new(scrubber_with_grants(
            inner.entries.values(),
            inner.grants.values(),
            &inner.retired,
        ));
        inner.scrubber = Some(Arc::clone(&scrubber));
        scrubber
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

/// The current grant of `key` in `inner`: an OAuth credential of this vault, shared grants
/// only.
fn grant_of(inner: &Inner, key: &GrantKey) -> Result<Grant, VaultError> {
    if inner.locked {
        return Err(VaultError::Locked);
    }
    let oauth = inner
        .entries
        .get(&key.credential)
        .is_some_and(|c| c.meta().kind.oauth().is_some());
    if !oauth || key.subject.is_some() {
        return Err(VaultError::NotFound(key.credential.clone()));
    }
    Ok(inner
        .grants
        .get(&key.credential)
        .cloned()
        .unwrap_or_default())
}

#[async_trait]
impl GrantStore for MemoryGrants {
    async fn current(&self, key: &GrantKey) -> Result<Grant, VaultError> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        grant_of(&inner, key)
    }

    async fn replace(
        &self,
        key: &GrantKey,
        expected_version: u64,
        update: GrantUpdate,
    ) -> Result<Replaced, VaultError> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let current = grant_of(&inner, key)?;
        if current.version() != expected_version {
            return Ok(Replaced::Changed(current));
        }
        let (next, retired) = current.apply(update);
        for old in retired {
            retire(&mut inner.retired, old);
        }
        inner.grants.insert(key.credential.clone(), next.clone());
        inner.scrubber = None;
        Ok(Replaced::Stored(next))
    }
}
