//! `sallyport approvals …` as a real process over a real SQLite journal holding parked calls,
//! and `run_with_executor` carrying approved calls out against a real HTTP upstream.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sallyport_core::approval::{
    self, Approval, ApprovalId, ApprovalNote, ApprovalState, ApprovalStep, Decided, Decider,
    Verdict,
};
use sallyport_core::consent::escape;
use sallyport_core::journal::{
    ApprovalStore, AttemptId, AuditEvent, Journal, Phase, SqliteJournal,
};
use sallyport_core::{Executor, Status};
use sallyport_testkit::conformance::parked_event;
use sallyport_tests::approvals_rig::{self, HostOptions};
use sallyport_tests::http_server::{Reply, Upstream};
use serde_json::json;

const HOUR_MS: u64 = 3_600_000;

/// An agent's note written to repaint the card: a CR/LF and a fake `request` line, ANSI
/// cursor-up and erase-line, and a right-to-left override.
const HOSTILE_NOTE: &str =
    "pay now\r\nrequest     GET https://harmless.example/\u{1b}[1A\u{1b}[2K \u{202e}fdp.exe";

fn run(journal: &Path, args: &[&str]) -> Output {
    run_with_env(journal, args, &[("USER", "tester")])
}

fn run_with_env(journal: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sallyport"));
    command
        .arg("--journal")
        .arg(journal)
        .args(args)
        .env_remove("SALLYPORT_VAULT")
        .env_remove("SALLYPORT_JOURNAL")
        .env_remove("USER")
        .env_remove("USERNAME");
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A parked `pay_invoice` call as the executor stores it.
fn approval(note: Option<&str>, invoice: &str, created_at_ms: u64, expires_at_ms: u64) -> Approval {
    serde_json::from_value(json!({
        "approval_id": ApprovalId::generate(),
        "attempt_id": AttemptId::generate(),
        "action": "pay_invoice",
        "summary": "Pay one invoice.",
        "effect": "external_commitment",
        "externality": "external",
        "rule": "per_call",
        "session": {"id": "s-cli", "requester": "alice@example.com"},
        "objects": [{"kind": "invoice", "field": "invoice_id", "value": invoice}],
        "note": note,
        "request": format!("POST http://127.0.0.1:9/v1/invoices/{invoice}/pay"),
        "fingerprint": "ab".repeat(32),
        "definition_hash": "cd".repeat(32),
        "definition_status": "matches the approved baseline",
        "arguments": {"invoice_id": invoice},
        "created_at_ms": created_at_ms,
        "expires_at_ms": expires_at_ms,
        "state": "awaiting",
    }))
    .unwrap()
}

/// A journal at `dir/journal.db` holding `approvals`, parked in order; closed again.
async fn journal_with(dir: &tempfile::TempDir, approvals: &[&Approval]) -> PathBuf {
    let path = dir.path().join("journal.db");
    let journal = SqliteJournal::open(&path).unwrap();
    for a in approvals {
        journal.park_approval(a, parked_event(a)).await.unwrap();
    }
    drop(journal);
    path
}

async fn stored(path: &Path, id: &ApprovalId) -> Approval {
    SqliteJournal::open(path)
        .unwrap()
        .approval(id)
        .await
        .unwrap()
        .unwrap()
}

/// The approval notes of the audit records for `id`, in chain order.
async fn steps(path: &Path, id: &ApprovalId) -> Vec<(ApprovalNote, AuditEvent)> {
    SqliteJournal::open(path)
        .unwrap()
        .records()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|r| {
            let note = r.event.approval.clone()?;
            (note.approval_id == *id).then_some((note, r.event))
        })
        .collect()
}

async fn record_count(path: &Path) -> usize {
    SqliteJournal::open(path)
        .unwrap()
        .records()
        .await
        .unwrap()
        .len()
}

fn no_terminal_control(out: &str) {
    for c in ['\u{1b}', '\r', '\u{202e}', '\u{9b}', '\u{7}', '\u{2028}'] {
        assert!(!out.contains(c), "raw {c:?} in output: {out:?}");
    }
}

