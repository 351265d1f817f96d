//! Configuring and connecting a [`PostgresJournal`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use sallyport_core::journal::chain::{check_shard_name, shard_genesis};
use sallyport_core::journal::checkpoint::DEFAULT_SHARD;
use sallyport_core::journal::{HeadSigningKey, JournalError};
use tokio::sync::mpsc;

use crate::error::{PostgresError, Redactor, redact_connection_string};
use crate::listen::Listener;
use crate::schema::{MigrateError, SCHEMA_VERSION, migrate};
use crate::shared::Shared;
use crate::{PostgresJournal, lease, sql, writer};

/// How long a write batch may sit idle inside its transaction before the server ends its
/// session, unless [`PostgresJournalBuilder::idle_in_transaction_timeout`] says otherwise.
const DEFAULT_IDLE_IN_TRANSACTION: Duration = Duration::from_secs(15);

/// How many writer tasks take intents from the journal's intent queue. With two, the next
/// batch of intents is sent while the last one waits for its synchronous commit.
const INTENT_WRITERS: usize = 2;

/// Configures a [`PostgresJournal`]: [`PostgresJournal::builder`].
#[must_use]
pub struct PostgresJournalBuilder {
    url: String,
    owner: Option<String>,
    lease: Duration,
    renew_every: Option<Duration>,
    signing_key: Option<HeadSigningKey>,
    shard: String,
    pool_size: usize,
    connect_timeout: Duration,
    idle_in_transaction: Duration,
    #[cfg(feature = "tls")]
    tls: Option<rustls::ClientConfig>,
}

impl fmt::Debug for PostgresJournalBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresJournalBuilder")
            .field("url", &redact_connection_string(&self.url))
            .field("owner", &self.owner)
            .field("lease", &self.lease)
            .field("renew_every", &self.renew_every)
            .field("signing", &self.signing_key.is_some())
            .field("shard", &self.shard)
            .field("pool_size", &self.pool_size)
            .field("idle_in_transaction", &self.idle_in_transaction)
            .finish_non_exhaustive()
    }
}

impl PostgresJournalBuilder {
    pub(crate) fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            owner: None,
            lease: Duration::from_secs(30),
            renew_every: None,
            signing_key: None,
            shard: DEFAULT_SHARD.to_owned(),
            pool_size: 5,
            connect_timeout: Duration::from_secs(5),
            idle_in_transaction: DEFAULT_IDLE_IN_TRANSACTION,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// The lease owner this journal writes into its attempt rows (default: a name made of
    /// the process id and a random suffix, unique per journal). Give every process its own
    /// name: a journal renews the leases of its owner name only for attempts it holds.
    pub fn owner(mut self, name: impl Into<String>) -> Self {
        self.owner = Some(name.into());
        self
    }

