//! What the HTTP channel sends and what it reports, against the real test upstream on
//! 127.0.0.1:0 (which counts every request) and a real SQLite journal:
//!
//! - after a request left, only observe and `retry = idempotency_key` actions are resent, for
//!   every answer the channel treats as "try again" (408, 429, 5xx, a dropped connection);
//! - a 2xx body the action's body rules cannot read is no evidence of success, and body rules
//!   compare numbers as numbers;
//! - an `unknown` result names the reconcile action as a machine-readable `next`, also when
//!   the reconcile action takes no arguments;
//! - path values that form a dot segment or an encoded slash together are refused before
//!   consent, and so is a hand-written request whose final path holds a dot segment.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sallyport_core::code::{RefusalCode, UpstreamCode};
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::outcome::{ActionResult, Refusal};
use sallyport_core::target::{HttpMethod, HttpTarget, Target};
use sallyport_core::{Action, ActionSpec, Catalog, EffectClass, Executor, Session, Status};
use sallyport_http::{HttpChannel, HttpRequest, RequestParts};
use sallyport_tests::http_server::{
    Drop, Received, Reply, Upstream, audit_event, journal_dispatches,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Read one invoice.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_invoice", effect = observe)]
#[http(get = "/v1/invoices/{invoice_id}", result = Invoice)]
struct GetInvoice {
    invoice_id: String,
}

/// Send one invoice to the customer. Never resent after it left.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "send_invoice", effect = external_commitment, reconcile = "get_invoice")]
#[http(post = "/v1/invoices/{invoice_id}/send", result = Invoice)]
struct SendInvoice {
    invoice_id: String,
}

/// Create one invoice; the upstream honours the executor's idempotency key.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "create_invoice", effect = external_commitment, retry = idempotency_key,
         reconcile = "get_invoice")]
#[http(post = "/v1/invoices", result = Invoice)]
struct CreateInvoice {
    invoice_id: String,
    amount: u32,
}

/// Cancel one order (no declared result; the body rules read the answer).
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "cancel_order", effect = reversible_change)]
#[http(post = "/v1/orders/{order_id}/cancel", result = ())]
struct CancelOrder {
    order_id: String,
}

/// Check one order (no declared result; the body rules read the answer).
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "check_order", effect = observe)]
#[http(get = "/v1/orders/{order_id}", result = ())]
struct CheckOrder {
    order_id: String,
}

/// Restart the worker; whether it restarted is read with `get_worker_status`.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "restart_worker", effect = reversible_change, reconcile = "get_worker_status")]
#[http(post = "/v1/worker/restart", result = ())]
struct RestartWorker {}

/// Read one file, named by its stem and extension.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_file", effect = observe)]
#[http(get = "/v1/files/{stem}{ext}", result = ())]
struct GetFile {
    stem: String,
    ext: String,
}

/// Read one report (a hand-written request builder).
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_report", effect = observe)]
#[http(get = "/v1/reports", result = ())]
struct GetReport {
    report_id: String,
}

impl HttpRequest for GetReport {
    fn request(&self) -> Result<RequestParts, Refusal> {
        // A builder whose fixed text climbs out of `/v1/reports`.
        Ok(RequestParts::new()
            .literal("/v1/reports/../admin/")
            .segment(self.report_id.clone()))
    }
}

/// The worker's status: an action with no arguments at all, whose hand-written schema has
/// no `properties`.
#[derive(Deserialize)]
struct GetWorkerStatus {}

impl JsonSchema for GetWorkerStatus {
    fn schema_name() -> Cow<'static, str> {
        "GetWorkerStatus".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "object", "additionalProperties": false})
    }
}

impl Action for GetWorkerStatus {
    const NAME: &'static str = "get_worker_status";
    type Output = serde_json::Value;

