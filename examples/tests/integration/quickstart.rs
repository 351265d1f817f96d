//! The quickstart is also a test: run it with `--json` and check what the agent got.

use std::process::Command;

use serde_json::Value;

#[test]
fn the_quickstart_shows_all_five_statuses_and_a_verified_audit_chain() {
    let output = Command::new(env!("CARGO_BIN_EXE_quickstart"))
        .arg("--json")
        .output()
        .expect("the quickstart runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "quickstart failed:\n{stderr}");
    let results: Vec<Value> = String::from_utf8(output.stdout)
        .expect("utf8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let seen: Vec<(String, String, String)> = results
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap_or_default().to_owned(),
                r["status"].as_str().unwrap_or_default().to_owned(),
                r["code"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("list_builds", "completed", ""),
        ("create_preview_deployment", "pending", ""),
        ("get_deployment_status", "completed", ""),
        ("get_deployment_status", "completed", ""),
        ("create_preview_deployment", "already_in_desired_state", ""),
        ("list_builds", "rejected", "invalid_arguments"),
        ("list_builds", "rejected", "out_of_scope"),
        ("create_preview_deployment", "rejected", "consent_denied"),
        ("create_invoice", "unknown", "connection_lost_after_send"),
        ("get_invoice", "completed", ""),
    ];
    let expected: Vec<(String, String, String)> = expected
        .iter()
        .map(|(a, s, c)| ((*a).to_owned(), (*s).to_owned(), (*c).to_owned()))
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(results[1]["next"]["action"], "get_deployment_status");
    assert_eq!(results[8]["next"]["action"], "get_invoice");
    assert_eq!(results[9]["data"]["count"], 1);
    for r in &results {
        assert!(
            r["receipt_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("rcpt_")),
            "{r}"
        );
    }
    assert!(stderr.contains("✓ the hash chain verifies"), "{stderr}");
    assert!(!stderr.contains('✗'), "{stderr}");
    assert!(
        !stderr.contains("demo-token-7f3c9a1e"),
        "the token never reaches the output"
    );
}
