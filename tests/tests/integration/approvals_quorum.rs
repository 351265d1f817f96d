//! Approvers with identity, authority and quorum (issue 38 §1–3), with real processes: the
//! application's own command line (`sallyport_cli::run_with_executor`, one `approvals-host
//! cli` process per decision) and a signed webhook served by another executor, over one
//! SQLite journal file, a real HTTP upstream that counts requests, and Cedar decision policies.

use std::process::{Child, Command, Output};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sallyport_core::Executor;
use sallyport_core::approval::{
    Approval, ApprovalId, ApprovalState, ApprovalStep, Decided, Decider, DecisionRefusal, Verdict,
};
use sallyport_core::journal::{AuditEvent, Phase};
use sallyport_core::{RefusalCode, Status};
use sallyport_tests::approvals_rig::{self, HostOptions};
use sallyport_tests::http_server::{Received, Reply, Upstream};
use serde_json::{Value, json};

/// The session's requester (`approvals_rig::session`).
const REQUESTER: &str = "billing-bot";

/// Only the payments group decides invoices; nobody decides for more than 10 invoices' worth
/// of objects (a rule that never fires here, so the forbid path is exercised by its absence).
const POLICY: &str = r#"
@id("payments-decide-invoices")
permit (principal, action == Action::"decide", resource)
when { principal.groups.contains("payments") && resource.action == "send_invoice" };
@id("external-needs-two")
@reason("external commitments need a quorum of at least two")
forbid (principal, action == Action::"decide", resource)
when { resource.effect == "external_commitment" && resource.required_approvals < 2 };
"#;

