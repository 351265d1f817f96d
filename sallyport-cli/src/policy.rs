//! `sallyport policy …`: what a candidate policy run in shadow would have changed.
//!
//! `shadow-report` reads the journal's audit records (`--journal`, a SQLite file or a
//! PostgreSQL URL, as the `audit` commands do), keeps the calls whose records carry a
//! `shadow` decision within the time range, and counts them and their flips (the candidate's
//! verdict differs from the enforced one) by rule, by action and by session. A call with
//! several records (a parked call and its resumption) counts once, with its last record in
//! the range.

use std::collections::{BTreeMap, BTreeSet};

use clap::{Args, Subcommand};
use sallyport_core::journal::AuditRecord;
use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::args::Cli;
use crate::audit::{open_journal, runtime};
use crate::exit::{Exit, Failure};

/// `sallyport policy …`
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum PolicyCommand {
    /// Summarize what the candidate policy in shadow (`ExecutorBuilder::shadow_policy`) would
    /// have decided: the calls it decided and its flips (its verdict differs from the
    /// enforced policy's) by rule, by action and by session, over a time range of the
    /// journal's audit records. A call the candidate failed to decide (it panicked) is
    /// counted as failed, never as a flip. Nothing in the journal is changed. Exit 0 whatever
    /// the flips; 2 for a time it cannot read, 5 without a journal at the path, 7 for a
    /// damaged one.
    ShadowReport(ShadowReportArgs),
}

/// `sallyport policy shadow-report` options.
#[derive(Debug, Args)]
#[non_exhaustive]
pub struct ShadowReportArgs {
    /// Only records made at or after this time: RFC 3339 (`2026-03-01T00:00:00Z`) or a
    /// span back from now (`90s`, `30m`, `24h`, `7d`, `2w`) [default: the first record].
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only records made before this time, in the same forms [default: now].
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Print the report as JSON: `calls`, `flips`, `failed`, `candidates`, the range, and
    /// rows `{key, calls, flips}` under `by_rule`, `by_action` and `by_session`, most flips
    /// first.
    #[arg(long)]
    pub json: bool,
}

/// One row of a grouping: how many calls, and how many of them flipped.
#[derive(Debug, Default, PartialEq, Eq, Serialize)]
struct Tally {
    calls: u64,
    flips: u64,
}

/// One group's row in the report.
#[derive(Debug, PartialEq, Eq, Serialize)]
struct Row {
    key: String,
    calls: u64,
    flips: u64,
}

/// The report `--json` prints.
#[derive(Debug, Serialize)]
struct Report {
    /// The range's start (RFC 3339), when one was given.
    since: Option<String>,
    /// The range's end (RFC 3339).
    until: String,
    /// The candidates' names the records carry.
    candidates: Vec<String>,
    /// Calls the candidate decided or failed to decide.
    calls: u64,
    /// Calls whose candidate verdict differs from the enforced one.
    flips: u64,
    /// Calls the candidate failed to decide.
    failed: u64,
    /// By the candidate's rules (a call under each rule that decided it; `(none)` for a
    /// decision that named no rule, `(failed)` for no decision).
    by_rule: Vec<Row>,
    /// By action.
    by_action: Vec<Row>,
    /// By session.
    by_session: Vec<Row>,
}

/// The key of a decision that named no rule.
const NO_RULE: &str = "(none)";
/// The key of a candidate that failed to decide.
const FAILED: &str = "(failed)";

pub(crate) fn run(cli: &Cli, cmd: &PolicyCommand) -> Result<(), Failure> {
    match cmd {
        PolicyCommand::ShadowReport(args) => shadow_report(cli, args),
    }
}

fn shadow_report(cli: &Cli, args: &ShadowReportArgs) -> Result<(), Failure> {
    let now = OffsetDateTime::now_utc();
    let since = args
        .since
        .as_deref()
        .map(|t| parse_time(t, now, "--since"))
        .transpose()?;
    let until = match args.until.as_deref() {
        Some(t) => parse_time(t, now, "--until")?,
        None => now,
    };
    if since.is_some_and(|since| since > until) {
        return Err(Failure::new(
            Exit::Usage,
            "--since is after --until: the range is empty",
        ));
    }
    let rt = runtime()?;
    let journal = open_journal(cli, &rt)?;
    let records = rt.block_on(journal.records())?;
    drop(journal);
    let report = summarize(&records, since, until);
    if args.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| Failure::new(Exit::Failure, e.to_string()))?;
        println!("{text}");
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

