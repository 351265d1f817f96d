//! Several real executor processes on one PostgreSQL journal and one HTTP upstream.

use std::collections::HashSet;
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sallyport_core::journal::Journal;
use sallyport_postgres::PostgresJournal;
use sallyport_tests::http_server::{Drop, Reply, Upstream};
use sallyport_tests::postgres::TestDb;

const PROCESSES: usize = 4;
const CALLS: usize = 500;
const IN_FLIGHT: usize = 8;

/// Starts `PROCESSES` `pg-executor` processes that begin calling at the same instant.
fn start_together(journal: &str, upstream: &str) -> Vec<Output> {
    let start_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .saturating_add(Duration::from_millis(1500))
        .as_millis()
        .to_string();
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_pg-executor"))
                .args([journal, upstream])
                .arg(CALLS.to_string())
                .arg(IN_FLIGHT.to_string())
                .arg(&start_at)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn pg-executor")
        })
        .collect();
    sallyport_tests::children::wait_all(children, std::time::Duration::from_secs(600))
}

/// 4 processes x 500 state-changing calls: every call completes, the server commits each
/// key once, its request count equals the journal's dispatch count, no reservation is
/// duplicated, and the one chain holds every call and verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_executor_processes_share_one_postgres_journal_and_one_chain() {
    let db = TestDb::create().await;
    let upstream = Upstream::start_with(|_| Reply::Idempotent(None), false).await;
    let url = upstream.url();
    let journal_url = db.url.clone();
    let started = Instant::now();
    let outputs = tokio::task::spawn_blocking(move || start_together(&journal_url, &url))
        .await
        .expect("children");
    let elapsed = started.elapsed();
    for (i, out) in outputs.iter().enumerate() {
        assert!(
            out.status.success(),
            "process {i} exited {:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let total = (PROCESSES * CALLS) as u64;
    eprintln!("{total} state-changing calls by {PROCESSES} processes in {elapsed:?}");

    // The server: one request per call, each key committed once.
    assert_eq!(upstream.requests(), total);
    let effects = upstream.effects();
    assert_eq!(effects.len() as u64, total, "one key per call");
    assert!(effects.values().all(|n| *n == 1), "a key committed twice");

    // The journal: one reservation per call, the dispatch count equal to the server's.
    let sql = db.sql().await;
    let row = sql
        .query_one(
            "SELECT count(*), count(DISTINCT idempotency_key), coalesce(sum(dispatches), 0)::BIGINT,
                    count(*) FILTER (WHERE phase = 'finished' AND status = 'completed'),
                    count(DISTINCT owner)
             FROM sallyport_attempts",
            &[],
        )
        .await
        .expect("attempts");
    let (attempts, keys, dispatches, finished, owners): (i64, i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    assert_eq!(attempts as u64, total);
    assert_eq!(keys, attempts, "no duplicate reservation");
    assert_eq!(dispatches as u64, upstream.requests());
    assert_eq!(finished, attempts);
    assert_eq!(owners as usize, PROCESSES);
    let stored: HashSet<String> = sql
        .query("SELECT idempotency_key FROM sallyport_attempts", &[])
        .await
        .expect("keys")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let sent: HashSet<String> = effects
        .keys()
        .map(|k| k.trim_matches('"').to_owned())
        .collect();
    assert_eq!(sent, stored, "the server saw exactly the journal's keys");

    let journal = PostgresJournal::connect(&db.url).await.expect("journal");
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, total);
    let records = journal.records().await.expect("records");
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=total).collect::<Vec<_>>());
    let sessions: HashSet<&str> = records
        .iter()
        .map(|r| r.event.session_id.as_str())
        .collect();
    assert_eq!(
        sessions.len(),
        PROCESSES,
        "every process's records are in the one chain"
    );
    assert!(journal.unresolved().await.expect("unresolved").is_empty());
}

