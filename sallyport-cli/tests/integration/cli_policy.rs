//! `sallyport policy shadow-report` as a real process over a real SQLite journal written by
//! an executor with a candidate policy in shadow (`sallyport_tests::shadow_rig`: a real
//! HTTP upstream, an enforced allow-all policy, a candidate that would deny `delete_item`).

use std::path::Path;
use std::process::{Command, Output};

use sallyport_tests::shadow_rig::{Recording, Rule, ShadowRig};
use serde_json::{Value, json};

fn run(journal: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sallyport"))
        .arg("--journal")
        .arg(journal)
        .args(args)
        .env_remove("SALLYPORT_VAULT")
        .env_remove("SALLYPORT_JOURNAL")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn report(journal: &Path, args: &[&str]) -> Value {
    let mut all = vec!["policy", "shadow-report", "--json"];
    all.extend_from_slice(args);
    let out = run(journal, &all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

/// The rows of one grouping, as `[key, calls, flips]`.
fn rows(report: &Value, group: &str) -> Value {
    Value::Array(
        report[group]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| json!([r["key"], r["calls"], r["flips"]]))
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_report_counts_calls_and_flips_by_rule_action_and_session() {
    let rig = ShadowRig::start(
        Recording::new("allow-all", Rule::AllowAll),
        Some(Recording::new("no-deletes", Rule::NoDeletes) as _),
        false,
    )
    .await;
    let results = rig.run_script().await;
    assert_eq!(results.len(), 7);
    assert_eq!(rig.upstream.requests(), 7);
    let journal = rig.journal.clone();

    let all = report(&journal, &[]);
    assert_eq!(all["calls"], 7);
    assert_eq!(all["flips"], 3);
    assert_eq!(all["failed"], 0);
    assert_eq!(all["candidates"], json!(["no-deletes"]));
    assert_eq!(all["since"], Value::Null);
    assert_eq!(
        rows(&all, "by_rule"),
        json!([["no-delete", 3, 3], ["anyone", 4, 0]])
    );
    assert_eq!(
        rows(&all, "by_action"),
        json!([
            ["delete_item", 3, 3],
            ["get_item", 3, 0],
            ["update_item", 1, 0]
        ])
    );
    assert_eq!(
        rows(&all, "by_session"),
        json!([["s1", 5, 2], ["s2", 2, 1]])
    );

    // A relative range that holds every call reports the same; a range that ended before
    // the calls reports none.
    let recent = report(&journal, &["--since", "1h"]);
    assert_eq!(rows(&recent, "by_session"), rows(&all, "by_session"));
    assert!(recent["since"].is_string());
    let before = report(
        &journal,
        &[
            "--since",
            "2020-01-01T00:00:00Z",
            "--until",
            "2020-01-02T00:00:00Z",
        ],
    );
    assert_eq!(before["calls"], 0);
    assert_eq!(before["flips"], 0);
    assert_eq!(before["by_rule"], json!([]));
    assert_eq!(before["until"], "2020-01-02T00:00:00Z");

    // The text table says the same.
    let out = run(&journal, &["policy", "shadow-report"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(table.contains(": 7 calls, 3 flips, 0 failed"), "{table}");
    assert!(table.contains("candidates: no-deletes"), "{table}");
    for row in [
        ["RULE", "CALLS", "FLIPS"],
        ["no-delete", "3", "3"],
        ["anyone", "4", "0"],
        ["ACTION", "CALLS", "FLIPS"],
        ["delete_item", "3", "3"],
        ["get_item", "3", "0"],
        ["update_item", "1", "0"],
        ["SESSION", "CALLS", "FLIPS"],
        ["s1", "5", "2"],
        ["s2", "2", "1"],
    ] {
        assert!(lines.contains(&row.to_vec()), "{row:?} in\n{table}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_report_counts_a_failed_candidate_apart_and_never_as_a_flip() {
    let rig = ShadowRig::start(
        Recording::new("allow-all", Rule::AllowAll),
        Some(Recording::new("falls-over", Rule::Panics) as _),
        true,
    )
    .await;
    rig.run_script().await;
    assert_eq!(rig.upstream.requests(), 7);
    let all = report(&rig.journal, &[]);
    assert_eq!(all["calls"], 7);
    assert_eq!(all["flips"], 0);
    assert_eq!(all["failed"], 7);
    assert_eq!(rows(&all, "by_rule"), json!([["(failed)", 7, 0]]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_report_of_a_journal_without_a_candidate_reports_nothing() {
    let rig = ShadowRig::start(Recording::new("allow-all", Rule::AllowAll), None, false).await;
    rig.run_script().await;
    let all = report(&rig.journal, &[]);
    assert_eq!(all["calls"], 0);
    assert_eq!(all["candidates"], json!([]));
    let out = run(&rig.journal, &["policy", "shadow-report"]);
    assert!(
        text(&out.stdout).contains(": 0 calls, 0 flips, 0 failed"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn shadow_report_exits_2_for_a_time_it_cannot_read_and_5_without_a_journal() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.db");
    let out = run(&missing, &["policy", "shadow-report"]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert!(!missing.exists(), "the report must not create a journal");
    for bad in [
        ["--since", "yesterday"],
        ["--until", "24y"],
        ["--since", "2026-13-01T00:00:00Z"],
    ] {
        let mut args = vec!["policy", "shadow-report"];
        args.extend_from_slice(&bad);
        let out = run(&missing, &args);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains(bad[0]), "{}", text(&out.stderr));
    }
    let out = run(
        &missing,
        &["policy", "shadow-report", "--since", "1h", "--until", "2h"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_report_reads_a_postgresql_journal_by_url() {
    let db = sallyport_tests::postgres::TestDb::create().await;
    let journal = std::sync::Arc::new(db.journal("shadow-rig").await);
    let rig = ShadowRig::start_on(
        Some(journal),
        Recording::new("allow-all", Rule::AllowAll),
        Some(Recording::new("no-deletes", Rule::NoDeletes) as _),
        false,
    )
    .await;
    rig.run_script().await;
    assert_eq!(rig.upstream.requests(), 7);
    let url = super::cli_postgres::url_of(&db);
    let out = Command::new(env!("CARGO_BIN_EXE_sallyport"))
        .args(["--journal", &url, "policy", "shadow-report", "--json"])
        .env_remove("SALLYPORT_VAULT")
        .env_remove("SALLYPORT_JOURNAL")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let all: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(all["calls"], 7);
    assert_eq!(all["flips"], 3);
    assert_eq!(
        rows(&all, "by_action"),
        json!([
            ["delete_item", 3, 3],
            ["get_item", 3, 0],
            ["update_item", 1, 0]
        ])
    );
    assert_eq!(
        rows(&all, "by_session"),
        json!([["s1", 5, 2], ["s2", 2, 1]])
    );
}
