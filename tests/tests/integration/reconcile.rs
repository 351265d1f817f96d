//! The reconciler against a real SQLite journal file, the real HTTP channel, a local
//! upstream that counts requests and real executor processes (`approvals-host`) killed with
//! SIGKILL while the upstream holds their state-changing request: the attempt they leave
//! unresolved is settled through `send_invoice`'s read-only reconcile action
//! (`get_invoice`), never by sending again.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sallyport_core::approval::{self, ApprovalState, Decider, Verdict};
use sallyport_core::executor::{ReconcileOptions, ReconcileOutcome, Reconciled};
use sallyport_core::journal::{AuditEvent, Journal, Phase, UnresolvedAttempt};
use sallyport_core::{Executor, Status};
use sallyport_tests::approvals_rig::{self, HostOptions, TOKEN};
use sallyport_tests::http_server::{Drop, Received, Reply, Upstream, journal_text};
use serde_json::{Value, json};

/// How the upstream treats the POST the killed process sends.
#[derive(Clone, Copy)]
enum Post {
    /// The invoice is created, then the connection hangs: the sender never learns it.
    CommitThenHang,
    /// Nothing is created and the connection hangs.
    HangWithoutCommit,
}

/// An upstream whose `GET /v1/invoices/inv_N` answers 200 once the POST committed, 404
/// before, or `get_status` when that is set (non-zero).
struct Billing {
    upstream: Upstream,
    get_status: Arc<AtomicU16>,
}

async fn billing(post: Post) -> Billing {
    let committed = Arc::new(AtomicBool::new(false));
    let get_status = Arc::new(AtomicU16::new(0));
    let (c, g) = (Arc::clone(&committed), Arc::clone(&get_status));
    let upstream = Upstream::start(move |r: &Received| {
        if r.method == "POST" {
            match post {
                Post::CommitThenHang => {
                    c.store(true, Ordering::SeqCst);
                    Reply::CommitThenDrop(Drop::Hang(Duration::from_secs(60)))
                }
                Post::HangWithoutCommit => {
                    Reply::DropBeforeCommit(Drop::Hang(Duration::from_secs(60)))
                }
            }
        } else {
            let id = r.path.rsplit('/').next().unwrap_or_default().to_owned();
            match g.load(Ordering::SeqCst) {
                0 if c.load(Ordering::SeqCst) => Reply::Json(200, json!({ "id": id })),
                0 => Reply::Json(404, json!({"error": "no such invoice"})),
                status => Reply::Json(status, json!({"error": "storage offline"})),
            }
        }
    })
    .await;
    Billing {
        upstream,
        get_status,
    }
}

impl Billing {
    fn count(&self, method: &str) -> usize {
        self.upstream
            .received()
            .iter()
            .filter(|r| r.method == method)
            .count()
    }
}

