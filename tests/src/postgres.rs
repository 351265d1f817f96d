//! A fresh PostgreSQL database for one test, on a real server: `SALLYPORT_PG_URL` if set,
//! else the machine's own through its Unix socket
//! (`host=/var/run/postgresql user=root dbname=postgres`). No server is a failure with
//! instructions, never a skipped test.
//!
//! The one PostgreSQL test rig: `sallyport-postgres`'s own tests and the workspace's flows
//! across crates both use it.

use std::time::Duration;

use sallyport_core::journal::{AuditEvent, Intent};
use sallyport_postgres::{PostgresJournal, PostgresJournalBuilder};

/// The server the tests use.
pub fn admin_url() -> String {
    std::env::var("SALLYPORT_PG_URL")
        .unwrap_or_else(|_| "host=/var/run/postgresql user=root dbname=postgres".to_owned())
}

/// `url` with its database replaced by `dbname` (a `postgres://` URL or a key-value string).
pub fn with_dbname(url: &str, dbname: &str) -> String {
    for scheme in ["postgres://", "postgresql://"] {
        if let Some(rest) = url.strip_prefix(scheme) {
            let (main, query) = rest.find('?').map_or((rest, ""), |q| rest.split_at(q));
            let authority = main.split('/').next().unwrap_or(main);
            return format!("{scheme}{authority}/{dbname}{query}");
        }
    }
    // libpq key-value strings: a later key wins.
    format!("{url} dbname={dbname}")
}

/// Connects to `url` directly, failing loudly with instructions.
pub async fn client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = match tokio_postgres::connect(url, tokio_postgres::NoTls).await {
        Ok(pair) => pair,
        Err(e) => panic!(
            "cannot reach PostgreSQL at {url:?}: {e}\n\
             These tests need a real server. Start the machine's one:\n\
             \x20 pg_ctlcluster --skip-systemctl-redirect 15 main start\n\
             \x20 su postgres -c 'createuser -s root'\n\
             or point SALLYPORT_PG_URL at another (a role that may CREATE DATABASE)."
        ),
    };
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// A database that exists for one test; dropped (with its connections) when this is.
#[derive(Debug)]
pub struct TestDb {
    /// The connection string of the test's database.
    pub url: String,
    /// Its name.
    pub name: String,
    admin: String,
}

impl TestDb {
    /// Creates `sp_test_<random>` on the server.
    pub async fn create() -> Self {
        let admin = admin_url();
        let name = format!(
            "sp_test_{:016x}{:016x}",
            fastrand::u64(..),
            fastrand::u64(..)
        );
        client(&admin)
            .await
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name} failed: {e}"));
        Self {
            url: with_dbname(&admin, &name),
            name,
            admin,
        }
    }

    /// A builder for a journal on this database.
    pub fn builder(&self) -> PostgresJournalBuilder {
        PostgresJournal::builder(&self.url)
    }

    /// A journal on this database, owned by `owner`.
    pub async fn journal(&self, owner: &str) -> PostgresJournal {
        self.builder()
            .owner(owner)
            .connect()
            .await
            .expect("journal connects")
    }

    /// A direct connection to this database, for the SQL a test checks or edits with.
    pub async fn sql(&self) -> tokio_postgres::Client {
        client(&self.url).await
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // Drop runs inside the test's runtime: drop the database from a thread of its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                client(&admin)
                    .await
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
                    .map_err(|e| e.to_string())
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) && !std::thread::panicking() {
            panic!("DROP DATABASE {} failed: {dropped:?}", self.name);
        }
    }
}

/// A durable (state-changing) intent.
pub fn intent() -> Intent {
    Intent::for_bench(true)
}

/// The record closing `intent` as finished and completed after one request.
pub fn event(intent: &Intent) -> AuditEvent {
    AuditEvent::for_bench(intent)
}

/// Waits `ms` milliseconds.
pub async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}
