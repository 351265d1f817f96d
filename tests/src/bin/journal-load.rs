//! A load driver for the two journals, side by side in one run (issue 15's benchmark).
//!
//! ```text
//! cargo run --release -p sallyport-tests --bin journal-load -- [SECONDS] [WARM_UP_SECONDS] [BACKENDS] [CASES]
//! ```
//!
//! For SQLite (a fresh file) and PostgreSQL (a fresh database on the server
//! `SALLYPORT_PG_URL` names, else the machine's through `/var/run/postgresql`), it measures:
//!
//! * **calls**: state-changing (`external_commitment`, so durable-intent) calls through a real
//!   [`Executor`] with a no-op channel (it completes at once) and approving consent, by 1, 4
//!   and 16 concurrent writers: tasks of one executor in this process, and then processes
//!   (this binary re-run as `journal-load child …`, each with its own executor and journal
//!   on the same file or database, one writer each);
//! * **append**: the raw audit append rate of 4 tasks calling `Journal::append` on one
//!   journal.
//!
//! Each case runs a closed loop (every writer starts its next call when the last returns)
//! for `SECONDS` (default 4) after `WARM_UP_SECONDS` (default 1), and prints calls/s and the
//! per-call latency's p50 and p99 as one table row.
//!
//! * **fleet** (PostgreSQL only, issue 39's audit shards): 4 processes × 16 writers on one
//!   database, all on one audit shard and then each process on a shard of its own, first
//!   straight to the server and then through a proxy in this process that holds every chunk
//!   1 ms in each direction (a database a network hop away); the proxy's added round trip is
//!   measured and printed first.
//!
//! `BACKENDS` (comma-separated, default `sqlite,postgres`) picks the journals; `discard`, a
//! journal that keeps nothing, is a diagnostic only: what the executor and the no-op channel
//! cost without any journal. `CASES` (default `tasks,processes,append`) picks the cases;
//! `tasks16` runs only the 16-task case; `fleet` is run only when named.
//!
//! The task cases also print where the CPU went in the measured window, per call: this
//! process's threads (the executor, the journal's writers, the driver), the PostgreSQL
//! backends connected to the case's database, and the server's other processes (the WAL
//! writer among them, shared with anything else the server serves), each as time on a CPU
//! and time spent runnable but waiting for one (`/proc/…/schedstat`; "—" where the kernel
//! does not keep it).
//!
//! A load driver, not criterion: the figures wanted are a throughput at a fixed number of
//! concurrent writers and the latency of one call under that load, which a closed loop
//! measures directly (criterion times whole iterations), and the process cases need
//! children started together.

use std::future::Future;
use std::pin::Pin;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::checkpoint::DEFAULT_SHARD;
use sallyport_core::journal::{
    AttemptId, AuditEvent, AuditRecord, Intent, Journal, JournalError, SqliteJournal,
    UnresolvedAttempt, VerifyReport,
};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_postgres::PostgresJournal;
use sallyport_tests::postgres::TestDb;
use sallyport_tests::scripted::ScriptedChannel;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

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

/// Which journal a case runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
    /// Keeps nothing: diagnostic only.
    Discard,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
            Self::Discard => "discard",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        [Self::Sqlite, Self::Postgres, Self::Discard]
            .into_iter()
            .find(|b| b.name() == name)
    }
}

/// A journal that keeps nothing: what a call costs without one. A diagnostic for this
/// driver, never a way to run sallyport.
struct DiscardJournal;

#[async_trait::async_trait]
impl Journal for DiscardJournal {
    async fn write_intent(&self, _intent: &Intent) -> Result<(), JournalError> {
        Ok(())
    }

    fn note_dispatch(&self, _attempt: &AttemptId, _n: u32) {}

    async fn append(&self, event: AuditEvent) -> Result<AuditRecord, JournalError> {
        Ok(AuditRecord {
            shard: DEFAULT_SHARD.to_owned(),
            seq: 1,
            prev_hash: String::new(),
            hash: String::new(),
            event,
        })
    }

    fn append_detached(&self, _event: AuditEvent) {}

    async fn verify(&self) -> Result<VerifyReport, JournalError> {
        Err(JournalError::Stopped)
    }

