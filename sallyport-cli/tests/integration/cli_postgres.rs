//! `sallyport audit …` and `sallyport approvals …` as a real process with `--journal
//! postgres://…`, against a fresh database on the machine's real PostgreSQL server.

use std::process::{Command, Output};

use sallyport_core::approval::{
    Approval, ApprovalId, ApprovalState, ApprovalStep, Decider, Verdict,
};
use sallyport_core::journal::{ApprovalStore, AttemptId, AuditEvent, Intent, Journal};
use sallyport_postgres::PostgresJournal;
use sallyport_testkit::conformance::parked_event;
use sallyport_tests::postgres::TestDb;
use serde_json::json;

/// A password the server never asks for (the socket trusts `root`): it rides in every URL
/// these tests pass, so any output that echoes the URL would show it.
const PASSWORD: &str = "pw-Zq81-never-printed";

const HOUR_MS: u64 = 3_600_000;

fn run(journal: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sallyport"))
        .arg("--journal")
        .arg(journal)
        .args(args)
        .env_remove("SALLYPORT_VAULT")
        .env_remove("SALLYPORT_JOURNAL")
        .env("USER", "tester")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Fails if the password is anywhere in what the process wrote.
fn no_password(out: &Output) {
    for (name, stream) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        assert!(
            !text(stream).contains(PASSWORD),
            "the password is in {name}: {}",
            text(stream)
        );
    }
}

/// The test database as a `postgres://` URL carrying [`PASSWORD`]: `SALLYPORT_PG_URL` as it
/// is when it is already a URL, else the key-value string's socket and user as a URL.
pub(crate) fn url_of(db: &TestDb) -> String {
    if db.url.starts_with("postgres://") || db.url.starts_with("postgresql://") {
        return db.url.clone();
    }
    let value = |key: &str| {
        db.url
            .split_whitespace()
            .filter_map(|pair| pair.split_once('='))
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v.to_owned())
            .next_back()
    };
    let host = value("host").unwrap_or_else(|| "/var/run/postgresql".to_owned());
    let user = value("user").unwrap_or_else(|| "root".to_owned());
    let port = value("port").map(|p| format!(":{p}")).unwrap_or_default();
    let host = host.replace('/', "%2F");
    format!("postgresql://{user}:{PASSWORD}@{host}{port}/{}", db.name)
}

