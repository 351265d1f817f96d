//! The OS keychain vault, through the keyring crates.
//!
//! Each credential is one keychain entry (service = the vault's service name, user = the
//! credential name) whose secret is a small JSON envelope holding the value and the optional
//! SSH key passphrase. Keychains cannot list their entries portably, so the vault keeps a
//! metadata index (names, kinds, bindings, versions — no values) in one more entry, user
//! `_index`. Credential names cannot start with `_`, so the index cannot collide with one.
//!
//! The vault is locked until [`KeychainVault::unlock`] reads every credential of the index into
//! memory (the scrubber needs the values); [`KeychainVault::lock`] drops and zeroizes them.
//! Admin operations write the keychain directly: the keychain's own access control guards them.
//! Index updates are serialized within a process; two processes writing the same index at the
//! same moment can lose an index line (not the secret entry), which `list` then omits — use the
//! file vault where many writers change credentials concurrently.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use keyring_core::{CredentialStore, Entry};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::fs::write_lock_marker;
use sallyport_kernel::scrub::Scrubber;
use sallyport_kernel::vault::{
    Credential, CredentialMeta, Secret, Vault, VaultAdmin, VaultError, VaultState, check_meta,
    retire, scrubber_over,
};

const INDEX_USER: &str = "_index";
const INDEX_FORMAT: u32 = 1;

sallyport_vocab::string_enum! {
    /// Which OS keychain to use; its name is the one messages and the command line use.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum KeychainBackend {
        /// The platform's usual keychain: on Linux the Secret Service when a session bus offers
        /// one, else the kernel keyutils session keyring; the Keychain on macOS; the Credential
        /// Manager on Windows.
        Auto => "auto",
        /// Linux kernel keyutils (session keyring; entries vanish at reboot). Works headless.
        KeyUtils => "keyutils",
        /// The freedesktop Secret Service over D-Bus (GNOME Keyring, KWallet, KeePassXC).
        SecretService => "secret-service",
        /// The macOS Keychain.
        MacOs => "macos",
        /// The Windows Credential Manager.
        Windows => "windows",
    }
}

/// A vault whose credentials live in the OS keychain.
///
/// ```no_run
/// # fn demo() -> Result<(), sallyport_kernel::vault::VaultError> {
/// use sallyport_vault::{KeychainBackend, KeychainVault};
/// let vault = KeychainVault::open(KeychainBackend::Auto, "sallyport")?;
/// vault.unlock()?;
/// # Ok(()) }
/// ```
pub struct KeychainVault {
    store: Arc<CredentialStore>,
    backend: KeychainBackend,
    service: String,
    marker: PathBuf,
    state: Mutex<State>,
    /// Serializes index read-modify-write cycles within this process.
    index_lock: Mutex<()>,
}

#[derive(Default)]
struct State {
    unlocked: Option<BTreeMap<String, Credential>>,
    /// Values replaced or removed since the unlock, still known to the scrubber.
    retired: Vec<Secret>,
    scrubber: Option<Arc<Scrubber>>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Index {
    format: u32,
    credentials: Vec<CredentialMeta>,
}

#[derive(Serialize)]
struct EnvelopeOut<'a> {
    secret: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    passphrase: Option<&'a str>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvelopeIn {
    secret: String,
    #[serde(default)]
    passphrase: Option<String>,
}

