//! Cedar policies at the authorize stage, through a real executor, a real SQLite journal and
//! a request-counting HTTP upstream on 127.0.0.1:0. The policies are the example's,
//! `examples/policies/invoices.cedar`: allow, deny (a forbid and no permit), require consent
//! for an action whose own rule asks no one, a rate limit (the 6th call in the hour is
//! denied), validation at load, and reloading from the file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sallyport_cedar::{CedarError, CedarPolicy};
use sallyport_core::code::RefusalCode;
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::outcome::ActionResult;
use sallyport_core::{Action, Catalog, Executor, Session, Status};
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
    #[policy]
    currency: String,
    /// Why.
    #[audit_note]
    reason: String,
}

/// Read one invoice.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_invoice", effect = observe)]
#[http(get = "/v1/invoices/{invoice_id}", result = Invoice)]
struct GetInvoice {
    invoice_id: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Invoice {
    id: String,
}

fn catalog() -> Catalog {
    Catalog::builder()
        .action::<CreateInvoice>()
        .action::<GetInvoice>()
        .build()
        .expect("catalog")
}

fn example_policies() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies/invoices.cedar")
}

struct Rig {
    upstream: Upstream,
    executor: Executor,
    journal: PathBuf,
    policy: Arc<CedarPolicy>,
    asks: Arc<AtomicU32>,
    _dir: tempfile::TempDir,
}

/// An executor with the policies at `policies` and a consent provider that counts its
/// questions and answers `answer`.
async fn rig(policies: &Path, answer: ConsentDecision) -> Rig {
    let upstream = Upstream::start(|_| Reply::Json(200, json!({"id": "inv_1"}))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("journal.db");
    let catalog = catalog();
    let policy = Arc::new(CedarPolicy::from_file(&catalog, policies).expect("policies load"));
    let asks = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&asks);
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(&journal).expect("journal"))
        .channel(
            HttpChannel::builder()
                .base_url(upstream.url())
                .build()
                .expect("channel"),
        )
        .consent(FnConsent::new(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            let answer = answer.clone();
            async move { answer }
        }))
        .policy_arc(policy.clone())
        .build()
        .expect("executor");
    Rig {
        upstream,
        executor,
        journal,
        policy,
        asks,
        _dir: dir,
    }
}

fn billing(id: &str) -> Session {
    Session::new(id)
        .allow_any("customer")
        .with_attribute("team", "billing")
}

fn invoice(customer: &str, amount_cents: u64) -> Value {
    json!({"customer_id": customer, "amount_cents": amount_cents, "currency": "EUR",
           "reason": "monthly billing run"})
}

impl Rig {
    fn audit(&self, result: &ActionResult) -> Value {
        audit_event(&self.journal, result.attempt_id.as_str())
    }