    async fn records(&self) -> Result<Vec<AuditRecord>, JournalError> {
        Ok(Vec::new())
    }

    async fn unresolved(&self) -> Result<Vec<UnresolvedAttempt>, JournalError> {
        Ok(Vec::new())
    }
}

/// Where a case's journal lives: a file path or a connection string.
async fn open(backend: Backend, location: &str) -> Arc<dyn Journal> {
    open_on(backend, location, DEFAULT_SHARD).await
}

/// [`open`], a PostgreSQL journal appending to the audit shard named `shard`.
async fn open_on(backend: Backend, location: &str, shard: &str) -> Arc<dyn Journal> {
    match backend {
        Backend::Sqlite => {
            Arc::new(SqliteJournal::open(location).expect("open the SQLite journal"))
        }
        Backend::Postgres => Arc::new(
            PostgresJournal::builder(location)
                .audit_shard(shard)
                .connect()
                .await
                .expect("connect the PostgreSQL journal"),
        ),
        Backend::Discard => Arc::new(DiscardJournal),
    }
}

fn executor(journal: Arc<dyn Journal>) -> Arc<Executor> {
    Arc::new(
        Executor::builder(
            Catalog::builder()
                .action::<PayInvoice>()
                .build()
                .expect("catalog"),
        )
        .journal_arc(journal)
        .channel(ScriptedChannel::new())
        .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
        .build()
        .expect("executor"),
    )
}

/// Latencies (µs) of the calls that ended inside the measured window, and the CPU spent in
/// it.
#[derive(Default)]
struct Samples {
    latencies_us: Vec<u64>,
    cpu: Option<Cpu>,
}

/// Nanoseconds on a CPU and runnable but waiting for one, as `/proc/…/schedstat` counts
/// them.
#[derive(Clone, Copy, Default)]
struct Sched {
    run_ns: u64,
    wait_ns: u64,
}

impl Sched {
    /// One task's (a thread's, or a single-threaded process's) counters.
    fn of(path: &str) -> Option<Self> {
        let text = std::fs::read_to_string(path).ok()?;
        let mut fields = text.split_whitespace().map(str::parse::<u64>);
        Some(Self {
            run_ns: fields.next()?.ok()?,
            wait_ns: fields.next()?.ok()?,
        })
    }

    fn add(&mut self, other: Self) {
        self.run_ns += other.run_ns;
        self.wait_ns += other.wait_ns;
    }

    fn since(self, earlier: Self) -> Self {
        Self {
            run_ns: self.run_ns.saturating_sub(earlier.run_ns),
            wait_ns: self.wait_ns.saturating_sub(earlier.wait_ns),
        }
    }
}

/// Where the CPU went: this process, the backends of the case's database, the server's
/// other processes.
#[derive(Clone, Copy, Default)]
struct Cpu {
    driver: Sched,
    backends: Sched,
    server: Sched,
}

impl Cpu {
    /// The counters now. `database`: the case's PostgreSQL database, if any (its backends
    /// show it in their command line).
    fn now(database: Option<&str>) -> Option<Self> {
        let mut cpu = Self::default();
        for thread in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let path = format!("{}/schedstat", thread.path().display());
            cpu.driver.add(Sched::of(&path)?);
        }
        for process in std::fs::read_dir("/proc").ok()?.flatten() {
            let dir = process.path();
            let is_postgres = std::fs::read_to_string(dir.join("comm"))
                .is_ok_and(|comm| comm.trim_end() == "postgres");
            if !is_postgres {
                continue;
            }
            let Some(sched) = Sched::of(&format!("{}/schedstat", dir.display())) else {
                continue;
            };
            let command = std::fs::read(dir.join("cmdline")).unwrap_or_default();
            let ours = database.is_some_and(|db| {
                String::from_utf8_lossy(&command)
                    .split(' ')
                    .any(|word| word == db)
            });
            if ours {
                cpu.backends.add(sched);
            } else {
                cpu.server.add(sched);
            }
        }
        Some(cpu)
    }

    fn since(self, earlier: Self) -> Self {
        Self {
            driver: self.driver.since(earlier.driver),
            backends: self.backends.since(earlier.backends),
            server: self.server.since(earlier.server),
        }
    }
}