    /// How long an in-flight attempt's lease lasts from its last renewal (default 30 s).
    /// When a process dies, its attempts may be claimed by another once this much time has
    /// passed since the last heartbeat.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often the heartbeat renews this journal's leases (default a third of the lease).
    /// A value longer than the lease lets leases lapse while the process lives: only for
    /// tests of takeover.
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every);
        self
    }

    /// Signs the chain head with `key` in every batch that appends (stored in
    /// `sallyport_heads`), as `SqliteJournalBuilder::signing_key` (`sallyport-sqlite`)
    /// does.
    pub fn signing_key(mut self, key: HeadSigningKey) -> Self {
        self.signing_key = Some(key);
        self
    }

    /// The audit shard this journal appends its records to (default
    /// [`DEFAULT_SHARD`](sallyport_core::journal::checkpoint::DEFAULT_SHARD), the one chain
    /// of a journal without shards). Each shard is a chain of its own with its own head row,
    /// so journals appending to different shards never wait on each other's head lock; one
    /// checkpoint ([`make_checkpoint`](sallyport_core::journal::checkpoint::make_checkpoint))
    /// still signs every shard's head, and `verify` checks each. Give each executor group
    /// (a region, a tenant's executors, a process) a shard of its own; journals that share a
    /// shard share its chain, as every journal does today. A name has 1 to 64 characters of
    /// `a-z`, `0-9`, `-`, `_` and `.`; [`connect`](Self::connect) refuses any other.
    pub fn audit_shard(mut self, shard: impl Into<String>) -> Self {
        self.shard = shard.into();
        self
    }

    /// How many connections the journal's pool keeps at most (default 5: one for each of
    /// the three writers, the rest for reads and the heartbeat).
    pub fn pool_size(mut self, connections: usize) -> Self {
        self.pool_size = connections.max(2);
        self
    }

    /// How long connecting to the server may take (default 5 s); also how long a write
    /// waits for a connection from the pool.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long the server lets one of this journal's write batches sit idle inside its
    /// transaction before it ends the session (PostgreSQL's
    /// `idle_in_transaction_session_timeout`, set for each batch's transaction; default 15 s;
    /// [`Duration::ZERO`] leaves the server's own setting). Reads, migrations and the
    /// policy's call counts are not limited by it.
    ///
    /// A batch holds the chain head's row lock from its first flight to its `COMMIT`, and
    /// every journal on the database waits for it. A process stopped mid-batch (`SIGSTOP`, a
    /// debugger, threads blocked on a full output pipe) would hold it until it woke: the
    /// whole fleet stopped recording with it. With the limit, the server ends that session
    /// and the others go on; the stopped process's batch fails when it wakes, its calls are
    /// answered as writes that could not be recorded, and what it had sent is settled by
    /// reconciliation like any other unfinished attempt. A healthy batch is idle between its
    /// statements for a round trip at most.
    pub fn idle_in_transaction_timeout(mut self, limit: Duration) -> Self {
        self.idle_in_transaction = limit;
        self
    }

    /// Connects with TLS configured by `config` (rustls with ring) instead of in the clear.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls(mut self, config: rustls::ClientConfig) -> Self {
        self.tls = Some(config);
        self
    }

    /// Connects, runs the embedded migrations, and starts the writer and the heartbeat
    /// (on the current tokio runtime).
    ///
    /// Safe when several processes connect to one new database at once: the migrations run
    /// in one transaction under an advisory lock.
    ///
    /// # Errors
    ///
    /// [`JournalError::NewerFormat`] when a newer build migrated the database,
    /// [`JournalError::Corrupt`] when it holds journal tables without a schema version,
    /// [`JournalError::Open`] when the connection string does not parse, the server cannot
    /// be reached or refuses the login, or a migration fails. No error carries the
    /// connection string's password.
    pub async fn connect(self) -> Result<PostgresJournal, JournalError> {
        let target = redact_connection_string(&self.url);
        let open_failed = |source: PostgresError| JournalError::Open {
            path: target.clone(),
            source: Box::new(source),
        };
        check_shard_name(&self.shard).map_err(|e| open_failed(PostgresError::own(e)))?;
        let (pool, redactor) = connect_pool(
            &self.url,
            self.pool_size,
            self.connect_timeout,
            #[cfg(feature = "tls")]
            self.tls.clone(),
        )
        .map_err(open_failed)?;
        // The connection a watched journal listens for decisions on: the pool's settings,
        // outside the pool.
        let (config, _) = parse_config(&self.url, self.connect_timeout).map_err(open_failed)?;
        let listener = Arc::new(Listener::new(
            config,
            #[cfg(feature = "tls")]
            self.tls,
            redactor.clone(),
        ));
        {
            let mut client = pool
                .get()
                .await
                .map_err(|e| open_failed(redactor.other(&e)))?;
            migrate(&mut client).await.map_err(|e| match e {
                MigrateError::Foreign => JournalError::Corrupt {
                    path: target.clone(),
                    source: Box::new(PostgresError::own(
                        "the database holds sallyport tables but no schema version",
                    )),
                },
                MigrateError::Newer(found) => JournalError::NewerFormat {
                    found,
                    supported: SCHEMA_VERSION,
                },
                MigrateError::Postgres(e) => open_failed(redactor.postgres(&e)),
            })?;
            client
                .execute(sql::ADD_SHARD, &[&self.shard, &shard_genesis(&self.shard)])
                .await
                .map_err(|e| open_failed(redactor.postgres(&e)))?;
        }
        let owner = self.owner.unwrap_or_else(|| {
            let suffix = uuid::Uuid::new_v4().simple().to_string();
            format!("pid{}-{}", std::process::id(), &suffix[..12])
        });
        let renew_every = self
            .renew_every
            .unwrap_or(self.lease / 3)
            .max(Duration::from_millis(10));
        let shared = Arc::new(Shared::new(
            pool,
            owner,
            self.lease,
            self.signing_key,
            self.shard,
            redactor,
            target,
            self.idle_in_transaction,
        ));
        let (intents, queued_intents) = mpsc::unbounded_channel();
        let (records, queued_records) = mpsc::unbounded_channel();
        let queued_intents = Arc::new(tokio::sync::Mutex::new(queued_intents));
        for _ in 0..INTENT_WRITERS {
            tokio::spawn(writer::run(
                Arc::clone(&shared),
                Arc::clone(&queued_intents),
            ));
        }
        let queued_records = Arc::new(tokio::sync::Mutex::new(queued_records));
        tokio::spawn(writer::run(Arc::clone(&shared), queued_records));
        let heartbeat = tokio::spawn(lease::heartbeat(Arc::downgrade(&shared), renew_every));
        Ok(PostgresJournal {
            shared,
            listener,
            intents,
            records,
            heartbeat,
        })
    }
}

