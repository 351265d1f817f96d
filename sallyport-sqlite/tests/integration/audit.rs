//! The hash-chained audit log in a real SQLite file: `verify` finds edits, deletions,
//! insertions, reorders and truncation, and says where.

use std::path::Path;
use std::sync::Arc;

use sallyport_core::consent::{ConsentDecision, FnConsent};
use sallyport_core::journal::{
    AuditEvent, BreakKind, ChainHead, HeadSigningKey, Intent, Journal, JournalError, Phase,
    SqliteJournal, chain_hash, export_json_lines,
};
use sallyport_core::outcome::Status;
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_tests::scripted::ScriptedChannel;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Read one item.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_item", effect = observe)]
#[channel(name = "test")]
struct GetItem {
    id: String,
}

/// Journal with `n` audited calls; returns the file path and the head.
pub(crate) async fn journal_with(dir: &Path, n: usize) -> (std::path::PathBuf, ChainHead) {
    let path = dir.join("journal.db");
    let (journal, executor) = approving_executor(
        &path,
        Catalog::builder()
            .action::<GetItem>()
            .build()
            .expect("catalog"),
    );
    let session = Session::new("s");
    for i in 0..n {
        let r = executor
            .call("get_item", json!({"id": format!("item_{i}")}), &session)
            .await;
        assert_eq!(r.status, Status::Completed);
    }
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, n as u64);
    (path, report.head)
}

async fn verify_file(path: &Path) -> sallyport_core::journal::VerifyReport {
    SqliteJournal::open(path)
        .expect("reopen")
        .verify()
        .await
        .expect("verify")
}

pub(crate) fn tamper(path: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.execute_batch(sql).expect("tamper");
}

#[tokio::test]
async fn an_edited_record_is_found_at_its_position() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = journal_with(dir.path(), 5).await;
    tamper(
        &path,
        r#"UPDATE audit SET event = replace(event, '"status":"completed"', '"status":"rejected"') WHERE seq = 3"#,
    );
    let report = verify_file(&path).await;
    let brk = report.first_break.expect("break");
    assert_eq!((brk.seq, brk.kind), (3, BreakKind::Edited));
}

#[tokio::test]
async fn a_deleted_record_is_found_where_the_gap_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = journal_with(dir.path(), 5).await;
    tamper(&path, "DELETE FROM audit WHERE seq = 2");
    let brk = verify_file(&path).await.first_break.expect("break");
    assert_eq!((brk.seq, brk.kind), (3, BreakKind::Deleted));
    assert_eq!(brk.detail, "expected record 2, found record 3");
}

#[tokio::test]
async fn an_inserted_record_is_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = journal_with(dir.path(), 4).await;
    // Shift records 3.. up by one and forge a record 3 that links to nothing real.
    let event = r#"{"receipt_id":"rcpt_forged","attempt_id":"att_forged","at":"2026-01-01T00:00:00Z","session_id":"s","action":"get_item","phase":"finished","status":"completed","dispatches":1}"#;
    let forged_hash = chain_hash("ab".repeat(32).as_str(), 3, event);
    tamper(
        &path,
        &format!(
            "UPDATE audit SET seq = seq + 100 WHERE seq >= 3;
             UPDATE audit SET seq = seq - 99 WHERE seq >= 100;
             INSERT INTO audit (seq, receipt_id, attempt_id, prev_hash, hash, event)
             VALUES (3, 'rcpt_forged', 'att_forged', '{}', '{forged_hash}', '{event}');",
            "ab".repeat(32)
        ),
    );
    let brk = verify_file(&path).await.first_break.expect("break");
    assert_eq!((brk.seq, brk.kind), (3, BreakKind::Inserted));
}