/// Runs `writers` closed loops of `one` for warm-up + measure; the measured calls' latencies
/// and the CPU spent meanwhile (`database`: the case's PostgreSQL database, if any).
async fn closed_loop<F, Fut>(
    writers: usize,
    warm_up: Duration,
    measure: Duration,
    database: Option<String>,
    one: F,
) -> Samples
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let one = Arc::new(one);
    let counter = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let window = (start + warm_up, start + warm_up + measure);
    let cpu = tokio::spawn(async move {
        tokio::time::sleep_until(window.0.into()).await;
        let before = Cpu::now(database.as_deref());
        tokio::time::sleep_until(window.1.into()).await;
        let after = Cpu::now(database.as_deref());
        Some(after?.since(before?))
    });
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let (one, counter) = (Arc::clone(&one), Arc::clone(&counter));
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let begun = Instant::now();
                    one(n).await;
                    let ended = Instant::now();
                    if begun >= window.0 && ended <= window.1 {
                        mine.push(u64::try_from((ended - begun).as_micros()).unwrap_or(u64::MAX));
                    }
                    if ended >= window.1 {
                        break;
                    }
                }
                mine
            })
        })
        .collect();
    let mut samples = Samples::default();
    for task in tasks {
        samples
            .latencies_us
            .extend(task.await.expect("writer task"));
    }
    samples.cpu = cpu.await.expect("CPU sampler");
    samples
}

/// One writer's next operation.
type Op = Pin<Box<dyn Future<Output = ()> + Send>>;

fn pay(executor: Arc<Executor>) -> impl Fn(u64) -> Op + Send + Sync + 'static {
    let session = Arc::new(Session::new("bench").allow("project", ["proj_1"]));
    move |n| {
        let (executor, session) = (Arc::clone(&executor), Arc::clone(&session));
        Box::pin(async move {
            let result = executor
                .call(
                    "pay_invoice",
                    json!({"project_id": "proj_1", "invoice_id": format!("inv_{n}")}),
                    &session,
                )
                .await;
            assert_eq!(result.status, Status::Completed, "{result:?}");
        })
    }
}

