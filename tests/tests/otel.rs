//! The `otel` feature's spans, exported through `tracing-opentelemetry` into the
//! OpenTelemetry SDK's in-memory exporter, for real calls through the HTTP channel against a
//! real upstream on 127.0.0.1:0 and a real SQLite journal: the exact span names, the
//! parent/child relations and every attribute of a completed call, an out-of-scope refusal, an
//! unknown field, an unknown action, a consent denial and an unknown outcome after a timeout;
//! an approval's events (parked, decided, expired, resumed) and the resumed call's own
//! `execute_tool` span; and that no credential, argument value, decision reason or
//! idempotency key reaches any exported span — nor an OAuth client secret, refresh token
//! (the one sent and the rotated one) or access token, when a 401 makes the executor refresh
//! and resend, or when the provider's refusal quotes the refresh token.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::{SpanId, Status as SpanStatus, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::executor::CallOptions;
use sallyport_core::journal::SqliteJournal;
use sallyport_core::outcome::ActionResult;
use sallyport_core::telemetry::{attr, span};
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, ConsentMode, Executor, Session, Status};
use sallyport_http::HttpChannel;
use sallyport_tests::http_server::{Drop, Reply, Upstream, audit_event};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tracing_subscriber::layer::SubscriberExt as _;

/// The credential's value.
const CREDENTIAL: &str = "cred-CANARY-5d41402abc4b";
/// An argument value the agent sends (in the body, and in a refused unknown field).
const ARGUMENT: &str = "memo-CANARY-7f3a9c";
/// The model's id for the tool call.
const CALL_ID: &str = "call_8Hq2xY";

/// Read one invoice.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_invoice", effect = observe, credential = "billing-api")]
#[http(get = "/v1/invoices/{invoice_id}", result = Invoice)]
#[serde(deny_unknown_fields)]
struct GetInvoice {
    invoice_id: String,
}

/// Create one invoice in a project.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "create_invoice", effect = external_commitment, retry = idempotency_key,
         reconcile = "get_invoice", credential = "billing-api")]
#[http(post = "/v1/projects/{project_id}/invoices", result = Invoice)]
#[serde(deny_unknown_fields)]
struct CreateInvoice {
    #[scope(project)]
    project_id: String,
    memo: String,
}

/// Send one invoice to its customer.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "send_invoice", effect = external_commitment, reconcile = "get_invoice",
         credential = "billing-api")]
#[http(post = "/v1/invoices/{invoice_id}/send", result = Invoice)]
#[serde(deny_unknown_fields)]
struct SendInvoice {
    invoice_id: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Invoice {
    id: String,
    state: String,
}

/// The spans this test's thread exports while it lives.
struct Traces {
    exporter: InMemorySpanExporter,
    _provider: SdkTracerProvider,
    _guard: tracing::subscriber::DefaultGuard,
}

impl Traces {
    fn install() -> Self {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        // Only what sallyport records: no code locations, threads, targets or timings.
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("sallyport-tests"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false);
        let guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
        Self {
            exporter,
            _provider: provider,
            _guard: guard,
        }
    }

    /// Every finished span, then forgets them.
    fn take(&self) -> Vec<SpanData> {
        let spans = self.exporter.get_finished_spans().expect("spans");
        self.exporter.reset();
        spans
    }
}

struct Rig {
    upstream: Upstream,
    executor: Executor,
    _dir: tempfile::TempDir,
}

async fn rig(reply: Reply, consent: ConsentDecision) -> Rig {
    rig_with(reply, consent, ConsentMode::Blocking).await
}

async fn rig_with(reply: Reply, consent: ConsentDecision, mode: ConsentMode) -> Rig {
    let upstream = Upstream::start(move |_| reply.clone()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "billing-api",
            CredentialKind::Bearer,
            Binding::url(upstream.url()),
        ),
        Secret::new(CREDENTIAL),
    );
    let channel = HttpChannel::builder()
        .base_url(upstream.url())
        .total_timeout(Duration::from_millis(400))
        .build()
        .expect("channel");
    let catalog = Catalog::builder()
        .action::<GetInvoice>()
        .action::<CreateInvoice>()
        .action::<SendInvoice>()
        .build()
        .expect("catalog");
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
        .vault_arc(vault)
        .consent(FnConsent::new(move |_| {
            let decision = consent.clone();
            async move { decision }
        }))
        .consent_mode(mode)
        .channel(channel)
        .build()
        .expect("executor");
    Rig {
        upstream,
        executor,
        _dir: dir,
    }
}

fn session() -> Session {
    Session::new("chat-otel").allow("project", ["proj_1"])
}

fn invoice() -> Reply {
    Reply::Json(201, json!({"id": "inv_1", "state": "open"}))
}

