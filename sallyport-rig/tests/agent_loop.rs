//! A full rig agent loop, offline: rig's scripted `MockCompletionModel` plays the model and
//! calls sallyport tools that drive a real executor (SQLite journal, in-memory vault, the real
//! HTTP channel) against a real HTTP upstream on 127.0.0.1:0. After every tool call the test
//! checks exactly what the model was told (the tool-result message rig fed back) and how many
//! requests the upstream had received by then.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rig_agent::AgentBuilder;
use rig_agent::agent::{AgentHook, HookContext, OutcomeAction, OutcomeEvent};
use rig_core::completion::{CompletionRequest, Message};
use rig_core::message::{ToolResultContent, UserContent};
use rig_core::test_utils::{MockCompletionModel, MockTurn};
use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::drift::{Baseline, BaselineGuard};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::vault::{Binding, CredentialKind, CredentialMeta, MemoryVault, Secret};
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_http::HttpChannel;
use sallyport_rig::{CallResult, RigTools, tool_context};
use sallyport_tests::http_server::{Drop, Reply, Upstream};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const CANARY: &str = "canary-SECRET-rig-4b1d";

/// Read one preview deployment of a project.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_deployment", effect = observe, credential = "deploy-api")]
#[http(get = "/v1/projects/{project_id}/deployments/{deployment_id}", result = Deployment)]
#[serde(deny_unknown_fields)]
struct GetDeployment {
    #[scope(project)]
    project_id: String,
    deployment_id: String,
}

/// Queue one tested build of a project for the preview environment.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "create_deployment", effect = external_commitment, retry = idempotency_key,
         reconcile = "get_deployment", credential = "deploy-api")]
#[http(post = "/v1/projects/{project_id}/deployments", status(202) = pending,
       status(409) = already_in_desired_state, result = Deployment)]
#[serde(deny_unknown_fields)]
struct CreateDeployment {
    #[scope(project)]
    project_id: String,
    build_id: String,
    /// Why the agent wants this; shown to the human, never sent.
    #[audit_note]
    reason: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Deployment {
    deployment_id: String,
    state: String,
}

/// Read one invoice of a customer.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_invoice", effect = observe, credential = "deploy-api")]
#[http(get = "/v1/customers/{customer_id}/invoices/{invoice_id}", result = Invoice)]
#[serde(deny_unknown_fields)]
struct GetInvoice {
    #[scope(customer)]
    customer_id: String,
    invoice_id: String,
}

/// Send one invoice to its customer (the upstream keeps no idempotency key for it).
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "send_invoice", effect = external_commitment, reconcile = "get_invoice",
         credential = "deploy-api")]
#[http(post = "/v1/customers/{customer_id}/invoices/{invoice_id}/send", result = Invoice)]
#[serde(deny_unknown_fields)]
struct SendInvoice {
    #[scope(customer)]
    customer_id: String,
    invoice_id: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Invoice {
    invoice_id: String,
    state: String,
}

fn upstream_reply(request: &sallyport_tests::http_server::Received) -> Reply {
    match (request.method.as_str(), request.path.as_str()) {
        ("POST", "/v1/projects/proj_42/deployments") => Reply::Json(
            202,
            json!({"deployment_id": "dep_1", "state": "queued", "internal_host": "10.0.0.7"}),
        ),
        ("GET", "/v1/projects/proj_42/deployments/dep_1") => {
            Reply::Json(200, json!({"deployment_id": "dep_1", "state": "running"}))
        }
        // Committed, then the connection closes without a response byte: the lost answer.
        ("POST", "/v1/customers/cus_7/invoices/inv_7/send") => {
            Reply::CommitThenDrop(Drop::CleanClose)
        }
        ("GET", "/v1/customers/cus_7/invoices/inv_7") => {
            Reply::Json(200, json!({"invoice_id": "inv_7", "state": "sent"}))
        }
        _ => Reply::Json(404, json!({"message": "no such route"})),
    }
}

struct Bench {
    upstream: Arc<Upstream>,
    executor: Executor,
    /// The actions the human was asked about, in order.
    asked: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

async fn bench() -> Bench {
    let upstream = Arc::new(Upstream::start(upstream_reply).await);
    let dir = tempfile::tempdir().expect("tempdir");
    let vault = Arc::new(MemoryVault::new());
    vault.set(
        CredentialMeta::new(
            "deploy-api",
            CredentialKind::Bearer,
            Binding::url(upstream.url()),
        ),
        Secret::new(CANARY),
    );
    let channel = HttpChannel::builder()
        .base_url(upstream.url())
        .backoff(Duration::from_millis(10), Duration::from_millis(40))
        .total_timeout(Duration::from_secs(2))
        .build()
        .expect("channel");
    let catalog = Catalog::builder()
        .action::<GetDeployment>()
        .action::<CreateDeployment>()
        .action::<GetInvoice>()
        .action::<SendInvoice>()
        .build()
        .expect("catalog");
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&asked);
    // The human: approves everything except a deployment whose reason mentions Friday.
    let consent = FnConsent::new(move |request| {
        log.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.action.clone());
        let friday = request
            .note
            .as_deref()
            .is_some_and(|note| note.contains("Friday"));
        async move {
            if friday {
                ConsentDecision::Deny {
                    reason: Some("no deployments on a Friday night".into()),
                }
            } else {
                ConsentDecision::Approve
            }
        }
    });
    let executor = Executor::builder(catalog)
        .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
        .vault_arc(vault)
        .consent(consent)
        .channel(channel)
        .build()
        .expect("executor");
    Bench {
        upstream,
        executor,
        asked,
        _dir: dir,
    }
}

