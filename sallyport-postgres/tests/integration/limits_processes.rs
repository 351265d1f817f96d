//! A policy's limit shared by the fleet: 4 real executor processes (this crate's
//! `limits-executor` helper) race 5 calls each, all at once, in one session on one journal
//! (a SQLite file, or a PostgreSQL database) and one request-counting HTTP upstream, under a
//! policy that allows 5 calls per session per hour. Exactly 5 are sent, the other 15 are
//! denied with the policy's reason. With the counts kept per process (`--local`), the same
//! race lets 20 through: the store is what holds the limit.

use std::process::{Command, Output};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sallyport_core::journal::{Journal, SqliteJournal};
use sallyport_postgres::PostgresJournal;
use sallyport_tests::http_server::{Reply, Upstream};
use sallyport_tests::postgres::TestDb;

const PROCESSES: usize = 4;
const CALLS: usize = 5;
const LIMIT: usize = 5;
const DENIED: &str = "denied policy `five-an-hour` denied this call: at most 5 deployments per session per hour; nothing was sent";

/// Starts `PROCESSES` `limits-executor` processes that begin calling at the same instant.
fn race(journal: &str, upstream: &str, extra: &[&str]) -> Vec<Output> {
    let start_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .saturating_add(Duration::from_millis(1500))
        .as_millis()
        .to_string();
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_limits-executor"))
                .args([journal, upstream, "fleet-session"])
                .arg(CALLS.to_string())
                .arg(&start_at)
                .args(extra)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn limits-executor")
        })
        .collect();
    sallyport_tests::children::wait_all(children, std::time::Duration::from_secs(600))
}

/// Every process exited 0; returns (completed, denied lines) over all of them.
fn tally(outputs: &[Output]) -> (usize, Vec<String>) {
    let mut completed = 0;
    let mut denied = Vec::new();
    for (i, out) in outputs.iter().enumerate() {
        assert!(
            out.status.success(),
            "process {i} exited {:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if line == "completed" {
                completed += 1;
            } else {
                denied.push(line.to_owned());
            }
        }
    }
    (completed, denied)
}

/// The race on `journal`, against a fresh upstream: returns (completed, denied, sent).
async fn race_on(journal: String, extra: &'static [&'static str]) -> (usize, Vec<String>, u64) {
    let upstream = Upstream::start_with(|_| Reply::Idempotent(None), false).await;
    let url = upstream.url();
    let outputs = tokio::task::spawn_blocking(move || race(&journal, &url, extra))
        .await
        .expect("children");
    let (completed, denied) = tally(&outputs);
    (completed, denied, upstream.requests())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_of_5_an_hour_holds_across_4_processes_racing_on_one_sqlite_journal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    let (completed, denied, sent) = race_on(format!("sqlite:{}", path.display()), &[]).await;
    assert_eq!(completed, LIMIT, "denied: {denied:?}");
    assert_eq!(denied.len(), PROCESSES * CALLS - LIMIT);
    assert!(denied.iter().all(|line| line == DENIED), "{denied:?}");
    assert_eq!(
        sent, LIMIT as u64,
        "the upstream saw exactly the calls let through"
    );
    let journal = SqliteJournal::open(&path).expect("journal");
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(
        report.records,
        (PROCESSES * CALLS) as u64,
        "one record per call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_of_5_an_hour_holds_across_4_processes_racing_on_one_postgres_journal() {
    let db = TestDb::create().await;
    let (completed, denied, sent) = race_on(db.url.clone(), &[]).await;
    assert_eq!(completed, LIMIT, "denied: {denied:?}");
    assert_eq!(denied.len(), PROCESSES * CALLS - LIMIT);
    assert!(denied.iter().all(|line| line == DENIED), "{denied:?}");
    assert_eq!(
        sent, LIMIT as u64,
        "the upstream saw exactly the calls let through"
    );
    let sql = db.sql().await;
    let counted: i64 = sql
        .query_one(
            "SELECT count(*) FROM sallyport_policy_calls WHERE session_id = 'fleet-session' AND status = 'completed'",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(
        counted, LIMIT as i64,
        "the store holds the 5 calls, each completed"
    );
    let journal = PostgresJournal::connect(&db.url).await.expect("journal");
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(
        report.records,
        (PROCESSES * CALLS) as u64,
        "one record per call"
    );
}

/// The control: the same race with every process counting in its own memory lets each
/// process make 5, 20 in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_counts_kept_per_process_the_same_race_lets_each_process_make_5() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    let (completed, denied, sent) =
        race_on(format!("sqlite:{}", path.display()), &["--local"]).await;
    assert_eq!(completed, PROCESSES * LIMIT, "denied: {denied:?}");
    assert!(denied.is_empty());
    assert_eq!(sent, (PROCESSES * LIMIT) as u64);
}