/// A pool of connections to `url` (synchronous commit on, whatever the server's default),
/// and the redactor of its password. Connects nothing yet. A connection made before a
/// server refused a write as read-only (SQLSTATE 25006, noted by the redactor) is not
/// handed out again.
pub(crate) fn connect_pool(
    url: &str,
    pool_size: usize,
    connect_timeout: Duration,
    #[cfg(feature = "tls")] tls: Option<rustls::ClientConfig>,
) -> Result<(Pool, Redactor), PostgresError> {
    let (config, redactor) = parse_config(url, connect_timeout)?;
    let manager_config = ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    #[cfg(feature = "tls")]
    let manager = match tls {
        Some(tls) => Manager::from_config(
            config,
            tokio_postgres_rustls::MakeRustlsConnect::new(tls),
            manager_config,
        ),
        None => Manager::from_config(config, tokio_postgres::NoTls, manager_config),
    };
    #[cfg(not(feature = "tls"))]
    let manager = Manager::from_config(config, tokio_postgres::NoTls, manager_config);
    // A connection made before a server refused a write as read-only is closed instead of
    // used again: the next write connects anew, to the server that takes writes now.
    let read_only = redactor.read_only_seen();
    let pool = Pool::builder(manager)
        .pre_recycle(Hook::sync_fn(move |_, metrics| {
            if read_only.predates(metrics.created) {
                Err(HookError::message(
                    "made before a server refused a write as read-only",
                ))
            } else {
                Ok(())
            }
        }))
        .max_size(pool_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(connect_timeout))
        .create_timeout(Some(connect_timeout))
        .recycle_timeout(Some(connect_timeout))
        .build()
        .map_err(|e| redactor.other(&e))?;
    Ok((pool, redactor))
}

/// The settings `url` names (synchronous commit on, whatever the server's default; the
/// connect timeout when `url` sets none), and the redactor of its password.
fn parse_config(
    url: &str,
    connect_timeout: Duration,
) -> Result<(tokio_postgres::Config, Redactor), PostgresError> {
    let mut config: tokio_postgres::Config = url.parse().map_err(|e: tokio_postgres::Error| {
        PostgresError::own(format!(
            "not a PostgreSQL connection string: {}",
            Redactor::default().redact(&e.to_string())
        ))
    })?;
    let redactor = Redactor::new(config.get_password());
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(connect_timeout);
    }
    // Every session commits synchronously whatever the server's default: a durable
    // intent (or a stored grant) is on the server's disk when its commit returns. Journal
    // batches with nothing durable in them lower it for their own transaction only.
    let options = match config.get_options() {
        Some(existing) => format!("{existing} -c synchronous_commit=on"),
        None => "-c synchronous_commit=on".to_owned(),
    };
    config.options(options);
    Ok((config, redactor))
}