fn append(journal: Arc<dyn Journal>) -> impl Fn(u64) -> Op + Send + Sync + 'static {
    move |_| {
        let journal = Arc::clone(&journal);
        Box::pin(async move {
            let event = AuditEvent::for_bench(&Intent::for_bench(true));
            journal.append(event).await.expect("append");
        })
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn row(
    backend: Backend,
    case: &str,
    writers: usize,
    measure: Duration,
    mut latencies: Vec<u64>,
    cpu: Option<Cpu>,
) {
    latencies.sort_unstable();
    let rate = latencies.len() as f64 / measure.as_secs_f64();
    // Per call: µs on a CPU / µs runnable, waiting for one.
    let per_call = |sched: Sched| {
        let calls = latencies.len().max(1) as f64;
        format!(
            "{:.0} / {:.0}",
            sched.run_ns as f64 / 1e3 / calls,
            sched.wait_ns as f64 / 1e3 / calls
        )
    };
    let (driver, backends, server) = match cpu {
        Some(cpu) => (
            per_call(cpu.driver),
            per_call(cpu.backends),
            per_call(cpu.server),
        ),
        None => ("—".to_owned(), "—".to_owned(), "—".to_owned()),
    };
    println!(
        "| {:<8} | {:<16} | {:>2} | {:>9.0} | {:>9} | {:>9} | {:>7} | {:>11} | {:>11} | {:>11} |",
        backend.name(),
        case,
        writers,
        rate,
        format!("{} µs", percentile(&latencies, 0.50)),
        format!("{} µs", percentile(&latencies, 0.99)),
        latencies.len(),
        driver,
        backends,
        server,
    );
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// `journal-load child BACKEND LOCATION START_AT_MS WARM_UP_MS MEASURE_MS [WRITERS [SHARD]]`:
/// one executor, `WRITERS` writers (default 1) appending to `SHARD` (default the default
/// shard); prints the measured latencies, one per line.
async fn child(args: &[String]) -> ExitCode {
    let (Some(backend), Some(location), Some(Ok(start_at)), Some(Ok(warm_up)), Some(Ok(measure))) = (
        args.first().and_then(|b| Backend::parse(b)),
        args.get(1),
        args.get(2).map(|t| t.parse::<u64>()),
        args.get(3).map(|t| t.parse::<u64>()),
        args.get(4).map(|t| t.parse::<u64>()),
    ) else {
        eprintln!(
            "usage: journal-load child BACKEND LOCATION START_AT_MS WARM_UP_MS MEASURE_MS [WRITERS [SHARD]]"
        );
        return ExitCode::from(2);
    };
    let writers = args.get(5).and_then(|w| w.parse().ok()).unwrap_or(1);
    let shard = args.get(6).map_or(DEFAULT_SHARD, String::as_str);
    let executor = executor(open_on(backend, location, shard).await);
    // Connected and migrated: wait for the others.
    tokio::time::sleep(Duration::from_millis(start_at.saturating_sub(unix_ms()))).await;
    let samples = closed_loop(
        writers,
        Duration::from_millis(warm_up),
        Duration::from_millis(measure),
        None,
        pay(executor),
    )
    .await;
    let text: Vec<String> = samples.latencies_us.iter().map(u64::to_string).collect();
    println!("{}", text.join("\n"));
    ExitCode::SUCCESS
}

/// `processes` children, one writer each, started together; their latencies.
fn processes(
    backend: Backend,
    location: &str,
    processes: usize,
    warm_up: Duration,
    measure: Duration,
) -> Vec<u64> {
    fleet(backend, location, processes, 1, 1, warm_up, measure)
}

/// `processes` children of `writers` writers each, started together, child `i` appending to
/// shard `s{i % shards}` (the default shard when `shards` is 1); their latencies.
fn fleet(
    backend: Backend,
    location: &str,
    processes: usize,
    writers: usize,
    shards: usize,
    warm_up: Duration,
    measure: Duration,
) -> Vec<u64> {
    let start_at = unix_ms() + 2_000 + 100 * processes as u64;
    let me = std::env::current_exe().expect("this binary's path");
    let children: Vec<_> = (0..processes)
        .map(|i| {
            let shard = if shards <= 1 {
                DEFAULT_SHARD.to_owned()
            } else {
                format!("s{}", i % shards)
            };
            Command::new(&me)
                .args(["child", backend.name(), location])
                .arg(start_at.to_string())
                .arg(warm_up.as_millis().to_string())
                .arg(measure.as_millis().to_string())
                .arg(writers.to_string())
                .arg(shard)
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn a child")
        })
        .collect();
    let mut latencies = Vec::new();
    // All at once: each child prints a line per call, more than a pipe holds.
    let within = warm_up + measure + Duration::from_secs(300);
    for out in sallyport_tests::children::wait_all(children, within) {
        assert!(out.status.success(), "a child failed: {:?}", out.status);
        latencies.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| !l.is_empty())
                .map(|l| l.parse::<u64>().expect("a latency")),
        );
    }
    latencies
}