#[tokio::test]
async fn reordered_records_are_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = journal_with(dir.path(), 5).await;
    // Swap the contents of records 2 and 3, keeping the sequence numbers.
    tamper(
        &path,
        "UPDATE audit SET seq = 100 WHERE seq = 2;
         UPDATE audit SET seq = 2 WHERE seq = 3;
         UPDATE audit SET seq = 3 WHERE seq = 100;",
    );
    let brk = verify_file(&path).await.first_break.expect("break");
    assert_eq!((brk.seq, brk.kind), (2, BreakKind::Reordered));
}

#[tokio::test]
async fn truncation_is_found_by_comparing_with_an_exported_head() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, head) = journal_with(dir.path(), 5).await;
    // A clean cut takes the attempts of the cut records too (their rows alone would be
    // reported: attempts that claim an outcome no record gives).
    tamper(
        &path,
        "DELETE FROM audit WHERE seq >= 4; \
         DELETE FROM attempts WHERE attempt_id NOT IN (SELECT attempt_id FROM audit)",
    );
    let mut report = verify_file(&path).await;
    assert!(report.is_intact(), "a clean cut looks intact on its own");
    report.check_against(&head, None);
    let brk = report.first_break.expect("break");
    assert_eq!((brk.seq, brk.kind), (4, BreakKind::Deleted));
    assert_eq!(
        brk.detail,
        "chain holds 3 records but the exported head says 5: truncated"
    );
}

#[tokio::test]
async fn export_writes_one_json_line_per_record_with_chain_links() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, head) = journal_with(dir.path(), 3).await;
    let journal = SqliteJournal::open(&path).expect("journal");
    let mut out = Vec::new();
    let n = export_json_lines(&journal, &mut out).await.expect("export");
    assert_eq!(n, 3);
    let text = String::from_utf8(out).expect("utf8");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["seq"], 1);
    assert_eq!(lines[1]["prev_hash"], lines[0]["hash"]);
    assert_eq!(lines[2]["hash"], head.hash.as_str());
    assert_eq!(lines[2]["event"]["action"], "get_item");
}

#[tokio::test]
async fn a_corrupt_journal_file_is_reported_and_left_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&path, &garbage).expect("write");
    let err = SqliteJournal::open(&path).expect_err("corrupt");
    assert!(matches!(err, JournalError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("left untouched"), "{err}");
    assert_eq!(std::fs::read(&path).expect("read"), garbage);
}

#[tokio::test]
async fn a_foreign_sqlite_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("other.db");
    {
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('keep me');")
            .expect("create");
    }
    let before = std::fs::read(&path).expect("read");
    let err = SqliteJournal::open(&path).expect_err("foreign");
    assert!(matches!(err, JournalError::Corrupt { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).expect("read"), before);
}

#[tokio::test]
async fn a_journal_from_a_newer_format_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = journal_with(dir.path(), 1).await;
    tamper(&path, "PRAGMA user_version = 99");
    let err = SqliteJournal::open(&path).expect_err("newer");
    assert_eq!(
        err.to_string(),
        "journal format 99 is newer than this build understands (2)"
    );
}

/// Pay one invoice.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "pay_invoice", effect = external_commitment)]
#[channel(name = "test")]
struct PayInvoice {
    invoice_id: String,
}

