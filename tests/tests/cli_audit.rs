//! `sallyport audit …` as a real process over a real journal written by the executor.

mod vault_support;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use sallyport_core::channel::ChannelOutcome;
use sallyport_core::journal::{ChainHead, SqliteJournal};
use sallyport_core::vault::MemoryVault;
use sallyport_core::{Catalog, Executor, Session};
use vault_support::{CountingConsent, DeployPreview, ReadStatus, ScriptedChannel, bearer};

fn run(journal: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sallyport-under-test"))
        .arg("--journal")
        .arg(journal)
        .args(args)
        .env_remove("SALLYPORT_VAULT")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A journal with three finished calls, written by the executor and closed again.
async fn journal_with_three_calls(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let path = dir.path().join("journal.db");
    let journal = Arc::new(SqliteJournal::open(&path).unwrap());
    let vault = MemoryVault::new();
    vault.set(
        bearer("deploy-api", "https://api.example.com"),
        sallyport_core::vault::Secret::new("audit-token-1"),
    );
    let executor = Executor::builder(
        Catalog::builder()
            .action::<DeployPreview>()
            .action::<ReadStatus>()
            .build()
            .unwrap(),
    )
    .journal_arc(journal.clone())
    .channel(ScriptedChannel::new(|_| {
        ChannelOutcome::completed(serde_json::json!({"ok": true}))
    }))
    .vault(vault)
    .consent(CountingConsent::default())
    .build()
    .unwrap();
    let session = Session::new("audit-cli");
    for _ in 0..2 {
        executor
            .call(
                "read_status",
                serde_json::json!({"project": "p1"}),
                &session,
            )
            .await;
    }
    executor
        .call(
            "deploy_preview",
            serde_json::json!({"project": "p1", "reason": "ship preview 7"}),
            &session,
        )
        .await;
    drop(executor);
    drop(journal);
    path
}

#[tokio::test]
async fn verify_export_and_a_tampered_record_give_the_documented_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_with_three_calls(&dir).await;

    let verify = run(&path, &["audit", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify.stderr));
    assert!(
        text(&verify.stdout).starts_with("intact: 3 records, head "),
        "{}",
        text(&verify.stdout)
    );

    let export_file = dir.path().join("audit.jsonl");
    let head_file = dir.path().join("head.json");
    let export = run(
        &path,
        &[
            "audit",
            "export",
            "--output",
            export_file.to_str().unwrap(),
            "--head-output",
            head_file.to_str().unwrap(),
        ],
    );
    assert_eq!(export.status.code(), Some(0), "{}", text(&export.stderr));
    assert_eq!(text(&export.stderr), "exported 3 records\n");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&export_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines
            .iter()
            .map(|l| l["seq"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(lines[2]["event"]["action"], "deploy_preview");
    let head: ChainHead =
        serde_json::from_str(&std::fs::read_to_string(&head_file).unwrap()).unwrap();
    assert_eq!(head.count, 3);
    assert_eq!(head.hash, lines[2]["hash"].as_str().unwrap());

    let stdout_export = run(&path, &["audit", "export"]);
    assert_eq!(text(&stdout_export.stdout).lines().count(), 3);

    let with_head = run(
        &path,
        &["audit", "verify", "--head", head_file.to_str().unwrap()],
    );
    assert_eq!(
        with_head.status.code(),
        Some(0),
        "{}",
        text(&with_head.stderr)
    );

    // Truncation: the last record removed; only the exported head catches it.
    let db = rusqlite::Connection::open(&path).unwrap();
    db.execute("DELETE FROM audit WHERE seq = 3", []).unwrap();
    let truncated = run(
        &path,
        &["audit", "verify", "--head", head_file.to_str().unwrap()],
    );
    assert_eq!(truncated.status.code(), Some(8));
    assert_eq!(
        text(&truncated.stderr),
        "sallyport: audit chain broken at record 3 (deleted): chain holds 2 records but the exported head says 3: truncated\n"
    );

    // An edited record.
    db.execute(
        "UPDATE audit SET event = replace(event, 'read_status', 'read_statuz') WHERE seq = 2",
        [],
    )
    .unwrap();
    let edited = run(&path, &["audit", "verify"]);
    assert_eq!(edited.status.code(), Some(8));
    assert!(
        text(&edited.stderr).starts_with("sallyport: audit chain broken at record 2 (edited)"),
        "{}",
        text(&edited.stderr)
    );
}

#[tokio::test]
async fn unresolved_lists_attempts_left_between_intent_and_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_with_three_calls(&dir).await;
    let none = run(&path, &["audit", "unresolved"]);
    assert_eq!(none.status.code(), Some(0));
    assert_eq!(text(&none.stdout), "no unresolved attempts\n");

    // As if the process died after dispatch, before the outcome was written.
    let db = rusqlite::Connection::open(&path).unwrap();
    let attempt: String = db
        .query_row(
            "SELECT attempt_id FROM attempts WHERE action = 'deploy_preview'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    db.execute(
        "UPDATE attempts SET phase = 'dispatched', dispatches = 1 WHERE attempt_id = ?1",
        [&attempt],
    )
    .unwrap();
    let listed = run(&path, &["audit", "unresolved", "--json"]);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let json: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 1);
    assert_eq!(json[0]["attempt_id"], attempt.as_str());
    assert_eq!(json[0]["action"], "deploy_preview");
    assert_eq!(json[0]["phase"], "dispatched");
    assert_eq!(json[0]["dispatches"], 1);
    let table = run(&path, &["audit", "unresolved"]);
    assert!(text(&table.stdout).contains(&attempt));
}

#[test]
fn a_missing_journal_exits_5_and_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.db");
    let out = run(&path, &["audit", "verify"]);
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(
        text(&out.stderr),
        format!("sallyport: no journal at {}\n", path.display())
    );
    assert!(!path.exists());
}

#[test]
fn a_foreign_journal_file_exits_7_and_is_left_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foreign.db");
    std::fs::write(
        &path,
        b"this is not a database, just text that is long enough to look like a page",
    )
    .unwrap();
    let before = std::fs::read(&path).unwrap();
    let out = run(&path, &["audit", "verify"]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(&path).unwrap(), before);
}
