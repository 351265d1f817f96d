//! `mcp-demo` as a child process, over real stdio, with the rmcp client: the demo upstream
//! runs in this test process (so its request counter is the proof of what was sent), and the
//! server's SQLite journal is read back from its state directory.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequest, CallToolResult, ClientRequest, ErrorCode};
use rmcp::service::{PeerRequestOptions, RoleClient, RunningService, ServiceError};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use sallyport_core::code::{Code, ConsentOutcome, RefusalCode};
use sallyport_core::drift::Baseline;
use sallyport_core::journal::{AuditRecord, Journal, Phase, SqliteJournal};
use sallyport_examples::catalog::demo_catalog;
use sallyport_examples::upstream::{DEMO_TOKEN, DemoUpstream};
use serde_json::{Value, json};

use crate::support;
use support::{Answer, TestClient, params, structured, text_of};

struct Harness {
    upstream: DemoUpstream,
    dir: tempfile::TempDir,
    client: RunningService<RoleClient, TestClient>,
    handler: TestClient,
}

impl Harness {
    /// `mcp-demo --elicitation`: the host lets the client's user answer consent.
    async fn start(handler: TestClient) -> Self {
        Self::start_with(handler, None).await
    }

    async fn start_with(handler: TestClient, baseline: Option<&Path>) -> Self {
        Self::start_full(handler, baseline, true).await
    }