/// `text` as a time: RFC 3339, or a span back from `now` (`30m`, `24h`, `7d`).
fn parse_time(text: &str, now: OffsetDateTime, option: &str) -> Result<OffsetDateTime, Failure> {
    if let Ok(at) = OffsetDateTime::parse(text, &Rfc3339) {
        return Ok(at);
    }
    let bad = || {
        Failure::new(
            Exit::Usage,
            format!(
                "{option} `{}` is neither an RFC 3339 time (2026-03-01T00:00:00Z) nor a span back from now (90s, 30m, 24h, 7d, 2w)",
                text.escape_debug()
            ),
        )
    };
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let number: i64 = number.parse().map_err(|_| bad())?;
    let unit_seconds: i64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(bad()),
    };
    let seconds = number.checked_mul(unit_seconds).ok_or_else(bad)?;
    now.checked_sub(time::Duration::seconds(seconds))
        .ok_or_else(bad)
}

/// The calls with a shadow decision among `records` made in `[since, until)`, counted.
fn summarize(
    records: &[AuditRecord],
    since: Option<OffsetDateTime>,
    until: OffsetDateTime,
) -> Report {
    // The last record of each attempt within the range that carries a shadow decision.
    let mut last = BTreeMap::new();
    for record in records {
        let event = &record.event;
        if event.shadow.is_none() {
            continue;
        }
        let Ok(at) = OffsetDateTime::parse(&event.at, &Rfc3339) else {
            continue;
        };
        if since.is_some_and(|since| at < since) || at >= until {
            continue;
        }
        last.insert(event.attempt_id.as_str(), event);
    }
    let mut by_rule: BTreeMap<String, Tally> = BTreeMap::new();
    let mut by_action: BTreeMap<String, Tally> = BTreeMap::new();
    let mut by_session: BTreeMap<String, Tally> = BTreeMap::new();
    let mut candidates = BTreeSet::new();
    let (mut calls, mut flips, mut failed) = (0, 0, 0);
    for event in last.values() {
        let Some(shadow) = &event.shadow else {
            continue;
        };
        candidates.insert(shadow.name.clone());
        calls += 1;
        let flip = u64::from(shadow.flip);
        flips += flip;
        let rules: Vec<&str> = if shadow.decision.is_none() {
            failed += 1;
            vec![FAILED]
        } else if shadow.rules.is_empty() {
            vec![NO_RULE]
        } else {
            shadow.rules.iter().map(String::as_str).collect()
        };
        for rule in rules {
            add(&mut by_rule, rule, flip);
        }
        add(&mut by_action, &event.action, flip);
        add(&mut by_session, &event.session_id, flip);
    }
    Report {
        since: since.map(format_time),
        until: format_time(until),
        candidates: candidates.into_iter().collect(),
        calls,
        flips,
        failed,
        by_rule: rows(by_rule),
        by_action: rows(by_action),
        by_session: rows(by_session),
    }
}

fn add(group: &mut BTreeMap<String, Tally>, key: &str, flip: u64) {
    let tally = group.entry(key.to_owned()).or_default();
    tally.calls += 1;
    tally.flips += flip;
}

/// The rows of a group, most flips first, then most calls, then by key.
fn rows(group: BTreeMap<String, Tally>) -> Vec<Row> {
    let mut rows: Vec<Row> = group
        .into_iter()
        .map(|(key, tally)| Row {
            key,
            calls: tally.calls,
            flips: tally.flips,
        })
        .collect();
    rows.sort_by(|a, b| {
        b.flips
            .cmp(&a.flips)
            .then(b.calls.cmp(&a.calls))
            .then_with(|| a.key.cmp(&b.key))
    });
    rows
}