/// A span's attributes as strings (integers as their digits).
fn attributes(span: &SpanData) -> BTreeMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect()
}

fn expected(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The one span named `name`.
fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let found: Vec<&SpanData> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "spans named {name:?}: {:?}", names(spans));
    found[0]
}

fn names(spans: &[SpanData]) -> Vec<String> {
    let mut names: Vec<String> = spans.iter().map(|s| s.name.to_string()).collect();
    names.sort();
    names
}

fn assert_child(child: &SpanData, parent: &SpanData) {
    assert_eq!(child.parent_span_id, parent.span_context.span_id());
    assert_eq!(
        child.span_context.trace_id(),
        parent.span_context.trace_id()
    );
}

/// No span, attribute, event, link or status of `spans` carries a canary.
fn assert_clean(spans: &[SpanData], more: &[&str]) {
    let text = format!("{spans:?}");
    for canary in [CREDENTIAL, ARGUMENT].iter().chain(more) {
        assert!(
            !text.contains(canary),
            "an exported span carries {canary:?}:\n{text}"
        );
    }
}

fn ids(result: &ActionResult) -> (String, String) {
    (
        result.attempt_id.as_str().to_owned(),
        result
            .receipt_id
            .as_ref()
            .expect("receipt")
            .as_str()
            .to_owned(),
    )
}

#[tokio::test]
async fn a_completed_call_is_one_execute_tool_span_with_consent_and_dispatch_children() {
    let traces = Traces::install();
    let rig = rig(invoice(), ConsentDecision::Approve).await;
    let options = CallOptions::new().with_tool_call_id(CALL_ID);
    let session = session();
    let call = rig.executor.call_with(
        "create_invoice",
        json!({"project_id": "proj_1", "memo": ARGUMENT}),
        &session,
        &options,
    );
    assert_send(&call);
    let result = call.await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(rig.upstream.requests(), 1);

    let spans = traces.take();
    assert_eq!(
        names(&spans),
        [
            "execute_tool create_invoice",
            span::CONSENT_WAIT,
            span::DISPATCH
        ]
    );
    let call = named(&spans, "execute_tool create_invoice");
    assert_eq!(call.parent_span_id, SpanId::INVALID);
    assert_eq!(call.status, SpanStatus::Unset);
    let (attempt, receipt) = ids(&result);
    assert_eq!(
        attributes(call),
        expected(&[
            (attr::GEN_AI_OPERATION_NAME, "execute_tool"),
            (attr::GEN_AI_TOOL_NAME, "create_invoice"),
            (attr::GEN_AI_TOOL_CALL_ID, CALL_ID),
            (attr::EFFECT_CLASS, "external_commitment"),
            (attr::STATUS, "completed"),
            (attr::CONSENT, "approved"),
            (attr::DISPATCHES, "1"),
            (attr::RECEIPT_ID, &receipt),
            (attr::ATTEMPT_ID, &attempt),
        ])
    );
    let consent = named(&spans, span::CONSENT_WAIT);
    assert_child(consent, call);
    assert_eq!(attributes(consent), expected(&[]));
    let dispatch = named(&spans, span::DISPATCH);
    assert_child(dispatch, call);
    assert_eq!(
        attributes(dispatch),
        expected(&[(attr::CHANNEL, "http"), (attr::DISPATCHES, "1")])
    );
    // The human was asked before anything was sent.
    assert!(consent.end_time <= dispatch.start_time);

    // The canaries did travel: the credential and the argument to the upstream, the key with
    // the request and into the journal.
    let received = &rig.upstream.received()[0];
    let key = received
        .header("idempotency-key")
        .expect("an idempotency key")
        .to_owned();
    assert_eq!(
        received.header("authorization"),
        Some(format!("Bearer {CREDENTIAL}").as_str())
    );
    assert!(String::from_utf8_lossy(&received.body).contains(ARGUMENT));
    assert_clean(&spans, &[&key]);
}

#[tokio::test]
async fn an_out_of_scope_call_is_an_error_span_with_no_children_and_no_dispatch() {
    let traces = Traces::install();
    let rig = rig(invoice(), ConsentDecision::Approve).await;
    let result = rig
        .executor
        .call(
            "create_invoice",
            json!({"project_id": "proj_999", "memo": ARGUMENT}),
            &session(),
        )
        .await;
    assert_eq!(result.code_str(), Some("out_of_scope"));
    assert_eq!(rig.upstream.requests(), 0);

    let spans = traces.take();
    assert_eq!(names(&spans), ["execute_tool create_invoice"]);
    let call = &spans[0];
    assert_eq!(call.status, SpanStatus::error(""));
    let (attempt, receipt) = ids(&result);
    // No tool-call id was given, none is made up.
    assert_eq!(
        attributes(call),
        expected(&[
            (attr::GEN_AI_OPERATION_NAME, "execute_tool"),
            (attr::GEN_AI_TOOL_NAME, "create_invoice"),
            (attr::EFFECT_CLASS, "external_commitment"),
            (attr::ERROR_TYPE, "out_of_scope"),
            (attr::STATUS, "rejected"),
            (attr::ORIGIN, "executor"),
            (attr::CODE, "out_of_scope"),
            (attr::DISPATCHES, "0"),
            (attr::RECEIPT_ID, &receipt),
            (attr::ATTEMPT_ID, &attempt),
        ])
    );
    // The refused project is an argument too: the reason names it, the span does not.
    assert!(result.reason.as_deref().unwrap().contains("proj_999"));
    assert_clean(&spans, &["proj_999"]);
}

