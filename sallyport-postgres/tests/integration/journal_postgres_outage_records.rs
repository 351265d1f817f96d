//! PostgreSQL going away while calls are in flight: their requests left (the intents were
//! durable first), the upstream answers, and the records cannot be written. The executor
//! keeps them and writes them when the server is back, so no attempt stays open or leased;
//! if it gives them up, their leases are released and the reconciler settles them through
//! the read action, counting the request it found. The journal is reached through the TCP
//! relay of `journal_postgres_outage`, cut while the upstream holds the answers.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::executor::{ReconcileOptions, ReconcileOutcome};
use sallyport_core::journal::{Journal, Phase};
use sallyport_core::outcome::ActionResult;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_postgres::PostgresJournal;
use sallyport_tests::http_server::{Received, Reply, Upstream};
use sallyport_tests::postgres::TestDb;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::journal_postgres_outage::{Relay, through_relay};

/// Queue one build of a project.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "create_deployment", effect = external_commitment, retry = idempotency_key,
         credential = "deploy-api", reconcile = "get_deployment")]
#[http(post = "/v1/projects/{project_id}/deployments", result = Created)]
struct CreateDeployment {
    project_id: String,
    build_id: String,
}

/// Read the deployment of one build.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_deployment", effect = observe, credential = "deploy-api")]
#[http(get = "/v1/projects/{project_id}/builds/{build_id}", result = Created)]
struct GetDeployment {
    project_id: String,
    build_id: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Created {
    id: String,
}

/// Calls in flight when the server goes away.
const IN_FLIGHT: usize = 8;

/// An upstream that deploys each POSTed build once (the idempotency draft) and answers a
/// GET of a build 200 once it was deployed, 404 before; every answer waits `delay`.
async fn deployments(delay: Duration) -> Upstream {
    let deployed: Arc<Mutex<HashSet<String>>> = Arc::default();
    let upstream = Upstream::start(move |r: &Received| {
        let mut deployed = deployed.lock().unwrap_or_else(PoisonError::into_inner);
        if r.method == "POST" {
            let body: Value = serde_json::from_slice(&r.body).unwrap_or_default();
            if let Some(build) = body["build_id"].as_str() {
                deployed.insert(build.to_owned());
            }
            Reply::Idempotent(None)
        } else {
            let build = r.path.rsplit('/').next().unwrap_or_default();
            if deployed.contains(build) {
                Reply::Json(200, json!({ "id": build }))
            } else {
                Reply::Json(404, json!({"error": "no such build"}))
            }
        }
    })
    .await;
    upstream.set_delay(delay);
    upstream
}

fn posts(upstream: &Upstream) -> i64 {
    upstream
        .received()
        .iter()
        .filter(|r| r.method == "POST")
        .count() as i64
}

fn executor(journal: Arc<PostgresJournal>, upstream: &Upstream, keep_for: Duration) -> Executor {
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "deploy-api",
            CredentialKind::Bearer,
            Binding::url(upstream.url()),
        ),
        Secret::new("token-outage-records"),
    );
    Executor::builder(
        Catalog::builder()
            .action::<CreateDeployment>()
            .action::<GetDeployment>()
            .build()
            .expect("catalog"),
    )
    .journal_arc(journal)
    .vault_arc(vault)
    .channel(
        HttpChannel::builder()
            .base_url(upstream.url())
            .build()
            .expect("channel"),
    )
    .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
    .kept_records_for(keep_for)
    .build()
    .expect("executor")
}

async fn journal_through(url: &str) -> Arc<PostgresJournal> {
    Arc::new(
        PostgresJournal::builder(url)
            .owner("outage-records")
            .lease(Duration::from_millis(1500))
            .renew_every(Duration::from_millis(300))
            .connect_timeout(Duration::from_millis(500))
            .connect()
            .await
            .expect("journal through the relay"),
    )
}