fn format_time(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

/// The report as text tables.
fn render(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let range = match &report.since {
        Some(since) => format!("{since} .. {}", report.until),
        None => format!("start .. {}", report.until),
    };
    let _ = writeln!(
        out,
        "shadow decisions {range}: {} calls, {} flips, {} failed",
        report.calls, report.flips, report.failed
    );
    if !report.candidates.is_empty() {
        let _ = writeln!(out, "candidates: {}", report.candidates.join(", "));
    }
    for (title, rows) in [
        ("RULE", &report.by_rule),
        ("ACTION", &report.by_action),
        ("SESSION", &report.by_session),
    ] {
        if rows.is_empty() {
            continue;
        }
        let width = rows
            .iter()
            .map(|r| r.key.chars().count())
            .chain([title.len()])
            .max()
            .unwrap_or(0);
        let _ = writeln!(out, "\n{title:<width$}  {:>8}  {:>8}", "CALLS", "FLIPS");
        for row in rows {
            let _ = writeln!(
                out,
                "{:<width$}  {:>8}  {:>8}",
                row.key, row.calls, row.flips
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> OffsetDateTime {
        OffsetDateTime::parse(text, &Rfc3339).unwrap()
    }

    #[test]
    fn times_are_rfc3339_or_a_span_back_from_now_and_anything_else_is_a_usage_error() {
        let now = at("2026-03-10T12:00:00Z");
        let parse = |t: &str| parse_time(t, now, "--since").map_err(|f| f.exit);
        assert_eq!(
            parse("2026-03-01T00:00:00Z"),
            Ok(at("2026-03-01T00:00:00Z"))
        );
        assert_eq!(parse("90s"), Ok(at("2026-03-10T11:58:30Z")));
        assert_eq!(parse("30m"), Ok(at("2026-03-10T11:30:00Z")));
        assert_eq!(parse("24h"), Ok(at("2026-03-09T12:00:00Z")));
        assert_eq!(parse("7d"), Ok(at("2026-03-03T12:00:00Z")));
        assert_eq!(parse("2w"), Ok(at("2026-02-24T12:00:00Z")));
        for bad in [
            "",
            "h",
            "24",
            "24y",
            "-3h",
            "yesterday",
            "99999999999999999999h",
        ] {
            assert_eq!(parse(bad), Err(Exit::Usage), "{bad}");
        }
    }

    /// A record of `attempt` at `at` in `session`, with `shadow` when given.
    fn record(
        seq: u64,
        attempt: &sallyport_core::journal::AttemptId,
        at: &str,
        session: &str,
        shadow: Option<serde_json::Value>,
    ) -> AuditRecord {
        let mut event = serde_json::json!({
            "receipt_id": sallyport_core::journal::ReceiptId::generate(),
            "attempt_id": attempt,
            "at": at,
            "session_id": session,
            "action": "delete_item",
            "phase": "finished",
            "status": "completed",
            "dispatches": 1,
        });
        if let Some(shadow) = shadow {
            event["shadow"] = shadow;
        }
        serde_json::from_value(serde_json::json!({
            "seq": seq,
            "prev_hash": "0".repeat(64),
            "hash": "0".repeat(64),
            "event": event,
        }))
        .expect("an audit record")
    }

    #[test]
    fn a_call_counts_once_by_its_last_record_in_range_and_records_without_shadow_are_skipped() {
        use sallyport_core::journal::AttemptId;
        let flip =
            serde_json::json!({"name": "c", "decision": "deny", "rules": ["r"], "flip": true});
        let same = serde_json::json!({"name": "c", "decision": "allow", "flip": false});
        let parked = AttemptId::generate();
        let other = AttemptId::generate();
        let old = AttemptId::generate();
        let plain = AttemptId::generate();
        let records = [
            // Parked and decided again on resumption: the later decision is the call's.
            record(1, &parked, "2026-03-01T10:00:00Z", "s1", Some(flip.clone())),
            record(2, &parked, "2026-03-01T11:00:00Z", "s1", Some(same)),
            record(3, &other, "2026-03-01T12:00:00Z", "s2", Some(flip.clone())),
            // Before the range.
            record(4, &old, "2026-02-01T00:00:00Z", "s1", Some(flip)),
            // No candidate.
            record(5, &plain, "2026-03-01T12:30:00Z", "s1", None),
        ];
        let report = summarize(
            &records,
            Some(at("2026-03-01T00:00:00Z")),
            at("2026-03-02T00:00:00Z"),
        );
        assert_eq!((report.calls, report.flips, report.failed), (2, 1, 0));
        let keys = |rows: &[Row]| -> Vec<(String, u64, u64)> {
            rows.iter()
                .map(|r| (r.key.clone(), r.calls, r.flips))
                .collect()
        };
        assert_eq!(
            keys(&report.by_rule),
            [("r".to_owned(), 1, 1), (NO_RULE.to_owned(), 1, 0)]
        );
        assert_eq!(
            keys(&report.by_session),
            [("s2".to_owned(), 1, 1), ("s1".to_owned(), 1, 0)]
        );
        assert_eq!(report.since.as_deref(), Some("2026-03-01T00:00:00Z"));
        // `until` is exclusive: a record at the range's end is left out.
        let report = summarize(&records, None, at("2026-03-01T12:00:00Z"));
        assert_eq!((report.calls, report.flips), (2, 1), "parked and old");
    }

    #[test]
    fn rows_sort_by_flips_then_calls_then_key() {
        let mut group = BTreeMap::new();
        add(&mut group, "b", 0);
        add(&mut group, "b", 0);
        add(&mut group, "c", 1);
        add(&mut group, "a", 0);
        add(&mut group, "a", 0);
        let keys: Vec<String> = rows(group).into_iter().map(|r| r.key).collect();
        assert_eq!(keys, ["c", "a", "b"]);
    }
}