/// An executor over `catalog` with a scripted channel, approving consent, journaling to `path`.
fn approving_executor(path: &Path, catalog: Catalog) -> (Arc<SqliteJournal>, Executor) {
    let journal = Arc::new(SqliteJournal::open(path).expect("journal"));
    let executor = Executor::builder(catalog)
        .journal_arc(journal.clone())
        .channel(ScriptedChannel::new())
        .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
        .build()
        .expect("executor");
    (journal, executor)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_mutating_calls_all_land_with_distinct_keys_and_an_intact_chain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    let (journal, executor) = approving_executor(
        &path,
        Catalog::builder()
            .action::<PayInvoice>()
            .build()
            .expect("catalog"),
    );
    let mut tasks = Vec::new();
    for i in 0..64 {
        let executor = executor.clone();
        tasks.push(tokio::spawn(async move {
            executor
                .call(
                    "pay_invoice",
                    json!({"invoice_id": format!("inv_{i}")}),
                    &Session::new("s"),
                )
                .await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.expect("join").status, Status::Completed);
    }
    let conn = rusqlite::Connection::open(&path).expect("open");
    let (n, keys): (i64, i64) = conn
        .query_row(
            "SELECT count(*), count(DISTINCT idempotency_key) FROM attempts WHERE phase = 'finished'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("count");
    assert_eq!((n, keys), (64, 64));
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact());
    assert_eq!(report.records, 64);
}

/// Observe calls write on the calling task, mutating calls' durable intents on the journal
/// thread, dispatch notes are queued without waiting: mixed and concurrent, every write lands
/// once, in order (no dispatch note reopens a finished attempt) and the chain stays intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_concurrent_calls_share_one_connection_without_losing_or_reordering_a_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    let (journal, executor) = approving_executor(
        &path,
        Catalog::builder()
            .action::<GetItem>()
            .action::<PayInvoice>()
            .build()
            .expect("catalog"),
    );
    let mut tasks = Vec::new();
    for i in 0..200 {
        let executor = executor.clone();
        tasks.push(tokio::spawn(async move {
            let (action, arguments) = if i % 2 == 0 {
                ("get_item", json!({"id": format!("item_{i}")}))
            } else {
                ("pay_invoice", json!({"invoice_id": format!("inv_{i}")}))
            };
            executor.call(action, arguments, &Session::new("s")).await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.expect("join").status, Status::Completed);
    }
    assert!(journal.unresolved().await.expect("unresolved").is_empty());
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 200);
    drop(executor);
    drop(journal);

    // Another connection sees every attempt finished, each mutating one sent exactly once.
    let conn = rusqlite::Connection::open(&path).expect("open");
    let rows: Vec<(String, String, i64)> = conn
        .prepare("SELECT effect, phase, dispatches FROM attempts")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(rows.len(), 200);
    assert!(
        rows.iter().all(|(_, phase, _)| phase == "finished"),
        "{rows:?}"
    );
    assert!(
        rows.iter()
            .all(|(effect, _, sent)| *sent == 1 || effect == "observe"),
        "{rows:?}"
    );
    assert!(verify_file(&path).await.is_intact());
}

/// The journal thread checkpoints as calls go on (no commit does): the WAL is copied into
/// the database and started over, so it stays a few megabytes instead of growing with every
/// call. A checkpoint made only beside the writer, never with its writes held, always lags
/// them, and SQLite then never starts the WAL over: this test saw it reach 40 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_is_checkpointed_as_calls_go_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, head) = journal_with(dir.path(), 2_000).await;
    let wal = std::fs::metadata(path.with_extension("db-wal")).map_or(0, |m| m.len());
    let db = std::fs::metadata(&path).expect("db").len();
    // Without checkpoints 2,000 calls leave ~5 WAL pages each (about 40 MB) and the database
    // file stays at its first few pages.
    assert!(wal < 8 << 20, "WAL is {wal} bytes");
    assert!(
        db > 256 << 10,
        "database is {db} bytes: nothing was checkpointed"
    );
    assert_eq!(head.count, 2_000);
}

/// `n` audited calls, one at a time, into a journal that signs its head with `key`.
async fn signed_journal_with(dir: &Path, key: HeadSigningKey, n: usize) -> std::path::PathBuf {
    let path = dir.join("journal.db");
    let journal = Arc::new(
        SqliteJournal::builder(&path)
            .signing_key(key)
            .open()
            .expect("journal"),
    );
    let executor = Executor::builder(
        Catalog::builder()
            .action::<GetItem>()
            .build()
            .expect("catalog"),
    )
    .journal_arc(journal.clone())
    .channel(ScriptedChannel::new())
    .consent(FnConsent::new(|_| async { ConsentDecision::Approve }))
    .build()
    .expect("executor");
    let session = Session::new("s");
    for i in 0..n {
        let r = executor
            .call("get_item", json!({"id": format!("item_{i}")}), &session)
            .await;
        assert_eq!(r.status, Status::Completed);
    }
    path
}