#[tokio::test]
async fn an_unknown_field_from_json_text_is_invalid_arguments_with_the_call_id() {
    let traces = Traces::install();
    let rig = rig(invoice(), ConsentDecision::Approve).await;
    let arguments = json!({"project_id": "proj_1", "memo": "m", "token": ARGUMENT}).to_string();
    let options = CallOptions::new().with_tool_call_id(CALL_ID);
    let result = rig
        .executor
        .call_json_with("create_invoice", &arguments, &session(), &options)
        .await;
    assert_eq!(result.code_str(), Some("invalid_arguments"));
    assert_eq!(result.divergences[0].path, "/token");
    assert_eq!(rig.upstream.requests(), 0);

    let spans = traces.take();
    assert_eq!(names(&spans), ["execute_tool create_invoice"]);
    let (attempt, receipt) = ids(&result);
    assert_eq!(
        attributes(&spans[0]),
        expected(&[
            (attr::GEN_AI_OPERATION_NAME, "execute_tool"),
            (attr::GEN_AI_TOOL_NAME, "create_invoice"),
            (attr::GEN_AI_TOOL_CALL_ID, CALL_ID),
            (attr::EFFECT_CLASS, "external_commitment"),
            (attr::ERROR_TYPE, "invalid_arguments"),
            (attr::STATUS, "rejected"),
            (attr::ORIGIN, "executor"),
            (attr::CODE, "invalid_arguments"),
            (attr::DISPATCHES, "0"),
            (attr::RECEIPT_ID, &receipt),
            (attr::ATTEMPT_ID, &attempt),
        ])
    );
    assert_clean(&spans, &[]);
}

#[tokio::test]
async fn an_action_outside_the_catalog_keeps_the_span_name_fixed() {
    let traces = Traces::install();
    let rig = rig(invoice(), ConsentDecision::Approve).await;
    let result = rig
        .executor
        .call("delete_everything", json!({"memo": ARGUMENT}), &session())
        .await;
    assert_eq!(result.code_str(), Some("unknown_action"));

    let spans = traces.take();
    assert_eq!(names(&spans), ["execute_tool"]);
    let (attempt, receipt) = ids(&result);
    assert_eq!(
        attributes(&spans[0]),
        expected(&[
            (attr::GEN_AI_OPERATION_NAME, "execute_tool"),
            (attr::GEN_AI_TOOL_NAME, "delete_everything"),
            (attr::ERROR_TYPE, "unknown_action"),
            (attr::STATUS, "rejected"),
            (attr::ORIGIN, "executor"),
            (attr::CODE, "unknown_action"),
            (attr::DISPATCHES, "0"),
            (attr::RECEIPT_ID, &receipt),
            (attr::ATTEMPT_ID, &attempt),
        ])
    );
    assert_clean(&spans, &[]);
}

#[tokio::test]
async fn a_consent_denial_shows_the_wait_and_no_dispatch() {
    let traces = Traces::install();
    let rig = rig(
        invoice(),
        ConsentDecision::Deny {
            reason: Some("not this month".into()),
        },
    )
    .await;
    let result = rig
        .executor
        .call(
            "create_invoice",
            json!({"project_id": "proj_1", "memo": ARGUMENT}),
            &session(),
        )
        .await;
    assert_eq!(result.code_str(), Some("consent_denied"));
    assert_eq!(rig.upstream.requests(), 0);

    let spans = traces.take();
    assert_eq!(
        names(&spans),
        ["execute_tool create_invoice", span::CONSENT_WAIT]
    );
    let call = named(&spans, "execute_tool create_invoice");
    assert_child(named(&spans, span::CONSENT_WAIT), call);
    assert_eq!(call.status, SpanStatus::error(""));
    let (attempt, receipt) = ids(&result);
    assert_eq!(
        attributes(call),
        expected(&[
            (attr::GEN_AI_OPERATION_NAME, "execute_tool"),
            (attr::GEN_AI_TOOL_NAME, "create_invoice"),
            (attr::EFFECT_CLASS, "external_commitment"),
            (attr::ERROR_TYPE, "consent_denied"),
            (attr::STATUS, "rejected"),
            (attr::ORIGIN, "executor"),
            (attr::CODE, "consent_denied"),
            (attr::CONSENT, "denied"),
            (attr::DISPATCHES, "0"),
            (attr::RECEIPT_ID, &receipt),
            (attr::ATTEMPT_ID, &attempt),
        ])
    );
    // The human's reason goes to the agent, not into the trace.
    assert_clean(&spans, &["not this month"]);
}