    fn spec() -> ActionSpec {
        ActionSpec::new("get_worker_status", EffectClass::Observe)
            .with_description("Read the worker's status.")
            .with_target(Target::Http(HttpTarget::new(
                HttpMethod::Get,
                "/v1/worker/status",
            )))
    }
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Invoice {
    id: String,
    state: String,
}

fn with_http(mut spec: ActionSpec, f: impl FnOnce(&mut HttpTarget)) -> ActionSpec {
    if let Target::Http(t) = &mut spec.target {
        f(t);
    }
    spec
}

fn catalog() -> Catalog {
    // The body rules: a business refusal inside a 200, and a numeric code.
    let rules = |t: &mut HttpTarget| {
        t.body_rules = HttpTarget::new(HttpMethod::Get, "/")
            .with_body_rule("/state", json!("rejected"), Status::Rejected)
            .with_body_rule_code("/error_code", json!(2), Status::Rejected, "order_locked")
            .body_rules;
    };
    Catalog::builder()
        .action::<GetInvoice>()
        .action::<SendInvoice>()
        .action::<CreateInvoice>()
        .action_with_spec::<CancelOrder>(|s| with_http(s, rules))
        .action_with_spec::<CheckOrder>(|s| with_http(s, rules))
        .action::<RestartWorker>()
        .action::<GetWorkerStatus>()
        .action::<GetFile>()
        .action_with_spec::<GetReport>(|s| with_http(s, |t| t.custom_request = true))
        .build()
        .expect("catalog")
}

struct Rig {
    upstream: Upstream,
    executor: Executor,
    journal: PathBuf,
    asks: Arc<AtomicU32>,
    _dir: tempfile::TempDir,
}

async fn rig(reply: impl Fn(&Received) -> Reply + Send + Sync + 'static) -> Rig {
    let upstream = Upstream::start(reply).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("journal.db");
    let channel = HttpChannel::builder()
        .base_url(upstream.url())
        .backoff(Duration::from_millis(5), Duration::from_millis(20))
        .total_timeout(Duration::from_secs(5))
        .request_for::<GetReport>()
        .build()
        .expect("channel");
    let asks = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&asks);
    let executor = Executor::builder(catalog())
        .journal(SqliteJournal::open(&journal).expect("journal"))
        .consent(FnConsent::new(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { ConsentDecision::Approve }
        }))
        .channel(channel)
        .build()
        .expect("executor");
    Rig {
        upstream,
        executor,
        journal,
        asks,
        _dir: dir,
    }
}

impl Rig {
    async fn call(&self, action: &str, args: Value) -> ActionResult {
        self.executor.call(action, args, &Session::new("s1")).await
    }

    fn dispatches(&self, r: &ActionResult) -> u32 {
        journal_dispatches(&self.journal, r.attempt_id.as_str())
    }

    fn audit(&self, r: &ActionResult) -> Value {
        audit_event(&self.journal, r.attempt_id.as_str())
    }
}

fn invoice() -> Reply {
    Reply::Json(200, json!({"id": "inv_1", "state": "sent"}))
}

fn raw_json(status: u16, body: &'static [u8]) -> Reply {
    Reply::Raw(
        status,
        vec![("content-type".to_owned(), "application/json".to_owned())],
        bytes::Bytes::from_static(body),
    )
}

// ---------------------------------------------------------------- item 5: resends after send

#[tokio::test]
async fn a_retry_never_commitment_answered_408_is_sent_once_and_unknown_with_the_reconcile_action()
{
    let rig = rig(|_| Reply::Json(408, json!({"message": "request timeout"}))).await;
    let r = rig
        .call("send_invoice", json!({"invoice_id": "inv_1"}))
        .await;
    assert_eq!(r.status, Status::Unknown, "{}", r.to_json());
    assert_eq!(r.code, Some(UpstreamCode::RequestTimeout.into()));
    assert!(
        r.reason
            .as_deref()
            .unwrap()
            .ends_with("; do not retry; check with get_invoice"),
        "{:?}",
        r.reason
    );
    let next = r.next.as_ref().expect("next");
    assert_eq!(next.action, "get_invoice");
    assert_eq!(next.arguments, json!({"invoice_id": "inv_1"}));
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(rig.dispatches(&r), 1);
    let audit = rig.audit(&r);
    assert_eq!(audit["status"], "unknown");
    assert_eq!(audit["code"], "request_timeout");
    assert_eq!(audit["upstream_status"], 408);
    assert_eq!(audit["dispatches"], 1);
}

