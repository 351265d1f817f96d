//! The first example is also a test: it runs as a process, exits 0, and prints what the agent
//! got and the typed builds.

use std::process::Command;

use serde_json::{Value, json};

#[test]
fn hello_http_prints_the_completed_result_and_the_typed_builds() {
    let output = Command::new(env!("CARGO_BIN_EXE_hello_http"))
        .output()
        .expect("hello_http runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "hello_http failed:\n{stderr}");
    let stdout = String::from_utf8(output.stdout).expect("utf8");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    let result: Value = serde_json::from_str(lines[0]).expect("the result as JSON");
    assert_eq!(result["status"], "completed");
    assert_eq!(result["action"], "list_builds");
    // Only the declared fields: the upstream's `commit` and `internal_trace` never arrive.
    assert_eq!(
        result["data"],
        json!({"builds": [
            {"build_id": "build_101", "tests": "passed"},
            {"build_id": "build_102", "tests": "failed"},
        ]})
    );
    assert!(
        result["receipt_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("rcpt_")),
        "{result}"
    );
    assert_eq!(
        &lines[1..],
        ["build_101: tests passed", "build_102: tests failed"]
    );
    assert!(!stdout.contains("demo-token"), "{stdout}");
}
