//! The encrypted file vault: the embedded default.
//!
//! # File format (version 1)
//!
//! ```text
//! "SALLYPORT-VAULT\n"   16 bytes of magic
//! format version        u32, little endian
//! body                  JSON: vault id, KDF header, check box, manifest box, record boxes
//! SHA-256               32 bytes over everything before it (detects truncation and damage)
//! ```
//!
//! The key comes from the passphrase through Argon2id with the parameters and salt stored in
//! the KDF header. Every box is sealed with XChaCha20-Poly1305 under a fresh random nonce:
//!
//! - the **check box** seals a constant with the vault id and the KDF header as associated data,
//!   so a wrong passphrase is told apart from a damaged file;
//! - each **record box** seals one credential (name, kind, binding and value — nothing of it is
//!   stored in plaintext), with its OAuth grant or, for a credential held for each subject,
//!   every subject's grant, with the vault id, the record's id and its version as associated data,
//!   so a ciphertext moved to another record, another vault or another version fails;
//! - the **manifest box** seals the list of record ids and versions, so a record removed,
//!   duplicated or rolled back by editing the file is detected.
//!
//! Writes re-read the file under an exclusive lock (`<path>.lock`), merge, and replace the file
//! atomically (temporary file in the same directory, fsync, rename, fsync of the directory),
//! with mode 0600, so concurrent writers in several processes do not lose records. A file that
//! does not open — wrong passphrase, damaged, truncated, foreign or newer — is never written.

mod crypto;
mod format;
mod io;
mod passphrase;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::Serialize;

pub use self::crypto::KdfParams;
use self::crypto::{Key, derive_key, random_bytes};
pub use self::format::FORMAT_VERSION;
use self::format::{
    Body, CHECK_PLAINTEXT, FormatError, KdfHeader, Manifest, RecordBox, RecordIn, SealedBox,
    check_aad, manifest_aad,
};
use crate::fs::write_lock_marker;
use sallyport_kernel::scrub::Scrubber;
use sallyport_kernel::vault::lock_marker_path;
use sallyport_kernel::vault::{
    Credential, CredentialKind, CredentialMeta, Grant, GrantKey, GrantStore, GrantSummary,
    GrantUpdate, HostedGrants, RefreshHold, Replaced, Secret, Vault, VaultAdmin, VaultError,
    VaultState, check_meta, retire, scrubber_with_grants,
};

/// What can be read from a vault file without its passphrase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FileVaultStatus {
    /// The file.
    pub path: PathBuf,
    /// Its format version.
    pub format_version: u32,
    /// Its key derivation parameters.
    pub kdf: KdfParams,
    /// How many credentials it holds (names are encrypted).
    pub records: usize,
    /// Whether the lock marker is present (every process then treats the vault as locked).
    pub lock_marker: bool,
}

/// How long an OAuth refresh waits for another process's refresh lock, unless
/// [`FileVault::with_refresh_wait`] says otherwise.
const DEFAULT_REFRESH_WAIT: Duration = Duration::from_secs(60);

/// The encrypted file vault.
///
/// ```no_run
/// # fn demo() -> Result<(), sallyport_kernel::vault::VaultError> {
/// use sallyport_kernel::vault::{Binding, CredentialKind, CredentialMeta, Secret, VaultAdmin};
/// use sallyport_vault::{FileVault, KdfParams};
/// let passphrase = zeroize::Zeroizing::new(String::from("correct horse battery staple"));
/// let vault = FileVault::create("vault.spv", &passphrase, KdfParams::default())?;
/// vault.add(
///     CredentialMeta::new("deploy-api", CredentialKind::Bearer, Binding::url("https://api.example.com")),
///     Secret::new("token value read from a prompt"),
/// )?;
/// vault.lock();
/// // Later, in the application:
/// let vault = FileVault::open("vault.spv");
/// vault.unlock(&passphrase)?;
/// # Ok(()) }
/// ```
pub struct FileVault {
    path: PathBuf,
    marker: PathBuf,
    auto_lock: Option<Duration>,
    state: Arc<Mutex<State>>,
    /// The store the OAuth grants live in instead of the file, if the host gave one.
    hosted: Option<Arc<dyn GrantStore>>,
    /// How long a refresh waits for another process's refresh lock.
    refresh_wait: Duration,
}