#[tokio::test]
async fn every_try_again_answer_to_a_retry_never_commitment_is_sent_exactly_once() {
    let cases: Vec<(&str, Reply, UpstreamCode)> = vec![
        (
            "408",
            Reply::Json(408, json!({})),
            UpstreamCode::RequestTimeout,
        ),
        (
            "500",
            Reply::Json(500, json!({})),
            UpstreamCode::UpstreamError,
        ),
        (
            "502",
            Reply::Json(502, json!({})),
            UpstreamCode::GatewayError,
        ),
        (
            "503 with Retry-After",
            Reply::JsonWith(503, json!({}), vec![("retry-after".into(), "1".into())]),
            UpstreamCode::GatewayError,
        ),
        (
            "reset after the full request",
            Reply::CommitThenDrop(Drop::Reset),
            UpstreamCode::ConnectionLostAfterSend,
        ),
        (
            "clean close before the commit",
            Reply::DropBeforeCommit(Drop::CleanClose),
            UpstreamCode::ConnectionLostAfterSend,
        ),
    ];
    for (what, reply, code) in cases {
        let rig = rig(move |_| reply.clone()).await;
        let r = rig
            .call("send_invoice", json!({"invoice_id": "inv_7"}))
            .await;
        assert_eq!(r.status, Status::Unknown, "{what}: {}", r.to_json());
        assert_eq!(r.code, Some(code.into()), "{what}");
        let next = r.next.as_ref().expect("next");
        assert_eq!(next.action, "get_invoice", "{what}");
        assert_eq!(next.arguments, json!({"invoice_id": "inv_7"}), "{what}");
        assert_eq!(rig.upstream.requests(), 1, "{what}");
        assert_eq!(rig.dispatches(&r), 1, "{what}");
        assert_eq!(rig.audit(&r)["status"], "unknown", "{what}");
    }
}

#[tokio::test]
async fn a_429_with_a_usable_retry_after_is_not_resent_for_a_retry_never_commitment() {
    let rig = rig(|r| {
        if r.n == 1 {
            Reply::JsonWith(
                429,
                json!({"message": "slow down"}),
                vec![("retry-after".into(), "1".into())],
            )
        } else {
            invoice()
        }
    })
    .await;
    let r = rig
        .call("send_invoice", json!({"invoice_id": "inv_1"}))
        .await;
    assert_eq!(r.status, Status::Rejected, "{}", r.to_json());
    assert_eq!(r.code, Some(UpstreamCode::RateLimited.into()));
    assert_eq!(
        r.reason.as_deref(),
        Some(
            "rate limited by the upstream; this action is never resent automatically, call again in 1 s"
        )
    );
    assert_eq!(r.data, Some(json!({"retry_after_seconds": 1})));
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(rig.dispatches(&r), 1);
}

#[tokio::test]
async fn an_observe_action_answered_408_is_still_resent_and_completes() {
    let rig = rig(|r| {
        if r.n == 1 {
            Reply::Json(408, json!({}))
        } else {
            invoice()
        }
    })
    .await;
    let r = rig
        .call("get_invoice", json!({"invoice_id": "inv_1"}))
        .await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    assert_eq!(r.data, Some(json!({"id": "inv_1", "state": "sent"})));
    assert_eq!(rig.upstream.requests(), 2);
    assert_eq!(rig.dispatches(&r), 2);
}

#[tokio::test]
async fn an_idempotency_key_action_answered_408_is_resent_with_the_same_key_and_commits_once() {
    let rig = rig(|r| {
        if r.n == 1 {
            Reply::Json(408, json!({}))
        } else {
            Reply::Idempotent(None)
        }
    })
    .await;
    let r = rig
        .call(
            "create_invoice",
            json!({"invoice_id": "inv_1", "amount": 10}),
        )
        .await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    assert_eq!(rig.upstream.requests(), 2);
    assert_eq!(rig.upstream.effect_count(), 1);
    assert_eq!(rig.dispatches(&r), 2);
    let seen = rig.upstream.received();
    assert!(seen[0].header("idempotency-key").is_some());
    assert_eq!(
        seen[0].header("idempotency-key"),
        seen[1].header("idempotency-key")
    );
    assert_eq!(seen[0].body, seen[1].body);
}

#[tokio::test]
async fn an_idempotency_key_action_answered_408_every_time_stops_at_three_requests_unknown() {
    let rig = rig(|_| Reply::Json(408, json!({}))).await;
    let r = rig
        .call(
            "create_invoice",
            json!({"invoice_id": "inv_1", "amount": 10}),
        )
        .await;
    assert_eq!(r.status, Status::Unknown, "{}", r.to_json());
    assert_eq!(r.code, Some(UpstreamCode::RequestTimeout.into()));
    assert_eq!(
        r.next.as_ref().map(|n| n.action.as_str()),
        Some("get_invoice")
    );
    assert_eq!(rig.upstream.requests(), 3);
    assert_eq!(rig.dispatches(&r), 3);
}

