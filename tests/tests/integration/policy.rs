//! The `Policy` trait at the authorize stage with a hand-written policy, through a real
//! executor, a real SQLite journal and a request-counting HTTP upstream on 127.0.0.1:0: what
//! the policy sees, a denial that sends nothing, consent required for an action whose rule
//! asks no one, and a parked call decided again when it resumes.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use sallyport_core::action::ScopedValue;
use sallyport_core::approval::{ApprovalState, ConsentMode, Decided, Decider, Verdict};
use sallyport_core::code::RefusalCode;
use sallyport_core::journal::SqliteJournal;
use sallyport_core::outcome::ActionResult;
use sallyport_core::policy::{CallCounts, Policy, PolicyDecision, PolicyRequest};
use sallyport_core::{Action, Catalog, EffectClass, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{Reply, Upstream, audit_event};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Create one invoice for a customer.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "create_invoice", effect = reversible_change, consent = none, data = [financial])]
#[http(post = "/v1/customers/{customer_id}/invoices", result = Invoice)]
#[serde(deny_unknown_fields)]
struct CreateInvoice {
    #[scope(customer)]
    customer_id: String,
    #[policy]
    amount_cents: u64,
    memo: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Invoice {
    id: String,
}

/// What the policy saw of one call.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    session: String,
    team: Option<String>,
    action: String,
    objects: Vec<ScopedValue>,
    effect: EffectClass,
    data_classes: Vec<String>,
    arguments: Value,
    calls: CallCounts,
}

/// A policy that answers what the test sets and remembers what it saw.
#[derive(Debug, Default)]
struct Scripted {
    answer: Mutex<Option<PolicyDecision>>,
    seen: Mutex<Vec<Seen>>,
}