#[tokio::test]
async fn a_request_that_left_and_timed_out_is_an_unknown_span_with_one_dispatch() {
    let traces = Traces::install();
    let rig = rig(
        Reply::CommitThenDrop(Drop::Hang(Duration::from_secs(5))),
        ConsentDecision::Approve,
    )
    .await;
    let options = CallOptions::new().with_tool_call_id(CALL_ID);
    let result = rig
        .executor
        .call_with(
            "send_invoice",
            json!({"invoice_id": "inv_1"}),
            &session(),
            &options,
        )
        .await;
    assert_eq!(result.status, Status::Unknown, "{}", result.to_json());
    assert_eq!(result.code_str(), Some("timeout_after_send"));
    assert_eq!(rig.upstream.requests(), 1);

    let spans = traces.take();
    assert_eq!(
        names(&spans),
        [
            "execute_tool send_invoice",
            span::CONSENT_WAIT,
            span::DISPATCH
        ]
    );
    let call = named(&spans, "execute_tool send_invoice");
    let dispatch = named(&spans, span::DISPATCH);
    assert_child(dispatch, call);
    assert_child(named(&spans, span::CONSENT_WAIT), call);
    assert_eq!(call.status, SpanStatus::error(""));
    // The dispatch span holds the wait for the answer that never came.
    let waited = dispatch
        .end_time
        .duration_since(dispatch.start_time)
        .expect("ends after it starts");
    assert!(waited >= Duration::from_millis(400), "{waited:?}");
    let (attempt, receipt) = ids(&result);
    assert_eq!(
        attributes(call),
        expected(&[
            (attr::GEN_AI_OPERATION_NAME, "execute_tool"),
            (attr::GEN_AI_TOOL_NAME, "send_invoice"),
            (attr::GEN_AI_TOOL_CALL_ID, CALL_ID),
            (attr::EFFECT_CLASS, "external_commitment"),
            (attr::ERROR_TYPE, "timeout_after_send"),
            (attr::STATUS, "unknown"),
            (attr::ORIGIN, "upstream"),
            (attr::CODE, "timeout_after_send"),
            (attr::CONSENT, "approved"),
            (attr::DISPATCHES, "1"),
            (attr::RECEIPT_ID, &receipt),
            (attr::ATTEMPT_ID, &attempt),
        ])
    );
    assert_eq!(
        attributes(dispatch),
        expected(&[(attr::CHANNEL, "http"), (attr::DISPATCHES, "1")])
    );
    // The span and the audit record tell the same story.
    let audit = audit_event(&rig._dir.path().join("journal.db"), &attempt);
    assert_eq!(audit["receipt_id"], Value::from(receipt));
    assert_eq!(audit["dispatches"], 1);
    assert_clean(&spans, &[]);
}

#[tokio::test]
async fn a_parked_call_is_pending_with_deferred_consent_and_no_dispatch() {
    let traces = Traces::install();
    // The provider cannot ask now: the call stays parked for another front end.
    let rig = rig_with(
        invoice(),
        ConsentDecision::Unavailable,
        ConsentMode::Deferred,
    )
    .await;
    let result = rig
        .executor
        .call(
            "create_invoice",
            json!({"project_id": "proj_1", "memo": ARGUMENT}),
            &session(),
        )
        .await;
    assert_eq!(result.status, Status::Pending, "{}", result.to_json());
    assert_eq!(result.code_str(), Some("awaiting_approval"));
    assert_eq!(rig.upstream.requests(), 0);

    let spans = traces.take();
    assert_eq!(
        names(&spans),
        ["execute_tool create_invoice", span::CONSENT_WAIT]
    );
    let call = named(&spans, "execute_tool create_invoice");
    assert_child(named(&spans, span::CONSENT_WAIT), call);
    // Pending is no failure.
    assert_eq!(call.status, SpanStatus::Unset);
    let (attempt, receipt) = ids(&result);
    assert_eq!(
        attributes(call),
        expected(&[
            (attr::GEN_AI_OPERATION_NAME, "execute_tool"),
            (attr::GEN_AI_TOOL_NAME, "create_invoice"),
            (attr::EFFECT_CLASS, "external_commitment"),
            (attr::STATUS, "pending"),
            (attr::ORIGIN, "executor"),
            (attr::CODE, "awaiting_approval"),
            (attr::CONSENT, "deferred"),
            (attr::DISPATCHES, "0"),
            (attr::RECEIPT_ID, &receipt),
            (attr::ATTEMPT_ID, &attempt),
        ])
    );
    assert_clean(&spans, &[]);
}