#[tokio::test]
async fn list_shows_parked_calls_newest_first_with_a_countdown_and_nothing_raw() {
    let now = sallyport_core::clock::now_ms();
    let older = approval(
        Some("first"),
        "inv_1",
        now - 2 * HOUR_MS,
        now + 22 * HOUR_MS,
    );
    let newer = approval(
        Some(HOSTILE_NOTE),
        "inv_2\u{1b}[2K\r\n",
        now,
        now + 24 * HOUR_MS,
    );
    let lapsed = approval(None, "inv_0", now - 30 * HOUR_MS, now - 6 * HOUR_MS);
    let dir = tempfile::tempdir().unwrap();
    let path = journal_with(&dir, &[&lapsed, &older, &newer]).await;

    let out = run(&path, &["approvals", "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    no_terminal_control(&stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert_eq!(
        lines[0],
        format!(
            "{:<36}  {:<9}  {:<24}  {:<21}  {:<24}  {:<16}  EXPIRY",
            "ID", "STATE", "ACTION", "EFFECT", "OBJECTS", "SESSION"
        )
    );
    let row = |a: &Approval, objects: &str, expiry: &str| {
        format!(
            "{:<36}  {:<9}  {:<24}  {:<21}  {:<24}  {:<16}  {expiry}",
            a.approval_id.as_str(),
            "awaiting",
            "pay_invoice",
            "external_commitment",
            objects,
            "s-cli"
        )
    };
    assert_eq!(
        lines[1],
        row(
            &newer,
            "invoice=inv_2\\u{1b}[2K\\r\\n",
            "expires in 23h 59m"
        )
    );
    assert_eq!(lines[2], row(&older, "invoice=inv_1", "expires in 21h 59m"));
    assert_eq!(lines[3], row(&lapsed, "invoice=inv_0", "expired"));

    let none = run(&path, &["approvals", "list", "--state", "approved"]);
    assert_eq!(none.status.code(), Some(0));
    assert_eq!(text(&none.stdout), "no approvals in state approved\n");

    let json = run(
        &path,
        &["approvals", "list", "--state", "awaiting", "--json"],
    );
    assert_eq!(json.status.code(), Some(0), "{}", text(&json.stderr));
    assert!(json.stdout.is_ascii());
    let parsed: Vec<Approval> = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(parsed, [newer.clone(), older.clone(), lapsed.clone()]);
    assert_eq!(parsed[0].note.as_deref(), Some(HOSTILE_NOTE));
}

#[tokio::test]
async fn show_prints_the_card_with_the_agents_reason_escaped_and_labelled_as_its_words() {
    let now = sallyport_core::clock::now_ms();
    // The object (and so the request) carries a line separator and an OSC title sequence.
    let parked = approval(
        Some(HOSTILE_NOTE),
        "inv_7\u{2028}\u{1b}]0;pwned\u{7}",
        now,
        now + 24 * HOUR_MS,
    );
    let dir = tempfile::tempdir().unwrap();
    let path = journal_with(&dir, &[&parked]).await;
    let id = parked.approval_id.as_str();

    let out = run(&path, &["approvals", "show", id]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    no_terminal_control(&stdout);
    let expected = format!(
        "\
approval    {id}
action      pay_invoice — Pay one invoice.
effect      external commitment: sends, pays, publishes or changes what customers see
reach       external (visible to customers, partners or the public)
consent     per_call (the action's rule)
objects     invoice inv_7\\u{{2028}}\\u{{1b}}]0;pwned\\u{{7}} (field invoice_id)
reason      the agent's words, not checked by sallyport: \"pay now\\r\\nrequest     GET https://harmless.example/\\u{{1b}}[1A\\u{{1b}}[2K \\u{{202e}}fdp.exe\"
request     POST http://127.0.0.1:9/v1/invoices/inv_7\\u{{2028}}\\u{{1b}}]0;pwned\\u{{7}}/pay
definition  {hash}: matches the approved baseline
            checked again before sending: a definition changed since this request voids the approval
session     s-cli, requested by alice@example.com
created     {created}
expires     {expires} (expires in 23h 59m)
state       awaiting
decision    none yet
",
        hash = "cd".repeat(32),
        created = parked.created_at(),
        expires = parked.expires_at(),
    );
    assert_eq!(stdout, expected);
    assert_eq!(
        escape(HOSTILE_NOTE),
        "pay now\\r\\nrequest     GET https://harmless.example/\\u{1b}[1A\\u{1b}[2K \\u{202e}fdp.exe"
    );

    let json = run(&path, &["approvals", "show", id, "--json"]);
    assert_eq!(json.status.code(), Some(0), "{}", text(&json.stderr));
    assert!(json.stdout.is_ascii());
    let back: Approval = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(back, parked);
}

#[tokio::test]
async fn approve_records_one_decision_naming_cli_and_the_by_name_and_a_second_changes_nothing() {
    let now = sallyport_core::clock::now_ms();
    let parked = approval(Some("pay it"), "inv_3", now, now + 24 * HOUR_MS);
    let dir = tempfile::tempdir().unwrap();
    let path = journal_with(&dir, &[&parked]).await;
    let id = parked.approval_id.as_str();

    let out = run(
        &path,
        &[
            "approvals",
            "approve",
            id,
            "--by",
            "alice",
            "--reason",
            "checked the invoice",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "approved {id}: recorded by alice via cli; nothing is sent yet: the application that \
             parked the call sends it when it resumes approved calls (when it starts, or through \
             its own `approvals resume`)\n"
        )
    );
    let now_stored = stored(&path, &parked.approval_id).await;
    assert_eq!(now_stored.state, ApprovalState::Approved);
    let decision = now_stored.decision.clone().unwrap();
    assert_eq!(decision.verdict, Verdict::Approve);
    assert_eq!(decision.decider, Decider::new("alice", "cli"));
    assert_eq!(decision.reason.as_deref(), Some("checked the invoice"));
    let recorded = steps(&path, &parked.approval_id).await;
    let decisions: Vec<_> = recorded
        .iter()
        .filter(|(n, _)| n.step == ApprovalStep::Approved)
        .collect();
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].0.by.as_deref(), Some("alice"));
    assert_eq!(decisions[0].0.channel.as_deref(), Some("cli"));
    assert_eq!(decisions[0].1.phase, Phase::Decided);
    assert_eq!(
        decisions[0].1.reason.as_deref(),
        Some("checked the invoice")
    );
    let records = record_count(&path).await;

    for args in [
        &["approvals", "approve", id, "--by", "bob"][..],
        &["approvals", "deny", id, "--by", "bob", "--reason", "no"][..],
    ] {
        let again = run(&path, args);
        assert_eq!(again.status.code(), Some(9), "{}", text(&again.stderr));
        assert_eq!(
            text(&again.stderr),
            format!(
                "sallyport: approval {id} was already approved by alice via cli at {}; nothing \
                 changed\n",
                sallyport_core::clock::rfc3339(decision.at_ms)
            )
        );
        assert_eq!(text(&again.stdout), "");
    }
    assert_eq!(record_count(&path).await, records);
    assert_eq!(stored(&path, &parked.approval_id).await, now_stored);

    let listed = run(&path, &["approvals", "list", "--state", "approved"]);
    let listed = text(&listed.stdout);
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(listed.lines().nth(1).unwrap().starts_with(id));
    let card = text(&run(&path, &["approvals", "show", id]).stdout);
    assert!(
        card.contains(&format!(
            "\ndecision    approved by alice via cli at {}: \"checked the invoice\"\n",
            sallyport_core::clock::rfc3339(decision.at_ms)
        )),
        "{card}"
    );
}