    /// How many audit records the attempt has.
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
async fn a_call_the_policy_permits_is_sent_and_its_record_names_the_permit() {
    let rig = rig(&example_policies(), ConsentDecision::Approve).await;
    let result = rig
        .executor
        .call("create_invoice", invoice("cus_7", 5_000), &billing("s1"))
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.summary());
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(
        rig.asks.load(Ordering::SeqCst),
        0,
        "the action's rule asks no one"
    );
    let audit = rig.audit(&result);
    assert_eq!(
        audit["policy"],
        json!({"name": "invoices.cedar", "decision": "allow", "rules": ["billing-creates-invoices"]})
    );
    assert_eq!(audit["consent"], "not_required");
    // A call naming no object is authorized on `Unscoped::"get_invoice"`.
    let read = rig
        .executor
        .call(
            "get_invoice",
            json!({"invoice_id": "inv_1"}),
            &Session::new("s2"),
        )
        .await;
    assert_eq!(read.status, Status::Completed, "{}", read.summary());
    assert_eq!(rig.upstream.requests(), 2);
    assert_eq!(
        rig.audit(&read)["policy"]["rules"],
        json!(["anyone-reads-invoices"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_is_rejected_policy_denied_sends_nothing_and_has_one_record() {
    let rig = rig(&example_policies(), ConsentDecision::Approve).await;
    // No permit matches a session outside the billing team.
    let outsider = Session::new("s1")
        .allow_any("customer")
        .with_attribute("team", "sales");
    let result = rig
        .executor
        .call("create_invoice", invoice("cus_7", 5_000), &outsider)
        .await;
    assert_eq!(result.status, Status::Rejected);
    assert_eq!(result.code, Some(RefusalCode::PolicyDenied.into()));
    assert_eq!(result.code_str(), Some("policy_denied"));
    assert_eq!(
        result.reason.as_deref(),
        Some(
            "policy `invoices.cedar` denied this call: no policy permits this call for customer cus_7; nothing was sent"
        )
    );
    assert_eq!(rig.upstream.requests(), 0);
    assert_eq!(
        rig.asks.load(Ordering::SeqCst),
        0,
        "no human is asked about a denied call"
    );
    assert_eq!(rig.records(&result), 1);
    let audit = rig.audit(&result);
    assert_eq!(audit["code"], "policy_denied");
    assert_eq!(audit["phase"], "refused");
    assert_eq!(audit["dispatches"], 0);
    assert_eq!(audit["policy"]["name"], "invoices.cedar");
    assert_eq!(audit["policy"]["decision"], "deny");

    // A forbid names itself and gives its @reason.
    let held = rig
        .executor
        .call(
            "create_invoice",
            invoice("cus_on_hold", 5_000),
            &billing("s1"),
        )
        .await;
    assert_eq!(held.code, Some(RefusalCode::PolicyDenied.into()));
    assert_eq!(
        held.reason.as_deref(),
        Some(
            "policy `invoices.cedar` denied this call: this customer's account is on hold for customer cus_on_hold; nothing was sent"
        )
    );
    assert_eq!(rig.records(&held), 1);
    assert_eq!(
        rig.audit(&held)["policy"],
        json!({"name": "invoices.cedar", "decision": "deny",
               "reason": "this customer's account is on hold for customer cus_on_hold",
               "rules": ["customer-on-hold"]})
    );
    assert_eq!(rig.upstream.requests(), 0);

    // Preflight answers the same, and records nothing.
    let preflight = rig
        .executor
        .preflight("create_invoice", invoice("cus_7", 5_000), &outsider)
        .expect_err("the policy denies");
    assert_eq!(preflight.code, RefusalCode::PolicyDenied);
    let conn = rusqlite::Connection::open(&rig.journal).expect("open journal");
    let total: i64 = conn
        .query_row("SELECT COUNT(*) FROM audit", [], |r| r.get(0))
        .expect("count");
    assert_eq!(total, 2, "preflight wrote nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consent_permit_asks_a_human_although_the_actions_rule_asks_no_one() {
    let rig = rig(&example_policies(), ConsentDecision::Approve).await;
    let result = rig
        .executor
        .call("create_invoice", invoice("cus_7", 250_000), &billing("s1"))
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.summary());
    assert_eq!(rig.asks.load(Ordering::SeqCst), 1, "the provider was asked");
    assert_eq!(rig.upstream.requests(), 1);
    let audit = rig.audit(&result);
    assert_eq!(audit["consent"], "approved");
    assert_eq!(audit["policy"]["decision"], "require_consent");
    assert_eq!(
        audit["policy"]["reason"],
        "invoices over 1,000.00 need a human's approval for customer cus_7"
    );
    let rules = audit["policy"]["rules"].as_array().expect("rules");
    assert!(
        rules.contains(&json!("large-invoices-need-a-human")),
        "{rules:?}"
    );
    // The same call again asks again: the policy's consent is per call.
    let again = rig
        .executor
        .call("create_invoice", invoice("cus_7", 250_000), &billing("s1"))
        .await;
    assert_eq!(again.status, Status::Completed);
    assert_eq!(rig.asks.load(Ordering::SeqCst), 2);
    // A small invoice needs no one.
    let small = rig
        .executor
        .call("create_invoice", invoice("cus_7", 100), &billing("s1"))
        .await;
    assert_eq!(small.status, Status::Completed);
    assert_eq!(rig.asks.load(Ordering::SeqCst), 2);
    assert_eq!(rig.upstream.requests(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_who_denies_what_the_policy_sent_to_consent_stops_the_call_unsent() {
    let rig = rig(
        &example_policies(),
        ConsentDecision::Deny {
            reason: Some("not this month".into()),
        },
    )
    .await;
    let result = rig
        .executor
        .call("create_invoice", invoice("cus_7", 250_000), &billing("s1"))
        .await;
    assert_eq!(result.status, Status::Rejected);
    assert_eq!(result.code, Some(RefusalCode::ConsentDenied.into()));
    assert_eq!(rig.asks.load(Ordering::SeqCst), 1);
    assert_eq!(rig.upstream.requests(), 0);
    let audit = rig.audit(&result);
    assert_eq!(audit["consent"], "denied");
    assert_eq!(audit["policy"]["decision"], "require_consent");
    assert_eq!(rig.records(&result), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sixth_invoice_in_an_hour_is_denied_by_the_rate_policy() {
    let rig = rig(&example_policies(), ConsentDecision::Approve).await;
    let session = billing("s1");
    for n in 1..=5 {
        let result = rig
            .executor
            .call("create_invoice", invoice("cus_7", 100 + n), &session)
            .await;
        assert_eq!(
            result.status,
            Status::Completed,
            "call {n}: {}",
            result.summary()
        );
    }
    assert_eq!(rig.upstream.requests(), 5);
    let sixth = rig
        .executor
        .call("create_invoice", invoice("cus_7", 106), &session)
        .await;
    assert_eq!(sixth.status, Status::Rejected);
    assert_eq!(sixth.code, Some(RefusalCode::PolicyDenied.into()));
    assert_eq!(
        sixth.reason.as_deref(),
        Some(
            "policy `invoices.cedar` denied this call: at most 5 invoices per session per hour for customer cus_7; nothing was sent"
        )
    );
    assert_eq!(rig.upstream.requests(), 5, "the sixth was not sent");
    assert_eq!(
        rig.audit(&sixth)["policy"]["rules"],
        json!(["five-invoices-an-hour"])
    );
    // The denied call does not count; a seventh is denied for the same five.
    let seventh = rig
        .executor
        .call("create_invoice", invoice("cus_7", 107), &session)
        .await;
    assert_eq!(seventh.code, Some(RefusalCode::PolicyDenied.into()));
    // Counts are per session (and per action).
    let other = rig
        .executor
        .call("create_invoice", invoice("cus_7", 108), &billing("s2"))
        .await;
    assert_eq!(other.status, Status::Completed, "{}", other.summary());
    assert_eq!(rig.upstream.requests(), 6);
}

#[test]
fn a_policy_naming_an_unknown_action_fails_validation_at_load_with_cedars_message() {
    let text = r#"
        @id("nobody-deletes")
        forbid (principal, action == Action::"delete_everything", resource);
    "#;
    let error = CedarPolicy::from_text(&catalog(), "bad.cedar", text).expect_err("invalid");
    let CedarError::Validation { name, message } = &error else {
        panic!("expected a validation error, got {error:?}");
    };
    assert_eq!(name, "bad.cedar");
    assert!(
        message.contains(
            r#"for policy `nobody-deletes`, unrecognized action `Action::"delete_everything"`"#
        ),
        "{message}"
    );
    assert!(
        error
            .to_string()
            .contains("do not validate against the catalog's schema")
    );

    // So do a context attribute the call does not have and a type error.
    let unknown_arg = r#"forbid (principal, action == Action::"create_invoice", resource)
        when { context.args.customer_id == "cus_7" };"#;
    let error = CedarPolicy::from_text(&catalog(), "args.cedar", unknown_arg).expect_err("invalid");
    assert!(matches!(error, CedarError::Validation { .. }), "{error:?}");
    let type_error = r#"forbid (principal, action == Action::"create_invoice", resource)
        when { context.args.currency > 5 };"#;
    let error = CedarPolicy::from_text(&catalog(), "types.cedar", type_error).expect_err("invalid");
    assert!(matches!(error, CedarError::Validation { .. }), "{error:?}");

    // And @consent only on a permit, only "required".
    let forbid_consent = r#"@consent("required") forbid (principal, action, resource);"#;
    let error = CedarPolicy::from_text(&catalog(), "c.cedar", forbid_consent).expect_err("invalid");
    assert!(matches!(error, CedarError::Annotation { .. }), "{error:?}");
    let other_value = r#"@consent("maybe") permit (principal, action, resource);"#;
    let error = CedarPolicy::from_text(&catalog(), "c.cedar", other_value).expect_err("invalid");
    assert!(
        error
            .to_string()
            .contains(r#"the only value is "required""#),
        "{error}"
    );

    // The example's policies validate.
    CedarPolicy::from_file(&catalog(), example_policies()).expect("the example loads");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloading_the_file_changes_the_decision_and_a_broken_file_keeps_the_last_good_set() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("live.cedar");
    std::fs::write(
        &file,
        r#"@id("all-invoices") permit (principal, action == Action::"create_invoice", resource);"#,
    )
    .expect("write");
    let rig = rig(&file, ConsentDecision::Approve).await;
    let session = billing("s1");
    let call = || {
        rig.executor
            .call("create_invoice", invoice("cus_7", 100), &session)
    };
    assert_eq!(call().await.status, Status::Completed);

    std::fs::write(
        &file,
        r#"@id("invoices-frozen") @reason("invoicing is frozen")
           forbid (principal, action == Action::"create_invoice", resource);
           permit (principal, action, resource);"#,
    )
    .expect("write");
    assert!(rig.policy.reload().expect("reload"), "the policies changed");
    assert_eq!(rig.policy.generation(), 1);
    let frozen = call().await;
    assert_eq!(frozen.code, Some(RefusalCode::PolicyDenied.into()));
    assert!(
        frozen
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("invoicing is frozen"),
        "{frozen:?}"
    );
    assert!(
        !rig.policy.reload().expect("reload"),
        "same text: nothing changes"
    );

    std::fs::write(
        &file,
        r#"permit (principal, action == Action::"no_such_action", resource);"#,
    )
    .expect("write");
    let error = rig.policy.reload().expect_err("the broken file is refused");
    assert!(matches!(error, CedarError::Validation { .. }), "{error:?}");
    let kept = rig.policy.last_error().expect("the error is kept");
    assert!(kept.contains("unrecognized action"), "{kept}");
    assert_eq!(rig.policy.generation(), 1, "the last good set stays");
    assert_eq!(call().await.code, Some(RefusalCode::PolicyDenied.into()));
    std::fs::write(&file, "permit (principal, action").expect("write");
    assert!(matches!(rig.policy.reload(), Err(CedarError::Parse { .. })));
    assert_eq!(call().await.code, Some(RefusalCode::PolicyDenied.into()));
    assert_eq!(rig.upstream.requests(), 1, "only the first call was sent");

    // The watcher picks a good file up by itself and clears the error.
    let watch = rig.policy.watch(Duration::from_millis(20));
    let thawed =
        r#"@id("thawed") permit (principal, action == Action::"create_invoice", resource);"#;
    let staged = dir.path().join(".live.cedar.tmp");
    std::fs::write(&staged, thawed).expect("write");
    std::fs::rename(&staged, &file).expect("rename");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while rig.policy.text() != thawed {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the watcher reloaded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    watch.abort();
    assert_eq!(
        rig.policy.generation(),
        2,
        "the broken file was never loaded"
    );
    assert_eq!(rig.policy.last_error(), None);
    let after = call().await;
    assert_eq!(after.status, Status::Completed, "{}", after.summary());
    assert_eq!(rig.audit(&after)["policy"]["rules"], json!(["thawed"]));
    assert_eq!(rig.upstream.requests(), 2);
}
