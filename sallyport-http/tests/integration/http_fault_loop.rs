//! A seeded fault loop: at least 10,000 commit-then-drop faults (clean close, TCP reset,
//! hang past the timeout, half-written response) on an idempotency-key action, through the
//! whole executor and a real SQLite journal, with zero duplicate side effects on the server
//! and the journal's dispatch count equal to the server's request count.
//!
//! Seed: `SALLYPORT_FAULT_SEED` (default 0x5A11_7007). Calls: `SALLYPORT_FAULT_CALLS`
//! (default 10,000; every call's first request is faulted, so faults >= calls).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sallyport_core::journal::SqliteJournal;
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{Drop, Reply, Upstream, journal_total_dispatches};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Read one order.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_order", effect = observe)]
#[http(get = "/v1/orders/{order_ref}", result = ())]
struct GetOrder {
    order_ref: String,
}

/// Place one order.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "place_order", effect = external_commitment, retry = idempotency_key,
         reconcile = "get_order", consent = per_call)]
#[http(post = "/v1/orders", result = Placed)]
struct PlaceOrder {
    order_ref: String,
    quantity: u32,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Placed {
    id: String,
    state: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_commit_then_drop_faults_cause_zero_duplicate_side_effects() {
    let seed: u64 = std::env::var("SALLYPORT_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5A11_7007);
    let calls: usize = std::env::var("SALLYPORT_FAULT_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    println!("fault loop seed {seed}, {calls} calls");

    let rng = Mutex::new(fastrand::Rng::with_seed(seed));
    let upstream = Upstream::start_with(
        move |_| {
            let mut rng = rng.lock().unwrap();
            let pick = |rng: &mut fastrand::Rng| match rng.u8(0..10) {
                0..=2 => Drop::CleanClose,
                3..=5 => Drop::Reset,
                6..=8 => Drop::HalfWritten,
                _ => Drop::Hang(Duration::from_secs(2)),
            };
            // The key's original request is always faulted after the commit; a replay is
            // faulted again one time in four.
            let original = Some(pick(&mut rng));
            let replay = if rng.u8(0..4) == 0 {
                Some(pick(&mut rng))
            } else {
                None
            };
            Reply::IdempotentFaults { original, replay }
        },
        false,
    )
    .await;

    let dir = tempfile::Builder::new()
        .prefix("sallyport-fault-loop")
        .tempdir_in(if std::path::Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        })
        .expect("tempdir");
    let journal_path = dir.path().join("journal.db");
    let catalog = Catalog::builder()
        .action::<GetOrder>()
        .action::<PlaceOrder>()
        .build()
        .expect("catalog");
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(&journal_path).expect("journal"))
        .channel(
            HttpChannel::builder()
                .base_url(upstream.url())
                .total_timeout(Duration::from_millis(250))
                .backoff(Duration::from_millis(1), Duration::from_millis(4))
                .build()
                .expect("channel"),
        )
        .dangerous()
        .auto_approve_consent()
        .done()
        .build()
        .expect("executor");

    let started = Instant::now();
    let session = Session::new("fault-loop");
    let results: Vec<_> = futures_util::stream::iter(0..calls)
        .map(|i| {
            let executor = executor.clone();
            let session = session.clone();
            async move {
                executor
                    .call(
                        "place_order",
                        json!({"order_ref": format!("ord_{i}"), "quantity": 1 + i % 7}),
                        &session,
                    )
                    .await
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let elapsed = started.elapsed();

    // Let connections the client abandoned (hangs) reach the server's handler.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut by_status: HashMap<Status, u64> = HashMap::new();
    for r in &results {
        *by_status.entry(r.status).or_insert(0) += 1;
        assert!(
            matches!(r.status, Status::Completed | Status::Unknown),
            "unexpected result {}",
            r.to_json()
        );
        if r.status == Status::Completed {
            assert!(r.data.as_ref().is_some_and(|d| d["state"] == "created"));
        }
    }
    let effects = upstream.effects();
    let duplicates: Vec<_> = effects.iter().filter(|(_, n)| **n > 1).collect();
    let journal_sends = journal_total_dispatches(&journal_path);
    println!(
        "{calls} calls in {elapsed:?}: {by_status:?}; server requests {}, journal dispatches {journal_sends}, faults {} {:?}, connections {}",
        upstream.requests(),
        upstream.faults(),
        upstream.fault_modes(),
        upstream.connections(),
    );
    assert_eq!(
        duplicates.len(),
        0,
        "duplicate side effects: {duplicates:?}"
    );
    assert_eq!(effects.len(), calls, "one side effect per call");
    assert!(upstream.faults() >= calls as u64);
    if calls >= 10_000 {
        assert!(upstream.faults() >= 10_000);
    }
    assert_eq!(
        journal_sends,
        upstream.requests(),
        "journal and server counts agree"
    );
    assert!(by_status.get(&Status::Completed).copied().unwrap_or(0) > calls as u64 / 2);
}