struct State {
    unlocked: Option<Unlocked>,
    last_used: Instant,
}

struct Unlocked {
    key: Key,
    vault_id: String,
    kdf: KdfHeader,
    entries: BTreeMap<String, Entry>,
    /// Values replaced or removed since the unlock, still known to the scrubber.
    retired: Vec<Secret>,
    scrubber: Option<Arc<Scrubber>>,
}

#[derive(Clone)]
struct Entry {
    record_id: String,
    credential: Credential,
    /// The OAuth grant, for OAuth credentials that have one. Sealed in the same record.
    grant: Option<Grant>,
    /// The grant of each subject, for a credential held for each subject. Sealed in the same
    /// record.
    subjects: BTreeMap<String, Grant>,
    /// The grant changed since the record was read: seal it again although the credential's
    /// version did not change.
    reseal: bool,
}

impl std::fmt::Debug for FileVault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileVault")
            .field("path", &self.path)
            .field("state", &self.state())
            .field("auto_lock", &self.auto_lock)
            .field("grant_store", &self.hosted)
            .finish_non_exhaustive()
    }
}

impl FileVault {
    /// The vault at `path`, locked. Reads nothing: [`FileVault::unlock`] opens the file.
    pub fn open(path: impl AsRef<Path>) -> Self {
        let path = path.as_ref().to_path_buf();
        Self {
            marker: lock_marker_path(&path),
            path,
            auto_lock: None,
            state: Arc::new(Mutex::new(State {
                unlocked: None,
                last_used: Instant::now(),
            })),
            hosted: None,
            refresh_wait: DEFAULT_REFRESH_WAIT,
        }
    }

    /// How long an OAuth refresh waits for another process refreshing the same grant
    /// (default 60 s). Past it the refresh is refused ([`VaultError::Backend`], saying so)
    /// and the call that needed a token is refused with nothing sent, instead of waiting as
    /// long as the other process holds the grant's refresh lock: one stopped mid-refresh
    /// (`SIGSTOP`, a debugger, blocked threads) keeps it until it wakes or dies. A healthy
    /// holder keeps it for one token request (the HTTP channel's token timeout, 10 s by
    /// default) and one write of the file. Grants kept in a host's store
    /// ([`FileVault::with_grant_store`]) wait as that store says.
    #[must_use]
    pub fn with_refresh_wait(mut self, wait: Duration) -> Self {
        self.refresh_wait = wait;
        self
    }

    /// Keeps the OAuth grants of this vault's credentials in `store` (a store the fleet
    /// shares, such as `sallyport_postgres::PgGrantStore`) while the file keeps the
    /// credentials and their client secrets: [`Vault::grants`] and every OAuth credential
    /// [`Vault::resolve`] returns hand out `store`, checked against this vault's credentials
    /// ([`HostedGrants`]), and the vault's scrubber knows the tokens read from it. Grants
    /// sealed in the file are no longer used (nor removed); a credential replaced or removed
    /// leaves its grants in `store` (remove them there).
    #[must_use]
    pub fn with_grant_store(mut self, store: Arc<dyn GrantStore>) -> Self {
        self.hosted = Some(store);
        self
    }

    /// The grant store handed out: the host's, checked against this vault's credentials, or
    /// the file's own.
    fn grant_store(&self) -> Arc<dyn GrantStore> {
        match &self.hosted {
            Some(store) => {
                let vault = self.shared();
                Arc::new(HostedGrants::new(Arc::clone(store), move |name| {
                    let mut st = vault.lock_state();
                    vault.expire(&mut st);
                    let unlocked = st.unlocked.as_ref().ok_or(VaultError::Locked)?;
                    Ok(unlocked
                        .entries
                        .get(name)
                        .map(|e| e.credential.meta().kind.clone()))
                }))
            }
            None => Arc::new(FileGrants {
                vault: self.shared(),
            }),
        }
    }

