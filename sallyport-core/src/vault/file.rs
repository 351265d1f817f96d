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
//!   stored in plaintext) with the vault id, the record's id and its version as associated data,
//!   so a ciphertext moved to another record, another vault or another version fails;
//! - the **manifest box** seals the list of record ids and versions, so a record removed,
//!   duplicated or rolled back by editing the file is detected.
//!
//! Writes re-read the file under an exclusive lock (`<path>.lock`), merge, and replace the file
//! atomically (temporary file in the same directory, fsync, rename, fsync of the directory),
//! with mode 0600, so concurrent writers in several processes do not lose records. A file that
//! does not open — wrong passphrase, damaged, truncated, foreign or newer — is never written.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{KeyInit, XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::marker::lock_marker_path;
use super::{
    Credential, CredentialMeta, Secret, Vault, VaultAdmin, VaultError, VaultState, check_meta,
    retire, scrubber_over,
};
use crate::scrub::Scrubber;

/// The vault file format this build writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;

const MAGIC: &[u8; 16] = b"SALLYPORT-VAULT\n";
const PREFIX_LEN: usize = MAGIC.len() + 4;
const TRAILER_LEN: usize = 32;
/// Largest vault file read (a vault holds credentials, not data).
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
const CHECK_PLAINTEXT: &[u8] = b"sallyport vault key check v1";
const KEY_LEN: usize = 32;

/// Argon2id parameters for deriving the vault key from the passphrase. Stored in the file
/// header, so a vault keeps opening after the defaults change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct KdfParams {
    /// Memory in KiB (default 65 536 = 64 MiB).
    pub memory_kib: u32,
    /// Passes over the memory (default 3).
    pub iterations: u32,
    /// Lanes (default 1).
    pub parallelism: u32,
}

impl Default for KdfParams {
    /// 64 MiB, 3 passes, 1 lane: about a quarter of a second on a current laptop core (RFC 9106
    /// second recommended option, single lane).
    fn default() -> Self {
        Self {
            memory_kib: 64 * 1024,
            iterations: 3,
            parallelism: 1,
        }
    }
}

impl KdfParams {
    /// Parameters with `memory_kib` KiB, `iterations` passes and `parallelism` lanes.
    /// Checked when a vault is created ([`KdfParams::check`]).
    pub fn new(memory_kib: u32, iterations: u32, parallelism: u32) -> Self {
        Self {
            memory_kib,
            iterations,
            parallelism,
        }
    }

    /// The most memory a vault may ask Argon2id for: 2 GiB (RFC 9106's first recommended
    /// option). A vault file's header is read before anything authenticates it, so every
    /// parameter is capped before a key is derived: a crafted header cannot make an unlock
    /// allocate or compute without bound.
    pub const MAX_MEMORY_KIB: u32 = 2 * 1024 * 1024;
    /// The most passes over the memory a vault may ask for.
    pub const MAX_ITERATIONS: u32 = 16;
    /// The most lanes a vault may ask for.
    pub const MAX_PARALLELISM: u32 = 16;
    /// The most work a vault may ask for, as memory (KiB) times passes: 4 GiB-passes, so
    /// 2 GiB × 2, 1 GiB × 4 or 256 MiB × 16 (the default is 64 MiB × 3).
    pub const MAX_MEMORY_PASSES_KIB: u64 = 4 * 1024 * 1024;

    /// Checks the parameters against the caps: memory from 8 KiB per lane up to
    /// [`MAX_MEMORY_KIB`](Self::MAX_MEMORY_KIB), 1 to [`MAX_ITERATIONS`](Self::MAX_ITERATIONS)
    /// passes, 1 to [`MAX_PARALLELISM`](Self::MAX_PARALLELISM) lanes, and memory times passes
    /// at most [`MAX_MEMORY_PASSES_KIB`](Self::MAX_MEMORY_PASSES_KIB).
    ///
    /// # Errors
    ///
    /// [`VaultError::Invalid`] naming the parameter, its value and the cap it breaks.
    pub fn check(&self) -> Result<(), VaultError> {
        self.out_of_range().map_or(Ok(()), |reason| {
            Err(VaultError::Invalid(format!("argon2 {reason}")))
        })
    }

