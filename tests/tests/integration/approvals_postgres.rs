//! The approval store on PostgreSQL, through real executors: a call parked by one process
//! and decided from two at once sends one request; a stale claim can neither begin nor
//! settle the call.

use std::sync::Arc;

use sallyport_core::approval::{
    ApprovalFilter, ApprovalState, ConsentMode, Decided, Decider, Transition, Verdict,
};
use sallyport_core::clock::now_ms;
use sallyport_core::journal::{ApprovalStore, Intent, Journal, JournalError};
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_postgres::PostgresJournal;
use sallyport_tests::http_server::{Reply, Upstream};
use sallyport_tests::postgres::TestDb;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Queue one build of a project.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "create_deployment", effect = external_commitment, retry = idempotency_key,
         credential = "deploy-api")]
#[http(post = "/v1/projects/{project_id}/deployments", result = Created)]
struct CreateDeployment {
    project_id: String,
    build_id: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Created {
    id: String,
}

/// An executor on its own journal (its own pool, as another process would have).
async fn executor(
    db: &TestDb,
    upstream: &Upstream,
    name: &str,
) -> (Executor, Arc<PostgresJournal>) {
    let journal = Arc::new(
        PostgresJournal::builder(&db.url)
            .owner(name)
            .connect()
            .await
            .expect("journal"),
    );
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "deploy-api",
            CredentialKind::Bearer,
            Binding::url(upstream.url()),
        ),
        Secret::new("token-approvals-postgres"),
    );
    let catalog = Catalog::builder()
        .action::<CreateDeployment>()
        .build()
        .expect("catalog");
    let executor = Executor::builder(catalog)
        .journal_arc(journal.clone())
        .vault_arc(vault)
        .channel(
            HttpChannel::builder()
                .base_url(upstream.url())
                .build()
                .expect("channel"),
        )
        .consent_mode(ConsentMode::Deferred)
        .instance_name(name)
        .build()
        .expect("executor");
    (executor, journal)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_parked_by_one_process_and_approved_from_two_at_once_sends_one_request() {
    let db = TestDb::create().await;
    let upstream = Upstream::start(|_| Reply::Idempotent(None)).await;
    let (a, journal_a) = executor(&db, &upstream, "exe-a").await;
    let (b, journal_b) = executor(&db, &upstream, "exe-b").await;

    let parked = a
        .call(
            "create_deployment",
            json!({"project_id": "proj_1", "build_id": "b1"}),
            &Session::new("s1"),
        )
        .await;
    assert_eq!(parked.status, Status::Pending, "{}", parked.to_json());
    assert_eq!(parked.code_str(), Some("awaiting_approval"));
    let id = parked.approval_id.clone().expect("approval id");
    assert_eq!(upstream.requests(), 0, "nothing is sent while awaiting");
    // Visible to the other process.
    let seen = journal_b
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(seen.state, ApprovalState::Awaiting);
    assert_eq!(seen.action, "create_deployment");
    let listed = journal_b
        .approvals(&ApprovalFilter::states([ApprovalState::Awaiting]))
        .await
        .expect("list");
    assert_eq!(listed.len(), 1);
    assert!(
        journal_b
            .approvals(&ApprovalFilter::all().session("someone-else"))
            .await
            .expect("list")
            .is_empty()
    );

    let alice = Decider::new("alice", "cli");
    let bob = Decider::new("bob", "webhook");
    let (da, db_) = tokio::join!(
        a.decide(&id, Verdict::Approve, &alice, None),
        b.decide(&id, Verdict::Approve, &bob, None)
    );
    let (da, db_) = (da.expect("decide a"), db_.expect("decide b"));
    let recorded = [&da, &db_]
        .iter()
        .filter(|d| matches!(d, Decided::Recorded(_)))
        .count();
    assert_eq!(recorded, 1, "{da:?} {db_:?}");
    assert!(
        [&da, &db_]
            .iter()
            .any(|d| matches!(d, Decided::AlreadyDecided(_))),
        "{da:?} {db_:?}"
    );
    // Late deliveries change nothing and send nothing.
    assert!(matches!(
        a.decide(&id, Verdict::Deny, &alice, None)
            .await
            .expect("late"),
        Decided::AlreadyDecided(_)
    ));
    assert!(b.resume_approvals().await.expect("resume").is_empty());

    assert_eq!(upstream.requests(), 1, "one request for the approved call");
    assert_eq!(upstream.effect_count(), 1);
    let now = journal_a
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(now.state, ApprovalState::Finished, "{now:?}");
    assert_eq!(
        now.result.as_ref().map(|r| r.status),
        Some(Status::Completed)
    );
    let execution = now.execution.clone().expect("execution attempt");
    let report = journal_b.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    let records = journal_b.records().await.expect("records");
    // Parked, decided once, executed.
    assert_eq!(records.len(), 3, "{records:#?}");
    assert_eq!(records[2].event.attempt_id, execution);
    assert_eq!(records[2].event.dispatches, 1);
    assert!(journal_a.unresolved().await.expect("unresolved").is_empty());
}