    /// Creates a new, empty vault file at `path` (and its directory, mode 0700) and returns it
    /// unlocked.
    ///
    /// # Errors
    ///
    /// [`VaultError::Invalid`] for out-of-range parameters or an empty passphrase;
    /// [`VaultError::Io`] with kind `AlreadyExists` when a file is already there (it is left
    /// untouched), or another I/O failure.
    pub fn create(
        path: impl AsRef<Path>,
        passphrase: &str,
        params: KdfParams,
    ) -> Result<Self, VaultError> {
        params.check()?;
        if passphrase.is_empty() {
            return Err(VaultError::Invalid("the passphrase is empty".into()));
        }
        let vault = Self::open(path);
        if let Some(dir) = vault.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::fs::create_private_dir(dir).map_err(|e| vault.io("create directory for", e))?;
        }
        let _lock = io::write_lock(&vault.path)?;
        if vault.path.exists() {
            return Err(vault.io(
                "create",
                std::io::Error::new(std::io::ErrorKind::AlreadyExists, "file exists"),
            ));
        }
        let salt = random_bytes::<16>()?;
        let kdf = KdfHeader::argon2id(params, &salt);
        let key = derive_key(passphrase, &params, &salt)?;
        let vault_id = hex::encode(random_bytes::<16>()?);
        let check = SealedBox::seal(&key, CHECK_PLAINTEXT, &check_aad(&vault_id, &kdf))?;
        let unlocked = Unlocked {
            key,
            vault_id,
            kdf,
            entries: BTreeMap::new(),
            retired: Vec::new(),
            scrubber: None,
        };
        let body = unlocked.body(check, &BTreeMap::new())?;
        vault.write_file(&body)?;
        let _ = fs::remove_file(&vault.marker);
        vault.lock_state().unlocked = Some(unlocked);
        Ok(vault)
    }

    /// Locks the vault automatically after `idle` without a credential being resolved or
    /// changed: keys are dropped and secrets zeroized (a background thread checks about once
    /// a second; it ends when the vault is dropped).
    #[must_use]
    pub fn auto_lock_after(mut self, idle: Duration) -> Self {
        self.auto_lock = Some(idle);
        let weak: Weak<Mutex<State>> = Arc::downgrade(&self.state);
        let tick = (idle / 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let spawned = std::thread::Builder::new()
            .name("sallyport-vault-autolock".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(tick);
                    let Some(state) = weak.upgrade() else { return };
                    let mut st = state.lock().unwrap_or_else(PoisonError::into_inner);
                    if st.unlocked.is_some() && st.last_used.elapsed() >= idle {
                        st.unlocked = None;
                    }
                }
            });
        if spawned.is_err() {
            // Without the thread the idle check still runs on every access (see `expire`).
            tracing::warn!(
                "cannot start the vault auto-lock thread; idle locking is checked on access only"
            );
        }
        self
    }

    /// The vault file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the file with `passphrase`, loads every credential and removes the lock marker.
    ///
    /// # Errors
    ///
    /// [`VaultError::NotInitialized`], [`VaultError::NotAVault`], [`VaultError::NewerFormat`],
    /// [`VaultError::Corrupt`], [`VaultError::WrongPassphrase`] or [`VaultError::Io`]. The file
    /// is never written by a failed unlock.
    pub fn unlock(&self, passphrase: &str) -> Result<(), VaultError> {
        let bytes = self.read_file()?;
        let body = self.parse(&bytes)?;
        let salt = self.salt(&body.kdf)?;
        let key = derive_key(passphrase, &body.kdf.params(), &salt)
            .map_err(|_| self.corrupt("bad KDF header"))?;
        if body
            .check
            .open(&key, &check_aad(&body.vault_id, &body.kdf))
            .is_err()
        {
            return Err(VaultError::WrongPassphrase {
                path: self.path_text(),
            });
        }
        let entries = self.open_records(&key, &body)?;
        let mut st = self.lock_state();
        st.unlocked = Some(Unlocked {
            key,
            vault_id: body.vault_id,
            kdf: body.kdf,
            entries,
            retired: Vec::new(),
            scrubber: None,
        });
        st.last_used = Instant::now();
        drop(st);
        match fs::remove_file(&self.marker) {
            Ok(()) => tracing::info!(vault = %self.path.display(), "lock marker removed by unlock"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(self.io("remove the lock marker of", e)),
        }
        Ok(())
    }

    /// Locks this instance: drops the key and zeroizes every secret it holds.
    pub fn lock(&self) {
        self.lock_state().unlocked = None;
    }

    /// Locks the vault for every process using this file: writes the lock marker, then locks
    /// this instance. Needs no passphrase. [`FileVault::unlock`] removes the marker.
    ///
    /// # Errors
    ///
    /// [`VaultError::Io`] when the marker cannot be written (this instance is locked anyway).
    pub fn lock_everywhere(&self) -> Result<(), VaultError> {
        self.lock();
        write_lock_marker(&self.marker).map_err(|e| self.io("write the lock marker of", e))
    }

    /// What can be read from the file without the passphrase.
    ///
    /// # Errors
    ///
    /// As [`FileVault::unlock`], except `WrongPassphrase`.
    pub fn status(&self) -> Result<FileVaultStatus, VaultError> {
        let bytes = self.read_file()?;
        let body = self.parse(&bytes)?;
        Ok(FileVaultStatus {
            path: self.path.clone(),
            format_version: FORMAT_VERSION,
            kdf: body.kdf.params(),
            records: body.records.len(),
            lock_marker: self.marker.exists(),
        })
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies the lock marker and the idle timeout.
    fn expire(&self, st: &mut State) {
        if st.unlocked.is_none() {
            return;
        }
        if self.marker.exists() {
            tracing::info!(vault = %self.path.display(), "lock marker found; vault locked");
            st.unlocked = None;
        } else if self
            .auto_lock
            .is_some_and(|idle| st.last_used.elapsed() >= idle)
        {
            tracing::info!(vault = %self.path.display(), "vault idle; locked");
            st.unlocked = None;
        }
    }

    fn path_text(&self) -> String {
        self.path.display().to_string()
    }

    fn io(&self, action: &'static str, source: std::io::Error) -> VaultError {
        io::io_error(&self.path, action, source)
    }

    fn corrupt(&self, detail: impl Into<String>) -> VaultError {
        VaultError::Corrupt {
            path: self.path_text(),
            detail: detail.into(),
        }
    }

    fn read_file(&self) -> Result<Vec<u8>, VaultError> {
        io::read(&self.path)
    }

    /// Structural checks (see [`format::decode`]), with errors naming this vault's file.
    fn parse(&self, bytes: &[u8]) -> Result<Body, VaultError> {
        format::decode(bytes).map_err(|e| match e {
            FormatError::NotAVault => VaultError::NotAVault {
                path: self.path_text(),
            },
            FormatError::NewerFormat(found) => VaultError::NewerFormat {
                path: self.path_text(),
                found,
                supported: FORMAT_VERSION,
            },
            FormatError::Corrupt(detail) => self.corrupt(detail),
        })
    }

    fn salt(&self, kdf: &KdfHeader) -> Result<Vec<u8>, VaultError> {
        kdf.salt().ok_or_else(|| self.corrupt("bad salt"))
    }

    fn open_records(&self, key: &Key, body: &Body) -> Result<BTreeMap<String, Entry>, VaultError> {
        let manifest = body
            .manifest
            .open(key, &manifest_aad(&body.vault_id))
            .map_err(|()| self.corrupt("the record list does not authenticate"))?;
        let manifest: Manifest =
            serde_json::from_slice(&manifest).map_err(|_| self.corrupt("malformed record list"))?;
        let on_disk: Vec<(String, u64)> = body
            .records
            .iter()
            .map(|r| (r.id.clone(), r.version))
            .collect();
        if manifest.records != on_disk {
            return Err(self.corrupt(
                "the records do not match the sealed record list (removed, added or rolled back)",
            ));
        }
        let mut entries = BTreeMap::new();
        for (index, record) in body.records.iter().enumerate() {
            let plain = record.open(key, &body.vault_id).map_err(|()| {
                self.corrupt(format!("record {} does not authenticate", index + 1))
            })?;
            let parsed: RecordIn = serde_json::from_slice(&plain)
                .map_err(|_| self.corrupt(format!("record {} is malformed", index + 1)))?;
            if parsed.meta.version != record.version {
                return Err(self.corrupt(format!("record {} has the wrong version", index + 1)));
            }
            let mut secret = Secret::new(parsed.secret);
            if let Some(p) = parsed.passphrase {
                secret = secret.with_passphrase(p);
            }
            let name = parsed.meta.name.clone();
            let entry = Entry {
                record_id: record.id.clone(),
                credential: Credential::new(parsed.meta, secret),
                grant: parsed.grant.map(format::GrantIn::into_grant),
                subjects: parsed
                    .subject_grants
                    .into_iter()
                    .map(|(s, g)| (s, g.into_grant()))
                    .collect(),
                reseal: false,
            };
            if entries.insert(name, entry).is_some() {
                return Err(self.corrupt("two records share a name"));
            }
        }
        Ok(entries)
    }

    fn write_file(&self, body: &Body) -> Result<(), VaultError> {
        let bytes = format::encode(body).map_err(|e| self.io("encode", e.into()))?;
        io::replace(&self.path, &bytes)
    }

    /// Runs one write: under the file lock, re-reads the file (merging other writers' records),
    /// applies `change`, and writes the result atomically.
    fn mutate<T>(
        &self,
        change: impl FnOnce(&mut BTreeMap<String, Entry>) -> Result<T, VaultError>,
    ) -> Result<T, VaultError> {
        self.reread(true, change)
    }

    /// Re-reads the file under the write lock, runs `change` on its entries and, when `write`,
    /// writes the result; either way this instance then holds what the file holds.
    fn reread<T>(
        &self,
        write: bool,
        change: impl FnOnce(&mut BTreeMap<String, Entry>) -> Result<T, VaultError>,
    ) -> Result<T, VaultError> {
        let mut st = self.lock_state();
        self.expire(&mut st);
        let unlocked = st.unlocked.as_mut().ok_or(VaultError::Locked)?;
        let _lock = io::write_lock(&self.path)?;
        let bytes = self.read_file()?;
        let body = self.parse(&bytes)?;
        if body.vault_id != unlocked.vault_id || body.kdf != unlocked.kdf {
            return Err(VaultError::Backend(
                "the vault file was replaced by another vault; unlock it again".into(),
            ));
        }
        let mut entries = self.open_records(&unlocked.key, &body)?;
        let kept: BTreeMap<String, RecordBox> = body
            .records
            .iter()
            .map(|r| (r.id.clone(), r.clone()))
            .collect();
        let result = change(&mut entries)?;
        if write {
            let new_body = unlocked.body_with(body.check, &entries, &kept)?;
            self.write_file(&new_body)?;
        }
        // Values this instance held that the change replaced or removed stay known to the
        // scrubber.
        for (name, old) in &unlocked.entries {
            let new = entries.get(name);
            let version = new.map(|e| e.credential.meta().version);
            if version != Some(old.credential.meta().version) {
                retire(&mut unlocked.retired, old.credential.secret().clone());
            }
            // Tokens of a grant that changed (here or in another process) stay known too.
            let grant_version = new.and_then(|e| e.grant.as_ref()).map(Grant::version);
            if let Some(old_grant) = &old.grant
                && grant_version != Some(old_grant.version())
            {
                for secret in old_grant.secrets() {
                    retire(&mut unlocked.retired, Secret::new(secret));
                }
            }
            for (subject, old_grant) in &old.subjects {
                let now = new
                    .and_then(|e| e.subjects.get(subject))
                    .map(Grant::version);
                if now != Some(old_grant.version()) {
                    for secret in old_grant.secrets() {
                        retire(&mut unlocked.retired, Secret::new(secret));
                    }
                }
            }
        }
        unlocked.entries = entries;
        unlocked.scrubber = None;
        st.last_used = Instant::now();
        Ok(result)
    }
}

impl Unlocked {
    fn body(
        &self,
        check: SealedBox,
        kept: &BTreeMap<String, RecordBox>,
    ) -> Result<Body, VaultError> {
        self.body_with(check, &self.entries, kept)
    }

    /// Seals `entries` (reusing the boxes of records whose id and version did not change) and
    /// a fresh manifest.
    fn body_with(
        &self,
        check: SealedBox,
        entries: &BTreeMap<String, Entry>,
        kept: &BTreeMap<String, RecordBox>,
    ) -> Result<Body, VaultError> {
        let mut records = Vec::with_capacity(entries.len());
        for entry in entries.values() {
            let version = entry.credential.meta().version;
            if let Some(existing) = kept
                .get(&entry.record_id)
                .filter(|r| r.version == version && !entry.reseal)
            {
                records.push(existing.clone());
                continue;
            }
            records.push(RecordBox::seal(
                &self.key,
                &self.vault_id,
                &entry.record_id,
                &entry.credential,
                entry.grant.as_ref(),
                &entry.subjects,
            )?);
        }
        let manifest = Manifest {
            records: records.iter().map(|r| (r.id.clone(), r.version)).collect(),
        };
        let manifest_json = serde_json::to_vec(&manifest)
            .map_err(|_| VaultError::Backend("cannot encode the record list".into()))?;
        let manifest = SealedBox::seal(&self.key, &manifest_json, &manifest_aad(&self.vault_id))?;
        Ok(Body {
            vault_id: self.vault_id.clone(),
            kdf: self.kdf.clone(),
            check,
            manifest,
            records,
        })
    }

    fn scrubber(&mut self) -> Arc<Scrubber> {
        if let Some(s) = &self.scrubber {
            return Arc::clone(s);
        }
        let scrubber = Arc::new(scrubber_with_grants(
            self.entries.values().map(|e| &e.credential),
            self.entries
                .values()
                .flat_map(|e| e.grant.iter().chain(e.subjects.values())),
            &self.retired,
        ));
        self.scrubber = Some(Arc::clone(&scrubber));
        scrubber
    }
}

#[async_trait]
impl Vault for FileVault {
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
        let unlocked = st.unlocked.as_ref().ok_or(VaultError::Locked)?;
        let credential = unlocked
            .entries
            .get(name)
            .map(|e| e.credential.clone())
            .ok_or_else(|| VaultError::NotFound(name.to_owned()))?;
        st.last_used = Instant::now();
        drop(st);
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
        let mut st = self.lock_state();
        self.expire(&mut st);
        let base = match st.unlocked.as_mut() {
            Some(unlocked) => unlocked.scrubber(),
            None => return Arc::new(Scrubber::empty()),
        };
        drop(st);
        // The tokens read from a host's grant store are known too.
        match self.hosted.as_ref().and_then(|s| s.secrets()) {
            Some(seen) => seen.scrubber_over(base),
            None => base,
        }
    }
}

