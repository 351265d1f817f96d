//! Consent through MCP elicitation for each consent rule, with a real rmcp client talking to
//! the server over an in-process pipe: a `session` action is asked once per connection, a
//! `per_call` action on every call, a declined or dismissed request sends nothing, a client
//! without elicitation gets the host's provider or is refused, and a client that declares
//! elicitation is asked only when the host enabled it.
//!
//! The channel here is a counter (what it counts is what "sent" means for these tests); the
//! real channels and the real stdio transport are exercised by
//! `examples/tests/integration/mcp_stdio.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, JsonObject,
};
use rmcp::service::{RequestContext, RoleClient, RunningService};
use rmcp::{ClientHandler, ErrorData as McpError, ServiceExt};
use sallyport_core::approval::{ApprovalId, ConsentMode, Decider, Verdict};
use sallyport_core::channel::{
    CallView, Channel, ChannelOutcome, DescribedRequest, Dispatch, PreparedRequest,
};
use sallyport_core::code::ConsentOutcome;
use sallyport_core::consent::{ConsentDecision, ConsentProvider, FnConsent};
use sallyport_core::journal::{AuditRecord, Journal, SqliteJournal};
use sallyport_core::outcome::Refusal;
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_mcp::{ConsentRouter, Elicitation, McpServer};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// Scale the workers of one project up or down.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "scale_workers", effect = reversible_change, consent = session)]
#[channel(name = "counter")]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ScaleWorkers {
    #[scope(project)]
    project_id: String,
    #[schemars(range(min = 0, max = 8))]
    workers: u8,
}

/// Restart one worker of a project.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "restart_worker", effect = reversible_change, consent = per_call)]
#[channel(name = "counter")]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct RestartWorker {
    #[scope(project)]
    project_id: String,
    worker: String,
}

/// Counts dispatches: the number of calls that would have reached an upstream.
#[derive(Clone, Default)]
struct Counter {
    sent: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Channel for Counter {
    fn name(&self) -> &str {
        "counter"
    }

    fn prepare(&self, call: &CallView<'_>) -> Result<Box<dyn PreparedRequest>, Refusal> {
        Ok(Box::new(DescribedRequest::new(
            format!("{} {}", call.spec.name, call.arguments),
            call.arguments.clone(),
        )))
    }

    async fn dispatch(&self, call: Dispatch<'_>) -> ChannelOutcome {
        match call.context.permit().await {
            Ok(permit) => permit.sending(),
            Err(refused) => return refused,
        }
        self.sent.fetch_add(1, Ordering::SeqCst);
        ChannelOutcome::completed(json!({"ok": true}))
    }
}

/// What the client's user answers.
#[derive(Clone, Copy)]
enum Answer {
    Accept,
    Decline,
    Cancel,
}

#[derive(Clone)]
struct TestClient {
    elicitation: bool,
    answer: Answer,
    asked: Arc<Mutex<Vec<String>>>,
}

impl TestClient {
    fn new(elicitation: bool, answer: Answer) -> Self {
        Self {
            elicitation,
            answer,
            asked: Arc::default(),
        }
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().expect("lock").clone()
    }
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        let capabilities = if self.elicitation {
            ClientCapabilities::builder().enable_elicitation().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(
            capabilities,
            Implementation::new("elicitation-test", "1.0.0"),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.asked.lock().expect("lock").push(message);
        }
        Ok(ElicitResult::new(match self.answer {
            Answer::Accept => ElicitationAction::Accept,
            Answer::Decline => ElicitationAction::Decline,
            Answer::Cancel => ElicitationAction::Cancel,
        }))
    }
}

struct Harness {
    _dir: tempfile::TempDir,
    executor: Executor,
    server: McpServer,
    journal: SqliteJournal,
    counter: Counter,
    router: Arc<ConsentRouter>,
}

impl Harness {
    fn new(router: Arc<ConsentRouter>) -> Self {
        Self::with_mode(router, ConsentMode::Blocking)
    }

