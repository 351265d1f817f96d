//! Envelope encryption of a grant row: the key-encryption key ([`GrantKek`]) a vault holds,
//! a fresh data key for every row it writes, and XChaCha20-Poly1305 for both boxes, with
//! the row's identity (credential, subject, version) as associated data.
//!
//! A leaf: it knows nothing of PostgreSQL. What a row holds is `grants/mod.rs`'s business.

use std::fmt;

use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{KeyInit, XChaCha20Poly1305, XNonce};
use sallyport_core::vault::{Grant, GrantKey, Secret, Vault, VaultError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// Length of a key (key-encryption or data key) in bytes.
const KEY_LEN: usize = 32;
/// Length of an XChaCha20-Poly1305 nonce in bytes.
const NONCE_LEN: usize = 24;

/// The key-encryption key of a [`PgGrantStore`](super::PgGrantStore): 32 bytes the vault
/// holds, which wrap the data key of every grant row. The database alone reveals nothing;
/// [`PgGrantStore::rotate_key`](super::PgGrantStore::rotate_key) moves every row to a new
/// one.
///
/// Its id ([`GrantKek::id`]) is derived from the key (16 hex digits of a SHA-256 over it
/// and a fixed label) and stored with every row, so a row read with another key is told
/// apart from a damaged one. `Debug` prints the id only; the key is zeroized when dropped.
#[derive(Clone)]
pub struct GrantKek {
    id: String,
    key: Zeroizing<[u8; KEY_LEN]>,
}

impl fmt::Debug for GrantKek {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrantKek")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl GrantKek {
    /// The key `bytes`.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        let key = Zeroizing::new(bytes);
        let mut hash = Sha256::new();
        hash.update(b"sallyport grant key id\0");
        hash.update(key.as_slice());
        let id = hex::encode(&hash.finalize()[..8]);
        Self { id, key }
    }

    /// A key from the system random number generator (to store in the vault once:
    /// [`GrantKek::to_secret`]).
    ///
    /// # Errors
    ///
    /// [`VaultError::Backend`] when the random number generator fails.
    pub fn generate() -> Result<Self, VaultError> {
        Ok(Self::from_bytes(random_bytes::<KEY_LEN>()?))
    }

    /// The key from a vault secret: 64 hex digits, or the standard base64 of 32 bytes.
    ///
    /// # Errors
    ///
    /// [`VaultError::Invalid`] when the value is neither (the message names no part of it).
    pub fn from_secret(secret: &Secret) -> Result<Self, VaultError> {
        use base64::Engine as _;
        let text = secret.expose().trim();
        let mut bytes = Zeroizing::new([0u8; KEY_LEN]);
        if text.len() == 2 * KEY_LEN && hex::decode_to_slice(text, &mut *bytes).is_ok() {
            return Ok(Self::from_bytes(*bytes));
        }
        let decoded = Zeroizing::new(
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .unwrap_or_default(),
        );
        if decoded.len() == KEY_LEN {
            bytes.copy_from_slice(&decoded);
            return Ok(Self::from_bytes(*bytes));
        }
        Err(VaultError::Invalid(
            "a grant store's key is 32 bytes, written as 64 hex digits or in base64".into(),
        ))
    }

    /// The key held in `vault` as credential `name` (its value, as [`GrantKek::from_secret`]
    /// reads it): how a host names the key in its configuration.
    ///
    /// # Errors
    ///
    /// What [`Vault::resolve`] returns (`Locked`, `NotFound`), or [`VaultError::Invalid`]
    /// when the value is not a key.
    pub async fn from_vault(vault: &dyn Vault, name: &str) -> Result<Self, VaultError> {
        let credential = vault.resolve(name).await?;
        Self::from_secret(credential.secret())
    }

    /// The key as 64 hex digits, to store in a vault.
    pub fn to_secret(&self) -> Secret {
        Secret::new(hex::encode(self.key.as_slice()))
    }

    /// The key's id, stored with every row it wraps.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// `N` bytes from the system random number generator.
fn random_bytes<const N: usize>() -> Result<[u8; N], VaultError> {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf)
        .map_err(|_| VaultError::Backend("the system random number generator failed".into()))?;
    Ok(buf)
}

/// `nonce || ciphertext` of `plain` under `key` with `aad`.
fn seal(key: &[u8; KEY_LEN], plain: &[u8], aad: &[u8]) -> Result<Vec<u8>, VaultError> {
    let nonce = random_bytes::<NONCE_LEN>()?;
    let sealed = XChaCha20Poly1305::new(&(*key).into())
        .encrypt(&XNonce::from(nonce), Payload { msg: plain, aad })
        .map_err(|_| VaultError::Backend("encryption failed".into()))?;
    let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&sealed);
    Ok(out)
}

/// What [`seal`] sealed; `None` when it is too short or does not authenticate.
fn open(key: &[u8; KEY_LEN], boxed: &[u8], aad: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
    let (nonce, sealed) = boxed.split_at_checked(NONCE_LEN)?;
    let nonce: [u8; NONCE_LEN] = nonce.try_into().ok()?;
    XChaCha20Poly1305::new(&(*key).into())
        .decrypt(&XNonce::from(nonce), Payload { msg: sealed, aad })
        .ok()
        .map(Zeroizing::new)
}