/// What an attacker who can write the file but holds no key does: changes records `from..`
/// and recomputes every hash after them, so the unkeyed chain links up again.
pub(crate) fn rewrite_and_rehash_from(path: &Path, from: i64) {
    let conn = rusqlite::Connection::open(path).expect("open");
    let rows: Vec<(i64, String)> = conn
        .prepare("SELECT seq, event FROM audit ORDER BY seq")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    let mut prev: String = if from == 1 {
        sallyport_core::journal::GENESIS_HASH.to_owned()
    } else {
        conn.query_row("SELECT hash FROM audit WHERE seq = ?1", [from - 1], |r| {
            r.get(0)
        })
        .expect("prev")
    };
    for (seq, event) in rows.into_iter().filter(|(seq, _)| *seq >= from) {
        let event = event.replace(r#""session_id":"s""#, r#""session_id":"forged""#);
        assert!(event.contains("forged"), "{event}");
        let hash = chain_hash(&prev, seq as u64, &event);
        conn.execute(
            "UPDATE audit SET event = ?2, prev_hash = ?3, hash = ?4 WHERE seq = ?1",
            rusqlite::params![seq, event, prev, hash],
        )
        .expect("rewrite");
        prev = hash;
    }
}

#[tokio::test]
async fn a_signed_journal_verifies_with_its_public_key_through_its_last_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = HeadSigningKey::generate().expect("key");
    let public = key.verifying_key();
    let path = signed_journal_with(dir.path(), key, 3).await;
    let journal = SqliteJournal::open(&path).expect("reopen");
    let report = journal.verify_signed(&public).await.expect("verify");
    assert_eq!(report.first_break, None, "{report:?}");
    assert_eq!((report.records, report.last_signed), (3, Some(3)));
    // One signed head per batch: one call at a time, one head each.
    let heads = journal.signed_heads().await.expect("heads");
    assert_eq!(heads.iter().map(|h| h.count).collect::<Vec<_>>(), [1, 2, 3]);
    assert!(heads.iter().all(|h| h.key_id == public.key_id()));
}

#[tokio::test]
async fn a_wrong_public_key_verifies_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = HeadSigningKey::generate().expect("key");
    let path = signed_journal_with(dir.path(), key, 2).await;
    let other = HeadSigningKey::generate().expect("key").verifying_key();
    let report = SqliteJournal::open(&path)
        .expect("reopen")
        .verify_signed(&other)
        .await
        .expect("verify");
    let brk = report.first_break.expect("a wrong key must not pass");
    assert_eq!(
        (brk.seq, brk.kind, report.last_signed),
        (1, BreakKind::Unsigned, None)
    );
    assert_eq!(
        brk.detail,
        format!(
            "no head in this journal is signed by key {} (2 signed by other keys): records 1 to 2 are not covered by a signature",
            other.key_id()
        )
    );
}

#[tokio::test]
async fn records_rewritten_and_rehashed_after_a_signed_head_are_reported_with_the_last_signed_position()
 {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = HeadSigningKey::generate().expect("key");
    let public = key.verifying_key();
    let path = signed_journal_with(dir.path(), key, 5).await;
    rewrite_and_rehash_from(&path, 3);
    // Without the key, the rewrite is invisible: that is what the signature is for.
    assert!(verify_file(&path).await.is_intact());

    // The heads signed at records 3, 4 and 5 no longer match.
    let journal = SqliteJournal::open(&path).expect("reopen");
    let report = journal.verify_signed(&public).await.expect("verify");
    let brk = report.first_break.expect("rewrite found");
    assert_eq!(
        (brk.seq, brk.kind, report.last_signed),
        (3, BreakKind::HeadMismatch, Some(2))
    );
    drop(journal);

    // The attacker also deletes those heads: records 3 to 5 are now simply unsigned.
    tamper(&path, "DELETE FROM heads WHERE count > 2");
    let report = SqliteJournal::open(&path)
        .expect("reopen")
        .verify_signed(&public)
        .await
        .expect("verify");
    let brk = report.first_break.expect("rewrite found");
    assert_eq!(
        (brk.seq, brk.kind, report.last_signed),
        (3, BreakKind::Unsigned, Some(2))
    );
    assert_eq!(
        brk.detail,
        format!(
            "records 3 to 5 come after the last head signed by key {} (record 2): they may have been rewritten or added without the key",
            public.key_id()
        )
    );
}