    fn with_mode(router: Arc<ConsentRouter>, mode: ConsentMode) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("journal.db");
        let catalog = Catalog::builder()
            .action::<ScaleWorkers>()
            .action::<RestartWorker>()
            .build()
            .expect("catalog");
        let counter = Counter::default();
        let executor = Executor::builder(catalog)
            .journal(SqliteJournal::open(&path).expect("journal"))
            .channel(counter.clone())
            .consent_arc(router.clone())
            .consent_mode(mode)
            .build()
            .expect("executor");
        let server = McpServer::new(executor.clone(), router.clone())
            .session(|id| Session::new(id.as_str()).allow("project", ["proj_1"]));
        Self {
            journal: SqliteJournal::open(&path).expect("journal reader"),
            _dir: dir,
            executor,
            server,
            counter,
            router,
        }
    }

    /// Opens one MCP connection (one sallyport session) over an in-process pipe.
    async fn connect(&self, client: TestClient) -> RunningService<RoleClient, TestClient> {
        let (server_end, client_end) = tokio::io::duplex(64 * 1024);
        let server = self.server.clone();
        tokio::spawn(async move {
            let _ = server.serve(tokio::io::split(server_end)).await;
        });
        client
            .serve(tokio::io::split(client_end))
            .await
            .expect("initialize")
    }

    fn server_router_connections(&self) -> usize {
        self.router.connections()
    }

    fn sent(&self) -> usize {
        self.counter.sent.load(Ordering::SeqCst)
    }

    async fn consents(&self) -> Vec<Option<ConsentOutcome>> {
        let records: Vec<AuditRecord> = self.journal.records().await.expect("records");
        records.into_iter().map(|r| r.event.consent).collect()
    }
}

async fn call(
    client: &RunningService<RoleClient, TestClient>,
    name: &str,
    arguments: Value,
) -> Value {
    let Value::Object(map) = arguments else {
        panic!("arguments must be an object");
    };
    let result: CallToolResult = client
        .call_tool(
            CallToolRequestParams::new(name.to_owned()).with_arguments(JsonObject::from_iter(map)),
        )
        .await
        .expect("tools/call answered");
    result.structured_content.expect("structuredContent")
}

/// A router that lets clients declaring the capability answer consent (the host trusts them).
fn eliciting() -> Arc<ConsentRouter> {
    ConsentRouter::builder()
        .elicitation(Elicitation::Preferred)
        .build()
}

/// A host provider that counts its questions and answers `decision`.
fn host(decision: ConsentDecision) -> (Arc<dyn ConsentProvider>, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    let provider: Arc<dyn ConsentProvider> = Arc::new(FnConsent::new(move |_request| {
        counter.fetch_add(1, Ordering::SeqCst);
        let decision = decision.clone();
        async move { decision }
    }));
    (provider, asked)
}

