//! The executor pipeline end to end, with a scripted channel that counts dispatches and a real
//! SQLite journal file. Every refusal dispatches nothing and leaves exactly one audit record.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sallyport_core::channel::ChannelOutcome;
use sallyport_core::code::{ConsentOutcome, RefusalCode, UpstreamCode};
use sallyport_core::consent::{ConsentDecision, ConsentRequest, FnConsent};
use sallyport_core::drift::DriftMode;
use sallyport_core::journal::{AuditRecord, Journal, Phase, SqliteJournal};
use sallyport_core::outcome::{Origin, Status};
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_tests::scripted::{ScriptedChannel, Step};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Read one build of a project.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
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
    limit: Option<u32>,
}

/// Queue one tested build for the preview environment.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(
    name = "create_deployment",
    effect = external_commitment,
    retry = idempotency_key,
    reconcile = "get_deployment"
)]
#[channel(name = "test")]
#[serde(deny_unknown_fields)]
struct CreateDeployment {
    #[scope(project)]
    project_id: String,
    build_id: String,
    /// Why the agent wants this.
    #[audit_note]
    #[schemars(length(min = 8, max = 240))]
    reason: String,
}

/// Read one deployment's status.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_deployment", effect = observe)]
#[channel(name = "test")]
#[serde(deny_unknown_fields)]
struct GetDeployment {
    #[scope(project)]
    project_id: String,
    deployment_id: String,
}

/// Restart one worker of a project.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "restart_worker", effect = reversible_change)]
#[channel(name = "test")]
#[serde(deny_unknown_fields)]
struct RestartWorker {
    #[scope(project)]
    project_id: String,
    worker: String,
}

/// Read a project's billing report.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "read_report", effect = observe, credential = "report-api", data = [financial])]
#[channel(name = "test")]
#[serde(deny_unknown_fields)]
struct ReadReport {
    #[scope(project)]
    project_id: String,
}

struct Harness {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    channel: Arc<ScriptedChannel>,
    journal: Arc<dyn Journal>,
    vault: Arc<MemoryVault>,
    asked: Arc<AtomicU32>,
    events: Arc<Mutex<Vec<String>>>,
    executor: Executor,
}

fn catalog() -> Catalog {
    Catalog::builder()
        .action::<GetBuild>()
        .action::<CreateDeployment>()
        .action::<GetDeployment>()
        .action::<RestartWorker>()
        .action::<ReadReport>()
        .precondition::<CreateDeployment, _, _>(|input| async move {
            if input.build_id == "build_untested" {
                Err("build build_untested has not passed its tests".to_owned())
            } else {
                Ok(())
            }
        })
        .build()
        .expect("catalog builds")
}

/// An executor on `journal` and the scripted `channel` whose human approves every call.
fn approving_executor(journal: Arc<dyn Journal>, channel: &Arc<ScriptedChannel>) -> Executor {
    Executor::builder(catalog())
        .journal_arc(journal)
        .channel_arc(channel.clone())
        .vault(MemoryVault::new())
        .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
        .build()
        .expect("builds")
}

fn session() -> Session {
    Session::new("ses_test").allow("project", ["proj_1"])
}

/// A harness whose human answers with `decide`.
fn harness_with(
    decide: impl Fn(&ConsentRequest) -> Option<ConsentDecision> + Send + Sync + 'static,
    configure: impl FnOnce(
        sallyport_core::executor::ExecutorBuilder,
    ) -> sallyport_core::executor::ExecutorBuilder,
) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    let journal: Arc<dyn Journal> = Arc::new(SqliteJournal::open(&path).expect("journal opens"));
    let events = Arc::new(Mutex::new(Vec::new()));
    let channel = Arc::new(
        ScriptedChannel::new()
            .reading_journal(&path)
            .with_events(Arc::clone(&events)),
    );
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta {
            name: "report-api".into(),
            kind: CredentialKind::Bearer,
            binding: Binding::url("http://127.0.0.1"),
            version: 1,
        },
        Secret::new("report-token-value"),
    );
    let asked = Arc::new(AtomicU32::new(0));
    let consent_events = Arc::clone(&events);
    let consent_asked = Arc::clone(&asked);
    let decide = Arc::new(decide);
    let consent = FnConsent::new(move |request: ConsentRequest| {
        consent_asked.fetch_add(1, Ordering::SeqCst);
        consent_events
            .lock()
            .expect("events")
            .push("consent".into());
        let answer = decide(&request);
        async move {
            match answer {
                Some(d) => d,
                None => std::future::pending().await,
            }
        }
    });
    let builder = Executor::builder(catalog())
        .journal_arc(Arc::clone(&journal))
        .channel_arc(channel.clone())
        .vault_arc(vault.clone())
        .consent(consent);
    let executor = configure(builder).build().expect("executor builds");
    Harness {
        _dir: dir,
        path,
        channel,
        journal,
        vault,
        asked,
        events,
        executor,
    }
}

fn harness() -> Harness {
    harness_with(|_| Some(ConsentDecision::Approve), |b| b)
}

impl Harness {
    async fn call(&self, action: &str, args: Value) -> sallyport_core::outcome::ActionResult {
        self.executor.call(action, args, &session()).await
    }

    async fn records(&self) -> Vec<AuditRecord> {
        self.journal.records().await.expect("records")
    }

