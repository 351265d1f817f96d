//! An application that embeds the `sallyport` commands with its own executor
//! (`sallyport_cli::run_with_executor` over the approval tests' rig: deferred consent, the
//! HTTP channel, a real SQLite journal) as a real process, `approvals-app`, beside the plain
//! `sallyport` binary on one journal file and one real HTTP upstream. The plain binary's own
//! tests, and `run_with_executor` called in process, are in `sallyport-cli/tests`.

use std::path::Path;
use std::process::{Command, Output};

use sallyport_core::approval::{Approval, ApprovalId};
use sallyport_core::journal::{ApprovalStore, SqliteJournal};
use sallyport_tests::http_server::{Reply, Upstream};
use serde_json::json;

/// The plain `sallyport` binary (`tests/src/bin/sallyport-under-test.rs`) as a real process.
fn run(journal: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sallyport-under-test"))
        .arg("--journal")
        .arg(journal)
        .args(args)
        .env_remove("SALLYPORT_VAULT")
        .env_remove("SALLYPORT_JOURNAL")
        .env_remove("USER")
        .env_remove("USERNAME")
        .env("USER", "tester")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn stored(path: &Path, id: &ApprovalId) -> Approval {
    SqliteJournal::open(path)
        .unwrap()
        .approval(id)
        .await
        .unwrap()
        .unwrap()
}

/// The application binary (`tests/src/bin/approvals-app.rs`) as a real process.
fn app(upstream: &Upstream, journal: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_approvals-app"))
        .arg(journal)
        .arg(upstream.url())
        .args(args)
        .env("USER", "app-user")
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applications_own_command_line_says_what_it_sent_and_resume_sends_each_call_once() {
    let upstream = Upstream::start(|_| Reply::Json(200, json!({"id": "inv_1"}))).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let mut parked = Vec::new();
    for n in ["1", "2"] {
        let out = app(&upstream, &path, &["call", n]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(result["status"], "pending", "{result}");
        assert_eq!(result["code"], "awaiting_approval", "{result}");
        parked.push(ApprovalId::from_stored(
            result["approval_id"].as_str().unwrap(),
        ));
    }
    assert_eq!(upstream.requests(), 0);
    let (a, b) = (parked[0].as_str(), parked[1].as_str());

    // Approved in the application's command line: sent at once, and it says so.
    let out = app(&upstream, &path, &["approvals", "approve", a]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(upstream.requests(), 1);
    let receipt_a = stored(&path, &parked[0])
        .await
        .result
        .unwrap()
        .receipt_id
        .unwrap();
    assert_eq!(
        text(&out.stdout),
        format!(
            "approved {a}: recorded by app-user via cli; carried out: send_invoice completed, \
             receipt {receipt_a}\n"
        )
    );

    // Approved with the plain binary: recorded only; the application's resume sends it.
    let out = run(&path, &["approvals", "approve", b, "--by", "carol"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(upstream.requests(), 1);
    let out = app(&upstream, &path, &["approvals", "resume"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(upstream.requests(), 2);
    let receipt_b = stored(&path, &parked[1])
        .await
        .result
        .unwrap()
        .receipt_id
        .unwrap();
    assert_eq!(
        text(&out.stdout),
        format!("send_invoice completed, receipt {receipt_b}\nresumed 1 approved calls\n")
    );
    let again = app(&upstream, &path, &["approvals", "resume"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(
        text(&again.stdout),
        "no approved calls waiting to be sent\n"
    );
    let json = app(&upstream, &path, &["approvals", "resume", "--json"]);
    assert_eq!(text(&json.stdout), "[]\n");
    assert_eq!(upstream.requests(), 2, "each approved call was sent once");
}