#[tokio::test]
async fn a_parked_call_approved_at_once_is_carried_out_inside_its_span() {
    let traces = Traces::install();
    let rig = rig_with(invoice(), ConsentDecision::Approve, ConsentMode::Deferred).await;
    let result = rig
        .executor
        .call(
            "create_invoice",
            json!({"project_id": "proj_1", "memo": ARGUMENT}),
            &session(),
        )
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(rig.upstream.requests(), 1);

    let spans = traces.take();
    assert_eq!(
        names(&spans),
        [
            "execute_tool create_invoice",
            span::CONSENT_WAIT,
            span::DISPATCH
        ]
    );
    let call = named(&spans, "execute_tool create_invoice");
    assert_child(named(&spans, span::CONSENT_WAIT), call);
    assert_child(named(&spans, span::DISPATCH), call);
    let (attempt, receipt) = ids(&result);
    // The consent is the approval's, the ids the attempt's that carried the call out.
    assert_eq!(
        attributes(call),
        expected(&[
            (attr::GEN_AI_OPERATION_NAME, "execute_tool"),
            (attr::GEN_AI_TOOL_NAME, "create_invoice"),
            (attr::EFFECT_CLASS, "external_commitment"),
            (attr::STATUS, "completed"),
            (attr::CONSENT, "approved"),
            (attr::DISPATCHES, "1"),
            (attr::RECEIPT_ID, &receipt),
            (attr::ATTEMPT_ID, &attempt),
        ])
    );
    let key = rig.upstream.received()[0]
        .header("idempotency-key")
        .expect("an idempotency key")
        .to_owned();
    assert_clean(&spans, &[&key]);
}

#[tokio::test]
async fn a_typed_read_is_one_span_with_a_dispatch_child_and_no_consent_wait() {
    let traces = Traces::install();
    let rig = rig(invoice(), ConsentDecision::Approve).await;
    let input = GetInvoice {
        invoice_id: "inv_1".into(),
    };
    let result = rig.executor.run(&input, &session()).await;
    assert_eq!(result.status(), Status::Completed);
    let result = result.result;
    assert_eq!(rig.upstream.requests(), 1);

    let spans = traces.take();
    assert_eq!(names(&spans), ["execute_tool get_invoice", span::DISPATCH]);
    let call = named(&spans, "execute_tool get_invoice");
    assert_child(named(&spans, span::DISPATCH), call);
    let (attempt, receipt) = ids(&result);
    assert_eq!(
        attributes(call),
        expected(&[
            (attr::GEN_AI_OPERATION_NAME, "execute_tool"),
            (attr::GEN_AI_TOOL_NAME, "get_invoice"),
            (attr::EFFECT_CLASS, "observe"),
            (attr::STATUS, "completed"),
            (attr::CONSENT, "not_required"),
            (attr::DISPATCHES, "1"),
            (attr::RECEIPT_ID, &receipt),
            (attr::ATTEMPT_ID, &attempt),
        ])
    );
    assert_clean(&spans, &[]);
}

#[tokio::test]
async fn a_tool_call_id_or_action_name_carrying_a_credential_is_scrubbed() {
    let traces = Traces::install();
    let rig = rig(invoice(), ConsentDecision::Approve).await;
    let options = CallOptions::new().with_tool_call_id(format!("call_{CREDENTIAL}"));
    let result = rig
        .executor
        .call_with(
            &format!("get_{CREDENTIAL}"),
            json!({}),
            &session(),
            &options,
        )
        .await;
    assert_eq!(result.code_str(), Some("unknown_action"));

    let spans = traces.take();
    assert_eq!(names(&spans), ["execute_tool"]);
    let attributes = attributes(&spans[0]);
    assert!(attributes[attr::GEN_AI_TOOL_CALL_ID].starts_with("call_"));
    assert!(attributes[attr::GEN_AI_TOOL_NAME].starts_with("get_"));
    assert_clean(&spans, &[]);
}

fn assert_send<T: Send>(_: &T) {}

/// The events of `span` named `name`, each as its attributes (without the `level` and
/// `target` every tracing event carries).
fn events(span: &SpanData, name: &str) -> Vec<BTreeMap<String, String>> {
    span.events
        .iter()
        .filter(|e| e.name == name)
        .map(|e| {
            e.attributes
                .iter()
                .filter(|kv| kv.key.as_str() != "level" && kv.key.as_str() != "target")
                .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                .collect()
        })
        .collect()
}

