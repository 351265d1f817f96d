//! `mcp-demo --http` as a child process, serving Streamable HTTP on a loopback port, driven
//! by the rmcp Streamable HTTP client: the same tools, calls and elicitation as over stdio,
//! one sallyport session per MCP session, no way to bind anything but loopback, and nothing
//! served without the bearer token the server printed once to stderr.

use std::process::Stdio;

use rmcp::ServiceExt;
use rmcp::model::CallToolResult;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use sallyport_core::code::ConsentOutcome;
use sallyport_core::journal::{Journal, SqliteJournal};
use sallyport_examples::catalog::demo_catalog;
use sallyport_examples::upstream::{DEMO_TOKEN, DemoUpstream};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::support;
use support::{Answer, TestClient, params, structured};

struct Server {
    upstream: DemoUpstream,
    dir: tempfile::TempDir,
    url: String,
    token: String,
    /// Every stderr line that carried the token.
    token_lines: usize,
    _child: Child,
}

const TOKEN_MARKER: &str = "sallyport-mcp: bearer token for ";

impl Server {
    /// `mcp-demo --http 127.0.0.1:0 --elicitation`.
    async fn start() -> Self {
        Self::start_with(&["--elicitation"]).await
    }

    async fn start_with(extra: &[&str]) -> Self {
        let upstream = DemoUpstream::start(DEMO_TOKEN)
            .await
            .expect("demo upstream");
        let dir = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-demo"))
            .args(["--http", "127.0.0.1:0", "--upstream"])
            .arg(upstream.base_url())
            .arg("--state-dir")
            .arg(dir.path())
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn mcp-demo --http");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let marker = "mcp-demo: serving MCP over Streamable HTTP at ";
        let (url, token, token_lines) =
            tokio::time::timeout(std::time::Duration::from_secs(30), async {
                let mut url = None;
                let mut token = None;
                let mut token_lines = 0;
                while let Some(line) = lines.next_line().await.expect("read stderr") {
                    if let Some(rest) = line.strip_prefix(marker) {
                        url = Some(rest.to_owned());
                    }
                    if let Some(rest) = line.strip_prefix(TOKEN_MARKER) {
                        token_lines += 1;
                        let (_, value) = rest.rsplit_once(": ").expect("URL: TOKEN");
                        token = Some(value.to_owned());
                    }
                    if let (Some(url), Some(token)) = (&url, &token) {
                        return (url.clone(), token.clone(), token_lines);
                    }
                }
                panic!("mcp-demo exited without serving");
            })
            .await
            .expect("mcp-demo announced its address and token");
        let mut token_lines = token_lines;
        // Keep draining stderr so the child never blocks on a full pipe; count any later line
        // that repeats the token.
        let (count_tx, mut count_rx) = tokio::sync::mpsc::unbounded_channel();
        let needle = token.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains(&needle) {
                    let _ = count_tx.send(());
                }
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        while count_rx.try_recv().is_ok() {
            token_lines += 1;
        }
        Self {
            upstream,
            dir,
            url,
            token,
            token_lines,
            _child: child,
        }
    }

    async fn connect(&self, client: TestClient) -> RunningService<RoleClient, TestClient> {
        // The workspace builds reqwest with rustls but no default crypto provider.
        install_ring_provider();
        let config = StreamableHttpClientTransportConfig::with_uri(self.url.clone())
            .auth_header(self.token.clone());
        let transport = StreamableHttpClientTransport::from_config(config);
        client.serve(transport).await.expect("initialize over HTTP")
    }

    async fn sessions_and_consents(&self) -> Vec<(String, Option<ConsentOutcome>)> {
        let journal = SqliteJournal::open(self.dir.path().join("journal.db")).expect("journal");
        journal
            .records()
            .await
            .expect("records")
            .into_iter()
            .map(|r| (r.event.session_id, r.event.consent))
            .collect()
    }
}