/// Three finished calls and one left in flight, written through the journal's API.
async fn journal_with_records(url: &str) -> (PostgresJournal, Vec<String>) {
    let journal = PostgresJournal::connect(url).await.unwrap();
    let mut hashes = Vec::new();
    for _ in 0..3 {
        let intent = Intent::for_bench(true);
        journal.write_intent(&intent).await.unwrap();
        let record = journal
            .append(AuditEvent::for_bench(&intent))
            .await
            .unwrap();
        hashes.push(record.hash);
    }
    let mut in_flight = Intent::for_bench(true);
    in_flight.action = "pay_invoice".to_owned();
    journal.write_intent(&in_flight).await.unwrap();
    (journal, hashes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_verify_export_and_unresolved_read_a_postgres_journal_and_never_print_the_password() {
    let db = TestDb::create().await;
    let url = url_of(&db);
    let (journal, hashes) = journal_with_records(&url).await;

    let verify = run(&url, &["audit", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify.stderr));
    assert_eq!(
        text(&verify.stdout),
        format!("intact: 3 records, head {}\n", hashes[2])
    );
    no_password(&verify);

    let export = run(&url, &["audit", "export"]);
    assert_eq!(export.status.code(), Some(0), "{}", text(&export.stderr));
    assert_eq!(text(&export.stderr), "exported 3 records\n");
    let lines: Vec<serde_json::Value> = text(&export.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines
            .iter()
            .map(|l| l["hash"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>(),
        hashes
    );
    no_password(&export);

    let unresolved = run(&url, &["audit", "unresolved", "--json"]);
    assert_eq!(
        unresolved.status.code(),
        Some(0),
        "{}",
        text(&unresolved.stderr)
    );
    let list: serde_json::Value = serde_json::from_slice(&unresolved.stdout).unwrap();
    let actions: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["pay_invoice"]);
    no_password(&unresolved);

    // An edited record is found by the same command: exit 8, naming the record.
    db.sql()
        .await
        .execute(
            "UPDATE sallyport_audit SET event = replace(event, '\"bench\"', '\"edited\"') \
             WHERE seq = 2",
            &[],
        )
        .await
        .unwrap();
    let broken = run(&url, &["audit", "verify"]);
    assert_eq!(broken.status.code(), Some(8), "{}", text(&broken.stderr));
    assert!(
        text(&broken.stderr).starts_with("sallyport: audit chain broken at record 2 "),
        "{}",
        text(&broken.stderr)
    );
    no_password(&broken);
    drop(journal);
}

/// A parked `pay_invoice` call as the executor stores it.
fn parked(invoice: &str) -> Approval {
    let now = sallyport_core::clock::now_ms();
    serde_json::from_value(json!({
        "approval_id": ApprovalId::generate(),
        "attempt_id": AttemptId::generate(),
        "action": "pay_invoice",
        "summary": "Pay one invoice.",
        "effect": "external_commitment",
        "externality": "external",
        "rule": "per_call",
        "session": {"id": "s-cli", "requester": "alice@example.com"},
        "objects": [{"kind": "invoice", "field": "invoice_id", "value": invoice}],
        "note": "month end",
        "request": format!("POST http://127.0.0.1:9/v1/invoices/{invoice}/pay"),
        "fingerprint": "ab".repeat(32),
        "definition_hash": "cd".repeat(32),
        "definition_status": "matches the approved baseline",
        "arguments": {"invoice_id": invoice},
        "created_at_ms": now,
        "expires_at_ms": now + 24 * HOUR_MS,
        "state": "awaiting",
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_list_and_approve_decide_a_call_parked_in_postgres_once() {
    let db = TestDb::create().await;
    let url = url_of(&db);
    let journal = PostgresJournal::connect(&url).await.unwrap();
    let call = parked("inv_77");
    journal
        .park_approval(&call, parked_event(&call))
        .await
        .unwrap();
    let id = call.approval_id.as_str();

    let list = run(&url, &["approvals", "list", "--json"]);
    assert_eq!(list.status.code(), Some(0), "{}", text(&list.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["approval_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id]);
    no_password(&list);

    let approve = run(&url, &["approvals", "approve", id, "--by", "alice"]);
    assert_eq!(approve.status.code(), Some(0), "{}", text(&approve.stderr));
    assert!(
        text(&approve.stdout).starts_with(&format!("approved {id}: recorded by alice via cli;")),
        "{}",
        text(&approve.stdout)
    );
    no_password(&approve);

    // Every process sees the decision: this one reads it from the server.
    let stored = journal.approval(&call.approval_id).await.unwrap().unwrap();
    assert_eq!(stored.state, ApprovalState::Approved);
    let decision = stored.decision.clone().unwrap();
    assert_eq!(decision.verdict, Verdict::Approve);
    assert_eq!(decision.decider, Decider::new("alice", "cli"));
    let records = journal.records().await.unwrap();
    let steps: Vec<ApprovalStep> = records
        .iter()
        .filter_map(|r| r.event.approval.as_ref().map(|n| n.step))
        .collect();
    assert_eq!(steps, [ApprovalStep::Requested, ApprovalStep::Approved]);

    let again = run(&url, &["approvals", "deny", id, "--reason", "no"]);
    assert_eq!(again.status.code(), Some(9), "{}", text(&again.stderr));
    assert_eq!(journal.records().await.unwrap().len(), records.len());
    no_password(&again);
}

#[test]
fn an_unreachable_server_exits_1_naming_the_host_without_the_password() {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    for scheme in ["postgres", "postgresql"] {
        let url = format!("{scheme}://app:{PASSWORD}@127.0.0.1:1/sallyport?application_name=cli");
        for args in [&["audit", "verify"][..], &["approvals", "list"][..]] {
            let out = run(&url, args);
            assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
            let stderr = text(&out.stderr);
            assert!(stderr.starts_with("sallyport: "), "{stderr}");
            assert!(stderr.contains("127.0.0.1"), "{stderr}");
            assert_eq!(text(&out.stdout), "");
            no_password(&out);
        }
    }
}

#[test]
fn a_file_named_like_a_url_is_still_a_file_and_a_missing_one_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    // `postgres:/x` is not a URL (one slash): a relative path, looked up as a file.
    let out = Command::new(env!("CARGO_BIN_EXE_sallyport"))
        .current_dir(dir.path())
        .args(["--journal", "postgres:/x", "audit", "verify"])
        .env_remove("SALLYPORT_JOURNAL")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "sallyport: no journal at postgres:/x\n");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_seal_on_a_postgres_journal_prunes_keeps_the_in_flight_attempt_and_verifies() {
    let db = TestDb::create().await;
    let url = url_of(&db);
    let (journal, hashes) = journal_with_records(&url).await;
    let dir = tempfile::tempdir().unwrap();
    let (secret, public) = super::cli_audit::keygen(dir.path(), "journal.key");
    let out_file = dir.path().join("sealed.jsonl");

    let seal = run(
        &url,
        &[
            "audit",
            "seal",
            "--signing-key",
            secret.to_str().unwrap(),
            "--out",
            out_file.to_str().unwrap(),
        ],
    );
    assert_eq!(seal.status.code(), Some(0), "{}", text(&seal.stderr));
    assert!(
        text(&seal.stdout).starts_with("sealed records 1 to 3 of shard `default` ")
            && text(&seal.stdout).ends_with(", 3 records pruned\n"),
        "{}",
        text(&seal.stdout)
    );
    no_password(&seal);
    assert!(journal.records().await.unwrap().is_empty());
    // The attempt still in flight had no record: it stays, unresolved, for the reconciler.
    let open: Vec<String> = journal
        .unresolved()
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.action)
        .collect();
    assert_eq!(open, ["pay_invoice"]);

    let verify = run(
        &url,
        &["audit", "verify", "--public-key", public.to_str().unwrap()],
    );
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify.stderr));
    assert_eq!(
        text(&verify.stdout),
        format!(
            "intact: 3 records, head {}, signed through record 3\n",
            hashes[2]
        )
    );
    let check = Command::new(env!("CARGO_BIN_EXE_sallyport"))
        .current_dir(dir.path())
        .env_remove("SALLYPORT_JOURNAL")
        .args(["audit", "check-export"])
        .arg(&out_file)
        .arg("--public-key")
        .arg(&public)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stderr));
}

/// Two executors' journals on shards `default` and `eu` of one database: `audit verify`
/// reports both and checks one alone with `--shard`, `audit checkpoint` signs both heads,
/// `audit prove` proves a record of `eu` (the proof checked with the public key alone), and
/// a record of `eu` edited in the database fails `eu` and the whole, not `default`.
#[tokio::test]
async fn audit_verify_checkpoint_and_prove_work_shard_by_shard_on_postgres() {
    let db = TestDb::create().await;
    let url = url_of(&db);
    let dir = tempfile::tempdir().unwrap();
    let (secret, public) = super::cli_audit::keygen(dir.path(), "journal.key");
    let mut receipts = Vec::new();
    for (shard, n) in [("default", 3), ("eu", 5)] {
        let journal = PostgresJournal::builder(&url)
            .audit_shard(shard)
            .connect()
            .await
            .unwrap();
        for _ in 0..n {
            let intent = Intent::for_bench(true);
            journal.write_intent(&intent).await.unwrap();
            let record = journal
                .append(AuditEvent::for_bench(&intent))
                .await
                .unwrap();
            receipts.push((
                record.shard,
                record.seq,
                record.event.receipt_id.to_string(),
            ));
        }
    }

    let out = run(&url, &["audit", "verify"]);
    no_password(&out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.starts_with("intact: 8 records in 2 shards\n"),
        "{said}"
    );
    assert!(
        said.contains("  shard `default`: 3 records, head "),
        "{said}"
    );
    assert!(said.contains("  shard `eu`: 5 records, head "), "{said}");

    let out = run(
        &url,
        &[
            "audit",
            "checkpoint",
            "--signing-key",
            secret.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(": 8 records in 2 shards, root "),
        "{}",
        text(&out.stdout)
    );

    let signed = run(
        &url,
        &[
            "audit",
            "verify",
            "--shard",
            "eu",
            "--public-key",
            public.to_str().unwrap(),
        ],
    );
    assert_eq!(signed.status.code(), Some(0), "{}", text(&signed.stderr));
    assert!(
        text(&signed.stdout).starts_with("intact: shard `eu`: 5 records, head "),
        "{}",
        text(&signed.stdout)
    );
    assert!(text(&signed.stdout).contains("signed through record 5"));

    // The fourth record of `eu`, proven from the journal and checked with the key alone.
    let (_, _, receipt) = receipts
        .iter()
        .find(|(s, q, _)| s == "eu" && *q == 4)
        .unwrap();
    let proof = dir.path().join("eu-4.proof");
    let out = run(
        &url,
        &["audit", "prove", receipt, "-o", proof.to_str().unwrap()],
    );
    no_password(&out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&proof).unwrap()).unwrap();
    assert_eq!(
        (written["shard"].as_str(), written["record"]["seq"].as_u64()),
        (Some("eu"), Some(4))
    );
    let out = run(
        &url,
        &[
            "audit",
            "check-proof",
            proof.to_str().unwrap(),
            "--public-key",
            public.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // A shard the journal does not hold is not found; an edit in `eu` fails `eu` only.
    let out = run(&url, &["audit", "verify", "--shard", "us"]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no record in shard `us`"),
        "{}",
        text(&out.stderr)
    );
    sallyport_tests::postgres::client(&db.url)
        .await
        .execute(
            "UPDATE sallyport_audit SET event = replace(event, '\"bench\"', '\"forged\"') \
             WHERE shard = 'eu' AND seq = 2",
            &[],
        )
        .await
        .unwrap();
    let out = run(&url, &["audit", "verify", "--shard", "default"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for args in [
        &["audit", "verify", "--shard", "eu"][..],
        &["audit", "verify"][..],
    ] {
        let out = run(&url, args);
        assert_eq!(
            out.status.code(),
            Some(8),
            "{args:?}: {}",
            text(&out.stdout)
        );
        assert!(
            text(&out.stderr).contains("audit chain broken at record 2 of shard `eu` (edited)"),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}