/// A human's reason for a decision (it may quote the agent: it stays out of every span).
const DECISION_REASON: &str = "reason-CANARY-c3d9";

#[tokio::test]
async fn a_parked_call_its_decisions_and_its_resumption_are_traced() {
    use sallyport_core::approval::{self, Decider, Verdict};
    use sallyport_core::telemetry::event;
    let traces = Traces::install();
    let rig = rig_with(
        invoice(),
        ConsentDecision::Unavailable,
        ConsentMode::Deferred,
    )
    .await;
    let parked = rig
        .executor
        .call(
            "create_invoice",
            json!({"project_id": "proj_1", "memo": ARGUMENT}),
            &session(),
        )
        .await;
    assert_eq!(parked.status, Status::Pending, "{}", parked.to_json());
    let id = parked.approval_id.clone().expect("approval id");

    // Parked: an event on the agent's call span.
    let spans = traces.take();
    let call = named(&spans, "execute_tool create_invoice");
    assert_eq!(
        events(call, event::PARKED),
        [expected(&[(attr::APPROVAL_ID, id.as_str())])]
    );

    // A front end decides (no span is current): a decide span of its own with the event.
    let store = rig.executor.approval_store().expect("store").clone();
    let decided = approval::decide(
        store.as_ref(),
        &id,
        Verdict::Approve,
        &Decider::new("alice", "console"),
        Some(DECISION_REASON),
    )
    .await
    .expect("decided");
    assert!(matches!(decided, approval::Decided::Recorded(_)));
    let spans = traces.take();
    assert_eq!(names(&spans), [span::APPROVAL_DECIDE]);
    let decide = &spans[0];
    assert_eq!(decide.parent_span_id, SpanId::INVALID);
    assert_eq!(
        attributes(decide),
        expected(&[(attr::APPROVAL_ID, id.as_str())])
    );
    assert_eq!(
        events(decide, event::DECIDED),
        [expected(&[
            (attr::APPROVAL_ID, id.as_str()),
            (attr::APPROVER, "alice"),
            (attr::VERDICT, "approve"),
            (attr::FRONT_END, "console"),
            (attr::DECISION, "recorded"),
            (attr::APPROVAL_STATE, "approved"),
        ])]
    );
    assert_eq!(rig.upstream.requests(), 0, "deciding sends nothing");

    // Resumed: an execute_tool span of its own, with a dispatch child.
    let result = rig
        .executor
        .resume_approval(&id)
        .await
        .expect("resume")
        .expect("carried out here");
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(rig.upstream.requests(), 1);
    let spans = traces.take();
    assert_eq!(
        names(&spans),
        ["execute_tool create_invoice", span::DISPATCH]
    );
    let resumed = named(&spans, "execute_tool create_invoice");
    assert_eq!(resumed.parent_span_id, SpanId::INVALID);
    assert_child(named(&spans, span::DISPATCH), resumed);
    assert_eq!(resumed.status, SpanStatus::Unset);
    let (attempt, receipt) = ids(&result);
    assert_ne!(
        attempt,
        parked.attempt_id.as_str(),
        "a fresh attempt carries it out"
    );
    assert_eq!(
        attributes(resumed),
        expected(&[
            (attr::GEN_AI_OPERATION_NAME, "execute_tool"),
            (attr::GEN_AI_TOOL_NAME, "create_invoice"),
            (attr::EFFECT_CLASS, "external_commitment"),
            (attr::STATUS, "completed"),
            (attr::CONSENT, "approved"),
            (attr::DISPATCHES, "1"),
            (attr::RECEIPT_ID, &receipt),
            (attr::ATTEMPT_ID, &attempt),
            (attr::APPROVAL_ID, id.as_str()),
        ])
    );
    let resumed_events = events(resumed, event::RESUMED);
    assert_eq!(resumed_events.len(), 1, "{resumed_events:?}");
    assert_eq!(resumed_events[0][attr::APPROVAL_ID], id.as_str());
    assert!(
        resumed_events[0][attr::EXECUTOR].starts_with("exe_"),
        "{resumed_events:?}"
    );

    // A late decision from another front end: traced, and told it was already decided.
    let late = approval::decide(
        store.as_ref(),
        &id,
        Verdict::Deny,
        &Decider::new("bob", "cli"),
        Some(DECISION_REASON),
    )
    .await
    .expect("decided");
    assert!(matches!(late, approval::Decided::AlreadyDecided(_)));
    let spans = traces.take();
    assert_eq!(
        events(named(&spans, span::APPROVAL_DECIDE), event::DECIDED),
        [expected(&[
            (attr::APPROVAL_ID, id.as_str()),
            (attr::APPROVER, "bob"),
            (attr::VERDICT, "deny"),
            (attr::FRONT_END, "cli"),
            (attr::DECISION, "already_decided"),
            (attr::APPROVAL_STATE, "finished"),
        ])]
    );
    assert_eq!(rig.upstream.requests(), 1);
    let key = rig.upstream.received()[0]
        .header("idempotency-key")
        .expect("an idempotency key")
        .to_owned();
    assert_clean(&spans, &[&key, DECISION_REASON]);
}