#[tokio::test]
async fn a_head_whose_signature_was_replaced_is_reported_as_a_bad_signature() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = HeadSigningKey::generate().expect("key");
    let public = key.verifying_key();
    let path = signed_journal_with(dir.path(), key, 3).await;
    // Record 3 rewritten, and its head re-pointed at the new hash with the old signature.
    rewrite_and_rehash_from(&path, 3);
    tamper(
        &path,
        "UPDATE heads SET hash = (SELECT hash FROM audit WHERE seq = 3) WHERE count = 3",
    );
    let report = SqliteJournal::open(&path)
        .expect("reopen")
        .verify_signed(&public)
        .await
        .expect("verify");
    let brk = report.first_break.expect("forgery found");
    assert_eq!(
        (brk.seq, brk.kind, report.last_signed),
        (3, BreakKind::BadSignature, Some(2))
    );
}

/// Leaves a mutating call between dispatch and outcome, as a killed process would.
async fn crashed_after_dispatch(path: &Path) -> String {
    let journal = SqliteJournal::open(path).expect("journal");
    let intent = Intent::for_bench(true);
    journal.write_intent(&intent).await.expect("intent");
    journal.note_dispatch(&intent.attempt_id, 1);
    // Reads are answered after every write queued before them.
    assert_eq!(journal.unresolved().await.expect("unresolved").len(), 1);
    intent.attempt_id.as_str().to_owned()
}

#[tokio::test]
async fn an_unresolved_attempt_marked_finished_by_hand_is_reported_and_stays_unresolved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = journal_with(dir.path(), 2).await;
    let attempt = crashed_after_dispatch(&path).await;
    tamper(
        &path,
        "UPDATE attempts SET phase = 'finished', status = 'completed' WHERE phase = 'dispatched'",
    );
    let journal = SqliteJournal::open(&path).expect("reopen");
    let unresolved = journal.unresolved().await.expect("unresolved");
    assert_eq!(
        unresolved
            .iter()
            .map(|u| (u.attempt_id.as_str(), u.phase, u.dispatches))
            .collect::<Vec<_>>(),
        [(attempt.as_str(), Phase::Dispatched, 1)]
    );
    let report = journal.verify().await.expect("verify");
    let brk = report.first_break.expect("edit found");
    assert_eq!(
        (brk.seq, brk.kind, brk.attempt.as_ref().map(|a| a.as_str())),
        (0, BreakKind::AttemptEdited, Some(attempt.as_str()))
    );
    assert_eq!(
        brk.detail,
        format!(
            "attempt {attempt} is stored as finished but no audit record closes it: it is unresolved"
        )
    );
}

#[tokio::test]
async fn an_edited_phase_of_a_finished_attempt_is_reported_at_its_audit_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = journal_with(dir.path(), 3).await;
    let attempt: String = rusqlite::Connection::open(&path)
        .expect("open")
        .query_row("SELECT attempt_id FROM audit WHERE seq = 2", [], |r| {
            r.get(0)
        })
        .expect("attempt");
    tamper(
        &path,
        &format!("UPDATE attempts SET status = 'rejected' WHERE attempt_id = '{attempt}'"),
    );
    let brk = verify_file(&path).await.first_break.expect("edit found");
    assert_eq!(
        (
            brk.seq,
            brk.kind,
            brk.attempt.map(|a| a.as_str().to_owned())
        ),
        (2, BreakKind::AttemptEdited, Some(attempt.clone()))
    );
    assert_eq!(
        brk.detail,
        format!(
            "attempt {attempt} is stored as finished (rejected) but audit record 2 closed it as finished (completed)"
        )
    );
}

