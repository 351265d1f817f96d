//! The OAuth grant store on PostgreSQL ([`PgGrantStore`]): every process of a fleet reads
//! and refreshes the same grants, sealed under a key the vault holds.
//!
//! One row per grant in `sallyport_grants` (migration 4): the credential, the subject (empty
//! with `shared` for a credential's shared grant), the version, the id of the
//! key-encryption key, the row's wrapped data key and its sealed payload (`seal.rs`), and
//! what `list` shows beside them (scopes, expiry, whether a refresh token is held, why the
//! account must be connected again), never a token. The scopes are the ones the provider
//! granted when the grant recorded them (`scopes_granted`, migration 5), else the
//! credential's configuration.
//!
//! - `replace` is one compare-and-set: `UPDATE … WHERE version = $expected`, or
//!   `INSERT … ON CONFLICT DO NOTHING` for a grant not stored yet (version 0).
//! - `hold_refresh` takes a transaction-scoped advisory lock on a hash of the key, on a
//!   connection the hold keeps with its transaction open: let go when the hold drops
//!   (rolled back) and when the process dies (the server ends the connection's transaction).
//!   Holds take their connections from a pool of their own, so holders waiting for the lock
//!   never starve the holder's own `replace` of a connection; and within one process the
//!   holders of one key queue in memory first, so a key ties up one waiting connection per
//!   process, not one per waiting call.

mod builder;
mod seal;

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use async_trait::async_trait;
use deadpool_postgres::{Object, Pool};
use sallyport_core::vault::{
    Grant, GrantKey, GrantSecrets, GrantStore, GrantSummary, GrantUpdate, RefreshHold, Replaced,
    VaultError,
};
use sha2::{Digest, Sha256};
use std::time::Duration;
use tokio::runtime::Handle;

pub use self::builder::PgGrantStoreBuilder;
pub use self::seal::GrantKek;
use self::seal::{OpenError, SealedGrant, open_grant, rewrap, seal_grant};

/// OAuth grants in PostgreSQL, sealed under a key-encryption key the vault holds: the grant
/// store a fleet of executor processes shares ([`GrantStore`]).
///
/// Hand it to the vault that keeps the credentials and their client secrets
/// (`FileVault::with_grant_store`, `MemoryVault::with_grant_store`); the HTTP channel then
/// reads, refreshes and stores every subject's grant here, and one process refreshes a grant
/// while the others wait and read the new token.
///
/// ```no_run
/// # async fn demo(vault: sallyport_core::vault::MemoryVault) -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use sallyport_core::vault::GrantStore;
/// use sallyport_postgres::{GrantKek, PgGrantStore};
///
/// // The key-encryption key is a vault secret (64 hex digits), named in the configuration.
/// let kek = GrantKek::from_vault(&vault, "grants-key").await?;
/// let grants = PgGrantStore::builder("postgres://app@db.internal/app", kek)
///     .connect()
///     .await?;
/// let vault = vault.with_grant_store(Arc::new(grants) as Arc<dyn GrantStore>);
/// # let _ = vault; Ok(()) }
/// ```
///
/// `Debug` shows the connection target without its password and the key ids, never a key
/// or a token; no error carries a token or a server message (SQLSTATE codes only).
///
/// [`GrantStore::hold_refresh`] blocks its thread until the hold is taken, running its
/// queries on the runtime the store was connected on: call it from a blocking thread
/// (`tokio::task::spawn_blocking`, as the HTTP channel does), never from that runtime's own
/// worker thread of a current-thread runtime.
pub struct PgGrantStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    /// The connections refresh holds keep (see `hold_refresh`).
    hold_pool: Pool,
    /// The in-process queue of each key's holders.
    holding: std::sync::Mutex<std::collections::HashMap<GrantKey, Arc<tokio::sync::Mutex<()>>>>,
    target: String,
    /// The key every write seals under, and older keys rows may still be under.
    keys: RwLock<Keys>,
    /// The scopes written beside each grant of a credential (its OAuth client's).
    scopes: std::collections::BTreeMap<String, Vec<String>>,
    /// The tokens this process read or wrote, for the vault's scrubber.
    seen: GrantSecrets,
    /// The runtime `hold_refresh` (a blocking call) runs its queries on.
    runtime: Handle,
    /// How long a hold waits for another holder of its key.
    refresh_wait: Duration,
}

