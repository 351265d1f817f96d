//! An `irreversible_or_broad` action asks for a confirmation before it is approved: the
//! first approve renders a confirmation step and records nothing; only the confirmed one is
//! recorded and sent (once, counted at the upstream).

use crate::common;

use std::time::Duration;

use sallyport_console::{Console, LoginToken};
use sallyport_core::approval::{ApprovalState, ConsentMode};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::{Action, Catalog, Executor, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::approvals_rig::{self, Invoice};
use sallyport_tests::http_server::{Reply, Upstream};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use common::{LOGIN, Rig};

/// Delete a customer and every invoice of theirs, permanently.
#[derive(Debug, Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "delete_customer", effect = irreversible_or_broad, credential = "billing-api")]
#[http(delete = "/v1/customers/{customer_id}", result = Invoice)]
struct DeleteCustomer {
    #[scope(customer)]
    customer_id: String,
}

pub(crate) async fn rig() -> Rig {
    let upstream = Upstream::start(|_| Reply::Json(200, json!({"id": "cus_9"}))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = SqliteJournal::open(dir.path().join("journal.db")).expect("journal");
    let vault = approvals_rig::vault(&upstream.url());
    let catalog = Catalog::builder()
        .action::<DeleteCustomer>()
        .build()
        .expect("catalog");
    let executor = Executor::builder(catalog)
        .journal(journal)
        .channel(
            HttpChannel::builder()
                .backoff(Duration::from_millis(5), Duration::from_millis(10))
                .build()
                .expect("channel"),
        )
        .vault_arc(vault.clone())
        .consent_mode(ConsentMode::Deferred)
        .build()
        .expect("executor");
    let console = Console::builder(executor.clone())
        .user("alice", LoginToken::new(LOGIN).expect("token"))
        .build()
        .expect("console");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { console.serve(listener).await });
    Rig {
        upstream,
        executor,
        vault,
        addr,
        _dir: dir,
    }
}

fn deletes(rig: &Rig) -> usize {
    rig.upstream
        .received()
        .iter()
        .filter(|r| r.method == "DELETE")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_irreversible_action_is_approved_only_after_a_confirmation() {
    let rig = rig().await;
    let parked = rig
        .executor
        .call(
            "delete_customer",
            json!({"customer_id": "cus_9"}),
            &approvals_rig::session(),
        )
        .await;
    assert_eq!(parked.status, Status::Pending, "{}", parked.to_json());
    let id = parked.approval_id.expect("approval id");
    let (cookie, csrf) = rig.login().await;
    let decide = format!("/approvals/{}/decide", id.as_str());
    let records = rig.journal().records().await.expect("records").len();

    let page = rig
        .post(
            &decide,
            Some(&cookie),
            &[
                ("csrf", &csrf),
                ("verdict", "approve"),
                ("reason", "GDPR erasure request"),
            ],
        )
        .await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("Confirm: this cannot be undone"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("name=\"confirm\" value=\"yes\""),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("value=\"GDPR erasure request\""),
        "the reason is carried: {}",
        page.body
    );
    let stored = rig
        .store()
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(
        stored.state,
        ApprovalState::Awaiting,
        "nothing recorded yet"
    );
    assert_eq!(
        rig.journal().records().await.expect("records").len(),
        records
    );
    assert_eq!(deletes(&rig), 0);

    let confirmed = rig
        .post(
            &decide,
            Some(&cookie),
            &[
                ("csrf", &csrf),
                ("verdict", "approve"),
                ("reason", "GDPR erasure request"),
                ("confirm", "yes"),
            ],
        )
        .await;
    assert_eq!(confirmed.status, 303, "{}", confirmed.body);
    assert_eq!(
        confirmed.header("location"),
        Some(format!("/approvals/{}?done=recorded", id.as_str()).as_str())
    );
    let stored = rig
        .store()
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.state, ApprovalState::Finished);
    assert_eq!(
        stored.decision.expect("decision").reason.as_deref(),
        Some("GDPR erasure request")
    );
    assert_eq!(deletes(&rig), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_confirmation_step_is_the_pages_only_form_and_repeats_no_buttons() {
    let rig = rig().await;
    let parked = rig
        .executor
        .call(
            "delete_customer",
            json!({"customer_id": "cus_9"}),
            &approvals_rig::session(),
        )
        .await;
    let id = parked.approval_id.expect("approval id");
    let (cookie, csrf) = rig.login().await;
    let page = rig
        .post(
            &format!("/approvals/{}/decide", id.as_str()),
            Some(&cookie),
            &[
                ("csrf", &csrf),
                ("verdict", "approve"),
                ("reason", "GDPR erasure request"),
            ],
        )
        .await;
    assert_eq!(page.status, 200);
    let body = &page.body;
    // The card is shown in full, but its approve/deny buttons and reason box are not: the
    // one form left is the confirmation, with the reason carried and shown.
    assert_eq!(body.matches("<form class=\"decide\"").count(), 1, "{body}");
    assert_eq!(
        body.matches("<button").count(),
        2,
        "confirm and log out: {body}"
    );
    assert!(body.contains("Yes, approve and send it"), "{body}");
    assert!(!body.contains("<textarea"), "{body}");
    assert!(!body.contains("value=\"deny\""), "{body}");
    assert!(body.contains("Your reason: GDPR erasure request"), "{body}");
    assert!(
        body.contains("DELETE "),
        "the request is on the card: {body}"
    );
    assert!(body.contains("cus_9"), "{body}");
    assert_eq!(deletes(&rig), 0);
}