    /// Asserts a refusal: rejected by the executor with `code`, nothing dispatched, exactly one
    /// audit record that says the same.
    async fn assert_refused(
        &self,
        result: &sallyport_core::outcome::ActionResult,
        code: RefusalCode,
    ) -> AuditRecord {
        assert_eq!(result.status, Status::Rejected, "{}", result.to_json());
        assert_eq!(result.origin, Some(Origin::Executor));
        assert_eq!(result.code, Some(code.into()), "{}", result.to_json());
        assert_eq!(self.channel.dispatches(), 0, "a refusal must send nothing");
        let records = self.records().await;
        assert_eq!(records.len(), 1, "exactly one audit record");
        let event = &records[0].event;
        assert_eq!(event.phase, Phase::Refused);
        assert_eq!(event.code, Some(code.into()));
        assert_eq!(event.dispatches, 0);
        assert_eq!(Some(&event.receipt_id), result.receipt_id.as_ref());
        records[0].clone()
    }
}

/// The arguments of a `get_build` call inside the session's scope.
fn build_args() -> Value {
    json!({"project_id": "proj_1", "build_id": "build_1"})
}

fn deploy_args() -> Value {
    json!({"project_id": "proj_1", "build_id": "build_7", "reason": "ship the fix for ticket 42"})
}

#[tokio::test]
async fn an_observe_call_completes_and_is_audited_with_its_receipt() {
    let h = harness();
    let result = h.call("get_build", build_args()).await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(
        result.data,
        Some(json!({"project_id": "proj_1", "build_id": "build_1"}))
    );
    assert_eq!(h.channel.dispatches(), 1);
    assert_eq!(
        h.asked.load(Ordering::SeqCst),
        0,
        "observe needs no consent"
    );
    let records = h.records().await;
    assert_eq!(records.len(), 1);
    let event = &records[0].event;
    assert_eq!(event.phase, Phase::Finished);
    assert_eq!(event.status, Status::Completed);
    assert_eq!(event.dispatches, 1);
    assert_eq!(event.consent, Some(ConsentOutcome::NotRequired));
    assert_eq!(event.request.as_deref(), Some("TEST get_build"));
    assert_eq!(event.objects.len(), 1);
    assert_eq!(event.objects[0].value, "proj_1");
    assert_eq!(result.receipt_id.as_ref(), Some(&event.receipt_id));
}