/// `IN_FLIGHT` calls sent, the relay cut while the upstream holds their answers: every
/// answer comes back `completed` with `record_pending` and no receipt.
async fn calls_cut_off_mid_flight(
    executor: &Executor,
    upstream: &Upstream,
    relay: &Relay,
) -> Vec<ActionResult> {
    let calls: Vec<_> = (0..IN_FLIGHT)
        .map(|i| {
            let executor = executor.clone();
            tokio::spawn(async move {
                executor
                    .call(
                        "create_deployment",
                        json!({"project_id": "proj_1", "build_id": format!("b{i}")}),
                        &Session::new("outage-records"),
                    )
                    .await
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while posts(upstream) < IN_FLIGHT as i64 {
        assert!(Instant::now() < deadline, "the calls were never sent");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    relay.cut();
    let mut results = Vec::new();
    for call in calls {
        results.push(call.await.expect("call task"));
    }
    for r in &results {
        assert_eq!(r.status, Status::Completed, "{}", r.to_json());
        assert!(r.record_pending, "{}", r.to_json());
        assert_eq!(r.receipt_id, None, "{}", r.to_json());
        assert!(
            r.to_json().contains("\"record_pending\":true"),
            "{}",
            r.to_json()
        );
    }
    results
}

/// Attempts no record closes, and of those the ones whose lease still runs.
async fn open_and_leased(db: &TestDb) -> (i64, i64) {
    let row = db
        .sql()
        .await
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE lease_until > now())
             FROM sallyport_attempts a
             WHERE NOT EXISTS (SELECT 1 FROM sallyport_audit r WHERE r.attempt_id = a.attempt_id)",
            &[],
        )
        .await
        .expect("open attempts");
    (row.get(0), row.get(1))
}

/// The journal's total of requests sent, for the state-changing action.
async fn journal_sends(db: &TestDb) -> i64 {
    db.sql()
        .await
        .query_one(
            "SELECT coalesce(sum(dispatches), 0)::BIGINT FROM sallyport_attempts
             WHERE action = 'create_deployment'",
            &[],
        )
        .await
        .expect("dispatches")
        .get(0)
}

/// Records per attempt of the state-changing action: each must have exactly one.
async fn records_per_attempt(db: &TestDb) -> Vec<i64> {
    db.sql()
        .await
        .query(
            "SELECT count(r.seq) FROM sallyport_attempts a
             LEFT JOIN sallyport_audit r ON r.attempt_id = a.attempt_id
             WHERE a.action = 'create_deployment' GROUP BY a.attempt_id",
            &[],
        )
        .await
        .expect("records")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_lost_to_an_outage_mid_call_are_written_when_postgres_is_back_and_no_attempt_stays_leased()
 {
    let db = TestDb::create().await;
    let (target, _) = through_relay(&db, 0);
    let relay = Relay::start(target).await;
    let (_, url) = through_relay(&db, relay.port);
    let upstream = deployments(Duration::from_millis(400)).await;
    let journal = journal_through(&url).await;
    let executor = executor(Arc::clone(&journal), &upstream, Duration::from_secs(300));

    let results = calls_cut_off_mid_flight(&executor, &upstream, &relay).await;
    assert_eq!(executor.kept_records(), IN_FLIGHT);
    // Seen from outside the relay: every attempt is open, its intent durable.
    assert_eq!(open_and_leased(&db).await.0, IN_FLIGHT as i64);

    relay.restore();
    wait_until("the kept records are written", async || {
        executor.kept_records() == 0
    })
    .await;
    // A lease outliving its attempt would be renewed by the heartbeat: wait past one.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let (open, leased) = open_and_leased(&db).await;
    eprintln!(
        "outage mid-call: {IN_FLIGHT} calls cut off, after the server returned {open} attempts open, {leased} leased; sends: journal {}, upstream {}",
        journal_sends(&db).await,
        posts(&upstream)
    );
    assert_eq!((open, leased), (0, 0));
    assert_eq!(
        records_per_attempt(&db).await,
        vec![1; IN_FLIGHT],
        "one record per attempt"
    );
    assert_eq!(posts(&upstream), IN_FLIGHT as i64);
    assert_eq!(journal_sends(&db).await, posts(&upstream));

    // The records are the calls' own: same attempts, their true outcome, one request each.
    let records = journal.records().await.expect("records");
    for r in &results {
        let closing: Vec<_> = records
            .iter()
            .filter(|rec| rec.event.attempt_id == r.attempt_id)
            .collect();
        assert_eq!(closing.len(), 1);
        let event = &closing[0].event;
        assert_eq!(
            (event.phase, event.status, event.dispatches),
            (Phase::Finished, Status::Completed, 1)
        );
        assert_eq!(event.reconciled, None, "written by the executor itself");
    }
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");

    // And the executor goes on as before.
    let after = executor
        .call(
            "create_deployment",
            json!({"project_id": "proj_1", "build_id": "after"}),
            &Session::new("outage-records"),
        )
        .await;
    assert_eq!(after.status, Status::Completed, "{}", after.to_json());
    assert!(!after.record_pending);
    assert!(after.receipt_id.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_given_up_release_their_leases_and_the_reconciler_counts_the_sends_it_found() {
    let db = TestDb::create().await;
    let (target, _) = through_relay(&db, 0);
    let relay = Relay::start(target).await;
    let (_, url) = through_relay(&db, relay.port);
    let upstream = deployments(Duration::from_millis(400)).await;
    let journal = journal_through(&url).await;
    // Kept for 300 ms only: given up while the server is still away.
    let executor = executor(Arc::clone(&journal), &upstream, Duration::from_millis(300));

    calls_cut_off_mid_flight(&executor, &upstream, &relay).await;
    wait_until("the kept records are given up", async || {
        executor.kept_records() == 0
    })
    .await;
    relay.restore();
    // The process lives on, its heartbeat too, but it renews nothing it gave up: each lease
    // (1.5 s) runs out.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (open, leased) = open_and_leased(&db).await;
    eprintln!("given up: {open} attempts open, {leased} still leased while their process lives");
    assert_eq!((open, leased), (IN_FLIGHT as i64, 0));

    // As if every dispatch note had been lost in the outage (the independent check saw it):
    // the rows say nothing was sent.
    db.sql()
        .await
        .execute(
            "UPDATE sallyport_attempts SET dispatches = 0, phase = 'intent_written'
             WHERE action = 'create_deployment'",
            &[],
        )
        .await
        .expect("forget the notes");
    let reconciled = executor
        .reconcile(ReconcileOptions::new())
        .await
        .expect("reconcile");
    assert_eq!(reconciled.len(), IN_FLIGHT, "{reconciled:?}");
    assert!(
        reconciled
            .iter()
            .all(|r| r.outcome == ReconcileOutcome::Completed && r.settled.is_some()),
        "{reconciled:?}"
    );
    assert_eq!(open_and_leased(&db).await, (0, 0));
    assert_eq!(records_per_attempt(&db).await, vec![1; IN_FLIGHT]);
    // The GET checks are not sends of the state-changing action.
    assert_eq!(posts(&upstream), IN_FLIGHT as i64);
    assert_eq!(
        journal_sends(&db).await,
        posts(&upstream),
        "the reconciler counts the request whose effect it found"
    );
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_dropped_with_records_kept_releases_their_leases() {
    let db = TestDb::create().await;
    let (target, _) = through_relay(&db, 0);
    let relay = Relay::start(target).await;
    let (_, url) = through_relay(&db, relay.port);
    let upstream = deployments(Duration::from_millis(400)).await;
    let journal = journal_through(&url).await;
    let executor = executor(Arc::clone(&journal), &upstream, Duration::from_secs(300));

    calls_cut_off_mid_flight(&executor, &upstream, &relay).await;
    assert_eq!(executor.kept_records(), IN_FLIGHT);
    // The host shuts the executor down while the server is away; its journal lives on
    // (shared with other parts of the host), heartbeat and all.
    drop(executor);
    // The server stays away a little longer: a write the executor had in flight fails.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    relay.restore();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        open_and_leased(&db).await,
        (IN_FLIGHT as i64, 0),
        "open for the reconciler, leased by nobody"
    );
    let claimed = journal.claim_expired(100).await.expect("claim");
    assert_eq!(claimed.len(), IN_FLIGHT);
}
