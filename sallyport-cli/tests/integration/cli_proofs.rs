//! `sallyport audit checkpoint | prove | check-proof` as real processes over a real journal:
//! a proof checks with the public key alone in a directory with no journal, and every way of
//! tampering with it (or with the journal behind it) is refused with a clear message and a
//! documented exit code.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sallyport_core::journal::checkpoint::{decode_path, encode_path};
use sallyport_core::journal::{AuditEvent, HeadVerifyingKey, Intent, Journal, SqliteJournal};
use serde_json::Value;

use super::cli_audit::{journal_with_three_calls, keygen, run, text};

/// A journal of seven records (three calls by the executor, four more appended), closed.
async fn journal_with_seven(dir: &tempfile::TempDir) -> PathBuf {
    let path = journal_with_three_calls(dir).await;
    let journal = SqliteJournal::open(&path).unwrap();
    for _ in 0..4 {
        journal
            .append(AuditEvent::for_bench(&Intent::for_bench(false)))
            .await
            .unwrap();
    }
    path
}

/// The receipt id of record `seq`.
fn receipt_of(path: &Path, seq: i64) -> String {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(
        "SELECT json_extract(event, '$.receipt_id') FROM audit WHERE seq = ?1",
        [seq],
        |r| r.get(0),
    )
    .unwrap()
}

/// `check-proof` in `dir` (which holds no journal), with no journal named anywhere.
fn check_proof(dir: &Path, proof: &Path, public: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sallyport"))
        .current_dir(dir)
        .env_remove("SALLYPORT_JOURNAL")
        .env_remove("SALLYPORT_VAULT")
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir)
        .args(["audit", "check-proof"])
        .arg(proof)
        .arg("--public-key")
        .arg(public)
        .output()
        .unwrap()
}

/// A checkpointed journal of seven records and the proof of record `seq` written to a file
/// in a second directory with the public key beside it.
struct Proven {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    journal: PathBuf,
    secret: PathBuf,
    public: PathBuf,
    elsewhere: PathBuf,
    proof: PathBuf,
    receipt: String,
}

async fn proven(seq: i64) -> Proven {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_with_seven(&dir).await;
    let (secret, public) = keygen(dir.path(), "journal.key");
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
    let id = HeadVerifyingKey::read_file(&public).unwrap().key_id();
    let said = text(&out.stdout);
    assert!(
        said.starts_with(&format!("checkpoint signed by key {id} at "))
            && said.contains(": 7 records, root "),
        "{said}"
    );
    let other = tempfile::tempdir().unwrap();
    let elsewhere = other.path().to_path_buf();
    let proof = elsewhere.join("proof.json");
    let receipt = receipt_of(&journal, seq);
    let out = run(
        &journal,
        &[
            "audit",
            "prove",
            &receipt,
            "--output",
            proof.to_str().unwrap(),
            "--public-key",
            public.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!(
            "proof of receipt {receipt} (record {seq} of 7) written to {}\n",
            proof.display()
        )
    );
    let public_copy = elsewhere.join("journal.key.pub");
    std::fs::copy(&public, &public_copy).unwrap();
    Proven {
        _dirs: (dir, other),
        journal,
        secret,
        public: public_copy,
        elsewhere,
        proof,
        receipt,
    }
}

impl Proven {
    fn proof_json(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(&self.proof).unwrap()).unwrap()
    }

    /// Writes `edit` of the proof to a new file and checks it: exit 19 and `expect` in the
    /// message.
    fn refused(&self, name: &str, edit: impl FnOnce(&mut Value), expect: &str) {
        let mut proof = self.proof_json();
        edit(&mut proof);
        let path = self.elsewhere.join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&proof).unwrap()).unwrap();
        let out = check_proof(&self.elsewhere, &path, &self.public);
        assert_eq!(out.status.code(), Some(19), "{name}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(
            err.starts_with(&format!(
                "sallyport: the proof in {} does not verify: ",
                path.display()
            )) && err.contains(expect),
            "{name}: {err}"
        );
        assert!(text(&out.stdout).is_empty(), "{name}");
    }
}