fn session() -> Session {
    Session::new("chat-rig-1")
        .allow("project", ["proj_42"])
        .allow("customer", ["cus_7"])
}

/// One tool call as the probe saw it: the tool, the upstream's request count right after it,
/// and the executor's answer the tool published.
type Seen = (String, u64, Option<CallResult>);

/// Snapshots, after every tool call rig dispatches, the upstream's request count and the
/// executor's published answer.
#[derive(Clone)]
struct Probe {
    upstream: Arc<Upstream>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl AgentHook for Probe {
    async fn on_outcome(&self, _ctx: &HookContext, event: OutcomeEvent<'_>) -> OutcomeAction {
        if let Some(name) = event.tool_name() {
            let published = event
                .tool_context()
                .and_then(|context| context.result::<CallResult>().ok().flatten());
            self.seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((name.to_owned(), self.upstream.requests(), published));
        }
        OutcomeAction::proceed()
    }
}

/// The tool result at the end of `request`'s history: its text (JSON rendered compactly)
/// and whether rig marked it as an error.
fn told(request: &CompletionRequest) -> (String, bool) {
    let Some(Message::User { content }) = request.chat_history.last() else {
        panic!(
            "the last message is not the user's: {:?}",
            request.chat_history.last()
        );
    };
    let Some(UserContent::ToolResult(result)) = content.first() else {
        panic!("the last message is not a tool result: {content:?}");
    };
    assert_eq!(result.content.len(), 1, "one content block");
    let text = match &result.content[0] {
        ToolResultContent::Json { value } => value.to_string(),
        ToolResultContent::Text(text) => text.text.clone(),
        other => panic!("unexpected content {other:?}"),
    };
    (text, result.is_error)
}

/// The result JSON in a tool result: all of a success, the last line of an error's text.
fn result_json(text: &str) -> Value {
    let line = text.lines().last().expect("a line");
    serde_json::from_str(line).expect("the result JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_loop_is_told_the_truth_after_every_call() {
    let bench = bench().await;
    let model = MockCompletionModel::from_turns([
        // 1. A good call: accepted, not finished.
        MockTurn::tool_call(
            "call_1",
            "create_deployment",
            json!({"project_id": "proj_42", "build_id": "build_101", "reason": "ship the tested fix"}),
        ),
        // 2. The check `next` named.
        MockTurn::tool_call(
            "call_2",
            "get_deployment",
            json!({"project_id": "proj_42", "deployment_id": "dep_1"}),
        ),
        // 3. An unknown field.
        MockTurn::tool_call(
            "call_3",
            "create_deployment",
            json!({"project_id": "proj_42", "build_id": "build_101", "reason": "ship it now", "force": true}),
        ),
        // 4. An object outside the session's scope.
        MockTurn::tool_call(
            "call_4",
            "create_deployment",
            json!({"project_id": "proj_999", "build_id": "build_101", "reason": "ship it there too"}),
        ),
        // 5. A call the human refuses.
        MockTurn::tool_call(
            "call_5",
            "create_deployment",
            json!({"project_id": "proj_42", "build_id": "build_102", "reason": "ship it on Friday night"}),
        ),
        // 6. The upstream commits, then the answer is lost.
        MockTurn::tool_call(
            "call_6",
            "send_invoice",
            json!({"customer_id": "cus_7", "invoice_id": "inv_7"}),
        ),
        // 7. The reconcile call the unknown result named.
        MockTurn::tool_call(
            "call_7",
            "get_invoice",
            json!({"customer_id": "cus_7", "invoice_id": "inv_7"}),
        ),
        MockTurn::text("Deployed build_101 to preview; invoice inv_7 was sent once."),
    ]);
    let probe = Probe {
        upstream: Arc::clone(&bench.upstream),
        seen: Arc::new(Mutex::new(Vec::new())),
    };
    let agent = AgentBuilder::new(model.clone())
        .dynamic_tools(RigTools::new(bench.executor.clone()).tools())
        .build();
    let answer = agent
        .prompt("Ship build_101 of proj_42 to preview and send invoice inv_7.")
        .tool_context(tool_context(session()).expect("context"))
        .add_hook(probe.clone())
        .max_turns(10)
        .await
        .expect("the run ends with the model's answer");
    assert_eq!(
        answer.output(),
        "Deployed build_101 to preview; invoice inv_7 was sent once."
    );

    let requests = model.requests();
    assert_eq!(requests.len(), 8, "one model request per turn");
    let told: Vec<(String, bool)> = requests[1..].iter().map(told).collect();
    let json_of = |i: usize| result_json(&told[i].0);

    // 1. pending, with the check to make next.
    let pending = json_of(0);
    assert!(!told[0].1);
    assert_eq!(pending["status"], "pending");
    assert_eq!(
        pending["data"],
        json!({"deployment_id": "dep_1", "state": "queued"})
    );
    assert_eq!(
        pending["next"],
        json!({"action": "get_deployment", "arguments": {"deployment_id": "dep_1", "project_id": "proj_42"}})
    );
    assert_eq!(
        told[0].0,
        pending.to_string(),
        "a success is the JSON alone"
    );

    // 2. completed.
    let completed = json_of(1);
    assert!(!told[1].1);
    assert_eq!(completed["status"], "completed");
    assert_eq!(
        completed["data"],
        json!({"deployment_id": "dep_1", "state": "running"})
    );

    // 3. unknown field: a tool error naming the field.
    let invalid = json_of(2);
    assert!(told[2].1);
    assert_eq!(invalid["code"], "invalid_arguments");
    assert_eq!(invalid["divergences"][0]["kind"], "unknown_field");
    assert_eq!(invalid["divergences"][0]["path"], "/force");
    assert_eq!(
        told[2].0,
        format!(
            "create_deployment: rejected (invalid_arguments) — arguments do not match the \
             schema: unknown_field at /force: expected no such field; known fields: build_id, \
             project_id, reason, found boolean. Nothing was sent. Fix the arguments as described \
             and call again.\n{invalid}"
        )
    );

    // 4. out of scope.
    let scope = json_of(3);
    assert!(told[3].1);
    assert_eq!(
        told[3].0,
        format!(
            "create_deployment: rejected (out_of_scope) — project proj_999 is outside this \
             session's scope. Nothing was sent. This session may not touch that object; do not \
             retry with it.\n{scope}"
        )
    );

    // 5. the human said no.
    let denied = json_of(4);
    assert!(told[4].1);
    assert_eq!(
        told[4].0,
        format!(
            "create_deployment: rejected (consent_denied) — a human denied this call: no \
             deployments on a Friday night. Nothing was sent. The user said no; do not retry \
             unless the user asks you to.\n{denied}"
        )
    );

    // 6. the lost answer: unknown, not retryable, the reconcile call named.
    let unknown = json_of(5);
    assert!(told[5].1);
    assert_eq!(unknown["status"], "unknown");
    assert_eq!(
        unknown["next"],
        json!({"action": "get_invoice", "arguments": {"customer_id": "cus_7", "invoice_id": "inv_7"}})
    );
    assert_eq!(
        told[5].0,
        format!(
            "send_invoice: unknown (connection_lost_after_send) — the request was sent and the \
             connection was lost before an answer; it may or may not have taken effect; do not \
             retry; check with get_invoice. It may or may not have been applied. Not retryable: \
             do not call send_invoice again; call get_invoice with \
             {{\"customer_id\":\"cus_7\",\"invoice_id\":\"inv_7\"}} to find out.\n{unknown}"
        )
    );

    // 7. reconciled: it was sent, once.
    let reconciled = json_of(6);
    assert!(!told[6].1);
    assert_eq!(reconciled["status"], "completed");
    assert_eq!(
        reconciled["data"],
        json!({"invoice_id": "inv_7", "state": "sent"})
    );

    // The upstream's request count after each call: refusals sent nothing.
    let seen = probe
        .seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let counts: Vec<(&str, u64)> = seen.iter().map(|(n, c, _)| (n.as_str(), *c)).collect();
    assert_eq!(
        counts,
        vec![
            ("create_deployment", 1),
            ("get_deployment", 2),
            ("create_deployment", 2),
            ("create_deployment", 2),
            ("create_deployment", 2),
            ("send_invoice", 3),
            ("get_invoice", 4),
        ]
    );
    assert_eq!(
        bench.upstream.effect_count(),
        1,
        "the lost answer committed once"
    );
    // The human was asked only after the static checks passed.
    assert_eq!(
        *bench.asked.lock().unwrap_or_else(PoisonError::into_inner),
        vec!["create_deployment", "create_deployment", "send_invoice"]
    );
    // The host got the executor's whole answer beside each result; the model's JSON is it.
    for ((_, _, published), (text, _)) in seen.iter().zip(&told) {
        let published = published.as_ref().expect("a published result");
        assert_eq!(
            serde_json::to_value(&published.0).expect("json"),
            result_json(text)
        );
    }
    // Every attempt is in the journal, and the chain verifies.
    assert!(
        bench
            .executor
            .journal()
            .verify()
            .await
            .expect("verify")
            .is_intact()
    );
    // The credential never reached the model, nor did the session's scope reach the tools.
    let history = serde_json::to_string(&requests[7].chat_history).expect("history");
    assert!(!history.contains(CANARY), "the secret reached the model");
    assert!(
        !history.contains("10.0.0.7"),
        "an undeclared field reached the model"
    );
}

#[tokio::test]
async fn the_model_sees_the_catalog_and_not_the_session() {
    let bench = bench().await;
    let model = MockCompletionModel::from_turns([MockTurn::text("nothing to do")]);
    let agent = AgentBuilder::new(model.clone())
        .dynamic_tools(RigTools::new(bench.executor.clone()).tools())
        .build();
    agent
        .prompt("hello")
        .tool_context(tool_context(session()).expect("context"))
        .await
        .expect("run");
    let requests = model.requests();
    let tools = &requests[0].tools;
    // One tool per action (rig lists them by name).
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "create_deployment",
            "get_deployment",
            "get_invoice",
            "send_invoice"
        ]
    );
    for tool in tools {
        let entry = bench
            .executor
            .catalog()
            .get(tool.name.as_str())
            .expect("a catalog action");
        assert_eq!(tool.description, entry.tool_description());
        assert_eq!(&tool.parameters, entry.input_schema());
    }
    let offered = serde_json::to_string(&requests[0]).expect("request");
    for private in ["chat-rig-1", "proj_42", "cus_7", CANARY] {
        assert!(!offered.contains(private), "{private} reached the model");
    }
}

