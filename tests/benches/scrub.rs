#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]
//! Scrubber throughput: 50 secrets loaded, outputs of 1 KiB and 64 KiB, clean and with a
//! secret inside. Target: at most 2 µs per KiB (criterion's `thrpt` at least 500 MiB/s).
//!
//! Each case runs twice in the same run: `…` with the current scrubber, `wave1_…` with the
//! wave-1 scrubber (a frozen copy in `baseline/scrub_wave1.rs`), which knew fewer encodings and
//! matched them case-sensitively.
//!
//! Group `answer_4KiB` (issue 40): what stage 12 does to a 4 KiB answer (a JSON result of
//! 18 items, as the filter gets it), clean, in the same run: `vault_only` is the scrubber
//! with 50 secrets over every string; `vault_and_rules` adds the answer guards with the
//! whole Gitleaks rule set (217 rules) and the instruction patterns; `guards_no_rules` adds
//! only the instruction patterns (a kernel without `secret-rules`). Target for
//! `vault_and_rules`: at most 3 µs per KiB (12 µs per answer).
//!
//! Group `answer_parts_4KiB`: where the guards' time goes on the same answer, without the
//! scrubber: the rule set alone over each of the answer's strings (`rules_find_each_string`),
//! and `inspect` without and with the rules.
//!
//! `cargo bench -p sallyport-tests --bench scrub`

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use sallyport_core::inspect::{SecretScanner, inspect};
use sallyport_core::journal::AttemptId;
use sallyport_core::outcome::ActionResult;
use sallyport_core::scrub::Scrubber;
use sallyport_core::{ActionSpec, EffectClass, Status};
use serde_json::{Value, json};

#[path = "baseline/scrub_wave1.rs"]
mod wave1;

/// 50 secret values shaped like real tokens (40 characters of a token alphabet).
fn secrets() -> Vec<String> {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..50)
        .map(|i| {
            let body: String = (0..40)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    alphabet[(state % alphabet.len() as u64) as usize] as char
                })
                .collect();
            format!("tok{i}_{body}")
        })
        .collect()
}

/// A JSON-looking API response of about `bytes` bytes.
fn output(bytes: usize) -> String {
    let mut out = String::from("{\"items\":[");
    let mut i = 0;
    while out.len() < bytes {
        out.push_str(&format!(
            "{{\"id\":\"dep_{i:06}\",\"status\":\"queued\",\"url\":\"https://api.example.com/v1/deployments/dep_{i:06}\",\"note\":\"created by build 8842 at 2026-01-01T00:00:00Z\"}},"
        ));
        i += 1;
    }
    out.truncate(bytes);
    out
}

fn bench(c: &mut Criterion) {
    let secrets = secrets();
    let scrubber = Scrubber::new(secrets.iter().map(String::as_str));
    let baseline = wave1::Scrubber::new(secrets.iter().map(String::as_str));
    let mut group = c.benchmark_group("scrub_50_secrets");
    for size in [1024usize, 64 * 1024] {
        let clean = output(size);
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_function(format!("clean_{}KiB", size / 1024), |b| {
            b.iter(|| scrubber.scrub(black_box(&clean)).len());
        });
        let mut dirty = clean.clone();
        let at = size / 2;
        dirty.replace_range(at..at + secrets[17].len(), &secrets[17]);
        group.bench_function(format!("one_secret_{}KiB", size / 1024), |b| {
            b.iter(|| scrubber.scrub(black_box(&dirty)).len());
        });
        group.bench_function(format!("wave1_clean_{}KiB", size / 1024), |b| {
            b.iter(|| baseline.scrub(black_box(&clean)).len());
        });
        group.bench_function(format!("wave1_one_secret_{}KiB", size / 1024), |b| {
            b.iter(|| baseline.scrub(black_box(&dirty)).len());
        });
    }
    group.finish();
}

/// A JSON result of about 4 KiB when serialized: items an agent would read.
fn answer() -> Value {
    let items: Vec<Value> = (0..18)
        .map(|i| {
            json!({
                "id": format!("dep_{i:06}"),
                "status": "queued",
                "url": format!("https://api.example.com/v1/deployments/dep_{i:06}"),
                "note": format!("created by build 8842 at 2026-01-01T00:00:00Z for order {}", 118_000 + i),
                "commit": "9fceb02d0ae598e95dc970b74767f19372d61af8",
            })
        })
        .collect();
    json!({"items": items, "next_page": "c2VjdGlvbj0yJmN1cnNvcj0xMjg="})
}

fn bench_answer(c: &mut Criterion) {
    let secrets = secrets();
    let scrubber = Scrubber::new(secrets.iter().map(String::as_str));
    let rules: std::sync::Arc<dyn SecretScanner> = sallyport_secrets::SecretRules::gitleaks();
    let spec = ActionSpec::new("list_deployments", EffectClass::Observe);
    let data = answer();
    let bytes = serde_json::to_string(&data).map(|t| t.len()).unwrap_or(0);
    let result = {
        let mut r = ActionResult::new(Status::Completed, "list_deployments", AttemptId::generate());
        r.data = Some(data);
        r
    };
    let mut group = c.benchmark_group("answer_4KiB");
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("vault_only", |b| {
        b.iter_batched_ref(
            || result.clone(),
            |r| {
                if let Some(d) = &mut r.data {
                    scrubber.scrub_json(d);
                }
            },
            BatchSize::SmallInput,
        );
    });
    group.bench_function("vault_and_rules", |b| {
        b.iter_batched_ref(
            || result.clone(),
            |r| {
                if let Some(d) = &mut r.data {
                    scrubber.scrub_json(d);
                }
                inspect(Some(rules.as_ref()), &spec, r);
            },
            BatchSize::SmallInput,
        );
    });
    group.bench_function("guards_no_rules", |b| {
        b.iter_batched_ref(
            || result.clone(),
            |r| {
                if let Some(d) = &mut r.data {
                    scrubber.scrub_json(d);
                }
                inspect(None, &spec, r);
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();

    // Where the guards' time goes, on the same answer: each part alone, without the scrubber.
    let mut strings = Vec::new();
    collect_strings(&answer(), &mut strings);
    let mut parts = c.benchmark_group("answer_parts_4KiB");
    parts.throughput(Throughput::Bytes(bytes as u64));
    parts.bench_function("rules_find_each_string", |b| {
        let rules = sallyport_secrets::SecretRules::gitleaks();
        b.iter(|| {
            strings
                .iter()
                .map(|s| rules.find(black_box(s)).len())
                .sum::<usize>()
        });
    });
    parts.bench_function("inspect_no_scanner", |b| {
        b.iter_batched_ref(
            || result.clone(),
            |r| inspect(None, &spec, r),
            BatchSize::SmallInput,
        );
    });
    parts.bench_function("inspect_with_rules", |b| {
        b.iter_batched_ref(
            || result.clone(),
            |r| inspect(Some(rules.as_ref()), &spec, r),
            BatchSize::SmallInput,
        );
    });
    parts.finish();
}

/// Every string of `value` an inspection reads: object keys and string values.
fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                collect_strings(v, out);
            }
        }
        _ => {}
    }
}

criterion_group!(benches, bench, bench_answer);
criterion_main!(benches);