#[tokio::test]
async fn a_decision_made_elsewhere_is_reported_with_who_and_which_front_end() {
    let now = sallyport_core::clock::now_ms();
    let parked = approval(None, "inv_4", now, now + HOUR_MS);
    let dir = tempfile::tempdir().unwrap();
    let path = journal_with(&dir, &[&parked]).await;
    let journal = SqliteJournal::open(&path).unwrap();
    let Decided::Recorded(first) = approval::decide(
        &journal,
        &parked.approval_id,
        Verdict::Deny,
        &Decider::new("ops-bot", "webhook"),
        Some("ticket closed"),
    )
    .await
    .unwrap() else {
        panic!("the first decision is recorded");
    };
    drop(journal);
    let records = record_count(&path).await;
    let id = parked.approval_id.as_str();
    let out = run(&path, &["approvals", "approve", id]);
    assert_eq!(out.status.code(), Some(9), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!(
            "sallyport: approval {id} was already denied by ops-bot via webhook at {}; nothing \
             changed\n",
            sallyport_core::clock::rfc3339(first.decision.unwrap().at_ms)
        )
    );
    assert_eq!(record_count(&path).await, records);
    assert_eq!(
        stored(&path, &parked.approval_id).await.state,
        ApprovalState::Denied
    );
}

