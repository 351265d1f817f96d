//! The rig example runs as a process, exits 0, and prints what the scripted model was told
//! after each of its seven tool calls and the upstream's request count by then.

use std::process::Command;

use serde_json::Value;

#[test]
fn rig_agent_prints_what_the_model_was_told_after_each_call() {
    let output = Command::new(env!("CARGO_BIN_EXE_rig-agent"))
        .output()
        .expect("rig-agent runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "rig-agent failed:\n{stderr}");
    let stdout = String::from_utf8(output.stdout).expect("utf8");
    eprintln!("{stdout}");
    let told: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("model was told "))
        .collect();
    let counts: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("upstream requests so far: "))
        .collect();
    assert_eq!(told.len(), 7, "{stdout}");
    let json = |line: &str| -> Value {
        let text = line.split_once("): ").expect("a label").1;
        serde_json::from_str(text).expect("JSON")
    };

    // 1. a read: completed.
    assert!(told[0].starts_with("(tool result): "), "{}", told[0]);
    assert_eq!(json(told[0])["status"], "completed");
    // 2. a deployment: pending, with the status check to make next.
    assert!(told[1].starts_with("(tool result): "), "{}", told[1]);
    let pending = json(told[1]);
    assert_eq!(pending["status"], "pending");
    assert_eq!(pending["next"]["action"], "get_deployment_status");
    // 3. an unknown field, 4. another project, 5. the human said no: tool errors.
    assert!(
        told[2]
            .starts_with("(tool error): create_preview_deployment: rejected (invalid_arguments)"),
        "{}",
        told[2]
    );
    assert!(
        told[3].starts_with(
            "(tool error): list_builds: rejected (out_of_scope) — project proj_999 is outside \
             this session's scope. Nothing was sent."
        ),
        "{}",
        told[3]
    );
    assert!(
        told[4].starts_with("(tool error): create_preview_deployment: rejected (consent_denied)"),
        "{}",
        told[4]
    );
    // 6. the lost answer: unknown, not retryable, the reconcile call named.
    assert!(
        told[5].starts_with("(tool error): create_invoice: unknown ("),
        "{}",
        told[5]
    );
    assert!(
        told[5].contains(
            "Not retryable: do not call create_invoice again; call get_invoice with \
             {\"customer_id\":\"cus_7\",\"reference\":\"drop-inv-rig-1\"} to find out."
        ),
        "{}",
        told[5]
    );
    // 7. the reconcile read: exactly one invoice.
    let reconciled = json(told[6]);
    assert_eq!(reconciled["status"], "completed");
    assert_eq!(reconciled["data"]["count"], 1);

    // Refusals sent nothing; the lost invoice was resent with its key, and billed once.
    let counts: Vec<u64> = counts.iter().map(|c| c.parse().expect("a count")).collect();
    // The invoice's three attempts (the original and two resends with the same key) each
    // reached the upstream; the reconcile read is one more.
    assert_eq!(counts, vec![1, 2, 2, 2, 2, 5, 6]);
    assert!(
        stdout.contains("invoices with reference drop-inv-rig-1: 1\n"),
        "{stdout}"
    );
    assert!(stdout.contains("intact: true"), "{stdout}");
    assert!(!stdout.contains("demo-token"), "the credential was printed");
}
