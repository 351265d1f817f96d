//! Remembered approvals ("approve and remember") through real executors, a real SQLite
//! journal file or a real PostgreSQL, the real HTTP channel and a local upstream that counts
//! what it receives: a covered call goes out without asking and says why; a call outside the
//! scope, after the window, under a changed definition or after a revocation is parked
//! again with nothing sent.

use std::sync::Arc;
use std::time::Duration;

use sallyport_core::approval::{
    self, ApprovalId, ApprovalStep, Decided, Decider, RememberChoice, RememberedApproval, Revoked,
};
use sallyport_core::code::ConsentOutcome;
use sallyport_core::journal::{AuditRecord, Journal};
use sallyport_core::outcome::ActionResult;
use sallyport_core::{Executor, RefusalCode, Session, Status};
use sallyport_postgres::PostgresJournal;
use sallyport_tests::approvals_rig::{self, HostOptions};
use sallyport_tests::http_server::{Received, Reply, Upstream};
use sallyport_tests::postgres::TestDb;
use serde_json::json;

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

fn parked_id(result: &ActionResult) -> ApprovalId {
    assert_eq!(result.status, Status::Pending, "{result:?}");
    assert_eq!(result.code, Some(RefusalCode::AwaitingApproval.into()));
    result.approval_id.clone().expect("an approval id")
}

fn alice() -> Decider {
    Decider::new("alice", "cli")
}

/// Parks invoice `n` in `session`, then approves and remembers it as alice with `choice`
/// and carries the approved call out: one POST.
async fn remember(
    executor: &Executor,
    upstream: &Upstream,
    session: &Session,
    n: usize,
    choice: RememberChoice,
) -> RememberedApproval {
    let parked = executor
        .call("send_invoice", approvals_rig::invoice(n), session)
        .await;
    let id = parked_id(&parked);
    assert_eq!(posts_for(upstream, n), 0, "parked: nothing sent");
    let store = executor.approval_store().expect("a store");
    let outcome = approval::remember_under(store.as_ref(), None, &id, &alice(), None, choice)
        .await
        .expect("remember");
    assert!(
        matches!(outcome.decided, Decided::Recorded(_)),
        "{outcome:?}"
    );
    let sent = executor
        .resume_approval(&id)
        .await
        .expect("resume")
        .expect("carried out");
    assert_eq!(sent.status, Status::Completed, "{sent:?}");
    assert_eq!(posts_for(upstream, n), 1);
    outcome.remembered.expect("remembered")
}

/// The record with `receipt`.
async fn record_of(journal: &dyn Journal, result: &ActionResult) -> AuditRecord {
    let receipt = result.receipt_id.clone().expect("a receipt");
    journal
        .records()
        .await
        .expect("records")
        .into_iter()
        .find(|r| r.event.receipt_id == receipt)
        .expect("the call's record")
}

/// The call went out unasked under `r`, and its result and record say so.
async fn sent_under(executor: &Executor, result: &ActionResult, r: &RememberedApproval) {
    assert_eq!(result.status, Status::Completed, "{result:?}");
    assert_eq!(result.approval_id, None, "no approval was parked");
    assert_eq!(result.remembered_approval.as_ref(), Some(&r.remembered_id));
    let store = executor.approval_store().expect("a store");
    let record = record_of(store.as_ref(), result).await;
    assert_eq!(record.event.consent, Some(ConsentOutcome::Remembered));
    let note = record.event.approval.expect("an approval note");
    assert_eq!(note.step, ApprovalStep::AppliedRemembered);
    assert_eq!(note.remembered.as_ref(), Some(&r.remembered_id));
    assert_eq!(note.approval_id, r.source);
    assert_eq!(note.by.as_deref(), Some("alice"));
    assert_eq!(note.scope, Some(r.scope.describe()));
}

struct Rig {
    upstream: Upstream,
    options: HostOptions,
    executor: Executor,
    _dir: tempfile::TempDir,
}

async fn rig() -> Rig {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = HostOptions::new(dir.path().join("journal.db"), upstream.url());
    let executor = approvals_rig::executor(&options, approvals_rig::vault(&options.upstream));
    Rig {
        upstream,
        options,
        executor,
        _dir: dir,
    }
}

