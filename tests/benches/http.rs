#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]
//! The HTTP channel end to end versus raw reqwest, side by side in one run, against the same
//! local axum upstreams with the same client settings (`HttpChannel::client`). Targets are
//! those of issue #13.
//!
//! A loopback upstream that answers at once (the executor's overhead laid bare):
//!
//! - `http_sequential/{executor,raw_reqwest}`: one observe GET at a time (latency; compare
//!   the medians: target executor <= 1.4x raw).
//! - `http_64_in_flight/{executor,raw_reqwest}`: 64 GETs in flight all the time, each of 64
//!   workers starting its next call when its last returns (throughput in calls/s; target
//!   executor >= 0.55x raw).
//! - Diagnostics: `executor_null_channel` (the pipeline and journal with a channel that answers
//!   at once) and `executor_discard_journal` (the HTTP channel through the executor with a
//!   journal that keeps nothing), which split the cost between the channel and the journal.
//!
//! An upstream that answers 2 ms after each request arrives (a realistic fast API; the same
//! server with `Upstream::set_delay`, whose replies wait on a timer thread of their own, to
//! within tens of microseconds, not on tokio's whole-millisecond ticks nor on work on the
//! machine's two cores):
//!
//! - `http_2ms_sequential/{executor,raw_reqwest}`: one observe GET at a time (target executor
//!   <= 1.03x raw).
//! - `http_2ms_16_in_flight/{executor,raw_reqwest}`: 16 GETs in flight all the time, as
//!   above (target executor >= 0.95x raw).
//!
//! Run: `cargo bench -p sallyport-tests --bench http -- --measurement-time 5 --warm-up-time 2`

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{Reply, Upstream};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Read one build.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_build", effect = observe)]
#[http(get = "/v1/builds/{build_id}", result = Build)]
struct GetBuild {
    build_id: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Build {
    id: String,
    state: String,
}

/// A channel that answers at once: the executor's own floor, for the diagnostic variant.
struct NullChannel;

#[async_trait::async_trait]
impl sallyport_core::Channel for NullChannel {
    fn name(&self) -> &str {
        "http"
    }

    fn prepare(
        &self,
        call: &sallyport_core::channel::CallView<'_>,
    ) -> Result<Box<dyn sallyport_core::channel::PreparedRequest>, sallyport_core::outcome::Refusal>
    {
        Ok(Box::new(sallyport_core::channel::DescribedRequest::new(
            "GET /v1/builds/build_1",
            call.arguments.clone(),
        )))
    }

