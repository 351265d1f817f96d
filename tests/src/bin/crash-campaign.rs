//! The crash campaign (issue 39 §5): thousands of scenarios in which real executor processes
//! (`approvals-host`, the approval tests' host) are killed with SIGKILL at random points of a
//! call, a park, a decision, a resume and a reconcile, on SQLite files and on PostgreSQL
//! (servers of the campaign's own, restarted with `pg_ctl stop -m immediate` in some
//! scenarios), each against a real HTTP upstream on 127.0.0.1 that counts the invoices it
//! creates. After the deaths the campaign settles what they left (decides what still
//! waits, resumes approved calls, runs the reconciler) and checks the journal against the
//! upstream.
//!
//! ```text
//! crash-campaign [--scenarios N] [--backend sqlite|postgres|both] [--seed S]
//!                [--parallel P] [--only I] [--host PATH] [--for-seconds T]
//!                [--lying-upstream]
//!   --scenarios N   how many scenarios (default 100); with `both`, every other one is
//!                   PostgreSQL
//!   --seed S        the campaign's seed (default: from the clock); scenario I's own seed
//!                   derives from it, so `--seed S --only I` replays scenario I alone
//!   --parallel P    scenarios at a time (default 2), each lane with its own PostgreSQL
//!   --host PATH     the `approvals-host` binary (default: beside this one)
//!   --for-seconds T start no scenario after T seconds: the totals are those of the
//!                   scenarios run (the first line says how many of N)
//!   --lying-upstream  the upstream's read answers 404 also for invoices it created, so
//!                   the reconciler settles attempts wrongly: the checks must report
//!                   disagreements (the test that shows they can fail)
//! ```
//!
//! Prints one line per failing scenario, then the totals:
//! `scenarios … · process deaths … · db restarts … · requests sent … · duplicate side
//! effects … · disagreements … · unresolved after reconcile … · chains broken … · seed …`.
//! Exit codes: 0 every check held; 1 a duplicate, a disagreement, an unresolved attempt, an
//! approved call left unfinished, a hung process or a broken chain; 2 bad arguments.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sallyport_core::Executor;
use sallyport_core::approval::{ApprovalFilter, ApprovalState, Decider, Verdict};
use sallyport_core::executor::ReconcileOptions;
use sallyport_core::journal::Phase;
use sallyport_core::{Status, journal::SqliteJournal};
use sallyport_postgres::PostgresJournal;
use sallyport_tests::approvals_rig::{self, HostOptions};
use sallyport_tests::cluster::Cluster;
use sallyport_tests::http_server::{Received, Reply, Upstream};
use serde_json::json;

/// How long a claim or an attempt lease of the hosts lasts: short, so that the settling
/// after a death does not wait long for a dead owner's lease to end.
const LEASE: Duration = Duration::from_millis(250);
/// The longest a process may run before it counts as hung.
const HANG: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

/// What a scenario's killed processes were doing.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Sending invoices directly (consent approved at once).
    Call,
    /// Parking invoices for approval.
    Park,
    /// Approving parked calls (`Executor::decide`, or the application's command line
    /// `approvals approve`, which also carries the call out).
    Decide,
    /// Carrying out approved calls.
    Resume,
    /// Reconciling attempts that senders killed mid-send left.
    Reconcile,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Call => "call",
            Self::Park => "park",
            Self::Decide => "decide",
            Self::Resume => "resume",
            Self::Reconcile => "reconcile",
        }
    }
}

