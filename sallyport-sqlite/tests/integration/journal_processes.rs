//! Several real executor processes on one SQLite journal file.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sallyport_core::journal::{HeadSigningKey, Journal, SqliteJournal};

const PROCESSES: usize = 5;
const ROUNDS: usize = 25;
const CALLS: usize = 4;

/// Starts `PROCESSES` `journal-writer` processes that all open `path` at the same instant.
fn start_together(path: &Path, extra: &[&Path]) -> Vec<Output> {
    let start_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .saturating_add(Duration::from_millis(150))
        .as_millis()
        .to_string();
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_journal-writer"))
                .arg(path)
                .arg(CALLS.to_string())
                .arg(&start_at)
                .args(extra)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn journal-writer")
        })
        .collect();
    sallyport_tests::children::wait_all(children, std::time::Duration::from_secs(600))
}

/// Every round: a fresh path, five processes opening it at once, each making four calls.
/// Before the schema was created in one write-locked transaction, about one round in ten
/// had a process fail with `Corrupt { source: InvalidQuery }` while another was creating it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_opening_one_fresh_journal_together_all_open_it_and_share_one_chain() {
    share_one_chain(&[], ROUNDS).await;
}

/// The same with every read journaled in one commit (`append_with_intent`), interleaved
/// with other processes' durable intents and appends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_committing_observe_records_once_share_one_chain() {
    share_one_chain(&[Path::new("--observe-once")], 8).await;
}

/// `rounds` rounds of `PROCESSES` processes started together with `extra` arguments, each
/// on a fresh journal: all exit 0 and leave one intact chain with every attempt finished.
async fn share_one_chain(extra: &[&Path], rounds: usize) {
    let mut failures = Vec::new();
    for round in 0..rounds {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("journal.db");
        let outputs = start_together(&path, extra);
        for (i, out) in outputs.iter().enumerate() {
            if out.status.code() != Some(0) {
                failures.push(format!(
                    "round {round} process {i}: exit {:?}: {}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        if !failures.is_empty() {
            continue;
        }
        let journal = SqliteJournal::open(&path).expect("reopen");
        let report = journal.verify().await.expect("verify");
        assert!(report.is_intact(), "round {round}: {report:?}");
        assert_eq!(
            report.records,
            (PROCESSES * CALLS) as u64,
            "round {round}: every call audited"
        );
        assert_eq!(
            journal.unresolved().await.expect("unresolved"),
            Vec::new(),
            "round {round}"
        );
        let conn = rusqlite::Connection::open(&path).expect("open");
        let (attempts, finished): (i64, i64) = conn
            .query_row(
                "SELECT count(*), count(*) FILTER (WHERE phase = 'finished') FROM attempts",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("count");
        assert_eq!(
            (attempts, finished),
            (20, 20),
            "round {round}: every attempt finished"
        );
    }
    assert_eq!(failures, Vec::<String>::new(), "{} failed", failures.len());
}

/// The same with every process signing heads with one key: the heads they sign in turn
/// cover the whole chain, and it verifies with the public key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_signing_one_journal_together_leave_a_chain_signed_to_its_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key_file = dir.path().join("head.key");
    let key = HeadSigningKey::generate().expect("key");
    key.write_new(&key_file).expect("key file");
    let public = key.verifying_key();
    for round in 0..8 {
        let path = dir.path().join(format!("journal-{round}.db"));
        let outputs = start_together(&path, &[key_file.as_path()]);
        for (i, out) in outputs.iter().enumerate() {
            assert_eq!(
                out.status.code(),
                Some(0),
                "round {round} process {i}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let report = SqliteJournal::open(&path)
            .expect("reopen")
            .verify_signed(&public)
            .await
            .expect("verify");
        assert_eq!(report.first_break, None, "round {round}: {report:?}");
        assert_eq!(
            (report.records, report.last_signed),
            (20, Some(20)),
            "round {round}"
        );
    }
}