    async fn dispatch(
        &self,
        call: sallyport_core::channel::Dispatch<'_>,
    ) -> sallyport_core::channel::ChannelOutcome {
        match call.context.permit().await {
            Ok(permit) => permit.sending(),
            Err(refused) => return refused,
        }
        sallyport_core::channel::ChannelOutcome::completed(
            json!({"id": "build_1", "state": "passed"}),
        )
    }
}

/// A journal that keeps nothing: diagnostic only, to split the channel's cost from the
/// journal's. Never a way to run sallyport.
struct DiscardJournal;

#[async_trait::async_trait]
impl sallyport_core::journal::Journal for DiscardJournal {
    async fn write_intent(
        &self,
        _intent: &sallyport_core::journal::Intent,
    ) -> Result<(), sallyport_core::journal::JournalError> {
        Ok(())
    }
    fn note_dispatch(&self, _attempt: &sallyport_core::journal::AttemptId, _n: u32) {}
    async fn append(
        &self,
        event: sallyport_core::journal::AuditEvent,
    ) -> Result<sallyport_core::journal::AuditRecord, sallyport_core::journal::JournalError> {
        Ok(sallyport_core::journal::AuditRecord {
            seq: 1,
            prev_hash: String::new(),
            hash: String::new(),
            event,
        })
    }
    fn append_detached(&self, _event: sallyport_core::journal::AuditEvent) {}
    async fn verify(
        &self,
    ) -> Result<sallyport_core::journal::VerifyReport, sallyport_core::journal::JournalError> {
        Err(sallyport_core::journal::JournalError::Stopped)
    }
    async fn records(
        &self,
    ) -> Result<Vec<sallyport_core::journal::AuditRecord>, sallyport_core::journal::JournalError>
    {
        Ok(Vec::new())
    }
    async fn unresolved(
        &self,
    ) -> Result<
        Vec<sallyport_core::journal::UnresolvedAttempt>,
        sallyport_core::journal::JournalError,
    > {
        Ok(Vec::new())
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let upstream = rt.block_on(Upstream::start_with(
        |_| {
            Reply::Json(
                200,
                json!({"id": "build_1", "state": "passed", "log_url": "http://ci/1"}),
            )
        },
        false,
    ));
    let dir = tempfile::Builder::new()
        .prefix("sallyport-http-bench")
        .tempdir_in(if std::path::Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        })
        .expect("tempdir");
    let channel = HttpChannel::builder()
        .base_url(upstream.url())
        .build()
        .expect("channel");
    let raw = channel.client(Duration::from_secs(10)).expect("client");
    let executor = rt.block_on(async {
        Executor::builder(
            Catalog::builder()
                .action::<GetBuild>()
                .build()
                .expect("catalog"),
        )
        .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
        .channel(channel)
        .build()
        .expect("executor")
    });
    let floor = rt.block_on(async {
        Executor::builder(
            Catalog::builder()
                .action::<GetBuild>()
                .build()
                .expect("catalog"),
        )
        .journal(SqliteJournal::open(dir.path().join("floor.db")).expect("journal"))
        .channel(NullChannel)
        .build()
        .expect("executor")
    });
    let unjournaled = rt.block_on(unjournaled_executor(upstream.url()));
    // The realistic upstream: same replies, each 2 ms after its request arrived; its own
    // channel, raw client and journal, so nothing is shared with the loopback cases.
    let slow_upstream = rt.block_on(Upstream::start_with(
        |_| {
            Reply::Json(
                200,
                json!({"id": "build_1", "state": "passed", "log_url": "http://ci/1"}),
            )
        },
        false,
    ));
    slow_upstream.set_delay(UPSTREAM_DELAY);
    let slow_channel = HttpChannel::builder()
        .base_url(slow_upstream.url())
        .build()
        .expect("channel");
    let slow_raw = slow_channel
        .client(Duration::from_secs(10))
        .expect("client");
    let slow_executor = rt.block_on(async {
        Executor::builder(
            Catalog::builder()
                .action::<GetBuild>()
                .build()
                .expect("catalog"),
        )
        .journal(SqliteJournal::open(dir.path().join("journal-2ms.db")).expect("journal"))
        .channel(slow_channel)
        .build()
        .expect("executor")
    });
    // Diagnostic: the same upstream through the executor with a journal that keeps nothing.
    let slow_unjournaled = rt.block_on(unjournaled_executor(slow_upstream.url()));
    let session = Session::new("bench");
    let url = format!("{}/v1/builds/build_1", upstream.url());
    let slow_url = format!("{}/v1/builds/build_1", slow_upstream.url());

    let executor_call = observe_call(&executor, &session);
    let raw_call = move || raw_get(raw.clone(), url.clone());
    let slow_executor_call = observe_call(&slow_executor, &session);
    let slow_raw_call = move || raw_get(slow_raw.clone(), slow_url.clone());
    let unjournaled_call = observe_call(&unjournaled, &session);
    let slow_unjournaled_call = observe_call(&slow_unjournaled, &session);

    let mut g = c.benchmark_group("http_sequential");
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::new("executor", "observe_get"), |b| {
        b.to_async(&rt).iter(&executor_call);
    });
    g.bench_function(BenchmarkId::new("raw_reqwest", "observe_get"), |b| {
        b.to_async(&rt).iter(&raw_call);
    });
    // Diagnostic: the executor with a channel that answers at once (no network), so the
    // HTTP channel's own cost is `executor - executor_null_channel` next to `raw_reqwest`.
    g.bench_function(
        BenchmarkId::new("executor_null_channel", "observe_get"),
        |b| {
            b.to_async(&rt).iter(observe_call(&floor, &session));
        },
    );
    // Diagnostic: the HTTP channel through the executor with a journal that keeps nothing,
    // so `executor - executor_discard_journal` is what journaling costs on this path.
    g.bench_function(
        BenchmarkId::new("executor_discard_journal", "observe_get"),
        |b| {
            b.to_async(&rt).iter(&unjournaled_call);
        },
    );
    g.finish();