#[cfg(unix)]
#[tokio::test]
async fn the_journal_and_its_wal_and_shm_files_are_mode_0600() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    let mode = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        std::fs::metadata(&name)
            .unwrap_or_else(|e| panic!("{suffix}: {e}"))
            .permissions()
            .mode()
            & 0o777
    };
    // Checked while the journal that created the files is still open and written to: SQLite
    // removes `-wal` and `-shm` when the last connection closes.
    let journal = SqliteJournal::open(&path).expect("journal");
    journal
        .write_intent(&Intent::for_bench(true))
        .await
        .expect("intent");
    assert_eq!(
        (mode(""), mode("-wal"), mode("-shm")),
        (0o600, 0o600, 0o600)
    );
    drop(journal);

    // Files an older build left readable are restricted when the journal is opened.
    let reader = rusqlite::Connection::open(&path).expect("hold the WAL open");
    reader
        .query_row("SELECT count(*) FROM attempts", [], |r| r.get::<_, i64>(0))
        .expect("read");
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        std::fs::set_permissions(&name, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    let _journal = SqliteJournal::open(&path).expect("reopen");
    assert_eq!(
        (mode(""), mode("-wal"), mode("-shm")),
        (0o600, 0o600, 0o600)
    );
}

#[tokio::test]
async fn the_signing_key_reaches_neither_the_journal_files_nor_debug_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key_file = dir.path().join("head.key");
    let key = HeadSigningKey::generate().expect("key");
    key.write_new(&key_file).expect("write key");
    let b64 = std::fs::read_to_string(&key_file)
        .expect("read key")
        .trim()
        .rsplit(' ')
        .next()
        .expect("seed")
        .to_owned();
    let seed =
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &b64).expect("base64");
    let builder = SqliteJournal::builder(dir.path().join("j.db"))
        .signing_key(HeadSigningKey::read_file(&key_file).expect("read key"));
    let shown = format!("{builder:?}");
    let path = signed_journal_with(dir.path(), key, 3).await;
    let mut bytes = std::fs::read(&path).expect("db");
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    bytes.extend(std::fs::read(&wal).unwrap_or_default());
    for form in [
        seed.clone(),
        b64.clone().into_bytes(),
        hex::encode(&seed).into_bytes(),
        hex::encode_upper(&seed).into_bytes(),
    ] {
        assert!(
            !bytes.windows(form.len()).any(|w| w == form.as_slice()),
            "the journal holds the key"
        );
        assert!(
            !shown
                .as_bytes()
                .windows(form.len())
                .any(|w| w == form.as_slice())
        );
    }
    assert!(shown.contains("HeadSigningKey { key_id: "), "{shown}");
}

#[tokio::test]
async fn a_journal_written_without_a_key_is_signed_from_its_first_batch_under_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, head) = journal_with(dir.path(), 2).await;
    let key = HeadSigningKey::generate().expect("key");
    let public = key.verifying_key();
    let journal = SqliteJournal::builder(&path)
        .signing_key(key)
        .open()
        .expect("opens with a key");
    // Unsigned until the first batch under the key, which covers the older records too.
    let report = journal.verify_signed(&public).await.expect("verify");
    assert_eq!(
        (
            report.first_break.map(|b| (b.seq, b.kind)),
            report.last_signed
        ),
        (Some((1, BreakKind::Unsigned)), None)
    );
    let event = journal.records().await.expect("records").remove(0).event;
    journal.append(event).await.expect("append");
    let report = journal.verify_signed(&public).await.expect("verify");
    assert_eq!(report.first_break, None, "{report:?}");
    assert_eq!(
        (report.records, report.last_signed),
        (head.count + 1, Some(3))
    );
}