impl VaultAdmin for FileVault {
    fn add(&self, meta: CredentialMeta, secret: Secret) -> Result<CredentialMeta, VaultError> {
        check_meta(&meta)?;
        self.mutate(|entries| {
            if entries.contains_key(&meta.name) {
                return Err(VaultError::AlreadyExists(meta.name));
            }
            insert_new(entries, meta, secret)
        })
    }

    fn set(&self, meta: CredentialMeta, secret: Secret) -> Result<CredentialMeta, VaultError> {
        check_meta(&meta)?;
        self.mutate(|entries| match entries.get_mut(&meta.name) {
            Some(entry) => {
                let mut meta = meta;
                meta.version = entry.credential.meta().version + 1;
                keep_fitting_grants(entry, &meta.kind);
                entry.credential = Credential::new(meta.clone(), secret);
                Ok(meta)
            }
            None => insert_new(entries, meta, secret),
        })
    }

    fn rotate(&self, name: &str, secret: Secret) -> Result<CredentialMeta, VaultError> {
        self.mutate(|entries| {
            let entry = entries
                .get_mut(name)
                .ok_or_else(|| VaultError::NotFound(name.to_owned()))?;
            let mut meta = entry.credential.meta().clone();
            meta.version += 1;
            // A client-credentials grant starts again with the new secret; a refresh grant
            // stays valid.
            keep_fitting_grants(entry, &meta.kind);
            entry.credential = Credential::new(meta.clone(), secret);
            Ok(meta)
        })
    }

