//! Credentials: the [`Vault`] trait, credential kinds and bindings, and an in-memory vault.
//!
//! Names, kinds and bindings cross the vault boundary; secret values do not. A channel gets a
//! [`Credential`] at dispatch time and attaches it itself; nothing returns a value to the host
//! or the agent, and secret types implement neither `Serialize` nor `Display`.

mod credential;
mod memory;

use std::sync::Arc;

use async_trait::async_trait;

pub use self::credential::{
    ApiKeyPlacement, Binding, Credential, CredentialKind, CredentialMeta, Secret, SshBinding,
};
pub use self::memory::MemoryVault;
use crate::scrub::Scrubber;

/// Whether a vault can resolve credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VaultState {
    /// Keys are not loaded; every call is refused with `vault_locked`.
    Locked,
    /// Credentials can be resolved.
    Unlocked,
}

/// A vault error. Never carries a secret value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VaultError {
    /// The vault is locked.
    #[error("the vault is locked")]
    Locked,
    /// No credential has that name.
    #[error("no credential named `{0}`")]
    NotFound(String),
    /// The backend failed.
    #[error("vault backend failed: {0}")]
    Backend(String),
}

/// Holds credentials and resolves them by name for a channel.
///
/// Implementations: [`MemoryVault`] here; the encrypted file vault and OS keychains live in
/// the vault modules of the vault issue.
#[async_trait]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a sallyport vault",
    note = "implement `sallyport_core::vault::Vault`, or use `MemoryVault` in tests"
)]
pub trait Vault: Send + Sync + 'static {
    /// Whether the vault is locked.
    fn state(&self) -> VaultState;

    /// Resolves the credential `name` for a channel.
    ///
    /// # Errors
    ///
    /// [`VaultError::Locked`], [`VaultError::NotFound`] or a backend failure.
    async fn resolve(&self, name: &str) -> Result<Credential, VaultError>;

    /// A scrubber that knows every currently unlocked secret value.
    fn scrubber(&self) -> Arc<Scrubber>;
}