/// The associated data binding a box to one row: a label, then the credential, whether the
/// grant is shared, the subject (each length-prefixed) and the version.
fn row_aad(label: &[u8], key: &GrantKey, version: u64) -> Vec<u8> {
    let subject = key.subject.as_deref().unwrap_or_default();
    let mut aad = Vec::with_capacity(label.len() + key.credential.len() + subject.len() + 32);
    aad.extend_from_slice(label);
    for part in [key.credential.as_bytes(), subject.as_bytes()] {
        aad.extend_from_slice(&(part.len() as u64).to_be_bytes());
        aad.extend_from_slice(part);
    }
    aad.push(u8::from(key.subject.is_none()));
    aad.extend_from_slice(&version.to_be_bytes());
    aad
}

/// A sealed grant as its row holds it.
#[derive(Debug)]
pub(super) struct SealedGrant {
    /// The id of the key-encryption key that wraps the data key.
    pub(super) key_id: String,
    /// The data key, wrapped: nonce and ciphertext.
    pub(super) wrapped_key: Vec<u8>,
    /// The grant's tokens and times under the data key: nonce and ciphertext.
    pub(super) payload: Vec<u8>,
}

#[derive(Serialize)]
struct PayloadOut<'a> {
    access_token: Option<&'a str>,
    issued_at_ms: u64,
    expires_at_ms: u64,
    refresh_token: Option<&'a str>,
    reconnect: Option<&'a str>,
    /// The scopes granted, when recorded; left out otherwise, so rows sealed before read
    /// the same.
    #[serde(skip_serializing_if = "Option::is_none")]
    scopes: Option<&'a [String]>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PayloadIn {
    access_token: Option<String>,
    issued_at_ms: u64,
    expires_at_ms: u64,
    refresh_token: Option<String>,
    reconnect: Option<String>,
    #[serde(default)]
    scopes: Option<Vec<String>>,
}

/// Seals `grant` (at its version) as the row of `key`, under a fresh data key wrapped by
/// `kek`.
pub(super) fn seal_grant(
    kek: &GrantKek,
    key: &GrantKey,
    grant: &Grant,
) -> Result<SealedGrant, VaultError> {
    let plain = PayloadOut {
        access_token: grant.access_token().map(Secret::expose),
        issued_at_ms: grant.issued_at_ms(),
        expires_at_ms: grant.expires_at_ms(),
        refresh_token: grant.refresh_token().map(Secret::expose),
        reconnect: grant.reconnect_reason(),
        scopes: grant.scopes(),
    };
    // Room for the worst-case JSON escaping, so the buffer never reallocates and leaves an
    // unzeroized copy behind.
    let room = 6 * grant.secrets().map(str::len).sum::<usize>()
        + 6 * grant.reconnect_reason().map_or(0, str::len)
        + grant
            .scopes()
            .map_or(0, |s| s.iter().map(|x| 6 * x.len() + 3).sum::<usize>())
        + 170;
    let mut json = Zeroizing::new(Vec::with_capacity(room));
    serde_json::to_writer(&mut *json, &plain)
        .map_err(|_| VaultError::Backend("cannot encode a grant".into()))?;
    let data_key = Zeroizing::new(random_bytes::<KEY_LEN>()?);
    let version = grant.version();
    Ok(SealedGrant {
        key_id: kek.id.clone(),
        wrapped_key: seal(&kek.key, &*data_key, &wrap_aad(&kek.id, key, version))?,
        payload: seal(
            &data_key,
            &json,
            &row_aad(b"sallyport-grant\0", key, version),
        )?,
    })
}

fn wrap_aad(key_id: &str, key: &GrantKey, version: u64) -> Vec<u8> {
    let mut label = b"sallyport-grant-key\0".to_vec();
    label.extend_from_slice(key_id.as_bytes());
    label.push(0);
    row_aad(&label, key, version)
}

/// Why a row did not open.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum OpenError {
    /// The row is under a key-encryption key the store does not hold (its id).
    UnknownKey(String),
    /// The row does not authenticate under its key: moved to another credential, subject or
    /// version, altered, or damaged.
    Damaged,
}

/// The data key of a row, unwrapped by whichever of `keys` has the row's key id.
fn unwrap_key(
    keys: &[&GrantKek],
    key: &GrantKey,
    version: u64,
    key_id: &str,
    wrapped_key: &[u8],
) -> Result<Zeroizing<[u8; KEY_LEN]>, OpenError> {
    let kek = keys
        .iter()
        .find(|k| k.id == key_id)
        .ok_or_else(|| OpenError::UnknownKey(key_id.to_owned()))?;
    let data_key =
        open(&kek.key, wrapped_key, &wrap_aad(key_id, key, version)).ok_or(OpenError::Damaged)?;
    let bytes: [u8; KEY_LEN] = data_key
        .as_slice()
        .try_into()
        .map_err(|_| OpenError::Damaged)?;
    Ok(Zeroizing::new(bytes))
}

