//! The official Python MCP SDK (`mcp`, pinned in `tests/mcp-py/requirements.txt`) as the
//! client: the test spawns `tests/mcp-py/client.py` and serves sallyport's MCP server over the
//! script's stdin and stdout, with the real HTTP channel sending to an axum upstream on
//! 127.0.0.1:0 and a real SQLite journal holding the approvals.
//!
//! * A 2026-07-28 client (it finds the revision through `server/discover`) that declares the
//!   Tasks extension gets a task for a call parked for approval: `working` while a human has
//!   not decided, then `completed` with what `check_approval` answers: the executed call's
//!   result once approved (one request upstream), the `rejected` result once denied or expired
//!   (none), an expiry never reported as a denial.
//! * A 2025-11-25 client (`initialize`) still gets `pending` and polls `check_approval`.
//! * The same over Streamable HTTP (the SDK's HTTP transport, the server's bearer token):
//!   there every 2026-07-28 request is stateless, a new handler each, so these prove that a
//!   task started by one request is found and cancelled by later ones, and that
//!   `check_approval` finds a call parked by an earlier request.
//!
//! `tests/run.sh` creates the script's virtualenv (`tests/mcp-py/.venv`); set
//! `SALLYPORT_MCP_PYTHON` to use another interpreter that has the pinned packages.

use std::future::IntoFuture;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sallyport_core::approval::{ApprovalId, ApprovalState, ConsentMode, Decider, Verdict};
use sallyport_core::journal::SqliteJournal;
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_http::HttpChannel;
use sallyport_mcp::{APPROVAL_META, BearerToken, ConsentRouter, McpServer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Restart one worker of a project.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "restart_worker", effect = reversible_change, consent = per_call)]
#[http(post = "/v1/projects/{project_id}/restarts", result = Restarted)]
#[allow(dead_code)]
struct RestartWorker {
    #[scope(project)]
    project_id: String,
    worker: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Restarted {
    id: String,
    worker: String,
}

/// What the test does when the client reports the parked call.
#[derive(Clone, Copy)]
enum Decision {
    /// Approves it through the executor's approval store (the task carries it out).
    Approve,
    /// Denies it through the executor.
    Deny,
    /// Lets the approval expire.
    Nothing,
}

/// How the Python client reaches the server.
#[derive(Clone, Copy, Debug)]
enum Over {
    /// The script's stdin and stdout.
    Stdio,
    /// Streamable HTTP on 127.0.0.1:0, with a bearer token.
    Http,
}

struct Rig {
    executor: Executor,
    server: McpServer,
    over: Over,
    hits: Arc<AtomicUsize>,
    _dir: tempfile::TempDir,
}

impl Rig {
    async fn new(expiry: Duration) -> Self {
        Self::over(expiry, Over::Stdio).await
    }