fn scale(workers: u8) -> Value {
    json!({"project_id": "proj_1", "workers": workers})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_action_is_asked_once_per_connection() {
    let h = Harness::new(eliciting());
    let first = TestClient::new(true, Answer::Accept);
    let a = h.connect(first.clone()).await;

    let one = call(&a, "scale_workers", scale(2)).await;
    assert_eq!(one["status"], "completed", "{one}");
    let two = call(&a, "scale_workers", scale(3)).await;
    assert_eq!(two["status"], "completed", "{two}");
    assert_eq!(h.sent(), 2);
    let asked = first.asked();
    assert_eq!(asked.len(), 1, "the session grant covers the second call");
    assert!(
        asked[0].ends_with(
            "Accept approves this action for the rest of this session; decline denies it."
        ),
        "{}",
        asked[0]
    );

    // Another connection is another session: its user is asked again.
    let second = TestClient::new(true, Answer::Accept);
    let b = h.connect(second.clone()).await;
    let three = call(&b, "scale_workers", scale(4)).await;
    assert_eq!(three["status"], "completed", "{three}");
    assert_eq!(second.asked().len(), 1);
    assert_eq!(first.asked().len(), 1);
    assert_eq!(h.sent(), 3);

    assert_eq!(
        h.consents().await,
        [
            Some(ConsentOutcome::ApprovedForSession),
            Some(ConsentOutcome::SessionGrant),
            Some(ConsentOutcome::ApprovedForSession),
        ]
    );
    a.cancel().await.expect("close a");
    b.cancel().await.expect("close b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_call_action_is_asked_every_time() {
    let h = Harness::new(eliciting());
    let client = TestClient::new(true, Answer::Accept);
    let a = h.connect(client.clone()).await;
    for worker in ["w1", "w2"] {
        let result = call(
            &a,
            "restart_worker",
            json!({"project_id": "proj_1", "worker": worker}),
        )
        .await;
        assert_eq!(result["status"], "completed", "{result}");
    }
    let asked = client.asked();
    assert_eq!(asked.len(), 2);
    assert!(asked[1].ends_with("Accept approves this one call; decline denies it."));
    assert_eq!(h.sent(), 2);
    assert_eq!(
        h.consents().await,
        [
            Some(ConsentOutcome::Approved),
            Some(ConsentOutcome::Approved)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_session_request_sends_nothing_grants_nothing_and_is_asked_again() {
    let h = Harness::new(eliciting());
    let client = TestClient::new(true, Answer::Decline);
    let a = h.connect(client.clone()).await;
    for _ in 0..2 {
        let result = call(&a, "scale_workers", scale(1)).await;
        assert_eq!(result["status"], "rejected", "{result}");
        assert_eq!(result["code"], "consent_denied", "{result}");
    }
    assert_eq!(
        client.asked().len(),
        2,
        "a denial is not remembered as a grant"
    );
    assert_eq!(h.sent(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dismissed_request_is_a_denial() {
    let h = Harness::new(eliciting());
    let client = TestClient::new(true, Answer::Cancel);
    let a = h.connect(client.clone()).await;
    let result = call(&a, "scale_workers", scale(1)).await;
    assert_eq!(result["status"], "rejected", "{result}");
    assert_eq!(result["code"], "consent_denied", "{result}");
    assert_eq!(client.asked().len(), 1);
    assert_eq!(h.sent(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_elicitation_gets_the_host_provider() {
    let (provider, host_asked) = host(ConsentDecision::Approve);
    let h = Harness::new(
        ConsentRouter::builder()
            .provider(provider)
            .elicitation(Elicitation::Preferred)
            .build(),
    );
    let client = TestClient::new(false, Answer::Decline);
    let a = h.connect(client.clone()).await;
    let result = call(
        &a,
        "restart_worker",
        json!({"project_id": "proj_1", "worker": "w1"}),
    )
    .await;
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(host_asked.load(Ordering::SeqCst), 1);
    assert!(
        client.asked().is_empty(),
        "no elicitation without the capability"
    );
    assert_eq!(h.sent(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_declaring_elicitation_does_not_outrank_the_host_provider_by_default() {
    // The client would accept; the host's own provider denies, and it is the one asked.
    let (provider, host_asked) = host(ConsentDecision::Deny { reason: None });
    let h = Harness::new(ConsentRouter::with_provider(provider));
    let client = TestClient::new(true, Answer::Accept);
    let a = h.connect(client.clone()).await;
    let result = call(
        &a,
        "restart_worker",
        json!({"project_id": "proj_1", "worker": "w1"}),
    )
    .await;
    assert_eq!(result["status"], "rejected", "{result}");
    assert_eq!(result["code"], "consent_denied", "{result}");
    assert_eq!(host_asked.load(Ordering::SeqCst), 1);
    assert!(client.asked().is_empty(), "the client was never asked");
    assert_eq!(h.sent(), 0);
    assert_eq!(h.server_router_connections(), 0);
    assert_eq!(h.consents().await, [Some(ConsentOutcome::Denied)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_declaring_elicitation_cannot_approve_when_the_host_has_no_provider_and_did_not_enable_it()
 {
    let h = Harness::new(ConsentRouter::new());
    let client = TestClient::new(true, Answer::Accept);
    let a = h.connect(client.clone()).await;
    let result = call(&a, "scale_workers", scale(1)).await;
    assert_eq!(result["status"], "rejected", "{result}");
    assert_eq!(result["code"], "consent_unavailable", "{result}");
    assert!(client.asked().is_empty());
    assert_eq!(h.sent(), 0);
    assert_eq!(h.consents().await, [Some(ConsentOutcome::Unavailable)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_elicitation_as_fallback_the_client_is_asked_only_when_the_host_provider_cannot_ask() {
    let (provider, host_asked) = host(ConsentDecision::Unavailable);
    let h = Harness::new(
        ConsentRouter::builder()
            .provider(provider)
            .elicitation(Elicitation::Fallback)
            .build(),
    );
    let client = TestClient::new(true, Answer::Accept);
    let a = h.connect(client.clone()).await;
    let result = call(
        &a,
        "restart_worker",
        json!({"project_id": "proj_1", "worker": "w1"}),
    )
    .await;
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(host_asked.load(Ordering::SeqCst), 1, "the host first");
    assert_eq!(client.asked().len(), 1, "then the client");
    assert_eq!(h.sent(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_neither_elicitation_nor_a_host_provider_consent_fails_closed() {
    let h = Harness::new(ConsentRouter::new());
    let client = TestClient::new(false, Answer::Accept);
    let a = h.connect(client.clone()).await;
    let result = call(&a, "scale_workers", scale(1)).await;
    assert_eq!(result["status"], "rejected", "{result}");
    assert_eq!(result["code"], "consent_unavailable", "{result}");
    assert!(client.asked().is_empty());
    assert_eq!(h.sent(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_deferred_consent_a_client_without_elicitation_gets_pending_and_polls_check_approval()
{
    let h = Harness::with_mode(ConsentRouter::new(), ConsentMode::Deferred);
    let client = TestClient::new(false, Answer::Accept);
    let a = h.connect(client.clone()).await;
    let tools = a.list_all_tools().await.expect("tools/list");
    let check_tool = tools
        .iter()
        .find(|t| t.name == "check_approval")
        .expect("check_approval is listed");
    assert_eq!(
        check_tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint),
        Some(true)
    );
    let parked = call(
        &a,
        "restart_worker",
        json!({"project_id": "proj_1", "worker": "w1"}),
    )
    .await;
    assert_eq!(parked["status"], "pending", "{parked}");
    assert_eq!(parked["code"], "awaiting_approval", "{parked}");
    assert_eq!(parked["next"]["action"], "check_approval");
    let id = parked["approval_id"]
        .as_str()
        .expect("approval_id")
        .to_owned();
    assert_eq!(h.sent(), 0);
    assert!(client.asked().is_empty());

    let waiting = call(&a, "check_approval", json!({"approval_id": id})).await;
    assert_eq!(waiting["status"], "pending", "{waiting}");
    assert_eq!(h.sent(), 0);

    // A human approves elsewhere; the agent's next poll carries the call out, once.
    sallyport_core::approval::decide(
        h.executor
            .approval_store()
            .expect("an approval store")
            .as_ref(),
        &ApprovalId::from_stored(id.clone()),
        Verdict::Approve,
        &Decider::new("alice", "test"),
        None,
    )
    .await
    .expect("decide");
    let done = call(&a, "check_approval", json!({"approval_id": id})).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["data"]["result"]["status"], "completed", "{done}");
    assert_eq!(h.sent(), 1);
    let again = call(&a, "check_approval", json!({"approval_id": id})).await;
    assert_eq!(again["status"], "completed");
    assert_eq!(h.sent(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_deferred_consent_an_eliciting_client_decides_now_through_the_approval_path() {
    let h = Harness::with_mode(eliciting(), ConsentMode::Deferred);
    let client = TestClient::new(true, Answer::Accept);
    let a = h.connect(client.clone()).await;
    let result = call(
        &a,
        "restart_worker",
        json!({"project_id": "proj_1", "worker": "w1"}),
    )
    .await;
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(client.asked().len(), 1);
    assert_eq!(h.sent(), 1);
    let id = ApprovalId::from_stored(result["approval_id"].as_str().expect("approval_id"));
    let approval = h
        .executor
        .approval_store()
        .expect("an approval store")
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    let decision = approval.decision.expect("decided");
    assert_eq!(decision.decider.channel, "mcp_elicitation");
    assert_eq!(
        approval.state,
        sallyport_core::approval::ApprovalState::Finished
    );
    // The parked call, the decision and the execution are each audited.
    assert_eq!(
        h.consents().await,
        [
            Some(ConsentOutcome::Deferred),
            Some(ConsentOutcome::Approved),
            Some(ConsentOutcome::Approved)
        ]
    );
}