/// The stored `(phase, status, dispatches)` of one attempt row, read by another connection.
fn attempt_row(path: &Path, attempt: &str) -> Option<(String, Option<String>, i64)> {
    rusqlite::Connection::open(path)
        .expect("open")
        .query_row(
            "SELECT phase, status, dispatches FROM attempts WHERE attempt_id = ?1",
            [attempt],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .ok()
}

#[tokio::test]
async fn an_observe_record_written_with_its_intent_closes_its_attempt_and_verifies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    let journal = SqliteJournal::open(&path).expect("journal");
    let intent = Intent::for_bench(false);
    let mut event = AuditEvent::for_bench(&intent);
    event.dispatches = 2;
    let record = journal
        .append_with_intent(intent.clone(), event.clone())
        .await
        .expect("written");
    assert_eq!((record.seq, record.event.clone()), (1, event.clone()));
    assert_eq!(
        attempt_row(&path, intent.attempt_id.as_str()),
        Some(("finished".to_owned(), Some("completed".to_owned()), 2))
    );
    let report = journal.verify().await.expect("verify");
    assert_eq!(report.first_break, None);
    assert_eq!(report.records, 1);
    assert_eq!(journal.unresolved().await.expect("unresolved"), Vec::new());
    let records = journal.records().await.expect("records");
    assert_eq!(records, vec![record]);
    drop(journal);

    // The row is covered by the chain like any other: an edit of it is found at its record.
    tamper(
        &path,
        "UPDATE attempts SET status = 'rejected' WHERE phase = 'finished'",
    );
    let brk = verify_file(&path).await.first_break.expect("a break");
    assert_eq!((brk.seq, brk.kind), (1, BreakKind::AttemptEdited));
    assert_eq!(brk.attempt, Some(intent.attempt_id));
}

#[tokio::test]
async fn an_observe_record_that_cannot_be_written_leaves_neither_its_attempt_nor_its_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    let journal = SqliteJournal::open(&path).expect("journal");
    let first = Intent::for_bench(false);
    journal
        .append_with_intent(first.clone(), AuditEvent::for_bench(&first))
        .await
        .expect("first written");

    // A key already recorded: the attempt row is refused, so no record is chained.
    let mut clash = Intent::for_bench(false);
    clash.idempotency_key = first.idempotency_key.clone();
    let err = journal
        .append_with_intent(clash.clone(), AuditEvent::for_bench(&clash))
        .await
        .expect_err("duplicate key");
    assert!(matches!(err, JournalError::DuplicateKey), "{err:?}");
    assert_eq!(attempt_row(&path, clash.attempt_id.as_str()), None);

    // The record is refused after the attempt row went in: the row goes too.
    let doomed = Intent::for_bench(false);
    tamper(
        &path,
        &format!(
            "CREATE TRIGGER refuse BEFORE INSERT ON audit WHEN NEW.attempt_id = '{}' \
             BEGIN SELECT RAISE(ABORT, 'refused'); END",
            doomed.attempt_id
        ),
    );
    let err = journal
        .append_with_intent(doomed.clone(), AuditEvent::for_bench(&doomed))
        .await
        .expect_err("audit insert refused");
    assert!(matches!(err, JournalError::Write(_)), "{err:?}");
    assert_eq!(err.to_string(), "journal write failed");
    assert_eq!(attempt_row(&path, doomed.attempt_id.as_str()), None);

    let report = journal.verify().await.expect("verify");
    assert_eq!(report.first_break, None);
    assert_eq!(report.records, 1);
    assert_eq!(journal.unresolved().await.expect("unresolved"), Vec::new());
}

