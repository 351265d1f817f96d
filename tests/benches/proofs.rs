#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]
//! Inclusion proofs for one record of a journal of 1,000,000 records (issue 39).
//!
//! The chain is built in memory (1,000,000 `for_bench` audit events, chained with
//! `chain_hash` as a journal stores them), a checkpoint is signed over it, and the proof of
//! record 500,000 is made once. Measured:
//!
//! - `proof_verify_1m`: `InclusionProof::verify` (the record's hash recomputed, the Merkle
//!   path decoded and followed from it to the shard root, the shard heads to the checkpoint root, the Ed25519 signature).
//! - `proof_parse_and_verify_1m`: the same from the proof's JSON text, as `audit
//!   check-proof` does after reading the file.
//! - `baseline_chain_hash_one_record`: SHA-256 of one record as the chain hashes it.
//!
//! Printed once, not by criterion: the proof's size exactly as `audit prove` writes it
//! (compact JSON and a newline), the time to check the whole chain (`ChainCheck`, what `audit verify` runs) and to
//! compute the checkpoint's Merkle root over it, and to build the proof.

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use sallyport_core::journal::chain::{ChainCheck, ChainRow};
use sallyport_core::journal::checkpoint::{
    Checkpoint, DEFAULT_SHARD, InclusionProof, ShardHead, decode_path,
};
use sallyport_core::journal::{AuditEvent, GENESIS_HASH, HeadSigningKey, Intent, chain_hash};

const RECORDS: usize = 1_000_000;
const PROVEN: u64 = 500_000;

fn chain(n: usize) -> Vec<ChainRow> {
    let intent = Intent::for_bench(false);
    let mut prev = GENESIS_HASH.to_owned();
    (1..=n)
        .map(|i| {
            let mut event = AuditEvent::for_bench(&intent);
            event.at = "2026-12-06T06:00:00Z".to_owned();
            let json = serde_json::to_string(&event).expect("json");
            let hash = chain_hash(&prev, i as u64, &json);
            let row = ChainRow::new(i as i64, prev.clone(), hash.clone(), json);
            prev = hash;
            row
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let key = HeadSigningKey::generate().expect("key");
    let public = key.verifying_key();
    let started = Instant::now();
    let rows = chain(RECORDS);
    eprintln!("built {RECORDS} chained records in {:?}", started.elapsed());

    let hashes: Vec<String> = rows.iter().map(|r| r.hash.clone()).collect();
    let started = Instant::now();
    let head = ShardHead::over(DEFAULT_SHARD, &hashes).expect("hashes");
    eprintln!(
        "checkpoint Merkle root over {RECORDS} records: {:?}",
        started.elapsed()
    );
    let checkpoint = Checkpoint::sign(&key, vec![head], "2026-12-06T06:00:00Z");

    let started = Instant::now();
    let check = ChainCheck::new(rows.clone());
    let whole = started.elapsed();
    assert!(check.is_intact());
    eprintln!(
        "baseline: ChainCheck of the whole chain ({RECORDS} records, what `audit verify` runs): {whole:?}"
    );

    let started = Instant::now();
    let proof = InclusionProof::build(&rows, DEFAULT_SHARD, &checkpoint, PROVEN).expect("proof");
    eprintln!("proof of record {PROVEN} built in {:?}", started.elapsed());
    // Exactly what `sallyport audit prove` writes: compact JSON and a newline.
    let written = proof.to_written();
    let steps = decode_path(&proof.path).expect("path").len();
    eprintln!(
        "proof size: {} bytes as `audit prove` writes it (the 2 KB target: {}); {steps} path steps ({} bytes of base64url), record event {} bytes, checkpoint {} bytes",
        written.len(),
        if written.len() <= 2048 {
            "met"
        } else {
            "NOT met"
        },
        proof.path.len(),
        proof.record.event.len(),
        serde_json::to_string(&proof.checkpoint)
            .expect("json")
            .len()
    );
    drop(rows);
    drop(hashes);

    proof.verify(&public).expect("verifies");
    c.bench_function("proof_verify_1m", |b| {
        b.iter(|| {
            black_box(&proof)
                .verify(black_box(&public))
                .expect("verifies")
        });
    });
    c.bench_function("proof_parse_and_verify_1m", |b| {
        b.iter(|| {
            let parsed: InclusionProof = serde_json::from_str(black_box(&written)).expect("parse");
            parsed.verify(black_box(&public)).expect("verifies")
        });
    });
    let r = &proof.record;
    c.bench_function("baseline_chain_hash_one_record", |b| {
        b.iter(|| {
            chain_hash(
                black_box(&r.prev_hash),
                black_box(r.seq),
                black_box(&r.event),
            )
        });
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
