//! Several real executor processes on one PostgreSQL journal and one HTTP upstream.

use std::collections::HashSet;
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sallyport_core::journal::Journal;
use sallyport_postgres::PostgresJournal;
use sallyport_tests::http_server::{Reply, Upstream};
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
    children
        .into_iter()
        .map(|c| c.wait_with_output().expect("wait"))
        .collect()
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
