//! Decision → request on the wire, across processes (issue #38 §4): how long after a
//! decision commits in one process another process's approval worker has sent the approved
//! call to the upstream.
//!
//! This process runs the upstream (an axum server on loopback that timestamps every
//! arrival), parks the calls through an executor of its own (no worker), and decides them
//! one at a time through its own store instance; an `approvals-worker` process (the
//! approval rig's executor) carries them out. Each sample is the wall time from the moment
//! the decision's commit returned here to the moment the request arrived at the upstream,
//! both read on this process's monotonic clock. Before each decision the bench waits a
//! random time (up to 50 ms; up to the polling period for a polling worker, so decisions
//! land at every phase of its poll), so the worker is idle when the decision arrives.
//!
//! Workers measured, each on its own store:
//!
//! - `postgres-notify`: `run_approval_worker` on PostgreSQL (`LISTEN`/`NOTIFY`), with an
//!   hour's fallback interval, so every call it sends was woken by a notification;
//! - `sqlite-notify`: the same on a SQLite file (the `PRAGMA data_version` poll, 5 ms);
//! - `postgres-poll`, `sqlite-poll`: the worker as it was before (list the approved calls
//!   every 500 ms, the period the approvals example uses), never woken.
//!
//! ```sh
//! cargo bench -p sallyport-tests --bench approval_wakeup -- [SAMPLES] [WORKERS]
//! ```
//!
//! SAMPLES per worker (default 200; the polling workers take about half a second each);
//! WORKERS a comma-separated list of the names above (default all four). PostgreSQL:
//! `SALLYPORT_PG_URL`, else the socket in `/var/run/postgresql`. Prints one line per worker:
//! p50, p90, p99 and the largest sample.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sallyport_core::approval::{self, ApprovalId, ApprovalState, Decided, Decider, Verdict};
use sallyport_core::{Executor, Status};
use sallyport_tests::approvals_rig::{self, HostOptions};
use sallyport_tests::http_server::{Reply, Upstream};
use sallyport_tests::postgres::TestDb;
use serde_json::json;
use tokio::sync::mpsc;

/// The polling period of the worker as it was (the approvals example's).
const POLL_MS: u64 = 500;

/// The notified workers' fallback interval: an hour, so no sample comes from it.
const HOUR_MS: u64 = 3_600_000;

/// Calls decided and sent before the samples (connections, caches, the listener).
const WARM_UP: usize = 5;

/// A worker process, killed when dropped.
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_worker(journal: &str, upstream: &str, postgres: bool, poll: bool) -> Worker {
    let mut command = Command::new(env!("CARGO_BIN_EXE_approvals-worker"));
    command.arg(journal).arg(upstream);
    if postgres {
        command.arg("--postgres");
    }
    if poll {
        command.arg("--poll").arg(POLL_MS.to_string());
    } else {
        command.arg(HOUR_MS.to_string());
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("approvals-worker starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("worker output");
    assert_eq!(line.trim(), "ready", "the worker did not start");
    Worker(child)
}

/// The invoice number in a POST body (`"invoice_id":"inv_N"`).
fn invoice_of(body: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(body).ok()?;
    let at = text.find("\"inv_")? + 5;
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// One worker's samples.
async fn measure(name: &str, samples: usize) -> Vec<Duration> {
    let postgres = name.starts_with("postgres");
    let poll = name.ends_with("poll");
    let (arrived, mut arrivals) = mpsc::unbounded_channel::<(usize, Instant)>();
    let upstream = Upstream::start(move |r| {
        if r.method == "POST" {
            if let Some(n) = invoice_of(&r.body) {
                let _ = arrived.send((n, Instant::now()));
            }
            Reply::Idempotent(None)
        } else {
            Reply::Json(200, json!({"id": "inv_x"}))
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = if postgres {
        Some(TestDb::create().await)
    } else {
        None
    };
    let (parker, journal) = match &db {
        Some(db) => {
            let options = HostOptions::new("unused.db", upstream.url());
            let parker = approvals_rig::executor_on(
                &options,
                approvals_rig::vault(&upstream.url()),
                Arc::new(db.journal("bench-decider").await),
            );
            (parker, db.url.clone())
        }
        None => {
            let path = dir.path().join("journal.db");
            let options = HostOptions::new(&path, upstream.url());
            let parker = approvals_rig::executor(&options, approvals_rig::vault(&upstream.url()));
            (parker, path.to_string_lossy().into_owned())
        }
    };
    let total = WARM_UP + samples;
    let ids = park(&parker, total).await;
    let _worker = start_worker(&journal, &upstream.url(), postgres, poll);
    // Past the worker's first listing, and (PostgreSQL) its listener connected.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let store = parker.approval_store().expect("an approval store");
    let gap_ms = if poll { POLL_MS } else { 50 };
    let mut out = Vec::with_capacity(samples);
    for (i, id) in ids.iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(fastrand::u64(0..gap_ms))).await;
        approve(store.as_ref(), id).await;
        let committed = Instant::now();
        let (n, at) = tokio::time::timeout(Duration::from_secs(30), arrivals.recv())
            .await
            .expect("the approved call arrives within 30 s")
            .expect("the upstream runs");
        assert_eq!(
            n, i,
            "another call arrived while this one was awaited: sent twice?"
        );
        if i >= WARM_UP {
            out.push(at.saturating_duration_since(committed));
        }
    }
    // Each call arrived once.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(arrivals.try_recv().is_err(), "a call arrived twice");
    out
}

async fn park(executor: &Executor, n: usize) -> Vec<ApprovalId> {
    let mut ids = Vec::with_capacity(n);
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

/// Approves `id` through the store only: this process sends nothing.
async fn approve(store: &dyn sallyport_core::journal::ApprovalStore, id: &ApprovalId) {
    let decided = approval::decide_under(
        store,
        None,
        id,
        Verdict::Approve,
        &Decider::new("bench", "bench"),
        None,
    )
    .await
    .expect("decided");
    assert!(
        matches!(&decided, Decided::Recorded(a) if a.state == ApprovalState::Approved),
        "{decided:?}"
    );
}

/// The `q`-quantile of sorted `samples` (nearest rank).
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "a rank within a few hundred samples"
    )]
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let samples = args
        .first()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(200);
    let workers = args.get(1).map_or(
        "postgres-notify,postgres-poll,sqlite-notify,sqlite-poll",
        String::as_str,
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("decision committed -> request at the upstream, {samples} samples per worker");
    for name in workers.split(',') {
        let mut sorted = runtime.block_on(measure(name, samples));
        sorted.sort();
        println!(
            "{name:<16} p50 {:>9}  p90 {:>9}  p99 {:>9}  max {:>9}",
            ms(quantile(&sorted, 0.50)),
            ms(quantile(&sorted, 0.90)),
            ms(quantile(&sorted, 0.99)),
            ms(*sorted.last().expect("samples")),
        );
    }
}
