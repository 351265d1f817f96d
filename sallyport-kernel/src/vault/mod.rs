//! Credentials: the [`Vault`] trait, its [`VaultAdmin`] surface, credential kinds and bindings,
//! and three vaults.
//!
//! Names, kinds and bindings cross the vault boundary; secret values do not. A channel gets a
//! [`Credential`] at dispatch time and attaches it itself; nothing returns a value to the host
//! or the agent, and secret types implement neither `Serialize` nor `Display`.
//!
//! | vault | where the secrets live | for |
//! |---|---|---|
//! | `FileVault` (`sallyport-vault`) | one encrypted file (Argon2id + XChaCha20-Poly1305 per record) | the embedded default |
//! | `KeychainVault` (`sallyport-vault`, feature `keychain`) | the OS keychain (Secret Service, kernel keyutils, macOS Keychain, Windows Credential Manager) | desktops and servers with a keychain |
//! | [`MemoryVault`] | process memory | tests and ephemeral use |
//!
//! An OAuth credential keeps its grant (tokens) in the vault's [`GrantStore`]: one grant
//! shared by every caller, or, for a credential configured
//! [`per_subject`](OAuthClient::per_subject), one grant per end user ([`GrantKey::for_subject`]),
//! used for calls of sessions that name that user
//! ([`Session::for_subject`](crate::session::Session::for_subject)).
//!
//! Every vault is `locked` or `unlocked`. While locked the executor refuses every call with
//! `vault_locked` before consent, and the refusal is audited. A lock marker file
//! ([`lock_marker_path`]) lets another process — `sallyport vault lock` — lock a running
//! executor's vault without knowing the passphrase.

mod credential;
mod grant;
mod marker;
mod memory;

use std::sync::Arc;

use async_trait::async_trait;

pub use self::credential::{
    ApiKeyPlacement, Binding, ClientCertificate, Credential, CredentialKind, CredentialMeta,
    OAuthClient, Secret, SshBinding, SshCertificateAuthority,
};
pub use self::grant::{
    Grant, GrantKey, GrantSecrets, GrantStore, GrantSummary, GrantUpdate, HostedGrants,
    RefreshHold, Replaced,
};
pub use self::marker::{default_data_dir, lock_marker_path};
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

/// A vault error. Never carries a secret value: the payloads are names, paths, format numbers
/// and sentences written by sallyport, never text from a backend that might echo a value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VaultError {
    /// The vault is locked.
    #[error("the vault is locked")]
    Locked,
    /// No credential has that name.
    #[error("no credential named `{0}`")]
    NotFound(String),
    /// A credential with that name already exists (use rotate to change its value).
    #[error("a credential named `{0}` already exists")]
    AlreadyExists(String),
    /// The name or metadata is not acceptable.
    #[error("invalid credential: {0}")]
    Invalid(String),
    /// The passphrase does not open this vault. The file was left untouched.
    #[error("wrong passphrase for vault {path}; the file was left untouched")]
    WrongPassphrase {
        /// The vault file.
        path: String,
    },
    /// The file is damaged or truncated. It was left untouched.
    #[error("vault {path} is damaged or truncated ({detail}); the file was left untouched")]
    Corrupt {
        /// The vault file.
        path: String,
        /// What is wrong, in a few words.
        detail: String,
    },
    /// The file is not a sallyport vault. It was left untouched.
    #[error("{path} is not a sallyport vault file; it was left untouched")]
    NotAVault {
        /// The file.
        path: String,
    },
    /// The file was written by a newer sallyport. It was left untouched.
    #[error(
        "vault {path} has format {found}, newer than this build understands ({supported}); the file was left untouched"
    )]
    NewerFormat {
        /// The file.
        path: String,
        /// The format found.
        found: u32,
        /// The newest format this build reads.
        supported: u32,
    },
    /// There is no vault at this path yet.
    #[error("no vault at {path}; create one with `sallyport vault init`")]
    NotInitialized {
        /// The path looked at.
        path: String,
    },
    /// A file operation failed.
    #[error("cannot {action} {path}")]
    Io {
        /// What was being done (`read`, `write`, `lock`, …).
        action: &'static str,
        /// The file.
        path: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The backend failed.
    #[error("vault backend failed: {0}")]
    Backend(String),
}

/// The administrative surface of a vault: what a human (through `sallyport vault …`) uses to
/// put credentials in, change them and see what is there.
///
/// [`MemoryVault`] also has inherent `set`/`remove`/`list` methods (infallible, for tests);
/// call the trait's through `VaultAdmin::set(&vault, …)` there.
///
/// There is deliberately no method that returns a secret value: `list` returns metadata
/// (name, kind, binding, version) only.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no vault admin surface",
    note = "use `FileVault`, `KeychainVault` or `MemoryVault`"
)]
pub trait VaultAdmin: Send + Sync {
    /// Stores a new credential. Its version starts at 1 (`meta.version` is ignored).
    ///
    /// # Errors
    ///
    /// [`VaultError::AlreadyExists`] when the name is taken (use [`VaultAdmin::rotate`] or [`VaultAdmin::set`]),
    /// [`VaultError::Invalid`] for an empty name, [`VaultError::Locked`] when the vault must
    /// be unlocked to write, or a backend failure.
    fn add(&self, meta: CredentialMeta, secret: Secret) -> Result<CredentialMeta, VaultError>;

