//! Approvals that outlive the call, against a real SQLite journal file, the real HTTP
//! channel, a local upstream that counts requests, and real executor processes
//! (`approvals-host`): a deferred call is parked with nothing sent, decided anywhere through
//! one compare-and-set, and carried out exactly once, re-checked before it is sent.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sallyport_core::approval::{
    ApprovalFilter, ApprovalId, ApprovalState, ConsentMode, Decided, Decider, Verdict,
};
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::{Journal, Phase, SqliteJournal};
use sallyport_core::outcome::ActionResult;
use sallyport_core::{Executor, RefusalCode, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::approvals_rig::{self, HostOptions, TOKEN};
use sallyport_tests::http_server::{Received, Reply, Upstream, journal_text};
use serde_json::{Value, json};

fn reply(r: &Received) -> Reply {
    if r.method == "POST" && r.path == "/v1/invoices" {
        Reply::Idempotent(None)
    } else if r.path.starts_with("/v1/customers/") {
        Reply::Json(200, json!({"ok": true}))
    } else {
        Reply::Json(200, json!({"id": "inv_x"}))
    }
}

/// POSTs the upstream received for invoice `n`.
fn posts_for(upstream: &Upstream, n: usize) -> usize {
    let needle = format!("\"inv_{n}\"");
    upstream
        .received()
        .iter()
        .filter(|r| r.method == "POST" && String::from_utf8_lossy(&r.body).contains(&needle))
        .count()
}

fn posts(upstream: &Upstream) -> usize {
    upstream
        .received()
        .iter()
        .filter(|r| r.method == "POST")
        .count()
}

struct Rig {
    upstream: Upstream,
    options: HostOptions,
    executor: Executor,
    vault: Arc<sallyport_core::vault::MemoryVault>,
    _dir: tempfile::TempDir,
}

async fn rig() -> Rig {
    rig_with(|o| o).await
}

async fn rig_with(change: impl FnOnce(HostOptions) -> HostOptions) -> Rig {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = change(HostOptions::new(
        dir.path().join("journal.db"),
        upstream.url(),
    ));
    let vault = approvals_rig::vault(&options.upstream);
    let executor = approvals_rig::executor(&options, Arc::clone(&vault));
    Rig {
        upstream,
        options,
        executor,
        vault,
        _dir: dir,
    }
}

impl Rig {
    async fn park(&self, n: usize) -> ActionResult {
        let result = self
            .executor
            .call(
                "send_invoice",
                approvals_rig::invoice(n),
                &approvals_rig::session(),
            )
            .await;
        assert_eq!(result.status, Status::Pending, "{}", result.to_json());
        result
    }

    async fn check(&self, id: &ApprovalId) -> ActionResult {
        self.executor
            .call(
                "check_approval",
                json!({ "approval_id": id }),
                &approvals_rig::session(),
            )
            .await
    }

    fn journal(&self) -> &Arc<dyn Journal> {
        self.executor.journal()
    }

    fn store(&self) -> &Arc<dyn sallyport_core::journal::ApprovalStore> {
        self.executor.approval_store().expect("an approval store")
    }
}

fn alice() -> Decider {
    Decider::new("alice", "test")
}

fn code(result: &ActionResult) -> Option<&str> {
    result.code_str()
}

async fn events(journal: &dyn Journal) -> Vec<sallyport_core::journal::AuditEvent> {
    journal
        .records()
        .await
        .expect("records")
        .into_iter()
        .map(|r| r.event)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_call_is_parked_pending_with_nothing_sent_and_its_approval_stored() {
    let rig = rig().await;
    let parked = rig.park(1).await;
    assert_eq!(code(&parked), Some("awaiting_approval"));
    let id = parked.approval_id.clone().expect("an approval id");
    let next = parked.next.as_ref().expect("a next call");
    assert_eq!(next.action, "check_approval");
    assert_eq!(next.arguments, json!({ "approval_id": id }));
    assert!(parked.receipt_id.is_some());
    assert_eq!(rig.upstream.requests(), 0, "nothing is sent while parked");

    let stored = rig
        .store()
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.state, ApprovalState::Awaiting);
    assert_eq!(stored.action, "send_invoice");
    assert!(
        stored.request.contains("127.0.0.1"),
        "the approver sees the real host: {}",
        stored.request
    );
    assert_eq!(stored.objects.len(), 1);
    assert_eq!(
        stored.note.as_deref(),
        Some("month-end invoice 1 for the customer")
    );
    assert_eq!(stored.session.requester(), Some("billing-bot"));
    assert_eq!(
        stored.data_classes,
        [sallyport_core::action::DataClass::FINANCIAL],
        "the approver sees what kind of data the action touches"
    );
    let lifetime = stored.expires_at_ms - stored.created_at_ms;
    assert_eq!(lifetime, 24 * 3600 * 1000, "default expiry is 24 h");

    let check = rig.check(&id).await;
    assert_eq!(check.status, Status::Pending, "{}", check.to_json());
    assert_eq!(code(&check), Some("awaiting_approval"));
    assert_eq!(check.data.as_ref().expect("data")["state"], "awaiting");
    assert_eq!(
        check.next.as_ref().map(|n| n.action.as_str()),
        Some("check_approval")
    );
    assert_eq!(rig.upstream.requests(), 0);

    let recorded = events(rig.journal().as_ref()).await;
    let requested = &recorded[0];
    assert_eq!(requested.phase, Phase::Deferred);
    assert_eq!(requested.status, Status::Pending);
    let note = requested.approval.as_ref().expect("approval note");
    assert_eq!(note.approval_id, id);
    assert!(note.expires_at.is_some());
    // check_approval is an observe call like any other: its own record.
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[1].action, "check_approval");
    assert!(rig.journal().verify().await.expect("verify").is_intact());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_sends_exactly_one_request_and_check_approval_returns_the_executed_result() {
    let rig = rig().await;
    let id = rig.park(2).await.approval_id.expect("id");
    let decided = rig
        .executor
        .decide(&id, Verdict::Approve, &alice(), Some("looks right"))
        .await
        .expect("decide");
    let Decided::Recorded(approval) = decided else {
        panic!("first decision is recorded: {decided:?}");
    };
    assert_eq!(approval.state, ApprovalState::Finished);
    assert_eq!(posts_for(&rig.upstream, 2), 1);
    let executed = approval.result.expect("the executed result");
    assert_eq!(executed.status, Status::Completed, "{}", executed.to_json());
    assert_eq!(executed.approval_id.as_ref(), Some(&id));

    // A second, late delivery sends nothing and says what stands.
    let again = rig
        .executor
        .decide(&id, Verdict::Approve, &Decider::new("bob", "test"), None)
        .await
        .expect("decide");
    assert!(matches!(again, Decided::AlreadyDecided(_)), "{again:?}");
    let deny = rig
        .executor
        .decide(&id, Verdict::Deny, &Decider::new("bob", "test"), None)
        .await
        .expect("decide");
    assert!(matches!(deny, Decided::AlreadyDecided(_)));
    assert_eq!(posts_for(&rig.upstream, 2), 1);

    let check = rig.check(&id).await;
    assert_eq!(check.status, Status::Completed, "{}", check.to_json());
    let data = check.data.expect("data");
    assert_eq!(data["state"], "finished");
    assert_eq!(data["decided_by"], "alice");
    assert_eq!(data["result"]["status"], "completed");
    assert_eq!(
        data["result"]["receipt_id"],
        json!(executed.receipt_id),
        "the executed call's receipt"
    );
    assert_eq!(posts_for(&rig.upstream, 2), 1);

    // Audited: requested, approved (who, through which channel), the execution.
    let recorded = events(rig.journal().as_ref()).await;
    let steps: Vec<_> = recorded
        .iter()
        .filter_map(|e| e.approval.as_ref().map(|a| (e.phase, a.step)))
        .collect();
    use sallyport_core::approval::ApprovalStep::*;
    assert_eq!(
        steps,
        [
            (Phase::Deferred, Requested),
            (Phase::Decided, Approved),
            (Phase::Finished, Resumed)
        ]
    );
    let decision = recorded
        .iter()
        .find(|e| e.phase == Phase::Decided)
        .expect("decision record");
    let note = decision.approval.as_ref().expect("note");
    assert_eq!(note.by.as_deref(), Some("alice"));
    assert_eq!(note.channel.as_deref(), Some("test"));
    let execution = recorded
        .iter()
        .find(|e| e.phase == Phase::Finished && e.action == "send_invoice")
        .expect("execution record");
    assert_eq!(execution.dispatches, 1);
    assert_eq!(Some(&execution.receipt_id), executed.receipt_id.as_ref());
    assert!(rig.journal().verify().await.expect("verify").is_intact());
    assert!(
        rig.journal()
            .unresolved()
            .await
            .expect("unresolved")
            .is_empty()
    );
    assert!(!journal_text(&rig.options.journal).contains(TOKEN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_is_rejected_with_the_humans_reason_and_nothing_is_sent() {
    let rig = rig().await;
    let id = rig.park(3).await.approval_id.expect("id");
    let decided = rig
        .executor
        .decide(
            &id,
            Verdict::Deny,
            &alice(),
            Some("wrong customer, ask finance"),
        )
        .await
        .expect("decide");
    assert_eq!(decided.approval().state, ApprovalState::Denied);
    let check = rig.check(&id).await;
    assert_eq!(check.status, Status::Rejected);
    assert_eq!(code(&check), Some("consent_denied"));
    assert!(
        check
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("wrong customer, ask finance")),
        "{:?}",
        check.reason
    );
    assert_eq!(rig.upstream.requests(), 0);
    // A later approval changes nothing.
    let late = rig
        .executor
        .decide(&id, Verdict::Approve, &alice(), None)
        .await
        .expect("decide");
    assert!(matches!(late, Decided::AlreadyDecided(_)));
    assert_eq!(rig.upstream.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_approval_is_rejected_approval_expired_and_never_sent() {
    let rig = rig_with(|mut o| {
        o.expiry = Duration::from_millis(300);
        o
    })
    .await;
    let id = rig.park(4).await.approval_id.expect("id");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let check = rig.check(&id).await;
    assert_eq!(check.status, Status::Rejected, "{}", check.to_json());
    assert_eq!(code(&check), Some("approval_expired"));
    let late = rig
        .executor
        .decide(&id, Verdict::Approve, &alice(), None)
        .await
        .expect("decide");
    assert_eq!(late.approval().state, ApprovalState::Expired);
    assert!(!matches!(late, Decided::Recorded(_)));
    assert_eq!(rig.upstream.requests(), 0);
    // The expiry is recorded once, whoever noticed it first.
    let expiries = events(rig.journal().as_ref())
        .await
        .into_iter()
        .filter(|e| e.code.as_ref().map(|c| c.as_str()) == Some("approval_expired"))
        .filter(|e| e.phase == Phase::Decided)
        .count();
    assert_eq!(expiries, 1);

    // A fresh identical call after the expiry asks again.
    let again = rig.park(4).await;
    assert_ne!(again.approval_id.as_ref(), Some(&id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_given_after_the_definition_changed_is_refused_definition_drift() {
    let rig = rig().await;
    let id = rig.park(5).await.approval_id.expect("id");
    // Another executor with a changed send_invoice decides.
    let mut changed = rig.options.clone();
    changed.changed_definition = true;
    let other = approvals_rig::executor(&changed, Arc::clone(&rig.vault));
    let decided = other
        .decide(&id, Verdict::Approve, &alice(), None)
        .await
        .expect("decide");
    let approval = decided.approval();
    assert_eq!(approval.state, ApprovalState::Finished);
    let result = approval.result.as_ref().expect("result");
    assert_eq!(result.status, Status::Rejected);
    assert_eq!(result.code_str(), Some("definition_drift"));
    assert_eq!(rig.upstream.requests(), 0);
    let check = rig.check(&id).await;
    assert_eq!(code(&check), Some("definition_drift"));
    assert_eq!(rig.upstream.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_while_the_vault_is_locked_is_refused_and_nothing_is_sent() {
    let rig = rig().await;
    let id = rig.park(6).await.approval_id.expect("id");
    rig.vault.lock();
    let decided = rig
        .executor
        .decide(&id, Verdict::Approve, &alice(), None)
        .await
        .expect("decide");
    let result = decided.approval().result.clone().expect("result");
    assert_eq!(result.status, Status::Rejected);
    assert_eq!(result.code_str(), Some("vault_locked"));
    assert_eq!(rig.upstream.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_for_a_request_that_now_goes_elsewhere_is_refused_request_changed() {
    let rig = rig().await;
    let id = rig.park(7).await.approval_id.expect("id");
    // The credential is rebound to another host between request and approval.
    let elsewhere = Upstream::start(reply).await;
    let other_vault = approvals_rig::vault(&elsewhere.url());
    let other = approvals_rig::executor(&rig.options, other_vault);
    let decided = other
        .decide(&id, Verdict::Approve, &alice(), None)
        .await
        .expect("decide");
    let result = decided.approval().result.clone().expect("result");
    assert_eq!(
        result.code_str(),
        Some("request_changed"),
        "{}",
        result.to_json()
    );
    assert_eq!(rig.upstream.requests(), 0);
    assert_eq!(elsewhere.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reissued_identical_call_returns_the_stored_state_instead_of_asking_again() {
    let rig = rig().await;
    let first = rig.park(8).await.approval_id.expect("id");
    let second = rig.park(8).await;
    assert_eq!(second.approval_id.as_ref(), Some(&first));
    assert_eq!(code(&second), Some("awaiting_approval"));
    let all = rig
        .store()
        .approvals(&ApprovalFilter::all())
        .await
        .expect("list");
    assert_eq!(all.len(), 1, "one approval for two identical calls");
    // Another invoice is another request.
    let other = rig.park(9).await.approval_id.expect("id");
    assert_ne!(other, first);

    rig.executor
        .decide(&first, Verdict::Approve, &alice(), None)
        .await
        .expect("decide");
    let after = rig
        .executor
        .call(
            "send_invoice",
            approvals_rig::invoice(8),
            &approvals_rig::session(),
        )
        .await;
    assert_eq!(after.status, Status::Completed, "{}", after.to_json());
    assert_eq!(after.approval_id.as_ref(), Some(&first));
    assert_eq!(
        posts_for(&rig.upstream, 8),
        1,
        "the same call is not sent twice"
    );
}

/// A call parked while its consent provider is asked, dropped before the provider answers:
/// the parked record is the call's one record (it was written before the provider was
/// asked), and the approval stays awaiting for any front end. Before, the call's guard
/// added a `cancelled_before_send` record for the same attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_call_dropped_while_its_provider_is_asked_is_recorded_once() {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    let executor = Executor::builder(approvals_rig::catalog(&HostOptions::new(
        &path,
        upstream.url(),
    )))
    .journal(SqliteJournal::open(&path).expect("journal"))
    .channel(HttpChannel::builder().build().expect("channel"))
    .vault_arc(approvals_rig::vault(&upstream.url()))
    .consent_mode(ConsentMode::Deferred)
    .consent(FnConsent::new(|_| {
        std::future::pending::<ConsentDecision>()
    }))
    .build()
    .expect("executor");
    let session = approvals_rig::session();
    let call = executor.call("send_invoice", approvals_rig::invoice(20), &session);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), call)
            .await
            .is_err(),
        "the provider never answers"
    );
    // A read through the journal thread comes after the cancelled call's writes.
    let parked = executor
        .approval_store()
        .expect("an approval store")
        .approvals(&ApprovalFilter::all())
        .await
        .expect("list");
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].state, ApprovalState::Awaiting);
    let records = events(executor.journal().as_ref()).await;
    let phases: Vec<Phase> = records.iter().map(|e| e.phase).collect();
    assert_eq!(phases, [Phase::Deferred], "one record for the call");
    assert_eq!(records[0].attempt_id, parked[0].attempt_id);
    assert_eq!(posts(&upstream), 0, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consent_provider_decides_now_as_one_front_end_among_others() {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let build = |consent: FnConsent, path: &Path| {
        Executor::builder(approvals_rig::catalog(&HostOptions::new(
            path,
            upstream.url(),
        )))
        .journal(SqliteJournal::open(path).expect("journal"))
        .channel(HttpChannel::builder().build().expect("channel"))
        .vault_arc(approvals_rig::vault(&upstream.url()))
        .consent_mode(ConsentMode::Deferred)
        .consent(consent)
        .build()
        .expect("executor")
    };
    let approving = build(
        FnConsent::new(|_| async { ConsentDecision::Approve }),
        &dir.path().join("a.db"),
    );
    let done = approving
        .call(
            "send_invoice",
            approvals_rig::invoice(10),
            &approvals_rig::session(),
        )
        .await;
    assert_eq!(done.status, Status::Completed, "{}", done.to_json());
    assert_eq!(posts_for(&upstream, 10), 1);
    let id = done
        .approval_id
        .clone()
        .expect("carried out as an approval");
    let stored = approving
        .approval_store()
        .expect("an approval store")
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.state, ApprovalState::Finished);
    assert_eq!(
        stored.decision.as_ref().map(|d| d.decider.channel.as_str()),
        Some("closure")
    );

    // A provider that cannot ask (an MCP client without elicitation) leaves it parked.
    let unavailable = build(
        FnConsent::new(|_| async { ConsentDecision::Unavailable }),
        &dir.path().join("b.db"),
    );
    let parked = unavailable
        .call(
            "send_invoice",
            approvals_rig::invoice(11),
            &approvals_rig::session(),
        )
        .await;
    assert_eq!(parked.status, Status::Pending);
    assert_eq!(parked.code_str(), Some("awaiting_approval"));
    assert_eq!(posts_for(&upstream, 11), 0);

    let denying = build(
        FnConsent::new(|_| async {
            ConsentDecision::Deny {
                reason: Some("not today".into()),
            }
        }),
        &dir.path().join("c.db"),
    );
    let denied = denying
        .call(
            "send_invoice",
            approvals_rig::invoice(12),
            &approvals_rig::session(),
        )
        .await;
    assert_eq!(denied.status, Status::Rejected);
    assert_eq!(denied.code_str(), Some("consent_denied"));
    assert!(
        denied
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("not today"))
    );
    assert_eq!(posts_for(&upstream, 12), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_host_no_longer_knows_voids_its_approval() {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = HostOptions::new(dir.path().join("j.db"), upstream.url());
    let parker = approvals_rig::executor(&options, approvals_rig::vault(&upstream.url()));
    let parked = parker
        .call(
            "send_invoice",
            approvals_rig::invoice(13),
            &approvals_rig::session(),
        )
        .await;
    let id = parked.approval_id.expect("id");
    let strict = Executor::builder(approvals_rig::catalog(&options))
        .journal(SqliteJournal::open(&options.journal).expect("journal"))
        .channel(HttpChannel::builder().build().expect("channel"))
        .vault_arc(approvals_rig::vault(&upstream.url()))
        .consent_mode(ConsentMode::Deferred)
        .session_lookup(|_| None::<Session>)
        .build()
        .expect("executor");
    let decided = strict
        .decide(&id, Verdict::Approve, &alice(), None)
        .await
        .expect("decide");
    let result = decided.approval().result.clone().expect("result");
    assert_eq!(result.code_str(), Some(RefusalCode::OutOfScope.as_str()));
    assert_eq!(upstream.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_approval_of_an_unknown_id_is_rejected_and_a_malformed_one_is_invalid() {
    let rig = rig().await;
    let unknown = rig
        .check(&ApprovalId::from_stored("apr_0123456789abcdef"))
        .await;
    assert_eq!(unknown.status, Status::Rejected);
    assert_eq!(code(&unknown), Some("approval_not_found"));
    let malformed = rig
        .executor
        .call(
            "check_approval",
            json!({"approval_id": "x'; DROP TABLE approvals"}),
            &approvals_rig::session(),
        )
        .await;
    assert_eq!(malformed.status, Status::Rejected);
    assert_eq!(code(&malformed), Some("invalid_arguments"));
    // The built-in action is listed beside the host's.
    assert!(rig.executor.catalog().get("check_approval").is_some());

    // Another session cannot learn about this session's call: to it, there is no such
    // approval.
    let id = rig.park(14).await.approval_id.expect("id");
    let other = rig
        .executor
        .call(
            "check_approval",
            json!({ "approval_id": id }),
            &Session::new("agent-2").allow_any("customer"),
        )
        .await;
    assert_eq!(other.status, Status::Rejected);
    assert_eq!(code(&other), Some("approval_not_found"));
    assert!(other.data.is_none());
    assert_eq!(code(&rig.check(&id).await), Some("awaiting_approval"));

    // Nothing the journal stores for approvals holds the credential.
    let conn = rusqlite::Connection::open(&rig.options.journal).expect("open");
    let stored: Vec<String> = conn
        .prepare("SELECT approval FROM approvals")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .flatten()
        .collect();
    assert_eq!(stored.len(), 1);
    assert!(!stored[0].contains(TOKEN));
    assert!(stored[0].contains("inv_14"));
}

// ---- real processes ----

fn host(options: &HostOptions, extra: &[&str], command: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_approvals-host"));
    cmd.arg(&options.journal)
        .arg(&options.upstream)
        .args(extra)
        .args(command)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd
}

fn lines(output: &Output) -> Vec<String> {
    assert!(
        output.status.success(),
        "host failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn start_in(ms: u64) -> String {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .saturating_add(Duration::from_millis(ms))
        .as_millis()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_parked_in_one_process_and_approved_from_another_is_sent_once() {
    let rig = rig().await;
    let id = rig.park(20).await.approval_id.expect("id");
    let options = rig.options.clone();
    let id_text = id.to_string();
    let out = tokio::task::spawn_blocking(move || {
        host(&options, &[], &["decide", &start_in(0), &id_text])
            .output()
            .expect("run")
    })
    .await
    .expect("join");
    assert_eq!(lines(&out), [format!("recorded {id}")]);
    assert_eq!(posts_for(&rig.upstream, 20), 1);
    let check = rig.check(&id).await;
    assert_eq!(check.status, Status::Completed, "{}", check.to_json());
    assert_eq!(posts_for(&rig.upstream, 20), 1);
}

/// Serves the approval webhook of `executor` on 127.0.0.1:0; its decision URL.
async fn serve_webhook(executor: &Executor) -> String {
    let receiver = sallyport_webhook::WebhookReceiver::builder(executor.clone())
        .secret_credential(approvals_rig::WEBHOOK_CREDENTIAL)
        .build()
        .expect("receiver");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = receiver.router();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}{}", sallyport_webhook::DEFAULT_PATH)
}

/// Posts a signed approval of `id` to the webhook; whether it was the one recorded.
async fn webhook_approve(client: &reqwest::Client, url: &str, id: &str) -> bool {
    let body = serde_json::to_vec(&json!({
        "approval_id": id, "decision": "approve", "decided_by": "chat-bot"
    }))
    .expect("json");
    let t = sallyport_core::clock::now_ms() / 1000;
    let signature = sallyport_webhook::sign(approvals_rig::WEBHOOK_SECRET.as_bytes(), t, &body);
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .header(sallyport_webhook::SIGNATURE_HEADER, signature)
        .body(body)
        .send()
        .await
        .expect("webhook answers");
    assert_eq!(response.status().as_u16(), 200);
    let answer: Value = serde_json::from_str(&response.text().await.expect("body")).expect("JSON");
    answer["recorded"].as_bool().expect("recorded")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_and_a_webhook_deciding_the_same_approvals_at_once_send_one_request_each() {
    const ROUNDS: usize = 100;
    let rig = rig().await;
    let options = rig.options.clone();
    let ids = tokio::task::spawn_blocking(move || {
        lines(
            &host(&options, &[], &["park", &ROUNDS.to_string()])
                .output()
                .expect("park"),
        )
    })
    .await
    .expect("join");
    assert_eq!(ids.len(), ROUNDS);
    assert_eq!(rig.upstream.requests(), 0);
    let url = serve_webhook(&rig.executor).await;
    // reqwest is built without a TLS provider of its own (as in sallyport-http).
    #[allow(
        deprecated,
        reason = "ring, as sallyport-http's channel: rustls 0.23.48 names no replacement that keeps ring"
    )]
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let start_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .saturating_add(Duration::from_millis(400));
    let start = start_ms.as_millis().to_string();
    let children: Vec<_> = (0..2)
        .map(|_| {
            let mut args = vec!["decide".to_owned(), start.clone()];
            args.extend(ids.iter().cloned());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            host(&rig.options, &[], &args).spawn().expect("spawn")
        })
        .collect();
    // The webhook's deliveries start at the same instant, one after another like the
    // processes' decisions, each round racing the two processes for the same approval.
    let wait =
        start_ms.saturating_sub(SystemTime::now().duration_since(UNIX_EPOCH).expect("clock"));
    tokio::time::sleep(wait).await;
    let mut by_webhook = Vec::new();
    for id in &ids {
        by_webhook.push(webhook_approve(&client, &url, id).await);
    }
    let outputs = tokio::task::spawn_blocking(move || {
        sallyport_tests::children::wait_all(children, std::time::Duration::from_secs(600))
    })
    .await
    .expect("join");
    let said: Vec<String> = outputs.iter().flat_map(lines).collect();
    for (n, id) in ids.iter().enumerate() {
        let by_processes = said
            .iter()
            .filter(|l| **l == format!("recorded {id}"))
            .count();
        assert_eq!(
            by_processes + usize::from(by_webhook[n]),
            1,
            "round {n}: one decision recorded"
        );
        assert_eq!(posts_for(&rig.upstream, n), 1, "round {n}: one request");
    }
    assert_eq!(posts(&rig.upstream), ROUNDS);
    let report = rig.journal().verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    let finished = rig
        .store()
        .approvals(&ApprovalFilter::states([ApprovalState::Finished]))
        .await
        .expect("list");
    assert_eq!(finished.len(), ROUNDS);
    // Each front end won some rounds, or the race was not a race.
    let webhook_wins = by_webhook.iter().filter(|w| **w).count();
    eprintln!("webhook won {webhook_wins} of {ROUNDS} rounds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_killed_after_the_approval_and_before_the_send_sends_once_after_restart() {
    let rig = rig().await;
    let id = rig.park(30).await.approval_id.expect("id");
    // Approved, but not carried out (recorded through the library path alone, as the CLI
    // does).
    sallyport_core::approval::decide(rig.store().as_ref(), &id, Verdict::Approve, &alice(), None)
        .await
        .expect("decide");
    // The customer check hangs: the host claims the call and stops inside its precondition.
    rig.upstream.set_behaviour(|r| {
        if r.path.starts_with("/v1/customers/") {
            Reply::DropBeforeCommit(sallyport_tests::http_server::Drop::Hang(
                Duration::from_secs(30),
            ))
        } else {
            reply(r)
        }
    });
    let mut child = host(
        &rig.options,
        &["--lease-ms", "500", "--precheck"],
        &["resume"],
    )
    .spawn()
    .expect("spawn");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !rig
        .upstream
        .received()
        .iter()
        .any(|r| r.path.starts_with("/v1/customers/"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the host never reached its precondition"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().expect("kill -9");
    let _ = child.wait();
    let stranded = rig
        .store()
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stranded.state, ApprovalState::Approved);
    assert!(stranded.claim.is_some(), "the dead host held a claim");
    assert_eq!(posts(&rig.upstream), 0, "nothing was sent before the kill");

    // The restarted host waits out the dead one's lease, then carries the call out.
    rig.upstream.set_behaviour(reply);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let options = rig.options.clone();
    let out = tokio::task::spawn_blocking(move || {
        host(&options, &["--lease-ms", "500", "--precheck"], &["resume"])
            .output()
            .expect("resume")
    })
    .await
    .expect("join");
    let results = lines(&out);
    assert_eq!(results.len(), 1, "{results:?}");
    let result: Value = serde_json::from_str(&results[0]).expect("result JSON");
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(posts(&rig.upstream), 1);
    // The audit says so: one execution record for the approval, with one dispatch.
    let executions: Vec<_> = events(rig.journal().as_ref())
        .await
        .into_iter()
        .filter(|e| e.phase == Phase::Finished && e.action == "send_invoice")
        .collect();
    assert_eq!(executions.len(), 1);
    assert_eq!(executions[0].dispatches, 1);
    assert_eq!(
        executions[0].approval.as_ref().map(|a| &a.approval_id),
        Some(&id)
    );
    let finished = rig
        .store()
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(finished.state, ApprovalState::Finished);
    assert!(rig.journal().verify().await.expect("verify").is_intact());
    // Nothing more to resume.
    assert!(
        rig.executor
            .resume_approvals()
            .await
            .expect("resume")
            .is_empty()
    );
    assert_eq!(posts(&rig.upstream), 1);
}

/// A journal that stores no approvals: the SQLite journal behind the plain [`Journal`]
/// trait, its approval store hidden.
struct NoApprovals(SqliteJournal);

#[async_trait::async_trait]
impl Journal for NoApprovals {
    async fn write_intent(
        &self,
        intent: &sallyport_core::journal::Intent,
    ) -> Result<(), sallyport_core::journal::JournalError> {
        self.0.write_intent(intent).await
    }
    fn note_dispatch(&self, attempt: &sallyport_core::journal::AttemptId, n: u32) {
        self.0.note_dispatch(attempt, n);
    }
    async fn append(
        &self,
        event: sallyport_core::journal::AuditEvent,
    ) -> Result<sallyport_core::journal::AuditRecord, sallyport_core::journal::JournalError> {
        self.0.append(event).await
    }
    fn append_detached(&self, event: sallyport_core::journal::AuditEvent) {
        self.0.append_detached(event);
    }
    async fn verify(
        &self,
    ) -> Result<sallyport_core::journal::VerifyReport, sallyport_core::journal::JournalError> {
        self.0.verify().await
    }
    async fn records(
        &self,
    ) -> Result<Vec<sallyport_core::journal::AuditRecord>, sallyport_core::journal::JournalError>
    {
        self.0.records().await
    }
    async fn unresolved(
        &self,
    ) -> Result<
        Vec<sallyport_core::journal::UnresolvedAttempt>,
        sallyport_core::journal::JournalError,
    > {
        self.0.unresolved().await
    }
}

fn no_approvals(dir: &tempfile::TempDir) -> NoApprovals {
    NoApprovals(SqliteJournal::open(dir.path().join("plain.db")).expect("journal"))
}

fn builder_for(options: &HostOptions) -> sallyport_core::executor::ExecutorBuilder {
    let vault = approvals_rig::vault(&options.upstream);
    Executor::builder(approvals_rig::catalog(options))
        .channel(HttpChannel::builder().build().expect("channel"))
        .vault_arc(vault)
}

#[tokio::test]
async fn deferred_consent_on_a_journal_without_an_approval_store_fails_to_build() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = HostOptions::new(dir.path().join("journal.db"), "http://127.0.0.1:9");

    let everywhere = builder_for(&options)
        .journal(no_approvals(&dir))
        .consent_mode(ConsentMode::Deferred)
        .build();
    let Err(error) = everywhere else {
        panic!("deferred consent without an approval store built");
    };
    assert!(
        matches!(
            error,
            sallyport_core::executor::BuildError::MissingApprovalStore
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("approval store"),
        "the message says what to do: {error}"
    );

    let one_action = builder_for(&options)
        .journal_arc(Arc::new(no_approvals(&dir)))
        .consent_mode_for("send_invoice", ConsentMode::Deferred)
        .build();
    assert!(
        matches!(
            one_action,
            Err(sallyport_core::executor::BuildError::MissingApprovalStore)
        ),
        "per-action deferred consent needs a store too"
    );

    // Blocking consent needs none.
    let blocking = builder_for(&options).journal(no_approvals(&dir)).build();
    let executor = blocking.expect("blocking consent builds without an approval store");
    assert!(executor.approval_store().is_none());
}

#[tokio::test]
async fn deferred_consent_on_the_sqlite_and_memory_journals_builds_an_executor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = HostOptions::new(dir.path().join("journal.db"), "http://127.0.0.1:9");
    let executor = builder_for(&options)
        .journal(SqliteJournal::open(&options.journal).expect("journal"))
        .consent_mode(ConsentMode::Deferred)
        .build()
        .expect("the SQLite journal is an approval store");
    assert!(executor.approval_store().is_some());
    let per_action = builder_for(&options)
        .journal_with_approvals(SqliteJournal::open(&options.journal).expect("journal"))
        .consent_mode_for("send_invoice", ConsentMode::Deferred)
        .build()
        .expect("given as an approval store");
    assert!(per_action.approval_store().is_some());
    let in_memory = builder_for(&options)
        .journal(sallyport_core::journal::MemoryJournal::new())
        .consent_mode(ConsentMode::Deferred)
        .build()
        .expect("the in-memory journal is an approval store");
    assert!(in_memory.approval_store().is_some());
}