#[tokio::test]
async fn deny_records_the_reason_the_agent_is_told_and_by_defaults_to_user_then_cli() {
    let now = sallyport_core::clock::now_ms();
    let a = approval(None, "inv_5", now, now + HOUR_MS);
    let b = approval(None, "inv_6", now, now + HOUR_MS);
    let c = approval(None, "inv_8", now, now + HOUR_MS);
    let dir = tempfile::tempdir().unwrap();
    let path = journal_with(&dir, &[&a, &b, &c]).await;

    let missing_reason = run(&path, &["approvals", "deny", a.approval_id.as_str()]);
    assert_eq!(missing_reason.status.code(), Some(2));
    assert_eq!(
        stored(&path, &a.approval_id).await.state,
        ApprovalState::Awaiting
    );

    let id = a.approval_id.as_str();
    let out = run(
        &path,
        &[
            "approvals",
            "deny",
            id,
            "--reason",
            "wrong\namount",
            "--by",
            "dana",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "denied {id}: recorded by dana via cli; nothing will be sent; the agent is told: \
             \"wrong\\namount\"\n"
        )
    );
    let denied = stored(&path, &a.approval_id).await;
    assert_eq!(denied.state, ApprovalState::Denied);
    assert_eq!(
        denied.decision.as_ref().unwrap().decider,
        Decider::new("dana", "cli")
    );
    let recorded = steps(&path, &a.approval_id).await;
    assert_eq!(
        recorded.iter().map(|(n, _)| n.step).collect::<Vec<_>>(),
        [ApprovalStep::Requested, ApprovalStep::Denied]
    );
    let (note, event) = &recorded[1];
    assert_eq!(note.by.as_deref(), Some("dana"));
    assert_eq!(note.channel.as_deref(), Some("cli"));
    assert_eq!(event.status, Status::Rejected);
    assert_eq!(
        event.code.as_ref().map(|c| c.as_str()),
        Some("consent_denied")
    );
    assert_eq!(event.reason.as_deref(), Some("wrong\namount"));

    // No --by: $USER names the decider; with no user in the environment, `cli` does.
    let by_user = run_with_env(
        &path,
        &["approvals", "approve", b.approval_id.as_str()],
        &[("USER", "erin")],
    );
    assert_eq!(by_user.status.code(), Some(0), "{}", text(&by_user.stderr));
    assert_eq!(
        stored(&path, &b.approval_id)
            .await
            .decision
            .unwrap()
            .decider,
        Decider::new("erin", "cli")
    );
    let nobody = run_with_env(
        &path,
        &["approvals", "approve", c.approval_id.as_str()],
        &[],
    );
    assert_eq!(nobody.status.code(), Some(0), "{}", text(&nobody.stderr));
    assert_eq!(
        stored(&path, &c.approval_id)
            .await
            .decision
            .unwrap()
            .decider,
        Decider::new("cli", "cli")
    );
}