/// kill -9 of a process mid-call: while its lease lasts its attempt is unresolved but not
/// claimable; once the lease expires another journal claims it (epoch 2), and the dead
/// process's one request is all the server ever saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_mid_call_leaves_an_attempt_claimable_once_its_lease_expires() {
    let db = TestDb::create().await;
    let upstream =
        Upstream::start(|_| Reply::CommitThenDrop(Drop::Hang(Duration::from_secs(60)))).await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_pg-executor"))
        .args([
            db.url.as_str(),
            upstream.url().as_str(),
            "1",
            "1",
            "0",
            "1500",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn pg-executor");
    let deadline = Instant::now() + Duration::from_secs(30);
    while upstream.requests() == 0 {
        assert!(
            Instant::now() < deadline,
            "the child never sent its request"
        );
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("the child exited early: {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The dispatch note is written behind the request, by a writer nobody waits for: let it
    // land, so that what is killed is a call whose request is out and unanswered.
    let sql = db.sql().await;
    loop {
        let dispatched: i64 = sql
            .query_one(
                "SELECT count(*) FROM sallyport_attempts WHERE phase = 'dispatched'",
                &[],
            )
            .await
            .expect("count")
            .get(0);
        if dispatched == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the child's dispatch note never landed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.kill().expect("kill -9");
    child.wait().expect("reaped");

    let journal = PostgresJournal::builder(&db.url)
        .owner("reconciler")
        .connect()
        .await
        .expect("journal");
    let open = journal.unresolved().await.expect("unresolved");
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0].phase, sallyport_core::journal::Phase::Dispatched);
    assert_eq!(open[0].dispatches, 1);
    // The lease (1.5 s, renewed until the kill) has not run out yet.
    assert!(journal.claim_expired(10).await.expect("claim").is_empty());

    tokio::time::sleep(Duration::from_millis(2500)).await;
    let claimed = journal.claim_expired(10).await.expect("claim");
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    assert_eq!(claimed[0].attempt.attempt_id, open[0].attempt_id);
    assert_eq!(claimed[0].epoch, 2);
    assert!(
        claimed[0].previous_owner.starts_with("pg-executor-"),
        "{}",
        claimed[0].previous_owner
    );
    assert_eq!(upstream.requests(), 1, "one request, from the dead process");
    assert!(journal.records().await.expect("records").is_empty());
}

/// A process stopped mid-batch (here `SIGSTOP`; in CI once, threads blocked on a full
/// output pipe) holds the chain head's row lock, which every journal on the database needs
/// to append. The server ends that session after the journal's idle-in-transaction limit
/// (2 s here), and the lock is free again while the process is still stopped. Two
/// processes write, so that batches lock the head (one alone on the database chains on the
/// head it last wrote, in one flight, and never waits between statements).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_stopped_holding_the_chain_head_loses_it_after_the_idle_limit() {
    const LIMIT_MS: u64 = 2000;
    let db = TestDb::create().await;
    let upstream = Upstream::start_with(|_| Reply::Idempotent(None), false).await;
    let spawn = |name: &str| {
        Command::new(env!("CARGO_BIN_EXE_pg-executor"))
            .args([
                format!("{} application_name={name}", db.url).as_str(),
                upstream.url().as_str(),
                "1000000",
                "8",
                "0",
                "30000",
                "report",
            ])
            .env("PG_EXECUTOR_IDLE_IN_TRANSACTION_MS", LIMIT_MS.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn pg-executor")
    };
    let mut child = spawn("stopped");
    let mut other = spawn("running");
    let pid = child.id().to_string();
    let signal = |name: &str| {
        let status = Command::new("kill")
            .args([name, pid.as_str()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {name}");
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while upstream.requests() < 50 {
        assert!(Instant::now() < deadline, "the child never got going");
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("the child exited early: {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Stop the child until it is caught with a session idle inside a batch that locked the
    // head (its last statement the lock), letting it go on between tries.
    let sql = db.sql().await;
    let holding = "SELECT count(*) FROM pg_stat_activity
                   WHERE datname = current_database() AND application_name = 'stopped'
                     AND state = 'idle in transaction'
                     AND query LIKE '%sallyport_chain_head%FOR UPDATE%'";
    let mut tries = 0;
    let caught_at = loop {
        tries += 1;
        assert!(
            tries <= 500,
            "never caught the child holding the chain head"
        );
        signal("-STOP");
        tokio::time::sleep(Duration::from_millis(30)).await;
        let held: i64 = sql.query_one(holding, &[]).await.expect("activity").get(0);
        if held == 1 {
            break Instant::now();
        }
        signal("-CONT");
        tokio::time::sleep(Duration::from_millis(3 + tries % 17)).await;
    };
    // Another session takes the lock while the child is still stopped: within the limit
    // (and the server's once-a-second check), not when the child wakes.
    sql.batch_execute("SET lock_timeout = '20s'")
        .await
        .expect("lock timeout");
    sql.batch_execute("BEGIN").await.expect("begin");
    sql.query_one(
        "SELECT seq FROM sallyport_chain_head WHERE shard = 'default' FOR UPDATE",
        &[],
    )
    .await
    .expect("the chain head is free again while the child is stopped");
    let waited = caught_at.elapsed();
    sql.batch_execute("COMMIT").await.expect("commit");
    assert!(
        waited < Duration::from_millis(LIMIT_MS + 4000),
        "the lock came free {waited:?} after the child stopped"
    );
    let held: i64 = sql.query_one(holding, &[]).await.expect("activity").get(0);
    assert_eq!(held, 0, "the stopped child's session was ended");
    eprintln!("caught after {tries} tries; the chain head was free again {waited:?} later");

    // The child wakes to a failed batch and goes on; what it recorded is one intact chain.
    signal("-CONT");
    let before = upstream.requests();
    let deadline = Instant::now() + Duration::from_secs(60);
    while upstream.requests() < before + 50 {
        assert!(Instant::now() < deadline, "the child did not go on");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for process in [&mut child, &mut other] {
        process.kill().expect("kill");
        process.wait().expect("reaped");
    }
    let journal = PostgresJournal::builder(&db.url)
        .owner("checker")
        .connect()
        .await
        .expect("journal");
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
}