fn reply(r: &Received) -> Reply {
    if r.method == "POST" && r.path == "/v1/invoices" {
        Reply::Idempotent(None)
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

struct Rig {
    upstream: Upstream,
    options: HostOptions,
    /// The PostgreSQL database the journal is in (`None`: a SQLite file).
    postgres: Option<sallyport_tests::postgres::TestDb>,
    /// The webhook's executor (in this process).
    executor: Executor,
    url: String,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

async fn rig(approvals: u32, policy: Option<&str>) -> Rig {
    rig_on(approvals, policy, false).await
}

/// A rig whose journal is a SQLite file, or with `postgres` a fresh PostgreSQL database.
async fn rig_on(approvals: u32, policy: Option<&str>, postgres: bool) -> Rig {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = if postgres {
        Some(sallyport_tests::postgres::TestDb::create().await)
    } else {
        None
    };
    let journal = db.as_ref().map_or_else(
        || dir.path().join("journal.db"),
        |db| std::path::PathBuf::from(&db.url),
    );
    let mut options = HostOptions::new(journal, upstream.url());
    options.approvals = approvals;
    if let Some(text) = policy {
        let path = dir.path().join("decide.cedar");
        std::fs::write(&path, text).expect("policy file");
        options.decision_policy = Some(path);
    }
    let vault = approvals_rig::vault(&options.upstream);
    let executor = match &db {
        Some(db) => {
            let journal = sallyport_postgres::PostgresJournal::connect(&db.url)
                .await
                .expect("connect");
            approvals_rig::executor_on(&options, vault, std::sync::Arc::new(journal))
        }
        None => approvals_rig::executor(&options, vault),
    };
    let url = serve_webhook(&executor).await;
    #[allow(
        deprecated,
        reason = "ring, as sallyport-http's channel: rustls 0.23.48 names no replacement that keeps ring"
    )]
    let _ = rustls::crypto::ring::default_provider().install_default();
    Rig {
        upstream,
        options,
        postgres: db,
        executor,
        url,
        client: reqwest::Client::new(),
        _dir: dir,
    }
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

struct WebhookAnswer {
    status: u16,
    json: Value,
}

impl Rig {
    fn host(&self, extra: &[&str], command: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_approvals-host"));
        cmd.arg(&self.options.journal)
            .arg(&self.options.upstream)
            .arg("--approvals")
            .arg(self.options.approvals.to_string());
        if let Some(policy) = &self.options.decision_policy {
            cmd.arg("--decision-policy").arg(policy);
        }
        if self.postgres.is_some() {
            cmd.arg("--postgres");
        }
        cmd.args(extra)
            .args(command)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        cmd
    }

    /// Parks invoices `0..n` from another process; their approval ids.
    async fn park(&self, n: usize) -> Vec<ApprovalId> {
        let mut cmd = self.host(&[], &["park", &n.to_string()]);
        let out = tokio::task::spawn_blocking(move || cmd.output().expect("park"))
            .await
            .expect("join");
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| ApprovalId::from_stored(l.trim().to_owned()))
            .collect()
    }

    /// Starts the application's command line deciding `id` as `by` at `start` (Unix ms).
    fn cli(&self, start: u64, verdict: &str, id: &ApprovalId, by: &str, more: &[&str]) -> Child {
        let mut args = vec![
            "cli".to_owned(),
            start.to_string(),
            "approvals".to_owned(),
            verdict.to_owned(),
            id.as_str().to_owned(),
            "--by".to_owned(),
            by.to_owned(),
        ];
        if verdict == "deny" {
            args.extend(["--reason".to_owned(), "not this month".to_owned()]);
        }
        args.extend(more.iter().map(|s| (*s).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.host(&[], &args).spawn().expect("spawn")
    }

    /// Posts a signed decision to the webhook.
    async fn webhook(
        &self,
        id: &ApprovalId,
        decision: &str,
        by: &str,
        groups: &[&str],
    ) -> WebhookAnswer {
        let body = serde_json::to_vec(&json!({
            "approval_id": id, "decision": decision, "decided_by": by,
            "approver_name": format!("{by} (chat)"), "approver_groups": groups,
        }))
        .expect("json");
        let t = now_ms() / 1000;
        let signature = sallyport_webhook::sign(approvals_rig::WEBHOOK_SECRET.as_bytes(), t, &body);
        let response = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header(sallyport_webhook::SIGNATURE_HEADER, signature)
            .body(body)
            .send()
            .await
            .expect("webhook answers");
        let status = response.status().as_u16();
        let json = serde_json::from_str(&response.text().await.expect("body")).expect("JSON");
        WebhookAnswer { status, json }
    }

    async fn approval(&self, id: &ApprovalId) -> Approval {
        self.executor
            .approval_store()
            .expect("store")
            .approval(id)
            .await
            .expect("read")
            .expect("stored")
    }

    /// The decision records of `id` (phase `decided`), in chain order.
    async fn decisions(&self, id: &ApprovalId) -> Vec<AuditEvent> {
        self.executor
            .journal()
            .records()
            .await
            .expect("records")
            .into_iter()
            .map(|r| r.event)
            .filter(|e| {
                e.phase == Phase::Decided
                    && e.approval.as_ref().is_some_and(|n| &n.approval_id == id)
            })
            .collect()
    }

    /// Every record of the parked call's attempt and of its execution, in chain order.
    async fn records_of(&self, approval: &Approval) -> Vec<AuditEvent> {
        let execution = approval.execution.clone();
        self.executor
            .journal()
            .records()
            .await
            .expect("records")
            .into_iter()
            .map(|r| r.event)
            .filter(|e| {
                e.attempt_id == approval.attempt_id || Some(&e.attempt_id) == execution.as_ref()
            })
            .collect()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

async fn wait(child: Child) -> Output {
    tokio::task::spawn_blocking(move || child.wait_with_output().expect("wait"))
        .await
        .expect("join")
}

fn step(e: &AuditEvent) -> ApprovalStep {
    e.approval.as_ref().expect("note").step
}

fn by(e: &AuditEvent) -> String {
    e.approval.as_ref().and_then(|n| n.by.clone()).expect("by")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_three_raced_across_cli_processes_and_a_webhook_sends_once_when_the_second_lands() {
    race_two_of_three(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_two_of_three_raced_across_cli_processes_and_a_webhook_sends_once() {
    race_two_of_three(true).await;
}

/// 50 rounds: two CLI processes (alice, bob) and a signed webhook (carol), all of the payments
/// group, approve one 2-of-3 call at the same instant.
async fn race_two_of_three(postgres: bool) {
    const ROUNDS: usize = 50;
    let rig = rig_on(2, Some(POLICY), postgres).await;
    let ids = rig.park(ROUNDS).await;
    assert_eq!(ids.len(), ROUNDS);
    let mut webhook_completed = 0;
    let mut cli_completed = 0;
    for (round, id) in ids.iter().enumerate() {
        let start = now_ms() + 250;
        let alice = rig.cli(start, "approve", id, "alice", &["--group", "payments"]);
        let bob = rig.cli(start, "approve", id, "bob", &["--group", "payments"]);
        tokio::time::sleep(Duration::from_millis(start.saturating_sub(now_ms()))).await;
        let carol = rig.webhook(id, "approve", "carol", &["payments"]).await;
        let outputs = [wait(alice).await, wait(bob).await];
        assert_eq!(carol.status, 200, "round {round}: {}", carol.json);

        // Exactly one request, whoever completed the quorum.
        assert_eq!(
            posts_for(&rig.upstream, round),
            1,
            "round {round}: one request"
        );
        let stored = rig.approval(id).await;
        assert_eq!(stored.state, ApprovalState::Finished, "round {round}");
        let counted: Vec<&str> = stored
            .approvals
            .iter()
            .map(|a| a.decider.by.as_str())
            .collect();
        assert_eq!(counted.len(), 2, "round {round}: {counted:?}");
        assert_ne!(counted[0], counted[1], "round {round}: distinct approvers");
        // The chain: one `counted`, then one `approved` naming the second approver with 2 of
        // 2, then the execution; nothing else was recorded for the third.
        let decisions = rig.decisions(id).await;
        let steps: Vec<ApprovalStep> = decisions.iter().map(step).collect();
        assert_eq!(
            steps,
            [ApprovalStep::Counted, ApprovalStep::Approved],
            "round {round}"
        );
        assert_eq!(by(&decisions[0]), counted[0], "round {round}");
        assert_eq!(by(&decisions[1]), counted[1], "round {round}");
        let last = decisions[1].approval.as_ref().expect("note");
        assert_eq!((last.approvals, last.required), (Some(2), Some(2)));
        let records = rig.records_of(&stored).await;
        let approved_at = records
            .iter()
            .position(|e| {
                e.approval
                    .as_ref()
                    .is_some_and(|n| n.step == ApprovalStep::Approved)
            })
            .expect("approved record");
        let executed_at = records
            .iter()
            .position(|e| e.dispatches > 0)
            .expect("the execution's record");
        assert!(
            approved_at < executed_at,
            "round {round}: sent only after the second approval"
        );
        // Every front end answered truthfully: two decisions landed, one was told it was late.
        let said: Vec<String> = outputs
            .iter()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .collect();
        let cli_landed = outputs
            .iter()
            .filter(|o| o.status.code() == Some(0))
            .count();
        let webhook_landed = usize::from(carol.json["recorded"] == true);
        assert_eq!(
            cli_landed + webhook_landed,
            2,
            "round {round}: {said:?} / {}",
            carol.json
        );
        if webhook_landed == 1 && carol.json["state"] == "finished" {
            webhook_completed += 1;
        } else {
            cli_completed += 1;
        }
        for o in &outputs {
            let code = o.status.code();
            assert!(
                code == Some(0) || code == Some(9),
                "round {round}: {}",
                text(o)
            );
        }
    }
    eprintln!(
        "the webhook completed {webhook_completed} quorums, the CLI processes {cli_completed}"
    );
    assert_eq!(rig.upstream.requests(), ROUNDS as u64);
    let report = rig.executor.journal().verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_approver_through_the_cli_and_the_webhook_at_once_counts_once() {
    the_same_approver_through_the_cli_and_the_webhook_at_once_counts_once_on(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_the_same_approver_through_the_cli_and_the_webhook_at_once_counts_once() {
    the_same_approver_through_the_cli_and_the_webhook_at_once_counts_once_on(true).await;
}

async fn the_same_approver_through_the_cli_and_the_webhook_at_once_counts_once_on(postgres: bool) {
    const ROUNDS: usize = 10;
    let rig = rig_on(2, None, postgres).await;
    let ids = rig.park(ROUNDS).await;
    for (round, id) in ids.iter().enumerate() {
        let start = now_ms() + 250;
        let cli = rig.cli(start, "approve", id, "alice", &[]);
        let cli_again = rig.cli(start, "approve", id, "alice", &[]);
        tokio::time::sleep(Duration::from_millis(start.saturating_sub(now_ms()))).await;
        let hook = rig.webhook(id, "approve", "alice", &[]).await;
        let outputs = [wait(cli).await, wait(cli_again).await];
        assert_eq!(hook.status, 200, "{}", hook.json);
        let stored = rig.approval(id).await;
        assert_eq!(stored.state, ApprovalState::Awaiting, "round {round}");
        assert_eq!(stored.approval_count(), 1, "round {round}");
        assert_eq!(
            posts_for(&rig.upstream, round),
            0,
            "round {round}: nothing sent"
        );
        let steps: Vec<_> = rig.decisions(id).await.iter().map(step).collect();
        assert_eq!(steps, [ApprovalStep::Counted], "round {round}");
        let landed = outputs
            .iter()
            .filter(|o| o.status.code() == Some(0))
            .count()
            + usize::from(hook.json["recorded"] == true);
        assert_eq!(landed, 1, "round {round}");
        for o in &outputs {
            let out = String::from_utf8_lossy(&o.stdout).into_owned()
                + &String::from_utf8_lossy(&o.stderr);
            match o.status.code() {
                Some(0) => assert!(out.contains("1 of 2 approvals"), "{out}"),
                Some(9) => assert!(out.contains("already counted"), "{out}"),
                other => panic!("round {round}: exit {other:?}: {out}"),
            }
        }
        // A second, distinct approver completes it.
        let bob = wait(rig.cli(now_ms(), "approve", id, "bob", &[])).await;
        assert_eq!(bob.status.code(), Some(0), "{}", text(&bob));
        assert_eq!(posts_for(&rig.upstream, round), 1, "round {round}");
        assert_eq!(rig.approval(id).await.state, ApprovalState::Finished);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_denial_first_ends_a_quorum_and_nothing_is_sent() {
    one_denial_first_ends_a_quorum_and_nothing_is_sent_on(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_one_denial_first_ends_a_quorum_and_nothing_is_sent() {
    one_denial_first_ends_a_quorum_and_nothing_is_sent_on(true).await;
}

async fn one_denial_first_ends_a_quorum_and_nothing_is_sent_on(postgres: bool) {
    let rig = rig_on(2, None, postgres).await;
    let ids = rig.park(3).await;
    for (round, id) in ids.iter().enumerate() {
        let denied = wait(rig.cli(now_ms(), "deny", id, "dana", &[])).await;
        assert_eq!(denied.status.code(), Some(0), "{}", text(&denied));
        let start = now_ms() + 200;
        let alice = rig.cli(start, "approve", id, "alice", &[]);
        tokio::time::sleep(Duration::from_millis(start.saturating_sub(now_ms()))).await;
        let carol = rig.webhook(id, "approve", "carol", &[]).await;
        let alice = wait(alice).await;
        assert_eq!(alice.status.code(), Some(9), "{}", text(&alice));
        assert_eq!(carol.status, 200);
        assert_eq!(carol.json["recorded"], false);
        assert_eq!(carol.json["state"], "denied");
        let stored = rig.approval(id).await;
        assert_eq!(stored.state, ApprovalState::Denied);
        assert!(stored.approvals.is_empty());
        assert_eq!(posts_for(&rig.upstream, round), 0, "round {round}");
    }
    assert_eq!(rig.upstream.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_requester_is_refused_on_every_front_end_and_each_refusal_is_audited() {
    the_requester_is_refused_on_every_front_end_and_each_refusal_is_audited_on(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_the_requester_is_refused_on_every_front_end_and_each_refusal_is_audited() {
    the_requester_is_refused_on_every_front_end_and_each_refusal_is_audited_on(true).await;
}

async fn the_requester_is_refused_on_every_front_end_and_each_refusal_is_audited_on(
    postgres: bool,
) {
    let rig = rig_on(1, None, postgres).await;
    let id = rig.park(1).await.remove(0);

    let cli = wait(rig.cli(now_ms(), "approve", &id, REQUESTER, &[])).await;
    assert_eq!(cli.status.code(), Some(14), "{}", text(&cli));
    let said = String::from_utf8_lossy(&cli.stderr);
    assert!(said.contains("separation of duties"), "{said}");

    let hook = rig.webhook(&id, "approve", REQUESTER, &[]).await;
    assert_eq!(hook.status, 403);
    assert_eq!(hook.json["error"], "decision_refused");

    // The console and every other front end decide through Executor::decide.
    let console = rig
        .executor
        .decide(
            &id,
            Verdict::Approve,
            &Decider::new(REQUESTER, "console"),
            None,
        )
        .await
        .expect("decide");
    let Decided::Refused {
        refusal, reason, ..
    } = &console
    else {
        panic!("{console:?}");
    };
    assert_eq!(*refusal, DecisionRefusal::SelfApproval);
    assert!(reason.contains("separation of duties"), "{reason}");

    let stored = rig.approval(&id).await;
    assert_eq!(stored.state, ApprovalState::Awaiting, "nothing changed");
    assert_eq!(stored.decision, None);
    assert_eq!(rig.upstream.requests(), 0);
    let decisions = rig.decisions(&id).await;
    let audited: Vec<(
        ApprovalStep,
        Option<DecisionRefusal>,
        Option<String>,
        Status,
    )> = decisions
        .iter()
        .map(|e| {
            let n = e.approval.as_ref().expect("note");
            (n.step, n.refusal, n.channel.clone(), e.status)
        })
        .collect();
    assert_eq!(
        audited,
        ["cli", "webhook", "console"].map(|c| (
            ApprovalStep::Refused,
            Some(DecisionRefusal::SelfApproval),
            Some(c.to_owned()),
            Status::Pending
        ))
    );
    // The webhook's refusal names the key that authenticated it and the approver's name.
    let hook_note = decisions[1].approval.as_ref().expect("note");
    assert_eq!(
        hook_note.key_id.as_deref(),
        Some(approvals_rig::WEBHOOK_CREDENTIAL)
    );
    assert_eq!(hook_note.name.as_deref(), Some("billing-bot (chat)"));

    // Another approver still decides it.
    let ok = wait(rig.cli(now_ms(), "approve", &id, "alice", &[])).await;
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    assert_eq!(rig.upstream.requests(), 1);
    assert!(
        rig.executor
            .journal()
            .verify()
            .await
            .expect("verify")
            .is_intact()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_outside_the_decision_policy_is_refused_on_the_cli_and_the_webhook_and_audited()
{
    an_approver_outside_the_decision_policy_is_refused_on_the_cli_and_the_webhook_and_audited_on(
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_an_approver_outside_the_decision_policy_is_refused_on_the_cli_and_the_webhook_and_audited()
 {
    an_approver_outside_the_decision_policy_is_refused_on_the_cli_and_the_webhook_and_audited_on(
        true,
    )
    .await;
}

async fn an_approver_outside_the_decision_policy_is_refused_on_the_cli_and_the_webhook_and_audited_on(
    postgres: bool,
) {
    let rig = rig_on(2, Some(POLICY), postgres).await;
    let id = rig.park(1).await.remove(0);

    let cli = wait(rig.cli(now_ms(), "approve", &id, "mallory", &["--group", "sales"])).await;
    assert_eq!(cli.status.code(), Some(14), "{}", text(&cli));
    let said = String::from_utf8_lossy(&cli.stderr);
    assert!(
        said.contains("`mallory` has no authority") && said.contains("no decision policy"),
        "{said}"
    );
    let hook = rig.webhook(&id, "approve", "trent", &["sales"]).await;
    assert_eq!(hook.status, 403, "{}", hook.json);
    assert_eq!(hook.json["error"], "decision_refused");
    // A denial needs authority too.
    let deny = wait(rig.cli(now_ms(), "deny", &id, "mallory", &[])).await;
    assert_eq!(deny.status.code(), Some(14), "{}", text(&deny));

    let stored = rig.approval(&id).await;
    assert_eq!(stored.state, ApprovalState::Awaiting);
    assert!(stored.approvals.is_empty());
    let decisions = rig.decisions(&id).await;
    let audited: Vec<(String, Option<DecisionRefusal>, Vec<String>)> = decisions
        .iter()
        .map(|e| {
            let n = e.approval.as_ref().expect("note");
            (by(e), n.refusal, n.groups.clone())
        })
        .collect();
    assert_eq!(
        audited,
        [
            (
                "mallory".to_owned(),
                Some(DecisionRefusal::NoAuthority),
                vec!["sales".to_owned()]
            ),
            (
                "trent".to_owned(),
                Some(DecisionRefusal::NoAuthority),
                vec!["sales".to_owned()]
            ),
            (
                "mallory".to_owned(),
                Some(DecisionRefusal::NoAuthority),
                vec![]
            ),
        ]
    );
    assert!(
        decisions[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("no authority")),
        "{:?}",
        decisions[0].reason
    );

    // Two approvers of the payments group are sent it.
    let a = wait(rig.cli(now_ms(), "approve", &id, "alice", &["--group", "payments"])).await;
    assert_eq!(a.status.code(), Some(0), "{}", text(&a));
    assert_eq!(rig.upstream.requests(), 0, "one of two is not enough");
    let b = rig.webhook(&id, "approve", "bob", &["payments"]).await;
    assert_eq!(b.status, 200, "{}", b.json);
    assert_eq!(b.json["state"], "finished");
    assert_eq!(rig.upstream.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_forbid_states_its_reason_to_the_refused_approver() {
    // A quorum of one for an external commitment: the forbid fires for everyone.
    let rig = rig(1, Some(POLICY)).await;
    let id = rig.park(1).await.remove(0);
    let decided = rig
        .executor
        .decide(
            &id,
            Verdict::Approve,
            &Decider::new("alice", "console").with_groups(["payments"]),
            None,
        )
        .await
        .expect("decide");
    let Decided::Refused {
        refusal, reason, ..
    } = decided
    else {
        panic!("{decided:?}");
    };
    assert_eq!(refusal, DecisionRefusal::NoAuthority);
    assert!(
        reason.contains("external commitments need a quorum of at least two"),
        "{reason}"
    );
    assert_eq!(rig.upstream.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_cli_decision_verifies_later_and_a_tampered_one_does_not() {
    let rig = rig(2, None).await;
    let ids = rig.park(1).await;
    let id = &ids[0];
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("alice.key");
    let keygen = wait(
        rig.host(&[], &["cli", "0", "approvals", "keygen"])
            .arg(&key)
            .spawn()
            .expect("spawn"),
    )
    .await;
    assert_eq!(keygen.status.code(), Some(0), "{}", text(&keygen));
    let public = String::from_utf8_lossy(&keygen.stdout).trim().to_owned();
    assert_eq!(public.len(), 64, "{public}");
    let key_text = key.to_string_lossy().into_owned();

    let signed = wait(rig.cli(
        now_ms(),
        "approve",
        id,
        "alice",
        &["--key", &key_text, "--name", "Alice A."],
    ))
    .await;
    assert_eq!(signed.status.code(), Some(0), "{}", text(&signed));
    let stored = rig.approval(id).await;
    let signature = stored.approvals[0]
        .decider
        .signature
        .clone()
        .expect("signed");
    assert_eq!(signature.public_key, public);
    assert_eq!(
        stored.approvals[0].decider.name.as_deref(),
        Some("Alice A.")
    );
    // The audit record carries the signature too.
    let decisions = rig.decisions(id).await;
    assert_eq!(
        decisions[0]
            .approval
            .as_ref()
            .and_then(|n| n.signature.clone()),
        Some(signature.clone())
    );

    let verify = |extra: Vec<String>| {
        let mut args = vec![
            "cli".to_owned(),
            "0".to_owned(),
            "approvals".to_owned(),
            "verify".to_owned(),
            id.as_str().to_owned(),
        ];
        args.extend(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        rig.host(&[], &args).spawn().expect("spawn")
    };
    let ok = wait(verify(vec!["--public-key".into(), public.clone()])).await;
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    assert!(
        String::from_utf8_lossy(&ok.stdout).starts_with("valid "),
        "{}",
        text(&ok)
    );
    let other = "11".repeat(32);
    let wrong = wait(verify(vec!["--public-key".into(), other])).await;
    assert_eq!(wrong.status.code(), Some(13), "{}", text(&wrong));

    // A signature moved to another verdict does not verify, and is refused when it is used.
    let mut forged = Decider::new("alice", "cli").with_signature(signature);
    forged.by = "alice".into();
    let decided = sallyport_core::approval::decide(
        rig.executor.approval_store().expect("store").as_ref(),
        id,
        Verdict::Deny,
        &forged,
        Some("forged"),
    )
    .await
    .expect("decide");
    assert!(
        matches!(
            decided,
            Decided::Refused {
                refusal: DecisionRefusal::BadSignature,
                ..
            }
        ),
        "{decided:?}"
    );
    assert_eq!(rig.approval(id).await.state, ApprovalState::Awaiting);
    assert_eq!(rig.upstream.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_that_expires_half_approved_is_reported_expired_never_denied() {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut options = HostOptions::new(dir.path().join("journal.db"), upstream.url());
    options.approvals = 2;
    options.expiry = Duration::from_millis(700);
    let executor = approvals_rig::executor(&options, approvals_rig::vault(&options.upstream));
    let session = approvals_rig::session();
    let parked = executor
        .call("send_invoice", approvals_rig::invoice(7), &session)
        .await;
    let id = parked.approval_id.clone().expect("parked");
    let first = executor
        .decide(&id, Verdict::Approve, &Decider::new("alice", "cli"), None)
        .await
        .expect("decide");
    assert!(matches!(&first, Decided::Recorded(a) if a.state == ApprovalState::Awaiting));
    tokio::time::sleep(Duration::from_millis(800)).await;
    let late = executor
        .decide(&id, Verdict::Approve, &Decider::new("bob", "webhook"), None)
        .await
        .expect("decide");
    assert!(
        matches!(&late, Decided::Expired(a) if a.state == ApprovalState::Expired),
        "{late:?}"
    );
    let check = executor
        .call("check_approval", json!({"approval_id": id}), &session)
        .await;
    assert_eq!(check.status, Status::Rejected, "{}", check.to_json());
    assert_eq!(
        check.code_str(),
        Some(RefusalCode::ApprovalExpired.as_str())
    );
    assert_ne!(check.code_str(), Some(RefusalCode::ConsentDenied.as_str()));
    assert_eq!(check.data.as_ref().expect("data")["state"], "expired");
    let stored = executor
        .approval_store()
        .expect("store")
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.decision, None, "no denial is recorded");
    assert_eq!(upstream.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_configured_never_to_expire_says_so_and_single_approvals_keep_their_json() {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    let journal = sallyport_core::journal::SqliteJournal::open(&path).expect("journal");
    let executor = Executor::builder(approvals_rig::catalog(&HostOptions::new(
        &path,
        upstream.url(),
    )))
    .journal(journal)
    .channel(
        sallyport_http::HttpChannel::builder()
            .build()
            .expect("channel"),
    )
    .vault_arc(approvals_rig::vault(&upstream.url()))
    .consent_mode(sallyport_core::ConsentMode::Deferred)
    .approval_expiry_for("send_invoice", None)
    .build()
    .expect("executor");
    let parked = executor
        .call(
            "send_invoice",
            approvals_rig::invoice(3),
            &approvals_rig::session(),
        )
        .await;
    let id = parked.approval_id.clone().expect("parked");
    let stored = executor
        .approval_store()
        .expect("store")
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(
        stored.expires_at_ms,
        sallyport_core::approval::NEVER_EXPIRES
    );
    assert_eq!(stored.expires_at(), "never");
    assert_eq!(stored.required_approvals, 1);
    let json = serde_json::to_value(&stored).expect("json");
    assert!(json.get("required_approvals").is_none() && json.get("approvals").is_none());
    let decided = executor
        .decide(&id, Verdict::Approve, &Decider::new("alice", "cli"), None)
        .await
        .expect("decide");
    assert_eq!(decided.approval().state, ApprovalState::Finished);
    let events: Vec<Value> = executor
        .journal()
        .records()
        .await
        .expect("records")
        .into_iter()
        .filter(|r| r.event.phase == Phase::Decided)
        .map(|r| serde_json::to_value(&r.event).expect("json"))
        .collect();
    // A single approver's decision record has today's approval note: id, step, by, channel.
    assert_eq!(
        events[0]["approval"],
        json!({"approval_id": id, "step": "approved", "by": "alice", "channel": "cli"})
    );
    assert_eq!(upstream.requests(), 1);
}