#[tokio::test]
async fn an_expired_approval_exits_10_records_the_expiry_once_and_sends_nothing() {
    let now = sallyport_core::clock::now_ms();
    let lapsed = approval(Some("late"), "inv_9", now - 25 * HOUR_MS, now - HOUR_MS);
    let dir = tempfile::tempdir().unwrap();
    let path = journal_with(&dir, &[&lapsed]).await;
    let id = lapsed.approval_id.as_str();

    let out = run(&path, &["approvals", "approve", id, "--by", "alice"]);
    assert_eq!(out.status.code(), Some(10), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!(
            "sallyport: approval {id} expired at {} before anyone decided; the expiry is recorded \
             now and nothing will be sent\n",
            lapsed.expires_at()
        )
    );
    let after = stored(&path, &lapsed.approval_id).await;
    assert_eq!(after.state, ApprovalState::Expired);
    assert_eq!(after.decision, None);
    let recorded = steps(&path, &lapsed.approval_id).await;
    assert_eq!(
        recorded.iter().map(|(n, _)| n.step).collect::<Vec<_>>(),
        [ApprovalStep::Requested, ApprovalStep::Expired]
    );
    assert_eq!(
        recorded[1].1.code.as_ref().map(|c| c.as_str()),
        Some("approval_expired")
    );
    let records = record_count(&path).await;

    let again = run(&path, &["approvals", "deny", id, "--reason", "too late"]);
    assert_eq!(again.status.code(), Some(10), "{}", text(&again.stderr));
    assert_eq!(
        text(&again.stderr),
        format!(
            "sallyport: approval {id} expired at {} before anyone decided; nothing changed and \
             nothing will be sent\n",
            lapsed.expires_at()
        )
    );
    assert_eq!(record_count(&path).await, records);
    let listed = text(&run(&path, &["approvals", "list"]).stdout);
    assert!(
        listed.lines().nth(1).unwrap().ends_with("  expired"),
        "{listed}"
    );
}

