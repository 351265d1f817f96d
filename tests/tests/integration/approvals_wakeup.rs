//! A call approved with the `sallyport` command line is sent by another process's approval
//! worker at once, on a SQLite file and on PostgreSQL: three processes (this test, which
//! parks the calls and runs the upstream; an `approvals-worker` running
//! `run_approval_worker` with a fallback interval of an hour; and the CLI, which records
//! the decision and sends nothing). The first call proves the worker is past its first
//! listing; the second can then only be sent because the decision woke it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sallyport_core::Executor;
use sallyport_core::Status;
use sallyport_core::approval::{ApprovalId, ApprovalState};
use sallyport_tests::approvals_rig::{self, HostOptions};
use sallyport_tests::http_server::{Received, Reply, Upstream};
use sallyport_tests::postgres::TestDb;
use serde_json::json;

/// The worker's fallback interval, in milliseconds: an hour, far beyond [`BOUND`].
const HOUR_MS: &str = "3600000";

/// How long a woken worker may take to send (it takes milliseconds).
const BOUND: Duration = Duration::from_secs(20);

fn reply(r: &Received) -> Reply {
    if r.method == "POST" {
        Reply::Idempotent(None)
    } else {
        Reply::Json(200, json!({"id": "inv_x"}))
    }
}

fn posts_for(upstream: &Upstream, n: usize) -> usize {
    let needle = format!("\"inv_{n}\"");
    upstream
        .received()
        .iter()
        .filter(|r| r.method == "POST" && String::from_utf8_lossy(&r.body).contains(&needle))
        .count()
}

async fn sent_within_bound(upstream: &Upstream, n: usize) {
    let start = Instant::now();
    while posts_for(upstream, n) == 0 {
        assert!(
            start.elapsed() < BOUND,
            "invoice {n} was not sent within {BOUND:?}: the worker process was not woken"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A worker process, killed when dropped.
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `approvals-worker` on `journal` and waits for its `ready`.
fn worker(journal: &str, upstream: &Upstream, postgres: bool) -> Worker {
    let mut command = Command::new(env!("CARGO_BIN_EXE_approvals-worker"));
    command.arg(journal).arg(upstream.url());
    if postgres {
        command.arg("--postgres");
    }
    let mut child = command
        .arg(HOUR_MS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("approvals-worker starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("worker output");
    assert_eq!(line.trim(), "ready", "the worker did not start");
    Worker(child)
}

/// `sallyport --journal JOURNAL approvals approve ID --by alice`, as a process of its own.
fn cli_approve(journal: &str, id: &ApprovalId) {
    let out = Command::new(env!("CARGO_BIN_EXE_sallyport-under-test"))
        .args(["--journal", journal, "approvals", "approve", id.as_str()])
        .args(["--by", "alice"])
        .env_remove("SALLYPORT_VAULT")
        .env_remove("SALLYPORT_JOURNAL")
        .output()
        .expect("the CLI runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with(&format!("approved {id}: recorded by alice via cli;")),
        "{stdout}"
    );
}

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

/// Two calls parked by `parker`, each approved with the CLI (on `cli_journal`) and sent
/// by the worker process (on `worker_journal`, the same store): once each, and finished in
/// the store.
async fn approve_both_through_the_cli(
    parker: &Executor,
    worker_journal: &str,
    cli_journal: &str,
    upstream: &Upstream,
    postgres: bool,
) {
    let ids = park(parker, 2).await;
    let _worker = worker(worker_journal, upstream, postgres);
    cli_approve(cli_journal, &ids[0]);
    sent_within_bound(upstream, 0).await;
    // The worker has listed since the first decision: only a wake-up sends the second.
    cli_approve(cli_journal, &ids[1]);
    sent_within_bound(upstream, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!((posts_for(upstream, 0), posts_for(upstream, 1)), (1, 1));
    let store = parker.approval_store().expect("an approval store");
    for id in &ids {
        let start = Instant::now();
        loop {
            let state = store
                .approval(id)
                .await
                .expect("read")
                .expect("stored")
                .state;
            if state == ApprovalState::Finished {
                break;
            }
            assert!(start.elapsed() < BOUND, "{id} stays {state:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert!(parker.journal().verify().await.expect("verify").is_intact());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_approval_is_sent_by_a_worker_process_polling_once_an_hour_on_sqlite() {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    let options = HostOptions::new(&path, upstream.url());
    let parker = approvals_rig::executor(&options, approvals_rig::vault(&upstream.url()));
    let journal = path.to_string_lossy().into_owned();
    approve_both_through_the_cli(&parker, &journal, &journal, &upstream, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_approval_is_sent_by_a_worker_process_polling_once_an_hour_on_postgres() {
    let db = TestDb::create().await;
    let upstream = Upstream::start(reply).await;
    let options = HostOptions::new("unused.db", upstream.url());
    let parker = approvals_rig::executor_on(
        &options,
        approvals_rig::vault(&upstream.url()),
        Arc::new(db.journal("parker").await),
    );
    // The worker takes the connection string as it is; the CLI takes a `postgres://` URL.
    approve_both_through_the_cli(&parker, &db.url, &url_of(&db), &upstream, true).await;
}

/// The test database as a `postgres://` URL (the CLI's `--journal` takes URLs): the test
/// URL as it is when it is one, else the key-value string's socket, port and user.
fn url_of(db: &TestDb) -> String {
    if db.url.starts_with("postgres://") || db.url.starts_with("postgresql://") {
        return db.url.clone();
    }
    let value = |key: &str| {
        db.url
            .split_whitespace()
            .filter_map(|pair| pair.split_once('='))
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v.to_owned())
            .next_back()
    };
    let host = value("host")
        .unwrap_or_else(|| "/var/run/postgresql".to_owned())
        .replace('/', "%2F");
    let user = value("user").unwrap_or_else(|| "root".to_owned());
    let port = value("port").map(|p| format!(":{p}")).unwrap_or_default();
    format!("postgresql://{user}@{host}{port}/{}", db.name)
}