struct Keys {
    current: GrantKek,
    previous: Vec<GrantKek>,
}

impl Keys {
    fn all(&self) -> Vec<&GrantKek> {
        std::iter::once(&self.current)
            .chain(&self.previous)
            .collect()
    }
}

impl fmt::Debug for PgGrantStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self
            .inner
            .keys
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("PgGrantStore")
            .field("target", &self.inner.target)
            .field("key_id", &keys.current.id())
            .field(
                "previous_key_ids",
                &keys.previous.iter().map(GrantKek::id).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// A PostgreSQL failure as a vault error: what was being done and the SQLSTATE code, never
/// the server's message (which may quote a row).
fn backend(doing: &str, e: &tokio_postgres::Error) -> VaultError {
    match e.code() {
        Some(code) => VaultError::Backend(format!(
            "the grant store could not {doing} (PostgreSQL error {})",
            code.code()
        )),
        None => VaultError::Backend(format!(
            "the grant store could not {doing} (PostgreSQL connection failed)"
        )),
    }
}

/// The row columns that name `key`.
fn columns(key: &GrantKey) -> (&str, bool, &str) {
    (
        key.credential.as_str(),
        key.subject.is_none(),
        key.subject.as_deref().unwrap_or_default(),
    )
}

/// The advisory lock of `key`'s refresh right: 8 bytes of a SHA-256 over the key.
fn lock_id(key: &GrantKey) -> i64 {
    let (credential, shared, subject) = columns(key);
    let mut hash = Sha256::new();
    hash.update(b"sallyport grant refresh\0");
    hash.update((credential.len() as u64).to_be_bytes());
    hash.update(credential);
    hash.update([u8::from(shared)]);
    hash.update(subject);
    let digest = hash.finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(bytes)
}

fn version_column(version: u64) -> Result<i64, VaultError> {
    i64::try_from(version)
        .map_err(|_| VaultError::Backend("a grant version beyond what the store keeps".into()))
}

fn ms_column(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

const SELECT_ROW: &str = "SELECT version, key_id, wrapped_key, payload FROM sallyport_grants
     WHERE credential = $1 AND shared = $2 AND subject = $3";

impl PgGrantStore {
    /// A builder for the store in the database `url` names (a `postgres://` URL or a libpq
    /// key-value string), sealing under `key`.
    pub fn builder(url: &str, key: GrantKek) -> PgGrantStoreBuilder {
        PgGrantStoreBuilder::new(url, key)
    }

    /// The id of the key new rows are sealed under.
    pub fn key_id(&self) -> String {
        let keys = self
            .inner
            .keys
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        keys.current.id().to_owned()
    }

    /// Re-wraps every row's data key under `new_key` in one transaction (rows locked, the
    /// payloads untouched), then seals new rows under it, keeping the old key to read rows
    /// another process wrote meanwhile. Returns how many rows it moved. Other processes must
    /// be given `new_key` (with the old one as a previous key until all have it, then
    /// rotate again to move what they wrote meanwhile).
    ///
    /// # Errors
    ///
    /// [`VaultError::Backend`] when a row is under a key this store does not hold, does not
    /// authenticate, or the database fails: then no row was changed.
    pub async fn rotate_key(&self, new_key: GrantKek) -> Result<u64, VaultError> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| backend("begin the key rotation", &e))?;
        let rows = tx
            .query(
                "SELECT credential, shared, subject, version, key_id, wrapped_key
                 FROM sallyport_grants ORDER BY credential, shared, subject FOR UPDATE",
                &[],
            )
            .await
            .map_err(|e| backend("read the grants to rotate", &e))?;
        let mut moved = 0_u64;
        for row in &rows {
            let credential: String = row.get(0);
            let shared: bool = row.get(1);
            let subject: String = row.get(2);
            let version: i64 = row.get(3);
            let key_id: String = row.get(4);
            let wrapped: Vec<u8> = row.get(5);
            let key = if shared {
                GrantKey::shared(credential.as_str())
            } else {
                GrantKey::for_subject(credential.as_str(), subject.as_str())
            };
            let rewrapped = {
                let keys = self
                    .inner
                    .keys
                    .read()
                    .unwrap_or_else(PoisonError::into_inner);
                rewrap(
                    &keys.all(),
                    &new_key,
                    &key,
                    u64::try_from(version).unwrap_or_default(),
                    &key_id,
                    &wrapped,
                )
                .map_err(|e| open_error(&key, &e))?
            };
            tx.execute(
                "UPDATE sallyport_grants SET key_id = $4, wrapped_key = $5
                 WHERE credential = $1 AND shared = $2 AND subject = $3",
                &[&credential, &shared, &subject, &new_key.id(), &rewrapped],
            )
            .await
            .map_err(|e| backend("re-wrap a grant's key", &e))?;
            moved += 1;
        }
        tx.commit()
            .await
            .map_err(|e| backend("commit the key rotation", &e))?;
        let mut keys = self
            .inner
            .keys
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if keys.current.id() != new_key.id() {
            let new_id = new_key.id().to_owned();
            let old = std::mem::replace(&mut keys.current, new_key);
            keys.previous.retain(|k| k.id() != new_id);
            keys.previous.insert(0, old);
        }
        Ok(moved)
    }

    async fn client(&self) -> Result<Object, VaultError> {
        Self::from_pool(&self.inner.pool).await
    }

    async fn from_pool(pool: &Pool) -> Result<Object, VaultError> {
        pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => backend("connect", &e),
            _ => VaultError::Backend(
                "the grant store could not connect (no connection within the timeout)".into(),
            ),
        })
    }

    /// The in-process queue of `key`'s holders (dropping the queues nobody is in).
    fn queue_of(&self, key: &GrantKey) -> Arc<tokio::sync::Mutex<()>> {
        let mut holding = self
            .inner
            .holding
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        holding.retain(|_, queue| Arc::strong_count(queue) > 1);
        Arc::clone(holding.entry(key.clone()).or_default())
    }

    /// Takes the hold of `key`: first in this process, then against every other process
    /// (the advisory lock), and reads the grant under it.
    async fn hold(&self, key: &GrantKey) -> Result<(Grant, PgHold), VaultError> {
        let wait = self.inner.refresh_wait;
        let waited_too_long = || {
            VaultError::Backend(format!(
                "another holder has kept the refresh of credential `{}` for over {} ms; nothing was refreshed",
                key.credential,
                wait.as_millis()
            ))
        };
        let started = tokio::time::Instant::now();
        let queued = tokio::time::timeout(wait, self.queue_of(key).lock_owned())
            .await
            .map_err(|_| waited_too_long())?;
        let client = Self::from_pool(&self.inner.hold_pool).await?;
        // What is left of the wait bounds the wait for another process's hold (at least a
        // millisecond: zero would mean no limit).
        let left_ms = wait
            .saturating_sub(started.elapsed())
            .as_millis()
            .clamp(1, i32::MAX as u128);
        client
            .batch_execute(&format!("BEGIN; SET LOCAL lock_timeout = {left_ms}"))
            .await
            .map_err(|e| backend("begin the refresh hold", &e))?;
        // From here on a failure rolls back (the hold's drop).
        let mut hold = PgHold {
            client: Some(client),
            _queued: queued,
            runtime: self.inner.runtime.clone(),
        };
        let client = hold
            .client
            .as_ref()
            .ok_or_else(|| VaultError::Backend("the refresh hold lost its connection".into()))?;
        client
            .execute("SELECT pg_advisory_xact_lock($1)", &[&lock_id(key)])
            .await
            .map_err(|e| {
                if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) {
                    waited_too_long()
                } else {
                    backend("take the refresh hold", &e)
                }
            })?;
        let grant = self.current_on(client, key).await;
        match grant {
            Ok(grant) => Ok((grant, hold)),
            Err(e) => {
                drop(hold.client.take().map(Object::take));
                Err(e)
            }
        }
    }

    /// The grant of `key` as `client` reads it now; `None` when no row holds it.
    async fn read(
        &self,
        client: &tokio_postgres::Client,
        key: &GrantKey,
    ) -> Result<Option<Grant>, VaultError> {
        let (credential, shared, subject) = columns(key);
        let row = client
            .query_opt(SELECT_ROW, &[&credential, &shared, &subject])
            .await
            .map_err(|e| backend("read a grant", &e))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let version: i64 = row.get(0);
        let sealed = SealedGrant {
            key_id: row.get(1),
            wrapped_key: row.get(2),
            payload: row.get(3),
        };
        let grant = {
            let keys = self
                .inner
                .keys
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            open_grant(
                &keys.all(),
                key,
                u64::try_from(version).unwrap_or_default(),
                &sealed,
            )
            .map_err(|e| open_error(key, &e))?
        };
        self.inner.seen.saw(key, &grant);
        Ok(Some(grant))
    }

    /// The grant of `key` as the trait reads it: a shared grant not stored yet is empty at
    /// version 0; a subject's is `NotFound`.
    async fn current_on(
        &self,
        client: &tokio_postgres::Client,
        key: &GrantKey,
    ) -> Result<Grant, VaultError> {
        match self.read(client, key).await? {
            Some(grant) => Ok(grant),
            None if key.subject.is_none() => Ok(Grant::new()),
            None => Err(VaultError::NotFound(key.credential.clone())),
        }
    }
}