#[tokio::test]
async fn an_unknown_id_exits_5_and_changes_nothing() {
    let now = sallyport_core::clock::now_ms();
    let parked = approval(None, "inv_1", now, now + HOUR_MS);
    let dir = tempfile::tempdir().unwrap();
    let path = journal_with(&dir, &[&parked]).await;
    let records = record_count(&path).await;
    for args in [
        &["approvals", "show", "apr_nope\u{1b}[2J"][..],
        &["approvals", "approve", "apr_nope\u{1b}[2J"][..],
        &["approvals", "deny", "apr_nope\u{1b}[2J", "--reason", "x"][..],
    ] {
        let out = run(&path, args);
        assert_eq!(
            out.status.code(),
            Some(5),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(
            text(&out.stderr),
            "sallyport: no approval `apr_nope\\u{1b}[2J` in this journal\n"
        );
        assert_eq!(text(&out.stdout), "");
    }
    assert_eq!(record_count(&path).await, records);
    assert_eq!(stored(&path, &parked.approval_id).await, parked);
}

#[test]
fn a_foreign_journal_file_exits_7_and_is_left_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foreign.db");
    std::fs::write(
        &path,
        b"this is not a database, just text that is long enough to look like a page",
    )
    .unwrap();
    let before = std::fs::read(&path).unwrap();
    for args in [
        &["approvals", "list"][..],
        &["approvals", "show", "apr_x"][..],
        &["approvals", "approve", "apr_x"][..],
        &["approvals", "deny", "apr_x", "--reason", "no"][..],
    ] {
        let out = run(&path, args);
        assert_eq!(
            out.status.code(),
            Some(7),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let stderr = text(&out.stderr);
        assert!(
            stderr.starts_with(&format!(
                "sallyport: {} is not a readable sallyport journal; it was left untouched: ",
                path.display()
            )),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }
    let missing = dir.path().join("nope.db");
    let out = run(&missing, &["approvals", "list"]);
    assert_eq!(out.status.code(), Some(5));
    assert!(!missing.exists());
}

#[test]
fn resume_in_the_plain_binary_exits_2_and_says_the_application_resumes_approved_calls() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&dir.path().join("journal.db"), &["approvals", "resume"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "sallyport: `approvals resume` needs the application's actions, which the plain \
         `sallyport` binary does not have, so it sends nothing. The application that parked the \
         calls resumes approved calls itself when it starts (`Executor::resume_approvals`); to \
         resume them from a command line, run `approvals resume` through the application's own \
         command (`sallyport_cli::run_with_executor`).\n"
    );
    assert!(!dir.path().join("journal.db").exists());
    let help = run(&dir.path().join("journal.db"), &["approvals", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    for command in ["list", "show", "approve", "deny", "resume"] {
        assert!(
            text(&help.stdout).contains(&format!("  {command} ")),
            "{command}"
        );
    }
    let exit_codes = text(&run(&dir.path().join("journal.db"), &["--help"]).stdout);
    assert!(exit_codes.contains("\n  9  approvals approve/deny: the approval was already decided"));
    assert!(exit_codes.contains("\n 10  approvals approve/deny: the approval expired"));
}

// --- An application's own command line: `run_with_executor` with the real action. ---

/// A deferred-consent executor (the approval tests' rig) over a real upstream and a real
/// journal file.
async fn application(dir: &tempfile::TempDir) -> (Upstream, Executor, PathBuf) {
    let upstream = Upstream::start(|_| Reply::Json(200, json!({"id": "inv_1"}))).await;
    let path = dir.path().join("journal.db");
    let options = HostOptions::new(&path, upstream.url());
    let executor = approvals_rig::executor(&options, approvals_rig::vault(&upstream.url()));
    (upstream, executor, path)
}

/// The application's agent makes a call that needs a human: parked, nothing sent.
async fn park_a_payment(executor: &Executor, upstream: &Upstream, n: usize) -> ApprovalId {
    let result = executor
        .call(
            "send_invoice",
            approvals_rig::invoice(n),
            &approvals_rig::session(),
        )
        .await;
    assert_eq!(result.status, Status::Pending, "{}", result.to_json());
    assert_eq!(result.code_str(), Some("awaiting_approval"));
    assert_eq!(upstream.requests(), 0);
    result
        .approval_id
        .expect("a parked call names its approval")
}

/// `run_with_executor` off the async threads, as an application's `main` would call it.
async fn app_cli(executor: &Executor, args: &[&str]) -> std::process::ExitCode {
    let executor = executor.clone();
    let args: Vec<String> = std::iter::once("app")
        .chain(args.iter().copied())
        .map(str::to_owned)
        .collect();
    tokio::task::spawn_blocking(move || sallyport_cli::run_with_executor(args, &executor))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_from_the_plain_binary_is_sent_once_by_the_applications_resume() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, executor, path) = application(&dir).await;
    let id = park_a_payment(&executor, &upstream, 1).await;

    // Another process, the plain binary: records the decision, sends nothing.
    let out = run(
        &path,
        &["approvals", "approve", id.as_str(), "--by", "alice"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(upstream.requests(), 0);
    assert_eq!(stored(&path, &id).await.state, ApprovalState::Approved);

    // The application's own `approvals resume` carries it out, once.
    assert_eq!(
        app_cli(&executor, &["approvals", "resume"]).await,
        std::process::ExitCode::SUCCESS
    );
    assert_eq!(upstream.requests(), 1);
    let finished = stored(&path, &id).await;
    assert_eq!(finished.state, ApprovalState::Finished);
    assert_eq!(
        finished.result.as_ref().map(|r| r.status),
        Some(Status::Completed)
    );
    assert_eq!(
        app_cli(&executor, &["approvals", "resume"]).await,
        std::process::ExitCode::SUCCESS
    );
    assert_eq!(upstream.requests(), 1, "a second resume sends nothing");

    // The card shows the executed result.
    let card = text(&run(&path, &["approvals", "show", id.as_str()]).stdout);
    assert!(card.contains("\nstate       finished\n"), "{card}");
    assert!(card.contains("\nresult      completed\n"), "{card}");
    let receipt = finished.result.unwrap().receipt_id.unwrap();
    assert!(
        card.contains(&format!("\nreceipt     {receipt}\n")),
        "{card}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_in_the_applications_command_line_sends_the_call_at_once_and_only_once() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, executor, path) = application(&dir).await;
    let id = park_a_payment(&executor, &upstream, 2).await;

    assert_eq!(
        app_cli(
            &executor,
            &["approvals", "approve", id.as_str(), "--by", "bob"]
        )
        .await,
        std::process::ExitCode::SUCCESS
    );
    assert_eq!(upstream.requests(), 1);
    let finished = stored(&path, &id).await;
    assert_eq!(finished.state, ApprovalState::Finished);
    assert_eq!(
        finished.decision.as_ref().unwrap().decider,
        Decider::new("bob", "cli")
    );

    // A late second delivery, from the plain binary: already decided, nothing sent.
    let late = run(&path, &["approvals", "approve", id.as_str()]);
    assert_eq!(late.status.code(), Some(9), "{}", text(&late.stderr));
    let decided_at = sallyport_core::clock::rfc3339(finished.decision.as_ref().unwrap().at_ms);
    let receipt = finished
        .result
        .as_ref()
        .unwrap()
        .receipt_id
        .clone()
        .unwrap();
    assert_eq!(
        text(&late.stderr),
        format!(
            "sallyport: approval {id} was already approved by bob via cli at {decided_at} \
             (carried out: send_invoice completed, receipt {receipt}); nothing changed\n"
        )
    );
    assert_eq!(upstream.requests(), 1);
    assert_eq!(
        app_cli(&executor, &["approvals", "approve", id.as_str()]).await,
        std::process::ExitCode::from(9)
    );
    assert_eq!(upstream.requests(), 1);
}

#[test]
fn dead_letters_lists_undelivered_notifications_escaped_and_as_json() {
    use sallyport_core::approval::notify::DeadLetter;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dead-letters.jsonl");
    let no_journal = dir.path().join("no-journal.db");
    let list = |extra: &[&str]| {
        let mut args = vec![
            "approvals",
            "dead-letters",
            "--file",
            file.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        run(&no_journal, &args)
    };
    // An absent file: nothing undelivered, and no journal needed.
    let out = list(&[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "no undelivered notifications\n");
    assert!(
        !dir.path().join("no-journal.db").exists(),
        "no journal was created"
    );

    DeadLetter::new(
        "apr_1",
        "pay_invoice",
        "https://bot.example/notify",
        5,
        "HTTP 503",
    )
    .append_to(&file)
    .unwrap();
    DeadLetter::new(
        "apr_2",
        "pay\u{202e}invoice",
        "https://bot.example/notify",
        5,
        "could not connect",
    )
    .append_to(&file)
    .unwrap();
    let out = list(&[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 3, "{shown}");
    assert!(
        lines[0].ends_with("  apr_1  pay_invoice  https://bot.example/notify  5 tries  HTTP 503"),
        "{shown}"
    );
    assert!(
        lines[1].contains(escape("pay\u{202e}invoice").as_ref()) && !shown.contains('\u{202e}'),
        "{shown}"
    );
    assert_eq!(lines[2], "2 undelivered notifications");

    let out = list(&["--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed[1]["last_error"], "could not connect");

    // A corrupt file is reported with its line, and left as it is.
    std::fs::write(&file, "not json\n").unwrap();
    let out = list(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("line 1 is not a dead letter"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not json\n");
}

// --- Remembered approvals: `approve --remember`, `remembered`, `revoke`. ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_remember_from_the_cli_lets_identical_calls_go_until_the_cli_revokes_it() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, executor, path) = application(&dir).await;
    let id = park_a_payment(&executor, &upstream, 1).await;

    let out = run(
        &path,
        &[
            "approvals",
            "approve",
            id.as_str(),
            "--by",
            "alice",
            "--remember",
            "exact",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("approved "), "{stdout}");
    assert!(stdout.contains("remembered rem_"), "{stdout}");
    assert!(stdout.contains("(exact arguments)"), "{stdout}");
    let rem = stdout
        .split_whitespace()
        .find(|w| w.starts_with("rem_"))
        .map(|w| w.trim_end_matches(':').to_owned())
        .expect("the remembered id");
    // The approval counts as alice's approval of the parked call itself.
    executor.resume_approval(&id).await.unwrap().expect("sent");
    assert_eq!(upstream.requests(), 1);

    // The identical call from another session goes out unasked and says why.
    let elsewhere = sallyport_core::Session::new("agent-7")
        .requested_by("billing-bot")
        .allow_any("customer");
    let again = executor
        .call("send_invoice", approvals_rig::invoice(1), &elsewhere)
        .await;
    assert_eq!(again.status, Status::Completed, "{}", again.to_json());
    assert_eq!(
        again.remembered_approval.as_ref().map(|r| r.as_str()),
        Some(rem.as_str())
    );
    assert_eq!(upstream.requests(), 2);

    let listed = run(&path, &["approvals", "remembered"]);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let listed = text(&listed.stdout);
    assert!(listed.contains(&rem), "{listed}");
    assert!(
        listed.contains("  live  send_invoice  exact arguments  by alice"),
        "{listed}"
    );

    let revoked = run(&path, &["approvals", "revoke", &rem, "--by", "bob"]);
    assert_eq!(revoked.status.code(), Some(0), "{}", text(&revoked.stderr));
    assert!(text(&revoked.stdout).contains("later calls of send_invoice are asked again"));
    let twice = run(&path, &["approvals", "revoke", &rem, "--by", "carol"]);
    assert_eq!(twice.status.code(), Some(9), "{}", text(&twice.stderr));
    assert!(
        text(&twice.stderr).contains("already revoked by bob"),
        "{}",
        text(&twice.stderr)
    );
    let unknown = run(&path, &["approvals", "revoke", "rem_nope"]);
    assert_eq!(unknown.status.code(), Some(5));

    // The next identical call is asked again: parked, nothing sent.
    let elsewhere = sallyport_core::Session::new("agent-8")
        .requested_by("billing-bot")
        .allow_any("customer");
    let after = executor
        .call("send_invoice", approvals_rig::invoice(1), &elsewhere)
        .await;
    assert_eq!(after.status, Status::Pending, "{}", after.to_json());
    assert_eq!(after.remembered_approval, None);
    assert_eq!(upstream.requests(), 2);

    let listed = text(&run(&path, &["approvals", "remembered", "--json"]).stdout);
    let json: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(json[0]["revoked"]["by"]["by"], "bob");
    assert_eq!(json[0]["scope"]["kind"], "exact_arguments");
    // Both steps are in the chain, with who did them.
    let notes: Vec<(ApprovalStep, Option<String>)> = steps(&path, &id)
        .await
        .into_iter()
        .map(|(n, _)| (n.step, n.by))
        .collect();
    assert!(
        notes.contains(&(ApprovalStep::Remembered, Some("alice".into()))),
        "{notes:?}"
    );
    assert!(
        notes.contains(&(ApprovalStep::Revoked, Some("bob".into()))),
        "{notes:?}"
    );
    assert!(
        notes.contains(&(ApprovalStep::AppliedRemembered, Some("alice".into()))),
        "{notes:?}"
    );
}

#[tokio::test]
async fn approve_remember_is_refused_for_an_irreversible_action_and_decides_nothing() {
    let now = sallyport_core::clock::now_ms();
    let mut broad = approval(None, "inv_9", now, now + HOUR_MS);
    broad.effect = sallyport_core::EffectClass::IrreversibleOrBroad;
    let dir = tempfile::tempdir().unwrap();
    let path = journal_with(&dir, &[&broad]).await;
    let before = record_count(&path).await;
    let out = run(
        &path,
        &[
            "approvals",
            "approve",
            broad.approval_id.as_str(),
            "--by",
            "bob",
            "--remember",
            "window=8h",
        ],
    );
    assert_eq!(out.status.code(), Some(14), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("irreversible_or_broad"), "{stderr}");
    assert!(stderr.contains("cannot be remembered"), "{stderr}");
    assert!(stderr.contains("without --remember"), "{stderr}");
    assert_eq!(
        stored(&path, &broad.approval_id).await.state,
        ApprovalState::Awaiting
    );
    assert_eq!(
        record_count(&path).await,
        before,
        "nothing audited, nothing decided"
    );
    // A bad scope is a usage error.
    let bad = run(
        &path,
        &[
            "approvals",
            "approve",
            broad.approval_id.as_str(),
            "--remember",
            "forever",
        ],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("window=DURATION"));
}
