#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]
//! Personal data by declaration (issue 40, §2): what `sensitive::apply`, the part of stage 12
//! that masks declared fields and detects personal data in text, costs on a 4 KiB JSON
//! answer (18 items, as the filter gets it), in the same run:
//!
//! - `none`: an action that declares nothing (the target: nothing measurable);
//! - `declared_fields`: the same answer through 18 items' declared `email` (masked) and `card`
//!   (dropped) fields;
//! - `detect_everywhere`: `personal_data = [email, phone, card, iban, national_id]` over every
//!   string of the answer;
//! - `noop`: the same harness reading one field of the answer, the floor beside them (each
//!   case gets a fresh answer from criterion's batched setup, which is not timed).
//!
//! `cargo bench -p sallyport-tests --bench personal`

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use sallyport_core::Status;
use sallyport_core::journal::AttemptId;
use sallyport_core::outcome::ActionResult;
use sallyport_core::sensitive::{Handling, PersonalKind, SensitiveField, apply};
use serde_json::{Value, json};

/// About 4 KiB of JSON: 18 customers, each with an email, a card and a note.
fn answer() -> Value {
    let items: Vec<Value> = (0..18)
        .map(|i| {
            json!({
                "id": format!("cus_{i:06}"),
                "email": format!("customer{i}@example.com"),
                "card": "4111 1111 1111 1111",
                "status": "active",
                "note": format!("order ORD-2024-{i:06} shipped; call +1 (415) 555-01{i:02} about it, tracking 1Z999AA1012345678{}", i % 10),
            })
        })
        .collect();
    json!({ "customers": items })
}

fn result() -> ActionResult {
    let mut result = ActionResult::new(Status::Completed, "list_customers", AttemptId::generate());
    result.data = Some(answer());
    result
}

fn bench(c: &mut Criterion) {
    let bytes = serde_json::to_string(&answer()).map_or(0, |s| s.len());
    let mut group = c.benchmark_group("personal_4KiB");
    group.throughput(Throughput::Bytes(bytes as u64));
    let declared = [
        SensitiveField::new("/customers/*/email", &[PersonalKind::Email], Handling::Mask),
        SensitiveField::new("/customers/*/card", &[PersonalKind::Card], Handling::Drop),
    ];
    let everywhere = [
        PersonalKind::Email,
        PersonalKind::Phone,
        PersonalKind::Card,
        PersonalKind::Iban,
        PersonalKind::NationalId,
    ];
    group.bench_function("noop", |b| {
        b.iter_batched_ref(result, |r| black_box(r).status, BatchSize::SmallInput);
    });
    group.bench_function("none", |b| {
        b.iter_batched_ref(
            result,
            |r| apply(&[], &[], black_box(r)),
            BatchSize::SmallInput,
        );
    });
    group.bench_function("declared_fields", |b| {
        b.iter_batched_ref(
            result,
            |r| apply(&declared, &[], black_box(r)),
            BatchSize::SmallInput,
        );
    });
    group.bench_function("detect_everywhere", |b| {
        b.iter_batched_ref(
            result,
            |r| apply(&[], &everywhere, black_box(r)),
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = bench
}
criterion_main!(benches);
