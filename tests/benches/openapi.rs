#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]
//! The OpenAPI guard at the scale of a real document: GitHub's REST API description
//! (`tests/fixtures/openapi/github/`, 1,223 operations, 969 schemas, 13 MB of JSON).
//!
//! - `parse_github`: `OpenApi::parse` of the whole text.
//! - `compile/<operationId>`: one operation's guard, for representative operations (the most
//!   parameters, the largest request bodies, a small one).
//! - `compile_all`: the guard of every operation of the document. Target: ≤ 5 s; any one
//!   operation ≤ 5 ms.
//! - `check/<operationId>`: checking a small valid request. Target: ≤ 1 µs for a small body.
//!
//! Before criterion runs, one cold pass compiles every operation once and prints the total,
//! the slowest operations and how much memory the guards retain
//! (`OPENAPI_BENCH_HOLD=N` holds the first N guards; all of them by default;
//! `OPENAPI_BENCH_SAMPLE=N` times every Nth operation only).

use std::io::Read;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use sallyport_core::drift::DriftMode;
use sallyport_core::drift::Verdict;
use sallyport_openapi::{OpenApi, OperationSelector, OutgoingRequest};
use serde_json::{Value, json};

/// The decompressed text of the committed GitHub description.
fn github_text() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/openapi/github/api.github.com.json.gz"
    );
    let file = std::fs::File::open(path).expect("fixture");
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .expect("gzip");
    text
}

/// Every `operationId` of the document, in document order.
fn operation_ids(text: &str) -> Vec<String> {
    let doc: Value = serde_json::from_str(text).expect("json");
    let mut ids = Vec::new();
    for item in doc["paths"].as_object().expect("paths").values() {
        for method in [
            "get", "put", "post", "delete", "options", "head", "patch", "trace",
        ] {
            if let Some(id) = item.get(method).and_then(|op| op["operationId"].as_str()) {
                ids.push(id.to_owned());
            }
        }
    }
    ids
}

/// Resident memory of this process, in bytes (Linux).
fn rss() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or_else(
        || "n/a".to_owned(),
        |b| format!("{:.1} MiB", b as f64 / 1_048_576.0),
    )
}

/// One cold pass over every operation, printed for BENCHMARKS.md.
fn survey(spec: &OpenApi, ids: &[String]) -> String {
    // `OPENAPI_BENCH_SAMPLE=N` times every Nth operation only (for code where all take minutes).
    let every: usize = std::env::var("OPENAPI_BENCH_SAMPLE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let sampled: Vec<String> = ids.iter().step_by(every).cloned().collect();
    let ids = sampled.as_slice();
    let mut times: Vec<(Duration, &str)> = Vec::with_capacity(ids.len());
    let mut failures = Vec::new();
    let start = Instant::now();
    for id in ids {
        let t = Instant::now();
        let guard = spec.operation(&OperationSelector::id(id.as_str()));
        times.push((t.elapsed(), id));
        if let Err(e) = guard {
            failures.push(format!("{id}: {e}"));
        }
    }
    let total = start.elapsed();
    times.sort();
    let n = times.len();
    let mean = total / u32::try_from(n.max(1)).expect("count");
    println!(
        "compile every operation once: {n} operations in {total:.2?} (mean {mean:.2?}, median {:.2?}, p99 {:.2?}, max {:.2?}); {} failed",
        times[n / 2].0,
        times[n * 99 / 100].0,
        times[n - 1].0,
        failures.len()
    );
    for failure in failures.iter().take(5) {
        println!("  failed: {failure}");
    }
    for (time, id) in times.iter().rev().take(5) {
        println!("  slowest: {id} {time:.2?}");
    }

    let hold: usize = std::env::var("OPENAPI_BENCH_HOLD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ids.len())
        .min(ids.len());
    let before = rss();
    let held: Vec<_> = ids[..hold]
        .iter()
        .filter_map(|id| spec.operation(&OperationSelector::id(id.as_str())).ok())
        .collect();
    let after = rss();
    println!(
        "holding {} guards: resident memory {} -> {} (+{})",
        held.len(),
        mib(before),
        mib(after),
        mib(before.zip(after).map(|(b, a)| a.saturating_sub(b)))
    );
    drop(held);
    times[n - 1].1.to_owned()
}

fn bench(c: &mut Criterion) {
    let text = github_text();
    let ids = operation_ids(&text);
    let base = rss();
    let start = Instant::now();
    let spec = OpenApi::parse(&text).expect("the GitHub description parses");
    println!(
        "parse: {:.2?}, resident memory +{} ({} operations)",
        start.elapsed(),
        mib(base.zip(rss()).map(|(b, a)| a.saturating_sub(b))),
        ids.len()
    );
    let slowest = survey(&spec, &ids);

    let mut group = c.benchmark_group("openapi");
    group.sample_size(10);
    group.bench_function("parse_github", |b| {
        b.iter(|| OpenApi::parse(&text).expect("parses"));
    });
    let mut representative = vec![
        // The most parameters (22, query filters).
        "secret-scanning/list-alerts-for-repo".to_owned(),
        // The largest request bodies.
        "orgs/update".to_owned(),
        "repos/update".to_owned(),
        "repos/update-branch-protection".to_owned(),
        "checks/create".to_owned(),
        // Common small ones.
        "issues/create".to_owned(),
        "markdown/render".to_owned(),
    ];
    if !representative.contains(&slowest) {
        representative.push(slowest);
    }
    for id in &representative {
        let selector = OperationSelector::id(id.as_str());
        group.bench_function(format!("compile/{id}"), |b| {
            b.iter(|| spec.operation(&selector).expect("compiles"));
        });
    }
    group.bench_function("compile_all", |b| {
        b.iter(|| {
            for id in &ids {
                // Errors count as work done; the survey above reports them.
                let _ = spec.operation(&OperationSelector::id(id.as_str()));
            }
        });
    });

    let markdown = spec
        .operation(&OperationSelector::id("markdown/render"))
        .expect("markdown/render");
    let body = json!({"text": "Hello **world**"});
    let request = OutgoingRequest::new("POST", "/markdown").with_body(&body);
    assert_eq!(
        markdown.check(DriftMode::Strict, &request).verdict,
        Verdict::Clean
    );
    group.bench_function("check/markdown/render", |b| {
        b.iter(|| markdown.check(DriftMode::Strict, &request));
    });

    let issues = spec
        .operation(&OperationSelector::id("issues/create"))
        .expect("issues/create");
    let body = json!({"title": "Found a bug", "labels": ["bug"]});
    let request =
        OutgoingRequest::new("POST", "/repos/octocat/hello-world/issues").with_body(&body);
    assert_eq!(
        issues.check(DriftMode::Strict, &request).verdict,
        Verdict::Clean
    );
    group.bench_function("check/issues/create", |b| {
        b.iter(|| issues.check(DriftMode::Strict, &request));
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
