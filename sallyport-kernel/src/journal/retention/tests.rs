use super::*;
use crate::journal::checkpoint::{InclusionProof, ProveError, ShardHead};
use crate::journal::signing::HeadSigningKey;
use crate::journal::{BreakKind, Intent};

/// `n` correctly linked rows of the default shard, each for an attempt of its own.
fn rows(n: usize) -> Vec<ChainRow> {
    super::super::chain::linked_rows(super::super::checkpoint::DEFAULT_SHARD, n)
}

/// A checkpoint over `rows` (whole, or after `anchor`) signed with `key`.
fn checkpoint(key: &HeadSigningKey, anchor: Option<&Anchor>, rows: &[ChainRow]) -> Checkpoint {
    let hashes: Vec<String> = rows.iter().map(|r| r.hash.clone()).collect();
    let head = ShardHead::over_from("default", anchor, &hashes).expect("head");
    Checkpoint::sign(key, vec![head], "2026-01-02T00:00:00Z")
}

/// Rows 1..=7 sealed at a checkpoint over 7: the range, its anchor, the key, all rows.
fn sealed_seven() -> (SealedRange, Anchor, HeadSigningKey, Vec<ChainRow>) {
    let key = HeadSigningKey::generate().expect("key");
    let all = rows(12);
    let cp = checkpoint(&key, None, &all[..7]);
    let (range, anchor) = SealedRange::build(&Anchor::genesis("default"), &all, &cp).expect("seal");
    (range, anchor, key, all)
}

fn verify_text(text: &str, key: &HeadSigningKey) -> Result<Sealed, SealedRangeError> {
    SealedRange::parse(text)?.verify(&key.verifying_key())
}

#[test]
fn a_sealed_range_round_trips_and_verifies_with_the_public_key_alone() {
    let (range, anchor, key, all) = sealed_seven();
    assert_eq!((range.header.first_seq, range.header.last_seq), (1, 7));
    assert_eq!(range.records.len(), 7);
    assert_eq!(
        range.records[6].event, all[6].event_json,
        "the event byte for byte"
    );
    assert_eq!(
        (anchor.seq, anchor.hash.as_str()),
        (7, all[6].hash.as_str())
    );
    // 7 = 4 + 2 + 1: three subtree roots.
    assert_eq!(anchor.frontier.len(), 3);
    let text = range.to_json_lines();
    assert_eq!(text.lines().count(), 8);
    let sealed = verify_text(&text, &key).expect("verifies");
    assert_eq!((sealed.first_seq, sealed.last_seq), (1, 7));
    assert_eq!(
        sealed.anchor, anchor,
        "the file gives the anchor the journal keeps"
    );
}

#[test]
fn any_change_to_a_sealed_file_fails_with_what_was_changed() {
    let (range, _, key, _) = sealed_seven();
    let text = range.to_json_lines();
    let lines: Vec<&str> = text.lines().collect();
    let join = |ls: &[String]| ls.iter().map(|l| format!("{l}\n")).collect::<String>();
    let owned: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();

    // An edited event (the stored hash kept).
    let mut edited = range.clone();
    edited.records[2].event = edited.records[2].event.replace("bench", "bench2");
    assert!(matches!(
        verify_text(&edited.to_json_lines(), &key),
        Err(SealedRangeError::Record { seq: 3, .. })
    ));
    // A removed line.
    let mut removed = owned.clone();
    removed.remove(4);
    assert!(matches!(
        verify_text(&join(&removed), &key),
        Err(SealedRangeError::Range(_))
    ));
    // Swapped lines.
    let mut swapped = owned.clone();
    swapped.swap(2, 3);
    assert!(matches!(
        verify_text(&join(&swapped), &key),
        Err(SealedRangeError::Record { seq: 2, .. })
    ));
    // A truncated file: cut mid-line, or a whole last line gone.
    let cut = &text[..text.len() - 20];
    assert!(matches!(
        verify_text(cut, &key),
        Err(SealedRangeError::Malformed { .. })
    ));
    assert!(matches!(
        verify_text(&join(&owned[..7]), &key),
        Err(SealedRangeError::Range(_))
    ));
    assert!(matches!(
        verify_text("", &key),
        Err(SealedRangeError::Malformed { line: 1, .. })
    ));
    // Another key.
    let other = HeadSigningKey::generate().expect("key");
    assert!(matches!(
        verify_text(&text, &other),
        Err(SealedRangeError::Checkpoint(ProofError::OtherKey { .. }))
    ));
    // A header whose prev_hash or frontier was changed.
    let mut prev = range.clone();
    prev.header.prev_hash = "f".repeat(64);
    assert!(matches!(
        prev.verify(&key.verifying_key()),
        Err(SealedRangeError::Range(_))
    ));
    let mut frontier = range.clone();
    frontier.header.frontier = vec!["a".repeat(64)];
    assert!(matches!(
        frontier.verify(&key.verifying_key()),
        Err(SealedRangeError::Range(_))
    ));
    // A header whose range was moved or shortened.
    for (first, last) in [(2, 7), (1, 6), (0, 7)] {
        let mut moved = range.clone();
        moved.header.first_seq = first;
        moved.header.last_seq = last;
        assert!(
            matches!(
                moved.verify(&key.verifying_key()),
                Err(SealedRangeError::Range(_))
            ),
            "{first}..{last}"
        );
    }
    // A record's hash and the next link rewritten consistently: the root no longer matches.
    let mut rehashed = range;
    let last = rehashed.records.len() - 1;
    rehashed.records[last].event = rehashed.records[last].event.replace("bench", "forged");
    rehashed.records[last].hash = chain_hash(
        &rehashed.records[last].prev_hash,
        7,
        &rehashed.records[last].event,
    );
    assert_eq!(
        rehashed.verify(&key.verifying_key()),
        Err(SealedRangeError::Root)
    );
}