#[tokio::test]
async fn an_approval_decided_inside_the_call_is_an_event_on_its_span() {
    use sallyport_core::telemetry::event;
    let traces = Traces::install();
    let rig = rig_with(invoice(), ConsentDecision::Approve, ConsentMode::Deferred).await;
    let result = rig
        .executor
        .call(
            "create_invoice",
            json!({"project_id": "proj_1", "memo": ARGUMENT}),
            &session(),
        )
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    let spans = traces.take();
    // No span of its own: the decision and the resumption are events on the call's span.
    assert_eq!(
        names(&spans),
        [
            "execute_tool create_invoice",
            span::CONSENT_WAIT,
            span::DISPATCH
        ]
    );
    let call = named(&spans, "execute_tool create_invoice");
    let decided = events(call, event::DECIDED);
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(decided[0][attr::APPROVER], "operator");
    assert_eq!(decided[0][attr::VERDICT], "approve");
    assert_eq!(decided[0][attr::DECISION], "recorded");
    assert_eq!(decided[0][attr::APPROVAL_STATE], "approved");
    let id = decided[0][attr::APPROVAL_ID].clone();
    assert!(id.starts_with("apr_"), "{id}");
    let resumed = events(call, event::RESUMED);
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert_eq!(resumed[0][attr::APPROVAL_ID], id);
    // It never waited for anyone: no parked event.
    assert!(events(call, event::PARKED).is_empty());
    assert_clean(&spans, &[]);
}

#[tokio::test]
async fn an_approval_that_expired_is_traced_as_an_expiry_not_a_decision() {
    use sallyport_core::approval::{self, ApprovalState, Decider, Verdict};
    use sallyport_core::telemetry::event;
    let traces = Traces::install();
    let upstream = Upstream::start(|_| invoice()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "billing-api",
            CredentialKind::Bearer,
            Binding::url(upstream.url()),
        ),
        Secret::new(CREDENTIAL),
    );
    let executor = Executor::builder(
        Catalog::builder()
            .action::<GetInvoice>()
            .action::<CreateInvoice>()
            .build()
            .expect("catalog"),
    )
    .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
    .vault_arc(vault)
    .channel(
        HttpChannel::builder()
            .base_url(upstream.url())
            .build()
            .expect("channel"),
    )
    .consent_mode(ConsentMode::Deferred)
    .approval_expiry(Duration::from_millis(50))
    .build()
    .expect("executor");
    let parked = executor
        .call(
            "create_invoice",
            json!({"project_id": "proj_1", "memo": ARGUMENT}),
            &session(),
        )
        .await;
    let id = parked.approval_id.clone().expect("approval id");
    traces.take();
    tokio::time::sleep(Duration::from_millis(120)).await;

    let store = executor.approval_store().expect("store").clone();
    let decided = approval::decide(
        store.as_ref(),
        &id,
        Verdict::Approve,
        &Decider::new("carol", "webhook"),
        None,
    )
    .await
    .expect("decided");
    assert!(matches!(decided, approval::Decided::Expired(_)));
    assert_eq!(decided.approval().state, ApprovalState::Expired);
    let spans = traces.take();
    assert_eq!(names(&spans), [span::APPROVAL_DECIDE]);
    let decide = &spans[0];
    assert_eq!(
        events(decide, event::EXPIRED),
        [expected(&[(attr::APPROVAL_ID, id.as_str())])]
    );
    assert_eq!(
        events(decide, event::DECIDED),
        [expected(&[
            (attr::APPROVAL_ID, id.as_str()),
            (attr::APPROVER, "carol"),
            (attr::VERDICT, "approve"),
            (attr::FRONT_END, "webhook"),
            (attr::DECISION, "expired"),
            (attr::APPROVAL_STATE, "expired"),
        ])]
    );
    // The expiry comes first, then what became of the late decision.
    let order: Vec<&str> = decide.events.iter().map(|e| e.name.as_ref()).collect();
    assert_eq!(order, [event::EXPIRED, event::DECIDED]);
    assert_eq!(upstream.requests(), 0);
    assert_clean(&spans, &[]);
}

/// The OAuth canaries: a client secret, a refresh token, the access token the token endpoint
/// issues and the rotated refresh token it sends with it.
const OAUTH_CLIENT_SECRET: &str = "cs-CANARY-otel-41d2";
const OAUTH_REFRESH: &str = "rt-CANARY-otel-9a7e";
const OAUTH_ROTATED: &str = "rt-CANARY-otel-rotated-c11f";
const OAUTH_ACCESS: &str = "at-CANARY-otel-0b5c";