impl std::fmt::Debug for KeychainVault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeychainVault")
            .field("backend", &self.backend)
            .field("service", &self.service)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl KeychainVault {
    /// Connects to the keychain `backend` and uses entries of service `service`. Locked.
    ///
    /// The lock marker lives at `<data dir>/keychain-<service>.locked`
    /// ([`default_data_dir`](sallyport_kernel::vault::default_data_dir)); see [`KeychainVault::with_lock_marker`].
    ///
    /// # Errors
    ///
    /// [`VaultError::Backend`] saying what is missing when the keychain cannot be reached
    /// (for example no D-Bus session or no Secret Service provider), or when the backend does
    /// not exist on this platform; [`VaultError::Invalid`] for an empty service name.
    pub fn open(backend: KeychainBackend, service: impl Into<String>) -> Result<Self, VaultError> {
        let service = service.into();
        if service.is_empty() || service.contains(['\0', '\n']) {
            return Err(VaultError::Invalid(
                "the keychain service name must be a non-empty single line".into(),
            ));
        }
        let (store, backend) = connect(backend)?;
        let marker = sallyport_kernel::vault::default_data_dir()
            .unwrap_or_else(std::env::temp_dir)
            .join(format!("keychain-{}.locked", sanitize(&service)));
        Ok(Self {
            store,
            backend,
            service,
            marker,
            state: Mutex::new(State::default()),
            index_lock: Mutex::new(()),
        })
    }

    /// Uses `path` as the lock marker instead of the default.
    #[must_use]
    pub fn with_lock_marker(mut self, path: impl Into<PathBuf>) -> Self {
        self.marker = path.into();
        self
    }

    /// The backend in use (never `Auto`).
    pub fn backend(&self) -> KeychainBackend {
        self.backend
    }

    /// The keychain service name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The lock marker path.
    pub fn lock_marker(&self) -> &std::path::Path {
        &self.marker
    }

    /// Reads every credential named in the index into memory and removes the lock marker.
    ///
    /// # Errors
    ///
    /// [`VaultError::Backend`] when the keychain cannot be read (or is itself locked),
    /// [`VaultError::Corrupt`] when the index or an entry is malformed.
    pub fn unlock(&self) -> Result<(), VaultError> {
        let index = self.read_index()?;
        let mut entries = BTreeMap::new();
        for meta in index.credentials {
            let secret = self.read_secret(&meta.name)?;
            entries.insert(meta.name.clone(), Credential::new(meta, secret));
        }
        let mut st = self.lock_state();
        st.unlocked = Some(entries);
        st.retired.clear();
        st.scrubber = None;
        drop(st);
        match std::fs::remove_file(&self.marker) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(VaultError::Io {
                action: "remove the lock marker",
                path: self.marker.display().to_string(),
                source,
            }),
        }
    }

    /// Locks this instance: drops and zeroizes every secret it holds.
    pub fn lock(&self) {
        let mut st = self.lock_state();
        st.unlocked = None;
        st.retired.clear();
        st.scrubber = None;
    }

    /// Locks the vault for every process using this service: writes the lock marker, then
    /// locks this instance.
    ///
    /// # Errors
    ///
    /// [`VaultError::Io`] when the marker cannot be written (this instance is locked anyway).
    pub fn lock_everywhere(&self) -> Result<(), VaultError> {
        self.lock();
        write_lock_marker(&self.marker).map_err(|source| VaultError::Io {
            action: "write the lock marker",
            path: self.marker.display().to_string(),
            source,
        })
    }

    /// Whether the lock marker is present.
    pub fn lock_marker_present(&self) -> bool {
        self.marker.exists()
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn expire(&self, st: &mut State) {
        if st.unlocked.is_some() && self.marker.exists() {
            tracing::info!(service = %self.service, "lock marker found; keychain vault locked");
            st.unlocked = None;
            st.retired.clear();
            st.scrubber = None;
        }
    }

    fn entry(&self, user: &str) -> Result<Entry, VaultError> {
        Entry::new_in_store(&self.store, &self.service, user)
            .map_err(|e| backend_error(self.backend, &e))
    }

    fn read_index(&self) -> Result<Index, VaultError> {
        match self.entry(INDEX_USER)?.get_secret() {
            Ok(bytes) => {
                let bytes = Zeroizing::new(bytes);
                let index: Index =
                    serde_json::from_slice(&bytes).map_err(|_| self.corrupt("index"))?;
                if index.format > INDEX_FORMAT {
                    return Err(self.corrupt("index (written by a newer sallyport)"));
                }
                Ok(index)
            }
            Err(keyring_core::Error::NoEntry) => Ok(Index {
                format: INDEX_FORMAT,
                credentials: Vec::new(),
            }),
            Err(e) => Err(backend_error(self.backend, &e)),
        }
    }

    fn write_index(&self, index: &Index) -> Result<(), VaultError> {
        let bytes = serde_json::to_vec(index)
            .map_err(|_| VaultError::Backend("cannot encode the keychain index".into()))?;
        self.entry(INDEX_USER)?
            .set_secret(&bytes)
            .map_err(|e| backend_error(self.backend, &e))
    }

    fn read_secret(&self, name: &str) -> Result<Secret, VaultError> {
        let bytes = match self.entry(name)?.get_secret() {
            Ok(bytes) => Zeroizing::new(bytes),
            Err(keyring_core::Error::NoEntry) => {
                return Err(self.corrupt(&format!("index (credential `{name}` has no entry)")));
            }
            Err(e) => return Err(backend_error(self.backend, &e)),
        };
        let envelope: EnvelopeIn =
            serde_json::from_slice(&bytes).map_err(|_| self.corrupt(&format!("entry `{name}`")))?;
        let mut secret = Secret::new(envelope.secret);
        if let Some(p) = envelope.passphrase {
            secret = secret.with_passphrase(p);
        }
        Ok(secret)
    }

    fn write_secret(&self, name: &str, secret: &Secret) -> Result<(), VaultError> {
        let envelope = EnvelopeOut {
            secret: secret.expose(),
            passphrase: secret.expose_passphrase(),
        };
        let capacity =
            64 + 6 * (secret.expose().len() + secret.expose_passphrase().map_or(0, str::len));
        let mut buf = Zeroizing::new(Vec::with_capacity(capacity));
        serde_json::to_writer(&mut *buf, &envelope)
            .map_err(|_| VaultError::Backend("cannot encode a keychain entry".into()))?;
        self.entry(name)?
            .set_secret(&buf)
            .map_err(|e| backend_error(self.backend, &e))
    }

    fn corrupt(&self, what: &str) -> VaultError {
        VaultError::Corrupt {
            path: format!("keychain service `{}`", self.service),
            detail: format!("malformed {what}"),
        }
    }

    /// Runs `change` on the index under the in-process index lock, then updates the cache.
    fn change(
        &self,
        change: impl FnOnce(
            &mut Vec<CredentialMeta>,
        ) -> Result<(CredentialMeta, Option<Secret>), VaultError>,
    ) -> Result<CredentialMeta, VaultError> {
        let _guard = self
            .index_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut index = self.read_index()?;
        let (meta, secret) = change(&mut index.credentials)?;
        if let Some(secret) = &secret {
            self.write_secret(&meta.name, secret)?;
        }
        index.credentials.sort_by(|a, b| a.name.cmp(&b.name));
        index.format = INDEX_FORMAT;
        self.write_index(&index)?;
        let mut st = self.lock_state();
        let st = &mut *st;
        if let Some(entries) = st.unlocked.as_mut() {
            let old = match secret {
                Some(secret) => {
                    entries.insert(meta.name.clone(), Credential::new(meta.clone(), secret))
                }
                None => entries.remove(&meta.name),
            };
            if let Some(old) = old {
                retire(&mut st.retired, old.secret().clone());
            }
        }
        st.scrubber = None;
        Ok(meta)
    }
}

