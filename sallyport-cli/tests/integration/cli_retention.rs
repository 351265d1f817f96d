//! `sallyport audit seal | check-export` as real processes over a real journal: a seal
//! writes an export that checks with the public key alone in a directory with no journal,
//! prunes the range, and leaves a journal that still verifies, grows, proves and seals
//! again; every way of tampering with an export, or with the anchor left in the journal, is
//! refused with a documented exit code.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sallyport_core::journal::{AuditEvent, Intent, Journal, SqliteJournal};
use serde_json::Value;

use super::cli_audit::{journal_with_three_calls, keygen, run, text};

/// Appends `n` observe records to the journal file.
async fn append(path: &Path, n: usize) {
    let journal = SqliteJournal::open(path).unwrap();
    for _ in 0..n {
        let intent = Intent::for_bench(false);
        let event = AuditEvent::for_bench(&intent);
        journal.append_with_intent(intent, event).await.unwrap();
    }
}

fn count(path: &Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// The receipt id of record `seq`, while it is in the journal.
fn receipt_of(path: &Path, seq: i64) -> String {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(
        "SELECT json_extract(event, '$.receipt_id') FROM audit WHERE seq = ?1",
        [seq],
        |r| r.get(0),
    )
    .unwrap()
}

/// `check-export` in `dir` (which holds no journal), with no journal named anywhere.
fn check_export(dir: &Path, file: &Path, public: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sallyport"))
        .current_dir(dir)
        .env_remove("SALLYPORT_JOURNAL")
        .env_remove("SALLYPORT_VAULT")
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir)
        .args(["audit", "check-export"])
        .arg(file)
        .arg("--public-key")
        .arg(public)
        .output()
        .unwrap()
}

fn seal(journal: &Path, secret: &Path, out: &Path) -> Output {
    run(
        journal,
        &[
            "audit",
            "seal",
            "--signing-key",
            secret.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    )
}

fn verify_signed(journal: &Path, public: &Path) -> Output {
    run(
        journal,
        &["audit", "verify", "--public-key", public.to_str().unwrap()],
    )
}

#[tokio::test]
async fn seal_exports_prunes_and_leaves_a_journal_that_verifies_grows_proves_and_seals_again() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_with_three_calls(&dir).await;
    append(&journal, 4).await;
    let (secret, public) = keygen(dir.path(), "journal.key");
    let elsewhere = tempfile::tempdir().unwrap();
    let public_copy = elsewhere.path().join("journal.key.pub");
    std::fs::copy(&public, &public_copy).unwrap();
    let pruned_receipt = receipt_of(&journal, 2);

    let first = elsewhere.path().join("sealed-1.jsonl");
    let out = seal(&journal, &secret, &first);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.starts_with(
            "sealed records 1 to 7 of shard `default` under the checkpoint signed by key "
        ) && said.ends_with(&format!(
            "written to {}, 7 records pruned\n",
            first.display()
        )),
        "{said}"
    );
    assert_eq!(count(&journal, "SELECT count(*) FROM audit"), 0);
    assert_eq!(std::fs::read_to_string(&first).unwrap().lines().count(), 8);
    let out = check_export(elsewhere.path(), &first, &public_copy);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("verified: records 1 to 7 of shard default, sealed under"),
        "{}",
        text(&out.stdout)
    );
    let out = verify_signed(&journal, &public);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("intact: 7 records, head ")
            && text(&out.stdout).ends_with(", signed through record 7\n"),
        "{}",
        text(&out.stdout)
    );

    // Never over an existing file; nothing new to seal is its own exit, with no file.
    let before = std::fs::read(&first).unwrap();
    let out = seal(&journal, &secret, &first);
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(&first).unwrap(), before);
    let nothing = elsewhere.path().join("nothing.jsonl");
    let out = seal(&journal, &secret, &nothing);
    assert_eq!(out.status.code(), Some(21), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no record after record 7"),
        "{}",
        text(&out.stderr)
    );
    assert!(!nothing.exists());
    let out = run(
        &journal,
        &[
            "audit",
            "seal",
            "--signing-key",
            secret.to_str().unwrap(),
            "--shard",
            "Not A Shard",
            "--out",
            nothing.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(!nothing.exists());

    // The journal grows from the anchor; a later record proves once a checkpoint covers it.
    append(&journal, 3).await;
    let receipt = receipt_of(&journal, 9);
    let proof = elsewhere.path().join("proof.json");
    let prove = |journal: &Path, receipt: &str| {
        run(
            journal,
            &[
                "audit",
                "prove",
                receipt,
                "--output",
                proof.to_str().unwrap(),
                "--public-key",
                public.to_str().unwrap(),
            ],
        )
    };
    let out = prove(&journal, &receipt);
    assert_eq!(out.status.code(), Some(20), "{}", text(&out.stderr));
    let out = run(
        &journal,
        &[
            "audit",
            "checkpoint",
            "--signing-key",
            secret.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(": 10 records, root "),
        "{}",
        text(&out.stdout)
    );
    let out = prove(&journal, &receipt);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_sallyport"))
        .current_dir(elsewhere.path())
        .env_remove("SALLYPORT_JOURNAL")
        .args(["audit", "check-proof"])
        .arg(&proof)
        .arg("--public-key")
        .arg(&public_copy)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("is record 9 of 10"),
        "{}",
        text(&out.stdout)
    );
    // A pruned receipt is not in the journal, and the message says where it went.
    std::fs::remove_file(&proof).unwrap();
    let out = prove(&journal, &pruned_receipt);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("sealed and pruned"),
        "{}",
        text(&out.stderr)
    );

    // A second seal carries on from the first; both exports verify on their own.
    let second = elsewhere.path().join("sealed-2.jsonl");
    let out = seal(&journal, &secret, &second);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("sealed records 8 to 10 "),
        "{}",
        text(&out.stdout)
    );
    for file in [&first, &second] {
        let out = check_export(elsewhere.path(), file, &public_copy);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let out = verify_signed(&journal, &public);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("intact: 10 records"),
        "{}",
        text(&out.stdout)
    );

    refuse_tampered_exports(&second, elsewhere.path(), &public_copy);

    // The anchor edited in the journal: verify with the key finds it.
    let conn = rusqlite::Connection::open(&journal).unwrap();
    conn.execute("UPDATE anchors SET hash = ?1", [("1".repeat(64)).as_str()])
        .unwrap();
    drop(conn);
    let out = verify_signed(&journal, &public);
    assert_eq!(out.status.code(), Some(8), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("anchor"),
        "{}",
        text(&out.stderr)
    );
}