#[tokio::test]
async fn an_observe_call_commits_once_after_its_response() {
    let h = harness();
    let result = h.call("get_build", build_args()).await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    // Nothing was written before the request left: no attempt row at dispatch time.
    let seen = h.channel.seen_intents();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].phase, "absent");
    // After the call, the attempt row and its record are there, closed, in one chain.
    let conn = rusqlite::Connection::open(&h.path).expect("open journal");
    let (phase, dispatches): (String, u32) = conn
        .query_row(
            "SELECT phase, dispatches FROM attempts WHERE attempt_id = ?1",
            [result.attempt_id.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("the observe call's attempt row");
    assert_eq!(phase, "finished");
    assert_eq!(dispatches, 1);
    assert!(h.journal.unresolved().await.expect("unresolved").is_empty());
    assert!(h.journal.verify().await.expect("verify").is_intact());
    // A state-changing call still writes its intent before dispatch.
    let deploy = h.call("create_deployment", deploy_args()).await;
    assert_eq!(deploy.status, Status::Completed, "{}", deploy.to_json());
    assert_eq!(h.channel.seen_intents()[1].phase, "intent_written");
}

#[tokio::test]
async fn unknown_action_is_refused_and_names_the_available_ones() {
    let h = harness();
    let result = h.call("delete_everything", json!({})).await;
    h.assert_refused(&result, RefusalCode::UnknownAction).await;
    assert!(
        result
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("get_build")
    );
}

#[tokio::test]
async fn each_divergence_kind_is_refused_with_its_path_and_sends_nothing() {
    let cases = [
        (
            json!({"project_id": "proj_1"}),
            "missing_required",
            "/build_id",
        ),
        (
            json!({"project_id": "proj_1", "build_id": "build_1", "force": true}),
            "unknown_field",
            "/force",
        ),
        (
            json!({"project_id": "proj_1", "build_id": 7}),
            "type_mismatch",
            "/build_id",
        ),
        (
            json!({"project_id": "proj_1", "build_id": "../etc/passwd"}),
            "constraint_violation",
            "/build_id",
        ),
        (
            json!({"project_id": "proj_1", "build_id": "build_1", "limit": 1000}),
            "constraint_violation",
            "/limit",
        ),
    ];
    for (args, kind, path) in cases {
        let h = harness();
        let result = h.call("get_build", args.clone()).await;
        let record = h
            .assert_refused(&result, RefusalCode::InvalidArguments)
            .await;
        assert_eq!(result.divergences.len(), 1, "{args}: {}", result.to_json());
        assert_eq!(result.divergences[0].kind.as_str(), kind, "{args}");
        assert_eq!(result.divergences[0].path, path, "{args}");
        assert_eq!(record.event.divergences, result.divergences);
        // The observed value never comes back, only its type.
        assert!(
            !result.to_json().contains("etc/passwd"),
            "{}",
            result.to_json()
        );
    }
}

#[tokio::test]
async fn an_agent_cannot_supply_the_idempotency_key() {
    let h = harness();
    let mut args = deploy_args();
    args["idempotency_key"] = json!("agent-chosen-key");
    let result = h.call("create_deployment", args).await;
    h.assert_refused(&result, RefusalCode::InvalidArguments)
        .await;
    assert_eq!(result.divergences[0].kind.as_str(), "unknown_field");
    assert_eq!(
        h.asked.load(Ordering::SeqCst),
        0,
        "no human is asked to catch a wrong input"
    );
}

#[tokio::test]
async fn an_object_outside_the_session_scope_is_refused_before_consent() {
    let h = harness();
    let result = h
        .call(
            "create_deployment",
            json!({"project_id": "proj_999", "build_id": "build_7", "reason": "ship the fix for ticket 42"}),
        )
        .await;
    h.assert_refused(&result, RefusalCode::OutOfScope).await;
    assert_eq!(
        result.reason.as_deref(),
        Some("project proj_999 is outside this session's scope")
    );
    assert_eq!(h.asked.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_failed_precondition_is_refused_before_consent() {
    let h = harness();
    let mut args = deploy_args();
    args["build_id"] = json!("build_untested");
    let result = h.call("create_deployment", args).await;
    h.assert_refused(&result, RefusalCode::PreconditionFailed)
        .await;
    assert_eq!(
        result.reason.as_deref(),
        Some("build build_untested has not passed its tests")
    );
    assert_eq!(h.asked.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_locked_vault_refuses_every_call_before_consent() {
    let h = harness();
    h.vault.lock();
    let result = h.call("create_deployment", deploy_args()).await;
    h.assert_refused(&result, RefusalCode::VaultLocked).await;
    assert_eq!(h.asked.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_missing_credential_is_refused() {
    let h = harness();
    h.vault.remove("report-api");
    let result = h.call("read_report", json!({"project_id": "proj_1"})).await;
    h.assert_refused(&result, RefusalCode::CredentialUnavailable)
        .await;
}

#[tokio::test]
async fn consent_denied_sends_nothing_and_the_audit_says_consent_denied() {
    let h = harness_with(|_| Some(ConsentDecision::Deny { reason: None }), |b| b);
    let result = h.call("create_deployment", deploy_args()).await;
    let record = h.assert_refused(&result, RefusalCode::ConsentDenied).await;
    assert_eq!(record.event.consent, Some(ConsentOutcome::Denied));
    assert_eq!(h.asked.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_unanswered_consent_request_times_out_and_sends_nothing() {
    let h = harness_with(|_| None, |b| b.consent_timeout(Duration::from_millis(50)));
    let result = h.call("create_deployment", deploy_args()).await;
    let record = h.assert_refused(&result, RefusalCode::ConsentTimeout).await;
    assert_eq!(record.event.consent, Some(ConsentOutcome::Timeout));
}

#[tokio::test]
async fn without_a_consent_provider_calls_that_need_consent_fail_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let channel = Arc::new(ScriptedChannel::new());
    let executor = Executor::builder(catalog())
        .journal(SqliteJournal::open(dir.path().join("j.db")).expect("journal"))
        .channel_arc(channel.clone())
        .vault(MemoryVault::new())
        .build()
        .expect("builds");
    let result = executor
        .call("create_deployment", deploy_args(), &session())
        .await;
    assert_eq!(result.code, Some(RefusalCode::ConsentUnavailable.into()));
    assert_eq!(channel.dispatches(), 0);
    let ok = executor
        .call(
            "get_build",
            json!({"project_id": "proj_1", "build_id": "build_1"}),
            &session(),
        )
        .await;
    assert_eq!(ok.status, Status::Completed, "observe calls need no human");
}

#[tokio::test]
async fn the_human_sees_action_effect_objects_reason_and_request_before_anything_is_sent() {
    let seen: Arc<Mutex<Option<ConsentRequest>>> = Arc::default();
    let seen2 = Arc::clone(&seen);
    let h = harness_with(
        move |r| {
            *seen2.lock().expect("seen") = Some(r.clone());
            Some(ConsentDecision::Approve)
        },
        |b| b,
    );
    let result = h.call("create_deployment", deploy_args()).await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    let request = seen
        .lock()
        .expect("seen")
        .clone()
        .expect("consent was asked");
    assert_eq!(request.action, "create_deployment");
    assert_eq!(request.effect.as_str(), "external_commitment");
    assert_eq!(request.objects.len(), 1);
    assert_eq!(request.objects[0].kind, "project");
    assert_eq!(request.objects[0].value, "proj_1");
    assert_eq!(request.note.as_deref(), Some("ship the fix for ticket 42"));
    assert_eq!(request.request, "TEST create_deployment");
    assert_eq!(
        request.summary,
        "Queue one tested build for the preview environment."
    );
    // Static checks and safe context first, then consent, then the request.
    assert_eq!(
        *h.events.lock().expect("events"),
        ["prepare", "consent", "dispatch"]
    );
}

#[tokio::test]
async fn a_channel_refusal_before_consent_sends_nothing() {
    /// Read one file of a project.
    #[derive(Action, Deserialize, Serialize, JsonSchema)]
    #[action(name = "read_file", effect = observe)]
    #[channel(name = "test")]
    struct ReadFile {
        path: String,
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let channel = Arc::new(ScriptedChannel::new());
    let journal = Arc::new(SqliteJournal::open(dir.path().join("j.db")).expect("journal"));
    let executor = Executor::builder(
        Catalog::builder()
            .action::<ReadFile>()
            .build()
            .expect("catalog"),
    )
    .journal_arc(journal.clone())
    .channel_arc(channel.clone())
    .build()
    .expect("builds");
    let result = executor
        .call("read_file", json!({"path": "../../etc/shadow"}), &session())
        .await;
    assert_eq!(result.code, Some(RefusalCode::InvalidRequest.into()));
    assert_eq!(channel.dispatches(), 0);
    assert_eq!(journal.records().await.expect("records").len(), 1);
}

#[tokio::test]
async fn session_consent_is_asked_once_per_session_and_definition() {
    let h = harness();
    let args = json!({"project_id": "proj_1", "worker": "w1"});
    for _ in 0..3 {
        let r = h.call("restart_worker", args.clone()).await;
        assert_eq!(r.status, Status::Completed);
    }
    assert_eq!(
        h.asked.load(Ordering::SeqCst),
        1,
        "one grant covers the session"
    );
    let other = Session::new("ses_other").allow("project", ["proj_1"]);
    let r = h
        .executor
        .call("restart_worker", args.clone(), &other)
        .await;
    assert_eq!(r.status, Status::Completed);
    assert_eq!(
        h.asked.load(Ordering::SeqCst),
        2,
        "another session asks again"
    );
    h.executor.revoke_session_consent(&session());
    h.call("restart_worker", args).await;
    assert_eq!(
        h.asked.load(Ordering::SeqCst),
        3,
        "a revoked grant asks again"
    );
    let consents: Vec<Option<ConsentOutcome>> = h
        .records()
        .await
        .into_iter()
        .map(|r| r.event.consent)
        .collect();
    assert_eq!(
        consents,
        [
            Some(ConsentOutcome::ApprovedForSession),
            Some(ConsentOutcome::SessionGrant),
            Some(ConsentOutcome::SessionGrant),
            Some(ConsentOutcome::ApprovedForSession),
            Some(ConsentOutcome::ApprovedForSession),
        ]
    );
}

#[tokio::test]
async fn per_call_consent_is_asked_for_every_call_even_after_a_session_approval() {
    let h = harness_with(
        |_| {
            Some(ConsentDecision::ApproveForSession {
                ttl: Duration::from_secs(600),
            })
        },
        |b| b,
    );
    for _ in 0..2 {
        assert_eq!(
            h.call("create_deployment", deploy_args()).await.status,
            Status::Completed
        );
    }
    assert_eq!(h.asked.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_intent_row_with_the_executor_key_is_in_the_journal_when_the_channel_is_called() {
    let h = harness();
    let result = h.call("create_deployment", deploy_args()).await;
    assert_eq!(result.status, Status::Completed);
    let seen = h.channel.seen_intents();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].phase, "intent_written");
    assert_eq!(seen[0].idempotency_key, seen[0].key_handed);
    assert_eq!(seen[0].key_handed.len(), 36, "a UUID");
    // The key never reaches the agent.
    assert!(!result.to_json().contains(&seen[0].key_handed));
}

#[tokio::test]
async fn an_unwritable_journal_refuses_the_call_and_sends_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    let journal = SqliteJournal::builder(&path)
        .busy_timeout(Duration::from_millis(20))
        .open()
        .expect("journal");
    let channel = Arc::new(ScriptedChannel::new());
    let executor = approving_executor(Arc::new(journal), &channel);
    // Another process holds the write lock: the intent cannot be written.
    let blocker = rusqlite::Connection::open(&path).expect("open");
    blocker.execute_batch("BEGIN EXCLUSIVE").expect("lock");
    let result = executor
        .call("create_deployment", deploy_args(), &session())
        .await;
    assert_eq!(result.status, Status::Rejected);
    assert_eq!(result.code, Some(RefusalCode::JournalUnavailable.into()));
    assert_eq!(channel.dispatches(), 0);
    blocker.execute_batch("ROLLBACK").expect("unlock");
}

/// An observe call commits once, after its response: when that record cannot be written,
/// the read's data is withheld (no unaudited data reaches the agent), and from then on reads
/// write their attempt first, so a journal known to be unwritable refuses them unsent.
#[tokio::test]
async fn a_read_whose_record_cannot_be_written_is_withheld_and_the_next_is_not_sent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    let journal = SqliteJournal::builder(&path)
        .busy_timeout(Duration::from_millis(20))
        .open()
        .expect("journal");
    let channel = Arc::new(ScriptedChannel::new().reading_journal(&path));
    let executor = Executor::builder(catalog())
        .journal(journal)
        .channel_arc(channel.clone())
        .vault(MemoryVault::new())
        .build()
        .expect("builds");
    let blocker = rusqlite::Connection::open(&path).expect("open");
    blocker.execute_batch("BEGIN EXCLUSIVE").expect("lock");
    let first = executor.call("get_build", build_args(), &session()).await;
    assert_eq!(
        channel.dispatches(),
        1,
        "a read is sent before it is recorded"
    );
    assert_eq!(first.status, Status::Rejected, "{}", first.to_json());
    assert_eq!(first.code, Some(RefusalCode::JournalUnavailable.into()));
    assert_eq!(first.data, None, "the unaudited answer is withheld");
    let second = executor.call("get_build", build_args(), &session()).await;
    assert_eq!(second.code, Some(RefusalCode::JournalUnavailable.into()));
    assert_eq!(
        channel.dispatches(),
        1,
        "a known-unwritable journal refuses the read unsent"
    );
    blocker.execute_batch("ROLLBACK").expect("unlock");
    let third = executor.call("get_build", build_args(), &session()).await;
    assert_eq!(third.status, Status::Completed, "{}", third.to_json());
    let fourth = executor.call("get_build", build_args(), &session()).await;
    assert_eq!(fourth.status, Status::Completed, "{}", fourth.to_json());
    let phases: Vec<String> = channel
        .seen_intents()
        .into_iter()
        .map(|s| s.phase)
        .collect();
    assert_eq!(
        phases,
        ["absent", "intent_written", "absent"],
        "after a successful write, reads commit once again"
    );
}

/// RELIABILITY.md: "The journal cannot be written (disk full …): nothing is sent." A real
/// SQLite journal capped at 48 KiB fills up as calls go on; from the call it refuses on,
/// nothing reaches the channel, and what it answered before agrees with the file.
#[tokio::test]
async fn a_full_journal_refuses_the_call_and_sends_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    let journal = Arc::new(
        SqliteJournal::builder(&path)
            .max_size(48 * 1024)
            .open()
            .expect("journal"),
    );
    let channel = Arc::new(ScriptedChannel::new());
    let executor = approving_executor(journal.clone(), &channel);
    let mut sent = 0;
    let mut receipts = Vec::new();
    let refused = loop {
        assert!(sent < 1_000, "a 48 KiB journal never filled");
        let before = channel.dispatches();
        let result = executor
            .call("create_deployment", deploy_args(), &session())
            .await;
        if result.code == Some(RefusalCode::JournalUnavailable.into()) {
            assert_eq!(channel.dispatches(), before, "a refused call sent nothing");
            break result;
        }
        assert_eq!(result.status, Status::Completed, "{}", result.to_json());
        sent += 1;
        // A call whose outcome no longer fits is still answered, without a receipt.
        receipts.extend(result.receipt_id);
    };
    assert!(sent > 0, "calls went through before the journal filled");
    assert_eq!(refused.status, Status::Rejected);
    assert_eq!(refused.origin, Some(Origin::Executor));
    // The refusal's own record is smaller than the intent that did not fit: it is kept when
    // it still fits (where depends on the file's page layout), and then it is in the file.
    receipts.extend(refused.receipt_id.clone());
    assert_eq!(channel.dispatches(), sent);
    // Every receipt handed out is in the file, and the chain verifies.
    let records = journal.records().await.expect("a full journal still reads");
    assert_eq!(records.len(), receipts.len());
    assert!(
        receipts
            .iter()
            .all(|r| records.iter().any(|rec| &rec.event.receipt_id == r))
    );
    assert!(journal.verify().await.expect("verify").is_intact());
}

/// A SQLite journal with a fault: intent writes that fail while the audit still works
/// (`fail_intents`), or a call's last record taken (the SQLite journal writes it) and then,
/// while `hold` is set, never answered, so the caller's future is dropped after the journal
/// took its record, as when a batch has taken it and the caller is cancelled before the
/// answer.
struct Faulty {
    real: Arc<SqliteJournal>,
    fail_intents: bool,
    hold: std::sync::atomic::AtomicBool,
}

impl Faulty {
    fn failing_intents(real: Arc<SqliteJournal>) -> Self {
        Self {
            real,
            fail_intents: true,
            hold: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn holding_answers(real: Arc<SqliteJournal>) -> Self {
        Self {
            real,
            fail_intents: false,
            hold: std::sync::atomic::AtomicBool::new(true),
        }
    }

    async fn held<T>(&self, write: impl std::future::Future<Output = T>) -> T {
        let answer = write.await;
        if self.hold.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        answer
    }
}

#[async_trait::async_trait]
impl Journal for Faulty {
    async fn write_intent(
        &self,
        intent: &sallyport_core::journal::Intent,
    ) -> Result<(), sallyport_core::journal::JournalError> {
        if self.fail_intents {
            return Err(sallyport_core::journal::JournalError::Stopped);
        }
        self.real.write_intent(intent).await
    }
    fn note_dispatch(&self, a: &sallyport_core::journal::AttemptId, n: u32) {
        self.real.note_dispatch(a, n);
    }
    async fn append(
        &self,
        e: sallyport_core::journal::AuditEvent,
    ) -> Result<AuditRecord, sallyport_core::journal::JournalError> {
        self.held(self.real.append(e)).await
    }
    async fn append_with_intent(
        &self,
        intent: sallyport_core::journal::Intent,
        e: sallyport_core::journal::AuditEvent,
    ) -> Result<AuditRecord, sallyport_core::journal::JournalError> {
        if self.fail_intents {
            return Err(sallyport_core::journal::JournalError::Stopped);
        }
        self.held(self.real.append_with_intent(intent, e)).await
    }
    fn append_detached(&self, e: sallyport_core::journal::AuditEvent) {
        self.real.append_detached(e);
    }
    async fn verify(
        &self,
    ) -> Result<sallyport_core::journal::VerifyReport, sallyport_core::journal::JournalError> {
        self.real.verify().await
    }
    async fn records(&self) -> Result<Vec<AuditRecord>, sallyport_core::journal::JournalError> {
        self.real.records().await
    }
    async fn unresolved(
        &self,
    ) -> Result<
        Vec<sallyport_core::journal::UnresolvedAttempt>,
        sallyport_core::journal::JournalError,
    > {
        self.real.unresolved().await
    }
}

#[tokio::test]
async fn a_failed_intent_write_is_audited_as_journal_unavailable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let real = Arc::new(SqliteJournal::open(dir.path().join("j.db")).expect("journal"));
    let channel = Arc::new(ScriptedChannel::new());
    let executor = approving_executor(Arc::new(Faulty::failing_intents(real.clone())), &channel);
    let result = executor
        .call("create_deployment", deploy_args(), &session())
        .await;
    assert_eq!(result.code, Some(RefusalCode::JournalUnavailable.into()));
    assert_eq!(channel.dispatches(), 0);
    let records = real.records().await.expect("records");
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0].event.code,
        Some(RefusalCode::JournalUnavailable.into())
    );
}

#[tokio::test]
async fn warn_mode_strips_unknown_fields_and_records_the_divergence() {
    let h = harness_with(
        |_| Some(ConsentDecision::Approve),
        |b| b.drift_mode(DriftMode::Warn),
    );
    let result = h
        .call(
            "get_build",
            json!({"project_id": "proj_1", "build_id": "build_1", "verbose": true}),
        )
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(
        result.data,
        Some(json!({"project_id": "proj_1", "build_id": "build_1"}))
    );
    let records = h.records().await;
    assert_eq!(records[0].event.divergences.len(), 1);
    assert_eq!(records[0].event.divergences[0].path, "/verbose");
}

#[tokio::test]
async fn warn_and_shadow_still_refuse_a_call_that_cannot_decode() {
    for mode in [DriftMode::Warn, DriftMode::Shadow] {
        let h = harness_with(
            |_| Some(ConsentDecision::Approve),
            move |b| b.drift_mode(mode),
        );
        let result = h.call("get_build", json!({"project_id": "proj_1"})).await;
        h.assert_refused(&result, RefusalCode::InvalidArguments)
            .await;
    }
}

#[tokio::test]
async fn pending_results_name_the_status_action_with_arguments_from_data_and_call() {
    let h = harness();
    h.channel.then(Step::Answer(
        ChannelOutcome::new(Status::Pending)
            .with_data(json!({"deployment_id": "dep_2388", "operation_status": "queued"})),
    ));
    let result = h.call("create_deployment", deploy_args()).await;
    assert_eq!(result.status, Status::Pending);
    let next = result.next.expect("next");
    assert_eq!(next.action, "get_deployment");
    assert_eq!(
        next.arguments,
        json!({"deployment_id": "dep_2388", "project_id": "proj_1"})
    );
}

#[tokio::test]
async fn an_unknown_result_says_do_not_retry_and_how_to_check() {
    let h = harness();
    h.channel.then(Step::Answer(
        ChannelOutcome::new(Status::Unknown).with_code("timeout_after_send"),
    ));
    let result = h.call("create_deployment", deploy_args()).await;
    assert_eq!(result.status, Status::Unknown);
    assert_eq!(result.origin, Some(Origin::Upstream));
    assert_eq!(result.code, Some(UpstreamCode::TimeoutAfterSend.into()));
    assert_eq!(
        result.reason.as_deref(),
        Some("the outcome is unknown; do not retry; check with get_deployment")
    );
    assert_eq!(result.next.expect("next").action, "get_deployment");
}

#[tokio::test]
async fn a_rejected_credential_is_not_used_again_until_it_is_replaced() {
    let h = harness();
    h.channel.then(Step::Answer(
        ChannelOutcome::new(Status::Rejected)
            .with_code("auth_failed")
            .with_credential_rejected(),
    ));
    let first = h.call("read_report", json!({"project_id": "proj_1"})).await;
    assert_eq!(first.code, Some(UpstreamCode::AuthFailed.into()));
    assert_eq!(h.channel.dispatches(), 1);
    let second = h.call("read_report", json!({"project_id": "proj_1"})).await;
    assert_eq!(second.code, Some(RefusalCode::CredentialUnavailable.into()));
    assert_eq!(h.channel.dispatches(), 1, "fails fast locally");
    h.vault.set(
        CredentialMeta {
            name: "report-api".into(),
            kind: CredentialKind::Bearer,
            binding: Binding::url("http://127.0.0.1"),
            version: 1,
        },
        Secret::new("a-new-token"),
    );
    let third = h.call("read_report", json!({"project_id": "proj_1"})).await;
    assert_eq!(
        third.status,
        Status::Completed,
        "a rotated credential is tried again"
    );
}

#[tokio::test]
async fn a_channel_result_carrying_a_secret_is_scrubbed_everywhere() {
    let h = harness();
    h.channel.then(Step::Answer(
        ChannelOutcome::new(Status::Rejected)
            .with_code("upstream_error")
            .with_reason("server said: bad token report-token-value")
            .with_data(json!({"echo": "Bearer report-token-value"})),
    ));
    let result = h.call("read_report", json!({"project_id": "proj_1"})).await;
    let text = result.to_json();
    assert!(!text.contains("report-token-value"), "{text}");
    assert!(text.contains("[REDACTED]"), "{text}");
    let records = h.records().await;
    let audit = serde_json::to_string(&records).expect("json");
    assert!(!audit.contains("report-token-value"), "{audit}");
}

#[tokio::test]
async fn dropping_a_call_while_consent_is_pending_records_cancelled_before_send() {
    let h = harness_with(|_| None, |b| b);
    let call = h.call("create_deployment", deploy_args());
    let _ = tokio::time::timeout(Duration::from_millis(50), call).await;
    assert_eq!(h.channel.dispatches(), 0);
    let records = wait_for_records(&*h.journal, 1).await;
    assert_eq!(records[0].event.phase, Phase::CancelledBeforeSend);
    assert_eq!(
        records[0].event.code,
        Some(UpstreamCode::CancelledBeforeSend.into())
    );
}

#[tokio::test]
async fn dropping_a_call_after_the_request_left_records_unknown() {
    let h = harness();
    h.channel.then(Step::HangAfterSend);
    let call = h.call("create_deployment", deploy_args());
    let _ = tokio::time::timeout(Duration::from_millis(100), call).await;
    assert_eq!(h.channel.dispatches(), 1);
    let records = wait_for_records(&*h.journal, 1).await;
    assert_eq!(records[0].event.phase, Phase::CancelledUnknown);
    assert_eq!(records[0].event.status, Status::Unknown);
    assert_eq!(records[0].event.dispatches, 1);
}

#[tokio::test]
async fn dropping_a_call_inside_the_channel_before_it_sends_records_cancelled_before_send() {
    let h = harness();
    h.channel.then(Step::HangBeforeSend);
    let _ = tokio::time::timeout(
        Duration::from_millis(100),
        h.call("create_deployment", deploy_args()),
    )
    .await;
    let records = wait_for_records(&*h.journal, 1).await;
    assert_eq!(records[0].event.phase, Phase::CancelledBeforeSend);
    assert!(h.journal.unresolved().await.expect("unresolved").is_empty());
}

/// A call dropped after the journal took its last record is recorded once, by that record:
/// its guard does not add a cancellation record (before, a read was recorded as finished and
/// as `cancelled_unknown`). For a read, a state-changing call and a refusal.
#[tokio::test]
async fn a_call_dropped_after_the_journal_took_its_record_is_recorded_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let real = Arc::new(SqliteJournal::open(dir.path().join("j.db")).expect("journal"));
    let journal = Arc::new(Faulty::holding_answers(Arc::clone(&real)));
    let channel = Arc::new(ScriptedChannel::new());
    let executor = approving_executor(journal.clone(), &channel);
    let session = session();
    let calls = [
        (
            "get_build",
            json!({"project_id": "proj_1", "build_id": "build_1"}),
        ),
        ("create_deployment", deploy_args()),
        ("no_such_action", json!({})),
    ];
    for (action, arguments) in calls.clone() {
        let call = executor.call(action, arguments, &session);
        assert!(
            tokio::time::timeout(Duration::from_millis(200), call)
                .await
                .is_err(),
            "{action}: the journal holds the answer"
        );
    }
    assert_eq!(
        channel.dispatches(),
        2,
        "the read and the deployment were sent"
    );
    // A call answered normally: its record is queued after any cancellation record the
    // dropped calls' guards wrote, so once it is answered those are in the file.
    journal.hold.store(false, Ordering::SeqCst);
    let last = executor
        .call(
            "get_build",
            json!({"project_id": "proj_1", "build_id": "build_2"}),
            &session,
        )
        .await;
    assert_eq!(last.status, Status::Completed);
    let records = real.records().await.expect("records");
    let phases: Vec<(String, Phase)> = records
        .iter()
        .map(|r| (r.event.action.clone(), r.event.phase))
        .collect();
    assert_eq!(
        phases,
        [
            ("get_build".to_owned(), Phase::Finished),
            ("create_deployment".to_owned(), Phase::Finished),
            ("no_such_action".to_owned(), Phase::Refused),
            ("get_build".to_owned(), Phase::Finished),
        ],
        "one record per call"
    );
    assert!(real.unresolved().await.expect("unresolved").is_empty());
    assert!(real.verify().await.expect("verify").is_intact());
}

async fn wait_for_records(journal: &dyn Journal, n: usize) -> Vec<AuditRecord> {
    for _ in 0..200 {
        let records = journal.records().await.expect("records");
        if records.len() >= n {
            return records;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("expected {n} audit records");
}

#[tokio::test]
async fn attempts_interrupted_by_a_crash_are_listed_as_unresolved_after_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    {
        let channel = Arc::new(ScriptedChannel::new());
        channel.then(Step::HangAfterSend);
        channel.then(Step::HangBeforeSend);
        let executor = approving_executor(
            Arc::new(SqliteJournal::open(&path).expect("journal")),
            &channel,
        );
        let session = session();
        for _ in 0..2 {
            let mut call = Box::pin(executor.call("create_deployment", deploy_args(), &session));
            // Poll until the channel hangs, then leak the future: like a process killed
            // mid-call, no destructor runs and no outcome is written.
            let _ = tokio::time::timeout(Duration::from_millis(100), &mut call).await;
            #[allow(
                clippy::mem_forget,
                reason = "simulates a crash: no destructor may run"
            )]
            std::mem::forget(call);
        }
        // Let the writer thread apply the dispatch note before "restarting".
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reopened = SqliteJournal::open(&path).expect("journal reopens");
    let unresolved = reopened.unresolved().await.expect("unresolved");
    assert_eq!(unresolved.len(), 2, "{unresolved:?}");
    let phases: Vec<Phase> = unresolved.iter().map(|u| u.phase).collect();
    assert_eq!(phases, [Phase::Dispatched, Phase::IntentWritten]);
    assert_eq!(unresolved[0].dispatches, 1);
    assert_eq!(unresolved[0].arguments, deploy_args());
    assert_ne!(unresolved[0].idempotency_key, unresolved[1].idempotency_key);
}

#[tokio::test]
async fn concurrent_identical_calls_are_two_attempts_with_two_keys() {
    let h = harness();
    let (a, b) = tokio::join!(
        h.call("create_deployment", deploy_args()),
        h.call("create_deployment", deploy_args())
    );
    assert_eq!(a.status, Status::Completed);
    assert_eq!(b.status, Status::Completed);
    assert_ne!(a.attempt_id, b.attempt_id);
    let seen = h.channel.seen_intents();
    assert_eq!(seen.len(), 2);
    assert_ne!(seen[0].key_handed, seen[1].key_handed);
    assert_eq!(h.records().await.len(), 2);
    assert!(h.journal.verify().await.expect("verify").is_intact());
}

#[tokio::test]
async fn raw_json_that_is_malformed_or_oversized_becomes_a_rejected_result() {
    let h = harness_with(
        |_| Some(ConsentDecision::Approve),
        |b| b.max_argument_bytes(1024),
    );
    let bad = h
        .executor
        .call_json("get_build", "{\"project_id\": ", &session())
        .await;
    assert_eq!(bad.code, Some(RefusalCode::InvalidArguments.into()));
    let huge = format!("{{\"project_id\": \"{}\"}}", "x".repeat(4096));
    let big = h.executor.call_json("get_build", &huge, &session()).await;
    assert_eq!(big.code, Some(RefusalCode::ArgumentsTooLarge.into()));
    let big_value = h
        .call(
            "get_build",
            json!({"project_id": "x".repeat(4096), "build_id": "build_1"}),
        )
        .await;
    assert_eq!(big_value.code, Some(RefusalCode::ArgumentsTooLarge.into()));
    let mut deep = json!("leaf");
    for _ in 0..40 {
        deep = json!({"a": deep});
    }
    let nested = h
        .call(
            "get_build",
            json!({"project_id": "proj_1", "build_id": deep}),
        )
        .await;
    assert_eq!(nested.code, Some(RefusalCode::InvalidArguments.into()));
    assert_eq!(h.channel.dispatches(), 0);
    assert_eq!(h.records().await.len(), 4);
}

#[tokio::test]
async fn a_refusal_serializes_to_the_compact_documented_shape() {
    let h = harness();
    let result = h
        .call(
            "get_build",
            json!({"project_id": "proj_999", "build_id": "build_1"}),
        )
        .await;
    let value: Value = serde_json::from_str(&result.to_json()).expect("json");
    let mut keys: Vec<&str> = value
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    // Sorted: a map's key order depends on serde_json's `preserve_order` (which cedar-policy
    // turns on in a workspace build).
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "action",
            "attempt_id",
            "code",
            "origin",
            "reason",
            "receipt_id",
            "status"
        ]
    );
    assert_eq!(value["status"], "rejected");
    assert_eq!(value["origin"], "executor");
    assert_eq!(value["code"], "out_of_scope");
    assert!(
        value["attempt_id"]
            .as_str()
            .expect("id")
            .starts_with("att_")
    );
    assert!(
        value["receipt_id"]
            .as_str()
            .expect("id")
            .starts_with("rcpt_")
    );
}

#[tokio::test]
async fn a_typed_call_runs_through_the_same_pipeline() {
    let h = harness();
    let input = GetBuild {
        project_id: "proj_999".into(),
        build_id: "build_1".into(),
        limit: None,
    };
    let result = h.executor.run(&input, &session()).await;
    h.assert_refused(&result.result, RefusalCode::OutOfScope)
        .await;
    let ok = h
        .executor
        .run(
            &GetBuild {
                project_id: "proj_1".into(),
                build_id: "build_1".into(),
                limit: Some(5),
            },
            &session(),
        )
        .await;
    assert_eq!(ok.status(), Status::Completed);
}

#[test]
fn the_executor_refuses_to_build_without_a_journal_or_with_a_missing_channel() {
    let err = Executor::builder(catalog())
        .build()
        .expect_err("no journal");
    assert_eq!(
        err.to_string(),
        "no journal configured: add `.journal(SqliteJournal::open(path)?)`"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let err = Executor::builder(catalog())
        .journal(SqliteJournal::open(dir.path().join("j.db")).expect("journal"))
        .vault(MemoryVault::new())
        .build()
        .expect_err("no channel");
    assert!(err.to_string().contains("targets channel `test`"), "{err}");
}

#[test]
fn a_reconcile_action_must_exist_and_be_read_only() {
    let err = Catalog::builder()
        .action::<CreateDeployment>()
        .build()
        .expect_err("missing reconcile");
    assert_eq!(
        err.to_string(),
        "action `create_deployment` names reconcile action `get_deployment`, which is not in the catalog"
    );
}

#[tokio::test]
async fn the_journal_path_is_a_real_sqlite_file() {
    let h = harness();
    h.call(
        "get_build",
        json!({"project_id": "proj_1", "build_id": "build_1"}),
    )
    .await;
    let conn = rusqlite::Connection::open(&h.path).expect("open");
    let n: i64 = conn
        .query_row("SELECT count(*) FROM audit", [], |r| r.get(0))
        .expect("count");
    assert_eq!(n, 1);
}

#[test]
fn action_cards_and_specs_come_from_the_derive() {
    let spec = CreateDeployment::spec();
    assert_eq!(spec.consent.as_str(), "per_call");
    assert_eq!(spec.retry.as_str(), "idempotency_key");
    assert!(
        spec.card()
            .contains("Human consent: Required for every call.")
    );
}