/// Issue 39's fleet case: 4 processes × 16 writers on one database, on 1 audit shard and on
/// 4, straight to the server and then through a proxy adding 1 ms each way.
async fn fleet_case(warm_up: Duration, measure: Duration) {
    const PROCESSES: usize = 4;
    const WRITERS: usize = 16;
    for delayed in [false, true] {
        for shards in [1, 4] {
            let db = TestDb::create().await;
            // Migrated once here, so the children only connect.
            drop(open(Backend::Postgres, &db.url).await);
            let proxy = if delayed {
                let proxy = sallyport_tests::delay_proxy::DelayProxy::start(
                    &db.url,
                    Duration::from_millis(1),
                )
                .await;
                let added = proxy.added_round_trip().await;
                println!(
                    "| (proxy)  | 1 ms each way    |    | added round trip, median of 200 `SELECT 1`: {} µs |",
                    added.as_micros()
                );
                Some(proxy)
            } else {
                None
            };
            let location = proxy.as_ref().map_or_else(|| db.url.clone(), |p| p.url());
            let latencies = tokio::task::block_in_place(|| {
                fleet(
                    Backend::Postgres,
                    &location,
                    PROCESSES,
                    WRITERS,
                    shards,
                    warm_up,
                    measure,
                )
            });
            let case = format!(
                "fleet {PROCESSES}×{WRITERS}, {shards} shard{}{}",
                if shards == 1 { "" } else { "s" },
                if delayed { ", +1 ms" } else { "" }
            );
            row(
                Backend::Postgres,
                &case,
                PROCESSES * WRITERS,
                measure,
                latencies,
                None,
            );
            let report = open(Backend::Postgres, &db.url)
                .await
                .verify()
                .await
                .expect("verify");
            assert!(report.is_intact(), "{report:?}");
            drop(proxy);
            drop(db);
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    if args.first().map(String::as_str) == Some("child") {
        return runtime.block_on(child(&args[1..]));
    }
    let seconds = |i: usize, default: f64| {
        Duration::from_secs_f64(args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default))
    };
    let (measure, warm_up) = (seconds(0, 4.0), seconds(1, 1.0));
    let Some(backends) = args
        .get(2)
        .map_or("sqlite,postgres", String::as_str)
        .split(',')
        .map(Backend::parse)
        .collect::<Option<Vec<_>>>()
    else {
        eprintln!("BACKENDS: a comma-separated list of sqlite, postgres, discard");
        return ExitCode::from(2);
    };
    let cases: Vec<&str> = args
        .get(3)
        .map_or("tasks,processes,append", String::as_str)
        .split(',')
        .collect();
    let task_writers: &[usize] = if cases.contains(&"tasks") {
        &[1, 4, 16]
    } else if cases.contains(&"tasks16") {
        &[16]
    } else {
        &[]
    };
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        println!(
            "| journal  | case             |  n |   calls/s |       p50 |       p99 |   calls | CPU/call: driver | PG backends | PG other |"
        );
        println!(
            "|----------|------------------|---:|----------:|----------:|----------:|--------:|------------:|------------:|------------:|"
        );
        for &backend in &backends {
            for &writers in task_writers {
                let (location, db) = location(backend, &dir, &format!("tasks{writers}")).await;
                let journal = open(backend, &location).await;
                let database = db.as_ref().map(|db| db.name.clone());
                let samples =
                    closed_loop(writers, warm_up, measure, database, pay(executor(journal))).await;
                row(
                    backend,
                    "calls, tasks",
                    writers,
                    measure,
                    samples.latencies_us,
                    samples.cpu,
                );
                drop(db);
            }
        }
        if cases.contains(&"processes") {
            for &backend in &backends {
                for writers in [1, 4, 16] {
                    let (location, db) =
                        location(backend, &dir, &format!("procs{writers}")).await;
                    // Migrated once here, so the children only connect.
                    drop(open(backend, &location).await);
                    let latencies = tokio::task::block_in_place(|| {
                        processes(backend, &location, writers, warm_up, measure)
                    });
                    row(backend, "calls, processes", writers, measure, latencies, None);
                    drop(db);
                }
            }
        }
        if cases.contains(&"fleet") {
            fleet_case(warm_up, measure).await;
        }
        if cases.contains(&"append") {
            for &backend in &backends {
                let (location, db) = location(backend, &dir, "append").await;
                let journal = open(backend, &location).await;
                let database = db.as_ref().map(|db| db.name.clone());
                let samples = closed_loop(4, warm_up, measure, database, append(journal)).await;
                row(
                    backend,
                    "append, tasks",
                    4,
                    measure,
                    samples.latencies_us,
                    samples.cpu,
                );
                drop(db);
            }
        }
    });
    ExitCode::SUCCESS
}

/// A fresh journal location for one case (and the database to drop after it).
async fn location(
    backend: Backend,
    dir: &tempfile::TempDir,
    case: &str,
) -> (String, Option<TestDb>) {
    match backend {
        Backend::Sqlite | Backend::Discard => (
            dir.path()
                .join(format!("{case}.db"))
                .to_string_lossy()
                .into_owned(),
            None,
        ),
        Backend::Postgres => {
            let db = TestDb::create().await;
            (db.url.clone(), Some(db))
        }
    }
}