#[async_trait]
impl Vault for KeychainVault {
    fn state(&self) -> VaultState {
        let mut st = self.lock_state();
        self.expire(&mut st);
        if st.unlocked.is_some() {
            VaultState::Unlocked
        } else {
            VaultState::Locked
        }
    }

    async fn resolve(&self, name: &str) -> Result<Credential, VaultError> {
        let mut st = self.lock_state();
        self.expire(&mut st);
        let entries = st.unlocked.as_ref().ok_or(VaultError::Locked)?;
        entries
            .get(name)
            .cloned()
            .ok_or_else(|| VaultError::NotFound(name.to_owned()))
    }

    fn scrubber(&self) -> Arc<Scrubber> {
        let mut st = self.lock_state();
        self.expire(&mut st);
        if let Some(s) = &st.scrubber {
            return Arc::clone(s);
        }
        let Some(entries) = &st.unlocked else {
            return Arc::new(Scrubber::empty());
        };
        let scrubber = Arc::new(scrubber_over(entries.values(), &st.retired));
        st.scrubber = Some(Arc::clone(&scrubber));
        scrubber
    }
}

impl VaultAdmin for KeychainVault {
    fn add(&self, mut meta: CredentialMeta, secret: Secret) -> Result<CredentialMeta, VaultError> {
        check_meta(&meta)?;
        self.change(|list| {
            if list.iter().any(|m| m.name == meta.name) {
                return Err(VaultError::AlreadyExists(meta.name));
            }
            meta.version = 1;
            list.push(meta.clone());
            Ok((meta, Some(secret)))
        })
    }

    fn set(&self, mut meta: CredentialMeta, secret: Secret) -> Result<CredentialMeta, VaultError> {
        check_meta(&meta)?;
        self.change(|list| {
            match list.iter_mut().find(|m| m.name == meta.name) {
                Some(existing) => {
                    meta.version = existing.version + 1;
                    *existing = meta.clone();
                }
                None => {
                    meta.version = 1;
                    list.push(meta.clone());
                }
            }
            Ok((meta, Some(secret)))
        })
    }

    fn rotate(&self, name: &str, secret: Secret) -> Result<CredentialMeta, VaultError> {
        self.change(|list| {
            let existing = list
                .iter_mut()
                .find(|m| m.name == name)
                .ok_or_else(|| VaultError::NotFound(name.to_owned()))?;
            existing.version += 1;
            Ok((existing.clone(), Some(secret)))
        })
    }

    fn remove(&self, name: &str) -> Result<(), VaultError> {
        let meta = self.change(|list| {
            let at = list
                .iter()
                .position(|m| m.name == name)
                .ok_or_else(|| VaultError::NotFound(name.to_owned()))?;
            Ok((list.remove(at), None))
        })?;
        match self.entry(&meta.name)?.delete_credential() {
            Ok(()) | Err(keyring_core::Error::NoEntry) => Ok(()),
            Err(e) => Err(backend_error(self.backend, &e)),
        }
    }

    fn list(&self) -> Result<Vec<CredentialMeta>, VaultError> {
        let mut list = self.read_index()?.credentials;
        list.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(list)
    }
}

