//! The journal conformance suite against `SqliteJournal` on real files, and approvals
//! decided by several real processes racing on one file.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

use sallyport_core::approval::{self, ApprovalState, ApprovalStep, Verdict};
use sallyport_core::journal::{ApprovalStore, Journal, Phase, SqliteJournal};
use sallyport_testkit::conformance::{self as suite, sample_approval};

/// A factory of fresh journals, each its own file in `dir`.
fn journals(dir: &tempfile::TempDir) -> impl FnMut() -> std::future::Ready<Arc<dyn ApprovalStore>> {
    let root: PathBuf = dir.path().to_path_buf();
    let mut n = 0;
    move || {
        n += 1;
        let journal = SqliteJournal::open(root.join(format!("journal-{n}.db"))).expect("open");
        std::future::ready(Arc::new(journal) as Arc<dyn ApprovalStore>)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_journal_passes_the_whole_conformance_suite() {
    let dir = tempfile::tempdir().expect("tempdir");
    suite::run_all(journals(&dir)).await;
    let files = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".db"))
        .count();
    assert_eq!(files, 17, "every check ran on a journal of its own");
}

/// The claim check, then the journal reopened from its file: what was written through one
/// handle reads back through another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_written_through_one_handle_read_back_through_another() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    let journal: Arc<dyn ApprovalStore> = Arc::new(SqliteJournal::open(&path).expect("open"));
    suite::claims_take_over_after_the_lease_and_fence_the_old_holder(journal.clone()).await;
    let written = journal
        .approvals(&approval::ApprovalFilter::all())
        .await
        .expect("list");
    drop(journal);
    let reopened = SqliteJournal::open(&path).expect("reopen");
    assert_eq!(
        reopened
            .approvals(&approval::ApprovalFilter::all())
            .await
            .expect("list"),
        written
    );
    assert_eq!(written.len(), 1);
    assert_eq!(written[0].state, ApprovalState::Finished);
    assert!(reopened.verify().await.expect("verify").is_intact());
}

const PROCESSES: usize = 3;
const ROUNDS: usize = 50;
/// Time between rounds; every process decides round `r`'s approval at the same instant.
const ROUND_MS: u64 = 25;

/// Three processes decide the same 50 approvals on one file, round by round at the same
/// instant (two approve, one denies): every round exactly one decision is recorded, the
/// others are told it is already decided, and the chain holds exactly one decision record
/// per approval, matching the stored state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_racing_to_decide_one_approval_record_one_decision_per_round() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    let now = sallyport_core::clock::now_ms();
    let parked: Vec<_> = (0..ROUNDS)
        .map(|i| {
            sample_approval(
                "ses_procs",
                &"5".repeat(64),
                now + i as u64,
                now + 60 * 60 * 1000,
            )
        })
        .collect();
    {
        let journal = SqliteJournal::open(&path).expect("open");
        for a in &parked {
            journal
                .park_approval(a, suite::parked_event(a))
                .await
                .expect("parked");
        }
    }
    let ids: Vec<String> = parked
        .iter()
        .map(|a| a.approval_id.as_str().to_owned())
        .collect();
    let start_at = (sallyport_core::clock::now_ms() + 1_500).to_string();
    let verdicts = ["approve", "deny", "approve"];
    let children: Vec<_> = verdicts[..PROCESSES]
        .iter()
        .map(|verdict| {
            Command::new(env!("CARGO_BIN_EXE_approval-decider"))
                .arg(&path)
                .arg(&start_at)
                .arg(ROUND_MS.to_string())
                .arg(verdict)
                .args(&ids)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn approval-decider")
        })
        .collect();
    let outputs: Vec<Output> =
        sallyport_tests::children::wait_all(children, std::time::Duration::from_secs(600));

    // round → the verdicts of the processes that recorded it, and how many answered.
    let mut recorded: HashMap<usize, Vec<&str>> = HashMap::new();
    let mut answered: HashMap<usize, usize> = HashMap::new();
    for (out, verdict) in outputs.iter().zip(verdicts) {
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            let round: usize = parts[0].parse().expect("round");
            assert_eq!(parts[1], ids[round], "{line}");
            *answered.entry(round).or_default() += 1;
            match parts[2] {
                "recorded" => recorded.entry(round).or_default().push(verdict),
                "already" => {}
                other => panic!("round {round}: {other}"),
            }
        }
    }
    for round in 0..ROUNDS {
        assert_eq!(answered.get(&round), Some(&PROCESSES), "round {round}");
        assert_eq!(
            recorded.get(&round).map(Vec::len),
            Some(1),
            "round {round}: exactly one decision recorded"
        );
    }

    let journal = SqliteJournal::open(&path).expect("reopen");
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, (2 * ROUNDS) as u64);
    let mut decisions: HashMap<String, Vec<ApprovalStep>> = HashMap::new();
    for record in journal.records().await.expect("records") {
        if record.event.phase == Phase::Decided {
            let note = record
                .event
                .approval
                .expect("a decision names its approval");
            decisions
                .entry(note.approval_id.as_str().to_owned())
                .or_default()
                .push(note.step);
        }
    }
    for (round, a) in parked.iter().enumerate() {
        let steps = &decisions[a.approval_id.as_str()];
        assert_eq!(steps.len(), 1, "round {round}: one decision record");
        let (state, step) = match recorded[&round][0] {
            "approve" => (ApprovalState::Approved, ApprovalStep::Approved),
            _ => (ApprovalState::Denied, ApprovalStep::Denied),
        };
        assert_eq!(steps[0], step, "round {round}");
        let stored = journal
            .approval(&a.approval_id)
            .await
            .expect("read")
            .expect("stored");
        assert_eq!(stored.state, state, "round {round}");
        let decision = stored.decision.expect("decided");
        let verdict = if state == ApprovalState::Approved {
            Verdict::Approve
        } else {
            Verdict::Deny
        };
        assert_eq!(decision.verdict, verdict);
    }
}

