#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]
//! Definition drift benchmarks.
//!
//! - `startup_compare_1000`: the start-up comparison of a 1,000-action catalog against its
//!   baseline lockfile (parse the lockfile text, compare, build the decision map), with 50
//!   actions drifted (25 description changes, 25 effect escalations). Target: ≤ 100 ms.
//! - `stage5_check`: the per-call stage-5 lookup.

use std::time::Instant;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use sallyport_core::action::RetryRule;
use sallyport_core::drift::DefinitionGuard;
use sallyport_core::drift::{Baseline, BaselineGuard};
use sallyport_core::{Action, Catalog, EffectClass};
use schemars::JsonSchema;
use serde::Deserialize;

/// Read one build of a project.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_build", effect = observe)]
#[channel(name = "test")]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct GetBuild {
    #[scope(project)]
    #[schemars(regex(pattern = r"^proj_[a-z0-9]+$"))]
    project_id: String,
    #[schemars(regex(pattern = r"^build_[a-z0-9]+$"))]
    build_id: String,
    #[schemars(range(min = 1, max = 100))]
    limit: u32,
}

const ACTIONS: usize = 1_000;

fn catalog(drifted: bool) -> Catalog {
    let mut builder = Catalog::builder();
    for i in 0..ACTIONS {
        builder = builder.action_with_spec::<GetBuild>(move |mut s| {
            s.name = format!("get_build_{i:04}").into();
            s.description = format!("Read one build of project {i}.").into();
            if drifted && i % 40 == 0 {
                s.description = format!("Read one build of project {i}, with logs.").into();
            }
            if drifted && i % 40 == 20 {
                s.effect = EffectClass::ReversibleChange;
                s.retry = RetryRule::Never;
            }
            s
        });
    }
    builder.build().expect("catalog")
}

fn bench(c: &mut Criterion) {
    let approved = catalog(false);
    let live = catalog(true);
    let lockfile = Baseline::from_catalog(&approved).to_json();

    // One cold measurement, printed for BENCHMARKS.md alongside criterion's figures.
    let start = Instant::now();
    let guard = BaselineGuard::new(
        &live,
        Baseline::from_json(&lockfile, "bench").expect("lockfile"),
    );
    let cold = start.elapsed();
    let drifted = guard
        .decisions()
        .iter()
        .filter(|d| d.drift_detected)
        .count();
    assert_eq!(drifted, 50);
    println!("startup_compare_1000 cold: {cold:?} ({drifted} drifted of {ACTIONS})");

    c.bench_function("startup_compare_1000", |b| {
        b.iter(|| {
            let baseline = Baseline::from_json(&lockfile, "bench").expect("lockfile");
            BaselineGuard::new(&live, baseline)
        });
    });
    c.bench_function("startup_compare_1000_parsed_baseline", |b| {
        let baseline = Baseline::from_json(&lockfile, "bench").expect("lockfile");
        b.iter_batched(
            || baseline.clone(),
            |baseline| BaselineGuard::new(&live, baseline),
            BatchSize::LargeInput,
        );
    });
    let hash = live
        .get("get_build_0001")
        .expect("entry")
        .definition_hash()
        .to_owned();
    c.bench_function("stage5_check", |b| {
        b.iter(|| guard.check("get_build_0001", &hash));
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