    /// Stores a credential, replacing kind, binding and value of an existing one of the same
    /// name (whose version then goes up by one).
    ///
    /// # Errors
    ///
    /// As [`VaultAdmin::add`], without `AlreadyExists`.
    fn set(&self, meta: CredentialMeta, secret: Secret) -> Result<CredentialMeta, VaultError>;

    /// Replaces the value of credential `name`, keeping its kind and binding; the version goes
    /// up by one, so a credential an upstream rejected becomes usable again.
    ///
    /// # Errors
    ///
    /// [`VaultError::NotFound`], [`VaultError::Locked`] or a backend failure.
    fn rotate(&self, name: &str, secret: Secret) -> Result<CredentialMeta, VaultError>;

    /// Removes credential `name`.
    ///
    /// # Errors
    ///
    /// [`VaultError::NotFound`], [`VaultError::Locked`] or a backend failure.
    fn remove(&self, name: &str) -> Result<(), VaultError>;

    /// The metadata of every credential, sorted by name. Never a value.
    ///
    /// # Errors
    ///
    /// [`VaultError::Locked`] when names are encrypted and the vault is locked, or a backend
    /// failure.
    fn list(&self) -> Result<Vec<CredentialMeta>, VaultError>;
}

/// Checks a credential's metadata before a vault stores it: the name ([`check_name`]) and the
/// binding. HTTP kinds (bearer, basic, API key, OAuth) need at least one base URL and no SSH binding;
/// SSH kinds need at least one host + user and no URL. An OAuth client has a client id, a
/// token endpoint (`https://`, or `http://` on loopback) and scope tokens; only an
/// `oauth_refresh` credential may be held for each subject (`per_subject`). A URL is `https://` or `http://` with
/// a host, without user info, query or fragment; SSH hosts and users are single words.
///
/// # Errors
///
/// [`VaultError::Invalid`] with a sentence saying what is wrong.
pub fn check_meta(meta: &CredentialMeta) -> Result<(), VaultError> {
    check_name(&meta.name)?;
    let ssh_kind = meta.kind.is_ssh();
    let invalid = |m: &str| Err(VaultError::Invalid(m.to_owned()));
    if ssh_kind {
        if meta.binding.ssh.is_empty() || !meta.binding.urls.is_empty() {
            return invalid(
                "an SSH credential is bound to one or more SSH user@host pairs and no URL",
            );
        }
    } else if meta.binding.urls.is_empty() || !meta.binding.ssh.is_empty() {
        return invalid("an HTTP credential is bound to one or more base URLs and no SSH host");
    }
    for url in &meta.binding.urls {
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"));
        let Some(rest) = rest else {
            return invalid("a bound URL starts with https:// (or http:// for loopback)");
        };
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.is_empty()
            || authority.contains('@')
            || url.contains(['?', '#'])
            || url.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return invalid("a bound URL has a host and no user info, query, fragment or spaces");
        }
    }
    let word = |s: &str| {
        !s.is_empty()
            && s.len() <= 255
            && !s
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '@')
    };
    for ssh in &meta.binding.ssh {
        if !word(&ssh.host) || !word(&ssh.user) {
            return invalid("an SSH binding is user@host with a non-empty user and host");
        }
    }
    match &meta.kind {
        CredentialKind::Basic { user } if user.is_empty() || user.contains(':') => {
            return invalid("a basic credential's user is non-empty and has no colon");
        }
        CredentialKind::ApiKey {
            placement: ApiKeyPlacement::Header(name) | ApiKeyPlacement::Query(name),
        } if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) =>
        {
            return invalid("an API key's header or query name is a token of A-Z a-z 0-9 - _ .");
        }
        CredentialKind::OAuthClientCredentials(client) if client.per_subject => {
            return invalid(
                "a client-credentials grant is the client's own, not a user's: only an oauth_refresh credential is held for each subject",
            );
        }
        CredentialKind::OAuthClientCredentials(client) | CredentialKind::OAuthRefresh(client) => {
            check_oauth_client(client)?;
        }
        CredentialKind::ClientCertificate(cert) if cert.certificate_count() == 0 => {
            return invalid(
                "a client certificate's chain is PEM with at least one -----BEGIN CERTIFICATE----- block, leaf first",
            );
        }
        CredentialKind::SshCertificateAuthority(ca)
            if !(SshCertificateAuthority::MIN_VALIDITY_SECS
                ..=SshCertificateAuthority::MAX_VALIDITY_SECS)
                .contains(&ca.validity_secs) =>
        {
            return invalid(
                "an SSH certificate authority's validity_secs is from 30 to 3600 (certificates are short-lived)",
            );
        }
        _ => {}
    }
    Ok(())
}