/// Three handles on one file (three connections, locking as three processes would) race
/// to claim one approved approval, eight tasks each: one claim applies; only its holder
/// writes the intent, and every other handle's begin is fenced and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_racing_to_claim_one_approval_on_one_file_give_it_one_holder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.db");
    let handles: Vec<Arc<dyn ApprovalStore>> = (0..3)
        .map(|_| Arc::new(SqliteJournal::open(&path).expect("open")) as Arc<dyn ApprovalStore>)
        .collect();
    let now = sallyport_core::clock::now_ms();
    let parked = sample_approval("ses_claims", &"4".repeat(64), now, now + 60 * 60 * 1000);
    handles[0]
        .park_approval(&parked, suite::parked_event(&parked))
        .await
        .expect("parked");
    approval::decide(
        handles[1].as_ref(),
        &parked.approval_id,
        Verdict::Approve,
        &approval::Decider::new("alice", "test"),
        None,
    )
    .await
    .expect("approved");
    let start = Arc::new(tokio::sync::Barrier::new(24));
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let journal = handles[i % 3].clone();
            let (id, start) = (parked.approval_id.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                let owner = format!("exe_{i}");
                let claimed = journal
                    .claim_approval(&id, &owner, sallyport_core::clock::now_ms(), 60_000)
                    .await
                    .expect("claim");
                (i, claimed)
            })
        })
        .collect();
    let mut holders = Vec::new();
    for task in tasks {
        match task.await.expect("task") {
            (i, approval::Transition::Applied(a)) => holders.push((i, a)),
            (_, approval::Transition::Unchanged(_)) => {}
            (_, other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(holders.len(), 1, "one claim applies");
    let (winner, claimed) = holders.remove(0);
    let claim = claimed.claim.expect("claim");
    assert_eq!(
        (claim.owner.as_str(), claim.epoch),
        (&*format!("exe_{winner}"), 1)
    );
    for (n, journal) in handles.iter().enumerate() {
        let loser = approval::Claim {
            owner: format!("exe_{}", (winner + 1 + n) % 24),
            ..claim.clone()
        };
        let fenced = journal
            .begin_approved(
                &parked.approval_id,
                &loser,
                &suite::execution_intent(&parked),
            )
            .await;
        assert!(
            matches!(fenced, Err(sallyport_core::journal::JournalError::Fenced)),
            "{fenced:?}"
        );
    }
    assert!(
        handles[2]
            .unresolved()
            .await
            .expect("unresolved")
            .is_empty()
    );
    let intent = suite::execution_intent(&parked);
    handles[winner % 3]
        .begin_approved(&parked.approval_id, &claim, &intent)
        .await
        .expect("the holder writes the intent");
    let open = handles[(winner + 1) % 3]
        .unresolved()
        .await
        .expect("unresolved");
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].attempt_id, intent.attempt_id);
    let stored = handles[(winner + 2) % 3]
        .approval(&parked.approval_id)
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.state, ApprovalState::Executing);
    assert_eq!(stored.claim, Some(claim));
    assert!(handles[0].verify().await.expect("verify").is_intact());
}