/// The grant a row of `key` at `version` holds.
pub(super) fn open_grant(
    keys: &[&GrantKek],
    key: &GrantKey,
    version: u64,
    sealed: &SealedGrant,
) -> Result<Grant, OpenError> {
    let data_key = unwrap_key(keys, key, version, &sealed.key_id, &sealed.wrapped_key)?;
    let json = open(
        &data_key,
        &sealed.payload,
        &row_aad(b"sallyport-grant\0", key, version),
    )
    .ok_or(OpenError::Damaged)?;
    let plain: PayloadIn = serde_json::from_slice(&json).map_err(|_| OpenError::Damaged)?;
    Ok(Grant::from_parts(
        version,
        plain.access_token.map(Secret::new),
        plain.issued_at_ms,
        plain.expires_at_ms,
        plain.refresh_token.map(Secret::new),
        plain.reconnect,
    )
    .with_scopes(plain.scopes))
}

/// The row's data key wrapped again under `to` (the payload stays as it is): what a key
/// rotation writes.
pub(super) fn rewrap(
    keys: &[&GrantKek],
    to: &GrantKek,
    key: &GrantKey,
    version: u64,
    key_id: &str,
    wrapped_key: &[u8],
) -> Result<Vec<u8>, OpenError> {
    let data_key = unwrap_key(keys, key, version, key_id, wrapped_key)?;
    seal(&to.key, &*data_key, &wrap_aad(&to.id, key, version)).map_err(|_| OpenError::Damaged)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use sallyport_core::vault::GrantUpdate;

    use super::*;

    fn grant() -> Grant {
        let now = SystemTime::now();
        Grant::new()
            .apply(GrantUpdate::Issued {
                access_token: Secret::new("at-canary-1"),
                issued_at: now,
                expires_at: now + Duration::from_secs(60),
                refresh_token: Some(Secret::new("rt-canary-1")),
            })
            .0
    }

    #[test]
    fn a_sealed_grant_opens_only_as_its_own_row_under_its_own_key() {
        let kek = GrantKek::from_bytes([7; 32]);
        let alice = GrantKey::for_subject("github", "alice");
        let sealed = seal_grant(&kek, &alice, &grant()).expect("seal");
        let opened = open_grant(&[&kek], &alice, 1, &sealed).expect("open");
        assert_eq!(
            opened.access_token().map(Secret::expose),
            Some("at-canary-1")
        );
        assert_eq!(
            opened.refresh_token().map(Secret::expose),
            Some("rt-canary-1")
        );
        assert_eq!(opened.version(), 1);
        let bob = GrantKey::for_subject("github", "bob");
        assert_eq!(
            open_grant(&[&kek], &bob, 1, &sealed).err(),
            Some(OpenError::Damaged)
        );
        assert_eq!(
            open_grant(&[&kek], &alice, 2, &sealed).err(),
            Some(OpenError::Damaged)
        );
        let shared = GrantKey::shared("github");
        assert_eq!(
            open_grant(&[&kek], &shared, 1, &sealed).err(),
            Some(OpenError::Damaged)
        );
        let other = GrantKek::from_bytes([8; 32]);
        assert_eq!(
            open_grant(&[&other], &alice, 1, &sealed).err(),
            Some(OpenError::UnknownKey(kek.id().to_owned()))
        );
    }

    #[tokio::test]
    async fn a_key_named_in_the_configuration_is_read_from_the_vault() {
        use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault};
        let kek = GrantKek::from_bytes([0x5a; 32]);
        let vault = MemoryVault::new();
        vault.set(
            CredentialMeta::new(
                "grants-key",
                CredentialKind::Bearer,
                Binding::url("https://db.internal"),
            ),
            kek.to_secret(),
        );
        let read = GrantKek::from_vault(&vault, "grants-key")
            .await
            .expect("key");
        assert_eq!(read.id(), kek.id());
        assert!(matches!(
            GrantKek::from_vault(&vault, "missing").await,
            Err(VaultError::NotFound(_))
        ));
        vault.lock();
        assert!(matches!(
            GrantKek::from_vault(&vault, "grants-key").await,
            Err(VaultError::Locked)
        ));
    }

    #[test]
    fn a_key_reads_from_hex_or_base64_and_debug_shows_its_id_only() {
        let kek = GrantKek::from_bytes([0xab; 32]);
        let hex_form = kek.to_secret();
        assert_eq!(
            GrantKek::from_secret(&hex_form).expect("hex").id(),
            kek.id()
        );
        let b64 = Secret::new("q6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6s=");
        assert_eq!(GrantKek::from_secret(&b64).expect("base64").id(), kek.id());
        assert!(matches!(
            GrantKek::from_secret(&Secret::new("short")),
            Err(VaultError::Invalid(_))
        ));
        let debug = format!("{kek:?}");
        assert!(!debug.contains("abab"), "{debug}");
        assert!(debug.contains(kek.id()), "{debug}");
    }
}