// ---------------------------------------------------------------- item 6: body rules

const UNREADABLE: [(&str, &[u8]); 4] = [
    ("a BOM", b"\xEF\xBB\xBF{\"state\":\"rejected\"}"),
    ("NaN", b"{\"state\":\"done\",\"amount\":NaN}"),
    ("trailing bytes", b"{\"state\":\"done\"} and more"),
    ("an empty body", b""),
];

#[tokio::test]
async fn an_unreadable_2xx_body_with_body_rules_is_unknown_for_a_mutating_action() {
    for (what, body) in UNREADABLE {
        let rig = rig(move |_| raw_json(200, body)).await;
        let r = rig.call("cancel_order", json!({"order_id": "ord_1"})).await;
        assert_eq!(r.status, Status::Unknown, "{what}: {}", r.to_json());
        assert_eq!(r.code, Some(UpstreamCode::UnparseableBody.into()), "{what}");
        assert!(
            r.reason
                .as_deref()
                .unwrap()
                .starts_with("the upstream answered HTTP 200 with a body that is not valid JSON"),
            "{what}: {:?}",
            r.reason
        );
        assert_eq!(rig.upstream.requests(), 1, "{what}");
        assert_eq!(rig.dispatches(&r), 1, "{what}");
        assert_eq!(rig.audit(&r)["status"], "unknown", "{what}");
    }
}

#[tokio::test]
async fn an_unreadable_2xx_body_with_body_rules_is_rejected_for_an_observe_action() {
    for (what, body) in UNREADABLE {
        let rig = rig(move |_| raw_json(200, body)).await;
        let r = rig.call("check_order", json!({"order_id": "ord_1"})).await;
        assert_eq!(r.status, Status::Rejected, "{what}: {}", r.to_json());
        assert_eq!(r.code, Some(UpstreamCode::UnparseableBody.into()), "{what}");
        assert!(r.data.is_none(), "{what}");
        assert_eq!(rig.upstream.requests(), 1, "{what}");
        assert_eq!(rig.audit(&r)["status"], "rejected", "{what}");
    }
}

/// A rig whose upstream answers every request 200 with `body`.
async fn rig_with(body: &'static [u8]) -> Rig {
    rig(move |_| raw_json(200, body)).await
}

#[tokio::test]
async fn a_success_body_naming_a_result_field_twice_does_not_match_the_result() {
    // Parsers disagree on which of two values for one key wins, so the agent is not shown
    // either: a read is refused, a commitment that left is unknown.
    let twice: &[u8] = br#"{"id": "inv_1", "state": "draft", "state": "sent"}"#;
    let rig = rig_with(twice).await;
    for (action, status) in [
        ("get_invoice", Status::Rejected),
        ("send_invoice", Status::Unknown),
    ] {
        let r = rig.call(action, json!({"invoice_id": "inv_1"})).await;
        assert_eq!(r.status, status, "{action}: {}", r.to_json());
        assert_eq!(
            r.code,
            Some(UpstreamCode::UnexpectedResponse.into()),
            "{action}"
        );
        assert!(r.data.is_none(), "{action}");
        assert_eq!(rig.audit(&r)["status"], status.as_str(), "{action}");
    }
    assert_eq!(rig.upstream.requests(), 2);
    // The same body without the repeat is the declared result, undeclared fields dropped.
    let once: &[u8] = br#"{"id": "inv_1", "state": "sent", "internal": 7}"#;
    let plain = rig_with(once).await;
    let read = plain
        .call("get_invoice", json!({"invoice_id": "inv_1"}))
        .await;
    assert_eq!(read.status, Status::Completed, "{}", read.to_json());
    assert_eq!(read.data, Some(json!({"id": "inv_1", "state": "sent"})));
}

