//! Configuring and connecting a [`PgGrantStore`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use sallyport_core::vault::{GrantSecrets, VaultError};

use super::{GrantKek, Inner, Keys, PgGrantStore};
use crate::builder::connect_pool;
use crate::error::redact_connection_string;
use crate::schema::{MigrateError, SCHEMA_VERSION, migrate};

/// How long a refresh waits for another holder of its grant's refresh right, unless
/// [`PgGrantStoreBuilder::refresh_wait`] says otherwise.
const DEFAULT_REFRESH_WAIT: Duration = Duration::from_secs(60);

/// Configures a [`PgGrantStore`]: [`PgGrantStore::builder`].
#[must_use]
pub struct PgGrantStoreBuilder {
    url: String,
    key: GrantKek,
    previous: Vec<GrantKek>,
    scopes: BTreeMap<String, Vec<String>>,
    pool_size: usize,
    hold_connections: usize,
    connect_timeout: Duration,
    refresh_wait: Duration,
    #[cfg(feature = "tls")]
    tls: Option<rustls::ClientConfig>,
}

impl fmt::Debug for PgGrantStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgGrantStoreBuilder")
            .field("url", &redact_connection_string(&self.url))
            .field("key", &self.key)
            .field("previous", &self.previous)
            .field("pool_size", &self.pool_size)
            .finish_non_exhaustive()
    }
}

impl PgGrantStoreBuilder {
    pub(super) fn new(url: &str, key: GrantKek) -> Self {
        Self {
            url: url.to_owned(),
            key,
            previous: Vec::new(),
            scopes: BTreeMap::new(),
            pool_size: 4,
            hold_connections: 8,
            connect_timeout: Duration::from_secs(5),
            refresh_wait: DEFAULT_REFRESH_WAIT,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// Also reads rows sealed under `key` (an older key-encryption key, while the fleet
    /// moves to a new one); nothing is written under it.
    pub fn previous_key(mut self, key: GrantKek) -> Self {
        self.previous.push(key);
        self
    }

    /// The scopes written beside every grant of `credential` for `list` (its OAuth client's
    /// configuration; a vault that hands the store out lists its own credential's scopes
    /// instead).
    pub fn scopes(
        mut self,
        credential: impl Into<String>,
        scopes: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.scopes.insert(
            credential.into(),
            scopes.into_iter().map(Into::into).collect(),
        );
        self
    }

    /// How many connections reads and writes share at most (default 4).
    pub fn pool_size(mut self, connections: usize) -> Self {
        self.pool_size = connections.max(2);
        self
    }

    /// How many grants this process may hold or wait to hold the refresh right of at once
    /// (default 8): each held or awaited right
    /// ([`GrantStore::hold_refresh`](sallyport_core::vault::GrantStore::hold_refresh))
    /// keeps a connection of its own; holders of one key queue in memory and use one.
    pub fn hold_connections(mut self, connections: usize) -> Self {
        self.hold_connections = connections.max(1);
        self
    }

    /// How long a refresh waits for another holder of the same grant's refresh right, in
    /// this process or another (default 60 s). Past it the hold is refused
    /// ([`VaultError::Backend`], saying so), and the call that needed a token is refused with
    /// nothing sent, instead of waiting as long as the holder: a holder stopped mid-refresh
    /// (`SIGSTOP`, a debugger, blocked threads) keeps its right until it wakes or dies,
    /// because handing it on while the holder may still present the refresh token would let
    /// two processes present one token. A healthy holder keeps it for one token request
    /// (the HTTP channel's token timeout, 10 s by default) and one write.
    pub fn refresh_wait(mut self, wait: Duration) -> Self {
        self.refresh_wait = wait;
        self
    }

    /// How long connecting may take (default 5 s); also how long a call waits for a
    /// connection from the pool.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Connects with TLS configured by `config` (rustls with ring) instead of in the clear.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls(mut self, config: rustls::ClientConfig) -> Self {
        self.tls = Some(config);
        self
    }

    /// Connects and runs the embedded migrations (the journal's and the grant table's:
    /// one schema, [`SCHEMA_VERSION`]). Call it on the tokio runtime the store will be used
    /// on: [`GrantStore::hold_refresh`](sallyport_core::vault::GrantStore::hold_refresh), a
    /// blocking call, runs its queries there.
    ///
    /// # Errors
    ///
    /// [`VaultError::Backend`] when the connection string does not parse, the server
    /// cannot be reached or refuses the login, a migration fails, or a newer build migrated
    /// the database. No error carries the connection string's password.
    pub async fn connect(self) -> Result<PgGrantStore, VaultError> {
        let target = redact_connection_string(&self.url);
        let (pool, redactor) = connect_pool(
            &self.url,
            self.pool_size,
            self.connect_timeout,
            #[cfg(feature = "tls")]
            self.tls.clone(),
        )
        .map_err(|e| VaultError::Backend(format!("the grant store cannot open {target}: {e}")))?;
        let (hold_pool, _) = connect_pool(
            &self.url,
            self.hold_connections,
            self.connect_timeout,
            #[cfg(feature = "tls")]
            self.tls.clone(),
        )
        .map_err(|e| VaultError::Backend(format!("the grant store cannot open {target}: {e}")))?;
        {
            let mut client = pool.get().await.map_err(|e| {
                VaultError::Backend(format!(
                    "the grant store cannot connect to {target}: {}",
                    redactor.other(&e)
                ))
            })?;
            migrate(&mut client).await.map_err(|e| {
                VaultError::Backend(match e {
                    MigrateError::Foreign => format!(
                        "{target} holds sallyport tables but no schema version; it was left untouched"
                    ),
                    MigrateError::Newer(found) => format!(
                        "{target} has schema version {found}, newer than this build understands ({SCHEMA_VERSION}); it was left untouched"
                    ),
                    MigrateError::Postgres(e) => format!(
                        "the grant store cannot migrate {target}: {}",
                        redactor.postgres(&e)
                    ),
                })
            })?;
        }
        Ok(PgGrantStore {
            inner: Arc::new(Inner {
                pool,
                hold_pool,
                holding: std::sync::Mutex::default(),
                target,
                keys: RwLock::new(Keys {
                    current: self.key,
                    previous: self.previous,
                }),
                scopes: self.scopes,
                seen: GrantSecrets::new(),
                runtime: tokio::runtime::Handle::current(),
                refresh_wait: self.refresh_wait,
            }),
        })
    }
}