#[tokio::test]
async fn a_proof_checks_with_the_public_key_alone_in_a_directory_with_no_journal() {
    let p = proven(3).await;
    let out = check_proof(&p.elsewhere, &p.proof, &p.public);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = HeadVerifyingKey::read_file(&p.public).unwrap().key_id();
    let said = text(&out.stdout);
    assert!(
        said.starts_with(&format!(
            "verified: receipt {} is record 3 of 7 in shard default, under the checkpoint signed by key {id} at ",
            p.receipt
        )),
        "{said}"
    );
    // Nothing was made where it ran.
    let mut left: Vec<String> = std::fs::read_dir(&p.elsewhere)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["journal.key.pub", "proof.json"]);

    // Written compact: one line of JSON and a newline, the record without a stored hash.
    let written = std::fs::read_to_string(&p.proof).unwrap();
    assert_eq!(written.lines().count(), 1, "{written}");
    assert!(written.ends_with("}\n"), "{written}");
    let proof = p.proof_json();
    assert!(proof["record"].get("hash").is_none(), "{written}");
    assert_eq!(
        decode_path(proof["path"].as_str().unwrap()).unwrap().len(),
        3
    );
    assert_eq!(proof["format"], "sallyport-inclusion-proof-v1");
    assert_eq!(proof["checkpoint"]["format"], "sallyport-checkpoint-v1");
    assert_eq!(proof["checkpoint"]["shards"][0]["shard"], "default");
    assert_eq!(proof["receipt_id"], p.receipt.as_str());

    let json = Command::new(env!("CARGO_BIN_EXE_sallyport"))
        .current_dir(&p.elsewhere)
        .args([
            "audit",
            "check-proof",
            "proof.json",
            "--public-key",
            "journal.key.pub",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(json.status.code(), Some(0), "{}", text(&json.stderr));
    let shown: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        (shown["verified"].as_bool(), shown["seq"].as_u64()),
        (Some(true), Some(3))
    );

    // The journal itself now verifies as signed through its checkpoint.
    let verify = run(
        &p.journal,
        &[
            "audit",
            "verify",
            "--public-key",
            p.public.to_str().unwrap(),
        ],
    );
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify.stderr));
    assert!(
        text(&verify.stdout).contains("signed through record 7"),
        "{}",
        text(&verify.stdout)
    );
}