/// The exact-arguments proof, on any executor: identical calls go out unasked and name the
/// remembered approval; other arguments still park; after a revocation the identical call
/// parks again.
async fn exact_arguments_then_revoke(executor: &Executor, upstream: &Upstream) {
    let session = approvals_rig::session();
    let r = remember(
        executor,
        upstream,
        &session,
        1,
        RememberChoice::ExactArguments,
    )
    .await;
    for sent in 2..=3 {
        let again = executor
            .call("send_invoice", approvals_rig::invoice(1), &session)
            .await;
        sent_under(executor, &again, &r).await;
        assert_eq!(posts_for(upstream, 1), sent, "sent without asking");
    }
    // From another session too: the scope is the request, not the session.
    let elsewhere = Session::new("agent-2")
        .requested_by("billing-bot")
        .allow_any("customer");
    let again = executor
        .call("send_invoice", approvals_rig::invoice(1), &elsewhere)
        .await;
    sent_under(executor, &again, &r).await;
    assert_eq!(posts_for(upstream, 1), 4);
    // Other arguments: asked.
    let other = executor
        .call("send_invoice", approvals_rig::invoice(2), &session)
        .await;
    parked_id(&other);
    assert_eq!(posts_for(upstream, 2), 0);
    // Revoked: the identical call is asked again, nothing sent.
    let store = executor.approval_store().expect("a store");
    let revoked = approval::revoke_remembered(
        store.as_ref(),
        &r.remembered_id,
        &Decider::new("bob", "cli"),
    )
    .await
    .expect("revoke");
    assert!(matches!(revoked, Revoked::Applied(_)), "{revoked:?}");
    let after = executor
        .call("send_invoice", approvals_rig::invoice(1), &elsewhere)
        .await;
    parked_id(&after);
    assert_eq!(after.remembered_approval, None);
    // In the session of the approval it was made on, an identical call is answered with
    // where that approval stands (its stored result, as before remembered approvals):
    // nothing is sent either.
    let same_session = executor
        .call("send_invoice", approvals_rig::invoice(1), &session)
        .await;
    assert_eq!(same_session.remembered_approval, None, "{same_session:?}");
    assert_eq!(same_session.approval_id.as_ref(), Some(&r.source));
    assert_eq!(
        posts_for(upstream, 1),
        4,
        "nothing more sent after the revocation"
    );
    assert!(store.verify().await.expect("verify").is_intact());
}

