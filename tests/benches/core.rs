#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]
//! Core pipeline benchmarks.
//!
//! - `static_checks`: validate + decode + scope of a 3-field action (stages 1–4, no journal).
//! - `observe_call`: a full observe call with a no-op channel and the SQLite journal.
//! - `mutating_64_concurrent`: 64 concurrent external-commitment calls with durable (fsynced)
//!   intents; throughput is reported per call.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::{Journal, SqliteJournal};
use sallyport_core::outcome::Status;
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_tests::scripted::ScriptedChannel;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Read one build of a project.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_build", effect = observe)]
#[channel(name = "test")]
#[serde(deny_unknown_fields)]
struct GetBuild {
    #[scope(project)]
    #[schemars(regex(pattern = r"^proj_[a-z0-9]+$"))]
    project_id: String,
    #[schemars(regex(pattern = r"^build_[a-z0-9]+$"))]
    build_id: String,
    #[schemars(range(min = 1, max = 100))]
    limit: u32,
}

/// Pay one invoice.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "pay_invoice", effect = external_commitment)]
#[channel(name = "test")]
#[serde(deny_unknown_fields)]
struct PayInvoice {
    #[scope(project)]
    project_id: String,
    invoice_id: String,
}

fn executor(dir: &std::path::Path) -> Executor {
    Executor::builder(
        Catalog::builder()
            .action::<GetBuild>()
            .action::<PayInvoice>()
            .build()
            .expect("catalog"),
    )
    .journal(SqliteJournal::open(dir.join("journal.db")).expect("journal"))
    .channel(ScriptedChannel::new())
    .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
    .build()
    .expect("executor")
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    let session = Session::new("bench").allow("project", ["proj_1"]);
    let args = json!({"project_id": "proj_1", "build_id": "build_42", "limit": 10});

    c.bench_function("static_checks", |b| {
        b.iter(|| {
            executor
                .preflight("get_build", args.clone(), &session)
                .expect("passes");
        });
    });

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    c.bench_function("observe_call", |b| {
        b.to_async(&rt).iter(|| async {
            let r = executor.call("get_build", args.clone(), &session).await;
            assert_eq!(r.status, Status::Completed);
        });
    });

    let journal = Arc::new(SqliteJournal::open(dir.path().join("raw.db")).expect("journal"));
    c.bench_function("journal_intent_observe", |b| {
        b.to_async(&rt).iter(|| {
            let journal = Arc::clone(&journal);
            async move {
                let intent = sallyport_core::journal::Intent::for_bench(false);
                journal.write_intent(&intent).await.expect("written");
            }
        });
    });

    let mut group = c.benchmark_group("mutating_64_concurrent");
    group.throughput(Throughput::Elements(64));
    let executor = Arc::new(executor);
    group.bench_function("calls", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let executor = Arc::clone(&executor);
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let mut tasks = Vec::with_capacity(64);
                    for i in 0..64 {
                        let executor = Arc::clone(&executor);
                        tasks.push(tokio::spawn(async move {
                            let session = Session::new("bench").allow("project", ["proj_1"]);
                            executor
                                .call(
                                    "pay_invoice",
                                    json!({"project_id": "proj_1", "invoice_id": format!("inv_{i}")}),
                                    &session,
                                )
                                .await
                        }));
                    }
                    for t in tasks {
                        assert_eq!(t.await.expect("join").status, Status::Completed);
                    }
                    total += start.elapsed();
                }
                total
            }
        });
    });
    group.finish();
}

criterion_group! {
    name = core;
    config = Criterion::default().measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));
    targets = benches
}
criterion_main!(core);
