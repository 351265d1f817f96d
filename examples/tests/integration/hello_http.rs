//! The first example is also a test: it runs as a process, exits 0, prints what the agent got,
//! and leaves nothing behind.

use std::process::Command;

use serde_json::{Value, json};

#[test]
fn hello_http_prints_the_completed_result_and_leaves_nothing_behind() {
    // The example's scratch directory (and its journal) goes under the system temp
    // directory, which is this one for the child.
    let tmp = tempfile::tempdir().expect("tempdir");
    let output = Command::new(env!("CARGO_BIN_EXE_hello_http"))
        .env("TMPDIR", tmp.path())
        .output()
        .expect("hello_http runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "hello_http failed:\n{stderr}");
    let stdout = String::from_utf8(output.stdout).expect("utf8");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let result: Value = serde_json::from_str(lines[0]).expect("the result as JSON");
    assert_eq!(result["status"], "completed");
    assert_eq!(result["action"], "latest_build");
    // Only the declared fields: the upstream's `commit`, `project_id` and `internal_trace`
    // never arrive.
    assert_eq!(
        result["data"],
        json!({"build_id": "build_102", "tests": "failed"})
    );
    assert!(
        result["receipt_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("rcpt_")),
        "{result}"
    );
    assert!(!stdout.contains("demo-token"), "{stdout}");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("read the temp dir")
        .map(|entry| entry.expect("an entry").file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
