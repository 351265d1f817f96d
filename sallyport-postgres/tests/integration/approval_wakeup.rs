//! A decision reaches the approval worker through `LISTEN`/`NOTIFY`, not its poll: an
//! executor runs `run_approval_worker` with a fallback interval of an hour, so a call
//! approved after its first listing is sent within the tests' bound only if a notification
//! woke it. The decisions are made through a second journal (its own pool, as another
//! process has). The listening connection is lost twice over: its backend terminated
//! while the database refuses new connections, and every connection cut by a relay; each
//! time the call decided meanwhile is sent once the listener is back, and later decisions
//! still arrive.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sallyport_core::approval::{self, ApprovalId, ApprovalState, Decided, Decider, Verdict};
use sallyport_core::journal::{ApprovalStore, Journal};
use sallyport_core::{Executor, Status};
use sallyport_postgres::PostgresJournal;
use sallyport_tests::approvals_rig::{self, HostOptions};
use sallyport_tests::http_server::{Received, Reply, Upstream};
use sallyport_tests::postgres::{TestDb, admin_url, client};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::journal_postgres_outage::{Relay, through_relay};

/// The worker's fallback interval: far beyond every bound below.
const HOUR: Duration = Duration::from_secs(3600);

/// How long a notified decision may take to be sent (it takes milliseconds).
const BOUND: Duration = Duration::from_secs(20);

fn reply(r: &Received) -> Reply {
    if r.method == "POST" {
        Reply::Idempotent(None)
    } else {
        Reply::Json(200, json!({"id": "inv_x"}))
    }
}

/// POSTs the upstream received for invoice `n`.
fn posts_for(upstream: &Upstream, n: usize) -> usize {
    let needle = format!("\"inv_{n}\"");
    upstream
        .received()
        .iter()
        .filter(|r| r.method == "POST" && String::from_utf8_lossy(&r.body).contains(&needle))
        .count()
}