    /// Which parameter breaks which cap, in words naming the header field; `None` when all
    /// are within the caps.
    fn out_of_range(&self) -> Option<String> {
        let Self {
            memory_kib,
            iterations,
            parallelism,
        } = *self;
        if !(1..=Self::MAX_PARALLELISM).contains(&parallelism) {
            return Some(format!(
                "parallelism {parallelism} is outside the accepted 1 to {} lanes",
                Self::MAX_PARALLELISM
            ));
        }
        if !(1..=Self::MAX_ITERATIONS).contains(&iterations) {
            return Some(format!(
                "iterations {iterations} is outside the accepted 1 to {} passes",
                Self::MAX_ITERATIONS
            ));
        }
        let floor = 8 * parallelism;
        if memory_kib < floor {
            return Some(format!(
                "memory_kib {memory_kib} is below the floor of {floor} KiB (8 KiB per lane)"
            ));
        }
        if memory_kib > Self::MAX_MEMORY_KIB {
            return Some(format!(
                "memory_kib {memory_kib} exceeds the cap of {} KiB (2 GiB)",
                Self::MAX_MEMORY_KIB
            ));
        }
        let work = u64::from(memory_kib) * u64::from(iterations);
        if work > Self::MAX_MEMORY_PASSES_KIB {
            return Some(format!(
                "memory_kib {memory_kib} times iterations {iterations} is {work} KiB-passes, \
                 over the cap of {} KiB-passes (4 GiB-passes)",
                Self::MAX_MEMORY_PASSES_KIB
            ));
        }
        None
    }
}

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

/// The encrypted file vault.
///
/// ```no_run
/// # fn demo() -> Result<(), sallyport_core::vault::VaultError> {
/// use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, FileVault, KdfParams,
///     Secret, VaultAdmin};
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
}

struct State {
    unlocked: Option<Unlocked>,
    last_used: Instant,
}

struct Unlocked {
    key: Zeroizing<[u8; KEY_LEN]>,
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
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KdfHeader {
    algorithm: String,
    version: u32,
    memory_kib: u32,
    iterations: u32,
    parallelism: u32,
    salt: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SealedBox {
    nonce: String,
    ciphertext: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordBox {
    id: String,
    version: u64,
    nonce: String,
    ciphertext: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    vault_id: String,
    kdf: KdfHeader,
    check: SealedBox,
    manifest: SealedBox,
    records: Vec<RecordBox>,
}

#[derive(Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct Manifest {
    records: Vec<(String, u64)>,
}

/// A record's plaintext, borrowed for sealing.
#[derive(Serialize)]
struct RecordOut<'a> {
    meta: &'a CredentialMeta,
    secret: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    passphrase: Option<&'a str>,
}

/// A record's plaintext, owned after opening; the strings move into [`Secret`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordIn {
    meta: CredentialMeta,
    secret: String,
    #[serde(default)]
    passphrase: Option<String>,
}

