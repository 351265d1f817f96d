//! `sallyport audit …` as a real process over a real journal written by the executor.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use sallyport_core::channel::ChannelOutcome;
use sallyport_core::journal::{
    ChainHead, HeadSigningKey, HeadVerifyingKey, Intent, Journal, SqliteJournal, chain_hash,
};
use sallyport_core::vault::MemoryVault;
use sallyport_core::{Catalog, Executor, Session};
use sallyport_tests::vault_rig::{
    CountingConsent, DeployPreview, ReadStatus, ScriptedChannel, bearer,
};

pub(crate) fn run(journal: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sallyport"))
        .arg("--journal")
        .arg(journal)
        .args(args)
        .env_remove("SALLYPORT_VAULT")
        .output()
        .unwrap()
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A journal with three finished calls, written by the executor and closed again.
pub(crate) async fn journal_with_three_calls(dir: &tempfile::TempDir) -> std::path::PathBuf {
    journal_with_three_signed_calls(dir, None).await
}

/// The same, the head signed with `key` when one is given.
async fn journal_with_three_signed_calls(
    dir: &tempfile::TempDir,
    key: Option<HeadSigningKey>,
) -> std::path::PathBuf {
    let path = dir.path().join("journal.db");
    let mut builder = SqliteJournal::builder(&path);
    if let Some(key) = key {
        builder = builder.signing_key(key);
    }
    let journal = Arc::new(builder.open().unwrap());
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

    // Truncation: the last record and its attempt removed; only the exported head catches it.
    let db = rusqlite::Connection::open(&path).unwrap();
    db.execute_batch(
        "DELETE FROM attempts WHERE attempt_id = (SELECT attempt_id FROM audit WHERE seq = 3); \
         DELETE FROM audit WHERE seq = 3",
    )
    .unwrap();
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
    let attempt = crash_after_dispatch(&path).await;
    let listed = run(&path, &["audit", "unresolved", "--json"]);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let json: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 1);
    assert_eq!(json[0]["attempt_id"], attempt.as_str());
    assert_eq!(json[0]["action"], "bench");
    assert_eq!(json[0]["phase"], "dispatched");
    assert_eq!(json[0]["dispatches"], 1);
    let table = run(&path, &["audit", "unresolved"]);
    assert!(text(&table.stdout).contains(&attempt));
}

/// Writes an intent and its dispatch note and no outcome, as a process killed mid-call
/// leaves them. Returns the attempt id.
async fn crash_after_dispatch(path: &Path) -> String {
    let journal = SqliteJournal::open(path).unwrap();
    let intent = Intent::for_bench(true);
    journal.write_intent(&intent).await.unwrap();
    journal.note_dispatch(&intent.attempt_id, 1);
    assert_eq!(journal.unresolved().await.unwrap().len(), 1);
    intent.attempt_id.as_str().to_owned()
}

#[tokio::test]
async fn an_unresolved_attempt_edited_to_finished_is_still_listed_and_verify_exits_8() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_with_three_calls(&dir).await;
    let attempt = crash_after_dispatch(&path).await;
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE attempts SET phase = 'finished' WHERE attempt_id = ?1",
            [&attempt],
        )
        .unwrap();
    let listed = run(&path, &["audit", "unresolved", "--json"]);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let json: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 1, "{json}");
    assert_eq!(json[0]["attempt_id"], attempt.as_str());
    assert_eq!(json[0]["phase"], "dispatched");
    let verify = run(&path, &["audit", "verify"]);
    assert_eq!(verify.status.code(), Some(8), "{}", text(&verify.stdout));
    assert_eq!(
        text(&verify.stderr),
        format!(
            "sallyport: audit chain broken at record 0 (attempt_edited): attempt {attempt} is stored as finished but no audit record closes it: it is unresolved\n"
        )
    );
}

/// `audit keygen --out FILE` as a real process; returns the secret and public key files.
pub(crate) fn keygen(dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let key = dir.join(name);
    let out = run(
        &dir.join("unused.db"),
        &["audit", "keygen", "--out", key.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let public = dir.join(format!("{name}.pub"));
    let id = HeadVerifyingKey::read_file(&public).unwrap().key_id();
    assert_eq!(
        text(&out.stdout),
        format!(
            "signing key {id} written to {} (keep it secret, mode 0600); public key in {}\n",
            key.display(),
            public.display()
        )
    );
    (key, public)
}

#[tokio::test]
async fn a_journal_signed_with_a_keygen_key_verifies_with_its_public_key_and_a_rewrite_is_reported()
{
    let dir = tempfile::tempdir().unwrap();
    let (key_file, public_file) = keygen(dir.path(), "head.key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let key = HeadSigningKey::read_file(&key_file).unwrap();
    let id = key.verifying_key().key_id();
    let path = journal_with_three_signed_calls(&dir, Some(key)).await;
    let public = public_file.to_str().unwrap();

    let verify = run(&path, &["audit", "verify", "--public-key", public]);
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify.stderr));
    let head: String = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("SELECT hash FROM audit WHERE seq = 3", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        text(&verify.stdout),
        format!("intact: 3 records, head {head}, signed through record 3\n")
    );
    let json = run(
        &path,
        &["audit", "verify", "--public-key", public, "--json"],
    );
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["last_signed"], 3);

    // A wrong public key passes nothing.
    let (_, other_public) = keygen(dir.path(), "other.key");
    let other_id = HeadVerifyingKey::read_file(&other_public).unwrap().key_id();
    let wrong = run(
        &path,
        &[
            "audit",
            "verify",
            "--public-key",
            other_public.to_str().unwrap(),
        ],
    );
    assert_eq!(wrong.status.code(), Some(8));
    assert_eq!(
        text(&wrong.stderr),
        format!(
            "sallyport: audit chain broken at record 1 (unsigned): no head in this journal is signed by key {other_id} (3 signed by other keys): records 1 to 3 are not covered by a signature (no record is signed by this key)\n"
        )
    );

    // An attacker with write access but no key rewrites record 3, rehashes it and removes
    // the head that signed it: the unkeyed chain is intact, the signed one is not.
    let db = rusqlite::Connection::open(&path).unwrap();
    let (prev, event): (String, String) = db
        .query_row(
            "SELECT prev_hash, event FROM audit WHERE seq = 3",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let forged = event.replace("ship preview 7", "ship preview 8");
    assert_ne!(forged, event);
    db.execute(
        "UPDATE audit SET event = ?1, hash = ?2 WHERE seq = 3",
        rusqlite::params![forged, chain_hash(&prev, 3, &forged)],
    )
    .unwrap();
    db.execute("DELETE FROM heads WHERE count = 3", []).unwrap();
    let unkeyed = run(&path, &["audit", "verify"]);
    assert_eq!(unkeyed.status.code(), Some(0), "{}", text(&unkeyed.stderr));
    let keyed = run(&path, &["audit", "verify", "--public-key", public]);
    assert_eq!(keyed.status.code(), Some(8));
    assert_eq!(
        text(&keyed.stderr),
        format!(
            "sallyport: audit chain broken at record 3 (unsigned): records 3 to 3 come after the last head signed by key {id} (record 2): they may have been rewritten or added without the key (last signed record: 2)\n"
        )
    );
}

#[test]
fn keygen_never_replaces_an_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("head.key");
    std::fs::write(&key, b"keep me").unwrap();
    let out = run(
        &dir.path().join("unused.db"),
        &["audit", "keygen", "--out", key.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(&key).unwrap(), b"keep me");
    assert!(!dir.path().join("head.key.pub").exists());
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