/// Waits up to [`BOUND`] for invoice `n`'s POST; then how long it took.
async fn sent(upstream: &Upstream, n: usize) -> Duration {
    let start = Instant::now();
    while posts_for(upstream, n) == 0 {
        assert!(
            start.elapsed() < BOUND,
            "invoice {n} was not sent within {BOUND:?}: the worker was not woken"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

/// The worker's executor over `url`, its worker spawned with an hour's fallback.
async fn worker(url: &str, upstream: &Upstream) -> (Executor, JoinHandle<()>) {
    let journal = PostgresJournal::builder(url)
        .owner("worker")
        .connect()
        .await
        .expect("worker journal");
    let options = HostOptions::new("unused.db", upstream.url());
    let executor = approvals_rig::executor_on(
        &options,
        approvals_rig::vault(&upstream.url()),
        Arc::new(journal),
    );
    let running = executor.clone();
    let task = tokio::spawn(async move { running.run_approval_worker(HOUR).await });
    (executor, task)
}

/// Parks invoices `0..n` through `executor`; their approval ids.
async fn park(executor: &Executor, n: usize) -> Vec<ApprovalId> {
    let mut ids = Vec::new();
    for i in 0..n {
        let result = executor
            .call(
                "send_invoice",
                approvals_rig::invoice(i),
                &approvals_rig::session(),
            )
            .await;
        assert_eq!(result.status, Status::Pending, "{}", result.to_json());
        ids.push(result.approval_id.expect("an approval id"));
    }
    ids
}

/// Approves `id` through `store` only (a front end that sends nothing itself).
async fn approve(store: &dyn ApprovalStore, id: &ApprovalId, who: &str) {
    let decided = approval::decide_under(
        store,
        None,
        id,
        Verdict::Approve,
        &Decider::new(who, "test"),
        None,
    )
    .await
    .expect("decided");
    assert!(
        matches!(&decided, Decided::Recorded(a) if a.state == ApprovalState::Approved),
        "{decided:?}"
    );
}

/// Waits until the database has (`true`) or has not (`false`) a listening backend.
async fn listener_connected(admin: &tokio_postgres::Client, db: &str, connected: bool) {
    let start = Instant::now();
    loop {
        let n: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = $1 AND application_name = 'sallyport-approval-listener'",
                &[&db],
            )
            .await
            .expect("pg_stat_activity")
            .get(0);
        if (n > 0) == connected {
            return;
        }
        assert!(
            start.elapsed() < BOUND,
            "the listener never became {}",
            if connected {
                "connected"
            } else {
                "disconnected"
            }
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_from_another_journal_is_sent_by_a_worker_polling_once_an_hour() {
    let db = TestDb::create().await;
    let upstream = Upstream::start(reply).await;
    let (executor, task) = worker(&db.url, &upstream).await;
    let decider = db.journal("decider").await;
    let ids = park(&executor, 3).await;
    approve(&decider, &ids[0], "alice").await;
    sent(&upstream, 0).await;
    // The worker has listed at least once since: what follows only a notification sends.
    approve(&decider, &ids[1], "alice").await;
    sent(&upstream, 1).await;
    // A denial sends nothing.
    let deny = approval::decide_under(
        &decider,
        None,
        &ids[2],
        Verdict::Deny,
        &Decider::new("bob", "test"),
        Some("not this month"),
    )
    .await
    .expect("denied");
    assert!(matches!(deny, Decided::Recorded(a) if a.state == ApprovalState::Denied));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        (
            posts_for(&upstream, 0),
            posts_for(&upstream, 1),
            posts_for(&upstream, 2)
        ),
        (1, 1, 0)
    );
    task.abort();
    assert!(
        executor
            .journal()
            .verify()
            .await
            .expect("verify")
            .is_intact()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_committed_decision_notifies_and_a_rolled_back_one_does_not() {
    let db = TestDb::create().await;
    let watcher = db.journal("watcher").await;
    let mut watch = watcher.watch_decisions();
    assert!(watch.is_notified());
    // The listener says once that it listens (a worker then lists everything).
    assert!(watch.wait(BOUND).await, "the listener never listened");

    // Calls parked by an executor with no worker, needing two distinct approvers.
    let upstream = Upstream::start(reply).await;
    let mut options = HostOptions::new("unused.db", upstream.url());
    options.approvals = 2;
    let parker = approvals_rig::executor_on(
        &options,
        approvals_rig::vault(&upstream.url()),
        Arc::new(db.journal("parker").await),
    );
    let ids = park(&parker, 2).await;
    assert!(
        !watch.wait(Duration::from_millis(500)).await,
        "parking decides nothing"
    );
    let sql = db.sql().await;
    sql.batch_execute(
        "BEGIN; SELECT pg_notify('sallyport_approvals', 'apr_rolled_back'); ROLLBACK",
    )
    .await
    .expect("rolled back");
    assert!(
        !watch.wait(Duration::from_millis(500)).await,
        "a notification of a transaction rolled back is never delivered"
    );

    // The first of two approvals counts, and says so.
    let decider = db.journal("decider").await;
    let counted = approval::decide_under(
        &decider,
        None,
        &ids[0],
        Verdict::Approve,
        &Decider::new("alice", "test"),
        None,
    )
    .await
    .expect("counted");
    assert!(matches!(&counted, Decided::Recorded(a) if a.state == ApprovalState::Awaiting));
    assert!(watch.wait(BOUND).await, "a counting approval notifies");
    approve(&decider, &ids[0], "bob").await;
    assert!(
        watch.wait(BOUND).await,
        "the approval that completes the quorum notifies"
    );
    let denied = approval::decide_under(
        &decider,
        None,
        &ids[1],
        Verdict::Deny,
        &Decider::new("carol", "test"),
        Some("not this month"),
    )
    .await
    .expect("denied");
    assert!(matches!(&denied, Decided::Recorded(a) if a.state == ApprovalState::Denied));
    assert!(watch.wait(BOUND).await, "a denial notifies");
    // A decision that changes nothing (already denied) notifies nobody.
    let late = approval::decide_under(
        &decider,
        None,
        &ids[1],
        Verdict::Approve,
        &Decider::new("dave", "test"),
        None,
    )
    .await
    .expect("late");
    assert!(matches!(late, Decided::AlreadyDecided(_)), "{late:?}");
    assert!(!watch.wait(Duration::from_millis(500)).await);
    assert_eq!(posts_for(&upstream, 0), 0, "no worker, nothing sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_listener_connects_again_and_sends_what_was_approved_meanwhile() {
    let db = TestDb::create().await;
    let admin = client(&admin_url()).await;
    let upstream = Upstream::start(reply).await;
    let (executor, task) = worker(&db.url, &upstream).await;
    let decider = db.journal("decider").await;
    let ids = park(&executor, 2).await;
    // The decider's pool holds a connection from here on (the database will refuse new ones).
    assert!(decider.verify().await.expect("verify").is_intact());
    listener_connected(&admin, &db.name, true).await;

    // The database refuses new connections, and the listener's backend is terminated.
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} WITH ALLOW_CONNECTIONS false",
            db.name
        ))
        .await
        .expect("refuse connections");
    // The pid first: a condition beside pg_terminate_backend() may be checked after it.
    let pids: Vec<i32> = admin
        .query(
            "SELECT pid FROM pg_stat_activity \
             WHERE datname = $1 AND application_name = 'sallyport-approval-listener'",
            &[&db.name],
        )
        .await
        .expect("listener pid")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(pids.len(), 1, "one listening connection per journal");
    let terminated: bool = admin
        .query_one("SELECT pg_terminate_backend($1)", &[&pids[0]])
        .await
        .expect("terminate")
        .get(0);
    assert!(terminated);
    listener_connected(&admin, &db.name, false).await;

    // Approved while no connection listens: no notification reaches the worker.
    approve(&decider, &ids[0], "alice").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        posts_for(&upstream, 0),
        0,
        "nothing can have woken the worker"
    );

    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} WITH ALLOW_CONNECTIONS true",
            db.name
        ))
        .await
        .expect("allow connections");
    // Listening again, the worker lists everything: the call approved meanwhile is sent.
    sent(&upstream, 0).await;
    listener_connected(&admin, &db.name, true).await;
    approve(&decider, &ids[1], "alice").await;
    sent(&upstream, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!((posts_for(&upstream, 0), posts_for(&upstream, 1)), (1, 1));
    task.abort();
    assert!(
        executor
            .journal()
            .verify()
            .await
            .expect("verify")
            .is_intact()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_from_the_server_sends_what_was_approved_meanwhile_once_it_is_back() {
    let db = TestDb::create().await;
    let upstream = Upstream::start(reply).await;
    let (target, _) = through_relay(&db, 0);
    let relay = Relay::start(target).await;
    let (_, url) = through_relay(&db, relay.port);
    let (executor, task) = worker(&url, &upstream).await;
    let decider = db.journal("decider").await;
    let ids = park(&executor, 2).await;
    let admin = client(&admin_url()).await;
    listener_connected(&admin, &db.name, true).await;

    // Every connection of the worker's journal dropped, new ones refused: to it the server
    // is gone, as in a restart.
    relay.cut();
    approve(&decider, &ids[0], "alice").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        posts_for(&upstream, 0),
        0,
        "the worker cannot hear while cut off"
    );

    relay.restore();
    sent(&upstream, 0).await;
    listener_connected(&admin, &db.name, true).await;
    approve(&decider, &ids[1], "alice").await;
    sent(&upstream, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!((posts_for(&upstream, 0), posts_for(&upstream, 1)), (1, 1));
    task.abort();
}