struct Args {
    scenarios: u64,
    backends: Vec<Backend>,
    seed: u64,
    parallel: usize,
    only: Option<u64>,
    host: PathBuf,
    lying: bool,
    budget: Option<Duration>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        scenarios: 100,
        backends: vec![Backend::Sqlite, Backend::Postgres],
        seed: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64 % 1_000_000_000),
        parallel: 2,
        only: None,
        host: std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("approvals-host"),
        lying: false,
        budget: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--lying-upstream" {
            args.lying = true;
            continue;
        }
        let value = it.next().ok_or(format!("{flag} takes a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag} takes a number"))
        };
        match flag.as_str() {
            "--scenarios" => args.scenarios = number()?,
            "--seed" => args.seed = number()?,
            "--parallel" => args.parallel = usize::try_from(number()?.max(1)).unwrap_or(1),
            "--only" => args.only = Some(number()?),
            "--for-seconds" => args.budget = Some(Duration::from_secs(number()?)),
            "--host" => args.host = PathBuf::from(&value),
            "--backend" => {
                args.backends = match value.as_str() {
                    "sqlite" => vec![Backend::Sqlite],
                    "postgres" => vec![Backend::Postgres],
                    "both" => vec![Backend::Sqlite, Backend::Postgres],
                    _ => return Err("--backend takes sqlite, postgres or both".into()),
                }
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

/// Scenario `index`'s own seed (splitmix64 of the campaign's seed and the index).
fn scenario_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed.wrapping_add(index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What one scenario saw.
#[derive(Default)]
struct Tally {
    deaths: u64,
    restarts: u64,
    requests: u64,
    replays: u64,
    applied: u64,
    duplicates: u64,
    disagreements: u64,
    unresolved: u64,
    unfinished: u64,
    unknown: u64,
    hung: u64,
    /// Attempts the dead left unresolved, found when the settling began.
    left: u64,
    /// Scenarios the campaign could not set up or check (a failure too).
    errors: u64,
    broken: u64,
    /// What went wrong, for the failure line.
    notes: Vec<String>,
}

impl Tally {
    fn failed(&self) -> bool {
        self.duplicates
            + self.disagreements
            + self.unresolved
            + self.unfinished
            + self.hung
            + self.errors
            + self.broken
            > 0
    }

    fn add(&mut self, other: &Tally) {
        self.deaths += other.deaths;
        self.restarts += other.restarts;
        self.requests += other.requests;
        self.replays += other.replays;
        self.applied += other.applied;
        self.duplicates += other.duplicates;
        self.disagreements += other.disagreements;
        self.unresolved += other.unresolved;
        self.unfinished += other.unfinished;
        self.unknown += other.unknown;
        self.hung += other.hung;
        self.left += other.left;
        self.errors += other.errors;
        self.broken += other.broken;
    }
}

/// The upstream's book: each invoice it created, with the idempotency keys that created it.
#[derive(Default)]
struct Book {
    created: HashMap<String, Vec<String>>,
    keys: HashSet<String>,
    posts: u64,
    replays: u64,
}

/// A billing upstream that creates one invoice per new idempotency key (a key seen before is
/// answered again without creating anything, as the Idempotency-Key draft says) and answers
/// `GET /v1/invoices/inv_N` with 200 once inv_N exists, 404 before (always 404 when
/// `lying`).
///
/// Every reply waits `delay` after its request arrived (the invoice is created on arrival),
/// as a real API takes time to answer: a kill then often lands while a request is held.
async fn billing(lying: bool, delay: Duration) -> (Upstream, Arc<Mutex<Book>>) {
    let book = Arc::new(Mutex::new(Book::default()));
    let shared = Arc::clone(&book);
    let upstream = Upstream::start(move |r: &Received| {
        let mut book = shared.lock().unwrap_or_else(PoisonError::into_inner);
        if r.method == "POST" {
            book.posts += 1;
            let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
            let invoice = body["invoice_id"].as_str().unwrap_or_default().to_owned();
            let key = r.header("idempotency-key").unwrap_or_default().to_owned();
            if !key.is_empty() && !book.keys.insert(key.clone()) {
                book.replays += 1;
            } else {
                book.created.entry(invoice.clone()).or_default().push(key);
            }
            Reply::Json(201, json!({ "id": invoice }))
        } else {
            let id = r.path.rsplit('/').next().unwrap_or_default().to_owned();
            if !lying && book.created.contains_key(&id) {
                Reply::Json(200, json!({ "id": id }))
            } else {
                Reply::Json(404, json!({"error": "no such invoice"}))
            }
        }
    })
    .await;
    upstream.set_delay(delay);
    (upstream, book)
}

/// When a child is killed.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// Never: it runs to its end.
    Never,
    /// This long after the children started (their start-up included).
    At(Duration),
    /// This long after the upstream received its first request since they started: often
    /// while the upstream holds a request.
    AfterRequest(Duration),
}

impl Kill {
    /// A random kill: one in five never, else at a random time (a debug build's process
    /// takes about 300 ms to start and make its call) or just after a request arrived.
    fn random(rng: &mut fastrand::Rng) -> Self {
        match rng.u8(..5) {
            0 => Self::Never,
            1 | 2 => Self::At(Duration::from_millis(rng.u64(0..700))),
            _ => Self::AfterRequest(Duration::from_millis(rng.u64(0..150))),
        }
    }
}

/// Child processes killed (SIGKILL) and reaped when dropped, however the scenario ends.
#[derive(Default)]
struct Children(Vec<(Child, Kill)>);

impl Drop for Children {
    fn drop(&mut self) {
        for (child, _) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Children {
    /// Waits for every child, killing each at its own time if it still runs then; returns
    /// how many were killed while running and how many were still running after [`HANG`].
    async fn run(&mut self, upstream: &Upstream) -> (u64, u64) {
        let started = Instant::now();
        let requests_before = upstream.requests();
        let mut first_request: Option<Instant> = None;
        let (mut deaths, mut hung) = (0, 0);
        let mut done = vec![false; self.0.len()];
        while done.iter().any(|d| !d) {
            if first_request.is_none() && upstream.requests() > requests_before {
                first_request = Some(Instant::now());
            }
            for (i, (child, kill)) in self.0.iter_mut().enumerate() {
                if done[i] {
                    continue;
                }
                let due = match *kill {
                    Kill::Never => false,
                    Kill::At(at) => started.elapsed() >= at,
                    Kill::AfterRequest(after) => {
                        first_request.is_some_and(|t| t.elapsed() >= after)
                    }
                };
                if matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
                    done[i] = true;
                } else if due {
                    let _ = child.kill();
                    let _ = child.wait();
                    deaths += 1;
                    done[i] = true;
                } else if started.elapsed() >= HANG {
                    let _ = child.kill();
                    let _ = child.wait();
                    hung += 1;
                    done[i] = true;
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        (deaths, hung)
    }
}

/// A lane: scenarios one after another, with its own PostgreSQL server (only started when a
/// PostgreSQL scenario comes).
struct Lane {
    cluster: Option<Arc<Cluster>>,
}

impl Lane {
    fn cluster(&mut self) -> &Cluster {
        self.cluster.get_or_insert_with(|| {
            Arc::new(Cluster::start("crash-campaign", "max_connections = 300"))
        })
    }
}

/// A fresh journal of one scenario, removed when dropped.
enum Store {
    Sqlite(tempfile::TempDir),
    Postgres { admin: String, name: String },
}

impl Store {
    fn location(&self) -> String {
        match self {
            Self::Sqlite(dir) => dir.path().join("journal.db").display().to_string(),
            Self::Postgres { admin, name } => sallyport_tests::postgres::with_dbname(admin, name),
        }
    }

    async fn executor(&self, options: &HostOptions) -> Result<Executor, String> {
        let vault = approvals_rig::vault(&options.upstream);
        match self {
            Self::Sqlite(_) => {
                let journal = SqliteJournal::open(&options.journal).map_err(|e| e.to_string())?;
                Ok(approvals_rig::executor_on(
                    options,
                    vault,
                    Arc::new(journal),
                ))
            }
            Self::Postgres { .. } => {
                let mut last = String::new();
                // The server may still be recovering from a restart: a few tries.
                for _ in 0..50 {
                    match PostgresJournal::builder(&self.location())
                        .lease(LEASE)
                        .connect()
                        .await
                    {
                        Ok(journal) => {
                            return Ok(approvals_rig::executor_on(
                                options,
                                vault,
                                Arc::new(journal),
                            ));
                        }
                        Err(e) => last = e.to_string(),
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(format!("the journal did not connect: {last}"))
            }
        }
    }

    async fn drop_database(&self) {
        let Self::Postgres { admin, name } = self else {
            return;
        };
        if let Ok((client, connection)) =
            tokio_postgres::connect(admin, tokio_postgres::NoTls).await
        {
            tokio::spawn(connection);
            let _ = client
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await;
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One scenario: its processes, their deaths, the settling and the checks.
async fn scenario(
    lane: &mut Lane,
    host: &Path,
    lying: bool,
    index: u64,
    seed: u64,
    backend: Backend,
) -> Tally {
    let mut tally = Tally::default();
    let mut rng = fastrand::Rng::with_seed(seed);
    let store = match backend {
        Backend::Sqlite => match tempfile::tempdir() {
            Ok(dir) => Store::Sqlite(dir),
            Err(e) => {
                tally.errors += 1;
                tally.notes.push(format!("no temporary directory: {e}"));
                return tally;
            }
        },
        Backend::Postgres => {
            let admin = lane.cluster().url();
            let name = format!("crash_{index}_{seed:016x}");
            let created = match tokio_postgres::connect(&admin, tokio_postgres::NoTls).await {
                Ok((client, connection)) => {
                    tokio::spawn(connection);
                    client
                        .batch_execute(&format!("CREATE DATABASE {name}"))
                        .await
                        .map_err(|e| e.to_string())
                }
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = created {
                tally.errors += 1;
                tally.notes.push(format!("CREATE DATABASE failed: {e}"));
                return tally;
            }
            Store::Postgres { admin, name }
        }
    };
    run_scenario(lane, host, lying, &store, &mut rng, backend, &mut tally).await;
    store.drop_database().await;
    tally
}

async fn run_scenario(
    lane: &mut Lane,
    host: &Path,
    lying: bool,
    store: &Store,
    rng: &mut fastrand::Rng,
    backend: Backend,
    tally: &mut Tally,
) {
    let delay = Duration::from_millis(rng.u64(0..120));
    let (upstream, book) = billing(lying, delay).await;
    let mut options = HostOptions::new(store.location(), upstream.url());
    options.lease = LEASE;
    let kind = [
        Kind::Call,
        Kind::Park,
        Kind::Decide,
        Kind::Resume,
        Kind::Reconcile,
    ][rng.usize(..5)];
    tally
        .notes
        .push(format!("{} {}", backend.name(), kind.name()));
    // The invoice numbers of the scenario: each is called once.
    let mut invoices: Vec<usize> = Vec::new();
    let fresh = |count: usize, invoices: &mut Vec<usize>| {
        let first = invoices.len();
        invoices.extend(first..first + count);
        first
    };
    let driver = match store.executor(&options).await {
        Ok(executor) => executor,
        Err(e) => {
            tally.errors += 1;
            tally.notes.push(e);
            return;
        }
    };
    let session = approvals_rig::session();
    let decider = Decider::new("campaign", "campaign");
    let host_cmd = |extra: &[&str], command: &[String]| {
        let mut cmd = Command::new(host);
        cmd.arg(&options.journal)
            .arg(&options.upstream)
            .args(["--lease-ms", &LEASE.as_millis().to_string()]);
        if backend == Backend::Postgres {
            cmd.arg("--postgres");
        }
        cmd.args(extra)
            .args(command)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    };
    // Calls parked (and for `Resume`, approved) by the campaign itself before the processes
    // start, through the library.
    let mut parked = Vec::new();
    if matches!(kind, Kind::Decide | Kind::Resume) {
        let count = 1 + rng.usize(..3);
        let first = fresh(count, &mut invoices);
        for n in first..first + count {
            let result = driver
                .call("send_invoice", approvals_rig::invoice(n), &session)
                .await;
            match result.approval_id {
                Some(id) => parked.push(id),
                None => {
                    tally.errors += 1;
                    tally
                        .notes
                        .push(format!("invoice {n} was not parked: {}", result.to_json()));
                    return;
                }
            }
        }
        if matches!(kind, Kind::Resume) {
            for id in &parked {
                if let Err(e) = driver.decide(id, Verdict::Approve, &decider, None).await {
                    tally.errors += 1;
                    tally.notes.push(format!("approve {id}: {e}"));
                    return;
                }
            }
        }
    }
    // The processes of the scenario, each with its kill time (most are killed).
    let mut commands: Vec<Command> = Vec::new();
    let processes = 1 + rng.usize(..3);
    match kind {
        Kind::Call => {
            for _ in 0..processes {
                let n = fresh(1, &mut invoices);
                commands.push(host_cmd(
                    &["--auto-approve"],
                    &["send".into(), n.to_string()],
                ));
            }
        }
        Kind::Park => {
            for _ in 0..processes.min(2) {
                let count = 1 + rng.usize(..3);
                let first = fresh(count, &mut invoices);
                commands.push(host_cmd(
                    &[],
                    &["park".into(), count.to_string(), first.to_string()],
                ));
            }
        }
        Kind::Decide => {
            for (i, id) in parked.iter().enumerate() {
                if i > 0 && rng.bool() {
                    // Sometimes one process decides several.
                    continue;
                }
                let start = now_ms().to_string();
                if rng.bool() {
                    let ids: Vec<String> = parked[i..].iter().map(ToString::to_string).collect();
                    let mut args = vec!["decide".to_owned(), start];
                    args.extend(ids);
                    commands.push(host_cmd(&[], &args));
                } else {
                    let args =
                        ["cli", &start, "approvals", "approve", &id.to_string()].map(String::from);
                    commands.push(host_cmd(&[], &args));
                }
            }
        }
        Kind::Resume => {
            for _ in 0..processes.min(2) {
                commands.push(host_cmd(&[], &["resume".into()]));
            }
        }
        Kind::Reconcile => {
            // Senders killed mid-send first, then reconcilers killed mid-reconcile.
            let mut senders = Children::default();
            for _ in 0..processes.min(2) {
                let n = fresh(1, &mut invoices);
                match host_cmd(&["--auto-approve"], &["send".into(), n.to_string()]).spawn() {
                    Ok(child) => senders.0.push((child, Kill::random(rng))),
                    Err(e) => tally.notes.push(format!("spawn: {e}")),
                }
            }
            let (deaths, hung) = senders.run(&upstream).await;
            tally.deaths += deaths;
            tally.hung += hung;
            drop(senders);
            tokio::time::sleep(LEASE + Duration::from_millis(20)).await;
            for _ in 0..processes.min(2) {
                commands.push(host_cmd(&[], &["reconcile".into(), "0".into()]));
            }
        }
    }
    let mut children = Children::default();
    for mut cmd in commands {
        let kill = Kill::random(rng);
        match cmd.spawn() {
            Ok(child) => children.0.push((child, kill)),
            Err(e) => {
                tally.errors += 1;
                tally.notes.push(format!("spawn {}: {e}", host.display()));
                return;
            }
        }
    }
    // A database restart beside them in some PostgreSQL scenarios.
    let restart = (backend == Backend::Postgres && rng.f32() < 0.2)
        .then(|| Duration::from_millis(rng.u64(0..600)));
    let restarted = Arc::new(AtomicBool::new(false));
    let restarter = restart.and_then(|after| {
        let cluster = Arc::clone(lane.cluster.as_ref()?);
        let restarted = Arc::clone(&restarted);
        // `pg_ctl stop -m immediate` (every server process quits at once, no checkpoint),
        // then a start: crash recovery from the write-ahead log.
        Some(std::thread::spawn(move || {
            std::thread::sleep(after);
            cluster.crash();
            cluster.pg_ctl_start();
            restarted.store(true, Ordering::SeqCst);
        }))
    });
    let (deaths, hung) = children.run(&upstream).await;
    tally.deaths += deaths;
    tally.hung += hung;
    drop(children);
    if let Some(thread) = restarter {
        let _ = thread.join();
        if restarted.load(Ordering::SeqCst) {
            tally.restarts += 1;
        }
    }
    drop(driver);

    // Settling: a fresh executor (the server may have restarted) decides what still waits,
    // carries out what was approved and reconciles what the dead left, until nothing is open
    // or 10 s passed.
    let settler = match store.executor(&options).await {
        Ok(executor) => executor,
        Err(e) => {
            tally.unresolved += 1;
            tally.notes.push(format!("settling: {e}"));
            return;
        }
    };
    let Some(approvals) = settler.approval_store() else {
        tally.notes.push("no approval store".into());
        tally.unfinished += 1;
        return;
    };
    if let Ok(waiting) = approvals
        .approvals(&ApprovalFilter::states([ApprovalState::Awaiting]))
        .await
    {
        for approval in waiting {
            let _ = settler
                .decide(&approval.approval_id, Verdict::Approve, &decider, None)
                .await;
        }
    }
    tally.left = settler
        .journal()
        .unresolved()
        .await
        .map_or(0, |open| open.len() as u64);
    let deadline = Instant::now() + Duration::from_secs(10);
    let (open, unfinished) = loop {
        let _ = settler.resume_approvals().await;
        let _ = settler
            .reconcile(ReconcileOptions::new().with_min_age(Duration::ZERO))
            .await;
        let open = settler.journal().unresolved().await.unwrap_or_default();
        let unfinished = approvals
            .approvals(&ApprovalFilter::states([
                ApprovalState::Approved,
                ApprovalState::Executing,
            ]))
            .await
            .unwrap_or_default();
        if (open.is_empty() && unfinished.is_empty()) || Instant::now() >= deadline {
            break (open, unfinished);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tally.unresolved += open.len() as u64;
    for attempt in &open {
        tally.notes.push(format!(
            "unresolved {} ({})",
            attempt.attempt_id,
            attempt.phase.as_str()
        ));
    }
    tally.unfinished += unfinished.len() as u64;
    for approval in &unfinished {
        tally.notes.push(format!(
            "approval {} left {}",
            approval.approval_id,
            approval.state.as_str()
        ));
    }

    // The checks: the journal against the upstream's book.
    let journal = settler.journal();
    match journal.verify().await {
        Ok(report) if report.is_intact() => {}
        Ok(report) => {
            tally.broken += 1;
            tally
                .notes
                .push(format!("chain broken: {:?}", report.first_break));
        }
        Err(e) => {
            tally.broken += 1;
            tally.notes.push(format!("verify failed: {e}"));
        }
    }
    let records = match journal.records().await {
        Ok(records) => records,
        Err(e) => {
            tally.broken += 1;
            tally.notes.push(format!("records unreadable: {e}"));
            return;
        }
    };
    let book = book.lock().unwrap_or_else(PoisonError::into_inner);
    tally.requests = book.posts;
    tally.replays = book.replays;
    for n in &invoices {
        let customer = format!("cus_{n}");
        let created = book.created.get(&format!("inv_{n}")).map_or(0, Vec::len);
        tally.applied += created as u64;
        if created > 1 {
            tally.duplicates += created as u64 - 1;
            tally.notes.push(format!("inv_{n} created {created} times"));
        }
        let closing: Vec<(Phase, Status)> = records
            .iter()
            .map(|r| &r.event)
            .filter(|e| e.action == "send_invoice" && e.objects.iter().any(|o| o.value == customer))
            .filter(|e| !matches!(e.phase, Phase::Deferred | Phase::Decided))
            .map(|e| (e.phase, e.status))
            .collect();
        for (phase, status) in &closing {
            let says_done = matches!(status, Status::Completed | Status::AlreadyInDesiredState);
            let says_not_sent = *status == Status::Rejected && *phase != Phase::Refused
                || *phase == Phase::CancelledBeforeSend;
            if says_done && created == 0 {
                tally.disagreements += 1;
                tally.notes.push(format!(
                    "inv_{n}: journal says {} ({}), upstream never created it",
                    status.as_str(),
                    phase.as_str()
                ));
            }
            if says_not_sent && created > 0 {
                tally.disagreements += 1;
                tally.notes.push(format!(
                    "inv_{n}: journal says {} ({}), upstream created it",
                    status.as_str(),
                    phase.as_str()
                ));
            }
            if *status == Status::Unknown {
                tally.unknown += 1;
            }
        }
        let done = closing
            .iter()
            .any(|(_, s)| matches!(s, Status::Completed | Status::AlreadyInDesiredState));
        if created > 0 && !done && open.is_empty() {
            tally.disagreements += 1;
            tally.notes.push(format!(
                "inv_{n}: created upstream, the journal records no completion: {closing:?}"
            ));
        }
    }
    drop(book);
    drop(settler);
    drop(upstream);
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("crash-campaign: {e}");
            return ExitCode::from(2);
        }
    };
    if !args.host.exists() {
        eprintln!(
            "crash-campaign: no approvals-host at {} (build it, or pass --host)",
            args.host.display()
        );
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("crash-campaign: {e}");
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    let indices: Vec<u64> = match args.only {
        Some(i) => vec![i],
        None => (0..args.scenarios).collect(),
    };
    let next = Arc::new(AtomicU64::new(0));
    let indices = Arc::new(indices);
    let totals = Arc::new(Mutex::new((
        Tally::default(),
        [0_u64; 2],
        Vec::<String>::new(),
    )));
    let args = Arc::new(args);
    let lanes: Vec<_> = (0..args.parallel.min(indices.len()).max(1))
        .map(|_| {
            let (next, indices, totals, args) =
                (Arc::clone(&next), Arc::clone(&indices), Arc::clone(&totals), Arc::clone(&args));
            let handle = runtime.handle().clone();
            std::thread::spawn(move || {
                let mut lane = Lane { cluster: None };
                loop {
                    if args.budget.is_some_and(|b| started.elapsed() >= b) {
                        break;
                    }
                    let at = usize::try_from(next.fetch_add(1, Ordering::SeqCst)).unwrap_or(usize::MAX);
                    let Some(&index) = indices.get(at) else { break };
                    let backend = args.backends[usize::try_from(index).unwrap_or(0) % args.backends.len()];
                    let seed = scenario_seed(args.seed, index);
                    let tally = handle.block_on(scenario(&mut lane, &args.host, args.lying, index, seed, backend));
                    let mut totals = totals.lock().unwrap_or_else(PoisonError::into_inner);
                    totals.0.add(&tally);
                    totals.1[usize::from(backend == Backend::Postgres)] += 1;
                    if tally.failed() {
                        let line = format!(
                            "FAILED scenario {index} (seed {seed}; replay: crash-campaign --seed {} --backend {} --only {index}): {}",
                            args.seed,
                            if args.backends.len() == 2 { "both" } else { backend.name() },
                            tally.notes.join("; ")
                        );
                        println!("{line}");
                        totals.2.push(line);
                    }
                    let done = totals.1[0] + totals.1[1];
                    if done % 250 == 0 {
                        eprintln!("crash-campaign: {done} scenarios, {} s", started.elapsed().as_secs());
                    }
                }
            })
        })
        .collect();
    for lane in lanes {
        let _ = lane.join();
    }
    let totals = totals.lock().unwrap_or_else(PoisonError::into_inner);
    let (t, per, failures) = (&totals.0, totals.1, &totals.2);
    if per[0] + per[1] < indices.len() as u64 {
        println!(
            "stopped after {} s: {} of the {} scenarios asked for ran",
            started.elapsed().as_secs(),
            per[0] + per[1],
            indices.len()
        );
    }
    println!(
        "scenarios {} (sqlite {}, postgres {}) · process deaths {} · db restarts {} · attempts left unresolved by the dead {} · requests sent {} (key replays {}) · invoices created {} · duplicate side effects {} · disagreements {} · unresolved after reconcile {} · approved calls left unfinished {} · hung processes {} · scenario errors {} · chains broken {} · outcomes left unknown {} · seed {} · {} s",
        per[0] + per[1],
        per[0],
        per[1],
        t.deaths,
        t.restarts,
        t.left,
        t.requests,
        t.replays,
        t.applied,
        t.duplicates,
        t.disagreements,
        t.unresolved,
        t.unfinished,
        t.hung,
        t.errors,
        t.broken,
        t.unknown,
        args.seed,
        started.elapsed().as_secs()
    );
    if failures.is_empty() && !t.failed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
