//! PostgreSQL going away mid-run: the journal reaches the server through a TCP relay this
//! test can cut (every connection dropped, new ones refused) and restore. While it is cut,
//! state-changing calls refuse with `journal_unavailable` and send nothing; once it is
//! back, calls succeed again on fresh connections and the chain verifies.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::Journal;
use sallyport_core::outcome::ActionResult;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_postgres::PostgresJournal;
use sallyport_tests::http_server::{Reply, Upstream};
use sallyport_tests::postgres::TestDb;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::task::JoinHandle;
use tokio_postgres::config::Host;

/// Queue one build of a project.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "create_deployment", effect = external_commitment, retry = idempotency_key,
         credential = "deploy-api")]
#[http(post = "/v1/projects/{project_id}/deployments", result = Created)]
struct CreateDeployment {
    project_id: String,
    build_id: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Created {
    id: String,
}

/// Where the real server listens.
#[derive(Clone)]
pub(crate) enum Target {
    Unix(std::path::PathBuf),
    Tcp(String),
}

/// A TCP relay to the server that can be cut and restored.
pub(crate) struct Relay {
    /// The port the relay listens on.
    pub(crate) port: u16,
    up: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
    _accept: JoinHandle<()>,
}

impl Relay {
    pub(crate) async fn start(target: Target) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let up = Arc::new(AtomicBool::new(true));
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::new(Mutex::new(Vec::new()));
        let (up2, links2) = (Arc::clone(&up), Arc::clone(&links));
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    // Down: the connection is refused as a stopped server's would be.
                    drop(client);
                    continue;
                }
                let target = target.clone();
                let link = tokio::spawn(async move {
                    match target {
                        Target::Unix(path) => {
                            if let Ok(mut server) = UnixStream::connect(path).await {
                                let _ =
                                    tokio::io::copy_bidirectional(&mut client, &mut server).await;
                            }
                        }
                        Target::Tcp(addr) => {
                            if let Ok(mut server) = TcpStream::connect(addr).await {
                                let _ =
                                    tokio::io::copy_bidirectional(&mut client, &mut server).await;
                            }
                        }
                    }
                });
                links2
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(link);
            }
        });
        Self {
            port,
            up,
            links,
            _accept: accept,
        }
    }

    /// Drops every connection and refuses new ones.
    pub(crate) fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for link in self
            .links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            link.abort();
        }
    }

    pub(crate) fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// The test database's server, and a connection string for it through `port`.
pub(crate) fn through_relay(db: &TestDb, port: u16) -> (Target, String) {
    let config: tokio_postgres::Config = db.url.parse().expect("test url parses");
    let target_port = config.get_ports().first().copied().unwrap_or(5432);
    let target = match config.get_hosts().first() {
        Some(Host::Unix(dir)) => Target::Unix(dir.join(format!(".s.PGSQL.{target_port}"))),
        Some(Host::Tcp(host)) => Target::Tcp(format!("{host}:{target_port}")),
        None => Target::Unix(format!("/var/run/postgresql/.s.PGSQL.{target_port}").into()),
    };
    let mut url = format!(
        "host=127.0.0.1 port={port} dbname={} user={}",
        db.name,
        config.get_user().unwrap_or("root")
    );
    if let Some(password) = config.get_password() {
        url.push_str(&format!(
            " password='{}'",
            String::from_utf8_lossy(password)
                .replace('\\', "\\\\")
                .replace('\'', "\\'")
        ));
    }
    (target, url)
}

async fn call(executor: &Executor, i: usize) -> ActionResult {
    executor
        .call(
            "create_deployment",
            json!({"project_id": format!("proj_{i}"), "build_id": format!("b{i}")}),
            &Session::new("outage"),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_postgres_is_unreachable_calls_refuse_unsent_and_succeed_once_it_is_back() {
    let db = TestDb::create().await;
    // The relay's target is the test database's server; the journal connects through it.
    let (target, _) = through_relay(&db, 0);
    let relay = Relay::start(target).await;
    let (_, url) = through_relay(&db, relay.port);

    let upstream = Upstream::start(|_| Reply::Idempotent(None)).await;
    let journal = Arc::new(
        PostgresJournal::builder(&url)
            .owner("outage")
            .connect_timeout(Duration::from_millis(500))
            .connect()
            .await
            .expect("journal through the relay"),
    );
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "deploy-api",
            CredentialKind::Bearer,
            Binding::url(upstream.url()),
        ),
        Secret::new("token-outage"),
    );
    let executor = Executor::builder(
        Catalog::builder()
            .action::<CreateDeployment>()
            .build()
            .expect("catalog"),
    )
    .journal_arc(journal.clone())
    .vault_arc(vault)
    .channel(
        HttpChannel::builder()
            .base_url(upstream.url())
            .build()
            .expect("channel"),
    )
    .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
    .build()
    .expect("executor");

    for i in 0..5 {
        let r = call(&executor, i).await;
        assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    }
    assert_eq!(upstream.requests(), 5);

    relay.cut();
    for i in 5..10 {
        let r = call(&executor, i).await;
        assert_eq!(r.status, Status::Rejected, "{}", r.to_json());
        assert_eq!(r.code_str(), Some("journal_unavailable"), "{}", r.to_json());
    }
    assert_eq!(
        upstream.requests(),
        5,
        "nothing is sent while the journal is down"
    );

    relay.restore();
    for i in 10..15 {
        let r = call(&executor, i).await;
        assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    }
    assert_eq!(upstream.requests(), 10);
    assert_eq!(upstream.effect_count(), 10);
    // A call right after the outage can find records still kept from it: its answer then
    // says `record_pending`, and its record is written behind them by the executor's retry
    // task. A kept entry leaves the keep only once the journal has it, so an empty keep
    // means every record is in.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while executor.kept_records() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        executor.kept_records(),
        0,
        "the records kept through the outage are written once it is back"
    );

    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    let records = journal.records().await.expect("records");
    let completed = records
        .iter()
        .filter(|r| r.event.status == Status::Completed)
        .count();
    assert_eq!(completed, 10);
    let dispatched: i64 = db
        .sql()
        .await
        .query_one(
            "SELECT coalesce(sum(dispatches), 0)::BIGINT FROM sallyport_attempts",
            &[],
        )
        .await
        .expect("dispatches")
        .get(0);
    assert_eq!(
        dispatched, 10,
        "the journal's dispatch count equals the server's"
    );
}