impl Scripted {
    fn answer(&self, decision: PolicyDecision) {
        *self.answer.lock().unwrap() = Some(decision);
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Policy for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn decide(&self, request: &PolicyRequest<'_>) -> PolicyDecision {
        self.seen.lock().unwrap().push(Seen {
            session: request.session.id().to_string(),
            team: request.session.attribute("team").map(str::to_owned),
            action: request.action.to_owned(),
            objects: request.objects.to_vec(),
            effect: request.effect,
            data_classes: request
                .data_classes
                .iter()
                .map(|c| c.as_str().to_owned())
                .collect(),
            arguments: Value::Object(request.arguments.clone()),
            calls: request.calls,
        });
        self.answer
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_else(|| PolicyDecision::deny("no answer set"))
    }
}

struct Rig {
    upstream: Upstream,
    executor: Executor,
    journal: PathBuf,
    policy: Arc<Scripted>,
    _dir: tempfile::TempDir,
}

async fn rig(deferred: bool) -> Rig {
    let upstream = Upstream::start(|_| Reply::Json(200, json!({"id": "inv_1"}))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("journal.db");
    let catalog = Catalog::builder()
        .action::<CreateInvoice>()
        .build()
        .expect("catalog");
    let policy = Arc::new(Scripted::default());
    let mut builder = Executor::builder(catalog)
        .journal(SqliteJournal::open(&journal).expect("journal"))
        .channel(
            HttpChannel::builder()
                .base_url(upstream.url())
                .build()
                .expect("channel"),
        )
        .policy_arc(policy.clone());
    if deferred {
        builder = builder.consent_mode(ConsentMode::Deferred);
    }
    Rig {
        upstream,
        executor: builder.build().expect("executor"),
        journal,
        policy,
        _dir: dir,
    }
}

fn session() -> Session {
    Session::new("s1")
        .allow("customer", ["cus_7"])
        .with_attribute("team", "billing")
}

fn invoice(amount_cents: u64) -> Value {
    json!({"customer_id": "cus_7", "amount_cents": amount_cents, "memo": "March"})
}

impl Rig {
    async fn call(&self, amount_cents: u64) -> ActionResult {
        self.executor
            .call("create_invoice", invoice(amount_cents), &session())
            .await
    }

    fn audit(&self, result: &ActionResult) -> Value {
        audit_event(&self.journal, result.attempt_id.as_str())
    }

    fn records(&self, result: &ActionResult) -> i64 {
        let conn = rusqlite::Connection::open(&self.journal).expect("open journal");
        conn.query_row(
            "SELECT COUNT(*) FROM audit WHERE attempt_id = ?1",
            [result.attempt_id.as_str()],
            |r| r.get(0),
        )
        .expect("count")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_sees_the_session_the_card_the_marked_arguments_and_the_counts() {
    let rig = rig(false).await;
    rig.policy.answer(PolicyDecision::allow().with_rule("open"));
    let first = rig.call(500).await;
    assert_eq!(first.status, Status::Completed, "{}", first.summary());
    let second = rig.call(700).await;
    assert_eq!(second.status, Status::Completed, "{}", second.summary());
    assert_eq!(rig.upstream.requests(), 2);
    let seen = rig.policy.seen();
    let expected = |amount: u64, calls: CallCounts| Seen {
        session: "s1".into(),
        team: Some("billing".into()),
        action: "create_invoice".into(),
        objects: vec![ScopedValue::new("customer", "customer_id", "cus_7")],
        effect: EffectClass::ReversibleChange,
        data_classes: vec!["financial".into()],
        // `memo` is not marked #[policy]: the policy never sees it.
        arguments: json!({ "amount_cents": amount }),
        calls,
    };
    assert_eq!(
        seen,
        [
            expected(500, CallCounts::new(0, 0, 0)),
            expected(700, CallCounts::new(1, 1, 1)),
        ]
    );
    assert_eq!(
        rig.audit(&second)["policy"],
        json!({"name": "scripted", "decision": "allow", "rules": ["open"]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_out_of_scope_never_reaches_the_policy() {
    let rig = rig(false).await;
    rig.policy.answer(PolicyDecision::allow());
    let result = rig
        .executor
        .call(
            "create_invoice",
            json!({"customer_id": "cus_999", "amount_cents": 1, "memo": "x"}),
            &session(),
        )
        .await;
    assert_eq!(result.code, Some(RefusalCode::OutOfScope.into()));
    assert!(rig.policy.seen().is_empty());
    assert_eq!(rig.audit(&result).get("policy"), None);
    assert_eq!(rig.upstream.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_is_rejected_policy_denied_with_no_request_and_one_record_naming_the_policy() {
    let rig = rig(false).await;
    rig.policy
        .answer(PolicyDecision::deny("invoices are frozen until April").with_rule("freeze"));
    let result = rig.call(500).await;
    assert_eq!(result.status, Status::Rejected);
    assert_eq!(result.code, Some(RefusalCode::PolicyDenied.into()));
    assert_eq!(
        result.reason.as_deref(),
        Some(
            "policy `scripted` denied this call: invoices are frozen until April; nothing was sent"
        )
    );
    assert_eq!(rig.upstream.requests(), 0);
    assert_eq!(rig.records(&result), 1);
    let audit = rig.audit(&result);
    assert_eq!(audit["phase"], "refused");
    assert_eq!(audit["code"], "policy_denied");
    assert_eq!(audit["dispatches"], 0);
    assert_eq!(
        audit["policy"],
        json!({"name": "scripted", "decision": "deny",
               "reason": "invoices are frozen until April", "rules": ["freeze"]})
    );
    // A denied call is not counted.
    rig.policy.answer(PolicyDecision::allow());
    assert_eq!(rig.call(500).await.status, Status::Completed);
    assert_eq!(rig.policy.seen()[1].calls, CallCounts::new(0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_consent_parks_an_action_whose_rule_asks_no_one_and_it_is_decided_again_on_resume()
{
    let rig = rig(true).await;
    rig.policy.answer(PolicyDecision::require_consent(
        "a human checks invoices today",
    ));
    let parked = rig.call(500).await;
    assert_eq!(parked.status, Status::Pending, "{}", parked.summary());
    assert_eq!(parked.code, Some(RefusalCode::AwaitingApproval.into()));
    assert_eq!(rig.upstream.requests(), 0);
    assert_eq!(rig.audit(&parked)["policy"]["decision"], "require_consent");
    let id = parked.approval_id.clone().expect("approval id");

    // Approved, the call resumes and the policy decides it again; it does not count itself.
    rig.policy.answer(PolicyDecision::allow());
    let decided = rig
        .executor
        .decide(&id, Verdict::Approve, &Decider::new("alice", "test"), None)
        .await
        .expect("decide");
    let Decided::Recorded(approval) = decided else {
        panic!("recorded: {decided:?}");
    };
    assert_eq!(approval.state, ApprovalState::Finished);
    let executed = approval.result.expect("result");
    assert_eq!(executed.status, Status::Completed, "{}", executed.to_json());
    assert_eq!(rig.upstream.requests(), 1);
    let seen = rig.policy.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].calls,
        CallCounts::new(0, 0, 0),
        "the resumed call is the first"
    );

    // A policy that denies by the time a parked call resumes stops it unsent.
    rig.policy.answer(PolicyDecision::require_consent(
        "a human checks invoices today",
    ));
    let parked = rig.call(900).await;
    assert_eq!(parked.status, Status::Pending);
    assert_eq!(
        rig.policy.seen()[2].calls,
        CallCounts::new(1, 1, 1),
        "the first call counts once"
    );
    rig.policy.answer(PolicyDecision::deny("frozen meanwhile"));
    let decided = rig
        .executor
        .decide(
            &parked.approval_id.clone().expect("id"),
            Verdict::Approve,
            &Decider::new("alice", "test"),
            None,
        )
        .await
        .expect("decide");
    let Decided::Recorded(approval) = decided else {
        panic!("recorded: {decided:?}");
    };
    let refused = approval.result.expect("result");
    assert_eq!(refused.code, Some(RefusalCode::PolicyDenied.into()));
    assert_eq!(rig.upstream.requests(), 1, "nothing more was sent");
}

/// A host policy that requires a human for a call is not answered by a remembered
/// approval: each such call is asked, even one identical to a call remembered with a time
/// window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_approval_never_answers_consent_the_policy_requires_per_call() {
    let rig = rig(true).await;
    rig.policy
        .answer(PolicyDecision::require_consent("a human checks invoices"));
    let parked = rig.call(500).await;
    let id = parked.approval_id.clone().expect("approval id");
    let store = rig.executor.approval_store().expect("store");
    let remembered = sallyport_core::approval::remember_under(
        store.as_ref(),
        None,
        &id,
        &Decider::new("alice", "test"),
        None,
        sallyport_core::approval::RememberChoice::Window(std::time::Duration::from_secs(3600)),
    )
    .await
    .expect("remember")
    .remembered
    .expect("remembered");
    rig.policy.answer(PolicyDecision::allow());
    rig.executor.resume_approval(&id).await.expect("resume");
    assert_eq!(rig.upstream.requests(), 1);

    rig.policy
        .answer(PolicyDecision::require_consent("a human checks invoices"));
    let again = rig
        .executor
        .call(
            "create_invoice",
            invoice(500),
            &Session::new("another-session").allow("customer", ["cus_7"]),
        )
        .await;
    assert_eq!(again.status, Status::Pending, "{}", again.summary());
    assert_eq!(again.code, Some(RefusalCode::AwaitingApproval.into()));
    assert_eq!(again.remembered_approval, None);
    assert_eq!(rig.upstream.requests(), 1, "asked, nothing sent");
    assert!(
        remembered.is_live_at(sallyport_core::clock::now_ms()),
        "the remembered approval is live: the policy made the difference"
    );
}