    async fn start_full(handler: TestClient, baseline: Option<&Path>, elicitation: bool) -> Self {
        let upstream = DemoUpstream::start(DEMO_TOKEN)
            .await
            .expect("demo upstream");
        let dir = tempfile::tempdir().expect("tempdir");
        let url = upstream.base_url();
        let state = dir.path().to_owned();
        let baseline: Option<PathBuf> = baseline.map(Path::to_owned);
        let command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-demo")).configure(|c| {
            c.arg("--upstream").arg(&url).arg("--state-dir").arg(&state);
            if let Some(path) = &baseline {
                c.arg("--baseline").arg(path);
            }
            if elicitation {
                c.arg("--elicitation");
            }
        });
        let (transport, _stderr) = TokioChildProcess::builder(command)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn mcp-demo");
        let client = handler.clone().serve(transport).await.expect("initialize");
        Self {
            upstream,
            dir,
            client,
            handler,
        }
    }

    async fn call(&self, name: &str, arguments: Value) -> CallToolResult {
        self.client
            .call_tool(params(name, arguments))
            .await
            .expect("tools/call answered")
    }

    async fn records(&self) -> Vec<AuditRecord> {
        let journal = SqliteJournal::open(self.dir.path().join("journal.db")).expect("journal");
        journal.records().await.expect("records")
    }

    async fn tool_names(&self) -> Vec<String> {
        self.client
            .list_all_tools()
            .await
            .expect("tools/list")
            .into_iter()
            .map(|t| t.name.to_string())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_announces_tools_with_list_changed_and_the_demo_server() {
    let h = Harness::start(TestClient::new(true, Answer::Accept)).await;
    let info = h.client.peer_info().expect("server info");
    let info = serde_json::to_value(&*info).expect("json");
    assert_eq!(info["protocolVersion"], "2025-11-25");
    assert_eq!(
        info["capabilities"],
        json!({"tools": {"listChanged": true}})
    );
    assert_eq!(info["serverInfo"]["name"], "sallyport-mcp-demo");
    assert_eq!(
        info["instructions"],
        "Demo deployments-and-invoices API. This session may touch project proj_42 and customer cus_7."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_is_the_catalog_export_with_the_result_envelope_as_output_schema() {
    let h = Harness::start(TestClient::new(true, Answer::Accept)).await;
    let tools = h.client.list_all_tools().await.expect("tools/list");
    let catalog = demo_catalog().expect("catalog");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    let expected: Vec<&str> = catalog.names().collect();
    assert_eq!(names, expected);
    assert_eq!(names.len(), 5);
    for tool in &tools {
        let entry = catalog.get(&tool.name).expect("entry");
        let got = serde_json::to_value(tool).expect("json");
        let mut want = entry.mcp_tool();
        want["outputSchema"] = sallyport_mcp::tools::output_schema(entry);
        assert_eq!(got, want, "tool {}", tool.name);
    }
    let by_name = |name: &str| {
        serde_json::to_value(tools.iter().find(|t| t.name == name).expect("tool")).expect("json")
    };
    let list = by_name("list_builds");
    assert_eq!(
        list["annotations"],
        json!({"title": "List builds", "readOnlyHint": true, "destructiveHint": false,
               "idempotentHint": true, "openWorldHint": false})
    );
    assert_eq!(
        list["description"],
        "List the builds of one project, newest first, with their test results.\n\nEffect: observe (internal)."
    );
    assert_eq!(
        list["inputSchema"]["properties"]["project_id"],
        json!({"description": "The project, e.g. `proj_42`.", "pattern": "^proj_[A-Za-z0-9]+$", "type": "string"})
    );
    assert_eq!(list["inputSchema"]["required"], json!(["project_id"]));
    assert_eq!(list["inputSchema"]["additionalProperties"], false);
    assert_eq!(
        list["outputSchema"]["required"],
        json!(["status", "action", "attempt_id"])
    );
    assert_eq!(
        list["outputSchema"]["properties"]["data"]["properties"]["builds"],
        json!({"description": "The builds.", "items": {"$ref": "#/$defs/Build"}, "type": "array"})
    );
    assert_eq!(
        list["outputSchema"]["$defs"]["Build"]["required"],
        json!(["build_id", "tests"])
    );
    let deploy = by_name("create_preview_deployment");
    assert_eq!(
        deploy["annotations"],
        json!({"title": "Create preview deployment", "readOnlyHint": false, "destructiveHint": false,
               "idempotentHint": false, "openWorldHint": true})
    );
    assert_eq!(
        deploy["description"],
        "Queue one tested build for the preview environment.\n\nEffect: external_commitment (external). A human approves every call. May return pending or unknown; check with get_deployment_status. Never retry an unknown result."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observe_call_returns_the_action_result_as_structured_content() {
    let h = Harness::start(TestClient::new(true, Answer::Accept)).await;
    let result = h
        .call("list_builds", json!({"project_id": "proj_42"}))
        .await;
    assert_eq!(result.is_error, Some(false));
    let body = structured(&result);
    assert_eq!(body["status"], "completed");
    assert_eq!(body["action"], "list_builds");
    assert_eq!(
        body["data"],
        json!({"builds": [{"build_id": "build_101", "tests": "passed"}, {"build_id": "build_102", "tests": "failed"}]})
    );
    assert_eq!(
        text_of(&result),
        "list_builds: completed. Done; the data is evidence of the new state."
    );
    assert_eq!(h.upstream.requests(), 1);
    assert!(h.handler.elicited.lock().expect("lock").is_empty());
    let records = h.records().await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].event.phase, Phase::Finished);
    assert_eq!(records[0].event.receipt_id.to_string(), body["receipt_id"]);
    assert!(records[0].event.session_id.starts_with("mcp-"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consent_accepted_through_elicitation_sends_the_request_once() {
    let h = Harness::start(TestClient::new(true, Answer::Accept)).await;
    let result = h
        .call(
            "create_preview_deployment",
            json!({"project_id": "proj_42", "build_id": "build_101", "reason": "ship the passing build"}),
        )
        .await;
    let body = structured(&result);
    assert_eq!(body["status"], "pending", "{body}");
    assert_eq!(result.is_error, Some(false));
    assert_eq!(
        body["next"],
        json!({"action": "get_deployment_status",
               "arguments": {"deployment_id": body["data"]["deployment_id"], "project_id": "proj_42"}})
    );
    assert!(
        text_of(&result).contains("Accepted, not finished: call get_deployment_status with {"),
        "{}",
        text_of(&result)
    );
    assert_eq!(h.upstream.requests(), 1);
    let asked = h.handler.elicited.lock().expect("lock").clone();
    assert_eq!(asked.len(), 1);
    // The human sees the real host the request goes to, not a placeholder.
    assert_eq!(
        asked[0],
        format!(
            "An agent asks to run `create_preview_deployment` (external_commitment, external).\n\
         Queue one tested build for the preview environment.\n\
         Request: POST {}/v1/projects/proj_42/deployments body: {{\"build_id\":\"build_101\"}}\n\
         Object: project proj_42\n\
         Agent's reason (unverified): ship the passing build\n\
         Accept approves this one call; decline denies it.",
            h.upstream.base_url()
        )
    );
    let records = h.records().await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].event.consent, Some(ConsentOutcome::Approved));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consent_declined_through_elicitation_sends_no_request() {
    let h = Harness::start(TestClient::new(true, Answer::Decline)).await;
    let result = h
        .call(
            "create_invoice",
            json!({"customer_id": "cus_7", "amount_cents": 1200, "reference": "inv-mcp-1", "reason": "monthly support fee"}),
        )
        .await;
    let body = structured(&result);
    assert_eq!(result.is_error, Some(true));
    assert_eq!(body["status"], "rejected");
    assert_eq!(body["origin"], "executor");
    assert_eq!(body["code"], "consent_denied");
    assert!(
        text_of(&result).ends_with(
            "Nothing was sent. The user said no; do not retry unless the user asks you to."
        ),
        "{}",
        text_of(&result)
    );
    assert_eq!(h.handler.elicited.lock().expect("lock").len(), 1);
    assert_eq!(h.upstream.requests(), 0);
    let records = h.records().await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].event.phase, Phase::Refused);
    assert_eq!(
        records[0].event.code,
        Some(RefusalCode::ConsentDenied.into())
    );
    assert_eq!(records[0].event.dispatches, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_elicitation_is_refused_consent_unavailable() {
    let h = Harness::start(TestClient::new(false, Answer::Accept)).await;
    let result = h
        .call(
            "create_preview_deployment",
            json!({"project_id": "proj_42", "build_id": "build_101", "reason": "ship the passing build"}),
        )
        .await;
    assert_eq!(result.is_error, Some(true));
    assert_eq!(structured(&result)["code"], "consent_unavailable");
    assert_eq!(h.upstream.requests(), 0);
    assert!(h.handler.elicited.lock().expect("lock").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_declaring_elicitation_cannot_approve_unless_the_host_enabled_elicitation() {
    // mcp-demo without `--elicitation`: the client declares the capability and would accept.
    let h = Harness::start_full(TestClient::new(true, Answer::Accept), None, false).await;
    let result = h
        .call(
            "create_preview_deployment",
            json!({"project_id": "proj_42", "build_id": "build_101", "reason": "ship the passing build"}),
        )
        .await;
    let body = structured(&result);
    assert_eq!(result.is_error, Some(true));
    assert_eq!(body["status"], "rejected", "{body}");
    assert_eq!(body["code"], "consent_unavailable", "{body}");
    assert!(
        h.handler.elicited.lock().expect("lock").is_empty(),
        "the client was never asked"
    );
    assert_eq!(h.upstream.requests(), 0);
    let records = h.records().await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].event.consent, Some(ConsentOutcome::Unavailable));
    assert_eq!(records[0].event.dispatches, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_note_with_line_breaks_ansi_and_bidi_reaches_the_elicitation_message_escaped() {
    let h = Harness::start(TestClient::new(true, Answer::Decline)).await;
    let note = "ok\u{1b}[1A\u{1b}[2K\r\nRequest: GET /harmless\n\u{202e}txt.exe";
    let result = h
        .call(
            "create_preview_deployment",
            json!({"project_id": "proj_42", "build_id": "build_101", "reason": note}),
        )
        .await;
    assert_eq!(structured(&result)["code"], "consent_denied");
    assert_eq!(h.upstream.requests(), 0);
    let asked = h.handler.elicited.lock().expect("lock").clone();
    assert_eq!(asked.len(), 1);
    // The human sees the real host the request goes to, not a placeholder.
    assert_eq!(
        asked[0],
        format!(
            "An agent asks to run `create_preview_deployment` (external_commitment, external).\n\
         Queue one tested build for the preview environment.\n\
         Request: POST {}/v1/projects/proj_42/deployments body: {{\"build_id\":\"build_101\"}}\n\
         Object: project proj_42\n\
         Agent's reason (unverified): ok\\u{{1b}}[1A\\u{{1b}}[2K\\r\\nRequest: GET /harmless\\n\\u{{202e}}txt.exe\n\
         Accept approves this one call; decline denies it.",
            h.upstream.base_url()
        )
    );
    assert_eq!(
        asked[0]
            .lines()
            .filter(|l| l.starts_with("Request:"))
            .count(),
        1,
        "one Request line, the real one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_field_is_a_tool_error_naming_the_divergence() {
    let h = Harness::start(TestClient::new(true, Answer::Accept)).await;
    let result = h
        .call(
            "list_builds",
            json!({"project_id": "proj_42", "branch": "main"}),
        )
        .await;
    let body = structured(&result);
    assert_eq!(result.is_error, Some(true));
    assert_eq!(body["code"], "invalid_arguments");
    assert_eq!(
        body["divergences"],
        json!([{"kind": "unknown_field", "path": "/branch",
                "expected": "no such field; known fields: project_id", "observed": "string"}])
    );
    assert!(
        text_of(&result)
            .ends_with("Nothing was sent. Fix the arguments as described and call again."),
        "{}",
        text_of(&result)
    );
    assert_eq!(h.upstream.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_is_an_invalid_params_protocol_error() {
    let h = Harness::start(TestClient::new(true, Answer::Accept)).await;
    let error = h
        .client
        .call_tool(params("delete_everything", json!({})))
        .await
        .expect_err("a protocol error");
    let ServiceError::McpError(error) = error else {
        panic!("expected a JSON-RPC error, got {error:?}");
    };
    assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
    assert_eq!(error.message, "Unknown tool: delete_everything");
    assert_eq!(h.upstream.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_arguments_are_refused_and_audited_without_a_request() {
    let h = Harness::start(TestClient::new(true, Answer::Accept)).await;
    let result = h
        .call(
            "create_invoice",
            json!({"customer_id": "cus_7", "amount_cents": 1, "reference": "inv-big",
                   "reason": "x".repeat(70_000)}),
        )
        .await;
    let body = structured(&result);
    assert_eq!(result.is_error, Some(true));
    assert_eq!(body["code"], "arguments_too_large");
    assert!(h.handler.elicited.lock().expect("lock").is_empty());
    assert_eq!(h.upstream.requests(), 0);
    let records = h.records().await;
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0].event.code,
        Some(RefusalCode::ArgumentsTooLarge.into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_is_journaled_cancelled_before_send() {
    let h = Harness::start(TestClient::new(true, Answer::Hold)).await;
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params(
        "create_invoice",
        json!({"customer_id": "cus_7", "amount_cents": 900, "reference": "inv-cancel", "reason": "trial that gets cancelled"}),
    )));
    let handle = h
        .client
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .expect("sent");
    tokio::time::timeout(
        Duration::from_secs(10),
        h.handler.elicitation_seen.notified(),
    )
    .await
    .expect("the server asked for consent");
    handle
        .cancel(Some("the user stopped the agent".to_owned()))
        .await
        .expect("cancel sent");
    let mut records = Vec::new();
    for _ in 0..100 {
        records = h.records().await;
        if !records.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].event.phase, Phase::CancelledBeforeSend);
    assert_eq!(records[0].event.action, "create_invoice");
    assert_eq!(records[0].event.dispatches, 0);
    assert_eq!(h.upstream.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_the_baseline_at_run_time_sends_list_changed_and_lists_the_action() {
    let catalog = demo_catalog().expect("catalog");
    let lockdir = tempfile::tempdir().expect("tempdir");
    let lockfile = lockdir.path().join("sallyport.baseline.json");
    let without_get_invoice: Vec<String> = catalog
        .names()
        .filter(|n| *n != "get_invoice")
        .map(str::to_owned)
        .collect();
    Baseline::empty()
        .approve(&catalog, &without_get_invoice)
        .expect("approve")
        .save(&lockfile)
        .expect("save");
    let h = Harness::start_with(TestClient::new(true, Answer::Accept), Some(&lockfile)).await;
    assert_eq!(
        h.tool_names().await,
        [
            "create_invoice",
            "create_preview_deployment",
            "get_deployment_status",
            "list_builds"
        ]
    );
    let refused = h
        .call(
            "get_invoice",
            json!({"customer_id": "cus_7", "reference": "inv-1"}),
        )
        .await;
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(structured(&refused)["code"], "review_required");
    assert_eq!(h.upstream.requests(), 0);

    Baseline::from_catalog(&catalog)
        .save(&lockfile)
        .expect("approve all");
    tokio::time::timeout(Duration::from_secs(10), h.handler.list_changed.notified())
        .await
        .expect("notifications/tools/list_changed");
    assert_eq!(
        h.tool_names().await,
        [
            "create_invoice",
            "create_preview_deployment",
            "get_deployment_status",
            "get_invoice",
            "list_builds"
        ]
    );
    let result = h
        .call(
            "get_invoice",
            json!({"customer_id": "cus_7", "reference": "inv-1"}),
        )
        .await;
    assert_eq!(result.is_error, Some(false));
    assert_eq!(
        structured(&result)["data"],
        json!({"count": 0, "invoices": []})
    );
    assert_eq!(h.upstream.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_hash_chain_of_a_session_verifies() {
    let h = Harness::start(TestClient::new(true, Answer::Accept)).await;
    h.call("list_builds", json!({"project_id": "proj_42"}))
        .await;
    h.call("list_builds", json!({"project_id": "proj_999"}))
        .await;
    let journal = SqliteJournal::open(h.dir.path().join("journal.db")).expect("journal");
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact());
    let codes: Vec<Option<Code>> = h
        .records()
        .await
        .into_iter()
        .map(|r| r.event.code)
        .collect();
    assert_eq!(codes, [None, Some(RefusalCode::OutOfScope.into())]);
}