#[test]
fn a_second_seal_carries_the_frontier_on_and_both_ranges_verify() {
    let (first, anchor, key, all) = sealed_seven();
    let cp = checkpoint(&key, Some(&anchor), &all[7..12]);
    assert_eq!(cp.shard("default").map(|h| h.size), Some(12));
    // The same root as a checkpoint over all twelve records computed from record 1.
    assert_eq!(
        cp.shards[0].root,
        checkpoint(&key, None, &all).shards[0].root
    );
    let (second, anchor2) = SealedRange::build(&anchor, &all[7..], &cp).expect("second seal");
    assert_eq!((second.header.first_seq, second.header.last_seq), (8, 12));
    assert_eq!(second.header.prev_hash, all[6].hash);
    assert_eq!(second.header.frontier, anchor.frontier);
    assert_eq!(
        verify_text(&first.to_json_lines(), &key)
            .expect("first")
            .last_seq,
        7
    );
    let sealed = verify_text(&second.to_json_lines(), &key).expect("second");
    assert_eq!(sealed.anchor, anchor2);
    assert_eq!(anchor2.seq, 12);
    // Nothing more to seal at the same checkpoint.
    assert!(matches!(
        SealedRange::build(&anchor2, &[], &cp),
        Err(SealError::Nothing(_))
    ));
}

#[test]
fn what_remains_after_the_anchor_verifies_signed_and_an_edited_anchor_does_not() {
    let (_, anchor, key, all) = sealed_seven();
    let vk = key.verifying_key();
    let seal = checkpoint(&key, None, &all[..7]);
    let later = checkpoint(&key, Some(&anchor), &all[7..]);
    let older = checkpoint(&key, None, &all[..3]);
    let remaining = all[7..].to_vec();
    let signed = |anchor: Anchor, checkpoints: &[Checkpoint]| {
        let mut check = ChainCheck::with_anchors([anchor], remaining.clone());
        check.check_signed(&[], checkpoints, &vk);
        check.into_report()
    };
    let report = signed(anchor.clone(), &[older, seal.clone(), later.clone()]);
    assert_eq!(report.first_break, None, "{report:?}");
    assert_eq!((report.records, report.head.count), (5, 12));
    assert_eq!(report.last_signed, Some(12));
    // Without the anchor the remaining rows do not start at record 1.
    let brk = ChainCheck::new(remaining.clone())
        .into_report()
        .first_break
        .expect("a break");
    assert_eq!((brk.seq, brk.kind), (8, BreakKind::Deleted));
    // The anchor's hash, frontier or position edited: no signed checkpoint commits to it.
    let mut hash = anchor.clone();
    hash.hash = all[5].hash.clone();
    let mut frontier = anchor.clone();
    frontier.frontier[0] = "0".repeat(64);
    let mut later_seq = anchor.clone();
    later_seq.seq = 6;
    for (what, edited) in [("hash", hash), ("frontier", frontier), ("seq", later_seq)] {
        let report = signed(edited, &[seal.clone(), later.clone()]);
        assert!(report.first_break.is_some(), "an edited {what} passed");
    }
    let mut frontier = anchor.clone();
    frontier.frontier[1] = "0".repeat(64);
    let brk = signed(frontier, &[seal]).first_break.expect("a break");
    assert_eq!((brk.seq, brk.kind), (7, BreakKind::HeadMismatch));
    // No checkpoint at the anchor (only a later one): the anchor is not trusted.
    let brk = signed(anchor, &[later]).first_break.expect("a break");
    assert_eq!((brk.seq, brk.kind), (7, BreakKind::HeadMismatch));
    assert!(
        brk.detail.contains("matches no checkpoint"),
        "{}",
        brk.detail
    );
}

