//! A fresh PostgreSQL database per test: created on a real server, dropped at the end.
//!
//! The server is `SALLYPORT_PG_URL` if set, else the machine's own through its Unix socket
//! (`host=/var/run/postgresql user=root dbname=postgres`). No server is a failure with
//! instructions, never a skipped test.

#![allow(dead_code, unreachable_pub)]

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
            let (main, query) = match rest.find('?') {
                Some(q) => (&rest[..q], &rest[q..]),
                None => (rest, ""),
            };
            let authority = main.split('/').next().unwrap_or(main);
            return format!("{scheme}{authority}/{dbname}{query}");
        }
    }
    // libpq key-value strings: a later key wins.
    format!("{url} dbname={dbname}")
}

/// Connects to `url` directly (no journal), failing loudly with instructions.
pub async fn client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = match tokio_postgres::connect(url, tokio_postgres::NoTls).await {
        Ok(pair) => pair,
        Err(e) => panic!(
            "cannot reach PostgreSQL at {url:?}: {e}\n\
             The sallyport-postgres tests need a real server. Start the machine's one:\n\
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

/// A database that exists for one test.
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
        let name = format!("sp_test_{}", uuid::Uuid::new_v4().simple());
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
                .expect("runtime");
            runtime.block_on(async {
                let admin = client(&admin).await;
                admin
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
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
