#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]
//! What the policy's call counts cost per call, kept in memory (per process) and in the
//! journal's store shared by the fleet (SQLite, PostgreSQL), in one run.
//!
//! - `policy_call/<journal>/<counts>`: a full observe call (no-op channel) through an
//!   executor with a policy that reads the counts and the recent calls; `none` is the same
//!   executor without a policy, `memory` counts in memory (`local_call_counts`), `shared`
//!   counts in the journal's store. Sessions of 100 calls each.
//! - `policy_store/<journal>`: the store's step alone, `decide_and_count` of a let-through
//!   call then its `settle`. After the run, the mean time from the policy's decision to the
//!   store's answer (the part of the lock window after the decision) is printed.
//!
//! PostgreSQL: `SALLYPORT_PG_URL`, else the socket in `/var/run/postgresql`
//! (`bash tests/run.sh` starts a throwaway server and sets it); without a server its cases
//! are skipped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use sallyport_core::journal::{AttemptId, Journal, SqliteJournal};
use sallyport_core::outcome::Status;
use sallyport_core::policy::calls::{CallQuery, CallStore};
use sallyport_core::policy::{Policy, PolicyDecision, PolicyRequest};
use sallyport_core::{Action, Catalog, EffectClass, Executor, Session};
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
    project_id: String,
    build_id: String,
}

/// Reads what the store gives it; allows every call under a limit no bench reaches.
#[derive(Debug)]
struct Limits;

impl Policy for Limits {
    fn name(&self) -> &str {
        "limits"
    }

    fn decide(&self, request: &PolicyRequest<'_>) -> PolicyDecision {
        let commitments = request.session_calls.by_effect.external_commitment.hour;
        if request.calls.hour >= 1_000_000 || commitments >= 1_000_000 {
            PolicyDecision::deny("over the limit")
        } else {
            PolicyDecision::allow()
        }
    }
}

#[derive(Clone, Copy)]
enum Counts {
    None,
    Memory,
    Shared,
}

fn executor(journal: Arc<dyn Journal>, counts: Counts) -> Executor {
    let catalog = Catalog::builder()
        .action::<GetBuild>()
        .build()
        .expect("catalog");
    let builder = Executor::builder(catalog)
        .journal_arc(journal)
        .channel(ScriptedChannel::new());
    match counts {
        Counts::None => builder,
        Counts::Memory => builder.policy(Limits).local_call_counts(),
        Counts::Shared => builder.policy(Limits),
    }
    .build()
    .expect("executor")
}

fn calls(c: &mut Criterion, rt: &tokio::runtime::Runtime, name: &str, journal: &Arc<dyn Journal>) {
    let mut group = c.benchmark_group(format!("policy_call/{name}"));
    for (label, counts) in [
        ("none", Counts::None),
        ("memory", Counts::Memory),
        ("shared", Counts::Shared),
    ] {
        let executor = executor(Arc::clone(journal), counts);
        let n = AtomicU64::new(0);
        group.bench_function(label, |b| {
            b.to_async(rt).iter(|| {
                let i = n.fetch_add(1, Ordering::Relaxed);
                let session =
                    Session::new(format!("{name}-{label}-{}", i / 100)).allow_any("project");
                let executor = &executor;
                async move {
                    let r = executor
                        .call(
                            "get_build",
                            json!({"project_id": "proj_1", "build_id": "build_42"}),
                            &session,
                        )
                        .await;
                    assert_eq!(r.status, Status::Completed, "{}", r.summary());
                }
            });
        });
    }
    group.finish();
}

fn store_step(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    name: &str,
    store: &Arc<dyn CallStore>,
) {
    let after_decision = Arc::new(AtomicU64::new(0));
    let steps = Arc::new(AtomicU64::new(0));
    let n = AtomicU64::new(0);
    c.bench_function(&format!("policy_store/{name}"), |b| {
        b.to_async(rt).iter(|| {
            let i = n.fetch_add(1, Ordering::Relaxed);
            let (store, after_decision, steps) = (
                Arc::clone(store),
                Arc::clone(&after_decision),
                Arc::clone(&steps),
            );
            async move {
                let session = format!("step-{name}-{}", i / 100);
                let attempt = AttemptId::generate();
                let query = CallQuery::new(
                    &session,
                    "get_build",
                    EffectClass::Observe,
                    &[],
                    sallyport_core::clock::now_ms(),
                )
                .recording(&attempt)
                .with_recent(16);
                let mut decided_at = None;
                let decision = store
                    .decide_and_count(&query, &mut |_, _| {
                        decided_at = Some(Instant::now());
                        PolicyDecision::allow()
                    })
                    .await
                    .expect("decided");
                if let Some(at) = decided_at {
                    let ns = u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    after_decision.fetch_add(ns, Ordering::Relaxed);
                    steps.fetch_add(1, Ordering::Relaxed);
                }
                assert_eq!(decision, PolicyDecision::allow());
                store
                    .settle(&session, &attempt, Status::Completed)
                    .await
                    .expect("settled");
            }
        });
    });
    let steps = steps.load(Ordering::Relaxed).max(1);
    eprintln!(
        "policy_store/{name}: from the decision to the store's answer (lock held): mean {:.1} µs over {steps} steps",
        after_decision.load(Ordering::Relaxed) as f64 / steps as f64 / 1_000.0
    );
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");

    let sqlite: Arc<dyn Journal> =
        Arc::new(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"));
    calls(c, &rt, "sqlite", &sqlite);
    let store = Arc::clone(&sqlite)
        .call_store()
        .expect("the SQLite journal offers a store");
    store_step(c, &rt, "sqlite", &store);

    let postgres = rt.block_on(async {
        let url = sallyport_tests::postgres::admin_url();
        match tokio::time::timeout(
            Duration::from_secs(3),
            tokio_postgres::connect(&url, tokio_postgres::NoTls),
        )
        .await
        {
            Ok(Ok(_)) => {
                let db = sallyport_tests::postgres::TestDb::create().await;
                let journal = db.journal("bench").await;
                Some((db, journal))
            }
            _ => None,
        }
    });
    match postgres {
        Some((_db, journal)) => {
            let journal: Arc<dyn Journal> = Arc::new(journal);
            calls(c, &rt, "postgres", &journal);
            let store = Arc::clone(&journal)
                .call_store()
                .expect("the PostgreSQL journal offers a store");
            store_step(c, &rt, "postgres", &store);
        }
        None => eprintln!("no PostgreSQL server: the postgres cases are skipped"),
    }
}

criterion_group! {
    name = policy_calls;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = benches
}
criterion_main!(policy_calls);