fn sanitize(service: &str) -> String {
    service
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A backend error as a category, never the payload (some carry the bytes that were read).
fn backend_error(backend: KeychainBackend, e: &keyring_core::Error) -> VaultError {
    use keyring_core::Error as E;
    let what = match e {
        E::PlatformFailure(_) => "the keychain failed",
        E::NoStorageAccess(_) => "no access to the keychain (is it locked?)",
        E::NoEntry => "no such keychain entry",
        E::BadEncoding(_) | E::BadDataFormat(..) | E::BadStoreFormat(_) => {
            "the keychain holds malformed data"
        }
        E::TooLong(..) => "a value is too long for this keychain",
        E::Invalid(..) => "the keychain refused an attribute",
        E::Ambiguous(_) => "the keychain holds several entries for one name",
        E::NoDefaultStore | E::NotSupportedByStore(_) => "the keychain does not support this",
        _ => "unexpected keychain error",
    };
    VaultError::Backend(format!("{}: {what}", backend.as_str()))
}

fn unavailable(
    backend: KeychainBackend,
    hint: &str,
    e: Option<&keyring_core::Error>,
) -> VaultError {
    // Connection errors carry no secret (nothing was read or written yet), so their text is kept.
    let detail = e.map(|e| format!(" ({e})")).unwrap_or_default();
    VaultError::Backend(format!(
        "{} keychain is not available{detail}; {hint}",
        backend.as_str()
    ))
}

#[cfg(target_os = "linux")]
fn connect(
    backend: KeychainBackend,
) -> Result<(Arc<CredentialStore>, KeychainBackend), VaultError> {
    const SS_HINT: &str = "the Secret Service needs a D-Bus session bus with an unlocked keyring \
        (e.g. gnome-keyring-daemon; see tests/keychain-session.sh)";
    match backend {
        KeychainBackend::KeyUtils => {
            let store: Arc<CredentialStore> =
                linux_keyutils_keyring_store::Store::new().map_err(|e| {
                    unavailable(backend, "the kernel keyutils keyring is unusable", Some(&e))
                })?;
            Ok((store, KeychainBackend::KeyUtils))
        }
        KeychainBackend::SecretService => {
            let store: Arc<CredentialStore> = zbus_secret_service_keyring_store::Store::new()
                .map_err(|e| unavailable(backend, SS_HINT, Some(&e)))?;
            Ok((store, KeychainBackend::SecretService))
        }
        KeychainBackend::Auto => {
            connect(KeychainBackend::SecretService).or_else(|_| connect(KeychainBackend::KeyUtils))
        }
        KeychainBackend::MacOs | KeychainBackend::Windows => Err(unavailable(
            backend,
            "that keychain exists only on its own platform",
            None,
        )),
    }
}

#[cfg(target_os = "macos")]
fn connect(
    backend: KeychainBackend,
) -> Result<(Arc<CredentialStore>, KeychainBackend), VaultError> {
    match backend {
        KeychainBackend::MacOs | KeychainBackend::Auto => {
            let store: Arc<CredentialStore> = apple_native_keyring_store::keychain::Store::new()
                .map_err(|e| {
                    unavailable(
                        KeychainBackend::MacOs,
                        "the login keychain is unusable",
                        Some(&e),
                    )
                })?;
            Ok((store, KeychainBackend::MacOs))
        }
        _ => Err(unavailable(
            backend,
            "that keychain exists only on its own platform",
            None,
        )),
    }
}

#[cfg(target_os = "windows")]
fn connect(
    backend: KeychainBackend,
) -> Result<(Arc<CredentialStore>, KeychainBackend), VaultError> {
    match backend {
        KeychainBackend::Windows | KeychainBackend::Auto => {
            let store: Arc<CredentialStore> =
                windows_native_keyring_store::Store::new().map_err(|e| {
                    unavailable(
                        KeychainBackend::Windows,
                        "the Credential Manager is unusable",
                        Some(&e),
                    )
                })?;
            Ok((store, KeychainBackend::Windows))
        }
        _ => Err(unavailable(
            backend,
            "that keychain exists only on its own platform",
            None,
        )),
    }
}

#[cfg(not(any(target_os = "linux", target_os = "macos", target_os = "windows")))]
fn connect(
    backend: KeychainBackend,
) -> Result<(Arc<CredentialStore>, KeychainBackend), VaultError> {
    Err(unavailable(
        backend,
        "no keychain backend is built for this platform",
        None,
    ))
}

#[cfg(test)]
mod string_enum_tests {
    use super::KeychainBackend;

    sallyport_vocab::__string_enum_tests! {
        keychain_backend: KeychainBackend =
            ["auto", "keyutils", "secret-service", "macos", "windows"];
    }
}