#[tokio::test]
async fn a_body_rule_on_the_number_2_matches_an_upstream_that_writes_2_0() {
    for written in [
        &b"{\"error_code\":2.0}"[..],
        b"{\"error_code\":2}",
        b"{\"error_code\":2e0}",
    ] {
        let rig = rig(move |_| raw_json(200, written)).await;
        for action in ["cancel_order", "check_order"] {
            let r = rig.call(action, json!({"order_id": "ord_1"})).await;
            let text = String::from_utf8_lossy(written);
            assert_eq!(
                r.status,
                Status::Rejected,
                "{action} {text}: {}",
                r.to_json()
            );
            assert_eq!(r.code_str(), Some("order_locked"), "{action} {text}");
        }
        assert_eq!(rig.upstream.requests(), 2);
    }
    // And a number that is not 2 matches nothing: the default mapping applies.
    let rig = rig(|_| raw_json(200, b"{\"error_code\":2.5}")).await;
    let r = rig.call("cancel_order", json!({"order_id": "ord_1"})).await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    assert_eq!(rig.upstream.requests(), 1);
}

// ---------------------------------------------------------------- item 7: next

#[tokio::test]
async fn an_unknown_result_names_a_reconcile_action_without_arguments_as_next() {
    let rig = rig(|_| Reply::Json(500, json!({}))).await;
    let r = rig.call("restart_worker", json!({})).await;
    assert_eq!(r.status, Status::Unknown, "{}", r.to_json());
    assert_eq!(r.code, Some(UpstreamCode::UpstreamError.into()));
    let next = r.next.as_ref().expect("a machine-readable next");
    assert_eq!(next.action, "get_worker_status");
    assert_eq!(next.arguments, json!({}));
    let shown: Value = serde_json::from_str(&r.to_json()).expect("result JSON");
    assert_eq!(
        shown["next"],
        json!({"action": "get_worker_status", "arguments": {}})
    );
    assert_eq!(rig.upstream.requests(), 1);
    // The suggested call is one the executor accepts as it is.
    rig.upstream
        .set_behaviour(|_| Reply::Json(200, json!({"up": true})));
    let check = rig.call(&next.action, next.arguments.clone()).await;
    assert_eq!(check.status, Status::Completed, "{}", check.to_json());
    assert_eq!(rig.upstream.requests(), 2);
    assert_eq!(rig.upstream.received()[1].path, "/v1/worker/status");
}

// ---------------------------------------------------------------- items 16d, 16e: the path

#[tokio::test]
async fn adjacent_placeholders_that_form_a_dot_segment_or_a_slash_are_refused_before_consent() {
    let rig = rig(|_| Reply::Json(200, json!({}))).await;
    for (stem, ext) in [
        ("%2", "e%2e"),
        ("%", "2e%2e"),
        ("%25", "2e%252e"),
        ("%2", "F"),
        ("%5", "c"),
    ] {
        let r = rig
            .call("get_file", json!({"stem": stem, "ext": ext}))
            .await;
        assert_eq!(r.status, Status::Rejected, "{stem}{ext}");
        assert_eq!(
            r.code,
            Some(RefusalCode::InvalidRequest.into()),
            "{stem}{ext}"
        );
        assert!(
            r.reason
                .as_deref()
                .unwrap()
                .starts_with("`stem` and `ext` together would change the request path"),
            "{stem}{ext}: {:?}",
            r.reason
        );
        assert_eq!(rig.audit(&r)["phase"], "refused");
    }
    assert_eq!(rig.upstream.requests(), 0);
    // Values that form one ordinary segment go out as that segment.
    let r = rig
        .call("get_file", json!({"stem": "report", "ext": ".pdf"}))
        .await;
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    assert_eq!(rig.upstream.requests(), 1);
    assert_eq!(rig.upstream.received()[0].path, "/v1/files/report.pdf");
}

#[tokio::test]
async fn a_hand_written_request_whose_path_climbs_out_is_refused_before_consent_and_sends_nothing()
{
    let rig = rig(|_| Reply::Json(200, json!({}))).await;
    let r = rig.call("get_report", json!({"report_id": "r1"})).await;
    assert_eq!(r.status, Status::Rejected, "{}", r.to_json());
    assert_eq!(r.code, Some(RefusalCode::InvalidRequest.into()));
    assert_eq!(
        r.reason.as_deref(),
        Some("the request path holds the dot segment `..`, which would change the request path")
    );
    assert_eq!(rig.asks.load(Ordering::SeqCst), 0);
    assert_eq!(rig.upstream.requests(), 0);
    assert_eq!(rig.dispatches(&r), 0);
}