fn host(options: &HostOptions, extra: &[&str], command: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_approvals-host"));
    cmd.arg(&options.journal)
        .arg(&options.upstream)
        .args(extra)
        .args(command)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Waits until the upstream holds a POST, then kills `child` with SIGKILL.
async fn kill_when_posted(billing: &Billing, mut child: Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while billing.count("POST") == 0 {
        assert!(Instant::now() < deadline, "the host never sent its POST");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().expect("kill -9");
    let _ = child.wait();
}

/// A host process sends invoice `n` directly and is killed while the upstream holds it.
async fn crash_mid_send(billing: &Billing, options: &HostOptions, n: usize) {
    let child = host(options, &["--auto-approve"], &["send", &n.to_string()])
        .spawn()
        .expect("spawn");
    kill_when_posted(billing, child).await;
}

/// The test's own executor on the same file: the rig's, sending directly.
fn reconciler(options: &HostOptions) -> Executor {
    let mut options = options.clone();
    options.auto_approve = true;
    approvals_rig::executor(&options, approvals_rig::vault(&options.upstream))
}

async fn unresolved(executor: &Executor) -> Vec<UnresolvedAttempt> {
    executor.journal().unresolved().await.expect("unresolved")
}

async fn events(journal: &dyn Journal) -> Vec<AuditEvent> {
    journal
        .records()
        .await
        .expect("records")
        .into_iter()
        .map(|r| r.event)
        .collect()
}

async fn intact(journal: &dyn Journal) -> u64 {
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    report.records
}

fn now_plus(ms: u64) -> String {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .saturating_add(Duration::from_millis(ms))
        .as_millis()
        .to_string()
}

fn options(dir: &tempfile::TempDir, billing: &Billing) -> HostOptions {
    HostOptions::new(dir.path().join("journal.db"), billing.upstream.url())
}

const NOW: Duration = Duration::ZERO;

/// Checks the settling record of `reconciled` and the check record it names as evidence.
async fn assert_settled(
    journal: &dyn Journal,
    reconciled: &Reconciled,
    status: Status,
    check: Status,
) {
    let all = events(journal).await;
    let settled = reconciled.settled.as_ref().expect("settled by this run");
    let record = all
        .iter()
        .find(|e| &e.receipt_id == settled)
        .expect("the settling record is in the chain");
    assert_eq!(record.attempt_id, reconciled.attempt_id);
    assert_eq!(record.action, "send_invoice");
    assert_eq!(record.phase, Phase::Finished);
    assert_eq!(record.status, status);
    let note = record
        .reconciled
        .as_ref()
        .expect("the record names its evidence");
    assert_eq!(note.action, "get_invoice");
    assert_eq!(Some(&note.evidence), reconciled.evidence.as_ref());
    assert_eq!(note.check_status, check);
    let evidence = all
        .iter()
        .find(|e| e.receipt_id == note.evidence)
        .expect("the evidence is a record of its own");
    assert_eq!(evidence.action, "get_invoice");
    assert_eq!(evidence.session_id, "reconcile");
    assert_eq!(evidence.status, check);
    assert_eq!(evidence.dispatches, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_killed_after_the_upstream_committed_is_settled_completed_and_never_resent() {
    let billing = billing(Post::CommitThenHang).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = options(&dir, &billing);
    crash_mid_send(&billing, &options, 1).await;

    let executor = reconciler(&options);
    let journal = executor.journal().as_ref();
    let open = unresolved(&executor).await;
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0].action, "send_invoice");
    assert_eq!(open[0].arguments["invoice_id"], "inv_1");
    assert_eq!(
        (open[0].owner.as_deref(), open[0].lease_until_ms),
        (None, None)
    );
    let before = intact(journal).await;

    // Too young: the owner might still be waiting for its answer. Nothing is checked.
    let report = executor
        .reconcile(ReconcileOptions::new().with_min_age(Duration::from_secs(3600)))
        .await
        .expect("reconcile");
    assert!(report.is_empty(), "{report:?}");
    assert_eq!(billing.count("GET"), 0);
    assert_eq!(unresolved(&executor).await.len(), 1);
    assert_eq!(intact(journal).await, before);

    let report = executor
        .reconcile(ReconcileOptions::new().with_min_age(NOW))
        .await
        .expect("reconcile");
    assert_eq!(report.len(), 1, "{report:?}");
    let settled = &report[0];
    assert_eq!(settled.attempt_id, open[0].attempt_id);
    assert_eq!(settled.action, "send_invoice");
    assert_eq!(settled.outcome, ReconcileOutcome::Completed);
    assert_eq!(settled.check.as_deref(), Some("get_invoice"));
    assert!(settled.approval_id.is_none());
    assert_settled(journal, settled, Status::Completed, Status::Completed).await;
    assert_eq!(
        billing.count("POST"),
        1,
        "the mutating request was never resent"
    );
    assert_eq!(billing.count("GET"), 1);
    assert_eq!(billing.upstream.effect_count(), 1);
    assert!(
        billing
            .upstream
            .received()
            .iter()
            .any(|r| r.path == "/v1/invoices/inv_1")
    );
    assert_eq!(
        intact(journal).await,
        before + 2,
        "the check's record and the settling one"
    );
    assert!(unresolved(&executor).await.is_empty());

    // Nothing left: a second run checks nothing and writes nothing.
    let again = executor
        .reconcile(ReconcileOptions::new().with_min_age(NOW))
        .await
        .expect("reconcile again");
    assert!(again.is_empty(), "{again:?}");
    assert_eq!(billing.count("GET"), 1);
    assert_eq!(intact(journal).await, before + 2);
    assert!(!journal_text(&options.journal).contains(TOKEN));
    assert!(
        !serde_json::to_string(&report)
            .expect("json")
            .contains(TOKEN)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_upstream_never_committed_is_settled_rejected_when_the_check_finds_nothing() {
    let billing = billing(Post::HangWithoutCommit).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = options(&dir, &billing);
    crash_mid_send(&billing, &options, 2).await;

    let executor = reconciler(&options);
    let journal = executor.journal().as_ref();
    assert_eq!(unresolved(&executor).await.len(), 1);
    let report = executor
        .reconcile(ReconcileOptions::new().with_min_age(NOW))
        .await
        .expect("reconcile");
    assert_eq!(report.len(), 1, "{report:?}");
    assert_eq!(report[0].outcome, ReconcileOutcome::Rejected);
    assert_settled(journal, &report[0], Status::Rejected, Status::Rejected).await;
    assert_eq!((billing.count("POST"), billing.count("GET")), (1, 1));
    assert_eq!(billing.upstream.effect_count(), 0);
    assert!(unresolved(&executor).await.is_empty());
    intact(journal).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_that_fails_leaves_the_attempt_unknown_until_a_later_check_can_tell() {
    let billing = billing(Post::CommitThenHang).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = options(&dir, &billing);
    crash_mid_send(&billing, &options, 3).await;
    billing.get_status.store(500, Ordering::SeqCst);

    let executor = reconciler(&options);
    let journal = executor.journal().as_ref();
    let report = executor
        .reconcile(ReconcileOptions::new().with_min_age(NOW))
        .await
        .expect("reconcile");
    assert_eq!(report.len(), 1, "{report:?}");
    assert_eq!(report[0].outcome, ReconcileOutcome::Unknown);
    assert!(report[0].settled.is_none());
    assert!(
        report[0].evidence.is_some(),
        "the failed check has its own record"
    );
    assert!(
        report[0].reason.contains("stays unknown"),
        "{}",
        report[0].reason
    );
    assert!(billing.count("GET") >= 1);
    assert_eq!(billing.count("POST"), 1);
    let open = unresolved(&executor).await;
    assert_eq!(open.len(), 1, "still unresolved");
    assert!(
        events(journal)
            .await
            .iter()
            .all(|e| e.attempt_id != open[0].attempt_id),
        "no record closes it"
    );
    intact(journal).await;

    // The upstream recovers: the next run settles it.
    billing.get_status.store(0, Ordering::SeqCst);
    let report = executor
        .reconcile(ReconcileOptions::new().with_min_age(NOW))
        .await
        .expect("reconcile");
    assert_eq!(report.len(), 1);
    assert_eq!(report[0].outcome, ReconcileOutcome::Completed);
    assert_eq!(billing.count("POST"), 1);
    assert!(unresolved(&executor).await.is_empty());
    intact(journal).await;
}

fn reconciled_lines(output: &Output) -> Vec<Value> {
    assert!(
        output.status.success(),
        "host failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a reconciled attempt as JSON"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_reconciler_processes_at_once_settle_the_attempt_once() {
    let billing = billing(Post::CommitThenHang).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = options(&dir, &billing);
    crash_mid_send(&billing, &options, 4).await;
    let attempt = {
        let executor = reconciler(&options);
        let open = unresolved(&executor).await;
        assert_eq!(open.len(), 1);
        open[0].attempt_id.clone()
    };

    let start = now_plus(1500);
    let children: Vec<Child> = (0..2)
        .map(|_| {
            host(&options, &["--auto-approve"], &["reconcile", "0", &start])
                .spawn()
                .expect("spawn")
        })
        .collect();
    let outputs = tokio::task::spawn_blocking(move || {
        sallyport_tests::children::wait_all(children, std::time::Duration::from_secs(600))
    })
    .await
    .expect("join");
    let reports: Vec<Value> = outputs.iter().flat_map(reconciled_lines).collect();
    assert!(!reports.is_empty() && reports.len() <= 2, "{reports:?}");
    assert!(reports.iter().all(|r| r["attempt_id"] == attempt.as_str()));
    assert!(
        reports.iter().all(|r| r["outcome"] == "completed"),
        "{reports:?}"
    );
    let settled = reports
        .iter()
        .filter(|r| r.get("settled").is_some())
        .count();
    assert_eq!(settled, 1, "exactly one process settled it: {reports:?}");

    let executor = reconciler(&options);
    let journal = executor.journal().as_ref();
    let closing: Vec<AuditEvent> = events(journal)
        .await
        .into_iter()
        .filter(|e| e.attempt_id == attempt)
        .collect();
    assert_eq!(closing.len(), 1, "one record closes the attempt");
    assert!(closing[0].reconciled.is_some());
    assert_eq!(billing.count("POST"), 1);
    assert!(unresolved(&executor).await.is_empty());
    intact(journal).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_killed_mid_send_finishes_its_approval_once_the_claim_lease_ends() {
    let billing = billing(Post::CommitThenHang).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = options(&dir, &billing);
    // Parked by a deferred-consent executor, approved through the library path alone.
    let deferred = approvals_rig::executor(&options, approvals_rig::vault(&options.upstream));
    let parked = deferred
        .call(
            "send_invoice",
            approvals_rig::invoice(5),
            &approvals_rig::session(),
        )
        .await;
    let id = parked.approval_id.expect("parked");
    approval::decide(
        deferred
            .approval_store()
            .expect("an approval store")
            .as_ref(),
        &id,
        Verdict::Approve,
        &Decider::new("alice", "test"),
        None,
    )
    .await
    .expect("approve");
    drop(deferred);
    // A host carries it out under a 1 s claim and dies while the upstream holds the POST.
    let child = host(&options, &["--lease-ms", "1000"], &["resume"])
        .spawn()
        .expect("spawn");
    kill_when_posted(&billing, child).await;

    let executor = approvals_rig::executor(&options, approvals_rig::vault(&options.upstream));
    let journal = executor.journal().as_ref();
    let store = executor.approval_store().expect("an approval store");
    let stranded = store.approval(&id).await.expect("read").expect("stored");
    assert_eq!(stranded.state, ApprovalState::Executing);
    let execution = stranded.execution.clone().expect("its attempt");
    let claim = stranded.claim.clone().expect("the dead host's claim");
    let open = unresolved(&executor).await;
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].attempt_id, execution);

    // The claim's lease decides, not the age: left alone while it lasts, even with no
    // minimum age ...
    if sallyport_core::clock::now_ms() < claim.until_ms {
        let early = executor
            .reconcile(ReconcileOptions::new().with_min_age(NOW))
            .await
            .expect("reconcile");
        if sallyport_core::clock::now_ms() < claim.until_ms {
            assert!(early.is_empty(), "{early:?}");
        }
    }
    // ... and settled once it ended, with the 60 s default minimum age not yet reached.
    while sallyport_core::clock::now_ms() <= claim.until_ms {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = executor
        .reconcile(ReconcileOptions::new())
        .await
        .expect("reconcile");
    assert_eq!(report.len(), 1, "{report:?}");
    assert_eq!(report[0].outcome, ReconcileOutcome::Completed);
    assert_eq!(report[0].approval_id.as_ref(), Some(&id));
    assert_settled(journal, &report[0], Status::Completed, Status::Completed).await;
    let finished = store.approval(&id).await.expect("read").expect("stored");
    assert_eq!(finished.state, ApprovalState::Finished);
    let result = finished.result.expect("the settled result");
    assert_eq!(result.status, Status::Completed);
    assert_eq!(result.receipt_id.as_ref(), report[0].settled.as_ref());
    assert_eq!(billing.count("POST"), 1);
    assert!(unresolved(&executor).await.is_empty());
    intact(journal).await;
}

fn app(billing: &Billing, journal: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_approvals-app"))
        .arg(journal)
        .arg(billing.upstream.url())
        .args(args)
        .output()
        .expect("run")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applications_command_line_reconciles_and_the_plain_binary_explains_it_cannot() {
    let billing = billing(Post::CommitThenHang).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = options(&dir, &billing);
    crash_mid_send(&billing, &options, 6).await;
    let path = options.journal.clone();

    // The plain binary has no actions: it refuses (exit 2) and leaves the journal alone.
    let before = std::fs::read(&path).expect("journal");
    let plain = Command::new(env!("CARGO_BIN_EXE_sallyport-under-test"))
        .args(["--journal"])
        .arg(&path)
        .args(["reconcile", "--min-age", "0"])
        .output()
        .expect("run");
    assert_eq!(plain.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(stderr.contains("run_with_executor"), "{stderr}");
    assert_eq!(std::fs::read(&path).expect("journal"), before);
    assert_eq!(billing.count("GET"), 0);

    // The application's own command line: too young by the default minimum age ...
    let young = app(&billing, &path, &["reconcile", "--json"]);
    assert_eq!(
        young.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&young.stderr)
    );
    let listed: Vec<Value> = serde_json::from_slice(&young.stdout).expect("JSON");
    assert!(listed.is_empty());
    // ... a check that cannot tell exits 11 and settles nothing ...
    billing.get_status.store(503, Ordering::SeqCst);
    let unknown = app(&billing, &path, &["reconcile", "--json", "--min-age", "0"]);
    assert_eq!(
        unknown.status.code(),
        Some(11),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );
    let listed: Vec<Value> = serde_json::from_slice(&unknown.stdout).expect("JSON");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["outcome"], "unknown");
    // ... and one that finds the invoice settles it: exit 0.
    billing.get_status.store(0, Ordering::SeqCst);
    let done = app(&billing, &path, &["reconcile", "--min-age", "0"]);
    assert_eq!(
        done.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let text = String::from_utf8_lossy(&done.stdout);
    assert!(
        text.contains("send_invoice  completed  evidence rcpt_"),
        "{text}"
    );
    assert_eq!(billing.count("POST"), 1);
    let executor = reconciler(&options);
    assert!(unresolved(&executor).await.is_empty());
    intact(executor.journal().as_ref()).await;
    let help = Command::new(env!("CARGO_BIN_EXE_sallyport-under-test"))
        .arg("--help")
        .output()
        .expect("help");
    assert!(String::from_utf8_lossy(&help.stdout).contains("\n 11  reconcile:"));
}

/// On PostgreSQL the attempt carries its owner and lease: the dead process's attempt is left
/// alone while the lease lasts, whatever the minimum age, and settled once it ended, with the
/// 60 s default minimum age not yet reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_the_dead_owners_lease_decides_when_its_attempt_is_reconciled() {
    let db = sallyport_tests::postgres::TestDb::create().await;
    let billing = billing(Post::CommitThenHang).await;
    let mut options = HostOptions::new(&db.url, billing.upstream.url());
    options.auto_approve = true;
    let child = host(
        &options,
        &["--postgres", "--lease-ms", "1500", "--auto-approve"],
        &["send", "8"],
    )
    .spawn()
    .expect("spawn");
    kill_when_posted(&billing, child).await;

    let journal = sallyport_postgres::PostgresJournal::connect(&db.url)
        .await
        .expect("connect");
    let executor = approvals_rig::executor_on(
        &options,
        approvals_rig::vault(&options.upstream),
        Arc::new(journal),
    );
    let open = unresolved(&executor).await;
    assert_eq!(open.len(), 1, "{open:?}");
    let owner = open[0].owner.clone().expect("the dead process's name");
    let until = open[0].lease_until_ms.expect("its lease");
    if sallyport_core::clock::now_ms() + 200 < until {
        let early = executor
            .reconcile(ReconcileOptions::new().with_min_age(NOW))
            .await
            .expect("reconcile");
        assert!(
            early.is_empty(),
            "left alone while {owner}'s lease lasts: {early:?}"
        );
        assert_eq!(billing.count("GET"), 0);
    }
    while sallyport_core::clock::now_ms() <= until + 100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = executor
        .reconcile(ReconcileOptions::new())
        .await
        .expect("reconcile");
    assert_eq!(report.len(), 1, "{report:?}");
    assert_eq!(report[0].outcome, ReconcileOutcome::Completed);
    assert_settled(
        executor.journal().as_ref(),
        &report[0],
        Status::Completed,
        Status::Completed,
    )
    .await;
    assert_eq!((billing.count("POST"), billing.count("GET")), (1, 1));
    assert!(unresolved(&executor).await.is_empty());
    intact(executor.journal().as_ref()).await;
}