/// Many tasks writing observe records (and a few durable ones) at once: every one lands
/// once, with its attempt closed, in one intact chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_observe_records_written_with_their_intents_all_land_in_one_chain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    let journal = Arc::new(SqliteJournal::open(&path).expect("journal"));
    let mut tasks = Vec::new();
    for i in 0..200 {
        let journal = Arc::clone(&journal);
        tasks.push(tokio::spawn(async move {
            let intent = Intent::for_bench(i % 10 == 0);
            let record = journal
                .append_with_intent(intent.clone(), AuditEvent::for_bench(&intent))
                .await
                .expect("written");
            (intent.attempt_id, record.seq)
        }));
    }
    let mut seqs = Vec::new();
    let mut attempts = Vec::new();
    for t in tasks {
        let (attempt, seq) = t.await.expect("join");
        attempts.push(attempt);
        seqs.push(seq);
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=200).collect::<Vec<u64>>(), "one position each");
    let report = journal.verify().await.expect("verify");
    assert_eq!(report.first_break, None);
    assert_eq!(report.records, 200);
    assert_eq!(journal.unresolved().await.expect("unresolved"), Vec::new());
    let records = journal.records().await.expect("records");
    for attempt in &attempts {
        assert_eq!(
            records
                .iter()
                .filter(|r| &r.event.attempt_id == attempt)
                .count(),
            1,
            "{attempt}"
        );
    }
    let closed: i64 = rusqlite::Connection::open(&path)
        .expect("open")
        .query_row(
            "SELECT count(*) FROM attempts WHERE phase = 'finished' AND status = 'completed' AND dispatches = 1",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(closed, 200);
}

/// Builds before the spelling was unified wrote `unknown` to the attempt row of a call
/// dropped after sending (the audit JSON always said `cancelled_unknown`). Such a journal
/// still opens, verifies and lists; new rows say `cancelled_unknown`.
#[tokio::test]
async fn a_cancelled_unknown_attempt_stored_as_unknown_by_an_older_build_still_verifies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    let journal = SqliteJournal::open(&path).expect("journal");
    let mut dropped = Vec::new();
    for _ in 0..2 {
        let intent = Intent::for_bench(true);
        journal.write_intent(&intent).await.expect("intent");
        let mut event = AuditEvent::for_bench(&intent);
        event.phase = Phase::CancelledUnknown;
        event.status = Status::Unknown;
        journal.append(event).await.expect("appended");
        dropped.push(intent.attempt_id);
    }
    let finished = Intent::for_bench(false);
    journal
        .append_with_intent(finished.clone(), AuditEvent::for_bench(&finished))
        .await
        .expect("written");
    drop(journal);
    assert_eq!(
        attempt_row(&path, dropped[0].as_str()).map(|r| r.0),
        Some("cancelled_unknown".to_owned())
    );
    // One row as an older build left it.
    tamper(
        &path,
        &format!(
            "UPDATE attempts SET phase = 'unknown' WHERE attempt_id = '{}'",
            dropped[0]
        ),
    );

    let journal = SqliteJournal::open(&path).expect("reopen");
    let report = journal.verify().await.expect("verify");
    assert_eq!(report.first_break, None);
    assert_eq!(report.records, 3);
    assert_eq!(journal.unresolved().await.expect("unresolved"), Vec::new());
    let records = journal.records().await.expect("records");
    let phases: Vec<Phase> = records.iter().map(|r| r.event.phase).collect();
    assert_eq!(
        phases,
        [
            Phase::CancelledUnknown,
            Phase::CancelledUnknown,
            Phase::Finished
        ]
    );
    let mut out = Vec::new();
    export_json_lines(&journal, &mut out).await.expect("export");
    let text = String::from_utf8(out).expect("utf-8");
    assert_eq!(text.matches("\"phase\":\"cancelled_unknown\"").count(), 2);
    drop(journal);

    // The old spelling is still checked: a finished attempt edited to `unknown` is caught.
    tamper(
        &path,
        &format!(
            "UPDATE attempts SET phase = 'unknown' WHERE attempt_id = '{}'",
            finished.attempt_id
        ),
    );
    let brk = verify_file(&path).await.first_break.expect("a break");
    assert_eq!((brk.seq, brk.kind), (3, BreakKind::AttemptEdited));
}