#[tokio::test]
async fn every_tampered_proof_exits_19_and_says_what_is_wrong() {
    let p = proven(2).await;
    let journal = SqliteJournal::open(&p.journal).unwrap();
    let rows = journal.chain_rows().await.unwrap();
    drop(journal);

    p.refused(
        "edited-event",
        |v| {
            let e = v["record"]["event"]
                .as_str()
                .unwrap()
                .replace("audit-cli", "audit-clj");
            v["record"]["event"] = e.into();
        },
        // The proof holds no hash of the record: the verifier recomputes it, and an edited
        // event's hash leads elsewhere.
        "the Merkle path does not lead from the record to the checkpoint's root",
    );
    p.refused(
        "edited-prev-hash",
        |v| v["record"]["prev_hash"] = "ab".repeat(32).into(),
        "the Merkle path does not lead from the record to the checkpoint's root",
    );
    p.refused(
        "path-with-bad-characters",
        |v| {
            let path = format!("+{}", &v["path"].as_str().unwrap()[1..]);
            v["path"] = path.into();
        },
        "the proof's path is not unpadded base64url of concatenated 32-byte hashes: not unpadded base64url",
    );
    p.refused(
        "path-of-wrong-length",
        |v| {
            // 44 characters: 33 bytes, one hash and a byte.
            let mut path = v["path"].as_str().unwrap().to_owned();
            path.truncate(44);
            v["path"] = path.into();
        },
        "33 bytes, not a whole number of 32-byte hashes",
    );
    // Reordered: record 3 put in record 2's place, with record 2's path.
    p.refused(
        "reordered",
        |v| {
            let r = &rows[2];
            v["record"] = serde_json::json!({
                "seq": 2, "prev_hash": r.prev_hash, "event": r.event_json,
            });
            v["receipt_id"] =
                serde_json::from_str::<Value>(&r.event_json).unwrap()["receipt_id"].clone();
        },
        "the Merkle path does not lead from the record to the checkpoint's root",
    );
    p.refused(
        "reordered-with-its-position",
        |v| {
            let r = &rows[2];
            v["record"] = serde_json::json!({
                "seq": 3, "prev_hash": r.prev_hash, "event": r.event_json,
            });
            v["leaf_index"] = 1.into();
            v["receipt_id"] =
                serde_json::from_str::<Value>(&r.event_json).unwrap()["receipt_id"].clone();
        },
        "the record is record 3 but the proof places it at leaf 1",
    );
    p.refused(
        "moved-to-another-leaf",
        |v| {
            v["record"]["seq"] = 3.into();
            v["leaf_index"] = 2.into();
        },
        "the Merkle path does not lead from the record to the checkpoint's root",
    );
    p.refused(
        "swapped-path",
        |v| {
            let mut path = decode_path(v["path"].as_str().unwrap()).unwrap();
            path.swap(0, 1);
            v["path"] = encode_path(&path).into();
        },
        "the Merkle path does not lead",
    );
    p.refused(
        "truncated-path",
        |v| {
            let mut path = decode_path(v["path"].as_str().unwrap()).unwrap();
            path.pop();
            v["path"] = encode_path(&path).into();
        },
        "the Merkle path does not lead",
    );
    p.refused(
        "wrong-tree-size",
        |v| v["tree_size"] = 6.into(),
        "the proof is for a tree of 6 records but the checkpoint signed 7",
    );
    // Deleted: the record left out of a tree one smaller, the checkpoint edited to match.
    p.refused(
        "shrunk-checkpoint",
        |v| {
            v["tree_size"] = 6.into();
            v["checkpoint"]["shards"][0]["size"] = 6.into();
        },
        "the checkpoint's shard heads do not hash to its signed root",
    );
    p.refused(
        "forged-signature",
        |v| {
            let mut sig = v["checkpoint"]["signature"].as_str().unwrap().to_owned();
            let first = if sig.starts_with('A') { "B" } else { "A" };
            sig.replace_range(0..1, first);
            v["checkpoint"]["signature"] = sig.into();
        },
        "the checkpoint's signature does not verify: forged or altered",
    );
    p.refused(
        "re-dated",
        |v| v["checkpoint"]["signed_at"] = "2020-01-01T00:00:00Z".into(),
        "the checkpoint's signature does not verify",
    );
    p.refused(
        "other-receipt",
        |v| v["receipt_id"] = "rcpt_someone_else".into(),
        "the proof names receipt rcpt_someone_else but its record is receipt",
    );

    // Another key: a checkpoint signed by a key the verifier does not hold.
    let (_, other_public) = keygen(&p.elsewhere, "other.key");
    let out = check_proof(&p.elsewhere, &p.proof, &other_public);
    assert_eq!(out.status.code(), Some(19), "{}", text(&out.stderr));
    let other_id = HeadVerifyingKey::read_file(&other_public).unwrap().key_id();
    assert!(
        text(&out.stderr).contains(&format!("not by key {other_id}")),
        "{}",
        text(&out.stderr)
    );
    // The untouched proof still verifies.
    assert_eq!(
        check_proof(&p.elsewhere, &p.proof, &p.public).status.code(),
        Some(0)
    );
}