/// An executor whose `billing-api` credential is an OAuth refresh grant against `token`, for
/// the API at `api`.
async fn oauth_rig(token: &Upstream, api: &Upstream, dir: &tempfile::TempDir) -> Executor {
    use sallyport_core::vault::{GrantKey, GrantUpdate, OAuthClient, Vault as _};
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "billing-api",
            CredentialKind::OAuthRefresh(OAuthClient::new(
                "webapp",
                format!("{}/token", token.url()),
            )),
            Binding::url(api.url()),
        ),
        Secret::new(OAUTH_CLIENT_SECRET),
    );
    vault
        .grants()
        .expect("grants")
        .replace(
            &GrantKey::shared("billing-api"),
            0,
            GrantUpdate::Connected {
                refresh_token: Secret::new(OAUTH_REFRESH),
            },
        )
        .await
        .expect("grant");
    let catalog = Catalog::builder()
        .action::<GetInvoice>()
        .build()
        .expect("catalog");
    Executor::builder(catalog)
        .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
        .vault_arc(vault)
        .channel(
            HttpChannel::builder()
                .base_url(api.url())
                .build()
                .expect("channel"),
        )
        .build()
        .expect("executor")
}

/// Every OAuth secret, raw, on the wire as a header carries it, and in the form a token
/// request carries the refresh token.
fn oauth_canaries() -> Vec<String> {
    use base64::Engine as _;
    let mut all: Vec<String> = [
        OAUTH_CLIENT_SECRET,
        OAUTH_REFRESH,
        OAUTH_ROTATED,
        OAUTH_ACCESS,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    all.push(
        base64::engine::general_purpose::STANDARD.encode(format!("webapp:{OAUTH_CLIENT_SECRET}")),
    );
    all
}

#[tokio::test]
async fn oauth_tokens_refreshed_after_a_401_reach_no_span() {
    let traces = Traces::install();
    // The token endpoint issues an access token and rotates the refresh token.
    let token = Upstream::start(|_| {
        Reply::Json(
            200,
            json!({"access_token": OAUTH_ACCESS, "token_type": "Bearer", "expires_in": 60,
                   "refresh_token": OAUTH_ROTATED}),
        )
    })
    .await;
    // The API refuses the first request with a 401 that echoes the token it got, then
    // answers.
    let api = Upstream::start(|r| {
        let bearer = r.header("authorization").unwrap_or_default().to_owned();
        if r.n == 1 {
            Reply::Json(401, json!({"message": format!("{bearer} expired")}))
        } else {
            Reply::Json(200, json!({"id": "inv_1", "state": bearer}))
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = oauth_rig(&token, &api, &dir).await;
    let result = executor
        .call("get_invoice", json!({"invoice_id": "inv_1"}), &session())
        .await;
    assert_eq!(result.status, Status::Completed, "{}", result.to_json());
    assert_eq!(api.requests(), 2, "the 401 was followed by one resend");
    assert!(token.requests() >= 1, "the token endpoint was asked");

    let spans = traces.take();
    assert!(
        spans.iter().any(|s| s.name == "execute_tool get_invoice"),
        "{:?}",
        names(&spans)
    );
    let canaries = oauth_canaries();
    let more: Vec<&str> = canaries.iter().map(String::as_str).collect();
    assert_clean(&spans, &more);
}

#[tokio::test]
async fn a_refused_refresh_echoing_the_refresh_token_reaches_no_span() {
    let traces = Traces::install();
    // The provider refuses the grant, and its description quotes the token it was sent.
    let token = Upstream::start(|_| {
        Reply::Json(
            400,
            json!({"error": "invalid_grant",
                   "error_description": format!("refresh token {OAUTH_REFRESH} was revoked")}),
        )
    })
    .await;
    let api = Upstream::start(|_| Reply::Json(200, json!({"id": "inv_1", "state": "open"}))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = oauth_rig(&token, &api, &dir).await;
    let result = executor
        .call("get_invoice", json!({"invoice_id": "inv_1"}), &session())
        .await;
    assert_eq!(result.status, Status::Rejected, "{}", result.to_json());
    assert_eq!(api.requests(), 0, "nothing is sent without a token");
    assert!(
        !result.to_json().contains(OAUTH_REFRESH),
        "{}",
        result.to_json()
    );

    let spans = traces.take();
    let call = named(&spans, "execute_tool get_invoice");
    assert_eq!(call.parent_span_id, SpanId::INVALID);
    let canaries = oauth_canaries();
    let more: Vec<&str> = canaries.iter().map(String::as_str).collect();
    assert_clean(&spans, &more);
}