#[tokio::test]
async fn a_stale_claim_can_neither_begin_nor_settle_an_approved_call() {
    let db = TestDb::create().await;
    let upstream = Upstream::start(|_| Reply::Idempotent(None)).await;
    let (a, journal) = executor(&db, &upstream, "exe-a").await;
    let other = PostgresJournal::connect(&db.url).await.expect("journal");
    let parked = a
        .call(
            "create_deployment",
            json!({"project_id": "proj_2", "build_id": "b2"}),
            &Session::new("s2"),
        )
        .await;
    let id = parked.approval_id.clone().expect("approval id");
    // Decided through the store alone (no executor resumes it).
    let decided = sallyport_core::approval::decide(
        journal.as_ref(),
        &id,
        Verdict::Approve,
        &Decider::new("carol", "console"),
        None,
    )
    .await
    .expect("decide");
    assert!(matches!(decided, Decided::Recorded(_)));

    // A claim with a lease already over, then taken over by another executor.
    let now = now_ms();
    let first = match journal
        .claim_approval(&id, "old", now, 0)
        .await
        .expect("claim")
    {
        Transition::Applied(a) => a.claim.expect("claim"),
        other => panic!("expected a claim, got {other:?}"),
    };
    assert_eq!(first.epoch, 1);
    let second = match other
        .claim_approval(&id, "new", now, 60_000)
        .await
        .expect("claim")
    {
        Transition::Applied(a) => a.claim.expect("claim"),
        other => panic!("expected a takeover, got {other:?}"),
    };
    assert_eq!((second.owner.as_str(), second.epoch), ("new", 2));
    // A live claim is not taken.
    assert!(matches!(
        journal
            .claim_approval(&id, "third", now, 60_000)
            .await
            .expect("claim"),
        Transition::Unchanged(_)
    ));

    let intent = Intent::for_bench(true);
    assert!(matches!(
        journal.begin_approved(&id, &first, &intent).await,
        Err(JournalError::Fenced)
    ));
    let stored = db
        .sql()
        .await
        .query_one("SELECT count(*) FROM sallyport_attempts", &[])
        .await
        .expect("count")
        .get::<_, i64>(0);
    assert_eq!(stored, 0, "a fenced begin writes no intent");
    other
        .begin_approved(&id, &second, &intent)
        .await
        .expect("the current claim begins");
    let executing = other.approval(&id).await.expect("read").expect("stored");
    assert_eq!(executing.state, ApprovalState::Executing);
    assert_eq!(executing.execution.as_ref(), Some(&intent.attempt_id));
    assert_eq!(other.unresolved().await.expect("unresolved").len(), 1);

    let result = parked.clone();
    let event = sallyport_core::journal::AuditEvent::for_bench(&intent);
    assert!(matches!(
        journal
            .settle_approval(&id, &first, &result, event.clone())
            .await,
        Err(JournalError::Fenced)
    ));
    let record = other
        .settle_approval(&id, &second, &result, event)
        .await
        .expect("the current claim settles");
    assert_eq!(record.event.attempt_id, intent.attempt_id);
    let finished = journal.approval(&id).await.expect("read").expect("stored");
    assert_eq!(finished.state, ApprovalState::Finished);
    assert!(other.unresolved().await.expect("unresolved").is_empty());
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(
        upstream.requests(),
        0,
        "nothing here went through a channel"
    );
}