    let mut g = c.benchmark_group("http_64_in_flight");
    g.throughput(Throughput::Elements(64));
    g.bench_function(BenchmarkId::new("executor", "observe_get"), |b| {
        b.to_async(&rt)
            .iter_custom(|iters| in_flight(64, iters, executor_call.clone()));
    });
    // Diagnostic, as in the sequential group: no journal.
    g.bench_function(
        BenchmarkId::new("executor_discard_journal", "observe_get"),
        |b| {
            b.to_async(&rt)
                .iter_custom(|iters| in_flight(64, iters, unjournaled_call.clone()));
        },
    );
    g.bench_function(BenchmarkId::new("raw_reqwest", "observe_get"), |b| {
        b.to_async(&rt)
            .iter_custom(|iters| in_flight(64, iters, raw_call.clone()));
    });
    g.finish();

    let mut g = c.benchmark_group("http_2ms_sequential");
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::new("executor", "observe_get"), |b| {
        b.to_async(&rt).iter(&slow_executor_call);
    });
    g.bench_function(BenchmarkId::new("raw_reqwest", "observe_get"), |b| {
        b.to_async(&rt).iter(&slow_raw_call);
    });
    // Diagnostic: no journal.
    g.bench_function(
        BenchmarkId::new("executor_discard_journal", "observe_get"),
        |b| {
            b.to_async(&rt).iter(&slow_unjournaled_call);
        },
    );
    g.finish();

    let mut g = c.benchmark_group("http_2ms_16_in_flight");
    g.throughput(Throughput::Elements(16));
    g.bench_function(BenchmarkId::new("executor", "observe_get"), |b| {
        b.to_async(&rt)
            .iter_custom(|iters| in_flight(16, iters, slow_executor_call.clone()));
    });
    g.bench_function(BenchmarkId::new("raw_reqwest", "observe_get"), |b| {
        b.to_async(&rt)
            .iter_custom(|iters| in_flight(16, iters, slow_raw_call.clone()));
    });
    // Diagnostic: no journal.
    g.bench_function(
        BenchmarkId::new("executor_discard_journal", "observe_get"),
        |b| {
            b.to_async(&rt)
                .iter_custom(|iters| in_flight(16, iters, slow_unjournaled_call.clone()));
        },
    );
    g.finish();
    drop(upstream);
    drop(slow_upstream);
}

/// The HTTP channel to `url` through an executor whose journal keeps nothing (a diagnostic:
/// what journaling costs is the difference to the journaled executor).
async fn unjournaled_executor(url: String) -> Executor {
    Executor::builder(
        Catalog::builder()
            .action::<GetBuild>()
            .build()
            .expect("catalog"),
    )
    .journal(DiscardJournal)
    .channel(
        HttpChannel::builder()
            .base_url(url)
            .build()
            .expect("channel"),
    )
    .build()
    .expect("executor")
}

/// An observe call through `executor` that must complete, as a cloneable, `'static` maker of
/// futures (one per call).
fn observe_call(
    executor: &Executor,
    session: &Session,
) -> impl Fn() -> BoxFuture<'static, ()> + Clone + Send + Sync + 'static {
    let (executor, session) = (executor.clone(), session.clone());
    move || {
        let (executor, session) = (executor.clone(), session.clone());
        Box::pin(async move {
            let r = executor
                .call("get_build", json!({"build_id": "build_1"}), &session)
                .await;
            assert_eq!(r.status, Status::Completed);
        })
    }
}

/// `workers` calls in flight all the time (a closed loop: each worker starts its next call
/// as soon as its last one returns) until `iters × workers` calls are done; the time taken,
/// so criterion reports the time per `workers` calls. Unlike spawning `workers` calls and
/// waiting for all of them, no call waits for the slowest of its round.
async fn in_flight<F, Fut>(workers: usize, iters: u64, call: F) -> Duration
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let left = Arc::new(AtomicU64::new(iters * workers as u64));
    let started = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let (left, call) = (Arc::clone(&left), call.clone());
            tokio::spawn(async move {
                while left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
                {
                    call().await;
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.expect("join");
    }
    started.elapsed()
}

/// How long the realistic upstream takes to answer.
const UPSTREAM_DELAY: Duration = Duration::from_millis(2);

/// One GET with raw reqwest, as the HTTP channel would send it, and the same check of the
/// answer as the executor cases make.
fn raw_get(raw: reqwest::Client, url: String) -> BoxFuture<'static, ()> {
    Box::pin(raw_get_once(raw, url))
}

async fn raw_get_once(raw: reqwest::Client, url: String) {
    let body = raw
        .get(&url)
        .header("accept", "application/json")
        .send()
        .await
        .expect("send")
        .bytes()
        .await
        .expect("body");
    let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(v["state"], "passed");
}

criterion_group!(benches, bench);
criterion_main!(benches);
