//! The crash campaign's short form (issue 39 §5; the full form is `tests/crash-campaign.sh`):
//! `crash-campaign` kills real `approvals-host` processes with SIGKILL at random points of a
//! call, a park, a decision, a resume and a reconcile, on SQLite files and on PostgreSQL
//! servers of its own (restarted with `pg_ctl stop -m immediate` in some scenarios), settles
//! what they left and checks the journal against a counting upstream. CI fails on any
//! duplicate side effect, disagreement, unresolved attempt, unfinished approved call or
//! broken chain. A second run against an upstream whose reads lie shows the checks can fail.

use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Runs the campaign with `args` (and the host binary Cargo built for this test).
fn campaign(args: &[&str]) -> (Output, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_crash-campaign"))
        .args(["--host", env!("CARGO_BIN_EXE_approvals-host")])
        .args(args)
        .output()
        .expect("crash-campaign runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    (output, stdout)
}

/// The number before `label` in the totals line (`process deaths 31 · …`).
fn total(totals: &str, label: &str) -> u64 {
    let at = totals
        .find(&format!("· {label} "))
        .unwrap_or_else(|| panic!("no {label:?} in {totals}"));
    totals[at + label.len() + 4..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {label:?} in {totals}"))
}

#[test]
fn crash_campaign_short_finds_no_duplicate_disagreement_or_unresolved_attempt() {
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        .to_string();
    let started = Instant::now();
    let (output, stdout) = campaign(&[
        "--scenarios",
        "40",
        "--backend",
        "both",
        "--seed",
        &seed,
        "--parallel",
        "2",
    ]);
    let totals = stdout.lines().last().unwrap_or_default().to_owned();
    eprintln!("{totals}");
    assert!(
        output.status.success(),
        "the campaign found a failure (replay the scenario with its seed):\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        totals.starts_with("scenarios 40 (sqlite 20, postgres 20)"),
        "{totals}"
    );
    assert!(
        total(&totals, "process deaths") > 0,
        "nothing was killed: {totals}"
    );
    assert!(
        total(&totals, "requests sent") > 0,
        "nothing was sent: {totals}"
    );
    for zero in [
        "duplicate side effects",
        "disagreements",
        "unresolved after reconcile",
        "chains broken",
    ] {
        assert_eq!(total(&totals, zero), 0, "{totals}");
    }
    assert!(started.elapsed() < Duration::from_secs(120), "{totals}");
}

#[test]
fn crash_campaign_checks_report_an_upstream_whose_reads_lie() {
    // Every read answers 404, also for invoices created: reconciling an attempt whose
    // sender died while the upstream held its request then settles it `rejected`, which
    // the checks must catch.
    let (output, stdout) = campaign(&[
        "--scenarios",
        "40",
        "--backend",
        "sqlite",
        "--seed",
        "5",
        "--parallel",
        "2",
        "--lying-upstream",
    ]);
    let totals = stdout.lines().last().unwrap_or_default().to_owned();
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(total(&totals, "disagreements") > 0, "{totals}");
    assert!(stdout.contains("FAILED scenario"), "{stdout}");
    assert!(stdout.contains("upstream created it"), "{stdout}");
}