#[tokio::test]
async fn an_exact_arguments_remembered_approval_sends_identical_calls_unasked_until_revoked_sqlite()
{
    let rig = rig().await;
    exact_arguments_then_revoke(&rig.executor, &rig.upstream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exact_arguments_remembered_approval_sends_identical_calls_unasked_until_revoked_postgres()
 {
    let upstream = Upstream::start(reply).await;
    let db = TestDb::create().await;
    let journal = Arc::new(PostgresJournal::connect(&db.url).await.expect("connect"));
    let options = HostOptions::new("unused.db", upstream.url());
    let executor =
        approvals_rig::executor_on(&options, approvals_rig::vault(&upstream.url()), journal);
    exact_arguments_then_revoke(&executor, &upstream).await;
}

#[tokio::test]
async fn a_session_remembered_approval_covers_any_arguments_in_its_session_only() {
    let rig = rig().await;
    let session = approvals_rig::session();
    let r = remember(
        &rig.executor,
        &rig.upstream,
        &session,
        1,
        RememberChoice::Session,
    )
    .await;
    let other_args = rig
        .executor
        .call("send_invoice", approvals_rig::invoice(5), &session)
        .await;
    sent_under(&rig.executor, &other_args, &r).await;
    assert_eq!(posts_for(&rig.upstream, 5), 1);
    let other_session = Session::new("agent-2")
        .requested_by("billing-bot")
        .allow_any("customer");
    let parked = rig
        .executor
        .call("send_invoice", approvals_rig::invoice(6), &other_session)
        .await;
    parked_id(&parked);
    assert_eq!(posts_for(&rig.upstream, 6), 0, "another session is asked");
}

#[tokio::test]
async fn a_window_remembered_approval_covers_any_call_until_it_ends() {
    let rig = rig().await;
    let session = approvals_rig::session();
    let r = remember(
        &rig.executor,
        &rig.upstream,
        &session,
        1,
        RememberChoice::Window(Duration::from_secs(2)),
    )
    .await;
    let elsewhere = Session::new("agent-9")
        .requested_by("billing-bot")
        .allow_any("customer");
    let inside = rig
        .executor
        .call("send_invoice", approvals_rig::invoice(7), &elsewhere)
        .await;
    sent_under(&rig.executor, &inside, &r).await;
    assert_eq!(posts_for(&rig.upstream, 7), 1);
    let until = match r.scope {
        approval::RememberScope::Window { until_ms } => until_ms,
        ref other => panic!("a window, not {other:?}"),
    };
    while sallyport_core::clock::now_ms() <= until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = rig
        .executor
        .call("send_invoice", approvals_rig::invoice(8), &elsewhere)
        .await;
    parked_id(&after);
    assert_eq!(posts_for(&rig.upstream, 8), 0, "the window ended: asked");
}

#[tokio::test]
async fn a_definition_change_revokes_a_remembered_approval_for_good() {
    let rig = rig().await;
    let session = approvals_rig::session();
    // A window covers any arguments: only the definition hash tells the calls apart (an
    // exact-arguments scope's fingerprint also covers the hash, and would hide a missing
    // check).
    let r = remember(
        &rig.executor,
        &rig.upstream,
        &session,
        1,
        RememberChoice::Window(Duration::from_secs(600)),
    )
    .await;
    // The same journal, the action's definition changed (another description).
    let mut changed = rig.options.clone();
    changed.changed_definition = true;
    let drifted = approvals_rig::executor(&changed, approvals_rig::vault(&changed.upstream));
    let parked = drifted
        .call("send_invoice", approvals_rig::invoice(1), &session)
        .await;
    parked_id(&parked);
    assert_eq!(posts_for(&rig.upstream, 1), 1, "asked again, nothing sent");
    // Drift revoked it, on the record, as the definition's change.
    let store = rig.executor.approval_store().expect("a store");
    let listed = store.remembered_approvals(None).await.expect("list");
    let revoked = listed
        .iter()
        .find(|l| l.remembered_id == r.remembered_id)
        .and_then(|l| l.revoked.as_ref())
        .expect("revoked by the drift");
    assert_eq!(revoked.by.channel, "definition_drift");
    let records = store.records().await.expect("records");
    assert!(
        records
            .iter()
            .any(|rec| rec.event.approval.as_ref().is_some_and(|n| {
                n.step == ApprovalStep::Revoked && n.remembered.as_ref() == Some(&r.remembered_id)
            })),
        "the revocation is audited"
    );
    // It stays revoked: under the unchanged definition a call it covered before is asked.
    let unchanged = rig
        .executor
        .call("send_invoice", approvals_rig::invoice(2), &session)
        .await;
    parked_id(&unchanged);
    assert_eq!(posts_for(&rig.upstream, 2), 0, "nothing sent");
}

#[tokio::test]
async fn the_approver_never_covers_calls_they_requested_themselves() {
    let rig = rig().await;
    let session = approvals_rig::session();
    remember(
        &rig.executor,
        &rig.upstream,
        &session,
        1,
        RememberChoice::Window(Duration::from_secs(600)),
    )
    .await;
    let own = Session::new("alice-session")
        .requested_by("alice")
        .allow_any("customer");
    let parked = rig
        .executor
        .call("send_invoice", approvals_rig::invoice(1), &own)
        .await;
    parked_id(&parked);
    assert_eq!(posts_for(&rig.upstream, 1), 1, "separation of duties holds");
}

#[tokio::test]
async fn remembering_is_refused_for_a_quorum_and_decides_nothing() {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut options = HostOptions::new(dir.path().join("journal.db"), upstream.url());
    options.approvals = 2;
    let executor = approvals_rig::executor(&options, approvals_rig::vault(&options.upstream));
    let parked = executor
        .call(
            "send_invoice",
            approvals_rig::invoice(1),
            &approvals_rig::session(),
        )
        .await;
    let id = parked_id(&parked);
    let store = executor.approval_store().expect("a store");
    let refused = approval::remember_under(
        store.as_ref(),
        None,
        &id,
        &alice(),
        None,
        RememberChoice::ExactArguments,
    )
    .await
    .expect_err("refused");
    assert!(
        refused
            .to_string()
            .contains("cannot remember this approval"),
        "{refused}"
    );
    let standing = store.approval(&id).await.expect("read").expect("there");
    assert_eq!(standing.approval_count(), 0, "nothing was decided");
    assert!(
        store
            .remembered_approvals(None)
            .await
            .expect("list")
            .is_empty()
    );
    assert_eq!(posts_for(&upstream, 1), 0);
}
