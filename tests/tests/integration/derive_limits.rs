//! Limits and the audit note written on the derive reach the wire: against a real HTTP server
//! on 127.0.0.1:0 and a real SQLite journal, with no `action_with_spec` anywhere.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{Drop, Reply, Upstream, audit_event, journal_dispatches};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

const NOTE: &str = "note-3b1f: the customer asked for it on the phone";

/// Send one invoice to its customer; gives up on the answer after 200 ms.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "send_invoice", effect = external_commitment, reconcile = "get_invoice",
         credential = "billing-api")]
#[http(post = "/v1/invoices/{invoice_id}/send", result = Sent, timeout = "200ms")]
struct SendInvoice {
    invoice_id: String,
    channel: String,
    /// Why the agent wants this.
    #[audit_note]
    reason: String,
}

/// Read one invoice.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_invoice", effect = observe, credential = "billing-api")]
#[http(get = "/v1/invoices/{invoice_id}", result = Sent)]
struct GetInvoice {
    invoice_id: String,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Sent {
    id: String,
}

struct Rig {
    upstream: Upstream,
    executor: Executor,
    journal: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

async fn rig(
    reply: impl Fn(&sallyport_tests::http_server::Received) -> Reply + Send + Sync + 'static,
) -> Rig {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("journal.db");
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "billing-api",
            CredentialKind::Bearer,
            Binding::url(upstream.url()),
        ),
        Secret::new("token-derive-limits"),
    );
    let catalog = Catalog::builder()
        .action::<SendInvoice>()
        .action::<GetInvoice>()
        .build()
        .expect("catalog");
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(&journal).expect("journal"))
        .vault_arc(vault)
        .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
        // The channel's own total timeout is long: only the derive's 200 ms can end the call.
        .channel(
            HttpChannel::builder()
                .total_timeout(Duration::from_secs(30))
                .build()
                .expect("channel"),
        )
        .build()
        .expect("executor");
    Rig {
        upstream,
        executor,
        journal,
        _dir: dir,
    }
}

fn send() -> SendInvoice {
    SendInvoice {
        invoice_id: "inv_9".into(),
        channel: "email".into(),
        reason: NOTE.into(),
    }
}

#[tokio::test]
async fn a_derive_timeout_makes_a_slow_mutating_call_unknown_after_one_request() {
    let rig = rig(|_| Reply::CommitThenDrop(Drop::Hang(Duration::from_secs(10)))).await;
    let started = Instant::now();
    let typed = rig.executor.run(&send(), &Session::new("s1")).await;
    let elapsed = started.elapsed();
    let r = &typed.result;
    assert_eq!(r.status, Status::Unknown, "{}", r.to_json());
    assert_eq!(r.code_str(), Some("timeout_after_send"));
    assert!(typed.data.is_none());
    assert!(
        elapsed < Duration::from_secs(5),
        "the 200 ms derive timeout ended the call, not the channel's 30 s: {elapsed:?}"
    );
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert_eq!(
        r.next.as_ref().map(|n| n.action.as_str()),
        Some("get_invoice")
    );
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(rig.upstream.effect_count(), 1);
    assert_eq!(journal_dispatches(&rig.journal, r.attempt_id.as_str()), 1);
    assert_eq!(
        audit_event(&rig.journal, r.attempt_id.as_str())["status"],
        "unknown"
    );
}

#[tokio::test]
async fn the_audit_note_never_reaches_the_upstream_but_is_in_the_audit_record() {
    let rig = rig(|_| Reply::Json(200, json!({"id": "inv_9", "internal": "x"}))).await;
    let typed = rig.executor.run(&send(), &Session::new("s1")).await;
    assert_eq!(
        typed.status(),
        Status::Completed,
        "{}",
        typed.result.to_json()
    );
    let attempt = typed.result.attempt_id.as_str().to_owned();
    let sent = typed.completed().expect("completed with typed data");
    assert_eq!(sent.id, "inv_9");

    let received = rig.upstream.received();
    assert_eq!(received.len(), 1);
    let request = &received[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/invoices/inv_9/send");
    let body: serde_json::Value = serde_json::from_slice(&request.body).expect("a JSON body");
    assert_eq!(body, json!({"channel": "email"}));
    let wire = format!("{request:?}");
    assert!(
        !wire.contains("note-3b1f"),
        "the note reached the upstream: {wire}"
    );
    assert!(
        !wire.contains("reason"),
        "the note's field reached the upstream: {wire}"
    );

    let audit = audit_event(&rig.journal, &attempt).to_string();
    assert!(
        audit.contains("note-3b1f"),
        "the note is in the audit record: {audit}"
    );
}
