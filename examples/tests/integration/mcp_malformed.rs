//! Malformed JSON-RPC sent to `mcp-demo` as raw lines over real stdio (no MCP client library
//! in between, so the bytes are exactly what a broken client would send).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// Writes `lines` to a fresh `mcp-demo` and returns its answers by id (`null` for none).
fn exchange(lines: &[Value], answers: usize) -> Vec<Value> {
    let lines: Vec<String> = lines.iter().map(Value::to_string).collect();
    exchange_raw(&lines, answers)
}

/// Writes raw `lines` to a fresh `mcp-demo` and returns its first `answers` stdout lines.
fn exchange_raw(lines: &[String], answers: usize) -> Vec<Value> {
    let state = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-demo"))
        .arg("--state-dir")
        .arg(state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn mcp-demo");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut got = Vec::new();
    for line in lines {
        writeln!(stdin, "{line}").expect("write");
    }
    stdin.flush().expect("flush");
    let mut line = String::new();
    while got.len() < answers {
        line.clear();
        assert_ne!(
            stdout.read_line(&mut line).expect("read"),
            0,
            "server closed stdout"
        );
        got.push(serde_json::from_str::<Value>(&line).expect("every stdout line is JSON-RPC"));
    }
    drop(stdin);
    let _ = child.wait();
    got
}

fn initialize() -> [Value; 2] {
    [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ]
}

#[test]
fn tools_call_with_arguments_that_are_not_an_object_is_an_invalid_params_error() {
    let [init, initialized] = initialize();
    let answers = exchange(
        &[
            init,
            initialized,
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                   "params": {"name": "list_builds", "arguments": "proj_42"}}),
        ],
        2,
    );
    assert_eq!(answers[0]["id"], 1);
    assert_eq!(answers[0]["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(
        answers[1],
        json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32602,
               "message": "malformed tools/call request: the params do not match the MCP schema"}})
    );
}

#[test]
fn tools_call_without_a_tool_name_is_an_invalid_params_error() {
    let [init, initialized] = initialize();
    let answers = exchange(
        &[
            init,
            initialized,
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"arguments": {}}}),
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/frobnicate", "params": {}}),
        ],
        3,
    );
    let by_id = |id: i64| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .cloned()
            .expect("answer")
    };
    assert_eq!(by_id(3)["error"]["code"], -32602);
    assert_eq!(
        by_id(4),
        json!({"jsonrpc": "2.0", "id": 4, "error": {"code": -32601, "message": "tools/frobnicate"}})
    );
}

#[test]
fn unparsable_and_invalid_messages_leave_the_connection_usable() {
    let [init, initialized] = initialize();
    let answers = exchange_raw(
        &[
            // Not JSON at all: there is no id to answer, and rmcp drops it.
            "{not json".to_owned(),
            // JSON, but not a JSON-RPC message: an invalid_request error without an id.
            json!({"jsonrpc": "2.0", "params": {}}).to_string(),
            init.to_string(),
            initialized.to_string(),
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                   "params": {"name": "list_builds", "arguments": {"project_id": "proj_42"}}})
            .to_string(),
        ],
        3,
    );
    assert_eq!(answers[0]["error"]["code"], -32600, "{}", answers[0]);
    assert_eq!(answers[0]["id"], Value::Null);
    assert_eq!(answers[1]["id"], 1);
    assert_eq!(answers[2]["id"], 5);
    // The demo upstream is embedded here, so the call really completed.
    assert_eq!(
        answers[2]["result"]["structuredContent"]["status"],
        "completed"
    );
}