#[tokio::test]
async fn a_run_without_a_session_is_refused_and_sends_nothing() {
    let bench = bench().await;
    let model = MockCompletionModel::from_turns([
        MockTurn::tool_call(
            "call_1",
            "get_deployment",
            json!({"project_id": "proj_42", "deployment_id": "dep_1"}),
        ),
        MockTurn::text("I could not look."),
    ]);
    let agent = AgentBuilder::new(model.clone())
        .dynamic_tools(RigTools::new(bench.executor.clone()).tools())
        .build();
    let answer = agent.prompt("look").max_turns(3).await.expect("run");
    assert_eq!(answer.output(), "I could not look.");
    let (text, is_error) = told(&model.requests()[1]);
    assert!(is_error);
    assert_eq!(
        text,
        "get_deployment: rejected (no_session). Nothing was sent: the application has not set \
         up a session for this tool. Do not retry; tell the user."
    );
    assert_eq!(bench.upstream.requests(), 0);
}

#[tokio::test]
async fn a_bound_session_is_used_when_the_run_carries_none_and_the_context_wins_over_it() {
    let bench = bench().await;
    let tools = RigTools::new(bench.executor.clone())
        .session(session())
        .tool("get_deployment")
        .expect("offered");
    let args = json!({"project_id": "proj_42", "deployment_id": "dep_1"});
    let output = tools.execute(args.clone()).await.expect("in scope");
    assert_eq!(
        output.as_json().map(|v| v["status"].clone()),
        Some(json!("completed"))
    );
    assert_eq!(bench.upstream.requests(), 1);
    // A run context naming another session takes precedence over the bound one.
    let mut context =
        tool_context(Session::new("other").allow("project", ["proj_1"])).expect("context");
    let error = tools
        .execute_with(&mut context, args)
        .await
        .expect_err("out of the context session's scope");
    assert_eq!(error.code(), Some("out_of_scope"));
    assert_eq!(bench.upstream.requests(), 1, "the refusal sent nothing");
    let published = context
        .result::<CallResult>()
        .expect("decodes")
        .expect("published");
    assert_eq!(published.0.code_str(), Some("out_of_scope"));
}

#[tokio::test]
async fn an_action_the_baseline_has_not_approved_is_not_offered() {
    let bench = bench().await;
    let catalog = bench.executor.catalog();
    let approved = Baseline::empty()
        .approve(
            catalog,
            &["get_deployment".to_owned(), "get_invoice".to_owned()],
        )
        .expect("approve");
    let guard = Arc::new(BaselineGuard::new(catalog, approved));
    let tools = RigTools::new(bench.executor.clone()).baseline(guard);
    let names: Vec<String> = tools.tools().iter().map(|t| t.name().to_string()).collect();
    assert_eq!(names, vec!["get_deployment", "get_invoice"]);
    assert!(tools.tool("send_invoice").is_none());
    assert!(tools.tool("get_invoice").is_some());
    assert!(!tools.offers("no_such_action"));
}