    fn remove(&self, name: &str) -> Result<(), VaultError> {
        self.mutate(|entries| {
            entries
                .remove(name)
                .map(drop)
                .ok_or_else(|| VaultError::NotFound(name.to_owned()))
        })
    }

    fn list(&self) -> Result<Vec<CredentialMeta>, VaultError> {
        let mut st = self.lock_state();
        self.expire(&mut st);
        let unlocked = st.unlocked.as_ref().ok_or(VaultError::Locked)?;
        Ok(unlocked
            .entries
            .values()
            .map(|e| e.credential.meta().clone())
            .collect())
    }
}

/// Keeps the grants a credential of `kind` still uses: a refresh grant stays valid across a
/// new client secret, but only of the kind the credential now keeps (shared or per
/// subject); a client-credentials grant starts again with the new secret.
fn keep_fitting_grants(entry: &mut Entry, kind: &CredentialKind) {
    if !matches!(kind, CredentialKind::OAuthRefresh(_)) {
        entry.grant = None;
        entry.subjects.clear();
    } else if kind.per_subject() {
        entry.grant = None;
    } else {
        entry.subjects.clear();
    }
}

fn insert_new(
    entries: &mut BTreeMap<String, Entry>,
    mut meta: CredentialMeta,
    secret: Secret,
) -> Result<CredentialMeta, VaultError> {
    meta.version = 1;
    let record_id = hex::encode(random_bytes::<16>()?);
    entries.insert(
        meta.name.clone(),
        Entry {
            record_id,
            credential: Credential::new(meta.clone(), secret),
            grant: None,
            subjects: BTreeMap::new(),
            reseal: false,
        },
    );
    Ok(meta)
}

