//! The approvals example as a test: the example runs as one process and parks the agent's
//! invoice; this test process plays the second terminal and approves it through the
//! `sallyport` CLI's commands; the example then sees the call completed, sent once.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::Value;

#[test]
fn a_parked_invoice_approved_from_another_process_with_the_cli_is_sent_once() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_approvals"))
        .args(["--wait", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the example starts");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut seen = Vec::new();
    let (mut journal, mut id) = (None, None);
    while journal.is_none() || id.is_none() {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).expect("read") > 0,
            "the example ended early: {seen:?}"
        );
        if let Some(path) = line.trim().strip_prefix("journal: ") {
            journal = Some(path.to_owned());
        }
        if let Some(value) = line.trim().strip_prefix("approval_id: ") {
            id = Some(value.to_owned());
        }
        seen.push(line);
    }
    let parked: Value = serde_json::from_str(
        seen[0]
            .trim()
            .strip_prefix("create_invoice -> ")
            .expect("the parked result first"),
    )
    .expect("JSON");
    assert_eq!(parked["status"], "pending");
    assert_eq!(parked["code"], "awaiting_approval");
    assert_eq!(seen[1].trim(), "the upstream received 0 request(s)");

    let (journal, id) = (journal.expect("journal"), id.expect("id"));
    let code = sallyport_cli::run([
        "sallyport",
        "--journal",
        &journal,
        "approvals",
        "approve",
        &id,
        "--by",
        "example-test",
    ]);
    assert_eq!(code, std::process::ExitCode::SUCCESS);

    let mut rest = String::new();
    for line in out.lines() {
        rest.push_str(&line.expect("read"));
        rest.push('\n');
    }
    let status = child.wait().expect("wait");
    assert!(status.success(), "the example failed:\n{rest}");
    let check = rest
        .lines()
        .find_map(|l| l.strip_prefix("check_approval -> "))
        .expect("the final check");
    let check: Value = serde_json::from_str(check).expect("JSON");
    assert_eq!(check["status"], "completed", "{check}");
    assert_eq!(check["data"]["decided_by"], "example-test");
    assert!(
        rest.contains("invoices with that reference at the upstream: 1"),
        "{rest}"
    );
    assert!(!rest.contains("demo-token"), "{rest}");
}