/// A row that did not open, as a vault error naming the credential (never the subject, which
/// may be personal data, nor any of the row's bytes).
fn open_error(key: &GrantKey, e: &OpenError) -> VaultError {
    match e {
        OpenError::UnknownKey(id) => VaultError::Backend(format!(
            "a grant of credential `{}` is sealed under key `{id}`, which this grant store does not hold (give it the current key, or the old one as a previous key)",
            key.credential
        )),
        OpenError::Damaged => VaultError::Backend(format!(
            "a grant of credential `{}` does not authenticate under its key: moved from another credential or subject, altered, or damaged",
            key.credential
        )),
    }
}

#[async_trait]
impl GrantStore for PgGrantStore {
    async fn current(&self, key: &GrantKey) -> Result<Grant, VaultError> {
        let client = self.client().await?;
        self.current_on(&client, key).await
    }

    async fn replace(
        &self,
        key: &GrantKey,
        expected_version: u64,
        update: GrantUpdate,
    ) -> Result<Replaced, VaultError> {
        let client = self.client().await?;
        let current = match self.read(&client, key).await? {
            Some(grant) => grant,
            None if expected_version == 0 => Grant::new(),
            None => return Err(VaultError::NotFound(key.credential.clone())),
        };
        if current.version() != expected_version {
            return Ok(Replaced::Changed(current));
        }
        let (next, _retired) = current.apply(update);
        let sealed = {
            let keys = self
                .inner
                .keys
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            seal_grant(&keys.current, key, &next)?
        };
        let (credential, shared, subject) = columns(key);
        // The scopes granted when the grant recorded them, else the credential's
        // configuration as this store was given it.
        let scopes_granted = next.scopes().is_some();
        let scopes = match next.scopes() {
            Some(granted) => granted.to_vec(),
            None => self
                .inner
                .scopes
                .get(&key.credential)
                .cloned()
                .unwrap_or_default(),
        };
        let version = version_column(next.version())?;
        let expires = next.access_token().map(|_| ms_column(next.expires_at_ms()));
        let refresh = next.refresh_token().is_some();
        let reconnect = next.reconnect_reason();
        let written = if expected_version == 0 {
            client
                .execute(
                    "INSERT INTO sallyport_grants (credential, shared, subject, version, key_id,
                         wrapped_key, payload, scopes, expires_at_ms, refresh_token, reconnect,
                         scopes_granted)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
                     ON CONFLICT DO NOTHING",
                    &[
                        &credential,
                        &shared,
                        &subject,
                        &version,
                        &sealed.key_id,
                        &sealed.wrapped_key,
                        &sealed.payload,
                        &scopes,
                        &expires,
                        &refresh,
                        &reconnect,
                        &scopes_granted,
                    ],
                )
                .await
                .map_err(|e| backend("store a grant", &e))?
        } else {
            client
                .execute(
                    "UPDATE sallyport_grants SET version = $4, key_id = $5, wrapped_key = $6,
                         payload = $7, scopes = $8, expires_at_ms = $9, refresh_token = $10,
                         reconnect = $11, scopes_granted = $13, updated_at = now()
                     WHERE credential = $1 AND shared = $2 AND subject = $3 AND version = $12",
                    &[
                        &credential,
                        &shared,
                        &subject,
                        &version,
                        &sealed.key_id,
                        &sealed.wrapped_key,
                        &sealed.payload,
                        &scopes,
                        &expires,
                        &refresh,
                        &reconnect,
                        &version_column(expected_version)?,
                        &scopes_granted,
                    ],
                )
                .await
                .map_err(|e| backend("store a grant", &e))?
        };
        if written == 1 {
            self.inner.seen.saw(key, &next);
            return Ok(Replaced::Stored(next));
        }
        // Another process changed (or created, or removed) it since it was read.
        self.current_on(&client, key).await.map(Replaced::Changed)
    }

    fn hold_refresh(&self, key: &GrantKey) -> Result<Option<(Grant, RefreshHold)>, VaultError> {
        let (answer, answered) = std::sync::mpsc::channel();
        let store = PgGrantStore {
            inner: Arc::clone(&self.inner),
        };
        let key = key.clone();
        self.inner.runtime.spawn(async move {
            let held = store.hold(&key).await;
            // A caller that stopped waiting drops the hold with the message: let go at once.
            let _ = answer.send(held);
        });
        let (grant, hold) = answered.recv().map_err(|_| {
            VaultError::Backend("the refresh hold was abandoned (the runtime stopped)".into())
        })??;
        Ok(Some((grant, RefreshHold::new(hold))))
    }

    async fn remove(&self, key: &GrantKey) -> Result<(), VaultError> {
        let client = self.client().await?;
        let (credential, shared, subject) = columns(key);
        let removed = client
            .execute(
                "DELETE FROM sallyport_grants
                 WHERE credential = $1 AND shared = $2 AND subject = $3",
                &[&credential, &shared, &subject],
            )
            .await
            .map_err(|e| backend("remove a grant", &e))?;
        self.inner.seen.removed(key);
        if removed == 0 {
            return Err(VaultError::NotFound(key.credential.clone()));
        }
        Ok(())
    }

    /// From the columns beside the sealed payload: nothing is opened, so no token is read.
    async fn list(&self, credential: Option<&str>) -> Result<Vec<GrantSummary>, VaultError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT credential, shared, subject, version, scopes, expires_at_ms,
                        refresh_token, reconnect, scopes_granted
                 FROM sallyport_grants WHERE $1::TEXT IS NULL OR credential = $1",
                &[&credential],
            )
            .await
            .map_err(|e| backend("list the grants", &e))?;
        let mut out: Vec<GrantSummary> = rows
            .iter()
            .map(|row| {
                let credential: String = row.get(0);
                let shared: bool = row.get(1);
                let subject: String = row.get(2);
                let key = if shared {
                    GrantKey::shared(credential)
                } else {
                    GrantKey::for_subject(credential, subject)
                };
                let version: i64 = row.get(3);
                let expires: Option<i64> = row.get(5);
                let summary = GrantSummary::new(
                    &key,
                    row.get(4),
                    u64::try_from(version).unwrap_or_default(),
                    expires.map(|ms| u64::try_from(ms).unwrap_or_default()),
                    row.get(6),
                    row.get(7),
                );
                if row.get::<_, bool>(8) {
                    summary.with_granted_scopes(row.get(4))
                } else {
                    summary
                }
            })
            .collect();
        // Sorted here, not by the server's collation: by credential, then subject (the
        // shared grant first), as every store sorts.
        out.sort_by(|a, b| (&a.credential, &a.subject).cmp(&(&b.credential, &b.subject)));
        Ok(out)
    }

    fn secrets(&self) -> Option<&GrantSecrets> {
        Some(&self.inner.seen)
    }
}

/// A held refresh right: this process's turn for the key, and a pooled connection inside a
/// transaction holding the key's advisory lock. Dropped: rolled back on the store's
/// runtime, then the connection goes back to the pool (or is closed if the rollback
/// failed), and the next holder in this process takes its turn. The server lets the lock go
/// by itself when the process dies and the connection ends.
struct PgHold {
    client: Option<Object>,
    _queued: tokio::sync::OwnedMutexGuard<()>,
    runtime: Handle,
}

impl Drop for PgHold {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        self.runtime.spawn(async move {
            if client.batch_execute("ROLLBACK").await.is_err() {
                // Never back to the pool inside a transaction: closed instead.
                drop(Object::take(client));
            }
        });
    }
}