impl std::fmt::Debug for FileVault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileVault")
            .field("path", &self.path)
            .field("state", &self.state())
            .field("auto_lock", &self.auto_lock)
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
            create_private_dir(dir).map_err(|e| vault.io("create directory for", e))?;
        }
        let _lock = vault.lock_file()?;
        if vault.path.exists() {
            return Err(vault.io(
                "create",
                std::io::Error::new(std::io::ErrorKind::AlreadyExists, "file exists"),
            ));
        }
        let salt = random_bytes::<16>()?;
        let kdf = KdfHeader {
            algorithm: "argon2id".into(),
            version: 0x13,
            memory_kib: params.memory_kib,
            iterations: params.iterations,
            parallelism: params.parallelism,
            salt: STANDARD.encode(salt),
        };
        let key = derive_key(passphrase, &kdf, &salt)?;
        let vault_id = hex::encode(random_bytes::<16>()?);
        let check = seal(&key, CHECK_PLAINTEXT, &check_aad(&vault_id, &kdf))?;
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
        let key =
            derive_key(passphrase, &body.kdf, &salt).map_err(|_| self.corrupt("bad KDF header"))?;
        if open(&key, &body.check, &check_aad(&body.vault_id, &body.kdf)).is_err() {
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
            kdf: KdfParams::new(
                body.kdf.memory_kib,
                body.kdf.iterations,
                body.kdf.parallelism,
            ),
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
        VaultError::Io {
            action,
            path: self.path_text(),
            source,
        }
    }

    fn corrupt(&self, detail: impl Into<String>) -> VaultError {
        VaultError::Corrupt {
            path: self.path_text(),
            detail: detail.into(),
        }
    }

    fn read_file(&self) -> Result<Vec<u8>, VaultError> {
        let mut file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(VaultError::NotInitialized {
                    path: self.path_text(),
                });
            }
            Err(e) => return Err(self.io("read", e)),
        };
        let len = file.metadata().map_err(|e| self.io("read", e))?.len();
        if len > MAX_FILE_BYTES {
            return Err(self.corrupt("file is larger than any vault"));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        file.read_to_end(&mut bytes)
            .map_err(|e| self.io("read", e))?;
        Ok(bytes)
    }

    /// Structural checks, in the order that gives the most useful error.
    fn parse(&self, bytes: &[u8]) -> Result<Body, VaultError> {
        if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
            if MAGIC.starts_with(bytes) && !bytes.is_empty() {
                return Err(self.corrupt("truncated inside the header"));
            }
            return Err(VaultError::NotAVault {
                path: self.path_text(),
            });
        }
        if bytes.len() < PREFIX_LEN {
            return Err(self.corrupt("truncated inside the header"));
        }
        let mut version = [0u8; 4];
        version.copy_from_slice(&bytes[MAGIC.len()..PREFIX_LEN]);
        let version = u32::from_le_bytes(version);
        if version > FORMAT_VERSION {
            return Err(VaultError::NewerFormat {
                path: self.path_text(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        if version == 0 {
            return Err(self.corrupt("format version 0"));
        }
        if bytes.len() < PREFIX_LEN + TRAILER_LEN {
            return Err(self.corrupt("truncated"));
        }
        let (content, trailer) = bytes.split_at(bytes.len() - TRAILER_LEN);
        if Sha256::digest(content).as_slice() != trailer {
            return Err(self.corrupt("checksum mismatch: truncated or modified"));
        }
        let body: Body = serde_json::from_slice(&content[PREFIX_LEN..])
            .map_err(|_| self.corrupt("malformed body"))?;
        if body.kdf.algorithm != "argon2id" || body.kdf.version != 0x13 {
            return Err(self.corrupt("unknown key derivation"));
        }
        // Checked before any key is derived: the header is not authenticated yet, and a
        // crafted one must not make this unlock allocate or compute without bound.
        let params = KdfParams::new(
            body.kdf.memory_kib,
            body.kdf.iterations,
            body.kdf.parallelism,
        );
        if let Some(reason) = params.out_of_range() {
            return Err(self.corrupt(format!(
                "the key derivation header asks for more than this build accepts: argon2 {reason}"
            )));
        }
        Ok(body)
    }

    fn salt(&self, kdf: &KdfHeader) -> Result<Vec<u8>, VaultError> {
        match STANDARD.decode(&kdf.salt) {
            Ok(salt) if (8..=64).contains(&salt.len()) => Ok(salt),
            _ => Err(self.corrupt("bad salt")),
        }
    }

    fn open_records(
        &self,
        key: &[u8; KEY_LEN],
        body: &Body,
    ) -> Result<BTreeMap<String, Entry>, VaultError> {
        let manifest = open(key, &body.manifest, &manifest_aad(&body.vault_id))
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
            let sealed = SealedBox {
                nonce: record.nonce.clone(),
                ciphertext: record.ciphertext.clone(),
            };
            let plain = open(
                key,
                &sealed,
                &record_aad(&body.vault_id, &record.id, record.version),
            )
            .map_err(|()| self.corrupt(format!("record {} does not authenticate", index + 1)))?;
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
            };
            if entries.insert(name, entry).is_some() {
                return Err(self.corrupt("two records share a name"));
            }
        }
        Ok(entries)
    }

    fn lock_file(&self) -> Result<File, VaultError> {
        let mut name = self
            .path
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        name.push(".lock");
        let lock_path = self.path.with_file_name(name);
        let file = private_options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| self.io("open the write lock of", e))?;
        file.lock()
            .map_err(|e| self.io("take the write lock of", e))?;
        Ok(file)
    }

    fn write_file(&self, body: &Body) -> Result<(), VaultError> {
        let mut bytes = Vec::with_capacity(4096);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        serde_json::to_writer(&mut bytes, body).map_err(|e| self.io("encode", e.into()))?;
        let digest = Sha256::digest(&bytes);
        bytes.extend_from_slice(&digest);
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or_else(|| Path::new("."));
        let file_name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let suffix = hex::encode(random_bytes::<8>()?);
        let tmp = dir.join(format!(".{file_name}.tmp-{suffix}"));
        let result = (|| {
            let mut file = private_options().write(true).create_new(true).open(&tmp)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            drop(file);
            fs::rename(&tmp, &self.path)?;
            sync_dir(dir)
        })();
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(self.io("write", e));
        }
        Ok(())
    }

    /// Runs one write: under the file lock, re-reads the file (merging other writers' records),
    /// applies `change`, and writes the result atomically.
    fn mutate<T>(
        &self,
        change: impl FnOnce(&mut BTreeMap<String, Entry>) -> Result<T, VaultError>,
    ) -> Result<T, VaultError> {
        let mut st = self.lock_state();
        self.expire(&mut st);
        let unlocked = st.unlocked.as_mut().ok_or(VaultError::Locked)?;
        let _lock = self.lock_file()?;
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
        let new_body = unlocked.body_with(body.check, &entries, &kept)?;
        self.write_file(&new_body)?;
        // Values this instance held that the change replaced or removed stay known to the
        // scrubber.
        for (name, old) in &unlocked.entries {
            let version = entries.get(name).map(|e| e.credential.meta().version);
            if version != Some(old.credential.meta().version) {
                retire(&mut unlocked.retired, old.credential.secret().clone());
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
            if let Some(existing) = kept.get(&entry.record_id).filter(|r| r.version == version) {
                records.push(existing.clone());
                continue;
            }
            let secret = entry.credential.secret();
            let plain = RecordOut {
                meta: entry.credential.meta(),
                secret: secret.expose(),
                passphrase: secret.expose_passphrase(),
            };
            // Room for the worst-case JSON escaping, so the buffer never reallocates and
            // leaves an unzeroized copy behind.
            let capacity = 1024
                + 6 * (secret.expose().len() + secret.expose_passphrase().map_or(0, str::len))
                + 6 * serde_json::to_string(entry.credential.meta()).map_or(0, |m| m.len());
            let mut buf = Zeroizing::new(Vec::with_capacity(capacity));
            serde_json::to_writer(&mut *buf, &plain)
                .map_err(|_| VaultError::Backend("cannot encode a record".into()))?;
            let sealed = seal(
                &self.key,
                &buf,
                &record_aad(&self.vault_id, &entry.record_id, version),
            )?;
            records.push(RecordBox {
                id: entry.record_id.clone(),
                version,
                nonce: sealed.nonce,
                ciphertext: sealed.ciphertext,
            });
        }
        let manifest = Manifest {
            records: records.iter().map(|r| (r.id.clone(), r.version)).collect(),
        };
        let manifest_json = serde_json::to_vec(&manifest)
            .map_err(|_| VaultError::Backend("cannot encode the record list".into()))?;
        let manifest = seal(&self.key, &manifest_json, &manifest_aad(&self.vault_id))?;
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
        let scrubber = Arc::new(scrubber_over(
            self.entries.values().map(|e| &e.credential),
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
        Ok(credential)
    }

    fn scrubber(&self) -> Arc<Scrubber> {
        let mut st = self.lock_state();
        self.expire(&mut st);
        match st.unlocked.as_mut() {
            Some(unlocked) => unlocked.scrubber(),
            None => Arc::new(Scrubber::empty()),
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
        },
    );
    Ok(meta)
}

fn random_bytes<const N: usize>() -> Result<[u8; N], VaultError> {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf)
        .map_err(|_| VaultError::Backend("the system random number generator failed".into()))?;
    Ok(buf)
}

fn derive_key(
    passphrase: &str,
    kdf: &KdfHeader,
    salt: &[u8],
) -> Result<Zeroizing<[u8; KEY_LEN]>, VaultError> {
    let params = argon2::Params::new(
        kdf.memory_kib,
        kdf.iterations,
        kdf.parallelism,
        Some(KEY_LEN),
    )
    .map_err(|_| VaultError::Invalid("argon2 parameters out of range".into()))?;
    let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut key = Zeroizing::new([0u8; KEY_LEN]);
    argon
        .hash_password_into(passphrase.as_bytes(), salt, &mut *key)
        .map_err(|_| VaultError::Backend("key derivation failed".into()))?;
    Ok(key)
}

fn cipher(key: &[u8; KEY_LEN]) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(&(*key).into())
}

