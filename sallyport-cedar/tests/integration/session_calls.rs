//! Cedar rules over the session's recent calls (`context.session_calls`), through a real
//! executor, a real SQLite journal (whose shared call store the executor uses by default)
//! and a request-counting HTTP upstream on 127.0.0.1:0: "at most 3 external commitments per
//! session per hour", whatever the action, and "an invoice may be deleted only after it was
//! read in this session".

use sallyport_cedar::CedarPolicy;
use sallyport_core::code::RefusalCode;
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{Reply, Upstream};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Read one invoice.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_invoice", effect = observe)]
#[http(get = "/v1/invoices/{invoice_id}", result = Invoice)]
struct GetInvoice {
    #[scope(invoice)]
    invoice_id: String,
}

/// Delete one invoice for good.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "delete_invoice", effect = irreversible_or_broad)]
#[http(delete = "/v1/invoices/{invoice_id}", result = Invoice)]
struct DeleteInvoice {
    #[scope(invoice)]
    invoice_id: String,
}

/// Send one invoice to its customer.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "send_invoice", effect = external_commitment)]
#[http(post = "/v1/invoices/{invoice_id}/send", result = Invoice)]
struct SendInvoice {
    #[scope(invoice)]
    invoice_id: String,
}

/// Send a payment reminder to a customer.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "send_reminder", effect = external_commitment)]
#[http(post = "/v1/invoices/{invoice_id}/remind", result = Invoice)]
struct SendReminder {
    #[scope(invoice)]
    invoice_id: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Invoice {
    id: String,
}

const POLICIES: &str = r#"
@id("anyone")
permit (principal, action, resource);

@id("three-commitments-an-hour")
@reason("at most 3 external commitments per session per hour")
forbid (principal, action, resource)
when { context.effect == "external_commitment" &&
       context.session_calls.by_effect.external_commitment.hour >= 3 };

@id("read-before-delete")
@reason("read the invoice in this session before deleting it")
forbid (principal, action == Action::"delete_invoice", resource)
unless { context.session_calls.completed_on_resource.contains("get_invoice") };
"#;

struct Rig {
    upstream: Upstream,
    executor: Executor,
    _dir: tempfile::TempDir,
}

async fn rig() -> Rig {
    let upstream = Upstream::start(|_| Reply::Json(200, json!({"id": "inv_1"}))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = Catalog::builder()
        .action::<GetInvoice>()
        .action::<DeleteInvoice>()
        .action::<SendInvoice>()
        .action::<SendReminder>()
        .build()
        .expect("catalog");
    let policy = CedarPolicy::from_text(&catalog, "history.cedar", POLICIES).expect("policies");
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
        .channel(
            HttpChannel::builder()
                .base_url(upstream.url())
                .build()
                .expect("channel"),
        )
        .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
        .policy(policy)
        .build()
        .expect("executor");
    Rig {
        upstream,
        executor,
        _dir: dir,
    }
}

fn session(id: &str) -> Session {
    Session::new(id).allow_any("invoice")
}

fn invoice(id: &str) -> serde_json::Value {
    json!({ "invoice_id": id })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fourth_external_commitment_in_an_hour_is_denied_whatever_the_action() {
    let rig = rig().await;
    let s = session("s1");
    let mut statuses = Vec::new();
    for (action, id) in [
        ("send_invoice", "inv_1"),
        ("send_reminder", "inv_2"),
        ("get_invoice", "inv_3"),
        ("send_invoice", "inv_3"),
    ] {
        let result = rig.executor.call(action, invoice(id), &s).await;
        statuses.push(result.status);
    }
    assert_eq!(statuses, [Status::Completed; 4]);
    // The fourth commitment, by a third action: denied by the rule across actions.
    let fourth = rig
        .executor
        .call("send_reminder", invoice("inv_3"), &s)
        .await;
    assert_eq!(fourth.status, Status::Rejected);
    assert_eq!(fourth.code, Some(RefusalCode::PolicyDenied.into()));
    assert_eq!(
        fourth.reason.as_deref(),
        Some(
            "policy `history.cedar` denied this call: at most 3 external commitments per session per hour for invoice inv_3; nothing was sent"
        )
    );
    assert_eq!(rig.upstream.requests(), 4, "the denied call sent nothing");
    // A read is no commitment, and another session has its own hour.
    let read = rig.executor.call("get_invoice", invoice("inv_1"), &s).await;
    assert_eq!(read.status, Status::Completed);
    let other = rig
        .executor
        .call("send_invoice", invoice("inv_9"), &session("s2"))
        .await;
    assert_eq!(other.status, Status::Completed);
    assert_eq!(rig.upstream.requests(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invoice_is_deleted_only_after_it_was_read_in_this_session() {
    let rig = rig().await;
    let s = session("s1");
    let unread = rig
        .executor
        .call("delete_invoice", invoice("inv_1"), &s)
        .await;
    assert_eq!(unread.status, Status::Rejected);
    assert_eq!(
        unread.reason.as_deref(),
        Some(
            "policy `history.cedar` denied this call: read the invoice in this session before deleting it for invoice inv_1; nothing was sent"
        )
    );
    assert_eq!(rig.upstream.requests(), 0);

    // Reading another invoice does not count for this one.
    let read_other = rig.executor.call("get_invoice", invoice("inv_2"), &s).await;
    assert_eq!(read_other.status, Status::Completed);
    let still = rig
        .executor
        .call("delete_invoice", invoice("inv_1"), &s)
        .await;
    assert_eq!(still.status, Status::Rejected);
    assert_eq!(rig.upstream.requests(), 1);

    // A read of it in another session does not count either.
    let elsewhere = rig
        .executor
        .call("get_invoice", invoice("inv_1"), &session("s2"))
        .await;
    assert_eq!(elsewhere.status, Status::Completed);
    let still = rig
        .executor
        .call("delete_invoice", invoice("inv_1"), &s)
        .await;
    assert_eq!(still.status, Status::Rejected);
    assert_eq!(rig.upstream.requests(), 2);

    // Read in this session: the delete goes through.
    let read = rig.executor.call("get_invoice", invoice("inv_1"), &s).await;
    assert_eq!(read.status, Status::Completed);
    let deleted = rig
        .executor
        .call("delete_invoice", invoice("inv_1"), &s)
        .await;
    assert_eq!(deleted.status, Status::Completed, "{}", deleted.summary());
    assert_eq!(rig.upstream.requests(), 4);
    let methods: Vec<String> = rig
        .upstream
        .received()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        methods,
        [
            "GET /v1/invoices/inv_2",
            "GET /v1/invoices/inv_1",
            "GET /v1/invoices/inv_1",
            "DELETE /v1/invoices/inv_1",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_failed_does_not_open_the_delete() {
    let upstream_fails = Upstream::start(|r| {
        if r.method == "GET" {
            Reply::Json(404, json!({"error": "no such invoice"}))
        } else {
            Reply::Json(200, json!({"id": "inv_1"}))
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = Catalog::builder()
        .action::<GetInvoice>()
        .action::<DeleteInvoice>()
        .action::<SendInvoice>()
        .action::<SendReminder>()
        .build()
        .expect("catalog");
    let policy = CedarPolicy::from_text(&catalog, "history.cedar", POLICIES).expect("policies");
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
        .channel(
            HttpChannel::builder()
                .base_url(upstream_fails.url())
                .build()
                .expect("channel"),
        )
        .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
        .policy(policy)
        .build()
        .expect("executor");
    let s = session("s1");
    let read = executor.call("get_invoice", invoice("inv_1"), &s).await;
    assert_ne!(read.status, Status::Completed);
    let delete = executor.call("delete_invoice", invoice("inv_1"), &s).await;
    assert_eq!(delete.status, Status::Rejected);
    assert_eq!(delete.code, Some(RefusalCode::PolicyDenied.into()));
    assert_eq!(upstream_fails.requests(), 1, "only the read was sent");
}
