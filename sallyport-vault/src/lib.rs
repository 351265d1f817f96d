//! sallyport's credential stores.
//!
//! Two [`Vault`](sallyport_kernel::vault::Vault)s, each behind its own feature, so a program
//! compiles only the one it uses:
//!
//! | vault | feature | where the secrets live |
//! |---|---|---|
//! | [`FileVault`] | `file` (default) | one encrypted file: Argon2id + XChaCha20-Poly1305 per record |
//! | [`KeychainVault`] | `keychain` | the OS keychain (Secret Service, kernel keyutils, macOS Keychain, Windows Credential Manager) |
//!
//! The in-memory vault for tests (`MemoryVault`) and the vault traits live in
//! `sallyport-kernel`. Most programs name these through `sallyport-core`, which re-exports
//! them as `sallyport_core::vault::FileVault` (its default features) and
//! `sallyport_core::vault::KeychainVault` (feature `keychain`).
//!
//! # Example
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use sallyport_kernel::vault::{Binding, CredentialKind, CredentialMeta, Secret, VaultAdmin};
//! use sallyport_vault::{FileVault, KdfParams};
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("vault.sallyport");
//! # let passphrase = "correct horse battery staple";
//! # let kdf = KdfParams::new(8 * 1024, 1, 1);
//! let vault = FileVault::create(&path, passphrase, kdf)?; // created unlocked
//! let meta = CredentialMeta::new(
//!     "deploy-api",
//!     CredentialKind::Bearer,
//!     Binding::url("https://deploy.example.com"),
//! );
//! vault.add(meta, Secret::new("token-value"))?;
//! // Later, in the process that calls: `FileVault::open(&path)` and `unlock(passphrase)`.
//! # Ok(()) }
//! ```
//!
//! # Unlocking, and debug builds
//!
//! The process that runs the executor unlocks its own [`FileVault`]: with
//! [`FileVault::unlock`], [`FileVault::unlock_with_passphrase_file`] (a 0600 file, as a
//! service manager provides) or [`FileVault::unlock_from_env`]. `sallyport vault unlock` in a
//! shell does not unlock another process's vault.
//!
//! The key derivation is Argon2id with [`KdfParams::default`] (64 MiB, 3 passes) in every
//! build profile: a vault made by a debug build is opened by a release build and must be as
//! hard to guess. Unoptimized, `create` and `unlock` took 4.8 s instead of 0.27 s (issue 41),
//! so optimize the two crates that do the work in your `Cargo.toml` (a dependency's profile
//! settings do not reach your build):
//!
//! ```toml
//! [profile.dev.package.argon2]
//! opt-level = 3
//! [profile.dev.package.blake2]
//! opt-level = 3
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "file")]
mod file;
mod fs;
#[cfg(feature = "keychain")]
mod keychain;

#[cfg(feature = "file")]
#[cfg_attr(docsrs, doc(cfg(feature = "file")))]
pub use self::file::{FORMAT_VERSION, FileVault, FileVaultStatus, KdfParams};
#[cfg(feature = "keychain")]
#[cfg_attr(docsrs, doc(cfg(feature = "keychain")))]
pub use self::keychain::{KeychainBackend, KeychainVault};