/// An OAuth client: a client id of printable characters, a token endpoint that is
/// `https://` (or `http://` on loopback) without user info or fragment, and scopes that are
/// RFC 6749 scope tokens.
fn check_oauth_client(client: &OAuthClient) -> Result<(), VaultError> {
    let invalid = |m: &str| Err(VaultError::Invalid(m.to_owned()));
    if client.client_id.is_empty()
        || client.client_id.len() > 255
        || client
            .client_id
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
    {
        return invalid("an OAuth client id is 1-255 printable characters without spaces");
    }
    let endpoint = &client.token_endpoint;
    let (rest, plain) = match endpoint.strip_prefix("https://") {
        Some(rest) => (rest, false),
        None => match endpoint.strip_prefix("http://") {
            Some(rest) => (rest, true),
            None => return invalid("an OAuth token endpoint starts with https://"),
        },
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty()
        || authority.contains('@')
        || endpoint.contains('#')
        || endpoint
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return invalid("an OAuth token endpoint has a host and no user info, fragment or spaces");
    }
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if plain && !loopback {
        return invalid(
            "an OAuth token endpoint is https:// (plain http:// only on loopback): it receives the client secret",
        );
    }
    let scope_char = |c: char| c == '!' || ('#'..='[').contains(&c) || (']'..='~').contains(&c);
    if client
        .scopes
        .iter()
        .any(|s| s.is_empty() || !s.chars().all(scope_char))
    {
        return invalid(
            "an OAuth scope is a non-empty token of printable ASCII without spaces, quotes or backslashes",
        );
    }
    Ok(())
}

/// Checks a credential name: 1–128 characters of `A–Z a–z 0–9 . _ -`, not starting with `.`
/// or `_` (names starting with `_` are reserved for sallyport's own entries).
///
/// # Errors
///
/// [`VaultError::Invalid`] with a sentence saying what is wrong.
pub fn check_name(name: &str) -> Result<(), VaultError> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if name.is_empty() || name.len() > 128 || !ok_chars || name.starts_with(['.', '_']) {
        return Err(VaultError::Invalid(format!(
            "credential names are 1-128 characters of A-Z a-z 0-9 . _ - and do not start with . or _ ({} characters given)",
            name.chars().count()
        )));
    }
    Ok(())
}

/// How many replaced or removed secret values a vault keeps (zeroized on lock) so that its
/// scrubber still redacts an upstream's echo of an old value after a rotation.
pub const RETIRED_VALUES: usize = 64;

/// Keeps `old` among a vault's retired values (for vault implementations), dropping (and zeroizing) the oldest beyond
/// [`RETIRED_VALUES`].
pub fn retire(retired: &mut Vec<Secret>, old: Secret) {
    if retired.len() >= RETIRED_VALUES {
        retired.remove(0);
    }
    retired.push(old);
}

/// A scrubber over the current credentials, their OAuth grants and the retired values (for
/// vault implementations that keep grants).
pub fn scrubber_with_grants<'a>(
    current: impl Iterator<Item = &'a Credential>,
    grants: impl Iterator<Item = &'a Grant>,
    retired: &'a [Secret],
) -> Scrubber {
    Scrubber::new(
        current
            .map(Credential::secret)
            .chain(retired)
            .flat_map(|s| std::iter::once(s.expose()).chain(s.expose_passphrase()))
            .chain(grants.flat_map(Grant::secrets)),
    )
}

/// A scrubber over the current credentials and the retired values (for vault
/// implementations: what [`Vault::scrubber`] returns).
pub fn scrubber_over<'a>(
    current: impl Iterator<Item = &'a Credential>,
    retired: &'a [Secret],
) -> Scrubber {
    Scrubber::new(
        current
            .map(Credential::secret)
            .chain(retired)
            .flat_map(|s| std::iter::once(s.expose()).chain(s.expose_passphrase())),
    )
}

/// Holds credentials and resolves them by name for a channel.
///
/// Implementations: [`MemoryVault`] here; the encrypted file vault and the OS keychains in
/// the `sallyport-vault` crate (re-exported by `sallyport-core` as `vault::FileVault` and
/// `vault::KeychainVault`).
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

    /// A scrubber that knows every currently unlocked secret value, and the values replaced
    /// or removed since the vault was unlocked (the built-in vaults keep the last
    /// 64), so an upstream's echo of an old value is still redacted after a rotation.
    /// Empty while locked.
    fn scrubber(&self) -> Arc<Scrubber>;

    /// The store of this vault's OAuth grants, if it keeps them (`MemoryVault` and
    /// `FileVault` do); the default keeps none, and OAuth credentials of such a vault are
    /// refused by the channel.
    fn grants(&self) -> Option<Arc<dyn GrantStore>> {
        None
    }
}