#[tokio::test]
async fn a_journal_rewritten_or_shortened_after_its_checkpoint_gives_no_proof_and_fails_verify() {
    let p = proven(5).await;
    let conn = rusqlite::Connection::open(&p.journal).unwrap();
    // Delete record 7 and its attempt row: only the checkpoint can tell.
    conn.execute_batch(
        "DELETE FROM attempts WHERE attempt_id = \
         (SELECT json_extract(event, '$.attempt_id') FROM audit WHERE seq = 7); \
         DELETE FROM audit WHERE seq = 7",
    )
    .unwrap();
    drop(conn);
    assert_eq!(run(&p.journal, &["audit", "verify"]).status.code(), Some(0));
    let verify = run(
        &p.journal,
        &[
            "audit",
            "verify",
            "--public-key",
            p.public.to_str().unwrap(),
        ],
    );
    assert_eq!(verify.status.code(), Some(8), "{}", text(&verify.stderr));
    assert!(
        text(&verify.stderr).contains("covers 7 records, but the chain holds 6: truncated"),
        "{}",
        text(&verify.stderr)
    );
    let out = run(&p.journal, &["audit", "prove", &p.receipt]);
    assert_eq!(out.status.code(), Some(8), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("sallyport: the journal does not match its checkpoint: the checkpoint covers 7 records but the journal holds 6: truncated"),
        "{}",
        text(&out.stderr)
    );
    // Whoever deleted it signs a new checkpoint with a key of their own: its proofs are
    // refused under the journal's key.
    let (forger, _) = keygen(&p.elsewhere, "forger.key");
    let out = run(
        &p.journal,
        &[
            "audit",
            "checkpoint",
            "--signing-key",
            forger.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let forged = p.elsewhere.join("forged.json");
    let out = run(
        &p.journal,
        &["audit", "prove", &p.receipt, "-o", forged.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = check_proof(&p.elsewhere, &forged, &p.public);
    assert_eq!(out.status.code(), Some(19), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("was signed by key"),
        "{}",
        text(&out.stderr)
    );
    // The proof taken before the deletion still holds: it is of the records as signed.
    assert_eq!(
        check_proof(&p.elsewhere, &p.proof, &p.public).status.code(),
        Some(0)
    );
    let _ = &p.secret;
}

#[tokio::test]
async fn bad_input_gets_a_clear_answer_and_a_documented_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_with_three_calls(&dir).await;
    let (secret, public) = keygen(dir.path(), "journal.key");
    let receipt = receipt_of(&journal, 1);

    // No checkpoint yet: exit 20.
    let out = run(&journal, &["audit", "prove", &receipt]);
    assert_eq!(out.status.code(), Some(20), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "sallyport: this journal holds no checkpoint; make one with `sallyport audit checkpoint --signing-key FILE`\n"
    );
    // An unknown receipt: exit 5.
    let out = run(&journal, &["audit", "prove", "rcpt_nope"]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "sallyport: no record with receipt `rcpt_nope` in this journal\n"
    );
    // A record written after the checkpoint: exit 20 until the next one.
    let out = run(
        &journal,
        &[
            "audit",
            "checkpoint",
            "--signing-key",
            secret.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let cp: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cp["shards"][0]["size"], 3);
    {
        let j = SqliteJournal::open(&journal).unwrap();
        j.append(AuditEvent::for_bench(&Intent::for_bench(false)))
            .await
            .unwrap();
    }
    let late = receipt_of(&journal, 4);
    let out = run(&journal, &["audit", "prove", &late]);
    assert_eq!(out.status.code(), Some(20), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("record 4 is not covered by the checkpoint (it covers records 1 to 3)"),
        "{}",
        text(&out.stderr)
    );
    // With a key that signed no checkpoint: exit 20, naming the key.
    let (_, other_public) = keygen(dir.path(), "other.key");
    let out = run(
        &journal,
        &[
            "audit",
            "prove",
            &receipt,
            "--public-key",
            other_public.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(20), "{}", text(&out.stderr));
    // An existing output file is never replaced: exit 6.
    let existing = dir.path().join("existing.json");
    std::fs::write(&existing, "keep me").unwrap();
    let out = run(
        &journal,
        &["audit", "prove", &receipt, "-o", existing.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me");

    // A file that is not a proof: exit 7, reported and left untouched.
    for (name, content) in [
        ("garbage.json", "not json at all"),
        ("empty.json", ""),
        (
            "other.json",
            "{\"format\":\"sallyport-inclusion-proof-v1\"}",
        ),
    ] {
        let bad = dir.path().join(name);
        std::fs::write(&bad, content).unwrap();
        let out = check_proof(dir.path(), &bad, &public);
        assert_eq!(out.status.code(), Some(7), "{name}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).starts_with(&format!(
                "sallyport: {} is not an inclusion proof (",
                bad.display()
            )) && text(&out.stderr).ends_with("; it was left untouched\n"),
            "{}",
            text(&out.stderr)
        );
        assert_eq!(std::fs::read_to_string(&bad).unwrap(), content);
    }
    // A proof of a newer format: exit 19, naming both formats.
    let out = run(&journal, &["audit", "prove", &receipt]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut proof: Value = serde_json::from_slice(&out.stdout).unwrap();
    proof["format"] = "sallyport-inclusion-proof-v2".into();
    let newer = dir.path().join("newer.json");
    std::fs::write(&newer, proof.to_string()).unwrap();
    let out = check_proof(dir.path(), &newer, &public);
    assert_eq!(out.status.code(), Some(19), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(
            "format `sallyport-inclusion-proof-v2`, expected `sallyport-inclusion-proof-v1`"
        ),
        "{}",
        text(&out.stderr)
    );
    // A missing proof file: exit 5. A secret key file given as the public key: exit 2.
    let out = check_proof(dir.path(), &dir.path().join("missing.json"), &public);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    let out = check_proof(dir.path(), &newer, &secret);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    // The signing key never reaches any output.
    let seed_line = std::fs::read_to_string(&secret).unwrap();
    let seed = seed_line.split_whitespace().nth(1).unwrap();
    assert!(!text(&out.stderr).contains(seed));
}

#[tokio::test]
async fn a_journal_made_before_checkpoints_is_checkpointed_and_proven_without_a_record_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_with_three_calls(&dir).await;
    let rows = |path: &Path| -> Vec<(i64, String, String, String)> {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.prepare("SELECT seq, prev_hash, hash, event FROM audit ORDER BY seq")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    // The file as a build without checkpoints left it: same format version, no table.
    rusqlite::Connection::open(&journal)
        .unwrap()
        .execute_batch("DROP TABLE checkpoints")
        .unwrap();
    let before = rows(&journal);
    assert_eq!(run(&journal, &["audit", "verify"]).status.code(), Some(0));
    let (secret, public) = keygen(dir.path(), "journal.key");
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
    let proof = dir.path().join("proof.json");
    let receipt = receipt_of(&journal, 1);
    let out = run(
        &journal,
        &["audit", "prove", &receipt, "-o", proof.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        check_proof(dir.path(), &proof, &public).status.code(),
        Some(0)
    );
    assert_eq!(rows(&journal), before, "no record was rewritten");
}

/// `audit checkpoint --every 1` as a running process: it signs at once, signs again after
/// records are appended (by another handle on the same file), signs nothing while nothing
/// is appended, and every checkpoint it stored verifies the journal.
#[tokio::test]
async fn checkpoint_every_signs_each_period_in_which_the_journal_grew() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_with_seven(&dir).await;
    let (secret, public) = keygen(dir.path(), "journal.key");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sallyport"))
        .arg("--journal")
        .arg(&journal)
        .args(["audit", "checkpoint", "--every", "1", "--signing-key"])
        .arg(&secret)
        .env_remove("SALLYPORT_VAULT")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its lines, as they come.
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line);
        }
    });
    let next = |lines: &std::sync::mpsc::Receiver<String>| {
        lines
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("a checkpoint line within 30 s")
    };
    let first = next(&lines);
    assert!(first.contains(": 7 records, root "), "{first}");
    let writer = SqliteJournal::open(&journal).unwrap();
    for _ in 0..2 {
        writer
            .append(AuditEvent::for_bench(&Intent::for_bench(false)))
            .await
            .unwrap();
    }
    let second = next(&lines);
    assert!(second.contains(": 9 records, root "), "{second}");
    // Three periods with nothing appended: nothing signed.
    assert!(
        lines
            .recv_timeout(std::time::Duration::from_millis(3_500))
            .is_err(),
        "a checkpoint was signed with nothing appended"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(writer.checkpoints().await.unwrap().len(), 2);
    let key = HeadVerifyingKey::read_file(&public).unwrap();
    let report = writer.verify_signed(&key).await.unwrap();
    assert_eq!((report.first_break, report.last_signed), (None, Some(9)));
}