fn seal(key: &[u8; KEY_LEN], plaintext: &[u8], aad: &[u8]) -> Result<SealedBox, VaultError> {
    let nonce_bytes = random_bytes::<24>()?;
    let nonce = XNonce::from(nonce_bytes);
    let ciphertext = cipher(key)
        .encrypt(
            &nonce,
            Payload {
                msg: plaintext,
                aad,
            },
        )
        .map_err(|_| VaultError::Backend("encryption failed".into()))?;
    Ok(SealedBox {
        nonce: STANDARD.encode(nonce_bytes),
        ciphertext: STANDARD.encode(ciphertext),
    })
}

fn open(key: &[u8; KEY_LEN], sealed: &SealedBox, aad: &[u8]) -> Result<Zeroizing<Vec<u8>>, ()> {
    let nonce = STANDARD.decode(&sealed.nonce).map_err(drop)?;
    let nonce: [u8; 24] = nonce.try_into().map_err(drop)?;
    let ciphertext = STANDARD.decode(&sealed.ciphertext).map_err(drop)?;
    cipher(key)
        .decrypt(
            &XNonce::from(nonce),
            Payload {
                msg: &ciphertext,
                aad,
            },
        )
        .map(Zeroizing::new)
        .map_err(drop)
}

fn check_aad(vault_id: &str, kdf: &KdfHeader) -> Vec<u8> {
    format!(
        "sallyport-vault\0v1\0check\0{vault_id}\0argon2id\0{}\0{}\0{}\0{}\0{}",
        kdf.version, kdf.memory_kib, kdf.iterations, kdf.parallelism, kdf.salt
    )
    .into_bytes()
}

fn manifest_aad(vault_id: &str) -> Vec<u8> {
    format!("sallyport-vault\0v1\0manifest\0{vault_id}").into_bytes()
}

fn record_aad(vault_id: &str, record_id: &str, version: u64) -> Vec<u8> {
    format!("sallyport-vault\0v1\0record\0{vault_id}\0{record_id}\0{version}").into_bytes()
}

fn private_options() -> OpenOptions {
    #[allow(unused_mut, reason = "mode is only set on Unix")]
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// Writes the lock marker for a vault (used by [`FileVault::lock_everywhere`] and the
/// keychain vault).
pub(super) fn write_lock_marker(marker: &Path) -> std::io::Result<()> {
    if let Some(dir) = marker.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_private_dir(dir)?;
    }
    let mut file = private_options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(marker)?;
    file.write_all(b"locked by sallyport; unlock with the passphrase to remove\n")?;
    file.sync_all()
}