async fn call(client: &RunningService<RoleClient, TestClient>, name: &str, args: Value) -> Value {
    let result: CallToolResult = client
        .call_tool(params(name, args))
        .await
        .expect("tools/call answered");
    let body = structured(&result);
    assert_eq!(
        result.is_error,
        Some(matches!(
            body["status"].as_str(),
            Some("rejected" | "unknown")
        )),
        "{body}"
    );
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_and_an_observe_call_work_over_streamable_http() {
    let server = Server::start().await;
    assert!(
        server.url.starts_with("http://127.0.0.1:"),
        "{}",
        server.url
    );
    let client = server.connect(TestClient::new(true, Answer::Accept)).await;

    let info = client.peer_info().expect("initialize result");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("sallyport-mcp-demo")
    );
    let listed: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    let catalog: Vec<String> = demo_catalog()
        .expect("catalog")
        .entries()
        .map(|e| e.spec().name.to_string())
        .collect();
    assert_eq!(listed, catalog);

    let body = call(&client, "list_builds", json!({"project_id": "proj_42"})).await;
    assert_eq!(body["status"], "completed", "{body}");
    assert_eq!(body["data"]["builds"][0]["build_id"], "build_101");
    assert_eq!(server.upstream.requests(), 1);

    let refused = call(&client, "list_builds", json!({"project_id": "proj_9"})).await;
    assert_eq!(refused["code"], "out_of_scope", "{refused}");
    assert_eq!(server.upstream.requests(), 1);
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_reaches_http_clients_and_each_mcp_session_is_its_own_session() {
    let server = Server::start().await;
    let yes = TestClient::new(true, Answer::Accept);
    let no = TestClient::new(true, Answer::Decline);
    let accepting = server.connect(yes.clone()).await;
    let declining = server.connect(no.clone()).await;
    let invoice = |reference: &str| {
        json!({"customer_id": "cus_7", "amount_cents": 1200, "reference": reference,
               "reason": "monthly support fee"})
    };

    let created = call(&accepting, "create_invoice", invoice("inv-http-1")).await;
    assert_eq!(created["status"], "completed", "{created}");
    assert_eq!(server.upstream.requests(), 1);
    let denied = call(&declining, "create_invoice", invoice("inv-http-2")).await;
    assert_eq!(denied["code"], "consent_denied", "{denied}");
    assert_eq!(
        server.upstream.requests(),
        1,
        "a declined call sends nothing"
    );

    assert_eq!(yes.elicited.lock().expect("lock").len(), 1);
    let asked = no.elicited.lock().expect("lock").clone();
    assert_eq!(asked.len(), 1);
    assert!(
        asked[0].starts_with("An agent asks to run `create_invoice`"),
        "{}",
        asked[0]
    );

    let records = server.sessions_and_consents().await;
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].1, Some(ConsentOutcome::Approved));
    assert_eq!(records[1].1, Some(ConsentOutcome::Denied));
    assert!(records.iter().all(|(s, _)| s.starts_with("mcp-")));
    assert_ne!(
        records[0].0, records[1].0,
        "two MCP sessions, two sallyport sessions"
    );
    accepting.cancel().await.expect("close");
    declining.cancel().await.expect("close");
}

/// A raw HTTP/1.1 `initialize` POST to `url` over a plain TCP connection, with the
/// `Authorization` header as given; the status code and the whole answer.
async fn raw_initialize(url: &str, authorization: Option<&str>) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/mcp"))
        .expect("http://HOST:PORT/mcp");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string();
    let auth = authorization.map_or(String::new(), |v| format!("Authorization: {v}\r\n"));
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send request");
    let mut answer = Vec::new();
    // An SSE answer stays open; the status line and first event are enough.
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        stream.read_to_end(&mut answer),
    )
    .await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_bearer_token_every_request_is_401_and_no_tool_runs() {
    let server = Server::start().await;
    assert_eq!(server.token.len(), 64, "{}", server.token);
    assert_eq!(
        server.token_lines, 1,
        "the token is printed to stderr exactly once"
    );
    let wrong = format!("Bearer {}", "0".repeat(64));
    for authorization in [None, Some("Bearer "), Some(wrong.as_str())] {
        let (status, body) = raw_initialize(&server.url, authorization).await;
        assert_eq!(status, 401, "{authorization:?}: {body}");
        assert!(body.contains("Authorization: Bearer"), "{body}");
    }
    // A client that does everything right except the token cannot even initialize.
    install_ring_provider();
    let anonymous = TestClient::new(true, Answer::Accept)
        .serve(StreamableHttpClientTransport::from_uri(server.url.clone()))
        .await;
    assert!(anonymous.is_err(), "initialize without the token must fail");
    // With the token the same raw request is served.
    let (status, body) =
        raw_initialize(&server.url, Some(&format!("Bearer {}", server.token))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.upstream.requests(), 0);
    assert!(
        server.sessions_and_consents().await.is_empty(),
        "no call ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_client_declaring_elicitation_cannot_approve_unless_the_host_enabled_it() {
    let server = Server::start_with(&[]).await;
    let handler = TestClient::new(true, Answer::Accept);
    let client = server.connect(handler.clone()).await;
    let refused = call(
        &client,
        "create_invoice",
        json!({"customer_id": "cus_7", "amount_cents": 1200, "reference": "inv-http-3",
               "reason": "monthly support fee"}),
    )
    .await;
    assert_eq!(refused["code"], "consent_unavailable", "{refused}");
    assert!(handler.elicited.lock().expect("lock").is_empty());
    assert_eq!(server.upstream.requests(), 0);
    let records = server.sessions_and_consents().await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].1, Some(ConsentOutcome::Unavailable));
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_address_is_refused_before_binding() {
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-demo"))
        .args(["--http", "0.0.0.0:0", "--upstream", "http://127.0.0.1:9"])
        .arg("--state-dir")
        .arg(tempfile::tempdir().expect("tempdir").path())
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run mcp-demo");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "refusing to serve MCP over HTTP on 0.0.0.0:0: only loopback addresses are allowed"
        ),
        "{stderr}"
    );
}

/// Installs ring as the process's rustls provider: the workspace builds reqwest with rustls
/// but no default provider. rustls 0.23.48 deprecates ring's provider (no post-quantum key
/// exchange) and names no replacement that keeps ring; `sallyport-http` stays on ring too.
#[allow(
    deprecated,
    reason = "ring, as sallyport-http's channel; see its tls.rs"
)]
fn install_ring_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
