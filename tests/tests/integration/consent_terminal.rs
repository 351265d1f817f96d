//! `TerminalConsent` answers only from the controlling terminal, never from standard input:
//! a real child process (`terminal-consent-call`) with `y` piped into its stdin and no
//! controlling terminal (started through util-linux `setsid`) gets `consent_unavailable` and
//! sends nothing to the real test upstream; the same process on a real pseudo-terminal
//! (util-linux `script`) reads the human's `y` from it and sends exactly one request.

use std::io::Write as _;
use std::process::{Command, Stdio};

use sallyport_tests::http_server::{Reply, Upstream, audit_event};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_terminal-consent-call");

/// Runs `program args…` with `stdin` written to its standard input; its stdout and stderr.
fn run(program: &str, args: &[&str], stdin: &[u8]) -> (String, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    let output = child.wait_with_output().expect("wait");
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The `ActionResult` JSON in `stdout` (on a terminal it follows the prompt on one line).
fn result_of(stdout: &str) -> Value {
    stdout
        .lines()
        .filter_map(|l| l.find("{\"status\"").map(|at| l[at..].trim()))
        .find_map(|json| serde_json::from_str::<Value>(json).ok())
        .unwrap_or_else(|| panic!("no result line in {stdout:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_yes_without_a_controlling_terminal_is_consent_unavailable_and_sends_nothing() {
    let upstream = Upstream::start(|_| Reply::Json(200, json!({"ok": true}))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("journal.db");
    let url = upstream.url();
    let journal_arg = journal.display().to_string();
    // `setsid --wait` runs the program in a new session: it has no controlling terminal.
    let (stdout, stderr) = tokio::task::spawn_blocking(move || {
        run(
            "setsid",
            &["--wait", BIN, &url, &journal_arg],
            b"y\ny\nyes\n",
        )
    })
    .await
    .expect("join");
    let result = result_of(&stdout);
    assert_eq!(result["status"], "rejected", "{result} {stderr}");
    assert_eq!(result["code"], "consent_unavailable", "{result}");
    assert_eq!(
        upstream.requests(),
        0,
        "the piped `y` approved nothing: no request reached the upstream"
    );
    let audit = audit_event(&journal, result["attempt_id"].as_str().expect("attempt id"));
    assert_eq!(audit["consent"], "unavailable");
    assert_eq!(audit["code"], "consent_unavailable");
    assert_eq!(audit["dispatches"], 0);
    assert!(
        !stderr.contains("consent requested"),
        "nothing was prompted on stderr: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yes_typed_on_the_controlling_terminal_approves_one_request() {
    let upstream = Upstream::start(|_| Reply::Json(200, json!({"ok": true}))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("journal.db");
    let command = format!("{BIN} {} {}", upstream.url(), journal.display());
    // `script` runs the command on a fresh pseudo-terminal (its controlling terminal) and
    // forwards what it reads from its own stdin to that terminal: the human's keystrokes.
    let (stdout, stderr) = tokio::task::spawn_blocking(move || {
        run(
            "setsid",
            &["--wait", "script", "-qfec", &command, "/dev/null"],
            b"y\n",
        )
    })
    .await
    .expect("join");
    let result = result_of(&stdout);
    assert_eq!(result["status"], "completed", "{result} {stderr}");
    assert_eq!(upstream.requests(), 1);
    assert!(
        stdout.contains("--- consent requested ---")
            && stdout.contains("Request: POST ")
            && stdout.contains("/v1/workers/w1/restart"),
        "the prompt went to the terminal: {stdout}"
    );
    let audit = audit_event(&journal, result["attempt_id"].as_str().expect("attempt id"));
    assert_eq!(audit["consent"], "approved");
    assert_eq!(audit["dispatches"], 1);
}