impl FileVault {
    /// Another handle on the same file and the same unlocked state (for the grant store the
    /// credentials carry).
    fn shared(&self) -> Self {
        Self {
            path: self.path.clone(),
            marker: self.marker.clone(),
            auto_lock: self.auto_lock,
            state: Arc::clone(&self.state),
            hosted: self.hosted.clone(),
            refresh_wait: self.refresh_wait,
        }
    }
}

/// The OAuth grants of a [`FileVault`]: sealed in the credential's own record, replaced by
/// compare-and-set under the vault file's lock (re-read, check the version on disk, write
/// atomically), so a grant another process refreshed is seen and a crash mid-write leaves
/// the old file whole.
struct FileGrants {
    vault: FileVault,
}

impl std::fmt::Debug for FileGrants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileGrants")
            .field("path", &self.vault.path)
            .finish_non_exhaustive()
    }
}

/// The entry of an OAuth credential for `key`: a shared grant of a shared credential, a
/// subject's of a credential held for each subject.
fn oauth_entry<'a>(
    entries: &'a mut BTreeMap<String, Entry>,
    key: &GrantKey,
) -> Result<&'a mut Entry, VaultError> {
    match entries.get_mut(&key.credential) {
        Some(entry)
            if entry.credential.meta().kind.oauth().is_some()
                && entry.credential.meta().kind.per_subject() == key.subject.is_some() =>
        {
            Ok(entry)
        }
        _ => Err(VaultError::NotFound(key.credential.clone())),
    }
}