/// Every edit of the export `file` (a range from record 8, so its header has a frontier):
/// exit 19 naming what is wrong, or 7 for a file that is no sealed range at all.
fn refuse_tampered_exports(file: &Path, dir: &Path, public: &Path) {
    let original = std::fs::read_to_string(file).unwrap();
    let lines: Vec<String> = original.lines().map(str::to_owned).collect();
    let write = |name: &str, text: String| -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let join = |ls: &[String]| ls.iter().map(|l| format!("{l}\n")).collect::<String>();
    let edit_line = |i: usize, edit: &dyn Fn(&mut Value)| {
        let mut ls = lines.clone();
        let mut v: Value = serde_json::from_str(&ls[i]).unwrap();
        edit(&mut v);
        ls[i] = serde_json::to_string(&v).unwrap();
        join(&ls)
    };
    let mut swapped = lines.clone();
    swapped.swap(1, 2);
    let mut removed = lines.clone();
    removed.remove(2);
    let other_key = tempfile::tempdir().unwrap();
    let (_, other_public) = keygen(other_key.path(), "other.key");
    let cases: Vec<(&str, String, &Path, &str)> = vec![
        (
            "edited-event",
            edit_line(2, &|v| {
                let event = v["event"].as_str().unwrap().replace("bench", "Bench");
                v["event"] = Value::String(event);
            }),
            public,
            "its content was changed",
        ),
        (
            "removed-line",
            join(&removed),
            public,
            "records were removed",
        ),
        ("swapped-lines", join(&swapped), public, "reordered"),
        (
            "truncated",
            original[..original.len() - 30].to_owned(),
            public,
            "cut short",
        ),
        (
            "last-line-gone",
            join(&lines[..lines.len() - 1]),
            public,
            "records were removed",
        ),
        (
            "other-key",
            original.clone(),
            &other_public,
            "signed by key",
        ),
        (
            "frontier",
            edit_line(0, &|v| {
                v["frontier"][0] = Value::String("0".repeat(64));
            }),
            public,
            "do not hash to the checkpoint",
        ),
        (
            "prev-hash",
            edit_line(0, &|v| {
                v["prev_hash"] = Value::String("0".repeat(64));
            }),
            public,
            "does not link",
        ),
    ];
    for (name, text_of, key, expect) in cases {
        let path = write(&format!("{name}.jsonl"), text_of);
        let out = check_export(dir, &path, key);
        assert_eq!(out.status.code(), Some(19), "{name}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(expect),
            "{name}: {}",
            text(&out.stderr)
        );
    }
    let path = write("not-a-range.jsonl", "hello\n".to_owned());
    let out = check_export(dir, &path, public);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
}