    async fn over(expiry: Duration, over: Over) -> Self {
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        let app = axum::Router::new().route(
            "/v1/projects/{project}/restarts",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let counted = counted.clone();
                async move {
                    let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                    axum::Json(json!({"id": format!("rst_{n}"), "worker": body["worker"]}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(axum::serve(listener, app).into_future());

        let dir = tempfile::tempdir().expect("tempdir");
        let catalog = Catalog::builder()
            .action::<RestartWorker>()
            .build()
            .expect("catalog");
        let router = ConsentRouter::new();
        let executor = Executor::builder(catalog)
            .journal(SqliteJournal::open(dir.path().join("journal.db")).expect("journal"))
            .channel(
                HttpChannel::builder()
                    .base_url(&url)
                    .build()
                    .expect("channel"),
            )
            .consent_arc(router.clone())
            .consent_mode(ConsentMode::Deferred)
            .approval_expiry(expiry)
            .build()
            .expect("executor");
        let server = McpServer::new(executor.clone(), router)
            .session(|id| Session::new(id.as_str()).allow("project", ["proj_1"]));
        Self {
            executor,
            server,
            over,
            hits,
            _dir: dir,
        }
    }

    fn sent(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// Runs the Python client of `era` calling `restart_worker`, decides the parked call as
    /// `decision` when the client reports it, and returns the client's events.
    async fn run(&self, era: &str, decision: Decision) -> Vec<Value> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp-py");
        let python = std::env::var_os("SALLYPORT_MCP_PYTHON")
            .map_or_else(|| root.join(".venv/bin/python"), PathBuf::from);
        assert!(
            python.exists(),
            "{} is missing: run tests/run.sh (it creates tests/mcp-py/.venv from tests/mcp-py/requirements.txt) or set SALLYPORT_MCP_PYTHON",
            python.display()
        );
        let mut command = tokio::process::Command::new(&python);
        command
            .arg(root.join("client.py"))
            .arg(era)
            .arg("restart_worker")
            .arg(json!({"project_id": "proj_1", "worker": "w1"}).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let (mut child, serving) = match self.over {
            Over::Stdio => {
                let mut child = command
                    .stdin(Stdio::piped())
                    .spawn()
                    .expect("spawn the Python client");
                let to_client = child.stdin.take().expect("stdin");
                let from_client = child.stdout.take().expect("stdout");
                let server = self.server.clone();
                let serving =
                    tokio::spawn(async move { server.serve((from_client, to_client)).await });
                (child, serving)
            }
            Over::Http => {
                let listener = sallyport_mcp::bind_http("127.0.0.1:0".parse().expect("addr"))
                    .await
                    .expect("bind");
                let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
                let token = BearerToken::generate().expect("token");
                let server = self.server.clone().http_token(token.clone());
                let serving = tokio::spawn(async move { server.serve_http_on(listener).await });
                let child = command
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .env("SALLYPORT_MCP_URL", url)
                    .env("SALLYPORT_MCP_TOKEN", token.expose_secret())
                    .spawn()
                    .expect("spawn the Python client");
                (child, serving)
            }
        };
        let abort = serving.abort_handle();

        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let mut events = Vec::new();
        let mut other = Vec::new();
        let read = async {
            while let Some(line) = lines.next_line().await.expect("stderr") {
                let Some(event) = line.strip_prefix("EVENT ") else {
                    other.push(line);
                    continue;
                };
                let event: Value = serde_json::from_str(event).expect("event JSON");
                if let Some(id) = parked_approval(&event) {
                    assert_eq!(self.sent(), 0, "nothing is sent while the call waits");
                    self.decide(&id, decision).await;
                }
                let last = event["event"] == "done" || event["event"] == "error";
                events.push(event);
                if last && matches!(self.over, Over::Stdio) {
                    // Closing the server closes the client's stdin, which ends the script.
                    abort.abort();
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(90), read)
            .await
            .expect("the client finished within 90 s");
        let status = child.wait().await.expect("client exit");
        abort.abort();
        assert!(
            status.success(),
            "the Python client failed ({status}): {events:#?}\n{}",
            other.join("\n")
        );
        assert_eq!(events.last().map(|e| &e["event"]), Some(&json!("done")));
        events
    }

    async fn decide(&self, id: &ApprovalId, decision: Decision) {
        let store = self.executor.approval_store().expect("an approval store");
        match decision {
            Decision::Approve => {
                sallyport_core::approval::decide(
                    store.as_ref(),
                    id,
                    Verdict::Approve,
                    &Decider::new("alice", "test"),
                    None,
                )
                .await
                .expect("approve");
            }
            Decision::Deny => {
                self.executor
                    .decide(
                        id,
                        Verdict::Deny,
                        &Decider::new("bob", "test"),
                        Some("not now"),
                    )
                    .await
                    .expect("deny");
            }
            Decision::Nothing => {}
        }
    }

    async fn state(&self, id: &ApprovalId) -> ApprovalState {
        self.executor
            .approval_store()
            .expect("an approval store")
            .approval(id)
            .await
            .expect("read")
            .expect("stored")
            .state
    }

    /// What `check_approval` answers now for approval `id`, in the session that parked it.
    async fn check(&self, id: &ApprovalId) -> Value {
        let approval = self
            .executor
            .approval_store()
            .expect("an approval store")
            .approval(id)
            .await
            .expect("read")
            .expect("stored");
        let result = self
            .executor
            .call_json(
                "check_approval",
                &json!({"approval_id": id}).to_string(),
                &approval.session,
            )
            .await;
        serde_json::to_value(result).expect("json")
    }
}

/// The approval id of a `task` (modern) or `parked` (legacy) event.
fn parked_approval(event: &Value) -> Option<ApprovalId> {
    let id = match event["event"].as_str()? {
        "task" => event["task"]["_meta"][APPROVAL_META].as_str()?,
        "parked" => event["result"]["structuredContent"]["approval_id"].as_str()?,
        _ => return None,
    };
    Some(ApprovalId::from_stored(id))
}

fn event<'a>(events: &'a [Value], name: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["event"] == name)
        .unwrap_or_else(|| panic!("no {name} event in {events:#?}"))
}

/// The fields of a result that do not name the call that produced it.
fn outcome(result: &Value) -> Value {
    let mut result = result.clone();
    if let Value::Object(map) = &mut result {
        map.remove("attempt_id");
        map.remove("receipt_id");
    }
    result
}

/// Checks the modern client's connection and its task's seed state; returns the approval.
fn modern_task(events: &[Value]) -> ApprovalId {
    let connected = event(events, "connected");
    assert_eq!(connected["protocol_version"], "2026-07-28", "{connected}");
    assert_eq!(connected["discovered"], true, "found by server/discover");
    let versions = connected["supported_versions"]
        .as_array()
        .expect("versions");
    assert!(versions.contains(&json!("2026-07-28")) && versions.contains(&json!("2025-11-25")));
    assert_eq!(
        connected["server_extensions"],
        json!(["io.modelcontextprotocol/tasks"])
    );
    let mut names: Vec<&str> = event(events, "tools")["names"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["check_approval", "restart_worker"]);
    let task = &event(events, "task")["task"];
    assert_eq!(task["resultType"], "task", "{task}");
    assert_eq!(task["status"], "working", "{task}");
    let id = task["_meta"][APPROVAL_META].as_str().expect("approval id");
    let message = task["statusMessage"].as_str().expect("statusMessage");
    assert!(
        message.starts_with(&format!(
            "waiting for a human to approve or deny this call (approval {id}) until "
        )) && message.ends_with("; nothing was sent yet"),
        "{message}"
    );
    let poll = task["pollIntervalMs"].as_u64().expect("pollIntervalMs");
    assert!(poll <= 1000, "{poll}");
    ApprovalId::from_stored(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_with_tasks_gets_a_task_that_completes_with_the_executed_result_once_approved()
 {
    approved_task(Over::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_streamable_http_a_2026_client_with_tasks_gets_a_task_that_completes_once_approved() {
    approved_task(Over::Http).await;
}

async fn approved_task(over: Over) {
    let rig = Rig::over(Duration::from_secs(600), over).await;
    let events = rig.run("modern", Decision::Approve).await;
    let id = modern_task(&events);

    let last = event(&events, "final");
    assert_eq!(last["statuses"], json!(["working", "completed"]), "{last}");
    let result = &last["task"]["result"];
    assert_eq!(result["isError"], false, "{result}");
    let structured = &result["structuredContent"];
    assert_eq!(structured["status"], "completed", "{structured}");
    assert_eq!(structured["data"]["state"], "finished");
    assert_eq!(structured["data"]["decided_by"], "alice");
    assert_eq!(structured["data"]["result"]["status"], "completed");
    assert_eq!(
        structured["data"]["result"]["data"],
        json!({"id": "rst_1", "worker": "w1"})
    );
    // Client.call_tool resolved the task to the same tool result.
    assert_eq!(&event(&events, "result")["result"], result);
    assert_eq!(rig.sent(), 1, "exactly one request upstream");
    assert_eq!(rig.state(&id).await, ApprovalState::Finished);
    // The task's result is what check_approval answers.
    assert_eq!(outcome(structured), outcome(&rig.check(&id).await));
    assert_eq!(rig.sent(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_with_tasks_gets_the_rejected_result_when_the_call_is_denied_and_nothing_is_sent()
 {
    let rig = Rig::new(Duration::from_secs(600)).await;
    let events = rig.run("modern", Decision::Deny).await;
    let id = modern_task(&events);

    let last = event(&events, "final");
    assert_eq!(last["statuses"], json!(["working", "completed"]), "{last}");
    let result = &last["task"]["result"];
    assert_eq!(result["isError"], true, "{result}");
    let structured = &result["structuredContent"];
    assert_eq!(structured["status"], "rejected", "{structured}");
    assert_eq!(structured["code"], "consent_denied");
    assert_eq!(
        structured["reason"],
        "a human denied this call: not now; nothing was sent"
    );
    assert_eq!(structured["data"]["state"], "denied");
    assert_eq!(rig.sent(), 0, "nothing upstream");
    assert_eq!(rig.state(&id).await, ApprovalState::Denied);
    assert_eq!(outcome(structured), outcome(&rig.check(&id).await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_with_tasks_is_told_an_expired_approval_expired_never_that_it_was_denied() {
    let rig = Rig::new(Duration::from_secs(2)).await;
    let events = rig.run("modern", Decision::Nothing).await;
    let id = modern_task(&events);

    let last = event(&events, "final");
    assert_eq!(last["statuses"], json!(["working", "completed"]), "{last}");
    let structured = &last["task"]["result"]["structuredContent"];
    assert_eq!(structured["status"], "rejected", "{structured}");
    assert_eq!(structured["code"], "approval_expired");
    assert_eq!(
        structured["reason"],
        "no one decided before the approval expired; nothing was sent"
    );
    assert_eq!(structured["data"]["state"], "expired");
    assert_eq!(rig.sent(), 0);
    assert_eq!(rig.state(&id).await, ApprovalState::Expired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_11_25_client_still_gets_pending_and_polls_check_approval() {
    legacy_pending(Over::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_streamable_http_a_2025_11_25_client_still_gets_pending_and_polls_check_approval() {
    legacy_pending(Over::Http).await;
}

async fn legacy_pending(over: Over) {
    let rig = Rig::over(Duration::from_secs(600), over).await;
    let events = rig.run("legacy", Decision::Approve).await;

    let connected = event(&events, "connected");
    assert_eq!(connected["protocol_version"], "2025-11-25", "{connected}");
    assert_eq!(
        connected["server_extensions"],
        json!([]),
        "no tasks at initialize"
    );
    let parked = &event(&events, "parked")["result"];
    assert_eq!(parked["isError"], false, "{parked}");
    let structured = &parked["structuredContent"];
    assert_eq!(structured["status"], "pending", "{structured}");
    assert_eq!(structured["code"], "awaiting_approval");
    assert_eq!(structured["next"]["action"], "check_approval");

    let done = &event(&events, "result")["result"]["structuredContent"];
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["data"]["result"]["status"], "completed");
    assert_eq!(rig.sent(), 1, "exactly one request upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_task_of_a_waiting_call_withdraws_it_so_no_approver_can_send_it_later() {
    cancelled_task(Over::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_streamable_http_cancelling_the_task_of_a_waiting_call_withdraws_it() {
    cancelled_task(Over::Http).await;
}

async fn cancelled_task(over: Over) {
    let rig = Rig::over(Duration::from_secs(600), over).await;
    let events = rig.run("modern-cancel", Decision::Nothing).await;
    let id = modern_task(&events);
    event(&events, "cancel_sent");

    let last = event(&events, "final");
    assert_eq!(last["statuses"], json!(["working", "cancelled"]), "{last}");
    let approval = rig
        .executor
        .approval_store()
        .expect("an approval store")
        .approval(&id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(approval.state, ApprovalState::Denied);
    let decision = approval.decision.expect("decided");
    assert_eq!(decision.decider.channel, "mcp_task_cancel");
    assert_eq!(decision.decider.by, approval.session.id().as_str());
    // A human's approval now changes nothing, and nothing was sent.
    rig.decide(&id, Decision::Approve).await;
    assert_eq!(rig.state(&id).await, ApprovalState::Denied);
    let check = rig.check(&id).await;
    assert_eq!(check["code"], "consent_denied", "{check}");
    assert_eq!(
        check["reason"],
        "a human denied this call: the agent cancelled the MCP task; nothing was sent"
    );
    assert_eq!(rig.sent(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_without_the_tasks_extension_gets_pending_and_polls_check_approval() {
    plain_pending(Over::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_streamable_http_a_2026_client_without_tasks_gets_pending_and_check_approval_finds_it()
{
    plain_pending(Over::Http).await;
}

async fn plain_pending(over: Over) {
    let rig = Rig::over(Duration::from_secs(600), over).await;
    let events = rig.run("modern-plain", Decision::Approve).await;

    let connected = event(&events, "connected");
    assert_eq!(connected["protocol_version"], "2026-07-28", "{connected}");
    let structured = &event(&events, "parked")["result"]["structuredContent"];
    assert_eq!(structured["status"], "pending", "{structured}");
    assert_eq!(structured["code"], "awaiting_approval");
    assert_eq!(structured["next"]["action"], "check_approval");
    let done = &event(&events, "result")["result"]["structuredContent"];
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["data"]["result"]["data"],
        json!({"id": "rst_1", "worker": "w1"})
    );
    assert_eq!(rig.sent(), 1, "exactly one request upstream");
}