/// The grant of `key` in `entry` (found by [`oauth_entry`]): the shared one (empty at
/// version 0 before the first), or the subject's, `NotFound` when the subject has none.
fn grant_in(entry: &Entry, key: &GrantKey) -> Result<Grant, VaultError> {
    match &key.subject {
        None => Ok(entry.grant.clone().unwrap_or_default()),
        Some(subject) => entry
            .subjects
            .get(subject)
            .cloned()
            .ok_or_else(|| VaultError::NotFound(key.credential.clone())),
    }
}

impl FileGrants {
    /// The grant of `key` as the file holds it now.
    fn reread(&self, key: &GrantKey) -> Result<Grant, VaultError> {
        self.vault
            .reread(false, |entries| grant_in(oauth_entry(entries, key)?, key))
    }
}

#[async_trait]
impl GrantStore for FileGrants {
    async fn current(&self, key: &GrantKey) -> Result<Grant, VaultError> {
        let mut st = self.vault.lock_state();
        self.vault.expire(&mut st);
        let unlocked = st.unlocked.as_mut().ok_or(VaultError::Locked)?;
        let grant = grant_in(oauth_entry(&mut unlocked.entries, key)?, key);
        st.last_used = Instant::now();
        drop(st);
        match grant {
            // A subject's grant this process has not seen, or one marked for reconnection:
            // another process may have connected the account since this one read the file.
            Err(VaultError::NotFound(_)) if key.subject.is_some() => self.reread(key),
            Ok(grant) if grant.reconnect_reason().is_some() => self.reread(key),
            other => other,
        }
    }