#[test]
fn records_after_the_anchor_prove_and_pruned_ones_do_not() {
    let (_, anchor, key, all) = sealed_seven();
    let vk = key.verifying_key();
    let seal = checkpoint(&key, None, &all[..7]);
    let later = checkpoint(&key, Some(&anchor), &all[7..]);
    let remaining = &all[7..];
    for seq in 8..=12 {
        let proof = InclusionProof::build_from(Some(&anchor), remaining, "default", &later, seq)
            .expect("proof");
        assert_eq!(proof.verify(&vk).expect("verifies").seq, seq);
        // The same proof as the full journal gives.
        let full = InclusionProof::build(&all, "default", &later, seq).expect("full");
        assert_eq!(proof, full);
    }
    assert!(matches!(
        InclusionProof::build_from(Some(&anchor), remaining, "default", &later, 7),
        Err(ProveError::Pruned { seq: 7, upto: 7 })
    ));
    // The sealing checkpoint covers only pruned records.
    assert!(matches!(
        InclusionProof::build_from(Some(&anchor), remaining, "default", &seal, 8),
        Err(ProveError::NotCovered { seq: 8, size: 7 })
    ));
}

#[test]
fn a_prune_is_planned_only_for_an_anchor_a_stored_checkpoint_commits_to() {
    let key = HeadSigningKey::generate().expect("key");
    let all = rows(6);
    let cp = checkpoint(&key, None, &all[..4]);
    let (_, anchor) = SealedRange::build(&Anchor::genesis("default"), &all, &cp).expect("seal");
    let plan = plan_prune(&[], &all, std::slice::from_ref(&cp), &anchor).expect("plan");
    assert_eq!(plan.records, 4);
    let attempts: Vec<String> = all[..4]
        .iter()
        .map(|r| {
            serde_json::from_str::<AuditEvent>(&r.event_json)
                .expect("event")
                .attempt_id
                .to_string()
        })
        .collect();
    let mut sorted = attempts;
    sorted.sort();
    assert_eq!(plan.attempts, sorted);
    // No checkpoint covers it.
    let refused = plan_prune(&[], &all, &[], &anchor).expect_err("refused");
    assert!(
        refused.to_string().contains("no stored checkpoint"),
        "{refused}"
    );
    // A forged frontier, even with a checkpoint signed over it, does not match the records.
    let mut forged = anchor.clone();
    forged.frontier[0] = "1".repeat(64);
    let forged_cp = Checkpoint::sign(
        &key,
        vec![ShardHead {
            shard: "default".to_owned(),
            size: 4,
            root: forged.root().expect("root"),
            head: forged.hash.clone(),
        }],
        "t",
    );
    let refused = plan_prune(&[], &all, &[forged_cp], &forged).expect_err("refused");
    assert!(refused.to_string().contains("do not hash"), "{refused}");
    // A gap in the records.
    let mut gap = all.clone();
    gap.remove(1);
    assert!(plan_prune(&[], &gap, std::slice::from_ref(&cp), &anchor).is_err());
    // Already pruned up to it.
    assert!(plan_prune(std::slice::from_ref(&anchor), &all[4..], &[cp], &anchor).is_err());
}

#[test]
fn a_prune_of_a_shard_broken_after_its_anchor_is_refused_even_when_another_shard_breaks_first() {
    let key = HeadSigningKey::generate().expect("key");
    let mut prev = shard_genesis("eu");
    let mut eu: Vec<ChainRow> = (1..=6)
        .map(|i| {
            let json = serde_json::to_string(&AuditEvent::for_bench(&Intent::for_bench(false)))
                .expect("json");
            let hash = chain_hash(&prev, i as u64, &json);
            let row = ChainRow::new(i as i64, prev.clone(), hash.clone(), json).in_shard("eu");
            prev = hash;
            row
        })
        .collect();
    let hashes: Vec<String> = eu[..4].iter().map(|r| r.hash.clone()).collect();
    let cp = Checkpoint::sign(
        &key,
        vec![ShardHead::over_from("eu", None, &hashes).expect("head")],
        "2026-01-02T00:00:00Z",
    );
    let (_, anchor) = SealedRange::build(&Anchor::genesis("eu"), &eu, &cp).expect("seal");
    // Record 6 of `eu` edited (after the anchor), and the default shard broken too: its break
    // is the report's first.
    eu[5].event_json = eu[5].event_json.replace("bench", "forged");
    let mut default = rows(3);
    default[1].event_json = default[1].event_json.replace("bench", "forged");
    let all: Vec<ChainRow> = default.into_iter().chain(eu).collect();
    let refused = plan_prune(&[], &all, std::slice::from_ref(&cp), &anchor).expect_err("refused");
    assert!(
        refused
            .to_string()
            .contains("shard `eu` is broken at record 6"),
        "{refused}"
    );
}
