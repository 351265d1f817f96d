//! An in-memory vault for tests and ephemeral use.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use super::{
    Credential, CredentialMeta, Secret, Vault, VaultAdmin, VaultError, VaultState, check_meta,
    retire, scrubber_over,
};
use crate::scrub::Scrubber;

/// An in-memory vault. Starts unlocked; [`MemoryVault::lock`] and [`MemoryVault::unlock`]
/// switch its state (to test refusals).
#[derive(Default)]
pub struct MemoryVault {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    locked: bool,
    entries: BTreeMap<String, Credential>,
    /// Values replaced or removed, still known to the scrubber.
    retired: Vec<Secret>,
    scrubber: Option<Arc<Scrubber>>,
}

impl Inner {
    /// Stores `credential`, retiring the value it replaces.
    fn put(&mut self, credential: Credential) {
        let name = credential.meta().name.clone();
        if let Some(old) = self.entries.insert(name, credential) {
            retire(&mut self.retired, old.secret().clone());
        }
        self.scrubber = None;
    }

    /// Removes `name`, retiring its value.
    fn take(&mut self, name: &str) -> bool {
        self.scrubber = None;
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
        inner
            .entries
            .get(name)
            .cloned()
            .ok_or_else(|| VaultError::NotFound(name.to_owned()))
    }

    fn scrubber(&self) -> Arc<Scrubber> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.locked {
            return Arc::new(Scrubber::empty());
        }
        if let Some(s) = &inner.scrubber {
            return Arc::clone(s);
        }
        let scrubber = Arc::new(scrubber_over(inner.entries.values(), &inner.retired));
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