    async fn replace(
        &self,
        key: &GrantKey,
        expected_version: u64,
        update: GrantUpdate,
    ) -> Result<Replaced, VaultError> {
        self.vault.mutate(|entries| {
            let entry = oauth_entry(entries, key)?;
            let current = match grant_in(entry, key) {
                Ok(grant) => grant,
                // A subject's first grant (a connected account) starts at version 0.
                Err(VaultError::NotFound(_)) if expected_version == 0 => Grant::new(),
                Err(e) => return Err(e),
            };
            if current.version() != expected_version {
                return Ok(Replaced::Changed(current));
            }
            let (next, _retired) = current.apply(update);
            match &key.subject {
                None => entry.grant = Some(next.clone()),
                Some(subject) => {
                    entry.subjects.insert(subject.clone(), next.clone());
                }
            }
            entry.reseal = true;
            Ok(Replaced::Stored(next))
        })
    }

    async fn remove(&self, key: &GrantKey) -> Result<(), VaultError> {
        self.vault.mutate(|entries| {
            let entry = oauth_entry(entries, key)?;
            let removed = match &key.subject {
                None => entry.grant.take(),
                Some(subject) => entry.subjects.remove(subject),
            };
            if removed.is_none() {
                return Err(VaultError::NotFound(key.credential.clone()));
            }
            entry.reseal = true;
            Ok(())
        })
    }

    /// Read from the file (under its write lock), so grants other processes stored are
    /// listed too.
    async fn list(&self, credential: Option<&str>) -> Result<Vec<GrantSummary>, VaultError> {
        self.vault.reread(false, |entries| {
            let mut out = Vec::new();
            for (name, entry) in entries.iter() {
                if credential.is_some_and(|c| c != name) {
                    continue;
                }
                let Some(client) = entry.credential.meta().kind.oauth() else {
                    continue;
                };
                if let Some(grant) = &entry.grant {
                    out.push(GrantSummary::of(
                        &GrantKey::shared(name.as_str()),
                        &client.scopes,
                        grant,
                    ));
                }
                for (subject, grant) in &entry.subjects {
                    out.push(GrantSummary::of(
                        &GrantKey::for_subject(name.as_str(), subject.as_str()),
                        &client.scopes,
                        grant,
                    ));
                }
            }
            Ok(out)
        })
    }

    /// Holds the grant's refresh lock (an exclusive file lock, let go by the OS if the
    /// process dies: `<path>.refresh` for shared grants, a file of its own in
    /// `<path>.refresh.d/` for each subject's grant, so subjects refresh in parallel) and
    /// reads the grant from the file under it, so a refresh another process stored while
    /// this one waited is seen and not repeated.
    fn hold_refresh(&self, key: &GrantKey) -> Result<Option<(Grant, RefreshHold)>, VaultError> {
        let held = match &key.subject {
            None => io::refresh_lock(&self.vault.path, self.vault.refresh_wait)?,
            Some(subject) => io::subject_refresh_lock(
                &self.vault.path,
                &key.credential,
                subject,
                self.vault.refresh_wait,
            )?,
        };
        let grant = self.reread(key)?;
        Ok(Some((grant, RefreshHold::new(held))))
    }
}
